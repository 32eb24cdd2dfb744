"""Orientation round trips, resampling, boxes, crop and paste in physical space."""

from __future__ import annotations

import numpy as np
import pytest
import SimpleITK as sitk

from segpipe import spatial
from segpipe.errors import GeometryError
from tests.conftest import ORIENTATIONS, make_volume, oblique_permuted


def _physical_of_voxel(image: sitk.Image, value_index_xyz: tuple[int, int, int]) -> tuple[float, ...]:
    return image.TransformIndexToPhysicalPoint(value_index_xyz)


@pytest.mark.parametrize("orientation", ORIENTATIONS + ["oblique"])
def test_canonical_round_trip_is_exact(orientation: str) -> None:
    image = make_volume(orientation="LPS" if orientation == "oblique" else orientation)
    if orientation == "oblique":
        image = oblique_permuted(image)
    canonical, code = spatial.to_canonical(image)
    assert spatial.orientation_code(canonical) == "LPS"
    if orientation != "oblique":
        assert canonical.GetDirection() == pytest.approx(np.eye(3).ravel().tolist(), abs=1e-12)
    back = spatial.from_canonical(canonical, image)
    assert back.GetSize() == image.GetSize()
    assert back.GetSpacing() == image.GetSpacing()
    assert back.GetOrigin() == image.GetOrigin()
    assert back.GetDirection() == image.GetDirection()
    np.testing.assert_array_equal(sitk.GetArrayViewFromImage(back), sitk.GetArrayViewFromImage(image))


@pytest.mark.parametrize("orientation", ["RAS", "LAS", "LPI"])
def test_reorientation_keeps_every_voxel_in_place(orientation: str) -> None:
    image = make_volume(orientation=orientation)
    canonical, _ = spatial.to_canonical(image)
    array = sitk.GetArrayViewFromImage(image)
    rng = np.random.default_rng(3)
    for _ in range(20):
        idx = tuple(int(rng.integers(0, s)) for s in image.GetSize())
        point = image.TransformIndexToPhysicalPoint(idx)
        cidx = canonical.TransformPhysicalPointToIndex(point)
        assert canonical[cidx] == array[idx[2], idx[1], idx[0]]


def test_reorient_rejects_bad_codes() -> None:
    with pytest.raises(GeometryError, match="orientation code"):
        spatial.reorient(make_volume(), "LLS")
    with pytest.raises(GeometryError, match="orientation code"):
        spatial.reorient(make_volume(), "XYZ")


def test_from_canonical_refuses_foreign_grid() -> None:
    image = make_volume(orientation="RAS")
    other = make_volume(orientation="LPS", origin_xyz=(0.0, 0.0, 0.0))
    with pytest.raises(GeometryError, match="reference grid"):
        spatial.from_canonical(other, image)


@pytest.mark.parametrize("orientation", ["LPS", "RAS", "oblique"])
@pytest.mark.parametrize("target", [(1.5, 1.5, 1.5), (4.0, 4.0, 4.0), (0.5, 0.5, 1.25)])
def test_resample_keeps_field_of_view(orientation: str, target: tuple[float, float, float]) -> None:
    image = make_volume(size_xyz=(40, 36, 20), spacing_xyz=(0.8, 0.7, 2.5), orientation="LPS" if orientation == "oblique" else orientation)
    if orientation == "oblique":
        image = oblique_permuted(image)
    out = spatial.resample_image(image, target)
    assert out.GetSpacing() == pytest.approx(target)
    assert out.GetDirection() == image.GetDirection()
    expected = np.maximum(1, np.round(np.array(image.GetSize()) * np.array(image.GetSpacing()) / np.array(target)))
    assert out.GetSize() == tuple(int(v) for v in expected)

    # outer corner of the first voxel is the same physical point in both grids
    def corner(img: sitk.Image) -> np.ndarray:
        return np.array(img.TransformContinuousIndexToPhysicalPoint((-0.5, -0.5, -0.5)))

    np.testing.assert_allclose(corner(out), corner(image), atol=1e-6)
    assert out.GetPixelID() == sitk.sitkFloat32


