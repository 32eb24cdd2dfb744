"""Dataset discovery in three layouts and the per-case error list."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import SimpleITK as sitk

from segpipe import io, spatial
from segpipe.config import DataConfig
from segpipe.errors import ConfigError
from segpipe.model import normalise_hu
from segpipe.train import data
from tests.conftest import make_volume


def _pair(seed: int, size: tuple[int, int, int] = (16, 12, 8)) -> tuple[sitk.Image, sitk.Image]:
    image = make_volume(size_xyz=size, seed=seed)
    array = np.zeros(tuple(reversed(size)), np.uint8)
    array[2:6, 3:9, 2:7] = 1
    array[2:6, 3:9, 9:14] = 2
    return image, spatial.copy_geometry(array, image)


def _write_msd(root: Path, n: int = 3) -> None:
    (root / "imagesTr").mkdir(parents=True)
    (root / "labelsTr").mkdir()
    training = []
    for i in range(n):
        image, label = _pair(i)
        io.write_image(image, root / "imagesTr" / f"lung_{i:03d}.nii.gz")
        io.write_image(label, root / "labelsTr" / f"lung_{i:03d}.nii.gz")
        training.append({"image": f"./imagesTr/lung_{i:03d}.nii.gz", "label": f"./labelsTr/lung_{i:03d}.nii.gz"})
    (root / "dataset.json").write_text(json.dumps({"name": "t", "training": training, "numTraining": n}))


def _write_nnunet(root: Path, n: int = 3) -> None:
    (root / "imagesTr").mkdir(parents=True)
    (root / "labelsTr").mkdir()
    for i in range(n):
        image, label = _pair(i)
        io.write_image(image, root / "imagesTr" / f"case{i}_0000.nii.gz")
        io.write_image(label, root / "labelsTr" / f"case{i}.nii.gz")
    (root / "dataset.json").write_text(json.dumps({"channel_names": {"0": "CT"}, "labels": {}, "file_ending": ".nii.gz"}))


def _write_pairs(root: Path, n: int = 3) -> None:
    (root / "images").mkdir(parents=True)
    (root / "labels").mkdir()
    for i in range(n):
        image, label = _pair(i)
        io.write_image(image, root / "images" / f"s{i}.nrrd")
        io.write_image(label, root / "labels" / f"s{i}.nrrd")


@pytest.mark.parametrize(
    "layout, writer, first",
    [("msd", _write_msd, "lung_000"), ("nnunet", _write_nnunet, "case0"), ("pairs", _write_pairs, "s0")],
)
def test_discover_each_layout(tmp_path: Path, layout: str, writer, first: str) -> None:  # type: ignore[no-untyped-def]
    writer(tmp_path / layout)
    cases = data.discover(tmp_path / layout)
    assert [c.name for c in cases][0] == first and len(cases) == 3
    for case in cases:
        assert case.image.is_file() and case.label.is_file()
    data.validate_cases(cases)


def test_broken_pairs_are_all_listed(tmp_path: Path) -> None:
    root = tmp_path / "pairs"
    _write_pairs(root, n=5)
    # s1: label values out of range; s2: geometry differs; s3: truncated image
    image, label = _pair(1)
    bad = sitk.GetArrayFromImage(label)
    bad[0, 0, 0] = 7
    io.write_image(spatial.copy_geometry(bad, label), root / "labels" / "s1.nrrd")
    moved = sitk.Image(label)
    moved.SetOrigin((5.0, 0.0, 0.0))
    io.write_image(moved, root / "labels" / "s2.nrrd")
    raw = (root / "images" / "s3.nrrd").read_bytes()
    (root / "images" / "s3.nrrd").write_bytes(raw[: len(raw) // 2])
    with pytest.raises(data.DatasetError) as info:
        data.validate_cases(data.discover(root))
    problems = info.value.problems
    assert len(problems) == 3
    assert problems[0].startswith("s1: label values [7]")
    assert problems[1].startswith("s2: image and label geometry differ")
    assert problems[2].startswith("s3: image: cannot read")
    assert str(info.value).splitlines()[0] == "3 of 5 cases cannot be used"


def test_unmatched_names_and_empty_layouts(tmp_path: Path) -> None:
    root = tmp_path / "pairs"
    _write_pairs(root, n=2)
    (root / "labels" / "s1.nrrd").unlink()
    with pytest.raises(data.DatasetError, match="do not match") as info:
        data.discover(root)
    assert info.value.problems == ["s1: image without label"]
    with pytest.raises(data.DatasetError, match="no dataset found"):
        data.discover(tmp_path)
    with pytest.raises(data.DatasetError, match="not found"):
        data.discover(tmp_path / "missing")
    nn = tmp_path / "nn"
    _write_nnunet(nn, n=2)
    (nn / "labelsTr" / "case1.nii.gz").unlink()
    with pytest.raises(data.DatasetError, match="no label in labelsTr"):
        data.discover(nn)


def test_msd_json_errors(tmp_path: Path) -> None:
    (tmp_path / "dataset.json").write_text("{not json")
    with pytest.raises(data.DatasetError, match="invalid JSON"):
        data.discover(tmp_path)
    (tmp_path / "dataset.json").write_text(json.dumps({"training": [{"image": "a.nii.gz"}]}))
    with pytest.raises(data.DatasetError, match="needs 'image' and 'label'"):
        data.discover(tmp_path)
    (tmp_path / "dataset.json").write_text(json.dumps({"training": [{"image": "a.nii.gz", "label": "b.nii.gz"}]}))
    with pytest.raises(data.DatasetError) as info:
        data.validate_cases(data.discover(tmp_path))
    assert "image file not found" in info.value.problems[0]


# ----------------------------------------------------------------------------- cache
def test_cache_builds_reuses_and_invalidates(tmp_path: Path) -> None:
    root = tmp_path / "msd"
    _write_msd(root, n=2)
    cases = data.discover(root)
    kwargs = dict(coarse_spacing_mm=(4.0, 4.0, 4.0), fine_spacing_mm=(1.0, 1.0, 1.0), margin_mm=2.0)
    built = data.build_cache(cases, tmp_path / "cache", **kwargs)  # type: ignore[arg-type]
    assert [c.name for c in built] == ["lung_000", "lung_001"]
    first = built[0]
    assert set(first.fine) == {"right", "left"}
    img, lbl = first.coarse.load()
    assert isinstance(img, np.memmap) and img.dtype == np.int16 and lbl.dtype == np.uint8
    assert img.shape == first.coarse.shape_zyx and first.coarse.spacing_xyz == (4.0, 4.0, 4.0)
    # the right-lung crop is centred on label 1 and holds all of it
    _, right = first.fine["right"].load()
    assert (right == 1).any()
    mtimes = {p: p.stat().st_mtime_ns for p in (tmp_path / "cache").rglob("*.npy")}

    again = data.build_cache(cases, tmp_path / "cache", **kwargs)  # type: ignore[arg-type]
    assert again == built
    assert {p: p.stat().st_mtime_ns for p in (tmp_path / "cache").rglob("*.npy")} == mtimes  # nothing rewritten

    changed = data.build_cache(cases, tmp_path / "cache", **{**kwargs, "margin_mm": 4.0})  # type: ignore[arg-type]
    assert changed[0].coarse.image.parent != first.coarse.image.parent  # new settings, new key
    image, label = _pair(5)
    io.write_image(label, root / "labelsTr" / "lung_001.nii.gz")  # data changed
    rebuilt = data.build_cache(data.discover(root), tmp_path / "cache", **kwargs)  # type: ignore[arg-type]
    assert rebuilt[0].coarse.image.parent not in (first.coarse.image.parent, changed[0].coarse.image.parent)


def test_cache_crop_geometry_is_physical(tmp_path: Path) -> None:
    """A lung crop's origin and spacing place its voxels where the lung is in LPS space,
    whatever the storage orientation of the input."""
    image, label = _pair(0, size=(32, 24, 12))
    root = tmp_path / "pairs"
    (root / "images").mkdir(parents=True)
    (root / "labels").mkdir()
    io.write_image(spatial.reorient(image, "RAS"), root / "images" / "a.nii.gz")
    io.write_image(spatial.reorient(label, "RAS"), root / "labels" / "a.nii.gz")
    (cached,) = data.build_cache(data.discover(root), tmp_path / "cache", fine_spacing_mm=(0.8, 0.7, 2.5), margin_mm=0.0)
    _, right = cached.fine["right"].load()
    box = spatial.box_from_mask(label, 1)
    assert box is not None
    first_voxel = np.asarray(cached.fine["right"].origin_xyz)
    np.testing.assert_allclose(first_voxel, np.asarray(box.lo_xyz) + np.array([0.4, 0.35, 1.25]), atol=1e-4)
    assert (right == 1).sum() == (sitk.GetArrayViewFromImage(label) == 1).sum()


def test_cache_raises_the_scanners_padding_to_air(tmp_path: Path) -> None:
    """Training volumes are resampled as inference resamples: the scanner's padding (-3024)
    raised to air first, so no voxel of the cache lies below -1024 HU."""
    image, label = _pair(0, size=(32, 24, 12))
    array = sitk.GetArrayFromImage(image).astype(np.int16)
    array[:, :, :6] = -3024
    padded = sitk.GetImageFromArray(array)
    padded.CopyInformation(image)
    root = tmp_path / "pairs"
    (root / "images").mkdir(parents=True)
    (root / "labels").mkdir()
    io.write_image(padded, root / "images" / "a.nii.gz")
    io.write_image(label, root / "labels" / "a.nii.gz")
    (cached,) = data.build_cache(data.discover(root), tmp_path / "cache", coarse_spacing_mm=(2.0, 2.0, 2.0),
                                 fine_spacing_mm=(0.8, 0.7, 2.5), margin_mm=4.0)
    for volume in (cached.coarse, *cached.fine.values()):
        hu, _ = volume.load()
        assert hu.min() >= spatial.AIR_HU
    assert sitk.GetArrayViewFromImage(spatial.resample_image(padded, (2.0, 2.0, 2.0))).min() < spatial.AIR_HU


def test_cache_fine_crop_reaches_below_the_lung_within_the_scan(tmp_path: Path) -> None:
    """With ``below_mm`` a lung crop goes on toward the feet (what the fine stage reads below
    the bases at inference), as far as the scan's first slice and no further: no made-up air."""
    image, label = _pair(0, size=(32, 24, 40))
    root = tmp_path / "pairs"
    (root / "images").mkdir(parents=True)
    (root / "labels").mkdir()
    io.write_image(spatial.reorient(image, "RAS"), root / "images" / "a.nii.gz")
    io.write_image(spatial.reorient(label, "RAS"), root / "labels" / "a.nii.gz")
    box = spatial.box_from_mask(label, 1)
    assert box is not None
    canonical, _ = spatial.to_canonical(image)
    spacing_z = canonical.GetSpacing()[2]
    lowest = canonical.GetOrigin()[2]  # the scan's first slice toward the feet (LPS)
    for below, expect_lo in ((0.0, box.lo_xyz[2]), (2.0 * spacing_z, box.lo_xyz[2] - 2.0 * spacing_z), (1000.0, -1e9)):
        (cached,) = data.build_cache(data.discover(root), tmp_path / "cache", fine_spacing_mm=canonical.GetSpacing(), margin_mm=0.0,
                                     below_mm=below)
        crop = cached.fine["right"]
        # the first voxel centre inside the box, or the scan's first slice
        assert crop.origin_xyz[2] == pytest.approx(max(expect_lo + spacing_z / 2, lowest), abs=1e-4)
        top = crop.origin_xyz[2] + (crop.shape_zyx[0] - 1) * crop.spacing_xyz[2]
        assert top == pytest.approx(box.hi_xyz[2] - spacing_z / 2, abs=1e-4)  # the head end is unchanged
        _, lbl = crop.load()
        assert (lbl == 1).sum() == (sitk.GetArrayViewFromImage(label) == 1).sum()
    with pytest.raises(ConfigError, match="fine_below_mm"):
        DataConfig(fine_below_mm=-1.0)


