"""The bundled network on other coarse grids: family B chest scans (development seeds) cut as the
lowest 1.5 / 2.5 / 4 cm of lung with 15 cm below and the top 2 cm with 6 cm above; per lung of
5 mL or more: ``coarse_mm.py FIRST END 4/4/4,3/3/3`` (``MODEL=FILE``: another model than the bundled one)."""

import dataclasses
import json
import os
import sys

import numpy as np
import SimpleITK as sitk

sys.path.insert(0, "benchmarks")
sys.path.insert(0, "experiments/2026-11-28-coarse-lung-end")
import family_b
from slabs import end_slab

from segpipe import LungSegmenter, spatial

KINDS = (("bases", 1.5, 15), ("bases", 2.5, 15), ("bases", 4, 15), ("apex", 2, 6))
models = {}
for spec in sys.argv[3].split(","):
    seg = LungSegmenter.from_file(os.environ["MODEL"]) if os.environ.get("MODEL") else LungSegmenter.default()
    seg.settings = dataclasses.replace(seg.settings, coarse_mm=tuple(float(v) for v in spec.split("/")))
    models[spec] = seg
rows = []
for seed in range(int(sys.argv[1]), int(sys.argv[2])):
    image, label, _ = family_b.make_case(seed, "chest")
    can = spatial.to_canonical(image)[0]
    la = sitk.GetArrayFromImage(spatial.to_canonical(label)[0])
    zz = np.nonzero(la.any(axis=(1, 2)))[0]
    for kind, cm, beyond in KINDS:
        lo, hi = end_slab(zz, can.GetSpacing()[2], la.shape[0], kind, cm, beyond)
        img, ref = can[:, :, lo:hi], la[lo:hi]
        vml = np.prod(img.GetSpacing()) / 1000
        row = {"seed": seed, "kind": f"{kind}{cm}", "ref_ml": [round(float((ref == v).sum() * vml), 1) for v in (1, 2)]}
        for name, seg in models.items():
            p = sitk.GetArrayFromImage(seg.predict(img))
            row[name] = [round(float(2 * ((p == v) & (ref == v)).sum() / max((p == v).sum() + (ref == v).sum(), 1)), 3) for v in (1, 2)]
            row[f"{name}_nonlung"] = round(float(((p > 0) & (ref == 0)).sum() * vml), 1)
        rows.append(row)
        print(json.dumps(row), flush=True)
for kind in [*sorted({r["kind"] for r in rows}), "all"]:
    for name in models:
        sel = [r for r in rows if kind in ("all", r["kind"])]
        d = [r[name][i] for r in sel for i in range(2) if r["ref_ml"][i] >= 5]
        print(kind, name, "lungs >= 5 mL", len(d), "mean", round(float(np.mean(d)), 4), "lost", sum(x < 0.1 for x in d),
              "non-lung max", max(r[f"{name}_nonlung"] for r in sel))
