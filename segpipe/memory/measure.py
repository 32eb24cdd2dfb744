"""Measure real steps (saved bytes, tensor peak, RSS, CUDA allocator) and record them per step."""

from __future__ import annotations

import contextlib
import dataclasses
import re
import statistics
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from segpipe.config import to_dict
from segpipe.device import autocast, resolve_device
from segpipe.errors import ConfigError, OutputError
from segpipe.memory.counting import SavedTensorMeter
from segpipe.memory.estimate import _LOSSES, MemoryEstimate, _run_step
from segpipe.memory.sizes import format_size

__all__ = ["MeasuredStep", "measure_step", "StepMemory", "MemoryRecorder", "should_measure", "memory_report"]


def _rss_bytes() -> tuple[int | None, int | None]:
    """(current, peak) resident set size of this process, from /proc (Linux) or getrusage."""
    try:
        text = Path("/proc/self/status").read_text()
        values = dict(re.findall(r"^(VmRSS|VmHWM):\s+(\d+) kB", text, flags=re.MULTILINE))
        return int(values["VmRSS"]) * 1024, int(values["VmHWM"]) * 1024
    except (OSError, KeyError):
        try:
            import resource
            import sys

            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            return None, peak if sys.platform == "darwin" else peak * 1024
        except (ImportError, OSError):  # pragma: no cover - exotic platforms
            return None, None