# ----------------------------------------------------------------------------- sampling
def test_extract_patch_pads_outside() -> None:
    array = np.arange(5 * 6 * 7).reshape(5, 6, 7)
    patch = data.extract_patch(array, (0, 0, 0), (4, 4, 4), pad_value=-1)
    assert patch.shape == (4, 4, 4)
    assert (patch[:2] == -1).all() and (patch[:, :2] == -1).all()
    np.testing.assert_array_equal(patch[2:, 2:, 2:], array[:2, :2, :2])
    inside = data.extract_patch(array, (2, 3, 3), (3, 3, 3), pad_value=-1)
    np.testing.assert_array_equal(inside, array[1:4, 2:5, 2:5])
    assert (data.extract_patch(array, (50, 0, 0), (2, 2, 2), pad_value=9) == 9).all()


def test_foreground_share_of_sampled_patches() -> None:
    label = np.zeros((60, 80, 80), np.uint8)
    label[20:30, 30:40, 30:40] = 1  # small lung: about 0.2 % of the volume
    points = data.foreground_points(label, max_points=500, seed=0)
    assert len(points) == 500 and (label[tuple(points.T)] == 1).all()
    rng = np.random.default_rng(0)
    share = 0.33
    hits = 0
    n = 600
    for _ in range(n):
        fg = rng.random() < share
        c = data.sample_patch_center(label.shape, (16, 16, 16), points, fg, rng)
        hits += label[c] > 0
    # centred-on-lung patches make up the requested share (random ones almost never hit)
    assert abs(hits / n - share) < 0.06


