"""Lung density measures against values computed by hand on constructed masks: LAA-950/-910,
HAA bounds, MLD, PD15, cranio-caudal thirds in physical space (anisotropic spacing, scans
stored upside-down or permuted), padding left out, HU offsets, memory, and the real scans."""

from __future__ import annotations

import json
import tracemalloc

import numpy as np
import pytest
import SimpleITK as sitk

from segpipe import density, io
from segpipe.density import image_density, lung_density
from segpipe.errors import GeometryError, InputError
from tests.conftest import SHARED_DATA

LPI = (1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, -1.0)  # stored upside-down: index z runs toward the feet


def _block(shape_zyx: tuple[int, int, int] = (9, 6, 8), fill: int = -800) -> tuple[np.ndarray, np.ndarray]:
    """A scan of soft tissue (40 HU) with a right lung (label 1) in its middle."""
    hu = np.full(shape_zyx, 40, np.int16)
    lab = np.zeros(shape_zyx, np.uint8)
    hu[:, 1:-1, 1:-1] = fill
    lab[:, 1:-1, 1:-1] = 1
    return hu, lab


def test_laa_and_mld_are_exact_on_k_voxels_below_the_threshold() -> None:
    hu, lab = _block()
    n = int(np.count_nonzero(lab))
    lung = np.flatnonzero(lab.ravel())
    k = 17
    hu.ravel()[lung[::5][:k]] = -960
    d = lung_density(hu, lab, (0.7, 0.8, 2.5))
    right = d.right.whole
    assert right.laa950_pct == pytest.approx(100.0 * k / n)
    assert right.laa910_pct == pytest.approx(100.0 * k / n)
    assert right.mld_hu == pytest.approx((k * -960 + (n - k) * -800) / n, abs=1e-9)
    assert right.haa_pct == 0.0
    assert right.volume_ml == pytest.approx(n * 0.7 * 0.8 * 2.5 / 1000)
    assert d.both.whole == right  # the left lung is empty
    assert d.left.whole.volume_ml == 0 and d.left.whole.mld_hu is None and d.left.height_mm is None


def test_pd15_is_numpys_linear_percentile_in_hu() -> None:
    hu, lab = _block((5, 22, 22))  # 5 * 20 * 20 = 2000 lung voxels
    ramp = np.linspace(-1000, -500, 2000).astype(np.float32)
    rng = np.random.default_rng(0)
    hu = hu.astype(np.float32)
    hu[lab == 1] = rng.permutation(ramp)
    d = lung_density(hu, lab, (1.0, 1.0, 1.0))
    # linear: position 0.15 * (n - 1) = 299.85 between the 300th and 301st smallest values
    expected = ramp[299] + 0.85 * (ramp[300] - ramp[299])
    assert d.right.whole.pd15_hu == pytest.approx(expected, abs=1e-3)
    assert d.right.whole.pd15_hu == pytest.approx(float(np.percentile(ramp, 15)), abs=1e-3)
    assert d.right.whole.mld_hu == pytest.approx(-750.0, abs=1e-3)


def test_thresholds_strict_below_and_haa_bounds_included() -> None:
    values = np.array([-950.0, -950.5, -910.0, -910.5, -700.0, -700.5, -250.0, -249.5, -600.0, 0.0], np.float32)
    hu = values.reshape(1, 1, -1)
    lab = np.full(hu.shape, 2, np.uint8)
    left = lung_density(hu, lab, (1.0, 1.0, 1.0)).left.whole
    assert left.laa950_pct == pytest.approx(10.0)  # -950.5 only
    assert left.laa910_pct == pytest.approx(30.0)  # -950, -950.5, -910.5
    assert left.haa_pct == pytest.approx(30.0)  # -700, -250, -600


def _slices(n: int) -> tuple[np.ndarray, np.ndarray]:
    """A right lung over ``n`` slices whose slice ``k`` holds the value ``-1000 + 10 k``."""
    hu = np.zeros((n, 3, 3), np.int16)
    hu[:] = (-1000 + 10 * np.arange(n, dtype=np.int16))[:, None, None]
    return hu, np.ones(hu.shape, np.uint8)


