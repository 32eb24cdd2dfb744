"""GPU check: do segpipe's GPU memory claims hold on a real CUDA card?

Runs only where CUDA is available; elsewhere it says so in one line on stderr and exits with
code 2. Every measurement runs in a child process of its own, so each starts with an empty
caching allocator and one that fails (an exception, CUDA out of memory, a crash) is recorded
with its one-line reason while the others still run.

* ``train``: for each budget (``--budgets``, default 4, 8 and 16 GiB) the planner behind
  ``segpipe plan --gpu-memory`` and ``segpipe train --gpu-memory``
  (:func:`segpipe.train.apply_memory_plan` on the default :class:`segpipe.config.TrainConfig`)
  picks the fine stage's patch, batch, checkpointing and accumulation. Then ``--steps`` real
  optimizer steps run with that plan on random patches, each the trainer's step built from the
  trainer's own parts: the network, fp16 autocast and ``torch.amp.GradScaler``
  (:mod:`segpipe.device`), MONAI's Dice + CE loss with the trainer's settings, the trainer's
  optimizer (:func:`segpipe.train.trainer._make_optimizer`), accumulation and gradient
  clipping. The first step is warm-up; ``torch.cuda.max_memory_allocated`` and
  ``max_memory_reserved`` are read per step after ``reset_peak_memory_stats``. The same steps are
  then repeated in a child with ``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`` (read when
  CUDA starts, so it has to be set before that), to see whether reserved comes closer to
  allocated.
* ``amp``: fp16 steps through the project's AMP path (:func:`segpipe.device.autocast`,
  :func:`segpipe.device.make_grad_scaler`) at the default fine patch: the logits are fp16,
  the scaler is on, its scale stays finite, the optimizer steps change the weights.
* ``infer``: the bundled model (``LungSegmenter.default(device="cuda")``) on the chest and
  neck-to-pelvis scans of ``benchmarks/infer_bench.py`` (generated once into its cache) and on
  ``../shared/data/lidc-idri-0001/dicom`` when present: wall time from the file (the first run
  is warm-up when ``--infer-repeats`` > 1) and peak allocated / reserved. Then the same scan
  once on the CPU (``--no-agree`` leaves it out): the voxels whose label differs and each lung's
  Dice between the two masks (each device in its default precision, the report's ``precision``).
  ``--real-scan`` takes several scans (file or DICOM folder).
* ``ddp``: ``segpipe train --nproc 2 --device cuda`` (torchrun, NCCL) for a few steps on a
  tiny ``segpipe synth`` dataset. With one GPU segpipe refuses that in one line (one GPU per
  process); both ranks are then put on ``cuda:0`` under torchrun directly, NCCL first (which
  refuses two ranks on one device: recorded), then gloo (on the GPU, then on the CPU) to show
  that DDP itself works. Reported: whether it completed, the fine stage's seconds per step.

Targets: per budget, the peak allocated fits the budget and is within 10 % (``--tolerance``) of
the ``segpipe memory`` estimate for the plan (its total, workspace margin included), and the
expandable-segments repeat completes; fp16: scale finite, steps taken, weights finite fp32;
inference: no CUDA out-of-memory fallback, peak allocated within ``--infer-budget`` (8 GiB,
the design's card) and the CUDA mask within Dice 0.99 of the CPU mask per lung; DDP: the two-process training completes. Reserved memory, the
expandable-segments comparison and the planner's CUDA-context allowance are reported, not
targets.

Run: ``python benchmarks/gpu_check.py [--budgets 4 8 16] [--steps 3] [--checks train amp infer ddp]
[--json OUT] [--markdown]``. ``--markdown`` prints a section for ``docs/BENCHMARKS.md``. Exit
code 0 when every target passed, 1 when one failed, 2 without CUDA. A run split into parts (a
lease's command limit: ``--checks infer``, then ``--checks train`` ...) is put back together
without CUDA: ``--merge PART.json ... --json OUT [--markdown]`` (the parts' checks in the order
train, amp, infer, ddp; the first part's machine, every part's command).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
REAL_SCAN = REPO.parent / "shared" / "data" / "lidc-idri-0001" / "dicom"
CHECKS = ("train", "amp", "infer", "ddp")
EXPANDABLE = "expandable_segments:True"
ALLOC_VARS = ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")
CONTEXT_ALLOWANCE = 512 * 2**20  # what plan_training keeps for the CUDA context (its ``reserved``)
AGREE_DICE = 0.99  # per lung, the CUDA run's mask against the same scan's mask on the CPU


def _load_report() -> Any:
    """``benchmarks/report.py`` as a module (stdlib only at import): its markdown helpers and,
    as ``.ib``, ``benchmarks/infer_bench.py`` (scan presets and cache, machine info)."""
    spec = importlib.util.spec_from_file_location("segpipe_bench_report", HERE / "report.py")
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules[spec.name] = module  # type: ignore[union-attr]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


report = _load_report()
ib = report.ib


# ----------------------------------------------------------------------------- pure helpers
def budget_label(text: str) -> str:
    """``"8"`` -> ``"8GiB"`` (a bare number is GiB); anything else is kept for ``parse_size``."""
    text = text.strip()
    return f"{text}GiB" if re.fullmatch(r"\d+(\.\d+)?", text) else text


def one_line(text: str, limit: int = 300) -> str:
    """The first non-empty line of ``text``, shortened to ``limit`` characters."""
    line = next((s.strip() for s in str(text).splitlines() if s.strip()), "")
    return line if len(line) <= limit else line[: limit - 3] + "..."


_KNOWN = re.compile(r"Duplicate GPU detected[^\n(]*|invalid device ordinal|CUDA out of memory[^\n.]*")


def reason_from_log(text: str) -> str:
    """One line saying why a child failed, from its output: segpipe's own one-line error, else
    the last ``SomethingError: ...`` line, else the last line; NCCL's and CUDA's telling detail
    (``Duplicate GPU detected ...``, ``invalid device ordinal``, out of memory) is appended."""
    lines = [s.strip() for s in text.splitlines() if s.strip()]
    if not lines:
        return "no output"
    ours = [m.group(0) for s in lines if (m := re.search(r"segpipe [\w-]+: (?:internal )?error: .*", s))]
    errors = [m.group(1) for s in lines if (m := re.match(r"(?:\[[^\]]*\]:\s*)?([\w.]*(?:Error|Exception): .*)", s))]
    reason = one_line(ours[0] if ours else errors[-1] if errors else lines[-1])
    reason = re.sub(r" \(rerun with --debug for the traceback\)$", "", reason)
    detail = _KNOWN.search(text)
    if detail and detail.group(0).strip() not in reason:
        reason += f" ({one_line(detail.group(0), 160)})"
    return reason


def _target(name: str, ok: bool, measured: str) -> dict[str, Any]:
    return {"target": name, "measured": measured, "status": "PASS" if ok else "FAIL"}


def _size(n: float | None) -> str:
    return report._mib(n)


def training_targets(
    label: str, budget_bytes: int, allocated: int, estimate: int, tolerance: float
) -> list[dict[str, Any]]:
    """The two targets of a training step: peak allocated within the budget, and within
    ``tolerance`` (a fraction) of the estimate, either way."""
    ratio = allocated / estimate
    return [
        _target(f"train {label}: peak allocated fits the budget", allocated <= budget_bytes,
                f"{_size(allocated)} of {_size(budget_bytes)}"),
        _target(f"train {label}: peak allocated within {tolerance:.0%} of the estimate",
                abs(ratio - 1.0) <= tolerance + 1e-9, f"{ratio:.3f} x {_size(estimate)}"),
    ]


def train_check(label: str, budget_bytes: int, default: dict[str, Any], expandable: dict[str, Any] | None,
                tolerance: float) -> dict[str, Any]:
    """A training check from its two children's results (``expandable``: None when not run)."""
    check: dict[str, Any] = {"name": f"train {label}", "kind": "train", "budget": label, "budget_bytes": budget_bytes,
                             "default": default, "expandable": expandable, "targets": []}
    if default.get("skipped"):
        check["skipped"] = default["skipped"]
        return check
    if default.get("error"):
        check["error"] = default["error"]
        return check
    allocated, reserved = default["max_allocated"], default["max_reserved"]
    check["targets"] = training_targets(label, budget_bytes, allocated, default["estimate"]["total_bytes"], tolerance)
    check["allocated_over_estimate"] = allocated / default["estimate"]["total_bytes"]
    check["reserved_gap"] = reserved - allocated
    check["fits_card_with_context"] = reserved + CONTEXT_ALLOWANCE <= budget_bytes
    if expandable is not None:
        ok = not expandable.get("error") and not expandable.get("skipped")
        measured = (f"reserved {_size(expandable['max_reserved'])}, allocated {_size(expandable['max_allocated'])}"
                    if ok else expandable.get("error") or expandable.get("skipped", "not run"))
        check["targets"].append(_target(f"train {label}: repeat with {EXPANDABLE} completes", ok, measured))
        if ok:
            check["expandable_gap"] = expandable["max_reserved"] - expandable["max_allocated"]
            check["expandable_narrows_gap"] = check["expandable_gap"] < check["reserved_gap"]
    return check


