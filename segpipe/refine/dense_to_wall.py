"""Rule ``dense_to_wall``: a consolidation that reaches the chest wall, followed out to the ribs.

Against the ribs a consolidated lobe is as dense as the chest wall's muscle: only the ribs and a
thin extrapleural fat line bound it. The coarse stage's 4 mm mask of such a lobe stops 10-15 mm
short of them and the fine stage calls the rim wall. This rule grows what an earlier rule added
to the network's lung (``dense_lung``) out to the rib cage; with nothing added it does nothing.
Runs on each fine region's lattice.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import ndimage

from segpipe.refine._util import FULL, IN_PLANE, bounding_box, smoothed_hu
from segpipe.refine.base import FineContext, RuleReport

__all__ = ["DenseToWallParams", "dense_to_wall", "rule"]


@dataclass(frozen=True)
class DenseToWallParams:
    """Args:
        enabled: run the rule.
        reach_mm: how far a consolidation is followed out to the chest wall.
        wall_hu: lightly smoothed HU of consolidated lung (fat, air and bone are outside).
        smooth_mm: in-plane Gaussian sigma before the HU test.
        rib_hu: smoothed HU of rib (cortical and cancellous bone).
        rib_slab_mm: ribs within this height above or below a slice bound it (they run obliquely).
        rib_margin_mm: the lung ends this far inside the ribs' inner surface (pleura, fascia,
            innermost muscle).
        shell_mm: along the wall: within this distance of the ribs' inner surface.
        rib_bins: angular bins of the rib cage's inner radius around the body's axis.
    """

    enabled: bool = False
    reach_mm: float = 20.0
    wall_hu: tuple[float, float] = (-20.0, 80.0)
    smooth_mm: float = 1.0
    rib_hu: float = 200.0
    rib_slab_mm: float = 5.0
    rib_margin_mm: float = 3.0
    shell_mm: float = 15.0
    rib_bins: int = 120


def dense_to_wall(added: np.ndarray, lung: np.ndarray, hu: np.ndarray, spacing_xyz: tuple[float, float, float],
                  centre_yx: np.ndarray, allowed: np.ndarray | None = None,
                  p: DenseToWallParams = DenseToWallParams()) -> np.ndarray:
    """The outer rim of a consolidation that reaches the chest wall, which :func:`dense_lung`
    leaves out.

    Against the ribs a consolidated lobe is as dense as the chest wall's muscle: only the ribs
    and a thin extrapleural fat line bound it. The coarse stage's 4 mm mask of such a lobe
    stops 10-15 mm short of them and the fine stage calls the rim wall. The dense lung
    ``added`` (found by :func:`dense_lung`, ``(z, y, x)``) grows, at most
    ``p.reach_mm`` and only through voxels outside ``lung`` whose lightly smoothed HU
    lies in ``p.wall_hu`` (fat, air and bone stop it) and that lie inside the rib cage
    (``p.rib_margin_mm`` within its inner surface, from the ribs within
    ``p.rib_slab_mm`` above or below, farther from the body's axis than the consolidation):

    1. within each axial slice, *away* from the body's axis (``centre_yx``: per slice, the
       body's centre as a ``(y, x)`` voxel index of this grid): never inwards, where the
       diaphragm, heart and mediastinum meet a consolidation with the same density;
    2. from what step 1 added, up and down along the wall (within ``p.shell_mm`` of the
       ribs): the costophrenic recess beside the liver dome, below the coarse stage's lobe.

    ``allowed`` (optional) limits where it may grow (inside the body, outside the airways).
    Returns the voxels to add (not ``added`` itself)."""
    added = np.asarray(added, bool)
    out = np.zeros(added.shape, bool)
    sp_zyx = tuple(float(s) for s in reversed(spacing_xyz))
    # the growth's reach up and down (step 2), and in-plane as far again beyond it for the ribs
    box = bounding_box(added, pad=[int(np.ceil(r * p.reach_mm / s)) for r, s in zip((1, 2, 2), sp_zyx)])
    if box is None:
        return out
    slab = int(np.ceil(p.rib_slab_mm / sp_zyx[0]))
    outer = (slice(max(box[0].start - slab, 0), min(box[0].stop + slab, added.shape[0])),) + box[1:]  # + ribs above, below
    inner = slice(box[0].start - outer[0].start, box[0].stop - outer[0].start)  # box's slices within outer
    seed = added[box]
    smooth = smoothed_hu(hu[outer], [0.0] + [p.smooth_mm / s for s in sp_zyx[1:]])
    # ribs run obliquely: those within a slab above and below a slice bound it
    rib = ndimage.maximum_filter1d(smooth > p.rib_hu, size=2 * slab + 1, axis=0, mode="constant")[inner]
    smooth = smooth[inner]
    grow = (smooth > p.wall_hu[0]) & (smooth < p.wall_hu[1]) & ~np.asarray(lung, bool)[box]
    if allowed is not None:
        grow &= np.asarray(allowed, bool)[box]
    # distance from the body's axis and direction around it
    dy = (np.arange(box[1].start, box[1].stop, dtype=np.float32)[None, :, None]
          - np.asarray(centre_yx, np.float32)[box[0], 0, None, None]) * sp_zyx[1]
    dx = (np.arange(box[2].start, box[2].stop, dtype=np.float32)[None, None, :]
          - np.asarray(centre_yx, np.float32)[box[0], 1, None, None]) * sp_zyx[2]
    radius = np.hypot(dy, dx)
    sector = ((np.arctan2(dy, dx) + np.pi) * (p.rib_bins / (2 * np.pi))).astype(np.int32) % p.rib_bins
    del dy, dx
    # outwards only: not nearer the axis than the nearest seed voxel of the same slice
    far = max(seed.shape) * 1e3 * max(sp_zyx)  # the nearest seed voxel is always in the slice itself
    _, index = ndimage.distance_transform_edt(~seed, sampling=(far, sp_zyx[1], sp_zyx[2]), return_indices=True)
    seed_radius = radius[tuple(index)]
    del index
    # the rib cage around it: bone farther out than the seed (not the spine, nor an enhancing
    # vessel, nearer the axis)
    rib_radius = _rib_cage_radius(rib & (radius > seed_radius), radius, sector, p.rib_bins)[np.arange(seed.shape[0])[:, None, None], sector]
    near_wall = grow & (radius < rib_radius - p.rib_margin_mm) & (radius > rib_radius - p.shell_mm)
    grow &= (radius < rib_radius - p.rib_margin_mm) & (radius >= seed_radius)
    del rib_radius, seed_radius
    steps = int(np.ceil(p.reach_mm / min(sp_zyx[1:])))
    grown = ndimage.binary_dilation(seed, structure=IN_PLANE, iterations=steps, mask=grow | seed)
    rim = grown & ~seed
    if rim.any():  # then along the wall, up and down (the costophrenic recess beside the liver)
        steps = int(np.ceil(p.reach_mm / min(sp_zyx)))
        grown |= ndimage.binary_dilation(rim, structure=FULL, iterations=steps, mask=near_wall | rim)
    del rim, near_wall
    out[box] = grown & ~seed
    return out


def _rib_cage_radius(rib: np.ndarray, radius: np.ndarray, sector: np.ndarray, bins: int) -> np.ndarray:
    """Per slice and sector around the body's axis, the inner radius (mm) of the rib cage: the
    nearest ``rib`` voxel's ``radius`` in the sector, interpolated around the circle across
    sectors with no rib; ``(Z, bins)``. A slice with no rib at all gets 0 (nothing lies
    inside it)."""
    nz = rib.shape[0]
    out = np.full((nz, bins), np.inf, np.float32)
    z = np.broadcast_to(np.arange(nz)[:, None, None], rib.shape)
    np.minimum.at(out, (z[rib], sector[rib]), radius[rib])
    angles = np.arange(bins)
    for k in range(nz):
        seen = np.isfinite(out[k])
        out[k] = np.interp(angles, angles[seen], out[k, seen], period=bins) if seen.any() else 0.0
    return out


def rule(mask: np.ndarray, ctx: FineContext, p: DenseToWallParams) -> tuple[np.ndarray, RuleReport]:
    """Grow what earlier rules added to the network's lung in ``mask`` (a fine region's
    lattice) out to the ribs."""
    seed = mask & ~ctx.network_lung
    if not seed.any():
        return mask, RuleReport.of("dense_to_wall", ctx)
    added = dense_to_wall(seed, ctx.network_lung, ctx.hu, ctx.spacing_xyz, ctx.body_centre_yx(), allowed=ctx.inside, p=p)
    added &= ~mask
    return mask | added, RuleReport.of("dense_to_wall", ctx, added=int(np.count_nonzero(added & ctx.in_scan)))
