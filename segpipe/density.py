"""Lung density measures from a CT scan (HU) and its lung label map.

Per lung (right = label 1, left = label 2) and for both lungs together, on the scan's own
voxels (nothing is resampled), :func:`lung_density` gives

- ``volume_ml``: the mask's volume (mL);
- ``mld_hu``: mean lung density, the mean HU of the lung's voxels;
- ``pd15_hu``: the 15th percentile of the lung's HU histogram, in HU (COPDGene's "Perc15"),
  computed with :func:`numpy.percentile`'s default ``"linear"`` method;
- ``laa950_pct``, ``laa910_pct``: % of the lung's voxels below -950 / -910 HU (strictly below);
- ``haa_pct``: % of the lung's voxels from -700 to -250 HU, both bounds included;

each also per zone: the upper, middle and lower thirds of each lung's cranio-caudal height,
measured in physical coordinates (LPS: +z superior), from the top of the lung's highest voxel
to the bottom of its lowest, in three equal heights; a voxel belongs to the zone that holds
its centre. The zones of "both lungs" are each lung's own zones together (the right lung's
upper third with the left lung's upper third...). ``docs/density.md`` has the definitions and
their anchors.

Values outside the CT range: a voxel below :data:`NO_DATA_BELOW_HU` (-1500 HU: the padding of
a scan's corners, -2048 or -3024) holds no measurement; inside the mask it counts in
``volume_ml`` but in none of the density measures (``excluded_ml`` says how much there was).
Values from -1500 up to -1024 HU are clipped to -1024 (noise around air, which a 12-bit CT
scale cannot store below -1024), values above 3071 HU to 3071.

Memory and time: the scan and the label are read through views, slab by slab; only the lungs'
voxel values (int16 for most scans, int32 for other integer types, else float32) and one int8
zone code per lung voxel are copied, never a float64 copy of the scan. Scans in whole HU (any
integer type, or floats that are all whole numbers, and a whole ``hu_offset``) are measured
exactly from one histogram per lung and zone (1 HU bins; about 0.6 s and 125 MB for 35 M lung
voxels of a 512 x 512 x 600 int16 scan); other scans from the values themselves (sorting for
PD15: a few seconds).

Example:
    >>> import numpy as np
    >>> hu = np.full((6, 4, 4), -800, np.int16); hu[0, 0, :2] = -960
    >>> lab = np.ones((6, 4, 4), np.uint8)
    >>> d = lung_density(hu, lab, (1.0, 1.0, 1.0))
    >>> round(d.right.whole.laa950_pct, 4)      # 2 of 96 voxels
    2.0833
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from segpipe.errors import GeometryError, InputError

if TYPE_CHECKING:
    import SimpleITK as sitk

__all__ = [
    "MEASURES",
    "ZONES",
    "SIDES",
    "NO_DATA_BELOW_HU",
    "CT_RANGE_HU",
    "RegionDensity",
    "LungDensity",
    "DensityReport",
    "lung_density",
    "image_density",
]

#: The measures of a region, in column order (units in the names).
MEASURES = ("volume_ml", "mld_hu", "pd15_hu", "laa950_pct", "laa910_pct", "haa_pct")
#: Cranio-caudal thirds of a lung, from the top.
ZONES = ("upper", "middle", "lower")
#: The lungs measured: label 1, label 2, and both together.
SIDES = ("right", "left", "both")
#: Voxels below this hold no measurement (scanner padding); they are left out of every measure
#: but the volume.
NO_DATA_BELOW_HU = -1500.0
#: The CT range: other values are clipped into it (after the padding is left out).
CT_RANGE_HU = (-1024.0, 3071.0)
#: Thresholds of the measures (HU).
LAA950_HU = -950.0
LAA910_HU = -910.0
HAA_RANGE_HU = (-700.0, -250.0)
#: Percentile of PD15, and numpy's method for it.
PD_PERCENT = 15.0
PD_METHOD = "linear"

_SLAB_VOXELS = 2_000_000  # voxels per slab while the lungs' values are gathered
_LABELS = {"right": 1, "left": 2}


@dataclass(frozen=True)
class RegionDensity:
    """The density measures of one region (a lung, both lungs, or a zone).

    Args:
        volume_ml: the region's volume in mL (all its mask voxels).
        mld_hu: mean lung density in HU; None for a region without measured voxels.
        pd15_hu: 15th percentile of the HU values (numpy ``"linear"``), in HU; None when empty.
        laa950_pct: % of the measured voxels below -950 HU; None when empty.
        laa910_pct: % of the measured voxels below -910 HU; None when empty.
        haa_pct: % of the measured voxels in -700..-250 HU (bounds included); None when empty.
    """

    volume_ml: float
    mld_hu: float | None
    pd15_hu: float | None
    laa950_pct: float | None
    laa910_pct: float | None
    haa_pct: float | None

    def to_dict(self) -> dict[str, float | None]:
        """JSON-able ``{measure: value}`` (mL to 0.01, HU to 0.1, % to 0.001)."""
        digits = {"volume_ml": 2, "mld_hu": 1, "pd15_hu": 1}
        return {m: _rounded(getattr(self, m), digits.get(m, 3)) for m in MEASURES}


@dataclass(frozen=True)
class LungDensity:
    """One lung's (or both lungs') measures, whole and per cranio-caudal third.

    Args:
        whole: the whole lung.
        upper, middle, lower: its thirds (see the module docstring).
        height_mm: cranio-caudal height the thirds divide (mm); None for both lungs, whose
            zones are each lung's own, and for an empty lung.
        excluded_ml: mask volume (mL) whose voxels held no measurement (below -1500 HU).
    """

    whole: RegionDensity
    upper: RegionDensity
    middle: RegionDensity
    lower: RegionDensity
    height_mm: float | None
    excluded_ml: float

    def zone(self, name: str) -> RegionDensity:
        """The region ``"whole"``, ``"upper"``, ``"middle"`` or ``"lower"``."""
        if name not in ("whole", *ZONES):
            raise KeyError(name)
        return getattr(self, name)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able: the whole lung's measures, ``height_mm``, ``excluded_ml`` and ``zones``."""
        return {
            **self.whole.to_dict(),
            "height_mm": _rounded(self.height_mm, 1),
            "excluded_ml": _rounded(self.excluded_ml, 2),
            "zones": {z: getattr(self, z).to_dict() for z in ZONES},
        }


