"""Evaluate a segpipe model against the classical baseline on held-out phantoms and real scans.

Generates ``--n`` phantoms with seeds the default model never saw (all coverages, storage
orientations, slice spacings, dtypes; a share of them with forced consolidation, effusion or a
collapsed lung), segments each with the model and with
:func:`segpipe.baseline.segment_lungs_classical`, and scores both per lung with
:func:`segpipe.metrics.lung_metrics` (Dice, HD95, ASSD, volumes). Real scans from
``../shared/data`` are added when present: COPDGene (with its reference) is scored; LIDC-IDRI
(no reference) gets volumes and a QC picture.

Prints a table and a summary (mean / worst per lung over the cases that have that lung) and
writes ``--json`` (read by ``benchmarks/report.py`` and quoted in docs/MODEL_CARD.md).

    python benchmarks/eval_model.py --json docs/eval_default_model.json --qc-dir docs/images
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import SimpleITK as sitk

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"

#: Coverage of each held-out case (20 cases: every coverage of segpipe.synthetic.COVERAGES).
COVERAGE_PLAN = (
    ["chest"] * 9 + ["chest_abdomen"] * 3 + ["neck_pelvis"] * 2 + ["lung_bases"] * 3 + ["no_lungs"] * 3
)
#: Forced pathology for some chest cases (index into the plan -> spec overrides).
FORCED_PATHOLOGY = {
    1: {"consolidation": 1.0},
    3: {"effusion": 1.0},
    5: {"collapse": 1.0},
    7: {"consolidation": 1.0, "effusion": 1.0},
    10: {"effusion": 1.0},
}
#: Seeds of the held-out phantoms start here (training phantoms use seeds < 10_000 via
#: ``data.phantom_seed``; the bundled samples use their own small seeds).
SEED_BASE = 910_000
#: Slices thinner than this are thickened for the long coverages, to keep the run short.
MIN_LONG_SLICE_MM = 1.25


def held_out_specs(n: int) -> list[Any]:
    """The ``n`` held-out phantom specs (deterministic)."""
    from segpipe.synthetic import sample_spec

    specs = []
    for i in range(n):
        coverage = COVERAGE_PLAN[i % len(COVERAGE_PLAN)]
        spec = sample_spec(SEED_BASE + i, coverage=coverage, **FORCED_PATHOLOGY.get(i, {}))
        if coverage in ("neck_pelvis", "chest_abdomen") and spec.slice_mm < MIN_LONG_SLICE_MM:
            spec = spec.replace(slice_mm=MIN_LONG_SLICE_MM)
        specs.append(spec)
    return specs


def _round(m: dict[str, float]) -> dict[str, float | None]:
    return {k: (None if (isinstance(v, float) and math.isnan(v)) else round(float(v), 4)) for k, v in m.items()}


def _score(pred: Any, ref: Any, name: str) -> dict[str, dict[str, float | None]]:
    from segpipe.metrics import lung_metrics

    return {side: _round(m) for side, m in lung_metrics(pred, ref, name).items()}


def _fmt(m: dict[str, Any]) -> str:
    d, h = m.get("dice"), m.get("hd95_mm")
    return f"{d:.3f}/{h:5.1f}" if d is not None and h is not None else (f"{d:.3f}/  -  " if d is not None else "  -  ")


def evaluate_phantoms(seg: Any, n: int, qc_dir: Path | None) -> list[dict[str, Any]]:
    from segpipe.baseline import segment_lungs_classical
    from segpipe.synthetic import make_phantom

    rows = []
    for i, spec in enumerate(held_out_specs(n)):
        t0 = time.perf_counter()
        ph = make_phantom(spec)
        t_gen = time.perf_counter() - t0
        t0 = time.perf_counter()
        result = seg.predict_with_report(ph.image)
        t_model = time.perf_counter() - t0
        t0 = time.perf_counter()
        base = segment_lungs_classical(ph.image)
        t_base = time.perf_counter() - t0
        pathology = [k for k in ("nodules", "consolidation", "ground_glass", "emphysema", "effusion", "collapse") if k in ph.info]
        row = {
            "case": f"phantom_{spec.seed}",
            "coverage": spec.coverage,
            "pathology": pathology,
            "size_xyz": list(ph.image.GetSize()),
            "spacing_xyz_mm": [round(s, 3) for s in ph.image.GetSpacing()],
            "orientation": spec.orientation,
            "ref_has": {side: bool((sitk.GetArrayViewFromImage(ph.label) == v).any())
                        for side, v in (("right", 1), ("left", 2))},
            "model": _score(result.label, ph.label, f"phantom {spec.seed}"),
            "baseline": _score(base, ph.label, f"phantom {spec.seed}"),
            "warnings": result.report["warnings"],
            "seconds": {"generate": round(t_gen, 1), "model": round(t_model, 1), "baseline": round(t_base, 1)},
        }
        rows.append(row)
        print(
            f"{i + 1:2d}/{n} {row['case']:>15} {spec.coverage:13} {','.join(pathology) or '-':28} "
            f"model R {_fmt(row['model']['right'])} L {_fmt(row['model']['left'])}  "
            f"baseline R {_fmt(row['baseline']['right'])} L {_fmt(row['baseline']['left'])}  "
            f"({t_model:.1f} s)",
            flush=True,
        )
        if qc_dir is not None and (pathology and any(p in pathology for p in ("consolidation", "effusion", "collapse"))):
            from segpipe.report import qc_picture

            qc_picture(ph.image, result.label, qc_dir / f"eval_{row['case']}.png", title=f"held-out {row['case']} ({', '.join(pathology)})")
    return rows


def evaluate_real(seg: Any, qc_dir: Path | None) -> list[dict[str, Any]]:
    from segpipe import io
    from segpipe.baseline import segment_lungs_classical
    from segpipe.report import qc_picture

    rows = []
    copd = SHARED / "copdgene-10002K-64"
    if (copd / "ct.nii.gz").is_file():
        img, ref = io.read_image(copd / "ct.nii.gz"), io.read_image(copd / "lungs.nii.gz")
        t0 = time.perf_counter()
        result = seg.predict_with_report(img)
        row = {
            "case": "copdgene-10002K-64",
            "model": _score(result.label, ref, "copdgene"),
            "baseline": _score(segment_lungs_classical(img), ref, "copdgene"),
            "seconds": round(time.perf_counter() - t0, 1),
        }
        rows.append(row)
        print(f"COPDGene: model R {_fmt(row['model']['right'])} L {_fmt(row['model']['left'])}  "
              f"baseline R {_fmt(row['baseline']['right'])} L {_fmt(row['baseline']['left'])}", flush=True)
        if qc_dir is not None:
            qc_picture(img, result.label, qc_dir / "qc_copdgene.png", title="COPDGene 10002K: segpipe default model")
    lidc = SHARED / "lidc-idri-0001" / "dicom"
    if lidc.is_dir():
        img = io.read_image(lidc)
        t0 = time.perf_counter()
        result = seg.predict_with_report(img)
        row = {"case": "lidc-idri-0001", "volumes_ml": result.report["volumes_ml"], "warnings": result.report["warnings"],
               "seconds": round(time.perf_counter() - t0, 1)}
        rows.append(row)
        print(f"LIDC-IDRI-0001: volumes {row['volumes_ml']} warnings {row['warnings']}", flush=True)
        if qc_dir is not None:
            qc_picture(img, result.label, qc_dir / "qc_lidc.png", title="LIDC-IDRI-0001: segpipe default model")
    return rows


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean / median / worst per method and lung over the cases whose reference has that lung."""
    out: dict[str, Any] = {}
    for method in ("model", "baseline"):
        out[method] = {}
        for side in ("right", "left"):
            have = [r for r in rows if r["ref_has"][side]]
            dice = [r[method][side]["dice"] for r in have]
            hd = [r[method][side]["hd95_mm"] for r in have]
            hd_ok = [h for h in hd if h is not None]
            out[method][side] = {
                "cases": len(have),
                "dice_mean": round(float(np.mean(dice)), 4) if dice else None,
                "dice_median": round(float(np.median(dice)), 4) if dice else None,
                "dice_worst": round(float(np.min(dice)), 4) if dice else None,
                "hd95_mean_mm": round(float(np.mean(hd_ok)), 2) if hd_ok else None,
                "hd95_worst_mm": (None if len(hd_ok) < len(hd) else round(float(np.max(hd_ok)), 2)) if hd_ok else None,
                "missed": len(hd) - len(hd_ok),
            }
    empty = [r for r in rows if not any(r["ref_has"].values())]
    out["no_lung_cases"] = len(empty)
    out["no_lung_false_ml"] = [round(sum(r["model"][s]["volume_ml"] for s in ("right", "left")), 1) for r in empty]
    patho = [r for r in rows if set(r["pathology"]) & {"consolidation", "effusion", "collapse"}]
    out["pathology"] = {
        method: round(float(np.mean([r[method][s]["dice"] for r in patho for s in ("right", "left") if r["ref_has"][s]])), 4)
        if patho else None
        for method in ("model", "baseline")
    }
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", type=Path, default=None, help="model file (default: the bundled default model)")
    p.add_argument("--n", type=int, default=20, help="held-out phantoms (default 20)")
    p.add_argument("--json", type=Path, default=None, help="write all results here")
    p.add_argument("--qc-dir", type=Path, default=None, help="write QC pictures (real scans, pathology phantoms) here")
    p.add_argument("--no-real", action="store_true", help="skip the real scans in ../shared/data")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    args = p.parse_args(argv)

    import torch

    import segpipe
    from segpipe.infer import LungSegmenter

    if args.threads:
        torch.set_num_threads(args.threads)
    seg = LungSegmenter.from_file(args.model, device="cpu") if args.model else LungSegmenter.default(device="cpu")
    if args.qc_dir:
        args.qc_dir.mkdir(parents=True, exist_ok=True)
    print(f"segpipe {segpipe.__version__}, torch {torch.__version__}, {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} CPUs, {time.strftime('%Y-%m-%d %H:%M')}", flush=True)
    t0 = time.perf_counter()
    rows = evaluate_phantoms(seg, args.n, args.qc_dir)
    real = [] if args.no_real else evaluate_real(seg, args.qc_dir)
    summary = summarise(rows)
    print(json.dumps(summary, indent=1))
    if args.json:
        result = {"model": str(args.model or "default"), "date": time.strftime("%Y-%m-%d"), "phantoms": rows,
                  "real": real, "summary": summary, "seconds": round(time.perf_counter() - t0, 1)}
        tmp = args.json.with_name(args.json.name + ".tmp")
        tmp.write_text(json.dumps(result, indent=1))
        tmp.replace(args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
