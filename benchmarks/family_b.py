"""Phantom family B: plain, independently designed CT phantoms for testing lung segmentation.

Written without reference to ``segpipe.synthetic``, so that rules and models tuned there can be checked on
anatomy they were not tuned on. A case is a CT volume (HU, int16) and uint8 labels on the same grid: 1 the
patient's right lung (negative physical x in LPS), 2 the left, 0 the rest. Trachea, main bronchi, pleural
fluid and the CT table are 0; consolidated, emphysematous and nodular lung and its small airways and vessels
stay lung. Anatomy lives in a body frame (X to the patient's left, Y posterior, T superior, T = 0 at the top
of the right diaphragm dome): superellipse cross-sections with half-axes interpolated along T, lungs as
hemithorax footprints above two quadratic domes, ellipsoid organs, rimmed bones, and capsule tubes (airways,
great vessels, random bifurcating lung vessel trees, colon, bowel) drawn with partial volume; built in
canonical LPS, then reoriented with ``sitk.DICOMOrient``.

Usage: ``python benchmarks/family_b.py --out DIR --n N [--size small|default|fine] [--seed 0]``, or
``from family_b import make_case, CASES`` with ``benchmarks/`` on ``sys.path``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import SimpleITK as sitk
from scipy import ndimage

CASES = ("chest", "chest_abdomen", "abdomen_bases", "apex", "cardiac", "fov_cut", "fov_circle", "no_lungs")
ORIENTATIONS = ("LPS", "RAS", "LAS", "LPI", "RPS", "LAI", "RPI", "PLS")
# size -> (in-plane spacing mm, in-plane voxels, slice spacing mm, most slices)
SIZES = {"small": ((2.4, 3.2), (48, 160), (4.0, 5.0), 128), "default": ((1.2, 1.6), (96, 256), (1.5, 5.0), 256), "fine": ((0.6, 1.0), (256, 512), (1.5, 5.0), 512)}
# region codes (what a voxel holds); LABEL_OF maps them to the label
AIR, LUNG_R, LUNG_L, CONS_R, CONS_L, BODY, MED, ABD, ORGAN, BONE, WALL, COLON, BOWEL, TABLE, AIRWAY, FLUID, VESSEL = range(17)
LABEL_OF = np.zeros(17, np.uint8)
LABEL_OF[[LUNG_R, CONS_R]], LABEL_OF[[LUNG_L, CONS_L]] = 1, 2


def _lut(*codes: int) -> np.ndarray:
    """Boolean lookup over region codes: where a tube may be drawn."""
    return np.isin(np.arange(17), codes)


IN_LUNG, IN_CONS, IN_ABD, IN_GUT = _lut(LUNG_R, LUNG_L), _lut(CONS_R, CONS_L), _lut(ABD), _lut(ABD, WALL)
IN_SOFT = _lut(LUNG_R, LUNG_L, CONS_R, CONS_L, BODY, MED, ABD, ORGAN, FLUID, WALL, VESSEL)


def _se(X, Y, a, ba, bp, p, pp):
    """Superellipse value (<= 1 inside), anterior half-axis ``ba``, posterior ``bp`` with its own exponent ``pp``."""
    return np.abs(X / a) ** p + np.where(Y < 0, np.abs(Y / ba) ** p, np.abs(Y / bp) ** pp)


def _ell(X, Y, cx, cy, ax, ay, ang=0.0):
    """Normalised squared radius of an (optionally rotated) ellipse."""
    if ang:
        c, s = np.cos(ang), np.sin(ang)
        X, Y, cx, cy = (X - cx) * c + (Y - cy) * s, (Y - cy) * c - (X - cx) * s, 0.0, 0.0
    return ((X - cx) / ax) ** 2 + ((Y - cy) / ay) ** 2


def _put(h, r, m, val, code):
    """Paint mask ``m`` of one slice with ``val`` (scalar or slice-shaped) and region ``code``."""
    h[m], r[m] = val[m] if np.ndim(val) else val, code


def _bone(h, r, q, v, rim=0.65):
    """A bone cross-section: cortical shell where q <= 1, marrow where q <= rim."""
    _put(h, r, q <= 1, v["cortex"], BONE)
    _put(h, r, q <= rim, v["marrow"], BONE)


def _tube(g, hu, reg, p0, p1, rad, val, allow, code=None):
    """Mix a capsule (segment p0-p1, radius ``rad`` mm) into voxels whose region is allowed, with partial volume."""
    p0, p1 = np.asarray(p0, float), np.asarray(p1, float)
    i0 = np.maximum(np.floor((np.minimum(p0, p1) - rad - g.o) / g.s).astype(int), 0)
    i1 = np.minimum(np.ceil((np.maximum(p0, p1) + rad - g.o) / g.s).astype(int) + 1, g.n[::-1])
    if np.any(i1 <= i0):
        return
    c = [g.o[a] + g.s[a] * np.arange(i0[a], i1[a]) - p0[a] for a in range(3)]
    px, py, pz = c[0][None, None, :], c[1][None, :, None], c[2][:, None, None]
    d = p1 - p0
    t = np.clip((px * d[0] + py * d[1] + pz * d[2]) / max(float(d @ d), 1e-9), 0, 1)
    dist = np.sqrt((px - t * d[0]) ** 2 + (py - t * d[1]) ** 2 + (pz - t * d[2]) ** 2)
    f = np.clip((rad - dist) / g.s[0] + 0.5, 0, 1) * min(1.0, 2 * rad / g.s[0])  # thin tubes fade
    box = (slice(i0[2], i1[2]), slice(i0[1], i1[1]), slice(i0[0], i1[0]))
    h, rg = hu[box], reg[box]
    ok = (f > 0) & allow[rg]
    h[ok] = h[ok] * (1 - f[ok]) + val * f[ok]
    rg[ok & (f >= 0.5)] = rg[ok & (f >= 0.5)] if code is None else code


def _path(g, hu, reg, pts, rad, val, allow, code=None, wall=0.0, wall_hu=40.0, wall_code=MED):
    """A polyline tube; with ``wall`` > 0 a wall of that thickness is drawn first."""
    for rr, vv, cc in ((rad + wall, wall_hu, wall_code), (rad, val, code))[0 if wall > 0 else 1:]:
        for p, q in zip(pts[:-1], pts[1:]):
            _tube(g, hu, reg, p, q, rr, vv, allow, cc)


def _tree(rng, p, d, length, rad, depth, out):
    """Append (start, end, radius) segments of a random bifurcating tree; radius and length shrink per generation."""
    q = p + d * length
    out.append((p, q, rad))
    if depth > 0 and rad > 0.6:
        for _ in range(2):
            w = d + rng.normal(0, 0.5, 3)
            _tree(rng, q, w / np.linalg.norm(w), length * rng.uniform(0.65, 0.85), rad * rng.uniform(0.72, 0.84), depth - 1, out)


class _Anatomy:
    """Every random choice of one case's anatomy, in body-frame mm (see the module docstring)."""

    def __init__(self, rng: np.random.Generator):
        u = rng.uniform
        self.rng, self.contrast = rng, bool(rng.random() < 0.4)
        H = self.H = u(185, 230)  # lung apex above the right dome
        A, ba, bp = u(140, 165), u(95, 115), u(90, 110)
        fc, fa, ml, ma, mb = u(6, 18), u(12, 35), u(13, 18), u(14, 22), u(34, 46)
        self.pe, self.pc = u(2.2, 2.7), u(1.9, 2.3)  # body and cavity superellipse exponents
        self._tn = [-470, -300, -160, -20, H - 130, H - 40, H + 15, H + 45, H + 500]
        self._prof = [[A * u(0.95, 1.1)] * 2 + [A * u(0.88, 1.0), A, A, 0.93 * A, 0.85 * A, 62, 60],  # half-width
                      [ba * u(0.95, 1.15)] * 3 + [ba, ba, ba, 0.8 * ba, 48, 48],  # anterior half-depth
                      [bp] * 6 + [0.9 * bp, 62, 62],  # posterior half-depth
                      [fa] * 3 + [fc] * 4 + [6, 6],  # subcutaneous fat
                      [12, 10, 10, ml, ml, ml, ml, 0, 0], [10, 10, 10, ma, ma, ma, ma, 0, 0],  # lateral, anterior muscle
                      [mb + 10, mb + 5, mb + 5, mb, mb, mb, mb, 30, 30], [24, 24, 22, 18, 16, 14, 11, 10, 10]]  # back, vertebra
        self.top, self.depth = {1: 0.0, 2: -u(10, 25)}, {1: u(42, 58), 2: u(42, 58)}
        self.dthick, self.apex_len, self.w_m = u(3.5, 6), u(60, 90), u(12, 20)
        lows = {s: self.top[s] - 1.21 * self.depth[s] + self.dthick for s in (1, 2)}
        self.low = min(lows.values())  # no lung below this height, ever
        self.car = H - u(75, 95)
        self.arch = self.car + u(15, 25)
        self.r_tr, self.r_es, self.r_ao = u(8, 10), u(6, 8), u(12, 15)
        ac0, bca0, bcp0 = self.sec(0.0)[4:7]
        self.dome_c = {1: (-0.45 * ac0, -0.1 * bca0), 2: (0.45 * ac0, -0.1 * bca0)}
        self.dome_ax = (0.55 * ac0, 0.9 * max(bca0, bcp0))
        self.hc, self.ha, self.hb, self.hx, self.hy, self.hang = u(50, 60), u(55, 65), u(40, 48), u(15, 30), -0.3 * ba, -u(0.5, 0.8)
        self.ht = self.top[2] - 0.35 * self.depth[2] + 0.85 * self.hc
        self.rib_gap = (H + 115 + u(-10, 10)) / 11
        self.rib_z0 = H + 5 - self.rib_gap * np.arange(12)
        self.rib_end = np.array([2.6] * 7 + [2.35] * 3 + [1.7, 1.5])
        self.rib_drop, self.rib_w, self.rib_h, self.sc_d, self.disc0 = u(50, 75), u(7, 9), u(9, 12), u(10, 14), u(0, 30)
        self.pel, tl = -u(215, 235), self.top[2]  # top of the iliac wings; left dome
        _, _, _, _, ac, bca, bcp, yvb, rvb = self.sec(-60.0)
        self.liver = (-0.3 * ac, 0.0, -60 + u(-10, 10), 0.85 * ac, 1.3 * max(bca, bcp), u(85, 100))
        self.gall = (-0.3 * ac, -0.55 * bca, -95.0, 14, 14, 30)
        self.spleen = (0.62 * ac, 0.35 * bcp, tl - 55, 0.22 * ac, 0.4 * bcp, u(45, 60))
        self.stomach, self.gas = (0.3 * ac, -0.3 * bca, tl - 50, 0.28 * ac, 0.38 * bca, u(45, 60)), u(0.1, 0.6)
        self.kidneys = [(s * (rvb + 45), yvb + 5, kz + (s > 0) * u(10, 20), 28, 22, 55) for kz in [-u(120, 140)] for s in (-1, 1)]
        self.bladder = (0.0, -0.35 * bca, self.pel - 140, 50, 40, 35)
        self.mat_top, self.mat_t, self.gap, self.plate_t = bp - u(3, 10), u(30, 60), u(0, 4), u(4, 8)
        self.curv, self.tab_w, self.mat_w = u(0, 40) / 200**2, u(200, 240), u(180, 230)
        self.plate2 = u(15, 30) if rng.random() < 0.5 else 0.0
        self.table_bottom = self.mat_top + self.mat_t + self.gap + self.plate_t + (self.plate2 + 3 if self.plate2 else 0)
        c = self.contrast
        self.v = {"fat": u(-115, -85), "mus": u(35, 55), "med": u(-80, -50), "abd": u(-105, -80), "fluid": u(5, 20),
                  "blood": u(150, 250) if c else u(35, 50), "myo": u(90, 130) if c else u(35, 50),
                  "liver": u(95, 125) if c else u(50, 65), "spleen": u(110, 140) if c else u(40, 50),
                  "kid": u(140, 200) if c else u(25, 35), "kid_med": u(60, 100) if c else u(20, 30),
                  "thyroid": u(130, 170) if c else u(80, 110), "vessel": u(100, 200) if c else u(30, 50),
                  "cortex": u(550, 850), "marrow": u(150, 280), "lung": u(-875, -845), "dep": u(15, 35),
                  "cons": u(30, 60), "table": u(100, 300), "mattress": u(-900, -700)}
        self._tex = [(u(6, 12), *(2 * np.pi / u(25, 60, 3)), *u(0, 2 * np.pi, 3)) for _ in range(2)]
        self.mottle = [(rng.normal(size=3) / 1.7 * 2 * np.pi / u(12, 30), u(0, 2 * np.pi)) for _ in range(3)]
        # pathology (drawn for every case, used where there is lung)
        self.cons = int(rng.integers(1, 3)) if rng.random() < 0.2 else 0
        self.cons_top = {s: lows[s] + (H - lows[s]) / 3 for s in (1, 2)}
        self.eff = [s for s in (1, 2) if rng.random() < 0.2]
        self.eff_d, self.eff_top = u(20, 50), self.low + u(60, 150)
        self.emph = int(rng.integers(8, 30)) if rng.random() < 0.2 else 0
        self.nod = int(rng.integers(1, 6)) if rng.random() < 0.35 else 0

    def sec(self, T):
        """Cross-section at height T: (a, ba, bp, fat, ac, bca, bcp, yvb, rvb) = body half-axes, fat, cavity
        half-axes (lateral, anterior, posterior: beside the spine, out to the rib angles), vertebral body centre Y and radius."""
        a, ba, bp, fat, ml, ma, mb, rvb = (float(np.interp(T, self._tn, p)) for p in self._prof)
        yvb = bp - fat - mb - 0.4 * rvb  # the back muscles are thickest at the midline
        return a, ba, bp, fat, a - fat - ml, ba - fat - ma, yvb + 1.3 * rvb, yvb, rvb

    def ytr(self, T):
        """Y of the trachea's centre: in front of the oesophagus, in front of the spine."""
        return self.sec(T)[7] - self.sec(T)[8] - 2 * self.r_es - self.r_tr - 4

    def beside(self, T, r, sx):
        """A point beside the vertebral body (sx: sine of the angle from straight anterior) for a tube of radius r."""
        yvb, dd = self.sec(T)[7], self.sec(T)[8] + r + 2
        return (sx * dd, yvb - dd * np.sqrt(1 - sx * sx), T)

    def dome(self, X, Y):
        """Height of the diaphragm's upper surface: a quadratic dome on each side (flat beyond its rim), blended just
        left of the midline (so the right lung never reaches below its own dome's rim)."""
        d, w = [self.top[s] - self.depth[s] * np.minimum(_ell(X, Y, *self.dome_c[s], *self.dome_ax), 1.21) for s in (1, 2)], np.clip(X / 20, 0, 1)
        return (1 - w) * d[0] + w * d[1]

    def cpt(self, fx, fy, T):
        """(fraction of the cavity's half-width, of its half-depth, height) -> body-frame mm."""
        ac, bca, bcp = self.sec(T)[4:7]
        return (fx * ac, fy * (bca if fy < 0 else bcp), T)

    def tex(self, X, Y, T):
        """Low-frequency lung texture (separable sinusoids, a few HU)."""
        return sum(a * np.sin(kx * X + p) * np.sin(ky * Y + q) * np.sin(kz * T + w) for a, kx, ky, kz, p, q, w in self._tex)

    def table(self, X, Y):
        """2D template of the CT table (mattress, curved plate, optional second plate) and its mask."""
        yp = self.mat_top + self.mat_t + self.gap - self.curv * X**2
        hu = np.where((Y >= self.mat_top) & (Y < self.mat_top + self.mat_t) & (np.abs(X) < self.mat_w), self.v["mattress"], np.nan)
        plate = (Y >= yp) & (Y < yp + self.plate_t) & (np.abs(X) < self.tab_w)
        if self.plate2:
            plate |= (Y >= yp + self.plate_t + self.plate2) & (Y < yp + self.plate_t + self.plate2 + 3) & (np.abs(X) < self.tab_w)
        hu = np.where(plate, self.v["table"], hu).astype(np.float32)
        return hu, ~np.isnan(hu)


