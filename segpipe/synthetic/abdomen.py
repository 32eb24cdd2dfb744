"""Abdominal organs of a phantom (canonical mm frame), painted before the lungs."""

from __future__ import annotations

import numpy as np

from segpipe.synthetic.anatomy import Body, rotation
from segpipe.synthetic.fields import Remap
from segpipe.synthetic.shapes import Capsule, Ellipsoid, HalfSpace, Intersect, smooth_path, tube

FLEXURE_X, FLEXURE_Y, FLEXURE_BELOW_DOME = (55.0, 85.0), (-50.0, -10.0), (15.0, 50.0)  # flexure_variety's ranges (mm)


def build_abdomen(b: Body) -> None:
    """Liver (with vessels), gallbladder, IVC, spleen, stomach (with an air-fluid level), kidneys,
    pancreas, psoas, bladder, and the colon and small bowel with gas: all below the diaphragm."""
    L, S, rng, c = b.L, b.S, b.rng, b.contrast
    below = lambda off=-4.5: b.above_diaphragm(off * S, below=True)  # noqa: E731
    cav = b.cavity
    yv = lambda z: float(b.spine_y(z))  # noqa: E731
    # colon with gas and stool
    knots = np.array([(-75, 5, L["iliac"] - 25), (-88, 12, L["domeR"] - 115), (-72, -25, L["domeR"] - 95),
                      (-20, -62, L["domeR"] - 125), (40, -58, L["domeR"] - 115), (84, -12, L["domeL"] - 62),
                      (92, 22, L["iliac"] + 10), (45, -25, L["pubis"] + 60), (0, 58, L["pubis"] + 25)]) * \
        np.array([S, S, 1.0])
    if b.spec.flexure_variety and rng.random() < b.spec.flexure_variety:
        # (drawn only when asked for: every other phantom stays as it was) the splenic flexure
        # high under the left dome, often in front of the stomach, the transverse colon rising to it
        u = rng.uniform
        knots[5] = (u(*FLEXURE_X) * S, u(*FLEXURE_Y) * S, L["domeL"] - u(*FLEXURE_BELOW_DOME))
        knots[4, 2] = L["domeL"] - u(45, 100)
    knots[:, :2] += rng.normal(0, 6, (len(knots), 2))
    path = smooth_path(knots, 40)
    rad = np.interp(np.arange(40), [0, 8, 39], [28, 22, 18]) * S
    lo, hi = path.min(0) - 30, path.max(0) + 30
    stool = Remap(b.field(lo, hi, 5, 1.0), -900.0, float(rng.uniform(0, 40)), 4.0, 2.0)
    gas_runs = rng.random(40) < 0.5
    gas_runs = np.convolve(gas_runs, np.ones(5), "same") > 2
    for cap in tube(path, rad):
        b.add("colon_wall", Intersect(cap, cav, below()), 35.0, "bowel")
    for k in range(39):
        inner = Capsule(path[k], path[k + 1], rad[k] - 3, rad[k + 1] - 3)
        gas = bool(gas_runs[k])
        b.add("colon_gas" if gas else "stool", Intersect(inner, cav, below(-7)),
              -1000.0 if gas else stool, "bowel_gas" if gas else "bowel")
    b.gas_points = [path[k] for k in range(39) if gas_runs[k]]
    b.colon = (path, rad, gas_runs, stool)
    # small-bowel gas pockets
    for _ in range(int(rng.integers(2, 14))):
        cp = np.array([rng.uniform(-80, 80) * S, rng.uniform(-70, 10) * S,
                       rng.uniform(L["pubis"] + 50 * S, L["domeR"] - 110 * S)])
        r = rng.uniform(6, 16) * S * np.array([1, rng.uniform(0.6, 1), rng.uniform(0.6, 1.4)])
        b.add("bowel_wall", Intersect(Ellipsoid(cp, r + 2), cav, below(-8)), 35.0, "bowel")
        b.add("bowel_gas", Intersect(Ellipsoid(cp, r), cav, below(-8)), -1000.0, "bowel_gas")
        b.gas_points.append(cp)
    # liver with vessels, gallbladder
    liv_c = np.array([-40 * S, 0.0, L["domeR"] - 62 * S])
    liv_r = np.array([122, 100, 95]) * S * rng.normal(1, 0.05, 3)
    liver = Intersect(Ellipsoid(liv_c, liv_r), cav, below(),
                      HalfSpace((15 * S, 0, 0), (0.75, 0.66, 0)))
    hu_liver = float(rng.uniform(105, 125) if c else rng.uniform(50, 65))
    b.add("liver", liver, b.tex(5, hu_liver, fine=True), "organ")
    hv = float(rng.uniform(150, 200) if c else hu_liver - rng.uniform(12, 25))
    for k in range(5):
        ang = -0.6 + 0.35 * k
        p0 = liv_c + np.array([20, 25, 40]) * S
        p1 = p0 + np.array([np.sin(ang) * -90, -np.cos(ang) * 60, rng.uniform(-60, 0)]) * S
        b.add("liver_vessel", Intersect(Capsule(p0, p1, 6 * S, 1.5 * S), liver), hv, "blood")
    if rng.random() < 0.7:
        gb = Ellipsoid((-52 * S, -58 * S, L["domeR"] - 105 * S), np.array([18, 15, 32]) * S, rotation((0.3, -0.3, 1)))
        b.add("gallbladder", Intersect(gb, below(-8)), float(rng.uniform(0, 20)), "fluid")
    # IVC
    ivc = smooth_path([(-18 * S, 40 * S, L["iliac"]), (-22 * S, 35 * S, L["domeR"] - 60 * S),
                       (-20 * S, 15 * S, L["heart"] - 15 * S)], 10)
    for cap in tube(ivc, 11 * S):
        b.add("ivc", Intersect(cap, cav), b.hu_blood * (0.6 if c else 1.0), "blood")
    # spleen, stomach, kidneys, pancreas
    sp_c = np.array([84 * S, 48 * S, L["domeL"] - 55 * S])
    spleen = Ellipsoid(sp_c, np.array([26, 55, 48]) * S * rng.normal(1, 0.1), rotation((0.55, 0.84, 0.1)))
    b.add("spleen", Intersect(spleen, cav, below()), float(rng.uniform(110, 130) if c else rng.uniform(40, 52)),
          "organ")
    st_c = np.array([50 * S, -18 * S, L["domeL"] - 50 * S])
    st_r = np.array([52, 42, 58]) * S * rng.normal(1, 0.08, 3)
    st_rot = rotation((0.4, -0.2, -1))
    b.add("stomach_wall", Intersect(Ellipsoid(st_c, st_r, st_rot), cav, below()), 40.0 + 40 * c, "bowel")
    food = Remap(b.field(st_c - st_r, st_c + st_r, 8, 1.0), float(rng.uniform(-80, 0)),
                 float(rng.uniform(10, 40)), 2.0)
    inner = Intersect(Ellipsoid(st_c, st_r - 5, st_rot), cav, below(-9))
    b.add("stomach", inner, food, "bowel")
    y_air = st_c[1] - st_r[1] * rng.uniform(0.1, 1.0)
    b.add("stomach_gas", Intersect(inner, HalfSpace((0, y_air, 0), (0, 1, 0))), -1000.0, "bowel_gas")
    b.gas_points.append(np.array([st_c[0], (st_c[1] - st_r[1] + 5 + y_air) / 2, st_c[2]]))
    z_k = L["T12"] - 20 * S
    for sx, dz in ((-1, -15 * S), (1, 0.0)):
        kc = np.array([sx * 70 * S, yv(z_k) - 5 * S, z_k + dz])
        rot = rotation((sx * 0.25, -0.2, 1))
        kr = np.array([52, 30, 25]) * S
        b.add("perirenal_fat", Intersect(Ellipsoid(kc, kr + 10, rot), cav), b.hu_fat, "fat")
        b.add("kidney", Ellipsoid(kc, kr, rot), float(rng.uniform(150, 200) if c else rng.uniform(25, 40)),
              "organ")
        if c:
            b.add("kidney_medulla", Ellipsoid(kc, kr * 0.65, rot), float(rng.uniform(70, 110)), "organ")
        b.add("renal_sinus", Ellipsoid(kc - np.array([sx * 12, 0, 0]), kr * [0.6, 0.35, 0.3], rot),
              -60.0, "fat")
    panc = smooth_path([(-20 * S, 5 * S, L["T12"] - 30 * S), (40 * S, 22 * S, L["T12"] - 15 * S),
                        (75 * S, 35 * S, L["T12"] + 5 * S)], 6)
    for cap in tube(panc, np.linspace(13, 8, 6) * S):
        b.add("pancreas", Intersect(cap, cav, below(-8)), 40.0 + 60 * c, "organ")
    for sx in (-1, 1):
        ps = smooth_path([(sx * 28 * S, yv(L["T12"]), L["T12"]), (sx * 50 * S, yv(L["iliac"]) - 10 * S, L["iliac"] - 40 * S),
                          (sx * 70 * S, 10 * S, L["pubis"] + 10 * S)], 8)
        for cap in tube(ps, np.linspace(8, 24, 8) * S):
            b.add("psoas", cap, b.hu_muscle, "muscle")
    b.add("bladder", Intersect(Ellipsoid((0, -40 * S, L["pubis"] + 40 * S), np.array([45, 35, 35]) * S), cav),
          float(rng.uniform(0, 15)), "fluid")
