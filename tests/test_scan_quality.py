"""The protocol variants of benchmarks/scan_quality.py and how it scores a mask on another grid."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import SimpleITK as sitk

sys.path.insert(0, str(Path(__file__).parents[1] / "benchmarks"))
from scan_quality import VARIANTS, score, variant  # noqa: E402


def _scan() -> sitk.Image:
    """Soft tissue (40 HU) with a block of lung (-850 HU) and a frame of the scanner's padding
    (-2048 HU) in every slice; 0.7 x 0.7 x 2.5 mm, off-origin, LPS."""
    hu = np.full((12, 40, 48), 40.0, np.float32)
    hu[2:10, 10:30, 10:38] = -850.0
    hu[:, :3, :] = -2048.0
    image = sitk.GetImageFromArray(hu)
    image.SetSpacing((0.7, 0.7, 2.5))
    image.SetOrigin((-16.0, -14.0, 100.0))
    return image


@pytest.mark.parametrize("name", [v for v in VARIANTS if not v.startswith("body")])
def test_each_variant_keeps_the_physical_extent_and_the_padding(name: str) -> None:
    image = _scan()
    out = variant(image, name)
    a, b = sitk.GetArrayFromImage(image), sitk.GetArrayFromImage(out)
    assert out.GetDirection() == image.GetDirection()
    extent = [n * s for n, s in zip(image.GetSize(), image.GetSpacing())]
    assert np.allclose([n * s for n, s in zip(out.GetSize(), out.GetSpacing())], extent)
    # the grid's first voxel edge stays where the scan's was
    assert np.allclose(np.subtract(out.GetOrigin(), np.multiply(out.GetSpacing(), 0.5)),
                       np.subtract(image.GetOrigin(), np.multiply(image.GetSpacing(), 0.5)))
    if name in ("thick2x", "thick3x"):
        assert out.GetSpacing()[2] == pytest.approx(2.5 * int(name[5])) and out.GetSize()[:2] == image.GetSize()[:2]
    elif name == "matrix256":
        assert out.GetSpacing()[:2] == pytest.approx((1.4, 1.4)) and out.GetSize()[2] == image.GetSize()[2]
    else:
        assert out.GetSize() == image.GetSize()
        assert (b[:, :3, :] == -2048.0).all()  # the padding is left as it is
        assert not np.array_equal(a, b)
        lung = b[4:8, 14:26, 14:34]
        assert abs(float(lung.mean()) + 850.0) < 40.0  # the lung stays lung on average
    if name.startswith("noise"):
        assert float((b - a)[:, 5:, :].std()) == pytest.approx(float(name[5:]), rel=0.1)
    assert np.array_equal(b, sitk.GetArrayFromImage(variant(image, name)))  # seeded: the same on every run


@pytest.mark.parametrize("name", [v for v in VARIANTS if v.startswith("body")])
def test_a_body_variant_scales_the_patient_about_the_scanner_centre(name: str) -> None:
    image = _scan()
    out = variant(image, name)
    f = int(name[4:]) / 100.0
    assert np.array_equal(sitk.GetArrayFromImage(out), sitk.GetArrayFromImage(image))  # the same voxels
    assert out.GetSpacing() == pytest.approx(tuple(v * f for v in image.GetSpacing()))
    # a voxel's physical point scales about x = y = z = 0 (the scanner's centre stays the body's)
    idx = (40, 30, 9)
    assert out.TransformIndexToPhysicalPoint(idx) == pytest.approx(
        tuple(v * f for v in image.TransformIndexToPhysicalPoint(idx)))
    assert out.GetDirection() == image.GetDirection()


def test_unknown_variant_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown variant"):
        variant(_scan(), "noise")


def test_score_resamples_a_mask_from_another_grid() -> None:
    image = _scan()
    ref = (sitk.GetArrayFromImage(image) == -850.0).astype(np.uint8)
    ref[:, :, 24:] *= 2  # the patient's left half (+x) is the left lung
    half = variant(image, "thick2x")
    mask = sitk.GetArrayFromImage(half)
    label = np.where(mask < -400, 1, 0).astype(np.uint8)
    label[:, :, 24:] *= 2
    img = sitk.GetImageFromArray(label)
    img.CopyInformation(half)
    got = score(img, ref, image)
    assert got["dice"][0] > 0.8 and got["dice"][1] > 0.8
    assert got["outside_ml"] >= 0.0 and got["left_out_ml"] >= 0.0
    perfect = sitk.GetImageFromArray(ref)
    perfect.CopyInformation(image)
    assert score(perfect, ref, image) == {"dice": [1.0, 1.0], "outside_ml": 0.0, "left_out_ml": 0.0}