def amp_check(out: dict[str, Any]) -> dict[str, Any]:
    """The fp16 AMP check from its child's result."""
    check: dict[str, Any] = {"name": "amp fp16", "kind": "amp", "data": out, "targets": []}
    if out.get("error"):
        check["error"] = out["error"]
        return check
    scales = out["scales"]
    finite = all(math.isfinite(s) and s > 0 for s in scales)
    check["targets"] = [
        _target("amp: autocast runs fp16 with an enabled torch.amp.GradScaler",
                out["logits_dtype"] == "torch.float16" and out["scaler_enabled"],
                f"logits {out['logits_dtype']}, scaler {'on' if out['scaler_enabled'] else 'off'}"),
        _target("amp: loss scale finite after every step", finite, ", ".join(f"{s:g}" for s in scales)),
        _target("amp: optimizer steps changed the weights", out["steps_applied"] >= 1,
                f"{out['steps_applied']} of {len(scales)} steps applied"),
        _target("amp: weights finite and fp32 after the steps", out["weights_finite"] and out["weights_dtype"] == "torch.float32",
                f"{out['weights_dtype']}, {'finite' if out['weights_finite'] else 'NOT finite'}"),
    ]
    return check


def infer_check(name: str, out: dict[str, Any], budget_bytes: int, budget_label_text: str) -> dict[str, Any]:
    """An inference check from its child's result."""
    check: dict[str, Any] = {"name": f"infer {name}", "kind": "infer", "scan": name, "data": out, "targets": []}
    if out.get("skipped"):
        check["skipped"] = out["skipped"]
        return check
    if out.get("error"):
        check["error"] = out["error"]
        return check
    fallbacks = [f for r in out["runs"] for f in r["fallbacks"]]
    check["targets"] = [
        _target(f"infer {name}: on CUDA without out-of-memory fallbacks", not fallbacks and out["device"].startswith("cuda"),
                f"device {out['device']}, {len(fallbacks)} fallback(s)" + (f": {fallbacks[0]}" if fallbacks else "")),
        _target(f"infer {name}: peak allocated within {budget_label_text}", out["max_allocated"] <= budget_bytes,
                f"{_size(out['max_allocated'])}"),
    ]
    agree = out.get("agreement")
    if agree:
        worst = min(v["dice"] for v in agree["lungs"].values())
        check["targets"].append(_target(
            f"infer {name}: CUDA mask within Dice {AGREE_DICE} of the CPU mask per lung", worst >= AGREE_DICE,
            f"{agreement_text(agree)} of {agree['voxels']} differ ({out['precision']} / {agree['cpu_precision']})"))
    return check


def step_time_from_metrics(text: str, stage: str = "fine") -> float | None:
    """Seconds per step of ``stage``'s last epoch in a run's ``metrics.jsonl`` text."""
    rows = [json.loads(s) for s in text.splitlines() if s.strip()]
    rows = [r for r in rows if r.get("stage") == stage and r.get("step_time_s") is not None]
    return float(rows[-1]["step_time_s"]) if rows else None


