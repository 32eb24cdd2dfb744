"""The detailed abdomen of a phantom (``PhantomSpec.abdomen_detail``): what real abdominal scans
show and the plain phantom lacks. Painted after :func:`~segpipe.synthetic.abdomen.build_abdomen`
and before the lungs, from the body's own ``detail`` generator.

- colon with haustral folds (rings of wall across the lumen every few cm) and gas bubbles in the
  stool;
- small-bowel loops: coiled tubes with fluid, oral contrast, or fluid under a gas level;
- small gas pockets in the stomach's food.

Nothing here is lung: the bowel gas is the air that a lung segmenter must not take for lung.
"""

from __future__ import annotations

import numpy as np

from segpipe.synthetic.anatomy import Body, rotation
from segpipe.synthetic.fields import Remap, SmoothField
from segpipe.synthetic.shapes import Ellipsoid, HalfSpace, Intersect, smooth_path, tube


def build_gut_detail(b: Body) -> None:
    """Haustra and stool bubbles on the colon, small-bowel loops (needs ``b.detail``)."""
    rng = b.detail
    if rng is None:
        return
    _haustra(b, rng)
    _small_bowel(b, rng)


def _haustra(b: Body, rng: np.random.Generator) -> None:
    """Folds across the colon's lumen (a ring of wall with the lumen open in its middle) every
    25-45 mm, and 0-5 gas bubbles of 2-7 mm in each stool-filled segment."""
    path, rad, gas_runs, stool = b.colon
    below = b.above_diaphragm(-7 * b.S, below=True)
    step_mm = float(rng.uniform(25, 45))
    run = 0.0
    for k in range(len(path) - 1):
        seg = path[k + 1] - path[k]
        length = float(np.linalg.norm(seg))
        run += length
        lumen = float(min(rad[k], rad[k + 1])) - 3.0
        if lumen <= 4:
            continue
        content = -1000.0 if gas_runs[k] else stool
        tissue = "bowel_gas" if gas_runs[k] else "bowel"
        if run >= step_mm:
            run = 0.0
            mid = path[k] + seg * rng.uniform(0.3, 0.7)
            rot = rotation(seg)
            thick = float(rng.uniform(1.5, 3.0))
            b.add("haustral_fold", Intersect(Ellipsoid(mid, (thick, lumen, lumen), rot), b.cavity, below), 35.0, "bowel")
            hole = lumen * rng.uniform(0.35, 0.65)
            b.add("colon_gas" if gas_runs[k] else "stool", Intersect(Ellipsoid(mid, (thick + 1, hole, hole), rot), b.cavity, below),
                  content, tissue)
        if not gas_runs[k]:
            for _ in range(int(rng.integers(0, 6))):
                c = path[k] + seg * rng.random() + rng.normal(0, lumen / 3, 3)
                r = rng.uniform(2, 7) * np.array([1, rng.uniform(0.6, 1), rng.uniform(0.6, 1)])
                b.add("stool_gas", Intersect(Ellipsoid(c, r), b.cavity, below), -1000.0, "bowel_gas")


def _small_bowel(b: Body, rng: np.random.Generator) -> None:
    """2-7 coiled small-bowel loops in the mid and lower abdomen: 9-15 mm lumen, a 2-3 mm wall,
    filled with fluid (0-30 HU), positive oral contrast (150-350 HU) or fluid under gas."""
    L, S = b.L, b.S
    below = b.above_diaphragm(-8 * S, below=True)
    z_lo, z_hi = L["pubis"] + 40 * S, L["domeR"] - 110 * S
    if z_hi <= z_lo:
        return
    for _ in range(int(rng.integers(2, 8))):
        start = np.array([rng.uniform(-70, 70) * S, rng.uniform(-60, 5) * S, rng.uniform(z_lo, z_hi)])
        knots = [start]
        for _ in range(int(rng.integers(4, 9))):
            knots.append(knots[-1] + rng.normal(0, 28, 3) * S * np.array([1.0, 0.6, 0.8]))
        knots_a = np.array(knots)
        knots_a[:, 0] = np.clip(knots_a[:, 0], -85 * S, 85 * S)
        knots_a[:, 1] = np.clip(knots_a[:, 1], -75 * S, 15 * S)
        knots_a[:, 2] = np.clip(knots_a[:, 2], z_lo, z_hi)
        pts = smooth_path(knots_a, 6 * len(knots_a))
        r = float(rng.uniform(9, 15) * S)
        wall = float(rng.uniform(2, 3))
        kind = rng.choice(["fluid", "contrast", "gas_level"], p=[0.5, 0.25, 0.25])
        fill = float(rng.uniform(150, 350)) if kind == "contrast" else float(rng.uniform(0, 30))
        wall_hu = 40.0 + 50.0 * b.contrast
        lo, hi = pts.min(0) - r, pts.max(0) + r
        for cap in tube(pts, r + wall):
            b.add("small_bowel_wall", Intersect(cap, b.cavity, below), wall_hu, "bowel")
        content = Remap(SmoothField(rng, lo, hi, 6.0, 1.0), fill - 10, fill + 10, 2.0)
        for cap in tube(pts, r):
            b.add("small_bowel", Intersect(cap, b.cavity, below), content, "bowel")
        if kind == "gas_level":  # supine: gas rises to the anterior (smaller y) side of the lumen
            level = HalfSpace((0, float(pts[:, 1].mean()) - r * rng.uniform(0.1, 0.7), 0), (0, 1, 0))
            for cap in tube(pts, r):
                b.add("small_bowel_gas", Intersect(cap, b.cavity, below, level), -1000.0, "bowel_gas")
            b.gas_points.append(pts[len(pts) // 2])
