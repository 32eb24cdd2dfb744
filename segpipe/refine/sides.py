"""Always-on step ``sides``: right and left from physical geometry, never from array order.

On the coarse grid the predicted lung is split into the patient's right and left lung
(:func:`split_sides`; canonical LPS, x grows toward the patient's left); on the scan's grid
each lung voxel takes the side of the per-row boundary between those two lungs
(:func:`side_boundary`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import ndimage

from segpipe.refine._util import component_sizes, label, map_parallel
from segpipe.refine.base import RuleReport, ScanContext
from segpipe.refine.columns import split_single, vote_column

__all__ = ["SidesParams", "split_sides", "piece_side", "lying_side", "end_piece_side", "flank_side", "beyond_centre", "joined_lungs",
           "lungs_apart", "at_view_side", "join_cut_pieces", "side_boundary", "rule"]


@dataclass(frozen=True)
class SidesParams:
    """Args:
        min_fraction: on the coarse grid, a component at least this share of the largest one
            is a lung of its own.
        scanner_centre: a lung alone in a view that cuts the body, whose side neither the
            network's vote nor the view's flank tells, takes the side of the scanner's centre
            (physical x = 0) on which nine tenths of it lie (:func:`centre_side`); a single
            find that the vote parts into two lungs but that lies wholly on one side of it is one
            lung of that side (:func:`beyond_centre`), and so are two finds that lie wholly on
            one side of it, :data:`CENTRE_MARGIN_MM` beyond it or both voted that side
            (:func:`_one_side_of_centre`). Not where the scan's coordinates cannot place the
            centre (:func:`segpipe.spatial.scanner_centre_x_index`: an origin reset to the
            image's corner, or x = 0 more than 50 mm beyond the view).
        spine: in a view that cuts the body, the part of a find beyond the spine (the body's
            midline, :func:`segpipe.refine.spine.spine_x`) goes to that side where the network's
            vote agrees or where it (or the part beyond a neck past the spine's line) meets the
            rest only at a junction line (:func:`segpipe.refine.spine.part_at_spine`): a strip
            of one lung joined to the other where they meet in front; a find with under 20 mL
            beyond the spine is one lung, however the side split parted it, and, where it also
            lies on that side of the scanner's centre, of that side whatever the vote; a find
            left without a side at the view's edge, beyond the spine from the largest, is the
            other lung (:func:`segpipe.refine.spine.join_beyond_spine`); and a find that holds
            both lungs is split at its thinnest column near the spine rather than near its
            middle (the middle of a find in such a view is not the body's).
    """

    min_fraction: float = 0.15
    scanner_centre: bool = True
    spine: bool = True


CLEAR_VOTE = 0.75  # a find is one side by the network's vote where this share of it votes that side


def _vote_side(mask: np.ndarray, left_vote: np.ndarray, clear: float = CLEAR_VOTE) -> int:
    """1 (right) or 2 (left) where ``clear`` of ``mask`` is that side by ``left_vote``; 0 otherwise."""
    share = float(left_vote[mask].mean())
    return 2 if share >= clear else 1 if share <= 1.0 - clear else 0


def _halves_agree(halves: np.ndarray, left_vote: np.ndarray) -> bool:
    """Whether :func:`segpipe.refine.columns.split_single`'s ``halves`` (1 right, 2 left) are two lungs by the
    network's per-voxel ``left_vote``: the right half mostly right and the left half mostly
    left. A lung alone in a field of view cut through it is one lung, whichever half."""
    right, left = halves == 1, halves == 2
    return bool(right.any() and left.any() and left_vote[right].mean() < 0.5 < left_vote[left].mean())


FLANK_SHARE = 0.1  # a lung shows a flank where this share of its rows have outside air beside it on that side
FLANK_REACH_MM = 80.0  # beside: within this distance (the chest wall; the mediastinum and the other lung are wider)


def flank_side(lung: np.ndarray, outside: np.ndarray, reach: int, share: float = FLANK_SHARE) -> int:
    """The patient's side whose flank a field of view shows beside ``lung`` (boolean
    ``(z, y, x)``, canonical LPS): 1 (right) where ``share`` of the lung's ``(z, y)`` rows hold
    ``outside`` air (beyond the skin) within ``reach`` voxels below the lung's lowest x, and at
    least twice as many rows as above its highest x; 2 the other way round; 0 otherwise. A
    lung has the chest wall and then the air outside the body on its own side; on the other
    lie the mediastinum and the other lung, wider than ``reach``."""
    nx = lung.shape[2]
    xs = np.arange(nx)
    rows = lung.any(axis=2)
    first = np.where(lung, xs, nx).min(axis=2)[..., None]
    last = np.where(lung, xs, -1).max(axis=2)[..., None]
    low = int(np.count_nonzero((outside & (xs < first) & (xs >= first - reach)).any(axis=2) & rows))
    high = int(np.count_nonzero((outside & (xs > last) & (xs <= last + reach)).any(axis=2) & rows))
    needed = share * np.count_nonzero(rows)
    return 1 if low >= max(2 * high, needed) and low else 2 if high >= max(2 * low, needed) and high else 0


JOINED_CONTACT = 0.3  # two lungs in one find touch over less than this share of the smaller's largest sagittal section
JOINED_GAP = 3  # coarse voxels: the gap between two parts of a find is where they come this close outside it
JOINED_AERATED = 0.5  # two lungs: less than this share of the gap is aerated (the mediastinum lies between them)
AERATED_HU = -700.0  # aerated lung on the coarse grid; the mediastinum and the pleura are denser


def _largest_pieces(mask: np.ndarray, n: int) -> list[np.ndarray]:
    """The ``n`` largest connected components of a boolean mask, largest first."""
    labels, count = label(mask)
    if count == 0:
        return []
    sizes = component_sizes(labels, count)
    sizes[0] = 0
    return [labels == int(i) for i in np.argsort(sizes)[::-1][:n] if sizes[i] > 0]


JOINED_SEEDS = 3  # the largest pieces of each side's vote tried as the two lungs' seeds


def joined_lungs(single: np.ndarray, left_vote: np.ndarray, aerated: np.ndarray, min_lung: int) -> np.ndarray | None:
    """``single`` (one find, boolean ``(z, y, x)``, canonical LPS) as two lungs that touch
    at a junction line: 1 right, 2 left; None where it is not. A field of view over one lung
    and the edge of the other, across the mediastinum, can show the two joined in front or
    behind (on the 4 mm grid, where emphysematous lungs meet). The network's vote parts them:
    every voxel of ``single`` goes to the nearer of a piece of each side's vote (of the
    :data:`JOINED_SEEDS` largest of each side, the pairs tried largest first: the largest piece
    of one side's vote can lie inside the other lung, where the view leaves the network unsure).
    The first pair is taken where the right piece lies at lower x, the smaller part holds
    ``min_lung`` voxels or more, the two parts touch over less than :data:`JOINED_CONTACT` of
    the smaller part's largest sagittal (y-z) section, and where they come within
    :data:`JOINED_GAP` voxels of each other outside the find, less than :data:`JOINED_AERATED`
    of that gap is ``aerated`` (boolean: lung density). One lung whose vote the view splits
    touches across its whole section, or, where the network was unsure between the two parts,
    lies apart from itself across aerated lung (a lobe beyond a fissure); two lungs lie apart
    across the mediastinum."""
    lefts, rights = _largest_pieces(single & left_vote, JOINED_SEEDS), _largest_pieces(single & ~left_vote, JOINED_SEEDS)
    # each piece's size, mean x and distance map, once (a piece takes part in up to JOINED_SEEDS pairs)
    seeds = [[(np.count_nonzero(p), np.nonzero(p)[2].mean(), ndimage.distance_transform_edt(~p)) for p in ps] for ps in (lefts, rights)]
    pairs = sorted(((lf, rt) for lf in seeds[0] for rt in seeds[1]), key=lambda p: -p[0][0] - p[1][0])
    for (_, left_x, to_left), (_, right_x, to_right) in pairs:
        if right_x >= left_x:
            continue
        nearer_left = to_left < to_right
        a, b = single & nearer_left, single & ~nearer_left
        small = a if np.count_nonzero(a) < np.count_nonzero(b) else b
        if np.count_nonzero(small) >= max(min_lung, 1) and lungs_apart(a, b, aerated):
            return np.where(single, np.where(nearer_left, np.uint8(2), np.uint8(1)), np.uint8(0))
    return None


def lungs_apart(a: np.ndarray, b: np.ndarray, aerated: np.ndarray) -> bool:
    """Whether two touching parts ``a`` and ``b`` of one find (boolean ``(z, y, x)``) are two
    lungs joined at a junction line: they touch over less than :data:`JOINED_CONTACT` of the
    smaller part's largest sagittal (y-z) section, and where they come within :data:`JOINED_GAP`
    voxels of each other outside the find, less than :data:`JOINED_AERATED` of that gap is
    ``aerated`` (boolean: lung density): the mediastinum lies between two lungs. One lung
    touches across its whole section, or lies apart from itself across aerated lung."""
    small = a if np.count_nonzero(a) < np.count_nonzero(b) else b
    contact = sum(int(np.count_nonzero(np.moveaxis(a, ax, 0)[1:] & np.moveaxis(b, ax, 0)[:-1])
                      + np.count_nonzero(np.moveaxis(a, ax, 0)[:-1] & np.moveaxis(b, ax, 0)[1:])) for ax in range(3))
    return contact < JOINED_CONTACT * small.sum(axis=(0, 1)).max() and _across_tissue(a, b, aerated)


def _across_tissue(a: np.ndarray, b: np.ndarray, aerated: np.ndarray) -> bool:
    """Whether, where two parts ``a`` and ``b`` of one find come within :data:`JOINED_GAP`
    voxels of each other outside it, less than :data:`JOINED_AERATED` of that gap is
    ``aerated`` (lung density): the mediastinum lies between two lungs, aerated lung between
    the lobes of one."""
    gap = ~(a | b) & (ndimage.distance_transform_edt(~a) <= JOINED_GAP) & (ndimage.distance_transform_edt(~b) <= JOINED_GAP)
    return not (gap.any() and aerated[gap].mean() >= JOINED_AERATED)


def _left_share(mask: np.ndarray, midline_x: float) -> float:
    """Share of a ``(z, y, x)`` mask's voxels on the patient's left of ``midline_x`` (x index)."""
    counts = mask.sum(axis=(0, 1))
    return float(counts[np.arange(counts.size) > midline_x].sum()) / max(1, int(counts.sum()))


def _side_of(mask: np.ndarray, x: float) -> int:
    """1 (right) or 2 (left) where nine tenths of ``mask`` lie on that side of x index ``x``; 0 otherwise."""
    share = _left_share(mask, x)
    return 2 if share > 0.9 else 1 if share < 0.1 else 0


def centre_side(mask: np.ndarray, centre_x: float | None) -> int:
    """1 (right) or 2 (left) where nine tenths of ``mask`` lie on that side of ``centre_x``
    (the x index of the scanner's centre, physical x = 0); 0 otherwise or without it. A CT
    scanner's patient coordinates have x = 0 at the gantry's centre, where the patient lies:
    in a field of view that cuts the body, where the view's middle is not the body's, a lung
    beyond it lies on its own side (98 % of the lungs in random crops of the real scans)."""
    return 0 if centre_x is None else _side_of(mask, centre_x)


def beyond_centre(mask: np.ndarray, centre_x: float | None) -> int:
    """1 (right) or 2 (left) where all of ``mask`` lies on that side of ``centre_x`` (the x
    index of the scanner's centre); 0 otherwise or without it. Two lungs meet at the body's
    middle, near the scanner's centre: a find that does not reach across it holds one lung."""
    if centre_x is None or not mask.any():
        return 0
    xs = np.nonzero(mask.any(axis=(0, 1)))[0]
    return 1 if xs[-1] < centre_x else 2 if xs[0] > centre_x else 0


PAIR_VOTE = 0.5  # two finds on one side of the midline are one lung where the vote calls each of them that side


def piece_side(mask: np.ndarray, midline_x: float, left_vote: np.ndarray, vote: float = 0.9) -> int:
    """1 (right) or 2 (left) where nine tenths of ``mask`` lie on that side of ``midline_x``
    and ``vote`` of it (default as much) is that side by ``left_vote``; 0 otherwise."""
    share, left = _left_share(mask, midline_x), float(left_vote[mask].mean())
    return 2 if share > 0.9 and left > vote else 1 if share < 0.1 and left < 1.0 - vote else 0


def lying_side(mask: np.ndarray, midline_x: float, left_vote: np.ndarray) -> int:
    """1 (right) or 2 (left) where nine tenths of ``mask`` lie on that side of ``midline_x`` and
    ``left_vote`` does not clearly (:data:`CLEAR_VOTE`) put it on the other; 0 otherwise. Weaker
    than :func:`piece_side`: for a piece beside a lung already found on that side at the same
    end of the scan, where the network's side vote is split (the front of the left base, beside
    the heart)."""
    return piece_side(mask, midline_x, left_vote, vote=1.0 - CLEAR_VOTE)


def end_piece_side(mask: np.ndarray, midline_x: float, left_vote: np.ndarray, edge: np.ndarray | None = None) -> int:
    """The side of a piece that the scan's first or last slice cuts, to join the lung of that
    side at the same end: :func:`lying_side` inside the view, :func:`piece_side` where it also
    reaches the view's side edge (an in-plane face of the array, or ``edge``: the scanner's
    circle, :func:`segpipe.infer.coarse.view_edge`), where air beyond the skin or a mattress can
    look like lung to the coarse stage: there the vote must confirm it."""
    return (piece_side if at_view_side(mask, edge) else lying_side)(mask, midline_x, left_vote)


def at_view_side(mask: np.ndarray, edge: np.ndarray | None = None) -> bool:
    """Whether ``mask`` (boolean ``(z, y, x)``) reaches the view's side edge: an in-plane face of
    the array, or ``edge`` (the scanner's circle, :func:`segpipe.infer.coarse.view_edge`)."""
    return bool(mask[:, 0].any() or mask[:, -1].any() or mask[:, :, 0].any() or mask[:, :, -1].any()
                or (edge is not None and (mask & edge).any()))


def split_sides(lungs: np.ndarray, *, min_fraction: float = 0.15, midline_x: float | None = None,
                left_vote: np.ndarray | None = None, view_side: int = 0, outside: np.ndarray | None = None,
                flank_reach: int = 20, aerated: np.ndarray | None = None, min_lung: int = 781,
                centre_x: float | None = None, spine_x: float | None = None, cues: list[str] | None = None,
                centre_margin: int = 8) -> np.ndarray:  # CENTRE_MARGIN_MM at 4 mm
    """Label the coarse stage's finds by side from geometry: 1 right, 2 left, 0 dropped.

    ``lungs`` is a boolean ``(z, y, x)`` array in canonical LPS orientation (x grows toward the
    patient's left). The steps, in order (docs/pipeline.md, "How right and left are decided"):

    1. Two finds, each at least ``min_fraction`` of the largest, are the two lungs, sided by their
       mean x (:func:`_two_lungs`); so is a smaller second find that lies across the body's
       midline from the largest or that the network's vote puts on the other side
       (:func:`_opposite`: a collapsed lung, or a lung that the view's edge cuts).
    2. Two finds on one side by the midline and the vote, or beside which the same flank shows,
       are pieces of one lung (:func:`_pieces_of_one_lung`); so are two finds that lie wholly on
       one side of the scanner's centre in a view that cuts the body (:func:`_one_side_of_centre`).
    3. One find is split at its thinnest column (:func:`segpipe.refine.columns.split_single`, near
       ``spine_x`` in a view that cuts the body, or where no spine shows, near the column at which
       the vote parts it: :func:`segpipe.refine.columns.vote_column`), unless
       :func:`_one_lung_side` makes it one lung; :func:`joined_lungs` may still part a lone lung
       into two.

    Smaller finds are dropped. The arguments: ``midline_x`` the body's middle (x index; in a view
    that cuts the body, the view's middle); ``left_vote`` per voxel, whether the coarse network
    calls it the left lung; ``view_side`` the side a view that cuts the body shows
    (:func:`segpipe.refine.body_cut_side`: 1, 2, or 3 for both); ``outside`` the air beyond the
    skin and ``flank_reach`` how far beside a lung it shows its flank (:func:`flank_side`);
    ``aerated`` lung density and ``min_lung`` a lung's least voxels (default: 50 mL at 4 mm), for
    :func:`joined_lungs`; ``centre_x`` the scanner's centre (x index, :func:`centre_side`) and
    ``centre_margin`` (voxels) how far beyond it two finds lie to be one lung;
    ``cues`` (a list, optional) receives what sided a lone lung (or two finds as one).
    """
    labels, n = label(lungs)
    if n == 0:
        return np.zeros(lungs.shape, np.uint8)
    sizes = component_sizes(labels, n)
    sizes[0] = 0
    order = [int(i) for i in np.argsort(sizes)[::-1] if sizes[i] > 0]
    big = [i for i in order if sizes[i] >= min_fraction * sizes[order[0]]]
    halves = _split_one(labels == order[0], spine_x, view_side, left_vote, aerated) if len(big) < 2 else None
    beside = halves is not None and len(order) >= 2 and _opposite(
        labels == order[0], labels == order[1], midline_x, left_vote, two=left_vote is not None and _halves_agree(halves, left_vote))
    if beside:
        big = order[:2]  # a small lung (collapsed, or cut by the scan's end or side) beside a whole one
    if len(big) >= 2:
        one = _pieces_of_one_lung(labels, order, big[0], big[1], midline_x, left_vote, outside, flank_reach)
        if one is None and view_side:
            one = _one_side_of_centre(labels, order, big[0], big[1], centre_x, spine_x, left_vote, centre_margin)
            if one is not None and cues is not None:
                cues.append("the scanner's centre")
        if one is not None:
            return one
        return _two_lungs(labels, big[0], big[1], left_vote, aerated, min_lung, beside)
    assert halves is not None  # one find: big is [order[0]]
    single = labels == big[0]
    flank = flank_side(single, outside, flank_reach) if outside is not None else 0
    side, cue = _one_lung_side(single, halves, midline_x, left_vote, view_side, flank, centre_x)
    if cues is not None and side:
        cues.append(cue)
    if not side:
        return halves
    joined = joined_lungs(single, left_vote, aerated, min_lung) if left_vote is not None and aerated is not None else None
    return joined if joined is not None else np.where(single, np.uint8(side), np.uint8(0))


def _split_one(single: np.ndarray, spine_x: float | None, view_side: int, left_vote: np.ndarray | None,
               aerated: np.ndarray | None) -> np.ndarray:
    """A single find as two touching lungs (:func:`segpipe.refine.columns.split_single`): cut
    near the spine where one shows; in a view that cuts the body without it (the find's middle
    is not the body's), near the column at which the network's vote parts the find
    (:func:`segpipe.refine.columns.vote_column`; where it lies 15 % of the find's width inside
    it), unless the two halves there lie apart across ``aerated`` lung (:func:`_across_tissue`:
    a lobe beyond a fissure, not two lungs); else near the find's middle."""
    if spine_x is not None or not view_side or left_vote is None:
        return split_single(single, spine_x)
    halves = split_single(single, vote_column(single, left_vote))
    if aerated is None or _across_tissue(halves == 1, halves == 2, aerated):
        return halves
    return split_single(single)


def _pieces_of_one_lung(labels: np.ndarray, order: list[int], a: int, b: int, midline_x: float | None,
                        left_vote: np.ndarray | None, outside: np.ndarray | None, flank_reach: int) -> np.ndarray | None:
    """Finds ``a`` and ``b`` of ``labels`` (``order``: every find, largest first) as pieces of one
    lung, or None where they are not. They are where both lie on one side of ``midline_x`` (nine
    tenths of each) and the vote calls each that side (:data:`PAIR_VOTE`): a lung that the scan's
    edge cuts into pieces (the costophrenic recess at the top of an abdominal scan); the other lung
    is then the largest remaining find on the other side by both (:func:`piece_side`). They are too
    where the same flank shows beside both (:func:`_one_flank`): a lung that the field of view cuts
    in two."""
    if midline_x is not None and left_vote is not None:
        side = piece_side(labels == a, midline_x, left_vote, PAIR_VOTE)
        if side and piece_side(labels == b, midline_x, left_vote, PAIR_VOTE) == side:
            out = np.where((labels == a) | (labels == b), np.uint8(side), np.uint8(0))
            other = next((i for i in order if i not in (a, b) and piece_side(labels == i, midline_x, left_vote) == 3 - side), None)
            if other is not None:
                out[labels == other] = 3 - side
            return out
    if outside is not None:
        side = _one_flank(labels == a, labels == b, outside, flank_reach, left_vote)
        if side:  # two lungs never both have the chest wall of one side beside them
            return np.where((labels == a) | (labels == b), np.uint8(side), np.uint8(0))
    return None


CENTRE_MARGIN_MM = 30.0  # a lung's medial edge lies 20-40 mm from the body's midline: finds this far beyond the centre are one side's


def _one_side_of_centre(labels: np.ndarray, order: list[int], a: int, b: int, centre_x: float | None,
                        spine_x: float | None, left_vote: np.ndarray | None, margin: int) -> np.ndarray | None:
    """Finds ``a`` and ``b`` of ``labels`` (``order``: every find, largest first) as pieces of one
    lung in a view that cuts the body, or None where they are not. They are where both lie wholly
    on one side of the scanner's centre ``centre_x`` (x index; physical x = 0), the nearer of
    them ``margin`` voxels or more beyond it (or at any distance where the network's vote calls
    both that side, :data:`CLEAR_VOTE`), no spine (``spine_x``) between them or on the other
    side of them than the centre, and the vote does not call both the other side: a base cut
    into two crescents at the top of an abdominal scan, which the vote names two sides after
    the place each holds in the view; a lung that a narrow window shows as two finds, named two
    sides by their place across the view's middle. The other lung is then the largest
    remaining find wholly beyond the centre on the other side."""
    pair = (labels == a) | (labels == b)
    side = beyond_centre(pair, centre_x)
    if not side or (spine_x is not None and beyond_centre(pair, spine_x) != side):
        return None
    votes = {0} if left_vote is None else {_vote_side(labels == a, left_vote), _vote_side(labels == b, left_vote)}
    if votes == {3 - side}:
        return None
    if votes != {side} and beyond_centre(pair, centre_x + (margin if side == 2 else -margin)) != side:
        return None  # within the margin, where the vote does not call both that side too
    out = np.where(pair, np.uint8(side), np.uint8(0))
    other = next((i for i in order if i not in (a, b) and beyond_centre(labels == i, centre_x) == 3 - side), None)
    if other is not None:
        out[labels == other] = 3 - side
    return out


def _two_lungs(labels: np.ndarray, a: int, b: int, left_vote: np.ndarray | None, aerated: np.ndarray | None,
               min_lung: int, beside: bool) -> np.ndarray:
    """Finds ``a`` (the larger) and ``b`` of ``labels`` as the two lungs, the one at lower mean x
    the right. Where ``b`` is a small lung ``beside`` a whole one (a field of view over one lung
    and the edge of the other: the edge falls in pieces), ``a`` may hold more of ``b``'s lung,
    joined to it at a junction line: :func:`joined_lungs` gives that part to ``b``'s side."""
    out = np.zeros(labels.shape, np.uint8)
    right, left = (a, b) if np.nonzero(labels == a)[2].mean() < np.nonzero(labels == b)[2].mean() else (b, a)
    out[labels == right] = 1
    out[labels == left] = 2
    if beside and left_vote is not None and aerated is not None:
        whole = labels == a
        joined = joined_lungs(whole, left_vote, aerated, min_lung)
        if joined is not None:
            out[whole] = joined[whole]
    return out


def _one_flank(a: np.ndarray, b: np.ndarray, outside: np.ndarray, reach: int, left_vote: np.ndarray | None) -> int:
    """The side whose flank shows beside both ``a`` and ``b`` (:func:`flank_side`) where neither
    is clearly the other side by ``left_vote``; 0 otherwise."""
    side = flank_side(a, outside, reach)
    if not side or flank_side(b, outside, reach) != side:
        return 0
    if left_vote is not None and 3 - side in (_vote_side(a, left_vote), _vote_side(b, left_vote)):
        return 0
    return side


def _opposite(a: np.ndarray, b: np.ndarray, midline_x: float | None, left_vote: np.ndarray | None, *,
              two: bool = False) -> bool:
    """Whether masks ``a`` (the larger) and ``b`` are lungs of opposite sides: almost entirely on
    either side of ``midline_x``, unless ``left_vote`` clearly puts ``a`` on the other side of it
    (in a view that cuts the body the midline is the view's middle), or (where the view has no
    midline) on either side by ``left_vote``, in the order their mean x gives: :data:`CLEAR_VOTE`
    of each, or nine tenths where ``a`` is itself ``two`` lungs by the vote (then ``b`` is more
    likely a piece of one of them)."""
    if midline_x is not None:
        a_side, b_side = _side_of(a, midline_x), _side_of(b, midline_x)
        if {a_side, b_side} == {1, 2} and (left_vote is None or _vote_side(a, left_vote) != 3 - a_side):
            return True
    if left_vote is None:
        return False
    clear = 0.9 if two else CLEAR_VOTE
    votes = [_vote_side(a, left_vote, clear), _vote_side(b, left_vote, clear)]
    a_right = np.nonzero(a)[2].mean() < np.nonzero(b)[2].mean()
    return 0 not in votes and votes[0] != votes[1] and (votes[0] == 1) == a_right


WEAK_CUES = ("the scanner's centre", "the side the view shows", "the network's majority vote")  # a lone lung sided by these: warn


def _one_lung_side(single: np.ndarray, halves: np.ndarray, midline_x: float | None, left_vote: np.ndarray | None,
                   view_side: int, flank: int = 0, centre_x: float | None = None) -> tuple[int, str]:
    """The side of ``single`` where it is one lung, 0 where it is two (split into ``halves``),
    and the cue that decided it.

    Where the network's vote does not confirm the halves: the side :data:`CLEAR_VOTE` of it
    votes for, else the side whose ``flank`` shows beside it (:func:`flank_side`; 0: none),
    else, in a view that cuts the body, the side of the scanner's centre ``centre_x`` on which
    it lies (:func:`centre_side`), else ``view_side`` (1 or 2), else, in a view that cuts both
    sides (3), the vote's majority. Where the vote does confirm them, in a view that cuts the
    body, it is one lung all the same where it lies wholly on one side of the scanner's centre
    (:func:`beyond_centre`). Otherwise (or without a vote) it is one lung where one side
    of ``midline_x`` holds nine tenths of it: of the side whose flank shows beside it, else of
    that side (in a view that cuts the body, its middle is the view's); 0 where none decides."""
    if left_vote is not None and not _halves_agree(halves, left_vote):
        for cue, side in (("the network's vote", _vote_side(single, left_vote)), ("the flank beside it", flank),
                          ("the scanner's centre", centre_side(single, centre_x) if view_side else 0),
                          ("the side the view shows", view_side if view_side in (1, 2) else 0),
                          ("the network's majority vote", _vote_side(single, left_vote, 0.5) if view_side == 3 else 0)):
            if side:
                return side, cue
    elif view_side and (side := beyond_centre(single, centre_x)):  # the vote's two lungs, not reaching the body's middle
        return side, "the scanner's centre"
    if midline_x is not None:
        side = _side_of(single, midline_x)
        if side:
            return (flank, "the flank beside it") if flank else (side, "the body's midline")
    return 0, ""


def join_cut_pieces(found: np.ndarray, sides: np.ndarray, midline_x: float, left_vote: np.ndarray,
                    edge: np.ndarray | None = None) -> np.ndarray:
    """Add to each sided lung the further pieces of it that the scan's first or last slice cut off.

    Where the scan's range ends inside a lung's base (the top of an abdominal scan cuts the
    costophrenic recess around the dome of the diaphragm) the lung can fall into three or more
    pieces; :func:`split_sides` sides only two. A further component of ``found`` (boolean
    ``(z, y, x)``, canonical LPS) joins the lung of side ``s`` of ``sides`` when it reaches the
    first or the last slice that a piece of that lung reaches too, and nine tenths of it lie on
    that side of ``midline_x`` without ``left_vote`` clearly putting it on the other (with it
    confirming that side where the piece reaches the view's side edge too, an in-plane face or
    ``edge``: :func:`end_piece_side`). In-plane cuts of the field of view do not join pieces: a
    strip of the view's edge is not taken for a lung beside it. Returns a new array."""
    out = sides.copy()
    labels, n = label(found & (sides == 0))
    if n == 0:
        return out
    for end in (0, -1):  # the scan's first and last slice
        for i in np.unique(labels[end][labels[end] > 0]):
            piece = labels == i
            side = end_piece_side(piece, midline_x, left_vote, edge)
            if side and (sides[end] == side).any() and not out[piece].any():
                out[piece] = side
    return out


def side_boundary(sides: np.ndarray, margin: float = 1.5) -> np.ndarray:
    """Per ``(z, y)`` row of a sided label array (1 right, 2 left; canonical LPS), the x
    index (float) that separates the lungs: the middle of the gap between the right lung's
    last voxel and the left lung's first. Rows without both lungs take their slice's median,
    slices without both take the overall median; with one lung only, the boundary lies beyond
    the array on the other side (every lung voxel is that lung). In a slice with one lung only,
    the boundary lies at least ``margin`` voxels beyond that lung (the fine stage's lung reaches
    past the coarse one), so that a small piece of the other lung in a few slices does not give
    half of a large lung to its side. Shape ``(z, y)``."""
    nz, ny, nx = sides.shape
    xs = np.arange(nx)
    right_max = np.where(sides == 1, xs, -1).max(axis=2).astype(float)
    left_min = np.where(sides == 2, xs, nx).min(axis=2).astype(float)
    both = (right_max >= 0) & (left_min < nx)
    boundary = np.where(both, (right_max + left_min) / 2.0, np.nan)
    present = [v for v in (1, 2) if (sides == v).any()]
    alone = {1: float(nx), 2: -1.0}
    overall = np.nanmedian(boundary) if both.any() else alone[present[0]] if len(present) == 1 else (nx - 1) / 2.0
    for z in range(nz):
        row = boundary[z]
        if np.isnan(row).all():
            row[:] = overall
        else:
            row[np.isnan(row)] = np.nanmedian(row)
    # a slice with one lung only: the boundary lies beyond it
    right_end, left_start = right_max.max(axis=1), left_min.min(axis=1)
    alone_right = (right_end >= 0) & (left_start >= nx)
    alone_left = (left_start < nx) & (right_end < 0)
    boundary[alone_right] = np.maximum(boundary[alone_right], right_end[alone_right, None] + margin)
    boundary[alone_left] = np.minimum(boundary[alone_left], left_start[alone_left, None] - margin)
    return boundary


def rule(mask: np.ndarray, ctx: ScanContext, p: SidesParams) -> tuple[np.ndarray, RuleReport]:
    """Set each lung voxel of ``mask`` (scan grid, lung where non-zero; in place) to 1 (right)
    or 2 (left) by the per-row boundary between the coarse stage's sided lungs."""
    xs = np.arange(mask.shape[2]) + ctx.offset_xyz[0]

    def one(z: int) -> None:
        sl = mask[z]
        lung = sl > 0
        if not lung.any():
            return
        right = xs[None, :] < ctx.side_boundary(z)[:, None]
        sl[lung & right] = 1
        sl[lung & ~right] = 2

    map_parallel(one, mask.shape[0])
    return mask, RuleReport.of("sides", ctx)
