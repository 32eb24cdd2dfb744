"""The segpipe model file: both stages' weights plus a JSON header with every setting
inference needs. Loaded with ``torch.load(..., weights_only=True)``: nothing is unpickled.

Layout (a plain dict saved by ``torch.save``)::

    {"format": "segpipe-model", "format_version": 1,
     "header": "<JSON>",            # ModelHeader.to_dict(): version, networks, spacings, ...
     "coarse": {name: tensor}, "fine": {name: tensor}}

The header is typed: :class:`ModelHeader` (both stages as :class:`StageHeader`, spacings,
intensity window, crop margin, labels, clean-up rule parameters, training provenance). Reading
it is strict: a missing or invalid key, or a key this version does not know, is a ModelError
that names the key. Files written before the header was typed (the bundled default model, and
every ``segpipe train`` output of segpipe 0.1.0) hold a subset of these keys: they lack only
``refine``, which defaults to empty.

Example:
    >>> save_model("model.pt", header, {"coarse": coarse.state_dict(), "fine": fine.state_dict()})  # doctest: +SKIP
    >>> header, weights = load_model("model.pt")                                                  # doctest: +SKIP
    >>> header.fine.config().patch_xyz                                                            # doctest: +SKIP
    (64, 64, 64)
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from segpipe._version import __version__
from segpipe.config import IntensityConfig, NetworkConfig, SpacingConfig, StageConfig, from_dict, to_dict
from segpipe.errors import ConfigError, ModelError, OutputError

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "DEFAULT_LABELS",
    "StageHeader",
    "ModelHeader",
    "save_model",
    "load_model",
    "atomic_torch_save",
]

FORMAT = "segpipe-model"
FORMAT_VERSION = 1
STAGES = ("coarse", "fine")
DEFAULT_LABELS = {"0": "background", "1": "right_lung", "2": "left_lung"}


# ----------------------------------------------------------------------------- typed header
def _mapping(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ModelError(f"model header: {where}: expected a mapping, got {type(value).__name__}")
    return value


def _check_keys(data: dict[str, Any], cls: type, where: str, required: tuple[str, ...]) -> None:
    """ModelError naming the first missing key of ``required`` or the unknown keys of ``data``."""
    prefix = f"{where}." if where else ""
    missing = [k for k in required if k not in data]
    if missing:
        raise ModelError(f"model header: missing key {prefix}{missing[0]}")
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise ModelError(
            f"model header: unknown key{'s' if len(unknown) > 1 else ''} {', '.join(prefix + k for k in unknown)}"
            f" (allowed: {', '.join(sorted(names))})"
        )


def _typed(cls: type, data: Any, where: str) -> Any:
    """``config.from_dict`` with its ConfigError (which names the key) as a ModelError."""
    try:
        return from_dict(cls, _mapping(data, where), where)
    except ConfigError as err:
        raise ModelError(f"model header: {str(err).replace('unknown config key', 'unknown key', 1)}") from err


@dataclass(frozen=True)
class StageHeader:
    """One stage as stored in a model file: its network, sliding-window size and overlap, the
    window batch and AMP setting it was trained with, and its name."""

    network: NetworkConfig
    patch_xyz: tuple[int, int, int]
    batch_size: int = 2
    amp: bool = True
    overlap: float = 0.25
    stage: str = ""

    def config(self) -> StageConfig:
        """The :class:`StageConfig` inference runs (no gradient checkpointing)."""
        return StageConfig(
            network=dataclasses.replace(self.network, checkpointing="none"), patch_xyz=self.patch_xyz,
            batch_size=self.batch_size, amp=self.amp, overlap=self.overlap,
        )

    @classmethod
    def from_dict(cls, data: Any, where: str = "stage") -> StageHeader:
        """A stage header from its JSON form; ModelError naming the key when one is missing or
        invalid, or unknown."""
        data = _mapping(data, where)
        _check_keys(data, cls, where, ("network", "patch_xyz"))
        header = _typed(cls, data, where)
        try:
            header.config()
        except ConfigError as err:
            raise ModelError(f"model header: {where}.{err}") from err
        return header

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (tuples as lists); :meth:`from_dict` gives this header back."""
        return to_dict(self)


