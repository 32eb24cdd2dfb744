"""The named FOV crops of the real scans after resampling each scan to another slice spacing (and, optionally,
in-plane spacing): ``resampled_named.py SLICE_MM out.json [INPLANE_MM]``. The reference is the whole original scan's mask
(LIDC-IDRI-0001: the bundled model's; COPDGene: its labels) resampled by nearest neighbour onto the resampled scan;
each crop is cut from the resampled scan as ``benchmarks/fov_consistency.py`` cuts it."""

import json
import sys
import time

sys.path.insert(0, "benchmarks")
import fov_consistency as fc  # noqa: E402
import numpy as np  # noqa: E402
import SimpleITK as sitk  # noqa: E402

from segpipe import LungSegmenter, spatial  # noqa: E402


def dice(p: np.ndarray, r: np.ndarray, v: int) -> float:
    return float(2 * ((p == v) & (r == v)).sum() / max((p == v).sum() + (r == v).sum(), 1))


def resample(im: sitk.Image, size: list[int], spacing: list[float], interp: int, default: float) -> sitk.Image:
    return sitk.Resample(im, size, sitk.Transform(), interp, im.GetOrigin(), spacing, im.GetDirection(), default, im.GetPixelID())


seg = LungSegmenter.default()
slice_mm, inplane = float(sys.argv[1]), float(sys.argv[3]) if len(sys.argv) > 3 else None
rows = []
for name, image, ref in fc.cases(0, 0):
    can, _ = spatial.to_canonical(image)
    ref_c, _ = spatial.to_canonical(ref if ref is not None else seg.predict(can))
    sp, size = list(can.GetSpacing()), list(can.GetSize())
    new_sp = [inplane or sp[0], inplane or sp[1], slice_mm]
    new_size = [int(round(size[i] * sp[i] / new_sp[i])) for i in range(3)]

    img = resample(can, new_size, new_sp, sitk.sitkLinear, -1024.0)
    ref_a = sitk.GetArrayFromImage(resample(ref_c, new_size, new_sp, sitk.sitkNearestNeighbor, 0))
    vml = float(np.prod(new_sp)) / 1000
    whole = sitk.GetArrayFromImage(seg.predict(img))
    for v, side in ((1, "right"), (2, "left")):
        rows.append({"case": name, "crop": "whole", "lung": side, "dice": round(dice(whole, ref_a, v), 4)})
        print(rows[-1], flush=True)
    for crop in fc.CROPS:
        cimg, r = fc.crop_of(img, ref_a, crop)
        t = time.perf_counter()
        p = sitk.GetArrayFromImage(seg.predict(cimg))
        for v, side in ((1, "right"), (2, "left")):
            ml = float((r == v).sum()) * vml
            if ml >= fc.MIN_REF_ML:
                rows.append({"case": name, "crop": crop, "lung": side, "ref_ml": round(ml, 1), "dice": round(dice(p, r, v), 4),
                             "seconds": round(time.perf_counter() - t, 1)})
                print(rows[-1], flush=True)
json.dump(rows, open(sys.argv[2], "w"), indent=1)
d = [r["dice"] for r in rows if r.get("ref_ml", 0) >= 50]
print("lungs >= 50 mL", len(d), "mean", round(float(np.mean(d)), 4), "worst", min(d))
