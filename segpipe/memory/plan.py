"""Plan patch size, batch size, checkpointing and accumulation for a GPU memory budget."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from segpipe.config import NetworkConfig, to_dict
from segpipe.errors import ConfigError, OutputError
from segpipe.memory.estimate import estimate_network
from segpipe.memory.sizes import format_size, optimizer_state_bytes, parse_size

__all__ = ["TrainingPlan", "plan_training", "write_plan_config", "load_plan_config"]


_CHECKPOINTING_ORDER = ("none", "encoder", "all")


@dataclass(frozen=True)
class TrainingPlan:
    """Settings chosen by :func:`plan_training`; ``patch_size``/``crop_shape`` are (x, y, z) voxels."""

    gpu_memory: str
    budget_bytes: int
    usable_bytes: int
    patch_size: tuple[int, ...]
    batch_size: int
    accumulation_steps: int
    effective_batch: int
    checkpointing: str
    amp: bool
    optimizer: str
    estimated_bytes: int
    spacing_mm: tuple[float, ...]
    crop_shape: tuple[int, ...]
    reasons: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for name in ("patch_size", "spacing_mm", "crop_shape"):
            if len(getattr(self, name)) != 3:
                raise ConfigError(f"plan.{name}: expected three values (x, y, z), got {list(getattr(self, name))}")

    def to_dict(self) -> dict[str, Any]:
        return {f.name: to_dict(getattr(self, f.name)) for f in dataclasses.fields(self)}

    def describe(self) -> str:
        """The chosen settings and the reasons, as ``segpipe plan`` prints them."""
        lines = [
            f"gpu memory        {self.gpu_memory} ({format_size(self.budget_bytes)}, {format_size(self.usable_bytes)} usable)",
            f"patch size        {_fmt_patch(self.patch_size)} voxels (x,y,z) at {'x'.join(f'{s:g}' for s in self.spacing_mm)} mm",
            f"batch size        {self.batch_size}",
            f"accumulation      {self.accumulation_steps} (effective batch {self.effective_batch})",
            f"checkpointing     {self.checkpointing}",
            f"amp               {'on' if self.amp else 'off'}",
            f"optimizer         {self.optimizer}",
            f"estimated peak    {format_size(self.estimated_bytes)}",
            "",
            "why:",
        ]
        lines += [f"  - {reason}" for reason in self.reasons]
        return "\n".join(lines)


def _round_up(value: float, divisor: int) -> int:
    return int(math.ceil(value / divisor - 1e-9)) * divisor


def _candidate_patches(crop: tuple[int, int, int], divisor: int, minimum: int) -> list[tuple[int, int, int]]:
    """Patches keeping the crop's aspect, largest first; each axis a multiple of ``divisor``."""
    caps = tuple(_round_up(c, divisor) for c in crop)
    seen: list[tuple[int, int, int]] = []
    for k in range(0, 1001):
        scale = 1.0 - k / 1000
        patch = tuple(min(cap, max(minimum, _round_up(c * scale, divisor))) for c, cap in zip(crop, caps))
        if not seen or patch != seen[-1]:
            seen.append(patch)  # type: ignore[arg-type]
    return seen


class _Calibrated:
    """Dynamic bytes of a (checkpointing, amp) setting as ``a*N*V + b*N + c``, from three fake steps."""

    def __init__(self, config: NetworkConfig, checkpointing: str, amp: bool, optimizer: str) -> None:
        d = 2 ** config.depth
        side = max(64, 2 * d)  # the bottom stage keeps more than one voxel
        points = [(1, (side, side, side)), (1, (side, side, 2 * side)), (2, (side, side, side))]
        values = []
        for batch, patch in points:
            est = estimate_network(config, patch, batch, amp=amp, optimizer=optimizer, checkpointing=checkpointing)
            values.append(est.dynamic_bytes)
        v1, v2 = side**3, 2 * side**3
        self.a = (values[1] - values[0]) / (v2 - v1)
        self.b = values[2] - values[0] - self.a * v1
        self.c = values[0] - self.a * v1 - self.b
        self.fixed = est.parameter_bytes + est.gradient_bytes + est.optimizer_bytes

    def total(self, batch: int, patch: tuple[int, int, int], fraction: float, fixed: int) -> int:
        dynamic = self.a * batch * math.prod(patch) + self.b * batch + self.c
        return int(self.fixed + dynamic * (1 + fraction) + fixed)


