"""The coarse network's lung probability on the lung that a family B lung-end slab (the lowest
2.5 cm of lung with 15 cm below) misses outside every fine region, per lung of 5 mL or more.

    python experiments/2026-12-02-coarse-recess/coarse_prob.py FIRST END [--model FILE] [--json OUT]

``out_p``: the share of that lung above 0.05 / 0.1 / 0.2 / 0.3 / 0.5; ``found_p_in``: the share
of the whole reference lung above 0.5 (the coarse probability resampled to the scan).
"""

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import SimpleITK as sitk

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "benchmarks"), str(ROOT / "experiments" / "2026-11-28-coarse-lung-end"),
                str(ROOT / "experiments" / "2026-11-29-base-loss")]
from where import base_slab, region_mask  # noqa: E402

import segpipe.model as sm  # noqa: E402
from segpipe import LungSegmenter, spatial  # noqa: E402
from segpipe.infer import segmenter  # noqa: E402

GOT: dict = {}


def spy() -> None:
    """Keep the coarse network's any-lung probability and the coarse result of each run."""
    any_lung, locate = sm.any_lung, segmenter.locate

    def any_lung_spy(probs):
        GOT["p"] = (1 - probs[0]).numpy().copy()
        return any_lung(probs)

    def locate_spy(*a, **k):
        out = locate(*a, **k)
        GOT["res"] = out[0]
        return out

    sm.any_lung, segmenter.locate = any_lung_spy, locate_spy


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("first", type=int)
    ap.add_argument("end", type=int)
    ap.add_argument("--model")
    ap.add_argument("--json", default="coarse_prob.json")
    args = ap.parse_args()
    spy()
    seg = LungSegmenter.from_file(args.model) if args.model else LungSegmenter.default()
    rows = []
    for seed in range(args.first, args.end):
        GOT.clear()
        img, r = base_slab(seed, 2.5)
        res = seg.predict_with_report(img)
        p = sitk.GetArrayFromImage(res.label)
        vml = float(np.prod(img.GetSpacing())) / 1000
        inreg = region_mask(img, res.report["fine_regions"], r.shape)
        grid = GOT["res"].geometry
        prob = sitk.GetImageFromArray(GOT["p"].astype(np.float32))
        prob.SetSpacing(grid.GetSpacing())
        prob.SetOrigin(grid.GetOrigin())
        prob.SetDirection(grid.GetDirection())
        on_scan = sitk.GetArrayFromImage(spatial.resample_to_reference(prob, img))
        hu = sitk.GetArrayFromImage(img)
        for v in (1, 2):
            ref = r == v
            if ref.sum() * vml < 5:
                continue
            out = ref & (p != v) & ~inreg
            q = on_scan[out]
            row = {"seed": seed, "side": "RL"[v - 1], "ref": round(ref.sum() * vml, 1),
                   "dice": round(float(2 * ((p == v) & ref).sum() / max((p == v).sum() + ref.sum(), 1)), 3),
                   "outside": round(out.sum() * vml, 1),
                   "out_p": [round(float((q > t).mean()), 2) if q.size else None for t in (0.05, 0.1, 0.2, 0.3, 0.5)],
                   "out_hu": round(float(np.median(hu[out])), 0) if out.any() else None,
                   "found_p_in": round(float((on_scan[ref] > 0.5).mean()), 2)}
            rows.append(row)
            print(json.dumps(row), flush=True)
    Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