@dataclass(frozen=True)
class DensityReport:
    """Density measures of the right lung, the left lung and both lungs."""

    right: LungDensity
    left: LungDensity
    both: LungDensity

    def to_dict(self) -> dict[str, Any]:
        """JSON-able: ``right``, ``left``, ``both`` (see :meth:`LungDensity.to_dict`) and
        ``method`` (the definitions used)."""
        return {side: getattr(self, side).to_dict() for side in SIDES} | {"method": method()}

    def row(self) -> dict[str, float | None]:
        """Flat ``{column: value}`` for a table: ``<side>_<measure>`` and
        ``<side>_<zone>_<measure>`` for every side, zone and measure (full precision)."""
        out: dict[str, float | None] = {}
        for side in SIDES:
            lung: LungDensity = getattr(self, side)
            for zone in ("whole", *ZONES):
                prefix = side if zone == "whole" else f"{side}_{zone}"
                region = lung.zone(zone)
                out.update({f"{prefix}_{m}": getattr(region, m) for m in MEASURES})
            out[f"{side}_excluded_ml"] = lung.excluded_ml
        return out


def columns() -> list[str]:
    """The column names of :meth:`DensityReport.row`, in order."""
    cols = []
    for side in SIDES:
        for zone in ("whole", *ZONES):
            prefix = side if zone == "whole" else f"{side}_{zone}"
            cols += [f"{prefix}_{m}" for m in MEASURES]
        cols.append(f"{side}_excluded_ml")
    return cols


def method() -> dict[str, Any]:
    """The definitions behind the numbers (stored with every report)."""
    return {
        "grid": "the scan's own voxels (not resampled)",
        "pd15": f"{PD_PERCENT:g}th percentile of HU, numpy '{PD_METHOD}', in HU",
        "laa950": f"% of voxels < {LAA950_HU:g} HU",
        "laa910": f"% of voxels < {LAA910_HU:g} HU",
        "haa": f"% of voxels in [{HAA_RANGE_HU[0]:g}, {HAA_RANGE_HU[1]:g}] HU",
        "zones": "equal cranio-caudal thirds of each lung's physical height; both lungs: each lung's own thirds",
        "no_data_below_hu": NO_DATA_BELOW_HU,
        "clip_hu": list(CT_RANGE_HU),
        "calibration": None,
    }


