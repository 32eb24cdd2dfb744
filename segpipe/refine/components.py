"""Always-on step ``components``: one connected lung per side, without holes.

The coarse stage decides which lungs the scan holds: lung on a side of which it found none (the
fine network's answer in the other lung's region, across the side boundary) is not kept. Per
lung: keep its main connected component: the one the coarse stage's lung of that side
supports most (the largest one where that is unknown), so a larger pocket of bowel gas the fine
network took for lung does not win over a small lung base. Where the scan's edge cuts a lung (the
bases at the top of an abdominal scan, a field of view through the chest), the lung shows as
several pieces that join beyond the view: every piece that reaches the scan's edge and lies
mostly (``min_support``) in the coarse stage's lung of that side is kept too. A dropped piece
that touches the other lung's kept component joins that lung (the network mislabelled it),
other pieces become background;
then fill what the lung encloses in each axial slice (every 3D cavity too). A lung smaller than
``min_ml`` after this is removed. The sides are the ``sides`` step's (per row, from the coarse
stage's sided lungs); :func:`clean_lungs` on a label map of unknown origin also swaps labels 1
and 2 when their centroids lie on the wrong sides (physical LPS x), with a warning.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass

import numpy as np
import SimpleITK as sitk

from segpipe import spatial
from segpipe.refine._util import FULL, IN_PLANE, bounding_box, component_sizes, label, map_parallel, on_faces, touches
from segpipe.refine.base import RuleReport, ScanContext

__all__ = ["ComponentsParams", "largest_component", "lung_pieces", "fill_holes", "fill_slice_holes", "check_sides", "clean_lungs",
           "clean_lungs_array", "rule"]


@dataclass(frozen=True)
class ComponentsParams:
    """Args:
        min_ml: a lung smaller than this after the clean-up is removed (a speck: the coarse
            stage has already decided that the lung is there; the tip of a recess at the top of
            an abdominal scan holds a few mL).
        min_support: a piece of a lung that the scan's edge cuts is kept when at least this
            share of it lies in the coarse stage's lung of that side (grown by one coarse voxel).
    """

    min_ml: float = 1.0
    min_support: float = 0.5


def largest_component(mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Split a boolean mask into (largest 6-connected component, everything else). Labels
    only the mask's bounding box (one lung is a fraction of the lungs' box)."""
    return lung_pieces(mask, 1)


DOMINANT_SHARE = 0.9  # a lung's largest piece with this share of its voxels is its main piece without a lookup
Support = Callable[[tuple[slice, slice, slice]], np.ndarray]
"""A block of a lung's array (``(z, y, x)`` slices) -> the coarse stage's sided lungs there, as
:attr:`segpipe.refine.base.ScanContext.lung_support` gives them (bit 1 right, bit 2 left)."""