def _reset_peak_rss() -> bool:
    """Reset the kernel's peak-RSS counter (Linux ``clear_refs``); False where that is not possible."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


@dataclass(frozen=True)
class MeasuredStep:
    """What one real training step used (see :func:`measure_step`)."""

    device: str
    amp: bool
    input_shape: tuple[int, ...]
    saved_bytes: int
    saved_by_module: dict[str, int]
    peak_live_bytes: int | None
    step_seconds: float | None
    peak_rss_bytes: int | None
    rss_peak_is_per_step: bool
    backward: bool = True
    cuda_max_allocated: int | None = None
    cuda_max_reserved: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {f.name: to_dict(getattr(self, f.name)) for f in dataclasses.fields(self)}


def measure_step(
    model: nn.Module,
    input_shape: Sequence[int],
    *,
    amp: bool = False,
    device: str | torch.device = "cpu",
    loss: str = "sum",
    backward: bool = True,
    repeats: int = 0,
    track_live: bool = True,
    seed: int = 0,
) -> MeasuredStep:
    """Run real training steps of ``model`` and report what they used.

    The first step counts the bytes saved for backward (saved-tensor hooks, once per storage) and,
    with ``track_live``, the exact tensor peak; then ``repeats`` plain steps are timed (median).
    On CUDA the peak ``max_memory_allocated``/``reserved`` of the first step are reported too.
    Gradients accumulate into ``model``'s parameters; zero them afterwards if that matters.
    """
    shape = tuple(int(v) for v in input_shape)
    dev = resolve_device(device)
    if loss not in _LOSSES:
        raise ConfigError(f"loss: expected one of {', '.join(_LOSSES)}, got {loss!r}")
    model.train()
    is_cuda = dev.type == "cuda"
    per_step_rss = _reset_peak_rss()
    if is_cuda:
        torch.cuda.synchronize(dev)
        torch.cuda.reset_peak_memory_stats(dev)
    record = _run_step(model, shape, amp=amp, loss=loss, device=dev, backward=backward, track_live=track_live, seed=seed)
    peak_live = record.peak_live if track_live else None
    cuda_alloc = torch.cuda.max_memory_allocated(dev) if is_cuda else None
    cuda_reserved = torch.cuda.max_memory_reserved(dev) if is_cuda else None
    _, peak_rss = _rss_bytes()
    times = []
    for i in range(repeats):  # the measured step above has warmed up kernels and the allocator
        gen = torch.Generator().manual_seed(seed + i + 1)
        x = torch.randn(shape, generator=gen).to(dev)
        target = torch.randint(0, 2, (shape[0], *shape[2:]), generator=gen).to(dev) if loss == "dice_ce" else None
        if is_cuda:
            torch.cuda.synchronize(dev)
        start = time.perf_counter()
        with autocast(dev, enabled=amp):
            value = _LOSSES[loss](model(x), target)
        if backward:
            value.backward()
        if is_cuda:
            torch.cuda.synchronize(dev)
        times.append(time.perf_counter() - start)
        del x, target, value
    return MeasuredStep(
        device=str(dev),
        amp=amp,
        input_shape=shape,
        saved_bytes=record.saved_bytes,
        saved_by_module=record.saved_by_module,
        peak_live_bytes=peak_live,
        step_seconds=statistics.median(times) if times else None,
        peak_rss_bytes=peak_rss,
        rss_peak_is_per_step=per_step_rss,
        backward=backward,
        cuda_max_allocated=cuda_alloc,
        cuda_max_reserved=cuda_reserved,
    )


# ----------------------------------------------------------------------------- per-step recorder
@dataclass(frozen=True)
class StepMemory:
    """Memory of one recorded step: the most bytes held for backward at once (saved-tensor hooks;
    with gradient accumulation, the largest micro-batch), peak RSS, and on CUDA the allocator peaks."""

    step: int
    saved_bytes: int | None
    peak_rss_bytes: int | None
    cuda_max_allocated: int | None = None
    cuda_max_reserved: int | None = None
    seconds: float = 0.0


class MemoryRecorder:
    """Record peak memory per training step; what the trainer wraps each step in.

    Example:
        >>> recorder = MemoryRecorder("cpu")
        >>> net = nn.Linear(4, 1)
        >>> with recorder.step():
        ...     net(torch.ones(2, 4)).sum().backward()
        >>> recorder.last.saved_bytes
        32

    Args:
        device: the training device. On CUDA the allocator's peak allocated/reserved bytes are
            reset at the start of each step and read at its end.
        count_saved: also count bytes saved for backward (saved-tensor hooks; a little Python
            work per saved tensor).
    """

    def __init__(self, device: str | torch.device = "cpu", *, count_saved: bool = True) -> None:
        self.device = resolve_device(device)
        self.count_saved = count_saved
        self.history: list[StepMemory] = []
        self._recording_snapshot = False

    @property
    def last(self) -> StepMemory | None:
        return self.history[-1] if self.history else None

    def peak(self) -> StepMemory | None:
        """The step with the highest peak (CUDA allocated, else saved bytes, else RSS)."""
        if not self.history:
            return None

        def key(s: StepMemory) -> int:
            return s.cuda_max_allocated or s.saved_bytes or s.peak_rss_bytes or 0

        return max(self.history, key=key)

    @contextlib.contextmanager
    def step(self) -> Iterator[None]:
        """Context for one step; appends a :class:`StepMemory` to :attr:`history` when it ends."""
        is_cuda = self.device.type == "cuda"
        if is_cuda:
            torch.cuda.reset_peak_memory_stats(self.device)
        _reset_peak_rss()
        meter = SavedTensorMeter() if self.count_saved else None
        start = time.perf_counter()
        with meter if meter is not None else contextlib.nullcontext():
            yield
        if is_cuda:
            torch.cuda.synchronize(self.device)
        _, peak_rss = _rss_bytes()
        self.history.append(
            StepMemory(
                step=len(self.history),
                saved_bytes=meter.peak_bytes if meter is not None else None,
                peak_rss_bytes=peak_rss,
                cuda_max_allocated=torch.cuda.max_memory_allocated(self.device) if is_cuda else None,
                cuda_max_reserved=torch.cuda.max_memory_reserved(self.device) if is_cuda else None,
                seconds=time.perf_counter() - start,
            )
        )

    def start_snapshot(self, max_entries: int = 100_000) -> bool:
        """Start recording CUDA allocator history for :meth:`dump_snapshot`; False on the CPU."""
        if self.device.type != "cuda":
            return False
        torch.cuda.memory._record_memory_history(max_entries=max_entries)
        self._recording_snapshot = True
        return True

    def dump_snapshot(self, path: str | Path, *, stop: bool = True) -> bool:
        """Write the CUDA allocator snapshot (view it at pytorch.org/memory_viz); False if not recording."""
        if not self._recording_snapshot:
            return False
        path = Path(path)
        if not path.parent.is_dir():
            raise OutputError(f"memory snapshot: expected an existing folder, got {path.parent}")
        torch.cuda.memory._dump_snapshot(str(path))
        if stop:
            torch.cuda.memory._record_memory_history(enabled=None)
            self._recording_snapshot = False
        return True


# ----------------------------------------------------------------------------- report
AUTO_MEASURE_MACS = 10e9
"""``segpipe memory`` measures by default when the forward pass needs at most this many MACs
(a few seconds on a laptop CPU)."""


def should_measure(estimate: MemoryEstimate) -> bool:
    """Whether a real step for ``estimate`` is cheap enough to measure by default (CPU seconds)."""
    return estimate.forward_macs <= AUTO_MEASURE_MACS


def memory_report(estimate: MemoryEstimate, measured: MeasuredStep | None = None, *, title: str = "") -> str:
    """The table ``segpipe memory`` prints: parameters and activations per stage, bytes per category,
    the total, and the measured figures next to the estimate when ``measured`` is given."""
    lines = [title] if title else []
    shape = estimate.input_shape
    spatial = "x".join(str(v) for v in reversed(shape[2:])) if len(shape) == 5 else "x".join(map(str, shape[1:]))
    lines.append(
        f"step      batch {shape[0]}, patch {spatial}{' (x,y,z)' if len(shape) == 5 else ''}, "
        f"{'AMP (16-bit activations)' if estimate.amp else 'fp32'}, checkpointing {estimate.checkpointing}, "
        f"optimizer {estimate.optimizer}, {estimate.forward_macs / 1e9:.1f} GMAC forward"
    )
    lines.append("")
    lines.append(f"{'stage':<10}{'parameters':>12}{'activations':>14}" + (f"{'measured':>14}" if measured else ""))
    for name, count in estimate.parameters_per_stage.items():
        act = estimate.activations_per_stage.get(name, 0)
        row = f"{name:<10}{count:>12,}{format_size(act):>14}"
        if measured:
            row += f"{format_size(measured.saved_by_module.get(name, 0)):>14}"
        lines.append(row)
    outside = estimate.activations_per_stage.get("(outside)", 0)
    if outside:
        lines.append(f"{'(outside)':<10}{'':>12}{format_size(outside):>14}")
    lines.append(f"{'total':<10}{estimate.parameters:>12,}{format_size(estimate.activation_bytes):>14}"
                 + (f"{format_size(measured.saved_bytes):>14}" if measured else ""))
    lines.append("")
    lines.append(f"{'category':<34}{'estimate':>12}" + (f"{'measured':>14}" if measured else ""))
    for name, nbytes in estimate.categories():
        row = f"{name:<34}{format_size(nbytes):>12}"
        if measured and name.startswith("activations"):
            delta = measured.saved_bytes / estimate.activation_bytes - 1 if estimate.activation_bytes else 0.0
            row += f"{format_size(measured.saved_bytes):>14}  ({delta:+.1%})"
        lines.append(row)
    lines.append(f"{'total':<34}{format_size(estimate.total_bytes):>12}")
    if measured:
        if measured.peak_live_bytes is not None:
            lines.append(
                f"{'tensor peak of the step':<34}{format_size(estimate.dynamic_bytes):>12}"
                f"{format_size(measured.peak_live_bytes):>14}  (activations + input/output/loss + backward)"
            )
        if measured.cuda_max_allocated is not None:
            lines.append(f"{'CUDA max allocated / reserved':<34}{'':>12}{format_size(measured.cuda_max_allocated):>14}"
                         f" / {format_size(measured.cuda_max_reserved or 0)}")
        if measured.peak_rss_bytes is not None:
            scope = "this step" if measured.rss_peak_is_per_step else "whole process"
            lines.append(f"{'peak RSS (' + scope + ')':<34}{'':>12}{format_size(measured.peak_rss_bytes):>14}")
        how = "saved-tensor hooks" + (" and allocation tracking" if measured.peak_live_bytes is not None else "")
        what = "one real training step" if measured.backward else "one real forward pass (no backward)"
        lines.append(f"measured: {what} on {measured.device}, counted with {how}")
    return "\n".join(lines)