def lung_density(
    hu_zyx: np.ndarray,
    label_zyx: np.ndarray,
    spacing_xyz: Sequence[float],
    direction: Sequence[float] = (1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0),
    *,
    hu_offset: float = 0.0,
) -> DensityReport:
    """Density measures of the lungs in ``label_zyx`` from the HU values in ``hu_zyx``.

    Args:
        hu_zyx: the scan, ``(z, y, x)`` array in HU (any numeric type; int16 is read without a
            float copy).
        label_zyx: the lung label map on the same grid: 1 right lung, 2 left lung (other
            values are ignored).
        spacing_xyz: voxel spacing (x, y, z) in mm.
        direction: the grid's direction cosines, 9 values row by row (SimpleITK's
            ``GetDirection()``): column ``a`` is the LPS direction of index axis ``a`` (x, y,
            z). Only its third row (how each index axis moves along the patient's
            cranio-caudal axis) matters, for the zones.
        hu_offset: added to every value first (scans stored as HU + 1024: -1024).

    Returns:
        The right lung's, the left lung's and both lungs' measures.

    Raises:
        InputError: the arrays are not 3D or differ in shape.
        GeometryError: a spacing is not positive or the direction is not 9 finite values.
    """
    hu = np.asarray(hu_zyx)
    label = np.asarray(label_zyx)
    if hu.ndim != 3 or label.shape != hu.shape:
        raise InputError(f"expected a 3D scan and a label of the same shape, got {hu.shape} and {label.shape}")
    spacing = np.asarray(spacing_xyz, dtype=np.float64)
    if spacing.shape != (3,) or not np.all(spacing > 0):
        raise GeometryError(f"expected three positive spacings (x, y, z) in mm, got {tuple(spacing_xyz)}")
    cosines = np.asarray(direction, dtype=np.float64)
    if cosines.shape != (9,) or not np.all(np.isfinite(cosines)):
        raise GeometryError(f"expected a direction of 9 finite values, got {tuple(direction)}")
    voxel_ml = float(np.prod(spacing)) / 1000.0
    # mm along the patient's cranio-caudal axis (LPS z, superior +) per index step along x, y, z
    dz_per_index = cosines.reshape(3, 3)[2] * spacing
    half_voxel_mm = 0.5 * float(np.abs(dz_per_index).sum())

    values, zones, heights = _gather(hu, label, dz_per_index, half_voxel_mm)
    lungs = {}
    if values["right"].dtype.kind == "f" and all(_whole(v) for v in values.values()):
        values = {side: v.astype(np.int32) for side, v in values.items()}  # a float scan of whole HU
    if values["right"].dtype.kind in "iu" and float(hu_offset).is_integer():
        # whole HU: one histogram per lung and zone holds every measure exactly
        hists = {side: _histogram(values.pop(side), zones.pop(side), int(hu_offset)) for side in _LABELS}
        for side in _LABELS:
            lungs[side] = _lung_from_histogram(hists[side], voxel_ml, heights[side])
        lungs["both"] = _lung_from_histogram(hists["right"] + hists["left"], voxel_ml, None)
        return DensityReport(**lungs)
    cleaned = {}
    for side in ("right", "left"):
        v, keep = _clean(values.pop(side), hu_offset)
        cleaned[side] = (v, keep)
        lungs[side] = _lung(v, zones[side], keep, voxel_ml, heights[side])
    v_both = np.concatenate([cleaned["right"][0], cleaned["left"][0]])
    zone_both = np.concatenate([zones["right"], zones["left"]])
    keeps = [k if k is not None else np.ones(zones[s].size, bool) for s, (_, k) in cleaned.items()]
    keep_both = None if all(k is None for _, k in cleaned.values()) else np.concatenate(keeps)
    lungs["both"] = _lung(v_both, zone_both, keep_both, voxel_ml, None)
    return DensityReport(**lungs)


