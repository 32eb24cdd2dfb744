"""Where the lung of a base in a lung-end slab is lost: family B chest scans (``benchmarks/family_b.py``)
cut as the lowest CM cm of lung with 15 cm below (``experiments/2026-11-28-coarse-lung-end/slabs.py``).

Per lung of 5 mL or more in the slab, the reference lung that the final mask misses, split by where it
went: ``outside`` every fine region; ``fine_no`` inside a region but not lung in the mask that the
``components`` rule gets (the fine network or the fine-grid and earlier scan-grid rules left it out);
``dropped`` in a piece that ``components`` dropped; ``other`` labelled the other side; ``later`` taken out
after ``components`` (rule ``gas``). ``--widen MM`` grows every coarse box in x and y by MM before the
fine stage (a probe: the fine regions then cover the base's whole footprint).

    python experiments/2026-11-29-base-loss/where.py CM FIRST END rows.json [--widen MM] [--model FILE]
"""

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import SimpleITK as sitk

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "benchmarks"), str(ROOT / "experiments" / "2026-11-28-coarse-lung-end")]
import family_b  # noqa: E402
from slabs import end_slab  # noqa: E402

from segpipe import LungSegmenter, spatial  # noqa: E402
from segpipe.refine import rules  # noqa: E402

KEYS = ("missed", "outside", "fine_no", "dropped", "other", "later")


def spy_components(got: dict) -> None:
    """Keep the mask that rule ``components`` gets and gives (scan grid, its region's offset)."""
    for st in rules.STEPS:
        if st.name == "components":
            orig = st.run

            def run(mask, ctx, params, orig=orig):
                got["in"] = (mask.copy(), ctx.offset_xyz)
                out = orig(mask, ctx, params)
                got["out"] = out[0].copy()
                return out

            object.__setattr__(st, "run", run)


def widen_boxes(mm: float) -> None:
    """Grow the coarse stage's boxes (the margin of 12 mm + a coarse voxel) by ``mm`` in x and y."""
    orig = spatial.Box.expand

    def expand(self, m):
        if isinstance(m, (int, float)) and 10 < m < 20:
            return orig(self, (m + mm, m + mm, m))
        return orig(self, m)

    spatial.Box.expand = expand


def base_slab(seed: int, cm: float) -> tuple[sitk.Image, np.ndarray]:
    """Family B chest case ``seed`` (canonical) cut as the lowest ``cm`` cm of lung with 15 cm
    below, and its reference labels cut alike."""
    image, label, _ = family_b.make_case(seed, "chest")
    can = spatial.to_canonical(image)[0]
    la = sitk.GetArrayFromImage(spatial.to_canonical(label)[0])
    lo, hi = end_slab(np.nonzero(la.any(axis=(1, 2)))[0], can.GetSpacing()[2], la.shape[0], "bases", cm, 15)
    return can[:, :, lo:hi], la[lo:hi]


def region_mask(img: sitk.Image, regions: dict, shape: tuple[int, ...]) -> np.ndarray:
    """The scan's voxels that overlap a fine region (``spatial.box_index_range``)."""
    out = np.zeros(shape, bool)
    for reg in regions.values():
        lo, hi = spatial.box_index_range(img, spatial.Box(tuple(reg["lo_xyz_mm"]), tuple(reg["hi_xyz_mm"])))
        lo = np.maximum(lo, 0)
        out[lo[2]:hi[2], lo[1]:hi[1], lo[0]:hi[0]] = True
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("cm", type=float)
    ap.add_argument("first", type=int)
    ap.add_argument("end", type=int)
    ap.add_argument("json")
    ap.add_argument("--widen", type=float, default=0.0)
    ap.add_argument("--model", help="model file (default: the bundled model)")
    args = ap.parse_args()
    got: dict = {}
    spy_components(got)
    if args.widen:
        widen_boxes(args.widen)
    seg = LungSegmenter.from_file(args.model) if args.model else LungSegmenter.default()
    rows = []
    for seed in range(args.first, args.end):
        got.clear()
        img, r = base_slab(seed, args.cm)
        res = seg.predict_with_report(img)
        p = sitk.GetArrayFromImage(res.label)
        vml = float(np.prod(img.GetSpacing())) / 1000
        inreg = region_mask(img, res.report["fine_regions"], r.shape)
        cin, cout = np.zeros(r.shape, np.uint8), np.zeros(r.shape, np.uint8)
        if "in" in got:
            a, (ox, oy, oz) = got["in"]
            cin[oz:oz + a.shape[0], oy:oy + a.shape[1], ox:ox + a.shape[2]] = a
            cout[oz:oz + a.shape[0], oy:oy + a.shape[1], ox:ox + a.shape[2]] = got["out"]
        for v in (1, 2):
            ref = r == v
            if ref.sum() * vml < 5:
                continue
            miss = ref & (p != v)
            parts = {"missed": miss, "outside": miss & ~inreg, "fine_no": miss & inreg & (cin == 0),
                     "dropped": miss & (cin == v) & (cout == 0), "other": miss & (p == 3 - v), "later": miss & (cout == v) & (p == 0)}
            row = {"seed": seed, "side": "RL"[v - 1], "ref": round(ref.sum() * vml, 1),
                   "dice": round(float(2 * ((p == v) & ref).sum() / max((p == v).sum() + ref.sum(), 1)), 3),
                   **{k: round(float(m.sum() * vml), 1) for k, m in parts.items()},
                   "non_lung": round(float(((p > 0) & (r == 0)).sum() * vml), 1)}
            rows.append(row)
            print(json.dumps(row), flush=True)
    Path(args.json).write_text(json.dumps(rows, indent=1))
    for side in "RL":
        rr = [x for x in rows if x["side"] == side]
        if rr:
            print(side, len(rr), "mean Dice", round(float(np.mean([x["dice"] for x in rr])), 3),
                  {k: round(sum(x[k] for x in rr), 1) for k in KEYS}, "non-lung", round(sum(x["non_lung"] for x in rr), 1))


if __name__ == "__main__":
    main()
