"""Reading and writing images with exact geometry (SimpleITK), and DICOM outputs.

:mod:`segpipe.io.image` reads and writes images (NIfTI, NRRD, MetaImage, DICOM series in), with
:mod:`segpipe.io.nifti` checking and reading NIfTI files lean;
:mod:`segpipe.io.dicom_out` writes a mask as DICOM SEG or RTSTRUCT next to its source series.
Everything public is re-exported here, so ``from segpipe import io; io.read_image(...)`` works.

Example:
    >>> import segpipe
    >>> image = segpipe.read_image("scan.nii.gz")          # doctest: +SKIP
    >>> segpipe.write_image(image, "copy.nrrd")            # doctest: +SKIP
"""

from __future__ import annotations

import os  # noqa: F401  (tests patch io.os.access)

import SimpleITK as sitk  # noqa: F401  (tests patch io.sitk.WriteImage)

from segpipe.io.dicom_out import DICOM_FORMATS, OUTPUT_FORMATS, write_dicom_seg, write_rtstruct
from segpipe.io.image import (
    IMAGE_SUFFIXES,
    check_hu,
    check_output_path,
    image_suffix,
    is_image_path,
    list_dicom_series,
    pick_dicom_series,
    read_image,
    strip_suffix,
    validate_image,
    write_image,
    write_text_atomic,
)
from segpipe.io.image import (
    _check_nifti_file as _check_nifti_file,  # tests read NIfTI headers with it
)
from segpipe.io.image import (
    _read_nifti_lean as _read_nifti_lean,
)

__all__ = [
    "IMAGE_SUFFIXES",
    "read_image",
    "write_image",
    "check_output_path",
    "write_text_atomic",
    "image_suffix",
    "strip_suffix",
    "list_dicom_series",
    "pick_dicom_series",
    "validate_image",
    "is_image_path",
    "check_hu",
    "OUTPUT_FORMATS",
    "DICOM_FORMATS",
    "write_dicom_seg",
    "write_rtstruct",
]
