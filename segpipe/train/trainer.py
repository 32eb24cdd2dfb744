"""Training of one stage (the coarse localiser or the fine per-lung segmenter): :func:`train_stage`.

One code path for a laptop CPU and a GPU cluster: Dice + cross-entropy (MONAI), AdamW or SGD
with warm-up and a poly or cosine schedule, gradient clipping, AMP (fp16 + GradScaler on CUDA,
bf16 on the CPU), gradient checkpointing and accumulation, non-finite steps skipped and counted,
DistributedDataParallel when launched by ``torchrun`` (nccl on CUDA, gloo on the CPU), atomic
checkpoints (latest and best by validation Dice), exact resume, a metrics log (JSON lines) and
a training-curve picture. The whole run (data preparation, both stages, the model file) is
:func:`segpipe.train.run.train`.

Determinism: patch ``i`` of epoch ``e`` depends only on ``(seed, e, i)`` (see
:class:`segpipe.train.patches.PatchDataset`), checkpoints are taken at epoch ends, and resuming from one
continues exactly as an uninterrupted run would (same weights on the CPU).
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from segpipe.config import NetworkConfig, StageConfig, TrainConfig, from_dict, to_dict
from segpipe.errors import ConfigError, SegpipeError
from segpipe.model import DEFAULT_MODEL, StageHeader
from segpipe.train.cache import CachedVolume
from segpipe.train.patches import PatchDataset

__all__ = [
    "TrainingError",
    "train_stage",
    "EpochShardSampler",
    "lr_factor",
]

log = logging.getLogger("segpipe")


class TrainingError(SegpipeError):
    """Training cannot go on (e.g. too many non-finite steps in a row)."""



# ----------------------------------------------------------------------------- distributed
@dataclass(frozen=True)
class _Dist:
    rank: int = 0
    world: int = 1
    local_rank: int = 0

    @property
    def main(self) -> bool:
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        return self.world > 1


def gpu_processes_message(processes: int, gpus: int) -> str:
    """The error for more DDP processes on CUDA than GPUs."""
    fix = f"--nproc {gpus}" if gpus > 1 else "one process" if gpus == 1 else "a machine with GPUs"
    return f"--nproc {processes} on CUDA needs one GPU per process and this machine has {gpus}: use {fix}, or --device cpu (DDP over gloo)"


def _init_distributed(device_type: str) -> _Dist:
    """Join the process group when launched by torchrun (WORLD_SIZE > 1). On CUDA each process
    takes the GPU of its local rank before NCCL starts (its first collective would otherwise
    guess the device); a local rank without a GPU of that index is a configuration error.
    ``segpipe train --nproc`` refuses more processes than GPUs before launching (NCCL does not
    put two ranks on one GPU)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return _Dist()
    import torch
    import torch.distributed as dist

    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if device_type == "cuda":
        gpus = torch.cuda.device_count()
        local_world = int(os.environ.get("LOCAL_WORLD_SIZE", str(world)))
        if local_rank >= gpus:  # (a launcher may map ranks onto fewer GPUs itself: benchmarks/gpu_check.py)
            raise ConfigError(gpu_processes_message(local_world, gpus))
        torch.cuda.set_device(local_rank)
    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if device_type == "cuda" else "gloo")
    return _Dist(rank=dist.get_rank(), world=dist.get_world_size(), local_rank=local_rank)


def _barrier(dist_info: _Dist) -> None:
    if dist_info.enabled:
        import torch.distributed as dist

        dist.barrier()


def _all_true(flag: bool, dist_info: _Dist, device: Any) -> bool:
    """Whether ``flag`` holds on every rank (so all ranks skip or step together)."""
    if not dist_info.enabled:
        return flag
    import torch
    import torch.distributed as dist

    t = torch.tensor([1 if flag else 0], device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MIN)
    return bool(t.item())


