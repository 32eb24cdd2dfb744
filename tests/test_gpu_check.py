"""benchmarks/gpu_check.py: the refusal without CUDA, and the logic that turns measurements into
verdicts, tables and the markdown section (no GPU needed)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).parents[1] / "benchmarks" / "gpu_check.py"
sys.path.insert(0, str(SCRIPT.parent))
import gpu_check as gc  # noqa: E402

GiB = 2**30


def test_refuses_without_cuda_in_one_line(tmp_path: Path) -> None:
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}  # no GPU visible, even on a machine that has one
    out = tmp_path / "out.json"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--json", str(out)], capture_output=True, text=True, env=env,
                          timeout=120, check=False)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("gpu_check.py: needs a CUDA GPU; none is available here (torch ")
    assert "CUDA build: " in lines[0] and "Traceback" not in proc.stderr
    assert proc.stdout == ""
    assert not out.exists()


def test_budget_label() -> None:
    assert gc.budget_label("8") == "8GiB"
    assert gc.budget_label(" 12.5 ") == "12.5GiB"
    assert gc.budget_label("8GiB") == "8GiB"
    assert gc.budget_label("8000MB") == "8000MB"


def test_training_targets_fit_and_tolerance() -> None:
    fits, close = gc.training_targets("8GiB", 8 * GiB, allocated=int(3.8 * GiB), estimate=4 * GiB, tolerance=0.10)
    assert fits["status"] == "PASS" and close["status"] == "PASS"
    assert "0.950 x" in close["measured"] and "of 8.00 GiB" in fits["measured"]
    # exactly 10 % off still passes (float rounding must not fail it); beyond fails, both ways
    assert gc.training_targets("8GiB", 8 * GiB, int(4.4 * GiB), 4 * GiB, 0.10)[1]["status"] == "PASS"
    assert gc.training_targets("8GiB", 8 * GiB, int(4.5 * GiB), 4 * GiB, 0.10)[1]["status"] == "FAIL"
    assert gc.training_targets("8GiB", 8 * GiB, int(3.5 * GiB), 4 * GiB, 0.10)[1]["status"] == "FAIL"
    over = gc.training_targets("4GiB", 4 * GiB, 4 * GiB + 1, 4 * GiB, 0.10)
    assert [t["status"] for t in over] == ["FAIL", "PASS"]


def _train_out(allocated: float, reserved: float, estimate: float = 4.0) -> dict:
    return {
        "plan": {"patch_size": [136, 184, 200], "batch_size": 2, "accumulation_steps": 2, "checkpointing": "none"},
        "estimate": {"total_bytes": int(estimate * GiB)},
        "max_allocated": int(allocated * GiB), "max_reserved": int(reserved * GiB), "step_s": 0.42,
    }


def test_train_check_combines_default_and_expandable_runs() -> None:
    check = gc.train_check("8GiB", 8 * GiB, _train_out(3.9, 5.0), _train_out(3.9, 4.1), 0.10)
    assert gc.check_status(check) == "pass"
    assert len(check["targets"]) == 3
    assert check["reserved_gap"] == int(5.0 * GiB) - int(3.9 * GiB)
    assert check["expandable_narrows_gap"] is True
    assert check["fits_card_with_context"] is True  # 5 GiB reserved + 512 MiB context <= 8 GiB

    oom = gc.train_check("8GiB", 8 * GiB, _train_out(3.9, 5.0), {"error": "OutOfMemoryError: CUDA out of memory."}, 0.10)
    assert gc.check_status(oom) == "fail"
    assert oom["targets"][-1]["status"] == "FAIL" and "out of memory" in oom["targets"][-1]["measured"]

    failed = gc.train_check("4GiB", 4 * GiB, {"plan": _train_out(1, 1)["plan"], "error": "RuntimeError: boom"}, None, 0.10)
    assert gc.check_status(failed) == "fail" and failed["error"] == "RuntimeError: boom" and failed["targets"] == []

    skipped = gc.train_check("16GiB", 16 * GiB, {"skipped": "the plan's estimate exceeds this GPU"}, None, 0.10)
    assert gc.check_status(skipped) == "skipped"


def test_amp_check_verdicts() -> None:
    good = {"logits_dtype": "torch.float16", "scaler_enabled": True, "scales": [32768.0, 32768.0, 65536.0],
            "steps_applied": 2, "weights_dtype": "torch.float32", "weights_finite": True}
    assert gc.check_status(gc.amp_check(good)) == "pass"
    bad = gc.amp_check({**good, "scales": [32768.0, float("inf")], "steps_applied": 0})
    assert [t["status"] for t in bad["targets"]] == ["PASS", "FAIL", "FAIL", "PASS"]
    assert gc.check_status(gc.amp_check({**good, "logits_dtype": "torch.float32"})) == "fail"


def test_infer_check_budget_and_fallbacks() -> None:
    run = {"wall_s": 3.0, "fallbacks": []}
    out = {"device": "cuda:0", "runs": [run, run], "max_allocated": 2 * GiB, "max_reserved": 3 * GiB,
           "size_xyz": [512, 512, 300], "wall_s": 3.0}
    assert gc.check_status(gc.infer_check("chest", out, 8 * GiB, "8GiB")) == "pass"
    assert gc.check_status(gc.infer_check("chest", {**out, "max_allocated": 9 * GiB}, 8 * GiB, "8GiB")) == "fail"
    oom = {**out, "runs": [run, {"wall_s": 9.0, "fallbacks": ["CUDA out of memory in the fine stage; retried"]}]}
    assert gc.check_status(gc.infer_check("chest", oom, 8 * GiB, "8GiB")) == "fail"
    assert gc.check_status(gc.infer_check("lidc", {"skipped": "not present"}, 8 * GiB, "8GiB")) == "skipped"


def test_cuda_mask_agreement_with_the_cpu_mask() -> None:
    """Each lung's Dice between the CUDA and CPU masks, and the voxels that differ; below
    AGREE_DICE for either lung the inference check fails."""
    import numpy as np

    cpu = np.zeros((4, 10, 10), np.uint8)
    cpu[:, :, :5], cpu[:, :, 5:] = 1, 2
    cuda = cpu.copy()
    cuda[0, 0, 4] = 2  # one right-lung voxel went left
    agree = gc.agreement(cuda, cpu, voxel_ml=0.5)
    assert agree["voxels_differ"] == 1 and agree["voxels"] == 400
    assert agree["lungs"]["right"] == {"dice": 2 * 199 / 399, "cuda_ml": 99.5, "cpu_ml": 100.0}
    assert agree["lungs"]["left"]["cuda_ml"] == 100.5
    assert gc.agreement_text(agree) == "R 0.9975 / L 0.9975, 1 voxels" and gc.agreement_text(None) == "-"
    run = {"wall_s": 3.0, "fallbacks": []}
    out = {"device": "cuda:0", "precision": "fp16", "runs": [run], "max_allocated": GiB, "max_reserved": GiB,
           "size_xyz": [10, 10, 4], "wall_s": 3.0, "agreement": {**agree, "cpu_precision": "fp32"}}
    check = gc.infer_check("chest", out, 8 * GiB, "8GiB")
    assert gc.check_status(check) == "pass"
    assert check["targets"][-1]["measured"] == "R 0.9975 / L 0.9975, 1 voxels of 400 differ (fp16 / fp32)"
    cuda[:, :, 4] = 2  # a whole column moved: right lung Dice 0.889
    out["agreement"] = {**gc.agreement(cuda, cpu, 0.5), "cpu_precision": "fp32"}
    assert gc.check_status(gc.infer_check("chest", out, 8 * GiB, "8GiB")) == "fail"
    row = next(s for s in gc.markdown_section({"meta": {}, "checks": [gc.infer_check("chest", out, 8 * GiB, "8GiB")]})
               .splitlines() if s.startswith("| chest |"))
    assert "| R 0.8889 / L 0.9091, 40 voxels | **FAIL** |" in row


NCCL_LOG = """\
generating cache ...
[rank1]: Traceback (most recent call last):
segpipe train: internal error: DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, invalid usage, NCCL version 2.21.5
ncclInvalidUsage: This usually reflects invalid usage of NCCL library.
Last error:
Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 1a000 (rerun with --debug for the traceback)
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
"""


def test_reason_from_log() -> None:
    reason = gc.reason_from_log(NCCL_LOG)
    assert reason.startswith("segpipe train: internal error: DistBackendError: NCCL error")
    assert reason.endswith("(Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 1a000)")
    assert "\n" not in reason
    trace = "Traceback (most recent call last):\n  File x\n[rank0]: RuntimeError: CUDA error: invalid device ordinal\n"
    assert gc.reason_from_log(trace) == "RuntimeError: CUDA error: invalid device ordinal"
    assert gc.reason_from_log("just a line\nlast line\n") == "last line"
    assert gc.reason_from_log("") == "no output"
    assert len(gc.reason_from_log("ValueError: " + "x" * 1000)) == 300


def _attempt(name: str, backend: str, ok: bool, reason: str = "", step_s: float | None = None) -> dict:
    return {"name": name, "backend": backend, "ok": ok, "reason": reason, "step_s": step_s}


def test_ddp_check_outcomes() -> None:
    nccl = _attempt("segpipe train --nproc 2 --device cuda", "nccl", True, step_s=0.05)
    assert gc.check_status(gc.ddp_check([nccl], 2)) == "pass"

    refused = [
        _attempt("segpipe train --nproc 2 --device cuda", "nccl", False, "exit code 1: NCCL error"),
        _attempt("both ranks on cuda:0, nccl", "nccl", False, "exit code 1: Duplicate GPU detected"),
        _attempt("both ranks on cuda:0, gloo", "gloo", True, step_s=0.08),
    ]
    one_gpu = gc.ddp_check(refused, 1)
    assert gc.check_status(one_gpu) == "pass" and one_gpu["step_s"] == 0.08
    assert "Duplicate GPU detected" in one_gpu["outcome"] and "completed with gloo" in one_gpu["outcome"]
    assert gc.check_status(gc.ddp_check(refused, 2)) == "fail"  # with two GPUs NCCL must work
    assert gc.check_status(gc.ddp_check([dict(a, ok=False) for a in refused], 1)) == "fail"


def test_step_time_from_metrics() -> None:
    text = "\n".join([
        '{"stage": "coarse", "epoch": 1, "step_time_s": 0.5}',
        '{"stage": "fine", "epoch": 1, "step_time_s": 0.9}',
        '{"stage": "fine", "epoch": 2, "step_time_s": 0.2}',
        "",
    ])
    assert gc.step_time_from_metrics(text) == 0.2
    assert gc.step_time_from_metrics(text, "coarse") == 0.5
    assert gc.step_time_from_metrics("") is None


@pytest.fixture
def result() -> dict:
    checks = [
        gc.train_check("4GiB", 4 * GiB, _train_out(2.2, 2.5, 2.29), _train_out(2.2, 2.3, 2.29), 0.10),
        gc.train_check("8GiB", 8 * GiB, {"plan": _train_out(1, 1)["plan"], "estimate": {"total_bytes": 4 * GiB},
                                         "error": "OutOfMemoryError: CUDA out of memory."}, None, 0.10),
        gc.infer_check("lidc-idri-0001", {"skipped": "not present (/x)"}, 8 * GiB, "8GiB"),
        gc.ddp_check([_attempt("segpipe train --nproc 2 --device cuda", "nccl", True, step_s=0.05)], 2),
    ]
    meta = {"date": "2026-12-01", "command": "python benchmarks/gpu_check.py --budgets 4 8", "steps": 3,
            "gpu": {"name": "NVIDIA Test GPU", "total_memory": 80 * GiB, "capability": "9.0", "count": 2,
                    "torch": "2.5.1+cu124", "cuda": "12.4", "cudnn": 90100, "nccl": "2.21.5"}}
    return {"meta": meta, "checks": checks}


def test_markdown_section(result: dict) -> None:
    md = gc.markdown_section(result)
    lines = md.splitlines()
    assert lines[0] == "## GPU check: NVIDIA Test GPU"
    assert "- **Versions:** torch 2.5.1+cu124, CUDA 12.4, cuDNN 90100, NCCL 2.21.5" in lines
    row = next(s for s in lines if s.startswith("| 4GiB |"))
    assert "136x184x200, batch 2 x 2, ckpt none" in row and "0.961" in row and row.endswith("**PASS** |")
    assert next(s for s in lines if s.startswith("| 8GiB |")).endswith("**FAIL** |")
    assert "| train 8GiB | OutOfMemoryError: CUDA out of memory. | **FAIL** |" in lines
    assert "| infer lidc-idri-0001 | not present (/x) | SKIPPED |" in lines
    assert "completed with nccl on 2 GPU(s)" in md
    table = [s for s in lines if s.startswith("|")]
    assert all(s.endswith("|") for s in table)


def test_format_report_and_exit_code(result: dict) -> None:
    text = gc.format_report(result)
    assert text.splitlines()[0].startswith("GPU: NVIDIA Test GPU (80.00 GiB, compute 9.0, 2 device(s))")
    assert "  FAIL    train 8GiB: OutOfMemoryError: CUDA out of memory." in text
    assert "  SKIP    infer lidc-idri-0001: not present (/x)" in text
    assert text.rstrip().endswith("some targets FAILED")
    assert gc.exit_code(result["checks"]) == 1
    passing = [c for c in result["checks"] if gc.check_status(c) != "fail"]
    assert gc.exit_code(passing) == 0


def test_markdown_cells_stay_on_one_line() -> None:
    attempts = [_attempt("segpipe train --nproc 2 --device cuda", "nccl", False, "exit code 1: a | b\nLast error:\nc")]
    md = gc.markdown_section({"meta": {"gpu": {"name": "GPU"}}, "checks": [gc.ddp_check(attempts, 2)]})
    row = next(s for s in md.splitlines() if s.startswith("| segpipe train --nproc 2"))
    assert "failed: exit code 1: a \\| b Last error: c" in row and row.count(" | ") == 3


def test_report_places_the_gpu_and_end_to_end_sections(result: dict) -> None:
    """benchmarks/report.py renders gpu_check.py's and e2e_bench.py's JSON as sections of docs/BENCHMARKS.md."""
    import report

    gpu = "\n".join(report.gpu_section(result))
    assert gpu.startswith("## GPU check: ") and gpu == gc.markdown_section(result).rstrip("\n") + "\n"
    assert report.gpu_section(None) == [] and report.e2e_section(None) == []
    noted = "\n".join(report.gpu_section(result, "Re-run later: same figures.\n"))
    assert noted == "Re-run later: same figures.\n\n" + gpu
    e2e = {"scan": {"scan": "scan.nii.gz", "runs": {"segpipe": [{}, {}], "monai": [{}, {}]},
                    "segpipe": {"wall_s": 5.86, "peak_rss_mib": 817.0}, "monai": {"wall_s": 20.43, "peak_rss_mib": 3161.0},
                    "time_ratio": 0.287, "rss_ratio": 0.258},
           "folder": {"scans": 4, "separate_per_scan_s": 7.38, "folder_per_scan_s": 5.05, "single_call_peak_rss_mib": 1100.0,
                      "folder_peak_rss_mib": 1251.0, "time_ratio": 0.684, "rss_ratio": 1.137}}
    lines = report.e2e_section(e2e)
    assert "| plain single-stage MONAI pipeline | 20.43 | 3,161 |" in lines
    assert "| ratio (targets <= 0.35x, <= 0.3x) | 0.29x | 0.26x |" in lines
    assert "| one call for the folder | 5.05 | 1,251 |" in lines and "| ratio (targets <= 0.6x, <= 1.5x) | 0.68x | 1.14x |" in lines


def test_recorded_gpu_run_is_the_section_in_benchmarks_md() -> None:
    """docs/gpu_check.json (the last run on a CUDA machine) and docs/BENCHMARKS.md agree: the
    section is what the script renders from that file, so neither is edited by hand."""
    docs = SCRIPT.parents[1] / "docs"
    result = json.loads((docs / "gpu_check.json").read_text())
    section = gc.markdown_section(result)
    assert section.startswith(f"## GPU check: {result['meta']['gpu']['name']}")
    assert section in (docs / "BENCHMARKS.md").read_text()
    note = docs / "gpu_check_note.md"  # what later GPU runs found: just before the section
    if note.is_file():
        assert note.read_text().strip() + "\n\n" + section in (docs / "BENCHMARKS.md").read_text()
    assert result["exit_code"] == gc.exit_code(result["checks"])


def test_merge_puts_a_run_made_in_parts_back_together(result: dict, tmp_path: Path) -> None:
    """A run split by --checks (a lease's command limit) is one result again: the checks in the
    order train, amp, infer, ddp, the earliest date, every command; a check in two parts is refused."""
    train, oom, infer, ddp = result["checks"]
    meta = result["meta"]
    parts = [{"meta": {**meta, "date": "2026-12-01T10:05", "command": "c infer"}, "checks": [infer]},
             {"meta": {**meta, "date": "2026-12-01T10:00", "command": "c ddp"}, "checks": [ddp]},
             {"meta": {**meta, "date": "2026-12-01T10:09", "command": "c train"}, "checks": [train, oom]}]
    merged = gc.merge_parts(parts)
    assert [c["name"] for c in merged["checks"]] == ["train 4GiB", "train 8GiB", "infer lidc-idri-0001", "ddp 2 processes"]
    assert merged["meta"]["date"] == "2026-12-01T10:00" and merged["meta"]["command"] == "c infer; c ddp; c train"
    assert merged["exit_code"] == 1  # the 8 GiB plan ran out of memory in its part
    with pytest.raises(ValueError, match="more than one part: infer lidc-idri-0001"):
        gc.merge_parts([parts[0], parts[0]])
    other = {"meta": {**meta, "gpu": {**meta["gpu"], "name": "Another GPU"}}, "checks": [ddp]}
    with pytest.raises(ValueError, match="different GPUs"):
        gc.merge_parts([parts[0], other])
    files = []
    for i, part in enumerate(parts):
        files.append(tmp_path / f"part{i}.json")
        files[-1].write_text(json.dumps(part))
    out = tmp_path / "whole.json"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--merge", *map(str, files), "--json", str(out)], check=False,
                          capture_output=True, text=True)
    assert proc.returncode == 1 and json.loads(out.read_text()) == json.loads(json.dumps(merged))
    proc = subprocess.run([sys.executable, str(SCRIPT), "--merge", str(files[0]), str(files[0])],
                          check=False, capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stderr.strip().splitlines()[-1].startswith("gpu_check.py: error: --merge: checks in")
