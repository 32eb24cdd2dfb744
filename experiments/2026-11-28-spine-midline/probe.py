"""How often the spine is found in the random crops' coarse grids and names each lung's side
(its centroid's x against the spine's): ``probe.py SEED [SEED ...]`` on ``dump.py``'s files."""

import pickle
import sys

import numpy as np
from spine import spine_x

lungs = pipeline_right = found = spine_right = wrong_found = wrong_spine_right = 0
for seed in sys.argv[1:]:
    for r in pickle.load(open(f"runs/spine/dump_{seed}.pkl", "rb")):
        if r.get("hu") is None or r["hu"].shape != r["rc"].shape:
            continue
        sx = spine_x(r["hu"], r["spacing"], r["body"])
        voxel_ml = float(np.prod(r["spacing"])) / 1000
        for v in (1, 2):
            m = r["rc"] == v
            if m.sum() * voxel_ml < 50:
                continue
            lungs += 1
            ok = (r["sides"][m] == v).mean() > 0.5
            pipeline_right += ok
            if sx is not None:
                right = (2 if np.nonzero(m)[2].mean() > sx else 1) == v  # canonical LPS: x grows to the left
                found, spine_right = found + 1, spine_right + right
                wrong_found, wrong_spine_right = wrong_found + (not ok), wrong_spine_right + (right and not ok)
print(f"lungs {lungs}: the coarse stage's side right (majority) {pipeline_right}; spine found {found}, its side right {spine_right}; "
      f"of the lungs the coarse stage names wrongly, spine found {wrong_found}, its side right {wrong_spine_right}")