def _slices(an: _Anatomy, g, hu, reg):
    """Paint the cross-sectional anatomy slice by slice: table, body wall, cavities, lungs, heart, organs, bones."""
    X, Y, v, pe, H = g.X, g.Y, an.v, an.pe, an.H
    R, PHI = np.hypot(X, Y), np.arctan2(np.abs(X), Y)  # PHI: 0 straight posterior, pi straight anterior
    tab_hu, tab = an.table(X, Y)
    for k in range(g.n[0]):
        T, h, r = g.o[2] + g.s[2] * k, hu[k], reg[k]
        _put(h, r, tab, tab_hu, TABLE)
        a, ba, bp, fat, ac, bca, bcp, yvb, rvb = an.sec(T)
        _put(h, r, _se(X, Y, a, ba, bp, pe, pe + 1) <= 1, v["fat"], BODY)
        _put(h, r, _se(X, Y, a - fat, ba - fat, bp - fat, pe, pe + 1) <= 1, v["mus"], BODY)
        if T < H + 15:
            S = np.maximum(_se(X, Y, ac, bca, bcp, an.pc, an.pc + 0.4), 1e-9)
            dout = R * (1 - S ** (-1 / an.pc))  # ~ mm outside the cavity wall
            back = ((np.abs(X) < 1.25 * rvb + 4) & (Y > yvb)) | (_ell(np.abs(X), Y, rvb + 12, yvb + rvb + 20, 22, 18) <= 1)
            cav = (S <= 1) & ~back  # the spine and paraspinal muscles bulge into the cavity
            Td = an.dome(X, Y) if T < 5 else -1e9
            thor, abd = cav & (T >= Td + an.dthick), cav & (T < Td)
            for m, val, code in ((cav, v["mus"], BODY), (thor, v["med"] if T < H - 10 else v["mus"], MED), (abd, v["abd"], ABD)):
                _put(h, r, m, val, code)  # the diaphragm is what thorax and abdomen leave
            if an.low <= T < H:
                _lungs(an, X, Y, T, h, r, thor, dout, ac, bca, bcp, yvb, rvb)
            ez = ((T - an.ht) / an.hc) ** 2
            if ez < 1.2:  # heart in its pericardial fat, chambers inside
                q, hm = _ell(X, Y, an.hx, an.hy, an.ha, an.hb, an.hang) + ez, cav & (T >= Td)
                for lim, key in ((1.2, "med"), (1.0, "myo"), (0.45, "blood")):
                    _put(h, r, hm & (q <= lim), v[key], MED)
            if T < 30:
                _organs(an, X, Y, T, h, r, abd, ac, yvb, rvb)
            if -170 < T < H + 25:
                _ribs(an, T, h, r, dout, PHI, ac)
            if -40 < T < H + 5:  # sternum
                _bone(h, r, _ell(X, Y, 0, -(bca + 7), 17, 6.5), v)
            if H - 140 < T < H + 10:  # scapulae: triangular plates in the back muscle
                wide = 0.2 + 0.6 * (T - H + 140) / 150
                _put(h, r, (dout > an.sc_d) & (dout < an.sc_d + 4) & (PHI > 0.55) & (PHI < 0.55 + wide), 0.7 * v["cortex"], BONE)
            if T < an.pel:
                _pelvis(an, X, Y, T, h, r, cav, dout, PHI, ac, bcp, v)
        _spine(an, X, Y, T, h, r, yvb, rvb, v)
        tz = 1 - ((T - H - 45) / 25) ** 2
        if tz > 0:  # thyroid lobes beside the trachea
            for sg in (-1, 1):
                _put(h, r, _ell(X, Y, sg * (an.r_tr + 11), an.ytr(T) - 2, 9 * tz**0.5 + 0.1, 14 * tz**0.5 + 0.1) <= 1, v["thyroid"], ORGAN)