def _dense_lung_volume() -> tuple[np.ndarray, np.ndarray]:
    """A lung (-850 HU) holding a 12-voxel consolidation (40 HU) and a 2-voxel vessel (40 HU),
    beside chest wall (40 HU, not lung)."""
    image = np.full((40, 48, 48), 40, np.int16)
    label = np.zeros(image.shape, np.uint8)
    image[4:36, 4:44, 4:40] = -850
    label[4:36, 4:44, 4:40] = 1
    image[8:20, 8:20, 8:20] = 40  # consolidation: dense lung
    image[4:36, 30:32, 30:32] = 40  # vessel: dense but thin
    return image, label


def test_dense_points_find_consolidation_and_the_wall_beside_not_vessels() -> None:
    image, label = _dense_lung_volume()
    points = data.dense_points(image, label)
    assert len(points) > 100
    z, y, x = points.T
    # every point lies in the consolidation block (its rim of 3 voxels is only partly dense)
    assert z.min() >= 8 and z.max() < 20 and y.min() >= 8 and y.max() < 20 and x.min() >= 8 and x.max() < 20
    assert label[tuple(points.T)].all()
    capped = data.dense_points(image, label, max_points=50, seed=3)
    assert len(capped) == 50 and set(map(tuple, capped)) <= set(map(tuple, points))
    beside = data.dense_points(image, label, beside=True, max_points=10**9)
    # the negatives: chest wall next to the lung (within 7 voxels), never lung, never far out
    assert len(beside) > 100 and not label[tuple(beside.T)].any() and (image[tuple(beside.T)] > -300).all()
    z, y, x = beside.T
    assert z.min() >= 0 and z.max() < 43 and y.max() < 51 and x.max() < 47
    assert ((z < 4) | (z >= 36) | (y < 4) | (y >= 44) | (x < 4) | (x >= 40)).all()
    assert ((z >= 4 - 7) & (z < 36 + 7) & (y >= 4 - 7) & (y < 44 + 7) & (x >= 4 - 7) & (x < 40 + 7)).all()
    image[8:20, 8:20, 8:20] = -850  # the consolidation gone: nothing dense left but the vessel
    assert len(data.dense_points(image, label)) == 0
    assert len(data.dense_points(image, np.zeros_like(label))) == 0


def test_dense_fraction_centres_patches_on_dense_lung(tmp_path: Path) -> None:
    """With dense_fraction 1 every lung-centred patch sits on dense tissue: half on the
    consolidation, half on the chest wall beside the lung; with 0 a uniform lung pick almost
    never does (the block is 4 % of the lung). Dense regions of less than DENSE_MIN_ML (the
    same volume on a 1 mm grid: 0.4 mL of consolidation) are not oversampled."""
    image, label = _dense_lung_volume()
    np.save(tmp_path / "i.npy", image)
    np.save(tmp_path / "l.npy", label)
    window = (-1000.0, 400.0)
    dense_share = {}
    for spacing, dense in ((3.0, 0.0), (3.0, 1.0), (1.0, 1.0)):
        vol = data.CachedVolume(tmp_path / "i.npy", tmp_path / "l.npy", image.shape, (spacing,) * 3, (0.0, 0.0, 0.0))
        ds = data.PatchDataset([vol], (8, 8, 8), 60, window, fg_fraction=1.0, dense_fraction=dense, seed=1)
        items = [ds[i] for i in range(len(ds))]
        centre = np.asarray([float(it["image"][0, 4, 4, 4]) for it in items]) > normalise_hu(np.array(-300.0), window)
        in_lung = np.asarray([int(it["label"][4, 4, 4]) for it in items]) > 0
        dense_share[spacing, dense] = (np.mean(centre & in_lung), np.mean(centre & ~in_lung))
    lung_share, wall_share = dense_share[3.0, 1.0]
    assert lung_share + wall_share == 1.0 and 0.3 < lung_share < 0.7
    assert dense_share[3.0, 0.0][0] < 0.2 and dense_share[3.0, 0.0][1] == 0.0
    # on a 1 mm grid both dense regions hold less than DENSE_MIN_ML: plain lung centres
    assert sum(dense_share[1.0, 1.0]) < 0.2


