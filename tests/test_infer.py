"""Cascade inference mechanics with a small untrained model: exact output geometry for every
storage orientation, API = CLI, batch skip/overwrite, shards, bad model files, HU offsets,
and the CUDA out-of-memory fallback (simulated)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import SimpleITK as sitk
import torch

from segpipe import infer, io, modelfile, spatial
from segpipe.cli import main
from segpipe.config import NetworkConfig
from segpipe.errors import InputError, ModelError
from segpipe.network import build_network
from segpipe.postprocess import body_interior


def _stage(net: NetworkConfig, patch: list[int]) -> dict:
    return {"network": build_network(net).settings(), "patch_xyz": patch, "overlap": 0.25, "batch_size": 2, "amp": False}


@pytest.fixture(scope="module")
def model_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny untrained model whose fine stage predicts lung on dark voxels: enough to test
    the mechanics, not the accuracy."""
    torch.manual_seed(0)
    net_cfg = NetworkConfig(base_width=4, max_width=8, blocks_per_stage=1, depth=2)
    coarse, fine = build_network(net_cfg), build_network(net_cfg)
    header = {
        "labels": {"0": "background", "1": "right_lung", "2": "left_lung"},
        "spacing": {"coarse_mm": [6.0, 6.0, 6.0], "fine_mm": [3.0, 3.0, 3.0], "coarse_size_xyz": None},
        "intensity": {"window_hu": [-1024.0, 400.0]},
        "margin_mm": 6.0,
        "coarse": _stage(net_cfg, [32, 32, 32]),
        "fine": _stage(net_cfg, [32, 32, 32]),
    }
    path = tmp_path_factory.mktemp("model") / "model.pt"
    return modelfile.save_model(path, header, {"coarse": coarse.state_dict(), "fine": fine.state_dict()})


@pytest.fixture(scope="module")
def scan() -> sitk.Image:
    from segpipe import synthetic

    return synthetic.make_phantom(synthetic.PhantomSpec(seed=2, size_xyz=(64, 64, 40), coverage="chest")).image