def _lungs(an, X, Y, T, h, r, thor, dout, ac, bca, bcp, yvb, rvb):
    """Both lungs on one slice: thorax inside the pleura, outside mediastinum and spine, within each
    hemithorax footprint (shrinking to the apex); effusion and consolidation where drawn."""
    s = 1.0 if T <= an.H - an.apex_len else max(0.0, 1 - ((T - an.H + an.apex_len) / an.apex_len) ** 2) ** 0.5
    base = thor & (dout < -1.5) & (_ell(X, Y, 0, yvb, rvb + 7, rvb + 7) > 1)
    tex = an.tex(X, Y, T)
    lung_hu = an.v["lung"] + an.v["dep"] * Y / 100 + tex  # denser where dependent (posterior)
    for side, sg in ((LUNG_R, -1), (LUNG_L, 1)):
        fp = _ell(X, Y, sg * (0.5 - 0.12 * (1 - s)) * ac, 0.25 * bcp * (1 - s), 0.62 * ac * s + 1e-3, 1.15 * max(bca, bcp) * s + 1e-3)
        m = base & (fp <= 1) & (sg * X > an.w_m * np.clip((Y + 60) / 80, 0.3, 1.0))  # mediastinum thin in front
        if side in an.eff:  # dependent pleural fluid: a level that deepens downwards
            fl = m & (Y > bcp - an.eff_d * np.clip((an.eff_top - T) / (an.eff_top - an.low), 0, 1) ** 0.5)
            _put(h, r, fl, an.v["fluid"], FLUID)
            m &= ~fl
        _put(h, r, m, lung_hu, side)
        if side == an.cons:  # lower lobe: below an oblique "fissure", higher at the back
            _put(h, r, m & (T < an.cons_top[side] + 0.8 * Y), an.v["cons"] + 0.4 * tex, side + 2)


