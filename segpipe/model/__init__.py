"""What training and inference share: the network, the intensity normalisation, the model
file and the sliding window.

* :mod:`segpipe.model.network`: the 3D UNet (bottleneck blocks, per-stage checkpointing).
* :mod:`segpipe.model.intensity`: the fixed HU normalisation.
* :mod:`segpipe.model.file`: the model file (both stages' weights and a typed header,
  :class:`ModelHeader`), read with ``weights_only=True`` and written atomically.
* :mod:`segpipe.model.sliding`: sliding-window class probabilities of a stage.

``segpipe.train`` and ``segpipe.infer`` both import this package, never each other. Importing
it is light: the network module (torch) is imported when one of its names is first used.

Example:
    >>> from segpipe.model import DEFAULT_MODEL, load_model
    >>> header, weights = load_model(DEFAULT_MODEL)              # doctest: +SKIP
    >>> net = build_network(header.fine.config().network)        # doctest: +SKIP
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from segpipe.model.file import (
    FORMAT,
    FORMAT_VERSION,
    ModelHeader,
    StageHeader,
    atomic_torch_save,
    load_model,
    save_model,
)
from segpipe.model.intensity import normalise_hu
from segpipe.model.sliding import any_lung, channel_probability_, sliding_window_probs, zoom_averaged_probs

if TYPE_CHECKING:
    from segpipe.model.network import UNet3D, build_network, load_network_config, stage_widths

__all__ = [
    "UNet3D",
    "build_network",
    "load_network_config",
    "stage_widths",
    "normalise_hu",
    "StageHeader",
    "ModelHeader",
    "load_model",
    "save_model",
    "atomic_torch_save",
    "FORMAT",
    "FORMAT_VERSION",
    "DEFAULT_MODEL",
    "sliding_window_probs",
    "zoom_averaged_probs",
    "any_lung",
    "channel_probability_",
]

DEFAULT_MODEL = Path(__file__).resolve().parent.parent / "weights" / "default.pt"

_NETWORK_NAMES = ("UNet3D", "build_network", "load_network_config", "stage_widths")


def __getattr__(name: str) -> Any:
    """The network's names, imported (with torch) on first use."""
    if name in _NETWORK_NAMES:
        return getattr(importlib.import_module("segpipe.model.network"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