def test_resample_image_is_linear_on_a_ramp() -> None:
    array = np.tile(np.arange(32, dtype=np.float32) * 10.0, (8, 16, 1))  # HU grows along x
    image = sitk.GetImageFromArray(array)
    image.SetSpacing((1.0, 1.0, 1.0))
    out = spatial.resample_image(image, (2.0, 1.0, 1.0))
    values = sitk.GetArrayViewFromImage(out)[4, 8, 1:-1]
    # new voxel i sits at old x = 2i + 0.5: the ramp value is 10 * (2i + 0.5)
    np.testing.assert_allclose(values, 10 * (2 * np.arange(1, 15) + 0.5), atol=1e-3)
    bspline = spatial.resample_image(image, (2.0, 1.0, 1.0), interpolation="bspline")
    np.testing.assert_allclose(sitk.GetArrayViewFromImage(bspline)[4, 8, 2:-2], values[1:-1], atol=0.5)


def test_air_floor_raises_padding_to_air_and_leaves_other_scans_alone() -> None:
    array = np.full((4, 6, 8), -850, np.int16)
    array[:, :, :2] = -3024  # the scanner's padding
    array[0, 0, 7] = 1200
    image = sitk.GetImageFromArray(array)
    image.SetSpacing((0.7, 0.7, 2.5))
    image.SetOrigin((-10.0, 5.0, 30.0))
    out = spatial.air_floor(image)
    got = sitk.GetArrayViewFromImage(out)
    assert out.GetPixelID() == image.GetPixelID() and spatial.same_geometry(out, image, atol_mm=0)
    assert (got[:, :, :2] == spatial.AIR_HU).all() and (got[:, :, 2:] == array[:, :, 2:]).all()
    # interpolated along the padding's edge, the lung is no darker than air
    half = spatial.resample_image(out, (1.4, 0.7, 2.5))
    assert sitk.GetArrayViewFromImage(half).min() >= spatial.AIR_HU
    assert sitk.GetArrayFromImage(spatial.resample_image(image, (1.4, 0.7, 2.5))).min() < spatial.AIR_HU
    plain = sitk.GetImageFromArray(np.full((4, 6, 8), -1024, np.int16))
    assert spatial.air_floor(plain) is plain  # nothing below air: the same image, no copy


@pytest.mark.parametrize("chunk", [10**9, 5000])
def test_resample_floored_equals_resampling_the_floored_scan(monkeypatch: pytest.MonkeyPatch, chunk: int) -> None:
    """Slab by slab, each from the part of the scan it reads, the values are exactly those of
    resampling a floored copy of the whole scan (which it does not make); onto a grid over part
    of the scan only that part is read."""
    rng = np.random.default_rng(0)
    array = rng.integers(-1000, 400, size=(80, 60, 70)).astype(np.int16)
    array[:, :, :20] = -3024
    image = sitk.GetImageFromArray(array)
    image.SetSpacing((0.7, 0.8, 2.5))
    image.SetOrigin((3.0, -4.0, 10.0))
    monkeypatch.setattr(spatial, "FLOOR_CHUNK_VOXELS", chunk)
    expected = spatial.resample_image(spatial.air_floor(image), (4.0, 4.0, 4.0))
    whole = spatial.resample_floored(image, expected)
    assert spatial.same_geometry(whole, expected, atol_mm=1e-9)
    np.testing.assert_array_equal(sitk.GetArrayViewFromImage(whole), sitk.GetArrayViewFromImage(expected))
    lattice = spatial.lattice_grid(image, (1.5, 1.5, 1.5), spatial.Box((10.0, 0.0, 40.0), (30.0, 30.0, 120.0)))
    part = spatial.part_read_by(image, lattice)
    assert np.prod(part.GetSize()) < 0.5 * np.prod(image.GetSize())
    got, want = (sitk.GetArrayFromImage(spatial.resample_to_reference(src, lattice, default_value=-1024.0,
                                                                     output_pixel_type=sitk.sitkFloat32))
                 for src in (part, image))
    np.testing.assert_array_equal(got, want)  # the part holds every voxel the lattice reads
    np.testing.assert_array_equal(sitk.GetArrayFromImage(spatial.resample_floored(image, lattice)),
                                  sitk.GetArrayFromImage(spatial.resample_to_reference(
                                      spatial.air_floor(image), lattice, default_value=-1024.0, output_pixel_type=sitk.sitkFloat32)))
    plain = sitk.GetImageFromArray(np.maximum(array, -1024).astype(np.int16))
    plain.CopyInformation(image)
    np.testing.assert_array_equal(sitk.GetArrayFromImage(spatial.resample_floored(plain, expected)),
                                  sitk.GetArrayViewFromImage(expected))


