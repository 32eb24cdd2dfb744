"""Shared fixtures: tiny seeded volumes with anisotropic spacing and non-trivial geometry."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import SimpleITK as sitk

ORIENTATIONS = ["LPS", "RAS", "LAS", "LPI", "RAI"]
SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def make_volume(
    size_xyz: tuple[int, int, int] = (24, 20, 16),
    spacing_xyz: tuple[float, float, float] = (0.8, 0.7, 2.5),
    origin_xyz: tuple[float, float, float] = (-12.5, 30.25, -101.0),
    orientation: str = "LPS",
    dtype: type = np.int16,
    seed: int = 0,
) -> sitk.Image:
    """A seeded random CT-like volume (HU) stored in ``orientation``."""
    rng = np.random.default_rng(seed)
    array = rng.integers(-1024, 1500, size=size_xyz[::-1]).astype(dtype)
    image = sitk.GetImageFromArray(array)
    image.SetSpacing(spacing_xyz)
    image.SetOrigin(origin_xyz)
    if orientation != "LPS":
        image = sitk.DICOMOrient(image, orientation)
    return image


def oblique_permuted(image: sitk.Image) -> sitk.Image:
    """A copy of ``image`` with a permuted-axes, slightly rotated direction matrix."""
    out = sitk.Image(image)
    angle = np.deg2rad(7.0)
    rot = np.array([[np.cos(angle), -np.sin(angle), 0], [np.sin(angle), np.cos(angle), 0], [0, 0, 1]])
    perm = np.array([[0, 0, 1], [1, 0, 0], [0, 1, 0]], dtype=float)  # i -> y, j -> z, k -> x
    out.SetDirection(tuple((rot @ perm).ravel().tolist()))
    return out


@pytest.fixture
def volume() -> sitk.Image:
    return make_volume()
