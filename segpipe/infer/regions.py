"""Step 3, plan: where the fine stage runs.

Each lung's box, or the union of both when one sliding window over it takes no more windows
(the boxes share the mediastinum), each fitted to the window grid and widened to one window of
context where it is thinner. Sides never depend on it: they come from geometry. When the fine
stage's lungs cover a region's face, the coarse stage cut the lung short (a scan unlike its
training data): that face grows by a row of windows (:func:`grown`) and the region runs again.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
import SimpleITK as sitk

from segpipe import spatial
from segpipe.infer.settings import Settings
from segpipe.refine._util import component_sizes, label

__all__ = ["Region", "plan_regions", "grown", "growable_faces", "lung_on_faces", "window_count", "FACES"]

FACES = ("x-", "x+", "y-", "y+", "z-", "z+")
FIT_TRIM_MM = 3.0  # a fine region gives up at most this much margin per side to save windows
GROW_MIN_MM2 = 100.0  # lung on a fine region's face over this area: the lung goes on past it
GROW_ROUNDS = 3  # a fine region grows at most this many times (one window row per face each time)
MEDIAL_FACE = {"right": "x+", "left": "x-"}  # a one-lung region's medial face (canonical LPS: x grows to the patient's left)
GROW_SUPPORT_SHARE = 0.05  # lung on a face grows a region only with this share of it in the coarse stage's lungs
GROW_SMALL_SHARE = 0.5  # ... and, when it holds less than min_lung_ml, with this share


@dataclass(frozen=True)
class Region:
    """One region of the fine stage.

    Args:
        name: ``right``, ``left`` or ``both``.
        box: what it writes (physical mm, canonical).
        context: what the network reads: ``box`` widened to at least one window.
        grown_mm: how far it grew past the coarse stage's box, per face (:data:`FACES` order).
        medial_mm: for one lung's region beside the other lung's: the x (mm) where the other
            region begins. Its medial face grows up to there, not past it (None: it does not
            grow: no other lung was found, or one region holds both).
    """

    name: str
    box: spatial.Box
    context: spatial.Box
    grown_mm: tuple[float, ...] = (0.0,) * 6
    medial_mm: float | None = None

    def to_dict(self, geometry: spatial.Geometry, s: Settings) -> dict[str, object]:
        out: dict[str, object] = {**self.box.to_dict(), "windows": windows(geometry, self.box, s)}
        if any(self.grown_mm):
            out["grown_mm"] = dict(zip(FACES, [round(g, 1) for g in self.grown_mm]))
        return out


def window_interval(patch: int, overlap: float) -> int:
    """Voxels between two of MONAI's sliding windows along an axis (its scan interval)."""
    return max(int(patch * (1 - overlap)), 1)


def window_count(size_xyz: tuple[int, ...], patch_xyz: tuple[int, ...], overlap: float) -> int:
    """How many windows MONAI's sliding-window inferer runs over a volume of ``size_xyz``
    (:func:`monai.data.utils.dense_patch_slices` over the volume padded to one window at
    least, with MONAI's scan interval)."""
    from monai.data.utils import dense_patch_slices

    size = tuple(max(int(s), int(p)) for s, p in zip(size_xyz, patch_xyz))
    interval = tuple(p if s == p else window_interval(int(p), overlap) for s, p in zip(size, patch_xyz))
    return len(dense_patch_slices(size[::-1], tuple(int(p) for p in patch_xyz)[::-1], interval[::-1]))


def windows(geometry: spatial.Geometry, box: spatial.Box, s: Settings) -> int:
    """Fine-stage windows for ``box`` (its part of the scan's fine lattice)."""
    size = spatial.lattice_grid(geometry, s.fine_mm, box).GetSize()
    return window_count(size, s.fine.patch_xyz, s.fine_overlap)


def _fit_windows(geometry: spatial.Geometry, box: spatial.Box, s: Settings) -> spatial.Box:
    """``box`` shrunk by at most :data:`FIT_TRIM_MM` per side on each axis where that drops a
    whole row of windows: a box a voxel longer than what ``k`` windows cover takes ``k + 1``
    (a 312 mm box at 1.5 mm is 209 voxels: 5 windows of 64 where 208 takes 4). The boxes carry
    the training margin plus a coarse voxel (16 mm by default), so the lungs stay well inside."""
    interval = [window_interval(p, s.fine_overlap) for p in s.fine.patch_xyz]
    n = windows(geometry, box, s)
    size = spatial.lattice_grid(geometry, s.fine_mm, box).GetSize()
    for axis in range(3):
        patch = int(s.fine.patch_xyz[axis])
        if size[axis] <= patch:
            continue
        rows = math.ceil((size[axis] - patch) / interval[axis]) + 1
        excess_mm = (size[axis] - (patch + (rows - 2) * interval[axis])) * s.fine_mm[axis]
        for extra in (0.0, 0.5, 1.0):  # the lattice's rounding may keep a voxel more
            trim = excess_mm / 2 + extra * s.fine_mm[axis]
            if trim > FIT_TRIM_MM or trim * 2 >= box.size_mm[axis]:
                break
            shrink = [0.0, 0.0, 0.0]
            shrink[axis] = -trim
            candidate = box.expand(tuple(shrink))  # type: ignore[arg-type]
            if (m := windows(geometry, candidate, s)) < n:
                box, n = candidate, m
                break
    return box


