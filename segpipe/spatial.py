"""Orientation, resampling, crops and boxes in physical space (SimpleITK).

Conventions: physical coordinates are ITK's LPS in mm (+x patient left, +y posterior,
+z superior); ``*_xyz`` tuples follow SimpleITK's (x, y, z) index order, numpy arrays from
``sitk.GetArrayFromImage`` are ``(z, y, x)``. Images resample with linear or B-spline
interpolation, labels with nearest neighbour or label-Gaussian, never the other way round.

Example:
    >>> import SimpleITK as sitk
    >>> image = sitk.Image(40, 30, 20, sitk.sitkInt16)
    >>> canonical, code = to_canonical(image)
    >>> restored = from_canonical(canonical, image)
    >>> restored.GetSize() == image.GetSize()
    True
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
import SimpleITK as sitk

from segpipe.errors import GeometryError

__all__ = [
    "AIR_HU",
    "LUNG_HU",
    "TISSUE_HU",
    "CANONICAL",
    "air_floor",
    "below_air",
    "part_read_by",
    "resample_floored",
    "resample_padding_raised",
    "in_plane_image",
    "Box",
    "Geometry",
    "index_to_physical",
    "centre_x_index",
    "origin_at_edge",
    "scanner_centre_x_index",
    "orientation_code",
    "reorient",
    "to_canonical",
    "from_canonical",
    "same_geometry",
    "copy_geometry",
    "resample_image",
    "resample_label",
    "resample_to_spacing",
    "resample_to_reference",
    "spacing_for_size",
    "box_from_mask",
    "crop_to_box",
    "paste",
    "physical_centroid",
    "centroid_index",
    "voxel_volume_ml",
]

CANONICAL = "LPS"

_IMAGE_INTERP = {"linear": sitk.sitkLinear, "bspline": sitk.sitkBSpline}
_LABEL_INTERP = {"nearest": sitk.sitkNearestNeighbor, "label_gaussian": sitk.sitkLabelGaussian}


# ----------------------------------------------------------------------------- orientation
def orientation_code(image: sitk.Image | Geometry) -> str:
    """Three-letter code of the axis directions, ITK/DICOM convention (identity is ``"LPS"``):
    the letters say where +i, +j, +k point (the nearest axis for oblique scans)."""
    return sitk.DICOMOrientImageFilter.GetOrientationFromDirectionCosines(image.GetDirection())


def reorient(image: sitk.Image, code: str) -> sitk.Image:
    """Permute/flip axes so the image's axes point along ``code`` (``"LPS"``: +i -> patient
    left, +j -> posterior, +k -> superior; ``"RAS"``, ``"LPI"`` for feet-first, ...).

    Only the voxel order and the direction/origin change; every voxel keeps its physical
    position, so nothing is interpolated.
    """
    code = code.upper()
    if len(code) != 3 or {c for c in code} - set("LRPAIS") or len({_axis_of(c) for c in code}) != 3:
        raise GeometryError(f"expected an orientation code like 'LPS' or 'RAS', got {code!r}")
    return sitk.DICOMOrient(image, code)


def _axis_of(letter: str) -> int:
    return {"L": 0, "R": 0, "P": 1, "A": 1, "S": 2, "I": 2}[letter]


def to_canonical(image: sitk.Image) -> tuple[sitk.Image, str]:
    """Reorient to :data:`CANONICAL` (LPS); returns the image and the original code.

    Undo with :func:`from_canonical` (preferred: restores the exact original geometry) or
    ``reorient(image, code)``.
    """
    code = orientation_code(image)
    if code == CANONICAL:
        return image, code
    return reorient(image, CANONICAL), code


def from_canonical(image: sitk.Image, reference: sitk.Image | Geometry) -> sitk.Image:
    """Undo :func:`to_canonical`: bring ``image`` (on the canonical version of
    ``reference``'s grid) back to ``reference``'s voxel order, with exactly its geometry.

    The reorientation itself is exact up to float rounding of the origin; the result then
    takes ``reference``'s geometry bit for bit after checking that it agrees to 1e-3 mm.
    """
    out = reorient(image, orientation_code(reference))
    if out.GetSize() != reference.GetSize():
        raise GeometryError(f"expected size {reference.GetSize()} after reorientation, got {out.GetSize()}")
    tol = 1e-3
    if (
        not np.allclose(out.GetSpacing(), reference.GetSpacing(), rtol=0, atol=1e-6)
        or not np.allclose(out.GetOrigin(), reference.GetOrigin(), rtol=0, atol=tol)
        or not np.allclose(out.GetDirection(), reference.GetDirection(), rtol=0, atol=1e-6)
    ):
        raise GeometryError("the image does not lie on the reference grid (origin, spacing or direction differ)")
    return Geometry.of(reference).apply(out)


def same_geometry(a: sitk.Image, b: sitk.Image, *, atol_mm: float = 1e-4) -> bool:
    """True when ``a`` and ``b`` share size, spacing, origin and direction (to ``atol_mm``)."""
    return (
        a.GetSize() == b.GetSize()
        and np.allclose(a.GetSpacing(), b.GetSpacing(), rtol=0, atol=atol_mm)
        and np.allclose(a.GetOrigin(), b.GetOrigin(), rtol=0, atol=atol_mm)
        and np.allclose(a.GetDirection(), b.GetDirection(), rtol=0, atol=1e-6)
    )


def copy_geometry(array_zyx: np.ndarray, reference: sitk.Image) -> sitk.Image:
    """A new image from a ``(z, y, x)`` array with exactly ``reference``'s geometry."""
    expected = tuple(reversed(reference.GetSize()))
    if tuple(array_zyx.shape) != expected:
        raise GeometryError(f"expected an array of shape (z, y, x) = {expected}, got {tuple(array_zyx.shape)}")
    out = sitk.GetImageFromArray(array_zyx)
    out.CopyInformation(reference)
    return out


# ----------------------------------------------------------------------------- resampling
def _check_spacing(spacing_xyz: tuple[float, float, float] | list[float]) -> tuple[float, float, float]:
    values = tuple(float(s) for s in spacing_xyz)
    if len(values) != 3 or any(not (s > 0 and math.isfinite(s)) for s in values):
        raise GeometryError(f"expected three positive spacings in mm, got {list(spacing_xyz)}")
    return values  # type: ignore[return-value]


def _grid_for_spacing(
    image: sitk.Image | Geometry, spacing_xyz: tuple[float, float, float]
) -> tuple[tuple[int, int, int], tuple[float, float, float]]:
    """Size and origin of a grid with ``spacing_xyz`` covering the same physical extent.

    The field of view (from the first voxel's outer corner) is kept; the new voxel count is
    the extent divided by the new spacing, rounded, at least 1.
    """
    old_spacing = np.asarray(image.GetSpacing())
    new_spacing = np.asarray(spacing_xyz)
    extent = np.asarray(image.GetSize()) * old_spacing
    size = np.maximum(1, np.round(extent / new_spacing - 1e-6)).astype(int)
    direction = np.asarray(image.GetDirection()).reshape(3, 3)
    corner = np.asarray(image.GetOrigin()) - direction @ (old_spacing / 2)
    origin = corner + direction @ (new_spacing / 2)
    return (int(size[0]), int(size[1]), int(size[2])), (float(origin[0]), float(origin[1]), float(origin[2]))


def resample_to_spacing(
    image: sitk.Image,
    spacing_xyz: tuple[float, float, float],
    *,
    interpolator: int,
    default_value: float = 0.0,
    output_pixel_type: int | None = None,
) -> sitk.Image:
    """Resample onto a grid with ``spacing_xyz`` (mm) covering the same field of view.

    Prefer :func:`resample_image` / :func:`resample_label`, which choose the interpolator by
    the kind of volume.
    """
    spacing_xyz = _check_spacing(spacing_xyz)
    size, origin = _grid_for_spacing(image, spacing_xyz)
    return sitk.Resample(
        image,
        size,
        sitk.Transform(),
        interpolator,
        origin,
        spacing_xyz,
        image.GetDirection(),
        default_value,
        image.GetPixelID() if output_pixel_type is None else output_pixel_type,
    )


def spacing_for_size(image: sitk.Image, size_xyz: tuple[int, int, int]) -> tuple[float, float, float]:
    """The spacing (mm) that covers ``image``'s field of view with ``size_xyz`` voxels."""
    extent = np.asarray(image.GetSize()) * np.asarray(image.GetSpacing())
    return tuple(float(e / n) for e, n in zip(extent, size_xyz))  # type: ignore[return-value]


AIR_HU = -1024.0  # air: nothing in a patient is darker; below it lie only the scanner's padding values
LUNG_HU = -850.0  # aerated lung (inspiration); a voxel's lung share is linear from TISSUE_HU to this
TISSUE_HU = 40.0  # soft tissue next to the lung (chest wall, vessels, heart)


def below_air(image: sitk.Image, floor_hu: float = AIR_HU) -> bool:
    """Whether any voxel of ``image`` lies below ``floor_hu`` (the scanner's padding)."""
    stats = sitk.MinimumMaximumImageFilter()
    stats.Execute(image)
    return stats.GetMinimum() < floor_hu


def air_floor(image: sitk.Image, floor_hu: float = AIR_HU) -> sitk.Image:
    """``image`` with values below ``floor_hu`` raised to it (a new image; ``image`` itself where
    none is below). The scanner's padding outside its reconstruction circle (-2048, -3024) is no
    attenuation, and interpolated into the voxels along the circle it would make lung there
    darker than air; the networks' intensity window clips below air anyway. For a large scan,
    :func:`resample_floored` resamples without a floored copy of the whole of it."""
    return sitk.Clamp(image, lowerBound=floor_hu) if below_air(image, floor_hu) else image


def part_read_by(image: sitk.Image, grid: sitk.Image) -> sitk.Image:
    """The voxels of ``image`` that (linear) resampling onto ``grid`` reads: those within two
    voxels of the grid's extent, as an exact copy with its own origin (``image`` itself where
    that is all of it or the grid lies beyond it). Resampling the part gives the same values."""
    size = np.asarray(grid.GetSize())
    corners = [grid.TransformIndexToPhysicalPoint([int(c) for c in np.where(bits, size - 1, 0)]) for bits in np.ndindex(2, 2, 2)]
    idx = np.array([image.TransformPhysicalPointToContinuousIndex(c) for c in corners])
    n = np.asarray(image.GetSize())
    lo = np.clip(np.floor(idx.min(axis=0)).astype(int) - 2, 0, n)
    hi = np.clip(np.ceil(idx.max(axis=0)).astype(int) + 3, lo, n)
    if np.any(hi <= lo) or (np.all(lo == 0) and np.all(hi == n)):
        return image
    return image[int(lo[0]):int(hi[0]), int(lo[1]):int(hi[1]), int(lo[2]):int(hi[2])]


FLOOR_CHUNK_VOXELS = 32 * 2**20  # :func:`resample_floored` floors at most about this many input voxels at a time


def resample_floored(image: sitk.Image, grid: sitk.Image, *, floor_hu: float = AIR_HU, default_value: float = -1024.0,
                     output_pixel_type: int = sitk.sitkFloat32) -> sitk.Image:
    """``image`` (HU) resampled (linear) onto ``grid``'s geometry with its values below
    ``floor_hu`` raised to it first (:func:`air_floor`): the same values as
    ``resample_to_reference(air_floor(image), grid)``, without a floored copy of all of ``image``
    (slabs of ``grid``'s slices, each from the part of ``image`` it reads)."""
    if not below_air(image, floor_hu):
        return resample_to_reference(image, grid, default_value=default_value, output_pixel_type=output_pixel_type)
    nx, ny, nz = grid.GetSize()
    per_slice = max(1.0, float(np.prod(image.GetSize())) / nz)  # input voxels per output slice, about
    step = max(1, int(FLOOR_CHUNK_VOXELS // per_slice))
    if step >= nz:
        return resample_to_reference(air_floor(part_read_by(image, grid), floor_hu), grid, default_value=default_value,
                                     output_pixel_type=output_pixel_type)
    out = None
    for k in range(0, nz, step):
        sub = grid[:, :, k:k + step]
        part = sitk.GetArrayFromImage(resample_to_reference(air_floor(part_read_by(image, sub), floor_hu), sub,
                                                            default_value=default_value, output_pixel_type=output_pixel_type))
        if out is None:
            out = np.empty((nz, ny, nx), part.dtype)
        out[k:k + part.shape[0]] = part
    result = sitk.GetImageFromArray(out)
    result.CopyInformation(grid)
    return result


def in_plane_image(footprint: np.ndarray, like: sitk.Image | Geometry) -> sitk.Image | None:
    """A ``(y, x)`` mask over ``like``'s slices as a 2D float32 image with ``like``'s in-plane
    geometry (for :func:`resample_padding_raised`), or ``None`` where ``like``'s slices are not
    axial planes of its frame (an oblique z axis)."""
    d = np.asarray(like.GetDirection(), float).reshape(3, 3)
    if not (np.allclose(d[:2, 2], 0.0) and np.allclose(d[2, :2], 0.0)):
        return None
    out = sitk.GetImageFromArray(np.asarray(footprint, np.float32))
    out.SetSpacing(tuple(float(v) for v in like.GetSpacing()[:2]))
    out.SetOrigin(tuple(float(v) for v in like.GetOrigin()[:2]))
    out.SetDirection(tuple(float(v) for v in d[:2, :2].ravel()))
    return out


def resample_padding_raised(image: sitk.Image, grid: sitk.Image, padding: sitk.Image | None, value: float, *,
                            floor_hu: float = AIR_HU, default_value: float = -1024.0) -> sitk.Image:
    """``image`` (HU) resampled (linear, float32) onto ``grid``'s geometry as if the scanner's
    padding, of ``value`` at the same pixels of every slice (``padding``: that footprint from
    :func:`in_plane_image`, in ``image``'s frame), were ``floor_hu`` instead: exactly
    :func:`resample_floored`'s values where nothing else lies below ``floor_hu``, without
    touching the whole scan. Linear interpolation is linear in the values: the padding's share
    of each point is the footprint interpolated in-plane, the same in every slice. Padding at
    or above ``floor_hu`` is resampled as it is; ``padding`` ``None`` (an oblique scan) takes
    :func:`resample_floored`."""
    if value < floor_hu and padding is None:
        return resample_floored(image, grid, floor_hu=floor_hu, default_value=default_value)
    out = resample_to_reference(image, grid, default_value=default_value, output_pixel_type=sitk.sitkFloat32)
    if value >= floor_hu or padding is None:
        return out
    flat = in_plane_image(np.zeros(grid.GetSize()[1::-1], np.float32), grid)  # the grid's slice, in-plane
    if flat is None:  # the grid's slices are not axial planes
        return resample_floored(image, grid, floor_hu=floor_hu, default_value=default_value)
    share = sitk.GetArrayFromImage(sitk.Resample(padding, flat, sitk.Transform(), sitk.sitkLinear, 0.0, sitk.sitkFloat32))
    # the grid's slices that lie on the scan (elsewhere: the default value, nothing interpolated)
    nz = grid.GetSize()[2]
    zs = [image.TransformPhysicalPointToContinuousIndex(grid.TransformIndexToPhysicalPoint((0, 0, k)))[2] for k in range(nz)]
    on_scan = (np.asarray(zs) >= -0.5) & (np.asarray(zs) < image.GetSize()[2] - 0.5)
    if not share.any() or not on_scan.any():
        return out
    values = sitk.GetArrayFromImage(out)
    values[on_scan] += np.float32(floor_hu - value) * share[None]
    result = sitk.GetImageFromArray(values)
    result.CopyInformation(out)
    return result


def resample_image(
    image: sitk.Image,
    spacing_xyz: tuple[float, float, float],
    *,
    interpolation: Literal["linear", "bspline"] = "linear",
    default_value: float = -1024.0,
    output_pixel_type: int | None = sitk.sitkFloat32,
    padding: tuple[sitk.Image | None, float] | None = None,
) -> sitk.Image:
    """Resample an intensity image (HU) to ``spacing_xyz`` mm.

    Args:
        image: CT image.
        spacing_xyz: target spacing (x, y, z) in mm.
        interpolation: ``"linear"`` (default) or ``"bspline"`` (cubic B-spline).
        default_value: HU for points outside the input (air, -1024).
        output_pixel_type: SimpleITK pixel type of the result (float32 by default; ``None``
            keeps the input's type).
        padding: the scanner's padding, raised to air before interpolating (linear only; see
            :func:`resample_padding_raised`).
    """
    if interpolation not in _IMAGE_INTERP:
        raise GeometryError(f"image interpolation must be one of {sorted(_IMAGE_INTERP)}, got {interpolation!r}")
    if padding is not None:
        if interpolation != "linear" or output_pixel_type != sitk.sitkFloat32:
            raise GeometryError("padding: linear interpolation to float32 only")
        size, origin = _grid_for_spacing(image, _check_spacing(spacing_xyz))
        grid = sitk.Image(list(size), sitk.sitkUInt8)
        grid.SetSpacing(tuple(float(v) for v in spacing_xyz))
        grid.SetOrigin(origin)
        grid.SetDirection(image.GetDirection())
        return resample_padding_raised(image, grid, *padding, default_value=default_value)
    return resample_to_spacing(
        image, spacing_xyz, interpolator=_IMAGE_INTERP[interpolation], default_value=default_value,
        output_pixel_type=output_pixel_type,
    )


def resample_label(
    label: sitk.Image,
    spacing_xyz: tuple[float, float, float],
    *,
    interpolation: Literal["nearest", "label_gaussian"] = "nearest",
) -> sitk.Image:
    """Resample a label map to ``spacing_xyz`` mm; values stay labels (no blending).

    ``"label_gaussian"`` gives smoother boundaries than nearest neighbour when upsampling.
    """
    if interpolation not in _LABEL_INTERP:
        raise GeometryError(f"label interpolation must be one of {sorted(_LABEL_INTERP)}, got {interpolation!r}")
    return resample_to_spacing(label, spacing_xyz, interpolator=_LABEL_INTERP[interpolation], default_value=0)


def resample_to_reference(
    image: sitk.Image,
    reference: sitk.Image,
    *,
    interpolator: int = sitk.sitkLinear,
    default_value: float = 0.0,
    output_pixel_type: int | None = None,
) -> sitk.Image:
    """Resample ``image`` onto ``reference``'s grid (size, spacing, origin, direction)."""
    return sitk.Resample(
        image,
        reference,
        sitk.Transform(),
        interpolator,
        default_value,
        image.GetPixelID() if output_pixel_type is None else output_pixel_type,
    )


# ----------------------------------------------------------------------------- boxes and crops
@dataclass(frozen=True)
class Geometry:
    """The grid of an image without its voxels: size (x, y, z), spacing (mm), origin (mm) and
    direction, with SimpleITK's getter names so that it stands in for an image wherever only
    the geometry is read (:func:`from_canonical`, :func:`index_to_physical`). Lets a caller
    drop a large image early and still give its result exactly that image's geometry."""

    size: tuple[int, int, int]
    spacing: tuple[float, float, float]
    origin: tuple[float, float, float]
    direction: tuple[float, ...]

    @classmethod
    def of(cls, image: sitk.Image | Geometry) -> Geometry:
        return cls(tuple(image.GetSize()), tuple(image.GetSpacing()), tuple(image.GetOrigin()), tuple(image.GetDirection()))  # type: ignore[arg-type]

    def GetSize(self) -> tuple[int, int, int]:  # noqa: N802 - SimpleITK's names
        return self.size

    def GetSpacing(self) -> tuple[float, float, float]:  # noqa: N802
        return self.spacing

    def GetOrigin(self) -> tuple[float, float, float]:  # noqa: N802
        return self.origin

    def GetDirection(self) -> tuple[float, ...]:  # noqa: N802
        return self.direction

    def apply(self, image: sitk.Image) -> sitk.Image:
        """Give ``image`` (of the same size) exactly this geometry; returns it."""
        if tuple(image.GetSize()) != self.size:
            raise GeometryError(f"expected an image of size {self.size}, got {image.GetSize()}")
        image.SetSpacing(self.spacing)
        image.SetOrigin(self.origin)
        image.SetDirection(self.direction)
        return image


@dataclass(frozen=True)
class Box:
    """An axis-aligned box in LPS physical space, in mm: ``lo_xyz`` <= p <= ``hi_xyz``."""

    lo_xyz: tuple[float, float, float]
    hi_xyz: tuple[float, float, float]

    def __post_init__(self) -> None:
        if len(self.lo_xyz) != 3 or len(self.hi_xyz) != 3:
            raise GeometryError(f"a box needs three lower and three upper bounds, got {self.lo_xyz}, {self.hi_xyz}")
        if any(h < lo for lo, h in zip(self.lo_xyz, self.hi_xyz)):
            raise GeometryError(f"a box needs lo <= hi on every axis, got {self.lo_xyz} and {self.hi_xyz}")

    @property
    def size_mm(self) -> tuple[float, float, float]:
        return tuple(h - lo for lo, h in zip(self.lo_xyz, self.hi_xyz))  # type: ignore[return-value]

    @property
    def center_mm(self) -> tuple[float, float, float]:
        return tuple((h + lo) / 2 for lo, h in zip(self.lo_xyz, self.hi_xyz))  # type: ignore[return-value]

    def expand(self, margin_mm: float | tuple[float, float, float]) -> Box:
        m = (margin_mm,) * 3 if isinstance(margin_mm, (int, float)) else tuple(margin_mm)
        return Box(
            tuple(v - d for v, d in zip(self.lo_xyz, m)),  # type: ignore[arg-type]
            tuple(v + d for v, d in zip(self.hi_xyz, m)),  # type: ignore[arg-type]
        )

    def union(self, other: Box) -> Box:
        """The smallest box holding both."""
        return Box(
            tuple(min(a, b) for a, b in zip(self.lo_xyz, other.lo_xyz)),  # type: ignore[arg-type]
            tuple(max(a, b) for a, b in zip(self.hi_xyz, other.hi_xyz)),  # type: ignore[arg-type]
        )

    def to_dict(self) -> dict[str, list[float]]:
        return {"lo_xyz_mm": [round(v, 3) for v in self.lo_xyz], "hi_xyz_mm": [round(v, 3) for v in self.hi_xyz]}


def index_to_physical(image: sitk.Image | Geometry, index_xyz: np.ndarray) -> np.ndarray:
    """Physical points (N, 3) of continuous indices (N, 3) of ``image``'s grid, vectorised."""
    direction = np.asarray(image.GetDirection()).reshape(3, 3)
    return np.asarray(image.GetOrigin()) + (index_xyz * np.asarray(image.GetSpacing())) @ direction.T


def centre_x_index(image: sitk.Image | Geometry) -> float:
    """The continuous x index at which the row of voxels through the middle of ``image``'s
    grid reaches physical x = 0: in a CT scanner's patient coordinates the gantry's centre,
    where the patient lies."""
    index = (np.asarray(image.GetSize(), float) - 1.0) / 2.0
    middle_x = index_to_physical(image, index[None])[0, 0]
    step_x = image.GetSpacing()[0] * image.GetDirection()[0]  # physical x per x index
    return float(index[0] - middle_x / step_x)


ORIGIN_EDGE_MM = 2.0  # x = 0 this close to an image's first or last column: its origin was reset to a corner
CENTRE_REACH_MM = 50.0  # the scanner's centre lies at most this far beyond a view's x extent (the lungs meet there)


def origin_at_edge(image: sitk.Image | Geometry) -> bool:
    """Whether physical x = 0 lies at ``image``'s first or last column (within a voxel, or
    :data:`ORIGIN_EDGE_MM`): an origin reset to the image's corner, as in a file saved without
    its scanner coordinates (an identity affine). A scanner's view ends at its centre only by
    chance."""
    i, n, step = centre_x_index(image), image.GetSize()[0], image.GetSpacing()[0]
    return min(abs(i), abs(i - (n - 1))) * step <= max(step, ORIGIN_EDGE_MM)


def scanner_centre_x_index(scan: sitk.Image | Geometry, grid: sitk.Image | Geometry) -> float | None:
    """:func:`centre_x_index` on ``grid``, where ``scan``'s coordinates can place the scanner's
    centre; None where they cannot: x = 0 at the scan's edge (:func:`origin_at_edge`) or more
    than :data:`CENTRE_REACH_MM` beyond its x extent (the patient lies at the scanner's centre,
    and a view that shows a lung reaches to within a few cm of the body's middle)."""
    i, n = centre_x_index(scan), scan.GetSize()[0]
    reach = CENTRE_REACH_MM / scan.GetSpacing()[0]
    if origin_at_edge(scan) or not -0.5 - reach <= i <= n - 0.5 + reach:
        return None
    return centre_x_index(grid)


def _physical_to_index(image: sitk.Image | Geometry, points_xyz: np.ndarray) -> np.ndarray:
    direction = np.asarray(image.GetDirection()).reshape(3, 3)
    return ((points_xyz - np.asarray(image.GetOrigin())) @ direction) / np.asarray(image.GetSpacing())


def _corners(lo: np.ndarray | tuple[float, ...], hi: np.ndarray | tuple[float, ...]) -> np.ndarray:
    """The 8 corners (8, 3) of the box spanned by ``lo`` and ``hi``."""
    return np.array(np.meshgrid(*zip(lo, hi), indexing="ij")).reshape(3, -1).T


def box_from_mask(label: sitk.Image, values: int | tuple[int, ...] | None = None) -> Box | None:
    """Physical bounding box (voxel extents included) of the voxels whose value is in
    ``values`` (any non-zero voxel when ``None``); ``None`` when there are none."""
    array = sitk.GetArrayViewFromImage(label)
    mask = array != 0 if values is None else np.isin(array, np.atleast_1d(values))
    if not mask.any():
        return None
    lo_idx, hi_idx = [], []
    for axis in range(3):  # array axes are (z, y, x)
        other = tuple(a for a in range(3) if a != axis)
        hit = np.flatnonzero(mask.any(axis=other))
        lo_idx.append(hit[0])
        hi_idx.append(hit[-1])
    lo = np.array(lo_idx[::-1], dtype=float) - 0.5  # to (x, y, z), voxel outer faces
    hi = np.array(hi_idx[::-1], dtype=float) + 0.5
    pts = index_to_physical(label, _corners(lo, hi))
    return Box(tuple(pts.min(0).tolist()), tuple(pts.max(0).tolist()))  # type: ignore[arg-type]


def box_index_range(image: sitk.Image | Geometry, box: Box) -> tuple[np.ndarray, np.ndarray]:
    """Index range ``[lo, hi)`` (x, y, z) of the voxels of ``image`` that overlap ``box``
    (mm); it may reach outside the image."""
    idx = _physical_to_index(image, _corners(box.lo_xyz, box.hi_xyz))
    # voxel i spans [i - 0.5, i + 0.5] in index units; keep those that overlap the box
    lo = np.floor(idx.min(0) + 0.5 + 1e-6).astype(int)
    hi = np.ceil(idx.max(0) - 0.5 - 1e-6).astype(int) + 1  # exclusive
    return lo, hi


def lattice_grid(image: sitk.Image | Geometry, spacing_xyz: tuple[float, float, float], box: Box) -> sitk.Image:
    """An empty grid (uint8 reference image) of ``spacing_xyz`` mm covering ``box`` and the
    centres of all of ``image``'s voxels that overlap it (:func:`box_index_range`; with thick
    slices they reach past the box), whose voxels are voxels of
    ``resample_to_spacing(image, spacing_xyz)``'s grid (extended beyond the image where the box
    is): resampling ``image`` onto it gives exactly the values that resampling the whole image
    would give there, wherever the box lies; and values on it interpolate onto every voxel of
    ``image`` in the box without falling off its edge."""
    spacing = np.asarray(_check_spacing(spacing_xyz))
    direction = np.asarray(image.GetDirection()).reshape(3, 3)
    _, first = _grid_for_spacing(image, tuple(spacing))  # type: ignore[arg-type]
    start, stop = box_index_range(image, box)
    centres = index_to_physical(image, _corners(start.astype(float), stop.astype(float) - 1.0))
    points = np.concatenate([_corners(box.lo_xyz, box.hi_xyz), centres])
    idx = ((points - np.asarray(first)) @ direction) / spacing
    lo = np.floor(idx.min(0) + 1e-6).astype(int)
    hi = np.ceil(idx.max(0) - 1e-6).astype(int)
    ref = sitk.Image([int(v) for v in hi - lo + 1], sitk.sitkUInt8)
    ref.SetSpacing(tuple(float(v) for v in spacing))
    ref.SetDirection(image.GetDirection())
    ref.SetOrigin(tuple(float(v) for v in np.asarray(first) + direction @ (lo * spacing)))
    return ref


def crop_to_box(image: sitk.Image, box: Box, *, pad_value: float = 0.0) -> sitk.Image:
    """Crop ``image`` to the voxels whose centres cover ``box`` (mm), padding with
    ``pad_value`` where the box leaves the image. Exact: no interpolation; the result keeps
    spacing and direction, and its origin is the physical position of its first voxel."""
    lo, hi = box_index_range(image, box)
    size = np.asarray(image.GetSize())
    in_lo = np.clip(lo, 0, size)
    in_hi = np.clip(hi, 0, size)
    if np.any(in_hi <= in_lo):  # entirely outside: an all-padding image on the right grid
        out = sitk.Image([int(v) for v in np.maximum(hi - lo, 1)], image.GetPixelID())
        out.SetSpacing(image.GetSpacing())
        out.SetDirection(image.GetDirection())
        out.SetOrigin(tuple(index_to_physical(image, lo[None].astype(float))[0].tolist()))
        return out + pad_value if pad_value else out
    roi = sitk.RegionOfInterest(image, [int(v) for v in in_hi - in_lo], [int(v) for v in in_lo])
    pad_lo = [int(v) for v in in_lo - lo]
    pad_hi = [int(v) for v in hi - in_hi]
    if any(pad_lo) or any(pad_hi):
        roi = sitk.ConstantPad(roi, pad_lo, pad_hi, pad_value)
    return roi


def paste(crop: sitk.Image, into: sitk.Image) -> sitk.Image:
    """Write ``crop`` (on a sub-grid of ``into``: same spacing and direction, origin on a
    voxel centre) into a copy of ``into``; parts outside ``into`` are dropped."""
    if not np.allclose(crop.GetSpacing(), into.GetSpacing(), rtol=0, atol=1e-6) or not np.allclose(
        crop.GetDirection(), into.GetDirection(), rtol=0, atol=1e-6
    ):
        raise GeometryError("paste needs the crop on the target's grid (same spacing and direction)")
    start = _physical_to_index(into, np.asarray(crop.GetOrigin())[None])[0]
    start_i = np.round(start).astype(int)
    if np.max(np.abs(start - start_i)) > 1e-3:
        raise GeometryError(f"paste needs the crop's origin on a voxel centre of the target, got index {start.tolist()}")
    size = np.asarray(into.GetSize())
    csize = np.asarray(crop.GetSize())
    dst_lo = np.clip(start_i, 0, size)
    dst_hi = np.clip(start_i + csize, 0, size)
    out = sitk.Image(into)
    if np.any(dst_hi <= dst_lo):
        return out
    src_lo = dst_lo - start_i
    piece = sitk.Cast(crop, into.GetPixelID()) if crop.GetPixelID() != into.GetPixelID() else crop
    return sitk.Paste(
        out, piece, [int(v) for v in dst_hi - dst_lo], [int(v) for v in src_lo], [int(v) for v in dst_lo]
    )


# ----------------------------------------------------------------------------- measurements
def centroid_index(array_zyx: np.ndarray, value: int) -> np.ndarray | None:
    """Mean (x, y, z) index of the voxels of a ``(z, y, x)`` array equal to ``value``; ``None``
    if there are none. Per-axis projections in slabs of 64 slices: no index arrays and no
    full-size temporary for a big mask."""
    mean_zyx = []
    for axis in range(3):
        other = tuple(a for a in range(3) if a != axis)
        hist = np.zeros(array_zyx.shape[axis], np.int64)
        for z0 in range(0, array_zyx.shape[0], 64):
            part = (array_zyx[z0 : z0 + 64] == value).sum(axis=other, dtype=np.int64)
            if axis == 0:
                hist[z0 : z0 + len(part)] += part
            else:
                hist += part
        count = int(hist.sum())
        if count == 0:
            return None
        mean_zyx.append(float((hist * np.arange(len(hist))).sum() / count))
    return np.array(mean_zyx[::-1])


def physical_centroid(label: sitk.Image, value: int) -> tuple[float, float, float] | None:
    """Mean LPS position (mm) of the voxels equal to ``value``; ``None`` if there are none."""
    mean_xyz = centroid_index(sitk.GetArrayViewFromImage(label), value)
    if mean_xyz is None:
        return None
    return tuple(index_to_physical(label, mean_xyz[None])[0].tolist())  # type: ignore[return-value]


def voxel_volume_ml(image: sitk.Image | Geometry) -> float:
    """Volume of one voxel in millilitres."""
    return float(np.prod(image.GetSpacing())) / 1000.0