def test_left_right_mirror_swaps_labels() -> None:
    image = np.zeros((2, 3, 10), np.int16)
    label = np.zeros((2, 3, 10), np.uint8)
    image[..., :3] = 100
    label[..., :3] = 1  # right lung at low x (LPS)
    label[..., 6:] = 2  # asymmetric on purpose
    mirrored_image, mirrored_label = data.mirror_left_right(image, label)
    assert (mirrored_image[..., 7:] == 100).all()
    assert (mirrored_label[..., 7:] == 2).all() and (mirrored_label[..., :4] == 1).all()
    assert mirrored_label[0, 0, 6] == 0
    # what was right lung is now at high x, where the left lung lies, and is called left
    assert ((label == 1) == (mirrored_label[..., ::-1] == 2)).all()


def test_cache_fixed_size_coarse_mode(tmp_path: Path) -> None:
    root = tmp_path / "msd"
    _write_msd(root, n=1)
    (cached,) = data.build_cache(data.discover(root), tmp_path / "cache", coarse_size_xyz=(8, 10, 12))
    assert cached.coarse.shape_zyx == (12, 10, 8)
    image = io.read_image(root / "imagesTr" / "lung_000.nii.gz")
    expected = [n * s / m for n, s, m in zip(image.GetSize(), image.GetSpacing(), (8, 10, 12))]
    assert cached.coarse.spacing_xyz == pytest.approx(expected)


AUGMENT_OFF = dict(rotate_deg=0, scale=(1.0, 1.0), intensity_shift_hu=0, intensity_scale=0, noise_hu=0, blur_sigma_mm=0,
                   lung_shift_hu=(0.0, 0.0))  # every augmentation of AugmentConfig's defaults off, for one under test


def test_lung_shift_augmentation_moves_only_lung_voxels() -> None:
    from segpipe.config import AugmentConfig

    img = np.full((8, 8, 8), 40.0, np.float32)
    lbl = np.zeros((8, 8, 8), np.uint8)
    img[:, :, :4] = -850.0
    lbl[:, :, :4] = 1
    cfg = AugmentConfig(probability=1.0, rotate_deg=0, scale=(1.0, 1.0), intensity_shift_hu=0, intensity_scale=0,
                        noise_hu=0, blur_sigma_mm=0, lung_shift_hu=(-80.0, -40.0))
    out, out_lbl = data.augment_patch(img, lbl, cfg, np.random.default_rng(0))
    shift = out[:, :, :4] - img[:, :, :4]
    assert np.allclose(shift, shift.flat[0]) and -80 <= shift.flat[0] <= -40
    assert np.array_equal(out[:, :, 4:], img[:, :, 4:]) and np.array_equal(out_lbl, lbl)


def test_denser_lungs_move_with_their_partial_volume_and_spare_tissue() -> None:
    from segpipe.config import AugmentConfig
    from segpipe.errors import ConfigError
    from segpipe.train.patches import denser_lungs

    img = np.full((12, 12, 12), 40.0, np.float32)
    img[:, :, :6] = -850.0
    img[:, :, 6] = -405.0  # the edge voxel: half lung, half tissue
    img[:, 3, 2] = 40.0  # a vessel inside the lung
    img[:, :, 11] = -1000.0  # air beyond the chest wall, far from the lung
    lbl = np.zeros(img.shape, np.uint8)
    lbl[:, :, :6] = 1
    out = denser_lungs(img, lbl, 300.0)
    assert np.allclose(out[:, 5, :6][:, [0, 1, 3, 4, 5]], -550.0)  # aerated lung moves by the whole shift
    assert np.allclose(out[:, 5, 6], -405.0 + 150.0)  # the edge by its lung share
    assert np.allclose(out[:, 3, 2], 40.0) and np.allclose(out[:, :, 7:11], 40.0)  # vessel and wall stay
    assert np.allclose(out[:, :, 11], -1000.0)  # air more than two voxels from the lung stays
    assert np.array_equal(denser_lungs(img, np.zeros_like(lbl), 300.0), img)
    lighter = denser_lungs(img, lbl, -200.0)
    assert np.allclose(lighter[:, 5, :6][:, [0, 1, 3, 4, 5]], -1000.0)  # stops at air
    assert np.allclose(lighter[:, 5, 6], -405.0 - 100.0) and np.allclose(lighter[:, :, 11], -1000.0)
    off = AUGMENT_OFF
    aug, aug_lbl = data.augment_patch(img, lbl, AugmentConfig(probability=1.0, lung_density_hu=(100.0, 400.0), **off),
                                      np.random.default_rng(0))
    shift = float(aug[0, 5, 0] - img[0, 5, 0])
    assert 100.0 <= shift <= 400.0 and np.array_equal(aug_lbl, lbl)
    same, _ = data.augment_patch(img, lbl, AugmentConfig(probability=1.0, **off), np.random.default_rng(0))
    assert np.array_equal(same, img)  # (0, 0): off
    with pytest.raises(ConfigError, match="lung_density_hu"):
        AugmentConfig(lung_density_hu=(300.0, 0.0))