def _organs(an, X, Y, T, h, r, abd, ac, yvb, rvb):
    """Liver, gallbladder, spleen, bladder, kidneys, stomach (gas-fluid level) and psoas on one slice."""
    v, st = an.v, an.stomach
    layers = [(an.liver, 1, v["liver"], X < 0.3 * ac), (an.gall, 1, v["fluid"], True), (an.spleen, 1, v["spleen"], True), (an.bladder, 1, v["fluid"], True)]
    for o in an.kidneys:  # cortex, medulla, sinus fat
        layers += [(o, 1, v["kid"], True), (o, 0.4, v["kid_med"], True), (o, 0.3, v["abd"], np.abs(X) < abs(o[0]))]
    layers += [(st, 1, v["mus"], True), (st, 0.8, v["fluid"] + 15, True), (st, 0.8, -1000.0, Y < st[1] + st[4] * (an.gas - 0.7))]  # gas on top
    for o, lim, val, extra in layers:  # ellipsoids o = (cx, cy, cz, ax, ay, az)
        if abs(T - o[2]) < o[5]:
            _put(h, r, abd & (_ell(X, Y, o[0], o[1], o[3], o[4]) + ((T - o[2]) / o[5]) ** 2 <= lim) & extra, val, ORGAN)
    if an.pel - 100 < T < -120:
        rp = 8 + 22 * min(1.0, (-120 - T) / 150)
        for sg in (-1, 1):
            _put(h, r, abd & (_ell(X, Y, sg * (rvb + 0.8 * rp + 2), yvb - 2, rp, 0.8 * rp) <= 1), v["mus"], ORGAN)