@dataclass(frozen=True)
class ModelHeader:
    """Everything inference needs besides the weights, plus where the model came from.

    Args:
        coarse, fine: the two stages.
        spacing: the stages' spacings (and the coarse stage's fixed size, if any).
        intensity: the fixed normalisation window.
        margin_mm: margin around a lung's box when the fine stage crops it.
        labels: label value (as a string) -> name.
        refine: clean-up rule parameters by rule name, resolved by :mod:`segpipe.refine`
            (empty in files written before the rules travelled in the model file).
        segpipe_version, format_version: written by :func:`save_model`.
        train_config, training_data, validation, created: provenance written by the trainer
            (the resolved training config, a data summary, best validation scores per stage, UTC
            time).
    """

    coarse: StageHeader
    fine: StageHeader
    spacing: SpacingConfig
    intensity: IntensityConfig
    margin_mm: float = 12.0
    labels: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_LABELS))
    refine: dict[str, dict[str, Any]] = field(default_factory=dict)
    segpipe_version: str = ""
    format_version: int = FORMAT_VERSION
    train_config: dict[str, Any] | None = None
    training_data: dict[str, Any] | None = None
    validation: dict[str, Any] | None = None
    created: str | None = None

    def stage(self, name: str) -> StageHeader:
        """The ``"coarse"`` or ``"fine"`` stage."""
        if name not in STAGES:
            raise ValueError(f"stage: expected 'coarse' or 'fine', got {name!r}")
        return self.coarse if name == "coarse" else self.fine

    @classmethod
    def from_dict(cls, data: Any) -> ModelHeader:
        """The header from its JSON form. Raises ModelError (one line, naming the key) when a
        key is missing or invalid, or is not a header key of this segpipe version."""
        data = _mapping(data, "header")
        _check_keys(data, cls, "", ("coarse", "fine", "spacing", "intensity"))
        spacing = _mapping(data["spacing"], "spacing")
        _check_keys(spacing, SpacingConfig, "spacing", ("coarse_mm", "fine_mm"))
        _check_keys(_mapping(data["intensity"], "intensity"), IntensityConfig, "intensity", ("window_hu",))
        kwargs: dict[str, Any] = {
            "coarse": StageHeader.from_dict(data["coarse"], "coarse"),
            "fine": StageHeader.from_dict(data["fine"], "fine"),
            "spacing": _typed(SpacingConfig, spacing, "spacing"),
            "intensity": _typed(IntensityConfig, data["intensity"], "intensity"),
        }
        if "margin_mm" in data:
            margin = data["margin_mm"]
            if isinstance(margin, bool) or not isinstance(margin, (int, float)) or not margin >= 0:
                raise ModelError(f"model header: margin_mm: expected a number >= 0, got {margin!r}")
            kwargs["margin_mm"] = float(margin)
        if "labels" in data:
            labels = _mapping(data["labels"], "labels")
            bad = [k for k, v in labels.items() if not (isinstance(k, str) and k.isdigit() and isinstance(v, str))]
            if bad:
                raise ModelError(f"model header: labels.{bad[0]}: expected a label value -> name, got {labels[bad[0]]!r}")
            kwargs["labels"] = dict(labels)
        if "refine" in data:
            refine = _mapping(data["refine"], "refine")
            for name, params in refine.items():
                _mapping(params, f"refine.{name}")
            kwargs["refine"] = copy.deepcopy(refine)
        for key, kind in (("segpipe_version", str), ("format_version", int), ("created", str)):
            if key in data and data[key] is not None:
                value = data[key]
                if isinstance(value, bool) or not isinstance(value, kind):
                    raise ModelError(f"model header: {key}: expected {kind.__name__}, got {value!r}")
                kwargs[key] = value
        for key in ("train_config", "training_data", "validation"):
            if data.get(key) is not None:
                kwargs[key] = copy.deepcopy(_mapping(data[key], key))
        return cls(**kwargs)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (tuples as lists, copies of the mappings); :meth:`from_dict` gives
        this header back."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        for key in ("coarse", "fine", "spacing", "intensity"):
            out[key] = to_dict(out[key])
        return {k: copy.deepcopy(v) for k, v in out.items()}


def atomic_torch_save(obj: Any, path: str | Path) -> Path:
    """``torch.save`` to a temporary file in the same folder, then rename (never half-written)."""
    import torch

    path = Path(path)
    if not path.parent.is_dir():
        raise OutputError(f"cannot write {path}: the folder {path.parent} does not exist")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        torch.save(obj, tmp)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def save_model(path: str | Path, header: ModelHeader, weights: dict[str, dict[str, Any]]) -> Path:
    """Write a model file atomically.

    Args:
        path: output file (``.pt``).
        header: the settings; its ``segpipe_version`` and ``format_version`` are set to this
            segpipe's.
        weights: ``{"coarse": state_dict, "fine": state_dict}`` (tensors moved to the CPU).
    """
    if not isinstance(header, ModelHeader):
        raise TypeError(
            f"save_model: header must be a ModelHeader (ModelHeader.from_dict builds one), got {type(header).__name__}"
        )
    missing = [s for s in STAGES if s not in weights]
    if missing:
        raise ModelError(f"a model file needs both stages, missing {', '.join(missing)}")
    full = dataclasses.replace(header, segpipe_version=__version__, format_version=FORMAT_VERSION)
    payload = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "header": json.dumps(full.to_dict(), sort_keys=True),
        **{stage: {k: v.detach().cpu() for k, v in weights[stage].items()} for stage in STAGES},
    }
    return atomic_torch_save(payload, path)


def load_model(path: str | Path) -> tuple[ModelHeader, dict[str, dict[str, Any]]]:
    """Read a model file: ``(header, {"coarse": state_dict, "fine": state_dict})``.

    Raises:
        ModelError: missing, corrupt, not a segpipe model, from an incompatible version, or
            with a header this version cannot read (the message names the key).
    """
    import pickle
    import zipfile

    import torch

    path = Path(path)
    if not path.is_file():
        raise ModelError(f"model file not found: {path}")
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except (RuntimeError, pickle.UnpicklingError, zipfile.BadZipFile, EOFError, OSError, ValueError) as err:
        detail = str(err).strip().splitlines()[0][:160] if str(err).strip() else type(err).__name__
        raise ModelError(f"cannot read model file {path}: corrupt or not a torch file ({detail})") from err
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise ModelError(f"{path} is not a segpipe model file")
    version = payload.get("format_version")
    if version != FORMAT_VERSION:
        raise ModelError(
            f"{path}: model format version {version} is not supported by segpipe {__version__} "
            f"(expected {FORMAT_VERSION}); retrain or use a matching segpipe version"
        )
    try:
        header = json.loads(payload["header"])
        weights = {stage: dict(payload[stage]) for stage in STAGES}
    except (KeyError, TypeError, json.JSONDecodeError) as err:
        raise ModelError(f"{path}: the model file is incomplete ({err})") from err
    try:
        return ModelHeader.from_dict(header), weights
    except ModelError as err:
        raise ModelError(f"{path}: {err}") from err
