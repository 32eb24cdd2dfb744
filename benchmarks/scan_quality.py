"""Scan-quality benchmark: the real scans as other protocols would give them, each segmented on
its own and scored against the mask of the scan as it is.

Variants (seeded, the same on every run; the scanner's padding below -1024 HU is left as it is):

- ``noise40``, ``noise80``, ``noise150``: CT-like noise of that standard deviation (HU) added
  (white noise high-passed above about 2 mm and smoothed over 0.5 mm in-plane: the texture of
  filtered back-projection; a low-dose scan);
- ``sharp1``, ``sharp2``: a sharp (lung) kernel: the image plus 1 or 2 times its detail above
  1 mm (edge overshoot), with 60 HU of fine-grained noise;
- ``smooth``: a soft kernel: Gaussian blur of 1.5 mm in-plane;
- ``thick2x``, ``thick3x``: slices two or three times as thick (the mean of 2 or 3 neighbouring
  slices, a thick reconstruction);
- ``matrix256``: half the in-plane matrix (the mean of 2 x 2 pixels: 1.4 mm pixels for LIDC);
- ``body50``, ``body70``, ``body130``: a smaller or larger patient (a child, a large adult): the
  same voxels with the spacing and the origin scaled to 50 / 70 / 130 % (lungs of an eighth, a
  third and 2.2 times the volume; the scanner's centre, x = 0, stays where it was). A first-order
  proxy only: a child's heart and thymus are larger for its chest than an adult's.

Scored per lung: Dice against the reference, the lung found outside it (mL) and the lung of it
left out (mL). A variant on another grid is scored on the scan's own grid (its mask resampled
there, nearest neighbour); a ``body`` variant voxel for voxel (its mL are the smaller or larger
patient's). References: LIDC-IDRI-0001 (no lung mask) against the same model's mask of the scan
as it is; COPDGene (4 mm: the noise and body variants only) against its reference labels and
against the model's mask.

Usage::

    python benchmarks/scan_quality.py [--only LIDC-IDRI-0001] [--variants noise80,sharp2] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import SimpleITK as sitk
from scipy import ndimage

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared" / "data"
VARIANTS = ("noise40", "noise80", "noise150", "sharp1", "sharp2", "smooth", "thick2x", "thick3x", "matrix256",
            "body50", "body70", "body130")
SAME_GRID = ("noise40", "noise80", "noise150", "body50", "body70", "body130")  # the variants of a 4 mm scan (COPDGene)
PADDING_HU = -1024.0  # values below are the scanner's padding: left as they are


def _noise(rng: np.random.Generator, shape: tuple[int, ...], spacing_xyz: tuple[float, ...], sd: float,
           high_pass_mm: float, smooth_mm: float) -> np.ndarray:
    """In-plane correlated noise of standard deviation ``sd`` (HU): white noise less its blur over
    ``high_pass_mm``, smoothed over ``smooth_mm``."""
    sx, sy = spacing_xyz[:2]
    n = rng.standard_normal(shape).astype(np.float32)
    n -= ndimage.gaussian_filter(n, sigma=(0, high_pass_mm / sy, high_pass_mm / sx))
    if smooth_mm:
        n = ndimage.gaussian_filter(n, sigma=(0, smooth_mm / sy, smooth_mm / sx))
    return n * np.float32(sd / max(float(n.std()), 1e-6))


def variant(image: sitk.Image, name: str, seed: int = 0) -> sitk.Image:
    """Scan ``image`` (HU) as variant ``name`` would give it (see the module's docstring)."""
    if name not in VARIANTS:
        raise ValueError(f"unknown variant {name!r}; choose from {', '.join(VARIANTS)}")
    if name.startswith("thick"):
        return sitk.BinShrink(sitk.Cast(image, sitk.sitkFloat32), [1, 1, int(name[5])])
    if name == "matrix256":
        return sitk.BinShrink(sitk.Cast(image, sitk.sitkFloat32), [2, 2, 1])
    if name.startswith("body"):
        f = int(name[4:]) / 100.0
        out = sitk.Image(image)
        out.SetSpacing([v * f for v in image.GetSpacing()])
        out.SetOrigin([v * f for v in image.GetOrigin()])
        return out
    a = sitk.GetArrayFromImage(image).astype(np.float32)
    sp = image.GetSpacing()
    rng = np.random.default_rng(seed)
    if name.startswith("noise"):
        b = a + _noise(rng, a.shape, sp, float(name[5:]), 2.0, 0.5)
    elif name.startswith("sharp"):
        detail = a - ndimage.gaussian_filter(a, sigma=(0, 1.0 / sp[1], 1.0 / sp[0]))
        b = a + float(name[5:]) * detail + _noise(rng, a.shape, sp, 60.0, 1.5, 0.0)
    else:  # smooth
        b = ndimage.gaussian_filter(a, sigma=(0, 1.5 / sp[1], 1.5 / sp[0]))
    out = sitk.GetImageFromArray(np.where(a < PADDING_HU, a, b))
    out.CopyInformation(image)
    return out


def score(mask: sitk.Image, ref: np.ndarray, image: sitk.Image) -> dict[str, Any]:
    """Per lung Dice of ``mask`` (on any grid; resampled onto ``image``'s) against the ``(z, y, x)``
    reference ``ref`` on ``image``'s grid, and the lung found outside it / left out of it (mL)."""
    from segpipe import spatial
    from segpipe.metrics import dice

    m = sitk.GetArrayFromImage(spatial.resample_to_reference(mask, image, interpolator=sitk.sitkNearestNeighbor))
    ml = spatial.voxel_volume_ml(image)
    return {"dice": [round(dice(m == v, ref == v), 4) for v in (1, 2)],
            "outside_ml": round(float(np.count_nonzero((m > 0) & (ref == 0))) * ml, 1),
            "left_out_ml": round(float(np.count_nonzero((m == 0) & (ref > 0))) * ml, 1)}


def cases() -> list[tuple[str, Path, Path | None, tuple[str, ...]]]:
    """(name, scan, reference labels or None, variants) of the real scans at hand."""
    out = []
    lidc, copd = SHARED / "lidc-idri-0001" / "dicom", SHARED / "copdgene-10002K-64"
    if lidc.is_dir():
        out.append(("LIDC-IDRI-0001", lidc, None, VARIANTS))
    if copd.is_dir():
        out.append(("COPDGene-10002K", copd / "ct.nii.gz", copd / "lungs.nii.gz", SAME_GRID))
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", help="model file (default: the bundled model)")
    p.add_argument("--only", help="comma-separated case names")
    p.add_argument("--variants", help=f"comma-separated variants (default all: {','.join(VARIANTS)})")
    p.add_argument("--json", help="write rows and summary here")
    args = p.parse_args()
    from segpipe import LungSegmenter, io

    seg = LungSegmenter.from_file(args.model) if args.model else LungSegmenter.default()
    wanted = set(args.variants.split(",")) if args.variants else set(VARIANTS)
    unknown = wanted - set(VARIANTS)
    if unknown:
        p.error(f"unknown variant(s) {', '.join(sorted(unknown))}; choose from {', '.join(VARIANTS)}")
    rows: list[dict[str, Any]] = []
    for name, path, labels, variants in cases():
        if args.only and name not in args.only.split(","):
            continue
        image = io.read_image(path)
        own = sitk.GetArrayFromImage(seg.predict(image))
        refs = {"own mask": own}
        if labels is not None:
            refs = {"labels": sitk.GetArrayFromImage(io.read_image(labels)), **refs}
        for v in [v for v in variants if v in wanted]:
            start = time.perf_counter()
            scanned = variant(image, v)
            result = seg.predict_with_report(scanned)
            grid = scanned if v.startswith("body") else image  # a body variant: the same voxels, its own mL
            for ref_name, ref in refs.items():
                row = {"case": name, "variant": v, "reference": ref_name, **score(result.label, ref, grid),
                       "seconds": round(time.perf_counter() - start, 1), "warnings": result.report["warnings"]}
                rows.append(row)
                print(f"{name:<16} {v:<10} vs {ref_name:<8} Dice {row['dice'][0]:.4f} / {row['dice'][1]:.4f}  "
                      f"outside {row['outside_ml']:6.1f} mL  left out {row['left_out_ml']:6.1f} mL  "
                      f"warnings {len(row['warnings'])}", flush=True)
    dice = [d for r in rows for d in r["dice"]]
    summary = {"rows": len(rows), "mean_dice": round(float(np.mean(dice)), 4) if dice else None,
               "worst_dice": min(dice) if dice else None, "outside_ml_max": max((r["outside_ml"] for r in rows), default=None)}
    print(json.dumps(summary, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps({"summary": summary, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