def lung_pieces(mask: np.ndarray, value: int, support: Support | None = None,
                edge_faces: tuple[bool, ...] = (False,) * 6, min_support: float = 0.5) -> tuple[np.ndarray, np.ndarray]:
    """Split one lung's boolean ``(z, y, x)`` mask into (kept, dropped) pieces (6-connected).

    Kept: the piece with the most voxels in the coarse stage's lung of side ``value`` (1 right,
    2 left) per ``support``, or the largest piece without ``support`` or where the coarse lung
    holds none of them; and, with ``support``, every piece that reaches one of the array's faces
    marked in ``edge_faces`` (``z-, z+, y-, y+, x-, x+``: the faces that are the scan's edge) with
    at least ``min_support`` of its voxels in that coarse lung. Labels only the mask's bounding box."""
    mask = np.asarray(mask, dtype=bool)
    keep = np.zeros(mask.shape, bool)
    box = bounding_box(mask)
    if box is None:
        return keep, keep.copy()
    labels, n = label(mask[box])
    if n <= 1:
        return mask.copy(), keep
    sizes = component_sizes(labels, n)
    sizes[0] = 0
    chosen = np.zeros(n + 1, bool)
    main = int(np.argmax(sizes))
    if support is not None:
        # a face of the box is the scan's edge where the box reaches that face of ``mask``
        reaches = [edge and (b.start == 0 if face % 2 == 0 else b.stop == mask.shape[face // 2])
                   for face, (edge, b) in enumerate(zip(edge_faces, (box[0], box[0], box[1], box[1], box[2], box[2])))]
        at_edge = on_faces(labels, n, tuple(reaches))
        # a whole lung with specks beside it (the usual case) needs no lookup: its largest
        # piece holds nearly all of it and is the one the coarse stage found
        if np.count_nonzero(at_edge) > at_edge[main] or sizes[main] < DOMINANT_SHARE * sizes.sum():
            backed = component_sizes(np.where((support(box) & np.uint8(value)) > 0, labels, 0), n)
            backed[0] = 0
            if backed.max() > 0:
                main = int(np.argmax(backed))
            chosen |= at_edge & (backed >= min_support * np.maximum(sizes, 1))
    chosen[main] = True
    keep[box] = chosen[labels]
    return keep, mask & ~keep


def _fill_enclosed(mask: np.ndarray, structure: np.ndarray, border_axes: tuple[int, ...]) -> np.ndarray:
    """``mask`` with the background pieces (connected by ``structure``) inside its bounding
    box plus one voxel filled, except those that reach the box's faces across ``border_axes``:
    one labelling, not scipy's repeated dilation from the border."""
    mask = np.asarray(mask, dtype=bool)
    box = bounding_box(mask, pad=1)
    if box is None:
        return mask.copy()
    labels, count = label(~mask[box], structure)
    out = mask.copy()
    if count == 0:
        return out
    faces = np.concatenate([np.take(labels, end, axis=a).ravel() for a in border_axes for end in (0, -1)])
    outside = np.zeros(count + 1, bool)
    outside[faces] = True
    outside[0] = True  # label 0 is the mask itself
    out[box] |= ~outside[labels]
    return out


def fill_holes(mask: np.ndarray) -> np.ndarray:
    """Fill cavities enclosed in 3D (e.g. a vessel or nodule missed inside the lung).

    Same result as ``scipy.ndimage.binary_fill_holes`` with face connectivity, but computed
    by labelling the background inside the mask's bounding box (plus one voxel) once: the
    pieces that do not reach the box's faces are holes.
    """
    return _fill_enclosed(mask, FULL, (0, 1, 2))


def fill_slice_holes(mask: np.ndarray) -> np.ndarray:
    """Fill what a ``(z, y, x)`` mask encloses within each axial slice (face connectivity;
    the same as ``scipy.ndimage.binary_fill_holes`` slice by slice, with every slice's
    background labelled at once). For one lung: a consolidation's core and the air bronchi in
    it that the lung rings in that slice but that reach the airways through other slices, so
    no 3D cavity (it also fills every 3D cavity). A lung never rings anything else in an axial
    slice: the mediastinum, the hilum and the chest wall all lie at its edge."""
    return _fill_enclosed(mask, IN_PLANE, (1, 2))


def _sides_swapped(array: np.ndarray, reference: sitk.Image | spatial.Geometry, offset_xyz: tuple[int, int, int]) -> list[str]:
    """The warning of :func:`check_sides` when labels 1 and 2 of ``array`` (the part of
    ``reference``'s grid that starts at index ``offset_xyz``) are on the wrong sides, else []."""
    right = spatial.centroid_index(array, 1)
    left = spatial.centroid_index(array, 2)
    if right is None or left is None:
        return []
    right_mm, left_mm = spatial.index_to_physical(reference, np.stack([right, left]) + np.asarray(offset_xyz))
    if right_mm[0] < left_mm[0]:
        return []
    return [
        "labels 1 and 2 were on the wrong sides (label 1 must be the patient's right lung, at lower x "
        f"in LPS: x = {right_mm[0]:.1f} mm vs {left_mm[0]:.1f} mm); swapped them"
    ]


def _swap_sides(array: np.ndarray) -> None:
    """Exchange labels 1 and 2 in place."""
    ones = array == 1
    array[array == 2] = 1
    array[ones] = 2


def check_sides(label_image: sitk.Image) -> tuple[sitk.Image, list[str]]:
    """Make label 1 the patient's right lung (lower physical x in LPS) and 2 the left one.

    When both lungs are present and their centroids are in the wrong order, the labels are
    swapped and a warning says so. Returns the (possibly swapped) label and the warnings.
    """
    view = sitk.GetArrayViewFromImage(label_image)
    box = bounding_box(view)
    warnings = [] if box is None else _sides_swapped(view[box], label_image, tuple(int(s.start) for s in reversed(box)))  # type: ignore[arg-type]
    if not warnings:
        return label_image, []
    array = np.array(view)
    _swap_sides(array)
    return spatial.copy_geometry(array, label_image), warnings


def clean_lungs(label_image: sitk.Image, *, min_volume_ml: float = ComponentsParams.min_ml) -> tuple[sitk.Image, list[str]]:
    """Clean a lung label map (uint8, 0/1/2, with its geometry) and check its sides (see the
    module's docstring). Returns the cleaned label map (same geometry) and the warnings."""
    full = np.array(sitk.GetArrayViewFromImage(label_image), dtype=np.uint8)  # one copy
    warnings, _ = clean_lungs_array(full, label_image, min_volume_ml=min_volume_ml)
    return spatial.copy_geometry(full, label_image), warnings


def clean_lungs_array(
    array: np.ndarray,
    reference: sitk.Image | spatial.Geometry,
    *,
    offset_xyz: tuple[int, int, int] = (0, 0, 0),
    min_volume_ml: float = ComponentsParams.min_ml,
    support: Support | None = None,
    min_support: float = 0.5,
    found_sides: Collection[int] | None = None,
    swap: bool = True,
) -> tuple[list[str], tuple[int, int]]:
    """:func:`clean_lungs` in place on a ``(z, y, x)`` uint8 array that is the part of
    ``reference``'s grid starting at index ``offset_xyz`` (the whole grid by default; the
    cascade passes just the lungs' boxes, so a large scan is never copied). With ``support``
    (the coarse stage's sided lungs over a block of ``array``) each lung keeps the pieces
    :func:`lung_pieces` keeps, else its largest. With ``found_sides`` (the sides of which the
    coarse stage found a lung) a lung of another side keeps nothing: its pieces that touch the
    other lung join it (the side boundary cut them off), the rest goes. With ``swap`` off the
    labels are never swapped (:func:`check_sides`): the cascade's ``sides`` step has already
    set them from the coarse stage's sides, and in a field of view that cuts the body a small
    piece of one lung can lie beyond the other lung's centroid. Returns the warnings and the
    lung voxels (added, removed)."""
    # work inside the lungs' bounding box (plus one voxel): a fraction of a large scan
    box = bounding_box(array, pad=1)
    if box is None:
        return [], (0, 0)
    sub = array[box]
    before = np.count_nonzero(sub)
    size_zyx = tuple(int(v) for v in reversed(spatial.Geometry.of(reference).size)) if support is not None else ()
    start_zyx = [int(o) + int(s.start) for o, s in zip(reversed(offset_xyz), box)]
    edge_faces = tuple(face for a in range(3) for face in (start_zyx[a] == 0, bool(size_zyx) and start_zyx[a] + sub.shape[a] == size_zyx[a]))
    # (z-, z+, y-, y+, x-, x+): which faces of ``sub`` are the scan's own edge
    sub_support = None if support is None else (
        lambda block: support(tuple(slice(s.start + b.start, s.start + b.stop) for s, b in zip(box, block))))  # type: ignore[arg-type]

    unfound = [v for v in (1, 2) if found_sides is not None and v not in found_sides and (sub == v).any()]

    def pieces(i: int) -> tuple[np.ndarray, np.ndarray]:
        lung = sub == i + 1
        if i + 1 in unfound:  # a side the coarse stage did not find keeps nothing
            return np.zeros_like(lung), lung
        return lung_pieces(lung, i + 1, sub_support, edge_faces, min_support)

    # the two lungs in parallel (labelling and hole filling release the GIL)
    parts = map_parallel(pieces, 2)
    kept = {1: parts[0][0], 2: parts[1][0]}
    dropped = {1: parts[0][1], 2: parts[1][1]}
    del parts

    def whole(i: int) -> np.ndarray:
        value, other = (1, 2) if i == 0 else (2, 1)
        # (filling within slices fills every 3D cavity too)
        return fill_slice_holes(kept[value] | (touches(dropped[other], kept[value]) & ~kept[other]))

    filled = map_parallel(whole, 2)
    kept.clear()
    dropped.clear()
    out = np.zeros_like(sub)
    for value, mask in zip((1, 2), filled):
        out[mask & (out == 0)] = value
    del filled
    warnings: list[str] = []
    voxel_ml = spatial.voxel_volume_ml(reference)
    for value in unfound:
        side = ("right", "left")[value - 1]
        gone = float(np.count_nonzero((sub == value) & (out == 0))) * voxel_ml
        warnings.append(f"left out {gone:.3g} mL labelled {side} lung, where the coarse stage found no {side} lung")
    for value, side in ((1, "right"), (2, "left")):
        volume = float(np.count_nonzero(out == value)) * voxel_ml
        if 0 < volume < min_volume_ml:
            out[out == value] = 0
            warnings.append(f"removed a {side} lung of only {volume:.2g} mL (below {min_volume_ml:g} mL)")
    added = int(np.count_nonzero((out > 0) & (sub == 0)))
    removed = int(before) - (int(np.count_nonzero(out)) - added)
    sub[...] = out
    start = tuple(int(o) + int(s.start) for o, s in zip(offset_xyz, reversed(box)))
    swapped = _sides_swapped(sub, reference, start) if swap else []  # type: ignore[arg-type]
    if swapped:
        _swap_sides(sub)
    return warnings + swapped, (added, removed)


def rule(mask: np.ndarray, ctx: ScanContext, p: ComponentsParams) -> tuple[np.ndarray, RuleReport]:
    """Clean the sided label array ``mask`` (scan grid, in place)."""
    warnings, (added, removed) = clean_lungs_array(mask, ctx.geometry, offset_xyz=ctx.offset_xyz,  # type: ignore[arg-type]
                                                   min_volume_ml=p.min_ml, support=ctx.lung_support, min_support=p.min_support,
                                                   found_sides=ctx.found_sides, swap=False)
    return mask, RuleReport.of("components", ctx, added=added, removed=removed, warnings=warnings)
