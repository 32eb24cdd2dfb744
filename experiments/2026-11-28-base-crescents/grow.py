"""Does a fine region that grows more readily find more of a base? Family B chest scans
``A``..``B`` cut as abdominal scans (the lowest 1.5 / 2.5 / 4 cm of lung with 15 cm below),
per lung of 5 mL or more, with `segpipe.infer.regions`' growth thresholds as they are and
lowered: a face grows from 100 mm^2 of lung on it (not 200), a small find from a quarter of it
in the coarse stage's lungs (not half).

Run from the project root: ``python experiments/2026-11-28-base-crescents/grow.py A B``
"""

import json
import sys
from pathlib import Path

import numpy as np
import SimpleITK as sitk

sys.path.insert(0, "benchmarks")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "2026-11-28-coarse-lung-end"))
import family_b  # noqa: E402
from slabs import end_slab  # noqa: E402

from segpipe import LungSegmenter, spatial  # noqa: E402
from segpipe.infer import regions  # noqa: E402

VARIANTS = {"as is": (200.0, 0.5), "share 0.25": (200.0, 0.25), "100 mm^2": (100.0, 0.5), "both": (100.0, 0.25)}
seg = LungSegmenter.default()
dice = {k: [] for k in VARIANTS}
outside = {k: [] for k in VARIANTS}
for seed in range(int(sys.argv[1]), int(sys.argv[2])):
    image, label, _ = family_b.make_case(seed, "chest")
    can, lab = spatial.to_canonical(image)[0], sitk.GetArrayFromImage(spatial.to_canonical(label)[0])
    zz = np.nonzero(lab.any(axis=(1, 2)))[0]
    for cm in (1.5, 2.5, 4.0):
        lo, hi = end_slab(zz, can.GetSpacing()[2], lab.shape[0], "bases", cm, 15)
        slab, ref = can[:, :, lo:hi], lab[lo:hi]
        ml = float(np.prod(slab.GetSpacing())) / 1000
        ref_ml = [float((ref == v).sum()) * ml for v in (1, 2)]
        row = [seed, cm, [round(v, 1) for v in ref_ml]]
        for name, (mm2, share) in VARIANTS.items():
            regions.GROW_MIN_MM2, regions.GROW_SMALL_SHARE = mm2, share
            p = sitk.GetArrayFromImage(seg.predict(slab))
            d = [2 * float(((p == v) & (ref == v)).sum()) / max(float((p == v).sum() + (ref == v).sum()), 1) for v in (1, 2)]
            dice[name] += [x for x, r in zip(d, ref_ml) if r >= 5]
            outside[name].append(float(((p > 0) & (ref == 0)).sum()) * ml)
            row += [name, [round(x, 3) for x in d]]
        print(json.dumps(row), flush=True)
for name in VARIANTS:
    d = dice[name]
    print(f"{name}: {len(d)} lungs >= 5 mL, mean {np.mean(d):.4f}, lost {sum(x < 0.1 for x in d)}, "
          f"outside the reference at most {max(outside[name]):.1f} mL")
