"""Device choice and mixed precision, the same way for training and inference.

AMP means fp16 autocast + a :class:`torch.amp.GradScaler` on CUDA, and bf16 autocast (no scaler:
bf16 has fp32's exponent range) on the CPU. Callers never branch on the device themselves::

    device = resolve_device("auto")
    scaler = make_grad_scaler(device, enabled=amp)
    with autocast(device, enabled=amp):
        loss = loss_fn(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()

Whether AMP *helps* is a separate question, answered by :func:`use_amp`: on CUDA it always does;
on the CPU bf16 is fast only where oneDNN has native bf16 kernels (AVX-512 or AMX). On an
AVX2-only CPU (many AMD EPYC and desktop parts) bf16 autocast is emulated and about 25x
*slower* than fp32 (``benchmarks/layout_bench.py``: 5.1 s vs 0.16 s per 64^3 window), so
training and inference run fp32 there. ``SEGPIPE_CPU_BF16=1`` or ``0`` overrides the check.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
from typing import Any

import torch

from segpipe.errors import ConfigError

__all__ = [
    "resolve_device", "amp_dtype", "autocast", "make_grad_scaler", "fast_layout", "for_inference",
    "cpu_has_fast_bf16", "use_amp", "precision_name", "window_batch",
]

log = logging.getLogger("segpipe")
#: Environment variable that forces CPU bf16 autocast on (``1``) or off (``0``).
CPU_BF16_ENV = "SEGPIPE_CPU_BF16"


def resolve_device(device: str | torch.device = "auto") -> torch.device:
    """Turn ``"auto"``, ``"cpu"``, ``"cuda"`` or ``"cuda:N"`` into a :class:`torch.device`.

    ``auto`` picks CUDA when it is available, else the CPU. Asking for CUDA on a machine without
    it raises :class:`ConfigError` instead of failing later inside torch.
    """
    if isinstance(device, torch.device):
        text = str(device)
    elif isinstance(device, str):
        text = device.strip().lower()
    else:
        raise ConfigError(f"device: expected 'auto', 'cpu' or 'cuda', got {device!r}")
    if text == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if text == "cpu":
        return torch.device("cpu")
    if text == "cuda" or text.startswith("cuda:"):
        if not torch.cuda.is_available():
            raise ConfigError(f"device: expected a machine with CUDA for {text!r}, got none (use 'auto' or 'cpu')")
        try:
            resolved = torch.device(text)
        except RuntimeError as err:
            raise ConfigError(f"device: expected 'cuda' or 'cuda:N', got {text!r}") from err
        if resolved.index is not None and resolved.index >= torch.cuda.device_count():
            raise ConfigError(
                f"device: expected a CUDA index below {torch.cuda.device_count()}, got {resolved.index}"
            )
        return resolved
    raise ConfigError(f"device: expected 'auto', 'cpu', 'cuda' or 'cuda:N', got {device!r}")


def amp_dtype(device: str | torch.device) -> torch.dtype:
    """The autocast dtype for ``device``: float16 on CUDA, bfloat16 elsewhere (CPU)."""
    return torch.float16 if torch.device(device).type == "cuda" else torch.bfloat16


@functools.lru_cache(maxsize=1)
def _native_cpu_bf16() -> bool:
    try:  # oneDNN's own answer: bf16 kernels for this CPU (AVX-512 core / AVX512-BF16 / AMX)
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):  # pragma: no cover - older or unusual builds
        return any(k in torch.backends.cpu.get_cpu_capability() for k in ("AVX512", "AMX"))


def cpu_has_fast_bf16() -> bool:
    """Whether bf16 autocast speeds this CPU up (native oneDNN bf16 kernels), unless
    ``SEGPIPE_CPU_BF16`` says otherwise (``1``: yes, ``0``: no)."""
    forced = os.environ.get(CPU_BF16_ENV, "").strip()
    if forced in ("0", "1"):
        return forced == "1"
    if forced:
        raise ConfigError(f"{CPU_BF16_ENV}: expected 0 or 1, got {forced!r}")
    return _native_cpu_bf16()


_warned_fp32 = False


def use_amp(device: str | torch.device, requested: bool) -> bool:
    """Whether to run ``requested`` mixed precision on ``device``: always on CUDA; on the CPU
    only where bf16 is native (:func:`cpu_has_fast_bf16`), else fp32 (said once in the log).
    Memory models call :func:`autocast` directly instead: they model a device, not this CPU."""
    global _warned_fp32
    if not requested or torch.device(device).type == "cuda":
        return requested
    if cpu_has_fast_bf16():
        return True
    if not _warned_fp32:
        log.info("this CPU has no native bf16 (%s): running fp32, which is faster here "
                 "(%s=1 forces bf16)", torch.backends.cpu.get_cpu_capability(), CPU_BF16_ENV)
        _warned_fp32 = True
    return False


def window_batch(device: str | torch.device, stage_batch: int, amp: bool) -> int:
    """Sliding windows per forward pass at inference when none is asked for: the stage's
    training batch, except on a CPU running bf16 (``amp`` as :func:`use_amp` decided), where
    one window per pass is both faster and leaner. Measured with oneDNN on a 2-core Xeon with
    AMX, per window: fine network 39 ms alone vs 49 ms in pairs, coarse 39 vs 50 ms (and the
    coarse stage's peak memory about 90 MB lower on a neck-to-pelvis scan); in fp32 a lone
    window is the slow one (fine 232 vs 86 ms), so fp32 keeps the batch."""
    if torch.device(device).type == "cpu" and amp:
        return 1
    return int(stage_batch)


def precision_name(device: str | torch.device, amp: bool) -> str:
    """``"fp16"``, ``"bf16"`` or ``"fp32"``: what :func:`autocast` runs with ``amp`` on ``device``."""
    return ("fp16" if torch.device(device).type == "cuda" else "bf16") if amp else "fp32"


def autocast(device: str | torch.device, enabled: bool = True) -> contextlib.AbstractContextManager[Any]:
    """Autocast context for ``device``: fp16 on CUDA, bf16 on the CPU; a no-op when not enabled.

    Example:
        >>> import torch
        >>> with autocast("cpu"):
        ...     y = torch.nn.functional.linear(torch.ones(1, 2), torch.ones(3, 2))
        >>> y.dtype
        torch.bfloat16
    """
    if not enabled:
        return contextlib.nullcontext()
    device = torch.device(device)
    return torch.autocast(device_type=device.type, dtype=amp_dtype(device))


def make_grad_scaler(device: str | torch.device, enabled: bool = True) -> torch.amp.GradScaler:
    """A GradScaler that is active only for AMP on CUDA (fp16); disabled (a pass-through) otherwise.

    A disabled scaler's ``scale(loss)`` returns ``loss``, ``step(opt)`` calls ``opt.step()`` and
    ``update()`` does nothing, so the training loop is the same on every device.
    """
    device = torch.device(device)
    if device.type == "cuda" and enabled:
        return torch.amp.GradScaler("cuda", enabled=True)
    return torch.amp.GradScaler(device.type if device.type == "cuda" else "cpu", enabled=False)


def fast_layout(net: torch.nn.Module, device: str | torch.device) -> torch.nn.Module:
    """``net`` in the memory layout its 3D convolutions run fastest in on ``device``.

    On the CPU that is channels-last (NDHWC): oneDNN runs the segpipe networks about 1.4x
    faster with it, in inference under bf16 autocast and 1.8x in fp32
    (``benchmarks/layout_bench.py``), and a bf16 training step about 1.4x faster, with the same
    results up to float rounding. Inputs need no conversion: a convolution with channels-last
    weights returns channels-last output. On CUDA the default layout is kept.
    """
    if torch.device(device).type == "cpu":
        net = net.to(memory_format=torch.channels_last_3d)
    return net


def for_inference(net: torch.nn.Module, device: str | torch.device) -> torch.nn.Module:
    """``net`` on ``device`` in eval mode and in its fastest layout there (:func:`fast_layout`)."""
    return fast_layout(net.to(device).eval(), device)
