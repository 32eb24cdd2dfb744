"""DICOM outputs: a lung mask as a DICOM Segmentation (SEG) or an RT Structure Set (RTSTRUCT).

Both reference the DICOM series the mask was computed from (its study, series, frame of
reference and every slice's SOP instance), so a PACS or viewer (3D Slicer, OHIF) shows them on
that series. The mask is segpipe's uint8 label image on the series' own grid (0 background,
1 right lung, 2 left lung), as :func:`segpipe.read_image` read the folder. Each mask slice is
matched to its source file by physical position (ImagePositionPatient), never by file order,
so files in any order and any slice direction map right.

* SEG (:func:`write_dicom_seg`, built with highdicom): BINARY segmentation, segment 1 "Right
  lung" (SNOMED CT 3341006), segment 2 "Left lung" (SNOMED CT 44029006), category "Anatomical
  Structure"; one frame per slice and lung that holds lung (empty frames omitted).
* RTSTRUCT (:func:`write_rtstruct`, built with rt-utils): ROIs ``Lung_R`` and ``Lung_L``
  (TG-263 names), one closed planar contour per outline and slice.

highdicom, rt-utils and pydicom are optional (``pip install "segpipe[dicom]"``) and imported
only when a DICOM output is written. Files are written atomically (temporary file in the same
folder, then rename).

Example:
    >>> mask = LungSegmenter.default().predict("ct_dicom/")                       # doctest: +SKIP
    >>> write_dicom_seg(mask, "ct_dicom/", "lungs_seg.dcm", model_name="default.pt")  # doctest: +SKIP
    >>> write_rtstruct(mask, "ct_dicom/", "lungs_rtstruct.dcm")                     # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import io as _pyio
import warnings
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import SimpleITK as sitk

from segpipe._version import __version__
from segpipe.errors import DependencyError, GeometryError, InputError, OutputError, OutputFormatError
from segpipe.io.image import atomic_target, check_output_path, list_dicom_series, pick_dicom_series

__all__ = [
    "OUTPUT_FORMATS",
    "DICOM_FORMATS",
    "LUNG_SEGMENTS",
    "parse_formats",
    "require_dicom_packages",
    "check_dicom_input",
    "write_dicom_seg",
    "write_rtstruct",
]

#: output formats of ``segpipe infer --format``; nifti is the default
OUTPUT_FORMATS = ("nifti", "dicom-seg", "rtstruct")
#: the formats that need a DICOM series as input
DICOM_FORMATS = ("dicom-seg", "rtstruct")
#: position tolerance (voxels) when a source slice is matched to a mask slice
_TOLERANCE_VOXELS = 0.25


@dataclass(frozen=True)
class LungSegment:
    """One lung as the DICOM outputs describe it."""

    label: int
    name: str  # SEG segment label
    roi: str  # RTSTRUCT ROI name (TG-263)
    sct_code: str  # SNOMED CT concept of the segmented property type
    rgb: tuple[int, int, int]  # display colour


#: label value -> how SEG and RTSTRUCT describe it (SNOMED CT codes for the right and left lung;
#: pydicom's code dictionary has "Lung" but not the sided concepts)
LUNG_SEGMENTS = (
    LungSegment(1, "Right lung", "Lung_R", "3341006", (128, 174, 128)),
    LungSegment(2, "Left lung", "Lung_L", "44029006", (241, 214, 145)),
)
_SERIES_NUMBER = {"dicom-seg": 901, "rtstruct": 902}
#: what the outputs need from every source file
_REQUIRED = ("SOPClassUID", "SOPInstanceUID", "StudyInstanceUID", "SeriesInstanceUID", "FrameOfReferenceUID",
             "ImagePositionPatient", "ImageOrientationPatient", "PixelSpacing", "Rows", "Columns")


def parse_formats(values: str | Iterable[str] | None) -> tuple[str, ...]:
    """Output formats from ``"nifti,dicom-seg"`` or a list of such strings (repeated options),
    in the order given, without repeats; ``None`` or nothing gives ``("nifti",)``.

    Raises:
        OutputFormatError: an unknown format name.
    """
    items = [values] if isinstance(values, str) else list(values or [])
    formats: list[str] = []
    for item in items:
        for name in (part.strip().lower() for part in item.split(",")):
            if not name:
                continue
            if name not in OUTPUT_FORMATS:
                raise OutputFormatError(f"unknown output format {name!r}; expected {', '.join(OUTPUT_FORMATS)}")
            if name not in formats:
                formats.append(name)
    return tuple(formats) or ("nifti",)


def require_dicom_packages(formats: Iterable[str]) -> None:
    """Raise :class:`DependencyError` (with the pip command) unless the packages the DICOM
    ``formats`` need import; nothing to check for other formats."""
    needed = {"dicom-seg": ("highdicom", "pydicom"), "rtstruct": ("rt_utils", "pydicom", "cv2")}
    import importlib

    for fmt in formats:
        for module in needed.get(fmt, ()):
            try:
                importlib.import_module(module)
            except ImportError as err:
                raise DependencyError(
                    f"--format {fmt} needs the package {module.replace('_', '-')} ({err}); "
                    'install it with: pip install "segpipe[dicom]"'
                ) from err


def check_dicom_input(path: str | Path, formats: Iterable[str]) -> None:
    """Before any work: raise :class:`OutputFormatError` when a DICOM format is asked for an
    input that is not a folder holding a DICOM series, and :class:`InputError` when the first
    file of a series there lacks what the outputs reference (UIDs, position, orientation)."""
    wanted = [f for f in formats if f in DICOM_FORMATS]
    p = Path(path)
    if not wanted:
        return
    if not p.is_dir():
        raise OutputFormatError(
            f"--format {wanted[0]} needs a DICOM series folder as input (it references the source slices), got the file {p}"
        )
    import pydicom

    for uid, files in list_dicom_series(p).items():
        _check_header(pydicom.dcmread(files[0], stop_before_pixels=True), f"{Path(files[0]).name} (series {uid})")


def _check_header(ds: Any, where: str) -> None:
    """Raise :class:`InputError` unless a source file has every attribute the outputs reference."""
    absent = [k for k in _REQUIRED if ds.get(k) in (None, "")]
    if absent:
        raise InputError(f"{where}: DICOM outputs reference the source files, which need {', '.join(absent)}; "
                         "this one has none (an over-anonymised series?)")


# ----------------------------------------------------------------------------- source series
def _source_slices(mask: sitk.Image, folder: str | Path, series_uid: str | None) -> list[Any]:
    """The source series' headers (pydicom datasets without pixel data), one per mask slice,
    in the mask's slice order, matched by ImagePositionPatient and checked against the mask's
    grid (size, orientation, positions)."""
    import pydicom

    uid, files = pick_dicom_series(folder, series_uid)
    size = mask.GetSize()
    direction = np.asarray(mask.GetDirection(), dtype=np.float64).reshape(3, 3)
    by_slice: list[Any] = [None] * size[2]
    for name in files:
        try:
            ds = pydicom.dcmread(name, stop_before_pixels=True)
        except Exception as err:  # pydicom raises many types for broken files
            raise InputError(f"cannot read the DICOM file {name}: {err}") from err
        if int(getattr(ds, "NumberOfFrames", 1) or 1) > 1:
            raise InputError(f"{name}: multi-frame (enhanced) DICOM is not supported for DICOM outputs")
        where = f"{Path(name).name} (series {uid})"
        _check_header(ds, where)
        if (int(ds.Columns), int(ds.Rows)) != size[:2]:
            raise GeometryError(f"{where}: the slice is {ds.Columns}x{ds.Rows} pixels, the mask {size[0]}x{size[1]}")
        iop = np.asarray([float(v) for v in ds.ImageOrientationPatient])
        if not (np.allclose(iop[:3], direction[:, 0], atol=1e-3) and np.allclose(iop[3:], direction[:, 1], atol=1e-3)):
            raise GeometryError(f"{where}: its orientation {iop.round(4).tolist()} is not the mask's; is the mask on this series' grid?")
        index = np.asarray(mask.TransformPhysicalPointToContinuousIndex([float(v) for v in ds.ImagePositionPatient]))
        k = int(round(index[2]))
        if np.abs(index[:2]).max() > _TOLERANCE_VOXELS or abs(index[2] - k) > _TOLERANCE_VOXELS or not 0 <= k < size[2]:
            raise GeometryError(f"{where}: its position {list(ds.ImagePositionPatient)} is on no slice of the mask's grid")
        if by_slice[k] is not None:
            raise GeometryError(f"{where}: two files of the series lie at mask slice {k}")
        by_slice[k] = ds
    missing = [k for k, ds in enumerate(by_slice) if ds is None]
    if missing:
        raise GeometryError(f"series {uid} in {folder}: no file for mask slices {missing[:5]} ({len(missing)} of {size[2]})")
    return by_slice


def _label_array(mask: sitk.Image) -> np.ndarray:
    """The mask's voxels ``(z, y, x)`` as uint8, checked to hold labels 0, 1, 2 only."""
    if mask.GetDimension() != 3 or mask.GetNumberOfComponentsPerPixel() != 1:
        raise InputError(f"expected a 3D label image, got {mask.GetDimension()}D with {mask.GetNumberOfComponentsPerPixel()} components")
    array = sitk.GetArrayViewFromImage(mask)
    if not np.issubdtype(array.dtype, np.integer):
        raise InputError(f"expected an integer label image (0, 1, 2), got {array.dtype}")
    labels = np.unique(array)
    if labels.min() < 0 or labels.max() > 2:
        raise InputError(f"expected labels 0 (background), 1 (right lung), 2 (left lung), got {labels.tolist()}")
    return np.asarray(array, dtype=np.uint8)


