"""Independent phantoms (family B chest scans, held-out seeds) cut as lung-end slabs: the lowest
1.5 / 2.5 cm of lung with 15 cm below, the top 2 cm with 6 cm above; per lung >= 1 mL, bundled
model against a candidate (MODEL ``-``: the bundled model alone, with the checkout's inference).

    fbthin.py MODEL FIRST END rows.json"""

import json
import sys

import numpy as np
import SimpleITK as sitk

sys.path.insert(0, "benchmarks")
import family_b
from slabs import end_slab

from segpipe import LungSegmenter, spatial

models = {"default": LungSegmenter.default()}
if sys.argv[1] != "-":
    models["cand"] = LungSegmenter.from_file(sys.argv[1])
seeds = range(int(sys.argv[2]), int(sys.argv[3]))
rows = []
for seed in seeds:
    image, label, info = family_b.make_case(seed, "chest")
    can = spatial.to_canonical(image)[0]
    lab = spatial.to_canonical(label)[0]
    la = sitk.GetArrayFromImage(lab)
    sz = can.GetSpacing()[2]
    zz = np.nonzero(la.any(axis=(1, 2)))[0]
    for kind, cm, beyond in (("bases", 1.5, 15), ("bases", 2.5, 15), ("apex", 2, 6)):
        lo, hi = end_slab(zz, sz, la.shape[0], kind, cm, beyond)
        img = can[:, :, lo:hi]
        r = la[lo:hi]
        vml = np.prod(img.GetSpacing()) / 1000
        row = dict(seed=seed, kind=f"{kind}{cm}", slice=round(sz, 2), ref_ml=[round(float((r == v).sum() * vml), 1) for v in (1, 2)])
        for name, seg in models.items():
            res = seg.predict_with_report(img)
            p = sitk.GetArrayFromImage(res.label)
            row[name] = [round(float(2 * ((p == v) & (r == v)).sum() / max((p == v).sum() + (r == v).sum(), 1)), 3) for v in (1, 2)]
            row[name + "_nonlung"] = round(float(((p > 0) & (r == 0)).sum() * vml), 1)
        rows.append(row)
        print(json.dumps(row), flush=True)
json.dump(rows, open(sys.argv[4], "w"), indent=1)
for name in models:
    d = [r[name][i] for r in rows for i in range(2) if r["ref_ml"][i] >= 5]
    print(
        name, "lungs >= 5 mL", len(d), "mean", round(float(np.mean(d)), 4), "lost", sum(x < 0.1 for x in d), "non-lung max", max(r[name + "_nonlung"] for r in rows)
    )
