"""Rule ``edge_snap``: aerated lung's edge lies on the scan's own air/tissue boundary.

The fine stage's 1.5 mm voxels cannot place the edge closer than that; the scan's voxels can.
Where aerated lung meets tissue, the edge moves (by at most ``band_mm``, in-plane) onto the
boundary. Runs on the scan's own voxels, slice by slice.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy import ndimage

from segpipe.refine._util import bounding_box, disk, map_parallel, smoothed_hu
from segpipe.refine.base import RuleReport, ScanContext
from segpipe.spatial import AIR_HU, LUNG_HU

__all__ = ["EdgeSnapParams", "snap_edges", "snap_label_edges", "rule"]


@dataclass(frozen=True)
class EdgeSnapParams:
    """Args:
        enabled: run the rule.
        hu: a voxel at aerated lung's edge is lung when its in-plane smoothed HU is inside this
            range (half way between lung, about -850, and soft tissue, about +40, is -405; the
            lower end keeps vessel-free air at -1000, a pneumothorax or the air outside a
            collapsed lung, from being taken for lung).
        band_mm: in-plane reach of the move (whole pixels, at least one): about one fine voxel.
        smooth_mm: in-plane Gaussian sigma before the HU test (noise).
        darker_hu: an outside voxel darker than the aerated lung next to it (its mean within
            ``4 * band_mm``) by more than this is not added (None: no such test). Where lung
            meets tissue the edge's partial-volume voxels are brighter than the lung; where
            it meets free air (a pneumothorax around a collapsed lobe) they are darker, and
            that air is not lung.
        follow_lung: the upper end of ``hu`` rises by half of what the slice's lung (the median
            of its smoothed voxels below :data:`AERATED_MAX_HU`, inside the edge, where they
            cover :data:`FOLLOW_MIN_MM2` or more: not the partial volume of a lung's tip) lies
            above :data:`segpipe.spatial.LUNG_HU` (-850): the half-way point of a denser lung
            (an expiratory scan, diffuse ground glass: at -600 HU the edge's half-lung voxels lie
            near -280). It never falls.
    """

    enabled: bool = True
    hu: tuple[float, float] = (-975.0, -450.0)
    band_mm: float = 1.5
    smooth_mm: float = 0.5
    darker_hu: float | None = 150.0
    follow_lung: bool = True


AERATED_MAX_HU = -200.0  # denser lung is not aerated (consolidation, vessels): not the lung's density
FOLLOW_MIN_MM2 = 400.0  # lung inside the edge that tells the slice's lung density


def snap_edges(lung: np.ndarray, hu: np.ndarray, spacing_yx: tuple[float, float], allowed: np.ndarray | None = None,
               p: EdgeSnapParams = EdgeSnapParams()) -> np.ndarray:
    """One axial slice's ``lung`` mask with its edge moved onto the scan's own air/tissue
    boundary, within ``p.band_mm`` of where the fine stage put it.

    The edge moves only where the lung next to it is aerated (smoothed HU in ``p.hu``): a band
    voxel that is tissue is dropped when aerated lung lies just inside it, an outside voxel that
    is air-like is added when the lung inside the band is aerated. Where the lung itself is
    dense (consolidation against the chest wall, a collapsed lobe, ground glass) nothing moves:
    no HU test can place that border. ``allowed`` (same shape, optional) limits what may be
    added (inside the body, not in the airways). Returns a new mask."""
    lung = np.asarray(lung, bool)
    ry, rx = (p.band_mm / float(s) for s in spacing_yx)
    se = disk(ry, rx)
    pad = 3 * max(se.shape)
    box = bounding_box(lung, pad=pad)
    out = lung.copy()
    if box is None:
        return out
    sigma = tuple(p.smooth_mm / float(s) for s in spacing_yx)
    smooth = smoothed_hu(hu[box], sigma)
    m = lung[box]
    core = ndimage.binary_erosion(m, se, border_value=1)
    upper = p.hu[1]
    if p.follow_lung:
        lung_hu = smooth[core & (smooth > p.hu[0]) & (smooth < AERATED_MAX_HU)]
        if lung_hu.size * float(spacing_yx[0]) * float(spacing_yx[1]) >= FOLLOW_MIN_MM2:
            upper += max(0.0, float(np.median(lung_hu)) - LUNG_HU) / 2.0
    air = (smooth > p.hu[0]) & (smooth < upper)
    inner = m & ~core
    outer = ndimage.binary_dilation(m, se) & ~m
    if allowed is not None:
        outer &= np.asarray(allowed, bool)[box]
    # aerated lung at least one band deep inside the edge is the evidence for both moves: a
    # partial-volume rim (a collapsed lobe against pneumothorax air) is not
    aerated = ndimage.binary_dilation(core & air, se, iterations=2)
    drop = inner & (smooth >= upper) & aerated  # tissue; very dark lung (a bulla) stays
    add = outer & air & aerated
    if p.darker_hu is not None and add.any():
        add &= ~_darker_than_lung(hu[box], smooth, core & air, sigma, (ry, rx), p.darker_hu)
    region = out[box]
    region[drop] = False
    region[add] = True
    return out


def _darker_than_lung(hu: np.ndarray, smooth: np.ndarray, lung: np.ndarray, sigma: tuple[float, ...],
                      band_px: tuple[float, float], darker_hu: float) -> np.ndarray:
    """Where the scan is darker by more than ``darker_hu`` than the mean of ``lung``'s voxels
    (``smooth``) within four bands (a box window; False where no lung is that near). The scan
    is smoothed here without its voxels at or below air (:data:`segpipe.spatial.AIR_HU`): the
    padding beyond a scanner's reconstruction circle is no air next to the lung, and lung that
    the circle cuts is still added up to it."""
    size = tuple(2 * int(np.ceil(4 * b)) + 1 for b in band_px)
    mean, weight = _masked_mean(smooth, lung, lambda a: ndimage.uniform_filter(a, size, mode="constant"))
    near = weight > 1e-3
    hu = np.asarray(hu)
    value = smooth
    if (hu <= AIR_HU).any():  # else the same as ``smooth``
        seen_mean, seen = _masked_mean(hu.astype(np.float32), hu > AIR_HU,
                                       lambda a: ndimage.gaussian_filter(a, sigma=sigma, mode="nearest"))
        value = np.where(seen > 0.05, seen_mean, np.float32(AIR_HU))
    return near & (value < mean - np.float32(darker_hu))


def _masked_mean(values: np.ndarray, mask: np.ndarray, smooth: Callable[[np.ndarray], np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """``smooth`` of ``values`` over ``mask`` divided by ``smooth`` of ``mask`` (0 where no mask
    is near), and that weight."""
    weight = smooth(mask.astype(np.float32))
    total = smooth(np.where(mask, values, np.float32(0)))
    return np.divide(total, weight, out=np.zeros_like(total), where=weight > 1e-3), weight


def snap_label_edges(label: np.ndarray, hu: np.ndarray, spacing_xyz: tuple[float, float, float],
                     p: EdgeSnapParams = EdgeSnapParams()) -> int:
    """:func:`snap_edges` on each lung of a ``(z, y, x)`` label array, slice by slice (voxels
    are added only where the label is background); returns the number of voxels changed."""
    spacing_yx = (float(spacing_xyz[1]), float(spacing_xyz[0]))

    def one(z: int) -> int:
        sl = label[z]
        changed = 0
        for value in np.unique(sl[sl > 0]) if sl.any() else ():
            lung = sl == value
            snapped = snap_edges(lung, hu[z], spacing_yx, sl == 0, p)
            changed += int(np.count_nonzero(snapped != lung))
            sl[lung & ~snapped] = 0
            sl[snapped & ~lung] = value
        return changed

    return sum(map_parallel(one, label.shape[0]))


def rule(mask: np.ndarray, ctx: ScanContext, p: EdgeSnapParams) -> tuple[np.ndarray, RuleReport]:
    """Snap the lungs' edges in ``mask`` (scan grid, lung where non-zero, before the sides are
    set; in place), adding only inside the body and outside the airways."""
    hu = ctx.hu

    def one(z: int) -> tuple[int, int]:
        sl = mask[z]
        lung = sl > 0
        if not lung.any():
            return 0, 0
        snapped = snap_edges(lung, hu[z], ctx.spacing_yx, ctx.inside(z), p)
        added, removed = snapped & ~lung, lung & ~snapped
        sl[removed] = 0
        sl[added] = 1
        return int(np.count_nonzero(added)), int(np.count_nonzero(removed))

    counts = map_parallel(one, mask.shape[0])
    return mask, RuleReport.of("edge_snap", ctx, added=sum(c[0] for c in counts), removed=sum(c[1] for c in counts))
