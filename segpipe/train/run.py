"""The whole training run: :func:`train` prepares the data (discovery, validation, the cache,
the train/validation split), trains each stage (:func:`segpipe.train.trainer.train_stage`) and
writes the model file holding both stages (:mod:`segpipe.model.file`);
:func:`apply_memory_plan` sizes the fine stage for a GPU's memory.

Example:
    >>> from segpipe.config import TrainConfig
    >>> result = train(TrainConfig(), data_dir="data_samples/train_96", run_dir="runs/demo")  # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import json
import logging
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from segpipe.config import PHANTOM_KNOBS, TrainConfig, from_dict, to_dict
from segpipe.errors import ConfigError
from segpipe.model import DEFAULT_MODEL, ModelHeader, StageHeader
from segpipe.train.cache import CachedCase, CachedVolume, build_cache
from segpipe.train.dataset import LABELS, DatasetError, discover, validate_cases
from segpipe.train.trainer import (
    TrainingError,
    _barrier,
    _checkpoint_paths,
    _init_distributed,
    initial_weights,
    train_stage,
)

__all__ = [
    "TrainResult",
    "train",
    "prepare_data",
    "split_cases",
    "apply_memory_plan",
]

log = logging.getLogger("segpipe")

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "data_samples" / "train_96"


@dataclass
class TrainResult:
    """What :func:`train` produced."""

    run_dir: Path
    model_path: Path | None
    best: dict[str, dict[str, float]]
    history: list[dict[str, Any]]



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
) -> tuple[list[CachedCase], list[CachedCase], dict[str, Any]]:
    """Discover, validate and cache the dataset (plus ``cfg.data.extra_phantoms`` generated
    phantoms); return (train cases, validation cases, a summary for the model file)."""
    root = Path(data_dir) if data_dir is not None else DEFAULT_DATA
    if data_dir is None and not root.is_dir():
        raise DatasetError(
            f"no --data given and the bundled sample data ({root}) is not there (installed without the "
            "source tree?); pass --data DIR"
        )
    cases = discover(root)
    if cfg.data.extra_phantoms:
        from segpipe import synthetic

        overrides: dict[str, Any] = dict(cfg.data.phantom_pathology.overrides())
        for name in PHANTOM_KNOBS:  # data.phantom_<name>, when set
            if value := getattr(cfg.data, f"phantom_{name}"):
                overrides[name] = value
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
        extra = discover(phantom_dir)
        cases += [dataclasses.replace(c, name=f"phantom-{c.name}") for c in extra]
    workers = max(1, cfg.data.num_workers)  # the DataLoader's workers, here for checking and preprocessing
    validate_cases(cases, progress=progress, workers=workers)
    cached = build_cache(
        cases, Path(cache_dir),
        coarse_spacing_mm=cfg.spacing.coarse_mm, fine_spacing_mm=cfg.spacing.fine_mm,
        margin_mm=cfg.data.margin_mm, coarse_size_xyz=cfg.spacing.coarse_size_xyz, below_mm=cfg.data.fine_below_mm,
        decoy_mm=cfg.data.fine_decoy_mm, progress=progress, workers=workers,
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


def _stage_volumes(cases: list[CachedCase], stage: str) -> list[CachedVolume]:
    if stage == "coarse":
        return [c.coarse for c in cases]
    return [v for c in cases for v in c.fine.values()]

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
                labels={str(k): v for k, v in LABELS.items()},
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
