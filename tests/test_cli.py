"""The command line: help, version, one-line errors with exit code 2, no partial outputs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import SimpleITK as sitk

from segpipe import __version__, io
from segpipe.cli import build_parser, main
from tests.conftest import make_volume
from tests.test_io import BAD_INPUTS, make_bad_input


def _subcommands() -> list[str]:
    parser = build_parser()
    action = next(a for a in parser._actions if a.dest == "command")
    return sorted(action.choices)  # type: ignore[union-attr]


def test_version_and_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out.strip() == f"segpipe {__version__}"
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    for name in ("synth", "info", "convert"):
        assert name in out


@pytest.mark.parametrize("command", _subcommands())
def test_every_subcommand_has_help(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main([command, "--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert f"segpipe {command}" in out and len(out.splitlines()) >= 3


def test_no_command_prints_help_and_fails(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert "usage: segpipe" in capsys.readouterr().out


@pytest.mark.parametrize("kind", sorted(BAD_INPUTS))
def test_bad_input_one_line_exit_2_and_no_output(kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = make_bad_input(kind, tmp_path)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    code = main(["convert", str(bad), str(out_dir / "converted.nii.gz")])
    captured = capsys.readouterr()
    assert code == 2
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("segpipe convert: error: ")
    assert "Traceback" not in captured.err
    assert list(out_dir.iterdir()) == []


@pytest.mark.parametrize("problem", ["missing-folder", "not-writable", "bad-suffix"])
def test_bad_output_path(problem: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    source = io.write_image(make_volume(), tmp_path / "in.nii.gz")
    target_dir = tmp_path / "target"
    target_dir.mkdir()
    if problem == "missing-folder":
        out = tmp_path / "nowhere" / "x.nii.gz"
    elif problem == "bad-suffix":
        out = target_dir / "x.jpg"
    else:
        out = target_dir / "x.nii.gz"
        real = io.os.access
        monkeypatch.setattr(io.os, "access", lambda p, mode: False if Path(p) == target_dir else real(p, mode))
    code = main(["convert", str(source), str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "error:" in err[0]
    assert list(target_dir.iterdir()) == []
    assert not (tmp_path / "nowhere").exists()


def test_convert_and_info_round_trip(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = io.write_image(make_volume(orientation="RAS"), tmp_path / "in.nii.gz")
    assert main(["convert", str(source), str(tmp_path / "out.nrrd")]) == 0
    a, b = io.read_image(source), io.read_image(tmp_path / "out.nrrd")
    assert a.GetOrigin() == pytest.approx(b.GetOrigin()) and a.GetDirection() == pytest.approx(b.GetDirection())
    assert (sitk.GetArrayViewFromImage(a) == sitk.GetArrayViewFromImage(b)).all()
    assert main(["convert", str(source), str(tmp_path / "out.nrrd")]) == 2  # exists, no --overwrite
    assert "--overwrite" in capsys.readouterr().err
    assert main(["info", str(tmp_path / "out.nrrd")]) == 0
    out = capsys.readouterr().out
    assert "RAS" in out and "(24, 20, 16)" in out


def test_console_script_runs_as_a_process(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "segpipe", "info", str(tmp_path / "missing.nii.gz")],
        check=False, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"segpipe info: error: input not found: {tmp_path / 'missing.nii.gz'}"
    sample = Path(__file__).resolve().parents[1] / "data_samples" / "chest_512" / "imagesTr" / "phantom_000.nii.gz"
    proc = subprocess.run([sys.executable, "-m", "segpipe", "info", str(sample)], check=False, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.splitlines()[-1].startswith("HU range"), proc.stdout  # all of it, before exiting
    # a reader that has gone before the output comes (| head -0): exit code 141 (SIGPIPE), no error message
    with subprocess.Popen([sys.executable, "-m", "segpipe", "info", str(sample)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True) as reader:
        assert reader.stdout is not None and reader.stderr is not None
        reader.stdout.close()  # long before the interpreter has started
        assert reader.wait(timeout=120) == 141 and reader.stderr.read() == ""
