"""Orientation, resampling, crops and boxes in physical space (SimpleITK)."""

from __future__ import annotations

import SimpleITK as sitk

CANONICAL = "LPS"


def reorient(image: sitk.Image, code: str) -> sitk.Image:
    """Permute/flip axes so the image's axes point along ``code`` (DICOM/ITK convention:
    ``"LPS"`` means +i -> patient left, +j -> posterior, +k -> superior; identity direction).

    Only voxel order and the direction/origin change; every voxel keeps its physical position.
    """
    return sitk.DICOMOrient(image, code.upper())
