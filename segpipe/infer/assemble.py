"""Step 5, assemble: the regions' probabilities back onto the scan's grid.

The output is held only over the lungs' region of the canonical grid (:class:`Canvas`): the rest
of the scan is background and is never touched. Each region's background probability is
resampled (linear) onto its box of the scan's grid in slabs of slices (a float copy of a whole
crop at the scan's resolution is never held) and lung is marked where it is below 0.5. At the
end the canvas becomes the full-size mask in the input's orientation and geometry.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import SimpleITK as sitk

from segpipe import spatial
from segpipe.infer.coarse import CoarseResult
from segpipe.infer.fine import RegionResult
from segpipe.infer.scan import Scan, ScanSource
from segpipe.infer.settings import release_freed_memory
from segpipe.refine import ScanContext

__all__ = ["Canvas", "scan_context"]

SLAB = 32  # slices per slab when probabilities go back to the scan's grid


class Canvas:
    """A uint8 ``(z, y, x)`` mask over the canonical grid's voxels ``lo``..``hi`` (x y z, end
    exclusive). Lives for one call."""

    def __init__(self, geometry: spatial.Geometry, boxes: list[spatial.Box]) -> None:
        self.geometry = geometry
        self.size = np.asarray(geometry.size)
        ranges = [spatial.box_index_range(geometry, b) for b in boxes]
        self.lo = self.hi = np.zeros(3, int)
        if ranges:
            self.lo = np.clip(np.min([r[0] for r in ranges], axis=0), 0, self.size)
            self.hi = np.maximum(np.clip(np.max([r[1] for r in ranges], axis=0), 0, self.size), self.lo)
        self.array = np.zeros(tuple(int(v) for v in (self.hi - self.lo)[::-1]), np.uint8)

    @property
    def offset(self) -> tuple[int, int, int]:
        """Index of the canvas's first voxel on the canonical grid (x y z)."""
        return int(self.lo[0]), int(self.lo[1]), int(self.lo[2])

    def include(self, box: spatial.Box) -> None:
        """Grow the canvas to hold ``box`` (a fine region that grew past the lungs' boxes)."""
        lo, hi = spatial.box_index_range(self.geometry, box)
        lo = np.clip(np.minimum(self.lo, lo), 0, self.size)
        hi = np.clip(np.maximum(self.hi, hi), 0, self.size)
        if np.any(lo != self.lo) or np.any(hi != self.hi):
            new = np.zeros(tuple(int(v) for v in (hi - lo)[::-1]), np.uint8)
            d = self.lo - lo
            a = self.array
            new[d[2]:d[2] + a.shape[0], d[1]:d[1] + a.shape[1], d[0]:d[0] + a.shape[2]] = a
            self.array, self.lo, self.hi = new, lo, hi

    def paste(self, result: RegionResult) -> None:
        """Mark the lung of ``result`` (background below 0.5) inside its box."""
        if any(result.region.grown_mm):
            self.include(result.region.box)
        release_freed_memory()  # the window pass's buffers, before the slabs go back to the scan
        start, stop = spatial.box_index_range(self.geometry, result.region.box)
        lo = np.maximum(start, 0)
        hi = np.minimum(stop, self.size)
        if np.any(hi <= lo):
            return
        direction = np.asarray(self.geometry.GetDirection()).reshape(3, 3)
        spacing = np.asarray(self.geometry.GetSpacing())
        ox, oy, oz = self.offset
        for z0 in range(lo[2], hi[2], SLAB):
            z1 = min(z0 + SLAB, hi[2])
            ref = sitk.Image([int(hi[0] - lo[0]), int(hi[1] - lo[1]), int(z1 - z0)], sitk.sitkUInt8)
            ref.SetSpacing(self.geometry.GetSpacing())
            ref.SetDirection(self.geometry.GetDirection())
            origin = np.asarray(self.geometry.GetOrigin()) + direction @ (np.array([lo[0], lo[1], z0]) * spacing)
            ref.SetOrigin(tuple(float(v) for v in origin))
            back = spatial.resample_to_reference(
                result.background, ref, interpolator=sitk.sitkLinear, default_value=1.0, output_pixel_type=sitk.sitkFloat32
            )
            region = self.array[z0 - oz:z1 - oz, lo[1] - oy:hi[1] - oy, lo[0] - ox:hi[0] - ox]
            region[sitk.GetArrayViewFromImage(back) < 0.5] = 1

    def volumes_ml(self, voxel_ml: float) -> dict[str, float]:
        """Volume per side (labels 1 right, 2 left) in mL."""
        return {side: round(float(np.count_nonzero(self.array == v)) * voxel_ml, 2) for side, v in (("right", 1), ("left", 2))}

    def to_label(self, scan: Scan) -> sitk.Image:
        """The full-size uint8 mask with exactly the input's geometry and orientation (the
        canvas is released)."""
        release_freed_memory()  # the scan-grid steps' buffers go back before the full-size mask comes
        full = np.zeros(tuple(reversed(scan.geometry_c.size)), np.uint8)  # untouched pages cost no memory
        lo, hi = self.lo, self.hi
        full[lo[2]:hi[2], lo[1]:hi[1], lo[0]:hi[0]] = self.array
        self.array = np.zeros((0, 0, 0), np.uint8)
        label_c = scan.geometry_c.apply(sitk.GetImageFromArray(full))
        del full
        if scan.orientation != spatial.CANONICAL:
            return spatial.from_canonical(label_c, scan.geometry)
        return scan.geometry.apply(label_c)


