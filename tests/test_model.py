"""The shared model core: the model file and its typed header, and the package's boundaries."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from segpipe.config import IntensityConfig, NetworkConfig, SpacingConfig
from segpipe.errors import ModelError
from segpipe.model import DEFAULT_MODEL, FORMAT_VERSION, ModelHeader, StageHeader, load_model, normalise_hu, save_model

WEIGHTS = {"coarse": {"a": torch.ones(2)}, "fine": {"b": torch.zeros(3)}}


def _header(**over: Any) -> ModelHeader:
    network = NetworkConfig(base_width=4, max_width=16, depth=2)
    stage = StageHeader(network=network, patch_xyz=(32, 32, 16), stage="coarse")
    fields: dict[str, Any] = {
        "coarse": stage,
        "fine": dataclasses.replace(stage, network=dataclasses.replace(network, checkpointing=("enc0", "dec0")), stage="fine"),
        "spacing": SpacingConfig(coarse_mm=(4.0, 4.0, 5.0)),
        "intensity": IntensityConfig(window_hu=(-1000.0, 300.0)),
        **over,
    }
    return ModelHeader(**fields)


def _raw_header(path: Path) -> dict[str, Any]:
    return json.loads(torch.load(path, weights_only=True)["header"])


def _with_raw_header(src: Path, dst: Path, header: dict[str, Any]) -> Path:
    payload = torch.load(src, weights_only=True)
    payload["header"] = json.dumps(header)
    torch.save(payload, dst)
    return dst


def test_model_file_round_trip_and_bad_files(tmp_path: Path) -> None:
    path = save_model(tmp_path / "m.pt", _header(labels={"1": "right_lung"}), WEIGHTS)
    header, weights = load_model(path)
    assert header.labels == {"1": "right_lung"} and header.format_version == FORMAT_VERSION
    assert torch.equal(weights["fine"]["b"], torch.zeros(3))
    with pytest.raises(ModelError, match="not found"):
        load_model(tmp_path / "missing.pt")
    (tmp_path / "junk.pt").write_bytes(b"not a torch file at all")
    with pytest.raises(ModelError, match="corrupt"):
        load_model(tmp_path / "junk.pt")
    raw = path.read_bytes()
    (tmp_path / "cut.pt").write_bytes(raw[: len(raw) // 2])
    with pytest.raises(ModelError, match="corrupt"):
        load_model(tmp_path / "cut.pt")
    torch.save({"state": torch.ones(1)}, tmp_path / "other.pt")
    with pytest.raises(ModelError, match="not a segpipe model"):
        load_model(tmp_path / "other.pt")
    payload = torch.load(path, weights_only=True)
    payload["format_version"] = 99
    torch.save(payload, tmp_path / "future.pt")
    with pytest.raises(ModelError, match="format version 99 is not supported"):
        load_model(tmp_path / "future.pt")
    with pytest.raises(ModelError, match="both stages"):
        save_model(tmp_path / "half.pt", _header(), {"coarse": {}})
    with pytest.raises(TypeError, match="ModelHeader"):
        save_model(tmp_path / "dict.pt", _header().to_dict(), WEIGHTS)  # type: ignore[arg-type]
    assert not (tmp_path / "half.pt").exists() and not (tmp_path / "dict.pt").exists()


def test_header_round_trips_through_dict_json_and_file(tmp_path: Path) -> None:
    header = _header(
        margin_mm=9.5, refine={"dense_to_wall": {"max_mm": 12.0, "enabled": True}},
        train_config={"seed": 3}, training_data={"cases": 2}, validation={"coarse": {"dice_mean": 0.9}},
        created="2026-01-01T00:00:00+00:00",
    )
    data = header.to_dict()
    assert ModelHeader.from_dict(json.loads(json.dumps(data))) == header
    assert data["coarse"]["patch_xyz"] == [32, 32, 16] and data["fine"]["network"]["checkpointing"] == ["enc0", "dec0"]
    data["refine"]["dense_to_wall"]["max_mm"] = 1.0  # to_dict hands out copies
    assert header.refine["dense_to_wall"]["max_mm"] == 12.0
    saved, _ = load_model(save_model(tmp_path / "m.pt", header, WEIGHTS))
    assert saved == dataclasses.replace(header, segpipe_version=saved.segpipe_version)
    assert saved.segpipe_version and saved.format_version == FORMAT_VERSION
    # inference runs without checkpointing, at the stored window and overlap
    stage = saved.fine.config()
    assert stage.network.checkpointing == "none" and stage.patch_xyz == (32, 32, 16) and stage.overlap == 0.25
    assert saved.stage("fine") is saved.fine


def test_the_bundled_default_models_header_loads() -> None:
    header, weights = load_model(DEFAULT_MODEL)
    assert set(weights) == {"coarse", "fine"}
    assert (header.coarse.stage, header.fine.stage) == ("coarse", "fine")
    assert header.labels == {"0": "background", "1": "right_lung", "2": "left_lung"}
    from segpipe.refine import RuleSet

    assert RuleSet.from_dict(header.refine) == RuleSet()  # the rules it stores are today's
    assert header.intensity.window_hu == (-1024.0, 400.0) and header.spacing.fine_mm == (1.5, 1.5, 1.5)
    assert header.train_config is not None and header.validation is not None
    # the file's own keys are all header keys (no leniency needed for it)
    assert set(_raw_header(DEFAULT_MODEL)) == {f.name for f in dataclasses.fields(ModelHeader)}


@pytest.mark.parametrize(
    ("drop", "key"),
    [(("spacing",), "spacing"), (("coarse", "patch_xyz"), "coarse.patch_xyz"),
     (("spacing", "fine_mm"), "spacing.fine_mm"), (("intensity", "window_hu"), "intensity.window_hu")],
)
def test_a_missing_key_is_a_one_line_model_error_naming_it(tmp_path: Path, drop: tuple[str, ...], key: str) -> None:
    data = _header().to_dict()
    node = data
    for part in drop[:-1]:
        node = node[part]
    del node[drop[-1]]
    with pytest.raises(ModelError, match=f"missing key {key}$") as err:
        ModelHeader.from_dict(data)
    assert "\n" not in str(err.value)
    good = save_model(tmp_path / "good.pt", _header(), WEIGHTS)
    with pytest.raises(ModelError, match=f"bad.pt: model header: missing key {key}"):
        load_model(_with_raw_header(good, tmp_path / "bad.pt", data))


def test_an_unknown_key_is_refused(tmp_path: Path) -> None:
    data = _header().to_dict()
    with pytest.raises(ModelError, match="unknown key postprocess "):
        ModelHeader.from_dict({**data, "postprocess": {}})
    with pytest.raises(ModelError, match="unknown key fine.window"):
        ModelHeader.from_dict({**data, "fine": {**data["fine"], "window": 3}})
    with pytest.raises(ModelError, match="unknown key fine.network.width"):
        ModelHeader.from_dict({**data, "fine": {**data["fine"], "network": {**data["fine"]["network"], "width": 3}}})
    good = save_model(tmp_path / "good.pt", _header(), WEIGHTS)
    with pytest.raises(ModelError, match="extra.pt: model header: unknown key extra"):
        load_model(_with_raw_header(good, tmp_path / "extra.pt", {**_raw_header(good), "extra": 1}))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d["coarse"].update(patch_xyz=[30, 32, 16]), "coarse.patch_xyz: expected multiples of 4"),
        (lambda d: d["fine"].update(patch_xyz=[32, 32]), "fine.patch_xyz: expected 3 values"),
        (lambda d: d["fine"]["network"].update(depth=9), "fine.network.depth"),
        (lambda d: d["intensity"].update(window_hu=[400, -1000]), "intensity.window_hu"),
        (lambda d: d.update(margin_mm="wide"), "margin_mm"),
        (lambda d: d.update(labels=["lung"]), "labels: expected a mapping"),
        (lambda d: d.update(refine={"holes": 3}), "refine.holes: expected a mapping"),
        (lambda d: d.update(coarse=[1]), "coarse: expected a mapping"),
        (lambda d: d.update(format_version="1"), "format_version"),
    ],
)
def test_an_invalid_value_is_a_model_error_naming_the_key(change: Any, message: str) -> None:
    data = _header().to_dict()
    change(data)
    with pytest.raises(ModelError, match=message) as err:
        ModelHeader.from_dict(data)
    assert str(err.value).startswith("model header: ") and "\n" not in str(err.value)


def test_model_is_light_and_train_never_imports_infer() -> None:
    code = (
        "import sys, segpipe.model; assert 'torch' not in sys.modules and 'monai' not in sys.modules, 'heavy'; "
        "import segpipe.train; assert not any(m.startswith('segpipe.infer') for m in sys.modules), 'infer'"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]


def test_sliding_window_pads_a_small_volume_with_its_own_edge() -> None:
    """A volume smaller than a window is extended by repeating its edge voxels, not framed by
    MONAI's default constant 0 (about -312 HU after normalisation)."""
    import torch

    from segpipe.config import NetworkConfig, StageConfig
    from segpipe.model import sliding_window_probs

    seen: list[tuple[float, float]] = []

    def net(x: torch.Tensor) -> torch.Tensor:
        seen.append((float(x.min()), float(x.max())))
        return torch.cat([x, -x], dim=1)

    stage = StageConfig(network=NetworkConfig(), patch_xyz=(16, 16, 16), amp=False)
    hu = np.full((8, 8, 8), -850.0, np.float32)
    hu[:, :, 4:] = 40.0  # lung on one side, tissue on the other: the padding repeats both
    probs = sliding_window_probs(net, hu, stage, (-1024.0, 400.0), torch.device("cpu"))
    assert probs.shape == (2, 8, 8, 8)
    lung, tissue = normalise_hu(np.array([-850.0, 40.0]), (-1024.0, 400.0))
    assert min(lo for lo, _ in seen) == pytest.approx(lung) and max(hi for _, hi in seen) == pytest.approx(tissue)


