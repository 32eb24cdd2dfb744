"""The side split of one find (``columns.split_single``) followed by a flood from the two halves' cores, on the dumped
random crops (runs/spine/dump_S.pkl, ``../2026-11-28-spine-midline/dump.py``), against the split before this experiment
(the cut looked for near the find's middle where no spine shows): ``variants.py VARIANT SEED ...``.

``flood``: the column split's halves, then each voxel of the find to the half whose core reaches it across the least
narrowing (``scipy.ndimage.watershed_ift`` on the find's depth, the cores the voxels of each half at least ``CORE``
voxels from the other half): the boundary follows the narrowest junction in 3D instead of a column per slice, and a
slice that holds one lung is not cut. ``CORE`` (env, default 3). ``votecut`` (landed): in a view that cuts the body
where no spine shows, the column split looks for its cut near the x at which one cut across the whole find best parts
the network's vote (``columns.vote_column``), instead of near the find's middle. Prints each lung (>= 10 mL) whose coarse-grid Dice
moves by more than 0.01, and the totals."""

import os
import sys
from pathlib import Path

import numpy as np
from scipy import ndimage

from segpipe.infer import coarse
from segpipe.refine import sides as sides_mod

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "2026-11-28-spine-midline"))
from replay import compare  # noqa: E402

_split = sides_mod.split_single
CORE = int(os.environ.get("CORE", "3"))
VARIANT = ["before"]


def flooded(mask: np.ndarray, halves: np.ndarray, core: int = CORE) -> np.ndarray:
    right, left = halves == 1, halves == 2
    if not right.any() or not left.any():
        return halves
    markers = np.zeros(mask.shape, np.int16)
    markers[right & (ndimage.distance_transform_edt(~left) > core)] = 1
    markers[left & (ndimage.distance_transform_edt(~right) > core)] = 2
    if not (markers == 1).any() or not (markers == 2).any():
        return halves
    depth = ndimage.distance_transform_edt(mask)
    cost = np.where(mask, np.clip(depth.max() - depth, 0, 254), 255).astype(np.uint8)
    markers[~mask] = -1
    out = ndimage.watershed_ift(cost, markers)
    return np.where(mask, np.clip(out, 0, 2), 0).astype(np.uint8)


_vote_column = sides_mod.vote_column


def split(mask, centre=None):  # type: ignore[no-untyped-def]
    halves = _split(mask, centre)
    return flooded(mask, halves) if VARIANT[0] == "flood" else halves


sides_mod.split_single = split


def run(r: dict, kw: dict, spine: float | None, variant: str) -> np.ndarray:
    VARIANT[0] = variant
    sides_mod.vote_column = _vote_column if variant == "votecut" else lambda mask, left_vote: None
    sides, _, _ = coarse.name_sides(r["found"], spine=spine, voxel_ml=float(np.prod(r["spacing"])) / 1000, edge=None, **kw)
    return sides


if __name__ == "__main__":
    compare(sys.argv[2:], lambda r, kw, spine: run(r, kw, spine, "before"), lambda r, kw, spine: run(r, kw, spine, sys.argv[1]))
