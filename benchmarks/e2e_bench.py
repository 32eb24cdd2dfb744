"""End to end, as a user types it: ``segpipe infer`` against a plain single-stage MONAI pipeline,
and a folder of scans in one call against one call per scan.

Every run is a fresh process (start-up, imports, model loading, reading, writing: all of it), timed
from its start to its exit, with its peak resident memory from ``os.wait4`` (``ru_maxrss``).
Methods alternate run by run, so both see the same machine state.

``scan`` mode (default: the real LIDC-IDRI-0001 DICOM series, or ``--scan PATH``):

(a) ``segpipe infer SCAN -o DIR`` (NIfTI mask out);
(b) a plain single-stage MONAI pipeline: the scan read with SimpleITK (segpipe's reader, so that
    reading is not what differs), the whole scan resampled to 1.5 mm (MONAI ``Spacing``,
    bilinear), intensities windowed (``ScaleIntensityRange``), a MONAI ``UNet`` of the fine
    network's size (channels 8-64, two residual units: 298 k parameters against 302 k)
    with random weights over ``sliding_window_inference`` (the fine stage's 64^3 window,
    overlap and window batch, Gaussian blending), softmax, the probabilities resampled back onto
    the scan's grid (MONAI ``SpatialResample``), argmax, written as NIfTI. fp32, as a plain
    pipeline runs (``--baseline-bf16``: under CPU bf16 autocast, as segpipe does).

``folder`` mode (``--folder N``): N generated chest scans (512 x 512 x 300, 0.7 x 0.7 x 1 mm,
seeds 2103...; cached as ``benchmarks/infer_bench.py`` caches its scans) segmented by one
``segpipe infer FOLDER -o DIR`` call against N separate calls; per-scan time and peak RSS.

Targets (issue #25): (a) at most 0.35x (b)'s wall time and at most 0.3x its peak RSS on
LIDC-IDRI-0001; the folder at most 0.6x the per-scan time of separate calls, its peak RSS at
most 1.5x a single call's.

Usage::

    python benchmarks/e2e_bench.py [--scan PATH] [--repeats 3] [--folder 4] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

REPO = Path(__file__).resolve().parents[1]
LIDC = REPO.parent / "shared" / "data" / "lidc-idri-0001" / "dicom"
MIB = 1024.0 * 1024.0
CHEST_SEED = 2103


def run_process(cmd: list[str], log: Path, env: dict[str, str] | None = None) -> dict[str, float]:
    """Run ``cmd``; its wall time (s) and peak RSS (MiB). A failure raises with the log's tail."""
    with open(log, "w") as fh:
        t = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, cwd=REPO, env=env)
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        except BaseException:
            proc.kill()
            raise
        wall = time.perf_counter() - t
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
        raise RuntimeError(f"{' '.join(cmd[:4])}... failed with exit code {code}:\n{tail}")
    return {"wall_s": wall, "peak_rss_mib": usage.ru_maxrss * 1024 / MIB}


def segpipe_cmd(inputs: list[Path], out: Path) -> list[str]:
    return [sys.executable, "-m", "segpipe", "infer", *map(str, inputs), "-o", str(out) + "/", "--overwrite"]


