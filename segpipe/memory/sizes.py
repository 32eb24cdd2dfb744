"""Byte sizes: parse ``8GiB``/``8GB``/``512MiB``, print them, and optimizer-state bytes."""

from __future__ import annotations

import re
from collections.abc import Sequence

import torch
from torch import nn

from segpipe.errors import ConfigError

__all__ = ["parse_size", "format_size", "OPTIMIZERS", "optimizer_state_bytes"]


_UNITS = {
    "": 1,
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "k": 2**10,
    "m": 2**20,
    "g": 2**30,
    "t": 2**40,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-zA-Z]*)\s*$")


def parse_size(text: str | int) -> int:
    """Bytes in ``text``: ``8GiB``, ``8GB`` (10**9), ``512MiB``, ``1.5G`` (GiB), or a plain byte count.

    Raises:
        ConfigError: for anything else, or a size that is not positive.

    Example:
        >>> parse_size("8GiB"), parse_size("8GB"), parse_size("512MiB")
        (8589934592, 8000000000, 536870912)
    """
    if isinstance(text, bool) or not isinstance(text, (str, int)):
        raise ConfigError(f"memory size: expected a size like 8GiB, 8GB or 512MiB, got {text!r}")
    if isinstance(text, int):
        value = text
    else:
        match = _SIZE_RE.match(text)
        unit = match.group(2).lower() if match else None
        if match is None or unit not in _UNITS:
            raise ConfigError(f"memory size: expected a size like 8GiB, 8GB or 512MiB, got {text!r}")
        value = int(float(match.group(1)) * _UNITS[unit])
    if value <= 0:
        raise ConfigError(f"memory size: expected a positive size, got {text!r}")
    return value


def format_size(nbytes: float) -> str:
    """``1536`` -> ``'1.50 KiB'`` (binary units)."""
    value = float(nbytes)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(value) < 1024 or unit == "GiB":
            return f"{value:.0f} B" if unit == "B" else f"{value:.2f} {unit}"
        value /= 1024
    return f"{value:.2f} TiB"  # pragma: no cover


# ----------------------------------------------------------------------------- optimizer state
OPTIMIZERS = ("none", "sgd", "adam", "adamw")
_STATE_COPIES = {"none": 0, "sgd": 1, "adam": 2, "adamw": 2}


def optimizer_state_bytes(parameters: Sequence[torch.Tensor] | nn.Module, optimizer: str) -> int:
    """Bytes of optimizer state for trainable ``parameters`` (exact for torch's implementations).

    ``sgd`` is SGD with momentum (one buffer per parameter); ``adam``/``adamw`` keep two moments
    plus a one-element fp32 ``step`` tensor per parameter; ``none`` (inference) keeps nothing.
    """
    name = optimizer.lower()
    if name not in _STATE_COPIES:
        raise ConfigError(f"optimizer: expected one of {', '.join(OPTIMIZERS)}, got {optimizer!r}")
    params = list(parameters.parameters() if isinstance(parameters, nn.Module) else parameters)
    trainable = [p for p in params if p.requires_grad]
    nbytes = _STATE_COPIES[name] * sum(p.numel() * p.element_size() for p in trainable)
    if name in ("adam", "adamw"):
        nbytes += 4 * len(trainable)
    return nbytes


