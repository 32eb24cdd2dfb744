"""The side split of one find (``columns.split_single``) followed by a flood from the two halves' cores, on the dumped
random crops (runs/spine/dump_S.pkl, ``../2026-11-28-spine-midline/dump.py``), against the split before this experiment
(the cut looked for near the find's middle where no spine shows): ``variants.py VARIANT SEED ...``.

``flood``: the column split's halves, then each voxel of the find to the half whose core reaches it across the least
narrowing (``scipy.ndimage.watershed_ift`` on the find's depth, the cores the voxels of each half at least ``CORE``
voxels from the other half): the boundary follows the narrowest junction in 3D instead of a column per slice, and a
slice that holds one lung is not cut. ``CORE`` (env, default 3). ``votecut`` (landed): in a view that cuts the body
where no spine shows, the column split looks for its cut near the x at which one cut across the whole find best parts
the network's vote (``columns.vote_column``), instead of near the find's middle; in the package with the gap test
(``votegap``). ``votegap``, ``voteapart``, ``votemin``: the vote column's halves kept only where no aerated lung lies
between them, where they pass ``lungs_apart``, where the smaller holds ``min_lung`` (else the middle); ``voteany``: the
cut looked for near the vote column wherever it lies inside the find; ``votemid``: the vote column at the middle of its
stretch of least errors. Prints each lung (>= 10 mL) whose coarse-grid Dice
moves by more than 0.01, and the totals."""

import os
import sys
from pathlib import Path

import numpy as np
from scipy import ndimage

from segpipe.infer import coarse
from segpipe.refine import columns as columns_mod
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


GUARD: list = [None, 0]  # the crop's aerated mask and min_lung, for the guarded variants
VOTED: list = [None]  # the last vote column, to tell a split near it from one near the spine


def voted(column):  # type: ignore[no-untyped-def]
    def at(mask, left_vote):  # type: ignore[no-untyped-def]
        VOTED[0] = column(mask, left_vote)
        return VOTED[0]
    return at


def mid_column(mask: np.ndarray, left_vote: np.ndarray) -> float:
    """``votemid``: ``vote_column`` at the middle of the stretch of columns where the vote's errors are least."""
    xs = np.nonzero(mask)[2]
    votes = left_vote[mask]
    left = np.bincount(xs[votes], minlength=mask.shape[2])
    right = np.bincount(xs[~votes], minlength=mask.shape[2])
    errors = np.concatenate([[0], np.cumsum(left)]) + np.concatenate([np.cumsum(right[::-1])[::-1], [0]])
    best = np.flatnonzero(errors == errors.min())
    return float(best[0] + best[-1]) / 2.0 - 0.5


def split(mask, centre=None):  # type: ignore[no-untyped-def]
    if VARIANT[0] == "voteany" and centre is not None and centre == VOTED[0]:
        halves = columns_mod.column_halves(mask, centre=centre, anywhere=True)
    else:
        halves = _split(mask, centre)
    if VARIANT[0] in ("votegap", "voteapart", "votemin") and centre is not None and centre == VOTED[0] and GUARD[0] is not None:
        a, b = halves == 1, halves == 2
        if a.any() and b.any():
            small = a if np.count_nonzero(a) < np.count_nonzero(b) else b
            ok = True
            if VARIANT[0] == "votegap":
                gap = ~(a | b) & (ndimage.distance_transform_edt(~a) <= sides_mod.JOINED_GAP) & (ndimage.distance_transform_edt(~b) <= sides_mod.JOINED_GAP)
                ok = not (gap.any() and GUARD[0][gap].mean() >= sides_mod.JOINED_AERATED)
            elif VARIANT[0] == "voteapart":
                ok = sides_mod.lungs_apart(a, b, GUARD[0])
            else:
                ok = np.count_nonzero(small) >= GUARD[1]
            if not ok:
                return _split(mask, None)
    return flooded(mask, halves) if VARIANT[0] == "flood" else halves


sides_mod.split_single = split


def run(r: dict, kw: dict, spine: float | None, variant: str) -> np.ndarray:
    VARIANT[0] = variant
    GUARD[0], GUARD[1] = kw.get("aerated"), kw.get("min_lung", 0)
    column = mid_column if variant == "votemid" else _vote_column
    uses_vote = variant in ("votecut", "votemid", "voteany", "votegap", "voteapart", "votemin")
    VOTED[0] = None
    sides_mod.vote_column = voted(column) if uses_vote else lambda mask, left_vote: None
    sides, _, _ = coarse.name_sides(r["found"], spine=spine, voxel_ml=float(np.prod(r["spacing"])) / 1000, edge=None, **kw)
    return sides


if __name__ == "__main__":
    compare(sys.argv[2:], lambda r, kw, spine: run(r, kw, spine, "before"), lambda r, kw, spine: run(r, kw, spine, sys.argv[1]))
