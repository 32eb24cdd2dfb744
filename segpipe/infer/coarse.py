"""Step 2, locate: the coarse stage finds each lung, the body and the large airways.

The whole scan is resampled to the coarse spacing (4 mm by default) and run through the coarse
network. Its lung is split into the patient's right and left from geometry; a side counts only
with ``min_lung_ml`` of confident lung (3 % where the scan's edge cuts it; under 5 %, or where 5 %
finds none of it, its side is unsure, and rule ``gas`` checks it on the scan's own voxels); each side's
box (physical mm, with the training margin and one coarse voxel) is where the fine stage looks.
The scan's edge is its array's faces, the scanner's padding and the blank slices at its ends.
The body (inside the skin) and the trachea and main bronchi are found on the same grid: the
clean-up rules use them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property, partial
from typing import Any

import numpy as np
import SimpleITK as sitk
from scipy import ndimage

from segpipe import spatial
from segpipe.infer.settings import Settings, load_network, release_freed_memory
from segpipe.refine import (
    body_cut_side,
    body_in_view,
    body_midline_x,
    coarse_airways,
    end_piece_side,
    join_cut_pieces,
    padding_of,
    piece_side,
    side_boundary,
    skin_slack,
    split_sides,
)
from segpipe.refine._util import FULL, component_sizes, label, on_faces
from segpipe.refine.body import BodyParams
from segpipe.refine.sides import AERATED_HU, CENTRE_MARGIN_MM, FLANK_REACH_MM, WEAK_CUES, at_view_side
from segpipe.refine.spine import join_beyond_spine, part_at_spine, spine_x

__all__ = ["CoarseResult", "locate", "name_sides", "confident_parts", "SIDES"]

SIDES = (("right", 1), ("left", 2))
CUT_LUNG_SHARE = 0.03  # a lung the scan's edge cuts counts with this share of min_lung_ml (1.5 mL)
SURE_CUT_SHARE = 0.05  # ... and under this share (2.5 mL), or where this share finds none of it, its side is unsure (rule ``gas``)
BESIDE_SHARE = 0.006  # a cut piece beside a found base at the same end of the scan: this share of min_lung_ml (0.3 mL)
INSIDE_SHARE = 0.5  # a find needs this share of its sure lung inside the body (not in the band beyond the skin)


def _at_edge(mask: np.ndarray, edge: np.ndarray | None = None) -> bool:
    """Whether ``mask`` reaches the scan's first or last slice or the view's side edge
    (:func:`segpipe.refine.sides.at_view_side`: an in-plane face of its array or ``edge``)."""
    return bool(mask[0].any() or mask[-1].any()) or at_view_side(mask, edge)


def view_edge(hu_zyx: np.ndarray, padding: np.ndarray | None, p: BodyParams) -> np.ndarray | None:
    """The scanner's reconstruction circle as an edge of the scan: ``(z, y, x)`` voxels next to
    (face neighbours) or on its padding (below ``p.padding_hu``, or ``padding``: a ``(z, y, x)``
    mask or ``(y, x)`` footprint of it, :func:`_padding_on`), or ``None`` where there is none.
    A lung the circle cuts is cut by the scan's edge as much as one an array face cuts."""
    pad = np.asarray(hu_zyx) < p.padding_hu
    if padding is not None:
        pad |= padding if padding.ndim == 3 else padding[None]
    return ndimage.binary_dilation(pad) if pad.any() else None


