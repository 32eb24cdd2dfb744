"""Inference speed and peak memory: the segpipe cascade against a single-stage pipeline and lungmask.

Three methods segment the same generated scans, each run in a child process of its own so
that its peak resident memory (RSS) is measured alone (``os.wait4``'s ``ru_maxrss`` of the
child, cross-checked with the child's own ``VmHWM``):

(a) ``cascade``: :meth:`segpipe.LungSegmenter.predict` (coarse stage on the whole scan, fine
    stage on one lung crop at a time).
(b) ``single``: what a plain MONAI pipeline does with the same fine network: resample the
    whole scan to the fine spacing, sliding window over all of it (the fine stage's patch,
    overlap, window batch and Gaussian blending, :func:`segpipe.model.sliding_window_probs`),
    lung where P(background) < 0.5 (the cascade's rule) less pleural air
    (:func:`segpipe.refine.pleural_air.pleural_air`, as the cascade), lungs kept inside the body and sided
    from geometry (:func:`segpipe.refine.split_sides`, as the cascade's coarse stage),
    then back to the scan's grid as the cascade does it (P(background) linearly, lung where it
    is below 0.5; sides by nearest neighbour), but over the whole grid at once, as MONAI's
    ``Invertd`` does with a plain pipeline's probabilities (``--single-resample labels``: nearest
    neighbour labels instead, leaner and rougher), then the cascade's postprocess (fat cleared,
    :func:`segpipe.refine.fat.clear_fat`; edges moved onto the scan,
    :func:`segpipe.refine.edge_snap.snap_label_edges`; :func:`segpipe.refine.clean_lungs`) and
    original orientation.
(c) ``lungmask``: lungmask's own 2D U-Net (R231 architecture, random weights: timing only)
    through ``lungmask.LMInferer`` (LPS reorientation, per-slice body crop and resize to
    256 x 256, HU clip, batches of 20 slices, masks resized back). lungmask's volume
    postprocessing is left out by default because its cost on a random network's output says
    nothing about its cost on a real one (``--lungmask-postprocess`` keeps it); leaving it out
    makes (c) faster, so "the cascade is faster than lungmask" is a conservative check.

Wall time: from the scan file on disk to the label map in memory (reading included, writing
and model loading excluded); peak RSS: the child's whole life (interpreter, torch, model,
scan). Scans are phantoms from :mod:`segpipe.synthetic` (pathologies off), generated once into
a cache folder (``--cache``, default ``$SEGPIPE_HOME/bench_scans`` or
``~/.cache/segpipe/bench_scans``) with their labels:

* ``tiny``        128 x 128 x 96,   2.8 x 2.8 x 3.2 mm, chest          (for testing the script)
* ``small``       256 x 256 x 128,  1.4 x 1.4 x 2.5 mm, chest
* ``chest``       512 x 512 x 300,  0.7 x 0.7 x 1.0 mm, chest
* ``neck_pelvis`` 512 x 512 x 1000, 0.7 x 0.7 x 1.0 mm, neck to pelvis

Targets (from the issue): the cascade is >= 2x faster than (b) on the chest scan; >= 5x faster
and >= 3x lower peak RSS on the neck-to-pelvis scan; faster than (c) on both; Dice(a, b) >= 0.99
per lung.

Run: ``python benchmarks/infer_bench.py [--sizes chest neck_pelvis] [--repeats 3]
[--model FILE] [--threads N] [--json OUT]``.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import hashlib
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DEFAULT_MODEL = REPO / "segpipe" / "weights" / "default.pt"
MIB = 1024.0 * 1024.0


@dataclass(frozen=True)
class ScanPreset:
    """A generated benchmark scan: body coverage, grid size (x, y, z) and spacing (x, y, z) mm."""

    name: str
    coverage: str
    size_xyz: tuple[int, int, int]
    spacing_xyz: tuple[float, float, float]
    seed: int


SCANS = {
    s.name: s
    for s in (
        ScanPreset("tiny", "chest", (128, 128, 96), (2.8, 2.8, 3.2), 2101),
        ScanPreset("small", "chest", (256, 256, 128), (1.4, 1.4, 2.5), 2102),
        ScanPreset("chest", "chest", (512, 512, 300), (0.7, 0.7, 1.0), 2103),
        ScanPreset("neck_pelvis", "neck_pelvis", (512, 512, 1000), (0.7, 0.7, 1.0), 2104),
    )
}
METHODS = {
    "cascade": "(a) segpipe cascade",
    "single": "(b) single-stage, fine spacing",
    "lungmask": "(c) lungmask 2D U-Net",
}
PATHOLOGY_OFF = dict.fromkeys(("nodules", "consolidation", "ground_glass", "emphysema", "effusion", "collapse"), 0.0)
#: (name, scan, kind, threshold): kind "time_b" = time(b)/time(a), "rss_b" = RSS(b)/RSS(a),
#: "time_c" = time(c)/time(a) (must exceed the threshold), "dice_ab" = Dice(a, b) per lung.
TARGETS = [
    ("cascade >= 2x faster than single-stage (chest)", "chest", "time_b", 2.0),
    ("cascade >= 5x faster than single-stage (neck_pelvis)", "neck_pelvis", "time_b", 5.0),
    ("cascade >= 3x lower peak RSS than single-stage (neck_pelvis)", "neck_pelvis", "rss_b", 3.0),
    ("cascade faster than lungmask (chest)", "chest", "time_c", 1.0),
    ("cascade faster than lungmask (neck_pelvis)", "neck_pelvis", "time_c", 1.0),
    ("Dice(cascade, single-stage) >= 0.99 per lung (chest)", "chest", "dice_ab", 0.99),
    ("Dice(cascade, single-stage) >= 0.99 per lung (neck_pelvis)", "neck_pelvis", "dice_ab", 0.99),
]


# ----------------------------------------------------------------------------- environment
def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _total_ram_bytes() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _git_commit() -> str | None:
    """Short commit of the checkout (read-only git calls), with ``+dirty`` when files changed."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True, timeout=10, check=False
        )
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if head.returncode != 0:
        return None
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def machine_info(threads: int | None = None) -> dict[str, Any]:
    """Machine, library versions and date (JSON-able); no heavy import."""
    try:
        from segpipe._version import __version__ as segpipe_version
    except ImportError:
        segpipe_version = _version("segpipe")
    return {
        "date": _dt.datetime.now(_dt.timezone.utc).astimezone().isoformat(timespec="seconds"),
        "host": platform.node(),
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "ram_bytes": _total_ram_bytes(),
        "os": platform.platform(),
        "threads": threads,
        "versions": {
            "python": platform.python_version(),
            "torch": _version("torch"),
            "monai": _version("monai"),
            "SimpleITK": _version("SimpleITK"),
            "numpy": _version("numpy"),
            "segpipe": segpipe_version,
            "lungmask": _version("lungmask"),
        },
        "git_commit": _git_commit(),
    }


