"""``joined_lungs`` variants on the dumped random crops (runs/spine/dump_S.pkl, ``../2026-11-28-spine-midline/dump.py``),
each against the side step as landed (``segpipe.infer.coarse.name_sides``): ``variants.py VARIANT SEED ...``.

``before``: as landed (the largest piece of each side's vote seeds the two parts). ``top3``: the three largest pieces of
each side's vote, every pair tried largest first, the first that passes the tests taken. ``seed1/4``: every piece of at
least a quarter of ``min_lung`` voxels (and the largest), the same way. ``centre``: the largest pieces, and two parts
that the scanner's centre puts on their sides need not meet over less than ``JOINED_CONTACT`` of the smaller's section
(``centre1``: less than the whole section). Prints each lung (>= 10 mL) whose coarse-grid
Dice moves by more than 0.01, and the totals."""

import sys
from pathlib import Path

import numpy as np
from scipy import ndimage

from segpipe.infer import coarse
from segpipe.refine import sides as sides_mod
from segpipe.refine._util import component_sizes, label

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "2026-11-28-spine-midline"))
from replay import compare  # noqa: E402

_joined = sides_mod.joined_lungs
VARIANT = ["before"]


def _pieces(mask: np.ndarray, least: int, most: int) -> list[np.ndarray]:
    labels, n = label(mask)
    if n == 0:
        return []
    sizes = component_sizes(labels, n)
    sizes[0] = 0
    order = [int(i) for i in np.argsort(sizes)[::-1] if sizes[i] > 0]
    return [labels == i for k, i in enumerate(order[:most]) if k == 0 or sizes[i] >= least]


CENTRE: list[float | None] = [None]
_apart = sides_mod.lungs_apart


def apart_by_centre(a, b, aerated):  # type: ignore[no-untyped-def]
    """``centre``: two parts that the scanner's centre puts on their sides (nine tenths of each) need not touch over
    less than ``JOINED_CONTACT`` of the smaller's section (``centre1``: over less than the whole section)."""
    if _apart(a, b, aerated):
        return True
    if VARIANT[0] not in ("centre", "centre1") or CENTRE[0] is None:
        return False
    ra, rb = sides_mod.centre_side(a, CENTRE[0]), sides_mod.centre_side(b, CENTRE[0])
    if not ra or not rb or ra == rb or (ra == 1) != (np.nonzero(a)[2].mean() < np.nonzero(b)[2].mean()):
        return False
    limit = sides_mod.JOINED_CONTACT
    sides_mod.JOINED_CONTACT = 1.0 if VARIANT[0] == "centre1" else 1e9
    try:
        return _apart(a, b, aerated)
    finally:
        sides_mod.JOINED_CONTACT = limit


def joined_pieces(single, left_vote, aerated, min_lung):  # type: ignore[no-untyped-def]
    if VARIANT[0] in ("before", "centre", "centre1"):
        sides_mod.lungs_apart = apart_by_centre
        try:
            return _joined(single, left_vote, aerated, min_lung)
        finally:
            sides_mod.lungs_apart = _apart
    least, most = (0, 3) if VARIANT[0] == "top3" else (max(min_lung, 4) // 4, 1000)
    lefts, rights = _pieces(single & left_vote, least, most), _pieces(single & ~left_vote, least, most)
    pairs = sorted(((a, b) for a in lefts for b in rights), key=lambda p: -(np.count_nonzero(p[0]) + np.count_nonzero(p[1])))
    for left, right in pairs:
        if np.nonzero(right)[2].mean() >= np.nonzero(left)[2].mean():
            continue
        nearer_left = ndimage.distance_transform_edt(~left) < ndimage.distance_transform_edt(~right)
        a, b = single & nearer_left, single & ~nearer_left
        small = a if np.count_nonzero(a) < np.count_nonzero(b) else b
        if np.count_nonzero(small) < max(min_lung, 1) or not sides_mod.lungs_apart(a, b, aerated):
            continue
        return np.where(single, np.where(nearer_left, np.uint8(2), np.uint8(1)), np.uint8(0))
    return None


sides_mod.joined_lungs = joined_pieces


def run(r: dict, kw: dict, spine: float | None, variant: str) -> np.ndarray:
    VARIANT[0] = variant
    CENTRE[0] = kw.get("centre_x")
    sides, _, _ = coarse.name_sides(r["found"], spine=spine, voxel_ml=float(np.prod(r["spacing"])) / 1000, edge=None, **kw)
    return sides


if __name__ == "__main__":
    compare(sys.argv[2:], lambda r, kw, spine: run(r, kw, spine, "before"), lambda r, kw, spine: run(r, kw, spine, sys.argv[1]))
