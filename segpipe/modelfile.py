"""The segpipe model file: both stages' weights plus a JSON header with every setting
inference needs. Loaded with ``torch.load(..., weights_only=True)``: nothing is unpickled.

Layout (a plain dict saved by ``torch.save``)::

    {"format": "segpipe-model", "format_version": 1,
     "header": "<JSON>",            # version, networks, spacings, intensity, patches, labels, ...
     "coarse": {name: tensor}, "fine": {name: tensor}}

Example:
    >>> save_model("model.pt", header, {"coarse": coarse.state_dict(), "fine": fine.state_dict()})  # doctest: +SKIP
    >>> header, weights = load_model("model.pt")                                                  # doctest: +SKIP
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from segpipe._version import __version__
from segpipe.errors import ModelError, OutputError

__all__ = ["FORMAT", "FORMAT_VERSION", "save_model", "load_model", "atomic_torch_save"]

FORMAT = "segpipe-model"
FORMAT_VERSION = 1
STAGES = ("coarse", "fine")


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


def save_model(path: str | Path, header: dict[str, Any], weights: dict[str, dict[str, Any]]) -> Path:
    """Write a model file atomically.

    Args:
        path: output file (``.pt``).
        header: JSON-able settings; ``segpipe_version`` and ``format_version`` are added.
        weights: ``{"coarse": state_dict, "fine": state_dict}`` (tensors moved to the CPU).
    """
    missing = [s for s in STAGES if s not in weights]
    if missing:
        raise ModelError(f"a model file needs both stages, missing {', '.join(missing)}")
    full = {**header, "segpipe_version": __version__, "format_version": FORMAT_VERSION}
    payload = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "header": json.dumps(full, sort_keys=True),
        **{stage: {k: v.detach().cpu() for k, v in weights[stage].items()} for stage in STAGES},
    }
    return atomic_torch_save(payload, path)


def load_model(path: str | Path) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """Read a model file: ``(header, {"coarse": state_dict, "fine": state_dict})``.

    Raises:
        ModelError: missing, corrupt, not a segpipe model, or from an incompatible version.
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
    return header, weights