def _one_window_at_least(geometry: spatial.Geometry, box: spatial.Box, s: Settings) -> spatial.Box:
    """``box`` grown evenly on each axis where its part of the fine lattice is shorter than a
    window, to one window: the same windows, but the network sees the scan around a thin
    region (the lung bases at the top of an abdominal scan) instead of the sliding window's
    constant padding, which it never met in training."""
    patch = s.fine.patch_xyz
    for _ in range(3):  # the lattice's rounding may leave a voxel short
        size = spatial.lattice_grid(geometry, s.fine_mm, box).GetSize()
        grow = [max(0.0, (int(patch[a]) - int(size[a])) * s.fine_mm[a] / 2) for a in range(3)]
        if not any(grow):
            break
        box = box.expand(tuple(g + (0.25 * s.fine_mm[a] if g else 0.0) for a, g in enumerate(grow)))  # type: ignore[arg-type]
    return box


def plan_regions(geometry: spatial.Geometry, boxes: dict[str, spatial.Box], s: Settings) -> tuple[Region, ...]:
    """The fine regions for the coarse stage's lung ``boxes``."""
    fitted = {side: _fit_windows(geometry, box, s) for side, box in boxes.items()}
    if len(boxes) == 2:
        union = _fit_windows(geometry, boxes["right"].union(boxes["left"]), s)
        # a tie goes to the union: one pass sees both lungs and the mediastinum between
        # them (COPDGene: 0.986 / 0.983 per box, 0.987 / 0.986 over the union, 48 windows each)
        if windows(geometry, union, s) <= sum(windows(geometry, b, s) for b in fitted.values()):
            fitted = {"both": union}
    # a one-lung region's medial face may grow up to the other lung's region (a cardiac crop:
    # the coarse stage may find only the lateral part of each lung), never into it
    medial = {"right": fitted["left"].lo_xyz[0], "left": fitted["right"].hi_xyz[0]} if len(fitted) == 2 else {}
    return tuple(Region(name, box, _one_window_at_least(geometry, box, s), medial_mm=medial.get(name))
                 for name, box in fitted.items())


def _grow_box(geometry: spatial.Geometry, box: spatial.Box, faces: tuple[str, ...], s: Settings,
              medial: tuple[str, float] | None = None) -> tuple[spatial.Box, list[float]]:
    """``box`` grown by one row of fine windows on each of ``faces``, not past the scan (nor,
    on face ``medial[0]``, past x = ``medial[1]`` mm); and how far it grew per face (mm, in
    :data:`FACES` order)."""
    first = spatial.index_to_physical(geometry, np.zeros((1, 3)))[0]
    last = spatial.index_to_physical(geometry, np.asarray(geometry.size, float)[None] - 1.0)[0]
    scan_lo, scan_hi = np.minimum(first, last), np.maximum(first, last)
    if medial is not None:  # the other lung's region bounds this face as the scan's end would
        if medial[0] == "x-":
            scan_lo[0] = max(scan_lo[0], medial[1])
        else:
            scan_hi[0] = min(scan_hi[0], medial[1])
    lo, hi = np.array(box.lo_xyz, float), np.array(box.hi_xyz, float)
    step = [0.0] * 6
    for face in faces:
        axis = "xyz".index(face[0])
        row = window_interval(int(s.fine.patch_xyz[axis]), s.fine_overlap) * s.fine_mm[axis]
        if face[1] == "-":
            new = max(lo[axis] - row, min(lo[axis], scan_lo[axis]))
            step[FACES.index(face)], lo[axis] = lo[axis] - new, new
        else:
            new = min(hi[axis] + row, max(hi[axis], scan_hi[axis]))
            step[FACES.index(face)], hi[axis] = new - hi[axis], new
    return spatial.Box(tuple(float(v) for v in lo), tuple(float(v) for v in hi)), [float(v) for v in step]  # type: ignore[arg-type]


def grown(region: Region, faces: tuple[str, ...], geometry: spatial.Geometry, s: Settings) -> Region:
    """``region`` grown by a row of windows on ``faces`` (its context follows)."""
    box, step = _grow_box(geometry, region.box, faces, s, _medial(region))
    return replace(region, box=box, context=_one_window_at_least(geometry, box, s),
                   grown_mm=tuple(g + d for g, d in zip(region.grown_mm, step)))