def format_machine(info: dict[str, Any]) -> list[str]:
    """Header lines for :func:`machine_info`."""
    ram = f", {info['ram_bytes'] / 1024**3:.0f} GiB RAM" if info.get("ram_bytes") else ""
    threads = f", torch threads {info['threads']}" if info.get("threads") else ""
    versions = ", ".join(f"{k} {v}" for k, v in info["versions"].items())
    commit = f" (commit {info['git_commit']})" if info.get("git_commit") else ""
    return [
        f"date: {info['date']}",
        f"machine: {info['cpu']}, {info['cores']} cores{ram}{threads}; {info['os']}",
        f"versions: {versions}{commit}",
    ]


# ----------------------------------------------------------------------------- scans
def default_cache() -> Path:
    home = os.environ.get("SEGPIPE_HOME")
    return (Path(home) if home else Path.home() / ".cache" / "segpipe") / "bench_scans"


def _spec_kwargs(preset: ScanPreset) -> dict[str, Any]:
    return dict(
        coverage=preset.coverage,
        size_xyz=preset.size_xyz,
        spacing_xyz=preset.spacing_xyz,
        orientation="LPS",
        dtype="int16",
        **PATHOLOGY_OFF,
    )


def scan_paths(preset: ScanPreset, cache: Path) -> tuple[Path, Path, Path]:
    """(image, label, spec JSON) paths of a preset in the cache; the name carries a hash of
    the preset, so changing a preset never reuses a stale file."""
    key = json.dumps([preset.seed, _spec_kwargs(preset)], sort_keys=True)
    tag = hashlib.sha1(key.encode()).hexdigest()[:8]
    stem = f"{preset.name}_{preset.size_xyz[0]}x{preset.size_xyz[1]}x{preset.size_xyz[2]}_{tag}"
    return cache / f"{stem}.nii.gz", cache / f"{stem}_label.nii.gz", cache / f"{stem}.json"