def ddp_check(attempts: list[dict[str, Any]], gpu_count: int) -> dict[str, Any]:
    """The DDP check from its attempts (``name``, ``backend``, ``ok``, ``reason``, ``step_s``), in
    the order tried: the first is ``segpipe train --nproc 2`` with NCCL. It passes when that
    completes, or, on a machine with one GPU (where NCCL refuses two ranks on one device),
    when a gloo fallback does."""
    check: dict[str, Any] = {"name": "ddp 2 processes", "kind": "ddp", "gpu_count": gpu_count, "attempts": attempts}
    if not attempts:
        check["error"] = "no attempt was run"
        check["targets"] = []
        return check
    first, done = attempts[0], next((a for a in attempts if a["ok"]), None)
    if first["ok"]:
        outcome = f"completed with {first['backend']} on {gpu_count} GPU(s)"
        ok = True
    elif gpu_count < 2 and done is not None:
        failed = "; ".join(f"{a['name']}: {a['reason']}" for a in attempts[: attempts.index(done)])
        outcome = f"one GPU: {failed}; DDP completed with {done['backend']} ({done['name']})"
        ok = True
    else:
        outcome = f"{first['name']} failed: {first['reason']}" + ("" if done is None else f"; {done['name']} completed")
        ok = False
    check["outcome"] = outcome
    check["step_s"] = done["step_s"] if done else None
    check["targets"] = [_target("ddp: 2-process training completes", ok, outcome)]
    return check


def check_status(check: dict[str, Any]) -> str:
    """``"skipped"``, ``"fail"`` (an error or a failed target) or ``"pass"``."""
    if check.get("skipped"):
        return "skipped"
    if check.get("error") or any(t["status"] != "PASS" for t in check.get("targets", [])):
        return "fail"
    return "pass"


def exit_code(checks: list[dict[str, Any]]) -> int:
    return 1 if any(check_status(c) == "fail" for c in checks) else 0


def _plan_text(d: dict[str, Any]) -> str:
    p = d["plan"]
    return (f"{'x'.join(map(str, p['patch_size']))}, batch {p['batch_size']} x {p['accumulation_steps']}, "
            f"ckpt {p['checkpointing']}")


def _gpu_line(meta: dict[str, Any]) -> str:
    g = meta.get("gpu") or {}
    if g.get("error"):
        return f"GPU: unknown ({g['error']})"
    return (f"GPU: {g.get('name')} ({_size(g.get('total_memory'))}, compute {g.get('capability')}, "
            f"{g.get('count')} device(s)); torch {g.get('torch')}, CUDA {g.get('cuda')}, cuDNN {g.get('cudnn')}, "
            f"NCCL {g.get('nccl')}")


def format_report(result: dict[str, Any]) -> str:
    """The plain-text tables printed at the end."""
    checks, lines = result["checks"], [_gpu_line(result["meta"]), ""]
    trains = [c for c in checks if c["kind"] == "train"]
    if trains:
        lines.append(f"{'budget':<8} {'plan (patch x,y,z, batch x accum)':<42} {'estimate':>10} {'allocated':>10} "
                     f"{'alloc/est':>9} {'reserved':>10} {'expandable':>10} {'step s':>7}")
        for c in trains:
            d, e = c["default"], c.get("expandable") or {}
            if d.get("plan"):
                ok = not (d.get("error") or d.get("skipped"))
                lines.append(
                    f"{c['budget']:<8} {_plan_text(d):<42} {_size(d['estimate']['total_bytes']):>10} "
                    f"{_size(d['max_allocated'] if ok else None):>10} "
                    f"{report._num(c.get('allocated_over_estimate'), '.3f'):>9} {_size(d['max_reserved'] if ok else None):>10} "
                    f"{_size(e.get('max_reserved')):>10} {report._num(d.get('step_s'), '.2f'):>7}")
            else:
                lines.append(f"{c['budget']:<8} {c.get('error') or c.get('skipped')}")
        lines += ["", "expandable = max reserved with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True", ""]
    infers = [c for c in checks if c["kind"] == "infer" and not c.get("skipped") and not c.get("error")]
    if infers:
        lines.append(f"{'scan':<18} {'size (x y z)':<16} {'wall s':>8} {'first s':>8} {'allocated':>10} {'reserved':>10}  "
                     "CPU agreement (Dice per lung, voxels differing)")
        for c in infers:
            d = c["data"]
            lines.append(f"{c['scan']:<18} {'x'.join(map(str, d['size_xyz'])):<16} {d['wall_s']:>8.2f} "
                         f"{d['runs'][0]['wall_s']:>8.2f} {_size(d['max_allocated']):>10} {_size(d['max_reserved']):>10}  "
                         f"{agreement_text(d.get('agreement'))}")
        lines.append("")
    for c in checks:
        if c["kind"] == "ddp":
            for a in c["attempts"]:
                lines.append(f"ddp {a['name']:<36} {'completed' if a['ok'] else 'failed':<9} "
                             f"step {report._num(a.get('step_s'), '.3f')} s" + ("" if a["ok"] else f"  ({a['reason']})"))
            lines.append("")
    lines.append("targets:")
    for c in checks:
        status = check_status(c)
        if status == "skipped":
            lines.append(f"  SKIP    {c['name']}: {c['skipped']}")
        elif c.get("error"):
            lines.append(f"  FAIL    {c['name']}: {c['error']}")
        for t in c.get("targets", []):
            lines.append(f"  {t['status']:<7} {t['target']} ({t['measured']})")
    lines.append(f"\n{'all targets passed' if exit_code(checks) == 0 else 'some targets FAILED'}")
    return "\n".join(lines)


def _md_table(header: list[str], rows: list[list[Any]], align: str | None = None) -> list[str]:
    """``report._table`` with each cell on one line and its ``|`` escaped (reasons come from logs)."""
    return report._table(header, [[" ".join(str(v).split()).replace("|", "\\|") for v in r] for r in rows], align)