def confident_parts(mask: np.ndarray, confident: np.ndarray, voxel_ml: float, min_ml: float, *,
                    air: np.ndarray | None = None, air_share: float = 0.25,
                    side_of: Callable[[np.ndarray], int] | None = None, beside_of: Callable[[np.ndarray], int] | None = None,
                    inside: np.ndarray | None = None, edge: np.ndarray | None = None,
                    share: float = CUT_LUNG_SHARE) -> np.ndarray:
    """The components of the coarse lung ``mask`` (6-connected) that hold at least ``min_ml``
    of ``confident`` lung, or ``share`` (:data:`CUT_LUNG_SHARE`) of that where a component reaches the
    scan's edge (a face of the array, or ``edge``: :func:`view_edge`; a lung the view cuts
    shows only part of itself).

    That share is for lung tissue: a component whose confident voxels are ``air_share`` or more
    pure ``air`` (boolean, the grid's voxels below the body rule's ``air_hu``) is gas in the
    bowel or stomach, not the tip of a lung, and needs the whole ``min_ml``. With ``side_of``
    (a piece's side, 0 for neither: :func:`segpipe.refine.piece_side`), the cut pieces that
    reach the scan's first or last slice on one side count their confident lung together where
    none of them is enough alone: the end of the scan's range can cut a small base into
    crescents of the recess around the dome. Where one piece is enough, the others beside it
    (the lateral and posterior crescents of a base whose front piece was found) need
    :data:`BESIDE_SHARE` of ``min_ml`` each, to leave out specks; with ``beside_of`` (a weaker
    side: :func:`segpipe.refine.end_piece_side`) so do the cut pieces at that end that it puts
    on the found side (the front of a left base beside the heart, whose side vote is split).
    Given the body itself as ``inside`` (``mask`` may reach a voxel beyond it, for partial volume at the skin), a
    component with less than :data:`INSIDE_SHARE` of its confident lung inside it counts for
    nothing: a lung lies within the body, and a find in the band beyond the skin is a mattress
    or pad of lung's density that the field of view's sides cut (seen along a whole scan)."""
    labels, n = label(mask)
    if n == 0:
        return np.zeros(mask.shape, bool)
    sure_ml = component_sizes(np.where(confident, labels, 0), n) * voxel_ml
    beyond = np.zeros(n + 1, bool)  # mostly beyond the skin: neither kept nor pooled with the others
    if inside is not None:
        beyond = component_sizes(np.where(confident & inside, labels, 0), n) * voxel_ml < INSIDE_SHARE * sure_ml
        sure_ml = np.where(beyond, 0.0, sure_ml)
    cut = on_faces(labels, n)
    if edge is not None:
        cut |= component_sizes(np.where(edge, labels, 0), n) > 0
    if air is not None:
        sure_air_ml = component_sizes(np.where(confident & air, labels, 0), n) * voxel_ml
        cut &= sure_air_ml < air_share * sure_ml
    if side_of is not None:
        pooled = sure_ml.copy()
        for end in (0, -1):  # the scan's first and last slice
            at_end = [int(i) for i in np.unique(labels[end][labels[end] > 0]) if cut[i]]
            groups: dict[int, list[int]] = {}
            near: dict[int, int] = {}  # each piece's side by ``beside_of``
            for i in at_end:
                piece = labels == i
                if side := side_of(piece):
                    groups.setdefault(side, []).append(i)
                if beside_of is not None:
                    near[i] = beside_of(piece)
            for side, members in groups.items():
                if sure_ml[members].max() < share * min_ml:  # none enough alone: together
                    pooled[members] = sure_ml[members].sum()
                else:  # a found base: the crescents beside it with some sure lung are its own
                    members = [i for i in at_end if i in members or near.get(i) == side]
                    beside = [m for m in members if sure_ml[m] >= BESIDE_SHARE * min_ml]
                    pooled[beside] = np.maximum(pooled[beside], share * min_ml)
        sure_ml = pooled
    keep = (sure_ml >= np.where(cut, share * min_ml, min_ml)) & ~beyond
    keep[0] = False
    return keep[labels]


def positions_in(grid: spatial.Geometry, ref: spatial.Geometry) -> list[np.ndarray]:
    """Per axis (x, y, z), the continuous index in ``ref`` of each voxel centre of ``grid``
    (both in the same, canonical, directions)."""
    direction = np.asarray(ref.GetDirection()).reshape(3, 3)
    shift = direction.T @ (np.asarray(grid.GetOrigin()) - np.asarray(ref.GetOrigin()))
    return [(shift[a] + np.arange(grid.GetSize()[a]) * grid.GetSpacing()[a]) / ref.GetSpacing()[a] for a in range(3)]