@pytest.mark.parametrize("spacing", [(4.0, 4.0, 4.0), (1.5, 1.5, 1.5)])
def test_resampling_with_the_padding_raised_equals_resampling_the_floored_scan(spacing: tuple[float, float, float]) -> None:
    """The scanner's padding (-3024 at the same pixels of every slice) raised to air by its
    in-plane share of each point gives the values of resampling a floored copy of the scan,
    on the coarse grid and on a fine lattice over part of it; padding at air changes nothing."""
    rng = np.random.default_rng(1)
    array = rng.integers(-1000, 400, size=(40, 60, 70)).astype(np.int16)
    yy, xx = np.mgrid[:60, :70]
    footprint = (yy - 30) ** 2 + (xx - 35) ** 2 > 27**2
    array[:, footprint] = -3024
    image = sitk.GetImageFromArray(array)
    image.SetSpacing((0.7, 0.8, 2.5))
    image.SetOrigin((3.0, -4.0, 10.0))
    padding = (spatial.in_plane_image(footprint, image), -3024.0)
    got = spatial.resample_image(image, spacing, padding=padding)
    expected = spatial.resample_image(spatial.air_floor(image), spacing)
    np.testing.assert_allclose(sitk.GetArrayViewFromImage(got), sitk.GetArrayViewFromImage(expected), atol=1e-3)
    lattice = spatial.lattice_grid(image, spacing, spatial.Box((10.0, 0.0, 20.0), (40.0, 30.0, 120.0)))
    np.testing.assert_allclose(sitk.GetArrayFromImage(spatial.resample_padding_raised(image, lattice, *padding)),
                               sitk.GetArrayFromImage(spatial.resample_floored(image, lattice)), atol=1e-3)
    assert sitk.GetArrayFromImage(spatial.resample_image(image, spacing)).min() < spatial.AIR_HU  # as it is: darker than air
    same = spatial.resample_image(image, spacing, padding=(padding[0], -1024.0))
    np.testing.assert_array_equal(sitk.GetArrayViewFromImage(same), sitk.GetArrayFromImage(spatial.resample_image(image, spacing)))
    oblique = spatial.Geometry(image.GetSize(), image.GetSpacing(), image.GetOrigin(), (1.0, 0.0, 0.0, 0.0, 0.8, 0.6, 0.0, -0.6, 0.8))
    assert spatial.in_plane_image(footprint, oblique) is None  # its slices are not axial: the floored path instead


@pytest.mark.parametrize("interpolation", ["nearest", "label_gaussian"])
def test_resample_label_keeps_label_values(interpolation: str) -> None:
    label = sitk.Image(80, 60, 24, sitk.sitkUInt8)
    label.SetSpacing((0.7, 0.7, 2.5))
    array = np.zeros((24, 60, 80), np.uint8)
    array[2:20, 5:55, 3:38] = 1
    array[2:20, 5:55, 42:77] = 2
    label = spatial.copy_geometry(array, label)
    out = spatial.resample_label(label, (1.5, 1.5, 1.5), interpolation=interpolation)  # type: ignore[arg-type]
    values = set(np.unique(sitk.GetArrayViewFromImage(out)).tolist())
    assert values == {0, 1, 2}
    assert out.GetPixelID() == sitk.sitkUInt8
    vol_in = (array == 1).sum() * spatial.voxel_volume_ml(label)
    vol_out = (sitk.GetArrayViewFromImage(out) == 1).sum() * spatial.voxel_volume_ml(out)
    assert vol_out == pytest.approx(vol_in, rel=0.1)