def _force_boxes(monkeypatch: pytest.MonkeyPatch) -> None:
    """An untrained coarse net finds no lung; give both lungs a box in the chest instead."""

    def boxes(self, coarse_label, coarse_img, confident=None):  # type: ignore[no-untyped-def]
        lo = np.asarray(coarse_img.TransformContinuousIndexToPhysicalPoint([-0.5] * 3))
        hi = np.asarray(coarse_img.TransformContinuousIndexToPhysicalPoint([s - 0.5 for s in coarse_img.GetSize()]))
        lo, hi = np.minimum(lo, hi), np.maximum(lo, hi)
        mid = (lo[0] + hi[0]) / 2
        sides = np.zeros(coarse_label.shape, np.uint8)
        nx = sides.shape[2]
        sides[:, :, 1 : nx // 2 - 1] = 1  # canonical LPS: low x is the patient's right
        sides[:, :, nx // 2 + 1 : -1] = 2
        self._coarse_sides = sides
        self._coarse_body = body_interior(sitk.GetArrayViewFromImage(coarse_img), slack_voxels=1)
        return {
            "right": spatial.Box((lo[0] + 20, lo[1] + 20, lo[2] + 10), (mid, hi[1] - 20, hi[2] - 10)),
            "left": spatial.Box((mid - 10, lo[1] + 20, lo[2] + 10), (hi[0] - 20, hi[1] - 20, hi[2] - 10)),
        }

    monkeypatch.setattr(infer.LungSegmenter, "_lung_boxes", boxes)


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


@pytest.mark.parametrize("grow", [False, True])
def test_scan_read_by_predict_is_cut_to_the_lungs_region_without_changing_the_mask(
    model_path: Path, scan: sitk.Image, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, grow: bool
) -> None:
    """A scan that predict reads itself is cut to the lungs' region after the coarse stage
    (its memory goes back); the fine stage reads the same voxels, so the mask equals the one
    from the caller's own image, which is never copied. When a fine region grows past the
    part kept (this untrained network's lung covers the boxes' faces), the scan is read again
    and cut anew: the mask is still the same."""
    _force_boxes(monkeypatch)
    if not grow:
        monkeypatch.setattr(infer, "_GROW_ROUNDS", 0)
    forced = infer.LungSegmenter._lung_boxes

    def smaller(self, *args):  # type: ignore[no-untyped-def]  # boxes well inside this coarse scan
        return {side: box.expand((-30.0, -30.0, -70.0)) for side, box in forced(self, *args).items()}

    monkeypatch.setattr(infer.LungSegmenter, "_lung_boxes", smaller)
    image = spatial.reorient(scan, "LPS")  # canonical already: the caller's image is used as is
    path = io.write_image(image, tmp_path / "case.nii.gz")
    regions: list[tuple[int, ...]] = []
    cut = infer.LungSegmenter._scan_region

    def spy(self, canonical, lo, hi):  # type: ignore[no-untyped-def]
        region, start = cut(self, canonical, lo, hi)
        regions.append(tuple(region.GetSize()))
        return region, start

    monkeypatch.setattr(infer.LungSegmenter, "_scan_region", spy)
    seg = infer.LungSegmenter.from_file(model_path, device="cpu")
    from_path = seg.predict_with_report(path)
    grown = [r for r in from_path.report["fine_regions"].values() if "grown_mm" in r]
    assert bool(grown) == grow and bool(len(regions) > 1) == grow, (regions, from_path.report["fine_regions"])
    assert np.prod(regions[0]) < 0.8 * np.prod(image.GetSize())
    cuts = len(regions)
    from_image = seg.predict(image)
    assert len(regions) == cuts  # the caller's image is not copied
    from_path = from_path.label
    assert sitk.GetArrayViewFromImage(from_path).any()
    np.testing.assert_array_equal(sitk.GetArrayViewFromImage(from_path), sitk.GetArrayViewFromImage(from_image))


@pytest.mark.parametrize("spacing", [(0.7, 0.7, 1.0), (1.6, 1.6, 5.0)])
def test_scan_region_resamples_to_the_same_fine_voxels_as_the_whole_scan(model_path: Path, spacing: tuple[float, float, float]) -> None:
    """The fine lattice of any box inside the region interpolates to exactly the values it
    has on the whole scan (thin and thick slices; the lattice reaches past the box)."""
    rng = np.random.default_rng(0)
    whole = sitk.GetImageFromArray(rng.integers(-1000, 400, size=(60, 90, 110)).astype(np.int16))
    whole.SetSpacing(spacing)
    whole.SetOrigin((-30.0, 12.5, 100.0))
    seg = infer.LungSegmenter.from_file(model_path, device="cpu")
    seg.fine_mm = (1.5, 1.5, 1.5)
    lo = np.asarray(whole.TransformIndexToPhysicalPoint((25, 20, 15)))
    hi = np.asarray(whole.TransformIndexToPhysicalPoint((80, 70, 40)))
    box = spatial.Box(tuple(lo), tuple(hi))
    start, stop = spatial.box_index_range(whole, box)
    region, region_start = seg._scan_region(whole, start, stop)
    assert np.prod(region.GetSize()) < 0.7 * np.prod(whole.GetSize())
    np.testing.assert_array_equal(
        sitk.GetArrayViewFromImage(region),
        sitk.GetArrayViewFromImage(whole)[region_start[2]:region_start[2] + region.GetSize()[2],
                                          region_start[1]:region_start[1] + region.GetSize()[1],
                                          region_start[0]:region_start[0] + region.GetSize()[0]],
    )
    lattice = spatial.lattice_grid(whole, seg.fine_mm, box)
    fine = [
        sitk.GetArrayFromImage(spatial.resample_to_reference(
            src, lattice, interpolator=sitk.sitkLinear, default_value=-1024.0, output_pixel_type=sitk.sitkFloat32))
        for src in (whole, region)
    ]
    np.testing.assert_array_equal(fine[0], fine[1])


def test_amp_model_runs_bf16_only_where_the_cpu_has_it(
    model_path: Path, scan: sitk.Image, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A model that asks for AMP runs bf16 on a CPU with native bf16 and fp32 elsewhere
    (emulated bf16 is ~25x slower); the report says which, and the masks agree."""
    import dataclasses

    seg = infer.LungSegmenter.from_file(model_path, device="cpu")
    seg.coarse_cfg = dataclasses.replace(seg.coarse_cfg, amp=True)
    seg.fine_cfg = dataclasses.replace(seg.fine_cfg, amp=True)
    masks = {}
    for forced, precision in (("1", "bf16"), ("0", "fp32")):
        monkeypatch.setenv("SEGPIPE_CPU_BF16", forced)
        result = seg.predict_with_report(scan)
        assert result.report["precision"] == precision
        masks[precision] = sitk.GetArrayFromImage(result.label)
        # one window per pass is fastest in bf16 on the CPU, pairs (the stage's batch) in fp32
        assert seg.window_batch(seg.fine_cfg) == (1 if precision == "bf16" else seg.fine_cfg.batch_size)
    assert np.mean(masks["bf16"] == masks["fp32"]) > 0.99
    seg.sw_batch_size = 3  # the user's choice wins
    assert seg.window_batch(seg.fine_cfg) == 3


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


@pytest.mark.parametrize("problem", ["missing", "corrupt", "not-segpipe", "future-version"])
def test_bad_model_file_one_line_exit_2_nothing_written(problem: str, model_path: Path, scan: sitk.Image, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
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
    out = tmp_path / "out"
    code = main(["infer", str(src), "-o", str(out), "--model", str(bad), "--device", "cpu", "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("segpipe infer: error:")
    assert not out.exists() or list(out.iterdir()) == []


def test_hu_offset_is_detected_and_fixed(model_path: Path, scan: sitk.Image, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    shifted = io.write_image(sitk.Cast(scan, sitk.sitkInt16) + 1024, tmp_path / "offset.nii.gz")
    args = ["infer", str(shifted), "-o", str(tmp_path / "out"), "--model", str(model_path), "--device", "cpu", "--quiet"]
    assert main(args) == 2
    assert "--hu-offset -1024" in capsys.readouterr().err
    assert main([*args, "--hu-offset", "-1024"]) == 0
    assert (tmp_path / "out" / "offset_lungs.nii.gz").is_file()


def test_default_model_missing_names_the_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(infer, "DEFAULT_MODEL", tmp_path / "default.pt")
    with pytest.raises(ModelError, match="default.pt"):
        infer.LungSegmenter.default()


def test_cuda_oom_falls_back_to_cpu_accumulation_then_cpu(model_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Simulated: the first two attempts run out of CUDA memory, the third (all CPU) works."""
    seg = infer.LungSegmenter.from_file(model_path, device="cpu")
    seg.device = torch.device("cuda")  # pretend; no CUDA call is made below
    seg._fine_net, seg._fine_net_device = object(), torch.device("cuda")
    attempts: list[tuple[str, str, int]] = []

    def fake_predict(self, net, array, stage, device, accumulate_on, sw_batch, overlap, channel=None):  # type: ignore[no-untyped-def]
        attempts.append((device.type, accumulate_on.type, sw_batch))
        if len(attempts) < 3:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory (simulated)")
        return torch.zeros(3, *array.shape) if channel is None else torch.zeros(*array.shape)

    monkeypatch.setattr(infer.LungSegmenter, "_predict_probs", fake_predict)
    monkeypatch.setattr(infer.LungSegmenter, "_move_fine", lambda self, device: object())
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    notes: list[str] = []
    probs = seg._fine_with_fallback(np.zeros((4, 4, 4), np.float32), notes)
    assert probs.shape == (4, 4, 4)  # P(background) only
    assert attempts == [("cuda", "cuda", 2), ("cuda", "cpu", 1), ("cpu", "cpu", 1)]
    assert len(notes) == 2 and "accumulation buffer on cpu" in notes[0] and "windows on cpu" in notes[1]


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
    report = seg.predict_file(src, tmp_path / "mask.nii.gz", qc=True)
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


def test_a_side_needs_min_lung_ml_of_confident_coarse_lung(model_path: Path) -> None:
    """Bowel gas in a scan without lungs gives small or unsure coarse finds: a side counts
    only with at least ``min_lung_ml`` of confident voxels."""
    hu = np.full((40, 40, 40), -1000.0, np.float32)
    hu[2:38, 4:36, 4:36] = 40.0  # the body; 4 mm voxels hold 0.064 mL each
    label = np.zeros(hu.shape, np.uint8)
    label[8:30, 10:30, 6:16] = 1  # right (low x): 4400 voxels, 281.6 mL
    label[8:20, 10:25, 24:32] = 2  # left: 1440 voxels, 92.2 mL
    hu[label > 0] = -850.0
    coarse_img = spatial.copy_geometry(hu, sitk.Image(40, 40, 40, sitk.sitkFloat32))
    coarse_img.SetSpacing((4.0, 4.0, 4.0))
    confident = label > 0
    seg = infer.LungSegmenter.from_file(model_path, device="cpu")
    assert seg.min_lung_ml == infer.MIN_LUNG_ML == 50.0
    assert set(seg._lung_boxes(label, coarse_img, confident)) == {"right", "left"}
    strict = infer.LungSegmenter.from_file(model_path, device="cpu", min_lung_ml=100)
    assert set(strict._lung_boxes(label, coarse_img, confident)) == {"right"}
    assert not strict._coarse_sides[label == 2].any()  # the dropped side is gone from the sided mask too
    unsure = confident.copy()
    unsure[:, :, :20] &= np.arange(40)[:, None, None] < 10  # sure of only 2 of the right lung's 22 slices
    assert set(seg._lung_boxes(label, coarse_img, unsure)) == {"left"}
    with pytest.raises(ValueError, match="min_lung_ml"):
        infer.LungSegmenter.from_file(model_path, device="cpu", min_lung_ml=-1)


@pytest.mark.parametrize("overlap", [0.0, 0.25, 0.5])
def test_window_count_is_monais(overlap: float) -> None:
    """window_count predicts exactly how many windows MONAI's sliding window runs."""
    from monai.inferers.utils import _get_scan_interval
    from monai.data.utils import dense_patch_slices

    patch = (64, 64, 48)
    for size in [(64, 64, 48), (40, 100, 48), (125, 130, 186), (200, 239, 300), (65, 112, 97)]:
        padded = tuple(max(s, p) for s, p in zip(size, patch))  # MONAI pads up to one window
        interval = _get_scan_interval(padded[::-1], patch[::-1], 3, (overlap,) * 3)
        expected = len(dense_patch_slices(padded[::-1], patch[::-1], interval))
        assert infer.window_count(size, patch, overlap) == expected, size


def test_fine_stage_runs_on_the_union_of_the_boxes_when_that_takes_fewer_windows(model_path: Path, scan: sitk.Image) -> None:
    seg = infer.LungSegmenter.from_file(model_path, device="cpu")
    canonical, _ = spatial.to_canonical(scan)
    right = spatial.Box((-150.0, 10.0, -300.0), (30.0, 200.0, -20.0))
    left = spatial.Box((-20.0, 10.0, -300.0), (150.0, 200.0, -20.0))
    regions = seg._fine_regions(canonical, {"right": right, "left": left})
    assert list(regions) == ["both"] and _within_trim(regions["both"], right.union(left))
    assert seg._windows(canonical, regions["both"]) < seg._windows(canonical, right) + seg._windows(canonical, left)
    # lungs far apart (boxes that do not overlap, a gap between them): one box each
    far_right = spatial.Box((-300.0, 10.0, -300.0), (-180.0, 200.0, -20.0))
    far_left = spatial.Box((180.0, 10.0, -300.0), (300.0, 200.0, -20.0))
    far = seg._fine_regions(canonical, {"right": far_right, "left": far_left})
    assert list(far) == ["right", "left"] and _within_trim(far["right"], far_right) and _within_trim(far["left"], far_left)
    assert list(seg._fine_regions(canonical, {"left": left})) == ["left"]


def test_single_channel_probability_equals_the_softmax_channel(model_path: Path) -> None:
    seg = infer.LungSegmenter.from_file(model_path, device="cpu")
    net = seg._network("fine", seg.device)
    hu = np.random.default_rng(3).normal(-600, 300, (40, 72, 56)).astype(np.float32)
    full = infer.sliding_window_probs(net, hu, seg.fine_cfg, seg.window_hu, seg.device)
    for channel in range(full.shape[0]):
        one = infer.sliding_window_probs(net, hu, seg.fine_cfg, seg.window_hu, seg.device, channel=channel)
        assert one.shape == full.shape[1:]
        torch.testing.assert_close(one, full[channel], rtol=0, atol=1e-6)


def test_channel_probability_in_place_equals_softmax_even_for_extreme_logits() -> None:
    logits = torch.tensor(np.random.default_rng(5).normal(0, 30, (3, 6, 7, 8)), dtype=torch.float32)
    logits[1, 0, 0, 0], logits[0, 0, 0, 1], logits[2, 0, 0, 2] = 500.0, -500.0, 1e4  # exp overflows
    expected = torch.softmax(logits, dim=0)
    for k in range(3):
        got = infer.channel_probability_(logits.clone(), k)
        assert torch.isfinite(got).all()
        torch.testing.assert_close(got, expected[k], rtol=1e-5, atol=1e-6)
    assert (infer.channel_probability_(torch.zeros(1, 4, 4), 0) == 1).all()


def _within_trim(region: spatial.Box, box: spatial.Box) -> bool:
    """``region`` lies inside ``box`` and gave up at most the allowed trim per side."""
    t = infer._FIT_TRIM_MM + 1e-6
    return all(b_lo <= r_lo <= b_lo + t and b_hi - t <= r_hi <= b_hi
               for r_lo, r_hi, b_lo, b_hi in zip(region.lo_xyz, region.hi_xyz, box.lo_xyz, box.hi_xyz))


def test_fine_region_a_voxel_too_long_is_fitted_to_fewer_windows(model_path: Path) -> None:
    seg = infer.LungSegmenter.from_file(model_path, device="cpu")
    scan = sitk.Image([512, 512, 1000], sitk.sitkInt16)
    scan.SetSpacing((0.7, 0.7, 1.0))
    scan.SetOrigin((-179.0, -179.0, -999.0))
    p = seg.fine_cfg.patch_xyz[0]
    step = int(p * (1 - seg._fine_overlap))
    fine = seg.fine_mm[0]
    # x: exactly one voxel more than 4 rows of windows cover; y and z: far from a multiple
    x_mm = (p + 3 * step) * fine + 0.4 * fine
    box = spatial.Box((-x_mm / 2, -70.0, -480.0), (x_mm / 2, 70.0 + 0.3 * step * fine, -160.0))
    fitted = seg._fit_windows(scan, box)
    assert seg._windows(scan, fitted) < seg._windows(scan, box)
    assert _within_trim(fitted, box)
    assert fitted.lo_xyz[1:] == box.lo_xyz[1:] and fitted.hi_xyz[1:] == box.hi_xyz[1:]  # only x moved
    # a box with room to spare in its last window is left alone
    roomy = spatial.Box((-100.0, -70.0, -480.0), (100.0, 70.0, -160.0))
    assert seg._fit_windows(scan, roomy) == roomy


def test_a_region_thinner_than_a_window_reads_one_window_of_context(model_path: Path) -> None:
    """A fine region shorter than a window on an axis (lung bases at the top of an abdominal
    scan) is read over one window centred on it, so the network sees the scan around it and
    not constant padding; the window count stays the same, and long axes are left alone."""
    seg = infer.LungSegmenter.from_file(model_path, device="cpu")
    scan = sitk.Image([512, 512, 100], sitk.sitkInt16)
    scan.SetSpacing((0.7, 0.7, 2.5))
    scan.SetOrigin((-179.0, -179.0, -250.0))
    p = seg.fine_cfg.patch_xyz
    thin = spatial.Box((-150.0, -80.0, -170.0), (20.0, 120.0, -120.0))  # 50 mm high: under one window
    grown = seg._one_window_at_least(scan, thin)
    size = spatial.lattice_grid(scan, seg.fine_mm, grown).GetSize()
    assert size[2] >= p[2] and seg._windows(scan, grown) == seg._windows(scan, thin)
    assert grown.lo_xyz[:2] == thin.lo_xyz[:2] and grown.hi_xyz[:2] == thin.hi_xyz[:2]
    centre = lambda b: (b.lo_xyz[2] + b.hi_xyz[2]) / 2  # noqa: E731
    assert abs(centre(grown) - centre(thin)) < 1e-6
    roomy = spatial.Box((-150.0, -80.0, -200.0), (20.0, 120.0, -50.0))
    assert seg._one_window_at_least(scan, roomy) == roomy


def test_body_centre_on_a_fine_grid_is_the_same_physical_point() -> None:
    """``_body_centre_on`` (the body's axis per slice of a fine region, for dense_to_wall):
    each fine slice gets the centre of the coarse body's slice it lies in, as an index of the
    fine grid that names the same physical point; a coarse slice without body takes the
    nearest slice's centre."""
    from types import SimpleNamespace

    coarse = spatial.Geometry((30, 20, 10), (4.0, 4.0, 5.0), (-60.0, -40.0, 100.0), (1.0, 0, 0, 0, 1.0, 0, 0, 0, 1.0))
    body = np.zeros((10, 20, 30), bool)
    for z in range(8):  # a body whose centre moves 1 coarse voxel in x per slice; slices 8-9 empty
        body[z, 5:11, 3 + z:13 + z] = True  # centre (y, x) index (7.5, 7.5 + z)
    fine = spatial.Geometry((40, 30, 25), (1.5, 1.5, 1.5), (-50.3, -31.1, 101.2), coarse.direction)
    seg = SimpleNamespace(_coarse_geometry=coarse, _coarse_body=body)
    got = infer.LungSegmenter._body_centre_on(seg, fine)  # type: ignore[arg-type]
    assert got.shape == (25, 2)
    for k in range(25):
        z_mm = fine.origin[2] + k * 1.5
        kc = min(int(round((z_mm - coarse.origin[2]) / 5.0)), 9)
        cy, cx = 7.5, 7.5 + min(kc, 7)  # slices 8-9 take slice 7's centre
        y_mm, x_mm = coarse.origin[1] + cy * 4.0, coarse.origin[0] + cx * 4.0
        assert got[k, 0] == pytest.approx((y_mm - fine.origin[1]) / 1.5)
        assert got[k, 1] == pytest.approx((x_mm - fine.origin[0]) / 1.5)


def test_coarse_body_lookup_on_a_fine_grid_is_nearest_neighbour_resampling() -> None:
    """``_inside_on`` (the coarse body less airways, looked up on a fine region's grid for the
    pleural-air step) gives what SimpleITK's nearest-neighbour resampling gives."""
    from types import SimpleNamespace

    rng = np.random.default_rng(2)
    coarse = sitk.Image([23, 19, 17], sitk.sitkUInt8)
    coarse.SetSpacing((4.0, 4.0, 4.5))
    coarse.SetOrigin((-40.0, -30.0, 100.0))
    body = rng.random((17, 19, 23)) < 0.6
    airways = rng.random((17, 19, 23)) < 0.1
    fine = sitk.Image([41, 37, 29], sitk.sitkUInt8)
    fine.SetSpacing((1.5, 1.5, 1.5))
    fine.SetOrigin((-31.3, -20.6, 111.1))  # no voxel half way between two coarse ones (ties round either way)
    seg = SimpleNamespace(_coarse_geometry=spatial.Geometry.of(coarse), _coarse_body=body, _coarse_airways=airways)
    got = infer.LungSegmenter._inside_on(seg, spatial.Geometry.of(fine))  # type: ignore[arg-type]
    ref = sitk.GetArrayFromImage(spatial.resample_to_reference(
        spatial.copy_geometry((body & ~airways).astype(np.uint8), coarse), fine,
        interpolator=sitk.sitkNearestNeighbor, default_value=0, output_pixel_type=sitk.sitkUInt8,
    ))
    inside = sitk.GetArrayFromImage(spatial.resample_to_reference(  # where the fine grid lies in the coarse one
        spatial.copy_geometry(np.ones((17, 19, 23), np.uint8), coarse), fine,
        interpolator=sitk.sitkNearestNeighbor, default_value=0, output_pixel_type=sitk.sitkUInt8,
    )).astype(bool)
    assert got.shape == ref.shape and inside.mean() > 0.5
    np.testing.assert_array_equal(got[inside], ref[inside].astype(bool))
    # _in_scan: "where the fine grid lies in the coarse one" without resampling, also for a grid
    # that reaches past the coarse one on three sides
    past = sitk.Image([41, 37, 29], sitk.sitkUInt8)
    past.SetSpacing((1.5, 1.5, 1.5))
    past.SetOrigin((-61.3, 20.6, 151.1))
    within = sitk.GetArrayFromImage(spatial.resample_to_reference(
        spatial.copy_geometry(np.ones((17, 19, 23), np.uint8), coarse), past,
        interpolator=sitk.sitkNearestNeighbor, default_value=0, output_pixel_type=sitk.sitkUInt8,
    )).astype(bool)
    assert 0.1 < within.mean() < 0.9
    for grid, expected in ((fine, inside), (past, within)):
        np.testing.assert_array_equal(infer._in_scan(spatial.Geometry.of(grid), spatial.Geometry.of(coarse)), expected)


def test_any_lung_is_argmax_not_background() -> None:
    """The coarse stage's and validation's lung test equals ``argmax != 0``, ties included
    (argmax takes the first maximum: background)."""
    gen = torch.Generator().manual_seed(0)
    probs = torch.softmax(torch.randn(3, 6, 7, 8, generator=gen), dim=0)
    probs[:, 0, 0, 0] = torch.tensor([0.4, 0.4, 0.2])  # a tie with background
    probs[:, 0, 0, 1] = torch.tensor([0.2, 0.4, 0.4])  # a tie between the lungs
    expected = (probs.argmax(0) != 0).numpy()
    np.testing.assert_array_equal(infer.any_lung(probs), expected)
    assert not expected[0, 0, 0] and expected[0, 0, 1]
    two = torch.softmax(torch.randn(2, 5, 5, 5, generator=gen), dim=0)  # lung-vs-background models
    np.testing.assert_array_equal(infer.any_lung(two), (two.argmax(0) != 0).numpy())


def test_lung_on_a_face_counts_only_for_the_lungs_not_for_small_islands() -> None:
    from segpipe.infer import _lung_on_faces

    grid = spatial.Geometry((40, 30, 20), (2.0, 2.0, 2.0), (0.0, 0.0, 0.0), tuple(np.eye(3).ravel()))  # type: ignore[arg-type]
    box = spatial.Box((10.0, 10.0, 10.0), (60.0, 50.0, 30.0))  # voxels x 5..30, y 5..25, z 5..15
    faces = ("x-", "x+", "y-", "y+", "z-", "z+")
    lung = np.zeros((20, 30, 40), bool)
    assert _lung_on_faces(lung, grid, box, faces) == ()
    lung[5:14, 8:20, 8:28] = True  # reaches the lower z face: 12 x 20 voxels of 4 mm2
    assert _lung_on_faces(lung, grid, box, faces) == ("z-",)
    assert _lung_on_faces(lung, grid, box, ("x-", "z+")) == ()  # only the faces asked about
    front = lung.copy()
    front[6:14, 5:16, 14:26] = True  # a part of the lung on the y- face: 8 x 12 voxels, 384 mm2
    assert _lung_on_faces(front, grid, box, faces) == ("y-", "z-")
    thin = lung.copy()
    thin[6:14, 5:16, 14:20] = True  # 8 x 6 voxels, 192 mm2: under the area
    assert _lung_on_faces(thin, grid, box, faces) == ("z-",)
    island = np.zeros_like(lung)
    island[6:15, 17:25, 29:31] = True  # on the x+ face, 9 x 8 voxels (288 mm2), apart from the lung
    assert _lung_on_faces(lung | island, grid, box, faces) == ("z-",)  # under a fifth of the lung
    assert _lung_on_faces(island, grid, box, faces) == ("x+",)  # alone, it is the lung