def test_zones_are_thirds_of_the_physical_height_with_cranial_up() -> None:
    hu, lab = _slices(9)
    lps = lung_density(hu, lab, (0.7, 0.7, 2.5))  # index z toward the head: slice 8 is highest
    lpi = lung_density(hu, lab, (0.7, 0.7, 2.5), LPI)  # index z toward the feet: slice 0 is highest
    assert lps.right.height_mm == pytest.approx(9 * 2.5) and lpi.right.height_mm == pytest.approx(9 * 2.5)
    assert lps.right.upper.mld_hu == pytest.approx(-1000 + 10 * 7)  # slices 6, 7, 8
    assert lps.right.lower.mld_hu == pytest.approx(-1000 + 10 * 1)  # slices 0, 1, 2
    assert lpi.right.upper.mld_hu == pytest.approx(-1000 + 10 * 1)
    assert lpi.right.lower.mld_hu == pytest.approx(-1000 + 10 * 7)
    assert lpi.right.middle.mld_hu == lps.right.middle.mld_hu == pytest.approx(-1000 + 10 * 4)
    zones = [lpi.right.upper, lpi.right.middle, lpi.right.lower]
    assert [z.volume_ml for z in zones] == pytest.approx([3 * 9 * 0.7 * 0.7 * 2.5 / 1000] * 3)
    assert lpi.right.whole.laa950_pct == pytest.approx(100 * 5 / 9)  # -1000, -990, ..., -960 of -1000..-920
    assert lpi.right.upper.laa950_pct == 100.0 and lpi.right.middle.laa950_pct == pytest.approx(100 * 2 / 3)


def test_a_zone_holds_the_voxels_whose_centre_it_holds() -> None:
    """Four slices: the thirds' bounds at 4/3 and 8/3 slices from the top give 1, 2, 1 slices."""
    hu, lab = _slices(4)
    d = lung_density(hu, lab, (1.0, 1.0, 3.0), LPI)
    per_slice = 9 * 3.0 / 1000
    assert [d.right.upper.volume_ml, d.right.middle.volume_ml, d.right.lower.volume_ml] == pytest.approx(
        [per_slice, 2 * per_slice, per_slice]
    )
    assert d.right.upper.mld_hu == -1000 and d.right.middle.mld_hu == pytest.approx(-985.0)


def test_zones_follow_the_patient_axis_whatever_the_storage() -> None:
    """The same anisotropic scan stored in other orientations (axes flipped and permuted) gives
    the same measures and zones."""
    hu, lab = _slices(12)
    lab[:, :, 2] = 2  # a left lung: the x column at the patient's left
    image = sitk.GetImageFromArray(hu)
    image.SetSpacing((0.6, 0.9, 2.0))
    label = sitk.GetImageFromArray(lab)
    label.CopyInformation(image)
    ref = image_density(image, label)
    assert ref.right.upper.mld_hu == pytest.approx(-1000 + 10 * 9.5)  # slices 8-11, the highest
    for code in ("LPI", "RAS", "SPL", "IAR"):
        img, lb = sitk.DICOMOrient(image, code), sitk.DICOMOrient(label, code)
        got = image_density(img, lb)
        for key, value in ref.row().items():
            assert got.row()[key] == pytest.approx(value, abs=1e-9), (code, key)


def test_both_lungs_zones_are_each_lungs_own_thirds() -> None:
    hu, lab = _slices(9)
    lab[:, :, 2] = 0
    lab[3:6, :, 2] = 2  # a short left lung: slices 3-5, its own thirds are one slice each
    d = lung_density(hu, lab, (1.0, 1.0, 1.0))
    assert d.left.height_mm == pytest.approx(3.0) and d.both.height_mm is None
    assert d.left.upper.mld_hu == pytest.approx(-1000 + 50)
    n_up_right, n_up_left = 3 * 3 * 2, 3
    both_upper = (n_up_right * (-1000 + 70) + n_up_left * (-1000 + 50)) / (n_up_right + n_up_left)
    assert d.both.upper.mld_hu == pytest.approx(both_upper)
    for zone in ("upper", "middle", "lower"):
        assert d.both.zone(zone).volume_ml == pytest.approx(d.right.zone(zone).volume_ml + d.left.zone(zone).volume_ml)
    assert d.both.whole.volume_ml == pytest.approx(d.right.whole.volume_ml + d.left.whole.volume_ml)


