"""The side split re-run on ``dump.py``'s inputs, as it is and with the spine: ``offline.py VARIANT SEED ...``.
VARIANT: ``midline`` (the spine's x as the body's midline in a view that cuts the body), ``centre``
(as the scanner's centre), ``decide`` (every find parted at the spine's x)."""

import pickle
import sys

import numpy as np
from spine import spine_x

from segpipe.refine.sides import split_sides


def shares(sides: np.ndarray, ref: np.ndarray, voxel_ml: float) -> list[float]:
    """Per reference lung of 50 mL or more, the share of it found on its side."""
    return [float((sides[ref == v] == v).mean()) for v in (1, 2) if (ref == v).sum() * voxel_ml >= 50]


variant = sys.argv[1]
before, after = [], []
for seed in sys.argv[2:]:
    for r in pickle.load(open(f"runs/spine/dump_{seed}.pkl", "rb")):
        if "found" not in r or r["found"].shape != r["rc"].shape:
            continue
        kw, voxel_ml = dict(r["kw"]), float(np.prod(r["spacing"])) / 1000
        base = split_sides(r["found"], **kw)
        sx = spine_x(r["hu"], r["spacing"], r["body"]) if kw.get("view_side") else None
        new = base
        if sx is not None and variant in ("midline", "centre"):
            kw["midline_x" if variant == "midline" else "centre_x"] = sx
            new = split_sides(r["found"], **kw)
        elif sx is not None and variant == "decide":
            xs = np.arange(r["found"].shape[2])[None, None, :]
            new = np.where(r["found"], np.where(xs < sx, 1, 2), 0).astype(np.uint8)
        a, b = shares(base, r["rc"], voxel_ml), shares(new, r["rc"], voxel_ml)
        before += a
        after += b
        for x, y in zip(a, b):
            if abs(x - y) > 0.05:
                print(seed, r["case"], r["i"], r["desc"], round(x, 2), "->", round(y, 2))
for name, v in (("as it is", np.array(before)), (variant, np.array(after))):
    print(f"{name}: {len(v)} lungs, found on their side {v.mean():.4f}, lost {(v < 0.1).sum()}, majority wrong {(v < 0.5).sum()}")