class EpochShardSampler:
    """Indices ``epoch * length + i`` for this rank's share of ``range(length)``.

    The epoch travels inside the index, so patch sampling stays deterministic with persistent
    DataLoader workers (which never see ``set_epoch`` on the dataset); each rank takes every
    ``world``-th item (a distributed sampler without padding: ``length`` is a multiple of the
    batch size times the world size).
    """

    def __init__(self, length: int, rank: int = 0, world: int = 1) -> None:
        self.length, self.rank, self.world = int(length), int(rank), int(world)
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def __iter__(self) -> Iterator[int]:
        base = self.epoch * self.length
        return iter(range(base + self.rank, base + self.length, self.world))

    def __len__(self) -> int:
        return len(range(self.rank, self.length, self.world))


class _EpochIndexed:
    """Wraps a PatchDataset so item ``epoch * length + i`` is patch ``i`` of ``epoch``."""

    def __init__(self, dataset: PatchDataset) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> dict:
        epoch, i = divmod(int(index), len(self.dataset))
        self.dataset.epoch = epoch
        return self.dataset[i]



# ----------------------------------------------------------------------------- optimisation
def _make_optimizer(params: Any, cfg: TrainConfig, lr: float) -> Any:
    import torch

    o = cfg.optim
    if o.optimizer == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=o.momentum, nesterov=True, weight_decay=o.weight_decay)
    if o.optimizer == "adam":
        return torch.optim.Adam(params, lr=lr, weight_decay=o.weight_decay)
    return torch.optim.AdamW(params, lr=lr, weight_decay=o.weight_decay)


def lr_factor(step: int, total: int, warmup: int, schedule: str) -> float:
    """Learning-rate multiplier at optimiser step ``step`` of ``total``: linear warm-up over
    ``warmup`` steps, then poly (power 0.9), cosine, or constant."""
    if warmup and step < warmup:
        return (step + 1) / warmup
    if schedule == "constant":
        return 1.0
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    if schedule == "cosine":
        return 0.5 * (1 + math.cos(math.pi * progress))
    return (1 - progress) ** 0.9


def class_targets(label: Any, num_classes: int) -> Any:
    """Training targets for a network with ``num_classes`` outputs: 3 keeps background /
    right / left; 2 trains "lung vs background" (both lungs are class 1; inference decides
    the sides from physical geometry, so a 2-class network does not spend capacity on them)."""
    return (label > 0).to(label.dtype) if num_classes == 2 else label


# ----------------------------------------------------------------------------- validation
def evaluate(
    model: Any, volumes: list[CachedVolume], stage: StageConfig, cfg: TrainConfig, device: Any
) -> dict[str, float]:
    """Mean Dice per lung over ``volumes`` (whole cached volumes, sliding window), scored as
    inference uses each stage: the coarse stage's lung is sided by geometry
    (:func:`segpipe.refine.split_sides`); a fine crop is scored on lung vs background,
    under the side of the lung it was cut around. A decoy crop (:func:`segpipe.train.cache.decoy_boxes`:
    no lung of its side in it) adds no Dice: ``decoy_ml`` is the mean lung it was given (mL)."""
    from segpipe.metrics import dice
    from segpipe.model import any_lung, sliding_window_probs
    from segpipe.refine import split_sides

    model.eval()
    scores: dict[str, list[float]] = {"right": [], "left": []}
    decoy_ml: list[float] = []
    for vol in volumes:
        image, label = vol.load()
        label = np.asarray(label)
        lung = any_lung(sliding_window_probs(model, np.asarray(image), stage, cfg.intensity.window_hu, device))
        if "_fine_decoy_" in vol.image.name:
            decoy_ml.append(float(np.count_nonzero(lung & (label == 0))) * float(np.prod(vol.spacing_xyz)) / 1000.0)
            continue
        if "_fine_" in vol.image.name:
            side = "right" if "_fine_right" in vol.image.name else "left"
            scores[side].append(dice(lung, label > 0))
            continue
        sided = split_sides(lung)
        for side, value in (("right", 1), ("left", 2)):
            if (label == value).any() or (sided == value).any():
                scores[side].append(dice(sided == value, label == value))
    model.train()
    out = {f"dice_{k}": float(np.mean(v)) if v else float("nan") for k, v in scores.items()}
    present = [v for v in out.values() if not math.isnan(v)]
    out["dice_mean"] = float(np.mean(present)) if present else float("nan")
    if decoy_ml:
        out["decoy_ml"] = float(np.mean(decoy_ml))
    return out


