"""Regenerate ``docs/BENCHMARKS.md`` from fresh benchmark runs.

Runs, each in a child process:

* ``benchmarks/infer_bench.py``: inference wall time and peak RSS of the segpipe cascade, a
  single-stage sliding window at the fine spacing and lungmask's 2D U-Net on generated scans
  (small 256 x 256 x 128, chest 512 x 512 x 300, neck-to-pelvis 512 x 512 x 1000), their
  ratios, Dice between the masks and the issue's targets;
* ``benchmarks/memory_bench.py``: memory and time of one training step of the network, plain /
  checkpointing / AMP / both, at 96^3 and 128^3, and the bottleneck vs plain-convolution
  activations;

then reads the accuracy results of ``benchmarks/eval_model.py --json`` (``--eval-json``, default
``docs/eval_default_model.json``: the model and the classical baseline on phantoms and real
scans; when the file is missing the section says how to make it) and writes the markdown
atomically. Every
figure is the median of ``--repeats`` runs. Results of earlier runs can be reused with
``--infer-json`` / ``--memory-json`` (files written by the two scripts' ``--json``).
``--e2e-json`` adds the end-to-end section (``benchmarks/e2e_bench.py --json``: the command
against a plain MONAI pipeline, a folder against separate calls) and ``--gpu-json`` the GPU
check (``benchmarks/gpu_check.py --json``, run on a CUDA machine; by default the last one,
``docs/gpu_check.json``, when present, after ``docs/gpu_check_note.md``: what later GPU runs found).

``--quick`` makes everything small, to check the report end to end in a few minutes: the
128 x 128 x 96 test scan only, one run, one memory size (64^3).

Run: ``python benchmarks/report.py --model FILE [--eval-json eval.json] [--out docs/BENCHMARKS.md]``.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DEFAULT_OUT = REPO / "docs" / "BENCHMARKS.md"
DEFAULT_EVAL = REPO / "docs" / "eval_default_model.json"
DEFAULT_GPU = REPO / "docs" / "gpu_check.json"  # the last benchmarks/gpu_check.py --json from a CUDA machine
GPU_NOTE = REPO / "docs" / "gpu_check_note.md"  # what later GPU runs found, printed before that section when present
FULL_SIZES = ["small", "chest", "neck_pelvis"]
QUICK_SIZES = ["tiny"]
FULL_MEMORY_SIZES = [96, 128]
QUICK_MEMORY_SIZES = [64]


def load_script(file: str) -> Any:
    """A script of ``benchmarks/`` as a module (``infer_bench.py``: machine info and presets,
    stdlib-only at import; ``gpu_check.py``: its markdown section)."""
    spec = importlib.util.spec_from_file_location("segpipe_" + Path(file).stem, HERE / file)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules[spec.name] = module  # type: ignore[union-attr]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


ib = load_script("infer_bench.py")


# ----------------------------------------------------------------------------- running
def _run(script: str, args: list[str], threads: int | None = None) -> None:
    """Run a benchmark script in a child process, its output shown as it comes; ``threads``
    sets OpenMP's thread count there (torch follows it)."""
    cmd = [sys.executable, str(HERE / script), *args]
    env = dict(os.environ)
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)
    print(f"\n$ {' '.join(cmd)}", flush=True)
    subprocess.run(cmd, cwd=REPO, env=env, check=True)


