"""The field-of-view crops of benchmarks/fov_consistency.py, which rule_ablation.py scores too."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import SimpleITK as sitk

sys.path.insert(0, str(Path(__file__).parents[1] / "benchmarks"))
from fov_consistency import CROPS, crop_of, outside_circle  # noqa: E402


@pytest.mark.parametrize("crop", CROPS)
def test_each_crop_cuts_scan_and_mask_alike_and_pads_its_circle(crop: str) -> None:
    hu = np.full((60, 80, 100), 40.0, np.float32)
    ref = np.zeros(hu.shape, np.uint8)
    ref[10:50, 15:65, 10:45] = 1
    ref[10:50, 15:65, 55:90] = 2
    hu[ref > 0] = -850.0
    image = sitk.GetImageFromArray(hu)
    image.SetSpacing((2.0, 2.0, 3.0))
    img, r = crop_of(image, ref, crop)
    a = sitk.GetArrayFromImage(img)
    assert r.shape == a.shape and 0 < a.size < hu.size
    assert r.any() and (a[r > 0] == -850.0).all()  # the mask is cut where the scan is
    if "_circle" in crop:
        padding = -float(crop.split("_circle")[1])
        outside = outside_circle(img)
        assert outside.any() and (a[:, outside] == padding).all() and not r[:, outside].any()
    else:
        assert a.min() >= -850.0  # no padding