# ----------------------------------------------------------------------------- one stage
def _checkpoint_paths(run_dir: Path, stage: str) -> tuple[Path, Path]:
    return run_dir / f"{stage}_latest.pt", run_dir / f"{stage}_best.pt"


def initial_weights(model_file: str, stage_name: str, settings: dict[str, Any], cfg: TrainConfig | None = None) -> dict[str, Any]:
    """The ``stage_name`` weights of a segpipe model file (``"default"``: the bundled one) for
    fine-tuning; raises ConfigError when its network settings differ from ``settings`` or
    (given ``cfg``) when it was trained at other spacings or another intensity window."""
    from segpipe.model import load_model

    path = DEFAULT_MODEL if model_file == "default" else Path(model_file)
    header, weights = load_model(path)
    if cfg is not None:
        key = f"{stage_name}_mm"
        for name, ours, theirs in (
            (f"spacing.{key}", list(getattr(cfg.spacing, key)), list(getattr(header.spacing, key))),
            ("intensity.window_hu", list(cfg.intensity.window_hu), list(header.intensity.window_hu)),
        ):
            if [float(v) for v in theirs] != [float(v) for v in ours]:
                raise ConfigError(f"init_model: {path} was trained with {name} {theirs}, the config has {ours}; use the same")
    theirs = to_dict(header.stage(stage_name).network)
    if theirs != settings:
        diff = sorted(k for k in set(settings) | set(theirs) if theirs.get(k) != settings.get(k))
        raise ConfigError(
            f"init_model: the {stage_name} network of {path} differs from the config's ({', '.join(diff)}); "
            f"use the same {stage_name}.network settings as that model"
        )
    return weights[stage_name]


def _stage_header(stage_name: str, stage: StageConfig, model: Any) -> StageHeader:
    return StageHeader(
        network=from_dict(NetworkConfig, model.settings(), f"{stage_name}.network"), patch_xyz=stage.patch_xyz,
        batch_size=stage.batch_size, amp=stage.amp, overlap=stage.overlap, stage=stage_name,
    )


