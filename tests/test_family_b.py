"""Phantom family B (benchmarks/family_b.py): labels, sides, airways, table, geometry and orientations."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import SimpleITK as sitk

sys.path.insert(0, str(Path(__file__).parents[1] / "benchmarks"))
from family_b import CASES, make_case  # noqa: E402

BOTH_LUNGS = ("chest", "chest_abdomen", "apex", "cardiac", "fov_cut", "fov_circle")
FULL_FOV = ("chest", "chest_abdomen", "abdomen_bases", "apex", "no_lungs")


@pytest.fixture(scope="module")
def cases() -> dict[str, tuple[sitk.Image, sitk.Image, dict]]:
    """One small case per kind (seeded by its index)."""
    return {kind: make_case(i, kind, "small") for i, kind in enumerate(CASES)}


def _lps(image: sitk.Image) -> tuple[np.ndarray, np.ndarray]:
    """The array in canonical LPS (z, y, x) and the physical x, y, z of its axes."""
    lps = sitk.DICOMOrient(image, "LPS")
    o, s, n = np.array(lps.GetOrigin()), np.array(lps.GetSpacing()), lps.GetSize()
    return sitk.GetArrayFromImage(lps), [o[a] + s[a] * np.arange(n[a]) for a in range(3)]


@pytest.mark.parametrize("kind", CASES)
def test_labels_geometry_and_types(cases, kind):
    img, lab, info = cases[kind]
    assert img.GetPixelID() == sitk.sitkInt16 and lab.GetPixelID() == sitk.sitkUInt8
    assert img.GetSize() == lab.GetSize() and img.GetOrigin() == lab.GetOrigin()
    assert img.GetSpacing() == lab.GetSpacing() and img.GetDirection() == lab.GetDirection()
    assert all(abs(v) > 0 for v in img.GetOrigin()[2:])
    assert set(np.unique(sitk.GetArrayViewFromImage(lab)).tolist()) <= {0, 1, 2}
    hu = sitk.GetArrayViewFromImage(img)
    assert hu.min() >= -3024 and hu.max() > 300  # bone somewhere
    assert info["kind"] == kind and list(img.GetSize()) == info["size_xyz"]


@pytest.mark.parametrize("kind", CASES)
def test_lung_sides(cases, kind):
    _, lab, info = cases[kind]
    arr, (xs, _, _) = _lps(lab)
    counts = [int((arr == k).sum()) for k in (1, 2)]
    if kind == "no_lungs":
        assert counts == [0, 0]
        return
    assert sum(counts) > 0
    if kind in BOTH_LUNGS:
        assert min(counts) > 0
    x = {k: xs[np.nonzero(arr == k)[2]].mean() for k in (1, 2) if counts[k - 1]}
    if len(x) == 2:
        assert x[1] < x[2]
    if kind in BOTH_LUNGS:  # whole lungs in view: the right one at negative physical x (LPS)
        assert x[1] < 0 < x[2]


def test_abdomen_bases_lungs_only_at_the_top(cases):
    _, lab, info = cases["abdomen_bases"]
    arr, (_, _, zs) = _lps(lab)
    z = zs[np.nonzero((arr > 0).any((1, 2)))[0]]
    assert z.min() > zs.max() - 65


@pytest.mark.parametrize("kind", ("chest", "chest_abdomen", "apex", "fov_cut"))
def test_trachea_is_air_and_not_lung(cases, kind):
    img, lab, info = cases[kind]
    seen = 0
    for p in info["trachea_mm"]:
        idx = lab.TransformPhysicalPointToIndex(p)
        if all(0 <= i < n for i, n in zip(idx, lab.GetSize())):
            seen += 1
            assert lab[idx] == 0 and img[idx] < -500
    assert seen > 0


@pytest.mark.parametrize("kind", FULL_FOV)
def test_table_is_not_lung(cases, kind):
    img, lab, info = cases[kind]
    arr, (_, ys, _) = _lps(lab)
    hu, _ = _lps(img)
    below = ys >= info["mattress_top_y_mm"]
    assert below.any() and not arr[:, below, :].any()
    assert hu[:, ys >= info["table_top_y_mm"], :].max() > -200  # the plate (thin, partial volume) is in view


def test_fov_circle_padding(cases):
    img, lab, info = cases["fov_circle"]
    hu = sitk.GetArrayViewFromImage(img)
    assert info["pad_value"] in (-1024, -2048, -3024)
    assert hu[0, 0, 0] == info["pad_value"] and sitk.GetArrayViewFromImage(lab)[:, 0, 0].max() == 0


def test_orientations_vary_and_sides_hold():
    directions = set()
    for seed in range(6):
        _, lab, _ = make_case(seed, "cardiac", "small")
        directions.add(lab.GetDirection())
        arr, (xs, _, _) = _lps(lab)
        x1, x2 = (xs[np.nonzero(arr == k)[2]].mean() for k in (1, 2))
        assert x1 < 0 < x2
    assert len(directions) > 1


def test_deterministic():
    a, b = make_case(7, "apex", "small"), make_case(7, "apex", "small")
    for i in (0, 1):
        assert np.array_equal(sitk.GetArrayViewFromImage(a[i]), sitk.GetArrayViewFromImage(b[i]))
        assert a[i].GetOrigin() == b[i].GetOrigin() and a[i].GetDirection() == b[i].GetDirection()
    assert a[2] == b[2]
