"""3D UNet built from bottleneck residual blocks, with per-stage gradient checkpointing.

The network is designed for the memory that autograd keeps for backward, which is what limits
the patch size on a small GPU:

* Bottleneck blocks (1x1x1 reduce -> 3x3x3 -> 1x1x1 expand, residual add) keep only quarter-width
  tensors inside the block. The expand convolution has no norm, so its full-width output is
  never stored; the in-place LeakyReLU after the residual add stores the block output once, and
  the next block's reduce convolution reuses that same storage.
* The decoder merges the skip connection the same way: the low-resolution input and the skip are
  each reduced (a 2x2x2 transposed convolution and a 1x1x1 convolution) before they are summed,
  and the full-width upsampled residual is added in place at the end, so the full-width sum
  ``skip + up(x)`` is never stored.
* Residual sums are in-place adds into a convolution's output (which its backward does not need),
  so no extra full-width temporaries exist during the forward pass or its recomputation.
* Gradient checkpointing wraps whole stages (``torch.utils.checkpoint``, non-reentrant), so with
  ``checkpointing="all"`` only stage boundaries and skip connections stay in memory. The output
  head runs inside the last decoder stage.

Stage names: ``enc0`` (full resolution, no downsampling) .. ``enc<depth>`` (the bottom) and
``dec<depth-1>`` .. ``dec0`` (back at full resolution). Tensors are ``(N, C, z, y, x)``; every
spatial size must be a multiple of :attr:`UNet3D.required_divisor` (``2**depth``).

Example:
    >>> import torch
    >>> net = UNet3D(base_width=8, depth=2, checkpointing="all")
    >>> net(torch.zeros(1, 1, 16, 16, 8)).shape
    torch.Size([1, 3, 16, 16, 8])
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint as _torch_checkpoint

from segpipe.config import NetworkConfig, from_dict, to_dict
from segpipe.errors import ConfigError, GeometryError

__all__ = [
    "UNet3D",
    "build_network",
    "BottleneckBlock",
    "PlainBlock",
    "DecoderBottleneck",
    "DecoderPlain",
    "ConvNormAct",
    "GroupNorm3d",
    "stage_widths",
    "load_network_config",
]


# ----------------------------------------------------------------------------- building blocks
class GroupNorm3d(nn.GroupNorm):
    """GroupNorm that stays in the input's precision under autocast.

    CUDA autocast runs ``group_norm`` in fp32, which would store an fp32 copy of every normalised
    tensor for backward (twice the bytes of the fp16 input). The kernels accumulate statistics in
    fp32 anyway, so here the op runs in the input dtype with the affine parameters cast to it.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype in (torch.float16, torch.bfloat16) and torch.is_autocast_enabled(x.device.type):
            with torch.autocast(device_type=x.device.type, enabled=False):
                weight = self.weight.to(x.dtype) if self.weight is not None else None
                bias = self.bias.to(x.dtype) if self.bias is not None else None
                return F.group_norm(x, self.num_groups, weight, bias, self.eps)
        return super().forward(x)


def _norm(kind: str, channels: int, max_groups: int) -> nn.Module:
    if kind == "instance":
        return nn.InstanceNorm3d(channels, affine=True)
    groups = max(g for g in range(1, min(max_groups, channels) + 1) if channels % g == 0)
    return GroupNorm3d(groups, channels)


