"""Turned-patient benchmark: whole scans with the patient turned in the scanner, each segmented
and scored against its reference turned the same way.

A patient who lies turned about the body's long axis (in-plane, the z axis), or a gantry tilt
(about the x axis), moves the anatomy against the scan's axes; the sides must still come from the
anatomy. Each case is resampled about its centre (linear for the scan, the scan's lowest value
outside; nearest neighbour for the reference), so the scan's grid and geometry stay those of the
original. References as in ``fov_consistency.py``: LIDC-IDRI-0001 against the same model's mask
of the unturned scan, COPDGene against its reference, phantoms (`segpipe.synthetic` chest scans
from ``--seed-base``) against their own labels. Turn 0 is the unturned scan (the baseline row).
``swapped_ml`` is the lung found on the wrong side (a lung voxel of the reference labelled as the
other lung).

Usage::

    python benchmarks/turned_scans.py [--turns 0 15 -15 25 -25] [--tilts 12] [--phantoms 4] [--seed-base 950100] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import SimpleITK as sitk

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fov_consistency import cases  # noqa: E402


def turned(image: sitk.Image, degrees: float, axis: int = 2, label: bool = False) -> sitk.Image:
    """``image`` with its content turned by ``degrees`` about ``axis`` (0 x, 1 y, 2 z: physical
    axes) through the centre of its grid; the grid and geometry stay the same. A label map is
    resampled nearest-neighbour with 0 outside, a scan linearly with its lowest value outside."""
    centre = image.TransformContinuousIndexToPhysicalPoint([(s - 1) / 2 for s in image.GetSize()])
    transform = sitk.Euler3DTransform()
    transform.SetCenter(centre)
    angles = [0.0, 0.0, 0.0]
    angles[axis] = math.radians(degrees)
    transform.SetRotation(*angles)
    if label:
        return sitk.Resample(image, image, transform, sitk.sitkNearestNeighbor, 0, image.GetPixelID())
    outside = float(sitk.GetArrayViewFromImage(image).min())
    return sitk.Resample(image, image, transform, sitk.sitkLinear, outside, image.GetPixelID())


def score(pred: np.ndarray, ref: np.ndarray, voxel_ml: float) -> dict[str, Any]:
    """Dice per lung (1 right, 2 left) and the lung found on the wrong side (mL)."""
    dice = []
    for v in (1, 2):
        p, r = pred == v, ref == v
        total = int(p.sum() + r.sum())
        dice.append(round(2 * float((p & r).sum()) / total, 4) if total else None)
    swapped = int((((pred == 1) & (ref == 2)) | ((pred == 2) & (ref == 1))).sum())
    return {"dice": dice, "swapped_ml": round(swapped * voxel_ml, 1)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--turns", type=float, nargs="*", default=[0.0, 15.0, -15.0, 25.0, -25.0],
                    help="in-plane turns in degrees (about the body's long axis); 0 is the unturned scan")
    ap.add_argument("--tilts", type=float, nargs="*", default=[12.0], help="gantry tilts in degrees (about the x axis)")
    ap.add_argument("--phantoms", type=int, default=0, help="segpipe.synthetic chest phantoms to add")
    ap.add_argument("--seed-base", type=int, default=950_100)
    ap.add_argument("--model", default=None, help="model file (default: the bundled model)")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()

    from segpipe import LungSegmenter

    seg = LungSegmenter.default() if args.model is None else LungSegmenter.from_file(args.model)
    variants = [(2, t) for t in args.turns] + [(0, t) for t in args.tilts]
    rows: list[dict[str, Any]] = []
    for name, image, ref in cases(args.phantoms, args.seed_base):
        if ref is None:
            ref = seg.predict(image)
        voxel_ml = float(np.prod(image.GetSpacing())) / 1000.0
        for axis, degrees in variants:
            scan = turned(image, degrees, axis) if degrees else image
            want = sitk.GetArrayFromImage(turned(ref, degrees, axis, label=True) if degrees else ref)
            t0 = time.perf_counter()
            pred = sitk.GetArrayFromImage(seg.predict(scan))
            row = {"case": name, "turn": f"{'tilt' if axis == 0 else 'turn'} {degrees:+g}", **score(pred, want, voxel_ml),
                   "seconds": round(time.perf_counter() - t0, 1)}
            rows.append(row)
            dice = " / ".join("-" if d is None else f"{d:.3f}" for d in row["dice"])
            print(f"{name:18s} {row['turn']:10s} Dice R / L {dice}  swapped {row['swapped_ml']:7.1f} mL  {row['seconds']} s", flush=True)
    turned_rows = [r for r in rows if not r["turn"].endswith("+0")]
    dice = [d for r in turned_rows for d in r["dice"] if d is not None]
    summary = {"turned_lungs": len(dice), "mean_dice": round(float(np.mean(dice)), 4) if dice else None,
               "worst_dice": round(float(np.min(dice)), 4) if dice else None,
               "swapped_ml_total": round(sum(r["swapped_ml"] for r in turned_rows), 1)}
    print("summary (turned and tilted scans):", summary)
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "summary": summary}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
