"""The spine as the body's midline in a view that cuts the body (part of the ``sides`` step).

Where the field of view cuts the body, its middle is not the body's, and a find of the coarse
stage can hold one lung and a strip of the other, joined where they meet in front; the network's
side vote on such a strip is often right where the geometry of the view cannot tell. The spine
lies at the body's midline wherever the view shows it, wherever the patient lies on the table:
:func:`spine_x` finds it on the coarse grid; the side split cuts a find that holds both lungs
near it (:func:`segpipe.refine.sides.split_sides`), and :func:`part_at_spine` gives the part of a
find that the split gave one side beyond it to the other side where the network's vote agrees, or
where that part meets the rest of the find only at a junction line (two lungs lie apart across
the mediastinum; one lung that reaches across the spine's line touches across its whole
section), and keeps a find with little beyond the spine whole. The spine alone would cut lungs
that reach across its line, the vote alone splits single lungs.
"""

from __future__ import annotations

import numpy as np
from scipy import ndimage

from segpipe.refine._util import component_sizes, label
from segpipe.refine.columns import column_halves
from segpipe.refine.sides import CLEAR_VOTE, _side_of, _vote_side, at_view_side, centre_side, lungs_apart

__all__ = ["spine_x", "part_at_spine", "join_beyond_spine", "SPINE_BONE_HU", "SPINE_MIN_ML"]

SPINE_BONE_HU = (200.0, 150.0)  # bone on the 4 mm grid, tried in turn: a thin-boned patient's vertebrae at 4-5 mm
SPINE_CM2 = (5.0, 40.0)  # a vertebra's cross-section with its arch; a rib or a sternum's edge is smaller
SPINE_EXTENT_CM = (8.0, 10.0)  # at most this wide (x) and tall (y): not a scapula's or the pelvis's sweep
SPINE_SLICES = 0.25  # the spine is found where this share of the slices shows it ...
SPINE_ALONG_MM = 20.0  # ... within this distance (x) of the median: a column, not bones scattered across the view
SPINE_MIN_ML = 20.0  # a part of a find beyond the spine smaller than this stays with the find


def spine_x(hu_zyx: np.ndarray, spacing_xyz: tuple[float, ...], body: np.ndarray,
            bone_hu: tuple[float, ...] = SPINE_BONE_HU) -> float | None:
    """The spine's x index in a canonical ``(z, y, x)`` HU array (the coarse grid), or ``None``.

    Per axial slice the largest region of bone (above a threshold of ``bone_hu``, inside
    ``body``) of :data:`SPINE_CM2` and at most :data:`SPINE_EXTENT_CM` in the body's posterior
    half (canonical LPS: high y); the median of its centroid's x over the slices, where at least
    :data:`SPINE_SLICES` of them (and two) have one within :data:`SPINE_ALONG_MM` of it. The
    thresholds are tried in turn: the first (200 HU) passes over a contrast-filled aorta, the
    second finds the vertebrae of thin bone (an elderly patient's, at 4-5 mm voxels) where the
    first finds none."""
    for hu in bone_hu:
        x = _spine_at(hu_zyx, spacing_xyz, body, hu)
        if x is not None:
            return x
    return None


def _spine_at(hu_zyx: np.ndarray, spacing_xyz: tuple[float, ...], body: np.ndarray, bone_hu: float) -> float | None:
    """:func:`spine_x` with one bone threshold."""
    pixel_cm2 = spacing_xyz[0] * spacing_xyz[1] / 100.0
    xs = []
    for z in range(hu_zyx.shape[0]):
        rows = np.flatnonzero(body[z].any(axis=1))
        if rows.size == 0:
            continue
        labels, n = ndimage.label((hu_zyx[z] > bone_hu) & body[z], structure=np.ones((3, 3), bool))
        posterior = (rows[0] + rows[-1]) / 2.0
        best: tuple[float, float] | None = None
        for k, box in enumerate(ndimage.find_objects(labels), 1):
            piece = labels[box] == k
            area = float(piece.sum()) * pixel_cm2
            wide = (box[1].stop - box[1].start) * spacing_xyz[0] / 10.0
            tall = (box[0].stop - box[0].start) * spacing_xyz[1] / 10.0
            if not (SPINE_CM2[0] <= area <= SPINE_CM2[1] and wide <= SPINE_EXTENT_CM[0] and tall <= SPINE_EXTENT_CM[1]):
                continue
            cy, cx = ndimage.center_of_mass(piece)
            if cy + box[0].start >= posterior and (best is None or area > best[0]):
                best = (area, cx + box[1].start)
        if best is not None:
            xs.append(best[1])
    needed = max(2, SPINE_SLICES * hu_zyx.shape[0])
    if len(xs) < needed:
        return None
    x = float(np.median(xs))
    along = np.count_nonzero(np.abs(np.asarray(xs) - x) * spacing_xyz[0] <= SPINE_ALONG_MM)
    return x if along >= needed else None


