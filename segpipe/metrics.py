"""Segmentation metrics in physical units: Dice, HD95 and ASSD in mm, volumes in mL.

Surface distances use MONAI's implementation with the voxel spacing, on a crop around the
two masks (so a 512x512x1000 scan costs no more than its lungs). Geometry of the prediction
and the reference must agree: a mismatch is an error, never a silent resample.

Example:
    >>> m = lung_metrics(pred, ref)                          # doctest: +SKIP
    >>> m["right"]["dice"], m["right"]["hd95_mm"]            # doctest: +SKIP
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import SimpleITK as sitk

from segpipe import spatial
from segpipe.errors import GeometryError

__all__ = ["dice", "surface_distances", "binary_metrics", "lung_metrics", "LUNG_LABELS"]

LUNG_LABELS = {"right": 1, "left": 2}


def dice(pred: np.ndarray, ref: np.ndarray) -> float:
    """Dice of two boolean masks; 1.0 when both are empty."""
    p, r = np.asarray(pred, bool), np.asarray(ref, bool)
    denom = int(p.sum()) + int(r.sum())
    return 1.0 if denom == 0 else 2.0 * int(np.logical_and(p, r).sum()) / denom


def _crop_to_union(pred: np.ndarray, ref: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    union = pred | ref
    slices = []
    for axis in range(3):
        other = tuple(a for a in range(3) if a != axis)
        hit = np.flatnonzero(union.any(axis=other))
        slices.append(slice(max(hit[0] - 2, 0), hit[-1] + 3))
    s = tuple(slices)
    return pred[s], ref[s]


def surface_distances(
    pred: np.ndarray, ref: np.ndarray, spacing_zyx: tuple[float, float, float]
) -> tuple[float, float]:
    """(HD95, ASSD) in mm between the surfaces of two boolean ``(z, y, x)`` masks.

    Surface voxels are those removed by an erosion with the 6-neighbour cross (MONAI's
    definition). HD95 is the larger of the two directed 95th-percentile distances;
    ASSD averages the distances from every surface voxel of both masks to the other surface.
    Both are ``nan`` when either mask is empty.
    """
    import torch
    from monai.metrics import compute_average_surface_distance, compute_hausdorff_distance

    p, r = np.asarray(pred, bool), np.asarray(ref, bool)
    if not p.any() or not r.any():
        return math.nan, math.nan
    p, r = _crop_to_union(p, r)
    tp = torch.from_numpy(p)[None, None]
    tr = torch.from_numpy(r)[None, None]
    spacing = [float(s) for s in spacing_zyx]
    with warnings.catch_warnings():  # MONAI warns about its own internal use of a deprecated argument
        warnings.simplefilter("ignore", FutureWarning)
        hd95 = compute_hausdorff_distance(tp, tr, include_background=True, percentile=95, spacing=spacing)
        assd = compute_average_surface_distance(tp, tr, include_background=True, symmetric=True, spacing=spacing)
    return float(hd95.item()), float(assd.item())


def binary_metrics(pred: np.ndarray, ref: np.ndarray, spacing_xyz: tuple[float, float, float]) -> dict[str, float]:
    """Dice, HD95 (mm), ASSD (mm), volumes (mL) and volume error (mL, pred - ref) of two
    boolean ``(z, y, x)`` masks with voxel spacing ``spacing_xyz`` (mm)."""
    voxel_ml = float(np.prod(spacing_xyz)) / 1000.0
    hd95, assd = surface_distances(pred, ref, tuple(reversed(spacing_xyz)))  # type: ignore[arg-type]
    vp, vr = float(np.count_nonzero(pred)) * voxel_ml, float(np.count_nonzero(ref)) * voxel_ml
    return {
        "dice": dice(pred, ref),
        "hd95_mm": hd95,
        "assd_mm": assd,
        "volume_ml": vp,
        "ref_volume_ml": vr,
        "volume_error_ml": vp - vr,
    }


def lung_metrics(pred: sitk.Image, ref: sitk.Image, name: str = "prediction") -> dict[str, dict[str, float]]:
    """Per-lung metrics (``"right"``: label 1, ``"left"``: label 2) of two label maps.

    Raises:
        GeometryError: the two images do not share size, spacing, origin and direction.
    """
    if not spatial.same_geometry(pred, ref, atol_mm=1e-3):
        raise GeometryError(
            f"{name}: prediction and reference geometry differ (size {pred.GetSize()} vs {ref.GetSize()}, "
            f"spacing {tuple(round(s, 4) for s in pred.GetSpacing())} vs {tuple(round(s, 4) for s in ref.GetSpacing())}, "
            "or origin/direction)"
        )
    p = sitk.GetArrayViewFromImage(pred)
    r = sitk.GetArrayViewFromImage(ref)
    return {side: binary_metrics(p == v, r == v, pred.GetSpacing()) for side, v in LUNG_LABELS.items()}
