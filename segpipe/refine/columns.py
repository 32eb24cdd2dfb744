"""The column split of one coarse find into the two lungs it holds (part of the ``sides`` step).

Two lungs that touch in front (or behind) on the 4 mm grid are one find of the coarse stage;
:func:`split_single` parts it per axial slice at its thinnest column near the middle (or near
the spine, in a view that cuts the body), the columns square to the line between the two
lungs' cores where a patient lies turned in the scanner. :func:`segpipe.refine.sides.split_sides`
decides whether a find is two lungs at all.
"""

from __future__ import annotations

import numpy as np
from scipy import ndimage

from segpipe.refine._util import component_sizes, label

__all__ = ["split_single", "column_halves", "vote_column", "two_cores", "junction_turn", "COLUMN_SEARCH"]


COLUMN_SEARCH = 0.15  # the thinnest column is looked for within this share of the extent each side of its middle (or the spine)


def column_halves(mask: np.ndarray, turn: float = 0.0, centre: float | None = None, anywhere: bool = False) -> np.ndarray:
    """Split one lung component into right (1, low x) and left (2) per axial slice at the
    thinnest column near the middle of the mask's x extent (:data:`COLUMN_SEARCH`), or near
    x index ``centre`` (the spine's, in a view that cuts the body) where it lies that far
    inside the extent (``anywhere``: anywhere inside it, the search kept inside it). With
    ``turn`` (radians), the columns are turned by it in the axial plane: the cut runs square to
    the line at that angle from x (a patient turned in the scanner), near the middle."""
    out = np.zeros(mask.shape, np.uint8)
    if turn:
        y, x = np.mgrid[0:mask.shape[1], 0:mask.shape[2]]
        across = np.rint(x * np.cos(turn) + y * np.sin(turn)).astype(np.int64)
        across -= across.min()
        centre = None
    else:
        across = np.broadcast_to(np.arange(mask.shape[2]), mask.shape[1:])
    extent = across[mask.any(axis=0)]
    lo_u, hi_u = int(extent.min()), int(extent.max())
    half = COLUMN_SEARCH * (hi_u - lo_u)
    inside = half if not anywhere else 0.0
    middle = centre if centre is not None and lo_u + inside <= centre <= hi_u - inside else (lo_u + hi_u) // 2
    mid_default = int(middle)
    lo, hi = max(int(middle - half), lo_u), min(int(middle + half) + 1, hi_u + 1)
    for z in range(mask.shape[0]):
        s = mask[z]
        if not s.any():
            continue
        profile = np.bincount(across[s], minlength=hi_u + 1).astype(float)
        window = profile[lo:hi]
        cut = lo + int(np.argmin(window)) if window.size else mid_default
        out[z][s & (across < cut)] = 1
        out[z][s & (across >= cut)] = 2
    return out


def vote_column(mask: np.ndarray, left_vote: np.ndarray) -> float:
    """The x index (between two columns) at which one cut across the whole of ``mask`` best
    parts the network's per-voxel ``left_vote``: the fewest voxels voting left below it and
    right above it. In a view that cuts the body, where the find's middle is not the body's,
    this is where the two lungs meet by the vote. Where all of it votes one side, the column
    lies outside its x extent (before its first column, or after its last), and
    :func:`column_halves` looks near the middle instead, as it does for any ``centre`` less than
    :data:`COLUMN_SEARCH` of the extent inside it."""
    xs = np.nonzero(mask)[2]
    votes = left_vote[mask]
    left = np.bincount(xs[votes], minlength=mask.shape[2])
    right = np.bincount(xs[~votes], minlength=mask.shape[2])
    errors = np.concatenate([[0], np.cumsum(left)]) + np.concatenate([np.cumsum(right[::-1])[::-1], [0]])
    return float(np.argmin(errors)) - 0.5


CORE_DEPTH = 4  # coarse voxels (16 mm): how far inside a find its two lungs' cores are looked for
CORE_SHARE = 0.25  # each lung's core holds at least this share of what lies that deep
CORE_AGREE = 0.9  # each core lies this much inside one column half, the two in different halves
MIN_TURN_DEG = 8.0  # a turn of the line between the cores below this is the lungs' own shape


def two_cores(mask: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """The two largest pieces into which ``mask`` falls when peeled by 1, 2, ...
    :data:`CORE_DEPTH` voxels (face steps), the first depth at which the smaller holds
    :data:`CORE_SHARE` of what is left: two lungs touching at a thin junction part there.
    None where no depth parts it so (one lung, or a strip of the other too thin to have a core)."""
    depth = ndimage.distance_transform_cdt(mask, metric="taxicab")
    for d in range(1, CORE_DEPTH + 1):
        core = depth > d
        if not core.any():
            return None
        labels, n = label(core)
        if n < 2:
            continue
        sizes = component_sizes(labels, n)
        sizes[0] = 0
        first, second = np.argsort(sizes)[::-1][:2]
        if sizes[second] >= CORE_SHARE * sizes.sum():
            return labels == first, labels == second
    return None


def junction_turn(mask: np.ndarray, halves: np.ndarray) -> float:
    """The in-plane angle (radians) of the line from the right lung's core to the left one's
    (:func:`two_cores`), where the two cores lie in different ``halves`` and the angle is
    :data:`MIN_TURN_DEG` or more; else 0."""
    cores = two_cores(mask)
    if cores is None:
        return 0.0
    centres = []
    for core in cores:
        votes = np.bincount(halves[core], minlength=3)
        side = int(np.argmax(votes))
        if votes[side] < CORE_AGREE * np.count_nonzero(core):
            return 0.0
        _, y, x = np.nonzero(core)
        centres.append((side, float(x.mean()), float(y.mean())))
    (side_a, xa, ya), (side_b, xb, yb) = sorted(centres)
    if side_a == side_b:
        return 0.0
    turn = float(np.arctan2(yb - ya, xb - xa))
    return turn if abs(np.degrees(turn)) >= MIN_TURN_DEG else 0.0


def split_single(mask: np.ndarray, centre: float | None = None) -> np.ndarray:
    """Split one lung component into right (1) and left (2) lungs that touch (in front, or
    behind, on the 4 mm grid): per axial slice at the thinnest column near the middle, the
    columns square to the line between the two lungs' cores (:func:`junction_turn`). A patient turned
    in the scanner puts the lungs' junction at a slant, which a column along y cuts across;
    for a patient lying straight the columns run along y, near x index ``centre`` where given
    (:func:`column_halves`)."""
    halves = column_halves(mask, centre=centre)
    turn = junction_turn(mask, halves)
    return column_halves(mask, turn) if turn else halves
