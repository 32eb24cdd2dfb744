"""Always-on step ``body``: a lung lies inside the body.

The body is found on the coarse grid (:func:`body_interior`); on the scan's grid, lung outside
it (air around the patient inside a lung's box, gaps under the table) is cleared.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import ndimage

from segpipe.refine._util import CROSS2, FULL, component_sizes, label, map_parallel
from segpipe.refine.base import RuleReport, ScanContext
from segpipe.refine.components import fill_slice_holes

__all__ = ["BodyParams", "padding_of", "body_interior", "body_in_view", "skin_slack", "body_midline_x", "body_cut_side", "rule"]


@dataclass(frozen=True)
class BodyParams:
    """Args:
        hu: tissue above this HU is body; what it encloses in an axial slice is inside it.
        cut_share: a slice whose field of view cuts the body: at least this share of the
            scan's edge in it is not pure air (``air_hu``).
        air_hu: pure air: smoothed HU (1 coarse voxel in-plane) below this.
        air_cm2: in a slice that the field of view cuts, a region below ``hu`` that reaches the
            scan's edge is outside the body only with at least this much pure air in it, being
            ``air_share`` of its area or more (the air around the patient), or when it runs along
            more than ``table_share`` of the scan's posterior edge (the table's mattress under
            the patient); a lung cut by the field of view is neither, emphysema's pure-air
            patches in it included.
        air_share: see ``air_cm2``. With ``air_hu`` (on the coarse grid's own voxels) also the
            coarse stage's test for gas at the scan's edge: a find whose sure voxels are this
            share or more pure air gets no cut-lung share (:func:`segpipe.infer.coarse.confident_parts`).
        table_share: see ``air_cm2``.
        table_lung_share: a region along the posterior edge that the coarse network calls lung
            over at least this share of its area is a lung that the view's posterior arc cuts
            (a small field of view over one lung), not the mattress.
        padding_hu: below this, over a region that reaches the array's border, is the
            scanner's padding outside its reconstruction circle (-2048, -3024): beyond the scan.
        padding_max_hu: padding at or above ``padding_hu`` (-1024, what many scanners write
            outside the circle, the value of air) is found by its constancy instead: a corner's
            value, at most this, at the same pixels of every slice, over a region that reaches
            the array's border (:func:`padding_of`). Air around a
            patient has noise and moves with the body from slice to slice; padding does not.
        part_share: a slice's inside is the patient's where connected pieces of it have at
            least this share of the largest one's area (the torso; arms beside it are smaller,
            and so is a table whose shells enclose air: that is not the body).
    """

    hu: float = -500.0
    cut_share: float = 0.2
    air_hu: float = -975.0
    air_cm2: float = 2.0
    table_share: float = 0.75
    table_lung_share: float = 0.5
    air_share: float = 0.25
    padding_hu: float = -1100.0
    padding_max_hu: float = -1000.0
    part_share: float = 0.3


#: fewest slices for :func:`padding_of`: in fewer, clipped air may look constant
MIN_PADDING_SLICES = 4


def padding_of(hu_zyx: np.ndarray, p: BodyParams = BodyParams()) -> tuple[np.ndarray, float] | None:
    """The scanner's padding beyond its reconstruction circle, as its ``(y, x)`` footprint and
    its value, or ``None`` when there is none: a value at most ``p.padding_max_hu`` that a
    corner of the first slice holds (the circle leaves the corners out), at the same pixels of
    every slice, in regions that reach the array's border. This finds padding that has the
    value of air (-1024), which :func:`body_in_view`'s ``padding_hu`` cannot tell from the air
    around a patient, on the scan's own voxels (resampling blurs the constancy away), and the
    padding below air (-2048, -3024); darker voxels elsewhere (noise, streaks) do not matter.
    Needs at least :data:`MIN_PADDING_SLICES` slices."""
    hu = np.asarray(hu_zyx)
    if hu.ndim != 3 or hu.shape[0] < MIN_PADDING_SLICES or hu.size == 0:
        return None
    first = hu[0]
    for value in sorted({float(first[i, j]) for i in (0, -1) for j in (0, -1)}):
        if not value <= p.padding_max_hu:
            continue
        const = first == value
        for z in range(1, hu.shape[0]):
            const &= hu[z] == value
            if not const.any():
                break
        labels, _ = ndimage.label(const, structure=CROSS2)
        border = np.unique(np.concatenate([labels[0], labels[-1], labels[:, 0], labels[:, -1]]))
        border = border[border > 0]
        if border.size:
            return np.isin(labels, border), value
    return None


def body_midline_x(hu_zyx: np.ndarray, threshold_hu: float = -500.0) -> float | None:
    """Mean x index of the body (voxels above ``threshold_hu``, the table included, which is
    centred too), or ``None`` when there is none."""
    counts = (hu_zyx > threshold_hu).sum(axis=(0, 1))
    total = counts.sum()
    return float((counts * np.arange(len(counts))).sum() / total) if total else None


def body_interior(hu_zyx: np.ndarray, threshold_hu: float = -500.0, *, slack_voxels: int = 0) -> np.ndarray:
    """Voxels inside the body: per axial slice, what tissue above ``threshold_hu`` encloses
    (the lungs and bowel gas are holes in the body's cross-section; the air around the
    patient, the out-of-field padding and gaps under the table are not). Lungs never lie
    outside it, so a "lung" there (outside air next to the patient) is a false positive.
    ``slack_voxels`` grows the region (face neighbours) for partial volume at the skin."""
    return skin_slack(fill_slice_holes(hu_zyx > threshold_hu), slack_voxels)


def body_in_view(hu_zyx: np.ndarray, spacing_xyz: tuple[float, ...], p: BodyParams = BodyParams(), *,
                 padding: np.ndarray | None = None, lung: np.ndarray | None = None) -> np.ndarray:
    """Voxels inside the body, also where the scan's field of view cuts it.

    Per axial slice, as :func:`body_interior`: what tissue above ``p.hu`` encloses, where the
    regions below ``p.hu`` that reach the scan's edge (the array's border or the scanner's
    padding) are outside. In a slice whose field of view cuts the body (``p.cut_share`` of the
    scan's edge in it is not pure air) such a region is outside only when it holds at least
    ``p.air_cm2`` of pure air, and ``p.air_share`` of its area (the air around the patient; an
    emphysematous lung has patches of pure air, but less of them), or runs along the posterior part of
    the scan's edge (canonical LPS: high y) over ``p.table_share`` of its width (the table's
    mattress): a lung or bowel loop that the field of view cuts is inside. The scanner's
    padding is never body: what lies below ``p.padding_hu`` and what ``padding`` marks (a
    ``(z, y, x)`` mask, or a ``(y, x)`` footprint such as :func:`padding_of`'s). Given ``lung``
    (``(z, y, x)``, what the coarse network calls lung), a region along the posterior edge that
    is ``p.table_lung_share`` lung or more is not the mattress: the network sees the ribs and
    the spine around a lung that the view's posterior arc cuts."""
    hu = np.asarray(hu_zyx, np.float32)
    border = np.ones(hu.shape[1:], bool)
    border[1:-1, 1:-1] = False
    # the scanner's padding: far below air, over a region that reaches the array's border
    pad_like = hu < p.padding_hu
    if padding is not None:
        if padding.shape not in (hu.shape, hu.shape[1:]):
            raise ValueError(f"body_in_view: padding of shape {padding.shape}, expected {hu.shape} or {hu.shape[1:]} "
                             "(the scan's or its slices' shape)")
        pad_like |= np.asarray(padding, bool)
    if lung is not None and lung.shape != hu.shape:
        raise ValueError(f"body_in_view: lung of shape {lung.shape}, expected {hu.shape} (the scan's shape)")
    pixel_cm2 = float(spacing_xyz[0]) * float(spacing_xyz[1]) / 100.0
    out = np.zeros(hu.shape, bool)

    def one(z: int) -> None:
        beyond = np.zeros(hu.shape[1:], bool)
        labels, n = ndimage.label(pad_like[z], structure=CROSS2)
        if n:
            beyond = np.isin(labels, np.unique(labels[border & (labels > 0)]))
        ring = ndimage.binary_dilation(beyond, structure=CROSS2) & ~beyond
        edge = (border & ~beyond) | ring
        # smoothed HU of the scan's own voxels: the padding left out, not smeared into them, and
        # so is the ring next to it, where resampling mixed padding into lung (as air-like HU)
        valid = (~(beyond | ring)).astype(np.float32)
        smooth = ndimage.gaussian_filter(np.maximum(hu[z], -1024.0) * valid, 1.0, mode="nearest")
        smooth /= np.maximum(ndimage.gaussian_filter(valid, 1.0, mode="nearest"), 1e-3)
        open_ = (hu[z] <= p.hu) & ~beyond
        labels, n = ndimage.label(open_, structure=CROSS2)
        if n == 0:
            out[z] = ~beyond
            return
        touching = np.zeros(n + 1, bool)
        touching[np.unique(labels[edge & (labels > 0)])] = True
        if np.count_nonzero(edge) and (smooth[edge] >= p.air_hu).mean() >= p.cut_share:  # the view cuts the body
            air = np.bincount(labels[(smooth < p.air_hu) & ~ring], minlength=n + 1) * pixel_cm2
            area = np.bincount(labels[~ring], minlength=n + 1) * pixel_cm2  # what the air was counted over
            air_like = (air >= p.air_cm2) & (air >= p.air_share * area)
            # the mattress: along the posterior part of the scan's edge (canonical LPS: high y),
            # over more than table_share of the columns that edge spans
            post = edge & (np.arange(edge.shape[0]) > 0.6 * edge.shape[0])[:, None]
            cols = np.zeros((n + 1, edge.shape[1]), bool)
            ys, xs = np.nonzero(post & (labels > 0))
            cols[labels[ys, xs], xs] = True
            span = max(1, np.count_nonzero(post.any(axis=0)))
            table = cols.sum(axis=1) > p.table_share * span
            if lung is not None:
                called = np.bincount(labels[lung[z]], minlength=n + 1)
                table &= called < p.table_lung_share * np.bincount(labels.ravel(), minlength=n + 1)
            touching &= air_like | table
        touching[0] = False
        out[z] = _patient(~touching[labels] & ~beyond, p.part_share)

    map_parallel(one, hu.shape[0])
    return out


def _patient(inside: np.ndarray, share: float) -> np.ndarray:
    """The patient's part of one slice's ``inside`` (``(y, x)``): its connected pieces of at
    least ``share`` of the largest one's area. A table's shells enclose the air between them
    as tissue encloses a lung, but apart from the patient: a piece of its own, and small."""
    labels, n = label(inside, CROSS2)
    if n <= 1:
        return inside
    sizes = component_sizes(labels, n)
    sizes[0] = 0
    return (sizes >= share * sizes.max())[labels] & inside


def body_cut_side(body: np.ndarray, edge: np.ndarray | None = None) -> int:
    """The patient's side that a field of view cutting the body shows: 1 (right) where the
    ``(z, y, x)`` body (canonical LPS) runs off the view (the array's x faces, or ``edge``: the
    scanner's padding and the voxels next to it) on the high-x half (the patient's left) at
    least twice as much as on the low-x half, and at least once per slice on average; 2 the
    other way round; 3 where it cuts both sides alike; 0 where the view holds the body's width.
    In a cut view the body's middle is not the patient's: the missing side lies beyond the cut."""
    off = np.zeros(body.shape, bool)
    off[:, :, 0] = off[:, :, -1] = True
    if edge is not None:
        off |= edge
    xs = np.nonzero(body & off)[2]
    high = int(np.count_nonzero(xs >= body.shape[2] / 2))
    low = xs.size - high
    if high >= max(2 * low, body.shape[0]):
        return 1
    if low >= max(2 * high, body.shape[0]):
        return 2
    return 3 if min(low, high) >= body.shape[0] else 0


def skin_slack(body: np.ndarray, voxels: int = 1) -> np.ndarray:
    """A body mask from :func:`body_interior` grown by ``voxels`` (face neighbours), for
    partial volume at the skin (the same as ``body_interior(hu, slack_voxels=voxels)``
    without filling the slices again)."""
    return ndimage.binary_dilation(body, structure=FULL, iterations=voxels) if voxels else body


def rule(mask: np.ndarray, ctx: ScanContext, p: BodyParams) -> tuple[np.ndarray, RuleReport]:
    """Clear the lung outside the body in ``mask`` (scan grid, in place)."""

    def one(z: int) -> int:
        sl = mask[z]
        outside = (sl > 0) & ~ctx.body(z)
        sl[outside] = 0
        return int(np.count_nonzero(outside))

    return mask, RuleReport.of("body", ctx, removed=sum(map_parallel(one, mask.shape[0])))