def _padding_on(canonical: sitk.Image, coarse_img: sitk.Image, found: tuple[np.ndarray, float] | None,
                s: Settings) -> np.ndarray | None:
    """The scanner's padding on the coarse grid, ``(z, y, x)``: the coarse voxels whose centres
    fall on it in the scan's own voxels, where these lie below ``padding_hu`` (-2048, -3024) or
    on the footprint ``found`` (:func:`segpipe.refine.padding_of`; also padding with the value
    of air). Found on the scan's own voxels: the coarse grid is resampled with the padding
    raised to air (:func:`segpipe.spatial.resample_padding_raised`), and a coarse voxel that
    mixes padding and lung along the circle is the scan's, not padding. ``None`` where there is
    none."""
    hu = sitk.GetArrayViewFromImage(canonical)
    px, py, pz = positions_in(spatial.Geometry.of(coarse_img), spatial.Geometry.of(canonical))
    ix, iy, iz = (np.clip(np.rint(p).astype(int), 0, n - 1) for p, n in zip((px, py, pz), canonical.GetSize()))
    padding = hu[np.ix_(iz, iy, ix)] < s.rules.body.padding_hu
    if found is not None:
        padding |= found[0][np.ix_(iy, ix)][None]
    return padding if padding.any() else None


def scanned_slices(canonical: sitk.Image, coarse_img: sitk.Image, threshold_hu: float) -> tuple[slice, slice]:
    """The coarse slices that lie on the scan's own slices, less the blank ones at its ends:
    slices with nothing above ``threshold_hu`` (the body's), or one value throughout, before
    the first and after the last slice that holds some of the patient. Such a slice (air or a
    fill value such as 0: what a resample that rounds its size up, or a scan padded to a
    length, adds; a scanned slice is never one value) is beyond the scanned range, so a lung
    that reaches the slice next to it is cut by the scan's edge there. Also the coarse slices
    that are the nearest to one of the scanned slices (where the scan's voxels look the coarse
    stage's results up: one more at an end where a coarse slice's centre lies on a blank
    slice but nearer to a scanned one than its neighbour). Whole scan (``slice(None)``, twice)
    when there is none or nothing but blank slices."""
    hu = sitk.GetArrayViewFromImage(canonical)
    n = hu.shape[0]

    def scanned(z: int) -> bool:
        s = hu[z]
        top = s.max()
        return bool(top > threshold_hu and s.min() < top)

    lo = next((z for z in range(n) if scanned(z)), n)
    if lo == n:
        return slice(None), slice(None)
    hi = next(z for z in range(n - 1, -1, -1) if scanned(z))
    if lo == 0 and hi == n - 1:
        return slice(None), slice(None)
    grid, scan = spatial.Geometry.of(coarse_img), spatial.Geometry.of(canonical)
    iz = np.rint(positions_in(grid, scan)[2])
    on = np.flatnonzero((iz >= lo) & (iz <= hi))
    if not on.size:
        return slice(None), slice(None)
    k = np.clip(np.round(positions_in(scan, grid)[2][[lo, hi]]).astype(int), 0, grid.size[2] - 1)
    return slice(int(on[0]), int(on[-1]) + 1), slice(int(min(k[0], on[0])), int(max(k[1], on[-1])) + 1)


def _view_rim(body: np.ndarray, padding: np.ndarray | None) -> np.ndarray | None:
    """The coarse voxels of the scanner's ``padding`` (``(z, y, x)`` or a ``(y, x)``
    footprint) that touch ``body`` in-plane (face neighbours); ``None`` where there are none.
    A coarse voxel whose centre falls on the padding is not body, though the scan's voxels
    inside the field of view around that centre are: the lung the view cuts reaches them."""
    if padding is None or not body.any():
        return None
    grown = ndimage.binary_dilation(body, structure=np.array([[[0, 1, 0], [1, 1, 1], [0, 1, 0]]], bool))
    rim = grown & ~body & (padding if padding.ndim == 3 else padding[None])
    return rim if rim.any() else None


