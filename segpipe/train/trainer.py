"""Training of the two stages: the coarse localiser and the fine per-lung segmenter.

One code path for a laptop CPU and a GPU cluster: Dice + cross-entropy (MONAI), AdamW or SGD
with warm-up and a poly or cosine schedule, gradient clipping, AMP (fp16 + GradScaler on CUDA,
bf16 on the CPU), gradient checkpointing and accumulation, non-finite steps skipped and counted,
DistributedDataParallel when launched by ``torchrun`` (nccl on CUDA, gloo on the CPU), atomic
checkpoints (latest and best by validation Dice), exact resume, a metrics log (JSON lines) and
a training-curve picture. The result is one model file holding both stages
(:mod:`segpipe.model.file`).

Determinism: patch ``i`` of epoch ``e`` depends only on ``(seed, e, i)`` (see
:class:`segpipe.train.data.PatchDataset`), checkpoints are taken at epoch ends, and resuming from one
continues exactly as an uninterrupted run would (same weights on the CPU).

Example:
    >>> from segpipe.config import TrainConfig
    >>> result = train(TrainConfig(), data_dir="data_samples/train_96", run_dir="runs/demo")  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import dataclasses
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
from segpipe.model import DEFAULT_MODEL, ModelHeader, StageHeader
from segpipe.train import data as data_mod

__all__ = [
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

log = logging.getLogger("segpipe")

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "data_samples" / "train_96"


class TrainingError(SegpipeError):
    """Training cannot go on (e.g. too many non-finite steps in a row)."""


@dataclass
class TrainResult:
    """What :func:`train` produced."""

    run_dir: Path
    model_path: Path | None
    best: dict[str, dict[str, float]]
    history: list[dict[str, Any]]


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


def _init_distributed(device_type: str) -> _Dist:
    """Join the process group when launched by torchrun (WORLD_SIZE > 1)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return _Dist()
    import torch.distributed as dist

    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if device_type == "cuda" else "gloo")
    return _Dist(rank=dist.get_rank(), world=dist.get_world_size(), local_rank=int(os.environ.get("LOCAL_RANK", "0")))


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

    def __init__(self, dataset: data_mod.PatchDataset) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> dict:
        epoch, i = divmod(int(index), len(self.dataset))
        self.dataset.epoch = epoch
        return self.dataset[i]


# ----------------------------------------------------------------------------- data
def split_cases(names: list[str], val_fraction: float, seed: int) -> tuple[list[str], list[str]]:
    """Deterministic train/validation split by name: at least one case of each when there
    are two or more cases and ``val_fraction`` > 0."""
    names = sorted(names)
    if val_fraction <= 0 or len(names) < 2:
        return names, []
    rng = np.random.default_rng(seed)
    order = list(rng.permutation(len(names)))
    n_val = min(len(names) - 1, max(1, int(round(val_fraction * len(names)))))
    val = sorted(names[i] for i in order[:n_val])
    return [n for n in names if n not in val], val


