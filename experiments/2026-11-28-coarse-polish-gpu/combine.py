"""The bundled model with its coarse stage replaced by a training checkpoint's weights.

Run: ``python experiments/2026-11-28-coarse-polish-gpu/combine.py CHECKPOINT OUT`` from the project root.
"""

from __future__ import annotations

import sys

import torch

from segpipe.model import DEFAULT_MODEL
from segpipe.model.file import load_model, save_model

if __name__ == "__main__":
    header, weights = load_model(DEFAULT_MODEL)
    weights["coarse"] = torch.load(sys.argv[1], map_location="cpu", weights_only=True)["model"]
    print("wrote", save_model(sys.argv[2], header, weights))