def _generate(preset: ScanPreset, cache: Path) -> dict[str, Any]:
    """Render the phantom and write image, label and spec (each atomically). Runs in a child."""
    from segpipe import io
    from segpipe.synthetic import make_phantom, sample_spec

    image_path, label_path, spec_path = scan_paths(preset, cache)
    cache.mkdir(parents=True, exist_ok=True)
    t = time.perf_counter()
    spec = sample_spec(preset.seed, **_spec_kwargs(preset))
    ph = make_phantom(spec)
    io.write_image(ph.label, label_path, compress=True)
    io.write_image(ph.image, image_path, compress=True)
    info = {
        "preset": preset.name,
        "spec": spec.to_dict(),
        "seconds": round(time.perf_counter() - t, 1),
        "lung_volumes_ml": ph.info.get("lung_volumes_ml"),
    }
    tmp = spec_path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(info, indent=1))
    tmp.replace(spec_path)
    return info


def ensure_scan(preset: ScanPreset, cache: Path, workdir: Path) -> tuple[Path, Path]:
    """The preset's (image, label) paths, generating them in a child process when missing."""
    image_path, label_path, spec_path = scan_paths(preset, cache)
    if not (image_path.is_file() and label_path.is_file() and spec_path.is_file()):
        print(f"generating {preset.name} scan {preset.size_xyz} into {cache} ...", flush=True)
        t = time.perf_counter()
        _run_child(
            ["--worker", "generate", "--scan-name", preset.name, "--cache", str(cache)],
            workdir,
            f"generate_{preset.name}",
        )
        print(f"  done in {time.perf_counter() - t:.0f} s", flush=True)
    return image_path, label_path


# ----------------------------------------------------------------------------- children
def _vm_status() -> dict[str, int]:
    """VmRSS and VmHWM (peak) of this process in bytes, from /proc (Linux)."""
    out = {}
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(("VmRSS:", "VmHWM:")):
                out[line.split(":")[0]] = int(line.split()[1]) * 1024
    except OSError:
        pass
    return out


def _run_child(args: list[str], workdir: Path, tag: str, threads: int | None = None) -> int:
    """Run this script with ``args`` in a fresh interpreter; return its peak RSS in bytes
    (``ru_maxrss`` from ``os.wait4``). Output goes to ``workdir/<tag>.log``; a failure raises
    with the log's tail."""
    env = dict(os.environ)
    if threads:
        for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
            env[var] = str(threads)
    log = workdir / f"{tag}.log"
    with open(log, "w") as fh:
        proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), *args],
            stdout=fh,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=REPO,
        )
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        except BaseException:
            proc.kill()
            raise
    proc.returncode = code = os.waitstatus_to_exitcode(status)
    if code != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-25:])
        raise RuntimeError(f"child {tag} failed with exit code {code}; last lines of {log}:\n{tail}")
    return int(usage.ru_maxrss) * 1024  # Linux: KiB