def _body_lookup(coarse: CoarseResult, kc: np.ndarray, jc: np.ndarray, ic: np.ndarray,
                 canvas: Canvas) -> Callable[[int], np.ndarray]:
    """Slice ``z`` of ``canvas`` -> ``(y, x)`` inside the body: the nearest coarse voxel's body,
    and where the field of view cuts the body (:attr:`CoarseResult.view_rim`), the scan's own
    voxels up to the scanner's padding (its footprint on the scan's voxels)."""
    rows = np.ix_(jc, ic)
    footprint = coarse.padding[0] if coarse.padding is not None else None
    if coarse.view_rim is None or footprint is None:
        return lambda z: coarse.body[kc[z]][rows]
    ox, oy, _ = canvas.offset
    ny, nx = canvas.array.shape[1:]
    in_view = sitk.GetArrayViewFromImage(footprint)[oy:oy + ny, ox:ox + nx] < 0.5
    return lambda z: coarse.body[kc[z]][rows] | (coarse.view_rim[kc[z]][rows] & in_view)


def scan_context(canvas: Canvas, source: ScanSource, coarse: CoarseResult, *, keep_scan: bool = False) -> ScanContext:
    """What the scan-grid rules read for ``canvas``: the scan's voxels over it (released when
    no later rule reads them, unless ``keep_scan``: the density measures read them after the
    rules), and the coarse stage's body, airways and side boundary looked up per slice
    (nearest coarse voxel)."""
    spacing = tuple(float(v) for v in canvas.geometry.GetSpacing())
    kc, jc, ic = coarse.scan_lookup(spacing, canvas.offset, canvas.array.shape)
    boundary = coarse.side_boundary_on(spacing)
    support = coarse.support
    held = [source]
    body = _body_lookup(coarse, kc, jc, ic, canvas)

    def scan_hu() -> np.ndarray:
        return held[0].hu_over(canvas.offset, canvas.array.shape)

    def release() -> None:
        if keep_scan:
            return
        held.clear()
        source.release()

    return ScanContext(
        scan_hu=scan_hu, release_scan=release, spacing_xyz=spacing,  # type: ignore[arg-type]
        body=body,
        airways=lambda z: coarse.airways[kc[z]][np.ix_(jc, ic)],
        side_boundary=lambda z: boundary[kc[z], jc],
        geometry=canvas.geometry, offset_xyz=canvas.offset,
        lung_support=lambda block: support[np.ix_(kc[block[0]], jc[block[1]], ic[block[2]])],
        found_sides=frozenset(int(v) for v in (1, 2) if (coarse.sides == v).any()),
        unsure_sides=coarse.unsure_sides,
    )
