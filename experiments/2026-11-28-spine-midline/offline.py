"""The side split re-run on ``dump.py``'s inputs, as it is and with the spine: ``offline.py VARIANT SEED ...``.
VARIANT: ``midline`` (the spine's x as the body's midline in a view that cuts the body), ``centre``
(as the scanner's centre), ``decide`` (every find parted at the spine's x), ``flip`` (a find that the
split gives one side takes the other where nine tenths of it lie on that side of the spine), ``agree``
(the part of a find beyond the spine, from the side that holds less of it, goes to that side where
the network's vote puts three quarters of it there)."""

import pickle
import sys

import numpy as np
from scipy import ndimage
from spine import spine_x

from segpipe.refine.sides import split_sides


def shares(sides: np.ndarray, ref: np.ndarray, voxel_ml: float) -> list[float]:
    """Per reference lung of 50 mL or more, the share of it found on its side."""
    return [float((sides[ref == v] == v).mean()) for v in (1, 2) if (ref == v).sum() * voxel_ml >= 50]


variant = sys.argv[1]
before, after = [], []
for seed in [a for a in sys.argv[2:] if "." not in a] if variant != "agree" else sys.argv[2:-1]:
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
        elif sx is not None and variant == "flip":
            new = base.copy()
            labels, n = ndimage.label(r["found"])
            xs = np.nonzero(r["found"])[2]
            for k in range(1, n + 1):
                piece = labels == k
                named = np.unique(base[piece])
                named = named[named > 0]
                left = float((np.nonzero(piece)[2] > sx).mean())
                spine_side = 2 if left > 0.9 else 1 if left < 0.1 else 0
                if named.size == 1 and spine_side and spine_side != named[0]:
                    new[piece & (base > 0)] = spine_side
        elif sx is not None and variant == "agree":
            new = base.copy()
            labels, n = ndimage.label(r["found"])
            x_index = np.arange(r["found"].shape[2])[None, None, :]
            vote = kw["left_vote"]
            for k in range(1, n + 1):
                piece = labels == k
                on_left = piece & (x_index > sx)
                minority = 2 if on_left.sum() < 0.5 * piece.sum() else 1
                beyond = on_left if minority == 2 else piece & ~on_left
                if beyond.sum() * voxel_ml < float(sys.argv[-1] if variant == "agree" else 0) or not beyond.any():
                    continue
                vote_left = float(vote[beyond].mean())
                if (vote_left >= 0.75) if minority == 2 else (vote_left <= 0.25):
                    new[beyond & (base > 0)] = minority
        a, b = shares(base, r["rc"], voxel_ml), shares(new, r["rc"], voxel_ml)
        before += a
        after += b
        for x, y in zip(a, b):
            if abs(x - y) > 0.05:
                print(seed, r["case"], r["i"], r["desc"], round(x, 2), "->", round(y, 2))
for name, v in (("as it is", np.array(before)), (variant, np.array(after))):
    print(f"{name}: {len(v)} lungs, found on their side {v.mean():.4f}, lost {(v < 0.1).sum()}, majority wrong {(v < 0.5).sum()}")
