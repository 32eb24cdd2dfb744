"""Folder jobs: expand inputs into scans, name their outputs, segment each and write mask
(NIfTI, DICOM SEG, RTSTRUCT), report and QC picture atomically (``segpipe infer`` and
:meth:`LungSegmenter.predict_file`)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import SimpleITK as sitk

from segpipe import io
from segpipe.errors import InputError
from segpipe.io import dicom_out

if TYPE_CHECKING:
    from segpipe.infer.segmenter import LungSegmenter

__all__ = ["Job", "plan_jobs", "run_jobs", "segment_job"]

@dataclass(frozen=True)
class Job:
    """One scan to segment and where its outputs go."""

    input: Path
    mask: Path
    formats: tuple[str, ...] = ("nifti",)

    @property
    def seg(self) -> Path:
        """The DICOM SEG: ``<mask name>_seg.dcm``."""
        return self.mask.with_name(io.strip_suffix(self.mask) + "_seg.dcm")

    @property
    def rtstruct(self) -> Path:
        """The RT Structure Set: ``<mask name>_rtstruct.dcm``."""
        return self.mask.with_name(io.strip_suffix(self.mask) + "_rtstruct.dcm")

    @property
    def outputs(self) -> dict[str, Path]:
        """Format -> file, for the formats asked for."""
        paths = {"nifti": self.mask, "dicom-seg": self.seg, "rtstruct": self.rtstruct}
        return {fmt: paths[fmt] for fmt in self.formats}

    @property
    def report(self) -> Path:
        return self.mask.with_name(io.strip_suffix(self.mask) + ".json")

    @property
    def qc(self) -> Path:
        return self.mask.with_name(io.strip_suffix(self.mask) + ".png")


def _scans_in(folder: Path) -> list[Path]:
    """Image files and DICOM series folders directly inside ``folder``, sorted by name."""
    found = []
    for p in sorted(folder.iterdir()):
        if p.name.startswith("."):
            continue
        if p.is_file() and io.image_suffix(p):
            found.append(p)
        elif p.is_dir() and io.list_dicom_series(p):
            found.append(p)
    return found


def _dicom_name(folder: Path) -> str:
    """A DICOM folder's case name: its own name, or its parent's when it has a generic one
    (``LIDC-IDRI-0001/dicom`` -> ``LIDC-IDRI-0001``)."""
    generic = {"dicom", "dcm", "series", "images", "image", "ct"}
    folder = folder.resolve()
    return folder.parent.name if folder.name.lower() in generic and folder.parent.name else folder.name


def plan_jobs(inputs: list[str | Path], output: str | Path | None, *, shard: tuple[int, int] | None = None,
              formats: str | tuple[str, ...] | list[str] | None = None) -> list[Job]:
    """Expand inputs (files, DICOM folders, folders of scans) into jobs, apply ``shard``
    (every n-th scan from i, so cluster array jobs split a folder), and name the outputs
    (``<name>_lungs.nii.gz`` in ``output`` or the current folder; ``output`` may be a file
    name when there is exactly one scan; ``<name>_lungs_seg.dcm`` and
    ``<name>_lungs_rtstruct.dcm`` next to it for the DICOM ``formats``).

    Raises:
        OutputFormatError: an unknown format, or a DICOM format for a scan that is not a
            DICOM series.
        DependencyError: a DICOM format without its packages installed.
    """
    wanted = dicom_out.parse_formats(formats)
    dicom_out.require_dicom_packages(wanted)
    scans: list[Path] = []
    for item in inputs:
        p = Path(item)
        if not p.exists():
            raise InputError(f"input not found: {p}")
        if p.is_dir() and not io.list_dicom_series(p):
            inside = _scans_in(p)
            if not inside:
                raise InputError(f"{p}: no scans found (expected image files or DICOM folders inside)")
            scans += inside
        else:
            scans.append(p)
    for scan in scans:
        dicom_out.check_dicom_input(scan, wanted)
    if shard is not None:
        i, n = shard
        scans = scans[i::n]
    single_file = output is not None and io.image_suffix(output) != ""
    if single_file and len(scans) != 1:
        raise InputError(f"-o {output} names one file but there are {len(scans)} scans; give a folder")
    jobs = []
    names: set[str] = set()
    for scan in scans:
        if single_file:
            mask = Path(output)  # type: ignore[arg-type]
        else:
            name = io.strip_suffix(scan) if scan.is_file() else _dicom_name(scan)
            if name in names:
                raise InputError(f"two scans are both named {name!r}; process them into different folders")
            names.add(name)
            mask = Path(output or ".") / f"{name}_lungs.nii.gz"
        jobs.append(Job(scan, mask, wanted))
    return jobs


def run_jobs(
    segmenter: LungSegmenter,
    jobs: list[Job],
    *,
    overwrite: bool = False,
    qc: bool = False,
    hu_offset: float = 0.0,
    series_uid: str | None = None,
    progress: bool = True,
    qc_density: bool = False,
) -> list[str]:
    """Segment each job's scan and write mask, report (and QC picture); one summary line per
    scan. Scans with an existing mask are skipped unless ``overwrite``. Outputs are written
    atomically, the report last, so a mask never exists without being complete.
    ``qc_density``: the QC picture with the lungs' LAA-950 voxels painted (implies ``qc``)."""
    lines = []
    if jobs:
        folder = jobs[0].mask.parent
        if not folder.exists():
            folder.mkdir(parents=True)
    for job in jobs:
        for fmt, path in job.outputs.items():
            io.check_output_path(path, overwrite=True, image=fmt == "nifti")
    iterator: Any = jobs
    if progress and len(jobs) > 1:
        from tqdm.auto import tqdm

        iterator = tqdm(jobs, desc="scans", unit="scan")
    for job in iterator:
        if all(p.exists() for p in job.outputs.values()) and not overwrite:
            lines.append(f"skipped {job.input} ({', '.join(map(str, job.outputs.values()))} exist; --overwrite redoes it)")
            continue
        report = segment_job(segmenter, job, qc=qc, hu_offset=hu_offset, series_uid=series_uid, qc_density=qc_density)
        v = report["volumes_ml"]
        warn = f"; warnings: {'; '.join(report['warnings'])}" if report["warnings"] else ""
        lines.append(
            f"wrote {', '.join(report['outputs'].values())}: right {v['right'] / 1000:.2f} L, left {v['left'] / 1000:.2f} L, "
            f"{report['timings_s']['total_s']:.1f} s{warn}"
        )
    return lines


