"""A classical lung segmentation: the yardstick the learned model has to beat.

Steps (on the scan in canonical LPS orientation, undone at the end):

1. air-like voxels: HU below a threshold (default -400), after a light smoothing;
2. outside air removed: per axial slice, air connected to the slice border (also removes the
   scanner's out-of-field padding and air under the table);
3. lungs: the large 3D components of what is left (bowel gas and small pockets are dropped by
   size relative to the largest component);
4. airways: grown from the trachea (the small round air region in the highest slices) with a
   strict threshold on a smoothed image, then removed;
5. left/right: two components are sided by physical x; one component (lungs touching in front)
   is split per slice at the thinnest point near the midline;
6. holes filled per lung (vessels inside the lung are lung).

It knows nothing about pathology: dense lung (consolidation, collapse) falls outside the
threshold, and that is exactly where the learned model must do better.

Example:
    >>> label = segment_lungs_classical(segpipe.read_image("scan.nii.gz"))   # doctest: +SKIP
    >>> segment_files(["scans/"], "baseline_masks/")   # <name>_lungs.nii.gz, as segpipe infer  # doctest: +SKIP
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import SimpleITK as sitk
from scipy import ndimage

from segpipe import io, spatial
from segpipe.io import validate_image
from segpipe.refine import body_midline_x, fill_slice_holes, split_sides
from segpipe.refine._util import component_sizes
from segpipe.refine.airways import trachea_seed

__all__ = ["segment_lungs_classical", "ClassicalSegmenter", "segment_files"]

_CROSS2 = ndimage.generate_binary_structure(2, 1)
_CROSS3 = ndimage.generate_binary_structure(3, 1)


def _remove_border_air(air: np.ndarray) -> np.ndarray:
    """Per axial slice, drop air components that touch the slice border."""
    out = np.zeros_like(air)
    for z in range(air.shape[0]):
        labels, n = ndimage.label(air[z], structure=_CROSS2)
        if n == 0:
            continue
        border = np.unique(np.concatenate([labels[0], labels[-1], labels[:, 0], labels[:, -1]]))
        out[z] = (labels > 0) & ~np.isin(labels, border)
    return out


def _grow_airways(
    lungs_and_airways: np.ndarray,
    smooth_hu: np.ndarray,
    seed: tuple[int, np.ndarray],
    threshold_hu: float,
    spacing_zyx: tuple[float, float, float],
) -> np.ndarray:
    """Voxels connected to the trachea seed through strictly air-dark (smoothed) voxels."""
    z, region = seed
    dark = lungs_and_airways & (smooth_hu < threshold_hu)
    markers = np.zeros_like(dark)
    markers[z] = region & dark[z]
    if not markers.any():
        return markers
    airways = ndimage.binary_propagation(markers, structure=_CROSS3, mask=dark)
    # the airway walls' partial-volume voxels sit between the two thresholds: take about 2 mm more
    radius = [max(1, int(round(2.0 / s))) for s in spacing_zyx]
    struct = np.zeros([2 * r + 1 for r in radius], bool)
    grid = np.ogrid[tuple(slice(-r, r + 1) for r in radius)]
    struct[sum((g / max(r, 1)) ** 2 for g, r in zip(grid, radius)) <= 1.0] = True
    return ndimage.binary_dilation(airways, structure=struct) & lungs_and_airways


def segment_lungs_classical(
    image: sitk.Image,
    *,
    threshold_hu: float = -400.0,
    airway_threshold_hu: float = -930.0,
    min_fraction: float = 0.15,
) -> sitk.Image:
    """Segment the lungs with thresholds and morphology (no learning).

    Args:
        image: CT in HU (any storage orientation).
        threshold_hu: voxels below this (after smoothing) are air-like.
        airway_threshold_hu: airway lumen threshold for growing from the trachea.
        min_fraction: air components smaller than this share of the largest are dropped.

    Returns:
        uint8 label map (0 background, 1 right lung, 2 left lung) with the input's geometry.
    """
    validate_image(image)
    canonical, _ = spatial.to_canonical(image)
    spacing = canonical.GetSpacing()
    hu = sitk.GetArrayFromImage(sitk.Cast(canonical, sitk.sitkFloat32))
    sigma_vox = [0.7 / s for s in reversed(spacing)]  # about 0.7 mm, (z, y, x)
    smooth = ndimage.gaussian_filter(hu, sigma_vox)
    air = smooth < threshold_hu
    inside = _remove_border_air(air)
    labels, n = ndimage.label(inside, structure=_CROSS3)
    out = np.zeros(hu.shape, np.uint8)
    if n:
        sizes = component_sizes(labels, n)
        sizes[0] = 0
        big = np.flatnonzero(sizes >= max(min_fraction * sizes.max(), 1))
        lungs = np.isin(labels, big)
        seed = trachea_seed(inside, spacing)
        if seed is not None:
            lungs &= ~_grow_airways(lungs, smooth, seed, airway_threshold_hu, tuple(reversed(spacing)))
        out = split_sides(lungs, min_fraction=min_fraction, midline_x=body_midline_x(smooth))
        for value in (1, 2):
            filled = fill_slice_holes(out == value)  # per slice: vessels are enclosed in 2D, not in 3D
            out[filled & (out == 0)] = value
    result = spatial.copy_geometry(out, canonical)
    return spatial.from_canonical(result, image)


class ClassicalSegmenter:
    """:func:`segment_lungs_classical` behind the interface of
    :class:`segpipe.infer.LungSegmenter` (``predict``, ``predict_with_report``), so the batch
    tools of :mod:`segpipe.infer` (input discovery, output naming, reports) serve the baseline
    unchanged. Keyword arguments go to :func:`segment_lungs_classical`."""

    def __init__(self, **options: Any) -> None:
        self.options = options

    def predict(self, image: sitk.Image | str | Path, *, hu_offset: float = 0.0, series_uid: str | None = None) -> sitk.Image:
        """Segment the lungs: uint8 label image with exactly the input's geometry."""
        return self.predict_with_report(image, hu_offset=hu_offset, series_uid=series_uid).label

    def predict_with_report(
        self, image: sitk.Image | str | Path, *, hu_offset: float = 0.0, series_uid: str | None = None
    ) -> Any:
        """As :meth:`predict`, plus a report (volumes in mL, timings, warnings) in a
        :class:`segpipe.infer.Prediction`."""
        from segpipe._version import __version__
        from segpipe.infer import Prediction

        t0 = time.perf_counter()
        name = str(image) if isinstance(image, (str, Path)) else "image"
        img = image if isinstance(image, sitk.Image) else io.read_image(image, series_uid=series_uid)
        validate_image(img, name)
        if hu_offset:
            img = sitk.Cast(img, sitk.sitkFloat32) + float(hu_offset)
        io.check_hu(img, name)  # thresholds in HU mean nothing on offset or normalised scans
        label = segment_lungs_classical(img, **self.options)
        label.CopyInformation(img)
        arr = sitk.GetArrayViewFromImage(label)
        voxel_ml = spatial.voxel_volume_ml(label)
        volumes = {side: round(float(np.count_nonzero(arr == v)) * voxel_ml, 2) for side, v in (("right", 1), ("left", 2))}
        report: dict[str, Any] = {
            "segpipe_version": __version__,
            "method": "classical baseline (segpipe.baseline.segment_lungs_classical)",
            "input": name,
            "size_xyz": list(img.GetSize()),
            "spacing_xyz_mm": [round(s, 5) for s in img.GetSpacing()],
            "volumes_ml": volumes,
            "timings_s": {"total_s": round(time.perf_counter() - t0, 3)},
            "hu_offset": hu_offset,
            "options": dict(self.options),
            "warnings": [f"no {side} lung found" for side, v in volumes.items() if v == 0],
        }
        return Prediction(label, report)


def segment_files(
    inputs: Sequence[str | Path],
    output: str | Path | None = None,
    *,
    overwrite: bool = False,
    qc: bool = False,
    hu_offset: float = 0.0,
    series_uid: str | None = None,
    shard: tuple[int, int] | None = None,
    progress: bool = True,
) -> list[str]:
    """Run the baseline on image files, DICOM folders or folders of scans, found and named as
    ``segpipe infer`` does (:func:`segpipe.infer.plan_jobs`): ``<name>_lungs.nii.gz`` with the
    input's exact geometry plus ``<name>_lungs.json`` in ``output`` (a folder, the current
    folder by default, or a file name for one scan). Scans whose mask exists are skipped unless
    ``overwrite``; ``shard=(i, n)`` takes every n-th scan from the i-th. Returns one line per
    scan."""
    from segpipe import infer

    jobs = infer.plan_jobs(list(inputs), output, shard=shard)
    return infer.run_jobs(
        ClassicalSegmenter(), jobs, overwrite=overwrite, qc=qc, hu_offset=hu_offset,  # type: ignore[arg-type]
        series_uid=series_uid, progress=progress,
    )