def test_padding_is_left_out_and_values_beyond_the_ct_range_clipped() -> None:
    hu, lab = _block((4, 6, 6))  # 64 lung voxels at -800
    lung = np.flatnonzero(lab.ravel())
    hu.ravel()[lung[:3]] = -2048  # padding: no measurement
    hu.ravel()[lung[3:5]] = -1100  # noise around air: clipped to -1024
    hu.ravel()[lung[5]] = 4000  # beyond the scale: clipped to 3071
    d = lung_density(hu, lab, (1.0, 1.0, 1.0)).right
    assert d.excluded_ml == pytest.approx(3 / 1000)
    assert d.whole.volume_ml == pytest.approx(64 / 1000)  # the mask's volume
    assert d.whole.laa950_pct == pytest.approx(100 * 2 / 61)
    assert d.whole.mld_hu == pytest.approx((2 * -1024 + 3071 + 58 * -800) / 61)
    assert sum(d.zone(z).volume_ml for z in ("upper", "middle", "lower")) == pytest.approx(64 / 1000)


def test_hu_offset_equals_the_shifted_scan() -> None:
    hu, lab = _slices(6)
    stored = (hu.astype(np.int32) + 1024).astype(np.uint16)
    a = lung_density(hu, lab, (1.0, 1.0, 1.0)).row()
    b = lung_density(stored, lab, (1.0, 1.0, 1.0), hu_offset=-1024).row()
    assert a == pytest.approx(b)


@pytest.mark.parametrize("stored", [np.int16, np.uint16, np.int32, np.float32])
def test_whole_hu_scans_measured_from_histograms_equal_the_values(stored: type, monkeypatch: pytest.MonkeyPatch) -> None:
    """Scans in whole HU are measured from per-zone histograms; measured from the values
    themselves (forced) the two agree on every measure, padding and clipping included."""
    rng = np.random.default_rng(5)
    hu = rng.normal(-820, 120, size=(14, 12, 10)).round().astype(np.int32)
    hu.ravel()[rng.choice(hu.size, 25, replace=False)] = -2048
    hu.ravel()[rng.choice(hu.size, 5, replace=False)] = 3500
    lab = rng.integers(0, 3, size=hu.shape).astype(np.uint8)
    lab[:3, :, 5:] = 0  # the left lung starts lower
    offset = 2048 if stored is np.uint16 else 0
    as_int = lung_density((hu + offset).astype(stored), lab, (0.7, 0.9, 1.5), LPI, hu_offset=-offset)
    monkeypatch.setattr(density, "_whole", lambda v: False)
    as_float = lung_density(hu.astype(np.float32), lab, (0.7, 0.9, 1.5), LPI)
    assert as_int.right.excluded_ml > 0
    for key, value in as_float.row().items():
        assert as_int.row()[key] == pytest.approx(value, rel=1e-9, abs=1e-9), key


def test_report_is_json_with_every_side_zone_and_the_method() -> None:
    hu, lab = _slices(6)
    d = lung_density(hu, lab, (1.0, 1.0, 1.0))
    data = json.loads(json.dumps(d.to_dict(), allow_nan=False))
    assert set(data) == {"right", "left", "both", "method"}
    assert set(data["right"]) == {*density.MEASURES, "height_mm", "excluded_ml", "zones"}
    assert set(data["left"]["zones"]["upper"]) == set(density.MEASURES)
    assert data["left"]["mld_hu"] is None and data["right"]["volume_ml"] == pytest.approx(54 / 1000, abs=0.01)
    assert "linear" in data["method"]["pd15"]
    assert list(d.row()) == density.columns() and len(density.columns()) == 3 * (4 * 6 + 1)


def test_errors() -> None:
    hu, lab = _slices(3)
    with pytest.raises(InputError, match="same shape"):
        lung_density(hu, lab[:2], (1.0, 1.0, 1.0))
    with pytest.raises(GeometryError, match="positive spacings"):
        lung_density(hu, lab, (1.0, 0.0, 1.0))
    image, label = sitk.GetImageFromArray(hu), sitk.GetImageFromArray(lab)
    label.SetSpacing((1.0, 1.0, 2.0))
    with pytest.raises(GeometryError, match="grid"):
        image_density(image, label)
    lobes = sitk.GetImageFromArray((lab * 3).astype(np.uint8))
    with pytest.raises(InputError, match="values 0, 1 and 2"):
        image_density(image, lobes)


def test_no_float64_copy_of_the_scan() -> None:
    """A 96 x 256 x 256 int16 scan (12.6 MB) with 4.4 M lung voxels: the measures' peak
    allocation stays below one float64 copy of the scan (50 MB)."""
    hu = np.full((96, 256, 256), -850, np.int16)
    hu[:, ::7, ::3] = -980
    lab = np.zeros(hu.shape, np.uint8)
    lab[:, 20:236, 20:126] = 1
    lab[:, 20:236, 130:236] = 2
    tracemalloc.start()
    d = lung_density(hu, lab, (0.7, 0.7, 1.0), LPI)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < hu.size * 8
    assert 0 < d.both.whole.laa950_pct < 100


