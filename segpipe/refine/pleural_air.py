"""Rule ``pleural_air``: vessel-free air at the lung's edge is not lung (a pneumothorax).

A pneumothorax is air outside the lung, which a network trained on aerated lung may take in.
Lung tissue is never vessel-free air on the lung's edge: emphysema and bullae hold vessels or a
wall and lie inside the lung. Runs on each fine region's lattice.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import ndimage

from segpipe.refine._util import FULL, bounding_box, component_sizes, ellipsoid, face_neighbour_of, smoothed_hu
from segpipe.refine.base import FineContext, RuleReport

__all__ = ["PleuralAirParams", "pleural_air", "rule"]


@dataclass(frozen=True)
class PleuralAirParams:
    """Args:
        enabled: run the rule.
        hu: vessel-free air: a voxel whose smoothed HU lies below this holds no lung tissue
            (aerated lung is about -850 HU with vessels; even emphysematous lung averages above
            it at 1 mm).
        smooth_mm: Gaussian sigma before the HU test (noise).
        open_mm: opening radius: strands of air thinner than this do not join pockets.
        min_ml: smaller pockets stay (emphysema, a small bulla).
        min_edge: share of a pocket's surface on the lung mask's edge.
        min_depth_mm: with more than 0, a pocket must be a layer of air: a tenth of its voxels
            lie at least this deep in it. 4.5 (a layer of 1 cm) keeps the dark bands of metal
            streaks in the lung, but also leaves thin gas under the diaphragm that the network
            took in: 0 (off) by default, 4.5 for scans with metal in the chest wall.
        min_air_share: share of thin air's surface next to air outside the mask.
        edge_mm: "on the edge": this close to the outside of the lung mask.
        grow_mm: reach into the partial-volume rim of a pocket.
        grow_hu: the rim grown into: darker than any aerated lung.
        min_contact_mm2: a pneumothorax the network left out meets the mask over more than a
            bronchus's lumen does.
        min_outside_ml: the pleural air the network left out, which rules 2 and 3 follow into
            the mask, is one body of at least this much (and of ``min_ml``). 30 leaves the dark
            bands of metal streaks that the network left out alone, but also thin gas under the
            diaphragm: 10 by default, 30 for scans with metal in the chest wall.
        warn_ml: the report warns when the rule took at least this much out.
    """

    enabled: bool = True
    hu: float = -975.0
    smooth_mm: float = 1.0
    open_mm: float = 1.5
    min_ml: float = 10.0
    min_edge: float = 0.15
    min_depth_mm: float = 0.0
    min_air_share: float = 0.3
    edge_mm: float = 3.0
    grow_mm: float = 4.5
    grow_hu: float = -900.0
    min_contact_mm2: float = 300.0
    min_outside_ml: float = 10.0
    warn_ml: float = 1.0


def _surface_share(labels: np.ndarray, n: int, near: np.ndarray) -> np.ndarray:
    """Per label (0..n) the share of its surface voxels that lie in ``near``."""
    surface = (labels > 0) & face_neighbour_of(labels == 0)
    return np.bincount(labels[surface & near], minlength=n + 1) / np.maximum(np.bincount(labels[surface], minlength=n + 1), 1)


def _air_pockets(m: np.ndarray, air: np.ndarray, sp_zyx: tuple[float, ...], voxel_ml: float, p: PleuralAirParams) -> np.ndarray:
    """Rule 1 of :func:`pleural_air`: thick pockets (after an opening) on the mask's edge."""
    ball = ellipsoid(tuple(p.open_mm / s for s in sp_zyx))
    labels, n = ndimage.label(ndimage.binary_opening(air, ball), structure=FULL)
    if n == 0:
        return np.zeros(m.shape, bool)
    # each pocket back into the air the opening shaved off, then its share of surface on the edge
    grown = ndimage.grey_dilation(labels, footprint=ball)
    grown = np.where(labels > 0, labels, np.where(air, grown, 0))
    del labels
    # "on the edge": within reach of the mask's outside (the smoothing keeps air a voxel or two
    # off a wall, so a pocket that fills the space up to the chest wall touches it only so)
    outside = ndimage.binary_dilation(~m, ellipsoid(tuple(p.edge_mm / s for s in sp_zyx)), border_value=0)
    keep = (component_sizes(grown, n) * voxel_ml >= p.min_ml) & (_surface_share(grown, n, outside) >= p.min_edge)
    keep[0] = False
    if keep.any() and p.min_depth_mm > 0:
        depth = ndimage.distance_transform_edt(grown > 0, sampling=sp_zyx)
        for i in np.flatnonzero(keep):
            keep[i] = np.percentile(depth[grown == i], 90) >= p.min_depth_mm
    return keep[grown]


