"""Cascade inference mechanics with a small untrained model: exact output geometry for every
storage orientation, API = CLI, batch skip/overwrite, shards, bad model files, HU offsets,
the CUDA out-of-memory fallback (simulated), the steps' frozen results (coarse, regions, scan
source), and the clean-up rules as options (API, ``--no-rule`` / ``--rule`` /
``--rule-param``, ``--config``, the model file's ``refine``, ``segpipe rules``)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import SimpleITK as sitk
import torch

from segpipe import infer, io, spatial
from segpipe.cli import main
from segpipe.config import NetworkConfig
from segpipe.errors import InputError, ModelError
from segpipe.infer import coarse, fine, regions, segmenter
from segpipe.infer.scan import Scan, ScanSource
from segpipe.infer.settings import load_network
from segpipe.model import ModelHeader, any_lung, build_network, channel_probability_, save_model, sliding_window_probs
from segpipe.refine import body_interior

RULE_ORDER = ["dense_lung", "dense_to_wall", "pleural_air", "body", "airways", "fat", "edge_snap", "sides", "components",
              "gas"]
ALWAYS_ON = {"body", "sides", "components"}


def _stage(net: NetworkConfig, patch: list[int], amp: bool) -> dict:
    return {"network": build_network(net).settings(), "patch_xyz": patch, "overlap": 0.25, "batch_size": 2, "amp": amp}


def _save_tiny_model(path: Path, *, amp: bool = False, refine: dict[str, Any] | None = None) -> Path:
    """A tiny untrained model whose fine stage predicts lung on dark voxels: enough to test
    the mechanics, not the accuracy (the same weights for every call: seeded)."""
    torch.manual_seed(0)
    net_cfg = NetworkConfig(base_width=4, max_width=8, blocks_per_stage=1, depth=2)
    coarse_net, fine_net = build_network(net_cfg), build_network(net_cfg)
    header = {
        "labels": {"0": "background", "1": "right_lung", "2": "left_lung"},
        "spacing": {"coarse_mm": [6.0, 6.0, 6.0], "fine_mm": [3.0, 3.0, 3.0], "coarse_size_xyz": None},
        "intensity": {"window_hu": [-1024.0, 400.0]},
        "margin_mm": 6.0,
        "coarse": _stage(net_cfg, [32, 32, 32], amp),
        "fine": _stage(net_cfg, [32, 32, 32], amp),
    }
    if refine is not None:
        header["refine"] = refine
    return save_model(path, ModelHeader.from_dict(header), {"coarse": coarse_net.state_dict(), "fine": fine_net.state_dict()})


@pytest.fixture(scope="module")
def model_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _save_tiny_model(tmp_path_factory.mktemp("model") / "model.pt")


@pytest.fixture(scope="module")
def scan() -> sitk.Image:
    from segpipe import synthetic

    return synthetic.make_phantom(synthetic.PhantomSpec(seed=2, size_xyz=(64, 64, 40), coverage="chest")).image


def _force_boxes(monkeypatch: pytest.MonkeyPatch, shrink: tuple[float, float, float] | None = None) -> None:
    """An untrained coarse net finds no lung; after the real coarse stage (body, airways), give
    both lungs a box in the chest and sides to match (``shrink``: boxes that much smaller)."""
    real = coarse.locate

    def forced(canonical: sitk.Image, weights: dict, s: Any) -> tuple[coarse.CoarseResult, list[str]]:
        result, _ = real(canonical, weights, s)
        g = result.geometry
        corners = spatial.index_to_physical(g, np.array([[-0.5] * 3, [n - 0.5 for n in g.size]]))
        lo, hi = corners.min(0), corners.max(0)
        mid = (lo[0] + hi[0]) / 2
        sides = np.zeros(result.body.shape, np.uint8)
        nx = sides.shape[2]
        sides[:, :, 1 : nx // 2 - 1] = 1  # canonical LPS: low x is the patient's right
        sides[:, :, nx // 2 + 1 : -1] = 2
        boxes = {
            "right": spatial.Box((lo[0] + 20, lo[1] + 20, lo[2] + 10), (mid, hi[1] - 20, hi[2] - 10)),
            "left": spatial.Box((mid - 10, lo[1] + 20, lo[2] + 10), (hi[0] - 20, hi[1] - 20, hi[2] - 10)),
        }
        if shrink is not None:
            boxes = {side: box.expand(shrink) for side, box in boxes.items()}
        return dataclasses.replace(result, sides=sides, boxes=boxes), []

    monkeypatch.setattr(segmenter, "locate", forced)


@pytest.mark.parametrize("orientation", ["LPS", "RAS", "LAS", "LPI", "oblique"])
def test_output_geometry_is_exactly_the_input_geometry(model_path: Path, scan: sitk.Image, orientation: str, monkeypatch: pytest.MonkeyPatch) -> None:
    _force_boxes(monkeypatch)
    image = spatial.reorient(scan, "LPS" if orientation == "oblique" else orientation)
    if orientation == "oblique":
        from tests.conftest import oblique_permuted

        image = oblique_permuted(image)
    seg = infer.LungSegmenter.from_file(model_path, device="cpu")
    result = seg.predict_with_report(image)
    label = result.label
    assert label.GetSize() == image.GetSize()
    assert label.GetSpacing() == image.GetSpacing()
    assert label.GetOrigin() == image.GetOrigin()
    assert label.GetDirection() == image.GetDirection()
    assert label.GetPixelID() == sitk.sitkUInt8
    assert set(np.unique(sitk.GetArrayViewFromImage(label)).tolist()) <= {0, 1, 2}
    assert set(result.report["timings_s"]) >= {"coarse_s", "fine_s", "total_s"}
    assert result.report["coarse_spine_x_mm"] is None  # a whole chest: the view does not cut the body


@pytest.mark.parametrize("grow", [False, True])
def test_scan_read_by_predict_is_cut_to_the_lungs_region_without_changing_the_mask(
    model_path: Path, scan: sitk.Image, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, grow: bool
) -> None:
    """A scan that predict reads itself is cut to the lungs' region after the coarse stage
    (its memory goes back); the fine stage reads the same voxels, so the mask equals the one
    from the caller's own image, which is never copied. When a fine region grows past the
    part kept (this untrained network's lung covers the boxes' faces), the scan is read again
    and cut anew: the mask is still the same."""
    _force_boxes(monkeypatch, shrink=(-30.0, -30.0, -70.0))  # boxes well inside this coarse scan
    if not grow:
        monkeypatch.setattr(fine, "GROW_ROUNDS", 0)
    image = spatial.reorient(scan, "LPS")  # canonical already: the caller's image is used as is
    path = io.write_image(image, tmp_path / "case.nii.gz")
    cuts: list[tuple[int, ...]] = []
    cut = ScanSource._region

    def spy(self: ScanSource, canonical: sitk.Image, lo: np.ndarray, hi: np.ndarray) -> tuple[sitk.Image, tuple[int, int, int]]:
        region, start = cut(self, canonical, lo, hi)
        cuts.append(tuple(region.GetSize()))
        return region, start

    monkeypatch.setattr(ScanSource, "_region", spy)
    seg = infer.LungSegmenter.from_file(model_path, device="cpu")
    from_path = seg.predict_with_report(path)
    grown = [r for r in from_path.report["fine_regions"].values() if "grown_mm" in r]
    assert bool(grown) == grow and bool(len(cuts) > 1) == grow, (cuts, from_path.report["fine_regions"])
    assert np.prod(cuts[0]) < 0.8 * np.prod(image.GetSize())
    n_cuts = len(cuts)
    from_image = seg.predict(image)
    assert len(cuts) == n_cuts  # the caller's image is not copied
    mask = from_path.label
    assert sitk.GetArrayViewFromImage(mask).any()
    np.testing.assert_array_equal(sitk.GetArrayViewFromImage(mask), sitk.GetArrayViewFromImage(from_image))


@pytest.mark.parametrize("spacing", [(0.7, 0.7, 1.0), (1.6, 1.6, 5.0)])
def test_scan_region_resamples_to_the_same_fine_voxels_as_the_whole_scan(spacing: tuple[float, float, float]) -> None:
    """The fine lattice of any box inside the region a :class:`ScanSource` keeps interpolates
    to exactly the values it has on the whole scan (thin and thick slices; the lattice reaches
    past the box). A range past the part kept reads the scan again; the caller's own scan is
    never cut."""
    rng = np.random.default_rng(0)
    whole = sitk.GetImageFromArray(rng.integers(-1000, 400, size=(60, 90, 110)).astype(np.int16))
    whole.SetSpacing(spacing)
    whole.SetOrigin((-30.0, 12.5, 100.0))
    fine_mm = (1.5, 1.5, 1.5)
    geometry = spatial.Geometry.of(whole)
    reads: list[int] = []

    def reread() -> sitk.Image:
        reads.append(1)
        return whole

    source = ScanSource(whole, Scan(geometry, geometry, "LPS", True, reread), fine_mm)
    lo = np.asarray(whole.TransformIndexToPhysicalPoint((25, 20, 15)))
    hi = np.asarray(whole.TransformIndexToPhysicalPoint((80, 70, 40)))
    box = spatial.Box(tuple(lo), tuple(hi))  # type: ignore[arg-type]
    start, stop = spatial.box_index_range(whole, box)
    source.keep(start, stop)
    region, region_start = source.image, source.start
    assert np.prod(region.GetSize()) < 0.7 * np.prod(whole.GetSize())
    view = sitk.GetArrayViewFromImage(whole)[region_start[2]:region_start[2] + region.GetSize()[2],
                                             region_start[1]:region_start[1] + region.GetSize()[1],
                                             region_start[0]:region_start[0] + region.GetSize()[0]]
    np.testing.assert_array_equal(sitk.GetArrayViewFromImage(region), view)
    lattice = spatial.lattice_grid(whole, fine_mm, box)
    values = [
        sitk.GetArrayFromImage(spatial.resample_to_reference(
            src, lattice, interpolator=sitk.sitkLinear, default_value=-1024.0, output_pixel_type=sitk.sitkFloat32))
        for src in (whole, region)
    ]
    np.testing.assert_array_equal(values[0], values[1])
    # hu_over: a view of the held voxels from a canonical index
    np.testing.assert_array_equal(source.hu_over(tuple(int(v) for v in start), (3, 4, 5)),  # type: ignore[arg-type]
                                  sitk.GetArrayViewFromImage(whole)[start[2]:start[2] + 3, start[1]:start[1] + 4, start[0]:start[0] + 5])
    source.cover(start, stop)  # held already: nothing is read
    assert reads == []
    source.cover(start - 10, stop)  # past the part kept: read again, and the region grows
    assert reads == [1] and all(np.asarray(source.start) <= np.maximum(start - 10, 0))
    assert all(np.asarray(source.start) + np.asarray(source.image.GetSize()) >= stop)
    # the caller's own scan (not owned) is held whole and never read again
    own = ScanSource(whole, Scan(geometry, geometry, "LPS", False, reread), fine_mm)
    own.keep(start, stop)
    own.cover(start - 10, stop + 10)
    assert own.image is whole and own.start == (0, 0, 0) and reads == [1]


@pytest.fixture(scope="module")
def amp_model_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _save_tiny_model(tmp_path_factory.mktemp("amp") / "model.pt", amp=True)


def test_amp_model_runs_bf16_only_where_the_cpu_has_it(amp_model_path: Path, scan: sitk.Image, monkeypatch: pytest.MonkeyPatch) -> None:
    """A model that asks for AMP runs bf16 on a CPU with native bf16 and fp32 elsewhere
    (emulated bf16 is ~25x slower); the report says which, and the masks agree."""
    seg = infer.LungSegmenter.from_file(amp_model_path, device="cpu")
    s = seg.settings
    assert s.coarse.amp and s.fine.amp
    masks = {}
    for forced, precision in (("1", "bf16"), ("0", "fp32")):
        monkeypatch.setenv("SEGPIPE_CPU_BF16", forced)
        result = seg.predict_with_report(scan)
        assert result.report["precision"] == precision
        masks[precision] = sitk.GetArrayFromImage(result.label)
        # one window per pass is fastest in bf16 on the CPU, pairs (the stage's batch) in fp32
        assert s.window_batch(s.fine) == (1 if precision == "bf16" else s.fine.batch_size)
    assert np.mean(masks["bf16"] == masks["fp32"]) > 0.99
    mine = infer.LungSegmenter.from_file(amp_model_path, device="cpu", sw_batch_size=3)  # the user's choice wins
    assert mine.settings.window_batch(mine.settings.fine) == 3 and mine.settings.window_batch(mine.settings.coarse) == 3


def test_window_batch_rule() -> None:
    from segpipe.device import window_batch

    assert window_batch("cpu", 2, amp=True) == 1
    assert window_batch("cpu", 2, amp=False) == 2
    assert window_batch("cuda", 4, amp=True) == 4  # the GPU keeps the stage's batch


def test_anisotropic_numpy_input_and_no_lung_warning(model_path: Path, scan: sitk.Image) -> None:
    seg = infer.LungSegmenter.from_file(model_path, device="cpu")
    array = sitk.GetArrayFromImage(scan)
    result = seg.predict_with_report(array, spacing=(0.9, 1.1, 4.0))
    assert result.label.GetSize() == scan.GetSize() and result.label.GetSpacing() == (0.9, 1.1, 4.0)
    if not sitk.GetArrayViewFromImage(result.label).any():  # the untrained coarse net found nothing
        assert any("no lung found" in w for w in result.report["warnings"])
    with pytest.raises(InputError, match="needs its voxel spacing"):
        seg.predict(array)


def test_api_and_cli_give_identical_masks(model_path: Path, scan: sitk.Image, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _force_boxes(monkeypatch)
    src = io.write_image(spatial.reorient(scan, "RAS"), tmp_path / "case.nii.gz")
    api = infer.LungSegmenter.from_file(model_path, device="cpu").predict(src)
    assert main(["infer", str(src), "-o", str(tmp_path / "out"), "--model", str(model_path), "--device", "cpu", "--quiet"]) == 0
    cli = io.read_image(tmp_path / "out" / "case_lungs.nii.gz")
    np.testing.assert_array_equal(sitk.GetArrayViewFromImage(api), sitk.GetArrayViewFromImage(cli))
    assert spatial.same_geometry(cli, io.read_image(src), atol_mm=1e-5)
    report = json.loads((tmp_path / "out" / "case_lungs.json").read_text())
    assert set(report["volumes_ml"]) == {"right", "left"} and report["orientation"] == "RAS"


def test_batch_mode_skip_overwrite_and_shards(model_path: Path, scan: sitk.Image, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "scans"
    folder.mkdir()
    small = sitk.RegionOfInterest(scan, [48, 48, 24], [8, 8, 8])
    for i in range(5):
        io.write_image(small, folder / f"s{i}.nii.gz")
    (folder / "notes.txt").write_text("not a scan")
    args = ["infer", str(folder), "--model", str(model_path), "--device", "cpu", "--quiet"]
    seen: list[str] = []
    for i in range(3):
        assert main([*args, "-o", str(tmp_path / "sharded"), "--shard", f"{i}/3"]) == 0
        seen += [line.split()[1].rstrip(":") for line in capsys.readouterr().out.splitlines() if line.startswith("wrote")]
    assert sorted(Path(s).name for s in seen) == [f"s{i}_lungs.nii.gz" for i in range(5)]  # each once
    before = (tmp_path / "sharded" / "s0_lungs.nii.gz").stat().st_mtime_ns
    assert main([*args, "-o", str(tmp_path / "sharded")]) == 0
    assert capsys.readouterr().out.count("skipped") == 5
    assert (tmp_path / "sharded" / "s0_lungs.nii.gz").stat().st_mtime_ns == before
    assert main([*args, "-o", str(tmp_path / "sharded"), "--overwrite", "--shard", "0/5"]) == 0
    assert capsys.readouterr().out.count("wrote") == 1


@pytest.mark.parametrize("problem", ["missing", "corrupt", "not-segpipe", "future-version", "unknown-rule"])
def test_bad_model_file_one_line_exit_2_nothing_written(
    problem: str, model_path: Path, scan: sitk.Image, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = io.write_image(scan, tmp_path / "case.nii.gz")
    bad = tmp_path / "bad.pt"
    if problem == "corrupt":
        bad.write_bytes(model_path.read_bytes()[:5000])
    elif problem == "not-segpipe":
        torch.save({"weights": torch.ones(2)}, bad)
    elif problem == "future-version":
        payload = torch.load(model_path, weights_only=True)
        payload["format_version"] = 7
        torch.save(payload, bad)
    elif problem == "unknown-rule":
        _save_tiny_model(bad, refine={"snow_removal": {"enabled": True}})
    out = tmp_path / "out"
    code = main(["infer", str(src), "-o", str(out), "--model", str(bad), "--device", "cpu", "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("segpipe infer: error:"), err
    assert not out.exists() or list(out.iterdir()) == []


def test_hu_offset_is_detected_and_fixed(model_path: Path, scan: sitk.Image, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    shifted = io.write_image(sitk.Cast(scan, sitk.sitkInt16) + 1024, tmp_path / "offset.nii.gz")
    args = ["infer", str(shifted), "-o", str(tmp_path / "out"), "--model", str(model_path), "--device", "cpu", "--quiet"]
    assert main(args) == 2
    assert "--hu-offset -1024" in capsys.readouterr().err
    assert main([*args, "--hu-offset", "-1024"]) == 0
    assert (tmp_path / "out" / "offset_lungs.nii.gz").is_file()


def test_default_model_missing_names_the_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(segmenter, "DEFAULT_MODEL", tmp_path / "default.pt")
    with pytest.raises(ModelError, match="default.pt"):
        infer.LungSegmenter.default()


@pytest.mark.parametrize("failures", [2, 3])
def test_cuda_oom_falls_back_to_cpu_accumulation_then_cpu(model_path: Path, monkeypatch: pytest.MonkeyPatch, failures: int) -> None:
    """Simulated: the first attempts run out of CUDA memory; the third (all CPU) works, or,
    when it runs out too, the error goes on."""
    import segpipe.device
    import segpipe.model

    seg = infer.LungSegmenter.from_file(model_path, device="cpu")
    monkeypatch.setattr(fine, "load_network", lambda *args: "net")
    cuda = dataclasses.replace(seg.settings, device=torch.device("cuda"))  # pretend; no CUDA call is made below
    net = fine.FineNetwork(seg.weights["fine"], cuda)
    assert net.net_device.type == "cuda" and net.fallbacks == []
    attempts: list[tuple[str, str, int]] = []
    moves: list[str] = []
    ooms: list[int] = []

    def fake_probs(model, array, stage, window_hu, device, *, accumulate_on, sw_batch, overlap, channel=None):  # type: ignore[no-untyped-def]
        assert model == "net" and overlap == cuda.fine_overlap
        attempts.append((device.type, accumulate_on.type, sw_batch))
        if len(ooms) < failures:
            ooms.append(1)
            raise torch.cuda.OutOfMemoryError("CUDA out of memory (simulated)")
        return torch.zeros(3, *array.shape) if channel is None else torch.zeros(*array.shape)

    monkeypatch.setattr(segpipe.model, "sliding_window_probs", fake_probs)
    monkeypatch.setattr(segpipe.device, "for_inference", lambda model, device: moves.append(torch.device(device).type) or model)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    if failures == 3:
        with pytest.raises(torch.cuda.OutOfMemoryError):
            net.background(np.zeros((4, 4, 4), np.float32))
        assert len(attempts) == 3
        return
    probs = net.background(np.zeros((4, 4, 4), np.float32))
    assert probs.shape == (4, 4, 4) and isinstance(probs, np.ndarray)  # P(background) only
    assert attempts == [("cuda", "cuda", 2), ("cuda", "cpu", 1), ("cpu", "cpu", 1)]
    assert moves == ["cpu"] and net.net_device.type == "cpu"  # the network moved once, for the last attempt
    notes = net.fallbacks
    assert len(notes) == 2 and "accumulation buffer on cpu" in notes[0] and "windows on cpu" in notes[1]
    # the next region tries the GPU again (the network moves back)
    attempts.clear()
    net.background(np.zeros((4, 4, 4), np.float32))
    assert attempts == [("cuda", "cuda", 2)] and moves == ["cpu", "cuda"] and net.net_device.type == "cuda"


def make_small(scan: sitk.Image) -> sitk.Image:
    return sitk.Cast(sitk.RegionOfInterest(scan, [16, 16, 4], [20, 20, 10]), sitk.sitkInt16)


def test_plan_jobs_names_and_errors(tmp_path: Path, scan: sitk.Image) -> None:
    a = io.write_image(scan, tmp_path / "a.nii.gz")
    b = io.write_image(scan, tmp_path / "b.mha")
    jobs = infer.plan_jobs([a, b], tmp_path / "out")
    assert [j.mask.name for j in jobs] == ["a_lungs.nii.gz", "b_lungs.nii.gz"]
    assert jobs[0].report.name == "a_lungs.json" and jobs[0].qc.name == "a_lungs.png"
    assert infer.plan_jobs([a], tmp_path / "mask.nrrd")[0].mask == tmp_path / "mask.nrrd"
    with pytest.raises(InputError, match="names one file but there are 2 scans"):
        infer.plan_jobs([a, b], tmp_path / "mask.nii.gz")
    twin = io.write_image(scan, tmp_path / "a.mha")
    with pytest.raises(InputError, match="both named 'a'"):
        infer.plan_jobs([a, twin], tmp_path)
    dicom = tmp_path / "LIDC-0001" / "dicom"
    dicom.mkdir(parents=True)
    from tests.test_io import _write_dicom_series

    _write_dicom_series(dicom, make_small(scan), "1.2.826.0.1.3680043.2.1125.9.1")
    assert infer.plan_jobs([dicom], tmp_path)[0].mask.name == "LIDC-0001_lungs.nii.gz"
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="no scans found"):
        infer.plan_jobs([tmp_path / "empty"], None)


def test_predict_file_writes_mask_and_report(model_path: Path, scan: sitk.Image, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _force_boxes(monkeypatch)
    src = io.write_image(spatial.reorient(scan, "LAS"), tmp_path / "in.nrrd")
    seg = infer.LungSegmenter.from_file(model_path, device="cpu")
    import segpipe.report

    drawn: dict = {}
    real_qc = segpipe.report.qc_picture
    monkeypatch.setattr(segpipe.report, "qc_picture", lambda *a, **kw: drawn.update(kw) or real_qc(*a, **kw))
    report = seg.predict_file(src, tmp_path / "mask.nii.gz", qc=True)
    assert drawn["warnings"] == report["warnings"]  # the QC picture shows the report's warnings
    mask = io.read_image(tmp_path / "mask.nii.gz")
    assert spatial.same_geometry(mask, io.read_image(src), atol_mm=1e-4)  # NIfTI stores float32
    assert json.loads((tmp_path / "mask.json").read_text())["volumes_ml"] == report["volumes_ml"]
    assert (tmp_path / "mask.png").stat().st_size > 1000
    again = seg.predict(src)  # keep the image alive while a view of it is used
    np.testing.assert_array_equal(sitk.GetArrayViewFromImage(mask), sitk.GetArrayViewFromImage(again))
    with pytest.raises(Exception, match="overwrite"):
        seg.predict_file(src, tmp_path / "mask.nii.gz", overwrite=False)


def test_air_around_the_patient_inside_a_box_is_never_lung(model_path: Path, scan: sitk.Image, monkeypatch: pytest.MonkeyPatch) -> None:
    """The untrained fine net calls dark voxels lung, so the outside air in the boxes' corners
    would be lung without the body rule."""
    _force_boxes(monkeypatch)
    seg = infer.LungSegmenter.from_file(model_path, device="cpu")
    pred = sitk.GetArrayFromImage(seg.predict(scan))
    hu = sitk.GetArrayFromImage(scan)
    outside = ~body_interior(hu, slack_voxels=3)
    assert np.count_nonzero(outside & (hu < -900)) > 1000  # there is air around the patient
    assert pred.any() and not (pred > 0)[outside].any()


# ----------------------------------------------------------------------------- coarse stage
def _coarse_phantom() -> tuple[sitk.Image, np.ndarray]:
    """A canonical 4 mm scan with a body and two lungs, and the lungs' labels."""
    hu = np.full((40, 40, 40), -1000.0, np.float32)
    hu[2:38, 4:36, 4:36] = 40.0  # the body; 4 mm voxels hold 0.064 mL each
    label = np.zeros(hu.shape, np.uint8)
    label[8:30, 10:30, 6:16] = 1  # right (low x): 4400 voxels, 281.6 mL
    label[8:20, 10:25, 24:32] = 2  # left: 1440 voxels, 92.2 mL
    hu[label > 0] = -850.0
    image = sitk.GetImageFromArray(hu)
    image.SetSpacing((4.0, 4.0, 4.0))
    return image, label