@functools.lru_cache(maxsize=32)
def _calibrated(config: NetworkConfig, checkpointing: str, amp: bool, optimizer: str) -> _Calibrated:
    return _Calibrated(config, checkpointing, amp, optimizer)


@functools.lru_cache(maxsize=256)
def _exact_total(
    config: NetworkConfig,
    checkpointing: str,
    batch: int,
    patch: tuple[int, int, int],
    amp: bool,
    optimizer: str,
    workspace_fraction: float,
    workspace_fixed: int,
) -> int:
    est = estimate_network(
        config, patch, batch, amp=amp, optimizer=optimizer, checkpointing=checkpointing,
        workspace_fraction=workspace_fraction, workspace_fixed=workspace_fixed,
    )
    return est.total_bytes


def _fmt_patch(patch: Sequence[int]) -> str:
    return "x".join(str(v) for v in patch)


def plan_training(
    gpu_memory: str | int = "8GiB",
    network: NetworkConfig | None = None,
    *,
    crop_shape: Sequence[int] = (130, 180, 200),
    spacing_mm: Sequence[float] = (1.5, 1.5, 1.5),
    amp: bool = True,
    optimizer: str = "adamw",
    min_batch: int = 2,
    target_batch: int = 4,
    safety_margin: float = 0.10,
    reserved: str | int = "512MiB",
    checkpointing_options: Sequence[str] = _CHECKPOINTING_ORDER,
    workspace_fraction: float = 0.10,
    workspace_fixed: str | int = "64MiB",
) -> TrainingPlan:
    """Choose patch, batch, checkpointing and accumulation for a GPU memory budget.

    The patch keeps the crop's aspect, each axis a multiple of ``2**depth`` and at most the crop
    rounded up to one. Rule, applied in order: (1) the largest patch that fits with ``min_batch``
    under any allowed checkpointing mode, the cheapest mode on a tie; (2) the largest batch up to
    ``target_batch`` that still fits; (3) accumulation steps to reach ``target_batch``. A setting
    fits when :func:`estimate_network` (checked exactly for the final choice) stays within
    ``budget * (1 - safety_margin) - reserved`` (``reserved``: CUDA context, not seen by the
    allocator). Deterministic; more memory never gives a smaller patch.

    Args:
        gpu_memory: the card's memory, e.g. ``"8GiB"``.
        network: network settings (defaults when ``None``); its checkpointing is replaced.
        crop_shape: typical lung crop in voxels (x, y, z) at ``spacing_mm``.
        spacing_mm: the fine stage's target spacing (recorded in the plan and its reasons).

    Raises:
        ConfigError: when nothing fits, or for invalid arguments.
    """
    network = network or NetworkConfig()
    budget = parse_size(gpu_memory)
    reserve = parse_size(reserved) if reserved not in (0, "0") else 0
    fixed = parse_size(workspace_fixed) if workspace_fixed not in (0, "0") else 0
    crop = tuple(int(v) for v in crop_shape)
    spacing = tuple(float(v) for v in spacing_mm)
    if len(crop) != 3 or any(v < 1 for v in crop):
        raise ConfigError(f"crop shape: expected three positive voxel counts (x, y, z), got {list(crop)}")
    if len(spacing) != 3 or any(not v > 0 for v in spacing):
        raise ConfigError(f"spacing: expected three positive numbers (mm), got {list(spacing)}")
    if not 0 <= safety_margin < 1:
        raise ConfigError(f"safety margin: expected a fraction in [0, 1), got {safety_margin}")
    if min_batch < 1 or target_batch < min_batch:
        raise ConfigError(f"batch: expected 1 <= min_batch <= target_batch, got {min_batch} and {target_batch}")
    modes = [m for m in _CHECKPOINTING_ORDER if m in checkpointing_options]
    if not modes or len(modes) != len(set(checkpointing_options)):
        raise ConfigError(
            f"checkpointing options: expected some of {', '.join(_CHECKPOINTING_ORDER)}, got {list(checkpointing_options)}"
        )
    optimizer_state_bytes([], optimizer)  # validates the name
    usable = int(budget * (1 - safety_margin)) - reserve
    d = 2**network.depth
    minimum = 2 * d
    candidates = _candidate_patches(crop, d, minimum)  # type: ignore[arg-type]
    reasons = [
        f"budget {format_size(budget)}: keep {safety_margin:.0%} free and {format_size(reserve)} for the CUDA "
        f"context -> {format_size(usable)} usable",
        f"crop {_fmt_patch(crop)} voxels (x,y,z) at {'x'.join(f'{s:g}' for s in spacing)} mm -> patch at most "
        f"{_fmt_patch(candidates[0])} (multiples of {d} = 2**depth), same aspect as the crop",
    ]
    if usable <= 0:
        raise ConfigError(f"gpu memory: expected more than {format_size(budget - usable)}, got {format_size(budget)}")

    def fits(model: _Calibrated, batch: int, patch: tuple[int, int, int]) -> bool:
        return model.total(batch, patch, workspace_fraction, fixed) <= usable

    def exact(mode: str, batch: int, patch: tuple[int, int, int]) -> int:
        return _exact_total(network, mode, batch, patch, amp, optimizer.lower(), workspace_fraction, fixed)

    # Per mode: the calibrated (affine) model finds the largest patch quickly; the exact estimate
    # then confirms it, stepping down if the calibration was optimistic.
    best: tuple[int, int, int] | None = None  # (candidate index, mode index, exact bytes)
    models: dict[str, _Calibrated] = {}
    for mi, mode in enumerate(modes):
        models[mode] = model = _calibrated(network, mode, amp, optimizer.lower())
        index = next((i for i, p in enumerate(candidates) if fits(model, min_batch, p)), len(candidates) - 1)
        total = exact(mode, min_batch, candidates[index])
        while total > usable and index + 1 < len(candidates):
            index += 1
            total = exact(mode, min_batch, candidates[index])
        if total > usable:
            reasons.append(f"checkpointing {mode!r}: not even {_fmt_patch(candidates[-1])} fits with batch {min_batch}")
            continue
        reasons.append(
            f"checkpointing {mode!r}: largest patch with batch {min_batch} is {_fmt_patch(candidates[index])} "
            f"({format_size(total)})"
        )
        if best is None or index < best[0]:
            best = (index, mi, total)
    if best is None:
        need = exact(modes[-1], min_batch, candidates[-1])
        raise ConfigError(
            f"gpu memory: expected at least {format_size(need + budget - usable)} for batch {min_batch} at patch "
            f"{_fmt_patch(candidates[-1])}, got {format_size(budget)} (try a smaller network or min batch 1)"
        )
    index, mi, total = best
    mode = modes[mi]
    model = models[mode]
    patch = candidates[index]
    cheaper = modes[:mi]
    why = "the largest patch" if not cheaper else f"the largest patch; cheaper modes ({', '.join(cheaper)}) allow less"
    if index == 0:
        why = "the whole crop fits" + ("" if not cheaper else f"; cheaper modes ({', '.join(cheaper)}) do not")
    reasons.append(f"chose checkpointing {mode!r} and patch {_fmt_patch(patch)}: {why}")

    largest, largest_total = min_batch, total
    while largest < target_batch and fits(model, largest + 1, patch):
        next_total = exact(mode, largest + 1, patch)
        if next_total > usable:
            break
        largest, largest_total = largest + 1, next_total
    if largest < target_batch:
        reasons.append(
            f"largest batch that fits: {largest} (batch {largest + 1} would need about "
            f"{format_size(model.total(largest + 1, patch, workspace_fraction, fixed))})"
        )
    # Fewest accumulation steps for the target, then the smallest batch that still reaches it.
    accumulation = math.ceil(target_batch / largest)
    batch = max(min_batch, math.ceil(target_batch / accumulation))
    total = largest_total if batch == largest else exact(mode, batch, patch)
    if accumulation == 1:
        reasons.append(f"batch {batch}: reaches the target effective batch {target_batch} without accumulation")
    else:
        reasons.append(
            f"batch {batch} x {accumulation} accumulation steps = effective batch {batch * accumulation} "
            f"(target {target_batch})"
        )
    reasons.append(
        f"estimated peak {format_size(total)} of {format_size(usable)} usable ({total / usable:.0%}), "
        f"{'AMP' if amp else 'fp32'}, optimizer {optimizer.lower()}"
    )
    return TrainingPlan(
        gpu_memory=str(gpu_memory),
        budget_bytes=budget,
        usable_bytes=usable,
        patch_size=patch,
        batch_size=batch,
        accumulation_steps=accumulation,
        effective_batch=batch * accumulation,
        checkpointing=mode,
        amp=amp,
        optimizer=optimizer.lower(),
        estimated_bytes=total,
        spacing_mm=spacing,
        crop_shape=crop,
        reasons=tuple(reasons),
    )


