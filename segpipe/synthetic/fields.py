"""Intensity fields (HU) for painted structures: constants, smooth random textures and
their combinations. Every field is sampled on a :class:`~segpipe.synthetic.shapes.Grid` and
broadcasts to its shape; nothing builds per-voxel coordinate arrays."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from segpipe.synthetic.shapes import F32, Grid


class Field:
    """A scalar field in HU (or any unit) sampled on a grid: ``sample(g)`` broadcasts to g.shape."""

    def sample(self, g: Grid) -> np.ndarray | float:
        raise NotImplementedError


class Const(Field):
    def __init__(self, value: float):
        self.value = float(value)

    def sample(self, g: Grid) -> float:
        return self.value


class SmoothField(Field):
    """Smooth random field: iid normal values on a lattice of ``cell`` mm inside ``lo``..``hi``,
    interpolated with cubic B-splines (separable 4-tap gathers: no per-voxel coordinates and no
    BLAS, whose threads fight over a small machine's cores).

    ``sample`` returns ``mean + amplitude * field`` where the field has unit standard deviation
    (approximately) and its features are about ``cell`` mm wide. Deterministic given ``rng``.
    """

    _VAR = 151.0 / 315.0  # mean sum of squared cubic B-spline weights, per axis

    def __init__(self, rng: np.random.Generator, lo: Sequence[float], hi: Sequence[float], cell: float,
                 amplitude: float = 1.0, mean: float = 0.0):
        self.lo = np.asarray(lo, dtype=float) - 2 * cell
        hi = np.asarray(hi, dtype=float) + 2 * cell
        self.cell = float(cell)
        n = np.maximum(np.ceil((hi - self.lo) / cell).astype(int) + 1, 4)
        scale = amplitude / np.sqrt(self._VAR**3)
        self.coef = (rng.standard_normal((n[2], n[1], n[0]), dtype=F32) * F32(scale))
        self.mean = float(mean)

    def _taps(self, t: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray]:
        n = self.coef.shape[2 - axis]
        u = (np.asarray(t, dtype=float) - self.lo[axis]) / self.cell
        u = np.clip(u, 1.0, n - 2.000001)
        i = np.floor(u).astype(np.intp)
        f = u - i
        w = np.stack([(1 - f) ** 3 / 6, (3 * f**3 - 6 * f**2 + 4) / 6, (-3 * f**3 + 3 * f**2 + 3 * f + 1) / 6,
                      f**3 / 6], axis=1)
        w[w < 1e-6] = 0.0  # no float32 denormals (very slow arithmetic)
        return i[:, None] - 1 + np.arange(4)[None, :], w.astype(F32)

    def sample(self, g: Grid) -> np.ndarray:
        (iz, wz), (iy, wy), (ix, wx) = self._taps(g.z, 2), self._taps(g.y, 1), self._taps(g.x, 0)
        z0, y0, x0 = iz.min(), iy.min(), ix.min()
        c = self.coef[z0:iz.max() + 1, y0:iy.max() + 1, x0:ix.max() + 1]
        iz, iy, ix = iz - z0, iy - y0, ix - x0
        a = c[iz[:, 0]] * wz[:, 0, None, None]
        for k in range(1, 4):
            a += c[iz[:, k]] * wz[:, k, None, None]
        b = np.take(a, ix[:, 0], axis=2)
        b *= wx[:, 0]
        for k in range(1, 4):
            t = np.take(a, ix[:, k], axis=2)
            t *= wx[:, k]
            b += t
        out = np.take(b, iy[:, 0], axis=1)
        out *= wy[:, 0, None]
        for k in range(1, 4):
            t = np.take(b, iy[:, k], axis=1)
            t *= wy[:, k, None]
            out += t
        if self.mean:
            out += F32(self.mean)
        return out


class Affine(Field):
    """``mean + amplitude * field`` of another field (e.g. a shared texture)."""

    def __init__(self, field: Field, amplitude: float = 1.0, mean: float = 0.0):
        self.field, self.amp, self.mean = field, float(amplitude), float(mean)

    def sample(self, g: Grid) -> np.ndarray:
        v = np.asarray(self.field.sample(g), dtype=F32) * F32(self.amp)
        if self.mean:
            v += F32(self.mean)
        return v


class SharedField(Field):
    """A field shared by many items: evaluated once per slab of the grid being painted and
    sliced for each item (the renderer calls :meth:`start_slab`)."""

    def __init__(self, field: Field):
        self.field = field
        self._grid: Grid | None = None
        self._value: np.ndarray | None = None

    def start_slab(self, grid: Grid | None) -> None:
        self._grid, self._value = grid, None

    def sample(self, g: Grid) -> np.ndarray:
        full = self._grid
        if full is None:
            return np.asarray(self.field.sample(g), dtype=F32)
        if self._value is None:
            self._value = np.asarray(self.field.sample(full), dtype=F32)
        idx = []
        for sub, vec, s in ((g.z, full.z, full.spacing[2]), (g.y, full.y, full.spacing[1]), (g.x, full.x, full.spacing[0])):
            i0 = int(round((float(sub[0]) - float(vec[0])) / s))
            idx.append(slice(i0, i0 + len(sub)))
        return self._value[tuple(idx)]


class SumField(Field):
    """Sum of fields plus a linear gradient ``grad`` (HU per mm along x, y, z)."""

    def __init__(self, *fields: Field, base: float = 0.0, grad: Sequence[float] = (0.0, 0.0, 0.0),
                 origin: Sequence[float] = (0.0, 0.0, 0.0)):
        self.fields, self.base = fields, float(base)
        self.grad, self.origin = tuple(float(v) for v in grad), tuple(float(v) for v in origin)

    def sample(self, g: Grid) -> np.ndarray:
        out = np.full(g.shape, self.base, dtype=F32)
        gx, gy, gz = self.grad
        if gx:
            out += (g.X - F32(self.origin[0])) * F32(gx)
        if gy:
            out += (g.Y - F32(self.origin[1])) * F32(gy)
        if gz:
            out += (g.Z - F32(self.origin[2])) * F32(gz)
        for f in self.fields:
            out += f.sample(g)
        return out


class Ridge(Field):
    """``base + (ridge - base) * sigmoid(gain * (width - |field|))``: thin sheets along the zero
    surfaces of a smooth field (e.g. fat planes between muscles)."""

    def __init__(self, field: Field, base: Field | float, ridge: float, width: float = 0.12, gain: float = 25.0):
        self.field, self.base, self.ridge, self.width, self.gain = field, base, float(ridge), float(width), float(gain)

    def sample(self, g: Grid) -> np.ndarray:
        v = np.abs(np.asarray(self.field.sample(g), dtype=F32))
        v = (F32(self.width) - v) * F32(self.gain * 0.5)
        np.tanh(v, out=v)
        v += F32(1.0)
        v *= F32(0.5)
        base = self.base.sample(g) if isinstance(self.base, Field) else F32(self.base)
        return base + v * (F32(self.ridge) - base)


class Remap(Field):
    """``lo + (hi - lo) * sigmoid(gain * field)``: a two-tissue pattern (e.g. fat and bowel)."""

    def __init__(self, field: Field, lo: float, hi: float, gain: float = 3.0, bias: float = 0.0):
        self.field, self.lo_v, self.hi_v, self.gain, self.bias = field, float(lo), float(hi), float(gain), float(bias)

    def sample(self, g: Grid) -> np.ndarray:
        v = np.asarray(self.field.sample(g), dtype=F32) * F32(self.gain) + F32(self.bias)
        np.tanh(v * F32(0.5), out=v)  # sigmoid = (1 + tanh(v/2)) / 2
        return F32((self.lo_v + self.hi_v) / 2) + v * F32((self.hi_v - self.lo_v) / 2)
