"""Memory and speed of one training step: plain vs checkpointing vs AMP vs both.

For the default network (bottleneck UNet, depth 3, widths 16-128) at 96^3 and 128^3, batch 2,
on this machine's device (CPU unless CUDA is present):

* saved: bytes autograd keeps for backward, counted on a real step with saved-tensor hooks
  (each storage once); est: the estimator's figure for the same setting (fake tensors);
* peak: tensor-level peak of the whole step (allocation tracker), CUDA: max_memory_allocated;
* step: forward + Dice/CE loss + backward, median of ``--repeats`` runs, runs interleaved
  across the four settings so machine noise hits them alike; wall time and this process's CPU
  time (less sensitive to other processes on a shared machine).

Then the activation bytes of the plain-convolution variant (same widths) against the bottleneck
network. Targets: checkpointing cuts saved bytes >= 3x at <= 40% extra step time; AMP cuts them
>= 1.8x; bottleneck <= 0.5x plain-convolution.

Run: ``python benchmarks/memory_bench.py [--sizes 96 128] [--repeats 3] [--device auto] [--json OUT]``
(``--json`` also writes the figures machine-readably, for ``benchmarks/report.py``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from segpipe.config import NetworkConfig
from segpipe.device import autocast, resolve_device
from segpipe.memory import estimate_network, format_size, measure_step
from segpipe.memory.estimate import _dice_ce_loss  # the loss the estimator assumes
from segpipe.model import UNet3D

SETTINGS = [("baseline", "none", False), ("checkpointing", "all", False), ("amp", "none", True), ("both", "all", True)]


def _step(
    model: torch.nn.Module, x: torch.Tensor, target: torch.Tensor, amp: bool, device: torch.device
) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process) of one forward + loss + backward."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start, cpu_start = time.perf_counter(), time.process_time()
    with autocast(device, enabled=amp):
        loss = _dice_ce_loss(model(x), target)
    loss.backward()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - start, time.process_time() - cpu_start


def bench_size(size: int, batch: int, repeats: int, device: torch.device) -> list[dict]:
    torch.manual_seed(0)
    model = UNet3D().to(device)
    shape = (batch, 1, size, size, size)
    rows = []
    for name, ckpt, amp in SETTINGS:
        model.set_checkpointing(ckpt)
        measured = measure_step(model, shape, amp=amp, device=device, loss="dice_ce")
        est = estimate_network(NetworkConfig(), (size,) * 3, batch, amp=amp, checkpointing=ckpt)
        model.zero_grad(set_to_none=True)
        rows.append(dict(name=name, ckpt=ckpt, amp=amp, measured=measured, est=est, times=[], cpu=[]))
    x = torch.randn(shape, device=device)
    target = torch.randint(0, 3, (batch, size, size, size), device=device)
    for _ in range(repeats):
        for row in rows:
            model.set_checkpointing(row["ckpt"])
            wall, cpu = _step(model, x, target, row["amp"], device)
            row["times"].append(wall)
            row["cpu"].append(cpu)
            model.zero_grad(set_to_none=True)
    for row in rows:
        row["step"] = statistics.median(row["times"])
        row["step_cpu"] = statistics.median(row["cpu"])
    return rows


def plain_conv_ratio(size: int, batch: int, device: torch.device) -> tuple[int, int]:
    """Saved bytes (fp32, no checkpointing, forward only) of the bottleneck and plain-conv networks."""
    out = []
    for block in ("bottleneck", "plain"):
        torch.manual_seed(0)
        model = UNet3D(block=block).to(device)
        m = measure_step(model, (batch, 1, size, size, size), device=device, backward=False, track_live=False)
        out.append(m.saved_bytes)
        del model
    return out[0], out[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[96, 128])
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--skip-plain-conv", action="store_true", help="skip the plain-convolution comparison")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures to this JSON file")
    args = parser.parse_args()
    device = resolve_device(args.device)
    record: dict = {
        "device": str(device), "torch": torch.__version__, "threads": torch.get_num_threads(), "batch": args.batch,
        "repeats": args.repeats, "parameters": sum(p.numel() for p in UNet3D().parameters()), "rows": [], "plain_conv": [],
    }
    print(f"device {device}, torch {torch.__version__}, threads {torch.get_num_threads()}, batch {args.batch}")
    print(f"default network: {sum(p.numel() for p in UNet3D().parameters()):,} parameters\n")
    header = (
        f"{'patch':>6} {'setting':<14} {'saved':>11} {'est':>11} {'cut':>6} {'peak':>11} "
        f"{'step s':>7} {'time':>6} {'cpu s':>6} {'time':>6}"
    )
    print(header)
    print("-" * len(header))
    for size in args.sizes:
        rows = bench_size(size, args.batch, args.repeats, device)
        base = rows[0]
        for row in rows:
            m = row["measured"]
            peak = m.cuda_max_allocated if m.cuda_max_allocated is not None else m.peak_live_bytes
            cut = base["measured"].saved_bytes / m.saved_bytes
            slow = row["step"] / base["step"]
            slow_cpu = row["step_cpu"] / base["step_cpu"]
            print(
                f"{size:>5}^3 {row['name']:<14} {format_size(m.saved_bytes):>11} "
                f"{format_size(row['est'].activation_bytes):>11} {cut:>5.2f}x {format_size(peak):>11} "
                f"{row['step']:>7.2f} {slow:>5.2f}x {row['step_cpu']:>6.2f} {slow_cpu:>5.2f}x",
                flush=True,
            )
            record["rows"].append({
                "size": size, "setting": row["name"], "checkpointing": row["ckpt"], "amp": row["amp"],
                "saved_bytes": m.saved_bytes, "est_activation_bytes": row["est"].activation_bytes, "cut": cut,
                "peak_bytes": peak, "step_s": row["step"], "step_time_ratio": slow, "step_cpu_s": row["step_cpu"],
                "step_cpu_ratio": slow_cpu, "runs_s": row["times"],
            })
        by = {r["name"]: r for r in rows}
        cpu = {k: r["step_cpu"] for k, r in by.items()}
        print(
            f"       checkpointing overhead (wall / CPU time): fp32 {by['checkpointing']['step'] / by['baseline']['step'] - 1:+.0%}"
            f" / {cpu['checkpointing'] / cpu['baseline'] - 1:+.0%}, amp {by['both']['step'] / by['amp']['step'] - 1:+.0%}"
            f" / {cpu['both'] / cpu['amp'] - 1:+.0%}; AMP cuts saved bytes "
            f"{by['baseline']['measured'].saved_bytes / by['amp']['measured'].saved_bytes:.2f}x"
        )
        times = ", ".join(f"{r['name']}: " + "/".join(f"{t:.2f}" for t in r["times"]) for r in rows)
        print(f"       wall runs (s): {times}")
    print(
        "\ncut = saved bytes of baseline (fp32, no checkpointing) / this setting; step s / cpu s = median wall /"
        " process-CPU seconds of forward+loss+backward, time = that / baseline's; peak = tensor-level peak of the step"
    )
    if not args.skip_plain_conv:
        print("\nbottleneck vs plain-convolution variant (same widths, fp32, no checkpointing, saved bytes):")
        for size in args.sizes:
            bottleneck, plain = plain_conv_ratio(size, args.batch, device)
            print(
                f"{size:>5}^3 bottleneck {format_size(bottleneck):>11}  plain-conv {format_size(plain):>11}  "
                f"ratio {bottleneck / plain:.3f}",
                flush=True,
            )
            record["plain_conv"].append({"size": size, "bottleneck_saved_bytes": bottleneck, "plain_saved_bytes": plain,
                                         "ratio": bottleneck / plain})
    if args.json:
        tmp = args.json.with_name(args.json.name + ".tmp")
        tmp.write_text(json.dumps(record, indent=1))
        tmp.replace(args.json)


if __name__ == "__main__":
    main()
