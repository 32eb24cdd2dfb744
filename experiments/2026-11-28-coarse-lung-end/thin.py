"""Real scans: thin lung-base slabs at the top of a scan (an abdominal CT's first slices) and
thin apex slabs at the bottom (a neck CT's last), at the scan's own slices and resampled to
3 / 5 mm; each crop's mask against the whole scan's (LIDC: the model's own; COPDGene: labels)."""

import json
import sys

import numpy as np
import SimpleITK as sitk

sys.path.insert(0, "benchmarks")
import os

import fov_consistency as fc
from slabs import end_slab

from segpipe import LungSegmenter, spatial

seg = LungSegmenter.from_file(os.environ["THIN_MODEL"]) if os.environ.get("THIN_MODEL") else LungSegmenter.default()
rows = []
for name, image, ref in fc.cases(0, 0):
    can, _ = spatial.to_canonical(image)
    if ref is None:
        ref = seg.predict(can)
    ref_c, _ = spatial.to_canonical(ref)
    ra = sitk.GetArrayFromImage(ref_c)
    zz = np.nonzero(ra.any(axis=(1, 2)))[0]
    sz = can.GetSpacing()[2]
    import os

    kinds = [("bases", 1.5, 20), ("bases", 2.5, 20), ("bases", 4, 6), ("apex", 2, 6), ("apex", 3, 3)]
    slices = (None, 3.0, 5.0)
    if os.environ.get("THIN_QUICK"):
        kinds = [("bases", 1.5, 20), ("bases", 4, 6), ("apex", 2, 6), ("apex", 3, 3)]
        slices = (3.0,)
    for kind, cm, below in kinds:
        for slice_mm in slices:
            lo, hi = end_slab(zz, sz, ra.shape[0], kind, cm, below)
            img = can[:, :, lo:hi]
            r = ref_c[:, :, lo:hi]
            if slice_mm:
                sp = (*img.GetSpacing()[:2], slice_mm)
                img = spatial.resample_image(img, sp)
                r = sitk.Resample(r, img, sitk.Transform(), sitk.sitkNearestNeighbor, 0)
            res = seg.predict_with_report(img)
            p = sitk.GetArrayFromImage(res.label)
            ro = sitk.GetArrayFromImage(r)
            vml = np.prod(img.GetSpacing()) / 1000
            for side, v in (("right", 1), ("left", 2)):
                rm = (ro == v).sum() * vml
                if rm < 1:
                    continue
                d = 2 * ((p == v) & (ro == v)).sum() / max((p == v).sum() + (ro == v).sum(), 1)
                row = dict(
                    case=name,
                    kind=f"{kind}{cm}+{below}",
                    slice=slice_mm or round(sz, 2),
                    lung=side,
                    ref_ml=round(float(rm), 1),
                    pred_ml=round(float((p == v).sum() * vml), 1),
                    other_ml=round(float((p == 3 - v).sum() * vml), 1),
                    dice=round(float(d), 3),
                    nslices=img.GetSize()[2],
                    warn=res.report["warnings"],
                )
                rows.append(row)
                print(json.dumps(row), flush=True)
json.dump(rows, open(sys.argv[1], "w"), indent=1)