class ConvNormAct(nn.Module):
    """Conv3d (no bias) -> instance/group norm -> in-place LeakyReLU."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int = 3,
        *,
        norm: str = "instance",
        norm_groups: int = 8,
        negative_slope: float = 0.01,
    ) -> None:
        super().__init__()
        if in_channels < 1 or out_channels < 1:
            raise ValueError(f"ConvNormAct: expected positive channels, got {in_channels} -> {out_channels}")
        if kernel_size % 2 != 1:
            raise ValueError(f"ConvNormAct: expected an odd kernel size, got {kernel_size}")
        self.conv = nn.Conv3d(in_channels, out_channels, kernel_size, padding=kernel_size // 2, bias=False)
        self.norm = _norm(norm, out_channels, norm_groups)
        self.act = nn.LeakyReLU(negative_slope, inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.norm(self.conv(x)))


class BottleneckBlock(nn.Module):
    """Residual bottleneck: 1x1x1 reduce -> 3x3x3 -> 1x1x1 expand, add the input, LeakyReLU.

    ``out = act(shortcut(x) + expand(cna2(cna1(x))))`` where ``cna`` is conv-norm-act at
    ``out_channels // ratio`` channels. The shortcut is the identity when the channel counts
    match, else a 1x1x1 convolution. ``first_kernel=3`` makes the reduce convolution 3x3x3 (used
    for the very first block, which reads the image itself).

    Args:
        in_channels: channels of ``x``.
        out_channels: channels of the output.
        ratio: channel reduction inside the block (4: 64 -> 16 -> 16 -> 64).
        first_kernel: kernel size of the reduce convolution (1 or 3).
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        *,
        ratio: int = 4,
        first_kernel: int = 1,
        norm: str = "instance",
        norm_groups: int = 8,
        negative_slope: float = 0.01,
    ) -> None:
        super().__init__()
        if ratio < 1:
            raise ValueError(f"BottleneckBlock: expected ratio >= 1, got {ratio}")
        mid = max(1, out_channels // ratio)
        kw = dict(norm=norm, norm_groups=norm_groups, negative_slope=negative_slope)
        self.reduce = ConvNormAct(in_channels, mid, first_kernel, **kw)
        self.conv = ConvNormAct(mid, mid, 3, **kw)
        self.expand = nn.Conv3d(mid, out_channels, 1, bias=True)
        self.shortcut: nn.Module = (
            nn.Identity() if in_channels == out_channels else nn.Conv3d(in_channels, out_channels, 1, bias=True)
        )
        self.negative_slope = negative_slope

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # In-place adds: a convolution's output is not needed for its backward, and no full-width
        # temporary is created on top of the output.
        out = self.expand(self.conv(self.reduce(x)))
        out += self.shortcut(x)
        return F.leaky_relu_(out, self.negative_slope)


class PlainBlock(nn.Module):
    """Two 3x3x3 conv-norm-act layers (the plain-convolution variant of a stage block)."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        *,
        norm: str = "instance",
        norm_groups: int = 8,
        negative_slope: float = 0.01,
    ) -> None:
        super().__init__()
        kw = dict(norm=norm, norm_groups=norm_groups, negative_slope=negative_slope)
        self.conv1 = ConvNormAct(in_channels, out_channels, 3, **kw)
        self.conv2 = ConvNormAct(out_channels, out_channels, 3, **kw)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv2(self.conv1(x))


class DecoderBottleneck(nn.Module):
    """Upsample ``x`` by 2, merge the skip and refine, with a bottleneck residual block.

    ``out = act(skip + up(x) + expand(cna(norm-act(up_reduce(x) + reduce(skip)))))``. This is a
    bottleneck block applied to ``skip + up(x)`` whose linear 1x1x1 reduce is distributed over the
    two terms, so the full-width sum is never materialised for backward.
    """

    def __init__(
        self,
        low_channels: int,
        channels: int,
        *,
        ratio: int = 4,
        norm: str = "instance",
        norm_groups: int = 8,
        negative_slope: float = 0.01,
    ) -> None:
        super().__init__()
        mid = max(1, channels // ratio)
        self.up = nn.ConvTranspose3d(low_channels, channels, kernel_size=2, stride=2, bias=True)
        self.up_reduce = nn.ConvTranspose3d(low_channels, mid, kernel_size=2, stride=2, bias=False)
        self.reduce_skip = nn.Conv3d(channels, mid, 1, bias=False)
        self.norm = _norm(norm, mid, norm_groups)
        self.act = nn.LeakyReLU(negative_slope, inplace=True)
        self.conv = ConvNormAct(mid, mid, 3, norm=norm, norm_groups=norm_groups, negative_slope=negative_slope)
        self.expand = nn.Conv3d(mid, channels, 1, bias=True)
        self.negative_slope = negative_slope

    def forward(self, x: torch.Tensor, skip: torch.Tensor) -> torch.Tensor:
        reduced = self.reduce_skip(skip)
        reduced += self.up_reduce(x)
        out = self.expand(self.conv(self.act(self.norm(reduced))))
        out += self.up(x)  # computed last, so the full-width upsampled tensor lives only briefly
        out += skip
        return F.leaky_relu_(out, self.negative_slope)


class DecoderPlain(nn.Module):
    """Upsample ``x`` by 2 (transposed conv), add the skip, then a :class:`PlainBlock`."""

    def __init__(
        self,
        low_channels: int,
        channels: int,
        *,
        norm: str = "instance",
        norm_groups: int = 8,
        negative_slope: float = 0.01,
    ) -> None:
        super().__init__()
        self.up = nn.ConvTranspose3d(low_channels, channels, kernel_size=2, stride=2, bias=True)
        self.block = PlainBlock(channels, channels, norm=norm, norm_groups=norm_groups, negative_slope=negative_slope)

    def forward(self, x: torch.Tensor, skip: torch.Tensor) -> torch.Tensor:
        merged = self.up(x)
        merged += skip
        return self.block(merged)


# ----------------------------------------------------------------------------- stages
class _EncoderStage(nn.Module):
    def __init__(self, down: nn.Module | None, blocks: list[nn.Module]) -> None:
        super().__init__()
        self.down = down
        self.blocks = nn.Sequential(*blocks)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.down is not None:
            x = self.down(x)
        return self.blocks(x)


class _DecoderStage(nn.Module):
    def __init__(self, merge: nn.Module, blocks: list[nn.Module]) -> None:
        super().__init__()
        self.merge = merge
        self.blocks = nn.Sequential(*blocks)

    def forward(self, x: torch.Tensor, skip: torch.Tensor) -> torch.Tensor:
        return self.blocks(self.merge(x, skip))


def stage_widths(config: NetworkConfig) -> list[int]:
    """Channels of encoder stages ``enc0`` .. ``enc<depth>``: ``base_width * growth**s``, capped."""
    return [min(config.max_width, int(round(config.base_width * config.growth**s))) for s in range(config.depth + 1)]


# ----------------------------------------------------------------------------- the network
class UNet3D(nn.Module):
    """3D UNet of bottleneck residual stages (or plain two-conv stages), with checkpointing.

    Keyword arguments are the fields of :class:`segpipe.config.NetworkConfig` and are validated
    the same way (:class:`ConfigError` on a bad value). Defaults: 1 input channel, 3 classes,
    depth 3 (widths 16-32-64-128), 2 bottleneck blocks per encoder stage, 1 per decoder stage,
    instance norm, no checkpointing.

    Input ``(N, in_channels, z, y, x)`` with every spatial size a multiple of
    :attr:`required_divisor`; output ``(N, num_classes, z, y, x)`` logits.

    Example:
        >>> net = UNet3D.from_config(NetworkConfig(base_width=8))
        >>> net.required_divisor, net.stage_names[:2]
        (8, ('enc0', 'enc1'))
    """

    def __init__(self, **settings: Any) -> None:
        super().__init__()
        cfg = from_dict(NetworkConfig, settings, "network")
        self.config = cfg
        widths = stage_widths(cfg)
        self.widths = tuple(widths)
        kw = dict(norm=cfg.norm, norm_groups=cfg.norm_groups, negative_slope=cfg.negative_slope)

        def block(cin: int, cout: int, first_kernel: int = 1) -> nn.Module:
            if cfg.block == "bottleneck":
                return BottleneckBlock(cin, cout, ratio=cfg.bottleneck_ratio, first_kernel=first_kernel, **kw)
            return PlainBlock(cin, cout, **kw)

        encoders = []
        for s, width in enumerate(widths):
            if s == 0:
                down = None
                blocks = [block(cfg.in_channels, width, first_kernel=3)]
            else:
                down = nn.Conv3d(widths[s - 1], width, kernel_size=2, stride=2, bias=True)
                blocks = [block(width, width)]
            blocks += [block(width, width) for _ in range(cfg.blocks_per_stage - 1)]
            encoders.append(_EncoderStage(down, blocks))
        self.encoders = nn.ModuleList(encoders)

        decoders = []
        for s in range(cfg.depth):  # decoders[s] produces resolution s
            if cfg.block == "bottleneck":
                merge: nn.Module = DecoderBottleneck(widths[s + 1], widths[s], ratio=cfg.bottleneck_ratio, **kw)
            else:
                merge = DecoderPlain(widths[s + 1], widths[s], **kw)
            decoders.append(_DecoderStage(merge, [block(widths[s], widths[s]) for _ in range(cfg.decoder_blocks - 1)]))
        self.decoders = nn.ModuleList(decoders)
        self.head = nn.Conv3d(widths[0], cfg.num_classes, kernel_size=1, bias=True)
        self._checkpointed: frozenset[str] = frozenset()
        self.set_checkpointing(cfg.checkpointing)

    # -- construction helpers
    @classmethod
    def from_config(cls, config: NetworkConfig | dict[str, Any] | None = None) -> UNet3D:
        """Build from a :class:`NetworkConfig` (or a plain dict of its fields, e.g. a model-file header)."""
        if config is None:
            config = NetworkConfig()
        elif isinstance(config, dict):
            config = from_dict(NetworkConfig, config, "network")
        elif not isinstance(config, NetworkConfig):
            raise ConfigError(f"network: expected a NetworkConfig or a mapping, got {type(config).__name__}")
        return cls(**{k: getattr(config, k) for k in NetworkConfig.__dataclass_fields__})

    def settings(self) -> dict[str, Any]:
        """JSON-able settings that rebuild this network with :meth:`from_config` (checkpointing included)."""
        data = to_dict(self.config)
        data["checkpointing"] = self._checkpointing_setting()
        return data

    # -- shape facts
    @property
    def depth(self) -> int:
        return self.config.depth

    @property
    def required_divisor(self) -> int:
        """Every spatial input size must be a multiple of this (``2**depth``)."""
        return 2**self.config.depth

    @property
    def stage_names(self) -> tuple[str, ...]:
        """``enc0`` .. ``enc<depth>``, then ``dec<depth-1>`` .. ``dec0`` (execution order)."""
        enc = [f"enc{s}" for s in range(self.depth + 1)]
        dec = [f"dec{s}" for s in reversed(range(self.depth))]
        return tuple(enc + dec)

    def stage_modules(self) -> dict[str, nn.Module]:
        """Stage name -> module (``head`` last), e.g. to count parameters per stage."""
        mods: dict[str, nn.Module] = {f"enc{s}": m for s, m in enumerate(self.encoders)}
        mods.update({f"dec{s}": self.decoders[s] for s in reversed(range(self.depth))})
        mods["head"] = self.head
        return mods

    def parameters_per_stage(self) -> dict[str, int]:
        """Stage name -> number of parameters (sums to the total)."""
        return {name: sum(p.numel() for p in m.parameters()) for name, m in self.stage_modules().items()}

    def check_input_shape(self, shape: Iterable[int]) -> None:
        """Raise :class:`GeometryError` unless ``shape`` (``(N, C, z, y, x)``) can go through the network."""
        shape = tuple(int(v) for v in shape)
        if len(shape) != 5:
            raise GeometryError(f"network input: expected 5 dimensions (N, C, z, y, x), got shape {shape}")
        if shape[1] != self.config.in_channels:
            raise GeometryError(f"network input: expected {self.config.in_channels} channel(s), got {shape[1]}")
        spatial = shape[2:]
        d = self.required_divisor
        if any(v < d or v % d for v in spatial):
            raise GeometryError(
                f"network input: expected spatial sizes that are multiples of {d} (2**depth), got {list(spatial)}"
            )
        if self.config.norm == "instance" and math.prod(v // d for v in spatial) < 2:
            raise GeometryError(
                f"network input: expected at least one spatial size >= {2 * d} (instance norm needs more than "
                f"one voxel at the bottom), got {list(spatial)}"
            )

    # -- checkpointing
    def set_checkpointing(self, mode: str | Iterable[str]) -> None:
        """Choose the stages to checkpoint: ``"none"``, ``"encoder"``, ``"all"`` or stage names."""
        names = self.stage_names
        if isinstance(mode, str):
            if mode == "none":
                chosen: set[str] = set()
            elif mode == "encoder":
                chosen = {n for n in names if n.startswith("enc")}
            elif mode == "all":
                chosen = set(names)
            elif mode in names:
                chosen = {mode}
            else:
                raise ConfigError(
                    f"network.checkpointing: expected 'none', 'encoder', 'all' or stage names from "
                    f"{', '.join(names)}, got {mode!r}"
                )
        else:
            chosen = set(mode)
            unknown = sorted(chosen - set(names))
            if unknown:
                raise ConfigError(
                    f"network.checkpointing: expected stage names from {', '.join(names)}, got {', '.join(unknown)}"
                )
        self._checkpointed = frozenset(chosen)

    @property
    def checkpointed_stages(self) -> tuple[str, ...]:
        """Names of the checkpointed stages, in execution order."""
        return tuple(n for n in self.stage_names if n in self._checkpointed)

    def _checkpointing_setting(self) -> str | list[str]:
        names = set(self.stage_names)
        if not self._checkpointed:
            return "none"
        if self._checkpointed == names:
            return "all"
        if self._checkpointed == {n for n in names if n.startswith("enc")}:
            return "encoder"
        return list(self.checkpointed_stages)

    def _run(self, name: str, fn: Callable[..., torch.Tensor], *args: torch.Tensor) -> torch.Tensor:
        if name in self._checkpointed and torch.is_grad_enabled():
            # No stochastic layers, so the RNG state need not be stashed for the recomputation.
            return _torch_checkpoint(fn, *args, use_reentrant=False, preserve_rng_state=False)
        return fn(*args)

    # -- forward
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.check_input_shape(x.shape)
        skips = []
        for s, encoder in enumerate(self.encoders):
            x = self._run(f"enc{s}", encoder, x)
            skips.append(x)
        x = skips.pop()
        for s in reversed(range(1, self.depth)):
            x = self._run(f"dec{s}", self.decoders[s], x, skips[s])
        # The head runs inside the last stage, so a checkpointed dec0 keeps no full-width output.
        return self._run("dec0", self._last_stage, x, skips[0])

    def _last_stage(self, low: torch.Tensor, skip: torch.Tensor) -> torch.Tensor:
        return self.head(self.decoders[0](low, skip))

    def extra_repr(self) -> str:
        cfg = self.config
        return (
            f"block={cfg.block}, depth={cfg.depth}, widths={list(self.widths)}, norm={cfg.norm}, "
            f"classes={cfg.num_classes}, checkpointing={self._checkpointing_setting()!r}"
        )


def build_network(config: NetworkConfig | dict[str, Any] | None = None) -> UNet3D:
    """Build the :class:`UNet3D` described by ``config`` (defaults when ``None``)."""
    return UNet3D.from_config(config)


def load_network_config(path: str | Path) -> NetworkConfig:
    """Read a :class:`NetworkConfig` from YAML: its fields at the top level, a ``network`` section, or
    a training config's ``fine.network``.

    Only that part is read, strictly (unknown keys are errors); other sections are ignored.
    """
    from segpipe.config import read_yaml_mapping

    data = read_yaml_mapping(path)
    try:
        if isinstance(data.get("fine"), dict):  # a training config: the fine stage's network
            return from_dict(NetworkConfig, data["fine"].get("network"), "fine.network")
        if "network" in data:
            return from_dict(NetworkConfig, data["network"], "network")
        return from_dict(NetworkConfig, data)
    except ConfigError as err:
        raise ConfigError(f"{path}: {err}") from err
