"""A find that the vote parts into two lungs but that lies nine tenths on one side of the spine is one lung of that
side (with ``spine90.patch`` applied): ``spine90.py SHIFT_MM SEED ...`` on the dumped development crops."""

import sys

import numpy as np

sys.path.insert(0, "experiments/2026-11-28-spine-columns")
from offline import coarse, crops, dices  # noqa: E402

from segpipe.refine import sides  # noqa: E402

shift = float(sys.argv[1])
scores: dict[str, list[float]] = {"landed": [], "spine90": []}
for seed, r, kw, voxel_ml, spine in crops(sys.argv[2:], shift):
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
