"""Rule ablation: every switchable clean-up rule off against all rules on, side by side.

Data sets: (a) the real scans in ../shared/data (COPDGene against its reference labels;
LIDC-IDRI-0001 and the abdomen slab have none: the table gives the mL each rule changes, and
for the abdomen slab the lung found, which should be none); (b) the field-of-view crops of
``fov_consistency.py`` (scored against the whole scan's mask, over the lungs with at least
``fov_consistency.MIN_REF_ML`` (5 mL) in the crop, as that benchmark does: the tip of a lung that a
crop's edge cuts to a few voxels is not scored); (c) held-out phantoms of
``eval_model.py``; (d) the independent phantom family ``family_b.py`` (test-only anatomy).
For each data set and rule: mean Dice per lung with the default rules and with that rule
switched from its default (off where it is on, on where it is off), the largest gain of one
lung from switching it, the lung volume the rule added and removed where it ran (mL,
summed), and where a reference exists, the tissue that is not lung the rule added (mL, the
largest per case and the sum: the mask with the rule less the mask without it, outside the
reference) and the lung it removed.

Usage::

    python benchmarks/rule_ablation.py [--held-out 10] [--family-b 16] [--rules R ...] [--json out.json] [--model F]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import SimpleITK as sitk

from segpipe.metrics import dice

sys.path.insert(0, str(Path(__file__).resolve().parent))

def _switchable() -> tuple[str, ...]:
    """The switchable steps of :data:`segpipe.refine.rules.STEPS`, in order."""
    from segpipe.refine.rules import STEPS

    return tuple(s.name for s in STEPS if s.switchable)


def _cases(args: argparse.Namespace) -> dict[str, list[tuple[str, sitk.Image, sitk.Image | None]]]:
    import fov_consistency

    from segpipe import io, spatial
    from segpipe.synthetic import make_phantom

    shared = fov_consistency.SHARED
    sets: dict[str, list[tuple[str, sitk.Image, sitk.Image | None]]] = {"real": [], "fov": [], "held_out": [], "family_b": []}
    if (shared / "copdgene-10002K-64").is_dir():
        sets["real"].append(("COPDGene", io.read_image(shared / "copdgene-10002K-64/ct.nii.gz"),
                             io.read_image(shared / "copdgene-10002K-64/lungs.nii.gz")))
    for name, sub in (("LIDC-IDRI-0001", "lidc-idri-0001/dicom"), ("abdomen-slab", "abdomen-slab-dicom")):
        if (shared / sub).is_dir():
            sets["real"].append((name, io.read_image(shared / sub), None))
    # field-of-view crops: of the real chest scans, against the whole scan's mask (all rules on)
    from segpipe import LungSegmenter

    seg = LungSegmenter.from_file(args.model) if args.model else LungSegmenter.default()
    for name, image, ref in fov_consistency.cases(0, 0):
        canonical, _ = spatial.to_canonical(image)
        ref_c = spatial.to_canonical(ref if ref is not None else seg.predict(canonical))[0]
        ref_a = sitk.GetArrayFromImage(ref_c)
        for crop in fov_consistency.CROPS:  # the crops of fov_consistency.py, circles and padding included
            img, r = fov_consistency.crop_of(canonical, ref_a, crop)
            sets["fov"].append((f"{name}:{crop}", img, spatial.copy_geometry(r, img)))
    if args.held_out:
        from eval_model import held_out_specs

        for spec in held_out_specs(args.held_out):
            ph = make_phantom(spec)
            sets["held_out"].append((f"phantom_{spec.seed}", ph.image, ph.label))
    if args.family_b:
        import family_b

        kinds = family_b.CASES
        for i in range(args.family_b):
            image, label, _ = family_b.make_case(5000 + i, kinds[i % len(kinds)])
            sets["family_b"].append((f"b{5000 + i}:{kinds[i % len(kinds)]}", image, label))
    return sets


def run(args: argparse.Namespace) -> dict[str, Any]:
    import fov_consistency

    from segpipe import LungSegmenter

    load = (lambda **kw: LungSegmenter.from_file(args.model, **kw)) if args.model else LungSegmenter.default
    default = load().rules
    switched = tuple(args.rules or _switchable())
    # each rule switched from its default: off where it is on, on where it is off
    segs = {"all": load()} | {rule: load(rules={rule: not default.enabled(rule)}) for rule in switched}
    results: dict[str, Any] = {"defaults": {rule: default.enabled(rule) for rule in switched}}
    for set_name, cases in _cases(args).items():
        rows = []
        min_ml = fov_consistency.MIN_REF_ML if set_name == "fov" else 0.0  # lungs scored (mL in the reference)
        for name, image, ref in cases:
            t = time.perf_counter()
            row: dict[str, Any] = {"case": name}
            ref_a = None if ref is None else sitk.GetArrayFromImage(ref)
            voxel_ml = float(np.prod(image.GetSpacing())) / 1000.0
            lungs: dict[str, np.ndarray] = {}
            for key, seg in segs.items():
                result = seg.predict_with_report(image)
                pred = sitk.GetArrayFromImage(result.label)
                lungs[key] = pred > 0
                entry: dict[str, Any] = {"lung_ml": round(sum(result.report["volumes_ml"].values()), 1),
                                         "rules": {k: (v["added_ml"], v["removed_ml"]) for k, v in result.report["rules"].items()}}
                if ref_a is not None:
                    refs = [(pred == v, ref_a == v) for v in (1, 2)]
                    entry["dice"] = [round(dice(p, r), 4) for p, r in refs if r.any() and r.sum() * voxel_ml >= min_ml]
                row[key] = entry
            if ref_a is not None:  # what each rule itself changed, against the reference
                for rule in switched:
                    with_rule, without = (lungs["all"], lungs[rule]) if default.enabled(rule) else (lungs[rule], lungs["all"])
                    row[rule]["non_lung_added_ml"] = round(float(np.count_nonzero(with_rule & ~without & (ref_a == 0))) * voxel_ml, 1)
                    row[rule]["lung_removed_ml"] = round(float(np.count_nonzero(without & ~with_rule & (ref_a > 0))) * voxel_ml, 1)
            del lungs
            rows.append(row)
            print(f"{set_name:<9} {name:<34} all {row['all'].get('dice', row['all']['lung_ml'])}  "
                  f"({time.perf_counter() - t:.0f} s)", flush=True)
        results[set_name] = {"rows": rows, "table": _table(rows, results["defaults"])}
    return results


def _table(rows: list[dict[str, Any]], defaults: dict[str, bool]) -> dict[str, Any]:
    """Per rule: mean Dice with all the default rules / with this rule switched (where
    references exist), the largest gain of one lung from switching it, the mL the rule
    added and removed where it ran (summed over the cases) and, against the references, the
    non-lung it added (the largest per case and the sum) and the lung it removed (sum)."""
    out = {}
    for rule, is_on in defaults.items():
        on = [d for r in rows for d in r["all"].get("dice", [])]
        off = [d for r in rows for d in r[rule].get("dice", [])]
        ran = "all" if is_on else rule  # the run in which the rule was on
        added = sum(r[ran]["rules"][rule][0] for r in rows)
        removed = sum(r[ran]["rules"][rule][1] for r in rows)
        gain = max((b - a for r in rows for a, b in zip(r["all"].get("dice", []), r[rule].get("dice", []))), default=0.0)
        out[rule] = {"default": "on" if is_on else "off",
                     "dice_default": round(float(np.mean(on)), 4) if on else None,
                     "dice_switched": round(float(np.mean(off)), 4) if off else None,
                     "largest_gain_switched": round(max(0.0, gain), 4), "added_ml": round(added, 1), "removed_ml": round(removed, 1)}
        scored = [r[rule] for r in rows if "non_lung_added_ml" in r[rule]]
        if scored:
            out[rule] |= {"non_lung_added_ml_max": max(e["non_lung_added_ml"] for e in scored),
                          "non_lung_added_ml": round(sum(e["non_lung_added_ml"] for e in scored), 1),
                          "lung_removed_ml": round(sum(e["lung_removed_ml"] for e in scored), 1)}
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--held-out", type=int, default=10, help="held-out phantoms (default 10)")
    p.add_argument("--family-b", type=int, default=16, help="family-B cases (default 16)")
    p.add_argument("--rules", nargs="+", choices=_switchable(), metavar="RULE",
                   help=f"the rules to switch, one at a time (default all: {', '.join(_switchable())})")
    p.add_argument("--model", help="model file (default: the bundled model)")
    p.add_argument("--json", help="write everything here")
    args = p.parse_args()
    results = run(args)
    for set_name, r in results.items():
        if set_name == "defaults":
            continue
        print(f"\n{set_name}  (Dice: mean per lung with the default rules / with the rule switched from its default)")
        print(f"{'rule':<14} {'default':>7} {'Dice':>8} {'switched':>8} {'best gain':>9} {'added mL':>9} {'removed mL':>10} "
              f"{'non-lung added mL (max/case)':>28} {'lung removed mL':>15}")
        for rule, t in r["table"].items():
            fmt = lambda v: "-" if v is None else f"{v:.4f}"  # noqa: E731
            wrong = f"{t['non_lung_added_ml']:.1f} ({t['non_lung_added_ml_max']:.1f})" if "non_lung_added_ml" in t else "-"
            print(f"{rule:<14} {t['default']:>7} {fmt(t['dice_default']):>8} {fmt(t['dice_switched']):>8} "
                  f"{t['largest_gain_switched']:>9.4f} {t['added_ml']:>9.1f} {t['removed_ml']:>10.1f} {wrong:>28} "
                  f"{t.get('lung_removed_ml', '-'):>15}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
