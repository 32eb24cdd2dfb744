"""Step 1: the scan, read, checked and turned canonical (LPS), and the part of its voxels the
later steps read (:class:`ScanSource`)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import SimpleITK as sitk

from segpipe import io, spatial
from segpipe.errors import InputError

log = logging.getLogger(__name__)

__all__ = ["Scan", "read_scan", "ScanSource"]

ImageLike = sitk.Image | str | Path | np.ndarray


def _as_image(image: ImageLike, spacing: tuple[float, float, float] | None, series_uid: str | None) -> sitk.Image:
    if isinstance(image, (str, Path)):
        return io.read_image(image, series_uid=series_uid, allow_nan=True)
    if isinstance(image, np.ndarray):
        if spacing is None:
            raise InputError("a numpy array needs its voxel spacing: predict(array_zyx, spacing=(sx, sy, sz))")
        if image.ndim != 3:
            raise InputError(f"expected a 3D array (z, y, x), got shape {image.shape}")
        out = sitk.GetImageFromArray(np.ascontiguousarray(image))
        out.SetSpacing(tuple(float(s) for s in spacing))
        return out
    if isinstance(image, sitk.Image):
        return image
    raise InputError(f"expected a SimpleITK image, a path or a numpy array, got {type(image).__name__}")


NAN_PADDING_HU = -3024.0  # what a NaN voxel is read as: a scanner's padding beyond its field of view


def _nan_as_padding(image: sitk.Image, name: str, warn: bool) -> sitk.Image:
    """``image`` with its NaN voxels set to :data:`NAN_PADDING_HU`: some converters and
    resampling tools write NaN where the scan holds no data (beyond the reconstruction circle,
    beyond a resampled volume's edge), which the scanner's own files pad with -2048 or -3024 and
    which is read the same way. Infinite values stay (refused as not finite)."""
    if image.GetPixelID() not in (sitk.sitkFloat32, sitk.sitkFloat64):
        return image
    nan = np.isnan(sitk.GetArrayViewFromImage(image))
    count = int(np.count_nonzero(nan))
    if not count:
        return image
    if warn:
        log.warning("%s: %d voxels (%.1f %%) are NaN: read as padding beyond the field of view (%g HU)",
                    name, count, 100.0 * count / nan.size, NAN_PADDING_HU)
    array = sitk.GetArrayFromImage(image)
    array[nan] = NAN_PADDING_HU
    out = sitk.GetImageFromArray(array)
    out.CopyInformation(image)
    return out


@dataclass(frozen=True)
class Scan:
    """What a call keeps of the input scan besides its voxels (those go to the coarse stage,
    then to a :class:`ScanSource`).

    Args:
        geometry: the input's own grid (the output's).
        geometry_c: the canonical grid.
        orientation: the input's orientation code (undone on output).
        owned: the scan is this call's to drop (it read, shifted or reoriented it; not the
            caller's own image): then only the lungs' region of it is kept.
        reread: reads it once more (when a fine region grows past the part kept).
    """

    geometry: spatial.Geometry
    geometry_c: spatial.Geometry
    orientation: str
    owned: bool
    reread: Callable[[], sitk.Image]


def read_scan(image: ImageLike, *, spacing: tuple[float, float, float] | None = None, hu_offset: float = 0.0,
              series_uid: str | None = None) -> tuple[sitk.Image, Scan]:
    """Read (a path), wrap (an array) or take (an image) the scan, check it, add ``hu_offset``
    and reorient it to LPS: the canonical image (HU) and what the call keeps of the scan."""

    def read(check: bool = False) -> sitk.Image:
        name = str(image) if isinstance(image, (str, Path)) else "image"
        scan = _nan_as_padding(_as_image(image, spacing, series_uid), name, warn=check)
        if check:
            io.validate_image(scan, name)
        if hu_offset:
            scan = sitk.Cast(scan, sitk.sitkFloat32) + float(hu_offset)
        if check:
            io.check_hu(scan, name)
        return scan

    img = read(check=True)
    canonical, code = spatial.to_canonical(img)
    scan = Scan(spatial.Geometry.of(img), spatial.Geometry.of(canonical), code, canonical is not image,
                lambda: spatial.to_canonical(read())[0])
    return canonical, scan


class ScanSource:
    """The canonical scan's voxels that the fine stage and the scan-grid rules read: the whole
    scan, or, when the scan is the call's own, only a region of it that holds the lungs (a
    neck-to-pelvis scan's 500 MB become about 100 MB), read again when a fine region grows past
    it. ``image`` is that region (an exact copy with its own origin), ``start`` its first
    voxel's index on the canonical grid (x y z). Lives for one call."""

    def __init__(self, canonical: sitk.Image, scan: Scan, fine_mm: tuple[float, float, float]) -> None:
        self.image: sitk.Image = canonical
        self.start: tuple[int, int, int] = (0, 0, 0)
        self._scan = scan
        self._fine_mm = fine_mm

    def keep(self, lo: np.ndarray, hi: np.ndarray) -> None:
        """Keep only the voxels ``lo``..``hi`` (x y z index range, exclusive) and some padding,
        when the scan is the call's own."""
        if self._scan.owned:
            self.image, self.start = self._region(self.image, lo, hi)

    def cover(self, lo: np.ndarray, hi: np.ndarray) -> None:
        """Make sure the voxels ``lo``..``hi`` are held (reading the scan again if needed)."""
        if not self._scan.owned:
            return
        s_lo = np.asarray(self.start)
        s_hi = s_lo + np.asarray(self.image.GetSize())
        if np.any(lo < s_lo) or np.any(hi > s_hi):
            self.image, self.start = self._region(self._scan.reread(), np.minimum(s_lo, lo), np.maximum(s_hi, hi))

    def _region(self, canonical: sitk.Image, lo: np.ndarray, hi: np.ndarray) -> tuple[sitk.Image, tuple[int, int, int]]:
        """The voxels ``lo``..``hi`` of ``canonical`` and their start index, padded by two fine
        voxels and two of the scan's own on each side, so every fine-lattice point of a box in
        the range (:func:`segpipe.spatial.lattice_grid` reaches up to one fine voxel past it)
        interpolates from the same voxels as on the whole scan."""
        spacing = np.asarray(canonical.GetSpacing())
        pad = np.ceil(2.0 * np.asarray(self._fine_mm) / spacing).astype(int) + 2
        start = np.maximum(np.asarray(lo) - pad, 0)
        stop = np.minimum(np.asarray(hi) + pad, np.asarray(canonical.GetSize()))
        region = canonical[int(start[0]):int(stop[0]), int(start[1]):int(stop[1]), int(start[2]):int(stop[2])]
        return region, (int(start[0]), int(start[1]), int(start[2]))

    def release(self) -> None:
        """Drop the held voxels (when this call read the scan, their memory goes back)."""
        self.image = None  # type: ignore[assignment]

    def hu_over(self, lo: tuple[int, int, int], shape_zyx: tuple[int, ...]) -> np.ndarray:
        """A ``(z, y, x)`` view (no copy) of the held voxels from canonical index ``lo``."""
        hu = sitk.GetArrayViewFromImage(self.image)
        sx, sy, sz = self.start
        ox, oy, oz = lo
        fz, fy, fx = shape_zyx
        return hu[oz - sz:oz - sz + fz, oy - sy:oy - sy + fy, ox - sx:ox - sx + fx]
