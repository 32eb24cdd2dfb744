"""Geometric primitives with partial-volume occupancy, and smooth random fields.

Every shape lives in the canonical frame in mm (x: patient left, y: posterior, z: superior) and
answers one question: what fraction of each voxel of a :class:`Grid` it fills. The fraction is
first-order exact for a box-shaped voxel: with ``f`` an implicit function (negative inside) and
``w = |df/dx| sx + |df/dy| sy + |df/dz| sz`` the range of ``f`` across the voxel, the occupancy is
``clip(0.5 - f / w, 0, 1)``. Thin tubes use the overlap of their diameter with the voxel's width
instead, so a vessel thinner than a voxel gets its true (small) fraction.

Grids are given by 1D coordinate vectors (voxel centres), so nothing here builds a 3 x N
coordinate array: arrays broadcast as ``z[:, None, None]``, ``y[None, :, None]``, ``x[None, None, :]``
and every occupancy has shape ``(nz, ny, nx)``, float32.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from segpipe.synthetic.fields import Field

F32 = np.float32
INF = np.inf


# ----------------------------------------------------------------------------- grids
@dataclass(frozen=True)
class Grid:
    """Axis-aligned voxel grid (or part of one) in the canonical frame.

    Attributes:
        x, y, z: 1D float32 voxel-centre coordinates in mm, increasing.
        spacing: (sx, sy, sz) in mm.
    """

    x: np.ndarray
    y: np.ndarray
    z: np.ndarray
    spacing: tuple[float, float, float]

    @property
    def shape(self) -> tuple[int, int, int]:
        return (len(self.z), len(self.y), len(self.x))

    @property
    def X(self) -> np.ndarray:  # noqa: N802 - broadcast views
        return self.x[None, None, :]

    @property
    def Y(self) -> np.ndarray:  # noqa: N802
        return self.y[None, :, None]

    @property
    def Z(self) -> np.ndarray:  # noqa: N802
        return self.z[:, None, None]

    def window(self, lo: np.ndarray, hi: np.ndarray) -> tuple[tuple[slice, slice, slice], Grid] | None:
        """Index slices (z, y, x) and sub-grid of the voxels whose centres lie within a box
        enlarged by one voxel (so partial-volume edges are kept), or None when empty."""
        slices = []
        for vec, a, b, s in ((self.z, lo[2], hi[2], self.spacing[2]), (self.y, lo[1], hi[1], self.spacing[1]),
                             (self.x, lo[0], hi[0], self.spacing[0])):
            n = len(vec)
            i0 = 0 if a == -INF else int(np.searchsorted(vec, a - s, side="left"))
            i1 = n if b == INF else int(np.searchsorted(vec, b + s, side="right"))
            if i1 <= i0:
                return None
            slices.append(slice(i0, i1))
        sz, sy, sx = slices
        return (sz, sy, sx), Grid(self.x[sx], self.y[sy], self.z[sz], self.spacing)

    def scaled(self, centre: Sequence[float], factor: Sequence[float]) -> Grid:
        """The grid seen from a frame scaled by ``factor`` about ``centre`` (p' = c + (p - c) / k)."""
        c, k = centre, factor
        return Grid(
            (c[0] + (self.x - c[0]) / k[0]).astype(F32),
            (c[1] + (self.y - c[1]) / k[1]).astype(F32),
            (c[2] + (self.z - c[2]) / k[2]).astype(F32),
            (self.spacing[0] / k[0], self.spacing[1] / k[1], self.spacing[2] / k[2]),
        )


def ramp(f: np.ndarray, w: np.ndarray | float) -> np.ndarray:
    """Occupancy ``clip(0.5 - f / w, 0, 1)`` computed in place on ``f`` (float32)."""
    w = np.maximum(w, 1e-6) if isinstance(w, np.ndarray) else max(float(w), 1e-6)
    np.divide(f, w, out=f)
    np.subtract(F32(0.5), f, out=f)
    np.clip(f, 0.0, 1.0, out=f)
    return f


# ----------------------------------------------------------------------------- shapes
class Shape:
    """Base class: a bounding box ``lo``/``hi`` (mm, may be infinite) and :meth:`occupancy`."""

    lo: np.ndarray
    hi: np.ndarray

    def occupancy(self, g: Grid) -> np.ndarray:
        """Fraction (0..1) of each voxel of ``g`` inside the shape, float32 of ``g.shape``
        (or broadcastable to it)."""
        raise NotImplementedError


def _box(lo: Sequence[float], hi: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    return np.asarray(lo, dtype=float), np.asarray(hi, dtype=float)


class Ellipsoid(Shape):
    """Ellipsoid with semi-axes ``radii`` (mm) along the rows of ``rotation`` (3x3, world axes
    when None), centred at ``centre``."""

    def __init__(self, centre: Sequence[float], radii: Sequence[float], rotation: np.ndarray | None = None):
        self.c = np.asarray(centre, dtype=float)
        self.r = np.maximum(np.asarray(radii, dtype=float), 1e-3)
        self.R = None if rotation is None else np.asarray(rotation, dtype=float)
        if self.R is None:
            ext = self.r
        else:  # half-extent of a rotated ellipsoid along each world axis
            ext = np.sqrt(((self.R * self.r[:, None]) ** 2).sum(axis=0))
        self.lo, self.hi = self.c - ext, self.c + ext

    def occupancy(self, g: Grid) -> np.ndarray:
        sx, sy, sz = g.spacing
        dx, dy, dz = g.X - F32(self.c[0]), g.Y - F32(self.c[1]), g.Z - F32(self.c[2])
        if self.R is None:
            ax, ay, az = (F32(1.0 / v**2) for v in self.r)
            f = dx * dx * ax + dy * dy * ay
            f = f + (dz * dz * az - F32(1.0))
            w = np.abs(dx) * F32(2 * sx) * ax + np.abs(dy) * F32(2 * sy) * ay
            w = w + np.abs(dz) * F32(2 * sz) * az
            return ramp(f, w)
        f = None
        gx = gy = gz = None
        for i in range(3):
            r0, r1, r2 = (F32(v) for v in self.R[i])
            u = dx * r0 + dy * r1
            u = u + dz * r2
            inv = F32(1.0 / self.r[i] ** 2)
            f = u * u * inv if f is None else f + u * u * inv
            u *= F32(2.0) * inv
            gx = u * r0 if gx is None else gx + u * r0
            gy = u * r1 if gy is None else gy + u * r1
            gz = u * r2 if gz is None else gz + u * r2
        f -= F32(1.0)
        w = np.abs(gx) * F32(sx) + np.abs(gy) * F32(sy) + np.abs(gz) * F32(sz)
        return ramp(f, w)


class Capsule(Shape):
    """Tube from ``a`` to ``b`` with radius ``ra`` at ``a`` and ``rb`` at ``b`` (rounded ends).

    Occupancy is the overlap of the tube's local diameter with the voxel's width across the tube,
    times ``min(1, 2 r / w)`` so that a tube thinner than a voxel keeps its true cross-section
    area (summed over the voxels around it) instead of smearing a too-large one.
    """

    def __init__(self, a: Sequence[float], b: Sequence[float], ra: float, rb: float | None = None):
        self.a = np.asarray(a, dtype=float)
        self.b = np.asarray(b, dtype=float)
        self.ra, self.rb = float(ra), float(ra if rb is None else rb)
        r = max(self.ra, self.rb)
        self.lo = np.minimum(self.a, self.b) - r
        self.hi = np.maximum(self.a, self.b) + r

    def occupancy(self, g: Grid) -> np.ndarray:
        sx, sy, sz = g.spacing
        d = self.b - self.a
        L2 = float(d @ d)
        px, py, pz = g.X - F32(self.a[0]), g.Y - F32(self.a[1]), g.Z - F32(self.a[2])
        if L2 < 1e-9:
            t = np.zeros((1, 1, 1), dtype=F32)
        else:
            t = px * F32(d[0] / L2) + py * F32(d[1] / L2)
            t = t + pz * F32(d[2] / L2)
            np.clip(t, 0.0, 1.0, out=t)
        qx = px - t * F32(d[0])
        qy = py - t * F32(d[1])
        qz = pz - t * F32(d[2])
        rho = qx * qx + qy * qy
        rho = rho + qz * qz  # not in place: a zero-length capsule's terms broadcast to the grid here
        np.sqrt(rho, out=rho)
        w = np.abs(qx) * F32(sx) + np.abs(qy) * F32(sy)
        w = w + np.abs(qz) * F32(sz)
        inv = rho + F32(1e-6)
        np.divide(w, inv, out=w)
        np.maximum(w, F32(min(sx, sy, sz)), out=w)
        r = t * F32(self.rb - self.ra) + F32(self.ra) if self.rb != self.ra else F32(self.ra)
        # overlap of [-r, r] with [rho - w/2, rho + w/2], divided by w
        half = w * F32(0.5)
        hi = np.minimum(rho + half, r)
        lo = np.maximum(rho - half, -r)
        hi -= lo
        np.maximum(hi, 0.0, out=hi)
        hi /= w
        np.minimum(hi, 1.0, out=hi)
        hi *= np.minimum(F32(2.0) * r / w, F32(1.0))  # thin tubes: conserve the cross-section area
        return hi


class CapsuleSet(Shape):
    """Many tapered capsules (vessel trees, bronchi, ribs) evaluated together, vectorised over
    the voxels of all their boxes; overlapping capsules combine by maximum occupancy.

    Args:
        a, b: (K, 3) end points in mm.
        ra, rb: (K,) radii at ``a`` and ``b`` in mm.
    """

    def __init__(self, a: np.ndarray, b: np.ndarray, ra: np.ndarray, rb: np.ndarray):
        self.a = np.asarray(a, dtype=float).reshape(-1, 3)
        self.b = np.asarray(b, dtype=float).reshape(-1, 3)
        self.ra = np.broadcast_to(np.asarray(ra, dtype=float), (len(self.a),)).copy()
        self.rb = np.broadcast_to(np.asarray(rb, dtype=float), (len(self.a),)).copy()
        r = np.maximum(self.ra, self.rb)[:, None]
        self.clo = np.minimum(self.a, self.b) - r
        self.chi = np.maximum(self.a, self.b) + r
        self.lo = self.clo.min(axis=0) if len(self.a) else np.zeros(3)
        self.hi = self.chi.max(axis=0) if len(self.a) else np.zeros(3)

    @classmethod
    def from_capsules(cls, caps: Sequence[Capsule]) -> CapsuleSet:
        return cls(np.array([c.a for c in caps]), np.array([c.b for c in caps]), np.array([c.ra for c in caps]),
                   np.array([c.rb for c in caps]))

    def grown(self, margin: float) -> CapsuleSet:
        return CapsuleSet(self.a, self.b, self.ra + margin, self.rb + margin)

    def occupancy(self, g: Grid) -> np.ndarray:
        out = np.zeros(g.shape, dtype=F32)
        sx, sy, sz = g.spacing
        vecs = (g.x, g.y, g.z)
        sp = (sx, sy, sz)
        i0, i1 = [], []
        for ax in range(3):
            v = vecs[ax]
            i0.append(np.searchsorted(v, self.clo[:, ax] - sp[ax], side="left"))
            i1.append(np.searchsorted(v, self.chi[:, ax] + sp[ax], side="right"))
        n = [np.maximum(i1[ax] - i0[ax], 0) for ax in range(3)]
        counts = n[0] * n[1] * n[2]
        keep = np.nonzero(counts > 0)[0]
        if not len(keep):
            return out
        for start in range(0, len(keep), 4096):  # bounded memory
            self._paint(out, g, keep[start:start + 4096], i0, n, counts)
        return out

    def _paint(self, out, g, sel, i0, n, counts) -> None:
        sx, sy, sz = g.spacing
        cnt = counts[sel]
        total = int(cnt.sum())
        cid = np.repeat(sel, cnt)
        local = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(cnt) - cnt, cnt)
        nx, ny = n[0][cid], n[1][cid]
        ix = local % nx
        rest = local // nx
        iy = rest % ny
        iz = rest // ny
        ix += i0[0][cid]
        iy += i0[1][cid]
        iz += i0[2][cid]
        a, d = self.a[cid].astype(F32), (self.b - self.a)[cid].astype(F32)
        px = g.x[ix] - a[:, 0]
        py = g.y[iy] - a[:, 1]
        pz = g.z[iz] - a[:, 2]
        l2 = (d * d).sum(axis=1)
        t = (px * d[:, 0] + py * d[:, 1] + pz * d[:, 2]) / np.maximum(l2, F32(1e-9))
        np.clip(t, 0.0, 1.0, out=t)
        px -= t * d[:, 0]
        py -= t * d[:, 1]
        pz -= t * d[:, 2]
        rho = np.sqrt(px * px + py * py + pz * pz)
        w = (np.abs(px) * F32(sx) + np.abs(py) * F32(sy) + np.abs(pz) * F32(sz)) / (rho + F32(1e-6))
        np.maximum(w, F32(min(sx, sy, sz)), out=w)
        r = (self.ra[cid] + t * (self.rb[cid] - self.ra[cid])).astype(F32)
        half = w * F32(0.5)
        occ = np.minimum(rho + half, r) - np.maximum(rho - half, -r)
        np.maximum(occ, 0.0, out=occ)
        occ /= w
        np.minimum(occ, 1.0, out=occ)
        occ *= np.minimum(F32(2.0) * r / w, F32(1.0))  # thin tubes: conserve the cross-section area
        nz_ = occ > 0
        flat = (iz[nz_] * out.shape[1] + iy[nz_]) * out.shape[2] + ix[nz_]
        np.maximum.at(out.reshape(-1), flat, occ[nz_])


class Section(Shape):
    """Prism with elliptical cross-sections varying along z: at height z the section is
    ``((x - xc)/a)^2 + ((y - yc)/b)^2 <= 1`` with ``b = b_ant`` in front of the centre (y < yc)
    and ``b_post`` behind it. Parameters are callables of the z vector (mm) returning arrays.
    The section exists for ``z_lo <= z <= z_hi`` (flat, partial-volume ends); ``y_max``
    (optional callable) flattens the back (e.g. where the patient lies on the table).
    """

    def __init__(self, z_lo: float, z_hi: float, xc: Callable, yc: Callable, a: Callable, b_ant: Callable,
                 b_post: Callable, extent_xy: tuple[float, float, float, float], y_max: Callable | None = None):
        self.z_lo, self.z_hi = float(z_lo), float(z_hi)
        self.f_xc, self.f_yc, self.f_a, self.f_ba, self.f_bp, self.f_ymax = xc, yc, a, b_ant, b_post, y_max
        x0, x1, y0, y1 = extent_xy
        self.lo, self.hi = _box((x0, y0, z_lo), (x1, y1, z_hi))

    def occupancy(self, g: Grid) -> np.ndarray:
        sx, sy, sz = g.spacing
        z = g.z
        xc, yc = self.f_xc(z).astype(F32), self.f_yc(z).astype(F32)
        a = np.maximum(self.f_a(z), 1e-3).astype(F32)
        ba = np.maximum(self.f_ba(z), 1e-3).astype(F32)
        bp = np.maximum(self.f_bp(z), 1e-3).astype(F32)
        dx = g.X - xc[:, None, None]
        dy = g.Y - yc[:, None, None]
        b = np.where(dy < 0, ba[:, None, None], bp[:, None, None])
        ia = (1.0 / a**2)[:, None, None]
        ib = 1.0 / b**2
        f = dx * dx * ia + (dy * dy * ib - F32(1.0))
        w = np.abs(dx) * (F32(2 * sx) * ia) + np.abs(dy) * (F32(2 * sy) * ib)
        occ = ramp(f, w)
        zc = np.minimum((z - F32(self.z_lo)) / F32(sz) + F32(0.5), (F32(self.z_hi) - z) / F32(sz) + F32(0.5))
        zc = np.clip(zc, 0.0, 1.0)
        if np.any(zc < 1):
            np.minimum(occ, zc[:, None, None], out=occ)
        if self.f_ymax is not None:
            ym = self.f_ymax(z).astype(F32)[:, None, None]
            flat = np.clip(F32(0.5) - (g.Y - ym) / F32(sy), 0.0, 1.0)
            np.minimum(occ, flat, out=occ)
        return occ


class HalfSpace(Shape):
    """``n . (p - point) <= 0`` (``n`` need not be unit length); unbounded."""

    def __init__(self, point: Sequence[float], normal: Sequence[float]):
        self.p = np.asarray(point, dtype=float)
        n = np.asarray(normal, dtype=float)
        self.n = n / np.linalg.norm(n)
        self.lo, self.hi = np.full(3, -INF), np.full(3, INF)

    def occupancy(self, g: Grid) -> np.ndarray:
        n = self.n
        f = (g.X - F32(self.p[0])) * F32(n[0]) + (g.Y - F32(self.p[1])) * F32(n[1])
        f = f + (g.Z - F32(self.p[2])) * F32(n[2])
        w = abs(n[0]) * g.spacing[0] + abs(n[1]) * g.spacing[1] + abs(n[2]) * g.spacing[2]
        return ramp(f, w)


class Implicit(Shape):
    """Shape from a function ``fn(g) -> (f, w)`` (f negative inside, w its range across a voxel)."""

    def __init__(self, fn: Callable[[Grid], tuple[np.ndarray, np.ndarray | float]], lo: Sequence[float],
                 hi: Sequence[float]):
        self.fn = fn
        self.lo, self.hi = _box(lo, hi)

    def occupancy(self, g: Grid) -> np.ndarray:
        f, w = self.fn(g)
        return ramp(np.array(f, dtype=F32, copy=True), w)


class Intersect(Shape):
    """Fuzzy intersection (minimum of occupancies)."""

    def __init__(self, *shapes: Shape):
        self.shapes = shapes
        self.lo = np.max([s.lo for s in shapes], axis=0)
        self.hi = np.min([s.hi for s in shapes], axis=0)

    def occupancy(self, g: Grid) -> np.ndarray:
        occ = np.broadcast_to(self.shapes[0].occupancy(g), g.shape).astype(F32, copy=True)
        for s in self.shapes[1:]:
            np.minimum(occ, s.occupancy(g), out=occ)
        return occ


class Union(Shape):
    """Fuzzy union (maximum); each member is evaluated only inside its own box."""

    def __init__(self, *shapes: Shape):
        self.shapes = shapes
        self.lo = np.min([s.lo for s in shapes], axis=0)
        self.hi = np.max([s.hi for s in shapes], axis=0)

    def occupancy(self, g: Grid) -> np.ndarray:
        occ = np.zeros(g.shape, dtype=F32)
        for s in self.shapes:
            win = g.window(s.lo, s.hi)
            if win is not None:
                sl, sub = win
                np.maximum(occ[sl], s.occupancy(sub), out=occ[sl])
        return occ


class Subtract(Shape):
    """``base`` minus the ``cutters`` (each evaluated only inside its own box)."""

    def __init__(self, base: Shape, *cutters: Shape):
        self.base, self.cutters = base, cutters
        self.lo, self.hi = base.lo, base.hi

    def occupancy(self, g: Grid) -> np.ndarray:
        occ = np.broadcast_to(self.base.occupancy(g), g.shape).astype(F32, copy=True)
        for s in self.cutters:
            win = g.window(s.lo, s.hi)
            if win is not None:
                sl, sub = win
                view = occ[sl]
                if view.max() <= 0:
                    continue
                np.minimum(view, F32(1.0) - s.occupancy(sub), out=view)
        return occ


class Scaled(Shape):
    """``shape`` shrunk (factor < 1) or grown about ``centre`` by per-axis ``factor``."""

    def __init__(self, shape: Shape, centre: Sequence[float], factor: Sequence[float]):
        self.shape, self.c, self.k = shape, np.asarray(centre, float), np.asarray(factor, float)
        self.lo = self.c + (shape.lo - self.c) * self.k
        self.hi = self.c + (shape.hi - self.c) * self.k

    def occupancy(self, g: Grid) -> np.ndarray:
        return self.shape.occupancy(g.scaled(self.c, self.k))


def tube(points: np.ndarray, radii: Sequence[float] | float) -> list[Capsule]:
    """Capsules along a polyline ``points`` (N, 3) with radius per point (or one radius)."""
    pts = np.asarray(points, dtype=float)
    r = np.broadcast_to(np.asarray(radii, dtype=float), (len(pts),))
    return [Capsule(pts[i], pts[i + 1], r[i], r[i + 1]) for i in range(len(pts) - 1)]


def smooth_path(knots: Sequence[Sequence[float]], n: int) -> np.ndarray:
    """``n`` points on a smooth (Catmull-Rom) curve through ``knots`` (K, 3), mm."""
    k = np.asarray(knots, dtype=float)
    if len(k) < 3:
        t = np.linspace(0, 1, n)[:, None]
        return k[0] + t * (k[-1] - k[0])
    p = np.vstack([2 * k[0] - k[1], k, 2 * k[-1] - k[-2]])
    seg = len(k) - 1
    u = np.linspace(0, seg, n)
    i = np.minimum(u.astype(int), seg - 1)
    t = (u - i)[:, None]
    p0, p1, p2, p3 = p[i], p[i + 1], p[i + 2], p[i + 3]
    return 0.5 * ((2 * p1) + (-p0 + p2) * t + (2 * p0 - 5 * p1 + 4 * p2 - p3) * t**2 + (-p0 + 3 * p1 - 3 * p2 + p3) * t**3)


# ----------------------------------------------------------------------------- paint items
#: Tissue ids of the optional tissue map (the topmost painted structure per voxel).
TISSUES: dict[str, int] = {
    "air": 0, "table": 1, "skin": 2, "fat": 3, "muscle": 4, "cortical_bone": 5, "cancellous_bone": 6,
    "lung": 7, "vessel": 8, "airway": 9, "bronchus": 10, "blood": 11, "organ": 12, "bowel_gas": 13,
    "effusion": 14, "nodule": 15, "consolidation": 16, "ground_glass": 17, "emphysema": 18,
    "pneumothorax": 19, "fluid": 20, "soft_tissue": 21, "mediastinal_fat": 22, "cartilage": 23,
    "padding": 24, "bowel": 25, "atelectasis": 26,
}

#: How an item interacts with the lung label (see :class:`Item`).
MODES = ("tissue", "lung_right", "lung_left", "in_lung", "carve")


@dataclass
class Item:
    """One painted structure.

    Attributes:
        name: For debugging and the tissue map.
        shape: Where it is (occupancy).
        hu: Its intensity: a number or a :class:`~segpipe.synthetic.fields.Field` (HU).
        mode: ``tissue`` (paint only; only before the lungs), ``lung_right``/``lung_left`` (paint
            parenchyma and set that lung's occupancy), ``in_lung`` (paint only inside the lungs,
            label unchanged: vessels, nodules...), ``carve`` (paint and remove from the lungs:
            airways, effusion, bone...).
        tissue: Tissue id (:data:`TISSUES`) for the tissue map.
        alpha: Opacity (0..1) multiplying the occupancy when painting.
    """

    name: str
    shape: Shape
    hu: float | Field
    mode: str = "tissue"
    tissue: int = TISSUES["soft_tissue"]
    alpha: float = 1.0
