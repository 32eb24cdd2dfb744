"""Label clean-up: components, holes, side check in physical space."""

from __future__ import annotations

import numpy as np
import pytest
import SimpleITK as sitk

from segpipe import postprocess, spatial


def _image(array: np.ndarray, orientation: str = "LPS") -> sitk.Image:
    base = sitk.Image(*reversed(array.shape), sitk.sitkUInt8)
    base.SetSpacing((2.0, 2.0, 2.0))
    return spatial.reorient(spatial.copy_geometry(array.astype(np.uint8), base), orientation)


def _lungs() -> np.ndarray:
    a = np.zeros((20, 30, 40), np.uint8)
    a[3:17, 5:25, 3:17] = 1  # low x (LPS): the patient's right
    a[3:17, 5:25, 23:37] = 2
    return a


def test_keeps_largest_component_and_fills_holes() -> None:
    a = _lungs()
    a[8:11, 12:15, 8:11] = 0  # a vessel the network missed, enclosed in the right lung
    a[0:2, 0:2, 0:2] = 1  # a speck of false positive
    cleaned, warnings = postprocess.clean_lungs(_image(a))
    out = sitk.GetArrayFromImage(cleaned)
    expected = _lungs()
    np.testing.assert_array_equal(out, expected)
    assert warnings == []


def test_piece_touching_the_other_lung_joins_it() -> None:
    a = _lungs()
    a[3:17, 5:25, 33:37] = 1  # the lateral part of the left lung labelled "right" by mistake
    out = sitk.GetArrayFromImage(postprocess.clean_lungs(_image(a))[0])
    np.testing.assert_array_equal(out, _lungs())


@pytest.mark.parametrize("orientation", ["LPS", "RAS", "LPI"])
def test_sides_are_checked_in_physical_space(orientation: str) -> None:
    good = _image(_lungs(), orientation)
    cleaned, warnings = postprocess.clean_lungs(good)
    assert warnings == []
    np.testing.assert_array_equal(sitk.GetArrayViewFromImage(cleaned), sitk.GetArrayViewFromImage(good))
    swapped = np.where(_lungs() == 1, 2, np.where(_lungs() == 2, 1, 0))
    fixed, warnings = postprocess.clean_lungs(_image(swapped, orientation))
    assert len(warnings) == 1 and "swapped" in warnings[0]
    np.testing.assert_array_equal(sitk.GetArrayViewFromImage(fixed), sitk.GetArrayViewFromImage(good))
    assert fixed.GetDirection() == good.GetDirection() and fixed.GetOrigin() == good.GetOrigin()


def test_tiny_lung_is_removed_with_a_warning() -> None:
    a = np.zeros((20, 30, 40), np.uint8)
    a[3:17, 5:25, 3:17] = 1
    a[5:6, 5:7, 30:32] = 2  # 4 voxels of 8 mm^3: 0.032 mL
    cleaned, warnings = postprocess.clean_lungs(_image(a), min_volume_ml=1.0)
    assert (sitk.GetArrayViewFromImage(cleaned) == 2).sum() == 0
    assert warnings and "left lung" in warnings[0]