def test_resample_rejects_bad_arguments() -> None:
    with pytest.raises(GeometryError, match="positive spacings"):
        spatial.resample_image(make_volume(), (1.0, 0.0, 1.0))
    with pytest.raises(GeometryError, match="interpolation"):
        spatial.resample_image(make_volume(), (1.0, 1.0, 1.0), interpolation="nearest")  # type: ignore[arg-type]
    with pytest.raises(GeometryError, match="interpolation"):
        spatial.resample_label(make_volume(), (1.0, 1.0, 1.0), interpolation="linear")  # type: ignore[arg-type]


def test_resample_to_reference_puts_values_back() -> None:
    image = make_volume(size_xyz=(20, 20, 10), spacing_xyz=(1.0, 1.0, 2.0), orientation="RAS")
    up = spatial.resample_to_reference(spatial.resample_label(image, (0.5, 0.5, 1.0)), image, interpolator=sitk.sitkNearestNeighbor)
    np.testing.assert_array_equal(sitk.GetArrayViewFromImage(up), sitk.GetArrayViewFromImage(image))


@pytest.mark.parametrize("orientation", ["LPS", "RAS", "LPI", "oblique"])
def test_box_crop_paste_round_trip(orientation: str) -> None:
    image = make_volume(size_xyz=(30, 26, 14), orientation="LPS" if orientation == "oblique" else orientation)
    if orientation == "oblique":
        image = oblique_permuted(image)
    array = np.zeros(tuple(reversed(image.GetSize())), np.uint8)
    array[3:9, 5:20, 7:18] = 2
    mask = spatial.copy_geometry(array, image)
    box = spatial.box_from_mask(mask, 2)
    assert box is not None
    crop = spatial.crop_to_box(mask, box)
    assert (sitk.GetArrayViewFromImage(crop) == 2).sum() == (array == 2).sum()  # nothing lost
    if orientation == "oblique":  # a physical box around a rotated block holds more voxels
        assert all(c >= n for c, n in zip(crop.GetSize(), (11, 15, 6)))
    else:
        assert crop.GetSize() == (11, 15, 6)  # exactly the mask's voxels
        # the crop's first voxel is at the physical position of the mask's first voxel
        np.testing.assert_allclose(crop.GetOrigin(), image.TransformIndexToPhysicalPoint((7, 5, 3)), atol=1e-6)
    empty = spatial.copy_geometry(np.zeros_like(array), image)
    pasted = spatial.paste(crop, empty)
    np.testing.assert_array_equal(sitk.GetArrayViewFromImage(pasted), array)


def test_crop_beyond_the_image_pads_and_paste_drops_outside() -> None:
    image = make_volume(size_xyz=(20, 20, 10), spacing_xyz=(1.0, 1.0, 1.0), origin_xyz=(0.0, 0.0, 0.0))
    box = spatial.Box((-5.0, 2.0, 2.0), (4.0, 6.0, 12.0))  # leaves the image at -x and +z
    crop = spatial.crop_to_box(image, box, pad_value=-1024)
    assert crop.GetSize() == (10, 5, 11)
    assert crop.GetOrigin() == pytest.approx((-5.0, 2.0, 2.0))
    arr = sitk.GetArrayViewFromImage(crop)
    assert (arr[:, :, :5] == -1024).all() and (arr[8:] == -1024).all()
    np.testing.assert_array_equal(arr[:8, :, 5:], sitk.GetArrayViewFromImage(image)[2:10, 2:7, 0:5])
    back = spatial.paste(crop, image)
    np.testing.assert_array_equal(sitk.GetArrayViewFromImage(back), sitk.GetArrayViewFromImage(image))
    outside = spatial.crop_to_box(image, spatial.Box((100.0, 100.0, 100.0), (103.0, 101.0, 101.0)), pad_value=7)
    assert (sitk.GetArrayViewFromImage(outside) == 7).all()


def test_box_helpers() -> None:
    box = spatial.Box((0.0, 0.0, 0.0), (10.0, 20.0, 30.0)).expand(5.0)
    assert box.lo_xyz == (-5.0, -5.0, -5.0) and box.size_mm == (20.0, 30.0, 40.0)
    assert box.center_mm == (5.0, 10.0, 15.0)
    with pytest.raises(GeometryError, match="lo <= hi"):
        spatial.Box((1.0, 0.0, 0.0), (0.0, 1.0, 1.0))
    assert spatial.box_from_mask(sitk.Image(4, 4, 4, sitk.sitkUInt8)) is None