def _medial(region: Region) -> tuple[str, float] | None:
    """The medial face of a one-lung region and the x (mm) it may grow to, or None."""
    face = MEDIAL_FACE.get(region.name)
    return None if face is None or region.medial_mm is None else (face, region.medial_mm)


def growable_faces(geometry: spatial.Geometry, region: Region, s: Settings) -> tuple[str, ...]:
    """The faces of ``region`` that may grow: those inside the scan (a face within a voxel of
    its end cannot grow), less the medial face of a one-lung region unless the other lung's
    region lies further in (:attr:`Region.medial_mm`; up to it)."""
    lo, hi = spatial.box_index_range(geometry, region.box)
    size = np.asarray(geometry.GetSize())
    faces = []
    for axis, letter in enumerate("xyz"):
        if lo[axis] > 0:
            faces.append(letter + "-")
        if hi[axis] < size[axis]:
            faces.append(letter + "+")
    limit = _medial(region)
    return tuple(f for f in faces if (f != MEDIAL_FACE.get(region.name) or limit is not None)
                 and _grow_box(geometry, region.box, (f,), s, limit)[1][FACES.index(f)] > 1e-3)


def lung_on_faces(lung: np.ndarray, grid: spatial.Geometry, box: spatial.Box, faces: tuple[str, ...],
                  support: np.ndarray | None = None, min_ml: float = 0.0) -> tuple[str, ...]:
    """Which of ``faces`` of ``box`` the ``(z, y, x)`` lung mask on ``grid`` (canonical
    directions) covers over more than :data:`GROW_MIN_MM2`: its outermost planes of voxels
    inside the box. Only the lungs count: components of at least a fifth of the largest one
    and, given the coarse stage's lungs on ``grid`` as ``support``, with at least
    :data:`GROW_SUPPORT_SHARE` of their voxels in them (a lung the coarse stage cut short goes
    on from what it found; bowel gas that the network took for lung, below the bases of an
    abdominal scan, does not, and must not pull the region down the abdomen). A component
    of less than ``min_ml`` inside the box needs :data:`GROW_SMALL_SHARE`: a lung that the
    coarse stage found in part is a lung, and a small find that goes on past the face mostly
    outside the coarse lungs is gas that both networks took for lung (a colon with haustra
    at the top of an abdominal scan, which would otherwise pull the region down the colon)."""
    if not faces:
        return ()
    corners = spatial._physical_to_index(grid, np.array([box.lo_xyz, box.hi_xyz], float))
    size = np.asarray(grid.size)
    first = np.clip(np.ceil(corners.min(0) - 1e-6).astype(int), 0, size - 1)
    last = np.clip(np.floor(corners.max(0) + 1e-6).astype(int), first, size - 1)
    inside = lung[first[2]:last[2] + 1, first[1]:last[1] + 1, first[0]:last[0] + 1]
    spacing = np.asarray(grid.spacing, float)

    def planes(mask: np.ndarray) -> list[str]:
        out = []
        for face in faces:
            axis = "xyz".index(face[0])
            plane = np.take(mask, 0 if face[1] == "-" else -1, axis=2 - axis)
            if np.count_nonzero(plane) * float(np.prod(np.delete(spacing, axis))) > GROW_MIN_MM2:
                out.append(face)
        return out

    if not planes(inside):  # the usual case: nothing on any face
        return ()
    labels, n = label(inside)
    sizes = component_sizes(labels, n)
    sizes[0] = 0
    keep = sizes >= 0.2 * sizes.max()
    if support is not None:
        held = support[first[2]:last[2] + 1, first[1]:last[1] + 1, first[0]:last[0] + 1] > 0
        share = component_sizes(np.where(held, labels, 0), n) / np.maximum(sizes, 1)
        small = sizes * spatial.voxel_volume_ml(grid) < min_ml
        keep &= share >= np.where(small, GROW_SMALL_SHARE, GROW_SUPPORT_SHARE)
    return tuple(planes(keep[labels]))


def in_scan(grid: spatial.Geometry | sitk.Image, scan: spatial.Geometry) -> np.ndarray:
    """``(z, y, x)`` mask of the voxels of ``grid`` that lie inside ``scan`` (same directions):
    a fine grid reaching past the scan's end is filled with made-up air there."""
    from segpipe.infer.coarse import positions_in

    axes = [(pos >= -0.5) & (pos <= scan.GetSize()[a] - 0.5) for a, pos in enumerate(positions_in(grid, scan))]  # type: ignore[arg-type]
    return axes[2][:, None, None] & axes[1][None, :, None] & axes[0][None, None, :]
