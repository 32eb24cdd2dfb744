"""Inference speed of the fine network by memory layout and precision, side by side.

Runs the bundled model's fine network (or ``--model``'s) on windows of its patch size under
inference mode: contiguous (NCDHW) against channels-last (NDHWC, what
:func:`segpipe.device.for_inference` picks on the CPU), each in fp32 and under AMP (bf16 on
the CPU, fp16 on CUDA). Settings are interleaved across repeats so machine noise hits them
alike; figures are medians per window. It also checks that the layouts agree (largest
difference of the class probabilities, share of voxels with the same argmax). Then one training
step (forward, cross-entropy, backward, AdamW) of the same network from the same weights in
both layouts, under AMP, as ``segpipe train`` runs it (:func:`segpipe.device.fast_layout`).

Run: ``python benchmarks/layout_bench.py [--batch 2] [--repeats 5] [--device auto] [--model FILE]``
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch

from segpipe.device import autocast, resolve_device
from segpipe.infer import LungSegmenter
from segpipe.model import DEFAULT_MODEL, build_network


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, default=DEFAULT_MODEL, help="segpipe model file (default: the bundled one)")
    parser.add_argument("--batch", type=int, default=2, help="windows per forward pass (default 2, the model's)")
    parser.add_argument("--repeats", type=int, default=5, help="timed passes per setting (default 5)")
    parser.add_argument("--device", default="auto", help="auto, cpu or cuda (default auto)")
    args = parser.parse_args(argv)

    device = resolve_device(args.device)
    seg = LungSegmenter.from_file(args.model, device="cpu")
    cfg = seg.fine_cfg
    nets = {}
    for layout in ("contiguous", "channels_last"):
        net = build_network(cfg.network)
        net.load_state_dict(seg.weights["fine"])
        net = net.to(device).eval()
        if layout == "channels_last":
            net = net.to(memory_format=torch.channels_last_3d)
        nets[layout] = net
    shape = (args.batch, 1, *reversed(cfg.patch_xyz))
    x = torch.randn(shape, generator=torch.Generator().manual_seed(0)).to(device)
    settings = [(layout, amp) for layout in nets for amp in (False, True)]

    def run(layout: str, amp: bool) -> torch.Tensor:
        with torch.inference_mode(), autocast(device, amp):
            out = nets[layout](x).float().softmax(1)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return out

    outputs = {s: run(*s) for s in settings}  # warm-up, and the outputs to compare
    times: dict[tuple[str, bool], list[float]] = {s: [] for s in settings}
    for _ in range(args.repeats):
        for s in settings:
            t = time.perf_counter()
            run(*s)
            times[s].append((time.perf_counter() - t) / args.batch)

    print(f"fine network {cfg.network.base_width}-{cfg.network.max_width} wide, windows {cfg.patch_xyz} (x y z), "
          f"batch {args.batch}, device {device}, torch {torch.__version__}, {torch.get_num_threads()} threads")
    if device.type == "cpu":
        from segpipe.device import cpu_has_fast_bf16

        print(f"CPU capability {torch.backends.cpu.get_cpu_capability()}, native bf16: "
              f"{'yes (segpipe runs AMP as bf16)' if cpu_has_fast_bf16() else 'no (segpipe runs fp32 here)'}")
    base = statistics.median(times[("contiguous", False)])
    print(f"{'layout':<15}{'precision':<11}{'s / window':>12}{'vs contiguous fp32':>21}")
    for layout, amp in settings:
        med = statistics.median(times[(layout, amp)])
        precision = ("fp16" if device.type == "cuda" else "bf16") if amp else "fp32"
        print(f"{layout:<15}{precision:<11}{med:>12.4f}{base / med:>20.2f}x")
    for amp in (False, True):
        a, b = outputs[("contiguous", amp)], outputs[("channels_last", amp)]
        agree = (a.argmax(1) == b.argmax(1)).float().mean().item()
        print(f"{'amp' if amp else 'fp32'}: channels-last vs contiguous: max |dp| {(a - b).abs().max().item():.2e}, "
              f"argmax agrees on {100 * agree:.4f}% of voxels")
    # training step, both layouts from the same weights
    target = torch.randint(0, cfg.network.num_classes, (args.batch, *reversed(cfg.patch_xyz)),
                           generator=torch.Generator().manual_seed(1)).to(device)
    step_times: dict[str, list[float]] = {}
    trainers = {}
    for layout in nets:
        model = build_network(cfg.network).to(device)
        model.load_state_dict(seg.weights["fine"])
        if layout == "channels_last":
            model = model.to(memory_format=torch.channels_last_3d)
        trainers[layout] = (model.train(), torch.optim.AdamW(model.parameters(), lr=1e-4))

    def train_step(layout: str) -> None:
        model, opt = trainers[layout]
        with autocast(device, True):
            loss = torch.nn.functional.cross_entropy(model(x).float(), target)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    for layout in trainers:
        train_step(layout)  # warm-up
    for _ in range(args.repeats):
        for layout in trainers:
            t = time.perf_counter()
            train_step(layout)
            step_times.setdefault(layout, []).append(time.perf_counter() - t)
    base_step = statistics.median(step_times["contiguous"])
    for layout, ts in step_times.items():
        med = statistics.median(ts)
        print(f"training step (AMP, batch {args.batch}), {layout:<14}{med:>8.3f} s{base_step / med:>8.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
