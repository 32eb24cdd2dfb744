"""The cascade: :class:`LungSegmenter` turns a CT scan into a lung label map.

Its steps, each a function that hands a frozen result on (docs/pipeline.md has the table):
read (:mod:`~segpipe.infer.scan`) -> locate (:mod:`~segpipe.infer.coarse`) -> plan regions
(:mod:`~segpipe.infer.regions`) -> segment each region with its fine-grid rules
(:mod:`~segpipe.infer.fine`) -> back onto the scan's grid (:mod:`~segpipe.infer.assemble`)
-> the scan-grid rules (:mod:`segpipe.refine`) -> the input's orientation and geometry.

Memory stays bounded: no full-scan float array at the fine spacing and no full-scan
probability map is ever built; the largest arrays are the input itself, the uint8 output (held
only over the lungs' boxes until the end) and one region. A scan the segmenter read itself (a
path) is reduced to the lungs' region before the fine stage and freed before the full-size
mask is built. The coarse network is released before the fine stage runs.

Example:
    >>> seg = LungSegmenter.from_file("runs/x/model.pt")            # doctest: +SKIP
    >>> mask = seg.predict("scan.nii.gz")                           # SimpleITK uint8 image
    >>> report = LungSegmenter.default(rules={"fat": False}).predict_file("scan.nii.gz", "lungs.nii.gz")  # doctest: +SKIP
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import SimpleITK as sitk

from segpipe import spatial
from segpipe._version import __version__
from segpipe.density import DensityReport, lung_density
from segpipe.errors import ConfigError, ModelError
from segpipe.infer.assemble import Canvas, scan_context
from segpipe.infer.batch import Job, segment_job
from segpipe.infer.coarse import CoarseResult, locate
from segpipe.infer.fine import FineNetwork, RegionResult, segment_region
from segpipe.infer.regions import Region, plan_regions
from segpipe.infer.scan import Scan, ScanSource, read_scan
from segpipe.infer.settings import MIN_LUNG_ML, VIEW_ZOOMS, Settings, peak_rss_bytes
from segpipe.model import DEFAULT_MODEL, ModelHeader
from segpipe.refine import RuleReport, RuleSet, run_rules

__all__ = ["LungSegmenter", "Prediction"]


@dataclass
class Prediction:
    """A label map with the input's geometry, the run's report (JSON-able dict) and the lungs'
    density measures (:class:`segpipe.density.DensityReport`, also in ``report["density"]``)."""

    label: sitk.Image
    report: dict[str, Any] = field(default_factory=dict)
    density: DensityReport | None = None


class LungSegmenter:
    """Two-stage lung segmentation with a segpipe model file.

    Args:
        header: the model file's header (:class:`segpipe.model.ModelHeader`).
        weights: ``{"coarse": state_dict, "fine": state_dict}``.
        device: ``"auto"`` (CUDA when present), ``"cpu"`` or ``"cuda"``.
        fast: no window overlap in the fine stage (about 2-3x fewer windows; slightly rougher
            borders between windows), and one coarse pass in a narrow view.
        sw_batch_size: windows per forward pass (default: one on a CPU running bf16, where that
            is fastest, else the stage's training batch size).
        progress: log each stage.
        min_lung_ml: a side counts as found only when the coarse network is confident
            (lung probability >= 0.9) on at least this volume of it (3 % of it for a lung that
            the scan's edge cuts, checked for gas by rule ``gas`` where 5 % would not find it); smaller or unsure
            finds are gas in the bowel or stomach of a scan without lungs, not lung.
        rules: changes to the clean-up rules stored in the model file: per rule name, ``False``
            / ``True`` (off / on) or a mapping of parameters (``segpipe rules`` lists them), or
            a whole :class:`segpipe.refine.RuleSet`.
        view_zooms: in a field of view narrower than a body (under 300 mm in x or y), the coarse
            network's right/left vote is averaged over these in-plane zooms of its input
            (default 0.8, 1, 1.25; ``(1.0,)``: one pass). Whole-body views run once.
    """

    def __init__(
        self,
        header: ModelHeader,
        weights: dict[str, dict[str, Any]],
        *,
        device: str = "auto",
        fast: bool = False,
        sw_batch_size: int | None = None,
        progress: bool = False,
        min_lung_ml: float = MIN_LUNG_ML,
        rules: RuleSet | Mapping[str, Any] | None = None,
        view_zooms: tuple[float, ...] = VIEW_ZOOMS,
    ) -> None:
        # the inference libraries are imported here, with the model, not inside the first
        # predict: importing MONAI alone takes 2-4 s, a set-up cost paid once per process
        import monai.inferers  # noqa: F401
        import scipy.ndimage  # noqa: F401

        from segpipe.device import resolve_device

        if not min_lung_ml >= 0:
            raise ValueError(f"min_lung_ml: expected >= 0, got {min_lung_ml}")
        view_zooms = tuple(float(f) for f in view_zooms)
        if not view_zooms or not all(0.25 <= f <= 4.0 for f in view_zooms):
            raise ValueError(f"view_zooms: expected one or more factors in 0.25..4, got {list(view_zooms)}")
        try:
            stored = RuleSet.from_dict(header.refine, "refine")
        except ConfigError as err:
            raise ModelError(f"the model file's clean-up rules are invalid ({err})") from err
        if not isinstance(rules, RuleSet):
            rules = stored.updated(rules or {})
        self.header = header
        self.weights = weights
        self.model_path: Path | None = None  # the model file, when loaded from one
        self.progress = progress
        self.settings = Settings(
            coarse=header.coarse.config(), fine=header.fine.config(), coarse_mm=tuple(header.spacing.coarse_mm),
            coarse_size_xyz=header.spacing.coarse_size_xyz, fine_mm=tuple(header.spacing.fine_mm),
            window_hu=tuple(header.intensity.window_hu), margin_mm=float(header.margin_mm), device=resolve_device(device),
            fast=fast, sw_batch_size=sw_batch_size, min_lung_ml=float(min_lung_ml), rules=rules, view_zooms=view_zooms,
        )  # type: ignore[arg-type]

    @property
    def rules(self) -> RuleSet:
        """The clean-up rules this segmenter runs."""
        return self.settings.rules

    @classmethod
    def from_file(cls, path: str | Path, **kwargs: Any) -> LungSegmenter:
        """Load a model file written by ``segpipe train`` (keyword arguments as the class)."""
        from segpipe.model import load_model

        header, weights = load_model(path)
        segmenter = cls(header, weights, **kwargs)
        segmenter.model_path = Path(path)
        return segmenter

    @classmethod
    def default(cls, **kwargs: Any) -> LungSegmenter:
        """The bundled default model (``segpipe/weights/default.pt``)."""
        if not DEFAULT_MODEL.is_file():
            raise ModelError(
                f"the bundled default model is missing ({DEFAULT_MODEL}); train one with "
                "'segpipe train --out RUN' and pass --model RUN/model.pt"
            )
        return cls.from_file(DEFAULT_MODEL, **kwargs)

    def predict(self, image: sitk.Image | str | Path | np.ndarray, **kwargs: Any) -> sitk.Image:
        """Segment the lungs: uint8 label image (0 background, 1 right, 2 left lung) with
        exactly the input's geometry.

        Args:
            image: a SimpleITK image (HU), an image path or DICOM folder, or a ``(z, y, x)``
                numpy array with ``spacing``.
            spacing: (x, y, z) mm, for a numpy array only.
            hu_offset: added to every voxel first (e.g. -1024 for scans stored as HU + 1024).
            series_uid: DICOM series to read from a folder with several.
        """
        return self.predict_with_report(image, **kwargs).label

    def predict_with_report(self, image: sitk.Image | str | Path | np.ndarray, *, spacing: tuple[float, float, float] | None = None,
                            hu_offset: float = 0.0, series_uid: str | None = None) -> Prediction:
        """As :meth:`predict`, plus the report (volumes, boxes, regions, rules, timings, memory,
        warnings) and the lungs' density measures (:mod:`segpipe.density`, on the scan's own
        voxels with the final mask)."""
        s, clock = self.settings, _Clock(self.settings.device)
        canonical, scan = read_scan(image, spacing=spacing, hu_offset=hu_offset, series_uid=series_uid)
        clock.lap("read_s")
        coarse, warnings = locate(canonical, self.weights["coarse"], s)
        clock.lap("coarse_s")
        regions = plan_regions(scan.geometry_c, coarse.boxes, s)
        canvas = Canvas(scan.geometry_c, list(coarse.boxes.values()))
        source = ScanSource(canonical, scan, s.fine_mm)
        if coarse.boxes and canvas.array.size:
            source.keep(*_reach(scan, canvas, regions))
        del canonical
        results, fallbacks = self._segment_regions(regions, source, scan, coarse, canvas) if canvas.array.size else ([], [])
        clock.lap("fine_s")
        _, scan_reports = run_rules("scan", canvas.array, scan_context(canvas, source, coarse, keep_scan=True), s.rules)
        clock.lap("postprocess_s")
        # the final mask over the scan's own (canonical: only permuted) voxels, offset included
        hu = source.hu_over(canvas.offset, canvas.array.shape) if canvas.array.size else np.zeros((0, 0, 0), np.int16)
        density = lung_density(hu, canvas.array, scan.geometry_c.spacing, scan.geometry_c.direction)
        del hu, source
        clock.lap("density_s")
        volumes = canvas.volumes_ml(spatial.voxel_volume_ml(scan.geometry))
        label = canvas.to_label(scan)
        clock.lap("postprocess_s")
        report = self._report(image, scan, coarse, results or regions, scan_reports, volumes, warnings, clock)
        report = {**report, "density": density.to_dict(), "hu_offset": hu_offset, "fallbacks": fallbacks, "warnings": warnings}
        return Prediction(label, report, density)

    def _segment_regions(self, regions: tuple[Region, ...], source: ScanSource, scan: Scan, coarse: CoarseResult,
                         canvas: Canvas) -> tuple[list[RegionResult], list[str]]:
        """The fine stage on each region, pasted onto ``canvas`` as it comes; the results
        (without their probabilities) and the out-of-memory fallbacks taken."""
        net = FineNetwork(self.weights["fine"], self.settings)
        results = []
        for region in regions:
            result = segment_region(region, source, scan.geometry_c, coarse, net, self.settings)
            canvas.paste(result)
            results.append(RegionResult(result.region, sitk.Image(), result.reports))  # keep the report, not the image
        fallbacks = net.fallbacks
        del net
        if self.settings.device.type == "cuda":
            import torch

            torch.cuda.empty_cache()
        return results, fallbacks

    def _report(self, image: Any, scan: Scan, coarse: CoarseResult, regions: list[RegionResult] | tuple[Region, ...],
                scan_reports: list[RuleReport], volumes: dict[str, float], warnings: list[str], clock: _Clock,
                ) -> dict[str, Any]:
        """The run's report (``warnings`` gets the rules' warnings)."""
        import torch

        from segpipe.device import precision_name, use_amp

        s = self.settings
        fine_reports = _sum_reports([r.reports for r in regions if isinstance(r, RegionResult)], s.rules)
        rules = fine_reports + scan_reports
        pleural = next(r for r in rules if r.name == "pleural_air")
        if pleural.removed_ml >= s.rules.pleural_air.warn_ml:
            warnings.append(f"took {pleural.removed_ml:.0f} mL of vessel-free air at the lungs' edge out of the mask "
                            "(a pneumothorax, or gas under the diaphragm): check the QC picture")
            warnings += pleural.warnings[:1]  # metal in a region it took from (one line for all regions)
        dense = next(r for r in rules if r.name == "dense_lung")
        if not dense.enabled and dense.would_add_ml >= s.rules.dense_lung.warn_ml > 0:
            warnings.append(f"left out {dense.would_add_ml:.0f} mL of dense tissue that the coarse stage is sure is lung "
                            "(a consolidated lobe?): check the QC picture; the dense_lung rule (off by default) adds it")
        warnings += [w for r in scan_reports for w in r.warnings]
        device = s.device
        return {
            "segpipe_version": __version__,
            "input": str(image) if isinstance(image, (str, Path)) else type(image).__name__,
            "size_xyz": list(scan.geometry.size),
            "spacing_xyz_mm": [round(v, 5) for v in scan.geometry.spacing],
            "orientation": scan.orientation,
            "volumes_ml": volumes,
            "boxes_mm": {side: box.to_dict() for side, box in coarse.boxes.items()},
            "fine_regions": {r.region.name if isinstance(r, RegionResult) else r.name:
                             (r.region if isinstance(r, RegionResult) else r).to_dict(scan.geometry_c, s) for r in regions},
            "spacings_used_mm": {"coarse": [round(v, 4) for v in coarse.spacing_mm], "fine": list(s.fine_mm)},
            "coarse_zooms": list(coarse.zooms),
            "coarse_spine_x_mm": coarse.spine_x_mm,
            "rules": {r.name: r.to_dict() for r in rules},
            "timings_s": clock.timings(),
            "peak_memory": {
                "rss_bytes": peak_rss_bytes(),
                "cuda_max_allocated": int(torch.cuda.max_memory_allocated(device)) if device.type == "cuda" else None,
            },
            "device": str(device),
            "precision": precision_name(device, use_amp(device, s.fine.amp)),
            "fast": s.fast,
        }

    def predict_file(self, input: str | Path, output: str | Path, *, qc: bool = False, overwrite: bool = True,
                     hu_offset: float = 0.0, series_uid: str | None = None, qc_density: bool = False,
                     formats: str | tuple[str, ...] | list[str] | None = None) -> dict[str, Any]:
        """Segment the scan at ``input`` (file or DICOM folder) and write the mask to
        ``output`` with the input's exact geometry, plus ``<output stem>.json`` (the report)
        and, with ``qc``, ``<output stem>.png`` (``qc_density``: with the lungs' LAA-950
        voxels painted; implies ``qc``). Returns the report.

        ``formats`` (default ``"nifti"``): any of ``"nifti"``, ``"dicom-seg"``, ``"rtstruct"``
        (a comma list or a sequence); the DICOM ones need a DICOM folder as ``input`` and are
        written as ``<output stem>_seg.dcm`` and ``<output stem>_rtstruct.dcm`` (``output``
        still names the NIfTI mask and the stem of the others). The report's ``outputs`` lists
        the files written."""
        from segpipe import io
        from segpipe.io import dicom_out

        wanted = dicom_out.parse_formats(formats)
        dicom_out.require_dicom_packages(wanted)
        dicom_out.check_dicom_input(input, wanted)
        job = Job(Path(input), io.check_output_path(output, overwrite=overwrite), wanted)
        for fmt, path in job.outputs.items():
            io.check_output_path(path, overwrite=overwrite, image=fmt == "nifti")
        return segment_job(self, job, qc=qc, hu_offset=hu_offset, series_uid=series_uid, qc_density=qc_density)


def _reach(scan: Scan, canvas: Canvas, regions: tuple[Region, ...]) -> tuple[np.ndarray, np.ndarray]:
    """The canonical index range the fine stage reads: the canvas and every region's context."""
    size = np.asarray(scan.geometry_c.size)
    reach = [spatial.box_index_range(scan.geometry_c, r.context) for r in regions]
    lo = np.clip(np.min([canvas.lo, *[r[0] for r in reach]], axis=0), 0, size)
    hi = np.clip(np.max([canvas.hi, *[r[1] for r in reach]], axis=0), 0, size)
    return lo, hi


def _sum_reports(per_region: list[tuple[RuleReport, ...]], rules: RuleSet) -> list[RuleReport]:
    """The fine-grid rules' reports summed over the regions (a scan without lungs: all zero)."""
    from segpipe.refine import STEPS

    total = [RuleReport(st.name, "fine", rules.enabled(st.name)) for st in STEPS if st.grid == "fine"]
    for reports in per_region:
        total = [t.plus(r) for t, r in zip(total, reports)]
    return total


class _Clock:
    """Wall time per step of one call (and the CUDA peak counter reset at its start)."""

    def __init__(self, device: Any) -> None:
        self.t0 = self.last = time.perf_counter()
        self.laps: dict[str, float] = {}
        if device.type == "cuda":
            import torch

            torch.cuda.reset_peak_memory_stats(device)

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.laps[name] = self.laps.get(name, 0.0) + now - self.last  # a step timed in parts adds up
        self.last = now

    def timings(self) -> dict[str, float]:
        return {**{k: round(v, 3) for k, v in self.laps.items()}, "total_s": round(time.perf_counter() - self.t0, 3)}
