"""Training: the trainer (:mod:`segpipe.train.trainer`: both stages, AMP, accumulation,
gradient checkpointing, DDP, atomic checkpoints, resume, the model file) and its data
(:mod:`segpipe.train.data`: dataset discovery and validation, the preprocessing cache, patch
sampling, augmentation).

Shares the network, the intensity normalisation, the sliding window and the model file with
inference through :mod:`segpipe.model`; never imports :mod:`segpipe.infer`.

Example:
    >>> from segpipe.config import TrainConfig
    >>> from segpipe.train import train
    >>> result = train(TrainConfig(), data_dir="data_samples/train_96", run_dir="runs/demo")  # doctest: +SKIP
"""

from __future__ import annotations

from segpipe.train import data
from segpipe.train.trainer import (
    EpochShardSampler,
    TrainingError,
    TrainResult,
    apply_memory_plan,
    lr_factor,
    prepare_data,
    split_cases,
    train,
    train_stage,
)

__all__ = [
    "data",
    "TrainingError",
    "TrainResult",
    "train",
    "train_stage",
    "prepare_data",
    "split_cases",
    "EpochShardSampler",
    "apply_memory_plan",
    "lr_factor",
]
