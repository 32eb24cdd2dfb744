"""``segpipe stats``: one CSV row of density measures per scan, masks matched by name or from
the segmenter; bad input gives one line, exit code 2 and no CSV."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest
import SimpleITK as sitk

from segpipe import __version__, io, stats
from segpipe.cli import main
from segpipe.density import image_density
from segpipe.synthetic import PhantomSpec, make_phantom


@pytest.fixture(scope="module")
def cohort(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict[str, tuple[sitk.Image, sitk.Image]]]:
    """Two tiny phantoms (one stored upside-down) in scans/, their masks in masks/ (one named as
    segpipe infer names it, one with the scan's own name)."""
    root = tmp_path_factory.mktemp("cohort")
    scans, masks = root / "scans", root / "masks"
    scans.mkdir()
    masks.mkdir()
    cases = {}
    for name, seed, orientation, suffix, mask_name in (("a", 3, "LPS", ".nii.gz", "a_lungs.nii.gz"), ("b", 4, "LPI", ".nrrd", "b.nrrd")):
        ph = make_phantom(PhantomSpec(seed=seed, size_xyz=(40, 36, 24), coverage="chest", orientation=orientation, dtype="int16"))
        io.write_image(ph.image, scans / f"{name}{suffix}")
        io.write_image(ph.label, masks / mask_name)
        cases[name] = (ph.image, ph.label)
    return scans, masks, cases


def _read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


def test_stats_with_masks_one_row_per_scan(cohort, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    scans, masks, cases = cohort
    out = tmp_path / "stats.csv"
    assert main(["stats", str(scans), "--masks", str(masks), "-o", str(out), "--quiet"]) == 0
    assert capsys.readouterr().out.strip() == f"wrote {out}"
    assert out.read_text().splitlines()[0].split(",") == stats.csv_columns()
    rows = _read_csv(out)
    assert [r["scan"] for r in rows] == ["a", "b"]
    assert rows[0]["mask"] == str(masks / "a_lungs.nii.gz") and rows[1]["mask"] == str(masks / "b.nrrd")
    assert all(r["segpipe_version"] == __version__ and r["model"] == "" for r in rows)
    for row in rows:
        image, label = cases[row["scan"]]
        expected = image_density(image, label).row()
        assert expected["both_volume_ml"] > 0
        for key, value in expected.items():
            if value is None:
                assert row[key] == "", key
            else:
                assert float(row[key]) == pytest.approx(value, rel=1e-6, abs=1e-9), key
    assert [p.name for p in tmp_path.iterdir()] == ["stats.csv"]  # no temporary file left
    # the Python entry point writes the same file
    again = stats.density_stats([scans / "a.nii.gz", scans / "b.nrrd"], tmp_path / "api.csv", masks=masks, progress=False)
    assert again.read_text() == out.read_text()


def _one_line_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str], match: str) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("segpipe stats: error: ") and match in err[0], err


def test_stats_bad_input_exit_2_and_no_csv(cohort, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    scans, masks, cases = cohort
    out = tmp_path / "out" / "stats.csv"
    out.parent.mkdir()
    partial = tmp_path / "partial"
    partial.mkdir()
    io.write_image(cases["a"][1], partial / "a_lungs.nii.gz")
    _one_line_exit_2(["stats", str(scans), "--masks", str(partial), "-o", str(out), "--quiet"], capsys, "no mask in")
    _one_line_exit_2(["stats", str(tmp_path / "nope.nii.gz"), "--masks", str(masks), "-o", str(out)], capsys, "input not found")
    _one_line_exit_2(["stats", str(scans), "--masks", str(tmp_path / "nomasks"), "-o", str(out)], capsys, "masks not found")
    _one_line_exit_2(["stats", str(scans), "--masks", str(masks), "-o", str(tmp_path / "missing" / "s.csv")], capsys, "does not exist")
    # a mask off its scan's grid: found only after the first scan was measured; still no CSV
    shifted = tmp_path / "shifted"
    shifted.mkdir()
    io.write_image(cases["a"][1], shifted / "a_lungs.nii.gz")
    off = sitk.Image(cases["b"][1])
    off.SetOrigin(tuple(np.asarray(off.GetOrigin()) + 5.0))
    io.write_image(off, shifted / "b_lungs.nii.gz")
    _one_line_exit_2(["stats", str(scans), "--masks", str(shifted), "-o", str(out), "--quiet"], capsys, "grid")
    # labels other than 0, 1, 2 (a lobe map)
    lobes = tmp_path / "lobes"
    lobes.mkdir()
    io.write_image(sitk.Cast(cases["a"][1], sitk.sitkUInt8) * 3, lobes / "a.nii.gz")
    _one_line_exit_2(["stats", str(scans / "a.nii.gz"), "--masks", str(lobes / "a.nii.gz"), "-o", str(out)], capsys, "0, 1 and 2")
    assert list(out.parent.iterdir()) == []


def test_stats_segments_scans_without_masks(cohort, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without masks each scan is segmented: its row holds the prediction's own measures and
    names the model."""
    from segpipe import infer
    from tests.test_infer import _force_boxes, _save_tiny_model

    scans, _, _ = cohort
    _force_boxes(monkeypatch)
    model = _save_tiny_model(tmp_path / "model.pt")
    seg = infer.LungSegmenter.from_file(model, device="cpu")
    predictions = []
    predict = seg.predict_with_report

    def spy(*args: object, **kwargs: object) -> infer.Prediction:
        predictions.append(predict(*args, **kwargs))  # type: ignore[arg-type]
        return predictions[-1]

    monkeypatch.setattr(seg, "predict_with_report", spy)
    rows = stats.collect_density([scans / "a.nii.gz"], segmenter=seg, progress=False)
    expected = predictions[0].density
    assert expected == image_density(io.read_image(scans / "a.nii.gz"), predictions[0].label)
    assert len(rows) == 1 and rows[0]["mask"] == "segpipe" and rows[0]["model"] == str(model)
    assert expected is not None and rows[0]["both_volume_ml"] == pytest.approx(expected.both.whole.volume_ml)
    assert rows[0]["right_upper_laa950_pct"] == expected.right.upper.laa950_pct