def image_density(image: sitk.Image, label: sitk.Image, *, hu_offset: float = 0.0) -> DensityReport:
    """:func:`lung_density` of a SimpleITK scan (HU) and its lung label map on the same grid.

    Raises:
        InputError: not 3D, or the label holds values other than 0, 1 and 2.
        GeometryError: the label is not on the scan's grid.
    """
    import SimpleITK as sitk

    from segpipe.spatial import same_geometry

    if image.GetDimension() != 3 or label.GetDimension() != 3:
        raise InputError(f"expected a 3D scan and label, got {image.GetDimension()}D and {label.GetDimension()}D")
    if not same_geometry(image, label, atol_mm=1e-3):
        raise GeometryError(
            f"expected the label on the scan's grid (size {image.GetSize()}, spacing {image.GetSpacing()}, "
            f"origin {image.GetOrigin()}), got size {label.GetSize()}, spacing {label.GetSpacing()}, origin {label.GetOrigin()}"
        )
    lab = sitk.GetArrayViewFromImage(label)
    if not np.issubdtype(lab.dtype, np.integer):
        if not np.all(np.isin(lab, (0.0, 1.0, 2.0))):
            raise InputError("expected a lung label map with values 0, 1 and 2, got other values")
        lab = lab.astype(np.uint8)
    elif lab.size and (int(lab.min()) < 0 or int(lab.max()) > 2):
        raise InputError(f"expected a lung label map with values 0, 1 and 2, got values {int(lab.min())}..{int(lab.max())}")
    return lung_density(sitk.GetArrayViewFromImage(image), lab, image.GetSpacing(), image.GetDirection(), hu_offset=hu_offset)


