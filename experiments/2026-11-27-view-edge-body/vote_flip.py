"""Offline, on dumped coarse inputs (``runs/vc/TAG.pkl`` from experiments/2026-11-27-turned-patient/dump.py
or experiments/2026-11-27-scanner-centre/dump.py): ``split_sides`` as it is against the same with
each connected piece that the coarse network's vote puts on the other side flipped to that side
where it holds K x ``min_lung`` voxels or more (not kept). Per lung of 50 mL or more: the share
found on its own side, the lungs under half, the lung on the other side.

    python experiments/2026-11-27-view-edge-body/vote_flip.py 1,2,4 TAG [TAG ...]
"""

from __future__ import annotations

import pickle
import sys

import numpy as np

from segpipe.refine import sides as S
from segpipe.refine._util import component_sizes, label


def flipped(cur: np.ndarray, left_vote: np.ndarray, min_lung: int, k: float) -> np.ndarray:
    out = cur.copy()
    for side in (1, 2):
        against = (cur == side) & (left_vote if side == 1 else ~left_vote)
        labels, n = label(against)
        sizes = component_sizes(labels, n) if n else []
        for i in range(1, n + 1):
            if sizes[i] >= k * min_lung:
                out[labels == i] = 3 - side
    return out


def main() -> None:
    ks = [float(k) for k in sys.argv[1].split(",")]
    names = ["as is", *[f"K {k:g}" for k in ks]]
    share: dict[str, list[float]] = {n: [] for n in names}
    other = dict.fromkeys(names, 0.0)
    for tag in sys.argv[2:]:
        with open(f"runs/vc/{tag}.pkl", "rb") as f:
            dumps = pickle.load(f)
        for d in dumps:
            if "found" not in d:
                continue
            kw = {**d["kw"], "cues": []}
            cur = S.split_sides(d["found"], **kw)
            vote = np.asarray(kw["left_vote"]).astype(bool)
            results = {"as is": cur, **{f"K {k:g}": flipped(cur, vote, kw["min_lung"], k) for k in ks}}
            voxel_ml = d.get("voxel_ml", 0.064)
            for v in (1, 2):
                ref = d["rc"] == v
                for n, r in results.items():
                    other[n] += float(((r == 3 - v) & ref).sum()) * voxel_ml
                if ref.sum() * voxel_ml >= 50:
                    for n, r in results.items():
                        share[n].append(float((r[ref] == v).mean()))
    for n in names:
        v = np.array(share[n])
        print(f"{n:6s} {len(v)} lungs: own side {v.mean():.4f}, under half {(v < 0.5).sum()}, other side {other[n]:.0f} mL")


if __name__ == "__main__":
    main()
