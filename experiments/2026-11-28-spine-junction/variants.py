"""Side-step variants on the dumped random crops (runs/spine/dump_S.pkl, ``../2026-11-28-spine-midline/dump.py``), each
against the side step before this experiment (``part_at_spine`` by the vote alone): ``variants.py VARIANT SEED ...``.

VARIANT ``edge``: a further piece at an in-plane face joins the lung of its side that comes within 2 voxels of the same
face; ``onecore``: a single find that the split parts into two lungs, in a view that cuts the body, is one lung where it
does not peel into two cores (``columns.two_cores``) and nine tenths of it lie on one side of both the spine and the
scanner's centre; ``spineband``: the cut looked for near the spine wherever it lies inside the find; ``apart``: the part
beyond the spine also moves where it meets the rest at a junction line (written here); ``apart2``: the same as landed
(``part_at_spine`` with ``aerated``); ``beyond``, ``beyondface``: ``join_beyond_spine``'s first forms, ``beyond2`` as
landed; ``both``: ``apart2`` and ``beyond2``; ``pairspine``: ``both``, and two finds on one side of the spine as one
lung's pieces. Prints each lung (>= 10 mL) whose coarse-grid Dice moves by more than 0.01, and the totals."""

import sys
from pathlib import Path

import numpy as np

from segpipe.refine import columns
from segpipe.refine import sides as sides_mod
from segpipe.refine._util import label
from segpipe.refine.columns import two_cores
from segpipe.refine.sides import _side_of, centre_side, join_cut_pieces, piece_side, split_sides
from segpipe.refine.spine import part_at_spine

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "2026-11-28-spine-midline"))
from replay import compare  # noqa: E402


def onecore(found: np.ndarray, sides: np.ndarray, kw: dict, spine: float | None) -> np.ndarray:
    if spine is None or not kw.get("view_side"):
        return sides
    out = sides.copy()
    labels, n = label(found)
    for i in range(1, n + 1):
        comp = labels == i
        if set(np.unique(out[comp])) - {0} != {1, 2}:
            continue
        side = centre_side(comp, kw.get("centre_x"))
        if side and _side_of(comp, spine) == side and two_cores(comp) is None:
            out[comp] = side
    return out


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
        touch = [piece[:, 0].any(), piece[:, -1].any(), piece[:, :, 0].any(), piece[:, :, -1].any()]
        if not any(touch):
            continue
        side = piece_side(piece, midline_x, left_vote)
        if not side or not (out == side).any():
            continue
        lung_faces = faces(out == side)
        if any(t and lf.any() for t, lf in zip(touch, lung_faces)):
            out[piece] = side
    return out


_column_halves = columns.column_halves


def spine_band(mask: np.ndarray, turn: float = 0.0, centre: float | None = None) -> np.ndarray:
    """``columns.column_halves`` with the cut looked for near the spine wherever it lies inside the find's extent."""
    if turn or centre is None:
        return _column_halves(mask, turn, centre)
    xs = np.nonzero(mask.any(axis=(0, 1)))[0]
    lo_u, hi_u = int(xs.min()), int(xs.max())
    half = columns.COLUMN_SEARCH * (hi_u - lo_u)
    if lo_u + half <= centre <= hi_u - half or not lo_u <= centre <= hi_u:
        return _column_halves(mask, turn, centre)
    out = np.zeros(mask.shape, np.uint8)
    lo, hi = max(int(centre - half), lo_u), min(int(centre + half) + 1, hi_u + 1)
    for z in range(mask.shape[0]):
        s = mask[z]
        if not s.any():
            continue
        profile = np.bincount(np.nonzero(s)[1], minlength=hi_u + 1).astype(float)
        cut = lo + int(np.argmin(profile[lo:hi]))
        out[z][:, :cut][s[:, :cut]] = 1
        out[z][:, cut:][s[:, cut:]] = 2
    return out


def apart_at_spine(found: np.ndarray, sides: np.ndarray, spine: float, kw: dict, voxel_ml: float) -> np.ndarray:
    """Where ``part_at_spine`` moved nothing: the part of a one-sided find beyond the spine (20 mL or more) goes to that side
    where it touches the rest over less than JOINED_CONTACT of its largest sagittal section and the gap between them is not
    aerated (two lungs at a junction line; one lung that crosses the midline touches across its whole section)."""
    from scipy import ndimage

    from segpipe.refine.sides import JOINED_AERATED, JOINED_CONTACT, JOINED_GAP
    out = sides.copy()
    labels, n = label(found)
    on_left = np.arange(found.shape[2])[None, None, :] > spine
    for k in range(1, n + 1):
        piece = labels == k
        if min(np.count_nonzero(piece & (sides == 1)), np.count_nonzero(piece & (sides == 2))) * voxel_ml >= 20:
            continue
        left = piece & on_left
        side = 2 if 2 * np.count_nonzero(left) < np.count_nonzero(piece) else 1
        beyond = left if side == 2 else piece & ~on_left
        if np.count_nonzero(beyond) * voxel_ml < 20 or (out[beyond] == side).mean() > 0.5:
            continue
        rest = piece & ~beyond
        contact = sum(int(np.count_nonzero(np.moveaxis(rest, ax, 0)[1:] & np.moveaxis(beyond, ax, 0)[:-1])
                          + np.count_nonzero(np.moveaxis(rest, ax, 0)[:-1] & np.moveaxis(beyond, ax, 0)[1:])) for ax in range(3))
        section = beyond.sum(axis=(0, 1)).max()
        if contact >= JOINED_CONTACT * section:
            continue
        gap = ~piece & (ndimage.distance_transform_edt(~rest) <= JOINED_GAP) & (ndimage.distance_transform_edt(~beyond) <= JOINED_GAP)
        if gap.any() and kw["aerated"][gap].mean() >= JOINED_AERATED:
            continue
        out[beyond & (out > 0)] = side
    return out


