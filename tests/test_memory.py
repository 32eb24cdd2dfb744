"""Memory toolkit: sizes, exact parameter/optimizer bytes, estimate vs measurement, planner, CLI."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from segpipe.cli import main
from segpipe.config import NetworkConfig
from segpipe.errors import ConfigError
from segpipe.memory import (
    MemoryRecorder,
    SavedTensorMeter,
    estimate_memory,
    estimate_network,
    format_size,
    load_plan_config,
    measure_step,
    optimizer_state_bytes,
    parse_size,
    plan_training,
    write_plan_config,
)
from segpipe.model import UNet3D, load_network_config

GiB = 2**30


# ----------------------------------------------------------------------------- sizes
@pytest.mark.parametrize(
    "text, expected",
    [
        ("8GiB", 8 * GiB),
        ("8GB", 8 * 10**9),
        ("512MiB", 512 * 2**20),
        ("1.5 GiB", int(1.5 * GiB)),
        ("12g", 12 * GiB),
        ("300kb", 300_000),
        ("4096", 4096),
        (1024, 1024),
    ],
)
def test_parse_size(text, expected) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["8 gigs", "GiB", "-1GiB", "0MiB", "", "8GiB8", None, True])
def test_parse_size_errors(text) -> None:
    with pytest.raises(ConfigError, match="expected a"):
        parse_size(text)


def test_format_size() -> None:
    assert format_size(512) == "512 B"
    assert format_size(1536) == "1.50 KiB"
    assert format_size(8 * GiB) == "8.00 GiB"


# ----------------------------------------------------------------------------- exact figures
def test_textbook_network_is_reproduced_exactly() -> None:
    """Two 3x3 convs (3->64->128, no padding) and a 128*28*28->10 linear layer on 64x3x32x32."""
    model = nn.Sequential(
        nn.Conv2d(3, 64, 3), nn.ReLU(), nn.Conv2d(64, 128, 3), nn.ReLU(), nn.Flatten(), nn.Linear(128 * 28 * 28, 10)
    )
    est = estimate_memory(model, (64, 3, 32, 32), optimizer="none")
    assert est.parameters == 1_079_178
    assert est.parameter_bytes == 4_316_712  # about 4.12 MiB in fp32
    assert format_size(est.parameter_bytes) == "4.12 MiB"
    convs = [layer for layer in est.layer_outputs if layer.kind == "Conv2d"]
    assert [layer.numel for layer in convs] == [3_686_400, 6_422_528]
    assert [layer.shape for layer in convs] == [(64, 64, 30, 30), (64, 128, 28, 28)]
    assert est.gradient_bytes == est.parameter_bytes and est.optimizer_bytes == 0
    assert all(p.grad is None for p in model.parameters())  # the real model is untouched


@pytest.mark.parametrize("name, cls, kwargs", [
    ("sgd", torch.optim.SGD, dict(lr=0.1, momentum=0.9)),
    ("adam", torch.optim.Adam, dict(lr=1e-3)),
    ("adamw", torch.optim.AdamW, dict(lr=1e-3)),
])
def test_optimizer_state_bytes_are_exact(name, cls, kwargs) -> None:
    model = UNet3D(base_width=4, depth=1)
    opt = cls(model.parameters(), **kwargs)
    for p in model.parameters():
        p.grad = torch.ones_like(p)
    opt.step()
    actual = sum(
        t.numel() * t.element_size() for state in opt.state.values() for t in state.values() if torch.is_tensor(t)
    )
    assert optimizer_state_bytes(model, name) == actual
    with pytest.raises(ConfigError, match="optimizer"):
        optimizer_state_bytes(model, "lion")


def test_saved_tensor_meter_counts_each_storage_once() -> None:
    x = torch.randn(1000, requires_grad=True)
    weight = nn.Parameter(torch.randn(1000))
    with SavedTensorMeter() as meter:
        y = x.exp()  # saves its output (4000 B)
        z = y * y  # saves y twice: no new storage
        w = (z.view(10, 100) * weight.view(10, 100)).sum()  # saves a view of z and the parameter
    assert meter.saved_bytes == 2 * 4000
    assert meter.peak_bytes == meter.live_bytes == 8000
    w.backward()
    del y, z, w
    assert meter.live_bytes == 0


# ----------------------------------------------------------------------------- estimate vs measurement
@pytest.mark.parametrize(
    "patch, batch, checkpointing, amp",
    [
        ((32, 32, 32), 1, "none", False),
        ((48, 32, 32), 2, "none", True),
        ((32, 48, 40), 2, "all", False),
        ((48, 48, 48), 1, "encoder", True),
        ((32, 32, 48), 3, ["enc0", "dec1"], False),
        ((40, 32, 32), 2, "all", True),
    ],
)
def test_activation_estimate_matches_saved_tensor_measurement(patch, batch, checkpointing, amp) -> None:
    cfg = NetworkConfig(checkpointing=checkpointing)
    est = estimate_network(cfg, patch, batch, amp=amp)
    torch.manual_seed(0)
    model = UNet3D.from_config(cfg)
    measured = measure_step(model, est.input_shape, amp=amp, backward=False, track_live=False)
    assert measured.input_shape == (batch, 1, patch[2], patch[1], patch[0])
    assert abs(est.activation_bytes - measured.saved_bytes) <= 0.10 * measured.saved_bytes
    for stage, nbytes in est.activations_per_stage.items():
        assert abs(nbytes - measured.saved_by_module.get(stage, 0)) <= 0.10 * max(measured.saved_bytes / 8, 1)


def test_step_peak_estimate_matches_real_step() -> None:
    cfg = NetworkConfig(base_width=8, checkpointing="all")
    est = estimate_network(cfg, (32, 32, 32), 2, amp=True)
    measured = measure_step(UNet3D.from_config(cfg), est.input_shape, amp=True, loss="dice_ce", repeats=1)
    assert abs(est.dynamic_bytes - measured.peak_live_bytes) <= 0.10 * measured.peak_live_bytes
    assert measured.step_seconds is not None and measured.step_seconds > 0
    assert measured.peak_rss_bytes and measured.peak_rss_bytes > 0


def test_estimate_is_monotonic_and_checkpointing_trades_memory() -> None:
    cfg = NetworkConfig()
    small = estimate_network(cfg, (64, 64, 64), 2)
    large = estimate_network(cfg, (96, 96, 96), 2)
    assert large.total_bytes > small.total_bytes
    assert large.parameter_bytes == small.parameter_bytes
    assert estimate_network(cfg, (96, 96, 96), 2, checkpointing="all").total_bytes < large.total_bytes


def test_memory_recorder() -> None:
    recorder = MemoryRecorder("cpu")
    net = UNet3D(base_width=4, depth=1)
    for _ in range(2):
        with recorder.step():
            net(torch.randn(1, 1, 8, 8, 4)).sum().backward()
    assert len(recorder.history) == 2
    assert recorder.last.saved_bytes > 0 and recorder.last.peak_rss_bytes > 0
    assert recorder.last.cuda_max_allocated is None
    assert recorder.peak() is not None
    assert recorder.start_snapshot() is False  # CUDA only


# ----------------------------------------------------------------------------- planner
@pytest.fixture(scope="module")
def plans() -> dict[int, object]:
    return {gib: plan_training(f"{gib}GiB") for gib in (1.5, 3, 8, 24)}


def test_plan_fits_its_budget(plans) -> None:
    for plan in plans.values():
        est = estimate_network(
            NetworkConfig(), plan.patch_size, plan.batch_size, amp=True, checkpointing=plan.checkpointing
        )
        assert est.total_bytes == plan.estimated_bytes
        assert est.total_bytes <= plan.usable_bytes < plan.budget_bytes
        assert all(p % 8 == 0 for p in plan.patch_size)
        assert all(p <= c for p, c in zip(plan.patch_size, (136, 184, 200)))
        assert plan.batch_size * plan.accumulation_steps >= 4
        assert plan.reasons and any("chose checkpointing" in r for r in plan.reasons)


def test_plan_is_monotonic_and_deterministic(plans) -> None:
    budgets = sorted(plans)
    for low, high in zip(budgets, budgets[1:]):
        a, b = plans[low].patch_size, plans[high].patch_size
        assert all(x <= y for x, y in zip(a, b)), (low, a, high, b)
    assert plans[1.5].patch_size < plans[24].patch_size  # the small card gets a smaller patch
    assert plan_training("8GiB") == plans[8]


def test_plan_keeps_the_crop_aspect_and_caps_at_the_crop() -> None:
    plan = plan_training("24GiB", crop_shape=(64, 96, 128), spacing_mm=(1.5, 1.5, 2.0), amp=False)
    assert plan.patch_size == (64, 96, 128)
    flat = plan_training("2GiB", crop_shape=(200, 200, 80))
    x, y, z = flat.patch_size
    assert x == y and z < x


def test_plan_errors() -> None:
    with pytest.raises(ConfigError, match="gpu memory"):
        plan_training("600MiB")
    with pytest.raises(ConfigError, match="expected a size"):
        plan_training("lots")
    with pytest.raises(ConfigError, match="crop shape"):
        plan_training("8GiB", crop_shape=(100, 100))


def test_plan_config_round_trip(tmp_path, plans) -> None:
    """The plan lands in a training config's fine stage; the rest of the file is kept."""
    from segpipe.config import TrainConfig, load_yaml

    path = tmp_path / "train.yaml"
    path.write_text("seed: 5\ncoarse:\n  epochs: 3\nfine:\n  epochs: 7\n  network: {base_width: 16}\n")
    write_plan_config(plans[8], NetworkConfig(), path)
    cfg = load_yaml(path, TrainConfig)
    assert cfg.seed == 5 and cfg.coarse.epochs == 3 and cfg.fine.epochs == 7
    fine = load_plan_config(path)
    assert fine.patch_xyz == tuple(plans[8].patch_size) and fine.batch_size == plans[8].batch_size
    assert fine.accumulation == plans[8].accumulation_steps
    assert fine.network.checkpointing == plans[8].checkpointing
    assert load_network_config(path) == fine.network
    assert path.read_text().startswith("# fine-stage settings chosen by `segpipe plan`")
    bad = tmp_path / "other.yaml"
    bad.write_text("train:\n  epochs: 10\n")
    with pytest.raises(ConfigError, match="not be a valid training config"):
        write_plan_config(plans[8], NetworkConfig(), bad)