def train_stage(
    stage_name: str,
    cfg: TrainConfig,
    train_vols: list[CachedVolume],
    val_vols: list[CachedVolume],
    run_dir: Path,
    *,
    resume: bool = False,
    progress: bool = True,
    max_epochs: int | None = None,
) -> dict[str, Any]:
    """Train one stage; returns its best state dict, best validation scores and history.

    ``max_epochs`` stops early (after that many epochs in total) without changing the
    schedule: used to test that resume continues exactly.
    """
    import torch
    from monai.losses import DiceCELoss
    from torch import nn

    from segpipe.device import autocast, fast_layout, make_grad_scaler, resolve_device, use_amp
    from segpipe.memory import MemoryRecorder
    from segpipe.model import atomic_torch_save, build_network

    stage: StageConfig = getattr(cfg, stage_name)
    device = resolve_device(cfg.device)
    dist_info = _init_distributed(device.type)
    if dist_info.enabled and device.type == "cuda":
        device = torch.device("cuda", dist_info.local_rank)
        torch.cuda.set_device(device)
    torch.manual_seed(cfg.seed)
    model = fast_layout(build_network(stage.network).to(device), device)  # channels-last on the CPU
    if cfg.init_model and not (resume and _checkpoint_paths(run_dir, stage_name)[0].is_file()):
        model.load_state_dict(initial_weights(cfg.init_model, stage_name, model.settings(), cfg))
        if dist_info.main:
            log.info("%s stage starts from the weights in %s", stage_name, cfg.init_model)
    train_model: nn.Module = model
    if dist_info.enabled:
        train_model = nn.parallel.DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    optimizer = _make_optimizer(model.parameters(), cfg, stage.lr)
    total_steps = stage.epochs * stage.steps_per_epoch
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: lr_factor(s, total_steps, cfg.optim.warmup_steps, cfg.optim.schedule)
    )
    amp = use_amp(device, stage.amp)  # bf16 on a CPU without native bf16 would be ~25x slower
    scaler = make_grad_scaler(device, amp)
    loss_fn = DiceCELoss(to_onehot_y=True, softmax=True, squared_pred=False, smooth_nr=1e-5, smooth_dr=1e-5)

    per_rank_batch = stage.batch_size
    items = stage.steps_per_epoch * stage.accumulation * per_rank_batch * dist_info.world
    dataset = PatchDataset(
        train_vols, stage.patch_xyz, items, cfg.intensity.window_hu, stage.fg_fraction,
        augment=cfg.augment, spacing_jitter=stage.spacing_jitter, seed=cfg.seed + (0 if stage_name == "coarse" else 7919),
        dense_fraction=stage.dense_fraction,
    )
    sampler = EpochShardSampler(items, dist_info.rank, dist_info.world)
    workers = cfg.data.num_workers
    loader = torch.utils.data.DataLoader(
        _EpochIndexed(dataset), batch_size=per_rank_batch, sampler=sampler, num_workers=workers,
        pin_memory=device.type == "cuda", persistent_workers=workers > 0, drop_last=True,
    )

    latest_path, best_path = _checkpoint_paths(run_dir, stage_name)
    start_epoch, global_step = 0, 0
    best: dict[str, float] = {"dice_mean": -1.0}
    history: list[dict[str, Any]] = []
    nonfinite_total = 0
    if resume and latest_path.is_file():
        ck = torch.load(latest_path, map_location="cpu", weights_only=True)
        saved_cfg = json.loads(ck["stage_config"])
        if saved_cfg != to_dict(stage):
            raise ConfigError(f"--resume: the {stage_name} settings differ from the checkpoint's; use the same config")
        model.load_state_dict(ck["model"])
        optimizer.load_state_dict(ck["optimizer"])
        scheduler.load_state_dict(ck["scheduler"])
        scaler.load_state_dict(ck["scaler"])
        torch.set_rng_state(ck["torch_rng"])
        start_epoch, global_step = int(ck["epoch"]) + 1, int(ck["global_step"])
        best = json.loads(ck["best"])
        history = json.loads(ck["history"])
        nonfinite_total = int(ck["nonfinite_total"])
        if dist_info.main:
            log.info("resuming %s stage at epoch %d (step %d)", stage_name, start_epoch + 1, global_step)

    recorder = MemoryRecorder(device, count_saved=device.type != "cuda")
    metrics_path = run_dir / "metrics.jsonl"
    last_epoch = stage.epochs if max_epochs is None else min(stage.epochs, max_epochs)
    consecutive_bad = 0
    for epoch in range(start_epoch, last_epoch):
        sampler.set_epoch(epoch)
        train_model.train()
        losses: list[float] = []
        skipped = 0
        t_epoch = time.perf_counter()
        pending = 0
        optimizer.zero_grad(set_to_none=True)
        batches: Any = loader
        if progress and dist_info.main:
            from tqdm.auto import tqdm

            batches = tqdm(loader, desc=f"{stage_name} {epoch + 1}/{stage.epochs}", unit="batch", leave=False)
        data_wait = 0.0
        t_ready = time.perf_counter()
        for batch in batches:
            data_wait += time.perf_counter() - t_ready
            x = batch["image"].to(device, non_blocking=True)
            y = class_targets(batch["label"].to(device, non_blocking=True)[:, None], stage.network.num_classes)
            sync = pending + 1 == stage.accumulation
            ctx = train_model.no_sync() if dist_info.enabled and not sync else contextlib.nullcontext()
            with ctx, recorder.step():
                with autocast(device, amp):
                    logits = train_model(x)
                loss = loss_fn(logits.float(), y)
                finite = _all_true(bool(torch.isfinite(loss).item()), dist_info, device)
                if finite:
                    scaler.scale(loss / stage.accumulation).backward()
            if not finite:
                skipped += 1
                consecutive_bad += 1
                optimizer.zero_grad(set_to_none=True)
                pending = 0
                _check_nonfinite(consecutive_bad, cfg.optim.max_nonfinite, stage_name, global_step)
                t_ready = time.perf_counter()
                continue
            losses.append(float(loss.item()))
            pending += 1
            if pending < stage.accumulation:
                t_ready = time.perf_counter()
                continue
            pending = 0
            scaler.unscale_(optimizer)
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.optim.grad_clip)
            if _all_true(bool(torch.isfinite(norm).item()), dist_info, device):
                scaler.step(optimizer)
                consecutive_bad = 0
            else:
                skipped += 1
                consecutive_bad += 1
            scaler.update()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            global_step += 1
            _check_nonfinite(consecutive_bad, cfg.optim.max_nonfinite, stage_name, global_step)
            t_ready = time.perf_counter()
        nonfinite_total += skipped
        epoch_time = time.perf_counter() - t_epoch

        if dist_info.main:
            validate = bool(val_vols) and ((epoch + 1) % stage.val_every == 0 or epoch + 1 == stage.epochs)
            scores = evaluate(model, val_vols, stage, cfg, device) if validate else {}
            peak = recorder.peak()
            row = {
                "stage": stage_name, "epoch": epoch + 1, "step": global_step,
                "loss": float(np.mean(losses)) if losses else float("nan"),
                "lr": float(optimizer.param_groups[0]["lr"]),
                "step_time_s": epoch_time / max(1, len(losses)),
                "data_wait_share": data_wait / max(epoch_time, 1e-9),
                "nonfinite_skipped": skipped,
                "peak_saved_bytes": peak.saved_bytes if peak else None,
                "peak_rss_bytes": peak.peak_rss_bytes if peak else None,
                "cuda_max_allocated": peak.cuda_max_allocated if peak else None,
                **scores,
                "time": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            }
            recorder.history.clear()
            history.append(row)
            with metrics_path.open("a") as fh:
                fh.write(json.dumps(row) + "\n")
            improved = scores.get("dice_mean", float("nan"))
            # without validation data the latest weights are the best known
            is_best = not val_vols or (validate and not math.isnan(improved) and improved > best.get("dice_mean", -1.0))
            if is_best:
                best = {k: v for k, v in scores.items()} or {"dice_mean": float("nan")}
                best["epoch"] = epoch + 1
                stage_header = json.dumps(_stage_header(stage_name, stage, model).to_dict())
                atomic_torch_save({"model": model.state_dict(), "header": stage_header}, best_path)
            atomic_torch_save(
                {
                    "model": model.state_dict(), "optimizer": optimizer.state_dict(),
                    "scheduler": scheduler.state_dict(), "scaler": scaler.state_dict(),
                    "torch_rng": torch.get_rng_state(), "epoch": epoch, "global_step": global_step,
                    "best": json.dumps(best), "history": json.dumps(history),
                    "nonfinite_total": nonfinite_total, "stage_config": json.dumps(to_dict(stage)),
                },
                latest_path,
            )
            try:
                from segpipe.report import training_curves

                training_curves(metrics_path, run_dir / "curves.png")
            except ImportError:  # matplotlib is a dependency; a broken install must not stop training
                pass
            dice_text = (
                f"dice right {scores['dice_right']:.4f} left {scores['dice_left']:.4f}" if scores else "not validated"
            ) + (f", decoys {scores['decoy_ml']:.1f} mL of lung" if "decoy_ml" in scores else "")
            log.info(
                "%s epoch %d/%d: loss %.4f, %s, %.2f s/step",
                stage_name, epoch + 1, stage.epochs, row["loss"], dice_text, row["step_time_s"],
            )
        _barrier(dist_info)
    best_state = model.state_dict()
    if best_path.is_file():
        best_state = torch.load(best_path, map_location="cpu", weights_only=True)["model"]
    return {"state_dict": best_state, "best": best, "history": history, "header": _stage_header(stage_name, stage, model),
            "nonfinite_total": nonfinite_total}


def _check_nonfinite(consecutive: int, limit: int, stage: str, step: int) -> None:
    if consecutive >= limit:
        raise TrainingError(
            f"{stage} stage: {consecutive} non-finite losses or gradients in a row at step {step}; "
            "lower the learning rate (fine.lr / coarse.lr), turn off AMP, or check the data"
        )

