"""Rule ``dense_lung``: a consolidated lobe the fine stage left out, where the coarse stage
is sure it is lung.

The fine stage sees 96 mm of the scan at a time; inside a consolidated lobe that is soft tissue
between ribs and liver, which it does not call lung. The coarse stage sees the whole chest
(where the lobe lies, its shape) and can. Runs on each fine region's lattice.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import ndimage

from segpipe.refine._util import bounding_box, component_sizes, ellipsoid, label, smoothed_hu, touches
from segpipe.refine.base import FineContext, RuleReport

__all__ = ["DenseLungParams", "dense_lung", "rule", "check"]


@dataclass(frozen=True)
class DenseLungParams:
    """Args:
        enabled: run the rule.
        hu: denser than this (smoothed): consolidated or collapsed lung, not aerated.
        smooth_mm: Gaussian sigma before the HU test (noise, vessels).
        open_mm: opening radius: the coarse stage's blurred rim around the lung drops out.
        min_ml: smaller regions are the coarse stage's 4 mm edge, not a lobe.
        sure: some of a region must reach this coarse lung probability.
        min_share: share of a region's voxels that must be dense.
        min_network: the fine network's lung probability, averaged over a region, must reach
            this: it gives a consolidated lobe a little (0.02-0.08 in phantoms of both families),
            and next to none (0.004-0.011) to the soft tissue that the coarse stage's edge takes in
            where a view cuts the lung.
        warn_ml: with the rule off, the report still looks (on every second voxel of the
            lattice) and warns where it would add at least this much to a scan: dense tissue the
            coarse stage is sure is lung, left out of the mask (a consolidated lobe); 0 skips it.
    """

    enabled: bool = False
    hu: float = -300.0
    smooth_mm: float = 1.5
    open_mm: float = 4.5
    min_ml: float = 10.0
    sure: float = 0.9
    min_share: float = 0.5
    min_network: float = 0.015
    warn_ml: float = 50.0


def dense_lung(lung: np.ndarray, prior: np.ndarray, hu: np.ndarray, spacing_xyz: tuple[float, float, float],
               allowed: np.ndarray | None = None, p: DenseLungParams = DenseLungParams(),
               background: np.ndarray | None = None) -> np.ndarray:
    """Dense lung the fine stage left out that the coarse stage calls lung.

    A region is added to the ``(z, y, x)`` lung mask ``lung`` when it is outside the mask, the
    coarse lung probability ``prior`` (same grid) is at least 0.5 and reaches ``p.sure``
    somewhere in it, it survives an opening of ``p.open_mm`` (the coarse stage's blurred edge
    around aerated lung does not), it holds at least ``p.min_ml``, at least ``p.min_share`` of
    it is denser than ``p.hu`` and it touches the mask. ``allowed`` (optional) limits where it
    may lie (inside the body, outside the airways); with the fine network's P(background)
    ``background`` (same grid), its mean lung probability must reach ``p.min_network``.
    Returns the voxels to add."""
    lung = np.asarray(lung, bool)
    out = np.zeros(lung.shape, bool)
    cand = (prior >= 0.5) & ~lung
    if allowed is not None:
        cand &= np.asarray(allowed, bool)
    if not (cand & (prior >= p.sure)).any():  # the usual case: no region can reach sure
        return out
    box = bounding_box(cand, pad=1)
    if box is None:
        return out
    sp_zyx = tuple(float(s) for s in reversed(spacing_xyz))
    voxel_ml = float(np.prod(sp_zyx)) / 1000.0
    c = ndimage.binary_opening(cand[box], structure=ellipsoid(tuple(p.open_mm / s for s in sp_zyx)))
    if np.count_nonzero(c) * voxel_ml < p.min_ml:
        return out
    smooth = smoothed_hu(hu[box], [p.smooth_mm / s for s in sp_zyx])
    labels, n = label(c)
    idx = np.arange(1, n + 1)
    size = component_sizes(labels, n)[1:]
    dense = ndimage.sum_labels(smooth > p.hu, labels, idx)
    sure = ndimage.maximum(prior[box], labels, idx)
    keep = np.zeros(n + 1, bool)
    keep[1:] = (size * voxel_ml >= p.min_ml) & (dense >= p.min_share * size) & (np.asarray(sure) >= p.sure)
    if background is not None and keep.any():
        keep[1:] &= 1.0 - np.asarray(ndimage.mean(background[box], labels, idx)) >= p.min_network
    if not keep.any():
        return out
    found = keep[labels]
    out[box] = found & touches(found, lung[box])
    return out


def rule(mask: np.ndarray, ctx: FineContext, p: DenseLungParams) -> tuple[np.ndarray, RuleReport]:
    """Add the dense lung the coarse stage is sure of to ``mask`` (a fine region's lattice)."""
    added = dense_lung(mask, ctx.coarse_prior(), ctx.hu, ctx.spacing_xyz, allowed=ctx.inside, p=p,
                       background=ctx.network_background)
    return mask | added, RuleReport.of("dense_lung", ctx, added=int(np.count_nonzero(added & ctx.in_scan)))


def check(mask: np.ndarray, ctx: FineContext, p: DenseLungParams) -> RuleReport:
    """With the rule off: what it would add inside the scan (``would_add_ml``), looked for on
    every second voxel of the lattice (a volume for the report's warning, at an eighth of the
    cost); the mask is not changed."""
    if p.warn_ml <= 0:
        return RuleReport("dense_lung", ctx.grid, enabled=False)
    half = (slice(None, None, 2),) * 3
    spacing = tuple(2.0 * float(v) for v in ctx.spacing_xyz)
    background = None if ctx.network_background is None else ctx.network_background[half]
    added = dense_lung(mask[half], ctx.coarse_prior()[half], ctx.hu[half], spacing, allowed=ctx.inside[half], p=p,
                       background=background)
    would = np.count_nonzero(added & ctx.in_scan[half]) * 8 * ctx.voxel_ml
    return RuleReport("dense_lung", ctx.grid, enabled=False, would_add_ml=float(would))