def _ribs(an, T, h, r, dout, PHI, ac):
    """Twelve rib pairs in the chest wall, sloping down from the spine to the front, with a cortical rim."""
    iy, ix = np.nonzero((dout > 1.5) & (dout < 1.5 + an.rib_w) & (PHI > 0.25))
    ph, dr = PHI[iy, ix], dout[iy, ix]
    u = np.clip((ph - 0.25) / 2.35, 0, 1) ** 1.2
    for z0, end in zip(an.rib_z0, an.rib_end):
        e = np.maximum(np.abs(T - z0 + an.rib_drop * u) / (an.rib_h / 2), np.abs(dr - 1.5 - an.rib_w / 2) / (an.rib_w / 2))
        on = (e < 1) & (ph < end)
        h[iy[on], ix[on]], r[iy[on], ix[on]] = np.where(e[on] > 0.6, an.v["cortex"], an.v["marrow"]), BONE


def _spine(an, X, Y, T, h, r, yvb, rvb, v):
    """Vertebral body (or disc), canal, arch, spinous and transverse processes; the sacrum low down."""
    if an.pel - 110 < T < an.pel - 20:
        _bone(h, r, _ell(X, Y, 0, yvb + 8, 45 * (1 - 0.5 * (an.pel - 20 - T) / 90), 16), v)
    if T < an.pel - 20:
        return
    q, phase = _ell(X, Y, 0, yvb, 1.1 * rvb, rvb), (T - an.disc0) % an.rib_gap
    if phase < 6:
        _put(h, r, q <= 1, 90.0, BODY)
    else:
        _bone(h, r, q, v)
    rc, yc = 0.45 * rvb, yvb + 1.45 * rvb + 1
    qc = _ell(X, Y, 0, yc, rc, rc)
    _put(h, r, (qc <= 2.4) & (qc > 1), v["cortex"], BONE)
    _put(h, r, qc <= 1, 20.0, BODY)
    if 0.35 < phase / an.rib_gap < 0.85:  # processes: part of each level only
        _put(h, r, (np.abs(X) < 4) & (Y > yc + 1.4 * rc) & (Y < yc + 1.4 * rc + 0.8 * rvb), 0.8 * v["cortex"], BONE)
        _put(h, r, (np.abs(Y - yc) < 5) & (np.abs(X) > 1.4 * rc) & (np.abs(X) < rvb + 20), 0.8 * v["cortex"], BONE)


def _pelvis(an, X, Y, T, h, r, cav, dout, PHI, ac, bcp, v):
    """Iliac wings (bands inside the cavity wall), femoral heads and pubic rami."""
    if T > an.pel - 100:
        fr = min(1.0, (an.pel - T) / 80)
        _put(h, r, (dout > -10) & (dout < -3) & (PHI > 0.55) & (PHI < 1.1 + 0.6 * fr), 0.75 * v["cortex"], BONE)
    cz = an.pel - 140
    rr = max(0.0, 23.0**2 - (T - cz) ** 2) ** 0.5
    for sg in (-1, 1) if rr > 1 else ():
        _bone(h, r, _ell(X, Y, sg * 0.6 * ac, 0.1 * bcp, rr, rr), v)
    if cz - 30 < T < cz + 5:
        _put(h, r, cav & (dout > -14) & (dout < -5) & (PHI > 2.5), 0.8 * v["cortex"], BONE)