def _single_stage(seg: Any, path: Path, resample: str) -> Any:
    """Method (b): the fine network over the whole scan at the fine spacing (see module doc)."""
    import SimpleITK as sitk

    from segpipe import io, spatial
    from segpipe.model import sliding_window_probs
    from segpipe.refine import body_interior, body_midline_x, clean_lungs, skin_slack, split_sides
    from segpipe.refine.edge_snap import snap_label_edges
    from segpipe.refine.fat import clear_fat
    from segpipe.refine.pleural_air import pleural_air

    img = io.read_image(path)
    canonical, code = spatial.to_canonical(img)
    fine = spatial.resample_image(canonical, seg.settings.fine_mm)
    hu = sitk.GetArrayFromImage(fine)
    probs = sliding_window_probs(
        seg.single_net, hu, seg.settings.fine, seg.settings.window_hu, seg.settings.device, sw_batch=seg.settings.window_batch(seg.settings.fine)
    )
    background = probs[0].numpy().copy()  # a copy, so the other channels can go
    del probs
    # a pneumothorax is not lung, as in the cascade (which counts only air inside the body as pleural)
    body = body_interior(hu)
    background[pleural_air(background < 0.5, hu, seg.settings.fine_mm, valid=body)] = 1.0
    sides = split_sides((background < 0.5) & skin_slack(body), midline_x=body_midline_x(hu))
    del body
    del hu
    back = spatial.resample_to_reference(
        spatial.copy_geometry(sides, fine),
        canonical,
        interpolator=sitk.sitkNearestNeighbor,
        default_value=0,
        output_pixel_type=sitk.sitkUInt8,
    )
    if resample == "probs":  # P(background) linearly back onto the whole grid at once, sides by nearest
        bg = sitk.GetImageFromArray(background)
        bg.CopyInformation(fine)
        bg_full = spatial.resample_to_reference(
            bg, canonical, interpolator=sitk.sitkLinear, default_value=1.0, output_pixel_type=sitk.sitkFloat32
        )
        arr = sitk.GetArrayFromImage(back)
        arr[sitk.GetArrayViewFromImage(bg_full) >= 0.5] = 0
        back = spatial.copy_geometry(arr, canonical)
    arr = sitk.GetArrayFromImage(back)  # fat is never lung, and edges on the scan, as in the cascade
    clear_fat(arr, sitk.GetArrayViewFromImage(canonical), canonical.GetSpacing())
    snap_label_edges(arr, sitk.GetArrayViewFromImage(canonical), canonical.GetSpacing())
    back = spatial.copy_geometry(arr, canonical)
    del arr
    label_c, _ = clean_lungs(back)
    label = spatial.from_canonical(label_c, img) if code != spatial.CANONICAL else label_c
    label.CopyInformation(img)
    return label


def _lungmask_inferer(workdir: Path, device: str, postprocess: bool) -> Any:
    """lungmask's LMInferer with the R231 network (random weights, seed 0), built without any
    download: a random state dict is written to ``workdir`` and passed as ``modelpath``."""
    import torch
    from lungmask import LMInferer
    from lungmask.resunet import UNet

    torch.manual_seed(0)
    # the constructor arguments lungmask.mask.get_model uses for R231
    net = UNet(n_classes=3, padding=True, depth=5, up_mode="upsample", batch_norm=True, residual=False)
    weights = workdir / "lungmask_r231_random.pth"
    torch.save(net.state_dict(), weights)
    return LMInferer(
        modelpath=str(weights),
        force_cpu=device == "cpu",
        batch_size=20,
        volume_postprocessing=postprocess,
        tqdm_disable=True,
    )


def _worker(args: argparse.Namespace) -> None:
    """Child process: generate a scan, or run one method on one scan and write a result JSON."""
    if args.worker == "generate":
        print(json.dumps(_generate(SCANS[args.scan_name], Path(args.cache))))
        return
    import numpy as np
    import SimpleITK as sitk
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    scan = Path(args.scan)
    extra: dict[str, Any] = {}
    if args.worker in ("cascade", "single"):
        from segpipe.infer import LungSegmenter

        seg = LungSegmenter.from_file(args.model, device=args.device)
        if args.worker == "single":
            from segpipe.device import for_inference
            from segpipe.model import build_network

            net = build_network(seg.settings.fine.network)
            net.load_state_dict(seg.weights["fine"])
            seg.single_net = for_inference(net, seg.settings.device)  # the cascade's layout too
    else:
        inferer = _lungmask_inferer(Path(args.result).parent, args.device, args.lungmask_postprocess)
    setup = _vm_status()
    t0 = time.perf_counter()
    if args.worker == "cascade":
        result = seg.predict_with_report(scan)
        mask = sitk.GetArrayViewFromImage(result.label)
        extra = {
            "stages_s": result.report["timings_s"],
            "fallbacks": result.report["fallbacks"],
            "warnings": result.report["warnings"],
        }
    elif args.worker == "single":
        label = _single_stage(seg, scan, args.single_resample)
        mask = sitk.GetArrayViewFromImage(label)
    else:
        image = sitk.ReadImage(str(scan))
        mask = inferer.apply(image)
    wall = time.perf_counter() - t0
    vm = _vm_status()
    if args.mask_out:
        np.save(args.mask_out, np.asarray(mask, dtype=np.uint8))
    out = {
        "method": args.worker,
        "wall_s": wall,
        "rss_after_setup_bytes": setup.get("VmRSS"),
        "vm_hwm_bytes": vm.get("VmHWM"),
        "ru_maxrss_self_bytes": int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024,
        "torch_threads": torch.get_num_threads(),
        "device": args.device,
        **extra,
    }
    tmp = Path(args.result + ".tmp")
    tmp.write_text(json.dumps(out))
    tmp.replace(args.result)