def write_plan_config(plan: TrainingPlan, network: NetworkConfig, path: str | Path) -> Path:
    """Put the plan into a training config (YAML, :class:`segpipe.config.TrainConfig`): the
    ``fine`` section gets the patch, batch size, accumulation, AMP and the network with the
    plan's checkpointing. An existing file keeps everything else; the result must still be a
    valid training config. The plan's reasons go into a comment at the top. Written atomically.
    """
    import os
    import tempfile

    import yaml

    from segpipe.config import TrainConfig, from_dict

    path = Path(path)
    if not path.parent.is_dir():
        raise OutputError(f"config output: expected an existing folder, got {path.parent}")
    data: dict[str, Any] = {}
    if path.exists():
        try:
            loaded = yaml.safe_load(path.read_text())
        except (OSError, yaml.YAMLError) as err:
            raise ConfigError(f"{path}: expected a readable YAML mapping to update") from err
        if loaded is not None and not isinstance(loaded, dict):
            raise ConfigError(f"{path}: expected a mapping at the top level, got {type(loaded).__name__}")
        data = dict(loaded or {})
    fine = dict(data.get("fine") or {})
    fine["network"] = to_dict(dataclasses.replace(network, checkpointing=plan.checkpointing))
    fine.update(
        patch_xyz=list(plan.patch_size), batch_size=plan.batch_size,
        accumulation=plan.accumulation_steps, amp=plan.amp,
    )
    data["fine"] = fine
    try:
        from_dict(TrainConfig, data)
    except ConfigError as err:
        raise ConfigError(f"{path}: the result would not be a valid training config ({err})") from err
    header = "".join(f"# {line}\n" if line else "#\n" for line in plan.describe().splitlines())
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write("# fine-stage settings chosen by `segpipe plan`:\n" + header)
            yaml.safe_dump(data, handle, sort_keys=False)
        os.replace(tmp, path)
    except OSError as err:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise OutputError(f"config output: cannot write {path}: {err}") from err
    return path


def load_plan_config(path: str | Path) -> Any:
    """The fine stage (:class:`segpipe.config.StageConfig`) of a training config, e.g. one
    written by :func:`write_plan_config`."""
    from segpipe.config import TrainConfig, load_yaml

    return load_yaml(path, TrainConfig).fine