def _locate(seg: infer.LungSegmenter, image: sitk.Image, label: np.ndarray, confident: np.ndarray,
            monkeypatch: pytest.MonkeyPatch) -> tuple[coarse.CoarseResult, list[str]]:
    """:func:`coarse.locate` on ``image`` at its own spacing, with a network whose lung is
    ``label`` (background probability 0.05 where ``confident``, 0.3 elsewhere in the lungs; the
    rest in the class of ``label``'s side)."""
    import segpipe.model

    def fake_probs(net, array, stage, window_hu, device, **kwargs):  # type: ignore[no-untyped-def]
        assert net == "coarse net" and array.shape == label.shape
        background = np.where(label > 0, np.where(confident, 0.05, 0.3), 1.0).astype(np.float32)
        lung = 1.0 - background
        return torch.from_numpy(np.stack([background, np.where(label == 2, 0.0, lung), np.where(label == 2, lung, 0.0)]))

    monkeypatch.setattr(coarse, "load_network", lambda *args: "coarse net")
    monkeypatch.setattr(segpipe.model, "sliding_window_probs", fake_probs)
    s = dataclasses.replace(seg.settings, coarse_mm=(4.0, 4.0, 4.0), view_zooms=(1.0,))  # the zoomed runs: see test_a_narrow_view_averages_the_coarse_zooms
    return coarse.locate(image, seg.weights["coarse"], s)


