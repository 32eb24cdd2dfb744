"""The coarse sides of ``../2026-11-28-spine-midline/dump.py``'s random crops as ``coarse.locate`` makes them (side
split, ``part_at_spine``, ``join_cut_pieces``), with the column split searched near the find's middle and near the
spine: ``offline.py SEED ...`` (dumps in runs/spine/dump_S.pkl). Prints each lung of 50 mL or more whose coarse-grid
Dice against the reference moves by more than $TH (default 0.02), and the totals."""

import os
import pickle
import sys

import numpy as np

from segpipe.refine.sides import join_cut_pieces, split_sides
from segpipe.refine.spine import part_at_spine, spine_x


def coarse(r: dict, kw: dict, spine: float | None, at_spine: bool) -> np.ndarray:
    sides = split_sides(r["found"], **kw, spine_x=spine if at_spine else None)
    if spine is not None:
        sides, _ = part_at_spine(r["found"], sides, spine, kw["left_vote"], float(np.prod(r["spacing"])) / 1000)
    return join_cut_pieces(r["found"], sides, kw["midline_x"], kw["left_vote"]) if kw.get("midline_x") is not None else sides


def crops(seeds: list[str], shift_mm: float = 0.0):  # type: ignore[no-untyped-def]
    """Each dumped crop of ``seeds`` with a find: (its seed, the dump's record, split_sides' arguments with the scanner's centre
    moved by ``-shift_mm`` (the patient by ``shift_mm``), the coarse voxel's mL, the spine's x where the view cuts the body)."""
    for seed in seeds:
        for r in pickle.load(open(f"runs/spine/dump_{seed}.pkl", "rb")):
            if "found" not in r or r["found"].shape != r["rc"].shape:
                continue
            kw, voxel_ml = dict(r["kw"]), float(np.prod(r["spacing"])) / 1000
            if shift_mm and kw.get("centre_x") is not None:
                kw["centre_x"] = kw["centre_x"] - shift_mm / r["sx"]
            yield seed, r, kw, voxel_ml, spine_x(r["hu"], r["spacing"], r["body"]) if kw.get("view_side") else None


def dices(sides: np.ndarray, ref: np.ndarray, voxel_ml: float) -> list[float]:
    return [2 * ((sides == v) & (ref == v)).sum() / ((sides == v).sum() + (ref == v).sum())
            for v in (1, 2) if (ref == v).sum() * voxel_ml >= 50]


if __name__ == "__main__":
    threshold = float(os.environ.get("TH", "0.02"))
    FALLBACK = float(os.environ.get("FALLBACK", "0"))  # e.g. 150: compare the landed form with a fallback bone threshold
    before, after = [], []
    for seed, r, kw, voxel_ml, spine in crops(sys.argv[1:]):
        if FALLBACK and kw.get("view_side"):  # a second, lower bone threshold where the first finds no spine
            low = spine if spine is not None else spine_x(r["hu"], r["spacing"], r["body"], bone_hu=(FALLBACK,))
            a, b = dices(coarse(r, kw, spine, True), r["rc"], voxel_ml), dices(coarse(r, kw, low, True), r["rc"], voxel_ml)
        else:
            a, b = dices(coarse(r, kw, spine, False), r["rc"], voxel_ml), dices(coarse(r, kw, spine, True), r["rc"], voxel_ml)
        before += a
        after += b
        for x, y in zip(a, b):
            if abs(x - y) > threshold:
                print(seed, r["case"], r["i"], r["desc"], round(x, 3), "->", round(y, 3))
    for name, v in (("near the middle", np.array(before)), ("near the spine", np.array(after))):
        print(f"{name}: {len(v)} lungs, Dice {v.mean():.4f}, under 0.9 {(v < 0.9).sum()}, under 0.5 {(v < 0.5).sum()}")