# ----------------------------------------------------------------------------- internals
def _gather(hu: np.ndarray, label: np.ndarray, dz_per_index: np.ndarray, half_voxel_mm: float,
            ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], dict[str, float | None]]:
    """Each lung's voxel values (int16 kept, other types as float32), each voxel's zone (int8:
    0 upper, 1 middle, 2 lower third of the lung's height) and the lung's height (mm; None when
    empty), read slab by slab over the lungs' bounding box in two passes: the lungs' extents
    along the patient's axis, then their values and zones."""
    if hu.dtype in (np.int16, np.int8, np.uint8, np.float32):
        keep_type = hu.dtype
    else:  # uint16 (HU + 1024), int32...: exact in int32; float64: float32
        keep_type = np.dtype(np.int32 if hu.dtype.kind in "iu" else np.float32)
    values = {s: np.zeros(0, keep_type) for s in _LABELS}
    zones = {s: np.zeros(0, np.int8) for s in _LABELS}
    heights: dict[str, float | None] = {s: None for s in _LABELS}
    found = [np.flatnonzero(np.logical_or.reduce(label, axis=axes)) for axes in ((1, 2), (0, 2), (0, 1))]
    if not all(f.size for f in found):
        return values, zones, heights
    (k0, k1), (j0, j1), (i0, i1) = ((int(f[0]), int(f[-1]) + 1) for f in found)
    lab, img = label[k0:k1, j0:j1, i0:i1], hu[k0:k1, j0:j1, i0:i1]
    ci, cj, ck = (np.float32(c) for c in dz_per_index)
    # position along the patient's axis (mm, LPS z, from the grid's first voxel) of a slab's voxels
    plane = (cj * np.arange(j0, j1, dtype=np.float32))[:, None] + (ci * np.arange(i0, i1, dtype=np.float32))[None, :]
    step = max(1, _SLAB_VOXELS // max(1, plane.size))
    slabs = [(s0, lab[s0:s0 + step]) for s0 in range(0, lab.shape[0], step)]

    def along(s0: int, n: int) -> np.ndarray:
        return (ck * np.arange(k0 + s0, k0 + s0 + n, dtype=np.float32))[:, None, None] + plane[None]

    count = dict.fromkeys(_LABELS, 0)
    low = dict.fromkeys(_LABELS, np.inf)
    high = dict.fromkeys(_LABELS, -np.inf)
    # a slab's arrays are flat and contiguous: a boolean index then needs no index arrays
    for s0, lab_slab in slabs:  # pass 1: how many voxels, how high and how low
        z_slab = None
        for side, value in _LABELS.items():
            sel = (lab_slab == value).ravel()
            n = int(np.count_nonzero(sel))
            if n:
                z_slab = along(s0, lab_slab.shape[0]).ravel() if z_slab is None else z_slab
                z = z_slab[sel]
                count[side] += n
                low[side], high[side] = min(low[side], float(z.min())), max(high[side], float(z.max()))
    top = {}
    for side in _LABELS:
        if count[side]:
            top[side] = high[side] + half_voxel_mm
            heights[side] = top[side] - (low[side] - half_voxel_mm)
            values[side] = np.empty(count[side], keep_type)
            zones[side] = np.empty(count[side], np.int8)
    filled = dict.fromkeys(_LABELS, 0)
    for s0, lab_slab in slabs:  # pass 2: the values and the zones
        z_slab = img_slab = None
        for side, value in _LABELS.items():
            if not count[side]:
                continue
            sel = (lab_slab == value).ravel()
            n = int(np.count_nonzero(sel))
            if not n:
                continue
            z_slab = along(s0, lab_slab.shape[0]).ravel() if z_slab is None else z_slab
            img_slab = np.ascontiguousarray(img[s0:s0 + step]).ravel() if img_slab is None else img_slab
            at = slice(filled[side], filled[side] + n)
            values[side][at] = img_slab[sel]
            third = z_slab[sel]  # zone = floor((top - z) * 3 / height), in place
            np.subtract(np.float32(top[side]), third, out=third)
            third *= np.float32(3.0 / heights[side])  # type: ignore[operator]
            np.floor(third, out=third)
            zones[side][at] = np.clip(third, 0, 2, out=third)
            filled[side] += n
    return values, zones, heights


_BINS = int(CT_RANGE_HU[1] - CT_RANGE_HU[0]) + 2  # one per whole HU of the CT range, then one for no data
_HIST_CHUNK = 1_000_000  # voxels per bincount call (its int64 index copy stays small)


def _histogram(v: np.ndarray, zone: np.ndarray, hu_offset: int) -> np.ndarray:
    """Counts of whole-HU values per zone: ``(3, _BINS)`` int64, row = zone, column = HU -
    CT_RANGE_HU[0] (values clipped to the CT range), last column = no data (below
    :data:`NO_DATA_BELOW_HU`)."""
    hist = np.zeros(3 * _BINS, np.int64)
    lo, hi = int(CT_RANGE_HU[0]), int(CT_RANGE_HU[1])
    for start in range(0, v.size, _HIST_CHUNK):
        chunk = v[start:start + _HIST_CHUNK].astype(np.int32) + np.int32(hu_offset)
        nodata = chunk < NO_DATA_BELOW_HU
        np.clip(chunk, lo, hi, out=chunk)
        chunk -= np.int32(lo)
        chunk[nodata] = _BINS - 1
        chunk += zone[start:start + _HIST_CHUNK].astype(np.int32) * np.int32(_BINS)
        hist += np.bincount(chunk, minlength=3 * _BINS)
    return hist.reshape(3, _BINS)


def _whole(v: np.ndarray) -> bool:
    """Whether the float values ``v`` are all whole numbers within the int32 range."""
    for start in range(0, v.size, _HIST_CHUNK):
        chunk = v[start:start + _HIST_CHUNK]
        if not (np.all(np.abs(chunk) < 2**31 - 1) and np.array_equal(chunk, np.rint(chunk))):
            return False
    return True


def _lung_from_histogram(hist: np.ndarray, voxel_ml: float, height: float | None) -> LungDensity:
    """A lung's measures from its :func:`_histogram`."""
    measured = hist[:, :-1]
    regions = [_region_from_histogram(measured.sum(axis=0), int(hist.sum()), voxel_ml)]
    regions += [_region_from_histogram(measured[z], int(hist[z].sum()), voxel_ml) for z in range(3)]
    return LungDensity(*regions, height_mm=height, excluded_ml=int(hist[:, -1].sum()) * voxel_ml)


def _region_from_histogram(counts: np.ndarray, n_mask: int, voxel_ml: float) -> RegionDensity:
    """The measures of a region from its counts per whole HU (``counts[i]``: voxels of
    CT_RANGE_HU[0] + i HU), as :func:`_region` computes them from the values."""
    n = int(counts.sum())
    if n == 0:
        return RegionDensity(n_mask * voxel_ml, None, None, None, None, None)
    hu = np.arange(counts.size, dtype=np.float64) + CT_RANGE_HU[0]
    below = np.cumsum(counts)  # below[i]: voxels at or below hu[i]

    def at_rank(r: int) -> float:  # the r-th smallest value (0-based)
        return float(hu[int(np.searchsorted(below, r, side="right"))])

    h = (n - 1) * PD_PERCENT / 100.0
    lo = int(math.floor(h))
    a, b, t = at_rank(lo), at_rank(min(lo + 1, n - 1)), h - lo
    haa = (hu >= HAA_RANGE_HU[0]) & (hu <= HAA_RANGE_HU[1])
    return RegionDensity(
        volume_ml=n_mask * voxel_ml,
        mld_hu=float(np.dot(counts, hu)) / n,
        pd15_hu=a + (b - a) * t if t < 0.5 else b - (b - a) * (1.0 - t),
        laa950_pct=100.0 * int(counts[hu < LAA950_HU].sum()) / n,
        laa910_pct=100.0 * int(counts[hu < LAA910_HU].sum()) / n,
        haa_pct=100.0 * int(counts[haa].sum()) / n,
    )


def _clean(v: np.ndarray, hu_offset: float) -> tuple[np.ndarray, np.ndarray | None]:
    """The values in HU with the padding left out and the rest clipped to the CT range; and
    the mask of the kept voxels (None: all kept)."""
    if hu_offset:
        v = v.astype(np.float32) + np.float32(hu_offset)
    keep = None
    if v.size and float(v.min()) < NO_DATA_BELOW_HU:
        keep = v >= NO_DATA_BELOW_HU
        v = v[keep]
    if v.size and (float(v.min()) < CT_RANGE_HU[0] or float(v.max()) > CT_RANGE_HU[1]):
        lo, hi = (float(b) for b in CT_RANGE_HU) if v.dtype.kind == "f" else (int(b) for b in CT_RANGE_HU)
        v = np.clip(v, lo, hi).astype(v.dtype, copy=False)  # int16 stays int16, float32 stays float32
    return v, keep


def _lung(v: np.ndarray, zone: np.ndarray, keep: np.ndarray | None, voxel_ml: float, height: float | None) -> LungDensity:
    """A lung's measures: ``v`` its kept values, ``zone`` the zone code (0 upper, 1 middle, 2
    lower) of every voxel of the mask, ``keep`` which of them were kept (None: all)."""
    counts = [int(np.count_nonzero(zone == z)) for z in range(3)]  # (bincount would copy to int64)
    kept_zone = zone if keep is None else zone[keep]
    regions = [_region(v, voxel_ml, int(zone.size))]
    for z in range(3):
        regions.append(_region(v[kept_zone == z], voxel_ml, int(counts[z])))
    excluded = (int(zone.size) - int(v.size)) * voxel_ml
    return LungDensity(*regions, height_mm=height, excluded_ml=excluded)


def _region(v: np.ndarray, voxel_ml: float, n_mask: int) -> RegionDensity:
    """The measures of the values ``v`` of a region with ``n_mask`` mask voxels."""
    n = int(v.size)
    if n == 0:
        return RegionDensity(n_mask * voxel_ml, None, None, None, None, None)
    lo, hi = HAA_RANGE_HU
    return RegionDensity(
        volume_ml=n_mask * voxel_ml,
        mld_hu=float(v.mean(dtype=np.float64)),
        pd15_hu=_percentile_linear(v, PD_PERCENT),
        laa950_pct=float(100.0 * np.count_nonzero(v < LAA950_HU) / n),
        laa910_pct=float(100.0 * np.count_nonzero(v < LAA910_HU) / n),
        haa_pct=float(100.0 * np.count_nonzero((v >= lo) & (v <= hi)) / n),
    )


def _percentile_linear(v: np.ndarray, percent: float) -> float:
    """numpy's ``percentile(v, percent, method="linear")`` with one copy of ``v`` in its own
    type (numpy's own makes a float64 copy of an int16 array): the values at ranks
    floor(h) and floor(h) + 1, h = (n - 1) * percent / 100, interpolated linearly."""
    h = (v.size - 1) * percent / 100.0
    lo = int(math.floor(h))
    hi = min(lo + 1, v.size - 1)
    part = np.partition(v, [lo, hi] if hi != lo else [lo])
    a, b = float(part[lo]), float(part[hi])
    del part
    t = h - lo
    return a + (b - a) * t if t < 0.5 else b - (b - a) * (1.0 - t)


def _rounded(value: float | None, digits: int) -> float | None:
    if value is None or not math.isfinite(value):
        return None
    return round(float(value), digits)