def segment_job(
    segmenter: LungSegmenter, job: Job, *, qc: bool = False, hu_offset: float = 0.0, series_uid: str | None = None,
    qc_density: bool = False,
) -> dict[str, Any]:
    """Segment one scan and write its mask, JSON report (and QC picture, with the LAA-950
    overlay when ``qc_density``, which implies ``qc``); return the report. Everything is
    written atomically, the report last."""
    import json

    from segpipe.report import qc_picture

    qc = qc or qc_density
    # without a QC picture the segmenter reads the scan itself, so it can free it before the
    # mask is built (lower peak memory on large scans)
    image: sitk.Image | Path = io.read_image(job.input, series_uid=series_uid) if qc else job.input
    result = segmenter.predict_with_report(image, hu_offset=hu_offset, series_uid=None if qc else series_uid)
    result.report["input"] = str(job.input)
    _write_outputs(segmenter, job, result.label, result.report, series_uid)
    if qc:
        name = _dicom_name(job.input) if job.input.is_dir() else job.input.name  # a DICOM folder named "dicom": its parent's name
        qc_picture(image, result.label, job.qc, title=f"{name}: segpipe lungs", density_overlay=qc_density, hu_offset=hu_offset,
                   warnings=result.report.get("warnings", ()))
        result.report["qc"] = str(job.qc)
    tmp = job.report.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(result.report, indent=1))
    tmp.replace(job.report)
    return result.report


def _write_outputs(segmenter: LungSegmenter, job: Job, label: sitk.Image, report: dict[str, Any], series_uid: str | None) -> None:
    """Write ``label`` in each of the job's formats; the report gets ``outputs`` (format ->
    path), ``output`` (the NIfTI mask, else the first file) and a time per DICOM format."""
    if any(fmt in dicom_out.DICOM_FORMATS for fmt in job.formats) and series_uid is None:
        series_uid = io.pick_dicom_series(job.input, warn=False)[0]  # the series read_image read
    writers = {"dicom-seg": dicom_out.write_dicom_seg, "rtstruct": dicom_out.write_rtstruct}
    model = _model_name(getattr(segmenter, "model_path", None))
    for fmt, path in job.outputs.items():
        start = time.perf_counter()
        if fmt == "nifti":
            io.write_image(label, path, compress=True)
        else:
            writers[fmt](label, job.input, path, series_uid=series_uid, model_name=model)
            report["timings_s"][f"{fmt.replace('-', '_')}_s"] = round(time.perf_counter() - start, 3)
    report["outputs"] = {fmt: str(path) for fmt, path in job.outputs.items()}
    report["output"] = str(job.mask if "nifti" in job.formats else next(iter(job.outputs.values())))


def _model_name(path: Path | None) -> str:
    """How the DICOM outputs name the model: its file's name (the bundled one says so)."""
    from segpipe.model import DEFAULT_MODEL

    if path is None:
        return "segpipe model"
    return f"segpipe default model ({path.name})" if path.resolve() == DEFAULT_MODEL.resolve() else path.name
