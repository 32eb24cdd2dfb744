"""segpipe: two-stage 3D lung segmentation for CT within a stated memory budget.

Public API (everything else lives in submodules)::

    import segpipe
    seg = segpipe.LungSegmenter.default()          # the bundled model (rules=... to switch rules)
    result = seg.predict_with_report("scan.nii.gz")  # segpipe.Prediction: .label (uint8 image), .report, .density
    image = segpipe.read_image("scan.nii.gz")      # SimpleITK image, HU, geometry kept
    segpipe.write_image(image, "copy.nii.gz")      # atomic write, exact geometry

Heavy modules (torch, monai) are imported lazily, so ``import segpipe`` stays cheap.
"""

from __future__ import annotations

from typing import Any

from segpipe._version import __version__
from segpipe.errors import ConfigError, GeometryError, InputError, ModelError, OutputError, SegpipeError

__all__ = [
    "__version__",
    "LungSegmenter",
    "Prediction",
    "SegpipeError",
    "InputError",
    "GeometryError",
    "ConfigError",
    "ModelError",
    "OutputError",
    "read_image",
    "write_image",
]

_LAZY = {
    "read_image": "segpipe.io",
    "write_image": "segpipe.io",
    "LungSegmenter": "segpipe.infer",
    "Prediction": "segpipe.infer",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'segpipe' has no attribute {name!r}")
