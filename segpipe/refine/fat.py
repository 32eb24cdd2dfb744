"""Rule ``fat``: fat is never lung.

Pericardial fat pads and mediastinal fat next to a lung are what a network most often takes
for lung; lung itself never holds a blob of fat. Runs on the scan's own voxels, slice by slice.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import ndimage

from segpipe.refine._util import CROSS2, bounding_box, map_parallel, smoothed_hu
from segpipe.refine.base import RuleReport, ScanContext

__all__ = ["FatParams", "fat_in_lung", "clear_fat", "rule"]


@dataclass(frozen=True)
class FatParams:
    """Args:
        enabled: run the rule.
        hu: in-plane smoothed HU range of fat. Consolidation, atelectasis and effusion
            (0..+60 HU) and ground glass (-700..-300 HU) lie outside it.
        smooth_mm: in-plane Gaussian sigma before the HU test (noise).
        open_mm: in-plane opening radius: thinner bands are partial volume at the lung's edge.
        lung_mid_hu: a blob grows back to where the smoothed HU is half way between aerated
            lung (-850) and fat (-100).
    """

    enabled: bool = True
    hu: tuple[float, float] = (-200.0, -30.0)
    smooth_mm: float = 1.0
    open_mm: float = 2.0
    lung_mid_hu: float = -475.0


def fat_in_lung(lung: np.ndarray, hu: np.ndarray, spacing_yx: tuple[float, float], p: FatParams = FatParams()) -> np.ndarray:
    """The voxels of one axial slice's ``lung`` mask that are fat: in-plane smoothed HU within
    ``p.hu``, in blobs that survive an in-plane opening of ``p.open_mm`` (the thin band of
    partial volume where aerated lung meets the chest wall, the heart or a consolidation does
    not), then grown back to where the smoothed HU is ``p.lung_mid_hu``."""
    lung = np.asarray(lung, bool)
    out = np.zeros(lung.shape, bool)
    box = bounding_box(lung, pad=int(np.ceil(3 * p.smooth_mm / min(spacing_yx))))
    if box is None:
        return out
    sigma = tuple(p.smooth_mm / float(s) for s in spacing_yx)
    smooth = smoothed_hu(hu[box], sigma)
    fat = lung[box] & (smooth > p.hu[0]) & (smooth < p.hu[1])
    if not fat.any():
        return out
    radius = max(1, int(round(p.open_mm / min(spacing_yx))))
    core = ndimage.binary_opening(fat, structure=CROSS2, iterations=radius)
    if core.any():  # back out to the middle of the fat-lung transition (50 % partial volume)
        rim = lung[box] & (smooth > p.lung_mid_hu)
        core = ndimage.binary_dilation(core, structure=CROSS2, iterations=radius, mask=rim)
    out[box] = core
    return out


def clear_fat(label: np.ndarray, hu: np.ndarray, spacing_xyz: tuple[float, float, float], p: FatParams = FatParams()) -> int:
    """Set the fat in a ``(z, y, x)`` label array to background, slice by slice
    (:func:`fat_in_lung`), in place; returns the number of voxels cleared."""
    spacing_yx = (float(spacing_xyz[1]), float(spacing_xyz[0]))

    def one(z: int) -> int:
        lung = label[z] > 0
        if not lung.any():
            return 0
        fat = fat_in_lung(lung, hu[z], spacing_yx, p)
        label[z][fat] = 0
        return int(np.count_nonzero(fat))

    return sum(map_parallel(one, label.shape[0]))


def rule(mask: np.ndarray, ctx: ScanContext, p: FatParams) -> tuple[np.ndarray, RuleReport]:
    """Clear the fat in the lungs of ``mask`` (scan grid, in place)."""
    removed = clear_fat(mask, ctx.hu, ctx.spacing_xyz, p)
    return mask, RuleReport.of("fat", ctx, removed=removed)