def markdown_section(result: dict[str, Any]) -> str:
    """A section for ``docs/BENCHMARKS.md``, headed by the GPU's name."""
    meta, checks = result["meta"], result["checks"]
    g = meta.get("gpu") or {}
    lines = [
        f"## GPU check: {g.get('name', 'unknown GPU')}",
        "",
        f"_From `{meta.get('command', 'python benchmarks/gpu_check.py')}` on {meta.get('date', '?')}"
        + (f" (commit `{meta['git_commit']}`)" if meta.get("git_commit") else "") + "._",
        "",
        f"- **GPU:** {g.get('name')}, {_size(g.get('total_memory'))}, compute capability {g.get('capability')}, "
        f"{g.get('count')} device(s)",
        f"- **Versions:** torch {g.get('torch')}, CUDA {g.get('cuda')}, cuDNN {g.get('cudnn')}, NCCL {g.get('nccl')}",
        "",
    ]
    trains = [c for c in checks if c["kind"] == "train"]
    if trains:
        lines += [
            "### Training step against the planner and the estimate",
            "",
            "Fine stage of the default training config, settings from `segpipe plan --gpu-memory BUDGET`;",
            f"peaks over optimizer steps 2 to {meta.get('steps', '?')} (step 1 is warm-up). *Estimate*: `segpipe memory`'s",
            "total for that plan; *reserved (expandable)*: with `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`.",
            "",
        ]
        rows = []
        for c in trains:
            d, e = c["default"], c.get("expandable") or {}
            ok = check_status(c) != "skipped" and not c.get("error")
            rows.append([
                c["budget"], _plan_text(d) if d.get("plan") else "-",
                _size(d["estimate"]["total_bytes"]) if d.get("estimate") else "-",
                _size(d["max_allocated"]) if ok else "-", report._num(c.get("allocated_over_estimate"), ".3f"),
                _size(d["max_reserved"]) if ok else "-", _size(e.get("max_reserved")),
                report._num(d.get("step_s"), ".2f"), f"**{check_status(c).upper()}**",
            ])
        lines += _md_table(["budget", "plan", "estimate", "max allocated", "allocated / estimate", "max reserved",
                                "reserved (expandable)", "step s", "status"], rows, "llrrrrrrl")
        lines.append("")
    infers = [c for c in checks if c["kind"] == "infer"]
    if infers:
        lines += ["### Inference with the bundled model", "",
                  "Wall time from the file (median after a warm-up run), peak CUDA memory of `predict_with_report`;",
                  "*CPU agreement*: the same scan segmented on the CPU (its default precision), each lung's Dice between the two masks",
                  "and the voxels whose label differs.", ""]
        rows = []
        for c in infers:
            d = c.get("data") or {}
            ok = check_status(c) != "skipped" and not c.get("error")
            rows.append([c["scan"], "x".join(map(str, d["size_xyz"])) if ok else "-",
                         report._num(d.get("wall_s") if ok else None, ".2f"), _size(d.get("max_allocated") if ok else None),
                         _size(d.get("max_reserved") if ok else None), agreement_text(d.get("agreement") if ok else None),
                         f"**{check_status(c).upper()}**"])
        lines += _md_table(["scan", "size (x y z)", "wall time s", "peak allocated", "peak reserved", "CPU agreement",
                            "status"], rows, "llrrrll")
        lines.append("")
    for c in checks:
        if c["kind"] == "ddp":
            lines += ["### DDP, 2 processes", "", c.get("outcome") or c.get("error", "-"), ""]
            rows = [[a["name"], a["backend"], "completed" if a["ok"] else f"failed: {a['reason']}",
                     report._num(a.get("step_s"), ".3f")] for a in c["attempts"]]
            lines += _md_table(["attempt", "backend", "outcome", "fine s/step"], rows, "lllr")
            lines.append("")
    rows = []
    for c in checks:
        if check_status(c) == "skipped":
            rows.append([c["name"], c["skipped"], "SKIPPED"])
        elif c.get("error"):
            rows.append([c["name"], c["error"], "**FAIL**"])
        rows += [[t["target"], t["measured"], f"**{t['status']}**"] for t in c.get("targets", [])]
    lines += ["### Targets", "", *_md_table(["target", "measured", "status"], rows), ""]
    return "\n".join(lines)


# ----------------------------------------------------------------------------- workers (children)
def _segments() -> dict[str, Any]:
    """Segment count of the caching allocator and, where torch reports it, whether expandable
    segments are on."""
    import torch

    try:
        snap = torch.cuda.memory._snapshot()
    except Exception as err:  # a private API: its absence must not fail the check
        return {"error": one_line(str(err))}
    settings = snap.get("allocator_settings") or {}
    return {"segments": len(snap.get("segments", [])), "expandable_segments": settings.get("expandable_segments")}


