"""Always-on step ``body``: a lung lies inside the body.

The body is found on the coarse grid (:func:`body_interior`); on the scan's grid, lung outside
it (air around the patient inside a lung's box, gaps under the table) is cleared.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import ndimage

from segpipe.refine._util import FULL, map_parallel
from segpipe.refine.base import RuleReport, ScanContext
from segpipe.refine.components import fill_slice_holes

__all__ = ["BodyParams", "body_interior", "skin_slack", "body_midline_x", "rule"]


@dataclass(frozen=True)
class BodyParams:
    """Args:
        hu: tissue above this HU is body; what it encloses in an axial slice is inside it.
    """

    hu: float = -500.0


def body_midline_x(hu_zyx: np.ndarray, threshold_hu: float = -500.0) -> float | None:
    """Mean x index of the body (voxels above ``threshold_hu``, the table included, which is
    centred too), or ``None`` when there is none."""
    counts = (hu_zyx > threshold_hu).sum(axis=(0, 1))
    total = counts.sum()
    return float((counts * np.arange(len(counts))).sum() / total) if total else None


def body_interior(hu_zyx: np.ndarray, threshold_hu: float = -500.0, *, slack_voxels: int = 0) -> np.ndarray:
    """Voxels inside the body: per axial slice, what tissue above ``threshold_hu`` encloses
    (the lungs and bowel gas are holes in the body's cross-section; the air around the
    patient, the out-of-field padding and gaps under the table are not). Lungs never lie
    outside it, so a "lung" there (outside air next to the patient) is a false positive.
    ``slack_voxels`` grows the region (face neighbours) for partial volume at the skin."""
    return skin_slack(fill_slice_holes(hu_zyx > threshold_hu), slack_voxels)


def skin_slack(body: np.ndarray, voxels: int = 1) -> np.ndarray:
    """A body mask from :func:`body_interior` grown by ``voxels`` (face neighbours), for
    partial volume at the skin (the same as ``body_interior(hu, slack_voxels=voxels)``
    without filling the slices again)."""
    return ndimage.binary_dilation(body, structure=FULL, iterations=voxels) if voxels else body


def rule(mask: np.ndarray, ctx: ScanContext, p: BodyParams) -> tuple[np.ndarray, RuleReport]:
    """Clear the lung outside the body in ``mask`` (scan grid, in place)."""

    def one(z: int) -> int:
        sl = mask[z]
        outside = (sl > 0) & ~ctx.body(z)
        sl[outside] = 0
        return int(np.count_nonzero(outside))

    return mask, RuleReport.of("body", ctx, removed=sum(map_parallel(one, mask.shape[0])))