def prepare_data(
    cfg: TrainConfig, data_dir: str | Path | None, cache_dir: str | Path, *, progress: bool = False
) -> tuple[list[data_mod.CachedCase], list[data_mod.CachedCase], dict[str, Any]]:
    """Discover, validate and cache the dataset (plus ``cfg.data.extra_phantoms`` generated
    phantoms); return (train cases, validation cases, a summary for the model file)."""
    root = Path(data_dir) if data_dir is not None else DEFAULT_DATA
    if data_dir is None and not root.is_dir():
        raise data_mod.DatasetError(
            f"no --data given and the bundled sample data ({root}) is not there (installed without the "
            "source tree?); pass --data DIR"
        )
    cases = data_mod.discover(root)
    if cfg.data.extra_phantoms:
        from segpipe import synthetic

        overrides: dict[str, Any] = dict(cfg.data.phantom_pathology.overrides())
        coverage = cfg.data.phantom_coverage.weights()
        tag = "".join(f"_{k}{v:g}" for k, v in sorted({**overrides, **coverage}.items()))
        if coverage:
            overrides["coverage_weights"] = coverage
        size = "x".join(map(str, cfg.data.phantom_size_xyz))
        phantom_dir = Path(cache_dir) / f"phantoms_seed{cfg.data.phantom_seed}_n{cfg.data.extra_phantoms}_{size}{tag}"
        if not (phantom_dir / "dataset.json").is_file():
            synthetic.write_dataset(
                phantom_dir, cfg.data.extra_phantoms, seed=cfg.data.phantom_seed,
                progress=progress, size_xyz=cfg.data.phantom_size_xyz, **overrides,
            )
        extra = data_mod.discover(phantom_dir)
        cases += [dataclasses.replace(c, name=f"phantom-{c.name}") for c in extra]
    data_mod.validate_cases(cases, progress=progress)
    cached = data_mod.build_cache(
        cases, Path(cache_dir),
        coarse_spacing_mm=cfg.spacing.coarse_mm, fine_spacing_mm=cfg.spacing.fine_mm,
        margin_mm=cfg.data.margin_mm, coarse_size_xyz=cfg.spacing.coarse_size_xyz, progress=progress,
    )
    train_names, val_names = split_cases([c.name for c in cached], cfg.data.val_fraction, cfg.seed)
    train_cases = [c for c in cached if c.name in train_names]
    val_cases = [c for c in cached if c.name in val_names]
    summary = {
        "source": str(root),
        "cases": len(cached),
        "extra_phantoms": cfg.data.extra_phantoms,
        "train": train_names,
        "validation": val_names,
    }
    return train_cases, val_cases, summary


def _stage_volumes(cases: list[data_mod.CachedCase], stage: str) -> list[data_mod.CachedVolume]:
    if stage == "coarse":
        return [c.coarse for c in cases]
    return [v for c in cases for v in c.fine.values()]


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
    model: Any, volumes: list[data_mod.CachedVolume], stage: StageConfig, cfg: TrainConfig, device: Any
) -> dict[str, float]:
    """Mean Dice per lung over ``volumes`` (whole cached volumes, sliding window), scored as
    inference uses each stage: the coarse stage's lung is sided by geometry
    (:func:`segpipe.refine.split_sides`); a fine crop is scored on lung vs background,
    under the side of the lung it was cut around."""
    from segpipe.metrics import dice
    from segpipe.model import any_lung, sliding_window_probs
    from segpipe.refine import split_sides

    model.eval()
    scores: dict[str, list[float]] = {"right": [], "left": []}
    for vol in volumes:
        image, label = vol.load()
        label = np.asarray(label)
        lung = any_lung(sliding_window_probs(model, np.asarray(image), stage, cfg.intensity.window_hu, device))
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
    train_vols: list[data_mod.CachedVolume],
    val_vols: list[data_mod.CachedVolume],
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
    dataset = data_mod.PatchDataset(
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
            )
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


