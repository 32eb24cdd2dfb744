"""Metrics against hand-computed values: cubes, spheres with known surface distances,
anisotropic spacing, brute-force surface distances, geometry mismatch."""

from __future__ import annotations

import math

import numpy as np
import pytest
import SimpleITK as sitk
from scipy import ndimage

from segpipe import metrics, spatial
from segpipe.errors import GeometryError


def _cube(shape: tuple[int, int, int], lo: tuple[int, int, int], size: int) -> np.ndarray:
    m = np.zeros(shape, bool)
    m[lo[0] : lo[0] + size, lo[1] : lo[1] + size, lo[2] : lo[2] + size] = True
    return m


def _sphere(shape: tuple[int, int, int], center_mm: np.ndarray, radius_mm: float, spacing_zyx: tuple[float, float, float]) -> np.ndarray:
    grids = np.meshgrid(*[np.arange(n) * s for n, s in zip(shape, spacing_zyx)], indexing="ij")
    return sum((g - c) ** 2 for g, c in zip(grids, center_mm)) <= radius_mm**2


def test_dice_of_shifted_cubes() -> None:
    a = _cube((20, 20, 20), (2, 2, 2), 10)
    b = _cube((20, 20, 20), (2, 2, 4), 10)  # shifted by 2 along x: overlap 10*10*8
    assert metrics.dice(a, b) == pytest.approx(2 * 800 / 2000)
    assert metrics.dice(a, a) == 1.0
    assert metrics.dice(np.zeros_like(a), np.zeros_like(a)) == 1.0
    assert metrics.dice(a, np.zeros_like(a)) == 0.0


def test_volume_with_anisotropic_spacing() -> None:
    a = _cube((20, 20, 20), (2, 2, 2), 10)
    m = metrics.binary_metrics(a, a, spacing_xyz=(1.0, 1.0, 2.5))
    assert m["volume_ml"] == pytest.approx(1000 * 2.5 / 1000)
    assert m["volume_error_ml"] == 0.0 and m["hd95_mm"] == 0.0 and m["assd_mm"] == 0.0


def test_cube_shifted_along_z_gives_exact_max_distance() -> None:
    spacing_zyx = (2.5, 1.0, 1.0)
    a = _cube((24, 16, 16), (2, 3, 3), 10)
    b = np.roll(a, 3, axis=0)  # 3 slices of 2.5 mm
    # every surface voxel of a lies 0 or 2.5/5.0/7.5 mm from b's surface; the largest is 7.5
    import torch
    from monai.metrics import compute_hausdorff_distance

    hd = compute_hausdorff_distance(
        torch.from_numpy(a)[None, None], torch.from_numpy(b)[None, None], include_background=True, spacing=list(spacing_zyx)
    )
    assert float(hd) == pytest.approx(7.5)
    hd95, _ = metrics.surface_distances(a, b, spacing_zyx)
    assert 2.5 <= hd95 <= 7.5


@pytest.mark.parametrize("spacing_zyx", [(1.0, 1.0, 1.0), (2.5, 0.7, 0.7)])
def test_concentric_spheres_have_the_radius_difference_as_distance(spacing_zyx: tuple[float, float, float]) -> None:
    shape = tuple(int(math.ceil(60 / s)) for s in spacing_zyx)
    center = np.array([30.0, 30.0, 30.0])
    inner = _sphere(shape, center, 12.0, spacing_zyx)  # type: ignore[arg-type]
    outer = _sphere(shape, center, 18.0, spacing_zyx)  # type: ignore[arg-type]
    hd95, assd = metrics.surface_distances(inner, outer, spacing_zyx)
    tol = max(spacing_zyx)  # surfaces are voxelised: one voxel of slack
    assert hd95 == pytest.approx(6.0, abs=tol)
    assert assd == pytest.approx(6.0, abs=tol)
    vol = metrics.binary_metrics(outer, outer, tuple(reversed(spacing_zyx)))["volume_ml"]  # type: ignore[arg-type]
    assert vol == pytest.approx(4 / 3 * math.pi * 18**3 / 1000, rel=0.03)


def _brute_force(a: np.ndarray, b: np.ndarray, spacing_zyx: tuple[float, float, float]) -> tuple[float, float]:
    """Surfaces as mask minus its erosion by the 6-neighbour cross, all pairwise distances."""
    struct = ndimage.generate_binary_structure(3, 1)

    def surface(m: np.ndarray) -> np.ndarray:
        return np.argwhere(m & ~ndimage.binary_erosion(m, struct)) * np.asarray(spacing_zyx)

    sa, sb = surface(a), surface(b)
    d = np.sqrt(((sa[:, None, :] - sb[None, :, :]) ** 2).sum(-1))
    ab, ba = d.min(1), d.min(0)
    hd95 = max(np.percentile(ab, 95), np.percentile(ba, 95))
    assd = (ab.sum() + ba.sum()) / (len(ab) + len(ba))
    return float(hd95), float(assd)


@pytest.mark.parametrize("seed", [0, 1])
def test_surface_distances_match_brute_force(seed: int) -> None:
    rng = np.random.default_rng(seed)
    spacing_zyx = (2.0, 0.8, 1.1)
    a = ndimage.binary_dilation(rng.random((14, 18, 16)) > 0.985, iterations=2)
    b = ndimage.binary_dilation(rng.random((14, 18, 16)) > 0.985, iterations=2)
    hd95, assd = metrics.surface_distances(a, b, spacing_zyx)
    ref_hd95, ref_assd = _brute_force(a, b, spacing_zyx)
    assert hd95 == pytest.approx(ref_hd95, rel=1e-4)
    assert assd == pytest.approx(ref_assd, rel=1e-4)


def test_empty_masks_give_nan_distances() -> None:
    a = _cube((10, 10, 10), (2, 2, 2), 4)
    hd95, assd = metrics.surface_distances(a, np.zeros_like(a), (1.0, 1.0, 1.0))
    assert math.isnan(hd95) and math.isnan(assd)


def test_lung_metrics_per_side_and_geometry_mismatch() -> None:
    ref_arr = np.zeros((12, 20, 30), np.uint8)
    ref_arr[2:10, 4:16, 3:13] = 1
    ref_arr[2:10, 4:16, 17:27] = 2
    pred_arr = ref_arr.copy()
    pred_arr[pred_arr == 2] = 0  # left lung missed
    base = sitk.Image(30, 20, 12, sitk.sitkUInt8)
    base.SetSpacing((0.7, 0.7, 2.5))
    ref = spatial.copy_geometry(ref_arr, base)
    pred = spatial.copy_geometry(pred_arr, base)
    m = metrics.lung_metrics(pred, ref)
    assert m["right"]["dice"] == 1.0 and m["left"]["dice"] == 0.0
    assert m["left"]["volume_error_ml"] == pytest.approx(-8 * 12 * 10 * 0.7 * 0.7 * 2.5 / 1000)
    moved = sitk.Image(pred)
    moved.SetOrigin((1.0, 0.0, 0.0))
    with pytest.raises(GeometryError, match="case_7: prediction and reference geometry differ"):
        metrics.lung_metrics(moved, ref, name="case_7")
