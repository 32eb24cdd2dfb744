"""Training, split along the data flow: :mod:`segpipe.train.dataset` (dataset discovery and
validation), :mod:`segpipe.train.cache` (the preprocessing cache), :mod:`segpipe.train.patches`
(patch sampling, augmentation), :mod:`segpipe.train.trainer` (one stage: AMP, accumulation,
gradient checkpointing, DDP, atomic checkpoints, resume) and :mod:`segpipe.train.run` (the whole
run: data preparation, both stages, the model file). :mod:`segpipe.train.data` re-exports the
three data modules' public names.

Shares the network, the intensity normalisation, the sliding window and the model file with
inference through :mod:`segpipe.model`; never imports :mod:`segpipe.infer`.

Example:
    >>> from segpipe.config import TrainConfig
    >>> from segpipe.train import train
    >>> result = train(TrainConfig(), data_dir="data_samples/train_96", run_dir="runs/demo")  # doctest: +SKIP
"""

from __future__ import annotations

from segpipe.train import data
from segpipe.train.run import TrainResult, apply_memory_plan, prepare_data, split_cases, train
from segpipe.train.trainer import EpochShardSampler, TrainingError, lr_factor, train_stage

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