def test_a_narrow_view_averages_the_coarse_zooms(model_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A field of view narrower than a body (under 300 mm in x or y) runs the coarse network
    on each of ``view_zooms`` (in-plane sizes scaled, z kept) for its side vote and says so in
    the result; a view as wide as a body, or ``fast``, runs it once."""
    import segpipe.model

    shapes: list[tuple[int, ...]] = []

    def fake_probs(net, array, stage, window_hu, device, **kwargs):  # type: ignore[no-untyped-def]
        shapes.append(array.shape)
        lung = (np.asarray(array) < -500).astype(np.float32)
        return torch.from_numpy(np.stack([1 - lung, lung, np.zeros_like(lung)]))

    monkeypatch.setattr(coarse, "load_network", lambda *args: "coarse net")
    monkeypatch.setattr(segpipe.model, "sliding_window_probs", fake_probs)
    image, _ = _coarse_phantom()  # 160 mm across
    seg = infer.LungSegmenter.from_file(model_path, device="cpu")
    s = dataclasses.replace(seg.settings, coarse_mm=(4.0, 4.0, 4.0))
    assert s.view_zooms == (0.8, 1.0, 1.25) and s.narrow_view_mm == 300.0
    result, _ = coarse.locate(image, seg.weights["coarse"], s)
    assert result.zooms == (0.8, 1.0, 1.25)
    assert shapes == [(40, 40, 40), (40, 32, 32), (40, 50, 50)]  # the plain run, then the other zooms
    shapes.clear()
    result, _ = coarse.locate(image, seg.weights["coarse"], dataclasses.replace(s, fast=True))
    assert result.zooms == (1.0,) and shapes == [(40, 40, 40)]
    wide = sitk.ConstantPad(image, (20, 20, 0), (20, 20, 0), -1000.0)  # 320 mm across
    shapes.clear()
    result, _ = coarse.locate(wide, seg.weights["coarse"], s)
    assert result.zooms == (1.0,) and shapes == [(40, 80, 80)]
    with pytest.raises(ValueError, match="view_zooms"):
        infer.LungSegmenter.from_file(model_path, device="cpu", view_zooms=())


def test_a_side_needs_min_lung_ml_of_confident_coarse_lung(model_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Bowel gas in a scan without lungs gives small or unsure coarse finds: a side counts
    only with at least ``min_lung_ml`` of confident voxels."""
    image, label = _coarse_phantom()
    confident = label > 0
    seg = infer.LungSegmenter.from_file(model_path, device="cpu")
    assert seg.settings.min_lung_ml == infer.MIN_LUNG_ML == 50.0
    found, warnings = _locate(seg, image, label, confident, monkeypatch)
    assert set(found.boxes) == {"right", "left"} and warnings == []
    assert found.boxes["right"].hi_xyz[0] < found.boxes["left"].lo_xyz[0]  # right is low x (LPS)
    assert set(np.unique(found.sides[label == 1])) == {1} and set(np.unique(found.sides[label == 2])) == {2}
    assert found.body.shape == found.airways.shape == label.shape and found.body[label > 0].all()
    assert found.geometry == spatial.Geometry.of(image) and found.spacing_mm == (4.0, 4.0, 4.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        found.boxes = {}  # type: ignore[misc]
    strict = infer.LungSegmenter.from_file(model_path, device="cpu", min_lung_ml=100)
    result, _ = _locate(strict, image, label, confident, monkeypatch)
    assert set(result.boxes) == {"right"}
    assert not result.sides[label == 2].any()  # the dropped side is gone from the sided mask too
    unsure = confident.copy()
    unsure[:, :, :20] &= np.arange(40)[:, None, None] < 10  # sure of only 2 of the right lung's 22 slices
    result, _ = _locate(seg, image, label, unsure, monkeypatch)
    assert set(result.boxes) == {"left"}
    result, warnings = _locate(seg, image, label, np.zeros_like(confident), monkeypatch)
    assert result.boxes == {} and not result.sides.any() and any("no lung found" in w for w in warnings)
    with pytest.raises(ValueError, match="min_lung_ml"):
        infer.LungSegmenter.from_file(model_path, device="cpu", min_lung_ml=-1)


def test_a_lung_the_scans_edge_cuts_needs_3_percent_of_min_lung_ml(model_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The lung bases at the top of an abdominal scan show only part of themselves: a side
    whose coarse lung reaches a face of the scan counts with 3 % of ``min_lung_ml`` (1.5 mL),
    and under 5 % (2.5 mL) it is unsure (rule ``gas`` looks at it again); the same small find
    inside the scan does not count (bowel gas)."""
    image, label = _coarse_phantom()
    hu = sitk.GetArrayFromImage(image)
    hu[38:, 4:36, 4:36] = 40.0  # the scan ends inside the body, as an abdominal scan's top does
    seg = infer.LungSegmenter.from_file(model_path, device="cpu")
    small = label.copy()
    small[small == 2] = 0
    small[30:38, 20:28, 24:32] = 2  # 512 voxels, 32.8 mL: below 50 mL, above 2.5 mL
    hu[label > 0] = 40.0
    hu[(small > 0) | (label == 1)] = -850.0
    image = spatial.copy_geometry(hu, image)
    inside, _ = _locate(seg, image, small, small > 0, monkeypatch)
    assert set(inside.boxes) == {"right"}
    cut = small.copy()
    cut[30:38, 20:28, 24:32] = 0
    cut[32:40, 20:28, 24:32] = 2  # the same find, reaching the scan's top slice
    hu[small == 2] = 40.0
    hu[cut == 2] = -850.0
    image = spatial.copy_geometry(hu, image)
    at_edge, _ = _locate(seg, image, cut, cut > 0, monkeypatch)
    assert set(at_edge.boxes) == {"right", "left"} and at_edge.unsure_sides == frozenset()
    small_cut = cut.copy()
    small_cut[small_cut == 2] = 0
    small_cut[38:40, 20:24, 24:28] = 2  # 32 voxels, 2.0 mL: above 1.5 mL, below 2.5 mL
    unsure, _ = _locate(seg, image, small_cut, small_cut > 0, monkeypatch)
    assert set(unsure.boxes) == {"right", "left"} and unsure.unsure_sides == frozenset({2})
    tiny = cut.copy()
    tiny[tiny == 2] = 0
    tiny[38:40, 20:22, 24:28] = 2  # 16 voxels, 1.0 mL: below 1.5 mL
    too_small, _ = _locate(seg, image, tiny, tiny > 0, monkeypatch)
    assert set(too_small.boxes) == {"right"} and too_small.unsure_sides == frozenset()


def test_a_lone_lung_in_a_view_inside_the_body_takes_the_scanner_centres_side(model_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A view inside the chest (the body runs off both x faces) holds one lung, which the
    network calls 62 % right (unsure: its upper slices left). Physical x = 0 lies at x index 8,
    so the lung lies on the patient's left of the scanner's centre: the left lung, with a
    warning that says why. With ``sides.scanner_centre`` off, the vote's majority names it
    right (also with the warning); with x = 0 across the lung the majority names it too."""
    image, _ = _coarse_phantom()
    hu = sitk.GetArrayFromImage(image)
    hu[2:38, 4:36, :] = 40.0  # the body runs off both sides of the view
    label = np.zeros(hu.shape, np.uint8)
    label[8:30, 10:30, 14:30] = 1
    label[21:30, 10:30, 14:30] = 2  # the upper 9 of 22 slices vote left
    hu[label > 0] = -850.0
    image = spatial.copy_geometry(hu, image)
    image.SetOrigin((-32.0, 0.0, 0.0))
    seg = infer.LungSegmenter.from_file(model_path, device="cpu")
    found, warnings = _locate(seg, image, label, label > 0, monkeypatch)
    assert set(found.boxes) == {"left"} and (found.sides[label > 0] == 2).all()
    assert warnings == ["one lung in a view that cuts the body, named left from the scanner's centre: check its side"]
    off = infer.LungSegmenter.from_file(model_path, device="cpu", rules={"sides": {"scanner_centre": False}})
    found, warnings = _locate(off, image, label, label > 0, monkeypatch)
    assert set(found.boxes) == {"right"} and "the network's majority vote" in warnings[0]
    image.SetOrigin((-88.0, 0.0, 0.0))  # x = 0 at index 22, across the lung
    found, _ = _locate(seg, image, label, label > 0, monkeypatch)
    assert set(found.boxes) == {"right"}


def test_an_origin_at_the_images_corner_does_not_name_a_lone_lung(model_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The view of the test above saved without its scanner coordinates (origin (0, 0, 0): x = 0
    at its first column, where the lung lies wholly to its left): the scanner's centre does not
    name the lung; the vote's majority does, as with ``sides.scanner_centre`` off, and a warning
    says why. Moved 60 mm further (x = 0 at 60 mm beyond the view) likewise, without that
    warning."""
    image, _ = _coarse_phantom()
    hu = sitk.GetArrayFromImage(image)
    hu[2:38, 4:36, :] = 40.0
    label = np.zeros(hu.shape, np.uint8)
    label[8:30, 10:30, 14:30] = 1
    label[21:30, 10:30, 14:30] = 2
    hu[label > 0] = -850.0
    image = spatial.copy_geometry(hu, image)
    image.SetOrigin((0.0, 0.0, 0.0))
    seg = infer.LungSegmenter.from_file(model_path, device="cpu")
    found, warnings = _locate(seg, image, label, label > 0, monkeypatch)
    assert set(found.boxes) == {"right"} and (found.sides[label > 0] == 1).all()
    assert any("physical x = 0 lies at its edge" in w for w in warnings)
    assert any("the network's majority vote" in w for w in warnings)
    image.SetOrigin((60.0, 0.0, 0.0))
    found, warnings = _locate(seg, image, label, label > 0, monkeypatch)
    assert set(found.boxes) == {"right"} and not any("physical x = 0" in w for w in warnings)
    image.SetOrigin((-8.0, 0.0, 0.0))  # x = 0 two voxels inside the view: the lung on its left, as in the test above
    found, _ = _locate(seg, image, label, label > 0, monkeypatch)
    assert set(found.boxes) == {"left"}


def test_a_view_inside_the_body_cuts_a_find_of_both_lungs_near_the_spine(model_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A view inside the chest shows 12 columns of the right lung joined in front (x 14, 4 rows)
    to the left lung, which narrows to 3 rows at x 22: the find's middle (x 19) lies inside the
    left lung; the scanner's centre lies across the find, and the network's classes confirm the
    two lungs. With the spine in view (a vertebra at x 14), the side split cuts at the junction
    beside it; with ``sides.spine`` off, near where the network's classes part the find (x 14.5:
    ``columns.vote_column``), at the junction as well, not at the narrow part near the find's
    middle (which would name 7 columns of the left lung right)."""
    image, _ = _coarse_phantom()
    hu = sitk.GetArrayFromImage(image)
    hu[2:38, 4:36, :] = 40.0  # the body runs off both sides of the view
    label = np.zeros(hu.shape, np.uint8)
    label[8:30, 8:28, 2:14] = 1
    label[8:30, 8:12, 14] = 1  # the junction in front
    label[8:30, 8:28, 15:38] = 2
    label[8:30, 8:28, 22] = 0
    label[8:30, 14:17, 22] = 2  # the left lung's narrow part
    hu[label > 0] = -850.0
    hu[2:38, 28:36, 10:19] = 400.0  # a vertebra (3.6 x 3.2 cm) behind the junction
    image = spatial.copy_geometry(hu, image)
    image.SetOrigin((-80.0, 0.0, 0.0))  # the scanner's centre (x index 20) across the find
    lung = label > 0
    found, _ = _locate(infer.LungSegmenter.from_file(model_path, device="cpu"), image, label, lung, monkeypatch)
    assert (found.sides[:, :, :14][lung[:, :, :14]] == 1).all() and (found.sides[:, :, 15:][lung[:, :, 15:]] == 2).all()
    assert found.spine_x_mm == pytest.approx(-80.0 + 14 * 4.0)  # reported as coarse_spine_x_mm
    off = infer.LungSegmenter.from_file(model_path, device="cpu", rules={"sides": {"spine": False}})
    found, _ = _locate(off, image, label, lung, monkeypatch)
    assert found.spine_x_mm is None
    assert (found.sides[:, :, :14][lung[:, :, :14]] == 1).all() and (found.sides[:, :, 15:][lung[:, :, 15:]] == 2).all()


def _locate_cut_base(label: np.ndarray, model_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, list[str]]:
    """:func:`_locate` on the coarse phantom whose top slice cuts the body, with lung (and the
    fake network's classes) where ``label`` says."""
    image, _ = _coarse_phantom()
    hu = sitk.GetArrayFromImage(image)
    assert hu.shape == label.shape
    hu[2:, 4:36, 4:36] = 40.0  # the scan's top slice cuts the body
    hu[label > 0] = -850.0
    return _locate(infer.LungSegmenter.from_file(model_path, device="cpu"), spatial.copy_geometry(hu, image),
                   label, label > 0, monkeypatch)


def test_two_pieces_of_a_cut_base_are_one_lung(model_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The top of an abdominal scan cuts the left recess into an anterior and a posterior piece,
    both larger than the right base's tip: the coarse stage sides both pieces left (the body's
    midline and the network's class agree) and the small piece across the midline right, so
    the left box spans both pieces."""
    label = np.zeros((40, 40, 40), np.uint8)
    label[34:40, 8:14, 22:28] = 2  # anterior piece: 216 voxels, 13.8 mL
    label[34:40, 24:32, 26:34] = 2  # posterior piece: 384 voxels, 24.6 mL
    label[37:40, 24:28, 8:12] = 1  # the right recess's tip: 48 voxels, 3.1 mL
    found, warnings = _locate_cut_base(label, model_path, monkeypatch)
    assert warnings == [] and set(found.boxes) == {"right", "left"}
    np.testing.assert_array_equal(found.sides, label)
    left = found.boxes["left"]
    assert left.lo_xyz[1] <= 8 * 4.0 and left.hi_xyz[1] >= 31 * 4.0  # y: from the anterior piece to the posterior one


def test_three_pieces_of_a_cut_base_are_one_lung(model_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The top slice cuts the right recess into lateral, anterior and posterior pieces around
    the dome: all three are the right lung (the right box spans them), the left base is the
    left lung."""
    label = np.zeros((40, 40, 40), np.uint8)
    label[33:40, 12:30, 24:34] = 2  # left base: 1260 voxels, 80.6 mL
    label[34:40, 14:26, 5:9] = 1  # right recess, lateral piece: 288 voxels, 18.4 mL
    label[36:40, 6:10, 10:15] = 1  # anterior piece: 80 voxels, 5.1 mL
    label[37:40, 28:32, 9:14] = 1  # posterior piece: 60 voxels, 3.8 mL
    found, warnings = _locate_cut_base(label, model_path, monkeypatch)
    assert warnings == [] and set(found.boxes) == {"right", "left"}
    np.testing.assert_array_equal(found.sides, label)
    right = found.boxes["right"]
    assert right.lo_xyz[1] <= 6 * 4.0 and right.hi_xyz[1] >= 31 * 4.0  # y: from the anterior piece to the posterior one


# ----------------------------------------------------------------------------- regions
@pytest.mark.parametrize("overlap", [0.0, 0.25, 0.5])
def test_window_count_is_monais(overlap: float) -> None:
    """window_count predicts exactly how many windows MONAI's sliding window runs."""
    from monai.data.utils import dense_patch_slices
    from monai.inferers.utils import _get_scan_interval

    patch = (64, 64, 48)
    for size in [(64, 64, 48), (40, 100, 48), (125, 130, 186), (200, 239, 300), (65, 112, 97)]:
        padded = tuple(max(s, p) for s, p in zip(size, patch))  # MONAI pads up to one window
        interval = _get_scan_interval(padded[::-1], patch[::-1], 3, (overlap,) * 3)
        expected = len(dense_patch_slices(padded[::-1], patch[::-1], interval))
        assert regions.window_count(size, patch, overlap) == expected, size


def test_fine_stage_runs_on_the_union_of_the_boxes_when_that_takes_fewer_windows(model_path: Path, scan: sitk.Image) -> None:
    s = infer.LungSegmenter.from_file(model_path, device="cpu").settings
    geometry = spatial.Geometry.of(spatial.to_canonical(scan)[0])
    right = spatial.Box((-150.0, 10.0, -300.0), (30.0, 200.0, -20.0))
    left = spatial.Box((-20.0, 10.0, -300.0), (150.0, 200.0, -20.0))
    planned = regions.plan_regions(geometry, {"right": right, "left": left}, s)
    assert isinstance(planned, tuple) and [r.name for r in planned] == ["both"]
    both = planned[0]
    assert _within_trim(both.box, right.union(left)) and both.grown_mm == (0.0,) * 6
    assert both.context == regions._one_window_at_least(geometry, both.box, s)
    assert regions.windows(geometry, both.box, s) < regions.windows(geometry, right, s) + regions.windows(geometry, left, s)
    with pytest.raises(dataclasses.FrozenInstanceError):
        both.name = "right"  # type: ignore[misc]
    # lungs far apart (boxes that do not overlap, a gap between them): one box each
    far_right = spatial.Box((-300.0, 10.0, -300.0), (-180.0, 200.0, -20.0))
    far_left = spatial.Box((180.0, 10.0, -300.0), (300.0, 200.0, -20.0))
    far = {r.name: r for r in regions.plan_regions(geometry, {"right": far_right, "left": far_left}, s)}
    assert list(far) == ["right", "left"] and _within_trim(far["right"].box, far_right) and _within_trim(far["left"].box, far_left)
    assert [r.name for r in regions.plan_regions(geometry, {"left": left}, s)] == ["left"]
    assert regions.plan_regions(geometry, {}, s) == ()


def test_single_channel_probability_equals_the_softmax_channel(model_path: Path) -> None:
    seg = infer.LungSegmenter.from_file(model_path, device="cpu")
    s = seg.settings
    net = load_network("fine", s.fine, seg.weights["fine"], s.device)
    hu = np.random.default_rng(3).normal(-600, 300, (40, 72, 56)).astype(np.float32)
    full = sliding_window_probs(net, hu, s.fine, s.window_hu, s.device)
    for channel in range(full.shape[0]):
        one = sliding_window_probs(net, hu, s.fine, s.window_hu, s.device, channel=channel)
        assert one.shape == full.shape[1:]
        torch.testing.assert_close(one, full[channel], rtol=0, atol=1e-6)


def test_a_network_that_does_not_match_its_weights_is_a_model_error(model_path: Path) -> None:
    seg = infer.LungSegmenter.from_file(model_path, device="cpu")
    s = seg.settings
    with pytest.raises(ModelError, match="fine weights do not match"):
        load_network("fine", s.fine, {"bogus": torch.zeros(1)}, s.device)


def test_channel_probability_in_place_equals_softmax_even_for_extreme_logits() -> None:
    logits = torch.tensor(np.random.default_rng(5).normal(0, 30, (3, 6, 7, 8)), dtype=torch.float32)
    logits[1, 0, 0, 0], logits[0, 0, 0, 1], logits[2, 0, 0, 2] = 500.0, -500.0, 1e4  # exp overflows
    expected = torch.softmax(logits, dim=0)
    for k in range(3):
        got = channel_probability_(logits.clone(), k)
        assert torch.isfinite(got).all()
        torch.testing.assert_close(got, expected[k], rtol=1e-5, atol=1e-6)
    assert (channel_probability_(torch.zeros(1, 4, 4), 0) == 1).all()


def _within_trim(region: spatial.Box, box: spatial.Box) -> bool:
    """``region`` lies inside ``box`` and gave up at most the allowed trim per side."""
    t = regions.FIT_TRIM_MM + 1e-6
    return all(b_lo <= r_lo <= b_lo + t and b_hi - t <= r_hi <= b_hi
               for r_lo, r_hi, b_lo, b_hi in zip(region.lo_xyz, region.hi_xyz, box.lo_xyz, box.hi_xyz))


def _big_scan(size: tuple[int, int, int], spacing: tuple[float, float, float], origin: tuple[float, float, float]) -> spatial.Geometry:
    """The grid of a large scan (no voxels)."""
    return spatial.Geometry(size, spacing, origin, (1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0))


def test_fine_region_a_voxel_too_long_is_fitted_to_fewer_windows(model_path: Path) -> None:
    s = infer.LungSegmenter.from_file(model_path, device="cpu").settings
    scan = _big_scan((512, 512, 1000), (0.7, 0.7, 1.0), (-179.0, -179.0, -999.0))
    p = s.fine.patch_xyz[0]
    step = int(p * (1 - s.fine_overlap))
    fine_mm = s.fine_mm[0]
    # x: exactly one voxel more than 4 rows of windows cover; y and z: far from a multiple
    x_mm = (p + 3 * step) * fine_mm + 0.4 * fine_mm
    box = spatial.Box((-x_mm / 2, -70.0, -480.0), (x_mm / 2, 70.0 + 0.3 * step * fine_mm, -160.0))
    fitted = regions._fit_windows(scan, box, s)
    assert regions.windows(scan, fitted, s) < regions.windows(scan, box, s)
    assert _within_trim(fitted, box)
    assert fitted.lo_xyz[1:] == box.lo_xyz[1:] and fitted.hi_xyz[1:] == box.hi_xyz[1:]  # only x moved
    # a box with room to spare in its last window is left alone
    roomy = spatial.Box((-100.0, -70.0, -480.0), (100.0, 70.0, -160.0))
    assert regions._fit_windows(scan, roomy, s) == roomy
    # without overlap (fast) the windows are fitted to the other interval
    fast = dataclasses.replace(s, fast=True)
    assert fast.fine_overlap == 0.0 and s.fine_overlap == s.fine.overlap
    assert regions.windows(scan, regions._fit_windows(scan, box, fast), fast) <= regions.windows(scan, box, fast)


def test_a_region_thinner_than_a_window_reads_one_window_of_context(model_path: Path) -> None:
    """A fine region shorter than a window on an axis (lung bases at the top of an abdominal
    scan) is read over one window centred on it, so the network sees the scan around it and
    not constant padding; the window count stays the same, and long axes are left alone."""
    s = infer.LungSegmenter.from_file(model_path, device="cpu").settings
    scan = _big_scan((512, 512, 100), (0.7, 0.7, 2.5), (-179.0, -179.0, -250.0))
    p = s.fine.patch_xyz
    thin = spatial.Box((-150.0, -80.0, -170.0), (20.0, 120.0, -120.0))  # 50 mm high: under one window
    grown = regions._one_window_at_least(scan, thin, s)
    size = spatial.lattice_grid(scan, s.fine_mm, grown).GetSize()
    assert size[2] >= p[2] and regions.windows(scan, grown, s) == regions.windows(scan, thin, s)
    assert grown.lo_xyz[:2] == thin.lo_xyz[:2] and grown.hi_xyz[:2] == thin.hi_xyz[:2]
    centre = lambda b: (b.lo_xyz[2] + b.hi_xyz[2]) / 2  # noqa: E731
    assert abs(centre(grown) - centre(thin)) < 1e-6
    roomy = spatial.Box((-150.0, -80.0, -200.0), (20.0, 120.0, -50.0))
    assert regions._one_window_at_least(scan, roomy, s) == roomy
    # a planned region writes its box and reads its context
    (region,) = regions.plan_regions(scan, {"left": thin}, s)
    assert region.context == regions._one_window_at_least(scan, region.box, s) and region.context != region.box


def test_a_region_grows_a_window_row_on_the_faces_asked_not_past_the_scan_nor_medially(model_path: Path) -> None:
    """``growable_faces``: a face at the scan's end cannot grow, nor the medial face of a
    one-lung region; ``grown``: a row of windows on each face asked, its context following,
    and the growth recorded per face."""
    s = infer.LungSegmenter.from_file(model_path, device="cpu").settings
    scan = _big_scan((200, 200, 200), (1.0, 1.0, 2.0), (0.0, 0.0, 0.0))  # x, y 0..199 mm, z 0..398 mm
    box = spatial.Box((20.0, 30.0, 0.0), (90.0, 150.0, 120.0))  # its z- face is at the scan's end
    right = regions.Region("right", box, regions._one_window_at_least(scan, box, s))
    assert regions.growable_faces(scan, right, s) == ("x-", "y-", "y+", "z+")  # not x+ (medial), not z-
    left = dataclasses.replace(right, name="left")
    assert regions.growable_faces(scan, left, s) == ("x+", "y-", "y+", "z+")
    both = dataclasses.replace(right, name="both")
    assert regions.growable_faces(scan, both, s) == ("x-", "x+", "y-", "y+", "z+")
    row = regions.window_interval(s.fine.patch_xyz[2], s.fine_overlap) * s.fine_mm[2]
    up = regions.grown(right, ("z+",), scan, s)
    assert up.box.hi_xyz[2] == pytest.approx(120.0 + row) and up.box.lo_xyz == box.lo_xyz
    assert up.grown_mm == pytest.approx((0.0, 0.0, 0.0, 0.0, 0.0, row))
    assert up.context == regions._one_window_at_least(scan, up.box, s) and up.name == "right"
    again = regions.grown(up, ("z+", "x-"), scan, s)
    assert again.grown_mm[5] == pytest.approx(2 * row) and again.grown_mm[0] == pytest.approx(20.0)  # x- stops at the scan
    assert again.box.lo_xyz[0] == pytest.approx(0.0)
    assert right.box == box and right.grown_mm == (0.0,) * 6  # frozen: the region itself is unchanged
    assert "grown_mm" in again.to_dict(scan, s) and "grown_mm" not in right.to_dict(scan, s)


def test_a_lung_region_grows_medially_up_to_the_other_lungs_region(model_path: Path) -> None:
    """Two one-lung regions with a gap between them (a cardiac crop where the coarse stage saw
    only the lateral part of each lung): each medial face may grow, up to the other region's
    face and never past it; a lone lung's region still does not grow medially."""
    s = infer.LungSegmenter.from_file(model_path, device="cpu").settings
    scan = _big_scan((300, 200, 200), (1.0, 1.0, 2.0), (0.0, 0.0, 0.0))  # x 0..299 mm
    boxes = {"right": spatial.Box((10.0, 30.0, 60.0), (90.0, 150.0, 180.0)),
             "left": spatial.Box((200.0, 30.0, 60.0), (290.0, 150.0, 180.0))}
    planned = {r.name: r for r in regions.plan_regions(scan, boxes, s)}
    assert set(planned) == {"right", "left"}  # the union would take more windows
    right, left = planned["right"], planned["left"]
    assert right.medial_mm == pytest.approx(left.box.lo_xyz[0]) and left.medial_mm == pytest.approx(right.box.hi_xyz[0])
    assert "x+" in regions.growable_faces(scan, right, s) and "x-" in regions.growable_faces(scan, left, s)
    row = regions.window_interval(s.fine.patch_xyz[0], s.fine_overlap) * s.fine_mm[0]
    gap = left.box.lo_xyz[0] - right.box.hi_xyz[0]
    assert gap > row  # the first row fits, the next stops at the other region
    once = regions.grown(right, ("x+",), scan, s)
    assert once.box.hi_xyz[0] == pytest.approx(right.box.hi_xyz[0] + row)
    twice = regions.grown(once, ("x+",), scan, s)
    assert twice.box.hi_xyz[0] == pytest.approx(left.box.lo_xyz[0]) and twice.grown_mm[1] == pytest.approx(gap)
    assert "x+" not in regions.growable_faces(scan, twice, s)  # it reached the other region
    alone = regions.plan_regions(scan, {"right": boxes["right"]}, s)[0]
    assert alone.medial_mm is None and "x+" not in regions.growable_faces(scan, alone, s)


# ----------------------------------------------------------------------------- coarse lookups
def _coarse_result(geometry: spatial.Geometry, body: np.ndarray, airways: np.ndarray | None = None) -> coarse.CoarseResult:
    lung = sitk.Image(list(geometry.size), sitk.sitkFloat32)
    return coarse.CoarseResult(
        geometry=geometry, spacing_mm=geometry.spacing, lung=geometry.apply(lung), sides=np.zeros(body.shape, np.uint8),
        body=body, airways=np.zeros_like(body) if airways is None else airways, boxes={},
    )


def test_body_centre_on_a_fine_grid_is_the_same_physical_point() -> None:
    """``CoarseResult.body_centre_on`` (the body's axis per slice of a fine region, for
    dense_to_wall): each fine slice gets the centre of the coarse body's slice it lies in, as
    an index of the fine grid that names the same physical point; a coarse slice without body
    takes the nearest slice's centre."""
    grid = spatial.Geometry((30, 20, 10), (4.0, 4.0, 5.0), (-60.0, -40.0, 100.0), (1.0, 0, 0, 0, 1.0, 0, 0, 0, 1.0))
    body = np.zeros((10, 20, 30), bool)
    for z in range(8):  # a body whose centre moves 1 coarse voxel in x per slice; slices 8-9 empty
        body[z, 5:11, 3 + z:13 + z] = True  # centre (y, x) index (7.5, 7.5 + z)
    fine_grid = spatial.Geometry((40, 30, 25), (1.5, 1.5, 1.5), (-50.3, -31.1, 101.2), grid.direction)
    got = _coarse_result(grid, body).body_centre_on(fine_grid)
    assert got.shape == (25, 2)
    for k in range(25):
        z_mm = fine_grid.origin[2] + k * 1.5
        kc = min(int(round((z_mm - grid.origin[2]) / 5.0)), 9)
        cy, cx = 7.5, 7.5 + min(kc, 7)  # slices 8-9 take slice 7's centre
        y_mm, x_mm = grid.origin[1] + cy * 4.0, grid.origin[0] + cx * 4.0
        assert got[k, 0] == pytest.approx((y_mm - fine_grid.origin[1]) / 1.5)
        assert got[k, 1] == pytest.approx((x_mm - fine_grid.origin[0]) / 1.5)
    # no body at all: the middle of the coarse grid
    empty = _coarse_result(grid, np.zeros_like(body)).body_centre_on(fine_grid)
    assert empty[:, 0] == pytest.approx((grid.origin[1] + 9.5 * 4.0 - fine_grid.origin[1]) / 1.5)
    assert empty[:, 1] == pytest.approx((grid.origin[0] + 14.5 * 4.0 - fine_grid.origin[0]) / 1.5)


def test_coarse_body_lookup_on_a_fine_grid_is_nearest_neighbour_resampling() -> None:
    """``CoarseResult.inside_on`` (the coarse body less airways, looked up on a fine region's
    grid for the pleural-air step) gives what SimpleITK's nearest-neighbour resampling gives."""
    rng = np.random.default_rng(2)
    coarse_img = sitk.Image([23, 19, 17], sitk.sitkUInt8)
    coarse_img.SetSpacing((4.0, 4.0, 4.5))
    coarse_img.SetOrigin((-40.0, -30.0, 100.0))
    body = rng.random((17, 19, 23)) < 0.6
    airways = rng.random((17, 19, 23)) < 0.1
    fine_img = sitk.Image([41, 37, 29], sitk.sitkUInt8)
    fine_img.SetSpacing((1.5, 1.5, 1.5))
    fine_img.SetOrigin((-31.3, -20.6, 111.1))  # no voxel half way between two coarse ones (ties round either way)
    result = _coarse_result(spatial.Geometry.of(coarse_img), body, airways)
    got = result.inside_on(spatial.Geometry.of(fine_img))
    ref = sitk.GetArrayFromImage(spatial.resample_to_reference(
        spatial.copy_geometry((body & ~airways).astype(np.uint8), coarse_img), fine_img,
        interpolator=sitk.sitkNearestNeighbor, default_value=0, output_pixel_type=sitk.sitkUInt8,
    ))
    inside = sitk.GetArrayFromImage(spatial.resample_to_reference(  # where the fine grid lies in the coarse one
        spatial.copy_geometry(np.ones((17, 19, 23), np.uint8), coarse_img), fine_img,
        interpolator=sitk.sitkNearestNeighbor, default_value=0, output_pixel_type=sitk.sitkUInt8,
    )).astype(bool)
    assert got.shape == ref.shape and inside.mean() > 0.5
    np.testing.assert_array_equal(got[inside], ref[inside].astype(bool))
    # in_scan: "where the fine grid lies in the coarse one" without resampling, also for a grid
    # that reaches past the coarse one on three sides
    past = sitk.Image([41, 37, 29], sitk.sitkUInt8)
    past.SetSpacing((1.5, 1.5, 1.5))
    past.SetOrigin((-61.3, 20.6, 151.1))
    within = sitk.GetArrayFromImage(spatial.resample_to_reference(
        spatial.copy_geometry(np.ones((17, 19, 23), np.uint8), coarse_img), past,
        interpolator=sitk.sitkNearestNeighbor, default_value=0, output_pixel_type=sitk.sitkUInt8,
    )).astype(bool)
    assert 0.1 < within.mean() < 0.9
    for grid, expected in ((fine_img, inside), (past, within)):
        np.testing.assert_array_equal(regions.in_scan(spatial.Geometry.of(grid), spatial.Geometry.of(coarse_img)), expected)


def test_any_lung_is_argmax_not_background() -> None:
    """The coarse stage's and validation's lung test equals ``argmax != 0``, ties included
    (argmax takes the first maximum: background)."""
    gen = torch.Generator().manual_seed(0)
    probs = torch.softmax(torch.randn(3, 6, 7, 8, generator=gen), dim=0)
    probs[:, 0, 0, 0] = torch.tensor([0.4, 0.4, 0.2])  # a tie with background
    probs[:, 0, 0, 1] = torch.tensor([0.2, 0.4, 0.4])  # a tie between the lungs
    expected = (probs.argmax(0) != 0).numpy()
    np.testing.assert_array_equal(any_lung(probs), expected)
    assert not expected[0, 0, 0] and expected[0, 0, 1]
    two = torch.softmax(torch.randn(2, 5, 5, 5, generator=gen), dim=0)  # lung-vs-background models
    np.testing.assert_array_equal(any_lung(two), (two.argmax(0) != 0).numpy())


def test_lung_on_a_face_counts_only_for_the_lungs_not_for_small_islands() -> None:
    on_faces = regions.lung_on_faces
    grid = spatial.Geometry((40, 30, 20), (2.0, 2.0, 2.0), (0.0, 0.0, 0.0), tuple(np.eye(3).ravel()))  # type: ignore[arg-type]
    box = spatial.Box((10.0, 10.0, 10.0), (60.0, 50.0, 30.0))  # voxels x 5..30, y 5..25, z 5..15
    faces = regions.FACES
    assert faces == ("x-", "x+", "y-", "y+", "z-", "z+")
    lung = np.zeros((20, 30, 40), bool)
    assert on_faces(lung, grid, box, faces) == ()
    lung[5:14, 8:20, 8:28] = True  # reaches the lower z face: 12 x 20 voxels of 4 mm2
    assert on_faces(lung, grid, box, faces) == ("z-",)
    assert on_faces(lung, grid, box, ("x-", "z+")) == ()  # only the faces asked about
    assert on_faces(lung, grid, box, ()) == ()
    front = lung.copy()
    front[6:14, 5:16, 14:26] = True  # a part of the lung on the y- face: 8 x 12 voxels, 384 mm2
    assert on_faces(front, grid, box, faces) == ("y-", "z-")
    crescent = lung.copy()
    crescent[6:14, 5:16, 14:20] = True  # 8 x 6 voxels, 192 mm2: a thin base's crescent goes on past the face
    assert on_faces(crescent, grid, box, faces) == ("y-", "z-")
    graze = lung.copy()
    graze[6:14, 5:16, 14:17] = True  # 8 x 3 voxels, 96 mm2: under the area
    assert on_faces(graze, grid, box, faces) == ("z-",)
    island = np.zeros_like(lung)
    island[6:15, 17:25, 29:31] = True  # on the x+ face, 9 x 8 voxels (288 mm2), apart from the lung
    assert on_faces(lung | island, grid, box, faces) == ("z-",)  # under a fifth of the lung
    assert on_faces(island, grid, box, faces) == ("x+",)  # alone, it is the lung


def test_lung_on_a_face_grows_a_region_only_where_the_coarse_stage_found_that_lung() -> None:
    """Bowel gas under the bases that the fine network took for lung, outside the coarse
    stage's lungs, does not grow the region down the abdomen; a lung the coarse stage cut
    short, which goes on from what it found, does."""
    on_faces = regions.lung_on_faces
    grid = spatial.Geometry((40, 30, 20), (2.0, 2.0, 2.0), (0.0, 0.0, 0.0), tuple(np.eye(3).ravel()))  # type: ignore[arg-type]
    box = spatial.Box((10.0, 10.0, 10.0), (60.0, 50.0, 30.0))
    lung = np.zeros((20, 30, 40), bool)
    lung[5:14, 8:20, 8:28] = True  # on the z- face
    support = np.zeros(lung.shape, np.uint8)
    assert on_faces(lung, grid, box, regions.FACES, support) == ()  # gas: the coarse stage saw none of it
    support[10:20, 8:20, 8:28] = 2  # the coarse stage found its upper part (4 of 9 slices)
    assert on_faces(lung, grid, box, regions.FACES, support) == ("z-",)
    support[:] = 0
    support[13:20, 8:9, 8:28] = 1  # a row of one slice of 9 in it: under a twentieth
    assert on_faces(lung, grid, box, regions.FACES, support) == ()
    support[13:20, 8:20, 8:28] = 1  # a slice of 9 (a cardiac crop's coarse stage finds little): enough
    assert on_faces(lung, grid, box, regions.FACES, support) == ("z-",)


def test_a_small_find_grows_a_region_only_where_the_coarse_stage_holds_most_of_it() -> None:
    """A component under ``min_ml`` (17 mL here) on a face grows the region only with half of
    it in the coarse stage's lungs: gas in a colon with haustra that both networks took for
    lung at the top of an abdominal scan goes on past the face mostly outside the coarse
    find, and must not pull the region down the colon; a lung found in part is larger."""
    on_faces = regions.lung_on_faces
    grid = spatial.Geometry((40, 30, 20), (2.0, 2.0, 2.0), (0.0, 0.0, 0.0), tuple(np.eye(3).ravel()))  # type: ignore[arg-type]
    box = spatial.Box((10.0, 10.0, 10.0), (60.0, 50.0, 30.0))
    lung = np.zeros((20, 30, 40), bool)
    lung[5:14, 8:20, 8:28] = True  # 2160 voxels of 8 mm3: 17.3 mL, on the z- face
    support = np.zeros(lung.shape, np.uint8)
    support[10:20, 8:20, 8:28] = 2  # 4 of its 9 slices in the coarse lung: 0.44
    assert on_faces(lung, grid, box, regions.FACES, support) == ("z-",)  # no size given: as before
    assert on_faces(lung, grid, box, regions.FACES, support, min_ml=50.0) == ()
    assert on_faces(lung, grid, box, regions.FACES, support, min_ml=17.0) == ("z-",)  # 17.3 mL: not small
    support[9:20, 8:20, 8:28] = 2  # 5 of 9: more than half
    assert on_faces(lung, grid, box, regions.FACES, support, min_ml=50.0) == ("z-",)


# ----------------------------------------------------------------------------- clean-up rules as options
#: rules off by default (the rule ablation: they add non-lung on scans other than segpipe.synthetic's)
OFF_BY_DEFAULT = ("dense_lung", "dense_to_wall")


def _default_on(name: str) -> bool:
    return name not in OFF_BY_DEFAULT


def _rules_enabled(report: dict[str, Any]) -> dict[str, bool]:
    return {name: r["enabled"] for name, r in report["rules"].items()}


def test_rules_switched_off_in_the_api_are_reported_in_order_and_the_segmenter_keeps_no_state(
    model_path: Path, scan: sitk.Image, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``rules={"fat": False}``: the report lists every step in its order, fat off, the rest
    on; a prediction sets nothing on the segmenter (its settings are frozen), so a second one
    gives the same mask."""
    from segpipe.model import load_model

    _force_boxes(monkeypatch)
    header, weights = load_model(model_path)
    seg = infer.LungSegmenter(header, weights, device="cpu", rules={"fat": False})
    assert seg.header is header and not seg.rules.fat.enabled and seg.rules is seg.settings.rules and seg.rules.edge_snap.enabled
    before = dict(vars(seg))
    settings = seg.settings
    first = seg.predict_with_report(scan)
    assert vars(seg).keys() == before.keys(), set(vars(seg)) - set(before)
    assert all(vars(seg)[k] is v for k, v in before.items()) and seg.settings == settings
    with pytest.raises(dataclasses.FrozenInstanceError):
        seg.settings.fast = True  # type: ignore[misc]
    report = first.report
    assert list(report["rules"]) == RULE_ORDER
    assert _rules_enabled(report) == {name: name != "fat" and _default_on(name) for name in RULE_ORDER}
    for name, r in report["rules"].items():
        assert set(r) == {"enabled", "grid", "added_ml", "removed_ml"}
        assert r["grid"] == ("fine" if name in RULE_ORDER[:3] else "scan")
        assert r["added_ml"] >= 0 and r["removed_ml"] >= 0
    assert report["rules"]["fat"]["added_ml"] == report["rules"]["fat"]["removed_ml"] == 0.0
    assert report["rules"]["body"]["removed_ml"] > 0  # the untrained net's lung in the outside air
    assert "pleural_air_ml" not in report and "dense_lung_ml" not in report
    json.dumps(report)
    second = seg.predict_with_report(scan)
    np.testing.assert_array_equal(sitk.GetArrayViewFromImage(first.label), sitk.GetArrayViewFromImage(second.label))
    assert second.report["rules"] == report["rules"]


def test_rules_can_be_given_as_a_ruleset_and_a_scan_without_lungs_reports_every_rule(model_path: Path, scan: sitk.Image) -> None:
    from segpipe.refine import RuleSet

    rules = RuleSet().updated({"edge_snap": False, "pleural_air": {"min_ml": 20}})
    seg = infer.LungSegmenter.from_file(model_path, device="cpu", rules=rules)
    assert seg.rules is rules
    report = seg.predict_with_report(scan).report  # the untrained coarse net finds no lung
    assert list(report["rules"]) == RULE_ORDER
    assert _rules_enabled(report) == {name: name != "edge_snap" and _default_on(name) for name in RULE_ORDER}
    assert all(r["added_ml"] == r["removed_ml"] == 0.0 for r in report["rules"].values())


def test_cli_no_rule_gives_a_report_with_the_rule_off(model_path: Path, scan: sitk.Image, tmp_path: Path) -> None:
    src = io.write_image(scan, tmp_path / "case.nii.gz")
    args = ["infer", str(src), "-o", str(tmp_path / "out"), "--model", str(model_path), "--device", "cpu", "--quiet"]
    assert main([*args, "--no-rule", "fat"]) == 0
    report = json.loads((tmp_path / "out" / "case_lungs.json").read_text())
    assert list(report["rules"]) == RULE_ORDER
    assert _rules_enabled(report) == {name: name != "fat" and _default_on(name) for name in RULE_ORDER}


@pytest.fixture
def cli_segmenter(monkeypatch: pytest.MonkeyPatch, model_path: Path, scan: sitk.Image, tmp_path: Path):  # type: ignore[no-untyped-def]
    """Runs ``segpipe infer`` up to the segmenter (no scan is segmented): returns the exit
    code and the segmenter it built (None when it stopped before)."""
    src = io.write_image(sitk.RegionOfInterest(scan, [8, 8, 8], [0, 0, 0]), tmp_path / "case.nii.gz")
    built: list[infer.LungSegmenter] = []

    def fake_run_jobs(seg: infer.LungSegmenter, jobs: list, **kwargs: Any) -> list[str]:
        built.append(seg)
        return []

    monkeypatch.setattr(infer, "run_jobs", fake_run_jobs)

    def run(*extra: str, model: bool = True) -> tuple[int, infer.LungSegmenter | None]:
        built.clear()
        args = ["infer", str(src), "-o", str(tmp_path / "out"), "--quiet", *(["--model", str(model_path)] if model else []), *extra]
        code = main(args)
        return code, (built[0] if built else None)

    return run


def test_cli_rule_options_reach_the_segmenter(cli_segmenter: Any) -> None:
    code, seg = cli_segmenter("--device", "cpu", "--rule-param", "pleural_air.min_ml=20", "--no-rule", "edge_snap",
                              "--no-rule", "airways", "--rule-param", "fat.hu=[-190, -40]")
    assert code == 0 and seg is not None
    assert seg.rules.pleural_air.min_ml == 20.0 and seg.rules.pleural_air.enabled
    assert not seg.rules.edge_snap.enabled and not seg.rules.airways.enabled and seg.rules.fat.enabled
    assert seg.rules.fat.hu == (-190.0, -40.0)
    code, seg = cli_segmenter("--device", "cpu")
    assert code == 0 and seg is not None and all(seg.rules.enabled(n) == _default_on(n) for n in RULE_ORDER)


@pytest.mark.parametrize("extra, expected", [
    (["--no-rule", "snow_removal"], "snow_removal"),  # unknown rule
    (["--rule", "snow_removal"], "snow_removal"),
    (["--rule-param", "pleural_air.bogus=3"], "bogus"),  # unknown parameter
    (["--rule-param", "snow_removal.min_ml=3"], "snow_removal"),
    (["--rule-param", "pleural_air.min_ml"], "NAME.KEY=VALUE"),  # no value
    (["--rule-param", "pleural_air.min_ml=many"], "min_ml"),  # not a number
    (["--no-rule", "body"], "always on"),  # always-on steps cannot be switched off
    (["--no-rule", "components"], "always on"),
    (["--rule", "fat", "--no-rule", "fat"], "fat"),
])
def test_cli_bad_rule_options_one_line_exit_2(cli_segmenter: Any, capsys: pytest.CaptureFixture[str], extra: list[str], expected: str) -> None:
    capsys.readouterr()
    code, seg = cli_segmenter("--device", "cpu", *extra)
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and seg is None
    assert len(err) == 1 and err[0].startswith("segpipe infer: error:") and expected in err[0], err


def test_cli_config_file_is_applied_and_the_command_line_wins(cli_segmenter: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import yaml

    cfg = tmp_path / "infer.yaml"
    cfg.write_text(yaml.safe_dump({"device": "cpu", "fast": True, "min_lung_ml": 80, "sw_batch_size": 3,
                                   "rules": {"edge_snap": False, "pleural_air": {"min_ml": 30}}}))
    code, seg = cli_segmenter("--config", str(cfg))
    assert code == 0 and seg is not None
    s = seg.settings
    assert s.fast and s.fine_overlap == 0.0 and s.device.type == "cpu" and s.min_lung_ml == 80.0 and s.sw_batch_size == 3
    assert not seg.rules.edge_snap.enabled and seg.rules.pleural_air.min_ml == 30.0
    assert all(seg.rules.enabled(n) == _default_on(n) for n in RULE_ORDER if n != "edge_snap")
    # the command line wins; the rest of the file still holds
    code, seg = cli_segmenter("--config", str(cfg), "--rule", "edge_snap", "--rule-param", "pleural_air.min_ml=20",
                              "--min-lung-ml", "60", "--no-rule", "fat")
    assert code == 0 and seg is not None
    assert seg.rules.edge_snap.enabled and seg.rules.pleural_air.min_ml == 20.0 and not seg.rules.fat.enabled
    assert seg.settings.min_lung_ml == 60.0 and seg.settings.fast and seg.settings.sw_batch_size == 3
    code, seg = cli_segmenter("--config", str(cfg), "--no-rule", "pleural_air")  # a switch keeps the file's parameters
    assert code == 0 and seg is not None and not seg.rules.pleural_air.enabled and seg.rules.pleural_air.min_ml == 30.0
    # an unknown key, an unknown rule, a bad value: one line, exit 2
    for bad in ({"fast": True, "bogus": 1}, {"rules": {"snow_removal": False}}, {"rules": {"body": False}}, {"device": "tpu"}):
        cfg.write_text(yaml.safe_dump(bad))
        capsys.readouterr()
        code, seg = cli_segmenter("--config", str(cfg))
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 2 and seg is None and len(err) == 1 and err[0].startswith("segpipe infer: error:"), (bad, err)


# ----------------------------------------------------------------------------- rules in the model file
@pytest.fixture(scope="module")
def fat_off_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _save_tiny_model(tmp_path_factory.mktemp("fat_off") / "model.pt",
                            refine={"fat": {"enabled": False}, "pleural_air": {"min_ml": 25.0}})


def test_rules_stored_in_the_model_file_are_the_segmenters_and_options_change_them(fat_off_model: Path) -> None:
    seg = infer.LungSegmenter.from_file(fat_off_model, device="cpu")
    assert not seg.rules.fat.enabled and seg.rules.pleural_air.min_ml == 25.0
    assert all(seg.rules.enabled(n) == _default_on(n) for n in RULE_ORDER if n != "fat")
    on = infer.LungSegmenter.from_file(fat_off_model, device="cpu", rules={"fat": True, "edge_snap": False})
    assert on.rules.fat.enabled and not on.rules.edge_snap.enabled and on.rules.pleural_air.min_ml == 25.0


def test_unknown_rule_in_the_model_file_is_a_model_error(tmp_path: Path) -> None:
    for refine, match in (({"snow_removal": {"enabled": False}}, "snow_removal"), ({"fat": {"bogus": 1}}, "bogus"),
                          ({"body": {"enabled": False}}, "always on")):
        path = _save_tiny_model(tmp_path / "bad.pt", refine=refine)
        with pytest.raises(ModelError, match=match):
            infer.LungSegmenter.from_file(path, device="cpu")


def test_rules_command_lists_the_steps_in_order(model_path: Path, fat_off_model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["rules", "--model", str(model_path)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 10
    for i, (line, name) in enumerate(zip(lines, RULE_ORDER), 1):
        assert line.split()[:2] == [f"{i}.", name], line
        assert line.split()[3] == ("always" if name in ALWAYS_ON else "on" if _default_on(name) else "off"), line
    assert main(["rules", "--model", str(model_path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert list(data) == RULE_ORDER and data["fat"]["enabled"] is True and data["pleural_air"]["min_ml"] == 10.0
    # the model file's own rules
    assert main(["rules", "--model", str(fat_off_model)]) == 0
    fat = capsys.readouterr().out.strip().splitlines()[RULE_ORDER.index("fat")]
    assert fat.split()[3] == "off"
    assert main(["rules", "--model", str(fat_off_model), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["fat"]["enabled"] is False and data["pleural_air"]["min_ml"] == 25.0
    # the bundled model, by default
    from segpipe.model import DEFAULT_MODEL

    if DEFAULT_MODEL.is_file():
        assert main(["rules"]) == 0
        assert [line.split()[:2] for line in capsys.readouterr().out.strip().splitlines()] == [
            [f"{i}.", name] for i, name in enumerate(RULE_ORDER, 1)]
    # a model file with a rule this version does not know: one line, exit 2
    bad = _save_tiny_model(tmp_path / "bad.pt", refine={"snow_removal": {}})
    assert main(["rules", "--model", str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("segpipe rules: error:") and "snow_removal" in err[0]


def test_confident_parts_drop_unsure_bowel_gas_before_the_sides_are_split() -> None:
    """A large but unsure find (bowel gas) goes, so it cannot take a lung's place when the sides
    are split; a small sure find counts where the scan's edge cuts it (a base at the top of an
    abdominal scan), not inside the view."""
    shape = (30, 20, 40)
    mask = np.zeros(shape, bool)
    confident = np.zeros(shape, bool)
    mask[2:12, 2:12, 2:12] = True  # 1000 voxels of gas, 100 of them sure
    confident[2:3, 2:12, 2:12] = True
    mask[25:30, 2:8, 25:35] = True  # a base cut by the scan's top: 300 voxels, all sure
    confident[25:30, 2:8, 25:35] = True
    mask[14:19, 2:8, 25:35] = True  # the same inside the view
    confident[14:19, 2:8, 25:35] = True
    kept = coarse.confident_parts(mask, confident, voxel_ml=1.0, min_ml=500.0)  # a twentieth: 25 mL at the edge
    assert kept[27, 5, 30] and not kept[5, 5, 5] and not kept[16, 5, 30]
    assert kept.sum() == 300
    assert coarse.confident_parts(mask, confident, voxel_ml=1.0, min_ml=50.0).sum() == mask.sum()
    assert not coarse.confident_parts(np.zeros(shape, bool), confident, 1.0, 50.0).any()


def test_confident_parts_pool_the_pieces_of_a_base_that_the_scans_end_cuts() -> None:
    """The top of an abdominal scan cuts a base into crescents of the recess, each below the
    cut-lung share: the pieces on one side of the midline that reach the scan's last slice count
    together; pieces across the midline, inside the view, or that the network calls the other
    side do not. Beside a piece that is enough alone, the others are kept with some sure lung."""
    from segpipe.refine import piece_side

    shape = (30, 20, 40)
    mask = np.zeros(shape, bool)
    mask[26:30, 2:5, 25:30] = True  # two pieces of a left base at the top: 60 voxels each
    mask[26:30, 10:13, 32:37] = True
    mask[26:30, 2:5, 2:7] = True  # one piece on the right: 60 voxels
    mask[10:14, 2:5, 25:30] = True  # the same two inside the view
    mask[10:14, 10:13, 32:37] = True
    confident = mask.copy()
    left_vote = np.zeros(shape, bool)
    left_vote[:, :, 20:] = True
    midline = 19.5

    # the cut-lung share of 3000 mL is 90 mL: no piece alone, the two left ones together
    assert not coarse.confident_parts(mask, confident, 1.0, 3000.0).any()
    kept = coarse.confident_parts(mask, confident, 1.0, 3000.0, side_of=lambda m: piece_side(m, midline, left_vote))
    assert kept[28, 3, 27] and kept[28, 11, 34]
    assert not kept[28, 3, 4] and not kept[12, 3, 27] and kept.sum() == 120
    # with the surer share (5 %: 150 mL) the two together are not enough: locate calls such a side unsure
    assert not coarse.confident_parts(mask, confident, 1.0, 3000.0, side_of=lambda m: piece_side(m, midline, left_vote),
                                      share=coarse.SURE_CUT_SHARE).any()
    vote = left_vote.copy()
    vote[26:30, 10:13, 32:37] = False  # the network calls one of them right: no side, no pooling
    assert not coarse.confident_parts(mask, confident, 1.0, 3000.0, side_of=lambda m: piece_side(m, midline, vote)).any()
    # where one piece is enough alone, the crescents beside it at the same end are that base's
    # with a share of sure lung each (0.6 % of 3000 mL: 18 voxels); a speck is not
    mask[20:30, 2:8, 25:30] = True  # the first left piece grows to 300 voxels
    mask[29, 16:18, 22:24] = True  # a left speck of 4 voxels at the top
    confident = mask.copy()
    kept = coarse.confident_parts(mask, confident, 1.0, 3000.0, side_of=lambda m: piece_side(m, midline, left_vote))
    assert kept[28, 3, 27] and kept[28, 11, 34] and not kept[29, 16, 22] and kept.sum() == 360
    confident[26:30, 10:13, 32:37] = False  # the crescent beside it holds no sure lung: it stays out
    confident[29, 10:13, 32:34] = True  # (6 sure voxels)
    kept = coarse.confident_parts(mask, confident, 1.0, 3000.0, side_of=lambda m: piece_side(m, midline, left_vote))
    assert kept[28, 3, 27] and not kept[28, 11, 34] and kept.sum() == 300


def test_confident_parts_keep_a_split_vote_crescent_beside_a_found_base() -> None:
    """The front of a left base beside the heart, whose side vote is split: beside a left base
    that the scan's last slice cuts and that is enough alone, it is kept with some sure lung
    where ``beside_of`` (:func:`segpipe.refine.end_piece_side`) puts it on the left; it is not
    pooled to make a base where none is enough alone, and one the vote calls right stays out."""
    from segpipe.refine import end_piece_side, piece_side

    shape = (30, 20, 40)
    mask = np.zeros(shape, bool)
    mask[20:30, 8:16, 26:36] = True  # a left base enough alone: 800 voxels
    mask[26:30, 1:4, 21:25] = True  # its front: 48 voxels
    confident = mask.copy()
    left_vote = np.zeros(shape, bool)
    left_vote[:, :, 20:] = True
    left_vote[26:30, 1:3, 21:25] = False  # two thirds of the front vote right
    midline = 19.5
    side_of = lambda m: piece_side(m, midline, left_vote)  # noqa: E731
    beside_of = lambda m: end_piece_side(m, midline, left_vote)  # noqa: E731
    kept = coarse.confident_parts(mask, confident, 1.0, 3000.0, side_of=side_of)
    assert kept[25, 10, 30] and not kept[28, 2, 22]
    kept = coarse.confident_parts(mask, confident, 1.0, 3000.0, side_of=side_of, beside_of=beside_of)
    assert kept[25, 10, 30] and kept[28, 2, 22] and kept.sum() == 848
    base_small = mask.copy()
    base_small[20:26] = False  # the base's part in the top slices only (320 voxels): not enough alone
    assert not coarse.confident_parts(base_small, base_small, 1.0, 12000.0, side_of=side_of, beside_of=beside_of).any()
    vote = left_vote.copy()
    vote[26:30, 1:4, 21:25] = False  # the front votes right: it stays out
    kept = coarse.confident_parts(mask, confident, 1.0, 3000.0, side_of=lambda m: piece_side(m, midline, vote),
                                  beside_of=lambda m: end_piece_side(m, midline, vote))
    assert kept[25, 10, 30] and not kept[28, 2, 22]


def test_confident_parts_leave_out_a_find_beyond_the_skin() -> None:
    """A lung lies within the body: a find with most of its sure lung in the band of one voxel
    beyond the skin (a mattress of lung's density under the back, cut by the scan's sides and
    ends) counts for nothing, however large; a lung with a few of its voxels there counts."""
    shape = (30, 20, 40)
    body = np.zeros(shape, bool)
    body[:, 2:16, 4:36] = True
    mask = np.zeros(shape, bool)
    mask[:, 16, :] = True  # the band under the back, the scan's whole height and width: 1200 voxels
    mask[5:25, 5:15, 8:18] = True  # a lung inside the body: 2000 voxels
    mask[5:25, 10:12, 2:8] = True  # and 240 in the band at the side of the body (x 2-3)
    confident = mask.copy()
    kept = coarse.confident_parts(mask, confident, voxel_ml=1.0, min_ml=500.0, inside=body)
    assert kept[15, 10, 12] and kept[15, 10, 2] and not kept[15, 16, 30]
    assert coarse.confident_parts(mask, confident, voxel_ml=1.0, min_ml=500.0)[15, 16, 30]  # without: the band counts
    band = np.zeros(shape, bool)
    band[:, 16, :] = True
    assert not coarse.confident_parts(band, band, 1.0, 500.0, inside=body).any()
    assert coarse.confident_parts(band, band, 1.0, 500.0).any()
    # nor is it one of a small base's pieces at the scan's end, which count together
    from segpipe.refine import piece_side

    pieces = np.zeros(shape, bool)
    pieces[:, 16, 22:40] = True  # the band on the left only
    pieces[27:30, 5:10, 22:25] = True  # two crescents of a left base at the top: 45 voxels each,
    pieces[27:30, 5:10, 30:33] = True  # each under a twentieth of 1000 mL (50), together over it
    side_of = lambda m: piece_side(m, 19.5, np.ones(shape, bool))  # noqa: E731
    kept = coarse.confident_parts(pieces, pieces, 1.0, 1000.0, inside=body, side_of=side_of)
    assert kept[28, 7, 23] and kept[28, 7, 31] and not kept[15, 16, 30] and kept.sum() == 90


def test_a_lung_the_reconstruction_circle_cuts_is_a_cut_lung() -> None:
    """The scanner's circle is the scan's edge: a lung that reaches its padding (-3024 HU, or
    -1024 at the same pixels of every slice) needs only the cut-lung share of the minimum, as
    one that reaches a face of the array; the same find away from the circle needs all of it."""
    from segpipe.refine.body import BodyParams

    shape = (20, 40, 40)
    hu = np.full(shape, 40.0, np.float32)
    yy, xx = np.mgrid[:40, :40]
    outside = (yy - 19.5) ** 2 + (xx - 19.5) ** 2 > 19**2
    hu[:, outside] = -3024.0
    mask = np.zeros(shape, bool)
    mask[5:15, 16:24, 1:8] = True  # 560 voxels reaching the circle at the left of the view
    assert not (mask & outside[None]).any() and not mask[:, :, 0].any()
    hu[mask] = -850.0
    edge = coarse.view_edge(hu, None, BodyParams())
    assert edge is not None and (edge & mask).any()
    assert coarse.confident_parts(mask, mask, voxel_ml=1.0, min_ml=1000.0, edge=edge).sum() == mask.sum()  # 50 mL needed
    assert not coarse.confident_parts(mask, mask, voxel_ml=1.0, min_ml=1000.0).any()  # without the circle: 1000 needed
    inner = np.roll(mask, 10, axis=2)  # the same find, away from the circle
    assert not coarse.confident_parts(inner, inner, voxel_ml=1.0, min_ml=1000.0, edge=edge).any()
    air = np.where(outside[None], -1024.0, hu).astype(np.float32)  # padding with the value of air: the footprint
    assert (coarse.view_edge(air, outside, BodyParams()) & mask).any()
    assert coarse.view_edge(np.full(shape, 40.0, np.float32), None, BodyParams()) is None


def test_coarse_padding_lies_where_coarse_voxel_centres_fall_on_it() -> None:
    """On the coarse grid the scanner's padding is where a coarse voxel's centre lies on it in
    the scan's own voxels, whatever its value (-3024, or -1024 at the same pixels of every
    slice); a coarse voxel that mixes padding and lung along the circle is the scan's. The
    coarse grid itself is resampled with the padding raised to air."""
    from types import SimpleNamespace

    from segpipe.refine.body import BodyParams, padding_of

    s = SimpleNamespace(rules=SimpleNamespace(body=BodyParams()))
    shape = (12, 64, 64)
    yy, xx = np.mgrid[:64, :64]
    outside = (yy - 31.5) ** 2 + (xx - 31.5) ** 2 > 29.0**2
    masks = []
    for value in (-3024.0, -1024.0):
        a = np.full(shape, -850.0, np.float32)
        a[:, outside] = value
        canonical = sitk.GetImageFromArray(a)
        coarse_img = spatial.resample_image(spatial.air_floor(canonical), (4.0, 4.0, 4.0))
        assert sitk.GetArrayViewFromImage(coarse_img).min() >= spatial.AIR_HU
        padding = coarse._padding_on(canonical, coarse_img, padding_of(a, BodyParams()), s)
        assert padding is not None and padding.shape == sitk.GetArrayViewFromImage(coarse_img).shape
        masks.append(padding)
    centre = np.rint(4 * np.arange(16) + 1.5)  # coarse voxel centres in the scan's index, nearest voxel
    expected = ((centre[:, None] - 31.5) ** 2 + (centre[None, :] - 31.5) ** 2 > 29.0**2)
    assert (masks[0] == expected[None]).all() and (masks[1] == masks[0]).all()
    mixed = sitk.GetArrayViewFromImage(spatial.resample_image(sitk.GetImageFromArray(
        np.where(outside, -3024.0, -850.0).astype(np.float32)[None].repeat(12, 0)), (4.0, 4.0, 4.0)))
    assert ((mixed < BodyParams().padding_hu) & ~masks[0]).any()  # what the raw values would have made padding


def test_view_rim_is_the_padding_beside_the_body_in_plane() -> None:
    """The coarse voxels of the scanner's padding that touch the body in-plane (face
    neighbours): where the view cuts the body, the scan's voxels there that are not padding
    are inside it. None where the body stays clear of the padding or there is none."""
    body = np.zeros((3, 10, 10), bool)
    body[:, 2:8, 0:6] = True  # the body reaches the padding at x = 6
    padding = np.zeros((10, 10), bool)
    padding[:, 6:] = True  # a (y, x) footprint, the same in every slice
    rim = coarse._view_rim(body, padding)
    assert rim is not None and rim.shape == body.shape
    assert np.array_equal(np.argwhere(rim[0]), [[y, 6] for y in range(2, 8)]) and (rim == rim[:1]).all()
    three = np.broadcast_to(padding, body.shape).copy()
    three[1] = False  # no padding in the middle slice
    rim = coarse._view_rim(body, three)
    assert rim is not None and not rim[1].any() and rim[0].sum() == 6
    assert coarse._view_rim(body, None) is None
    assert coarse._view_rim(body & (np.arange(10) < 4), padding) is None  # two voxels clear of the padding


def test_scan_grid_body_reaches_the_padding_beside_the_view_rim() -> None:
    """On the scan's grid a voxel is inside the body where its nearest coarse voxel is, and,
    where that coarse voxel is the view's rim (padding beside the body), where the scan's own
    voxel is not padding: the lung the circle cuts reaches the circle, never the padding."""
    from types import SimpleNamespace

    from segpipe.infer.assemble import _body_lookup

    body = np.zeros((1, 4, 4), bool)
    body[0, :, :2] = True  # coarse columns 0-1 inside, 2-3 padding
    rim = np.zeros_like(body)
    rim[0, :, 2] = True
    footprint = np.zeros((16, 16), np.float32)
    footprint[:, 11:] = 1.0  # on the scan's 1 mm voxels the padding starts at x = 11, inside coarse column 2
    kc, jc, ic = np.zeros(2, int), np.arange(16) // 4, np.arange(16) // 4
    canvas = SimpleNamespace(offset=(0, 0, 0), array=np.zeros((2, 16, 16), np.uint8))
    plain = SimpleNamespace(body=body, view_rim=None, padding=(sitk.GetImageFromArray(footprint), -2048.0))
    assert np.array_equal(np.flatnonzero(_body_lookup(plain, kc, jc, ic, canvas)(0)[0]), np.arange(8))
    cut = SimpleNamespace(body=body, view_rim=rim, padding=plain.padding)
    assert np.array_equal(np.flatnonzero(_body_lookup(cut, kc, jc, ic, canvas)(1)[5]), np.arange(11))
    oblique = SimpleNamespace(body=body, view_rim=rim, padding=(None, -2048.0))  # no footprint: the coarse body alone
    assert _body_lookup(oblique, kc, jc, ic, canvas)(0).sum() == 16 * 8
    shifted = SimpleNamespace(offset=(4, 0, 0), array=np.zeros((2, 16, 8), np.uint8))  # a canvas from x = 4
    got = _body_lookup(cut, kc, jc, ic[4:12], shifted)(0)
    assert np.array_equal(np.flatnonzero(got[0]), np.arange(7))  # scan x 4..10


def test_scanned_slices_leave_out_blank_slices_at_the_scans_ends() -> None:
    """The coarse slices whose centres lie on the scan's blank end slices (nothing above the
    body's threshold, or one value throughout) are beyond the scanned range; blank slices
    between others, or a scan without any, change nothing. The second range holds the coarse
    slices nearest to a scanned slice (where the scan looks the coarse results up)."""
    a = np.full((20, 8, 8), -1024.0, np.float32)
    a[3:18, 2:6, 2:6] = 40.0  # the patient in slices 3-17
    scan = sitk.GetImageFromArray(a)
    scan.SetSpacing((4.0, 4.0, 2.0))
    coarse_img = spatial.resample_image(scan, (4.0, 4.0, 4.0))  # 10 slices
    zs, near = coarse.scanned_slices(scan, coarse_img, -500.0)
    assert (zs.start, zs.stop) == (2, 9)  # centres at scan index 0.5, 2.5, ..: those of 4.5 .. 16.5 (nearest 4 .. 16)
    assert (near.start, near.stop) == (1, 9)  # slice 3 is nearest to the centre at 2.5, which lies on blank slice 2

    def same_grid(x: np.ndarray) -> tuple[slice, slice]:
        image = sitk.GetImageFromArray(x)
        return coarse.scanned_slices(image, image, -500.0)

    b = a.copy()
    b[18:] = 0.0  # a resample's default value: one value throughout, not a scanned slice
    assert same_grid(b) == (slice(3, 18), slice(3, 18))
    a[8] = -1024.0  # a blank slice inside: still one range
    assert same_grid(a)[0] == slice(3, 18)
    a[:] = 40.0
    a[:, 0, 0] = -1000.0  # every slice scanned
    assert same_grid(a) == (slice(None), slice(None))
    a[:] = -1024.0
    assert same_grid(a) == (slice(None), slice(None))


def test_confident_parts_give_gas_at_the_scans_end_no_cut_lung_share() -> None:
    """A find at the scan's edge whose sure voxels are a quarter or more pure air is gas under
    the dome (stomach, colon), not the tip of a lung: it needs the whole minimum and it does not
    pool with a base's pieces; lung tissue with some pure-air voxels keeps the share."""
    from segpipe.refine import piece_side

    shape = (30, 20, 40)
    mask = np.zeros(shape, bool)
    mask[25:30, 2:8, 25:35] = True  # 300 voxels at the top, left
    mask[25:30, 12:16, 25:35] = True  # 200 more on the left
    confident = mask.copy()
    air = np.zeros(shape, bool)
    air[25:30, 2:8, 25:35] = True  # the first is pure air: gas
    air[25:26, 12:16, 25:35] = True  # a fifth of the second: lung tissue
    left_vote = np.zeros(shape, bool)
    left_vote[:, :, 20:] = True
    kept = coarse.confident_parts(mask, confident, 1.0, 8000.0, air=air, air_share=0.25)  # share: 240 mL
    assert not kept.any()  # the gas needs the whole 8000 mL, the lung's 200 mL are under 240
    assert coarse.confident_parts(mask, confident, 1.0, 8000.0)[27, 5, 30]  # without the guard the gas counts
    pooled = coarse.confident_parts(mask, confident, 1.0, 8000.0, air=air, air_share=0.25,
                                    side_of=lambda m: piece_side(m, 19.5, left_vote))
    assert not pooled.any()  # 200 mL of lung do not pool with 300 of gas
    kept = coarse.confident_parts(mask, confident, 1.0, 6000.0, air=air, air_share=0.25)  # share: 180 mL
    assert kept[27, 14, 30] and not kept[27, 5, 30]