@pytest.mark.parametrize("orientation", ORIENTATIONS)
def test_physical_centroid_follows_the_patient_not_the_array(orientation: str) -> None:
    canonical = make_volume(size_xyz=(20, 10, 6), spacing_xyz=(1.0, 1.0, 1.0), origin_xyz=(0.0, 0.0, 0.0))
    array = np.zeros((6, 10, 20), np.uint8)
    array[:, :, :10] = 1  # low x: patient's right in LPS
    array[:, :, 10:] = 2
    label = spatial.reorient(spatial.copy_geometry(array, canonical), orientation)
    right = spatial.physical_centroid(label, 1)
    left = spatial.physical_centroid(label, 2)
    assert right is not None and left is not None
    assert right[0] == pytest.approx(4.5) and left[0] == pytest.approx(14.5)
    assert spatial.physical_centroid(label, 3) is None


@pytest.mark.parametrize("orientation", ["LPS", "RAI", "LAS"])
def test_lattice_grid_gives_the_whole_scans_fine_voxels_wherever_the_box_lies(orientation: str) -> None:
    image = make_volume((40, 36, 20), (0.7, 0.9, 2.5), orientation=orientation, dtype=np.float32)
    fine_mm = (1.5, 1.5, 1.5)
    whole = spatial.resample_image(image, fine_mm)
    whole_arr = sitk.GetArrayFromImage(whole)
    lo_img = np.asarray(image.TransformContinuousIndexToPhysicalPoint((0, 0, 0)))
    hi_img = np.asarray(image.TransformContinuousIndexToPhysicalPoint([s - 1 for s in image.GetSize()]))
    lo_all, hi_all = np.minimum(lo_img, hi_img), np.maximum(lo_img, hi_img)
    for shift in (0.0, 0.37, 1.1):  # boxes that start anywhere between lattice points
        box = spatial.Box(tuple(lo_all + (hi_all - lo_all) * 0.2 + shift), tuple(lo_all + (hi_all - lo_all) * 0.7 + shift))
        ref = spatial.lattice_grid(image, fine_mm, box)
        part = spatial.resample_to_reference(image, ref, default_value=-1024.0, output_pixel_type=sitk.sitkFloat32)
        # every voxel of the part is a voxel of the whole scan's fine grid, with the same value
        start = np.round(np.asarray(whole.TransformPhysicalPointToContinuousIndex(ref.GetOrigin()))).astype(int)
        assert np.allclose(whole.TransformIndexToPhysicalPoint([int(v) for v in start]), ref.GetOrigin(), atol=1e-6)
        sx, sy, sz = ref.GetSize()
        block = whole_arr[start[2]:start[2] + sz, start[1]:start[1] + sy, start[0]:start[0] + sx]
        assert np.allclose(sitk.GetArrayViewFromImage(part), block, atol=1e-3)
        # and the part covers the box
        corners = [ref.TransformContinuousIndexToPhysicalPoint((0, 0, 0)), ref.TransformContinuousIndexToPhysicalPoint([s - 1 for s in ref.GetSize()])]
        c = np.sort(np.asarray(corners), axis=0)
        assert np.all(c[0] <= np.asarray(box.lo_xyz) + 1e-6) and np.all(c[1] >= np.asarray(box.hi_xyz) - 1e-6)


def test_lattice_grid_covers_every_voxel_a_box_touches_with_thick_slices() -> None:
    image = make_volume((30, 30, 24), (0.7, 0.7, 5.0), dtype=np.float32)
    for lo_z in (-90.0, -88.3, -86.1):
        box = spatial.Box((-5.0, 36.0, lo_z), (3.3, 41.0, lo_z + 31.0))
        ref = spatial.lattice_grid(image, (1.5, 1.5, 1.5), box)
        start, stop = spatial.box_index_range(image, box)
        assert stop[2] - start[2] >= 7
        for corner in spatial._corners(start.astype(float), stop.astype(float) - 1):
            p = image.TransformContinuousIndexToPhysicalPoint([float(v) for v in corner])
            idx = np.asarray(ref.TransformPhysicalPointToContinuousIndex(p))
            assert np.all(idx >= -1e-6) and np.all(idx <= np.asarray(ref.GetSize()) - 1 + 1e-6), (lo_z, corner, idx)