def _tubes(an: _Anatomy, g, hu, reg):
    """Draw in 3D: oesophagus, great vessels, airways, lung vessel trees and pathology, colon and bowel loops."""
    rng, v, ytr, car, arch, top, bl = an.rng, an.v, an.ytr, an.car, an.arch, an.H + 140, an.v["blood"]
    ht, hx, hy, hc, hb, st = an.ht, an.hx, an.hy, an.hc, an.hb, an.stomach
    C, pa, ya = np.array([-2.0, ytr(car), car]), (12, ytr(car) - 12, car - 15), ytr(arch)
    hil, ends = {1: C + (-30, 12, -25), 2: C + (44, 14, -30)}, {1: C + (-24, 6, -18), 2: C + (40, 10, -26)}
    aorta = [(hx - 20, hy + 5, ht + 0.3 * hc), (-5, hy - 5, arch - 12), (6, ya - 12, arch), (18, ya + 10, arch - 8)]
    aorta += [an.beside(T, an.r_ao, 0.6) for T in np.arange(arch - 25, -30, -20)]
    bif, trachea = an.beside(an.pel + 20, 10, 0.35), [(-2, ytr(T), T) for T in np.linspace(top, car, 8)]
    ye = an.beside(0.0, an.r_ao, 0.6)[1] - an.r_ao - an.r_es - 1
    tubes = [([(3, ytr(T) + an.r_tr + an.r_es + 1, T) for T in np.linspace(top, car, 5)] + [(5, ye, 0.0), (st[0], st[1], st[2] + 0.6 * st[5])],
              an.r_es, v["mus"], MED, 0),  # oesophagus
             ([(hx - 2, hy - 0.5 * hb, ht + 0.4 * hc), pa], 13, bl, VESSEL, 0), ([pa, hil[1]], 10, bl, VESSEL, 3), ([pa, hil[2]], 10, bl, VESSEL, 3),
             ([(-22, ya - 22, arch + 40), (hx - 38, hy - 8, ht + 0.5 * hc)], 9, bl, VESSEL, 3),  # SVC
             ([an.beside(T, 11, -0.5) for T in np.linspace(an.pel + 20, -20, 6)] + [(hx - 35, hy + 25, ht - 0.7 * hc)], 11, bl, VESSEL, 0),  # IVC
             (aorta, an.r_ao, bl, VESSEL, 3), ([aorta[-1]] + [an.beside(T, 10, 0.35) for T in np.linspace(-40, an.pel + 20, 6)], 0.7 * an.r_ao, bl, VESSEL, 0)]
    for sg in (-1, 1):  # iliac arteries, carotids, jugulars
        tubes += [([bif, (sg * 55, an.sec(an.pel - 90)[7] - 10, an.pel - 90)], 6, bl, VESSEL, 0),
                  ([(sg * 10, ya - 10, arch), (sg * (an.r_tr + 12), ytr(an.H + 100) - 2, top)], 4, bl, VESSEL, 0),
                  ([(sg * (an.r_tr + 24), ytr(car) + 2, car + 30), (sg * (an.r_tr + 24), ytr(an.H + 100) + 2, top)], 6, bl, VESSEL, 0)]
    tubes += [(trachea, an.r_tr, -1000.0, AIRWAY, 2), ([C, ends[1]], 7.0, -1000.0, AIRWAY, 1.5), ([C, ends[2]], 6.0, -1000.0, AIRWAY, 1.5)]
    for pts, rad, val, code, wall in tubes:  # vessels in a sleeve of fat, airways with a soft-tissue wall
        _path(g, hu, reg, pts, rad, val, IN_SOFT, code, wall, v["mus"] if code == AIRWAY else v["med"])

    def sprout(n, allow, src, out, pull, length, rad, depth):
        """n random trees from random allowed points; with ``pull`` None, trunks from ``src`` aimed at such points."""
        for _ in range(n):
            p = _lung_point(rng, g, reg, -1e9, allow)
            if p is not None:
                nrm = float(np.linalg.norm(p - src))
                e = (p - src) / (nrm + 1e-6)
                if pull is None:
                    _tree(rng, src, e, 0.3 * (nrm + 1e-6), rng.uniform(3.5, 5), 7, out)
                else:
                    d = rng.normal(size=3) + pull * e
                    _tree(rng, p, d / np.linalg.norm(d), rng.uniform(*length), rad(nrm), depth, out)

    segs, air = [], []
    for s, sg in ((1, -1), (2, 1)):
        vol = np.count_nonzero(reg == s) * float(np.prod(g.s)) / 2.5e6  # share of a whole lung in view
        sprout(int(np.clip(round(8 * vol), 1, 8)), _lut(s), hil[s], segs, None, None, None, 7)  # trunks from the hilum
        sprout(int(round(100 * vol)), _lut(s), hil[s], segs, 0.5, (8, 14), lambda d: 2.2 * float(np.clip(1 - d / 170, 0.3, 1)), 3)  # twigs
        for d in ((sg * 0.3, 0.0, 1.0), (sg * 1.0, 0.0, -0.6), (sg * 0.2, 0.5, -1.0)):
            _tree(rng, ends[s], np.array(d) / np.linalg.norm(d), 20.0, 3.5, 2, air)
        sprout(15 if s == an.cons else 0, _lut(s + 2), ends[s], air, 1.0, (12, 20), lambda d: rng.uniform(1.5, 3), 2)  # air bronchograms
    for _ in range(an.emph):  # emphysema: clusters of low-density spheres, upper zones
        p = _lung_point(rng, g, reg, an.low + (an.H - an.low) / 3, IN_LUNG)
        for c in [] if p is None else [p] + [p + rng.normal(0, 8, 3) for _ in range(2)]:
            _tube(g, hu, reg, c, c, rng.uniform(4, 12), rng.uniform(-980, -950), IN_LUNG)
    for p, q, rad in segs:
        _tube(g, hu, reg, p, q, rad, v["vessel"], IN_LUNG)
    for p, q, rad in air:  # small airways in lung; air bronchograms where consolidated
        _tube(g, hu, reg, p, q, rad, -950.0, IN_LUNG | IN_CONS)
    nod = []
    for _ in range(an.nod):
        p, rad, solid = _lung_point(rng, g, reg, -1e9, IN_LUNG), rng.uniform(3, 12), rng.random() < 0.7
        if p is not None:
            _tube(g, hu, reg, p, p, rad, 40.0 if solid else -550.0, IN_LUNG)
            nod.append([*(float(x) for x in p), rad, bool(solid)])
    colon = [an.cpt(*c) for c in ((-0.6, 0.0, -240), (-0.65, 0.1, -170), (-0.55, -0.35, -155), (0.0, -0.65, -165), (0.55, -0.3, -120),
                                  (0.68, 0.15, -125), (0.65, 0.2, -250), (0.35, -0.3, an.pel - 70), (0.0, 0.3, an.pel - 110), (0.0, 0.5, an.pel - 200))]
    _path(g, hu, reg, colon, rng.uniform(16, 24), 0.0, IN_GUT, COLON, 2.5, v["mus"], WALL)
    for _ in range(int(rng.integers(14, 28))):  # small-bowel loops: random walks in the lower abdomen
        pts, d = [np.array(an.cpt(rng.uniform(-0.5, 0.5), rng.uniform(-0.6, 0.2), rng.uniform(an.pel - 60, -140)))], rng.normal(size=3)
        for _ in range(int(rng.integers(5, 9))):
            d = d / np.linalg.norm(d)
            pts.append(pts[-1] + d * rng.uniform(15, 22))
            d = d + rng.normal(0, 0.7, 3)
        _path(g, hu, reg, pts, rng.uniform(9, 13), 25.0, IN_GUT, BOWEL, 2.5, v["mus"], WALL)
    _contents(an, g, hu, reg)
    return trachea, nod


