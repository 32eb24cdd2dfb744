"""The field-of-view crops of benchmarks/fov_consistency.py, which rule_ablation.py scores too."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import SimpleITK as sitk

sys.path.insert(0, str(Path(__file__).parents[1] / "benchmarks"))
from fov_consistency import CROPS, crop_of, outside_circle, random_crop, shifted  # noqa: E402


def _two_lungs(spacing_xyz: tuple[float, float, float]) -> tuple[np.ndarray, np.ndarray, sitk.Image]:
    """A scan of two box lungs (-850 HU in 40 HU) and its mask: HU array, mask, image."""
    hu = np.full((60, 80, 100), 40.0, np.float32)
    ref = np.zeros(hu.shape, np.uint8)
    ref[10:50, 15:65, 10:45] = 1
    ref[10:50, 15:65, 55:90] = 2
    hu[ref > 0] = -850.0
    image = sitk.GetImageFromArray(hu)
    image.SetSpacing(spacing_xyz)
    return hu, ref, image


@pytest.mark.parametrize("crop", CROPS)
def test_each_crop_cuts_scan_and_mask_alike_and_pads_its_circle(crop: str) -> None:
    hu, ref, image = _two_lungs((2.0, 2.0, 3.0))
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
    if "_fill" in crop:  # one slice of the fill value above, no lung in it
        assert (a[-1] == float(crop.split("_fill")[1])).all() and not r[-1].any()
        assert r[:-1].any()


def test_random_crops_cut_scan_and_mask_alike_and_repeat_with_their_seed() -> None:
    hu, ref, image = _two_lungs((4.0, 4.0, 5.0))
    kinds = set()
    rng, again = np.random.default_rng(3), np.random.default_rng(3)
    for _ in range(12):
        desc, img, r = random_crop(image, ref, rng)
        assert random_crop(image, ref, again)[0] == desc
        a = sitk.GetArrayFromImage(img)
        kind = desc.split()[0]
        kinds.add(kind)
        assert r.shape == a.shape and 0 < a.size < hu.size
        assert (a[r > 0] == -850.0).all()
        if kind == "slab":
            assert a.shape[1:] == hu.shape[1:] and "circle" not in desc
        if "circle" in desc:
            assert (a[:, outside_circle(img)] == float(desc.split("circle ")[1])).all()
    assert kinds == {"slab", "window", "box"}


def test_shifted_moves_a_copy_along_x_only() -> None:
    hu, _, image = _two_lungs((2.0, 2.0, 3.0))
    image.SetOrigin((-100.0, -80.0, 40.0))
    moved = shifted(image, -60.0)
    assert moved.GetOrigin() == pytest.approx((-160.0, -80.0, 40.0))
    assert image.GetOrigin() == pytest.approx((-100.0, -80.0, 40.0))  # the case itself is left as it was
    assert moved.GetSpacing() == image.GetSpacing() and moved.GetDirection() == image.GetDirection()
    assert np.array_equal(sitk.GetArrayViewFromImage(moved), hu)


def test_summary_counts_the_lost_lungs_that_went_to_the_other_side() -> None:
    """A lost lung whose volume the other lung of the same crop took (as its own or as lung where
    the reference has none) was found but named wrongly; one that no lung took was not found."""
    from fov_consistency import summary

    def row(crop: str, lung: str, ref: float, pred: float | None = None, extra: float = 0.0) -> dict:
        r = {"case": "scan", "crop": f"{crop} window 150x150x300 mm", "lung": lung, "ref_ml": ref, "extra_ml": extra}
        if pred is not None:
            r.update(pred_ml=pred, dice=0.0 if pred == 0 or ref < 50 else 0.95)
        return r

    rows = [row("random00", "right", 600.0, 0.0), row("random00", "left", 900.0, 1480.0),  # taken by the left
            row("random01", "right", 700.0, 0.0), row("random01", "left", 2.0, extra=690.0),  # a lone lung named left
            row("random02", "right", 400.0, 0.0), row("random02", "left", 800.0, 810.0)]  # not found
    s = summary(rows)
    assert s["lost_50ml"] == 3
    assert s["lost_to_other_side_50ml"] == 2


def test_coarse_sides_summary_counts_lost_lungs_and_those_named_by_the_other_side() -> None:
    from coarse_sides import summary

    rows = [{"found": 0.8, "other": 0.0}, {"found": 0.05, "other": 0.9}, {"found": 0.0, "other": 0.2}, {"found": 0.1, "other": 0.0}]
    s = summary(rows)
    assert s["lungs"] == 4 and s["lost"] == 2 and s["lost_to_other_side"] == 1  # 0.1 found is not lost
    assert s["found"] == pytest.approx(0.2375) and s["other"] == pytest.approx(0.275)
    assert summary([]) == {"lungs": 0, "found": None, "other": None, "lost": 0, "lost_to_other_side": 0}


def test_turned_scans_turns_scan_and_reference_alike_on_the_same_grid() -> None:
    """benchmarks/turned_scans.py: a quarter turn about z moves a lung voxel where the rotation
    puts it, on the scan's own grid; the scan and its label turn alike; the score counts a lung
    named by the other side as swapped."""
    from turned_scans import score, turned

    hu, ref, image = _two_lungs((2.0, 2.0, 2.0))
    label = sitk.GetImageFromArray(ref)
    label.CopyInformation(image)
    same = turned(image, 0.0)
    np.testing.assert_array_equal(sitk.GetArrayFromImage(same), hu)
    quarter_hu = sitk.GetArrayFromImage(turned(image, 90.0))
    quarter = sitk.GetArrayFromImage(turned(label, 90.0, label=True))
    assert quarter_hu.shape == hu.shape and quarter.shape == ref.shape
    assert set(np.unique(quarter)) <= {0, 1, 2}
    lung_hu = quarter_hu[quarter > 0]
    assert lung_hu.size > 0 and np.median(lung_hu) == pytest.approx(-850.0)  # scan and label turned alike
    # the two lungs side by side in x now lie one behind the other in y
    ys = [np.nonzero(quarter == v)[1].mean() for v in (1, 2)]
    xs = [np.nonzero(quarter == v)[2].mean() for v in (1, 2)]
    assert abs(ys[0] - ys[1]) > 20 and abs(xs[0] - xs[1]) < 5
    result = score(ref, ref, 0.008)
    assert result == {"dice": [1.0, 1.0], "swapped_ml": 0.0}
    swapped = np.where(ref == 1, 2, ref).astype(np.uint8)
    result = score(swapped, ref, 0.008)
    assert result["dice"][0] == 0.0 and result["swapped_ml"] == pytest.approx((ref == 1).sum() * 0.008, abs=0.1)
