"""Estimate the memory of a training step from the network's own layers (fake tensors: free)."""

from __future__ import annotations

import contextlib
import copy
import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from segpipe.config import NetworkConfig, to_dict
from segpipe.device import autocast
from segpipe.errors import ConfigError
from segpipe.memory.counting import LiveTensorTracker, SavedTensorMeter
from segpipe.memory.sizes import optimizer_state_bytes, parse_size

__all__ = ["LayerOutput", "MemoryEstimate", "estimate_memory", "estimate_network"]


def _dice_ce_loss(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Cross-entropy + soft Dice in fp32: the kind of loss segpipe trains with."""
    logits = logits.float()
    ce = F.cross_entropy(logits, target)
    probs = torch.softmax(logits, dim=1)
    onehot = F.one_hot(target, logits.shape[1]).movedim(-1, 1).to(probs.dtype)
    dims = tuple(range(2, logits.ndim))
    inter = (probs * onehot).sum(dims)
    denom = probs.sum(dims) + onehot.sum(dims)
    return ce + (1 - (2 * inter + 1e-5) / (denom + 1e-5)).mean()


def _sum_loss(output: Any, target: Any) -> torch.Tensor:
    return sum(t.float().sum() for t in _tensors(output))  # type: ignore[return-value]


def _tensors(output: Any) -> list[torch.Tensor]:
    from torch.utils._pytree import tree_leaves

    return [t for t in tree_leaves(output) if isinstance(t, torch.Tensor)]


_LOSSES: dict[str, Callable[[Any, Any], torch.Tensor]] = {"dice_ce": _dice_ce_loss, "sum": _sum_loss}


@dataclass(frozen=True)
class LayerOutput:
    """Output of one leaf layer during the forward pass (``bytes`` in the dtype it was produced in)."""

    name: str
    kind: str
    shape: tuple[int, ...]
    numel: int
    bytes: int
    macs: int


@dataclass
class _StepRecord:
    saved_bytes: int = 0
    saved_by_module: dict[str, int] = field(default_factory=dict)
    live_after_loss: int = 0
    peak_live: int = 0
    layers: list[LayerOutput] = field(default_factory=list)


def _layer_hooks(model: nn.Module, layers: list[LayerOutput]) -> list[Any]:
    handles = []
    for name, module in model.named_modules():
        if next(module.children(), None) is not None:
            continue

        def hook(mod: nn.Module, args: Any, output: Any, name: str = name) -> None:
            for t in _tensors(output):
                macs = 0
                weight = getattr(mod, "weight", None)
                if isinstance(mod, (nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.Linear)) and weight is not None:
                    macs = t.numel() * (weight.numel() // weight.shape[0])
                elif isinstance(mod, (nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d)) and weight is not None:
                    x = args[0]
                    macs = x.numel() * (weight.numel() // weight.shape[0])
                layers.append(
                    LayerOutput(name, type(mod).__name__, tuple(t.shape), t.numel(), t.numel() * t.element_size(), macs)
                )

        handles.append(module.register_forward_hook(hook))
    return handles


def _attribution_modules(model: nn.Module) -> dict[str, nn.Module]:
    stage_modules = getattr(model, "stage_modules", None)
    if callable(stage_modules):
        return dict(stage_modules())
    return dict(model.named_children())


def _run_step(
    model: nn.Module,
    input_shape: tuple[int, ...],
    *,
    amp: bool,
    loss: str,
    device: torch.device,
    backward: bool = True,
    record_layers: bool = False,
    track_live: bool = True,
    seed: int = 0,
) -> _StepRecord:
    """One forward (+ loss + backward) with saved-tensor counting and, optionally, live-tensor tracking."""
    record = _StepRecord()
    loss_fn = _LOSSES[loss]
    tracker = LiveTensorTracker() if track_live else None
    handles = _layer_hooks(model, record.layers) if record_layers else []
    try:
        with tracker if tracker is not None else contextlib.nullcontext():
            gen = torch.Generator(device="cpu").manual_seed(seed)
            x = torch.randn(input_shape, generator=gen).to(device)
            target = None
            if loss == "dice_ce":
                target = torch.randint(0, 2, (input_shape[0], *input_shape[2:]), generator=gen).to(device)
            meter = SavedTensorMeter(_attribution_modules(model))
            with meter, autocast(device, enabled=amp):
                output = model(x)
            for handle in handles:  # checkpointed stages run again in backward: not new outputs
                handle.remove()
            record.saved_bytes = meter.saved_bytes
            record.saved_by_module = meter.by_module
            if backward or tracker is not None:
                with autocast(device, enabled=amp):
                    value = loss_fn(output, target)
                if tracker is not None:
                    record.live_after_loss = tracker.current_bytes
                if backward:
                    value.backward()
                del value
            if tracker is not None:
                record.peak_live = tracker.peak_bytes
            del x, target, output
    finally:
        for handle in handles:
            handle.remove()
    return record


# ----------------------------------------------------------------------------- estimate
@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes one training step needs (see :func:`estimate_memory`). ``total_bytes`` is their sum."""

    input_shape: tuple[int, ...]
    amp: bool
    optimizer: str
    checkpointing: Any
    parameters: int
    parameter_bytes: int
    gradient_bytes: int
    optimizer_bytes: int
    activation_bytes: int
    io_bytes: int
    backward_bytes: int
    workspace_bytes: int
    forward_macs: int
    parameters_per_stage: dict[str, int]
    activations_per_stage: dict[str, int]
    layer_outputs: tuple[LayerOutput, ...] = ()

    @property
    def total_bytes(self) -> int:
        return sum(b for _, b in self.categories())

    @property
    def dynamic_bytes(self) -> int:
        """Bytes that scale with batch and patch; their sum is the step's tensor-level peak."""
        return self.activation_bytes + self.io_bytes + self.backward_bytes

    def categories(self) -> list[tuple[str, int]]:
        return [
            ("parameters", self.parameter_bytes),
            ("gradients", self.gradient_bytes),
            (f"optimizer state ({self.optimizer})", self.optimizer_bytes),
            ("activations saved for backward", self.activation_bytes),
            ("input, output and loss", self.io_bytes),
            ("transient peak (backward)", self.backward_bytes),
            ("workspace margin", self.workspace_bytes),
        ]

    def to_dict(self) -> dict[str, Any]:
        data = {f.name: to_dict(getattr(self, f.name)) for f in dataclasses.fields(self) if f.name != "layer_outputs"}
        data["total_bytes"] = self.total_bytes
        return data


def _fake_mode() -> Any:
    from torch._subclasses import FakeTensorMode

    return FakeTensorMode()


def _fake_copy(model: nn.Module, mode: Any) -> nn.Module:
    memo: dict[int, Any] = {}
    for p in model.parameters():
        memo[id(p)] = nn.Parameter(mode.from_tensor(p.detach()), requires_grad=p.requires_grad)
    for b in model.buffers():
        memo[id(b)] = mode.from_tensor(b)
    return copy.deepcopy(model, memo)


def _workspace(dynamic: int, fraction: float, fixed: int) -> int:
    return int(fraction * dynamic) + fixed


def estimate_memory(
    model: nn.Module,
    input_shape: Sequence[int],
    *,
    amp: bool = False,
    optimizer: str = "adamw",
    loss: str = "sum",
    workspace_fraction: float = 0.10,
    workspace_fixed: int | str = "64MiB",
) -> MemoryEstimate:
    """Estimate the memory of one training step of ``model`` on inputs of ``input_shape``.

    Works for any ``nn.Module`` taking one tensor. Parameter, gradient and optimizer bytes are
    exact. Activations are the storages autograd saves during the forward pass (each counted
    once); ``io_bytes`` is what else is alive after the loss (input, output, loss buffers);
    ``backward_bytes`` is how far the step's peak rises above that, which happens in backward
    (gradients in flight, recomputed checkpointed stages). These come from running the step on fake tensors at exactly this size,
    so nothing is computed or allocated. The workspace margin is ``workspace_fraction`` of those
    three plus ``workspace_fixed`` (allocator rounding, convolution workspaces).

    Args:
        model: the network, on any device; it is not modified.
        input_shape: full input shape including batch and channels, e.g. ``(2, 1, 96, 96, 96)``.
        amp: estimate autocast (16-bit activations) instead of fp32.
        optimizer: ``"adamw"``, ``"adam"``, ``"sgd"`` (with momentum) or ``"none"``.
        loss: ``"sum"`` (sum of the outputs) or ``"dice_ce"`` (segmentation logits ``(N, K, ...)``).
    """
    shape = tuple(int(v) for v in input_shape)
    if not shape or any(v < 1 for v in shape):
        raise ConfigError(f"input shape: expected positive sizes, got {list(shape)}")
    if loss not in _LOSSES:
        raise ConfigError(f"loss: expected one of {', '.join(_LOSSES)}, got {loss!r}")
    fixed = parse_size(workspace_fixed) if workspace_fixed not in (0, "0") else 0
    state = optimizer_state_bytes(model, optimizer)
    params = list(model.parameters())
    mode = _fake_mode()
    fake = _fake_copy(model, mode)
    fake.train()
    with mode:
        record = _run_step(fake, shape, amp=amp, loss=loss, device=torch.device("cpu"), record_layers=True)
    return _make_estimate(model, shape, record, amp, optimizer, state, params, workspace_fraction, fixed)


def _make_estimate(
    model: nn.Module,
    shape: tuple[int, ...],
    record: _StepRecord,
    amp: bool,
    optimizer: str,
    state: int,
    params: list[torch.Tensor],
    workspace_fraction: float,
    fixed: int,
) -> MemoryEstimate:
    param_bytes = sum(p.numel() * p.element_size() for p in params)
    grad_bytes = sum(p.numel() * p.element_size() for p in params if p.requires_grad)
    io_bytes = max(0, record.live_after_loss - record.saved_bytes)
    backward = max(0, record.peak_live - record.live_after_loss)
    dynamic = record.saved_bytes + io_bytes + backward
    per_stage_params = getattr(model, "parameters_per_stage", None)
    if callable(per_stage_params):
        stage_params = dict(per_stage_params())
    else:
        stage_params = {n: sum(p.numel() for p in m.parameters()) for n, m in model.named_children()}
    checkpointing = model.settings()["checkpointing"] if hasattr(model, "settings") else None
    return MemoryEstimate(
        input_shape=shape,
        amp=amp,
        optimizer=optimizer.lower(),
        checkpointing=checkpointing,
        parameters=sum(p.numel() for p in params),
        parameter_bytes=param_bytes,
        gradient_bytes=grad_bytes,
        optimizer_bytes=state,
        activation_bytes=record.saved_bytes,
        io_bytes=io_bytes,
        backward_bytes=backward,
        workspace_bytes=_workspace(dynamic, workspace_fraction, fixed),
        forward_macs=sum(layer.macs for layer in record.layers),
        parameters_per_stage=stage_params,
        activations_per_stage={k: v for k, v in record.saved_by_module.items() if v or k != "(outside)"},
        layer_outputs=tuple(record.layers),
    )


def _network_input_shape(config: NetworkConfig, patch: Sequence[int], batch: int) -> tuple[int, ...]:
    patch = tuple(int(v) for v in patch)
    if len(patch) != 3 or any(v < 1 for v in patch):
        raise ConfigError(f"patch: expected three positive sizes (x, y, z), got {list(patch)}")
    if batch < 1:
        raise ConfigError(f"batch: expected a positive integer, got {batch}")
    x, y, z = patch
    return (batch, config.in_channels, z, y, x)


def _fake_network(config: NetworkConfig, checkpointing: Any, mode: Any) -> nn.Module:
    from segpipe.model.network import UNet3D

    with mode:
        net = UNet3D.from_config(config)
    if checkpointing is not None:
        net.set_checkpointing(checkpointing)
    return net.train()


def estimate_network(
    config: NetworkConfig | None = None,
    patch: Sequence[int] = (96, 96, 96),
    batch: int = 2,
    *,
    amp: bool = False,
    optimizer: str = "adamw",
    checkpointing: Any = None,
    workspace_fraction: float = 0.10,
    workspace_fixed: int | str = "64MiB",
) -> MemoryEstimate:
    """:func:`estimate_memory` for the segpipe UNet of ``config`` (built on fake tensors: free).

    Args:
        config: network settings (defaults when ``None``).
        patch: patch size in voxels, **(x, y, z)**; the tensor is ``(batch, C, z, y, x)``.
        batch: patches per step.
        checkpointing: overrides ``config.checkpointing`` when given.
        amp, optimizer, workspace_fraction, workspace_fixed: as in :func:`estimate_memory`.
    """
    config = config or NetworkConfig()
    shape = _network_input_shape(config, patch, batch)
    mode = _fake_mode()
    net = _fake_network(config, checkpointing, mode)
    net.check_input_shape(shape)
    state = optimizer_state_bytes(net, optimizer)
    fixed = parse_size(workspace_fixed) if workspace_fixed not in (0, "0") else 0
    with mode:
        record = _run_step(net, shape, amp=amp, loss="dice_ce", device=torch.device("cpu"), record_layers=True)
    return _make_estimate(
        net, shape, record, amp, optimizer, state, list(net.parameters()), workspace_fraction, fixed
    )


