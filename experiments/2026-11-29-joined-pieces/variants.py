"""``joined_lungs`` variants on the dumped random crops (runs/spine/dump_S.pkl, ``../2026-11-28-spine-midline/dump.py``),
each against its form before this experiment (the largest piece of each side's vote seeds the parts):
``variants.py VARIANT SEED ...``.

``top3`` (landed): the three largest pieces of each side's vote, every pair tried largest first, the first that passes
the tests taken (``sides.JOINED_SEEDS`` 3). ``all``: every piece. ``centre``: the largest pieces, and two parts that the
scanner's centre puts on their sides need not meet over less than ``JOINED_CONTACT`` of the smaller's section
(``centre1``: less than the whole section). ``clear``: the same where the network's vote is clear instead (the
smaller part 0.95 its side, the larger 0.75). Prints each lung (>= 10 mL) whose coarse-grid Dice moves by more than 0.01,
and the totals."""

import sys
from pathlib import Path

import numpy as np

from segpipe.infer import coarse
from segpipe.refine import sides as sides_mod

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "2026-11-28-spine-midline"))
from replay import compare  # noqa: E402

_apart = sides_mod.lungs_apart
VARIANT = ["before"]
CENTRE: list[float | None] = [None]
VOTE: list = [None]
CLEAR_SMALL = 0.95  # ``clear``: the smaller part's share of votes for its side


def apart_by_centre(a, b, aerated):  # type: ignore[no-untyped-def]
    """``centre``: ``lungs_apart``, or, where the scanner's centre puts the two parts on their sides (nine tenths of
    each), the same without the contact limit (``centre1``: with a limit of the whole section)."""
    if _apart(a, b, aerated):
        return True
    if VARIANT[0] == "clear":
        small, large = (a, b) if np.count_nonzero(a) < np.count_nonzero(b) else (b, a)
        vs, vl = float(VOTE[0][small].mean()), float(VOTE[0][large].mean())
        right_small = np.nonzero(small)[2].mean() < np.nonzero(large)[2].mean()
        if not ((1.0 - vs if right_small else vs) >= CLEAR_SMALL and (vl if right_small else 1.0 - vl) >= 0.75):
            return False
    elif VARIANT[0] not in ("centre", "centre1") or CENTRE[0] is None:
        return False
    else:
        ra, rb = sides_mod.centre_side(a, CENTRE[0]), sides_mod.centre_side(b, CENTRE[0])
        if not ra or not rb or ra == rb or (ra == 1) != (np.nonzero(a)[2].mean() < np.nonzero(b)[2].mean()):
            return False
    limit = sides_mod.JOINED_CONTACT
    sides_mod.JOINED_CONTACT = 1.0 if VARIANT[0] == "centre1" else 1e9
    try:
        return _apart(a, b, aerated)
    finally:
        sides_mod.JOINED_CONTACT = limit


sides_mod.lungs_apart = apart_by_centre


def run(r: dict, kw: dict, spine: float | None, variant: str) -> np.ndarray:
    VARIANT[0], CENTRE[0], VOTE[0] = variant, kw.get("centre_x"), kw.get("left_vote")
    sides_mod.JOINED_SEEDS = {"top3": 3, "all": 10_000}.get(variant, 1)
    sides, _, _ = coarse.name_sides(r["found"], spine=spine, voxel_ml=float(np.prod(r["spacing"])) / 1000, edge=None, **kw)
    return sides


if __name__ == "__main__":
    compare(sys.argv[2:], lambda r, kw, spine: run(r, kw, spine, "before"), lambda r, kw, spine: run(r, kw, spine, sys.argv[1]))
