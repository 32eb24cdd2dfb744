"""Rule ``airways``: the trachea and main bronchi are never lung.

They are tracked on the coarse grid (:func:`track_airways`, from the trachea down through the
lumen) and cleared from the lungs on the scan's grid. A scan without the trachea (lung bases,
abdomen) has none.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import ndimage

from segpipe.refine._util import CROSS2, component_sizes, map_parallel
from segpipe.refine.base import RuleReport, ScanContext

__all__ = ["AirwaysParams", "trachea_seed", "track_airways", "coarse_airways", "rule"]


@dataclass(frozen=True)
class AirwaysParams:
    """Args:
        enabled: run the rule (off: no airways are tracked, nothing is cleared).
        lumen_hu: airway lumen on the coarse grid is darker than this.
        max_area_cm2: tracking stops where the air regions of a slice add up to more than this.
    """

    enabled: bool = True
    lumen_hu: float = -900.0
    max_area_cm2: float = 8.0


SPECK_CM2 = 0.3  # air regions smaller than this (a few coarse voxels) are specks of noise, not air spaces
TRACHEA_FROM_SPINE_MM = 25.0  # the trachea's centre lies this close to the spine's in left-right (a view that cuts the body)
TUBE_SLICES = 3  # the trachea's seed goes on below, as tracking follows it, through this many slices
VERTEBRA_HALF_MM = 8.0  # the spine's column, either side of its centre: narrower than the trachea, whose rows there hold its lumen
VERTEBRA_HU = 200.0  # bone there on the coarse grid ...
VERTEBRA_CM2 = 3.0  # ... in a region of this size or more per slice


def _trachea_like(air: np.ndarray, spacing_xyz: tuple[float, float, float],
                  centre_x: float | None = None, reach_x: float | None = None,
                  vertebra: np.ndarray | None = None) -> tuple[list[np.ndarray], int]:
    """The air regions of one slice that could be the trachea (0.7 - 8 cm^2, within ``reach_x``
    columns of ``centre_x``: by default 15 % of the slice's width of its left-right middle;
    round: neither extent over 2.5 times the other; whole: not on the slice's border, where
    the view cuts it and its shape is unknown; where ``vertebra`` (the slice's bone in the
    spine's column) is given, not level with it: the trachea lies in front of the spine, a
    lung's apex beside it), and how many air regions of :data:`SPECK_CM2` or more the slice holds."""
    pixel_cm2 = spacing_xyz[0] * spacing_xyz[1] / 100.0
    nx = air.shape[1]
    centre_x = nx / 2 if centre_x is None else centre_x
    reach_x = nx * 0.15 if reach_x is None else reach_x
    labels, n = ndimage.label(air, structure=CROSS2)
    areas = np.bincount(labels.ravel(), minlength=n + 1)[1:] * pixel_cm2
    out = []
    for i in np.flatnonzero((areas >= 0.7) & (areas <= 8.0)) + 1:
        region = labels == i
        ys, xs = np.nonzero(region)
        on_border = xs.min() == 0 or ys.min() == 0 or xs.max() == nx - 1 or ys.max() == air.shape[0] - 1
        if on_border or abs(xs.mean() - centre_x) > reach_x or (vertebra is not None and vertebra[ys.min():ys.max() + 1].any()):
            continue
        extent = (np.ptp(xs) + 1) * spacing_xyz[0], (np.ptp(ys) + 1) * spacing_xyz[1]
        if max(extent) <= 2.5 * min(extent):
            out.append(region)
    return out, int(np.count_nonzero(areas >= SPECK_CM2))


def trachea_seed(candidates: np.ndarray, spacing_xyz: tuple[float, float, float], *,
                 centre_x: float | None = None, reach_x: float | None = None,
                 vertebra: np.ndarray | None = None) -> tuple[int, np.ndarray] | None:
    """The trachea's highest slice: the highest slice holding a small, round air region near
    the left-right middle of the body's air (area 0.7 - 8 cm^2; near ``centre_x`` within
    ``reach_x`` columns where they are given, and not level with ``vertebra``, the bone in the
    spine's column, see :func:`_trachea_like`) with at most one other air
    region beside it (the esophagus; above the lung apices), that goes on below through
    :data:`TUBE_SLICES` slices as one or two air regions (the main bronchi below the carina) of
    8 cm^2 at most together (a tube, as :func:`track_airways` follows it). Specks of air under
    :data:`SPECK_CM2` (noise, the corners of a coarse matrix) do not count as other air; the
    lung apices and a lung's air broken up by its vessels do. Returns (z index, 2D mask)."""
    nz = candidates.shape[0]
    pixel_cm2 = spacing_xyz[0] * spacing_xyz[1] / 100.0
    for z in range(nz - 1, TUBE_SLICES - 2, -1):  # LPS: high z is superior
        regions, count = _trachea_like(candidates[z], spacing_xyz, centre_x, reach_x, None if vertebra is None else vertebra[z])
        if count > 2:
            continue
        for region in regions:
            below = region
            for k in range(1, TUBE_SLICES):
                labels, _ = ndimage.label(candidates[z - k], structure=CROSS2)
                on = np.unique(labels[ndimage.binary_dilation(below, structure=CROSS2) & (labels > 0)])
                below = np.isin(labels, on)
                if not 1 <= on.size <= 2 or below.sum() * pixel_cm2 > 8.0:  # the trachea, or its two main bronchi
                    break
            else:
                return z, region
    return None


def track_airways(air: np.ndarray, spacing_xyz: tuple[float, float, float], *, max_area_cm2: float = 8.0,
                  centre_x: float | None = None, reach_x: float | None = None, vertebra: np.ndarray | None = None) -> np.ndarray:
    """Trachea and main bronchi in a canonical ``(z, y, x)`` mask of air inside the body,
    followed slice by slice from :func:`trachea_seed` downward: a slice keeps the air regions
    that overlap the previous slice's airway (one pixel of slack). Tracking stops, keeping
    nothing of that slice, as soon as it stops looking like a trachea or two main bronchi:
    more than two regions, together larger than ``max_area_cm2``, or more than twice the
    previous slice's area (plus 1 cm^2). That is where the airway meets the lung's own air
    (the hilum) or dark, fragmented parenchyma, so no lung is taken. Empty when no trachea is
    found (a scan of the lung bases or the abdomen). ``centre_x``, ``reach_x``, ``vertebra``: where the
    trachea may lie (:func:`trachea_seed`)."""
    out = np.zeros(air.shape, bool)
    seed = trachea_seed(air, spacing_xyz, centre_x=centre_x, reach_x=reach_x, vertebra=vertebra)
    if seed is None:
        return out
    z0, region = seed
    out[z0] = region
    pixel_cm2 = spacing_xyz[0] * spacing_xyz[1] / 100.0
    previous = float(region.sum()) * pixel_cm2
    for z in range(z0 - 1, -1, -1):
        reach = ndimage.binary_dilation(out[z + 1], structure=CROSS2)
        labels, n = ndimage.label(air[z], structure=CROSS2)
        if n == 0:
            break
        touching = np.unique(labels[reach & (labels > 0)])
        if not 1 <= touching.size <= 2:
            break
        area = float(np.bincount(labels.ravel(), minlength=n + 1)[touching].sum()) * pixel_cm2
        if area > max_area_cm2 or area > 2.0 * previous + 1.0:
            break
        out[z] = np.isin(labels, touching)
        previous = area
    return out


def _large_bone(bone: np.ndarray, spacing_xyz: tuple[float, float, float]) -> np.ndarray:
    """Per axial slice, the regions of ``bone`` of :data:`VERTEBRA_CM2` or more: a vertebra, not
    the calcified rings of the larynx and trachea around the airway."""
    pixel_cm2 = spacing_xyz[0] * spacing_xyz[1] / 100.0
    out = np.zeros(bone.shape, bool)
    for z in np.flatnonzero(bone.any(axis=(1, 2))):
        labels, n = ndimage.label(bone[z], structure=np.ones((3, 3), bool))
        areas = component_sizes(labels, n) * pixel_cm2
        areas[0] = 0.0
        out[z] = areas[labels] >= VERTEBRA_CM2
    return out


def coarse_airways(hu_zyx: np.ndarray, body: np.ndarray, spacing_xyz: tuple[float, float, float],
                   p: AirwaysParams = AirwaysParams(), *, spine_x: float | None = None) -> np.ndarray:
    """The trachea and main bronchi on the coarse grid: tracked through the lumen inside the
    body (:func:`track_airways`) and grown by one voxel in-plane for the walls' partial
    volume. Empty when the rule is off. ``spine_x``: the spine's column where the view cuts the
    body at a side (the view's middle is then not the body's): the trachea, which lies in
    front of the spine, is sought within :data:`TRACHEA_FROM_SPINE_MM` of its column, and not
    level with the bone in its column (:data:`VERTEBRA_HALF_MM` either side, regions of
    :data:`VERTEBRA_CM2` or more: a vertebra; the apex of a lung beside the spine is level with it)."""
    if not p.enabled:
        return np.zeros(body.shape, bool)
    near_spine: dict[str, Any] = {}
    if spine_x is not None:
        column = np.abs(np.arange(hu_zyx.shape[2]) - spine_x) * spacing_xyz[0] <= VERTEBRA_HALF_MM
        vertebra = _large_bone(np.asarray(hu_zyx) > VERTEBRA_HU, spacing_xyz) & body & column
        near_spine = {"centre_x": spine_x, "reach_x": TRACHEA_FROM_SPINE_MM / spacing_xyz[0], "vertebra": vertebra}
    tracked = track_airways((hu_zyx < p.lumen_hu) & body, spacing_xyz, max_area_cm2=p.max_area_cm2, **near_spine)
    in_plane = ndimage.generate_binary_structure(3, 1) & np.array([0, 1, 0], bool)[:, None, None]
    return ndimage.binary_dilation(tracked, structure=in_plane)


def rule(mask: np.ndarray, ctx: ScanContext, p: AirwaysParams) -> tuple[np.ndarray, RuleReport]:
    """Clear the trachea and main bronchi from ``mask`` (scan grid, in place)."""

    def one(z: int) -> int:
        sl = mask[z]
        airway = (sl > 0) & ctx.airways(z)
        sl[airway] = 0
        return int(np.count_nonzero(airway))

    return mask, RuleReport.of("airways", ctx, removed=sum(map_parallel(one, mask.shape[0])))