# ----------------------------------------------------------------------------- CLI
def test_cli_memory_measures_small_patches(capsys, tmp_path) -> None:
    cfg = tmp_path / "net.yaml"
    cfg.write_text("base_width: 8\n")
    assert main(["memory", "--config", str(cfg), "--patch", "32,32,48", "--batch", "1", "--checkpointing", "all"]) == 0
    out = capsys.readouterr().out
    for text in ("enc0", "head", "parameters", "optimizer state (adamw)", "activations saved for backward",
                 "workspace margin", "total", "measured: one real forward pass (no backward) on cpu"):
        assert text in out
    assert "(+0.0%)" in out
    assert main(["memory", "--config", str(cfg), "--patch", "32", "--batch", "1", "--amp", "--measure"]) == 0
    out = capsys.readouterr().out
    assert "measured: one real training step on cpu" in out and "tensor peak of the step" in out


def test_cli_memory_without_measuring(capsys) -> None:
    assert main(["memory", "--patch", "128", "--amp", "--optimizer", "sgd", "--checkpointing", "enc0,dec0"]) == 0
    out = capsys.readouterr().out
    assert "not measured" in out and "AMP" in out and "optimizer state (sgd)" in out
    assert main(["memory", "--patch", "32", "--no-measure"]) == 0
    assert "not measured: not requested" in capsys.readouterr().out


def test_cli_memory_errors(capsys) -> None:
    assert main(["memory", "--checkpointing", "middle"]) == 2
    assert "error: network.checkpointing" in capsys.readouterr().err
    assert main(["memory", "--patch", "36"]) == 2
    assert "multiples of 8" in capsys.readouterr().err


def test_cli_plan(capsys, tmp_path) -> None:
    out_yaml = tmp_path / "plan.yaml"
    assert main(["plan", "--gpu-memory", "8GiB", "--write-config", str(out_yaml)]) == 0
    out = capsys.readouterr().out
    assert "patch size" in out and "why:" in out and f"wrote {out_yaml}" in out
    fine = load_plan_config(out_yaml)
    assert fine.amp and fine.patch_xyz == (136, 184, 200) and fine.batch_size * fine.accumulation == 4
    assert "# gpu memory        8GiB" in out_yaml.read_text()
    assert main(["plan", "--gpu-memory", "8 gigs"]) == 2
    assert "expected a size like 8GiB" in capsys.readouterr().err