def _on_grid(part: np.ndarray, zs: slice, shape: tuple[int, ...], repeat_to: slice | None = None) -> np.ndarray:
    """``part`` (the slices ``zs`` of a ``(z, y, x)`` grid of ``shape``) on the whole grid:
    zero beyond, except that its end slices are repeated out to ``repeat_to`` (a slice range
    around ``zs``)."""
    if zs == slice(None):
        return part
    whole = np.zeros(shape, part.dtype)
    whole[zs] = part
    if repeat_to is not None:
        whole[repeat_to.start:zs.start] = part[0]
        whole[zs.stop:repeat_to.stop] = part[-1]
    return whole


@dataclass(frozen=True)
class CoarseResult:
    """What the coarse stage found, on its grid (canonical directions).

    Args:
        geometry: the coarse grid.
        spacing_mm: its spacing (x, y, z).
        lung: the coarse lung as a float32 image (1 where a lung class wins), the fine-grid
            rules' prior.
        sides: ``(z, y, x)`` uint8, 1 right lung, 2 left lung (sides from geometry; sides
            below ``min_lung_ml`` dropped).
        body: ``(z, y, x)`` inside the body.
        airways: ``(z, y, x)`` the trachea and main bronchi (empty when that rule is off).
        boxes: per side found, its box in physical mm (canonical).
        padding: the scanner's padding in the scan (:func:`segpipe.spatial.in_plane_image` of
            its footprint, and its value), for the fine stage to raise it to air as the coarse
            stage did; ``None`` where there is none.
        zooms: the in-plane zooms over which the coarse network's side vote was averaged
            (:meth:`segpipe.infer.settings.Settings.coarse_zooms`).
        view_rim: ``(z, y, x)``, the coarse voxels of the scanner's padding beside the body
            (in-plane): where the field of view cuts the body, the scan's own voxels there
            that are not padding are inside it (:func:`segpipe.infer.assemble.scan_context`);
            ``None`` where the body meets no padding.
        spine_x_mm: the spine's physical x (canonical) where the side split used it (a view
            that cuts the body, ``sides.spine``; :func:`segpipe.refine.spine.spine_x`); else ``None``.
        unsure_sides: the sides (1 right, 2 left) found only as a lung the scan's edge cuts
            with less than :data:`SURE_CUT_SHARE` of ``min_lung_ml`` of sure lung, or with none
            of what that share finds (rule ``gas``).
    """

    geometry: spatial.Geometry
    spacing_mm: tuple[float, float, float]
    lung: sitk.Image
    sides: np.ndarray
    body: np.ndarray
    airways: np.ndarray
    boxes: dict[str, spatial.Box]
    padding: tuple[sitk.Image | None, float] | None = None
    zooms: tuple[float, ...] = (1.0,)
    view_rim: np.ndarray | None = None
    spine_x_mm: float | None = None
    unsure_sides: frozenset[int] = frozenset()

    def inside_on(self, grid: spatial.Geometry) -> np.ndarray:
        """The body less the airways, looked up (nearest voxel) on ``grid`` (canonical
        directions), as a ``(z, y, x)`` array."""
        return self._nearest_on(self.body & ~self.airways, grid)

    def prior_on(self, lattice: sitk.Image | spatial.Geometry) -> np.ndarray:
        """The coarse lung resampled (linear) onto ``lattice``, ``(z, y, x)`` float32."""
        return sitk.GetArrayFromImage(spatial.resample_to_reference(
            self.lung, lattice, interpolator=sitk.sitkLinear, default_value=0.0, output_pixel_type=sitk.sitkFloat32))

    def body_centre_on(self, grid: spatial.Geometry) -> np.ndarray:
        """Per slice of ``grid`` (canonical directions), the centre of the body in that slice
        as a ``(y, x)`` voxel index of ``grid``: ``(Z, 2)`` float. Slices without body take the
        nearest slice's centre."""
        body = self.body
        zz, yy, xx = np.nonzero(body)
        nz = body.shape[0]
        if len(zz) == 0:  # no body found: the middle of the coarse grid
            centre = np.tile([(body.shape[1] - 1) / 2, (body.shape[2] - 1) / 2], (nz, 1))
        else:
            count = np.bincount(zz, minlength=nz).astype(float)
            has = count > 0
            centre = np.stack([np.bincount(zz, yy, nz), np.bincount(zz, xx, nz)], axis=1)[has] / count[has, None]
            slices = np.arange(nz)
            centre = np.stack([np.interp(slices, slices[has], centre[:, k]) for k in range(2)], axis=1)
        pos = positions_in(grid, self.geometry)  # x, y, z: continuous coarse index of each voxel of grid
        k = np.clip(np.round(pos[2]).astype(int), 0, nz - 1)
        scale = [self.geometry.GetSpacing()[a] / grid.GetSpacing()[a] for a in range(3)]
        return np.stack([(centre[k, 0] - pos[1][0]) * scale[1], (centre[k, 1] - pos[0][0]) * scale[0]], axis=1)

    def scan_lookup(self, scan_spacing: tuple[float, ...], offset_xyz: tuple[int, int, int],
                    shape_zyx: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """For a block of the canonical scan's grid (from index ``offset_xyz``, ``shape_zyx``
        voxels), the coarse voxel index of each slice, row and column (``kc``, ``jc``,
        ``ic``): both grids share the scan's corner."""
        sp_f, sp_c = np.asarray(scan_spacing), np.asarray(self.spacing_mm)
        ox, oy, oz = offset_xyz
        cz, cy, cx = self.body.shape
        fz, fy, fx = shape_zyx
        kc = np.clip(np.round((np.arange(fz) + oz + 0.5) * sp_f[2] / sp_c[2] - 0.5).astype(int), 0, cz - 1)
        jc = np.clip(np.round((np.arange(fy) + oy + 0.5) * sp_f[1] / sp_c[1] - 0.5).astype(int), 0, cy - 1)
        ic = np.clip(np.round((np.arange(fx) + ox + 0.5) * sp_f[0] / sp_c[0] - 0.5).astype(int), 0, cx - 1)
        return kc, jc, ic

    @cached_property
    def support(self) -> np.ndarray:
        """Where each sided lung, grown by one coarse voxel (face neighbours), reaches:
        ``(z, y, x)`` uint8, bit 1 the right lung, bit 2 the left one (both may be set). The
        fine lung the coarse stage supports: :mod:`~segpipe.refine.components` keeps its
        pieces, and only it grows a fine region."""
        out = np.zeros(self.sides.shape, np.uint8)
        for value in (1, 2):
            side = self.sides == value
            if side.any():
                out |= ndimage.binary_dilation(side, structure=FULL).astype(np.uint8) * np.uint8(value)
        return out

    def support_on(self, grid: spatial.Geometry) -> np.ndarray:
        """:attr:`support` looked up (nearest voxel) on ``grid`` (canonical directions),
        ``(z, y, x)`` uint8."""
        return self._nearest_on(self.support, grid)

    def _nearest_on(self, array: np.ndarray, grid: spatial.Geometry) -> np.ndarray:
        """``array`` (on the coarse grid) looked up at the nearest coarse voxel of each voxel
        of ``grid`` (canonical directions)."""
        index = [np.clip(np.round(pos).astype(int), 0, self.geometry.size[a] - 1)
                 for a, pos in enumerate(positions_in(grid, self.geometry))]
        return array[np.ix_(index[2], index[1], index[0])]

    def side_boundary_on(self, scan_spacing: tuple[float, ...]) -> np.ndarray:
        """:func:`segpipe.refine.side_boundary` of the coarse sides, per coarse ``(z, y)`` row,
        in x index units of the scan's grid."""
        return (side_boundary(self.sides) + 0.5) * self.spacing_mm[0] / float(scan_spacing[0]) - 0.5


def name_sides(found: np.ndarray, *, spine: float | None, voxel_ml: float, edge: np.ndarray | None,
               cues: list[str] | None = None, **split: Any) -> tuple[np.ndarray, float, float]:
    """The coarse finds ``found`` (boolean ``(z, y, x)``, canonical LPS) labelled by side, 1 right
    and 2 left (docs/pipeline.md, "How right and left are decided"): the side split
    (:func:`segpipe.refine.split_sides`, its keyword arguments ``split``; ``cues`` receives what
    sided a lone lung), then, in a view that cuts the body where the spine shows (x index
    ``spine``), the part of a find beyond it (:func:`segpipe.refine.spine.part_at_spine`), the
    pieces that the scan's ends cut (:func:`segpipe.refine.join_cut_pieces`; ``edge``: the
    scanner's circle) and a find beyond the spine at the view's side edge
    (:func:`segpipe.refine.spine.join_beyond_spine`). Returns the sides, the mL that
    ``part_at_spine`` gave to the other lung beyond the spine, and the mL of finds it named
    wholly by the side of the spine they lie on."""
    left_vote = split["left_vote"]
    sides = split_sides(found, spine_x=spine, cues=cues, **split)
    parted_ml = named_ml = 0.0
    if spine is not None:
        split_only = sides
        sides, parted_ml = part_at_spine(found, sides, spine, left_vote, voxel_ml, split.get("aerated"), split.get("centre_x"))
        named_ml = max(0.0, np.count_nonzero((sides != split_only) & (sides > 0)) * voxel_ml - parted_ml)
    sides = join_cut_pieces(found, sides, split["midline_x"], left_vote, edge)
    if spine is not None:
        sides = join_beyond_spine(found, sides, spine, left_vote, edge)
    return sides, parted_ml, named_ml


def _network(array: np.ndarray, coarse_img: sitk.Image, weights: dict[str, Any],
             s: Settings) -> tuple[np.ndarray, np.ndarray, np.ndarray, tuple[float, ...]]:
    """The coarse network on the coarse grid's ``array`` (HU, ``(z, y, x)``): any lung's
    probability, where it is confident (:attr:`Settings.confident`), per voxel whether it calls
    the left lung rather than the right, and the in-plane zooms its side vote is averaged over."""
    import torch

    from segpipe.model import any_lung, sliding_window_probs, zoom_averaged_probs

    net = load_network("coarse", s.coarse, weights, s.device)
    run = partial(sliding_window_probs, net, stage=s.coarse, window_hu=s.window_hu, device=s.device, accumulate_on=s.device,
                  sw_batch=s.window_batch(s.coarse), overlap=s.coarse.overlap)
    probs = run(array)
    lung = any_lung(probs)
    confident = (probs[0] <= 1.0 - s.confident).numpy()
    # a view narrower than a body shows part of one at a scale the network cannot read from the
    # body's outline: its vote on the sides is averaged over in-plane zooms of its input
    sx, sy = coarse_img.GetSpacing()[:2]
    zooms = s.coarse_zooms((array.shape[2] * sx, array.shape[1] * sy))
    votes = zoom_averaged_probs(run, array, zooms, plain=probs) if len(zooms) > 1 else probs
    left_vote = (votes[2] > votes[1]).numpy()
    del run, net, probs, votes
    if s.device.type == "cuda":
        torch.cuda.empty_cache()
    return lung, confident, left_vote, zooms


def _count_sides(sides: np.ndarray, confident: np.ndarray, surely_found: np.ndarray, edge: np.ndarray | None,
                 voxel_ml: float, min_lung_ml: float) -> frozenset[int]:
    """Drop (in place) each side of ``sides`` without enough ``confident`` lung: ``min_lung_ml``,
    or :data:`CUT_LUNG_SHARE` of it where the scan's edge cuts the lung; return the sides that
    stay but are unsure (a cut lung under :data:`SURE_CUT_SHARE` of it, or with none of
    ``surely_found``: rule ``gas`` looks at them again)."""
    unsure = set()
    for value in (1, 2):
        side = sides == value
        cut = _at_edge(side, edge)
        sure_ml = np.count_nonzero(side & confident) * voxel_ml
        if sure_ml < min_lung_ml * (CUT_LUNG_SHARE if cut else 1.0):
            sides[side] = 0
        elif cut and (sure_ml < min_lung_ml * SURE_CUT_SHARE or not (side & surely_found).any()):
            unsure.add(value)
    return frozenset(unsure)


def locate(canonical: sitk.Image, weights: dict[str, Any], s: Settings) -> tuple[CoarseResult, list[str]]:
    """Run the coarse stage on the canonical scan (``weights``: the coarse network's);
    returns the result and warnings."""
    coarse_mm = spatial.spacing_for_size(canonical, tuple(s.coarse_size_xyz)) if s.coarse_size_xyz else s.coarse_mm
    scan_padding = padding_of(sitk.GetArrayViewFromImage(canonical), s.rules.body)  # the scanner's padding: raised to air
    padding_in_plane = None if scan_padding is None else (spatial.in_plane_image(scan_padding[0], canonical), scan_padding[1])
    coarse_img = spatial.resample_image(canonical, coarse_mm, padding=padding_in_plane)
    array = sitk.GetArrayFromImage(coarse_img)
    # blank slices at the scan's ends are beyond its range: the network sees the scanned range's
    # end slice repeated there, as beyond any scan's edge, and the lungs are found between them
    zs, near = scanned_slices(canonical, coarse_img, s.rules.body.hu)
    if zs != slice(None):
        array[:zs.start] = array[zs.start]
        array[zs.stop:] = array[zs.stop - 1]
    lung, confident, left_vote, zooms = _network(array, coarse_img, weights, s)
    del array
    release_freed_memory()

    full_hu = sitk.GetArrayViewFromImage(coarse_img)
    padding = _padding_on(canonical, coarse_img, scan_padding, s)
    hu, lung_z, confident, left_vote = full_hu[zs], lung[zs], confident[zs], left_vote[zs]
    padding = padding[zs] if padding is not None and padding.ndim == 3 else padding
    # the fine stage's lungs must lie inside the body itself (no slack: the chest wall is
    # thicker than a coarse voxel), the coarse lungs within one voxel of it (partial volume)
    body = body_in_view(hu, coarse_img.GetSpacing(), s.rules.body, padding=padding, lung=lung_z & confident)
    edge = view_edge(hu, padding, s.rules.body)
    view_rim = _view_rim(body, padding)
    # a lung needs enough confident lung: smaller or unsure finds are gas in the bowel or
    # stomach. A lung the scan's edge cuts (the bases at the top of an abdominal scan, a slab)
    # shows only part of itself, a few mL at the tip of a recess: 3 % is enough, counted over the
    # crescents of one side that the scan's end cuts, and only for lung tissue (gas is pure air,
    # lung is not); under 5 % (or where 5 % finds none of it) its side is unsure, and rule ``gas``
    # looks at it again on the scan's own voxels, where the inside of a gas pocket is pure air.
    # Unsure finds go before the sides are split, so that larger pockets of bowel gas do not take
    # the place of a small base. The network's side only confirms that pieces on one side of the
    # body's midline are one lung that the scan's edge cuts (a recess cut into pieces)
    voxel_ml = spatial.voxel_volume_ml(coarse_img)
    midline_x = body_midline_x(hu, s.rules.body.hu)
    air = hu < s.rules.body.air_hu
    slack = skin_slack(body)
    parts = partial(confident_parts, lung_z & slack, confident, voxel_ml, s.min_lung_ml, air=air,
                    air_share=s.rules.body.air_share, side_of=lambda piece: piece_side(piece, midline_x, left_vote),
                    beside_of=lambda piece: end_piece_side(piece, midline_x, left_vote, edge),
                    inside=body, edge=edge)
    found = parts()
    surely_found = parts(share=SURE_CUT_SHARE)  # what the surer share finds: a side with none of it is unsure
    outside = air & ~slack if edge is None else air & ~slack & ~edge  # the air beyond the skin, not the scanner's padding
    cues: list[str] = []
    view_side = body_cut_side(body, edge)
    centre_x = spatial.scanner_centre_x_index(canonical, coarse_img) if s.rules.sides.scanner_centre else None
    # where the view cuts the body at a side its middle is not the body's: the spine marks the
    # midline for the sides (when that cue is on) and for the trachea's search
    found_spine = spine_x(hu, coarse_img.GetSpacing(), body) if view_side else None
    spine = found_spine if s.rules.sides.spine else None
    aerated = hu < AERATED_HU
    sides, parted_ml, named_ml = name_sides(found, spine=spine, voxel_ml=voxel_ml, edge=edge, cues=cues,
                                            min_fraction=s.rules.sides.min_fraction, midline_x=midline_x, left_vote=left_vote,
                                            view_side=view_side, outside=outside,
                                            flank_reach=int(round(FLANK_REACH_MM / coarse_img.GetSpacing()[0])),
                                            aerated=aerated, min_lung=int(round(s.min_lung_ml / voxel_ml)),
                                            centre_x=centre_x,
                                            centre_margin=int(round(CENTRE_MARGIN_MM / coarse_img.GetSpacing()[0])))
    unsure = _count_sides(sides, confident, surely_found, edge, voxel_ml, s.min_lung_ml)
    # the scan's last slice can look its body up in a coarse slice beyond the range (the network's lung likewise)
    sides, body = _on_grid(sides, zs, full_hu.shape), _on_grid(body, zs, full_hu.shape, repeat_to=near)
    view_rim = None if view_rim is None else _on_grid(view_rim, zs, full_hu.shape, repeat_to=near)
    boxes = {}
    extra = max(coarse_img.GetSpacing())
    for side, value in SIDES:
        box = spatial.box_from_mask(spatial.copy_geometry(sides, coarse_img), value)
        if box is not None:
            boxes[side] = box.expand(s.margin_mm + extra)
    airways = coarse_airways(full_hu, body, coarse_img.GetSpacing(), s.rules.airways, spine_x=found_spine)
    result = CoarseResult(
        spatial.Geometry.of(coarse_img), tuple(coarse_img.GetSpacing()),  # type: ignore[arg-type]
        spatial.copy_geometry(np.asarray(_on_grid(lung[near], near, lung.shape), np.float32), coarse_img), sides, body, airways,
        boxes, padding_in_plane, zooms, view_rim,
        None if spine is None else round(float(coarse_img.TransformContinuousIndexToPhysicalPoint((spine, 0.0, 0.0))[0]), 1),
        unsure,
    )
    warnings = [] if boxes else ["no lung found: the scan may not include the chest; the mask is empty"]
    if len(boxes) == 1 and cues and cues[0] in WEAK_CUES:
        warnings.append(f"one lung in a view that cuts the body, named {' and '.join(boxes)} from {cues[0]}: check its side")
    if parted_ml:
        warnings.append(f"gave {parted_ml:.0f} mL of a find beyond the spine to the other lung (the network's side vote agrees, "
                        "or the two meet only at a junction line; the view cuts the body): check the sides")
    strong = ("the network's vote", "the flank beside it")  # the cues before the centre: it was not needed
    if len(boxes) == 1 and view_side and cues and cues[0] not in strong and s.rules.sides.scanner_centre and spatial.origin_at_edge(canonical):
        warnings.append("the scan's physical x = 0 lies at its edge (an origin reset to the image's corner, as in a file "
                        "saved without its scanner coordinates): the side of the one lung in this view that cuts the "
                        "body is named without the scanner's centre")
    if named_ml >= 1.0:
        warnings.append(f"named {named_ml:.0f} mL of lung by the side of the spine it lies on, not by the network's side vote "
                        "(the view cuts the body): check the sides")
    return result, warnings