def _lung_point(rng, g, reg, tmin, allow):
    """A random body-frame point in an allowed region above height tmin, or None."""
    for _ in range(400):
        i = [int(rng.integers(n)) for n in g.n]
        p = g.o + g.s * np.array(i[::-1])
        if allow[reg[tuple(i)]] and p[2] > tmin:
            return p
    return None


def _contents(an, g, hu, reg):
    """Gut contents: mottled stool (-100..+50) with gas (more of it anteriorly) in the colon, fluid with bubbles in bowel."""
    for z0 in range(0, g.n[0], 16):  # in slabs, to keep memory low
        z, y, x = np.nonzero((reg[z0:z0 + 16] == COLON) | (reg[z0:z0 + 16] == BOWEL))
        z += z0
        p = np.stack([g.o[0] + g.s[0] * x, g.o[1] + g.s[1] * y, g.o[2] + g.s[2] * z], 1)
        f = 1.7 * np.mean([np.sin(p @ w + ph) for w, ph in an.mottle], 0)
        col = reg[z, y, x] == COLON
        gas = np.where(col, f - p[:, 1] / 150 > 0.5, f > 0.9)
        hu[z, y, x] = np.where(gas, -1000.0, np.where(col, np.clip(-100 + 75 * (f + 1), -100, 50), 25 + 12 * f))


def _finish(hu, reg, rng, noise, smooth, outside, pad):
    """Per slice: optional gentle blur, correlated noise of std ``noise``, padding outside the scan circle; int16 CT
    and uint8 labels (slice by slice: a whole-volume fancy index would build an int64 copy)."""
    out, lab, scale = np.empty(hu.shape, np.int16), np.empty_like(reg), None
    for k in range(hu.shape[0]):
        s = ndimage.gaussian_filter(hu[k], smooth) if smooth else hu[k]
        n = ndimage.gaussian_filter(rng.standard_normal(s.shape, np.float32), 0.7)
        scale = scale or noise / float(n.std())
        s = s + scale * n
        if outside is not None:
            s[outside], reg[k][outside] = pad, AIR
        out[k], lab[k] = np.clip(np.rint(s), -3024, 3071), LABEL_OF[reg[k]]
    return out, lab


def _scan(an, kind, size, u):
    """Height range (T, mm), field of view (mm, centre X, Y) and the canonical grid of a scan of ``kind``."""
    H, low, bottom = an.H, an.low, -u(380, 420)
    t_lo, t_hi = {"chest": (low - u(10, 40), H + u(15, 40)), "fov_cut": (low - u(10, 40), H + u(15, 40)),
                  "fov_circle": (low - u(10, 40), H + u(15, 40)), "chest_abdomen": (bottom, H + u(15, 40)),
                  "abdomen_bases": (bottom, low + u(20, 60)), "apex": (H - u(60, 110), H + u(60, 100)),
                  "cardiac": (an.ht - 90 + u(-10, 10), None), "no_lungs": (bottom, low - u(20, 50))}[kind]
    t_hi = t_lo + 180.0 if t_hi is None else t_hi
    secs = np.array([an.sec(T) for T in np.linspace(t_lo, t_hi, 25)])
    if kind == "cardiac":  # a 180 mm cube around the heart, inside the body
        _, ba, bp = an.sec(an.ht)[:3]
        fov, cx, cy = 180.0, 0.2 * an.hx + u(-5, 5), float(np.clip((bp - ba) / 2 + u(-10, 10), 91 - ba, bp - 91))
    elif kind in ("fov_cut", "fov_circle"):  # field of view narrower than the lungs
        fov, cx, cy = 2 * an.sec(an.car)[4] * u(0.6, 0.78), u(-12, 12), float(np.mean(secs[:, 2] - secs[:, 1]) / 2 + u(-10, 10))
    else:  # the whole body and the table
        y0, y1 = -secs[:, 1].max() - 8, an.table_bottom + 5
        fov = max(2 * secs[:, 0].max() + u(15, 50), y1 - y0 + u(5, 20))
        cx, cy = u(-10, 10), (y0 + y1) / 2 + u(-8, 8)
    sp_r, n_r, sz_r, nz_max = SIZES[size]
    n = int(np.clip(round(fov / u(*sp_r)), *n_r))
    sp, sz = fov / n, u(*sz_r)
    nz = int(np.ceil((t_hi - t_lo) / sz)) + 1
    if nz > nz_max:
        nz, sz = nz_max, (t_hi - t_lo) / (nz_max - 1)
    o = np.array([cx - fov / 2 + sp / 2, cy - fov / 2 + sp / 2, t_lo])  # the canonical LPS grid in body-frame mm: o, s (x, y, z); n (z, y, x)
    g = SimpleNamespace(o=o, s=np.array([sp, sp, sz]), n=(nz, n, n), X=(o[0] + sp * np.arange(n))[None, :], Y=(o[1] + sp * np.arange(n))[:, None])
    return t_lo, t_hi, fov, cx, cy, g