def _air_along_pleural_air(m: np.ndarray, air: np.ndarray, outside_air: np.ndarray, sp_zyx: tuple[float, ...],
                           voxel_ml: float, p: PleuralAirParams) -> np.ndarray:
    """Rule 2 of :func:`pleural_air`: vessel-free air of the mask, however thin, whose surface
    meets vessel-free air just outside the mask: the pneumothorax the network left out goes on
    into it (typically a shell of a few mm around a collapsed lung). Emphysema and bullae
    meet the chest wall or lung there, never air. The air outside must be one body of at least
    ``p.min_ml``, and what is taken must add up to that much as well (a
    pneumothorax, not a hole in a ragged mask or a stray voxel by a main bronchus)."""
    # the pleural space the network left out: a large body of air (a hole in a ragged mask of
    # emphysematous lung is small)
    labels, n = ndimage.label(outside_air, structure=FULL)
    big = component_sizes(labels, n) * voxel_ml >= max(p.min_ml, p.min_outside_ml)
    big[0] = False
    if not big.any():
        return np.zeros(m.shape, bool)
    outside_air = big[labels]
    near = ndimage.binary_dilation(outside_air, ellipsoid(tuple(p.edge_mm / s for s in sp_zyx)))
    labels, n = ndimage.label(air, structure=FULL)
    keep = _surface_share(labels, n, near) >= p.min_air_share
    keep[0] = False
    if component_sizes(labels, n)[keep].sum() * voxel_ml < p.min_ml:
        return np.zeros(m.shape, bool)
    return keep[labels]