def _train_worker(p: dict[str, Any], out: dict[str, Any]) -> None:
    """The plan for ``p["budget"]`` and ``p["steps"]`` trainer steps with it (see the module doc)."""
    import torch
    from monai.losses import DiceCELoss

    from segpipe.config import TrainConfig
    from segpipe.device import autocast, fast_layout, make_grad_scaler, use_amp
    from segpipe.memory import estimate_network
    from segpipe.model import build_network
    from segpipe.train import apply_memory_plan
    from segpipe.train.trainer import _make_optimizer, class_targets

    cfg, plan = apply_memory_plan(TrainConfig(), p["budget"])
    stage = cfg.fine
    est = estimate_network(stage.network, plan.patch_size, plan.batch_size, amp=stage.amp, optimizer=cfg.optim.optimizer)
    out.update(plan=plan.to_dict(), estimate=est.to_dict(), alloc_conf=os.environ.get("PYTORCH_CUDA_ALLOC_CONF"))
    device = torch.device("cuda")
    total = torch.cuda.get_device_properties(device).total_memory
    if est.total_bytes > total:
        out["skipped"] = f"the plan's estimate {_size(est.total_bytes)} exceeds this GPU's {_size(total)}"
        return
    torch.manual_seed(cfg.seed)
    model = fast_layout(build_network(stage.network).to(device), device).train()
    optimizer = _make_optimizer(model.parameters(), cfg, stage.lr)
    amp = use_amp(device, stage.amp)
    scaler = make_grad_scaler(device, amp)
    # the loss exactly as train_stage builds it
    loss_fn = DiceCELoss(to_onehot_y=True, softmax=True, squared_pred=False, smooth_nr=1e-5, smooth_dr=1e-5)
    x_size, y_size, z_size = stage.patch_xyz
    gen = torch.Generator().manual_seed(cfg.seed)
    steps = []
    for _ in range(p["steps"]):
        batches = [  # what the DataLoader hands over: pinned CPU tensors
            {"image": torch.randn((stage.batch_size, 1, z_size, y_size, x_size), generator=gen).pin_memory(),
             "label": torch.randint(0, stage.network.num_classes, (stage.batch_size, z_size, y_size, x_size),
                                    generator=gen).pin_memory()}
            for _ in range(stage.accumulation)
        ]
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        start = time.perf_counter()
        finite = True
        for batch in batches:  # as train_stage's loop: the previous batch's tensors live until reassigned
            x = batch["image"].to(device, non_blocking=True)
            y = class_targets(batch["label"].to(device, non_blocking=True)[:, None], stage.network.num_classes)
            with autocast(device, amp):
                logits = model(x)
            loss = loss_fn(logits.float(), y)
            finite = finite and bool(torch.isfinite(loss).item())
            if finite:
                scaler.scale(loss / stage.accumulation).backward()
        applied = False
        if finite:
            scaler.unscale_(optimizer)
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.optim.grad_clip)
            if bool(torch.isfinite(norm).item()):
                scaler.step(optimizer)
                applied = True
            scaler.update()
        optimizer.zero_grad(set_to_none=True)
        torch.cuda.synchronize(device)
        steps.append({
            "seconds": time.perf_counter() - start, "max_allocated": torch.cuda.max_memory_allocated(device),
            "max_reserved": torch.cuda.max_memory_reserved(device), "loss": float(loss.item()), "finite": finite,
            "applied": applied, "scale": scaler.get_scale() if scaler.is_enabled() else None,
        })
    measured = steps[1:]  # the first step is warm-up (cuDNN, optimizer state, allocator)
    stats = torch.cuda.memory_stats(device)
    out.update(
        steps=steps, max_allocated=max(s["max_allocated"] for s in measured), amp=amp,
        max_reserved=max(s["max_reserved"] for s in measured), step_s=statistics.median(s["seconds"] for s in measured),
        allocated_at_rest=torch.cuda.memory_allocated(device), alloc_retries=stats.get("num_alloc_retries"),
        allocator=_segments(),
    )


def _amp_worker(p: dict[str, Any], out: dict[str, Any]) -> None:
    """fp16 steps through segpipe's AMP path at the default fine patch and batch."""
    import torch
    from monai.losses import DiceCELoss

    from segpipe.config import TrainConfig
    from segpipe.device import autocast, fast_layout, make_grad_scaler, use_amp
    from segpipe.model import build_network
    from segpipe.train.trainer import _make_optimizer, class_targets

    cfg = TrainConfig()
    stage, device = cfg.fine, torch.device("cuda")
    torch.manual_seed(cfg.seed)
    model = fast_layout(build_network(stage.network).to(device), device).train()
    optimizer = _make_optimizer(model.parameters(), cfg, stage.lr)
    amp = use_amp(device, True)
    scaler = make_grad_scaler(device, amp)
    loss_fn = DiceCELoss(to_onehot_y=True, softmax=True, squared_pred=False, smooth_nr=1e-5, smooth_dr=1e-5)
    x_size, y_size, z_size = stage.patch_xyz
    scales, losses, applied, dtype = [], [], 0, None
    for _ in range(p["steps"]):
        x = torch.randn((stage.batch_size, 1, z_size, y_size, x_size), device=device)
        y = class_targets(torch.randint(0, stage.network.num_classes, (stage.batch_size, 1, z_size, y_size, x_size),
                                        device=device), stage.network.num_classes)
        before = torch.cat([w.detach().reshape(-1) for w in model.parameters()])  # a copy, in any memory layout
        with autocast(device, amp):
            logits = model(x)
        dtype = str(logits.dtype)
        loss = loss_fn(logits.float(), y)
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.optim.grad_clip)
        if bool(torch.isfinite(norm).item()):
            scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        after = torch.cat([w.detach().reshape(-1) for w in model.parameters()])
        applied += int(not torch.equal(before, after))
        scales.append(float(scaler.get_scale()))
        losses.append(float(loss.item()))
    weights = list(model.parameters())
    out.update(
        patch_xyz=list(stage.patch_xyz), batch=stage.batch_size, scaler_enabled=scaler.is_enabled(),
        scaler_type=f"{type(scaler).__module__}.{type(scaler).__qualname__}", logits_dtype=dtype,
        scales=scales, losses=losses, steps_applied=applied,
        weights_dtype=str(weights[0].dtype), weights_finite=all(bool(torch.isfinite(w).all()) for w in weights),
    )


def _infer_worker(p: dict[str, Any], out: dict[str, Any]) -> None:
    """The bundled model on ``p["scan"]``, ``p["repeats"]`` times: wall time and CUDA peaks;
    with ``p["agree"]`` the same scan once on the CPU, compared voxel for voxel."""
    import numpy as np
    import SimpleITK as sitk
    import torch

    from segpipe import LungSegmenter

    seg = LungSegmenter.default(device="cuda")
    device = seg.settings.device
    runs = []
    for _ in range(p["repeats"]):
        torch.cuda.empty_cache()  # each run's reserved peak from an empty cache
        torch.cuda.reset_peak_memory_stats(device)
        start = time.perf_counter()
        result = seg.predict_with_report(p["scan"])
        torch.cuda.synchronize(device)
        rep = result.report
        runs.append({
            "wall_s": time.perf_counter() - start, "max_allocated": torch.cuda.max_memory_allocated(device),
            "max_reserved": torch.cuda.max_memory_reserved(device), "timings_s": rep["timings_s"],
            "fallbacks": rep["fallbacks"], "volumes_ml": rep["volumes_ml"],
        })
    timed = runs[1:] or runs
    out.update(
        scan=str(p["scan"]), size_xyz=rep["size_xyz"], device=rep["device"], precision=rep["precision"],
        runs=runs, wall_s=statistics.median(r["wall_s"] for r in timed),
        max_allocated=max(r["max_allocated"] for r in runs), max_reserved=max(r["max_reserved"] for r in runs),
    )
    if p.get("agree"):
        cuda_label = sitk.GetArrayFromImage(result.label)
        del seg, result
        start = time.perf_counter()
        cpu = LungSegmenter.default(device="cpu").predict_with_report(p["scan"])
        out["agreement"] = agreement(cuda_label, sitk.GetArrayFromImage(cpu.label), np.prod(cpu.label.GetSpacing()) / 1000.0)
        out["agreement"].update(cpu_precision=cpu.report["precision"], cpu_wall_s=time.perf_counter() - start)