def test_sharpen_augmentation_rings_the_lung_edge_as_a_sharp_kernel() -> None:
    from segpipe.config import AugmentConfig
    from segpipe.errors import ConfigError

    img = np.full((16, 16, 32), 40.0, np.float32)
    img[:, :, :16] = -850.0
    lbl = (img < -400).astype(np.uint8)
    off = AUGMENT_OFF
    out, out_lbl = data.augment_patch(img, lbl, AugmentConfig(probability=1.0, sharpen=(1.0, 1.0), **off),
                                      np.random.default_rng(0))
    profile = out[8, 8]
    assert profile[15] < -900 and profile[16] > 90  # a dark rim inside the lung, a bright one outside
    assert profile[2] == pytest.approx(-850.0, abs=1) and profile[-3] == pytest.approx(40.0, abs=1)  # far from the edge: as it was
    assert np.array_equal(out_lbl, lbl)
    same, _ = data.augment_patch(img, lbl, AugmentConfig(probability=1.0, **off), np.random.default_rng(0))
    assert np.array_equal(same, img)  # (0, 0): off
    with pytest.raises(ConfigError, match="sharpen"):
        AugmentConfig(sharpen=(1.0, 0.5))


def test_low_resolution_augmentation_blurs_edges_and_keeps_labels() -> None:
    from segpipe.config import AugmentConfig
    from segpipe.errors import ConfigError

    img = np.full((32, 32, 32), 40.0, np.float32)
    lbl = np.zeros((32, 32, 32), np.uint8)
    img[:, :, :16] = -850.0
    lbl[:, :, :16] = 1
    off = AUGMENT_OFF
    cfg = AugmentConfig(probability=1.0, lowres_zoom=(0.25, 0.3), **off)
    out, out_lbl = data.augment_patch(img, lbl, cfg, np.random.default_rng(0))
    assert out.shape == img.shape and out.dtype == np.float32 and np.array_equal(out_lbl, lbl)
    # a sharp edge becomes a ramp of several voxels; far from it the values stay
    profile = out[16, 16]
    assert np.count_nonzero((profile > -800) & (profile < -10)) >= 2
    assert profile[0] == pytest.approx(-850.0, abs=1) and profile[-1] == pytest.approx(40.0, abs=1)
    same, _ = data.augment_patch(img, lbl, AugmentConfig(probability=1.0, **off), np.random.default_rng(0))
    assert np.array_equal(same, img)  # (1, 1): off
    with pytest.raises(ConfigError, match="lowres_zoom"):
        AugmentConfig(lowres_zoom=(0.5, 1.5))


def test_cut_field_of_view_sets_air_and_background_outside_the_part_kept() -> None:
    """Each cut keeps one axis-aligned box (or the z slab, or an in-plane disc) of the patch
    and makes the rest what a scan's edge looks like: air, background."""
    from segpipe.train.patches import cut_field_of_view

    rng = np.random.default_rng(3)
    img = np.full((20, 40, 40), 40.0, np.float32)
    lbl = np.ones((20, 40, 40), np.uint8)
    kept = []
    for _ in range(30):
        a, b = cut_field_of_view(img, lbl, rng, (0.4, 0.8))
        outside = a == -1024.0
        assert outside.any() and not outside.all()
        np.testing.assert_array_equal(b == 0, outside)  # labels go with the image
        np.testing.assert_array_equal(a[~outside], 40.0)  # the rest untouched
        kept.append(1 - outside.mean())
    assert 0.1 < min(kept) and max(kept) < 0.9
    assert (img == 40.0).all() and (lbl == 1).all()  # inputs not changed


def test_cut_field_of_view_can_repeat_the_kept_parts_edge() -> None:
    """With ``fill="edge"`` a box or slab cut repeats the kept part's edge voxels beyond it
    (what the coarse window's padding shows beyond a small scan); labels there are background;
    a circle cut is air either way."""
    from segpipe.train.patches import cut_field_of_view

    rng = np.random.default_rng(5)
    img = np.broadcast_to(np.arange(40, dtype=np.float32) * 10.0 - 900.0, (20, 40, 40)).copy()  # HU grows with x
    lbl = np.ones(img.shape, np.uint8)
    circles = boxes = 0
    for _ in range(30):
        a, b = cut_field_of_view(img, lbl, rng, (0.4, 0.8), fill="edge")
        outside = b == 0
        assert outside.any() and not outside.all()
        if (a == -1024.0).any():  # the circle: air beyond it
            circles += 1
            np.testing.assert_array_equal(a == -1024.0, outside)
            continue
        boxes += 1
        kept_x = np.flatnonzero((~outside).any(axis=(0, 1)))
        assert a.min() >= img.min() and np.array_equal(a[~outside], img[~outside])  # inside untouched
        np.testing.assert_array_equal(a[:, :, : kept_x[0]], img[:, :, kept_x[0] : kept_x[0] + 1].repeat(kept_x[0], axis=2))
    assert circles and boxes
    with pytest.raises(ConfigError, match="fov_fill"):
        from segpipe.config import AugmentConfig

        AugmentConfig(fov_fill="noise")