def _save_atomic(dataset: Any, path: Path) -> Path:
    """Write a pydicom dataset to a temporary file next to ``path``, then rename it."""
    with atomic_target(path) as tmp:
        try:
            dataset.save_as(tmp, enforce_file_format=True)
        except OSError as err:
            raise OutputError(f"cannot write {path}: {err}") from err
    return path


# ----------------------------------------------------------------------------- SEG
def write_dicom_seg(
    mask: sitk.Image,
    source_dir: str | Path,
    path: str | Path,
    *,
    series_uid: str | None = None,
    model_name: str = "segpipe model",
    overwrite: bool = True,
) -> Path:
    """Write the lung mask as a DICOM Segmentation that references its source series.

    Args:
        mask: uint8 label image (0 background, 1 right lung, 2 left lung) on the grid of the
            series in ``source_dir`` (as :func:`segpipe.read_image` reads it).
        source_dir: the folder holding the source DICOM series.
        path: the ``.dcm`` file to write.
        series_uid: the source series in a folder with several (default: the one with most
            slices, as :func:`segpipe.read_image` picks).
        model_name: the model named in the algorithm identification (with segpipe's version).
        overwrite: replace an existing file (default) or raise :class:`OutputError`.

    Returns:
        The written path.

    Raises:
        DependencyError: highdicom or pydicom is not installed.
        GeometryError: the mask is not on the series' grid.
        OutputError: the file cannot be written.
    """
    require_dicom_packages(["dicom-seg"])
    import highdicom as hd
    from pydicom.sr.codedict import codes

    p = check_output_path(path, overwrite=overwrite, image=False)
    labels = _label_array(mask)
    sources = _source_slices(mask, source_dir, series_uid)
    algorithm = hd.AlgorithmIdentificationSequence(
        name="segpipe", family=codes.cid7162.ArtificialIntelligence, version=__version__, parameters={"model": model_name},
    )
    descriptions = [
        hd.seg.SegmentDescription(
            segment_number=seg.label,
            segment_label=seg.name,
            segmented_property_category=codes.SCT.AnatomicalStructure,
            segmented_property_type=hd.sr.CodedConcept(seg.sct_code, "SCT", seg.name),
            algorithm_type=hd.seg.SegmentAlgorithmTypeValues.AUTOMATIC,
            algorithm_identification=algorithm,
            display_color=hd.color.CIELabColor.from_rgb(*seg.rgb),
        )
        for seg in LUNG_SEGMENTS
    ]
    first = sources[0]
    try:
        with warnings.catch_warnings():
            # highdicom warns about a source's one-part patient name ("Anonymous"); it is copied as is
            warnings.filterwarnings("ignore", message=".*unlikely to represent the intended person name", category=UserWarning)
            seg = hd.seg.Segmentation(
                source_images=sources,
                pixel_array=labels,
                segmentation_type=hd.seg.SegmentationTypeValues.BINARY,
                segment_descriptions=descriptions,
                series_instance_uid=hd.UID(),
                series_number=_SERIES_NUMBER["dicom-seg"],
                sop_instance_uid=hd.UID(),
                instance_number=1,
                manufacturer="segpipe",
                manufacturer_model_name=model_name,
                software_versions=__version__,
                device_serial_number="none",
                content_label="LUNGS",
                content_description="segpipe lungs",
                series_description="segpipe lungs (SEG)",
                omit_empty_frames=bool(labels.any()),  # highdicom cannot omit every frame: a mask without lung keeps them
            )
    except (ValueError, TypeError, AttributeError, KeyError) as err:  # highdicom's checks of the source headers
        raise InputError(f"cannot build a DICOM SEG on series {first.SeriesInstanceUID}: {err}") from err
    return _save_atomic(seg, p)


