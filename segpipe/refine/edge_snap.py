"""Rule ``edge_snap``: aerated lung's edge lies on the scan's own air/tissue boundary.

The fine stage's 1.5 mm voxels cannot place the edge closer than that; the scan's voxels can.
Where aerated lung meets tissue, the edge moves (by at most ``band_mm``, in-plane) onto the
boundary. Runs on the scan's own voxels, slice by slice.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import ndimage

from segpipe.refine._util import bounding_box, disk, map_parallel, smoothed_hu
from segpipe.refine.base import RuleReport, ScanContext

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
    """

    enabled: bool = True
    hu: tuple[float, float] = (-975.0, -450.0)
    band_mm: float = 1.5
    smooth_mm: float = 0.5


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
    air = (smooth > p.hu[0]) & (smooth < p.hu[1])
    m = lung[box]
    core = ndimage.binary_erosion(m, se, border_value=1)
    inner = m & ~core
    outer = ndimage.binary_dilation(m, se) & ~m
    if allowed is not None:
        outer &= np.asarray(allowed, bool)[box]
    # aerated lung at least one band deep inside the edge is the evidence for both moves: a
    # partial-volume rim (a collapsed lobe against pneumothorax air) is not
    aerated = ndimage.binary_dilation(core & air, se, iterations=2)
    drop = inner & (smooth >= p.hu[1]) & aerated  # tissue; very dark lung (a bulla) stays
    add = outer & air & aerated
    region = out[box]
    region[drop] = False
    region[add] = True
    return out


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