def test_cut_beside_lung_keeps_one_lung_and_a_medial_strip_of_the_other() -> None:
    """A side cut keeps one lung whole and a strip of the other from its medial face (a share of
    its width drawn from ``strip``), on either side; beyond the cut air or the repeated edge,
    background labels; None where the patch does not hold both lungs side by side."""
    from segpipe.config import AugmentConfig
    from segpipe.train.patches import cut_beside_lung

    lbl = np.zeros((4, 10, 60), np.uint8)
    lbl[:, 2:8, 5:25] = 1  # the right lung at low x, 20 columns
    lbl[:, 2:8, 35:55] = 2  # the left at high x, 20 columns
    img = np.where(lbl > 0, -850.0, 40.0).astype(np.float32)
    whole = set()
    for seed in range(20):
        a, b = cut_beside_lung(img, lbl, np.random.default_rng(seed), strip=(0.1, 0.3))
        columns = [np.flatnonzero((b == c).any(axis=(0, 1))) for c in (1, 2)]
        kept = 1 if len(columns[0]) == 20 else 2
        whole.add(kept)
        strip = columns[2 - kept]
        assert len(columns[kept - 1]) == 20 and 2 <= len(strip) <= 6  # 10-30 % of 20 columns
        assert strip[0] == (35 if kept == 1 else 25 - len(strip))  # from the medial face
        outside = b == 0
        cut_x = (slice(strip[-1] + 1, None) if kept == 1 else slice(None, strip[0]))
        assert (a[:, :, cut_x] == -1024.0).all() and outside[:, :, cut_x].all()
        np.testing.assert_array_equal(a[~outside], img[~outside])
    assert whole == {1, 2}
    edges = 0
    for seed in range(10):  # with fill="edge" the strip's outer column repeats beyond the cut
        a, b = cut_beside_lung(img, lbl, np.random.default_rng(seed), fill="edge")
        if (b == 1).sum() != (lbl == 1).sum():
            continue  # the left lung kept whole this time
        last = np.flatnonzero((b == 2).any(axis=(0, 1)))[-1]
        np.testing.assert_array_equal(a[:, :, last + 1 :], np.repeat(img[:, :, last : last + 1], 59 - last, axis=2))
        assert (b[:, :, last + 1 :] == 0).all()
        edges += 1
    assert edges
    assert cut_beside_lung(img, np.where(lbl == 2, 0, lbl).astype(np.uint8), np.random.default_rng(0)) is None
    assert AugmentConfig().fov_side == 0.0
    with pytest.raises(ConfigError, match="fov_side"):
        AugmentConfig(fov_side=1.5)


def test_cut_beside_lung_with_a_negative_strip_keeps_one_lung_only() -> None:
    """A negative ``strip`` share cuts in the gap between the lungs: the view holds one lung
    whole and none of the other, the cut that share of the way from the other lung's medial
    face toward the kept one's (-1: right at the kept lung's face); either lung kept."""
    from segpipe.config import AugmentConfig
    from segpipe.train.patches import cut_beside_lung

    lbl = np.zeros((4, 10, 60), np.uint8)
    lbl[:, 2:8, 5:25] = 1  # right lung: columns 5-24
    lbl[:, 2:8, 35:55] = 2  # left lung: columns 35-54; the gap is columns 25-34
    img = np.where(lbl > 0, -850.0, 40.0).astype(np.float32)
    kept = set()
    for seed in range(20):
        a, b = cut_beside_lung(img, lbl, np.random.default_rng(seed), strip=(-1.0, -1.0))
        present = {int(c) for c in np.unique(b) if c}
        assert len(present) == 1
        side = present.pop()
        kept.add(side)
        assert (b == side).sum() == (lbl == side).sum()  # whole
        if side == 1:  # cut at the right lung's medial face: column 25 onwards is air
            assert (a[:, :, 25:] == -1024.0).all() and (a[:, :, :25] == img[:, :, :25]).all()
        else:
            assert (a[:, :, :35] == -1024.0).all() and (a[:, :, 35:] == img[:, :, 35:]).all()
    assert kept == {1, 2}
    for seed in range(20):  # half-way into the gap: five of its ten columns kept
        a, b = cut_beside_lung(img, lbl, np.random.default_rng(seed), strip=(-0.5, -0.5))
        side = int(b.max())
        tissue = np.flatnonzero(a[0, 0] == 40.0)
        gap = [x for x in tissue if 25 <= x < 35]
        assert len(gap) == 5 and (gap[0] == 25 if side == 1 else gap[-1] == 34)
    assert AugmentConfig().fov_side_strip == (0.05, 0.35)
    AugmentConfig(fov_side_strip=(-1.0, 0.35))
    with pytest.raises(ConfigError, match="fov_side_strip"):
        AugmentConfig(fov_side_strip=(-1.5, 0.35))
    with pytest.raises(ConfigError, match="fov_side_strip"):
        AugmentConfig(fov_side_strip=(0.3, 0.1))


def test_field_of_view_cuts_can_repeat_the_edge_labels_with_the_image() -> None:
    """``edge_label``: beyond a box, slab or side cut the labels repeat the kept part's edge as
    the image does (a lung cut by the view is not taught as background beyond its edge); a
    circle stays air and background; ``fov_label: edge`` needs ``fov_fill: edge``."""
    from segpipe.config import AugmentConfig
    from segpipe.train.patches import cut_beside_lung, cut_field_of_view

    lbl = np.zeros((6, 10, 60), np.uint8)
    lbl[:, 2:8, 5:25] = 1
    lbl[:, 2:8, 35:55] = 2
    img = np.where(lbl > 0, -850.0, 40.0).astype(np.float32)
    circles = 0
    for seed in range(20):
        rng = np.random.default_rng(seed)
        a, b = cut_field_of_view(img, lbl, rng, (0.4, 0.8), fill="edge", edge_label=True)
        if (a == -1024.0).any():
            circles += 1
            assert (b[a == -1024.0] == 0).all()
            continue
        np.testing.assert_array_equal(b > 0, a == -850.0)  # labels follow the repeated image
        a, b = cut_beside_lung(img, lbl, rng, fill="edge", edge_label=True)
        np.testing.assert_array_equal(b > 0, a == -850.0)
        assert set(np.unique(b[:, 4])) == {0, 1, 2}  # both lungs, the strip repeated to the patch's side
    assert 0 < circles < 20
    assert AugmentConfig().fov_label == "background"
    AugmentConfig(fov_fill="edge", fov_label="edge")
    with pytest.raises(ConfigError, match="fov_label"):
        AugmentConfig(fov_label="edge")  # fov_fill air
    with pytest.raises(ConfigError, match="fov_label"):
        AugmentConfig(fov_fill="edge", fov_label="ignore")