# ----------------------------------------------------------------------------- RTSTRUCT
def write_rtstruct(
    mask: sitk.Image,
    source_dir: str | Path,
    path: str | Path,
    *,
    series_uid: str | None = None,
    model_name: str = "segpipe model",
    overwrite: bool = True,
) -> Path:
    """Write the lung mask as an RT Structure Set (ROIs ``Lung_R``, ``Lung_L``) on its source series.

    The contours are the outlines of each lung in each slice (rt-utils traces them with
    OpenCV through the centres of the edge pixels), on the source series' frame of reference;
    each references its slice's SOP instance. Both ROIs are always there; a lung absent from
    the mask has no contours.

    Args:
        mask: uint8 label image (0 background, 1 right lung, 2 left lung) on the grid of the
            series in ``source_dir``.
        source_dir: the folder holding the source DICOM series.
        path: the ``.dcm`` file to write.
        series_uid: the source series in a folder with several (default: as
            :func:`segpipe.read_image` picks).
        model_name: the model named in the structure set's description.
        overwrite: replace an existing file (default) or raise :class:`OutputError`.

    Returns:
        The written path.

    Raises:
        DependencyError: rt-utils, OpenCV or pydicom is not installed.
        GeometryError: the mask is not on the series' grid, or the series has pixels that are
            not square or uneven slice spacing (rt-utils' contour placement assumes both).
        OutputError: the file cannot be written.
    """
    require_dicom_packages(["rtstruct"])
    from rt_utils import RTStruct, ds_helper, image_helper

    p = check_output_path(path, overwrite=overwrite, image=False)
    labels = _label_array(mask)
    sources = _source_slices(mask, source_dir, series_uid)
    # rt-utils' own slice order: ascending position along the slice normal (row x column)
    position = [float(image_helper.get_slice_position(ds)) for ds in sources]
    order = np.argsort(position, kind="stable")
    series = [sources[k] for k in order]
    _check_regular(series, [position[k] for k in order])
    with warnings.catch_warnings():  # rt-utils sets the transfer syntax the way pydicom 3 deprecates
        warnings.filterwarnings("ignore", message=r".*FileDataset\.is_(little_endian|implicit_VR)", category=DeprecationWarning)
        structure = RTStruct(series, ds_helper.create_rtstruct_dataset(series))
    for seg in LUNG_SEGMENTS:
        lung = labels[order] == seg.label  # (n_slices, rows, cols) in rt-utils' order
        with contextlib.redirect_stdout(_pyio.StringIO()):  # rt-utils prints a note for an empty ROI
            structure.add_roi(mask=np.ascontiguousarray(lung.transpose(1, 2, 0)), color=list(seg.rgb), name=seg.roi,
                              description=seg.name, roi_generation_algorithm=0)
    ds = structure.ds
    for roi in ds.ROIContourSequence:
        if "ContourSequence" in roi and not roi.ContourSequence:
            del roi.ContourSequence  # an empty lung: the ROI without contours (an empty sequence is invalid)
        for contour in roi.get("ContourSequence", []):
            # rt-utils writes float32 reprs ("73.69062805175781") longer than DS's 16 characters; 0.1 um is plenty
            contour.ContourData = [f"{float(v):.4f}" for v in contour.ContourData]
    ds.Manufacturer, ds.ManufacturerModelName, ds.SoftwareVersions = "segpipe", model_name, __version__
    ds.InstitutionName = getattr(series[0], "InstitutionName", "")
    for keyword in ("ReferringPhysicianName", "AccessionNumber", "PositionReferenceIndicator"):  # type 2: copied or empty
        setattr(ds, keyword, getattr(series[0], keyword, ""))
    ds.OperatorsName = ""
    ds.FrameOfReferenceUID = series[0].FrameOfReferenceUID
    ds.SeriesDescription = "segpipe lungs (RTSTRUCT)"
    ds.SeriesNumber = _SERIES_NUMBER["rtstruct"]
    ds.StructureSetLabel = "segpipe lungs"
    ds.StructureSetDescription = f"segpipe {__version__}, model {model_name}"
    for observation in ds.RTROIObservationsSequence:
        observation.RTROIInterpretedType = "ORGAN"
        observation.ROIObservationDescription = "segpipe lung"
    return _save_atomic(ds, p)


def _check_regular(series: list[Any], positions: list[float]) -> None:
    """rt-utils places contours with PixelSpacing[0] along rows and columns and one mean slice
    spacing: refuse series where that would misplace them."""
    first = series[0]
    dy, dx = (float(v) for v in first.PixelSpacing)
    if abs(dy - dx) > 1e-4 * max(dx, dy):
        raise GeometryError(f"series {first.SeriesInstanceUID}: RTSTRUCT output needs square pixels, got PixelSpacing {dy} x {dx} mm")
    if len(positions) > 2:
        steps = np.diff(positions)
        if np.abs(steps - steps.mean()).max() > 0.01 * abs(steps.mean()):
            raise GeometryError(
                f"series {first.SeriesInstanceUID}: RTSTRUCT output needs evenly spaced slices, got steps "
                f"{steps.min():.3f}..{steps.max():.3f} mm"
            )
