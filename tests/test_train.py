"""Training: exact resume, reproducibility, non-finite steps, flat memory, DDP, model file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from segpipe import train
from segpipe.config import TrainConfig, from_dict
from segpipe.errors import ModelError
from segpipe.model import load_model
from segpipe.train import run, trainer

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "data_samples" / "train_96"


def tiny_config(cache_dir: Path, **over: object) -> TrainConfig:
    stage = {
        "network": {"base_width": 4, "max_width": 16, "blocks_per_stage": 1},
        "patch_xyz": [32, 32, 32],
        "batch_size": 2,
        "epochs": 3,
        "steps_per_epoch": 2,
        "amp": False,
    }
    data = {
        "seed": 0,
        "device": "cpu",
        "stages": "coarse",
        "data": {"num_workers": 0, "val_fraction": 0.34, "cache_dir": str(cache_dir)},
        "coarse": dict(stage),
        "fine": dict(stage),
        "optim": {"warmup_steps": 1},
    }
    for key, value in over.items():
        section, _, name = key.partition("__")
        if name:
            data[section] = {**data[section], name: value}  # type: ignore[dict-item]
        else:
            data[key] = value
    return from_dict(TrainConfig, data)


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cache")


def _weights(run: Path, stage: str = "coarse") -> dict[str, torch.Tensor]:
    return torch.load(run / f"{stage}_latest.pt", map_location="cpu", weights_only=True)["model"]


def test_resume_gives_the_same_weights_as_an_uninterrupted_run(tmp_path: Path, cache_dir: Path) -> None:
    cfg = tiny_config(cache_dir)
    train.train(cfg, data_dir=SAMPLES, run_dir=tmp_path / "straight", progress=False)
    train.train(cfg, data_dir=SAMPLES, run_dir=tmp_path / "again", progress=False)
    train.train(cfg, data_dir=SAMPLES, run_dir=tmp_path / "split", progress=False, max_epochs=1)
    train.train(cfg, data_dir=SAMPLES, run_dir=tmp_path / "split", progress=False, resume=True)
    a, b, c = _weights(tmp_path / "straight"), _weights(tmp_path / "again"), _weights(tmp_path / "split")
    for name in a:
        assert torch.equal(a[name], b[name]), f"seeded runs differ at {name}"
        assert torch.equal(a[name], c[name]), f"resumed run differs at {name}"
    rows = [json.loads(x) for x in (tmp_path / "split" / "metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in rows] == [1, 2, 3]
    straight = [json.loads(x) for x in (tmp_path / "straight" / "metrics.jsonl").read_text().splitlines()]
    assert [r["loss"] for r in rows] == [r["loss"] for r in straight]
    assert (tmp_path / "straight" / "curves.png").stat().st_size > 1000


def test_resume_refuses_a_changed_config(tmp_path: Path, cache_dir: Path) -> None:
    cfg = tiny_config(cache_dir)
    train.train(cfg, data_dir=SAMPLES, run_dir=tmp_path, progress=False, max_epochs=1)
    changed = tiny_config(cache_dir, coarse__lr=0.01)
    with pytest.raises(Exception, match="resume"):
        train.train(changed, data_dir=SAMPLES, run_dir=tmp_path, progress=False, resume=True)


def test_nonfinite_losses_are_skipped_then_stop_training(
    tmp_path: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from monai.losses import DiceCELoss

    real = DiceCELoss.forward
    calls = {"n": 0}

    def every_other_nan(self, pred, target):  # type: ignore[no-untyped-def]
        calls["n"] += 1
        loss = real(self, pred, target)
        return loss * float("nan") if calls["n"] % 2 == 0 else loss

    monkeypatch.setattr(DiceCELoss, "forward", every_other_nan)
    cfg = tiny_config(cache_dir, optim={"warmup_steps": 1, "max_nonfinite": 3})
    result = train.train(cfg, data_dir=SAMPLES, run_dir=tmp_path / "some", progress=False)
    assert sum(r["nonfinite_skipped"] for r in result.history) >= 2
    assert all(torch.isfinite(t).all() for t in _weights(tmp_path / "some").values())

    monkeypatch.setattr(DiceCELoss, "forward", lambda self, p, t: real(self, p, t) * float("inf"))
    with pytest.raises(train.TrainingError, match="3 non-finite losses or gradients in a row"):
        train.train(cfg, data_dir=SAMPLES, run_dir=tmp_path / "all", progress=False)


def test_memory_is_flat_across_iterations(tmp_path: Path, cache_dir: Path) -> None:
    cfg = tiny_config(cache_dir, coarse__epochs=5, coarse__steps_per_epoch=3)
    result = train.train(cfg, data_dir=SAMPLES, run_dir=tmp_path, progress=False)
    saved = [r["peak_saved_bytes"] for r in result.history]
    assert len(set(saved)) == 1 and saved[0] > 0  # no graph kept across steps
    rss = [r["peak_rss_bytes"] for r in result.history]
    assert rss[-1] - rss[1] < 64 * 2**20  # no growth beyond allocator noise after warm-up


def test_two_class_targets_merge_the_lungs() -> None:
    label = torch.tensor([[0, 1, 2, 2]])
    assert trainer.class_targets(label, 2).tolist() == [[0, 1, 1, 1]]
    assert trainer.class_targets(label, 3).tolist() == [[0, 1, 2, 2]]


def test_the_bundled_sample_data_is_the_default() -> None:
    assert run.DEFAULT_DATA == SAMPLES


def test_lr_schedule() -> None:
    assert train.lr_factor(0, 100, 10, "poly") == pytest.approx(0.1)
    assert train.lr_factor(9, 100, 10, "poly") == pytest.approx(1.0)
    assert train.lr_factor(10, 100, 10, "poly") == pytest.approx(1.0)
    assert train.lr_factor(100, 100, 10, "poly") == pytest.approx(0.0)
    assert train.lr_factor(55, 100, 10, "cosine") == pytest.approx(0.5)
    assert train.lr_factor(80, 100, 0, "constant") == 1.0


def test_split_is_deterministic_and_keeps_both_sides() -> None:
    names = [f"c{i}" for i in range(10)]
    tr, va = train.split_cases(names, 0.2, seed=1)
    assert len(va) == 2 and sorted(tr + va) == sorted(names)
    assert train.split_cases(names, 0.2, seed=1) == (tr, va)
    assert train.split_cases(["a"], 0.5, seed=0) == (["a"], [])


def test_gpu_memory_plan_goes_into_the_fine_stage(cache_dir: Path) -> None:
    cfg, plan = train.apply_memory_plan(tiny_config(cache_dir), "4GiB")
    assert cfg.fine.patch_xyz == tuple(plan.patch_size)
    assert cfg.fine.batch_size == plan.batch_size and cfg.fine.accumulation == plan.accumulation_steps
    assert cfg.fine.network.checkpointing == plan.checkpointing


def test_two_process_ddp_on_cpu_trains_and_saves_one_model(
    tmp_path: Path, cache_dir: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import yaml

    from segpipe.config import to_dict

    cfg = tiny_config(cache_dir, stages="both", coarse__epochs=1, fine__epochs=1, coarse__batch_size=1, fine__batch_size=1)
    path = tmp_path / "ddp.yaml"
    path.write_text(yaml.safe_dump(to_dict(cfg)))
    out = tmp_path / "run"
    monkeypatch.chdir(tmp_path)
    from segpipe.cli import main

    # in-process: `segpipe train --nproc 2` relaunches this very command under torchrun
    code = main(["train", "--config", str(path), "--data", str(SAMPLES), "--out", str(out), "--nproc", "2", "--quiet"])
    captured = capfd.readouterr()
    assert code == 0, captured.err[-2000:]
    assert captured.out.count("model: ") == 1  # rank 0 alone reports and saves
    header, weights = load_model(out / "model.pt")
    assert header.coarse.network.base_width == 4 and header.coarse.stage == "coarse" and set(weights) == {"coarse", "fine"}
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [(r["stage"], r["epoch"]) for r in rows] == [("coarse", 1), ("fine", 1)]


def test_validation_every_n_epochs(tmp_path: Path, cache_dir: Path) -> None:
    cfg = tiny_config(cache_dir, coarse__epochs=3, coarse__val_every=2)
    result = train.train(cfg, data_dir=SAMPLES, run_dir=tmp_path, progress=False)
    validated = [r["epoch"] for r in result.history if "dice_mean" in r]
    assert validated == [2, 3]  # every 2nd epoch and the last
    assert result.best["coarse"]["epoch"] in (2, 3)


def test_init_model_starts_from_the_files_weights_and_checks_the_network(tmp_path: Path, cache_dir: Path) -> None:
    from segpipe.errors import ConfigError

    first = tiny_config(cache_dir, stages="both", coarse__epochs=1, fine__epochs=1)
    model = train.train(first, data_dir=SAMPLES, run_dir=tmp_path / "first", progress=False).model_path
    _, saved = load_model(model)
    # zero steps of training: the stage is exactly the file's weights
    cfg = tiny_config(cache_dir, init_model=str(model), coarse__steps_per_epoch=1, coarse__lr=1e-12, coarse__epochs=1)
    train.train(cfg, data_dir=SAMPLES, run_dir=tmp_path / "tuned", progress=False)
    tuned = _weights(tmp_path / "tuned")
    scratch_cfg = tiny_config(cache_dir, coarse__steps_per_epoch=1, coarse__lr=1e-12, coarse__epochs=1)
    train.train(scratch_cfg, data_dir=SAMPLES, run_dir=tmp_path / "scratch", progress=False)
    scratch = _weights(tmp_path / "scratch")
    conv = next(k for k in saved["coarse"] if k.endswith("weight") and saved["coarse"][k].ndim == 5)
    assert torch.allclose(tuned[conv], saved["coarse"][conv], atol=1e-6)
    assert not torch.allclose(scratch[conv], saved["coarse"][conv], atol=1e-3)
    # only the fine stage trained: the coarse one comes unchanged from the init model
    fine_only = tiny_config(cache_dir, init_model=str(model), stages="fine", fine__epochs=1)
    tuned_model = train.train(fine_only, data_dir=SAMPLES, run_dir=tmp_path / "fine_only", progress=False).model_path
    assert tuned_model is not None
    _, both = load_model(tuned_model)
    assert all(torch.equal(both["coarse"][k], saved["coarse"][k]) for k in saved["coarse"])
    assert not all(torch.equal(both["fine"][k], saved["fine"][k]) for k in saved["fine"])
    wider_net = {"base_width": 8, "max_width": 16, "blocks_per_stage": 1}
    wider = tiny_config(cache_dir, init_model=str(model), coarse__network=wider_net)
    with pytest.raises(ConfigError, match="init_model: the coarse network .* differs .*base_width"):
        train.train(wider, data_dir=SAMPLES, run_dir=tmp_path / "wider", progress=False)
    assert not (tmp_path / "wider" / "config.yaml").exists()  # refused before anything is written
    finer = tiny_config(cache_dir, init_model=str(model), spacing={"fine_mm": [1.0, 1.0, 1.0]}, stages="fine")
    with pytest.raises(ConfigError, match=r"init_model: .* spacing.fine_mm \[1.5, 1.5, 1.5\], the config has \[1.0, 1.0, 1.0\]"):
        train.train(finer, data_dir=SAMPLES, run_dir=tmp_path / "finer", progress=False)
    with pytest.raises(ModelError, match="not found"):
        nope = tiny_config(cache_dir, init_model=str(tmp_path / "nope.pt"))
        train.train(nope, data_dir=SAMPLES, run_dir=tmp_path / "x", progress=False)


def test_ddp_on_cuda_needs_a_gpu_per_process(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from segpipe.cli import main
    from segpipe.errors import ConfigError

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    # the command refuses before launching torchrun
    assert main(["train", "--nproc", "2", "--device", "cuda", "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("segpipe train: error: --nproc 2 on CUDA needs one GPU per process and this machine has 1: "
                   "use one process, or --device cpu (DDP over gloo)"), err
    assert not (tmp_path / "run").exists()
    # a process that torchrun started on its own, before the process group
    monkeypatch.setenv("WORLD_SIZE", "3")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "3")
    monkeypatch.setenv("LOCAL_RANK", "2")
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    with pytest.raises(ConfigError, match="--nproc 3 on CUDA needs one GPU per process and this machine has 2: use --nproc 2"):
        trainer._init_distributed("cuda")


def test_validation_scores_decoy_crops_as_lung_given_not_as_dice(tmp_path: Path) -> None:
    """A decoy crop (no lung of its side in it) adds no Dice to either side: its score is the
    lung the network gives it, in mL; a lung crop is scored on its side."""
    import numpy as np

    from segpipe.model import build_network
    from segpipe.train.cache import CachedVolume

    def volume(name: str, label: np.ndarray) -> CachedVolume:
        image = np.where(label > 0, -850, 40).astype(np.int16)
        np.save(tmp_path / f"{name}.npy", image)
        np.save(tmp_path / f"{name}_lbl.npy", label)
        return CachedVolume(tmp_path / f"{name}.npy", tmp_path / f"{name}_lbl.npy", label.shape, (2.0, 2.0, 2.0), (0.0, 0.0, 0.0))

    lung = np.zeros((32, 32, 32), np.uint8)
    lung[8:24, 8:24, 8:24] = 1
    cfg = tiny_config(tmp_path / "cache", stages="fine")
    net = build_network(cfg.fine.network)
    with torch.no_grad():  # a network that calls everything lung: its last layer's bias
        last = [m for m in net.modules() if isinstance(m, torch.nn.Conv3d)][-1]
        last.weight.zero_()
        last.bias.copy_(torch.tensor([-10.0, 10.0, -10.0]))
    vols = [volume("a_fine_right", lung), volume("a_fine_decoy_left", np.zeros_like(lung))]
    scores = trainer.evaluate(net, vols, cfg.fine, cfg, torch.device("cpu"))
    assert scores["dice_right"] == pytest.approx(2 * 4096 / (4096 + 32**3))
    assert np.isnan(scores["dice_left"])  # the decoy is not a left lung's crop
    assert scores["decoy_ml"] == pytest.approx(32**3 * 8 / 1000)
    assert scores["dice_mean"] == pytest.approx(scores["dice_right"])