def test_cache_and_checks_in_worker_processes_match_one_process(tmp_path: Path) -> None:
    """``workers`` > 1 preprocesses and checks the cases in worker processes: the same cache
    files and the same problems as one at a time."""
    root = tmp_path / "msd"
    _write_msd(root, n=3)
    cases = data.discover(root)
    kwargs = dict(coarse_spacing_mm=(4.0, 4.0, 4.0), fine_spacing_mm=(1.0, 1.0, 1.0), margin_mm=2.0)
    one = data.build_cache(cases, tmp_path / "one", **kwargs)  # type: ignore[arg-type]
    two = data.build_cache(cases, tmp_path / "two", workers=2, **kwargs)  # type: ignore[arg-type]
    assert [c.name for c in two] == [c.name for c in one] == ["lung_000", "lung_001", "lung_002"]
    for a, b in zip(one, two):
        for va, vb in zip([a.coarse, *a.fine.values()], [b.coarse, *b.fine.values()]):
            assert va.shape_zyx == vb.shape_zyx and va.spacing_xyz == vb.spacing_xyz
            for x, y in zip(va.load(), vb.load()):
                np.testing.assert_array_equal(x, y)
    data.validate_cases(cases, workers=2)
    image, label = _pair(1)
    bad = sitk.GetArrayFromImage(label)
    bad[0, 0, 0] = 9
    io.write_image(spatial.copy_geometry(bad, label), root / "labelsTr" / "lung_001.nii.gz")
    with pytest.raises(data.DatasetError) as info:
        data.validate_cases(data.discover(root), workers=2)
    assert len(info.value.problems) == 1 and info.value.problems[0].startswith("lung_001: label values [9]")


def test_fov_augmentation_is_off_by_default_and_checked() -> None:
    from segpipe.config import AugmentConfig

    assert AugmentConfig().fov_probability == 0.0
    with pytest.raises(ConfigError, match="fov_probability"):
        AugmentConfig(fov_probability=1.5)
    with pytest.raises(ConfigError, match="fov_keep"):
        AugmentConfig(fov_keep=(0.0, 0.5))


def test_cache_decoy_crops_for_the_lungs_a_label_lacks(tmp_path: Path) -> None:
    """With ``decoy_mm`` a case without a lung also gives a crop of that side of the body in the
    scan's top ``decoy_mm`` (what the fine stage is sent to when the coarse stage takes gas under
    the diaphragm for lung), labelled as it is; the table under the body is not in it."""
    from segpipe.train.cache import decoy_boxes

    size = (40, 30, 20)  # x, y, z
    hu = np.full(tuple(reversed(size)), -1024, np.int16)
    hu[:, 4:22, 6:34] = 40  # the body: x 6..33, y 4..21
    hu[:, 6:10, 24:29] = -1000  # gas on the patient's left (high x in LPS)
    hu[:, 26:28, 2:38] = 300  # the table, apart from the body
    image = sitk.GetImageFromArray(hu)
    image.SetSpacing((2.0, 2.0, 5.0))
    empty = spatial.copy_geometry(np.zeros(hu.shape, np.uint8), image)
    boxes = decoy_boxes(image, empty, decoy_mm=30.0)
    assert set(boxes) == {"right", "left"}
    for box in boxes.values():
        assert box.lo_xyz[2] == pytest.approx(14 * 5.0 - 2.5) and box.hi_xyz[2] == pytest.approx(19 * 5.0 + 2.5)  # top 6 slices
        assert box.lo_xyz[1] == pytest.approx(4 * 2.0 - 1.0) and box.hi_xyz[1] == pytest.approx(21 * 2.0 + 1.0)  # no table
    assert boxes["right"].lo_xyz[0] == pytest.approx(6 * 2.0 - 1.0) and boxes["right"].hi_xyz[0] < 21 * 2.0
    assert boxes["left"].lo_xyz[0] > 17 * 2.0 and boxes["left"].hi_xyz[0] == pytest.approx(33 * 2.0 + 1.0)
    one = np.zeros(hu.shape, np.uint8)
    one[:, 8:12, 8:14] = 1  # a right lung: only the left side is a decoy
    assert set(decoy_boxes(image, spatial.copy_geometry(one, image), 30.0)) == {"left"}
    one[:, 8:12, 26:30] = 2
    assert decoy_boxes(image, spatial.copy_geometry(one, image), 30.0) == {}

    root = tmp_path / "pairs"
    (root / "images").mkdir(parents=True)
    (root / "labels").mkdir()
    io.write_image(image, root / "images" / "a.nii.gz")
    io.write_image(empty, root / "labels" / "a.nii.gz")
    (cached,) = data.build_cache(data.discover(root), tmp_path / "cache", fine_spacing_mm=(2.0, 2.0, 5.0), decoy_mm=30.0)
    assert set(cached.fine) == {"decoy_right", "decoy_left"}
    img, lbl = cached.fine["decoy_left"].load()
    assert img.shape == (6, 18, 15) and not lbl.any() and (img <= -900).any()  # the gas is in it
    (plain,) = data.build_cache(data.discover(root), tmp_path / "cache", fine_spacing_mm=(2.0, 2.0, 5.0))
    assert plain.fine == {}
    with pytest.raises(ConfigError, match="fine_decoy_mm"):
        DataConfig(fine_decoy_mm=-1.0)


