"""How much memory a training step needs: estimate, measure, plan.

* :func:`estimate_memory` / :func:`estimate_network`: bytes for parameters, gradients, optimizer
  state, activations saved for backward, input/output/loss tensors, the transient peak during
  backward (recomputed checkpointed stages, gradients in flight) and a workspace margin. Parameter
  figures are exact. Everything that depends on the patch is derived from the network's own
  layers: one training step runs at the requested size on *fake* tensors (shapes and dtypes, no
  data, no compute), with autograd's ``saved_tensors_hooks`` counting saved storages once each
  and a dispatch-level tracker following every tensor allocation and release.
* :class:`SavedTensorMeter`, :func:`measure_step`, :class:`MemoryRecorder`: the same counting on
  real tensors (on the CPU), peak RSS, and on CUDA ``max_memory_allocated``/``reserved`` plus an
  optional allocator snapshot. The recorder is what a trainer wraps each step in.
* :func:`plan_training`: patch size, batch size, checkpointing and gradient accumulation for a
  GPU memory budget, with the reasons for each choice.

AMP is estimated with the CPU autocast rules (bf16). CUDA's fp16 has the same element size, and
the network keeps its norms in the input precision, so the byte counts carry over.

Layout: ``sizes`` (parse/format bytes, optimizer state), ``counting`` (saved-tensor meter, live
tensor tracker), ``estimate``, ``measure`` (real steps, per-step recorder, the report table),
``plan``. Everything public is importable from ``segpipe.memory``.

Example:
    >>> from segpipe.config import NetworkConfig
    >>> est = estimate_network(NetworkConfig(base_width=8), patch=(32, 32, 32), batch=1)
    >>> est.parameter_bytes == 4 * est.parameters
    True
"""

from __future__ import annotations

from segpipe.memory.counting import LiveTensorTracker, SavedTensorMeter
from segpipe.memory.estimate import LayerOutput, MemoryEstimate, estimate_memory, estimate_network
from segpipe.memory.measure import (
    AUTO_MEASURE_MACS,
    MeasuredStep,
    MemoryRecorder,
    StepMemory,
    measure_step,
    memory_report,
    should_measure,
)
from segpipe.memory.plan import TrainingPlan, load_plan_config, plan_training, write_plan_config
from segpipe.memory.sizes import OPTIMIZERS, format_size, optimizer_state_bytes, parse_size

__all__ = [
    "parse_size",
    "format_size",
    "OPTIMIZERS",
    "optimizer_state_bytes",
    "SavedTensorMeter",
    "LiveTensorTracker",
    "LayerOutput",
    "MemoryEstimate",
    "estimate_memory",
    "estimate_network",
    "MeasuredStep",
    "measure_step",
    "AUTO_MEASURE_MACS",
    "should_measure",
    "memory_report",
    "StepMemory",
    "MemoryRecorder",
    "TrainingPlan",
    "plan_training",
    "write_plan_config",
    "load_plan_config",
]