# ----------------------------------------------------------------------------- a real scan
COPD = SHARED_DATA / "copdgene-10002K-64"


def test_copdgene_reference_mask_shows_emphysema() -> None:
    """The COPDGene case (an inspiration CT of a COPD patient, 4 mm voxels) with its reference
    lung mask: LAA-950 far above a normal lung's few %."""
    if not (COPD / "ct.nii.gz").is_file():
        pytest.skip(f"real scan not available: {COPD} is absent")
    d = image_density(io.read_image(COPD / "ct.nii.gz"), io.read_image(COPD / "lungs.nii.gz"))
    assert d.right.whole.volume_ml == pytest.approx(2420, rel=0.02) and d.left.whole.volume_ml == pytest.approx(2130, rel=0.02)
    for side in ("right", "left", "both"):
        whole = getattr(d, side).whole
        assert whole.laa950_pct > 10, side
        assert whole.pd15_hu < -930, side
        assert -950 < whole.mld_hu < -800, side


# ----------------------------------------------------------------------------- in the inference report
@pytest.mark.parametrize("orientation", ["oblique"])
def test_prediction_density_is_that_of_the_input_scan_and_the_output_mask(
    orientation: str, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The segmenter measures on its canonical copy of the scan; the figures are those of the
    input as given, with the mask it returns (and the HU offset applied)."""
    from segpipe import infer, spatial, synthetic
    from tests.conftest import oblique_permuted
    from tests.test_infer import _force_boxes, _save_tiny_model

    _force_boxes(monkeypatch)
    scan = synthetic.make_phantom(synthetic.PhantomSpec(seed=2, size_xyz=(64, 64, 40), coverage="chest")).image
    image = oblique_permuted(scan) if orientation == "oblique" else spatial.reorient(scan, orientation)
    shifted = sitk.Cast(image, sitk.sitkInt16) + 1024
    model = _save_tiny_model(tmp_path_factory.mktemp("m") / "model.pt")
    seg = infer.LungSegmenter.from_file(model, device="cpu")
    result = seg.predict_with_report(shifted, hu_offset=-1024)
    assert result.density is not None and result.density.both.whole.volume_ml > 0
    expected = image_density(shifted, result.label, hu_offset=-1024)
    for key, value in expected.row().items():
        assert result.density.row()[key] == pytest.approx(value, rel=1e-6, abs=1e-6), key
    report = json.loads(json.dumps(result.report, allow_nan=False))
    assert report["density"] == expected.to_dict()
    assert report["density"]["right"]["volume_ml"] == pytest.approx(report["volumes_ml"]["right"], abs=0.01)

    # the command line: the same figures in the JSON report, and the QC picture with the overlay
    out = tmp_path_factory.mktemp("out")
    src = io.write_image(shifted, out / "scan.nrrd")
    from segpipe.cli import main

    assert main(["infer", str(src), "-o", str(out), "--model", str(model), "--device", "cpu", "--hu-offset", "-1024",
                 "--qc-density", "--quiet"]) == 0
    written = json.loads((out / "scan_lungs.json").read_text())
    assert written["density"]["both"]["volume_ml"] == pytest.approx(expected.both.whole.volume_ml, abs=0.01)
    assert written["qc"] == str(out / "scan_lungs.png") and (out / "scan_lungs.png").stat().st_size > 1000


@pytest.mark.slow
def test_copdgene_segpipe_mask_gives_the_reference_masks_figures() -> None:
    """The bundled model's mask of the COPDGene case gives LAA-950, PD15 and MLD within a little
    of the reference mask's (4 mm voxels: the figures are smoothed, not clinical values)."""
    if not (COPD / "ct.nii.gz").is_file():
        pytest.skip(f"real scan not available: {COPD} is absent")
    from segpipe import infer

    image = io.read_image(COPD / "ct.nii.gz")
    ref = image_density(image, io.read_image(COPD / "lungs.nii.gz"))
    got = infer.LungSegmenter.default(device="cpu").predict_with_report(image).density
    assert got is not None
    for side in ("right", "left"):
        a, b = getattr(got, side).whole, getattr(ref, side).whole
        assert a.laa950_pct == pytest.approx(b.laa950_pct, abs=1.5), side
        assert a.pd15_hu == pytest.approx(b.pd15_hu, abs=5), side
        assert a.mld_hu == pytest.approx(b.mld_hu, abs=10), side
