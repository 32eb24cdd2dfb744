"""Side-step variants on the dumped random crops (runs/spine/dump_S.pkl, ``../2026-11-28-spine-midline/dump.py``), each
against the side step before it (``segpipe.infer.coarse.name_sides`` with ``before``, without the scanner's circle: the
dumps do not hold it): ``variants.py VARIANT SEED ...``.

VARIANT ``whole`` (as landed): a find that the side split parts into two lungs, in a view that cuts the body where the spine shows,
is one lung of the side of the spine where it lies where less than ``SPINE_MIN_ML`` of it lies beyond the spine (the
column split cuts near the spine only where the spine lies well inside the find); ``whole_share``: the same where nine
tenths of it lie on one side. Prints each lung (>= 10 mL) whose coarse-grid Dice moves by more than 0.01, and the
totals.
``halfapart`` (with ``whole``): in a find still of one side, the half beyond the column cut near the spine goes
to the other side where nine tenths of it lie beyond the spine, it holds ``SPINE_MIN_ML`` or more and it meets the rest
only at a junction line (``spine._half_apart``); ``halfband`` (as landed): the same with that cut looked for near the spine wherever
it lies inside the find. ``pairspine`` (with ``halfband``): two finds that lie nine tenths on one side of the spine and
that the vote calls that side are one lung's pieces (the ``_pieces_of_one_lung`` test with the spine for the view's
middle). ``spineside`` (with ``halfband``): a find with less than ``SPINE_MIN_ML`` beyond the spine takes the side where it
lies, against the vote; ``spinecentre``: the same where nine tenths of it lie on that side of the scanner's centre too;
``spineflip`` (as landed): ``spinecentre`` only for a find named wholly the other side. ``BASE=VARIANT`` compares against
another variant than ``before``. ``spinenear`` (with ``spineflip``): a spine found more than 70 mm from the scanner's
centre is no spine; ``centrewhole`` (with ``spineflip``): a lone find wholly on one side of the scanner's centre is that
side's lung against the vote."""

import os
import sys
from pathlib import Path

import numpy as np

from segpipe.infer import coarse
from segpipe.refine import columns
from segpipe.refine import sides as sides_mod
from segpipe.refine import spine as spine_mod
from segpipe.refine._util import label
from segpipe.refine.spine import SPINE_MIN_ML

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "2026-11-28-spine-midline"))
from replay import compare  # noqa: E402

_part_at_spine = spine_mod.part_at_spine


def before(found, sides, spine, left_vote, voxel_ml, aerated=None, centre_x=None):  # type: ignore[no-untyped-def]
    """``part_at_spine`` as before this experiment: a find that the side split parted stays parted."""
    out, moved = _part_at_spine(found, sides, spine, left_vote, voxel_ml, aerated)
    labels, n = label(found)
    for k in range(1, n + 1):
        piece = labels == k
        if min(np.count_nonzero(piece & (sides == 1)), np.count_nonzero(piece & (sides == 2))) * voxel_ml >= SPINE_MIN_ML:
            out[piece] = sides[piece]
    return out, moved


def share_at_spine(found, sides, spine, left_vote, voxel_ml, aerated=None, centre_x=None):  # type: ignore[no-untyped-def]
    """``whole_share``: a parted find is one lung where nine tenths of it lie on one side of the spine."""
    out = sides.copy()
    labels, n = label(found)
    on_left = np.arange(found.shape[2])[None, None, :] > spine
    for k in range(1, n + 1):
        piece = labels == k
        if min(np.count_nonzero(piece & (sides == 1)), np.count_nonzero(piece & (sides == 2))) * voxel_ml < SPINE_MIN_ML:
            continue
        share = np.count_nonzero(piece & on_left) / np.count_nonzero(piece)
        if share > 0.9 or share < 0.1:
            out[piece & (out > 0)] = 2 if share > 0.9 else 1
    return before(found, out, spine, left_vote, voxel_ml, aerated)


_half_apart = spine_mod._half_apart
_column_halves = spine_mod.column_halves


def first_cut(mask: np.ndarray, turn: float = 0.0, centre: float | None = None, anywhere: bool = False) -> np.ndarray:
    """``halfapart``: the cut of ``_half_apart`` as the side split's own (``columns.split_single``: near the spine only
    where it lies 15 % of the find's width inside it)."""
    return columns.split_single(mask, centre)


