"""Family B cases with denser lungs (`denser_lungs` by SHIFT HU on their own labels), scored with
`edge_snap.follow_lung` on (default) and off, side by side:

    python experiments/2026-12-07-dense-lungs/family_b_denser.py SEED_BASE N SHIFT [--kinds chest ...]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import SimpleITK as sitk

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import family_b  # noqa: E402

from segpipe import LungSegmenter  # noqa: E402
from segpipe.metrics import dice  # noqa: E402
from segpipe.train.patches import denser_lungs  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("seed_base", type=int)
    ap.add_argument("n", type=int)
    ap.add_argument("shift", type=float)
    ap.add_argument("--kinds", nargs="+", default=["chest", "chest_abdomen", "cardiac", "fov_cut"])
    args = ap.parse_args()
    segs = {"follow": LungSegmenter.default(), "fixed": LungSegmenter.default(rules={"edge_snap": {"follow_lung": False}})}
    scores: dict[str, list[float]] = {k: [] for k in segs}
    non_lung: dict[str, list[float]] = {k: [] for k in segs}
    for i in range(args.n):
        kind = args.kinds[i % len(args.kinds)]
        image, label, _ = family_b.make_case(args.seed_base + i, kind)
        ref = sitk.GetArrayFromImage(label)
        denser = sitk.GetImageFromArray(denser_lungs(sitk.GetArrayFromImage(image).astype(np.float32), ref, args.shift))
        denser.CopyInformation(image)
        ml = float(np.prod(image.GetSpacing())) / 1000.0
        line = f"b{args.seed_base + i} {kind:<14} lung median {np.median(sitk.GetArrayViewFromImage(denser)[ref > 0]):.0f} HU"
        for name, seg in segs.items():
            pred = sitk.GetArrayFromImage(seg.predict(denser))
            d = [round(dice(pred == v, ref == v), 4) for v in (1, 2) if (ref == v).sum() * ml >= 5.0]
            scores[name] += d
            non_lung[name].append(float(((pred > 0) & (ref == 0)).sum()) * ml)
            line += f"  {name}: {d} +{non_lung[name][-1]:.1f} mL"
        print(line, flush=True)
    for name in segs:
        print(f"{name}: mean {np.mean(scores[name]):.4f}, worst {np.min(scores[name]):.4f} over {len(scores[name])} lungs >= 5 mL; "
              f"non-lung {np.sum(non_lung[name]):.0f} mL (max {np.max(non_lung[name]):.1f})")


if __name__ == "__main__":
    main()