def run_method(
    method: str, scan: Path, args: argparse.Namespace, workdir: Path, tag: str, mask_out: Path | None
) -> dict[str, Any]:
    """One measured run of ``method`` on ``scan`` in a child; the result dict with
    ``peak_rss_bytes`` (the child's ru_maxrss seen by the parent)."""
    result = workdir / f"{tag}.json"
    cmd = [
        "--worker",
        method,
        "--scan",
        str(scan),
        "--model",
        str(args.model),
        "--device",
        args.device,
        "--result",
        str(result),
        "--single-resample",
        args.single_resample,
    ]
    if args.threads:
        cmd += ["--threads", str(args.threads)]
    if args.lungmask_postprocess:
        cmd.append("--lungmask-postprocess")
    if mask_out is not None:
        cmd += ["--mask-out", str(mask_out)]
    t = time.perf_counter()
    peak = _run_child(cmd, workdir, tag, args.threads)
    out = json.loads(result.read_text())
    out["peak_rss_bytes"] = peak
    out["process_s"] = time.perf_counter() - t
    return out


# ----------------------------------------------------------------------------- analysis
def _dice_per_lung(a: Any, b: Any) -> dict[str, float]:
    from segpipe.metrics import dice

    return {side: round(dice(a == v, b == v), 5) for side, v in (("right", 1), ("left", 2))}