def run_infer(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    cmd = ["--sizes", *args.sizes, "--repeats", str(args.repeats), "--lungmask-repeats", str(args.lungmask_repeats),
           "--json", str(out), "--device", args.device]
    if args.model:
        cmd += ["--model", str(args.model)]
    if args.threads:
        cmd += ["--threads", str(args.threads)]
    if args.cache:
        cmd += ["--cache", str(args.cache)]
    _run("infer_bench.py", cmd)
    return json.loads(out.read_text())


def run_memory(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    cmd = [
        "--sizes",
        *[str(s) for s in args.memory_sizes],
        "--repeats",
        str(args.repeats),
        "--json",
        str(out),
        "--device",
        args.device,
    ]
    _run("memory_bench.py", cmd, args.threads)
    return json.loads(out.read_text())


# ----------------------------------------------------------------------------- markdown
def _num(v: Any, spec: str) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    return format(v, spec)


def _mib(n: int | float | None) -> str:
    return "-" if n is None else f"{n / 1024**2:,.0f} MiB" if n < 1024**3 else f"{n / 1024**3:.2f} GiB"


def _table(header: list[str], rows: list[list[str]], align: str | None = None) -> list[str]:
    align = align or "l" * len(header)
    rule = ["---:" if a == "r" else "---" for a in align]
    return [
        "| " + " | ".join(header) + " |",
        "| " + " | ".join(rule) + " |",
        *("| " + " | ".join(r) + " |" for r in rows),
    ]


def _rel(path: Path) -> str:
    """``path`` relative to the repository when inside it."""
    try:
        return str(path.resolve().relative_to(REPO))
    except ValueError:
        return str(path)


def _file_sha(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()[:12]


def _shown(path: Path | str) -> str:
    """A path as the report shows it: relative to the repository when inside it."""
    try:
        return str(Path(path).resolve().relative_to(REPO))
    except ValueError:
        return str(path)


def header_section(info: dict[str, Any], args: argparse.Namespace, command: str) -> list[str]:
    v = info["versions"]
    ram = f", {info['ram_bytes'] / 1024**3:.0f} GiB RAM" if info.get("ram_bytes") else ""
    model_path = Path(args.model) if args.model else Path(info["model"]) if info.get("model") else None
    model = f"`{_shown(model_path)}`" if model_path else "-"
    if model_path and model_path.is_file():
        model += f" (sha256 {_file_sha(model_path)})"
    lines = [
        "# segpipe benchmarks",
        "",
        f"_Generated by `{command}`; do not edit by hand, rerun the script._",
        "",
        f"- **Date:** {info['date']}",
        f"- **Machine:** {info['cpu']}, {info['cores']} cores{ram}; {info['os']}"
        + (f"; torch threads {args.threads}" if args.threads else ""),
        "- **Versions:** "
        + ", ".join(f"{k} {val}" for k, val in v.items())
        + (f" (commit `{info['git_commit']}`)" if info.get("git_commit") else ""),
        f"- **Model:** {model}; device `{args.device}`",
        f"- **Figures:** medians of {args.repeats} run{'s' if args.repeats != 1 else ''}"
        + (f" (lungmask: {min(args.lungmask_repeats, args.repeats)}, its runs take minutes)"
           if min(args.lungmask_repeats, args.repeats) != args.repeats else "")
        + (" (**quick mode**: small sizes only, not the published figures)" if args.quick else ""),
        "",
    ]
    return lines


def infer_section(data: dict[str, Any] | None) -> list[str]:
    lines = ["## Inference: wall time and peak memory", ""]
    if data is None:
        return [*lines, "_Not run (`--skip-infer`)._", ""]
    lines += [
        "Each method runs in a child process of its own on the same generated scan (a phantom from",
        "`segpipe.synthetic`, pathologies off): wall time from the file on disk to the label map in memory",
        "(reading included, model loading and writing excluded); peak RSS over the child's whole life",
        "(interpreter, torch, model and scan included; `setup` is the RSS before the scan is read).",
        "",
        "- **(a) cascade**: `LungSegmenter.predict` (coarse stage on the whole scan, fine stage per lung crop).",
        "- **(b) single-stage**: the same fine network over the whole scan resampled to the fine spacing",
        "  (a plain MONAI pipeline: same patch, overlap and Gaussian blending), P(background) back onto the",
        "  whole grid at once as MONAI's `Invertd` does (linear; the cascade's rule, lung below 0.5), the",
        "  cascade's postprocess"
        + (" (here: labels resampled with nearest neighbour instead)." if data["meta"].get("single_resample") == "labels" else "."),
        "- **(c) lungmask**: lungmask's 2D U-Net (R231 architecture, random weights, so timing only) through",
        "  `lungmask.LMInferer`, slice by slice at 256 x 256, batches of 20, volume postprocessing off"
        + (" (on)." if data["meta"].get("lungmask_postprocess") else "."),
        "",
    ]
    rows = []
    for name, s in data["scans"].items():
        size = " x ".join(str(x) for x in s["size_xyz"])
        spacing = " x ".join(f"{x:g}" for x in s["spacing_xyz"])
        for method, m in s["methods"].items():
            rows.append(
                [
                    name,
                    size,
                    spacing,
                    ib.METHODS[method],
                    _num(m["wall_s"], ".1f"),
                    _num(m["peak_rss_mib"], ",.0f"),
                    _num(m["rss_after_setup_mib"], ",.0f"),
                ]
            )
    lines += _table(
        ["scan", "size (x y z)", "spacing mm", "method", "wall time s", "peak RSS MiB", "setup MiB"], rows, "llllrrr"
    )
    stage_rows = []
    for name, s in data["scans"].items():
        st = s["methods"].get("cascade", {}).get("stages_s")
        if st:
            stage_rows.append(
                [name, *(_num(st.get(k), ".1f") for k in ("read_s", "coarse_s", "fine_s", "postprocess_s"))]
            )
    if stage_rows:
        lines += ["", "Cascade stages (s, first run):", ""]
        lines += _table(["scan", "read", "coarse", "fine", "postprocess"], stage_rows, "lrrrr")
    lines += ["", "### Cascade against single-stage and lungmask", ""]
    rows = []
    for name, s in data["scans"].items():
        r, d = s["ratios"], s.get("dice", {})

        def pair(key: str, d: dict[str, Any] = d) -> str:
            v = d.get(key)
            return f"{v['right']:.4f} / {v['left']:.4f}" if v else "-"

        rows.append(
            [
                name,
                _num(r["time_b"], ".2f") + "x",
                _num(r["rss_b"], ".2f") + "x",
                _num(r["time_c"], ".2f") + "x",
                pair("cascade_vs_single"),
                pair("cascade_vs_label"),
                pair("single_vs_label"),
            ]
        )
    lines += _table(
        [
            "scan",
            "time (b)/(a)",
            "peak RSS (b)/(a)",
            "time (c)/(a)",
            "Dice (a, b) R / L",
            "Dice (a, label) R / L",
            "Dice (b, label) R / L",
        ],
        rows,
        "lrrrlll",
    )
    lines += [
        "",
        "Ratios above 1 favour the cascade. Dice is per lung (right / left); *label* is the phantom's own label. (b) runs",
        "the fine network on the whole scan, outside the lung crops it was trained on, so Dice (a, b) reflects both the",
        "cropping and how the fine network behaves away from the lungs.",
        "",
        "### Targets",
        "",
    ]
    rows = [
        [
            t["target"],
            "-"
            if t["value"] is None
            else f"{t['value']:.3f} (needs {'>' if t.get('kind') == 'time_c' else '>='} {t['threshold']:g})",
            f"**{t['status']}**",
        ]
        for t in data["targets"]
    ]
    lines += _table(["target", "measured", "status"], rows)
    return [*lines, ""]


def memory_section(data: dict[str, Any] | None) -> list[str]:
    lines = ["## Training step memory (network)", ""]
    if data is None:
        return [*lines, "_Not run (`--skip-memory`)._", ""]
    lines += [
        f"One training step (forward, Dice + CE loss, backward) of the default network ({data['parameters']:,} parameters),",
        f"batch {data['batch']}, on `{data['device']}` ({data['threads']} thread{'s' if data['threads'] != 1 else ''}), "
        "from `benchmarks/memory_bench.py`.",
        "*Saved*: bytes autograd keeps for backward (counted on a real step); *estimate*: `segpipe memory`'s figure;",
        "*cut*: saved bytes of plain fp32 / this setting; *peak*: tensor-level peak of the step (CUDA: max allocated);",
        "*step*: median wall time, *vs plain*: that over plain fp32's.",
        "",
    ]
    rows = [
        [
            f"{r['size']}^3",
            r["setting"],
            _mib(r["saved_bytes"]),
            _mib(r["est_activation_bytes"]),
            f"{r['cut']:.2f}x",
            _mib(r["peak_bytes"]),
            f"{r['step_s']:.2f}",
            f"{r['step_time_ratio']:.2f}x",
        ]
        for r in data["rows"]
    ]
    lines += _table(["patch", "setting", "saved", "estimate", "cut", "peak", "step s", "vs plain"], rows, "llrrrrrr")
    if data.get("plain_conv"):
        lines += [
            "",
            "Bottleneck blocks against plain convolutions (same widths, fp32, saved bytes of the forward pass):",
            "",
        ]
        rows = [
            [f"{r['size']}^3", _mib(r["bottleneck_saved_bytes"]), _mib(r["plain_saved_bytes"]), f"{r['ratio']:.3f}"]
            for r in data["plain_conv"]
        ]
        lines += _table(["patch", "bottleneck", "plain conv", "ratio"], rows, "lrrr")
    return [*lines, ""]


_SIDES = ("right", "left")


def _has(case: dict[str, Any], side: str) -> bool:
    """Whether the case's reference has this lung (``ref_has``; assumed when absent)."""
    return bool((case.get("ref_has") or {}).get(side, True))


def _metric_cell(case: dict[str, Any], who: str, metric: str, spec: str) -> str:
    """``right / left`` of one metric; a lung the reference lacks shows ``n/a``."""
    entry = case.get(who)
    if not entry:
        return "-"
    return " / ".join(_num((entry.get(side) or {}).get(metric), spec) if _has(case, side) else "n/a" for side in _SIDES)


def _note(case: dict[str, Any]) -> str:
    missing = [side for side in _SIDES if not _has(case, side)]
    if not missing:
        return ""
    if len(missing) == 2:
        false_ml = [
            sum(((case.get(who) or {}).get(side) or {}).get("volume_ml") or 0.0 for side in _SIDES)
            for who in ("model", "baseline")
        ]
        return f"no lung in reference; marked {false_ml[0]:.1f} mL (model), {false_ml[1]:.1f} mL (baseline)"
    return f"no {missing[0]} lung in reference"


def _mean_dice(cases: list[dict[str, Any]], who: str) -> float | None:
    vals = []
    for c in cases:
        for side in _SIDES:
            d = ((c.get(who) or {}).get(side) or {}).get("dice")
            if _has(c, side) and d is not None and not math.isnan(d):
                vals.append(d)
    return sum(vals) / len(vals) if vals else None


def _summary_lines(summary: dict[str, Any]) -> list[str]:
    """The per-lung summary that ``eval_model.py`` writes (``summary`` in its JSON)."""
    rows = []
    for who in ("model", "baseline"):
        for side in _SIDES:
            m = (summary.get(who) or {}).get(side) or {}
            rows.append(
                [
                    who,
                    side,
                    str(m.get("cases", "-")),
                    _num(m.get("dice_mean"), ".4f"),
                    _num(m.get("dice_median"), ".4f"),
                    _num(m.get("dice_worst"), ".4f"),
                    _num(m.get("hd95_mean_mm"), ".1f"),
                    _num(m.get("hd95_worst_mm"), ".1f"),
                    str(m.get("missed", "-")),
                ]
            )
    lines = _table(
        [
            "method",
            "lung",
            "cases",
            "Dice mean",
            "Dice median",
            "Dice worst",
            "HD95 mean mm",
            "HD95 worst mm",
            "missed",
        ],
        rows,
        "llrrrrrrr",
    )
    patho = summary.get("pathology") or {}
    if patho:
        lines += [
            "",
            f"Mean Dice on the cases with consolidation, effusion or collapse: model "
            f"{_num(patho.get('model'), '.4f')}, baseline {_num(patho.get('baseline'), '.4f')}.",
        ]
    if summary.get("no_lung_cases"):
        lines += [
            "",
            f"Scans without lungs: {summary['no_lung_cases']}; lung the model marked in them (mL): "
            + ", ".join(f"{v:g}" for v in summary.get("no_lung_false_ml", [])),
        ]
    return lines


def accuracy_section(eval_json: Path | None) -> list[str]:
    lines = ["## Accuracy against the classical baseline", ""]
    how = (
        "Produce them with `python benchmarks/eval_model.py --json docs/eval_default_model.json` (see its `--help`), "
        "then rerun `python benchmarks/report.py --eval-json docs/eval_default_model.json`."
    )
    if eval_json is None:
        return [*lines, f"_No evaluation results given._ {how}", ""]
    if not eval_json.is_file():
        return [*lines, f"_Evaluation results `{_rel(eval_json)}` not found._ {how}", ""]
    data = json.loads(eval_json.read_text())
    source = f"From `{eval_json.name}`" + (f" ({data['date']}, model `{data['model']}`)" if data.get("date") else "")
    lines += [
        f"{source}. Model = the segpipe cascade; baseline = `segpipe.baseline` (classical: HU threshold, outside air",
        "and airways removed, largest components sided by physical x, holes filled). Cells are right / left lung;",
        "HD95 and ASSD in mm; `n/a`: the reference has no such lung.",
        "",
    ]
    header = [
        "case",
        "coverage",
        "pathology",
        "Dice model",
        "Dice baseline",
        "HD95 model",
        "HD95 baseline",
        "ASSD model",
        "ASSD baseline",
        "note",
    ]

    def row(c: dict[str, Any], real: bool) -> list[str]:
        path = "-" if real else (", ".join(c.get("pathology") or []) or "none")
        return [
            c.get("case", "?"),
            c.get("coverage", "real" if real else "-"),
            path,
            _metric_cell(c, "model", "dice", ".4f"),
            _metric_cell(c, "baseline", "dice", ".4f"),
            _metric_cell(c, "model", "hd95_mm", ".1f"),
            _metric_cell(c, "baseline", "hd95_mm", ".1f"),
            _metric_cell(c, "model", "assd_mm", ".2f"),
            _metric_cell(c, "baseline", "assd_mm", ".2f"),
            _note(c),
        ]

    phantoms = data.get("phantoms") or []
    if phantoms:
        lines += ["### Phantoms", ""]
        lines += _table(header, [row(c, False) for c in phantoms], "lllllrrrrl")
        lines += [""]
        if data.get("summary"):
            lines += ["Summary over the cases whose reference has that lung:", "", *_summary_lines(data["summary"]), ""]
        else:
            lines += [
                f"Mean Dice over {len(phantoms)} phantoms and their lungs: model "
                f"{_num(_mean_dice(phantoms, 'model'), '.4f')}, baseline "
                f"{_num(_mean_dice(phantoms, 'baseline'), '.4f')}.",
                "",
            ]
    real = data.get("real") or []
    scored = [c for c in real if c.get("model")]
    if real:
        lines += ["### Real scans", ""]
    if scored:
        lines += _table(header, [row(c, True) for c in scored], "lllllrrrrl")
        lines += [""]
    unscored = [c for c in real if not c.get("model")]
    for c in unscored:
        vols = c.get("volumes_ml") or {}
        warn = f"; warnings: {'; '.join(c['warnings'])}" if c.get("warnings") else ""
        lines.append(
            f"- `{c.get('case', '?')}` (no reference): model volumes right {_num(vols.get('right'), ',.0f')} mL, "
            f"left {_num(vols.get('left'), ',.0f')} mL{warn}."
        )
    if unscored:
        lines.append("")
    return lines


def e2e_section(data: dict[str, Any] | None) -> list[str]:
    """End to end (``benchmarks/e2e_bench.py --json``): the command against a plain MONAI
    pipeline, and a folder against separate calls."""
    if not data:
        return []
    lines = ["## End to end: the command a user types", "",
             "Fresh processes, start-up and writing included, methods alternating, medians "
             "(`python benchmarks/e2e_bench.py`; peak RSS from `os.wait4`).", ""]
    scan = data.get("scan")
    if scan:
        rows = [["segpipe infer (DICOM in, NIfTI out)", _num(scan["segpipe"]["wall_s"], ".2f"), _num(scan["segpipe"]["peak_rss_mib"], ",.0f")],
                ["plain single-stage MONAI pipeline", _num(scan["monai"]["wall_s"], ".2f"), _num(scan["monai"]["peak_rss_mib"], ",.0f")],
                ["ratio (targets <= 0.35x, <= 0.3x)", f"{scan['time_ratio']:.2f}x", f"{scan['rss_ratio']:.2f}x"]]
        lines += [f"Scan `{_shown(scan['scan'])}`, {len(scan['runs']['segpipe'])} runs each:", ""]
        lines += _table(["method", "wall time s", "peak RSS MiB"], rows, "lrr") + [""]
    folder = data.get("folder")
    if folder:
        rows = [["one call per scan", _num(folder["separate_per_scan_s"], ".2f"), _num(folder["single_call_peak_rss_mib"], ",.0f")],
                ["one call for the folder", _num(folder["folder_per_scan_s"], ".2f"), _num(folder["folder_peak_rss_mib"], ",.0f")],
                ["ratio (targets <= 0.6x, <= 1.5x)", f"{folder['time_ratio']:.2f}x", f"{folder['rss_ratio']:.2f}x"]]
        lines += [f"A folder of {folder['scans']} generated 512 x 512 x 300 chest scans:", ""]
        lines += _table(["how", "s per scan", "peak RSS MiB"], rows, "lrr") + [""]
    return lines


def gpu_section(data: dict[str, Any] | None, note: str = "") -> list[str]:
    """The GPU check (``benchmarks/gpu_check.py --json``), as that script formats it, after
    ``note`` (markdown: what later runs on a GPU found; :data:`GPU_NOTE`)."""
    if not data:
        return []
    before = note.strip().splitlines() + [""] if note.strip() else []
    return before + load_script("gpu_check.py").markdown_section(data).splitlines() + [""]


def reproduce_section(args: argparse.Namespace, command: str) -> list[str]:
    model = f" --model {_shown(args.model)}" if args.model else ""
    threads = f" --threads {args.threads}" if args.threads else ""
    return [
        "## Reproduce",
        "",
        "```",
        command,
        f"python benchmarks/infer_bench.py --sizes {' '.join(args.sizes)} --repeats {args.repeats} "
        f"--lungmask-repeats {args.lungmask_repeats}{model}{threads}",
        (f"OMP_NUM_THREADS={args.threads} " if args.threads else "")
        + f"python benchmarks/memory_bench.py --sizes {' '.join(map(str, args.memory_sizes))} --repeats {args.repeats}",
        "```",
        "",
    ]


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file in the same folder and a rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


# ----------------------------------------------------------------------------- main
def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description="Regenerate docs/BENCHMARKS.md from fresh runs of the benchmark scripts."
    )
    parser.add_argument(
        "--out", type=Path, default=DEFAULT_OUT, help="markdown file to write (default docs/BENCHMARKS.md)"
    )
    parser.add_argument(
        "--model", type=Path, default=None, help="segpipe model file (default: segpipe/weights/default.pt)"
    )
    parser.add_argument(
        "--eval-json",
        type=Path,
        default=DEFAULT_EVAL,
        help="accuracy results written by benchmarks/eval_model.py --json (default docs/eval_default_model.json)",
    )
    parser.add_argument(
        "--repeats", type=int, default=None, help="runs per figure, medians reported (default 3; quick: 1)"
    )
    parser.add_argument(
        "--lungmask-repeats", type=int, default=1, metavar="N",
        help="runs of lungmask per scan (default 1: about 5 and 15 minutes on the full-size scans here)",
    )
    parser.add_argument("--quick", action="store_true", help="small sizes only, 1 run, one memory size: a fast check")
    parser.add_argument(
        "--sizes",
        nargs="+",
        choices=list(ib.SCANS),
        default=None,
        help=f"inference scans (default {' '.join(FULL_SIZES)}; quick: {' '.join(QUICK_SIZES)})",
    )
    parser.add_argument(
        "--memory-sizes",
        type=int,
        nargs="+",
        default=None,
        help=f"training-step patch sizes (default {' '.join(map(str, FULL_MEMORY_SIZES))}; quick: 64)",
    )
    parser.add_argument(
        "--threads", type=int, default=None, help="torch/OpenMP threads in the children (default: torch's)"
    )
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda", "auto"], help="device (default cpu)")
    parser.add_argument("--cache", type=Path, default=None, help="folder of generated scans (see infer_bench.py)")
    parser.add_argument(
        "--infer-json", type=Path, default=None, help="reuse this infer_bench.py --json output instead of running it"
    )
    parser.add_argument(
        "--memory-json", type=Path, default=None, help="reuse this memory_bench.py --json output instead of running it"
    )
    parser.add_argument("--e2e-json", type=Path, default=None, help="add the end-to-end section from this e2e_bench.py --json output")
    parser.add_argument(
        "--gpu-json", type=Path, default=None,
        help=f"add the GPU section from this gpu_check.py --json output (default {DEFAULT_GPU.relative_to(REPO)} when present)",
    )
    parser.add_argument("--skip-infer", action="store_true", help="leave the inference section out")
    parser.add_argument("--skip-memory", action="store_true", help="leave the training-memory section out")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    args.repeats = args.repeats or (1 if args.quick else 3)
    if args.repeats < 1 or args.lungmask_repeats < 1:
        parser.error("--repeats and --lungmask-repeats: expected at least 1")
    args.sizes = args.sizes or (QUICK_SIZES if args.quick else FULL_SIZES)
    args.memory_sizes = args.memory_sizes or (QUICK_MEMORY_SIZES if args.quick else FULL_MEMORY_SIZES)
    if args.model is None and not args.skip_infer and args.infer_json is None:
        if not ib.DEFAULT_MODEL.is_file():
            parser.error(
                f"no bundled model at {ib.DEFAULT_MODEL}; pass --model FILE (a model written by 'segpipe train')"
            )
        args.model = ib.DEFAULT_MODEL
    if args.gpu_json is None and DEFAULT_GPU.is_file():  # a GPU check cannot be rerun on a CPU machine: keep the last one
        args.gpu_json = DEFAULT_GPU
    for name in ("model", "infer_json", "memory_json", "e2e_json", "gpu_json"):
        p = getattr(args, name)
        if p is not None and not p.is_file():
            parser.error(f"--{name.replace('_', '-')}: file not found: {p}")
    command = "python benchmarks/report.py " + " ".join(sys.argv[1:] if argv is None else argv)

    with tempfile.TemporaryDirectory(prefix="segpipe_report_") as tmp:
        infer = memory = None
        if not args.skip_infer:
            infer = (
                json.loads(args.infer_json.read_text())
                if args.infer_json
                else run_infer(args, Path(tmp) / "infer.json")
            )
        if not args.skip_memory:
            memory = (
                json.loads(args.memory_json.read_text())
                if args.memory_json
                else run_memory(args, Path(tmp) / "memory.json")
            )
    info = infer["meta"] if infer else ib.machine_info(args.threads)
    if infer and args.infer_json:  # the figures are that file's: say how many runs it took
        runs = {m: len(v.get("runs_wall_s") or []) for s in infer["scans"].values() for m, v in s["methods"].items()}
        args.repeats = max([n for m, n in runs.items() if m != "lungmask"] or [args.repeats])
        args.lungmask_repeats = runs.get("lungmask") or args.lungmask_repeats
    lines = header_section(info, args, command.strip())
    lines += (
        infer_section(infer)
        + e2e_section(json.loads(args.e2e_json.read_text()) if args.e2e_json else None)
        + memory_section(memory)
        + gpu_section(json.loads(args.gpu_json.read_text()) if args.gpu_json else None,
                      GPU_NOTE.read_text() if args.gpu_json == DEFAULT_GPU and GPU_NOTE.is_file() else "")
        + accuracy_section(args.eval_json)
        + reproduce_section(args, command.strip())
    )
    write_atomic(args.out, "\n".join(lines).rstrip() + "\n")
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