def pleural_air(lung: np.ndarray, hu: np.ndarray, spacing_xyz: tuple[float, float, float],
                valid: np.ndarray | None = None, p: PleuralAirParams = PleuralAirParams()) -> np.ndarray:
    """Pockets of a ``(z, y, x)`` lung mask that are a pneumothorax: air outside the lung.

    A pocket is a connected region of vessel-free air (smoothed HU below
    ``p.hu``, opened by ``p.open_mm``) of at least
    ``p.min_ml`` that lies on the mask's edge for at least ``p.min_edge``
    of its surface: its air goes on beyond the mask (the pleural space the network already left
    out) or meets the chest wall. Lung tissue is never that: emphysema and bullae hold vessels
    or a wall and lie inside the lung, so their surface is inside the mask. Vessel-free air
    of any thickness whose surface meets vessel-free air just outside the mask is a
    pneumothorax too (:func:`_air_along_pleural_air`). Each pocket found is grown by
    ``p.grow_mm`` into its partial-volume rim (below ``p.grow_hu``), then
    cut on the lung's own edge (:func:`_air_side_of_edge`). Where the mask meets such air outside
    it (a pneumothorax the network left out), the mask's voxels next to it that are more air than
    lung go too, up to ``p.grow_mm`` deep (:func:`_shell_on_pleural_air`): the
    partial-volume shell a thick-slice scan puts between a collapsed lung and its
    pneumothorax, too light for the HU test above. ``valid`` (same shape, optional)
    marks where air outside the mask may count as pleural: inside the body and inside the scan
    (a grid that reaches past the scan's end holds made-up air there). Returns the mask of
    voxels to take out of the lung."""
    lung = np.asarray(lung, bool)
    out = np.zeros(lung.shape, bool)
    sp_zyx = tuple(float(s) for s in reversed(spacing_xyz))
    # the box reaches far enough past the mask to see the air just outside it
    box = bounding_box(lung, pad=int(np.ceil(p.edge_mm / min(sp_zyx))) + 1)
    if box is None:
        return out
    m = lung[box]
    smooth = smoothed_hu(hu[box], [p.smooth_mm / s for s in sp_zyx])
    voxel_ml = float(np.prod(sp_zyx)) / 1000.0
    steps = max(1, int(round(p.grow_mm / min(sp_zyx))))
    outside_air = ~m & (smooth < p.hu)
    if valid is not None:
        outside_air &= np.asarray(valid, bool)[box]
    found = np.zeros(m.shape, bool)
    air = m & (smooth < p.hu)
    if np.count_nonzero(air) * voxel_ml >= p.min_ml:  # (usually not: then no pocket can be that large)
        found = _air_pockets(m, air, sp_zyx, voxel_ml, p) | _air_along_pleural_air(m, air, outside_air, sp_zyx, voxel_ml, p)
    del air
    if found.any():
        found = ndimage.binary_dilation(found, structure=FULL, iterations=steps, mask=m & (smooth < p.grow_hu))
        # what is left of the mask next to a pocket only as a thin shell (the partial-volume rim
        # between the air and the chest wall or the diaphragm) goes with it: lung is never that thin
        rest = m & ~found
        near = ndimage.binary_dilation(found, structure=FULL, iterations=steps)
        found |= near & rest & ~ndimage.binary_opening(rest, structure=FULL)
        found |= _air_side_of_edge(m & ~found, found, hu[box], sp_zyx, p.smooth_mm)
    found |= _shell_on_pleural_air(m & ~found, outside_air, hu[box], sp_zyx, voxel_ml, p)
    out[box] = found
    return out


def _shell_on_pleural_air(rest: np.ndarray, outside_air: np.ndarray, hu: np.ndarray, sp_zyx: tuple[float, ...],
                          voxel_ml: float, p: PleuralAirParams) -> np.ndarray:
    """Rule 3 of :func:`pleural_air`: the voxels of the mask ``rest`` that are more air than
    lung (:func:`_more_air_than_lung`), within ``p.grow_mm`` of a body of
    vessel-free air outside the mask (at least ``p.min_ml``) that the mask touches
    over more than ``p.min_contact_mm2`` (a pneumothorax the network left out, not
    the lumen of a bronchus the mask ends in), and joined to it through such voxels. Lung
    never touches such air: the chest wall, the diaphragm or a bulla's wall lies between them;
    the trachea, the main bronchi and the air around the patient are not in ``outside_air``."""
    out = np.zeros(rest.shape, bool)
    touching = outside_air & face_neighbour_of(rest)
    if not touching.any():  # the usual case
        return out
    labels, n = ndimage.label(outside_air, structure=FULL)
    face_mm2 = (voxel_ml * 1000.0) ** (2.0 / 3.0)
    keep = (component_sizes(labels, n) * voxel_ml >= max(p.min_ml, p.min_outside_ml)) & (
        np.bincount(labels[touching], minlength=n + 1) * face_mm2 > p.min_contact_mm2)
    keep[0] = False
    if not keep.any():
        return out
    air = keep[labels]
    del labels
    # the shell lies along the contact: only that part of the box is searched (with room for
    # the lung level behind the shell, see _more_air_than_lung)
    pad = [int(np.ceil((p.grow_mm + 6.0 * p.smooth_mm) / s)) + 1 for s in sp_zyx]
    box = bounding_box(touching & air, pad=pad)
    air_b = air[box]
    # within reach (mm, not voxel layers: an oblique shell is as deep as a straight one) and
    # joined to the air through air-like voxels
    reach = ndimage.distance_transform_edt(~air_b, sampling=sp_zyx) <= p.grow_mm
    shell = reach & _more_air_than_lung(rest[box], hu[box], sp_zyx, p.smooth_mm)
    labels, n = ndimage.label(shell | air_b, structure=FULL)
    joined = np.zeros(n + 1, bool)
    joined[np.unique(labels[air_b])] = True
    joined[0] = False
    out[box] = shell & joined[labels]
    return out


