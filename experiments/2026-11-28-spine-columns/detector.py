"""Spine detector variants on ``dump.py``'s random crops: ``detector.py SEED ...``. Per variant, how many crops that
cut the body get a spine, how many of those lie more than 25 mm from the case's spine (the median physical x of the
200 HU detector over all crops of the case), and the coarse-grid Dice per lung of 50 mL or more after the side
split (near the spine), ``part_at_spine`` and ``join_cut_pieces``."""

import pickle
import sys

import numpy as np
from offline import coarse, dices
from scipy import ndimage

from segpipe.refine.spine import SPINE_CM2, SPINE_EXTENT_CM, SPINE_SLICES


def detect(hu, spacing, body, bone_hu=200.0, edge=False, along_mm=None):
    """``segpipe.refine.spine.spine_x`` with options: ``edge`` drops bone regions that touch the view's side edges;
    ``along_mm``: the quarter of the slices must have their region within this distance (x) of the median."""
    pixel_cm2 = spacing[0] * spacing[1] / 100.0
    xs = []
    for z in range(hu.shape[0]):
        rows = np.flatnonzero(body[z].any(axis=1))
        if rows.size == 0:
            continue
        labels, n = ndimage.label((hu[z] > bone_hu) & body[z], structure=np.ones((3, 3), bool))
        posterior = (rows[0] + rows[-1]) / 2.0
        best = None
        for k, box in enumerate(ndimage.find_objects(labels), 1):
            piece = labels[box] == k
            area = float(piece.sum()) * pixel_cm2
            wide = (box[1].stop - box[1].start) * spacing[0] / 10.0
            tall = (box[0].stop - box[0].start) * spacing[1] / 10.0
            if not (SPINE_CM2[0] <= area <= SPINE_CM2[1] and wide <= SPINE_EXTENT_CM[0] and tall <= SPINE_EXTENT_CM[1]):
                continue
            if edge and (box[1].start == 0 or box[1].stop == hu.shape[2]):
                continue
            cy, cx = ndimage.center_of_mass(piece)
            if cy + box[0].start >= posterior and (best is None or area > best[0]):
                best = (area, cx + box[1].start)
        if best is not None:
            xs.append(best[1])
    needed = max(2, SPINE_SLICES * hu.shape[0])
    if len(xs) < needed:
        return None
    x = float(np.median(xs))
    if along_mm is not None and np.count_nonzero(np.abs(np.array(xs) - x) * spacing[0] <= along_mm) < needed:
        return None
    return x


VARIANTS = {
    "200 (landed)": detect,
    "200, else 150": lambda h, s, b: detect(h, s, b) if detect(h, s, b) is not None else detect(h, s, b, 150.0),
    "200, else 150; no edge": lambda h, s, b: (detect(h, s, b, edge=True) if detect(h, s, b, edge=True) is not None
                                               else detect(h, s, b, 150.0, edge=True)),
    "200, else 150; both along 20 mm": lambda h, s, b: (
        detect(h, s, b, along_mm=20) if detect(h, s, b, along_mm=20) is not None else detect(h, s, b, 150.0, along_mm=20)),
    "200, else 150 along 20 mm": lambda h, s, b: (
        detect(h, s, b) if detect(h, s, b) is not None else detect(h, s, b, 150.0, along_mm=20)),
    "200, else 150 along 30 mm": lambda h, s, b: (
        detect(h, s, b) if detect(h, s, b) is not None else detect(h, s, b, 150.0, along_mm=30)),
}
WANT = [a for a in sys.argv[1:] if not a.isdigit()]
records = [r for seed in sys.argv[1:] if seed.isdigit() for r in pickle.load(open(f"runs/spine/dump_{seed}.pkl", "rb"))
           if "found" in r and r["found"].shape == r["rc"].shape and r["kw"].get("view_side")]
truth = {}
for r in records:
    x = detect(r["hu"], r["spacing"], r["body"])
    if x is not None:
        truth.setdefault(r["case"], []).append(r["x0"] + x * r["sx"])
truth = {k: float(np.median(v)) for k, v in truth.items()}
for name, fn in VARIANTS.items():
    if WANT and name not in WANT:
        continue
    found = wrong = 0
    scores = []
    for r in records:
        kw, voxel_ml = dict(r["kw"]), float(np.prod(r["spacing"])) / 1000
        x = fn(r["hu"], r["spacing"], r["body"])
        if x is not None:
            found += 1
            wrong += abs(r["x0"] + x * r["sx"] - truth[r["case"]]) > 25
        scores += dices(coarse(r, kw, x, True), r["rc"], voxel_ml)
    v = np.array(scores)
    print(f"{name}: spine in {found} of {len(records)} crops, {wrong} wrong; {len(v)} lungs, Dice {v.mean():.4f}, "
          f"under 0.9 {(v < 0.9).sum()}, under 0.5 {(v < 0.5).sum()}")
