"""The side split with a wider search for the thinnest column (offline on the dumps, as offline.py).

    python experiments/2026-11-27-turned-patient/window.py
"""

from __future__ import annotations

import pickle

import numpy as np

from segpipe.refine import sides as S

kept_columns = S._column_halves


def columns(half_share: float):
    """``sides._column_halves`` with a search of ``half_share`` of the extent each side of the middle."""

    def split(mask: np.ndarray, turn: float = 0.0) -> np.ndarray:
        out = np.zeros(mask.shape, np.uint8)
        if turn:
            y, x = np.mgrid[0:mask.shape[1], 0:mask.shape[2]]
            across = np.rint(x * np.cos(turn) + y * np.sin(turn)).astype(np.int64)
            across -= across.min()
        else:
            across = np.broadcast_to(np.arange(mask.shape[2]), mask.shape[1:])
        extent = across[mask.any(axis=0)]
        lo_u, hi_u = int(extent.min()), int(extent.max())
        mid = (lo_u + hi_u) // 2
        lo, hi = int(mid - half_share * (hi_u - lo_u)), int(mid + half_share * (hi_u - lo_u)) + 1
        for z in range(mask.shape[0]):
            s = mask[z]
            if not s.any():
                continue
            window = np.bincount(across[s], minlength=hi_u + 1).astype(float)[lo:hi]
            cut = lo + int(np.argmin(window)) if window.size else mid
            out[z][s & (across < cut)] = 1
            out[z][s & (across >= cut)] = 2
        return out

    return split


variants = {h: columns(h) for h in (0.15, 0.25, 0.35)}
for tag, seeds in (("vote37", range(8)), ("held38", [0]), ("rot38", [0])):
    found: dict[float, list[float]] = {h: [] for h in variants}
    wrong = dict.fromkeys(variants, 0.0)
    for seed in seeds:
        for d in pickle.load(open(f"runs/vc/{tag}_{seed}.pkl", "rb")):
            if "found" not in d:
                continue
            res = {}
            for h, fn in variants.items():
                S._column_halves = fn
                res[h] = S.split_sides(d["found"], **d["kw"])
            S._column_halves = kept_columns
            voxel_ml = d.get("voxel_ml", 0.064)
            for v in (1, 2):
                m = d["rc"] == v
                for h, r in res.items():
                    wrong[h] += ((r == 3 - v) & m).sum() * voxel_ml
                if m.sum() * voxel_ml < 50:
                    continue
                for h, r in res.items():
                    found[h].append(float((r[m] == v).mean()))
    for h in variants:
        v = np.array(found[h])
        print(f"{tag} {h}: {len(v)} lungs, found {v.mean():.4f}, lost {(v < 0.1).sum()}, on the wrong side {wrong[h]:.0f} mL")
