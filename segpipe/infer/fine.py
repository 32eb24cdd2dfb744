"""Step 4, segment a region: the fine stage on one region, its fine-grid rules, and growth.

The region's part of the scan's fine lattice (1.5 mm by default) is resampled from the scan
and run through the fine network with MONAI's sliding window (Gaussian blending); only the
background probability is kept (lung = 1 - background, sides come from geometry later). The
fine-grid clean-up rules (:mod:`segpipe.refine`) act on it. When the lungs cover a face of the
region, the region grows there and runs again (:func:`segpipe.infer.regions.grown`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import numpy as np
import SimpleITK as sitk

from segpipe import spatial
from segpipe.infer.coarse import CoarseResult
from segpipe.infer.regions import GROW_ROUNDS, Region, growable_faces, grown, in_scan, lung_on_faces
from segpipe.infer.scan import ScanSource
from segpipe.infer.settings import Settings, load_network
from segpipe.refine import FineContext, RuleReport, run_rules

__all__ = ["FineNetwork", "RegionResult", "segment_region"]

log = logging.getLogger("segpipe")


class FineNetwork:
    """The fine network for one call, with its CUDA out-of-memory fallbacks: the accumulation
    buffer on the CPU and a window batch of 1, then everything on the CPU (the report says so).
    MONAI's ``SlidingWindowInfererAdapt`` falls back to CPU stitching too, but keeps the window
    batch, and its output would be the full logits: here only the background channel is kept,
    computed in place (:func:`segpipe.model.channel_probability_`)."""

    def __init__(self, weights: dict[str, Any], s: Settings) -> None:
        self.s = s
        self.net = load_network("fine", s.fine, weights, s.device)
        self.net_device = s.device
        self.fallbacks: list[str] = []

    def background(self, hu: np.ndarray) -> np.ndarray:
        """P(background) ``(Z, Y, X)`` float32 for a HU array of a fine lattice."""
        import torch

        from segpipe.device import for_inference
        from segpipe.model import sliding_window_probs

        s = self.s
        attempts = [(s.device, s.device, s.window_batch(s.fine))]
        if s.device.type == "cuda":
            attempts += [(s.device, torch.device("cpu"), 1), (torch.device("cpu"), torch.device("cpu"), 1)]
        for i, (dev, acc, sw_batch) in enumerate(attempts):
            if dev != self.net_device:
                self.net, self.net_device = for_inference(self.net, dev), dev
            try:
                return sliding_window_probs(self.net, hu, s.fine, s.window_hu, dev, accumulate_on=acc, sw_batch=sw_batch,
                                            overlap=s.fine_overlap, channel=0).numpy()
            except torch.cuda.OutOfMemoryError:
                if i + 1 == len(attempts):
                    raise
                torch.cuda.empty_cache()
                nxt = attempts[i + 1]
                note = (f"CUDA out of memory in the fine stage; retried with the accumulation buffer on {nxt[1].type}, "
                        f"window batch {nxt[2]}, windows on {nxt[0].type}")
                self.fallbacks.append(note)
                log.warning(note)
        raise AssertionError("unreachable")  # pragma: no cover


@dataclass(frozen=True)
class RegionResult:
    """A region's fine-stage result.

    Args:
        region: the region as it finally ran (grown where the lungs went on).
        background: P(background) after the fine-grid rules, on the region's lattice (an image
            with its geometry).
        reports: the fine-grid rules' reports.
    """

    region: Region
    background: sitk.Image
    reports: tuple[RuleReport, ...]


def _run_once(region: Region, source: ScanSource, geometry: spatial.Geometry, coarse: CoarseResult, net: FineNetwork,
              s: Settings) -> tuple[np.ndarray, spatial.Geometry, list[RuleReport], np.ndarray]:
    """The fine stage and its rules on ``region``: P(background), the lattice, the reports,
    and the lung inside the body."""
    # the region's part of the fine grid of the whole scan (same lattice): the result does not
    # depend on where exactly the box starts, and no original-resolution crop is copied
    lattice = spatial.lattice_grid(geometry, s.fine_mm, region.context)
    if coarse.padding is None:
        fine = spatial.resample_to_reference(source.image, lattice, default_value=-1024.0, output_pixel_type=sitk.sitkFloat32)
    else:  # the scanner's padding raised to air, as for the coarse stage
        fine = spatial.resample_padding_raised(source.image, lattice, *coarse.padding)
    grid = spatial.Geometry.of(fine)
    hu = sitk.GetArrayFromImage(fine)
    del fine
    background = net.background(hu)
    lung = background < 0.5
    inside = coarse.inside_on(grid)
    ctx = FineContext(hu=hu, spacing_xyz=s.fine_mm, inside=inside, in_scan=in_scan(grid, geometry), network_lung=lung,
                      coarse_prior=lambda: coarse.prior_on(lattice), body_centre_yx=lambda: coarse.body_centre_on(grid),
                      network_background=background)
    new, reports = run_rules("fine", lung, ctx, s.rules)
    background[new & ~lung] = 0.0
    background[lung & ~new] = 1.0
    return background, grid, reports, new & inside


def segment_region(region: Region, source: ScanSource, geometry: spatial.Geometry, coarse: CoarseResult,
                   net: FineNetwork, s: Settings) -> RegionResult:
    """Segment ``region`` of the canonical scan (``geometry``), growing it where the lungs go
    on past it (at most :data:`segpipe.infer.regions.GROW_ROUNDS` times)."""
    for round_ in range(GROW_ROUNDS + 1):
        faces = growable_faces(geometry, region, s) if round_ < GROW_ROUNDS else ()
        background, grid, reports, lung = _run_once(region, source, geometry, coarse, net, s)
        touched = lung_on_faces(lung, grid, region.box, faces, coarse.support_on(grid) if faces else None, s.min_lung_ml)
        del lung
        if not touched:
            return RegionResult(region, grid.apply(sitk.GetImageFromArray(background)), tuple(reports))
        # the lung goes on past the region (the coarse stage missed part of it): grow it there
        # by a row of windows and run it again
        before = region.grown_mm
        region = grown(region, touched, geometry, s)
        log.info("the %s fine region grew by %s mm (lung on its faces %s)", region.name,
                 [round(g - b, 1) for g, b in zip(region.grown_mm, before)], ", ".join(touched))
        del background
        source.cover(*(np.clip(v, 0, np.asarray(geometry.size)) for v in spatial.box_index_range(geometry, region.context)))
    raise AssertionError("unreachable")  # pragma: no cover: the last round checks no face