def agreement(cuda: Any, cpu: Any, voxel_ml: float) -> dict[str, Any]:
    """Two label arrays of one scan compared: voxels whose label differs, and per lung the Dice
    and both volumes (mL)."""
    from segpipe.metrics import LUNG_LABELS, dice

    lungs = {name: {"dice": dice(cuda == k, cpu == k), "cuda_ml": float((cuda == k).sum() * voxel_ml),
                    "cpu_ml": float((cpu == k).sum() * voxel_ml)} for name, k in LUNG_LABELS.items()}
    return {"voxels_differ": int((cuda != cpu).sum()), "voxels": int(cuda.size), "lungs": lungs}


def agreement_text(agree: dict[str, Any] | None) -> str:
    """``R 0.9999 / L 0.9998, 120 voxels`` or ``-``."""
    if not agree:
        return "-"
    return (f"R {agree['lungs']['right']['dice']:.4f} / L {agree['lungs']['left']['dice']:.4f}, "
            f"{agree['voxels_differ']} voxels")


def _info_worker(p: dict[str, Any], out: dict[str, Any]) -> None:
    """The GPU and the CUDA stack, read in a child so that this process holds no CUDA context."""
    import torch

    props = torch.cuda.get_device_properties(0)
    try:
        nccl = torch.cuda.nccl.version()
        nccl = ".".join(map(str, nccl)) if isinstance(nccl, tuple) else str(nccl)
    except Exception:  # torch built without NCCL
        nccl = None
    out.update(
        name=torch.cuda.get_device_name(0), total_memory=props.total_memory, capability=f"{props.major}.{props.minor}",
        count=torch.cuda.device_count(), torch=torch.__version__, cuda=torch.version.cuda,
        cudnn=torch.backends.cudnn.version(), nccl=nccl,
    )


WORKERS = {"train": _train_worker, "amp": _amp_worker, "infer": _infer_worker, "info": _info_worker}


def _ddp_shim(backend: str, argv: list[str]) -> int:
    """Under torchrun: ``segpipe <argv>`` with the process group opened on ``backend`` first and
    every rank on a GPU that exists (the trainer puts rank ``r`` on ``cuda:LOCAL_RANK``)."""
    import torch
    import torch.distributed as dist

    local = int(os.environ.get("LOCAL_RANK", "0"))
    os.environ["LOCAL_RANK"] = str(local % max(1, torch.cuda.device_count()))
    dist.init_process_group(backend=backend)  # segpipe's trainer joins an open group as it is
    from segpipe.cli import main as segpipe_main

    return segpipe_main(argv)


# ----------------------------------------------------------------------------- running children
def _child_env(alloc_conf: str | None = None) -> dict[str, str]:
    """This environment with the allocator's settings set to ``alloc_conf`` only (the
    defaults when None)."""
    env = {k: v for k, v in os.environ.items() if k not in ALLOC_VARS}
    if alloc_conf:
        env["PYTORCH_CUDA_ALLOC_CONF"] = alloc_conf
    return env


def _run(cmd: list[str], log: Path, timeout: float, env: dict[str, str] | None = None) -> int | None:
    """Run ``cmd`` in its own process group, output to ``log``; the exit code, None on timeout
    (then the whole group is stopped: SIGTERM, which torchrun passes to its workers, then SIGKILL)."""
    with open(log, "w") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, cwd=REPO, env=env or _child_env(),
                                start_new_session=True)
        try:
            return proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return _stop(proc)
        except BaseException:
            _stop(proc)
            raise


def _stop(proc: subprocess.Popen) -> None:
    for sig, wait in ((signal.SIGTERM, 30), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
            proc.wait(timeout=wait)
            return
        except ProcessLookupError:
            return
        except subprocess.TimeoutExpired:
            continue


def run_worker(kind: str, params: dict[str, Any], workdir: Path, tag: str, timeout: float,
               alloc_conf: str | None = None) -> dict[str, Any]:
    """Run worker ``kind`` in a child; its result, or ``{"error": one line}``."""
    result, log = workdir / f"{tag}.json", workdir / f"{tag}.log"
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", kind, "--params", json.dumps(params),
           "--result", str(result)]
    code = _run(cmd, log, timeout, _child_env(alloc_conf))
    if result.is_file():
        return json.loads(result.read_text())
    why = f"timed out after {timeout:g} s" if code is None else f"exit code {code}"
    return {"error": f"{why}: {reason_from_log(log.read_text(errors='replace'))}"}


def _worker_main(args: argparse.Namespace) -> int:
    out: dict[str, Any] = {}
    try:
        WORKERS[args.worker](json.loads(args.params), out)
    except Exception as err:  # recorded as the check's one-line reason; the traceback goes to the log
        traceback.print_exc()
        out["error"] = one_line(f"{type(err).__name__}: {err}")
    tmp = Path(args.result + ".tmp")
    tmp.write_text(json.dumps(out))
    tmp.replace(args.result)
    return 1 if out.get("error") else 0


