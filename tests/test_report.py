"""QC pictures: written atomically, anatomical orientation whatever the storage orientation."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import SimpleITK as sitk

from segpipe.errors import GeometryError, InputError, OutputError
from segpipe.report import qc_picture
from segpipe.synthetic import PhantomSpec, make_phantom


@pytest.fixture(scope="module")
def phantom():
    return make_phantom(PhantomSpec(seed=9, size_xyz=(48, 44, 36), noise_hu=0.0, female=True))


def _pixels(path: Path) -> np.ndarray:
    from matplotlib.image import imread

    return imread(str(path))


def test_qc_picture_writes_png(phantom, tmp_path: Path) -> None:
    out = qc_picture(phantom.image, phantom.label, tmp_path / "qc.png", title="case 9")
    assert out == tmp_path / "qc.png"
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [p.name for p in tmp_path.iterdir()] == ["qc.png"]  # no temporary file left
    qc_picture(phantom.image, None, tmp_path / "nolabel.png")
    assert (tmp_path / "nolabel.png").stat().st_size > 1000


def test_qc_picture_same_view_for_every_storage_orientation(phantom, tmp_path: Path) -> None:
    """Reoriented copies of one scan give the same panels (only the title line differs)."""
    ref = _pixels(qc_picture(phantom.image, phantom.label, tmp_path / "lps.png", title="x"))
    for code in ("RAS", "LPI"):
        img = sitk.DICOMOrient(phantom.image, code)
        lab = sitk.DICOMOrient(phantom.label, code)
        got = _pixels(qc_picture(img, lab, tmp_path / f"{code}.png", title="x"))
        assert got.shape == ref.shape
        body = slice(int(0.2 * ref.shape[0]), None)  # below the title
        assert np.abs(got[body] - ref[body]).max() < 1e-6


def test_qc_picture_shows_warnings_under_the_views(phantom, tmp_path: Path) -> None:
    """The segmenter's warnings are written in orange under the views, the panels kept whole
    (the picture grows by a line per warning); none without warnings."""
    plain = _pixels(qc_picture(phantom.image, phantom.label, tmp_path / "plain.png", title="x"))
    lines = ["one lung in a view that cuts the body, named left from the scanner's centre: check its side", "second"]
    warned = _pixels(qc_picture(phantom.image, phantom.label, tmp_path / "warned.png", title="x", warnings=lines))

    def orange(rgb: np.ndarray) -> np.ndarray:
        return (rgb[..., 0] > 0.9) & (rgb[..., 1] > 0.5) & (rgb[..., 1] < 0.8) & (rgb[..., 2] < 0.2)

    assert not orange(plain[..., :3]).any()
    rows = np.flatnonzero(orange(warned[..., :3]).any(axis=1))
    assert rows.size and rows.min() > 0.8 * warned.shape[0]  # below the views
    assert warned.shape[0] > plain.shape[0] and warned.shape[1] == plain.shape[1]


def test_qc_picture_errors(phantom, tmp_path: Path) -> None:
    small = sitk.Image(10, 10, 10, sitk.sitkUInt8)
    with pytest.raises(GeometryError, match="label on the image grid"):
        qc_picture(phantom.image, small, tmp_path / "x.png")
    with pytest.raises(OutputError, match="existing folder"):
        qc_picture(phantom.image, phantom.label, tmp_path / "missing" / "x.png")
    assert list(tmp_path.iterdir()) == []


def _green_pixels(path: Path) -> int:
    rgb = _pixels(path)[..., :3]
    return int(np.count_nonzero((rgb[..., 1] > 0.8) & (rgb[..., 0] < 0.5) & (rgb[..., 2] < 0.5)))


def test_qc_density_overlay_paints_the_lungs_laa950_voxels(phantom, tmp_path: Path) -> None:
    """Lung voxels made -990 HU are painted green with the overlay, and nothing green is drawn
    without it or where the lung is above -950 HU; a scan stored with +1024 and its offset
    gives the same picture."""
    arr = sitk.GetArrayFromImage(phantom.image).astype(np.int16)
    lab = sitk.GetArrayViewFromImage(phantom.label)
    arr[lab > 0] = np.maximum(arr[lab > 0], -900)
    dense = sitk.GetImageFromArray(arr)
    dense.CopyInformation(phantom.image)
    arr[(lab > 0) & (np.arange(arr.shape[1])[None, :, None] > arr.shape[1] // 2)] = -990  # posterior half of the lungs
    emphysema = sitk.GetImageFromArray(arr)
    emphysema.CopyInformation(phantom.image)
    assert _green_pixels(qc_picture(emphysema, phantom.label, tmp_path / "off.png")) == 0
    assert _green_pixels(qc_picture(dense, phantom.label, tmp_path / "dense.png", density_overlay=True)) == 0
    on = _green_pixels(qc_picture(emphysema, phantom.label, tmp_path / "on.png", density_overlay=True))
    assert on > 200
    stored = sitk.Cast(emphysema, sitk.sitkInt16) + 1024
    shifted = _pixels(qc_picture(stored, phantom.label, tmp_path / "shifted.png", density_overlay=True, hu_offset=-1024))
    np.testing.assert_array_equal(shifted, _pixels(tmp_path / "on.png"))
    with pytest.raises(InputError, match="needs a lung label"):
        qc_picture(emphysema, None, tmp_path / "x.png", density_overlay=True)