def compare_masks(mask_a: Path | None, mask_b: Path | None, label_path: Path) -> dict[str, Any]:
    """Dice per lung of (a) vs (b), and of each vs the phantom label."""
    import numpy as np
    import SimpleITK as sitk

    ref = sitk.GetArrayFromImage(sitk.ReadImage(str(label_path)))
    out: dict[str, Any] = {}
    a = np.load(mask_a, mmap_mode="r") if mask_a and mask_a.is_file() else None
    b = np.load(mask_b, mmap_mode="r") if mask_b and mask_b.is_file() else None
    if a is not None:
        out["cascade_vs_label"] = _dice_per_lung(np.asarray(a), ref)
    if b is not None:
        out["single_vs_label"] = _dice_per_lung(np.asarray(b), ref)
    if a is not None and b is not None:
        out["cascade_vs_single"] = _dice_per_lung(np.asarray(a), np.asarray(b))
    return out


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over repeats of one (scan, method)."""
    rss_hwm = [r["vm_hwm_bytes"] for r in runs if r.get("vm_hwm_bytes")]
    return {
        "wall_s": statistics.median(r["wall_s"] for r in runs),
        "peak_rss_mib": statistics.median(r["peak_rss_bytes"] for r in runs) / MIB,
        "vm_hwm_mib": statistics.median(rss_hwm) / MIB if rss_hwm else None,
        "rss_after_setup_mib": statistics.median(r["rss_after_setup_bytes"] or 0 for r in runs) / MIB,
        "runs_wall_s": [round(r["wall_s"], 3) for r in runs],
        "runs_peak_rss_mib": [round(r["peak_rss_bytes"] / MIB, 1) for r in runs],
        "stages_s": runs[0].get("stages_s"),
    }


def ratios(methods: dict[str, dict[str, Any]]) -> dict[str, float | None]:
    """(b)/(a) time and RSS, (c)/(a) time, for one scan."""
    a, b, c = methods.get("cascade"), methods.get("single"), methods.get("lungmask")
    return {
        "time_b": b["wall_s"] / a["wall_s"] if a and b else None,
        "rss_b": b["peak_rss_mib"] / a["peak_rss_mib"] if a and b else None,
        "time_c": c["wall_s"] / a["wall_s"] if a and c else None,
    }


def evaluate_targets(scans: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """PASS/FAIL per issue target on the scans that were run (others: not run)."""
    out = []
    for name, scan, kind, threshold in TARGETS:
        entry: dict[str, Any] = {
            "target": name,
            "scan": scan,
            "kind": kind,
            "threshold": threshold,
            "value": None,
            "status": "NOT RUN",
        }
        s = scans.get(scan)
        if s is not None:
            if kind == "dice_ab":
                d = s.get("dice", {}).get("cascade_vs_single")
                value = min(d.values()) if d else None
                ok = value is not None and value >= threshold
            else:
                value = s["ratios"].get(kind)
                ok = value is not None and (value > threshold if kind == "time_c" else value >= threshold)
            entry["value"] = value
            entry["status"] = "NOT RUN" if value is None else ("PASS" if ok else "FAIL")
        out.append(entry)
    return out


def _fmt(v: float | None, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def print_report(result: dict[str, Any]) -> None:
    """The human-readable tables."""
    print()
    head = f"{'scan':<12} {'size (x y z)':<15} {'method':<32} {'wall s':>8} {'peak RSS MiB':>13} {'setup MiB':>10}"
    print(head)
    print("-" * len(head))
    for name, s in result["scans"].items():
        size = "x".join(str(v) for v in s["size_xyz"])
        for method, m in s["methods"].items():
            print(
                f"{name:<12} {size:<15} {METHODS[method]:<32} {m['wall_s']:>8.2f} {m['peak_rss_mib']:>13.0f} "
                f"{m['rss_after_setup_mib']:>10.0f}"
            )
    print("\nsetup MiB = the child's RSS after imports and model construction, before reading the scan")
    dice_cols = ("Dice(a,b) R/L", "Dice(a,label) R/L", "Dice(b,label) R/L")
    print(f"\n{'scan':<12} {'time b/a':>9} {'RSS b/a':>8} {'time c/a':>9}  " + "  ".join(f"{c:>17}" for c in dice_cols))
    for name, s in result["scans"].items():
        r, d = s["ratios"], s.get("dice", {})
        pair = {k: f"{v['right']:.4f}/{v['left']:.4f}" for k, v in d.items()}
        print(
            f"{name:<12} {_fmt(r['time_b'], '.2f'):>9} {_fmt(r['rss_b'], '.2f'):>8} {_fmt(r['time_c'], '.2f'):>9}  "
            + "  ".join(f"{pair.get(k, '-'):>17}" for k in ("cascade_vs_single", "cascade_vs_label", "single_vs_label"))
        )
    print("\ntargets:")
    for t in result["targets"]:
        value = "" if t["value"] is None else f" ({t['value']:.3f} vs {t['threshold']})"
        print(f"  {t['status']:<7} {t['target']}{value}")


# ----------------------------------------------------------------------------- main
def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description="Inference wall time and peak RSS: segpipe cascade vs single-stage sliding window vs lungmask.",
        epilog="Scans: "
        + "; ".join(f"{s.name} {s.size_xyz} at {s.spacing_xyz} mm ({s.coverage})" for s in SCANS.values()),
    )
    parser.add_argument(
        "--model", type=Path, default=None, help=f"segpipe model file (default: {DEFAULT_MODEL.relative_to(REPO)})"
    )
    parser.add_argument(
        "--sizes",
        nargs="+",
        choices=list(SCANS),
        default=["chest", "neck_pelvis"],
        help="scans to run (default: chest neck_pelvis)",
    )
    parser.add_argument(
        "--methods", nargs="+", choices=list(METHODS), default=list(METHODS), help="methods to run (default: all)"
    )
    parser.add_argument(
        "--repeats", type=int, default=3, help="runs per scan and method; figures are medians (default 3)"
    )
    parser.add_argument(
        "--lungmask-repeats", type=int, default=None, metavar="N",
        help="runs of lungmask per scan (default: --repeats); its 2D network takes minutes on a full-size CPU scan",
    )
    parser.add_argument(
        "--threads", type=int, default=None, help="torch/OpenMP threads per child (default: torch's default)"
    )
    parser.add_argument(
        "--device", default="cpu", choices=["cpu", "cuda", "auto"], help="device for all methods (default cpu)"
    )
    parser.add_argument(
        "--cache",
        type=Path,
        default=None,
        help="folder of generated scans (default $SEGPIPE_HOME/bench_scans or ~/.cache/segpipe/bench_scans)",
    )
    parser.add_argument("--json", type=Path, default=None, help="write machine-readable results here")
    parser.add_argument(
        "--single-resample",
        choices=["labels", "probs"],
        default="probs",
        help="how (b) goes back to the scan grid: P(background) linearly, as the cascade (default), or nearest labels",
    )
    parser.add_argument(
        "--lungmask-postprocess", action="store_true", help="include lungmask's volume postprocessing in (c)"
    )
    parser.add_argument("--keep", action="store_true", help="keep the work folder (child logs, masks)")
    # internal: one child process
    parser.add_argument("--worker", choices=["generate", *METHODS], help=argparse.SUPPRESS)
    parser.add_argument("--scan", help=argparse.SUPPRESS)
    parser.add_argument("--scan-name", help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    parser.add_argument("--mask-out", help=argparse.SUPPRESS)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.worker:
        _worker(args)
        return 0
    if args.repeats < 1:
        parser.error(f"--repeats: expected at least 1, got {args.repeats}")
    args.lungmask_repeats = args.repeats if args.lungmask_repeats is None else args.lungmask_repeats
    if args.lungmask_repeats < 1:
        parser.error(f"--lungmask-repeats: expected at least 1, got {args.lungmask_repeats}")
    if args.model is None:
        if not DEFAULT_MODEL.is_file():
            parser.error(f"no bundled model at {DEFAULT_MODEL}; pass --model FILE (a model written by 'segpipe train')")
        args.model = DEFAULT_MODEL
    if ("cascade" in args.methods or "single" in args.methods) and not args.model.is_file():
        parser.error(f"--model: file not found: {args.model}")
    args.model = args.model.resolve()
    if "lungmask" in args.methods:
        try:
            import lungmask  # noqa: F401
        except ImportError as err:
            parser.error(
                f"method lungmask needs the lungmask package ({err}); pip install -e \".[bench]\" (with torch "
                "installed first, as README says), or pass --methods cascade single"
            )
    cache = (args.cache or default_cache()).resolve()
    info = machine_info(args.threads)
    for line in format_machine(info):
        print(line)
    print(
        f"model: {args.model}; device {args.device}; repeats {args.repeats} (medians); scans cached in {cache}",
        flush=True,
    )

    workdir = Path(tempfile.mkdtemp(prefix="segpipe_infer_bench_"))
    result: dict[str, Any] = {
        "meta": {
            **info,
            "model": str(args.model),
            "device": args.device,
            "repeats": args.repeats,
            "lungmask_repeats": min(args.lungmask_repeats, args.repeats),
            "single_resample": args.single_resample,
            "lungmask_postprocess": args.lungmask_postprocess,
        },
        "scans": {},
    }
    try:
        for name in args.sizes:
            preset = SCANS[name]
            image, label = ensure_scan(preset, cache, workdir)
            runs: dict[str, list[dict[str, Any]]] = {m: [] for m in args.methods}
            masks = {m: workdir / f"{name}_{m}_mask.npy" for m in ("cascade", "single")}
            for rep in range(args.repeats):  # methods interleaved, so machine noise hits them alike
                for method in args.methods:
                    if method == "lungmask" and rep >= args.lungmask_repeats:
                        continue
                    keep_mask = masks.get(method) if rep == 0 else None
                    r = run_method(method, image, args, workdir, f"{name}_{method}_{rep}", keep_mask)
                    runs[method].append(r)
                    print(
                        f"  {name:<12} {METHODS[method]:<32} run {rep + 1}/{args.repeats}: {r['wall_s']:8.2f} s, "
                        f"peak RSS {r['peak_rss_bytes'] / MIB:7.0f} MiB",
                        flush=True,
                    )
            methods = {m: summarise(rs) for m, rs in runs.items()}
            entry = {
                "size_xyz": list(preset.size_xyz),
                "spacing_xyz": list(preset.spacing_xyz),
                "coverage": preset.coverage,
                "image": str(image),
                "methods": methods,
                "ratios": ratios(methods),
            }
            entry["dice"] = compare_masks(
                masks["cascade"] if "cascade" in runs else None, masks["single"] if "single" in runs else None, label
            )
            for p in masks.values():
                p.unlink(missing_ok=True)
            result["scans"][name] = entry
        result["targets"] = evaluate_targets(result["scans"])
    finally:
        if args.keep:
            print(f"work folder kept: {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    print_report(result)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        tmp = args.json.with_name(args.json.name + ".tmp")
        tmp.write_text(json.dumps(result, indent=1))
        tmp.replace(args.json)
        print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