# ----------------------------------------------------------------------------- checks
def run_ddp(args: argparse.Namespace, workdir: Path, gpu_count: int) -> dict[str, Any]:
    """``segpipe train`` with 2 processes on a tiny phantom dataset; gloo fallbacks on one GPU."""
    py, data = sys.executable, workdir / "ddp_data"
    code = _run([py, "-m", "segpipe", "synth", "--out", str(data), "--n", "3", "--seed", "0", "--size", "96,96,72",
                 "--coverage", "chest", "--pathology", "none", "--quiet"], workdir / "ddp_synth.log", args.timeout)
    if code != 0:
        return {"name": "ddp 2 processes", "kind": "ddp", "attempts": [], "targets": [],
                "error": "segpipe synth failed: " + reason_from_log((workdir / "ddp_synth.log").read_text(errors="replace"))}
    train = ["train", "--config", str(REPO / "configs" / "tiny_cpu.yaml"), "--data", str(data), "--quiet",
             "--set", "coarse.epochs=1", "--set", "coarse.steps_per_epoch=4", "--set", "fine.epochs=2",
             "--set", f"fine.steps_per_epoch={args.ddp_steps}", "--set", "data.val_fraction=0",
             "--set", "optim.warmup_steps=1"]
    torchrun = [py, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(Path(__file__).resolve())]
    plan = [("segpipe train --nproc 2 --device cuda", "nccl", [py, "-m", "segpipe", *train, "--device", "cuda", "--nproc", "2"])]
    if gpu_count < 2:
        plan += [
            ("both ranks on cuda:0, nccl", "nccl", [*torchrun, "--ddp-shim", "nccl", "--", *train, "--device", "cuda"]),
            ("both ranks on cuda:0, gloo", "gloo", [*torchrun, "--ddp-shim", "gloo", "--", *train, "--device", "cuda"]),
            ("segpipe train --nproc 2 --device cpu", "gloo (CPU)", [py, "-m", "segpipe", *train, "--device", "cpu", "--nproc", "2"]),
        ]
    attempts: list[dict[str, Any]] = []
    for i, (name, backend, cmd) in enumerate(plan):
        if any(a["ok"] for a in attempts):
            break  # DDP completed: no fallback needed
        out, log = workdir / f"ddp_run{i}", workdir / f"ddp_run{i}.log"
        print(f"  ddp: {name} ...", flush=True)
        start = time.perf_counter()
        code = _run([*cmd, "--out", str(out)], log, args.ddp_timeout)
        metrics = out / "metrics.jsonl"
        ok = code == 0 and (out / "model.pt").is_file() and metrics.is_file()
        reason = ""
        if not ok:
            why = f"timed out after {args.ddp_timeout:g} s" if code is None else f"exit code {code}"
            reason = f"{why}: {reason_from_log(log.read_text(errors='replace'))}"
        attempts.append({"name": name, "backend": backend, "ok": ok, "reason": reason, "wall_s": time.perf_counter() - start,
                         "step_s": step_time_from_metrics(metrics.read_text()) if ok else None})
    return ddp_check(attempts, gpu_count)


def _scans(args: argparse.Namespace, workdir: Path) -> list[tuple[str, Path | None, dict[str, Any]]]:
    """(name, path, result) per inference scan; without a path the result says why: an error
    (generation failed) or a skip (the real scan is not there)."""
    cache = (args.cache or ib.default_cache()).resolve()
    out: list[tuple[str, Path | None, dict[str, Any]]] = []
    for name in args.scans:
        try:
            out.append((name, ib.ensure_scan(ib.SCANS[name], cache, workdir)[0], {}))
        except Exception as err:  # generation failed: that scan's check fails, the rest run
            out.append((name, None, {"error": f"could not generate the scan: {reason_from_log(str(err))}"}))
    for real in [] if args.no_real else args.real_scan:
        name = real.parent.name if real.name in ("dicom", "ct.nii.gz") else real.name.split(".")[0]
        out.append((name, real, {}) if real.exists() else (name, None, {"skipped": f"not present ({real})"}))
    return out


def run_checks(args: argparse.Namespace, workdir: Path, gpu: dict[str, Any]) -> list[dict[str, Any]]:
    from segpipe.memory import parse_size

    checks: list[dict[str, Any]] = []
    t = args.timeout
    if "train" in args.checks:
        for label in args.budgets:
            print(f"train {label}: plan and {args.steps} steps (default allocator, then expandable segments) ...", flush=True)
            params = {"budget": label, "steps": args.steps}
            default = run_worker("train", params, workdir, f"train_{label}", t)
            expandable = None
            if not (default.get("error") or default.get("skipped")):
                expandable = run_worker("train", params, workdir, f"train_{label}_expandable", t, alloc_conf=EXPANDABLE)
            checks.append(train_check(label, parse_size(label), default, expandable, args.tolerance))
    if "amp" in args.checks:
        print("amp: fp16 steps with GradScaler ...", flush=True)
        checks.append(amp_check(run_worker("amp", {"steps": args.amp_steps}, workdir, "amp", t)))
    if "infer" in args.checks:
        for name, path, out in _scans(args, workdir):
            print(f"infer {name} ...", flush=True)
            if path is not None:
                out = run_worker("infer", {"scan": str(path), "repeats": args.infer_repeats, "agree": args.agree},
                                 workdir, f"infer_{name}", t)
            checks.append(infer_check(name, out, parse_size(args.infer_budget), args.infer_budget))
    if "ddp" in args.checks:
        print("ddp: 2-process training ...", flush=True)
        try:
            checks.append(run_ddp(args, workdir, int(gpu.get("count") or 1)))
        except Exception as err:  # the launcher itself failed
            checks.append({"name": "ddp 2 processes", "kind": "ddp", "attempts": [], "targets": [],
                           "error": one_line(f"{type(err).__name__}: {err}")})
    return checks


