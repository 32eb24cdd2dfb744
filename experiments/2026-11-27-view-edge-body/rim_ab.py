"""Side by side, with and without the body's view rim (``coarse._view_rim``), on chosen random
crops of one real scan: the reference lung found by distance to the view's edge (the scanner's
circle, or the in-plane faces of a crop without one), and Dice per lung.

    python experiments/2026-11-27-view-edge-body/rim_ab.py SEED CASE I,J,...   # e.g. 19 LIDC 9,10,16
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import SimpleITK as sitk
from scipy import ndimage

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import fov_consistency as F  # noqa: E402

import segpipe.infer.coarse as C  # noqa: E402
from segpipe import LungSegmenter, spatial  # noqa: E402

BANDS_MM = [0, 1, 2, 3, 5, 1e9]
kept = C._view_rim


def no_rim(body: np.ndarray, padding: np.ndarray | None) -> None:
    return None


def dice(a: np.ndarray, b: np.ndarray) -> float:
    return 2 * float((a & b).sum()) / max(float(a.sum() + b.sum()), 1.0)


def main() -> None:
    seed, case, wanted = int(sys.argv[1]), sys.argv[2], {int(i) for i in sys.argv[3].split(",")}
    seg = LungSegmenter.default()
    name, image, ref = next(c for c in F.cases(0, 0) if c[0].startswith(case))
    canonical, _ = spatial.to_canonical(image)
    C._view_rim = no_rim
    if ref is None:  # LIDC: the whole scan's own mask (its lungs stay clear of the circle)
        ref = seg.predict(canonical)
    ref_a = sitk.GetArrayFromImage(spatial.to_canonical(ref)[0])
    rng = np.random.default_rng([seed, sum(map(ord, name))])
    spacing = canonical.GetSpacing()
    voxel_ml = float(np.prod(spacing)) / 1000
    for i in range(max(wanted) + 1):
        desc, img, r = F.random_crop(canonical, ref_a, rng)
        if i not in wanted:
            continue
        edge = F.outside_circle(img)
        if "circle" not in desc:
            edge = np.zeros_like(edge)
            edge[0, :] = edge[-1, :] = edge[:, 0] = edge[:, -1] = True
        dist = np.broadcast_to(ndimage.distance_transform_edt(~edge, sampling=spacing[1::-1]), r.shape)
        print(f"random{i:02d} {desc}")
        lung = r > 0
        for label, rim in (("before", no_rim), ("after", kept)):
            C._view_rim = rim
            pred = sitk.GetArrayFromImage(seg.predict(img))
            found = []
            for lo, hi in zip(BANDS_MM, BANDS_MM[1:]):
                band = lung & (dist >= lo) & (dist < hi)
                found.append(f"{lo}-{hi if hi < 1e9 else ''} mm {(pred[band] > 0).mean():.2f}" if band.any() else "")
            lungs = " ".join(f"{v}: {(r == v).sum() * voxel_ml:.0f} mL {dice(pred == v, r == v):.4f}"
                             for v in (1, 2) if (r == v).sum() * voxel_ml >= 5)
            print(f"  {label:6s} found by distance to the edge: {', '.join(found)}; "
                  f"outside the reference {((pred > 0) & ~lung).sum() * voxel_ml:.0f} mL | {lungs}")


if __name__ == "__main__":
    main()