_opposite = sides_mod._opposite


def opposite_spine(a, b, midline_x, left_vote, *, two=False):  # type: ignore[no-untyped-def]
    """``sides._opposite``, or, in a view that cuts the body where the spine shows, the two lie on either side of it
    (nine tenths of each) and the vote does not clearly put either on the other side."""
    if _opposite(a, b, midline_x, left_vote, two=two):
        return True
    spine = SPINE[0]
    if spine is None:
        return False
    a_side, b_side = sides_mod._side_of(a, spine), sides_mod._side_of(b, spine)
    return ({a_side, b_side} == {1, 2} and left_vote is not None and sides_mod._vote_side(a, left_vote) != 3 - a_side
            and sides_mod._vote_side(b, left_vote) != 3 - b_side)


SPINE: list[float | None] = [None]
FACE = [False]


def beyond_spine_finds(found: np.ndarray, sides: np.ndarray, spine: float, left_vote: np.ndarray) -> np.ndarray:
    """A find the side step left without a side takes the side of the spine on which nine tenths of it lie, where the
    vote does not clearly put it on the other and the largest find lies nine tenths on the other side of the spine."""
    out = sides.copy()
    labels, n = label(found)
    sizes = np.bincount(labels.ravel(), minlength=n + 1)
    sizes[0] = 0
    largest = labels == int(np.argmax(sizes))
    big_side = sides_mod._side_of(largest, spine)
    if not big_side:
        return out
    for i in range(1, n + 1):
        piece = labels == i
        if out[piece].any():
            continue
        side = sides_mod._side_of(piece, spine)
        inplane = bool(piece[:, 0].any() or piece[:, -1].any() or piece[:, :, 0].any() or piece[:, :, -1].any())
        if side == 3 - big_side and sides_mod._vote_side(piece, left_vote) != big_side and (inplane or not FACE[0]):
            out[piece] = side
    return out


_pieces = sides_mod._pieces_of_one_lung


def pieces_by_spine(labels, order, a, b, midline_x, left_vote, outside, flank_reach):  # type: ignore[no-untyped-def]
    """``sides._pieces_of_one_lung``, then the same test with the spine for the midline where it shows."""
    out = _pieces(labels, order, a, b, midline_x, left_vote, outside, flank_reach)
    if out is None and SPINE[0] is not None and left_vote is not None:
        out = _pieces(labels, order, a, b, SPINE[0], left_vote, None, flank_reach)
    return out


def coarse(r: dict, kw: dict, spine: float | None, variant: str) -> np.ndarray:
    sides_mod._pieces_of_one_lung = pieces_by_spine if variant == "pairspine" else _pieces
    sides_mod._opposite = opposite_spine if variant == "oppspine" else _opposite
    SPINE[0] = spine
    columns.column_halves = spine_band if variant == "spineband" else _column_halves
    sides = split_sides(r["found"], **kw, spine_x=spine)
    if variant == "onecore":
        sides = onecore(r["found"], sides, kw, spine)
    if spine is not None:
        sides, _ = part_at_spine(r["found"], sides, spine, kw["left_vote"], float(np.prod(r["spacing"])) / 1000,
                                 kw["aerated"] if variant in ("apart2", "both", "pairspine") else None)
        if variant == "apart":
            sides = apart_at_spine(r["found"], sides, spine, kw, float(np.prod(r["spacing"])) / 1000)
    sides = join_cut_pieces(r["found"], sides, kw["midline_x"], kw["left_vote"])
    if variant == "edge":
        sides = join_face_pieces(r["found"], sides, kw["midline_x"], kw["left_vote"])
    if variant in ("both", "beyond2", "pairspine") and spine is not None:
        from segpipe.refine.spine import join_beyond_spine
        sides = join_beyond_spine(r["found"], sides, spine, kw["left_vote"])
    FACE[0] = variant == "beyondface"
    if variant in ("beyond", "beyondface") and spine is not None:
        sides = beyond_spine_finds(r["found"], sides, spine, kw["left_vote"])
    return sides


if __name__ == "__main__":
    variant = sys.argv[1]
    compare(sys.argv[2:], lambda r, kw, spine: coarse(r, kw, spine, "landed"), lambda r, kw, spine: coarse(r, kw, spine, variant))
