"""The spine as the side of a lone find in a view that cuts the body, before the scanner's centre, on
``../2026-11-28-spine-midline/dump.py``'s random crops, with the patient moved along x (the scanner's centre moved
the other way): ``offline.py SHIFT_MM SEED ...``. Variants: the landed cues (off), the spine's side first for a lone
find the vote leaves unsure (``cue``), and also the spine instead of the centre for a find the vote parts but that
lies wholly on one side (``cue+beyond``). Coarse-grid Dice per lung of 50 mL or more after the whole side step."""

import sys

import numpy as np

sys.path.insert(0, "experiments/2026-11-28-spine-columns")
from offline import coarse, crops, dices  # noqa: E402

from segpipe.refine import sides  # noqa: E402

shift = float(sys.argv[1])
variants = {"off": (False, False), "cue": (True, False), "cue+beyond": (True, True)}
scores: dict[str, list[float]] = {k: [] for k in variants}
records = []
for seed, r, kw, voxel_ml, spine in crops(sys.argv[2:], shift):
    row = {}
    for name, (cue, beyond) in variants.items():
        sides.SPINE_CUE, sides.SPINE_BEYOND = cue, beyond
        row[name] = dices(coarse(r, kw, spine, True), r["rc"], voxel_ml)
        scores[name] += row[name]
    for i, (a, b) in enumerate(zip(row["off"], row["cue+beyond"])):
        if abs(a - b) > 0.02 or abs(a - row["cue"][i]) > 0.02:
            print(seed, r["case"], r["i"], r["desc"], round(a, 3), "->", round(row["cue"][i], 3), "/", round(b, 3))
for name, v in scores.items():
    v = np.array(v)
    print(f"shift {shift:+.0f} mm, {name}: {len(v)} lungs, Dice {v.mean():.4f}, under 0.9 {(v < 0.9).sum()}, under 0.5 {(v < 0.5).sum()}")
