"""The body, skeleton, mediastinum and abdomen of a phantom, in mm (canonical LPS frame).

Frame: x toward the patient's left, y posterior, z superior; the carina is at z = 0, the midline
at x = 0. :class:`Body` draws the patient's proportions from the spec and a generator and
builds painted :class:`~segpipe.synthetic.shapes.Item` lists; the lungs, airways and
pathology are added by :mod:`segpipe.synthetic.lungs`.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from scipy.interpolate import PchipInterpolator

from segpipe.synthetic.fields import Affine, Field, Remap, Ridge, SharedField, SmoothField
from segpipe.synthetic.shapes import (
    F32,
    INF,
    TISSUES,
    Capsule,
    Ellipsoid,
    Grid,
    HalfSpace,
    Implicit,
    Intersect,
    Item,
    Section,
    Shape,
    Subtract,
    smooth_path,
    tube,
)
from segpipe.synthetic.spec import PhantomSpec

T = TISSUES


class Profile:
    """Smooth (PCHIP) functions of z from knots ``[(z, v1, v2, ...), ...]``; constant beyond."""

    def __init__(self, knots: list[tuple[float, ...]]):
        arr = np.array(sorted(knots, key=lambda k: k[0]), dtype=float)
        keep = np.concatenate([[True], np.diff(arr[:, 0]) > 1e-6])
        arr = arr[keep]
        self.lo, self.hi = arr[0, 0], arr[-1, 0]
        self.f = PchipInterpolator(arr[:, 0], arr[:, 1:], axis=0)

    def __call__(self, z: np.ndarray | float) -> np.ndarray:
        return self.f(np.clip(np.asarray(z, dtype=float), self.lo, self.hi))

    def col(self, i: int, scale: float = 1.0, add: float = 0.0) -> Callable[[np.ndarray], np.ndarray]:
        return lambda z: self(z)[..., i] * scale + add


def rotation(u: np.ndarray) -> np.ndarray:
    """Orthonormal rows with the first along ``u``."""
    u = np.asarray(u, float) / np.linalg.norm(u)
    ref = np.array([0.0, 0.0, 1.0]) if abs(u[2]) < 0.9 else np.array([1.0, 0.0, 0.0])
    v = np.cross(u, ref)
    v /= np.linalg.norm(v)
    return np.vstack([u, v, np.cross(u, v)])


DOME_LY, DOME_Y, DOME_TILT = (0.7, 1.0), (-15.0, 5.0), (0.2, 1.0)  # diaphragm_variety's ranges
RECESS_TILT = (1.0, 3.0)  # recess_variety's tilt (x the default 15 mm), toward a direction drawn all round


class Body:
    """Patient proportions and the structures outside the lungs.

    Args:
        spec: The phantom spec (patient scale, fat, breathing, arms, contrast...).
        rng: Generator; consumed in a fixed order so phantoms are reproducible.
        detail: Generator of the detailed abdomen and table (``spec.abdomen_detail``), or None for
            the plain ones; its own stream, so the rest of the phantom is the same either way.
    """

    def __init__(self, spec: PhantomSpec, rng: np.random.Generator, detail: np.random.Generator | None = None):
        self.spec, self.rng, self.detail = spec, rng, detail
        S = self.S = spec.patient_scale
        B, self.F = spec.breathing, spec.fat
        j = lambda s: float(rng.normal(1.0, s))  # noqa: E731
        L: dict[str, float] = {}
        L["apex"] = 72 * S * j(0.05)
        L["domeR"] = -(95 + 50 * B) * S * j(0.05)
        L["domeL"] = L["domeR"] - 15 * S * j(0.25)
        L["lung_min"] = L["domeL"] - 62 * S * j(0.08)
        L["shoulder"] = L["apex"] + 28 * S
        L["neck_top"] = L["apex"] + 160 * S
        L["T12"] = L["lung_min"] - 12 * S
        L["iliac"] = L["T12"] - 4 * 33 * S
        L["pubis"] = L["iliac"] - 165 * S
        L["bottom"] = L["pubis"] - 90 * S
        L["arch"] = 32 * S * j(0.1)
        L["heart"] = L["domeR"] + 58 * S * j(0.05)
        self.L = L
        wj, apj = j(0.04), j(0.05) * (1 + 0.06 * (B - 0.5))
        self.width_j, self.ap_j = wj, apj
        # thoracic / abdominal cavity (inner surface of the body wall): z, a, b_ant, b_post, yc
        s = S
        self.cav = Profile([
            (L["apex"] + 12, 62 * s * wj, 40 * s * apj, 44 * s * apj, 18 * s),
            (L["apex"] - 15, 88 * s * wj, 52 * s * apj, 60 * s * apj, 14 * s),
            (L["apex"] - 55, 110 * s * wj, 62 * s * apj, 74 * s * apj, 11 * s),
            (0.0, 124 * s * wj, 72 * s * apj, 83 * s * apj, 8 * s),
            (-45 * s, 133 * s * wj, 80 * s * apj, 88 * s * apj, 5 * s),
            (L["domeR"], 138 * s * wj, 88 * s * apj, 92 * s * apj, 5 * s),
            (L["lung_min"], 138 * s * wj, 90 * s * apj, 88 * s * apj, 4 * s),
            (L["T12"] - 40 * s, 132 * s * wj, 88 * s * apj, 70 * s * apj, 2 * s),
            (L["iliac"], 128 * s * wj, 86 * s, 56 * s, 0.0),
            (L["pubis"] + 40 * s, 112 * s * wj, 72 * s, 50 * s, 4 * s),
            (L["pubis"] - 10 * s, 70 * s * wj, 45 * s, 35 * s, 8 * s),
        ])
        # outer surface of the muscle layer
        self.mus = Profile([
            (L["neck_top"], 55 * s, 42 * s, 58 * s, 18 * s),
            (L["shoulder"] + 35 * s, 62 * s, 45 * s, 60 * s, 18 * s),
            (L["shoulder"], 178 * s * wj, 72 * s, 98 * s, 16 * s),
            (L["apex"] - 35 * s, 170 * s * wj, 86 * s * apj, 120 * s * apj, 12 * s),
            (0.0, 158 * s * wj, 92 * s * apj, 124 * s * apj, 9 * s),
            (-60 * s, 155 * s * wj, 98 * s * apj, 127 * s * apj, 6 * s),
            (L["domeR"], 156 * s * wj, 103 * s * apj, 124 * s * apj, 5 * s),
            (L["lung_min"], 152 * s * wj, 103 * s * apj, 118 * s * apj, 4 * s),
            (L["iliac"], 146 * s * wj, 100 * s, 106 * s, 0.0),
            (L["pubis"] + 40 * s, 162 * s * wj, 95 * s, 114 * s, 5 * s),
            (L["bottom"], 160 * s * wj, 85 * s, 105 * s, 5 * s),
        ])
        F = self.F * j(0.1)
        # fat thickness (lateral, anterior, posterior), mm
        self.fat = Profile([
            (L["neck_top"], 5 + 6 * F, 4 + 5 * F, 6 + 8 * F),
            (L["shoulder"], 6 + 14 * F, 6 + 12 * F, 6 + 12 * F),
            (-40 * s, 6 + 22 * F, 6 + 20 * F, 5 + 12 * F),
            (L["lung_min"], 6 + 30 * F, 7 + 30 * F, 5 + 16 * F),
            (L["iliac"], 7 + 36 * F, 8 + 38 * F, 6 + 20 * F),
            (L["pubis"], 8 + 34 * F, 6 + 22 * F, 8 + 30 * F),
        ])
        self.flatten = (4 + 6 * F) * S
        # spine: y of the vertebral bodies' centres
        self.spine_y = Profile([
            (L["neck_top"], 28 * s), (L["shoulder"], 42 * s), (L["apex"] - 20 * s, 60 * s), (0.0, 67 * s),
            (L["domeR"], 68 * s), (L["T12"], 62 * s), (L["iliac"], 42 * s), (L["pubis"] + 70 * s, 60 * s),
            (L["pubis"], 75 * s),
        ]).col(0)
        # diaphragm
        self.dome = dict(xR=-50 * S * j(0.1), xL=55 * S * j(0.1), y=-15 * S, Lx=100 * S * j(0.05),
                         Ly=120 * S * j(0.05), depth=90 * S * j(0.1), tilt=15 * S * j(0.2), steep=1.0,
                         toward=0.0)
        if spec.diaphragm_variety and rng.random() < spec.diaphragm_variety:
            # (drawn only when asked for: every other phantom stays as it was)
            u = rng.uniform
            self.dome.update(Ly=self.dome["Ly"] * u(*DOME_LY), y=u(*DOME_Y) * S, tilt=self.dome["tilt"] * u(*DOME_TILT))
        if spec.recess_variety and rng.random() < spec.recess_variety:
            # each dome's floor slopes down toward a direction drawn all round (0: the back,
            # pi/2: the side, pi: the front), so that its lowest lung is a crescent there
            self.dome.update(tilt=15 * S * rng.uniform(*RECESS_TILT), toward=rng.uniform(-np.pi, np.pi))
        self.contrast = spec.contrast
        self.hu_blood = float(rng.uniform(150, 320)) if spec.contrast else float(rng.uniform(35, 50))
        self.hu_muscle = float(rng.uniform(40, 58))
        self.hu_fat = float(rng.uniform(-115, -85))
        # shared textures (evaluated once per slab), unit std: 24 mm, 10 mm and 4.5 mm features
        dom_lo = (-320 * S, -260 * S, L["bottom"] - 150)
        dom_hi = (320 * S, 320 * S, L["neck_top"] + 250)
        self.tex0 = SharedField(SmoothField(rng, dom_lo, dom_hi, 24.0))
        self.tex1 = SharedField(SmoothField(rng, dom_lo, dom_hi, 10.0))
        self.tex2 = SharedField(SmoothField(rng, dom_lo, dom_hi, 4.5))
        self.shared = [self.tex0, self.tex1, self.tex2]
        self.items_pre: list[Item] = []
        self.items_post: list[Item] = []
        self.cutters: list = []  # dilated mediastinal structures carved out of the lungs

    # ------------------------------------------------------------------ geometry helpers
    def body_profile(self) -> tuple[Callable, ...]:
        """(a, b_ant, b_post, yc) of the skin surface as functions of z."""
        mus, fat = self.mus, self.fat
        a = lambda z: mus(z)[..., 0] + fat(z)[..., 0]  # noqa: E731
        ba = lambda z: mus(z)[..., 1] + fat(z)[..., 1]  # noqa: E731
        bp = lambda z: mus(z)[..., 2] + fat(z)[..., 2]  # noqa: E731
        yc = mus.col(3)
        return a, ba, bp, yc

    def back_y(self, z: np.ndarray | float) -> np.ndarray:
        """y of the back: the natural body outline, flattened where it would pass the plane the
        patient lies on (:meth:`table_y`)."""
        _, _, bp, yc = self.body_profile()
        return np.minimum(yc(z) + bp(z), self.table_y())

    def table_y(self) -> float:
        """y of the plane the back rests on (the chest's back, flattened by the weight)."""
        _, _, bp, yc = self.body_profile()
        z = -60 * self.S
        return float(yc(z) + bp(z) - self.flatten)

    def diaphragm(self, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Diaphragm height zd(x, y) (mm) and its derivatives, broadcast over x (…, nx), y (…, ny, 1)."""
        d = self.dome
        w = 0.5 * (1 - np.tanh(x / 15.0))  # weight of the right dome
        out, gx, gy = 0.0, 0.0, 0.0
        D, st = d["depth"], d["steep"]
        # the floor slopes down by ``tilt`` per unit of the dome's radius toward ``toward``
        # (0: the back, +y; pi/2: the side, away from the midline; pi: the front)
        back, side = float(np.cos(d["toward"])), float(np.sin(d["toward"]))
        for wt, xc, zc, out_x in ((w, d["xR"], self.L["domeR"], -1.0), (1 - w, d["xL"], self.L["domeL"], 1.0)):
            u, v = (x - xc) / d["Lx"], (y - d["y"]) / d["Ly"]
            r2 = u * u + v * v
            root = np.sqrt(np.maximum(1.0 - r2, 0.04))  # ellipsoidal cap: flat top, steep sides
            r = np.sqrt(r2)
            out_r = np.maximum(r - 0.98, 0.0)
            zs = zc - D * (1.0 - root) - d["tilt"] * (back * v + side * out_x * u) - st * D * out_r
            out = out + wt * zs
            dr = np.where(r2 < 0.96, D / root, 0.0) + st * D * (out_r > 0) / np.maximum(r, 1e-6)
            gx = gx + wt * (-dr * u / d["Lx"] - d["tilt"] * side * out_x / d["Lx"])
            gy = gy + wt * (-dr * v / d["Ly"] - d["tilt"] * back / d["Ly"])
        low = out < self.L["lung_min"]
        out = np.where(low, self.L["lung_min"], out)
        return out.astype(F32), np.where(low, 0, gx).astype(F32), np.where(low, 0, gy).astype(F32)

    def above_diaphragm(self, offset: float = 0.0, below: bool = False) -> Implicit:
        """Region above (or below) the diaphragm surface shifted by ``offset`` mm."""

        def fn(g: Grid) -> tuple[np.ndarray, np.ndarray]:
            zd, gx, gy = self.diaphragm(g.X, g.Y)
            f = (g.Z - (zd + F32(offset))) if below else ((zd + F32(offset)) - g.Z)
            w = np.abs(gx) * F32(g.spacing[0]) + np.abs(gy) * F32(g.spacing[1]) + F32(g.spacing[2])
            return f, w

        zlo, zhi = self.L["lung_min"] - 60 * self.S, self.L["domeR"] + 40 * self.S
        return Implicit(fn, (-INF, -INF, -INF if below else zlo), (INF, INF, zhi if below else INF))

    def section(self, prof: Profile | tuple, z_lo: float, z_hi: float, grow: float | tuple = 0.0,
                y_max: Callable | None = None, xc: float = 0.0) -> Section:
        """Section of a profile (a, b_ant, b_post, yc columns) grown by ``grow`` mm (lat, ant, post)."""
        gl, ga, gp = (grow, grow, grow) if np.isscalar(grow) else grow
        if isinstance(prof, Profile):
            a, ba, bp, yc = prof.col(0, add=gl), prof.col(1, add=ga), prof.col(2, add=gp), prof.col(3)
        else:
            a0, ba0, bp0, yc = prof
            a, ba, bp = (lambda z: a0(z) + gl), (lambda z: ba0(z) + ga), (lambda z: bp0(z) + gp)
        zz = np.linspace(z_lo, z_hi, 64)
        ext = float(np.max(a(zz))) + 2
        y0 = float(np.min(yc(zz) - ba(zz))) - 2
        y1 = float(np.max(yc(zz) + bp(zz))) + 2
        return Section(z_lo, z_hi, lambda z: np.full(np.shape(z), xc, dtype=float), yc, a, ba, bp,
                       (xc - ext, xc + ext, y0, y1), y_max=y_max)

    def field(self, lo, hi, cell: float, amp: float, mean: float = 0.0) -> SmoothField:
        """A local smooth random field (for small structures)."""
        return SmoothField(self.rng, lo, hi, cell, amp, mean)

    def tex(self, amp: float, mean: float = 0.0, fine: bool = False, coarse: bool = False) -> Affine:
        """``mean + amp * texture`` from a shared texture (10 mm; fine: 4.5 mm; coarse: 24 mm)."""
        return Affine(self.tex2 if fine else self.tex0 if coarse else self.tex1, amp, mean)

    def add(self, name: str, shape: Shape, hu: float | Field, tissue: str, post: bool = False,
            alpha: float = 1.0) -> None:
        """Append a painted item: before the lungs (``post=False``, must not overlap them) or
        after them (``post=True``: it carves its occupancy out of the lungs)."""
        item = Item(name, shape, hu, "carve" if post else "tissue", T[tissue], alpha)
        (self.items_post if post else self.items_pre).append(item)

    def cut(self, shape: Shape) -> None:
        """Carve ``shape`` (e.g. an organ grown by a fat margin) out of the lung envelopes."""
        self.cutters.append(shape)

    # ------------------------------------------------------------------ body wall
    def build_body(self) -> None:
        L, S, rng = self.L, self.S, self.rng
        z_lo, z_hi = L["bottom"] - 20, L["neck_top"] + 30
        lo, hi = (-260 * S, -160 * S, z_lo), (260 * S, 200 * S, z_hi)
        a, ba, bp, yc = self.body_profile()
        self.add("skin", self.section((a, ba, bp, yc), z_lo, z_hi, y_max=self.back_y), float(rng.uniform(10, 50)),
                 "skin")
        fat_hu = self.tex(7, self.hu_fat)
        self.add("subcutaneous_fat", self.section((a, ba, bp, yc), z_lo, z_hi, grow=-2.2,
                                                  y_max=lambda z: self.back_y(z) - 2.2), fat_hu, "fat")
        if self.spec.female:
            for sx in (-1, 1):
                zc = -70 * S + rng.normal(0, 8)
                yb = float(yc(zc) - ba(zc))
                r = np.array([72, 30, 58]) * S * rng.uniform(0.8, 1.25)  # supine: flattened, spread
                c = (sx * 78 * S, yb + 0.15 * r[1], zc)
                self.add("breast_skin", Ellipsoid(c, r), 30.0, "skin")
                gl = Remap(self.field(np.subtract(c, r), np.add(c, r), 7, 1.0), self.hu_fat, 25.0, 2.5,
                           float(rng.uniform(-2.5, 0.5)))
                self.add("breast", Ellipsoid(c, r - 2.2), gl, "fat")
        self._table()
        # muscles with fat planes between them
        mus_hu = Ridge(self.tex(1.0, coarse=True), self.tex(5, self.hu_muscle, fine=True), self.hu_fat + 30,
                       float(rng.uniform(0.03, 0.08) * (0.7 + 0.5 * self.F)), 40.0)
        self.add("muscle", self.section(self.mus, z_lo, z_hi, y_max=lambda z: self.back_y(z) - 3), mus_hu, "muscle")
        self._arms(lo, hi)
        # cavity: mediastinal fat above the diaphragm, abdominal contents below
        cav_lo, cav_hi = L["pubis"] - 10 * S, L["apex"] + 12 * S
        cavity = self.section(self.cav, cav_lo, cav_hi)
        self.cavity = cavity
        self.add("mediastinal_fat", Intersect(cavity, self.above_diaphragm()),
                 self.tex(10, self.hu_fat + 15), "mediastinal_fat")
        fatfrac = float(np.clip(0.3 + 0.35 * self.F, 0.2, 0.8))
        bowel = Remap(self.tex(1.0), self.hu_fat, float(rng.uniform(20, 45)), 3.0,
                      2.2 * (0.5 - fatfrac))
        self.add("abdomen", Intersect(cavity, self.above_diaphragm(below=True)), bowel, "bowel")
        self.add("diaphragm", Intersect(cavity, self.above_diaphragm(below=True),
                                        self.above_diaphragm(-4.5 * S)), self.hu_muscle, "muscle")

    def _table(self) -> None:
        """Patient table: curved carbon-fibre shells with a foam core, and a mattress pad."""
        rng, S = self.rng, self.S
        thick = bool(self.spec.table_variety) and rng.random() < self.spec.table_variety  # drawn only when asked for
        if thick:  # a thick foam mattress, as dense as lung: flat (the flanks rise off it) or following the back
            t_pad, pad_hu, flat, sink = float(rng.uniform(25, 70)), float(rng.uniform(-900, -600)), rng.random() < 0.6, float(rng.uniform(0, 12))
            has_pad = True
        else:
            has_pad = rng.random() < 0.6
            t_pad = float(rng.uniform(8, 40)) if has_pad else 0.0
        y_top = self.table_y() + t_pad + float(rng.uniform(0, 6))
        half_w = float(rng.uniform(200, 240))
        radius = float(rng.uniform(350, 900))
        depth = float(rng.uniform(30, 55))
        gap = 0.0
        d = self.detail
        if d is not None:  # flat tables too, narrower or wider, an air gap under the pad
            half_w = float(d.uniform(170, 270))
            radius = float(d.uniform(3000, 20000)) if d.random() < 0.45 else float(d.uniform(300, 900))
            gap = float(d.uniform(2, 25)) if has_pad and d.random() < 0.5 else 0.0
            y_top += gap

        def arc(y0: float, thick: float) -> Implicit:
            def fn(g: Grid) -> tuple[np.ndarray, float]:
                yc = y0 + radius
                r = np.sqrt(g.X * g.X + (g.Y - F32(yc)) ** 2)
                f = np.abs(r - F32(radius - thick / 2)) - F32(thick / 2)
                f = np.maximum(f, np.abs(g.X) - F32(half_w))
                return np.broadcast_to(f, (len(g.z),) + f.shape[1:]), g.spacing[0] + g.spacing[1]

            return Implicit(fn, (-half_w - 5, y0 - 5, -INF), (half_w + 5, y0 + radius - np.sqrt(max(radius**2 - half_w**2, 0)) + thick + 5, INF))

        def core(g: Grid) -> tuple[np.ndarray, float]:
            yc = y_top + radius
            r = np.sqrt(g.X * g.X + (g.Y - F32(yc)) ** 2)
            f = np.maximum(np.maximum(r - F32(radius), F32(radius - depth) - r), np.abs(g.X) - F32(half_w - 10))
            return np.broadcast_to(f, (len(g.z),) + f.shape[1:]), g.spacing[0] + g.spacing[1]

        self.add("table_core", Implicit(core, (-half_w, y_top - 5, -INF), (half_w, y_top + depth + 60, INF)),
                 float(rng.uniform(-950, -850)), "table")
        hu = float(rng.uniform(150, 600))
        self.add("table_top", arc(y_top, float(rng.uniform(1.5, 3.0))), hu, "table")
        self.add("table_bottom", arc(y_top + depth, float(rng.uniform(1.5, 3.0))), hu * 0.7, "table")
        if has_pad:  # a foam pad under the patient, following the back
            a_, ba, bp, yc = self.body_profile()
            z_lo, z_hi = self.L["bottom"] - 20, self.L["neck_top"] + 30
            above = HalfSpace((0, y_top - gap, 0), (0, 1, 0))
            if thick and flat:  # flat across, under the back along its length (sunk in by `sink`); never over the body
                w, bottom = half_w - 10, y_top - gap

                def slab(g: Grid) -> tuple[np.ndarray, float]:
                    top = (self.back_y(g.z) - sink).astype(F32)[:, None, None]
                    f = np.maximum(np.maximum(top - g.Y, g.Y - F32(bottom)), np.abs(g.X) - F32(w))
                    return f, g.spacing[0] + g.spacing[1]

                shape = Implicit(slab, (-w, self.table_y() - 150 * S, -INF), (w, bottom + 5, INF))
                self.add("mattress", Subtract(shape, self.section((a_, ba, bp, yc), z_lo, z_hi, y_max=self.back_y)), pad_hu, "table")
            else:
                pad = self.section((a_, ba, bp, yc), z_lo, z_hi, grow=t_pad)
                under = HalfSpace((0, self.table_y() - 15 * S, 0), (0, -1, 0))
                self.add("mattress", Intersect(pad, under, above), pad_hu if thick else float(rng.uniform(-900, -750)), "table")
        if d is not None and d.random() < 0.4:  # side rails: dense bars along the table's edges
            rail = np.array([d.uniform(6, 14), d.uniform(8, 20), INF])
            y_rail = y_top + depth / 2 + float(d.uniform(-10, 10))
            for sx in (-1, 1):
                self.add("table_rail", Ellipsoid((sx * (half_w + rail[0] / 2), y_rail, 0.0), rail), float(d.uniform(200, 1200)), "table")

    def _arms(self, lo, hi) -> None:
        L, S, rng = self.L, self.S, self.rng
        r = (38 + 14 * self.F) * S * rng.uniform(0.9, 1.1)
        a, ba, bp, yc = self.body_profile()
        if self.spec.arms == "down":
            zz = np.linspace(L["iliac"], L["shoulder"], 30)
            x0 = float(np.max(a(zz))) + rng.uniform(2, 15) + r
            z_lo, z_hi, y0 = L["iliac"] - 40 * S, L["shoulder"] - 5 * S, 5 * S
        else:
            x0 = 75 * S + r + rng.uniform(0, 25)
            z_lo, z_hi, y0 = L["shoulder"] + 60 * S, L["neck_top"] + 200, -15 * S
        for sx in (-1, 1):
            prof = Profile([(z_lo, r, r * 0.9, r * 0.95, y0), (z_hi, r, r * 0.9, r * 0.95, y0)])
            xc = sx * x0
            self.add("arm_skin", self.section(prof, z_lo, z_hi, xc=xc), 30.0, "skin")
            self.add("arm_fat", self.section(prof, z_lo, z_hi, grow=-2.2, xc=xc), self.hu_fat, "fat")
            self.add("arm_muscle", self.section(prof, z_lo, z_hi, grow=-(5 + 10 * self.F) * S, xc=xc),
                     self.tex(6, self.hu_muscle, fine=True), "muscle")
            bone = Profile([(z_lo, 11 * S, 11 * S, 11 * S, y0), (z_hi, 11 * S, 11 * S, 11 * S, y0)])
            self.add("humerus", self.section(bone, z_lo, z_hi, xc=xc + sx * 3), 900.0, "cortical_bone")
            self.add("humerus_marrow", self.section(bone, z_lo, z_hi, grow=-3 * S, xc=xc + sx * 3),
                     float(rng.uniform(-60, 60)), "cancellous_bone")

    # ------------------------------------------------------------------ mediastinum and neck
    def build_mediastinum(self) -> None:
        """Heart, great vessels, esophagus, thyroid; painted after the lungs, and their grown
        copies are carved out of the lungs (mediastinal fat between)."""
        L, S, rng, c = self.L, self.S, self.rng, self.contrast
        yv = lambda z: float(self.spine_y(z))  # noqa: E731
        above = self.above_diaphragm(-2.0)
        # mediastinal core (fat between the lungs behind the heart and above it)
        core_prof = Profile([(L["lung_min"], 14 * S, 40 * S, 55 * S, 28 * S), (L["heart"], 16 * S, 40 * S, 50 * S, 25 * S),
                             (0.0, 21 * S, 42 * S, 50 * S, 20 * S), (L["arch"], 26 * S, 45 * S, 52 * S, 18 * S),
                             (L["apex"] + 20 * S, 23 * S, 40 * S, 45 * S, 18 * S)])
        self.cut(self.section(core_prof, L["lung_min"] - 10, L["apex"] + 40 * S, xc=3 * S))
        # heart
        hc = np.array([28 * S, -30 * S, L["heart"] - 6 * S]) + rng.normal(0, 4, 3)
        hrot = rotation((0.75, -0.35, -0.55))
        hr = np.array([66, 40, 46]) * S * rng.normal(1, 0.05, 3)
        self.cut(Intersect(Ellipsoid(hc, hr + 8 * S, hrot), above))
        # pericardium (thin soft-tissue line) around epicardial fat around the heart
        self.add("pericardium", Intersect(Ellipsoid(hc, hr + 4.2 * S, hrot), above), 25.0, "soft_tissue", post=True)
        self.add("epicardial_fat", Intersect(Ellipsoid(hc, hr + 3 * S, hrot), above), self.hu_fat + 10,
                 "mediastinal_fat", post=True)
        myo = self.hu_blood * 0.45 + 30 if c else 45.0
        self.add("heart", Intersect(Ellipsoid(hc, hr, hrot), above), myo, "blood", post=True)
        # fat in the atrioventricular and interventricular grooves, near the surface
        shell = Ellipsoid(hc, hr * 0.82, hrot)
        u = hrot[0]
        for point, normal, half in ((hc - 0.3 * hr[0] * u, u, 4.0), (hc, hrot[1], 3.0)):
            band = Intersect(HalfSpace(point + half * S * normal, normal), HalfSpace(point - half * S * normal, -normal))
            groove = Intersect(Ellipsoid(hc, hr, hrot), band, above)
            self.add("groove_fat", groove, self.hu_fat + 15, "mediastinal_fat", post=True)
            self.add("heart_core", Intersect(shell, band), myo, "blood", post=True)
        if c:
            for off, rr in (((8, 12, -5), (0.55, 0.5, 0.5)), ((-10, -18, 2), (0.55, 0.45, 0.55))):
                self.add("heart_blood", Ellipsoid(hc + np.array(off) * S, hr * rr, hrot), self.hu_blood, "blood",
                         post=True)
        # fat pad in the cardiophrenic angles, in front of and below the heart
        pad = Intersect(Ellipsoid((12 * S, -48 * S, L["domeR"] - 4 * S), np.array([60, 38, 32]) * S), above)
        self.cut(pad)
        self.add("cardiophrenic_fat", pad, self.hu_fat + 15, "mediastinal_fat", post=True)
        la = np.array([2 * S, 22 * S, L["heart"] + 40 * S])
        self.add("left_atrium", Ellipsoid(la, np.array([34, 20, 20]) * S), self.hu_blood, "blood", post=True)
        self.cut(Ellipsoid(la, np.array([38, 24, 24]) * S))
        # vessels: (name, knots, radius start, radius end, HU, carve margin)
        za, zh = L["arch"], L["heart"]
        r_ao = 14 * S * rng.normal(1, 0.08)
        vessels = [
            ("aorta", [(8, -8, zh + 20), (-10, -22, zh + 55), (-14, -22, za - 30), (-4, -12, za - 4), (10, 5, za),
                       (22, 24, za - 8), (24, 48, za - 35), (22, 52, -60), (16, 50, L["domeR"] - 20),
                       (8, 40, L["domeR"] - 80), (4, 30, L["iliac"] + 10), (0, 30, L["iliac"] - 10)],
             r_ao, r_ao * 0.75, self.hu_blood, 4),
            ("pulmonary_trunk", [(22, -40, zh + 30), (16, -25, zh + 55), (10, -6, -14)], 13 * S, 12 * S,
             self.hu_blood, 4),
            ("right_pa", [(10, -6, -14), (-18, 2, -18), (-42, 8, -20)], 10 * S, 9 * S, self.hu_blood, 3),
            ("left_pa", [(10, -6, -14), (30, 4, -6), (44, 14, -12)], 10 * S, 9 * S, self.hu_blood, 3),
            ("svc", [(-30, -14, za + 15), (-30, -10, zh + 45)], 10 * S, 10 * S, self.hu_blood * 0.8 + 10, 3),
            ("left_brachiocephalic_vein", [(60, -5, L["apex"] - 5), (10, -28, za + 18), (-30, -14, za + 15)],
             7 * S, 9 * S, self.hu_blood * 0.8 + 10, 3),
            ("right_brachiocephalic_vein", [(-55, -5, L["apex"] - 5), (-30, -14, za + 15)], 7 * S, 9 * S,
             self.hu_blood * 0.8 + 10, 3),
            ("brachiocephalic_artery", [(-4, -12, za), (-14, -8, L["apex"] + 20), (-25, -5, L["neck_top"])],
             7 * S, 5 * S, self.hu_blood, 3),
            ("left_carotid", [(6, 0, za + 2), (18, 0, L["apex"] + 20), (25, -5, L["neck_top"])], 4.5 * S, 4 * S,
             self.hu_blood, 3),
            ("left_subclavian", [(16, 12, za), (30, 18, L["apex"] + 8), (75, 15, L["apex"] - 2)], 5 * S, 5 * S,
             self.hu_blood, 3),
            ("right_jugular", [(-32, 2, L["neck_top"]), (-40, 0, L["apex"] + 15), (-55, -5, L["apex"] - 5)],
             7 * S, 7 * S, self.hu_blood * 0.7 + 15, 0),
            ("left_jugular", [(32, 2, L["neck_top"]), (40, 0, L["apex"] + 15), (60, -5, L["apex"] - 5)],
             7 * S, 7 * S, self.hu_blood * 0.7 + 15, 0),
            ("right_veins", [(-40, 22, zh + 32), (5, 25, zh + 40)], 7 * S, 8 * S, self.hu_blood, 3),
            ("left_veins", [(40, 25, zh + 38), (5, 25, zh + 40)], 7 * S, 8 * S, self.hu_blood, 3),
        ]
        sc = np.array([S, S, 1.0])
        self.hilum = {"right_artery": np.array([-42 * S, 8 * S, -20.0]), "left_artery": np.array([44 * S, 14 * S, -12.0]),
                      "right_vein": np.array([-40 * S, 22 * S, zh + 32]), "left_vein": np.array([40 * S, 25 * S, zh + 38])}
        for name, knots, r0, r1, hu, margin in vessels:
            k = np.array(knots, dtype=float) * sc
            path = smooth_path(k, max(4, 3 * len(k)))
            radii = np.linspace(r0, r1, len(path))
            for cap in tube(path, radii):
                self.add(name, cap, hu, "blood", post=True)
            if margin:
                for cap in tube(path, radii + margin * S):
                    self.cut(cap)
        # esophagus (collapsed, sometimes with a little air)
        eso = smooth_path(np.array([(5, yv(L["neck_top"]) - 22, L["neck_top"]), (6, yv(0) - 30, 0.0),
                                    (10, yv(L["heart"]) - 30, L["heart"]), (28, 20, L["domeL"] - 12),
                                    (40, 0, L["domeL"] - 35)]) * sc, 14)
        eso[:, 2] = np.interp(np.linspace(0, 4, 14), np.arange(5),
                              [L["neck_top"], 0.0, L["heart"], L["domeL"] - 12, L["domeL"] - 35])
        for cap in tube(eso, 8 * S):
            self.add("esophagus", cap, 40.0, "soft_tissue", post=True)
            self.cut(Capsule(cap.a, cap.b, cap.ra + 3 * S))
        if rng.random() < 0.4:
            for cap in tube(eso[2:8], 2.5 * S):
                self.add("esophagus_air", cap, -1000.0, "bowel_gas", post=True)
        # thyroid
        yt = self.trachea_y(L["apex"] + 35 * S)
        for sx in (-1, 1):
            self.add("thyroid", Ellipsoid((sx * 18 * S, yt - 4 * S, L["apex"] + 35 * S), np.array([11, 10, 22]) * S),
                     float(rng.uniform(90, 120) + 60 * c), "organ", post=True)

    def trachea_y(self, z: float) -> float:
        """y of the trachea's centre at height z (anterior in the neck, mid-chest at the carina)."""
        return float(np.interp(z, [0.0, self.L["apex"], self.L["neck_top"]], [22 * self.S, 8 * self.S, -12 * self.S]))
