"""Typed configuration: frozen dataclasses loaded from YAML.

Rules (see DESIGN.md): every value has a default, unknown keys are errors, values are validated
in ``__post_init__``, and single values can be overridden from the CLI with ``key.sub=value``.

Example:
    >>> cfg = from_dict(NetworkConfig, {"base_width": 8})
    >>> cfg.base_width
    8
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from segpipe.errors import ConfigError

__all__ = [
    "NetworkConfig",
    "SpacingConfig",
    "from_dict",
    "to_dict",
    "load_yaml",
    "apply_overrides",
]

T = TypeVar("T")


@dataclass(frozen=True)
class SpacingConfig:
    """Target spacings of the two stages, in mm (x, y, z)."""

    coarse_mm: tuple[float, float, float] = (4.0, 4.0, 4.0)
    fine_mm: tuple[float, float, float] = (1.5, 1.5, 1.5)

    def __post_init__(self) -> None:
        for name in ("coarse_mm", "fine_mm"):
            value = getattr(self, name)
            if len(value) != 3 or any(v <= 0 for v in value):
                raise ConfigError(f"spacing.{name}: expected three positive numbers (mm), got {list(value)}")


@dataclass(frozen=True)
class NetworkConfig:
    """Shape of a 3D UNet (see :mod:`segpipe.network`).

    Args:
        in_channels: input channels (1 for CT).
        num_classes: output classes including background (3: background, right, left lung).
        depth: number of downsamplings; input sizes must be multiples of ``2**depth``.
        base_width: channels of the first stage (narrow by default).
        growth: channel multiplier per stage.
        max_width: cap on the channels of any stage.
        block: ``"bottleneck"`` (residual 1x1x1-3x3x3-1x1x1) or ``"plain"`` (two 3x3x3 convs).
        blocks_per_stage: residual blocks per encoder stage.
        bottleneck_ratio: channel reduction inside a bottleneck block.
        norm: ``"instance"`` or ``"group"``.
        checkpointing: ``"none"``, ``"encoder"``, ``"all"``, or a list of stage names.
    """

    in_channels: int = 1
    num_classes: int = 3
    depth: int = 3
    base_width: int = 16
    growth: float = 2.0
    max_width: int = 256
    block: str = "bottleneck"
    blocks_per_stage: int = 2
    bottleneck_ratio: int = 4
    norm: str = "instance"
    checkpointing: Any = "none"

    def __post_init__(self) -> None:
        if self.in_channels < 1 or self.num_classes < 2:
            raise ConfigError(
                f"network: expected in_channels >= 1 and num_classes >= 2, got {self.in_channels} and {self.num_classes}"
            )
        if not 1 <= self.depth <= 6:
            raise ConfigError(f"network.depth: expected 1..6, got {self.depth}")
        if self.base_width < 1 or self.max_width < self.base_width:
            raise ConfigError(f"network: expected 1 <= base_width <= max_width, got {self.base_width}, {self.max_width}")
        if self.growth < 1:
            raise ConfigError(f"network.growth: expected >= 1, got {self.growth}")
        if self.block not in ("bottleneck", "plain"):
            raise ConfigError(f"network.block: expected 'bottleneck' or 'plain', got {self.block!r}")
        if self.blocks_per_stage < 1:
            raise ConfigError(f"network.blocks_per_stage: expected >= 1, got {self.blocks_per_stage}")
        if self.bottleneck_ratio < 1:
            raise ConfigError(f"network.bottleneck_ratio: expected >= 1, got {self.bottleneck_ratio}")
        if self.norm not in ("instance", "group"):
            raise ConfigError(f"network.norm: expected 'instance' or 'group', got {self.norm!r}")
        if isinstance(self.checkpointing, list):
            object.__setattr__(self, "checkpointing", tuple(self.checkpointing))
        if not (isinstance(self.checkpointing, tuple) or self.checkpointing in ("none", "encoder", "all")):
            raise ConfigError(
                f"network.checkpointing: expected 'none', 'encoder', 'all' or a list of stage names, got {self.checkpointing!r}"
            )


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", str(tp))


def _convert(value: Any, tp: Any, where: str) -> Any:
    """Convert a YAML value to the annotated type, raising ConfigError with the key path."""
    origin = typing.get_origin(tp)
    if tp is Any:
        return value
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping, got {type(value).__name__}")
        return from_dict(tp, value, where)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _convert(value, arg, where)
            except ConfigError as err:
                errors.append(str(err))
        raise ConfigError(errors[0] if errors else f"{where}: invalid value {value!r}")
    if origin is tuple:
        args = typing.get_args(tp)
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{where}: expected a list, got {value!r}")
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_convert(v, args[0], f"{where}[{i}]") for i, v in enumerate(value))
        if len(args) != len(value):
            raise ConfigError(f"{where}: expected {len(args)} values, got {len(value)}")
        return tuple(_convert(v, a, f"{where}[{i}]") for i, (v, a) in enumerate(zip(args, value)))
    if origin is list:
        (arg,) = typing.get_args(tp)
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{where}: expected a list, got {value!r}")
        return [_convert(v, arg, f"{where}[{i}]") for i, v in enumerate(value)]
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{where}: expected true or false, got {value!r}")
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise ConfigError(f"{where}: expected an integer, got {value!r}")
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        raise ConfigError(f"{where}: expected a number, got {value!r}")
    if tp is str:
        if isinstance(value, str):
            return value
        raise ConfigError(f"{where}: expected a string, got {value!r}")
    if isinstance(tp, type) and isinstance(value, tp):
        return value
    raise ConfigError(f"{where}: expected {_type_name(tp)}, got {value!r}")


def from_dict(cls: type[T], data: dict[str, Any] | None, where: str = "") -> T:
    """Build dataclass ``cls`` from a mapping; unknown keys and wrong types raise ConfigError."""
    data = dict(data or {})
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(data) - names)
    if unknown:
        prefix = f"{where}." if where else ""
        raise ConfigError(
            f"unknown config key{'s' if len(unknown) > 1 else ''} {', '.join(prefix + k for k in unknown)}"
            f" (allowed: {', '.join(sorted(names))})"
        )
    kwargs = {k: _convert(v, hints[k], f"{where}.{k}" if where else k) for k, v in data.items()}
    try:
        return cls(**kwargs)
    except TypeError as err:
        raise ConfigError(f"{where or cls.__name__}: {err}") from err


def to_dict(obj: Any) -> Any:
    """JSON/YAML-able dict of a (nested) config dataclass; tuples become lists."""
    if dataclasses.is_dataclass(obj):
        return {f.name: to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, (list, tuple)):
        return [to_dict(v) for v in obj]
    return obj


def load_yaml(path: str | Path, cls: type[T]) -> T:
    """Load a YAML file (``yaml.safe_load``) into dataclass ``cls``."""
    import yaml

    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        loc = f" at line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"{path}: invalid YAML{loc}") from err
    if data is not None and not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level, got {type(data).__name__}")
    try:
        return from_dict(cls, data)
    except ConfigError as err:
        raise ConfigError(f"{path}: {err}") from err


def apply_overrides(cfg: T, overrides: list[str]) -> T:
    """Return ``cfg`` with ``key.sub=value`` overrides applied (values parsed as YAML scalars)."""
    import yaml

    data = to_dict(cfg)
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override {item!r}: expected key=value")
        key, raw = item.split("=", 1)
        node = data
        parts = key.strip().split(".")
        for part in parts[:-1]:
            if not isinstance(node.get(part), dict):
                raise ConfigError(f"override {item!r}: unknown config key {key}")
            node = node[part]
        if parts[-1] not in node:
            raise ConfigError(f"override {item!r}: unknown config key {key}")
        node[parts[-1]] = yaml.safe_load(raw)
    return from_dict(type(cfg), data)