def monai_pipeline(scan: Path, out: Path, bf16: bool) -> None:
    """Method (b), in this process (see the module doc)."""
    import numpy as np
    import SimpleITK as sitk
    import torch
    from monai.data import MetaTensor
    from monai.inferers import sliding_window_inference
    from monai.networks.nets import UNet
    from monai.transforms import ScaleIntensityRange, Spacing, SpatialResample

    from segpipe import io
    from segpipe.infer import LungSegmenter

    settings = LungSegmenter.default().settings  # the fine stage's window, overlap and window batch
    torch.manual_seed(0)
    net = UNet(spatial_dims=3, in_channels=1, out_channels=3, channels=(8, 16, 32, 64), strides=(2, 2, 2), num_res_units=2).eval()
    image = io.read_image(scan)
    direction = np.asarray(image.GetDirection()).reshape(3, 3)
    affine = np.eye(4)
    affine[:3, :3] = direction * np.asarray(image.GetSpacing())[None, :]
    affine[:3, 3] = image.GetOrigin()
    array = sitk.GetArrayFromImage(image).astype(np.float32).transpose(2, 1, 0)  # (x, y, z): the affine's index order
    x = MetaTensor(torch.from_numpy(np.ascontiguousarray(array))[None], affine=torch.from_numpy(affine))
    del array
    fine = Spacing(pixdim=settings.fine_mm, mode="bilinear")(x)
    fine = ScaleIntensityRange(a_min=settings.window_hu[0], a_max=settings.window_hu[1], b_min=0.0, b_max=1.0, clip=True)(fine)
    with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        logits = sliding_window_inference(fine[None], roi_size=tuple(settings.fine.patch_xyz), sw_batch_size=settings.window_batch(settings.fine),
                                          predictor=net, overlap=settings.fine_overlap, mode="gaussian")
    probs = MetaTensor(torch.softmax(logits[0].float(), dim=0), affine=fine.affine)
    del logits, fine
    back = SpatialResample(mode="bilinear")(probs, dst_affine=x.affine, spatial_size=x.shape[1:])
    label = torch.argmax(back, dim=0).to(torch.uint8).numpy().transpose(2, 1, 0)
    mask = sitk.GetImageFromArray(np.ascontiguousarray(label))
    mask.CopyInformation(image)
    io.write_image(mask, out, compress=True)


def _chest_scans(n: int, cache: Path) -> list[Path]:
    """``n`` generated chest scans in ``cache`` (made in child processes when missing)."""
    import infer_bench

    paths = []
    for i in range(n):
        preset = infer_bench.ScanPreset(f"chest{i}", "chest", (512, 512, 300), (0.7, 0.7, 1.0), CHEST_SEED + i)
        image, _, spec = infer_bench.scan_paths(preset, cache)
        if not (image.is_file() and spec.is_file()):
            print(f"generating {image.name} ...", flush=True)
            subprocess.run([sys.executable, __file__, "--worker", "generate", "--seed", str(preset.seed), "--scan", str(image)],
                           check=True, cwd=REPO)
        paths.append(image)
    return paths


def _generate(seed: int, image_path: Path) -> None:
    import infer_bench

    preset = infer_bench.ScanPreset(image_path.name.split("_")[0], "chest", (512, 512, 300), (0.7, 0.7, 1.0), seed)
    infer_bench._generate(preset, image_path.parent)


