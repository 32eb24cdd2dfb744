"""Where `dense_lung` (+ `dense_to_wall`) adds tissue outside family B's reference: per case and
variant, Dice per lung, the non-lung mL, and of it the part below the reference lung's floor in
its own column (the liver or spleen dome under a consolidated base) with its depth under that floor.

    python experiments/2026-12-07-dense-floor/probe.py 26548 chest 26032 chest ...
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import SimpleITK as sitk

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import family_b  # noqa: E402
from family_b_score import _segmenter  # noqa: E402

from segpipe.metrics import dice  # noqa: E402

VARIANTS = ("default", "default:dense_lung", "default:dense_lung,dense_to_wall")


def main(argv: list[str]) -> None:
    segs = {v: _segmenter(v) for v in VARIANTS}
    for seed, kind in zip(argv[::2], argv[1::2]):
        image, label, info = family_b.make_case(int(seed), kind)
        image, label = sitk.DICOMOrient(image, "LPS"), sitk.DICOMOrient(label, "LPS")
        ref = sitk.GetArrayFromImage(label)
        hu = sitk.GetArrayFromImage(image)
        ml = float(np.prod(image.GetSpacing())) / 1000.0
        sz = image.GetSpacing()[2]
        # LPS array z rises to the head (DICOMOrient LPS: k increases with S? S is +z in LPS -> superior)
        any_ref = ref > 0
        col_floor = np.where(any_ref.any(0), np.argmax(any_ref, axis=0), -1)  # lowest lung slice per column (z rises upward)
        print(f"b{seed} {kind} cons={info['pathology']['consolidation']} ref_ml={[(ref == v).sum() * ml for v in (1, 2)]}", flush=True)
        for name, seg in segs.items():
            pred = sitk.GetArrayFromImage(sitk.DICOMOrient(seg.predict_with_report(image).label, "LPS"))
            out = (pred > 0) & ~any_ref
            z = np.arange(out.shape[0])[:, None, None]
            below = out & (col_floor[None] >= 0) & (z < col_floor[None])
            depth = (col_floor[None] - z)[below] * sz
            print(f"  {name:<36} dice {[round(dice(pred == v, ref == v), 4) for v in (1, 2)]} non-lung {out.sum() * ml:.1f} mL, "
                  f"below the floor {below.sum() * ml:.1f} mL (depth median {np.median(depth) if depth.size else 0:.1f} mm, "
                  f"HU median {np.median(hu[below]) if below.any() else 0:.0f}; lobe HU median "
                  f"{np.median(hu[(ref > 0) & (hu > -300)]) if ((ref > 0) & (hu > -300)).any() else 0:.0f})", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
