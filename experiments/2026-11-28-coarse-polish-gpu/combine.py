"""Bundled model with its coarse stage replaced by a checkpoint's weights: combine.py CKPT OUT"""
import sys, torch, dataclasses
from segpipe.model.file import load_model, save_model
from segpipe.model import DEFAULT_MODEL
header, weights = load_model(DEFAULT_MODEL)
ck = torch.load(sys.argv[1], map_location="cpu", weights_only=True)
weights["coarse"] = ck["model"]
save_model(sys.argv[2], header, weights)
print("wrote", sys.argv[2])
