"""benchmarks/revision_bench.py: its refusals (the timing itself is a benchmark, not a test)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).parents[1] / "benchmarks" / "revision_bench.py"
REPO = SCRIPT.parents[1]


@pytest.mark.skipif(not (REPO / ".git").exists(), reason="needs the project's git repository")
def test_an_unknown_revision_is_one_line_and_exit_2(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, str(SCRIPT), "--base", "no-such-revision-x", "--cache", str(tmp_path)],
                         capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 2
    assert out.stderr.strip() == "error: unknown revision 'no-such-revision-x'"
    assert not list(tmp_path.iterdir())  # nothing generated


def test_repeats_must_be_positive() -> None:
    out = subprocess.run([sys.executable, str(SCRIPT), "--base", "HEAD", "--repeats", "0"], capture_output=True, text=True,
                         timeout=120, check=False)
    assert out.returncode == 2 and "--repeats: expected at least 1" in out.stderr