def make_case(seed: int, kind: str, size: str = "default") -> tuple[sitk.Image, sitk.Image, dict]:
    """Build one phantom: (CT in HU as int16, uint8 lung labels on the same grid, description).

    Deterministic per (seed, kind, size); anatomy depends on (seed, kind) only. ``size``: "default" (1.2-1.6 mm
    in-plane, at most 256 voxels a side), "small" (2.4-3.2 mm, for tests) or "fine" (0.6-1.0 mm, 256-512 voxels; heavy)."""
    if kind not in CASES or size not in SIZES:
        raise ValueError(f"kind must be one of {CASES} and size one of {tuple(SIZES)}")
    ki = CASES.index(kind)
    an, geo = _Anatomy(np.random.default_rng([seed, ki])), np.random.default_rng([seed, ki, 1])
    u = geo.uniform
    t_lo, t_hi, fov, cx, cy, g = _scan(an, kind, size, u)
    orient = ORIENTATIONS[int(geo.integers(len(ORIENTATIONS)))]
    shift = np.array([u(-10, 10), u(-25, 25), u(-450, 150)])  # body frame -> physical LPS
    pad, noise, smooth = int(geo.choice([-1024, -2048, -3024])), u(10, 40), (u(0.4, 0.8) if geo.random() < 0.6 else 0.0)
    hu, reg = np.full(g.n, -1000.0, np.float32), np.zeros(g.n, np.uint8)
    _slices(an, g, hu, reg)
    trachea, nod = _tubes(an, g, hu, reg)
    outside = (g.X - cx) ** 2 + (g.Y - cy) ** 2 > (fov / 2) ** 2 if kind == "fov_circle" else None
    out, lab = _finish(hu, reg, np.random.default_rng([seed, ki, 2]), noise, smooth, outside, pad)
    del hu, reg
    count = {k: int(np.count_nonzero(lab == i)) for i, k in ((1, "right"), (2, "left"))}
    lung_hu = float(out[lab > 0].mean()) if sum(count.values()) else None
    zr = {k: np.flatnonzero((lab == i).any((1, 2))) * g.s[2] + t_lo + shift[2] for i, k in ((1, "right"), (2, "left"))}
    img, limg = sitk.GetImageFromArray(out), sitk.GetImageFromArray(lab)
    del out, lab
    img.SetOrigin(tuple(float(x) for x in g.o + shift))
    img.SetSpacing(tuple(float(x) for x in g.s))
    limg.CopyInformation(img)
    if orient != "LPS":
        img, limg = sitk.DICOMOrient(img, orient), sitk.DICOMOrient(limg, orient)
    z = shift[2]
    info = {"name": f"fb_{kind}_{seed:04d}", "kind": kind, "seed": seed, "size": size, "orientation": orient, "size_xyz": list(img.GetSize()),
            "spacing": list(img.GetSpacing()), "origin": list(img.GetOrigin()), "fov_mm": fov, "body_center_xy_mm": list(shift[:2]),
            "contrast": an.contrast, "noise_hu": noise, "pad_value": pad if outside is not None else None, "lung_voxels": count, "lung_mean_hu": lung_hu,
            "pathology": {"consolidation": [None, "right", "left"][an.cons], "effusion": [("right", "left")[s - 1] for s in an.eff],
                          "emphysema_patches": an.emph, "nodules_xyzr_solid": [[*(np.array(p[:3]) + shift).tolist(), p[3], p[4]] for p in nod]},
            "z_mm": {"apex": an.H + z, "carina": an.car + z, "dome_right": z, "dome_left": an.top[2] + z, "lung_floor": an.low + z,
                     "scan": [t_lo + z, t_hi + z], "lungs": {k: [v[0], v[-1]] if v.size else None for k, v in zr.items()}},
            "trachea_mm": [(np.array(p, float) + shift).tolist() for p in trachea],
            "table_top_y_mm": an.mat_top + an.mat_t + an.gap + shift[1], "mattress_top_y_mm": an.mat_top + shift[1]}
    return img, limg, json.loads(json.dumps(info, default=float))


def main(argv: list[str] | None = None) -> int:
    """Write ``<name>.nii.gz`` / ``<name>_lungs.nii.gz`` pairs and ``cases.json`` for N cases cycling through the kinds."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--n", type=int, default=len(CASES))
    ap.add_argument("--seed", type=int, default=0, help="first seed; kinds cycle, the seed steps after each cycle")
    ap.add_argument("--size", choices=tuple(SIZES), default="default")
    ap.add_argument("--kinds", nargs="+", choices=CASES, default=list(CASES))
    args, cases = ap.parse_args(argv), []
    args.out.mkdir(parents=True, exist_ok=True)
    for i in range(args.n):
        t0 = time.perf_counter()
        img, lab, info = make_case(args.seed + i // len(args.kinds), args.kinds[i % len(args.kinds)], args.size)
        info["build_s"] = round(time.perf_counter() - t0, 2)
        sitk.WriteImage(img, str(args.out / f"{info['name']}.nii.gz"))
        sitk.WriteImage(lab, str(args.out / f"{info['name']}_lungs.nii.gz"))
        cases.append(info)
        print(f"{info['name']}: {info['size_xyz']} {info['orientation']} {info['build_s']} s", flush=True)
    (args.out / "cases.json").write_text(json.dumps(cases, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
