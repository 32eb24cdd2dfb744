"""Splits of one coarse find into two touching lungs tried in this experiment (offline, on dumped
coarse inputs). `segpipe.refine.columns.split_single` is the kept one (`rotated`); `search S` is
it with a wider search for the thinnest column."""

from __future__ import annotations

import numpy as np
from scipy import ndimage
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import dijkstra

from segpipe.refine import columns as K


def nearest_seed(mask: np.ndarray, seeds: np.ndarray) -> np.ndarray:
    """Each voxel of ``mask`` as the seed it reaches in the fewest face steps inside ``mask``."""
    index = np.full(mask.shape, -1, np.int64)
    voxels = np.flatnonzero(mask)
    index.flat[voxels] = np.arange(voxels.size)
    rows, cols = [], []
    for axis in range(3):
        a = index[(slice(None),) * axis + (slice(None, -1),)]
        b = index[(slice(None),) * axis + (slice(1, None),)]
        both = (a >= 0) & (b >= 0)
        rows.append(a[both])
        cols.append(b[both])
    r, c = np.concatenate(rows), np.concatenate(cols)
    graph = coo_matrix((np.ones(r.size, np.float32), (r, c)), shape=(voxels.size, voxels.size)).tocsr()
    _, _, nearest = dijkstra(graph, directed=False, indices=index[seeds > 0], min_only=True, return_predecessors=True)
    out = np.zeros(mask.shape, np.uint8)
    reached = nearest >= 0
    out.flat[voxels[reached]] = seeds.flat[voxels[nearest[reached]]]
    return out


def _seeds(mask: np.ndarray, halves: np.ndarray) -> np.ndarray | None:
    cores = K.two_cores(mask)
    if cores is None:
        return None
    seeds = np.zeros(mask.shape, np.uint8)
    sides = []
    for core in cores:
        votes = np.bincount(halves[core], minlength=3)
        side = int(np.argmax(votes))
        if votes[side] < K.CORE_AGREE * np.count_nonzero(core):
            return None
        sides.append(side)
        seeds[core] = side
    return None if sides[0] == sides[1] else seeds


def geodesic(mask: np.ndarray) -> np.ndarray:
    """Each voxel to the core it reaches first inside the find (commit 5354d81)."""
    halves = K.column_halves(mask)
    seeds = _seeds(mask, halves)
    if seeds is None:
        return halves
    grown = nearest_seed(mask, seeds)
    return np.where(grown > 0, grown, halves)


def watershed(mask: np.ndarray) -> np.ndarray:
    """The cores grown level by level of depth, deepest first (a watershed on the depth)."""
    halves = K.column_halves(mask)
    seeds = _seeds(mask, halves)
    if seeds is None:
        return halves
    depth = ndimage.distance_transform_cdt(mask, metric="taxicab")
    for level in range(int(depth[seeds > 0].min()) - 1, 0, -1):
        region = depth >= level
        grown = nearest_seed(region, seeds * region)
        seeds = np.where(grown > 0, grown, seeds).astype(np.uint8)
    return np.where(seeds > 0, seeds, halves)


KEPT = K.split_single  # offline.py patches S.split_single (sides' own name) with each variant


def wider(share: float):
    """The kept split with the thinnest column looked for within ``share`` of the extent each
    side of the middle (``columns.COLUMN_SEARCH``, 0.15)."""

    def split(mask: np.ndarray) -> np.ndarray:
        kept, K.COLUMN_SEARCH = K.COLUMN_SEARCH, share
        try:
            return KEPT(mask)
        finally:
            K.COLUMN_SEARCH = kept

    return split


VARIANTS = {"column": K.column_halves, "geodesic": geodesic, "watershed": watershed, "rotated": KEPT,
            "search 0.25": wider(0.25), "search 0.35": wider(0.35)}
