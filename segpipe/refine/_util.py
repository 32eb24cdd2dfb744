"""Array helpers shared by the clean-up steps: connected components, bounding boxes,
structuring elements, and slice-parallel maps. Internal to :mod:`segpipe.refine`."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import numpy as np
from scipy import ndimage

from segpipe.spatial import AIR_HU

FULL = ndimage.generate_binary_structure(3, 1)  # face neighbours in 3D
IN_PLANE = np.zeros((3, 3, 3), bool)  # face neighbours within an axial slice only
IN_PLANE[1] = ndimage.generate_binary_structure(2, 1)
CROSS2 = ndimage.generate_binary_structure(2, 1)
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


def label(mask: np.ndarray, structure: np.ndarray = FULL) -> tuple[np.ndarray, int]:
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


def bounding_box(mask: np.ndarray, pad: int | Sequence[int] = 0) -> tuple[slice, ...] | None:
    """Slices of ``mask``'s bounding box grown by ``pad`` voxels (one number, or one per axis),
    clipped to the array; None when empty."""
    nonzero = [np.flatnonzero(mask.any(axis=tuple(a for a in range(mask.ndim) if a != ax))) for ax in range(mask.ndim)]
    if any(len(n) == 0 for n in nonzero):
        return None
    pads = [int(pad)] * mask.ndim if np.isscalar(pad) else [int(p) for p in pad]  # type: ignore[union-attr]
    return tuple(slice(max(int(n[0]) - p, 0), min(int(n[-1]) + 1 + p, size))
                 for n, p, size in zip(nonzero, pads, mask.shape))


def ellipsoid(radii_vox: tuple[float, ...]) -> np.ndarray:
    """Ellipsoidal structuring element with the given radii in voxels (at least 3 wide per axis)."""
    r = [max(int(v), 1) for v in radii_vox]
    grids = np.ogrid[tuple(slice(-k, k + 1) for k in r)]
    return sum((g / max(float(v), 1.0)) ** 2 for g, v in zip(grids, radii_vox)) <= 1.0 + 1e-6


def disk(radius_y: float, radius_x: float) -> np.ndarray:
    """Elliptic 2D structuring element with the given radii in pixels, rounded down (at least 3x3)."""
    ry, rx = max(int(radius_y), 1), max(int(radius_x), 1)
    y, x = np.ogrid[-ry:ry + 1, -rx:rx + 1]
    return (y / max(radius_y, 1.0)) ** 2 + (x / max(radius_x, 1.0)) ** 2 <= 1.0 + 1e-6


def face_neighbour_of(mask: np.ndarray) -> np.ndarray:
    """Voxels with a face neighbour in ``mask`` (the array's border counts as not in it)."""
    out = np.zeros(mask.shape, bool)
    for axis in range(mask.ndim):
        lo = [slice(None)] * mask.ndim
        hi = [slice(None)] * mask.ndim
        lo[axis], hi[axis] = slice(1, None), slice(None, -1)
        out[tuple(lo)] |= mask[tuple(hi)]
        out[tuple(hi)] |= mask[tuple(lo)]
    return out


def on_faces(labels: np.ndarray, n: int, faces: tuple[bool, ...] = (True,) * 6) -> np.ndarray:
    """Per label ``0..n`` of an integer label array, whether it reaches one of the array's faces
    marked in ``faces`` (``axis 0 low, axis 0 high, axis 1 low, ...``); label 0 is never marked."""
    out = np.zeros(n + 1, bool)
    for axis in range(labels.ndim):
        for end, face in ((0, 2 * axis), (-1, 2 * axis + 1)):
            if faces[face]:
                out[np.take(labels, end, axis=axis)] = True
    out[0] = False
    return out


def touches(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per component of ``a``: a mask of the components that touch ``b`` (face neighbours).
    Works inside ``a``'s bounding box plus one voxel."""
    out = np.zeros(a.shape, bool)
    box = bounding_box(a, pad=1)
    if box is None:
        return out
    labels, n = label(a[box])
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


def smoothed_hu(hu: np.ndarray, sigma: float | Sequence[float]) -> np.ndarray:
    """``hu`` (any shape) as float32, floored at air (:data:`segpipe.spatial.AIR_HU`: the
    scanner's padding beyond its reconstruction circle is no attenuation) and Gaussian-smoothed
    with ``sigma`` voxels per axis (edges repeated)."""
    return ndimage.gaussian_filter(np.maximum(np.asarray(hu, np.float32), np.float32(AIR_HU)), sigma=sigma, mode="nearest")
