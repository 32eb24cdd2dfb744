"""Abdominal scans that cut the lowest lung: are the bases found, and is no bowel gas or table taken for lung?

Phantoms of ``segpipe.synthetic`` with ``coverage="abdomen_bases"`` (the scan's top edge anywhere from just
above the costophrenic recesses to the right dome) and the detailed abdomen (haustra, stool with gas,
small-bowel loops, flat or curved tables), at 512 x 512 with 1, 2, 3 or 5 mm slices. Per case: Dice per lung
(lungs of at least 1 mL; the summary also over lungs of at least 20 mL), the reference and found volumes, and the lung label found in bowel gas, bowel and
the table (mL, from the phantom's tissue map).

Seed ranges: 72000-72099 were used while developing (development data); 73000 onwards are held out.

Usage::

    python benchmarks/abdomen_bench.py [--seeds 73000 73012] [--model F] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import numpy as np
import SimpleITK as sitk

from segpipe.metrics import dice

SLICES_MM = (1.0, 2.0, 3.0, 5.0)


def case(seed: int) -> Any:
    """The phantom of ``seed`` (with its tissue map)."""
    from segpipe.synthetic import make_phantom, sample_spec

    spec = sample_spec(seed, coverage="abdomen_bases", abdomen_detail=1.0)
    spec = spec.replace(slice_mm=SLICES_MM[seed % len(SLICES_MM)])
    return make_phantom(spec, tissue_map=True)


def score(pred: np.ndarray, ph: Any) -> dict[str, Any]:
    """Dice per lung, volumes and the lung label found in gut and table (mL)."""
    from segpipe.synthetic import TISSUES

    ref = sitk.GetArrayViewFromImage(ph.label)
    tissue = sitk.GetArrayViewFromImage(ph.tissue)
    ml = float(np.prod(ph.image.GetSpacing())) / 1000.0
    row: dict[str, Any] = {}
    for side, v in (("right", 1), ("left", 2)):
        r, p = ref == v, pred == v
        row[side] = {"ref_ml": round(float(r.sum()) * ml, 1), "found_ml": round(float(p.sum()) * ml, 1),
                     "dice": round(dice(p, r), 4) if r.sum() * ml >= 1.0 else None}
    wrong = (pred > 0) & (ref == 0)
    row["non_lung_ml"] = round(float(wrong.sum()) * ml, 1)
    for name in ("bowel_gas", "bowel", "table"):
        row[f"in_{name}_ml"] = round(float((wrong & (tissue == TISSUES[name])).sum()) * ml, 1)
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, nargs=2, default=(73000, 73012), metavar=("FIRST", "END"), help="seed range (held out: 73000 on)")
    ap.add_argument("--model", help="model file (default: the bundled model)")
    ap.add_argument("--json", help="write the rows here")
    args = ap.parse_args()
    from segpipe import LungSegmenter

    seg = LungSegmenter.from_file(args.model) if args.model else LungSegmenter.default()
    rows = []
    for seed in range(*args.seeds):
        ph = case(seed)
        t = time.perf_counter()
        result = seg.predict_with_report(ph.image)
        pred = sitk.GetArrayFromImage(result.label)
        row = {"seed": seed, "slice_mm": ph.image.GetSpacing()[2], **score(pred, ph), "seconds": round(time.perf_counter() - t, 1),
               "warnings": result.report["warnings"]}
        rows.append(row)
        print(f"{seed} slice {row['slice_mm']:.0f} mm  right {row['right']['dice']} ({row['right']['ref_ml']} mL)  "
              f"left {row['left']['dice']} ({row['left']['ref_ml']} mL)  non-lung {row['non_lung_ml']} mL "
              f"(gas {row['in_bowel_gas_ml']}, bowel {row['in_bowel_ml']}, table {row['in_table_ml']})", flush=True)
    summary: dict[str, Any] = {"max_non_lung_ml": max(r["non_lung_ml"] for r in rows)}
    for least in (1.0, 20.0):  # every lung of at least 1 mL; the bases of at least 20 mL
        per_lung = [r[s]["dice"] for r in rows for s in ("right", "left") if r[s]["dice"] is not None and r[s]["ref_ml"] >= least]
        summary[f"{least:g}ml"] = {"lungs": len(per_lung), "mean_dice": round(float(np.mean(per_lung)), 4) if per_lung else None,
                                   "worst_dice": round(float(np.min(per_lung)), 4) if per_lung else None,
                                   "lost": sum(d < 0.1 for d in per_lung)}
    print("summary", json.dumps(summary))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "summary": summary}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