# ----------------------------------------------------------------------------- main
def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description="Check segpipe's GPU memory claims on a CUDA GPU (training plan, "
                                "estimate, fp16 AMP, inference, DDP).")
    p.add_argument("--budgets", nargs="+", default=["4", "8", "16"], metavar="SIZE",
                   help="GPU budgets to plan for: 8 (GiB), 8GiB, 8GB ... (default 4 8 16)")
    p.add_argument("--steps", type=int, default=3, help="optimizer steps per training measurement, the first is warm-up (default 3)")
    p.add_argument("--tolerance", type=float, default=0.10, help="allowed |allocated / estimate - 1| (default 0.10)")
    p.add_argument("--checks", nargs="+", choices=CHECKS, default=list(CHECKS), help="checks to run (default all)")
    p.add_argument("--amp-steps", type=int, default=5, help="fp16 steps in the AMP check (default 5)")
    p.add_argument("--scans", nargs="+", choices=list(ib.SCANS), default=["chest", "neck_pelvis"],
                   help="generated inference scans (default chest neck_pelvis)")
    p.add_argument("--real-scan", type=Path, nargs="+", default=[REAL_SCAN], help="real scans (file or DICOM folder) to segment "
                   "too, skipped when missing (default ../shared/data/lidc-idri-0001/dicom)")
    p.add_argument("--no-real", action="store_true", help="leave the real scans out")
    p.add_argument("--no-agree", dest="agree", action="store_false",
                   help="skip the CPU run of each inference scan (the CUDA mask compared with the CPU mask)")
    p.add_argument("--infer-repeats", type=int, default=2, help="runs per scan; the first is warm-up when > 1 (default 2)")
    p.add_argument("--infer-budget", default="8GiB", help="most CUDA memory inference may allocate (default 8GiB)")
    p.add_argument("--ddp-steps", type=int, default=5, help="fine-stage steps per epoch in the DDP run (default 5)")
    p.add_argument("--cache", type=Path, default=None, help="folder of generated scans (as infer_bench.py)")
    p.add_argument("--timeout", type=float, default=1800, help="seconds per child process (default 1800)")
    p.add_argument("--ddp-timeout", type=float, default=600, help="seconds per DDP attempt (default 600)")
    p.add_argument("--json", type=Path, default=None, help="write every figure here")
    p.add_argument("--markdown", action="store_true", help="also print a section for docs/BENCHMARKS.md")
    p.add_argument("--keep", action="store_true", help="keep the work folder (child logs, run folders)")
    p.add_argument("--merge", type=Path, nargs="+", metavar="PART",
                   help="put together the --json files of one run made in parts (runs nothing, needs no CUDA)")
    p.add_argument("--worker", choices=list(WORKERS), help=argparse.SUPPRESS)
    p.add_argument("--params", default="{}", help=argparse.SUPPRESS)
    p.add_argument("--result", help=argparse.SUPPRESS)
    return p


def _cuda_refusal() -> str | None:
    """None when CUDA is usable, else the one line saying why not."""
    import warnings

    try:
        import torch
    except ImportError as err:
        return f"gpu_check.py: needs torch with CUDA; torch is not importable ({err})"
    with warnings.catch_warnings():  # a CUDA build without a driver warns: the line below says it
        warnings.simplefilter("ignore")
        available = torch.cuda.is_available()
    if available:
        return None
    build = torch.version.cuda or "no"
    return f"gpu_check.py: needs a CUDA GPU; none is available here (torch {torch.__version__}, CUDA build: {build})"


def merge_parts(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """One result from the ``--json`` files of a run made in parts on one machine: their checks in
    the order of :data:`CHECKS` (a check that two parts ran is an error), the first part's
    machine, the earliest date and every part's command (joined by ``;``)."""
    if not parts:
        raise ValueError("no parts to merge")
    gpus = {json.dumps((p["meta"].get("gpu") or {}).get("name")) for p in parts}
    if len(gpus) > 1:
        raise ValueError(f"the parts ran on different GPUs: {', '.join(sorted(gpus))}")
    checks = [c for p in parts for c in p["checks"]]
    names = [c["name"] for c in checks]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(f"checks in more than one part: {', '.join(twice)}")
    checks.sort(key=lambda c: CHECKS.index(c["kind"]) if c["kind"] in CHECKS else len(CHECKS))
    commits = sorted({p["meta"].get("git_commit") for p in parts if p["meta"].get("git_commit")})
    meta = {**parts[0]["meta"], "command": "; ".join(p["meta"].get("command", "?") for p in parts)}
    dates = [p["meta"]["date"] for p in parts if p["meta"].get("date")]
    if dates:
        meta["date"] = min(dates)  # when the run began
    if len(commits) > 1:
        meta["git_commit"] = " / ".join(commits)
    return {"meta": meta, "checks": checks, "exit_code": exit_code(checks)}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--ddp-shim"]:  # a rank under torchrun (see run_ddp)
        return _ddp_shim(argv[1], argv[3:] if argv[2:3] == ["--"] else argv[2:])
    parser = _parser()
    args = parser.parse_args(argv)
    if args.worker:
        return _worker_main(args)
    if args.merge:
        try:
            result = merge_parts([json.loads(f.read_text()) for f in args.merge])
        except (OSError, ValueError, KeyError) as err:
            parser.error(f"--merge: {err}")
        return _finish(result, args)
    refusal = _cuda_refusal()
    if refusal:
        print(refusal, file=sys.stderr)
        return 2
    from segpipe.errors import ConfigError
    from segpipe.memory import parse_size

    args.budgets = [budget_label(b) for b in args.budgets]
    try:
        for size in [*args.budgets, args.infer_budget]:
            parse_size(size)
    except ConfigError as err:
        parser.error(str(err))
    if args.steps < 2 or args.amp_steps < 1 or args.infer_repeats < 1 or args.ddp_steps < 1:
        parser.error("--steps: expected at least 2 (one warm-up); --amp-steps, --infer-repeats, --ddp-steps: at least 1")
    command = "python benchmarks/gpu_check.py " + " ".join(argv)
    # every child (ours and infer_bench's scan generation) imports this checkout's segpipe
    os.environ["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])
    meta = {**ib.machine_info(), "command": command.strip(), "steps": args.steps, "tolerance": args.tolerance,
            "alloc_conf_ignored": {k: os.environ[k] for k in ALLOC_VARS if k in os.environ}}
    if meta["alloc_conf_ignored"]:
        print(f"note: {meta['alloc_conf_ignored']} is not passed on: the checks compare the allocator's defaults "
              f"with {EXPANDABLE}", flush=True)
    workdir = Path(tempfile.mkdtemp(prefix="segpipe_gpu_check_"))
    try:
        meta["gpu"] = run_worker("info", {}, workdir, "info", 300)
        print(_gpu_line(meta), flush=True)
        checks = run_checks(args, workdir, meta["gpu"])
    finally:
        if args.keep:
            print(f"work folder kept: {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    result = {"meta": meta, "checks": [{**c, "status": check_status(c)} for c in checks], "exit_code": exit_code(checks)}
    return _finish(result, args)


def _finish(result: dict[str, Any], args: argparse.Namespace) -> int:
    """Print the report (and the markdown section), write ``--json``; the exit code."""
    print("\n" + format_report(result))
    if args.markdown:
        print("\n" + markdown_section(result))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        tmp = args.json.with_name(args.json.name + ".tmp")
        tmp.write_text(json.dumps(result, indent=1))
        tmp.replace(args.json)
        print(f"\nwrote {args.json}")
    return result["exit_code"]


if __name__ == "__main__":
    sys.exit(main())
