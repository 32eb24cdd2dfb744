"""One real lung-end slab of `thin.py` at a given slice thickness: per slice, each lung's reference,
found and extra mL, and the fine regions; ``--grow-mm2`` sets ``regions.GROW_MIN_MM2`` for the run.

    python experiments/2026-12-07-face-area/slab.py 0 bases 2.5 20 5 [--grow-mm2 100]

Arguments: the case (0 LIDC-IDRI-0001, 1 COPDGene-10002K), the end (bases / apex), cm of lung,
cm beyond it, slice mm.
"""

import argparse
import json
import sys

import numpy as np
import SimpleITK as sitk

sys.path.insert(0, "benchmarks")
sys.path.insert(0, "experiments/2026-11-28-coarse-lung-end")
import fov_consistency as fc
from slabs import end_slab

from segpipe import LungSegmenter, spatial
from segpipe.infer import regions

ap = argparse.ArgumentParser()
ap.add_argument("case", type=int)
ap.add_argument("end", choices=["bases", "apex"])
ap.add_argument("cm", type=float)
ap.add_argument("beyond", type=float)
ap.add_argument("slice_mm", type=float)
ap.add_argument("--grow-mm2", type=float)
a = ap.parse_args()
if a.grow_mm2 is not None:
    regions.GROW_MIN_MM2 = a.grow_mm2
seg = LungSegmenter.default()
name, image, ref = fc.cases(0, 0)[a.case]
can, _ = spatial.to_canonical(image)
ref_c = spatial.to_canonical(ref if ref is not None else seg.predict(can))[0]
ra = sitk.GetArrayFromImage(ref_c)
lo, hi = end_slab(np.nonzero(ra.any(axis=(1, 2)))[0], can.GetSpacing()[2], ra.shape[0], a.end, a.cm, a.beyond)
img = spatial.resample_image(can[:, :, lo:hi], (*can.GetSpacing()[:2], a.slice_mm))
r = sitk.GetArrayFromImage(sitk.Resample(ref_c[:, :, lo:hi], img, sitk.Transform(), sitk.sitkNearestNeighbor, 0))
res = seg.predict_with_report(img)
p = sitk.GetArrayFromImage(res.label)
ml = float(np.prod(img.GetSpacing())) / 1000
for z in range(p.shape[0]):
    cells = [(r[z] == v).sum() * ml for v in (1, 2)] + [((p[z] == v) & (r[z] == v)).sum() * ml for v in (1, 2)]
    if any(cells):
        print(z, "reference / found mL, right and left:", " ".join(f"{c:.2f}" for c in cells))
for v, side in ((1, "right"), (2, "left")):
    if (r == v).any():
        d = 2 * ((p == v) & (r == v)).sum() / ((p == v).sum() + (r == v).sum())
        print(side, f"reference {(r == v).sum() * ml:.1f} mL, mask {(p == v).sum() * ml:.1f} mL, Dice {d:.3f}")
print(json.dumps(res.report["fine_regions"]))