def _more_air_than_lung(rest: np.ndarray, hu: np.ndarray, sp_zyx: tuple[float, ...], smooth_mm: float) -> np.ndarray:
    """The voxels of ``rest`` (the lung kept) that are more air than lung: lightly smoothed HU
    below the midpoint between air (-1000) and the lung a few mm deeper (dense collapsed lung
    at -400 puts it at -700, aerated lung at -870 at -935)."""
    sigma = [smooth_mm / s for s in sp_zyx]
    deep = ndimage.binary_erosion(rest, ellipsoid(tuple(2.0 / s for s in sp_zyx)))
    if not deep.any():
        return np.zeros(rest.shape, bool)
    hu = np.asarray(hu, np.float32)
    level = ndimage.gaussian_filter(np.where(deep, hu, 0).astype(np.float32), [3 * s for s in sigma], mode="constant")
    level /= np.maximum(ndimage.gaussian_filter(deep.astype(np.float32), [3 * s for s in sigma], mode="constant"), 1e-3)
    light = ndimage.gaussian_filter(hu, [0.5 * s for s in sigma], mode="nearest")
    return rest & (light < (level - 1000.0) / 2)


def _air_side_of_edge(rest: np.ndarray, found: np.ndarray, hu: np.ndarray, sp_zyx: tuple[float, ...], smooth_mm: float) -> np.ndarray:
    """The voxels of ``rest`` (the lung kept) next to the pleural air ``found`` that are more
    air than lung (:func:`_more_air_than_lung`). Two voxel layers at most."""
    return ndimage.binary_dilation(found, structure=FULL, iterations=2, mask=_more_air_than_lung(rest, hu, sp_zyx, smooth_mm)) & ~found


#: Metal, or contrast dense enough to streak as metal does: HU above this on the lattice, at
#: least ``METAL_MIN_ML`` of it (bone stays under 2,000 HU).
METAL_HU = 2500.0
METAL_MIN_ML = 0.05


def rule(mask: np.ndarray, ctx: FineContext, p: PleuralAirParams) -> tuple[np.ndarray, RuleReport]:
    """Take the pneumothorax out of ``mask`` (a fine region's lattice). Only the lung inside the
    body counts (air around the patient is cleared later anyway); the report counts only what
    lies inside the scan (beyond its faces the lattice holds made-up air, never pasted). Where
    it took ``p.warn_ml`` or more from a region that holds metal (``METAL_HU``) and the metal
    setting is off, its report warns that the streaks' dark bands may be what it took."""
    pleural = pleural_air(mask & ctx.inside, ctx.hu, ctx.spacing_xyz, valid=ctx.inside & ctx.in_scan, p=p)
    removed = int(np.count_nonzero(pleural & ctx.in_scan))
    warnings: tuple[str, ...] = ()
    if removed * ctx.voxel_ml >= p.warn_ml and p.min_depth_mm <= 0:
        metal_ml = np.count_nonzero(ctx.hu > METAL_HU) * ctx.voxel_ml
        if metal_ml >= METAL_MIN_ML:
            warnings = (f"the lungs' region holds {metal_ml:.1f} mL over {METAL_HU:.0f} HU (metal or dense contrast): "
                        "the dark bands of its streaks may be what pleural_air took; --rule-param "
                        "pleural_air.min_depth_mm=4.5 --rule-param pleural_air.min_outside_ml=30 keeps them",)
    return mask & ~pleural, RuleReport.of("pleural_air", ctx, removed=removed, warnings=warnings)
