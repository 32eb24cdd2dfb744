"""A find that the vote parts into two lungs but that lies nine tenths on one side of the spine is one lung of that
side (with ``spine90.patch`` applied): ``spine90.py SHIFT_MM SEED ...`` on the dumped development crops."""

import pickle
import sys

import numpy as np

sys.path.insert(0, "experiments/2026-11-28-spine-columns")
from offline import coarse, dices  # noqa: E402

from segpipe.refine import sides  # noqa: E402
from segpipe.refine.spine import spine_x  # noqa: E402

shift = float(sys.argv[1])
scores: dict[str, list[float]] = {"landed": [], "spine90": []}
for seed in sys.argv[2:]:
    for r in pickle.load(open(f"runs/spine/dump_{seed}.pkl", "rb")):
        if "found" not in r or r["found"].shape != r["rc"].shape:
            continue
        kw, voxel_ml = dict(r["kw"]), float(np.prod(r["spacing"])) / 1000
        if kw.get("centre_x") is not None:
            kw["centre_x"] -= shift / r["sx"]
        spine = spine_x(r["hu"], r["spacing"], r["body"]) if kw.get("view_side") else None
        row = {}
        for name in scores:
            sides.SPINE90 = name == "spine90"
            row[name] = dices(coarse(r, kw, spine, True), r["rc"], voxel_ml)
            scores[name] += row[name]
        for a, b in zip(row["landed"], row["spine90"]):
            if abs(a - b) > 0.01:
                print(" ", seed, r["case"], r["i"], r["desc"], round(a, 3), "->", round(b, 3))
for name, v in scores.items():
    v = np.array(v)
    print(f"shift {shift:+.0f} mm, {name}: {len(v)} lungs, Dice {v.mean():.4f}, under 0.9 {(v < 0.9).sum()}, "
          f"under 0.5 {(v < 0.5).sum()}")