def _median(runs: list[dict[str, float]], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def bench_scan(scan: Path, repeats: int, bf16: bool, work: Path) -> dict[str, Any]:
    runs: dict[str, list[dict[str, float]]] = {"segpipe": [], "monai": []}
    for i in range(repeats):
        runs["segpipe"].append(run_process(segpipe_cmd([scan], work / "segpipe"), work / f"segpipe{i}.log"))
        cmd = [sys.executable, __file__, "--worker", "monai", "--scan", str(scan), "--out", str(work / "monai_mask.nii.gz")]
        runs["monai"].append(run_process(cmd + (["--baseline-bf16"] if bf16 else []), work / f"monai{i}.log"))
        print(f"  run {i + 1}: segpipe {runs['segpipe'][-1]['wall_s']:.2f} s, MONAI {runs['monai'][-1]['wall_s']:.2f} s", flush=True)
    out: dict[str, Any] = {"scan": str(scan), "runs": runs}
    for m, got in runs.items():
        out[m] = {"wall_s": round(_median(got, "wall_s"), 3), "peak_rss_mib": round(_median(got, "peak_rss_mib"), 1)}
    out["time_ratio"] = round(out["segpipe"]["wall_s"] / out["monai"]["wall_s"], 3)
    out["rss_ratio"] = round(out["segpipe"]["peak_rss_mib"] / out["monai"]["peak_rss_mib"], 3)
    return out


def bench_folder(scans: list[Path], repeats: int, work: Path) -> dict[str, Any]:
    folder = work / "folder"
    folder.mkdir(exist_ok=True)
    for p in scans:
        link = folder / p.name
        if not link.exists():
            link.symlink_to(p)
    one: list[dict[str, float]] = []
    separate: list[float] = []
    together: list[dict[str, float]] = []
    for i in range(repeats):
        calls = [run_process(segpipe_cmd([p], work / "separate"), work / f"sep{i}_{k}.log") for k, p in enumerate(scans)]
        one += calls
        separate.append(sum(c["wall_s"] for c in calls))
        together.append(run_process(segpipe_cmd([folder], work / "together"), work / f"folder{i}.log"))
        print(f"  run {i + 1}: {len(scans)} calls {separate[-1]:.1f} s, one call {together[-1]['wall_s']:.1f} s", flush=True)
    n = len(scans)
    out: dict[str, Any] = {
        "scans": n,
        "separate_per_scan_s": round(statistics.median(separate) / n, 3),
        "folder_per_scan_s": round(_median(together, "wall_s") / n, 3),
        "single_call_peak_rss_mib": round(max(c["peak_rss_mib"] for c in one), 1),
        "folder_peak_rss_mib": round(_median(together, "peak_rss_mib"), 1),
    }
    out["time_ratio"] = round(out["folder_per_scan_s"] / out["separate_per_scan_s"], 3)
    out["rss_ratio"] = round(out["folder_peak_rss_mib"] / out["single_call_peak_rss_mib"], 3)
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--scan", type=Path, default=LIDC, help="scan for the segpipe / MONAI comparison (default: LIDC-IDRI-0001)")
    p.add_argument("--repeats", type=int, default=3, help="runs of each method (median; default 3)")
    p.add_argument("--folder", type=int, default=0, metavar="N", help="also time a folder of N generated chest scans (0: not)")
    p.add_argument("--baseline-bf16", action="store_true", help="run the MONAI pipeline under CPU bf16 autocast")
    p.add_argument("--skip-scan", action="store_true", help="only the folder comparison")
    p.add_argument("--cache", type=Path, default=None, help="generated scans (default: infer_bench.py's cache)")
    p.add_argument("--json", type=Path, help="write the results here")
    p.add_argument("--worker", choices=["monai", "generate"], help=argparse.SUPPRESS)
    p.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--seed", type=int, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker == "monai":
        monai_pipeline(args.scan, args.out, args.baseline_bf16)
        return 0
    if args.worker == "generate":
        _generate(args.seed, args.scan)
        return 0
    import infer_bench

    result: dict[str, Any] = {"machine": infer_bench.machine_info()}
    print("\n".join(infer_bench.format_machine(result["machine"])))
    work = Path(tempfile.mkdtemp(prefix="segpipe_e2e_"))
    try:
        if not args.skip_scan:
            if not args.scan.exists():
                print(f"e2e_bench.py: {args.scan} not found (give --scan PATH)", file=sys.stderr)
                return 2
            print(f"\nscan {args.scan}: segpipe infer vs plain MONAI pipeline ({args.repeats} runs each)", flush=True)
            r = bench_scan(args.scan, args.repeats, args.baseline_bf16, work)
            result["scan"] = r
            print(f"segpipe infer: {r['segpipe']['wall_s']:.2f} s, {r['segpipe']['peak_rss_mib']:.0f} MiB; "
                  f"MONAI pipeline: {r['monai']['wall_s']:.2f} s, {r['monai']['peak_rss_mib']:.0f} MiB")
            print(f"ratios: time {r['time_ratio']:.2f}x (target <= 0.35x), peak RSS {r['rss_ratio']:.2f}x (target <= 0.3x)")
        if args.folder:
            cache = args.cache or infer_bench.default_cache()
            scans = _chest_scans(args.folder, cache)
            print(f"\nfolder of {len(scans)} chest scans: one call vs one call per scan ({args.repeats} runs)", flush=True)
            f = bench_folder(scans, args.repeats, work)
            result["folder"] = f
            print(f"per scan: separate calls {f['separate_per_scan_s']:.2f} s, one call {f['folder_per_scan_s']:.2f} s "
                  f"({f['time_ratio']:.2f}x, target <= 0.6x); peak RSS {f['folder_peak_rss_mib']:.0f} MiB vs a single call's "
                  f"{f['single_call_peak_rss_mib']:.0f} MiB ({f['rss_ratio']:.2f}x, target <= 1.5x)")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