@pytest.mark.parametrize("orientation", ["RAS", "LPI", "oblique"])
def test_from_canonical_with_a_geometry_alone(orientation: str) -> None:
    """The cascade frees a large scan and keeps only its :class:`spatial.Geometry`: the mask
    then gets exactly the same geometry as with the image itself."""
    image = make_volume(orientation="LPS" if orientation == "oblique" else orientation)
    if orientation == "oblique":
        image = oblique_permuted(image)
    canonical, _ = spatial.to_canonical(image)
    geometry = spatial.Geometry.of(image)
    a = spatial.from_canonical(canonical, image)
    b = spatial.from_canonical(canonical, geometry)
    assert (b.GetSize(), b.GetSpacing(), b.GetOrigin(), b.GetDirection()) == (
        a.GetSize(), a.GetSpacing(), a.GetOrigin(), a.GetDirection()
    )
    np.testing.assert_array_equal(sitk.GetArrayViewFromImage(a), sitk.GetArrayViewFromImage(b))
    with pytest.raises(GeometryError, match="size"):
        geometry.apply(sitk.Image(3, 3, 3, sitk.sitkUInt8))


def test_an_origin_at_the_images_corner_places_no_scanner_centre() -> None:
    """x = 0 at the first column (origin (0, 0, 0)), at the last (a reset origin in a flipped
    file) or within 2 mm of either is an origin reset to the image's corner; x = 0 more than
    50 mm beyond the view is not the scanner's centre either; elsewhere the centre is placed
    on the other grid (here, twice as coarse)."""
    image = sitk.Image(40, 30, 10, sitk.sitkFloat32)
    image.SetSpacing((1.0, 2.0, 3.0))
    coarse = sitk.Image(20, 15, 5, sitk.sitkFloat32)
    coarse.SetSpacing((2.0, 4.0, 6.0))
    for origin_x, at_edge in ((0.0, True), (-39.0, True), (-1.5, True), (-40.5, True), (-3.0, False), (-20.0, False)):
        image.SetOrigin((origin_x, 0.0, 0.0))
        assert spatial.origin_at_edge(image) == at_edge, origin_x
    image.SetOrigin((-20.0, 0.0, 0.0))
    coarse.SetOrigin((-19.5, 0.0, 0.0))
    assert spatial.scanner_centre_x_index(image, coarse) == pytest.approx(9.75)
    image.SetOrigin((0.0, 0.0, 0.0))
    assert spatial.scanner_centre_x_index(image, coarse) is None
    for origin_x, placed in ((45.0, True), (55.0, False), (-85.0, True), (-95.0, False)):
        image.SetOrigin((origin_x, 0.0, 0.0))
        assert (spatial.scanner_centre_x_index(image, image) is not None) == placed, origin_x


def test_centre_x_index_is_where_physical_x_is_zero() -> None:
    """The scanner's centre (x = 0) on a grid: 25 voxels of 4 mm in from an origin at -100 mm;
    beyond the grid where the view lies to one side; through the grid's middle for a grid
    rotated in the axial plane."""
    image = sitk.Image(40, 30, 10, sitk.sitkFloat32)
    image.SetSpacing((4.0, 2.0, 3.0))
    image.SetOrigin((-100.0, -30.0, 500.0))
    assert spatial.centre_x_index(image) == pytest.approx(25.0)
    image.SetOrigin((60.0, -30.0, 500.0))
    assert spatial.centre_x_index(image) == pytest.approx(-15.0)
    c, s = np.cos(np.radians(10)), np.sin(np.radians(10))
    image.SetDirection((c, -s, 0.0, s, c, 0.0, 0.0, 0.0, 1.0))
    image.SetOrigin((0.0, 0.0, 0.0))
    i = spatial.centre_x_index(image)
    point = image.TransformContinuousIndexToPhysicalPoint((i, 14.5, 4.5))
    assert point[0] == pytest.approx(0.0, abs=1e-6)
