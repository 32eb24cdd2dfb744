"""Replay two forms of the coarse side step on the dumped random crops (runs/spine/dump_S.pkl, ``dump.py``) and compare
them: ``compare(seeds, a, b)``, where ``a`` and ``b`` take a dump record, the ``split_sides`` keyword arguments it holds
and the spine's x index (or None) and return the sides. Prints each lung (>= 10 mL) whose coarse-grid Dice moves by more
than 0.01, and the totals over the lungs of 50 and 10 mL or more."""

import pickle
from collections.abc import Callable

import numpy as np

from segpipe.refine.spine import spine_x


def dices(sides: np.ndarray, ref: np.ndarray, voxel_ml: float, min_ml: float) -> list[float]:
    return [2 * ((sides == v) & (ref == v)).sum() / ((sides == v).sum() + (ref == v).sum())
            for v in (1, 2) if (ref == v).sum() * voxel_ml >= min_ml]


def compare(seeds: list[str], a: Callable[..., np.ndarray], b: Callable[..., np.ndarray]) -> None:
    tot: dict[int, tuple[list[float], list[float]]] = {50: ([], []), 10: ([], [])}
    for seed in seeds:
        for r in pickle.load(open(f"runs/spine/dump_{seed}.pkl", "rb")):
            if "found" not in r or r["found"].shape != r["rc"].shape or r["kw"].get("midline_x") is None:
                continue
            kw, voxel_ml = {k: v for k, v in r["kw"].items() if k != "spine_x"}, float(np.prod(r["spacing"])) / 1000
            spine = spine_x(r["hu"], r["spacing"], r["body"]) if kw.get("view_side") else None
            sa, sb = a(r, kw, spine), b(r, kw, spine)
            for m, (x, y) in tot.items():
                da, db = dices(sa, r["rc"], voxel_ml, m), dices(sb, r["rc"], voxel_ml, m)
                x += da
                y += db
                if m == 10:
                    for u, w in zip(da, db):
                        if abs(u - w) > 0.01:
                            print(seed, r["case"][:10], r["i"], r["desc"], round(u, 3), "->", round(w, 3))
    for m, (x, y) in tot.items():
        x, y = np.array(x), np.array(y)
        print(f">= {m} mL: {len(x)} lungs, Dice {x.mean():.4f} -> {y.mean():.4f}, under 0.5 {(x < 0.5).sum()} -> {(y < 0.5).sum()}")