_pieces = sides_mod._pieces_of_one_lung
SPINE: list[float | None] = [None]


def pieces_by_spine(labels, order, a, b, midline_x, left_vote, outside, flank_reach):  # type: ignore[no-untyped-def]
    """``pairspine``: ``sides._pieces_of_one_lung``, then the same test with the spine for the midline where it shows."""
    out = _pieces(labels, order, a, b, midline_x, left_vote, outside, flank_reach)
    if out is None and SPINE[0] is not None and left_vote is not None:
        out = _pieces(labels, order, a, b, SPINE[0], left_vote, None, flank_reach)
    return out


def spine_side(found, sides, spine, left_vote, voxel_ml, aerated=None, centre_x=None):  # type: ignore[no-untyped-def]
    """``spineside`` (with ``halfband``): a find of one side (or none) with less than SPINE_MIN_ML beyond the spine takes
    the side where it lies, against the network's vote (``MIN_ML``: only finds of that many mL or more)."""
    out, moved = _part_at_spine(found, sides, spine, left_vote, voxel_ml, aerated)
    labels, n = label(found)
    on_left = np.arange(found.shape[2])[None, None, :] > spine
    for k in range(1, n + 1):
        piece = labels == k
        size = np.count_nonzero(piece)
        if size * voxel_ml < MIN_ML[0] or not out[piece].any():
            continue
        left = np.count_nonzero(piece & on_left)
        side = 2 if 2 * left > size else 1
        if (size - left if side == 2 else left) * voxel_ml < SPINE_MIN_ML and (CENTRE[0] is None or
                                                                               sides_mod.centre_side(piece, CENTRE[0]) == side):
            out[piece & (out > 0)] = side
    return out, moved


MIN_ML = [0.0]
CENTRE: list[float | None] = [None]  # ``spinecentre``: the scanner's centre must put nine tenths of the find on that side too


_one_lung_side = sides_mod._one_lung_side


def centre_whole(single, halves, midline_x, left_vote, view_side, flank=0, centre_x=None):  # type: ignore[no-untyped-def]
    """``centrewhole`` (with ``spineflip``): a lone find that lies wholly on one side of the scanner's centre, in a view
    that cuts the body, is that side's lung even where the network's vote names the other."""
    side, cue = _one_lung_side(single, halves, midline_x, left_vote, view_side, flank, centre_x)
    beyond = sides_mod.beyond_centre(single, centre_x) if view_side else 0
    return (beyond, "the scanner's centre") if side and beyond and beyond != side else (side, cue)


SPINE_NEAR_MM = 70.0  # ``spinenear``: a spine found farther than this from the scanner's centre (x = 0) is not the spine


def run(r: dict, kw: dict, spine: float | None, variant: str) -> np.ndarray:
    if variant == "spinenear" and spine is not None and kw.get("centre_x") is not None:
        spine = None if abs(spine - kw["centre_x"]) * r["spacing"][0] > SPINE_NEAR_MM else spine
    MIN_ML[0] = 50.0 if variant == "spineside50" else 0.0
    CENTRE[0] = kw.get("centre_x") if variant == "spinecentre" else None
    coarse.part_at_spine = {"before": before, "whole_share": share_at_spine, "spineside": spine_side,
                            "spineside50": spine_side, "spinecentre": spine_side}.get(variant, _part_at_spine)
    spine_mod._half_apart = lambda piece, *a: np.zeros(piece.shape, bool) if variant in ("before", "whole", "whole_share") else _half_apart(piece, *a)
    spine_mod.column_halves = first_cut if variant == "halfapart" else _column_halves
    spine_mod.centre_side = sides_mod.centre_side if variant in ("spineflip", "spinenear", "centrewhole") else lambda *a: 0  # the flip needs the centre
    SPINE[0] = spine
    sides_mod._one_lung_side = centre_whole if variant == "centrewhole" else _one_lung_side
    sides_mod._pieces_of_one_lung = pieces_by_spine if variant == "pairspine" else _pieces
    sides, _, _ = coarse.name_sides(r["found"], spine=spine, voxel_ml=float(np.prod(r["spacing"])) / 1000, edge=None, **kw)
    return sides


if __name__ == "__main__":
    variant = sys.argv[1]
    BASE = os.environ.get("BASE", "before")  # the variant to compare against
    compare(sys.argv[2:], lambda r, kw, spine: run(r, kw, spine, BASE), lambda r, kw, spine: run(r, kw, spine, variant))
