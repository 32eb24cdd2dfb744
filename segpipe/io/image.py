"""Reading and writing images with exact geometry (SimpleITK).

Geometry contract: an image is a ``SimpleITK.Image`` whose size, spacing (mm), origin (mm) and
direction are in ITK's LPS physical space. ``sitk.GetArrayFromImage`` gives the voxels in
``(z, y, x)`` order; spacing, origin and size are ``(x, y, z)``. Nothing in segpipe changes an
input's geometry: outputs are written with exactly the input's size, spacing, origin and
direction, atomically (temporary file in the same folder, then rename), so a failed or
interrupted write never leaves a partial file behind.

Supported inputs: NIfTI (``.nii``, ``.nii.gz``), NRRD (``.nrrd``, ``.nhdr``), MetaImage
(``.mha``, ``.mhd``) and DICOM series folders (rescale slope/intercept applied, values in HU).

Example:
    >>> import segpipe
    >>> image = segpipe.read_image("scan.nii.gz")          # doctest: +SKIP
    >>> segpipe.write_image(image, "copy.nrrd")            # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import SimpleITK as sitk

from segpipe.errors import GeometryError, InputError, OutputError
from segpipe.io._native import _first_line, _native_stderr_captured
from segpipe.io.nifti import _check_gzip_stream, _check_nifti_file, _nifti_bytes, _read_nifti_lean

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
]

log = logging.getLogger("segpipe")

IMAGE_SUFFIXES = (".nii.gz", ".nii", ".nrrd", ".nhdr", ".mha", ".mhd")
_NIFTI = (".nii", ".nii.gz")


def image_suffix(path: str | Path) -> str:
    """The image-format suffix of ``path`` (``".nii.gz"`` counts as one), or ``""``."""
    name = Path(path).name.lower()
    for suffix in IMAGE_SUFFIXES:
        if name.endswith(suffix):
            return suffix
    return ""


def strip_suffix(path: str | Path) -> str:
    """File name without its image suffix: ``case_01.nii.gz`` -> ``case_01``."""
    name = Path(path).name
    suffix = image_suffix(name)
    return name[: len(name) - len(suffix)] if suffix else Path(name).stem


def is_image_path(path: str | Path) -> bool:
    """True for a file with a supported image suffix or a folder holding DICOM files."""
    p = Path(path)
    if p.is_dir():
        return bool(list_dicom_series(p))
    return p.is_file() and bool(image_suffix(p))


# ----------------------------------------------------------------------------- DICOM
def list_dicom_series(folder: str | Path) -> dict[str, list[str]]:
    """Map SeriesInstanceUID -> sorted file names for every DICOM series in ``folder``."""
    folder = str(folder)
    with _native_stderr_captured():
        uids = sitk.ImageSeriesReader.GetGDCMSeriesIDs(folder)
        return {uid: list(sitk.ImageSeriesReader.GetGDCMSeriesFileNames(folder, uid)) for uid in uids}


def pick_dicom_series(folder: str | Path, series_uid: str | None = None, *, warn: bool = True) -> tuple[str, list[str]]:
    """The DICOM series :func:`read_image` reads from ``folder``: ``(SeriesInstanceUID, files)``.

    Args:
        folder: a folder holding DICOM files.
        series_uid: the series to pick; by default the one with most slices (a warning names
            the others unless ``warn`` is False).
        warn: log a warning when the folder holds several series and none is picked.

    Raises:
        InputError: no DICOM files in ``folder``, or no series ``series_uid``.
    """
    folder = Path(folder)
    series = list_dicom_series(folder)
    if not series:
        raise InputError(f"{folder}: a folder must hold a DICOM series, found no DICOM files")
    if series_uid is not None:
        if series_uid not in series:
            raise InputError(f"{folder}: no DICOM series {series_uid}; found {', '.join(sorted(series))}")
        uid = series_uid
    else:
        uid = max(series, key=lambda k: (len(series[k]), k))
        if len(series) > 1 and warn:
            others = ", ".join(f"{k} ({len(v)} slices)" for k, v in sorted(series.items()) if k != uid)
            log.warning(
                "%s holds %d DICOM series; reading %s (%d slices, the most); others: %s. Pick one with --series UID.",
                folder, len(series), uid, len(series[uid]), others,
            )
    return uid, series[uid]


def _read_dicom(folder: Path, series_uid: str | None) -> sitk.Image:
    uid, files = pick_dicom_series(folder, series_uid)
    reader = sitk.ImageSeriesReader()
    reader.SetFileNames(files)
    reader.MetaDataDictionaryArrayUpdateOn()
    with _native_stderr_captured() as native:
        try:
            image = reader.Execute()
        except RuntimeError as err:
            raise InputError(f"cannot read DICOM series {uid} in {folder}: {_first_line(str(err))}") from err
    if len(files) < 2 and image.GetDimension() == 3 and image.GetSize()[2] < 2:
        raise InputError(f"{folder}: expected a 3D DICOM series, got a single slice")
    del native
    _warn_uneven_slices(reader, image, folder)
    return image


def _warn_uneven_slices(reader: sitk.ImageSeriesReader, image: sitk.Image, folder: Path) -> None:
    """Log a warning where the series' slices are not evenly spaced (a slice missing, or two
    stacks): the volume, and so the mask, places them evenly (SimpleITK's mean spacing)."""
    n = image.GetSize()[2] if image.GetDimension() == 3 else 0
    if n < 3:
        return
    try:
        pos = np.array([[float(v) for v in reader.GetMetaData(i, "0020|0032").split("\\")] for i in range(n)])
    except (RuntimeError, ValueError, IndexError):  # no Image Position (Patient) on some slice: nothing to check
        return
    along = pos @ np.asarray(image.GetDirection()).reshape(3, 3)[:, 2]
    steps = np.diff(along)
    if np.ptp(steps) > max(0.01, 0.05 * abs(float(np.median(steps)))):
        off = float(np.max(np.abs(along - along[0] - np.arange(n) * image.GetSpacing()[2])))
        log.warning(
            "%s: the slices are not evenly spaced (%.3g to %.3g mm apart; a slice missing?): the volume and the mask "
            "place them evenly, %.3g mm apart, which moves some slices by up to %.3g mm",
            folder, float(np.min(np.abs(steps))), float(np.max(np.abs(steps))), image.GetSpacing()[2], off,
        )


# ----------------------------------------------------------------------------- reading
def validate_image(image: sitk.Image, name: str = "image", *, allow_nan: bool = False) -> None:
    """Raise :class:`InputError`/:class:`GeometryError` unless ``image`` is a usable 3D scalar volume.

    Checks: 3 dimensions, more than one slice along each axis, scalar voxels, positive finite
    spacing, a non-degenerate direction matrix, and finite voxel values (NaN allowed with
    ``allow_nan``: the caller reads it as no data, as inference does beyond the field of view).
    """
    dim = image.GetDimension()
    if dim != 3:
        what = {2: "a 2D image", 4: "a 4D image (time series or multi-volume)"}.get(dim, f"a {dim}D image")
        raise InputError(f"{name}: expected a 3D image, got {what} of size {image.GetSize()}")
    size = image.GetSize()
    if int(np.prod(size)) == 0:
        raise InputError(f"{name}: the image is empty (size {size})")
    if min(size) < 2:
        raise InputError(f"{name}: expected a 3D volume, got size {size} (a single slice)")
    if image.GetNumberOfComponentsPerPixel() != 1:
        raise InputError(
            f"{name}: expected one value per voxel (CT), got {image.GetNumberOfComponentsPerPixel()} components"
        )
    spacing = image.GetSpacing()
    if any(not (s > 0 and np.isfinite(s)) for s in spacing):
        raise GeometryError(f"{name}: voxel spacing must be positive, got {tuple(spacing)} mm")
    direction = np.asarray(image.GetDirection(), dtype=np.float64).reshape(3, 3)
    if not np.all(np.isfinite(direction)) or abs(abs(np.linalg.det(direction)) - 1) > 1e-3:
        raise GeometryError(f"{name}: the direction matrix is not a rotation: {np.round(direction, 4).tolist()}")
    if not np.all(np.isfinite(image.GetOrigin())):
        raise GeometryError(f"{name}: the origin is not finite: {image.GetOrigin()}")
    if image.GetPixelID() in (sitk.sitkFloat32, sitk.sitkFloat64):
        array = sitk.GetArrayViewFromImage(image)
        bad = int(np.count_nonzero(np.isinf(array) if allow_nan else ~np.isfinite(array)))
        if bad:
            what = "infinite" if allow_nan else "NaN/Inf"
            raise InputError(f"{name}: expected finite voxel values, got {bad} {what} voxels")


class _Background:
    """Run ``fn(*args)`` in a thread; :meth:`result` waits and re-raises its exception."""

    def __init__(self, fn: Callable[..., None], *args: object) -> None:
        self._error: BaseException | None = None

        def run() -> None:
            try:
                fn(*args)
            except BaseException as err:  # handed to the caller by result()
                self._error = err

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()

    def result(self) -> None:
        self._thread.join()
        if self._error is not None:
            raise self._error


def read_image(path: str | Path, *, series_uid: str | None = None, allow_nan: bool = False) -> sitk.Image:
    """Read a 3D CT image (file or DICOM folder) in HU, keeping its physical geometry.

    Args:
        path: a ``.nii``/``.nii.gz``/``.nrrd``/``.nhdr``/``.mha``/``.mhd`` file, or a folder
            holding a DICOM series. With several series, the one with most slices is read
            (a warning names the others) unless ``series_uid`` picks one.
        series_uid: DICOM SeriesInstanceUID to read from a folder.
        allow_nan: NaN voxels pass the check (see :func:`validate_image`).

    Returns:
        The image as stored (pixel type kept; DICOM rescale slope/intercept applied), with
        its size, spacing (mm), origin (mm) and direction untouched.

    Raises:
        InputError: missing, empty, unreadable or truncated file; not 3D; NaN/Inf voxels.
        GeometryError: zero or negative spacing, degenerate direction.
    """
    p = Path(path)
    if not p.exists():
        raise InputError(f"input not found: {p}")
    if p.is_dir():
        image = _read_dicom(p, series_uid)
    else:
        if series_uid is not None:
            raise InputError(f"--series applies to DICOM folders only, got the file {p}")
        suffix = image_suffix(p)
        if not suffix:
            raise InputError(
                f"{p}: unsupported file type; expected one of {', '.join(IMAGE_SUFFIXES)} or a DICOM folder"
            )
        if p.stat().st_size == 0:
            raise InputError(f"cannot read {p}: the file is empty (0 bytes)")
        stream_check = None
        if suffix in _NIFTI:
            header = _check_nifti_file(p)
            lean = _read_nifti_lean(p, header)
            if lean is not None:
                validate_image(lean, str(p), allow_nan=allow_nan)
                return lean
            if p.name.lower().endswith(".gz"):
                stream_check = _Background(_check_gzip_stream, p, _nifti_bytes(header))
        reader = sitk.ImageFileReader()
        reader.SetFileName(str(p))
        with _native_stderr_captured() as native:
            try:
                image = reader.Execute()
            except RuntimeError as err:
                if stream_check is not None:
                    stream_check.result()  # a truncated or corrupt stream explains ITK's failure best
                detail = _first_line(str(err)) or _first_line(" ".join(native))
                raise InputError(f"cannot read {p}: unreadable or truncated file ({detail})") from err
        if stream_check is not None:
            stream_check.result()
    validate_image(image, str(p), allow_nan=allow_nan)
    return image


# ----------------------------------------------------------------------------- writing
def check_output_path(path: str | Path, *, overwrite: bool = True, image: bool = True) -> Path:
    """Check that ``path`` can be written before doing long work; return it as a Path.

    Args:
        path: the file to write.
        overwrite: whether an existing file may be replaced.
        image: require an image suffix (see :data:`IMAGE_SUFFIXES`); False for other files
            (CSV, JSON).

    Raises:
        OutputError: unsupported suffix, missing or non-writable folder, existing file when
            ``overwrite`` is False, or the path is a folder.
    """
    p = Path(path)
    if image and not image_suffix(p):
        raise OutputError(f"{p}: unsupported output type; expected one of {', '.join(IMAGE_SUFFIXES)}")
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        raise OutputError(f"cannot write {p}: the folder {parent} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise OutputError(f"cannot write {p}: the folder {parent} is not writable")
    if p.is_dir():
        raise OutputError(f"cannot write {p}: it is a folder")
    if p.exists() and not overwrite:
        raise OutputError(f"{p} exists; pass overwrite=True (--overwrite) to replace it")
    return p


def write_image(
    image: sitk.Image,
    path: str | Path,
    *,
    reference: sitk.Image | None = None,
    compress: bool = True,
    overwrite: bool = True,
) -> Path:
    """Write ``image`` atomically (temporary file in the same folder, then rename).

    Args:
        image: the image to write.
        path: output file; the format follows the suffix (see :data:`IMAGE_SUFFIXES`).
        reference: when given, the output takes exactly this image's spacing, origin and
            direction (sizes must match), e.g. the input scan for a mask.
        compress: compress the voxel data where the format allows it.
        overwrite: replace an existing file (default) or raise :class:`OutputError`.

    Returns:
        The written path.
    """
    p = check_output_path(path, overwrite=overwrite)
    if reference is not None:
        if tuple(image.GetSize()) != tuple(reference.GetSize()):
            raise GeometryError(
                f"cannot write {p}: expected the reference size {reference.GetSize()}, got {image.GetSize()}"
            )
        image = sitk.Image(image)
        image.CopyInformation(reference)
    suffix = image_suffix(p)
    base = p.name[: len(p.name) - len(suffix)]
    # A folder of our own next to the target keeps the final file name inside it, which
    # matters for the two-file formats (.mhd/.raw, .nhdr/.raw) that name their data file.
    tmp_dir = Path(tempfile.mkdtemp(prefix=f".{base}.", suffix=".tmp", dir=p.parent))
    try:
        tmp = tmp_dir / p.name
        with _native_stderr_captured() as native:
            try:
                sitk.WriteImage(image, str(tmp), compress)
            except RuntimeError as err:
                detail = _first_line(str(err)) or _first_line(" ".join(native))
                raise OutputError(f"cannot write {p}: {detail}") from err
        companions = [f for f in tmp_dir.iterdir() if f.name != p.name]
        for extra in companions:  # data files first, so the header never points at nothing
            os.replace(extra, p.parent / extra.name)
        os.replace(tmp, p)
    finally:
        for leftover in tmp_dir.iterdir() if tmp_dir.exists() else []:
            leftover.unlink()
        if tmp_dir.exists():
            tmp_dir.rmdir()
    return p


@contextlib.contextmanager
def atomic_target(path: Path, suffix: str = ".tmp") -> Iterator[str]:
    """A temporary file name in ``path``'s folder to write to: when the block ends normally the
    file gets the usual mode (``mkstemp`` makes 0600) and is renamed onto ``path``, so readers
    never see a partial file; on any error it is removed."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=suffix, dir=path.parent if str(path.parent) else ".")
    os.close(fd)
    try:
        yield tmp
        umask = os.umask(0o022)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text_atomic(path: str | Path, text: str, *, overwrite: bool = True) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically: a temporary file in the same folder, then
    a rename, so readers never see a partial file. Returns the path.

    Raises:
        OutputError: missing or non-writable folder, the path is a folder, or it exists and
            ``overwrite`` is False.
    """
    p = check_output_path(path, overwrite=overwrite, image=False)
    with atomic_target(p) as tmp:
        Path(tmp).write_text(text, encoding="utf-8", newline="")
    return p


# ----------------------------------------------------------------------------- intensity sanity
def check_hu(image: sitk.Image, name: str = "image") -> None:
    """Raise :class:`InputError` unless ``image`` looks like CT in Hounsfield units.

    CT of the body has air (outside the patient, in the lungs) near -1000 HU, or at least lung
    below -450 HU (a crop inside the body of an expiratory scan, its lungs at -600). Scans
    stored with a +1000/+1024 offset put that air near 0; normalised scans (0..1) and MRI have
    no air peak at all. The error names the fix (``--hu-offset``) where one exists.
    """
    array = sitk.GetArrayViewFromImage(image)
    step = max(1, int(round((array.size / 2_000_000) ** (1 / 3))))
    sample = np.asarray(array[::step, ::step, ::step], dtype=np.float32).ravel()
    lo, hi = (float(v) for v in np.percentile(sample, [0.5, 99.5]))
    if hi - lo < 50:
        raise InputError(
            f"{name}: values span only {lo:.3g}..{hi:.3g}, which is not CT in HU (normalised data?); "
            "segpipe needs Hounsfield units"
        )
    air = np.count_nonzero((sample > -1100) & (sample < -450)) / sample.size
    if air >= 0.01:
        return
    if lo > -200:
        near = sample[(sample > lo - 1) & (sample < lo + 300)]
        near = near[near != sample.min()]  # a clip or padding value piles up at the minimum: not air
        hist, edges = np.histogram(near, bins=60)
        peak = float(edges[int(np.argmax(hist))])
        # an offset CT also has soft tissue (0..100 HU) about 1000 above its air peak
        tissue = np.count_nonzero((sample > peak + 900) & (sample < peak + 1150)) / sample.size
        if near.size >= 0.02 * sample.size and peak < 150 and tissue >= 0.02:
            offset = -1024 if abs(peak - 24) <= abs(peak) else -1000
            raise InputError(
                f"{name}: no air near -1000 HU, but a peak near {peak:.0f}: the scan looks stored with a "
                f"+{-offset} offset; rerun with --hu-offset {offset}"
            )
    raise InputError(
        f"{name}: found no air near -1000 HU (values {lo:.0f}..{hi:.0f}); segpipe needs CT in Hounsfield units "
        "(is this MRI, or a scan cropped inside the body?)"
    )
