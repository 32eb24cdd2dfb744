"""Label clean-up: largest connected component per lung, hole filling, side check.

Works on a label map (0 background, 1 right lung, 2 left lung) with its geometry; sides are
checked in physical LPS space (+x is the patient's left), so the storage orientation of the
array does not matter.

Example:
    >>> cleaned, warnings = clean_lungs(label)              # doctest: +SKIP
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import numpy as np
import SimpleITK as sitk
from scipy import ndimage

from segpipe import spatial

__all__ = ["largest_component", "fill_holes", "check_sides", "clean_lungs", "clean_lungs_array", "split_sides", "side_boundary", "body_midline_x", "body_interior", "trachea_seed", "track_airways", "fat_in_lung", "clear_fat", "FAT_HU", "snap_edges", "snap_label_edges", "EDGE_HU", "map_parallel", "worker_threads", "pleural_air", "PLEURAL_AIR_HU", "component_sizes", "dense_lung", "dense_to_wall", "DENSE_LUNG_HU"]

_FULL = ndimage.generate_binary_structure(3, 1)
_IN_PLANE = np.zeros((3, 3, 3), bool)  # face neighbours within an axial slice only
_IN_PLANE[1] = ndimage.generate_binary_structure(2, 1)
_CROSS2 = ndimage.generate_binary_structure(2, 1)
_T = TypeVar("_T")
_MAX_THREADS = 8


def worker_threads() -> int:
    """Threads for slice-by-slice clean-up: the CPUs this process may use, at most 8.
    SciPy's ndimage and NumPy release the GIL in the work that matters here, so slices
    (and the two lungs) run in parallel for real."""
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        usable = os.cpu_count() or 1
    return max(1, min(usable, _MAX_THREADS))


def map_parallel(fn: Callable[[int], _T], n: int) -> list[_T]:
    """``[fn(i) for i in range(n)]`` over :func:`worker_threads` threads, results in order.
    ``fn`` must only write memory that no other ``i`` touches (e.g. its own slice)."""
    threads = min(worker_threads(), n)
    if threads <= 1:
        return [fn(i) for i in range(n)]
    with ThreadPoolExecutor(threads) as pool:
        return list(pool.map(fn, range(n)))


#: HU range of fat (in-plane smoothed): lung never contains a blob of it. Consolidation,
#: atelectasis and effusion (0..+60 HU) and ground glass (-700..-300 HU) lie outside it.
FAT_HU = (-200.0, -30.0)
_FAT_SMOOTH_MM = 1.0  # in-plane Gaussian sigma before the HU test (noise)
_FAT_OPEN_MM = 2.0  # in-plane opening radius: thinner bands are partial volume at the lung's edge
_FAT_LUNG_MID_HU = -475.0  # half way between aerated lung (-850) and fat (-100)


def fat_in_lung(lung: np.ndarray, hu: np.ndarray, spacing_yx: tuple[float, float]) -> np.ndarray:
    """The voxels of one axial slice's ``lung`` mask that are fat: in-plane smoothed HU within
    :data:`FAT_HU`, in blobs that survive an in-plane opening of :data:`_FAT_OPEN_MM` (the thin
    band of partial volume where aerated lung meets the chest wall, the heart or a consolidation
    does not), then grown back to where the smoothed HU is half way between lung and fat.
    Pericardial fat pads and mediastinal fat next to a lung are what a network most
    often takes for lung; lung itself never holds a fat blob."""
    lung = np.asarray(lung, bool)
    out = np.zeros(lung.shape, bool)
    box = _bounding_box(lung, pad=int(np.ceil(3 * _FAT_SMOOTH_MM / min(spacing_yx))))
    if box is None:
        return out
    sigma = tuple(_FAT_SMOOTH_MM / float(s) for s in spacing_yx)
    smooth = ndimage.gaussian_filter(np.asarray(hu[box], np.float32), sigma=sigma, mode="nearest")
    fat = lung[box] & (smooth > FAT_HU[0]) & (smooth < FAT_HU[1])
    if not fat.any():
        return out
    radius = max(1, int(round(_FAT_OPEN_MM / min(spacing_yx))))
    core = ndimage.binary_opening(fat, structure=_CROSS2, iterations=radius)
    if core.any():  # back out to the middle of the fat-lung transition (50 % partial volume)
        rim = lung[box] & (smooth > _FAT_LUNG_MID_HU)
        core = ndimage.binary_dilation(core, structure=_CROSS2, iterations=radius, mask=rim)
    out[box] = core
    return out


#: Where aerated lung meets the chest wall, the heart or the diaphragm, a voxel is lung when its
#: in-plane smoothed HU is inside this range (half way between lung, about -850, and soft
#: tissue, about +40, is -405; the lower end keeps vessel-free air at -1000, a pneumothorax or
#: the air outside a collapsed lung, from being taken for lung).
EDGE_HU = (-975.0, -450.0)
_EDGE_BAND_MM = 1.5  # in-plane reach of the edge snap (whole pixels, at least one): about one fine-stage voxel
_EDGE_SMOOTH_MM = 0.5  # in-plane Gaussian sigma before the HU test (noise)


def _disk(radius_y: float, radius_x: float) -> np.ndarray:
    """Elliptic 2D structuring element with the given radii in pixels, rounded down (at least 3x3)."""
    ry, rx = max(int(radius_y), 1), max(int(radius_x), 1)
    y, x = np.ogrid[-ry:ry + 1, -rx:rx + 1]
    return (y / max(radius_y, 1.0)) ** 2 + (x / max(radius_x, 1.0)) ** 2 <= 1.0 + 1e-6


def snap_edges(lung: np.ndarray, hu: np.ndarray, spacing_yx: tuple[float, float], allowed: np.ndarray | None = None) -> np.ndarray:
    """One axial slice's ``lung`` mask with its edge moved onto the scan's own air/tissue
    boundary, within :data:`_EDGE_BAND_MM` of where the fine stage (1.5 mm voxels) put it.

    The edge moves only where the lung next to it is aerated (smoothed HU in :data:`EDGE_HU`):
    a band voxel that is tissue is dropped when aerated lung lies just inside it, an outside
    voxel that is air-like is added when the lung inside the band is aerated. Where the lung
    itself is dense (consolidation against the chest wall, a collapsed lobe, ground glass)
    nothing moves: no HU test can place that border. ``allowed`` (same shape, optional) limits
    what may be added (inside the body, not in the airways). Returns a new mask."""
    lung = np.asarray(lung, bool)
    ry, rx = (_EDGE_BAND_MM / float(s) for s in spacing_yx)
    se = _disk(ry, rx)
    pad = 3 * max(se.shape)
    box = _bounding_box(lung, pad=pad)
    out = lung.copy()
    if box is None:
        return out
    sigma = tuple(_EDGE_SMOOTH_MM / float(s) for s in spacing_yx)
    smooth = ndimage.gaussian_filter(np.asarray(hu[box], np.float32), sigma=sigma, mode="nearest")
    air = (smooth > EDGE_HU[0]) & (smooth < EDGE_HU[1])
    m = lung[box]
    core = ndimage.binary_erosion(m, se, border_value=1)
    inner = m & ~core
    outer = ndimage.binary_dilation(m, se) & ~m
    if allowed is not None:
        outer &= np.asarray(allowed, bool)[box]
    # aerated lung at least one band deep inside the edge is the evidence for both moves: a
    # partial-volume rim (a collapsed lobe against pneumothorax air) is not
    aerated = ndimage.binary_dilation(core & air, se, iterations=2)
    drop = inner & (smooth >= EDGE_HU[1]) & aerated  # tissue; very dark lung (a bulla) stays
    add = outer & air & aerated
    region = out[box]
    region[drop] = False
    region[add] = True
    return out


#: Vessel-free air: a voxel whose smoothed HU lies below this holds no lung tissue (aerated
#: lung is about -850 HU with vessels; even emphysematous lung averages above it at 1 mm).
PLEURAL_AIR_HU = -975.0
_PLEURAL_SMOOTH_MM = 1.0  # Gaussian sigma before the HU test (noise)
_PLEURAL_OPEN_MM = 1.5  # opening radius: strands of air thinner than this do not join pockets
_PLEURAL_MIN_ML = 10.0  # smaller pockets stay (emphysema, a small bulla)
_PLEURAL_MIN_EDGE = 0.15  # share of a pocket's surface on the lung mask's edge
_PLEURAL_MIN_AIR_SHARE = 0.3  # share of thin air's surface next to air outside the mask
_PLEURAL_EDGE_MM = 3.0  # "on the edge": this close to the outside of the lung mask
_PLEURAL_GROW_MM = 4.5  # reach into the partial-volume rim of a pocket
_PLEURAL_GROW_HU = -900.0  # the rim grown into: darker than any aerated lung
_PLEURAL_MIN_CONTACT_MM2 = 300.0  # a pneumothorax the network left out meets the mask over more than a bronchus's lumen


def _ellipsoid(radii_vox: tuple[float, ...]) -> np.ndarray:
    """Ellipsoidal structuring element with the given radii in voxels (at least 3 wide per axis)."""
    r = [max(int(v), 1) for v in radii_vox]
    grids = np.ogrid[tuple(slice(-k, k + 1) for k in r)]
    return sum((g / max(float(v), 1.0)) ** 2 for g, v in zip(grids, radii_vox)) <= 1.0 + 1e-6


def _face_neighbour_of(mask: np.ndarray) -> np.ndarray:
    """Voxels with a face neighbour in ``mask`` (the array's border counts as not in it)."""
    out = np.zeros(mask.shape, bool)
    for axis in range(mask.ndim):
        lo = [slice(None)] * mask.ndim
        hi = [slice(None)] * mask.ndim
        lo[axis], hi[axis] = slice(1, None), slice(None, -1)
        out[tuple(lo)] |= mask[tuple(hi)]
        out[tuple(hi)] |= mask[tuple(lo)]
    return out


def _surface_share(labels: np.ndarray, n: int, near: np.ndarray) -> np.ndarray:
    """Per label (0..n) the share of its surface voxels that lie in ``near``."""
    surface = (labels > 0) & _face_neighbour_of(labels == 0)
    return np.bincount(labels[surface & near], minlength=n + 1) / np.maximum(np.bincount(labels[surface], minlength=n + 1), 1)


def _air_pockets(m: np.ndarray, air: np.ndarray, sp_zyx: tuple[float, ...], voxel_ml: float) -> np.ndarray:
    """Rule 1 of :func:`pleural_air`: thick pockets (after an opening) on the mask's edge."""
    ball = _ellipsoid(tuple(_PLEURAL_OPEN_MM / s for s in sp_zyx))
    labels, n = ndimage.label(ndimage.binary_opening(air, ball), structure=_FULL)
    if n == 0:
        return np.zeros(m.shape, bool)
    # each pocket back into the air the opening shaved off, then its share of surface on the edge
    grown = ndimage.grey_dilation(labels, footprint=ball)
    grown = np.where(labels > 0, labels, np.where(air, grown, 0))
    del labels
    # "on the edge": within reach of the mask's outside (the smoothing keeps air a voxel or two
    # off a wall, so a pocket that fills the space up to the chest wall touches it only so)
    outside = ndimage.binary_dilation(~m, _ellipsoid(tuple(_PLEURAL_EDGE_MM / s for s in sp_zyx)), border_value=0)
    keep = (component_sizes(grown, n) * voxel_ml >= _PLEURAL_MIN_ML) & (_surface_share(grown, n, outside) >= _PLEURAL_MIN_EDGE)
    keep[0] = False
    return keep[grown]


def _air_along_pleural_air(m: np.ndarray, air: np.ndarray, outside_air: np.ndarray, sp_zyx: tuple[float, ...],
                           voxel_ml: float) -> np.ndarray:
    """Rule 2 of :func:`pleural_air`: vessel-free air of the mask, however thin, whose surface
    meets vessel-free air just outside the mask: the pneumothorax the network left out goes on
    into it (typically a shell of a few mm around a collapsed lung). Emphysema and bullae
    meet the chest wall or lung there, never air. The air outside must be one body of at least
    :data:`_PLEURAL_MIN_ML`, and what is taken must add up to that much as well (a
    pneumothorax, not a hole in a ragged mask or a stray voxel by a main bronchus)."""
    # the pleural space the network left out: a large body of air (a hole in a ragged mask of
    # emphysematous lung is small)
    labels, n = ndimage.label(outside_air, structure=_FULL)
    big = component_sizes(labels, n) * voxel_ml >= _PLEURAL_MIN_ML
    big[0] = False
    if not big.any():
        return np.zeros(m.shape, bool)
    outside_air = big[labels]
    near = ndimage.binary_dilation(outside_air, _ellipsoid(tuple(_PLEURAL_EDGE_MM / s for s in sp_zyx)))
    labels, n = ndimage.label(air, structure=_FULL)
    keep = _surface_share(labels, n, near) >= _PLEURAL_MIN_AIR_SHARE
    keep[0] = False
    if component_sizes(labels, n)[keep].sum() * voxel_ml < _PLEURAL_MIN_ML:
        return np.zeros(m.shape, bool)
    return keep[labels]


def pleural_air(lung: np.ndarray, hu: np.ndarray, spacing_xyz: tuple[float, float, float],
                valid: np.ndarray | None = None) -> np.ndarray:
    """Pockets of a ``(z, y, x)`` lung mask that are a pneumothorax: air outside the lung.

    A pocket is a connected region of vessel-free air (smoothed HU below
    :data:`PLEURAL_AIR_HU`, opened by :data:`_PLEURAL_OPEN_MM`) of at least
    :data:`_PLEURAL_MIN_ML` that lies on the mask's edge for at least :data:`_PLEURAL_MIN_EDGE`
    of its surface: its air goes on beyond the mask (the pleural space the network already left
    out) or meets the chest wall. Lung tissue is never that: emphysema and bullae hold vessels
    or a wall and lie inside the lung, so their surface is inside the mask. Vessel-free air
    of any thickness whose surface meets vessel-free air just outside the mask is a
    pneumothorax too (:func:`_air_along_pleural_air`). Each pocket found is grown by
    :data:`_PLEURAL_GROW_MM` into its partial-volume rim (below :data:`_PLEURAL_GROW_HU`), then
    cut on the lung's own edge (:func:`_air_side_of_edge`). Where the mask meets such air outside
    it (a pneumothorax the network left out), the mask's voxels next to it that are more air than
    lung go too, up to :data:`_PLEURAL_GROW_MM` deep (:func:`_shell_on_pleural_air`): the
    partial-volume shell a thick-slice scan puts between a collapsed lung and its
    pneumothorax, too light for the HU test above. ``valid`` (same shape, optional)
    marks where air outside the mask may count as pleural: inside the body and inside the scan
    (a grid that reaches past the scan's end holds made-up air there). Returns the mask of
    voxels to take out of the lung."""
    lung = np.asarray(lung, bool)
    out = np.zeros(lung.shape, bool)
    sp_zyx = tuple(float(s) for s in reversed(spacing_xyz))
    # the box reaches far enough past the mask to see the air just outside it
    box = _bounding_box(lung, pad=int(np.ceil(_PLEURAL_EDGE_MM / min(sp_zyx))) + 1)
    if box is None:
        return out
    m = lung[box]
    smooth = ndimage.gaussian_filter(np.asarray(hu[box], np.float32), [_PLEURAL_SMOOTH_MM / s for s in sp_zyx], mode="nearest")
    voxel_ml = float(np.prod(sp_zyx)) / 1000.0
    steps = max(1, int(round(_PLEURAL_GROW_MM / min(sp_zyx))))
    outside_air = ~m & (smooth < PLEURAL_AIR_HU)
    if valid is not None:
        outside_air &= np.asarray(valid, bool)[box]
    found = np.zeros(m.shape, bool)
    air = m & (smooth < PLEURAL_AIR_HU)
    if np.count_nonzero(air) * voxel_ml >= _PLEURAL_MIN_ML:  # (usually not: then no pocket can be that large)
        found = _air_pockets(m, air, sp_zyx, voxel_ml) | _air_along_pleural_air(m, air, outside_air, sp_zyx, voxel_ml)
    del air
    if found.any():
        found = ndimage.binary_dilation(found, structure=_FULL, iterations=steps, mask=m & (smooth < _PLEURAL_GROW_HU))
        # what is left of the mask next to a pocket only as a thin shell (the partial-volume rim
        # between the air and the chest wall or the diaphragm) goes with it: lung is never that thin
        rest = m & ~found
        near = ndimage.binary_dilation(found, structure=_FULL, iterations=steps)
        found |= near & rest & ~ndimage.binary_opening(rest, structure=_FULL)
        found |= _air_side_of_edge(m & ~found, found, hu[box], sp_zyx)
    found |= _shell_on_pleural_air(m & ~found, outside_air, hu[box], sp_zyx, voxel_ml)
    out[box] = found
    return out


def _shell_on_pleural_air(rest: np.ndarray, outside_air: np.ndarray, hu: np.ndarray, sp_zyx: tuple[float, ...],
                          voxel_ml: float) -> np.ndarray:
    """Rule 3 of :func:`pleural_air`: the voxels of the mask ``rest`` that are more air than
    lung (:func:`_more_air_than_lung`), within :data:`_PLEURAL_GROW_MM` of a body of
    vessel-free air outside the mask (at least :data:`_PLEURAL_MIN_ML`) that the mask touches
    over more than :data:`_PLEURAL_MIN_CONTACT_MM2` (a pneumothorax the network left out, not
    the lumen of a bronchus the mask ends in), and joined to it through such voxels. Lung
    never touches such air: the chest wall, the diaphragm or a bulla's wall lies between them;
    the trachea, the main bronchi and the air around the patient are not in ``outside_air``."""
    out = np.zeros(rest.shape, bool)
    touching = outside_air & _face_neighbour_of(rest)
    if not touching.any():  # the usual case
        return out
    labels, n = ndimage.label(outside_air, structure=_FULL)
    face_mm2 = (voxel_ml * 1000.0) ** (2.0 / 3.0)
    keep = (component_sizes(labels, n) * voxel_ml >= _PLEURAL_MIN_ML) & (
        np.bincount(labels[touching], minlength=n + 1) * face_mm2 > _PLEURAL_MIN_CONTACT_MM2)
    keep[0] = False
    if not keep.any():
        return out
    air = keep[labels]
    del labels
    # the shell lies along the contact: only that part of the box is searched (with room for
    # the lung level behind the shell, see _more_air_than_lung)
    pad = [int(np.ceil((_PLEURAL_GROW_MM + 6.0 * _PLEURAL_SMOOTH_MM) / s)) + 1 for s in sp_zyx]
    box = _bounding_box(touching & air, pad=pad)
    air_b = air[box]
    # within reach (mm, not voxel layers: an oblique shell is as deep as a straight one) and
    # joined to the air through air-like voxels
    reach = ndimage.distance_transform_edt(~air_b, sampling=sp_zyx) <= _PLEURAL_GROW_MM
    shell = reach & _more_air_than_lung(rest[box], hu[box], sp_zyx)
    labels, n = ndimage.label(shell | air_b, structure=_FULL)
    joined = np.zeros(n + 1, bool)
    joined[np.unique(labels[air_b])] = True
    joined[0] = False
    out[box] = shell & joined[labels]
    return out


DENSE_LUNG_HU = -300.0  # denser than this (smoothed): consolidated or collapsed lung, not aerated
_DENSE_SMOOTH_MM = 1.5  # Gaussian sigma before the HU test (noise, vessels)
_DENSE_OPEN_MM = 4.5  # opening radius: the coarse stage's blurred rim around the lung drops out
_DENSE_MIN_ML = 10.0  # smaller regions are the coarse stage's 4 mm edge, not a lobe
_DENSE_SURE = 0.9  # some of a region must be this sure (coarse lung probability)
_DENSE_MIN_SHARE = 0.5  # share of a region's voxels that must be dense


def dense_lung(lung: np.ndarray, prior: np.ndarray, hu: np.ndarray, spacing_xyz: tuple[float, float, float],
               allowed: np.ndarray | None = None) -> np.ndarray:
    """Dense lung the fine stage left out that the coarse stage calls lung: a consolidated lobe.

    The fine stage sees 96 mm of the scan at a time; inside a consolidated lobe that is soft
    tissue between ribs and liver, which it does not call lung. The coarse stage sees the
    whole chest (where the lobe lies, its shape) and can. A region is added to the ``(z, y, x)``
    lung mask ``lung`` when it is outside the mask, the coarse lung probability ``prior``
    (same grid) is at least 0.5 and reaches :data:`_DENSE_SURE` somewhere in it, it survives
    an opening of :data:`_DENSE_OPEN_MM` (the coarse stage's blurred edge around aerated lung
    does not), it holds at least :data:`_DENSE_MIN_ML`, at least half of it is denser than
    :data:`DENSE_LUNG_HU` and it touches the mask. ``allowed`` (optional) limits where it may
    lie (inside the body, outside the airways). Returns the voxels to add."""
    lung = np.asarray(lung, bool)
    out = np.zeros(lung.shape, bool)
    cand = (prior >= 0.5) & ~lung
    if allowed is not None:
        cand &= np.asarray(allowed, bool)
    if not (cand & (prior >= _DENSE_SURE)).any():  # the usual case: no region can reach sure
        return out
    box = _bounding_box(cand, pad=1)
    if box is None:
        return out
    sp_zyx = tuple(float(s) for s in reversed(spacing_xyz))
    voxel_ml = float(np.prod(sp_zyx)) / 1000.0
    c = ndimage.binary_opening(cand[box], structure=_ellipsoid(tuple(_DENSE_OPEN_MM / s for s in sp_zyx)))
    if np.count_nonzero(c) * voxel_ml < _DENSE_MIN_ML:
        return out
    smooth = ndimage.gaussian_filter(np.asarray(hu[box], np.float32), [_DENSE_SMOOTH_MM / s for s in sp_zyx], mode="nearest")
    labels, n = _label(c)
    idx = np.arange(1, n + 1)
    size = component_sizes(labels, n)[1:]
    dense = ndimage.sum_labels(smooth > DENSE_LUNG_HU, labels, idx)
    sure = ndimage.maximum(prior[box], labels, idx)
    keep = np.zeros(n + 1, bool)
    keep[1:] = (size * voxel_ml >= _DENSE_MIN_ML) & (dense >= _DENSE_MIN_SHARE * size) & (np.asarray(sure) >= _DENSE_SURE)
    if not keep.any():
        return out
    found = keep[labels]
    out[box] = found & _touches(found, lung[box])
    return out


_WALL_REACH_MM = 20.0  # how far a consolidation is followed out to the chest wall
_WALL_HU = (-20.0, 80.0)  # lightly smoothed HU of consolidated lung (fat, air and bone are outside)
_WALL_SMOOTH_MM = 1.0  # Gaussian sigma before the HU test
_RIB_HU = 200.0  # smoothed HU of rib (cortical and cancellous bone)
_RIB_SLAB_MM = 5.0  # ribs within this height above or below a slice bound it (they run obliquely)
_RIB_MARGIN_MM = 3.0  # the lung ends this far inside the ribs' inner surface (pleura, fascia, innermost muscle)
_WALL_SHELL_MM = 15.0  # along the wall: within this distance of the ribs' inner surface
_RIB_BINS = 120  # angular bins of the rib cage's inner radius around the body's axis


def dense_to_wall(added: np.ndarray, lung: np.ndarray, hu: np.ndarray, spacing_xyz: tuple[float, float, float],
                  centre_yx: np.ndarray, allowed: np.ndarray | None = None) -> np.ndarray:
    """The outer rim of a consolidation that reaches the chest wall, which :func:`dense_lung`
    leaves out.

    Against the ribs a consolidated lobe is as dense as the chest wall's muscle: only the ribs
    and a thin extrapleural fat line bound it. The coarse stage's 4 mm mask of such a lobe
    stops 10-15 mm short of them and the fine stage calls the rim wall. The dense lung
    ``added`` (found by :func:`dense_lung`, ``(z, y, x)``) grows, at most
    :data:`_WALL_REACH_MM` and only through voxels outside ``lung`` whose lightly smoothed HU
    lies in :data:`_WALL_HU` (fat, air and bone stop it) and that lie inside the rib cage
    (:data:`_RIB_MARGIN_MM` within its inner surface, from the ribs within
    :data:`_RIB_SLAB_MM` above or below, farther from the body's axis than the consolidation):

    1. within each axial slice, *away* from the body's axis (``centre_yx``: per slice, the
       body's centre as a ``(y, x)`` voxel index of this grid): never inwards, where the
       diaphragm, heart and mediastinum meet a consolidation with the same density;
    2. from what step 1 added, up and down along the wall (within :data:`_WALL_SHELL_MM` of the
       ribs): the costophrenic recess beside the liver dome, below the coarse stage's lobe.

    ``allowed`` (optional) limits where it may grow (inside the body, outside the airways).
    Returns the voxels to add (not ``added`` itself)."""
    added = np.asarray(added, bool)
    out = np.zeros(added.shape, bool)
    sp_zyx = tuple(float(s) for s in reversed(spacing_xyz))
    # the growth's reach up and down (step 2), and in-plane as far again beyond it for the ribs
    box = _bounding_box(added, pad=[int(np.ceil(r * _WALL_REACH_MM / s)) for r, s in zip((1, 2, 2), sp_zyx)])
    if box is None:
        return out
    slab = int(np.ceil(_RIB_SLAB_MM / sp_zyx[0]))
    outer = (slice(max(box[0].start - slab, 0), min(box[0].stop + slab, added.shape[0])),) + box[1:]  # + ribs above, below
    inner = slice(box[0].start - outer[0].start, box[0].stop - outer[0].start)  # box's slices within outer
    seed = added[box]
    smooth = ndimage.gaussian_filter(np.asarray(hu[outer], np.float32), [0.0] + [_WALL_SMOOTH_MM / s for s in sp_zyx[1:]],
                                     mode="nearest")
    # ribs run obliquely: those within a slab above and below a slice bound it
    rib = ndimage.maximum_filter1d(smooth > _RIB_HU, size=2 * slab + 1, axis=0, mode="constant")[inner]
    smooth = smooth[inner]
    grow = (smooth > _WALL_HU[0]) & (smooth < _WALL_HU[1]) & ~np.asarray(lung, bool)[box]
    if allowed is not None:
        grow &= np.asarray(allowed, bool)[box]
    # distance from the body's axis and direction around it
    dy = (np.arange(box[1].start, box[1].stop, dtype=np.float32)[None, :, None]
          - np.asarray(centre_yx, np.float32)[box[0], 0, None, None]) * sp_zyx[1]
    dx = (np.arange(box[2].start, box[2].stop, dtype=np.float32)[None, None, :]
          - np.asarray(centre_yx, np.float32)[box[0], 1, None, None]) * sp_zyx[2]
    radius = np.hypot(dy, dx)
    sector = ((np.arctan2(dy, dx) + np.pi) * (_RIB_BINS / (2 * np.pi))).astype(np.int32) % _RIB_BINS
    del dy, dx
    # outwards only: not nearer the axis than the nearest seed voxel of the same slice
    far = max(seed.shape) * 1e3 * max(sp_zyx)  # the nearest seed voxel is always in the slice itself
    _, index = ndimage.distance_transform_edt(~seed, sampling=(far, sp_zyx[1], sp_zyx[2]), return_indices=True)
    seed_radius = radius[tuple(index)]
    del index
    # the rib cage around it: bone farther out than the seed (not the spine, nor an enhancing
    # vessel, nearer the axis)
    rib_radius = _rib_cage_radius(rib & (radius > seed_radius), radius, sector)[np.arange(seed.shape[0])[:, None, None], sector]
    near_wall = grow & (radius < rib_radius - _RIB_MARGIN_MM) & (radius > rib_radius - _WALL_SHELL_MM)
    grow &= (radius < rib_radius - _RIB_MARGIN_MM) & (radius >= seed_radius)
    del rib_radius, seed_radius
    steps = int(np.ceil(_WALL_REACH_MM / min(sp_zyx[1:])))
    grown = ndimage.binary_dilation(seed, structure=_IN_PLANE, iterations=steps, mask=grow | seed)
    rim = grown & ~seed
    if rim.any():  # then along the wall, up and down (the costophrenic recess beside the liver)
        steps = int(np.ceil(_WALL_REACH_MM / min(sp_zyx)))
        grown |= ndimage.binary_dilation(rim, structure=_FULL, iterations=steps, mask=near_wall | rim)
    del rim, near_wall
    out[box] = grown & ~seed
    return out


def _rib_cage_radius(rib: np.ndarray, radius: np.ndarray, sector: np.ndarray) -> np.ndarray:
    """Per slice and sector around the body's axis, the inner radius (mm) of the rib cage: the
    nearest ``rib`` voxel's ``radius`` in the sector, interpolated around the circle across
    sectors with no rib; ``(Z, _RIB_BINS)``. A slice with no rib at all gets 0 (nothing lies
    inside it)."""
    nz = rib.shape[0]
    out = np.full((nz, _RIB_BINS), np.inf, np.float32)
    z = np.broadcast_to(np.arange(nz)[:, None, None], rib.shape)
    np.minimum.at(out, (z[rib], sector[rib]), radius[rib])
    angles = np.arange(_RIB_BINS)
    for k in range(nz):
        seen = np.isfinite(out[k])
        out[k] = np.interp(angles, angles[seen], out[k, seen], period=_RIB_BINS) if seen.any() else 0.0
    return out


def _more_air_than_lung(rest: np.ndarray, hu: np.ndarray, sp_zyx: tuple[float, ...]) -> np.ndarray:
    """The voxels of ``rest`` (the lung kept) that are more air than lung: lightly smoothed HU
    below the midpoint between air (-1000) and the lung a few mm deeper (dense collapsed lung
    at -400 puts it at -700, aerated lung at -870 at -935)."""
    sigma = [_PLEURAL_SMOOTH_MM / s for s in sp_zyx]
    deep = ndimage.binary_erosion(rest, _ellipsoid(tuple(2.0 / s for s in sp_zyx)))
    if not deep.any():
        return np.zeros(rest.shape, bool)
    hu = np.asarray(hu, np.float32)
    level = ndimage.gaussian_filter(np.where(deep, hu, 0).astype(np.float32), [3 * s for s in sigma], mode="constant")
    level /= np.maximum(ndimage.gaussian_filter(deep.astype(np.float32), [3 * s for s in sigma], mode="constant"), 1e-3)
    light = ndimage.gaussian_filter(hu, [0.5 * s for s in sigma], mode="nearest")
    return rest & (light < (level - 1000.0) / 2)


def _air_side_of_edge(rest: np.ndarray, found: np.ndarray, hu: np.ndarray, sp_zyx: tuple[float, ...]) -> np.ndarray:
    """The voxels of ``rest`` (the lung kept) next to the pleural air ``found`` that are more
    air than lung (:func:`_more_air_than_lung`). Two voxel layers at most."""
    return ndimage.binary_dilation(found, structure=_FULL, iterations=2, mask=_more_air_than_lung(rest, hu, sp_zyx)) & ~found


def clear_fat(label: np.ndarray, hu: np.ndarray, spacing_xyz: tuple[float, float, float]) -> int:
    """Set the fat in a ``(z, y, x)`` label array to background, slice by slice
    (:func:`fat_in_lung`); returns the number of voxels cleared."""
    spacing_yx = (float(spacing_xyz[1]), float(spacing_xyz[0]))

    def one(z: int) -> int:
        lung = label[z] > 0
        if not lung.any():
            return 0
        fat = fat_in_lung(lung, hu[z], spacing_yx)
        label[z][fat] = 0
        return int(np.count_nonzero(fat))

    return sum(map_parallel(one, label.shape[0]))


def snap_label_edges(label: np.ndarray, hu: np.ndarray, spacing_xyz: tuple[float, float, float]) -> int:
    """:func:`snap_edges` on each lung of a ``(z, y, x)`` label array, slice by slice (voxels
    are added only where the label is background); returns the number of voxels changed."""
    spacing_yx = (float(spacing_xyz[1]), float(spacing_xyz[0]))

    def one(z: int) -> int:
        sl = label[z]
        changed = 0
        for value in np.unique(sl[sl > 0]) if sl.any() else ():
            lung = sl == value
            snapped = snap_edges(lung, hu[z], spacing_yx, sl == 0)
            changed += int(np.count_nonzero(snapped != lung))
            sl[lung & ~snapped] = 0
            sl[snapped & ~lung] = value
        return changed

    return sum(map_parallel(one, label.shape[0]))


def _label(mask: np.ndarray, structure: np.ndarray = _FULL) -> tuple[np.ndarray, int]:
    """Connected components (6-connected by default), as uint16 when they fit (half the
    memory of int32 on large masks), else int32."""
    try:
        out = np.zeros(mask.shape, np.uint16)
        n = ndimage.label(mask, structure=structure, output=out)
        return out, int(n)
    except RuntimeError:  # more than 65535 components
        labels, n = ndimage.label(mask, structure=structure)
        return labels, int(n)


def component_sizes(labels: np.ndarray, n: int) -> np.ndarray:
    """Voxel count of each label ``0..n`` of an integer label array (``np.bincount`` with
    ``minlength=n + 1``), counted by ``ndimage.histogram``, which reads a uint16 array as it
    is: ``np.bincount`` first copies it to int64 (0.18 vs 0.03 s for one lung of a
    neck-to-pelvis scan, 35 M voxels)."""
    return ndimage.histogram(labels, -0.5, n + 0.5, n + 1).astype(np.int64)


def largest_component(mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Split a boolean mask into (largest 6-connected component, everything else). Labels
    only the mask's bounding box (one lung is a fraction of the lungs' box)."""
    mask = np.asarray(mask, dtype=bool)
    keep = np.zeros(mask.shape, bool)
    box = _bounding_box(mask)
    if box is None:
        return keep, keep.copy()
    labels, n = _label(mask[box])
    if n <= 1:
        return mask.copy(), keep
    sizes = component_sizes(labels, n)
    sizes[0] = 0
    keep[box] = labels == int(np.argmax(sizes))
    return keep, mask & ~keep


def _fill_enclosed(mask: np.ndarray, structure: np.ndarray, border_axes: tuple[int, ...]) -> np.ndarray:
    """``mask`` with the background pieces (connected by ``structure``) inside its bounding
    box plus one voxel filled, except those that reach the box's faces across ``border_axes``:
    one labelling, not scipy's repeated dilation from the border."""
    mask = np.asarray(mask, dtype=bool)
    box = _bounding_box(mask, pad=1)
    if box is None:
        return mask.copy()
    labels, count = _label(~mask[box], structure)
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
    pieces that do not reach the box's faces are holes. Several times faster on a full
    512x512 scan than scipy's repeated dilation from the border.
    """
    return _fill_enclosed(mask, _FULL, (0, 1, 2))


def fill_slice_holes(mask: np.ndarray) -> np.ndarray:
    """Fill what a ``(z, y, x)`` mask encloses within each axial slice (face connectivity;
    the same as ``scipy.ndimage.binary_fill_holes`` slice by slice, with every slice's
    background labelled at once). For one lung: a consolidation's core and the air bronchi in
    it that the lung rings in that slice but that reach the airways through other slices, so
    no 3D cavity (it also fills every 3D cavity). A lung never rings anything else in an axial
    slice: the mediastinum, the hilum and the chest wall all lie at its edge."""
    return _fill_enclosed(mask, _IN_PLANE, (1, 2))


def _touches(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per component of ``a``: a mask of the components that touch ``b`` (face neighbours).
    Works inside ``a``'s bounding box plus one voxel."""
    out = np.zeros(a.shape, bool)
    box = _bounding_box(a, pad=1)
    if box is None:
        return out
    labels, n = _label(a[box])
    if n == 0:
        return out
    near = b[box]
    hit = np.zeros(n + 1, bool)
    hit[labels[near]] = True  # overlap, then the six face neighbours (shifted views, no dilation)
    for axis in range(labels.ndim):
        for lo, hi in ((slice(1, None), slice(None, -1)), (slice(None, -1), slice(1, None))):
            la = [slice(None)] * labels.ndim
            lb = [slice(None)] * labels.ndim
            la[axis], lb[axis] = lo, hi
            hit[labels[tuple(la)][near[tuple(lb)]]] = True
    hit[0] = False
    out[box] = hit[labels]
    return out


def _bounding_box(mask: np.ndarray, pad: int | Sequence[int] = 0) -> tuple[slice, ...] | None:
    """Slices of ``mask``'s bounding box grown by ``pad`` voxels (one number, or one per axis),
    clipped to the array; None when empty."""
    nonzero = [np.flatnonzero(mask.any(axis=tuple(a for a in range(mask.ndim) if a != ax))) for ax in range(mask.ndim)]
    if any(len(n) == 0 for n in nonzero):
        return None
    pads = [int(pad)] * mask.ndim if np.isscalar(pad) else [int(p) for p in pad]  # type: ignore[union-attr]
    return tuple(slice(max(int(n[0]) - p, 0), min(int(n[-1]) + 1 + p, size))
                 for n, p, size in zip(nonzero, pads, mask.shape))


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


def check_sides(label: sitk.Image) -> tuple[sitk.Image, list[str]]:
    """Make label 1 the patient's right lung (lower physical x in LPS) and 2 the left one.

    When both lungs are present and their centroids are in the wrong order, the labels are
    swapped and a warning says so. Returns the (possibly swapped) label and the warnings.
    """
    view = sitk.GetArrayViewFromImage(label)
    box = _bounding_box(view)
    warnings = [] if box is None else _sides_swapped(view[box], label, tuple(int(s.start) for s in reversed(box)))  # type: ignore[arg-type]
    if not warnings:
        return label, []
    array = np.array(view)
    _swap_sides(array)
    return spatial.copy_geometry(array, label), warnings


def clean_lungs(label: sitk.Image, *, min_volume_ml: float = 5.0) -> tuple[sitk.Image, list[str]]:
    """Clean a lung label map and check its sides.

    Per lung: keep the largest connected component; a dropped piece that touches the other
    lung's kept component joins that lung (the network mislabelled it), other pieces become
    background; then fill enclosed holes. A lung smaller than ``min_volume_ml`` after this is
    removed. Finally :func:`check_sides`.

    Args:
        label: uint8 label map (0, 1, 2) with its geometry.
        min_volume_ml: smallest lung kept, in mL.

    Returns:
        The cleaned label map (same geometry, uint8) and a list of warnings.
    """
    full = np.array(sitk.GetArrayViewFromImage(label), dtype=np.uint8)  # one copy
    warnings = clean_lungs_array(full, label, min_volume_ml=min_volume_ml)
    return spatial.copy_geometry(full, label), warnings


def clean_lungs_array(
    array: np.ndarray,
    reference: sitk.Image | spatial.Geometry,
    *,
    offset_xyz: tuple[int, int, int] = (0, 0, 0),
    min_volume_ml: float = 5.0,
) -> list[str]:
    """:func:`clean_lungs` in place on a ``(z, y, x)`` uint8 array that is the part of
    ``reference``'s grid starting at index ``offset_xyz`` (the whole grid by default; the
    cascade passes just the lungs' boxes, so a large scan is never copied). Returns the
    warnings."""
    # work inside the lungs' bounding box (plus one voxel): a fraction of a large scan
    box = _bounding_box(array, pad=1)
    if box is None:
        return []
    sub = array[box]
    # the two lungs in parallel (labelling and hole filling release the GIL)
    parts = map_parallel(lambda i: largest_component(sub == i + 1), 2)
    kept = {1: parts[0][0], 2: parts[1][0]}
    dropped = {1: parts[0][1], 2: parts[1][1]}
    del parts

    def whole(i: int) -> np.ndarray:
        value, other = (1, 2) if i == 0 else (2, 1)
        # (filling within slices fills every 3D cavity too)
        return fill_slice_holes(kept[value] | (_touches(dropped[other], kept[value]) & ~kept[other]))

    filled = map_parallel(whole, 2)
    del kept, dropped
    out = np.zeros_like(sub)
    for value, mask in zip((1, 2), filled):
        out[mask & (out == 0)] = value
    del filled
    warnings: list[str] = []
    voxel_ml = spatial.voxel_volume_ml(reference)
    for value, side in ((1, "right"), (2, "left")):
        volume = float(np.count_nonzero(out == value)) * voxel_ml
        if 0 < volume < min_volume_ml:
            out[out == value] = 0
            warnings.append(f"removed a {side} lung of only {volume:.1f} mL (below {min_volume_ml} mL)")
    sub[...] = out
    start = tuple(int(o) + int(s.start) for o, s in zip(offset_xyz, reversed(box)))
    swapped = _sides_swapped(sub, reference, start)  # type: ignore[arg-type]
    if swapped:
        _swap_sides(sub)
    return warnings + swapped


def _split_single(mask: np.ndarray) -> np.ndarray:
    """Split one lung component into right (1, low x) and left (2) per axial slice at the
    thinnest column near the middle of the mask's x extent."""
    out = np.zeros(mask.shape, np.uint8)
    xs = np.flatnonzero(mask.any(axis=(0, 1)))
    mid_default = (xs[0] + xs[-1]) // 2
    half = 0.15 * (xs[-1] - xs[0])
    for z in range(mask.shape[0]):
        s = mask[z]
        if not s.any():
            continue
        profile = s.sum(axis=0).astype(float)
        lo, hi = int(mid_default - half), int(mid_default + half) + 1
        window = profile[lo:hi]
        cut = lo + int(np.argmin(window)) if window.size else mid_default
        out[z, :, :cut][s[:, :cut]] = 1
        out[z, :, cut:][s[:, cut:]] = 2
    return out


def _left_share(mask: np.ndarray, midline_x: float) -> float:
    """Share of a ``(z, y, x)`` mask's voxels on the patient's left of ``midline_x`` (x index)."""
    counts = mask.sum(axis=(0, 1))
    return float(counts[np.arange(counts.size) > midline_x].sum()) / max(1, int(counts.sum()))


def split_sides(lungs: np.ndarray, *, min_fraction: float = 0.15, midline_x: float | None = None) -> np.ndarray:
    """Label a lung mask by side from geometry alone: 1 right, 2 left.

    ``lungs`` is a boolean ``(z, y, x)`` array in canonical LPS orientation (x grows toward the
    patient's left). The two largest components (each at least ``min_fraction`` of the
    largest) are sided by their mean x; a single component (lungs touching in front) is split
    per slice at its thinnest point near the middle. Smaller pieces are dropped.

    With ``midline_x`` (the body's middle, in x index units), a single component that lies
    almost entirely on one side of it (less than 10% of its voxels across) is one lung, sided
    by that position: a scan with one lung is not cut in two. Then a second component smaller
    than ``min_fraction`` of the largest still counts as the other lung when the two lie
    almost entirely on opposite sides of it: a collapsed lung beside a whole one.
    """
    labels, n = _label(lungs)
    out = np.zeros(lungs.shape, np.uint8)
    if n == 0:
        return out
    sizes = component_sizes(labels, n)
    sizes[0] = 0
    order = [int(i) for i in np.argsort(sizes)[::-1] if sizes[i] > 0]
    big = [i for i in order if sizes[i] >= min_fraction * sizes[order[0]]]
    if len(big) < 2 and len(order) >= 2 and midline_x is not None:
        # a small lung (collapsed, or cut by the scan's end) across the midline from a whole one
        shares = [_left_share(labels == i, midline_x) for i in order[:2]]
        if min(shares) < 0.1 and max(shares) > 0.9:
            big = order[:2]
    if len(big) >= 2:
        a, b = big[0], big[1]
        right, left = (a, b) if np.nonzero(labels == a)[2].mean() < np.nonzero(labels == b)[2].mean() else (b, a)
        out[labels == right] = 1
        out[labels == left] = 2
    else:
        single = labels == big[0]
        if midline_x is not None:
            left_share = _left_share(single, midline_x)
            if left_share < 0.1 or left_share > 0.9:
                out[single] = 2 if left_share > 0.5 else 1
                return out
        out = _split_single(single)
    return out


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


def skin_slack(body: np.ndarray, voxels: int = 1) -> np.ndarray:
    """A body mask from :func:`body_interior` grown by ``voxels`` (face neighbours), for
    partial volume at the skin (the same as ``body_interior(hu, slack_voxels=voxels)``
    without filling the slices again)."""
    return ndimage.binary_dilation(body, structure=_FULL, iterations=voxels) if voxels else body


def trachea_seed(candidates: np.ndarray, spacing_xyz: tuple[float, float, float]) -> tuple[int, np.ndarray] | None:
    """The highest slice holding a small, round air region near the left-right middle of the
    body's air: that is the trachea (area 0.7 - 8 cm^2). Returns (z index, 2D mask)."""
    pixel_cm2 = spacing_xyz[0] * spacing_xyz[1] / 100.0
    nz, _, nx = candidates.shape
    for z in range(nz - 1, -1, -1):  # LPS: high z is superior
        labels, n = ndimage.label(candidates[z], structure=_CROSS2)
        if n == 0:
            continue
        for i in range(1, n + 1):
            region = labels == i
            area = region.sum() * pixel_cm2
            if not 0.7 <= area <= 8.0:
                continue
            ys, xs = np.nonzero(region)
            if abs(xs.mean() - nx / 2) > nx * 0.15:
                continue
            extent = (np.ptp(xs) + 1) * spacing_xyz[0], (np.ptp(ys) + 1) * spacing_xyz[1]
            if max(extent) > 2.5 * min(extent):
                continue
            if n <= 2:  # above the lung apices only the trachea (and maybe the esophagus) is air
                return z, region
    return None


def track_airways(
    air: np.ndarray,
    spacing_xyz: tuple[float, float, float],
    *,
    max_area_cm2: float = 8.0,
) -> np.ndarray:
    """Trachea and main bronchi in a canonical ``(z, y, x)`` mask of air inside the body,
    followed slice by slice from :func:`trachea_seed` downward: a slice keeps the air regions
    that overlap the previous slice's airway (one pixel of slack). Tracking stops, keeping
    nothing of that slice, as soon as it stops looking like a trachea or two main bronchi:
    more than two regions, together larger than ``max_area_cm2``, or more than twice the
    previous slice's area (plus 1 cm^2). That is where the airway meets the lung's own air
    (the hilum) or dark, fragmented parenchyma, so no lung is taken. Empty when no trachea is
    found (a scan of the lung bases or the abdomen)."""
    out = np.zeros(air.shape, bool)
    seed = trachea_seed(air, spacing_xyz)
    if seed is None:
        return out
    z0, region = seed
    out[z0] = region
    pixel_cm2 = spacing_xyz[0] * spacing_xyz[1] / 100.0
    previous = float(region.sum()) * pixel_cm2
    for z in range(z0 - 1, -1, -1):
        reach = ndimage.binary_dilation(out[z + 1], structure=_CROSS2)
        labels, n = ndimage.label(air[z], structure=_CROSS2)
        if n == 0:
            break
        touching = np.unique(labels[reach & (labels > 0)])
        if not 1 <= touching.size <= 2:
            break
        area = float(np.bincount(labels.ravel(), minlength=n + 1)[touching].sum()) * pixel_cm2
        if area > max_area_cm2 or area > 2.0 * previous + 1.0:
            break
        out[z] = np.isin(labels, touching)
        previous = area
    return out


def side_boundary(sides: np.ndarray) -> np.ndarray:
    """Per ``(z, y)`` row of a sided label array (1 right, 2 left; canonical LPS), the x
    index (float) that separates the lungs: the middle of the gap between the right lung's
    last voxel and the left lung's first. Rows without both lungs take their slice's median,
    slices without both take the overall median. Shape ``(z, y)``."""
    nz, ny, nx = sides.shape
    xs = np.arange(nx)
    right_max = np.where(sides == 1, xs, -1).max(axis=2).astype(float)
    left_min = np.where(sides == 2, xs, nx).min(axis=2).astype(float)
    both = (right_max >= 0) & (left_min < nx)
    boundary = np.where(both, (right_max + left_min) / 2.0, np.nan)
    overall = np.nanmedian(boundary) if both.any() else (nx - 1) / 2.0
    for z in range(nz):
        row = boundary[z]
        if np.isnan(row).all():
            row[:] = overall
        else:
            row[np.isnan(row)] = np.nanmedian(row)
    return boundary