def test_zoom_averaged_probs_runs_each_in_plane_zoom_and_maps_it_back() -> None:
    """Each zoom runs on the array resampled to that share of its y and x size (z kept), and
    its probabilities come back on the array's own grid, averaged; a zoom of 1 alone is the
    plain run, bit for bit. A pointwise network on a smooth volume gives nearly the plain
    probabilities back whatever the zooms."""
    import torch

    from segpipe.model import zoom_averaged_probs

    z, y, x = np.meshgrid(np.arange(5), np.arange(37), np.arange(41), indexing="ij")
    hu = (-900.0 + 20.0 * y + 5.0 * x + z).astype(np.float32)  # a smooth ramp, odd in-plane sizes
    shapes: list[tuple[int, ...]] = []

    def run(a: np.ndarray) -> torch.Tensor:
        shapes.append(a.shape)
        p = torch.sigmoid(torch.from_numpy(np.asarray(a, np.float32)) / 200.0)
        return torch.stack([1 - p, p])

    plain = run(hu)
    shapes.clear()
    np.testing.assert_array_equal(zoom_averaged_probs(run, hu, (1.0,)).numpy(), plain.numpy())
    averaged = zoom_averaged_probs(run, hu, (0.8, 1.0, 1.25))
    assert shapes == [(5, 37, 41), (5, 30, 33), (5, 37, 41), (5, 46, 51)]
    assert averaged.shape == plain.shape
    np.testing.assert_allclose(averaged.sum(dim=0).numpy(), 1.0, atol=1e-5)  # still probabilities
    inner = (slice(None), slice(None), slice(2, -2), slice(2, -2))
    assert float((averaged - plain)[inner].abs().max()) < 0.01
    shapes.clear()
    given = plain.clone()
    again = zoom_averaged_probs(run, hu, (0.8, 1.0, 1.25), plain=given)
    assert shapes == [(5, 30, 33), (5, 46, 51)]  # the plain run is not run again
    np.testing.assert_array_equal(again.numpy(), averaged.numpy())
    np.testing.assert_array_equal(given.numpy(), plain.numpy())  # and is left as it was
    with pytest.raises(ValueError, match="one or more zooms"):
        zoom_averaged_probs(run, hu, ())