def test_cut_lung_end_keeps_a_few_slices_at_an_end_of_the_lungs() -> None:
    """A lung-end slab keeps ``slices`` of the lungs' lowest slices with the abdomen below (the
    bases at an abdominal scan's top) or of their highest with the neck above (the apices at a
    neck scan's bottom), either end drawn; beyond it the edge is repeated (labels with
    ``edge_label``, else background). Only an end inside the patch is cut; None without one."""
    from segpipe.config import AugmentConfig
    from segpipe.train.patches import cut_lung_end

    lbl = np.zeros((64, 8, 8), np.uint8)
    lbl[10:50, 2:6, 2:6] = 1  # lung in slices 10-49 (z: feet to head)
    img = np.where(lbl > 0, -850.0, 40.0).astype(np.float32) + np.arange(64, dtype=np.float32)[:, None, None]
    ends = set()
    for seed in range(30):
        a, b = cut_lung_end(img, lbl, np.random.default_rng(seed), keep=(0.3, 0.5), slices=(2, 4))
        kept = np.flatnonzero((a == img).all(axis=(1, 2)))  # fill "air": the slab's own slices
        lung = np.flatnonzero(b.any(axis=(1, 2)))
        assert 2 <= len(lung) <= 4 and set(lung) <= set(kept)
        assert (np.diff(kept) == 1).all() and (a[np.setdiff1d(np.arange(64), kept)] == -1024.0).all()
        assert len(kept) >= round(0.3 * 64) - 1 or kept[0] == 0 or kept[-1] == 63  # or the patch's end stops it
        if lung[0] == 10:  # the bases: the lung in the slab's top slices
            assert lung[-1] == kept[-1]
            ends.add("bases")
        else:
            assert lung[-1] == 49 and lung[0] == kept[0]  # the apices: in its bottom slices
            ends.add("apices")
    assert ends == {"bases", "apices"}
    a, b = cut_lung_end(img, lbl, np.random.default_rng(1), slices=(3, 3), fill="edge", edge_label=True)
    kept_lung = np.flatnonzero((a < -500).any(axis=(1, 2)))
    assert len(kept_lung) > 3 and (b[kept_lung] > 0).any(axis=(1, 2)).all()  # the edge repeated with its labels
    top_only = lbl.copy()
    top_only[:12] = 1  # the lungs reach the patch's first slice: only the apices can be cut
    for seed in range(5):
        _, b = cut_lung_end(img, top_only, np.random.default_rng(seed), slices=(2, 2))
        assert np.flatnonzero(b.any(axis=(1, 2)))[-1] == 49
    whole = np.ones_like(lbl)
    assert cut_lung_end(img, whole, np.random.default_rng(0)) is None
    assert AugmentConfig().fov_end == 0.0
    with pytest.raises(ConfigError, match="fov_end"):
        AugmentConfig(fov_end=2.0)
    with pytest.raises(ConfigError, match="fov_end_slices"):
        AugmentConfig(fov_end_slices=(0, 3))


def test_fov_compound_cuts_a_lung_end_slab_in_the_plane_as_well(tmp_path: Path) -> None:
    """With ``fov_compound`` 1 every lung-end slab is also cut in the plane (a box, the
    scanner's circle, or a side cut that keeps one base and a strip of the other: an abdominal
    scan whose top holds a base and whose field of view cuts the body); with 0 the slab's
    slices are whole. ``kinds`` restricts the cuts drawn."""
    from segpipe.config import AugmentConfig
    from segpipe.train.patches import IN_PLANE_CUTS, cut_field_of_view

    image = np.full((40, 32, 32), 40.0, np.float32)
    label = np.zeros(image.shape, np.uint8)
    image[8:32, 6:26, 6:26], label[8:32, 6:26, 6:26] = -850.0, 1
    np.save(tmp_path / "i.npy", image)
    np.save(tmp_path / "l.npy", label)
    vol = data.CachedVolume(tmp_path / "i.npy", tmp_path / "l.npy", image.shape, (4.0,) * 3, (0.0, 0.0, 0.0))
    window = (-1000.0, 400.0)
    air = normalise_hu(np.array(-1024.0), window)
    in_plane_cut = {}
    for compound in (0.0, 1.0):
        augment = AugmentConfig(probability=0.0, fov_probability=1.0, fov_end=1.0, fov_end_slices=(2, 4),
                                fov_compound=compound)
        ds = data.PatchDataset([vol], (32, 32, 40), 20, window, fg_fraction=0.0, augment=augment, seed=2)  # the whole volume
        cut = []
        for i in range(len(ds)):
            img = ds[i]["image"][0].numpy()
            slab = ~np.isclose(img, air).all(axis=(1, 2))  # the slices the end cut keeps
            assert 0 < slab.sum() < 40
            cut.append(bool(np.isclose(img[slab], air).any()))  # air inside the slab's own slices
        in_plane_cut[compound] = np.mean(cut)
    assert in_plane_cut[0.0] == 0.0 and in_plane_cut[1.0] == 1.0
    # two lungs side by side: a lung-end slab can keep one base whole and a strip of the other
    label[8:32, 6:26, 6:15], label[8:32, 6:26, 17:26] = 1, 2
    image[8:32, 6:26, 15:17] = 40.0
    np.save(tmp_path / "i.npy", image)
    np.save(tmp_path / "l.npy", label)
    augment = AugmentConfig(probability=0.0, fov_probability=1.0, fov_end=1.0, fov_end_slices=(2, 4), fov_compound=1.0)
    ds = data.PatchDataset([vol], (32, 32, 40), 30, window, fg_fraction=0.0, augment=augment, seed=3)
    beside = 0
    for i in range(len(ds)):
        item = ds[i]
        img, lbl = item["image"][0].numpy(), item["label"].numpy()
        slab = ~np.isclose(img, air).all(axis=(1, 2))
        kept = ~np.isclose(img[slab], air).all(axis=0)  # (y, x): what the in-plane cut keeps
        widths = sorted(np.flatnonzero((lbl == v).any(axis=(0, 1))).size for v in (1, 2))
        # a side cut: whole rows, some columns gone; one base whole and a strip of the other
        beside += bool(kept.any(axis=1).all() and not kept.all(axis=0).all() and widths[1] == 9 and 0 < widths[0] < 9)
    assert beside > 0
    rng = np.random.default_rng(0)
    for _ in range(20):
        a, _ = cut_field_of_view(image, label, rng, (0.4, 0.8), kinds=IN_PLANE_CUTS)
        assert (a != -1024.0).any(axis=(1, 2)).all()  # never a slab: every slice keeps some of itself
    with pytest.raises(ConfigError, match="fov_compound"):
        AugmentConfig(fov_compound=1.5)
