"""Typed config loading: defaults, nested sections, unknown keys, wrong types, overrides."""

from __future__ import annotations

from pathlib import Path

import pytest

from segpipe.config import TrainConfig, apply_overrides, from_dict, load_yaml, to_dict
from segpipe.errors import ConfigError


def test_defaults_round_trip_through_dict() -> None:
    cfg = TrainConfig()
    assert from_dict(TrainConfig, to_dict(cfg)) == cfg
    assert cfg.fine.patch_xyz == (96, 96, 96) and cfg.coarse.network.base_width == 8


@pytest.mark.parametrize(
    "data, message",
    [
        ({"fine": {"bogus": 1}}, "unknown config key fine.bogus"),
        ({"fine": {"patch_xyz": [60, 64, 64]}}, "fine.patch_xyz: expected multiples of 8"),
        ({"fine": {"network": {"depth": 9}}}, "fine.network.depth: expected 1..6"),
        ({"fine": {"batch_size": "two"}}, "fine.batch_size: expected an integer"),
        ({"fine": {"amp": "yes"}}, "fine.amp: expected true or false"),
        ({"fine": {"patch_xyz": [64, 64]}}, "fine.patch_xyz: expected 3 values"),
        ({"spacing": {"fine_mm": [0, 1, 1]}}, "spacing.fine_mm: expected three positive numbers"),
        ({"optim": {"optimizer": "lion"}}, "optim.optimizer: expected adamw, adam or sgd"),
        ({"stages": "all"}, "stages: expected both, coarse or fine"),
        ({"coarse": {"network": {"num_classes": 4}}}, "coarse.network.num_classes: expected 2 (lung vs background) or 3"),
        ({"spacing": {"coarse_size_xyz": [64, 64, 64]}}, "spacing.coarse_size_xyz: the fixed-size coarse mode"),
        ({"data": {"phantom_pathology": {"emphysma": 0.5}}}, "unknown config key data.phantom_pathology.emphysma"),
        ({"data": {"phantom_pathology": {"collapse": 1.5}}}, "data.phantom_pathology.collapse: expected a probability"),
        ({"fine": {"dense_fraction": 1.5}}, "fine.dense_fraction: expected 0..1, got 1.5"),
        ({"data": {"phantom_coverage": {"lung_base": 1.0}}}, "unknown config key data.phantom_coverage.lung_base"),
        ({"data": {"phantom_coverage": {"chest": -0.5}}}, "data.phantom_coverage.chest: expected a weight >= 0"),
        ({"data": {"phantom_diaphragm_variety": 1.2}}, "data.phantom_diaphragm_variety: expected a probability"),
        ({"data": {"phantom_recess_variety": 1.2}}, "data.phantom_recess_variety: expected a probability"),
        ({"data": {"phantom_flexure_variety": -0.2}}, "data.phantom_flexure_variety: expected a probability"),
        ({"data": {"phantom_table_variety": 1.2}}, "data.phantom_table_variety: expected a probability"),
        ({"data": {"phantom_coverage": dict.fromkeys(("chest", "chest_abdomen", "neck_pelvis", "lung_bases", "no_lungs"), 0)}},
         "data.phantom_coverage: coverage weights: expected at least one weight > 0"),
    ],
)
def test_errors_name_the_key(data: dict, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        from_dict(TrainConfig, data)
    assert str(info.value).startswith(message)


def test_yaml_loading_and_overrides(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("seed: 3\nfine:\n  patch_xyz: [64, 64, 48]\n  network: {base_width: 8}\n")
    cfg = load_yaml(path, TrainConfig)
    assert cfg.seed == 3 and cfg.fine.patch_xyz == (64, 64, 48) and cfg.fine.network.base_width == 8
    cfg2 = apply_overrides(cfg, ["fine.batch_size=4", "optim.schedule=cosine"])
    assert cfg2.fine.batch_size == 4 and cfg2.optim.schedule == "cosine" and cfg2.seed == 3
    with pytest.raises(ConfigError, match="unknown config key fine.nope"):
        apply_overrides(cfg, ["fine.nope=1"])
    with pytest.raises(ConfigError, match="expected key=value"):
        apply_overrides(cfg, ["fine.batch_size"])
    (tmp_path / "bad.yaml").write_text("seed: [1,\n")
    with pytest.raises(ConfigError, match="invalid YAML at line"):
        load_yaml(tmp_path / "bad.yaml", TrainConfig)
    (tmp_path / "list.yaml").write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="expected a mapping"):
        load_yaml(tmp_path / "list.yaml", TrainConfig)
    with pytest.raises(ConfigError, match="not found"):
        load_yaml(tmp_path / "missing.yaml", TrainConfig)


def test_phantom_pathology_overrides_only_what_is_set() -> None:
    cfg = from_dict(TrainConfig, {"data": {"phantom_pathology": {"emphysema": 0.5, "collapse": 0.0}}})
    assert cfg.data.phantom_pathology.overrides() == {"emphysema": 0.5, "collapse": 0.0}
    assert TrainConfig().data.phantom_pathology.overrides() == {}


def test_phantom_coverage_weights_only_what_is_set() -> None:
    cfg = from_dict(TrainConfig, {"data": {"phantom_coverage": {"lung_bases": 0.88, "no_lungs": 0}}})
    assert cfg.data.phantom_coverage.weights() == {"lung_bases": 0.88, "no_lungs": 0.0}
    assert TrainConfig().data.phantom_coverage.weights() == {}
