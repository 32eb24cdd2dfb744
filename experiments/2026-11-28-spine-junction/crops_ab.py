"""Whole-pipeline Dice per lung on chosen random crops of the real scans (``fov_consistency.random_crop``):
``crops_ab.py out.json CASE:SEED:IDX ...`` (CASE: ``LIDC`` or ``COPD``); run it under ``before.py`` for the before."""

import json
import sys

sys.path.insert(0, "benchmarks")
import fov_consistency as fc  # noqa: E402
import numpy as np  # noqa: E402
import SimpleITK as sitk  # noqa: E402

from segpipe import LungSegmenter, spatial  # noqa: E402

seg = LungSegmenter.default()
want: dict[str, list[tuple[int, int]]] = {}
for arg in sys.argv[2:]:
    case, seed, idx = arg.split(":")
    want.setdefault(case, []).append((int(seed), int(idx)))
rows = []
for name, image, ref in fc.cases(0, 0):
    if name[:4] not in want:
        continue
    can, _ = spatial.to_canonical(image)
    ref_a = sitk.GetArrayFromImage(spatial.to_canonical(ref if ref is not None else seg.predict(can))[0])
    for seed, idx in want[name[:4]]:
        rng = np.random.default_rng([seed, sum(map(ord, name))])
        for _ in range(idx + 1):
            desc, img, r = fc.random_crop(can, ref_a, rng)
        p = sitk.GetArrayFromImage(seg.predict(img))
        vml = float(np.prod(img.GetSpacing())) / 1000
        row = {"case": name, "seed": seed, "i": idx, "desc": desc}
        for v in (1, 2):
            dice = 2 * ((p == v) & (r == v)).sum() / max((p == v).sum() + (r == v).sum(), 1)
            row["RL"[v - 1]] = (round(float((r == v).sum()) * vml, 1), round(float(dice), 3))
        row["nonlung_ml"] = round(float(((p > 0) & (r == 0)).sum()) * vml, 1)
        rows.append(row)
        print(json.dumps(row), flush=True)
json.dump(rows, open(sys.argv[1], "w"), indent=1)
