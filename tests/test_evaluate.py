"""`segpipe evaluate` and `segpipe baseline`: metric values computed by hand through label
files on disk, case matching, summary rows, CSV/JSON, errors through the CLI, and the baseline
scored end to end. (Low-level metric checks against brute force are in test_metrics.py.)"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest
import SimpleITK as sitk

from segpipe import io, metrics, spatial
from segpipe.cli import main
from segpipe.errors import GeometryError, InputError

SHAPE_ZYX = (12, 20, 24)


def write_label(path: Path, array_zyx: np.ndarray, spacing_xyz: tuple[float, float, float] = (0.75, 0.5, 2.0),
                origin_xyz: tuple[float, float, float] = (-10.0, 20.0, -50.0)) -> Path:
    """A uint8 label map on disk (spacings exactly representable in NIfTI's float32)."""
    image = sitk.GetImageFromArray(array_zyx.astype(np.uint8))
    image.SetSpacing(spacing_xyz)
    image.SetOrigin(origin_xyz)
    path.parent.mkdir(parents=True, exist_ok=True)
    return io.write_image(image, path)


def cubes(right: tuple[int, int, int] = (0, 0, 0), left: tuple[int, int, int] | None = (0, 0, 0)) -> np.ndarray:
    """Right lung: a 4x8x8 (z, y, x) box; left lung: another one; each moved by (dz, dy, dx)."""
    a = np.zeros(SHAPE_ZYX, np.uint8)
    z, y, x = right
    a[4 + z : 8 + z, 6 + y : 14 + y, 2 + x : 10 + x] = 1
    if left is not None:
        z, y, x = left
        a[4 + z : 8 + z, 6 + y : 14 + y, 13 + x : 21 + x] = 2
    return a


def row(result: metrics.EvaluationResult, case: str, lung: str) -> metrics.EvaluationRow:
    return next(r for r in [*result.rows, *result.summary] if r.case == case and r.lung == lung)


# ----------------------------------------------------------------------------- values by hand
@pytest.mark.parametrize(
    ("spacing_xyz", "hd95", "assd"),
    [
        ((0.5, 0.75, 2.0), 1.0, 0.15),     # every surface distance lies along x: 0, 1 or 2 voxels
        ((1.25, 0.75, 2.0), 2.5, 0.375),   # x spacing 2.5 times larger: distances 2.5 times larger
        ((0.5, 2.0, 5.0), 1.0, 0.15),      # y and z spacing play no part
    ],
)
def test_plates_shifted_along_x_give_hand_computed_values(
    spacing_xyz: tuple[float, float, float], hd95: float, assd: float, tmp_path: Path
) -> None:
    """One-voxel-thick 10x10 plates (every voxel is surface) shifted by 2 voxels along x:
    per row the directed distances are 2, 1, 0 x 8 voxels, so HD95 = 2 s_x and
    ASSD = (3 + 3) * 10 / 200 = 0.3 s_x; Dice = 2 * 80 / 200 = 0.8; the left lung is empty in
    both masks (Dice 1, distances 0)."""
    ref = np.zeros(SHAPE_ZYX, np.uint8)
    pred = np.zeros(SHAPE_ZYX, np.uint8)
    ref[5, 5:15, 4:14] = 1
    pred[5, 5:15, 6:16] = 1
    write_label(tmp_path / "ref" / "c.nii.gz", ref, spacing_xyz)
    write_label(tmp_path / "pred" / "c_lungs.nii.gz", pred, spacing_xyz)
    result = metrics.evaluate_folders(tmp_path / "pred", tmp_path / "ref")
    r = row(result, "c", "right")
    voxel_ml = spacing_xyz[0] * spacing_xyz[1] * spacing_xyz[2] / 1000
    assert r.dice == pytest.approx(0.8)
    assert r.hd95_mm == pytest.approx(hd95, rel=1e-6) and r.assd_mm == pytest.approx(assd, rel=1e-6)
    assert r.pred_volume_ml == pytest.approx(100 * voxel_ml) and r.ref_volume_ml == pytest.approx(100 * voxel_ml)
    assert r.volume_error_ml == 0.0 and r.volume_error_pct == 0.0 and r.note == ""
    empty = row(result, "c", "left")
    assert (empty.dice, empty.hd95_mm, empty.assd_mm, empty.volume_error_pct) == (1.0, 0.0, 0.0, 0.0)
    assert empty.note == "both empty"


def test_cube_volumes_and_errors_are_exact_in_ml(tmp_path: Path) -> None:
    spacing = (0.75, 0.5, 2.0)  # voxel = 0.75 uL
    ref = cubes()
    pred = cubes(right=(0, 0, 2))  # right shifted by 2 voxels along x: overlap 4*8*6
    pred[4:10, 6:14, 13:21][ref[4:10, 6:14, 13:21] == 0] = 2  # left grown by 2 slices: 6*8*8
    write_label(tmp_path / "ref.nrrd", ref, spacing)
    write_label(tmp_path / "pred.nii.gz", pred, spacing)
    result = metrics.evaluate_folders(tmp_path / "pred.nii.gz", tmp_path / "ref.nrrd")  # two files: names ignored
    right, left = row(result, "ref", "right"), row(result, "ref", "left")
    assert right.dice == pytest.approx(2 * 192 / 512)
    assert right.pred_volume_ml == pytest.approx(256 * 0.75e-3) and right.volume_error_ml == pytest.approx(0.0)
    assert left.dice == pytest.approx(2 * 256 / (256 + 384))
    assert left.pred_volume_ml == pytest.approx(384 * 0.75e-3) and left.ref_volume_ml == pytest.approx(256 * 0.75e-3)
    assert left.volume_error_ml == pytest.approx(128 * 0.75e-3) and left.volume_error_pct == pytest.approx(50.0)
    assert 0 < left.hd95_mm <= 2 * 2.0  # the two extra slices are 2 mm each


def test_concentric_spheres_from_files_give_the_radius_difference_in_mm(tmp_path: Path) -> None:
    """Spheres of radius 8 and 11 mm drawn in mm on an anisotropic grid: HD95 and ASSD come
    out near 3 mm only when the file's spacing reaches the metric in the right axis order."""
    spacing_xyz = (0.75, 1.0, 2.0)
    shape_zyx = (20, 40, 56)
    z, y, x = np.meshgrid(*[np.arange(n) * s for n, s in zip(shape_zyx, spacing_xyz[::-1])], indexing="ij")
    dist = np.sqrt((z - 20) ** 2 + (y - 20) ** 2 + (x - 21) ** 2)
    write_label(tmp_path / "ref" / "s.mha", (dist <= 11.0).astype(np.uint8) * 2, spacing_xyz)
    write_label(tmp_path / "pred" / "s.mha", (dist <= 8.0).astype(np.uint8) * 2, spacing_xyz)
    r = row(metrics.evaluate_folders(tmp_path / "pred", tmp_path / "ref"), "s", "left")
    assert r.hd95_mm == pytest.approx(3.0, abs=max(spacing_xyz))
    assert r.assd_mm == pytest.approx(3.0, abs=max(spacing_xyz))
    assert r.volume_error_pct == pytest.approx(100 * ((8 / 11) ** 3 - 1), abs=3.0)


def test_binary_metrics_empty_conventions() -> None:
    """Both empty: Dice 1, distances 0. One empty: Dice 0, distances undefined (nan here; the
    folder evaluation turns them into inf, see test_summary_mean_median_worst)."""
    empty, some = np.zeros(SHAPE_ZYX, bool), cubes() == 1
    both = metrics.binary_metrics(empty, empty, (0.75, 0.5, 2.0))
    assert (both["dice"], both["hd95_mm"], both["assd_mm"], both["volume_error_pct"]) == (1.0, 0.0, 0.0, 0.0)
    no_ref = metrics.binary_metrics(some, empty, (0.75, 0.5, 2.0))
    assert no_ref["dice"] == 0.0 and math.isnan(no_ref["hd95_mm"]) and math.isnan(no_ref["volume_error_pct"])
    assert no_ref["volume_error_ml"] == pytest.approx(256 * 0.75e-3)


# ----------------------------------------------------------------------------- matching
def test_case_name_strips_suffix_and_lungs() -> None:
    assert metrics.case_name("a/case_01_lungs.nii.gz") == "case_01"
    assert metrics.case_name("case_01.nrrd") == "case_01"
    assert metrics.case_name("case_01_lungs_lungs.mha") == "case_01_lungs"
    assert metrics.case_name("_lungs.nii.gz") == "_lungs"


def test_folders_match_by_name_with_or_without_lungs_suffix(tmp_path: Path) -> None:
    write_label(tmp_path / "pred" / "a_lungs.nii.gz", cubes())
    write_label(tmp_path / "pred" / "b.nii.gz", cubes())
    write_label(tmp_path / "pred" / "c_lungs.nrrd", cubes())
    (tmp_path / "pred" / "a_lungs.json").write_text("{}")  # segpipe infer's report: not a label file
    write_label(tmp_path / "ref" / "a.nii.gz", cubes())
    write_label(tmp_path / "ref" / "b.nii.gz", cubes())
    write_label(tmp_path / "ref" / "c_lungs.mha", cubes())
    pairs, skipped = metrics.match_cases(tmp_path / "pred", tmp_path / "ref")
    assert [(p.case, p.pred.name, p.ref.name) for p in pairs] == [
        ("a", "a_lungs.nii.gz", "a.nii.gz"), ("b", "b.nii.gz", "b.nii.gz"), ("c", "c_lungs.nrrd", "c_lungs.mha"),
    ]
    assert skipped == {"no_reference": [], "no_prediction": []}
    one, _ = metrics.match_cases(tmp_path / "pred" / "b.nii.gz", tmp_path / "ref")  # a file against a folder
    assert [(p.case, p.ref.name) for p in one] == [("b", "b.nii.gz")]
    write_label(tmp_path / "ref" / "a_lungs.nii.gz", cubes())
    with pytest.raises(InputError, match="a.nii.gz and a_lungs.nii.gz are both case 'a'"):
        metrics.match_cases(tmp_path / "pred", tmp_path / "ref")


def test_missing_cases_fail_listing_them_or_are_skipped(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    for name in ("a_lungs", "b_lungs", "x_lungs"):
        write_label(tmp_path / "pred" / f"{name}.nii.gz", cubes())
    for name in ("a", "b", "y", "z"):
        write_label(tmp_path / "ref" / f"{name}.nii.gz", cubes())
    with pytest.raises(InputError) as info:
        metrics.evaluate_folders(tmp_path / "pred", tmp_path / "ref")
    message = str(info.value)
    assert "\n" not in message
    assert "1 case(s) without a reference" in message and ": x;" in message
    assert "2 case(s) without a prediction" in message and "y, z" in message and "--allow-missing" in message
    result = metrics.evaluate_folders(tmp_path / "pred", tmp_path / "ref", allow_missing=True)
    assert [c.case for c in result.cases] == ["a", "b"]
    assert result.skipped == {"no_reference": ["x"], "no_prediction": ["y", "z"]}
    assert "skipping" in caplog.text
    with pytest.raises(InputError, match="no case is in both"):
        metrics.evaluate_folders(tmp_path / "pred" / "x_lungs.nii.gz", tmp_path / "ref", allow_missing=True)


def test_labels_other_than_0_1_2_are_refused(tmp_path: Path) -> None:
    bad = cubes()
    bad[0, 0, 0] = 7
    write_label(tmp_path / "pred" / "a.nii.gz", bad)
    write_label(tmp_path / "ref" / "a.nii.gz", cubes())
    with pytest.raises(InputError, match=r"case a: .*a.nii.gz: expected labels 0 .*got also 7"):
        metrics.evaluate_folders(tmp_path / "pred", tmp_path / "ref")


# ----------------------------------------------------------------------------- summary and files
@pytest.fixture
def three_cases(tmp_path: Path) -> tuple[Path, Path]:
    """Right lung shifted by 0, 1 and 2 voxels along x (Dice 1, 7/8, 6/8); left lung missed
    in case c."""
    for case, shift in (("a", 0), ("b", 1), ("c", 2)):
        write_label(tmp_path / "ref" / f"{case}.nii.gz", cubes())
        write_label(tmp_path / "pred" / f"{case}_lungs.nii.gz", cubes(right=(0, 0, shift), left=None if case == "c" else (0, 0, 0)))
    return tmp_path / "pred", tmp_path / "ref"


def test_summary_mean_median_worst(three_cases: tuple[Path, Path]) -> None:
    result = metrics.evaluate_folders(*three_cases)
    assert [(r.case, r.lung) for r in result.summary] == [
        (s, lung) for lung in ("right", "left") for s in ("mean", "median", "worst")
    ]
    dices = [1.0, 7 / 8, 6 / 8]
    assert row(result, "mean", "right").dice == pytest.approx(np.mean(dices))
    assert row(result, "median", "right").dice == pytest.approx(7 / 8)
    assert row(result, "worst", "right").dice == pytest.approx(6 / 8)
    hd = [row(result, c, "right").hd95_mm for c in "abc"]
    assert row(result, "worst", "right").hd95_mm == max(hd) and row(result, "mean", "right").hd95_mm == pytest.approx(np.mean(hd))
    assert math.isnan(row(result, "worst", "right").pred_volume_ml)  # "worst volume" means nothing
    missed = row(result, "c", "left")
    assert missed.dice == 0.0 and math.isinf(missed.hd95_mm) and missed.note == "prediction empty"
    assert missed.volume_error_pct == pytest.approx(-100.0)
    assert row(result, "mean", "left").dice == pytest.approx(2 / 3)
    assert row(result, "mean", "left").hd95_mm == 0.0  # the missed lung is left out of the mean...
    assert row(result, "mean", "left").note == "HD95/ASSD over 2 of 3 cases"
    assert math.isinf(row(result, "worst", "left").hd95_mm)  # ...and is the worst
    assert result.worst_cases["left"]["hd95_mm"] == "c" and result.worst_cases["right"]["dice"] == "c"
    table = metrics.format_table(result)
    assert table.splitlines()[0].split()[:4] == ["case", "lung", "Dice", "HD95"]
    assert len(table.splitlines()) == 1 + 1 + 6 + 1 + 6
    assert "inf" in table and "prediction empty" in table


def test_csv_and_json_files(three_cases: tuple[Path, Path], tmp_path: Path) -> None:
    result = metrics.evaluate_folders(*three_cases)
    csv_path = metrics.write_csv(result, tmp_path / "scores.csv")
    json_path = metrics.write_json(result, tmp_path / "scores.json")
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_file()) == ["scores.csv", "scores.json"]  # no temp files left
    with csv_path.open() as fh:
        lines = list(csv.DictReader(fh))
    assert list(lines[0]) == ["case", "lung", *metrics.METRIC_COLUMNS, "note"]
    assert [(r["case"], r["lung"]) for r in lines[:2]] == [("a", "right"), ("a", "left")]
    assert len(lines) == 6 + 6 and lines[-1]["case"] == "worst"
    c_left = next(r for r in lines if r["case"] == "c" and r["lung"] == "left")
    assert (c_left["dice"], c_left["hd95_mm"], c_left["note"]) == ("0", "inf", "prediction empty")
    assert float(next(r for r in lines if r["case"] == "b" and r["lung"] == "right")["dice"]) == pytest.approx(7 / 8)

    def no_constants(name: str) -> None:
        raise AssertionError(f"not strict JSON: {name}")

    data = json.loads(json_path.read_text(), parse_constant=no_constants)
    assert [c["case"] for c in data["cases"]] == ["a", "b", "c"]
    assert data["cases"][2]["pred"].endswith("c_lungs.nii.gz") and data["cases"][2]["ref"].endswith("c.nii.gz")
    assert data["cases"][2]["left"]["hd95_mm"] is None and data["cases"][2]["left"]["dice"] == 0.0
    assert data["cases"][1]["right"]["dice"] == pytest.approx(7 / 8)
    assert data["summary"]["right"]["median"]["dice"] == pytest.approx(7 / 8)
    assert data["summary"]["left"]["worst"]["hd95_mm"] is None
    assert data["summary"]["left"]["worst_case"]["dice"] == "c"
    assert data["skipped"] == {"no_reference": [], "no_prediction": []}


def test_cli_evaluate_prints_table_and_writes_files(three_cases: tuple[Path, Path], tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    pred, ref = three_cases
    out = tmp_path / "out"
    out.mkdir()
    code = main(["evaluate", "--pred", str(pred), "--ref", str(ref), "--csv", str(out / "s.csv"),
                 "--json", str(out / "s.json"), "--quiet"])
    captured = capsys.readouterr()
    assert code == 0 and captured.err == ""
    assert "median" in captured.out and f"wrote {out / 's.csv'}" in captured.out
    assert sorted(p.name for p in out.iterdir()) == ["s.csv", "s.json"]


def test_cli_geometry_mismatch_is_one_line_exit_2_and_writes_nothing(three_cases: tuple[Path, Path], tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    pred, ref = three_cases
    write_label(pred / "b_lungs.nii.gz", cubes(), origin_xyz=(-10.0, 20.0, -48.0))  # one slice off
    out = tmp_path / "out"
    out.mkdir()
    code = main(["evaluate", "--pred", str(pred), "--ref", str(ref), "--csv", str(out / "s.csv"),
                 "--json", str(out / "s.json"), "--quiet"])
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert code == 2 and len(lines) == 1
    assert lines[0].startswith("segpipe evaluate: error: case b (")
    assert "geometry differ (origin" in lines[0] and "Traceback" not in captured.err
    assert list(out.iterdir()) == []
    assert captured.out == ""
    with pytest.raises(GeometryError):
        metrics.evaluate_folders(pred, ref)


def test_cli_missing_case_is_one_line_exit_2(three_cases: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    pred, ref = three_cases
    (pred / "b_lungs.nii.gz").unlink()
    assert main(["evaluate", "--pred", str(pred), "--ref", str(ref), "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "1 case(s) without a prediction" in err[0] and ": b " in err[0]
    assert main(["evaluate", "--pred", str(pred), "--ref", str(ref), "--quiet", "--allow-missing"]) == 0
    captured = capsys.readouterr()
    assert "skipping 1 case(s) without a prediction" in captured.err and "\nc " in captured.out


# ----------------------------------------------------------------------------- baseline
def test_cli_baseline_on_a_phantom_scores_well_with_evaluate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from segpipe import synthetic

    spec = synthetic.PhantomSpec(seed=3, size_xyz=(80, 80, 56), coverage="chest", orientation="RAS")
    phantom = synthetic.make_phantom(spec.replace(nodules=0.0, consolidation=0.0, ground_glass=0.0,
                                                  emphysema=0.0, effusion=0.0, collapse=0.0))
    scans, labels = tmp_path / "scans", tmp_path / "labels"
    scans.mkdir(), labels.mkdir()
    io.write_image(phantom.image, scans / "ph3.nii.gz")
    io.write_image(phantom.label, labels / "ph3.nii.gz")
    out = tmp_path / "baseline"
    assert main(["baseline", str(scans), "-o", str(out), "--quiet"]) == 0
    assert f"wrote {out / 'ph3_lungs.nii.gz'}: right" in capsys.readouterr().out
    mask, scan = io.read_image(out / "ph3_lungs.nii.gz"), io.read_image(scans / "ph3.nii.gz")
    assert spatial.same_geometry(mask, scan, atol_mm=0) and mask.GetPixelID() == sitk.sitkUInt8
    assert (out / "ph3_lungs.json").is_file()
    assert main(["baseline", str(scans), "-o", str(out), "--quiet"]) == 0  # exists: skipped
    assert "skipped" in capsys.readouterr().out

    assert main(["evaluate", "--pred", str(out), "--ref", str(labels), "--csv", str(tmp_path / "s.csv"), "--quiet"]) == 0
    with (tmp_path / "s.csv").open() as fh:
        rows = {(r["case"], r["lung"]): r for r in csv.DictReader(fh)}
    assert float(rows[("ph3", "right")]["dice"]) > 0.9 and float(rows[("ph3", "left")]["dice"]) > 0.9
    assert abs(float(rows[("ph3", "right")]["volume_error_pct"])) < 10


def test_baseline_refuses_a_scan_that_is_not_in_hu(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tests.conftest import make_volume

    shifted = sitk.Cast(make_volume(), sitk.sitkFloat32) / 4000.0 + 0.5  # normalised 0..1
    io.write_image(shifted, tmp_path / "norm.nii.gz")
    assert main(["baseline", str(tmp_path / "norm.nii.gz"), "-o", str(tmp_path / "out"), "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not CT in HU" in err[0]
    assert not (tmp_path / "out" / "norm_lungs.nii.gz").exists()