def part_at_spine(found: np.ndarray, sides: np.ndarray, spine: float, left_vote: np.ndarray,
                  voxel_ml: float, aerated: np.ndarray | None = None, centre_x: float | None = None) -> tuple[np.ndarray, float]:
    """``sides`` (1 right, 2 left) with each connected find of ``found`` parted at the spine's x
    index ``spine``. Its part beyond the spine (on the side that holds less of the find):

    - under :data:`SPINE_MIN_ML`: the find is one lung, of the side where it lies, even where the
      side split parted it (a find that reaches the spine only at its edge is cut near its own
      middle, not the body's, and the network's vote can call its two halves two lungs), or
      where it was named wholly the other side and nine tenths of it lie on its side of the
      scanner's centre ``centre_x`` too (:func:`segpipe.refine.sides.centre_side`: two
      geometric cues against the network's vote on a view that shows one lung);
    - :data:`SPINE_MIN_ML` or more, where the side split gave the find one side (less than
      :data:`SPINE_MIN_ML` of the other): given to that side where either the network's
      ``left_vote`` puts :data:`segpipe.refine.sides.CLEAR_VOTE` of it there, or, with ``aerated``
      (boolean, lung density), it meets the rest of the find only at a junction line, across the
      mediastinum (:func:`segpipe.refine.sides.lungs_apart`: in a view over one lung, the
      network's vote can call a strip of the other lung beside it the same side; one lung that
      reaches across the spine's line touches across its whole section).

    Returns the new sides and the mL given to the other side beyond the spine."""
    out = sides.copy()
    labels, n = label(found)
    on_left = np.arange(found.shape[2])[None, None, :] > spine  # canonical LPS: x grows to the patient's left
    moved = 0
    for k in range(1, n + 1):
        piece = labels == k
        left = piece & on_left
        side = 2 if 2 * np.count_nonzero(left) < np.count_nonzero(piece) else 1  # the side beyond the spine
        beyond = left if side == 2 else piece & ~on_left
        named = np.bincount(sides[piece], minlength=3)  # voxels of the find named none, right, left
        parted = min(named[1], named[2]) * voxel_ml >= SPINE_MIN_ML
        if np.count_nonzero(beyond) * voxel_ml < SPINE_MIN_ML:
            wholly_beyond_side = named[side] > 0 and named[3 - side] == 0
            if parted or (wholly_beyond_side and centre_side(piece, centre_x) == 3 - side):
                out[piece & (sides > 0)] = 3 - side
            continue
        if parted:
            continue  # the side split has parted this find into two lungs already
        vote = float(left_vote[beyond].mean())
        if not ((vote if side == 2 else 1.0 - vote) >= CLEAR_VOTE or (aerated is not None and lungs_apart(beyond, piece & ~beyond, aerated))):
            beyond = _half_apart(piece, spine, side, voxel_ml, aerated)
        change = beyond & (sides > 0) & (sides != side)
        out[change] = side
        moved += int(np.count_nonzero(change))
    return out, moved * voxel_ml


def _half_apart(piece: np.ndarray, spine: float, side: int, voxel_ml: float, aerated: np.ndarray | None) -> np.ndarray:
    """The half of ``piece`` beyond its thinnest column near the spine (x index ``spine``,
    anywhere inside the find: :func:`segpipe.refine.columns.column_halves`) on ``side``, where
    nine tenths of it lie on that side of the spine, it holds :data:`SPINE_MIN_ML` or more and it
    meets the rest only at a junction line (:func:`segpipe.refine.sides.lungs_apart`, with
    ``aerated``); else nothing. Where the lung beside the spine reaches across its line, the
    strip of the other lung meets it at a neck beyond the line, not on it."""
    nothing = np.zeros(piece.shape, bool)
    if aerated is None:
        return nothing
    far = piece & (column_halves(piece, centre=spine, anywhere=True) == side)
    if np.count_nonzero(far) * voxel_ml < SPINE_MIN_ML or _side_of(far, spine) != side or not lungs_apart(far, piece & ~far, aerated):
        return nothing
    return far


def join_beyond_spine(found: np.ndarray, sides: np.ndarray, spine: float, left_vote: np.ndarray,
                      edge: np.ndarray | None = None) -> np.ndarray:
    """``sides`` (1 right, 2 left) with each find of ``found`` that the side step left without a
    side, and that reaches the view's side edge (:func:`segpipe.refine.sides.at_view_side`: an
    in-plane face of the array or ``edge``, the scanner's circle), given the side of the spine's
    x index ``spine`` on which nine tenths of it lie, where the largest find lies nine tenths on
    the other side of the spine and the network's ``left_vote`` does not clearly
    (:data:`segpipe.refine.sides.CLEAR_VOTE`) put the find on the largest one's side. In a view
    over one lung, the edge of the other lung that the view's side cuts lies beyond the spine: a
    find much smaller than the whole lung beside it, or several, with the network's vote often
    unsure there; the side split keeps only two finds of a size. A find inside the view (gas
    below a base at the scan's end) gets no side from this. Returns a new array."""
    out = sides.copy()
    labels, n = label(found)
    if n < 2:
        return out
    sizes = component_sizes(labels, n)
    sizes[0] = 0
    lung_side = _side_of(labels == int(np.argmax(sizes)), spine)
    if not lung_side:
        return out
    for k in range(1, n + 1):
        piece = labels == k
        if (out[piece].any() or _side_of(piece, spine) != 3 - lung_side or _vote_side(piece, left_vote) == lung_side
                or not at_view_side(piece, edge)):
            continue
        out[piece] = 3 - lung_side
    return out
