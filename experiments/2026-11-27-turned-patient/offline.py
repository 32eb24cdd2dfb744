"""Re-run split_sides on dumped coarse inputs (runs/vc/TAG_S.pkl, from dump.py,
or experiments/2026-11-27-scanner-centre/dump.py) with each split of
variants.py; per lung of 50 mL or more: the share found on its own side.

    python experiments/2026-11-27-turned-patient/offline.py TAG SEED [SEED ...]
"""

from __future__ import annotations

import pickle
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from variants import VARIANTS  # noqa: E402

from segpipe.refine import sides as S  # noqa: E402

kept = S.split_single
tag, seeds = sys.argv[1], [int(s) for s in sys.argv[2:]]
found = {k: [] for k in VARIANTS}
swapped = dict.fromkeys(VARIANTS, 0.0)
seconds = dict.fromkeys(VARIANTS, 0.0)
for seed in seeds:
    for d in pickle.load(open(f"runs/vc/{tag}_{seed}.pkl", "rb")):
        if "found" not in d:
            continue
        res = {}
        for name, fn in VARIANTS.items():
            S.split_single = lambda mask, centre=None, fn=fn: fn(mask)  # the variants predate the spine's centre
            t = time.perf_counter()
            res[name] = S.split_sides(d["found"], **d["kw"])
            seconds[name] += time.perf_counter() - t
        S.split_single = kept
        voxel_ml = d.get("voxel_ml", 0.064)
        for v in (1, 2):
            m = d["rc"] == v
            for k, r in res.items():
                swapped[k] += ((r == 3 - v) & m).sum() * voxel_ml
            if m.sum() * voxel_ml < 50:
                continue
            share = {k: float((r[m] == v).mean()) for k, r in res.items()}
            for k, value in share.items():
                found[k].append(value)
            if max(share.values()) - min(share.values()) > 0.03:
                print(f"  {seed} {d['case'][:6]} {d['i']:3d} {d['desc'][:30]:30s} {v} {m.sum() * voxel_ml:6.0f}  "
                      + " ".join(f"{k} {x:.3f}" for k, x in share.items()))
for k, v in found.items():
    v = np.array(v)
    print(f"{k:10s} {len(v)} lungs: found {v.mean():.4f}, lost {(v < 0.1).sum()}, on the other side {swapped[k]:.0f} mL, {seconds[k]:.1f} s")
