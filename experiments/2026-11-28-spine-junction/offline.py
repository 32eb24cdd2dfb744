"""Pieces that an in-plane face of the view cuts off a lung, joined to it offline: ``offline.py SEED ...`` on the dumped
random crops of ``../2026-11-28-spine-midline/dump.py`` (runs/spine/dump_S.pkl). Prints each lung whose coarse-grid Dice
moves by more than 0.01, and the totals for lungs of 50 mL and of 10 mL or more."""

import sys

import numpy as np

from segpipe.refine._util import label
from segpipe.refine.sides import join_cut_pieces, piece_side, split_sides
from segpipe.refine.spine import part_at_spine, spine_x

REACH = 2  # coarse voxels: the lung of that side comes this close to the same face


def faces(mask: np.ndarray) -> list[np.ndarray]:
    """For each in-plane face of the array: the slices (z) at which ``mask`` lies within REACH of it."""
    return [mask[:, :REACH + 1].any(axis=(1, 2)), mask[:, -REACH - 1:].any(axis=(1, 2)),
            mask[:, :, :REACH + 1].any(axis=(1, 2)), mask[:, :, -REACH - 1:].any(axis=(1, 2))]


def join_face_pieces(found: np.ndarray, sides: np.ndarray, midline_x: float, left_vote: np.ndarray) -> np.ndarray:
    out = sides.copy()
    labels, n = label(found & (sides == 0))
    for i in range(1, n + 1):
        piece = labels == i
        on = [bool(f.any()) for f in faces(piece[:, :, :] if False else piece)]
        touch = [piece[:, 0].any(), piece[:, -1].any(), piece[:, :, 0].any(), piece[:, :, -1].any()]
        if not any(touch):
            continue
        side = piece_side(piece, midline_x, left_vote)
        if not side or not (out == side).any():
            continue
        lung_faces = faces(out == side)
        if any(t and lf.any() for t, lf in zip(touch, lung_faces)) and any(on):
            out[piece] = side
    return out


def coarse(r: dict, kw: dict, spine: float | None, variant: bool) -> np.ndarray:
    sides = split_sides(r["found"], **kw, spine_x=spine)
    if spine is not None:
        sides, _ = part_at_spine(r["found"], sides, spine, kw["left_vote"], float(np.prod(r["spacing"])) / 1000)
    sides = join_cut_pieces(r["found"], sides, kw["midline_x"], kw["left_vote"])
    return join_face_pieces(r["found"], sides, kw["midline_x"], kw["left_vote"]) if variant else sides


def dices(sides: np.ndarray, ref: np.ndarray, voxel_ml: float, min_ml: float) -> list[float]:
    return [2 * ((sides == v) & (ref == v)).sum() / ((sides == v).sum() + (ref == v).sum())
            for v in (1, 2) if (ref == v).sum() * voxel_ml >= min_ml]


if __name__ == "__main__":
    import pickle
    tot = {50: ([], []), 10: ([], [])}
    for seed in sys.argv[1:]:
        for r in pickle.load(open(f"runs/spine/dump_{seed}.pkl", "rb")):
            if "found" not in r or r["found"].shape != r["rc"].shape or r["kw"].get("midline_x") is None:
                continue
            kw, voxel_ml = {k: v for k, v in r["kw"].items() if k != "spine_x"}, float(np.prod(r["spacing"])) / 1000
            spine = spine_x(r["hu"], r["spacing"], r["body"]) if kw.get("view_side") else None
            a, b = coarse(r, kw, spine, False), coarse(r, kw, spine, True)
            for m, (x, y) in tot.items():
                da, db = dices(a, r["rc"], voxel_ml, m), dices(b, r["rc"], voxel_ml, m)
                x += da
                y += db
                if m == 10:
                    for u, w in zip(da, db):
                        if abs(u - w) > 0.01:
                            print(seed, r["case"][:10], r["i"], r["desc"], round(u, 3), "->", round(w, 3))
    for m, (x, y) in tot.items():
        x, y = np.array(x), np.array(y)
        print(f">= {m} mL: {len(x)} lungs, Dice {x.mean():.4f} -> {y.mean():.4f}, under 0.5 {(x < 0.5).sum()} -> {(y < 0.5).sum()}")
