"""Spine x found per dumped crop against the scanner's centre and the reference lungs: ``spine_offset.py SEEDS`` prints
the crops whose spine lies over 40 mm from x = 0 or beyond a reference lung's median."""
import pickle
import sys

import numpy as np

from segpipe.refine.spine import spine_x

rows = []
for seed in sys.argv[1:]:
    for r in pickle.load(open(f"runs/spine/dump_{seed}.pkl", "rb")):
        if "found" not in r or r["found"].shape != r["rc"].shape or not r["kw"].get("view_side"):
            continue
        sp = spine_x(r["hu"], r["spacing"], r["body"])
        c = r["kw"].get("centre_x")
        if sp is None or c is None:
            continue
        off = (sp - c) * r["spacing"][0]
        rc = r["rc"]
        xr, xl = np.nonzero(rc == 1)[2], np.nonzero(rc == 2)[2]
        # wrong: the spine lies beyond a lung's median on the far side (right lung's median at higher x, or left's at lower x)
        wrong = (xr.size > 100 and np.median(xr) > sp) or (xl.size > 100 and np.median(xl) < sp)
        rows.append((abs(off), wrong, seed, r["case"][:8], r["i"], r["desc"]))
rows.sort()
for a, w, *rest in rows:
    if a > 40 or w:
        print(f"{a:6.1f} mm wrong={w}", *rest)
print(len(rows), "crops with a spine;", sum(w for _, w, *_ in rows), "wrong")
