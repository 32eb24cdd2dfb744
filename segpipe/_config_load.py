"""Typed loading of configuration dataclasses: a mapping (from YAML) to a frozen dataclass,
checked against its type hints, with the key path of any error; back to a plain mapping; and
``key.sub=value`` overrides. :mod:`segpipe.config` holds the dataclasses and re-exports these."""

from __future__ import annotations

import dataclasses
import types
import typing
from pathlib import Path
from typing import Any, TypeVar

from segpipe.errors import ConfigError

__all__ = ["from_dict", "to_dict", "load_yaml", "read_yaml_mapping", "apply_overrides"]

T = TypeVar("T")


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
        return tuple(_convert(v, a, f"{where}[{i}]") for i, (a, v) in enumerate(zip(args, value)))
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping, got {value!r}")
        return dict(value)
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
    except ConfigError as err:  # name the section a nested value came from: fine.network.depth
        message, last = str(err), where.rsplit(".", 1)[-1]
        if not where or message.startswith(where):
            raise
        if message.startswith((f"{last}.", f"{last}:")):
            parent = where[: -len(last)].rstrip(".")
            raise ConfigError(f"{parent}.{message}" if parent else message) from err
        raise ConfigError(f"{where}.{message}") from err


def to_dict(obj: Any) -> Any:
    """JSON/YAML-able dict of a (nested) config dataclass; tuples become lists."""
    if dataclasses.is_dataclass(obj):
        return {f.name: to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, (list, tuple)):
        return [to_dict(v) for v in obj]
    return obj


def read_yaml_mapping(path: str | Path) -> dict[str, Any]:
    """The top-level mapping of a YAML file (``yaml.safe_load``; empty file: ``{}``)."""
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
    return data or {}


def load_yaml(path: str | Path, cls: type[T]) -> T:
    """Load a YAML file (``yaml.safe_load``) into dataclass ``cls``."""
    data = read_yaml_mapping(path)
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
