"""Argument types shared by the ``segpipe`` subcommands (argparse ``type=`` callables: a bad
value becomes argparse's one-line usage error)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TypeVar

__all__ = ["_positive_int", "_non_negative_float", "_int_triple", "_float_triple"]

T = TypeVar("T", int, float)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}")
    return value


def _triple(text: str, parse: Callable[[str], T], what: str, example: str, *, x_separates: bool = False) -> tuple[T, T, T]:
    """One value or three (x, y, z), comma-separated (``x`` too with ``x_separates``), each
    positive; one value is used thrice."""
    parts = [p for p in (text.replace("x", ",") if x_separates else text).split(",") if p.strip()]
    try:
        values = [parse(p) for p in parts]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected one or three {what} like {example}, got {text!r}") from None
    if len(values) == 1:
        values = values * 3
    if len(values) != 3 or any(not v > 0 for v in values):
        raise argparse.ArgumentTypeError(f"expected one or three positive {what} like {example}, got {text!r}")
    return (values[0], values[1], values[2])


def _int_triple(text: str) -> tuple[int, int, int]:
    """``96`` or ``96,96,64`` (or ``96x96x64``) -> (96, 96, 64) (x, y, z)."""
    return _triple(text, int, "integers", "96,96,64", x_separates=True)


def _float_triple(text: str) -> tuple[float, float, float]:
    """``1.5`` or ``0.7,0.7,2.5`` -> (x, y, z) in mm."""
    return _triple(text, float, "numbers", "0.7,0.7,2.5")