# ----------------------------------------------------------------------------- both stages
def train(
    cfg: TrainConfig,
    *,
    data_dir: str | Path | None = None,
    run_dir: str | Path,
    resume: bool = False,
    progress: bool = True,
    max_epochs: int | None = None,
) -> TrainResult:
    """Train ``cfg.stages`` (both by default) and write ``run_dir/model.pt``.

    Args:
        cfg: the training configuration.
        data_dir: dataset folder (Decathlon, nnU-Net raw or images/+labels/); the bundled
            ``data_samples/train_96`` when ``None``.
        run_dir: output folder: checkpoints, ``metrics.jsonl``, ``curves.png``, ``model.pt``,
            ``config.yaml``; the preprocessing cache goes to ``cfg.data.cache_dir`` or
            ``run_dir/cache``.
        resume: continue from ``run_dir``'s latest checkpoints (same config required).
        progress: progress bars.
        max_epochs: stop each stage after this many epochs in total (for tests).
    """
    import yaml

    from segpipe.device import resolve_device
    from segpipe.model import save_model

    stages = ("coarse", "fine") if cfg.stages == "both" else (cfg.stages,)
    if cfg.init_model:  # fail before the data are prepared
        from segpipe.model import build_network

        for stage_name in stages:
            initial_weights(cfg.init_model, stage_name, build_network(getattr(cfg, stage_name).network).settings(), cfg)
    dist_info = _init_distributed(resolve_device(cfg.device).type)
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    config_path = run_dir / "config.yaml"
    resolved = to_dict(cfg)
    if resume and config_path.is_file():
        previous = yaml.safe_load(config_path.read_text())
        if from_dict(TrainConfig, previous) != cfg:
            raise ConfigError(f"--resume: {config_path} differs from the given config; resume with the same settings")
    cache_dir = Path(cfg.data.cache_dir) if cfg.data.cache_dir else run_dir / "cache"
    if dist_info.main:
        tmp = config_path.with_suffix(".tmp")
        tmp.write_text(yaml.safe_dump(resolved, sort_keys=False))
        tmp.replace(config_path)
        if not resume:
            (run_dir / "metrics.jsonl").unlink(missing_ok=True)
        train_cases, val_cases, summary = prepare_data(cfg, data_dir, cache_dir, progress=progress)
    _barrier(dist_info)
    if not dist_info.main:  # the cache is built by now: every other rank only reads it
        train_cases, val_cases, summary = prepare_data(cfg, data_dir, cache_dir, progress=False)
    results: dict[str, dict[str, Any]] = {}
    for stage_name in stages:
        vols = _stage_volumes(train_cases, stage_name)
        if not vols:
            raise TrainingError(f"{stage_name} stage: no training volumes (no lungs in the training labels?)")
        results[stage_name] = train_stage(
            stage_name, cfg, vols, _stage_volumes(val_cases, stage_name), run_dir,
            resume=resume, progress=progress, max_epochs=max_epochs,
        )
    history = [row for r in results.values() for row in r["history"]]
    best = {k: r["best"] for k, r in results.items()}
    model_path = None
    if dist_info.main:
        weights: dict[str, Any] = {}
        headers: dict[str, StageHeader] = {}
        for stage_name in ("coarse", "fine"):
            if stage_name in results:
                weights[stage_name] = results[stage_name]["state_dict"]
                headers[stage_name] = results[stage_name]["header"]
            else:  # a stage trained earlier in this run folder, else the init model's
                import torch

                path = _checkpoint_paths(run_dir, stage_name)[1]
                if path.is_file():
                    ck = torch.load(path, map_location="cpu", weights_only=True)
                    weights[stage_name] = ck["model"]
                    headers[stage_name] = StageHeader.from_dict(json.loads(ck["header"]), stage_name)
                elif cfg.init_model:
                    from segpipe.model import load_model

                    init_header, init_weights = load_model(DEFAULT_MODEL if cfg.init_model == "default" else cfg.init_model)
                    weights[stage_name] = init_weights[stage_name]
                    headers[stage_name] = init_header.stage(stage_name)
                    log.info("%s stage taken unchanged from %s", stage_name, cfg.init_model)
        if len(weights) == 2:
            from segpipe.refine import RuleSet

            header = ModelHeader(
                coarse=headers["coarse"],
                fine=headers["fine"],
                spacing=cfg.spacing,
                intensity=cfg.intensity,
                margin_mm=cfg.data.margin_mm,
                labels={str(k): v for k, v in data_mod.LABELS.items()},
                refine=RuleSet().to_dict(),  # the clean-up rules this segpipe runs, so the file gives the same masks later
                train_config=resolved,
                training_data=summary,
                validation=best,
                created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
            )
            model_path = save_model(run_dir / "model.pt", header, weights)
        else:
            log.warning("model.pt not written: it needs both stages; train the other stage into %s", run_dir)
    return TrainResult(run_dir, model_path, best, history)


def apply_memory_plan(cfg: TrainConfig, gpu_memory: str) -> tuple[TrainConfig, Any]:
    """Run :func:`segpipe.memory.plan_training` for the fine stage and put its patch, batch,
    accumulation, checkpointing and AMP choice into ``cfg``; returns (new config, plan)."""
    from segpipe.memory import plan_training

    plan = plan_training(
        gpu_memory, cfg.fine.network, spacing_mm=cfg.spacing.fine_mm, amp=True, optimizer=cfg.optim.optimizer
    )
    fine = dataclasses.replace(
        cfg.fine,
        network=dataclasses.replace(cfg.fine.network, checkpointing=plan.checkpointing),
        patch_xyz=tuple(plan.patch_size),  # type: ignore[arg-type]
        batch_size=plan.batch_size,
        accumulation=plan.accumulation_steps,
        amp=plan.amp,
    )
    return dataclasses.replace(cfg, fine=fine), plan
