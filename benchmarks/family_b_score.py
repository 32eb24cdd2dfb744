"""Score models side by side on phantom family B (``family_b.py``: test-only anatomy, never tuned on).

The cases are those of ``rule_ablation.py`` (seed 5000 + i, the kinds in turn; ``--seed-base`` for others:
5000-5015 have been looked at while developing, so a clean test takes seeds never used, e.g. 6000). Per case and model: Dice and HD95 per
lung (where the reference has it; HD95 averaged over the found lungs of at least 5 mL), the lung label found outside the reference lungs and, of it, behind the
mattress's top (on the CT table: the case's ``mattress_top_y_mm``) (mL); then the mean
and worst Dice per model and per kind, the lungs lost, and the mean over lungs of at least 5 mL (the tip of
a recess that the top of an abdominal scan cuts can hold a fraction of a mL).

Usage::

    python benchmarks/family_b_score.py [--n 16] [--seed-base 5000] [--models default runs/x/model.pt] [--json out.json]
    python benchmarks/family_b_score.py --n 32 --seed-base 14000 --kinds abdomen_bases no_lungs   # abdominal scans only
    python benchmarks/family_b_score.py --models default default:dense_lung,dense_to_wall   # rules switched

A model given as ``MODEL:RULE,RULE`` runs with those rules switched from their defaults (on where they
are off, off where they are on); ``MODEL:RULE.PARAM=VALUE`` sets one parameter (e.g.
``default:sides.scanner_centre=false``). ``--shift-x MM`` moves every case along physical x: a frame
whose x = 0 is not the scanner's centre (phantoms' frames are arbitrary; family B's body lies within
10 mm of x = 0).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import SimpleITK as sitk

from segpipe.metrics import dice

sys.path.insert(0, str(Path(__file__).resolve().parent))


def _table_ml(outside: sitk.Image, mattress_top_y_mm: float) -> float:
    """mL of the ``outside`` mask (uint8, on the case's grid) at or behind ``mattress_top_y_mm``
    (physical LPS y: the mattress's top lies a few mm inside the back's skin, the lungs further in)."""
    lps = sitk.DICOMOrient(outside, "LPS")
    y = lps.GetOrigin()[1] + lps.GetSpacing()[1] * np.arange(lps.GetSize()[1])
    arr = sitk.GetArrayViewFromImage(lps)
    return float(arr[:, y >= mattress_top_y_mm, :].sum()) * float(np.prod(lps.GetSpacing())) / 1000.0


def _segmenter(spec: str) -> Any:
    """The segmenter for ``MODEL`` or ``MODEL:RULE,RULE.PARAM=VALUE`` (a ``RULE`` switched from its
    default, a ``RULE.PARAM`` set to the YAML ``VALUE``)."""
    import yaml

    from segpipe import LungSegmenter

    model, _, changes = spec.partition(":")
    load = LungSegmenter.default if model == "default" else (lambda **kw: LungSegmenter.from_file(model, **kw))
    if not changes:
        return load()
    defaults = load().rules
    rules: dict[str, Any] = {}
    for item in changes.split(","):
        name, _, value = item.partition("=")
        rule, _, param = name.partition(".")
        if param:
            rules.setdefault(rule, {})[param] = yaml.safe_load(value)
        else:
            rules[rule] = not defaults.enabled(rule)
    return load(rules=rules)


def _shifted(image: sitk.Image, shift_x_mm: float) -> sitk.Image:
    """``image`` with its origin moved ``shift_x_mm`` along physical x (a frame whose x = 0 is not the scanner's centre)."""
    if shift_x_mm:
        origin = list(image.GetOrigin())
        origin[0] += shift_x_mm
        image.SetOrigin(origin)
    return image


def main() -> int:
    import family_b

    from segpipe.metrics import lung_metrics

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=16, help="cases (default 16: each kind twice)")
    ap.add_argument("--seed-base", type=int, default=5000, help="first seed (default 5000: the ablation's cases)")
    ap.add_argument("--models", nargs="+", default=["default"],
                    help="model files ('default': the bundled model); MODEL:RULE,RULE switches those rules from their defaults")
    ap.add_argument("--kinds", nargs="+", choices=family_b.CASES, default=list(family_b.CASES),
                    help="kinds to cycle through (default: all; e.g. abdomen_bases no_lungs for a set of abdominal scans)")
    ap.add_argument("--shift-x", type=float, default=0.0, metavar="MM",
                    help="move every case's origin this far along physical x (the patient off the frame's x = 0)")
    ap.add_argument("--json", help="write the rows and summary here")
    args = ap.parse_args()
    segs = {m: _segmenter(m) for m in args.models}
    rows: list[dict[str, Any]] = []
    for i in range(args.n):
        kind = args.kinds[i % len(args.kinds)]
        image, label, info = family_b.make_case(args.seed_base + i, kind)
        image, label = _shifted(image, args.shift_x), _shifted(label, args.shift_x)
        ref = sitk.GetArrayFromImage(label)
        ml = float(np.prod(image.GetSpacing())) / 1000.0
        row: dict[str, Any] = {"case": f"b{args.seed_base + i}", "kind": kind, "pathology": info["pathology"],
                               "ref_ml": [round(float((ref == v).sum()) * ml, 1) for v in (1, 2)]}
        for name, seg in segs.items():
            result = seg.predict_with_report(image)
            pred_image = result.label
            hd95 = {side: m["hd95_mm"] for side, m in lung_metrics(pred_image, label).items()}
            pred = sitk.GetArrayFromImage(pred_image)
            outside = ((pred > 0) & (ref == 0)).astype(np.uint8)
            table = sitk.GetImageFromArray(outside)
            table.CopyInformation(image)
            row[name] = {"dice": [round(dice(pred == v, ref == v), 4) if (ref == v).any() else None for v in (1, 2)],
                         "hd95_mm": [round(float(hd95[side]), 1) if (ref == v).any() else None for side, v in (("right", 1), ("left", 2))],
                         "non_lung_ml": round(float(outside.sum()) * ml, 1),
                         "table_ml": round(_table_ml(table, info["mattress_top_y_mm"]), 1),
                         "warnings": result.report["warnings"]}
        rows.append(row)
        print(f"{row['case']} {kind:<14} " + "  ".join(f"{n}: {row[n]['dice']} +{row[n]['non_lung_ml']} mL (table {row[n]['table_ml']})"
                                                    for n in segs), flush=True)
    summary: dict[str, Any] = {}
    for name in segs:
        d = [x for r in rows for x in r[name]["dice"] if x is not None]
        per_kind = {k: round(float(np.mean([x for r in rows if r["kind"] == k for x in r[name]["dice"] if x is not None] or [np.nan])), 4)
                    for k in args.kinds}
        d5 = [x for r in rows for x, v in zip(r[name]["dice"], r["ref_ml"]) if x is not None and v >= 5.0]
        h5 = [x for r in rows for x, v in zip(r[name]["hd95_mm"], r["ref_ml"]) if x is not None and v >= 5.0 and np.isfinite(x)]
        summary[name] = {"mean_dice": round(float(np.mean(d)), 4), "worst_dice": round(float(np.min(d)), 4),
                         "lungs": len(d), "lost": sum(x == 0.0 for x in d),
                         "mean_dice_5ml": round(float(np.mean(d5)), 4) if d5 else None,
                         "lungs_5ml": len(d5), "lost_5ml": sum(x == 0.0 for x in d5),
                         "mean_hd95_mm_5ml": round(float(np.mean(h5)), 1) if h5 else None,
                         "worst_hd95_mm_5ml": round(float(np.max(h5)), 1) if h5 else None,
                         "max_non_lung_ml": max(r[name]["non_lung_ml"] for r in rows),
                         "max_table_ml": max(r[name]["table_ml"] for r in rows), "per_kind": per_kind}
    print(json.dumps(summary, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, "summary": summary}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
