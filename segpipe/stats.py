"""Lung density measures for a cohort: one CSV row per scan (``segpipe stats``).

Each scan is segmented with a :class:`~segpipe.infer.LungSegmenter`, or its mask is taken
from a folder of existing masks (matched by name), and :mod:`segpipe.density` measures it on
the scan's own voxels. Inputs are expanded as ``segpipe infer`` does
(:func:`segpipe.infer.plan_jobs`: image files, DICOM folders, folders of scans). Every scan's
mask is found before any scan is read; the CSV is written once, at the end, atomically, so a
scan that fails leaves no CSV behind.

Example:
    >>> from segpipe import stats
    >>> stats.density_stats(["scans/"], "stats.csv", masks="masks/")          # doctest: +SKIP
    >>> rows = stats.collect_density(["scan.nii.gz"], segmenter=LungSegmenter.default())  # doctest: +SKIP
"""

from __future__ import annotations

import csv
import io as _pyio
import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from segpipe import density, io
from segpipe._version import __version__
from segpipe.errors import InputError

if TYPE_CHECKING:
    from segpipe.infer import Job, LungSegmenter

__all__ = ["INFO_COLUMNS", "collect_density", "write_density_csv", "density_stats", "find_masks", "csv_columns"]

#: The columns before the measures: the scan, where its mask came from, segpipe's version,
#: the model (empty for masks from files) and the segmenter's warnings.
INFO_COLUMNS = ("scan", "input", "mask", "segpipe_version", "model", "warnings")


def csv_columns() -> list[str]:
    """All columns: :data:`INFO_COLUMNS`, then ``<side>[_<zone>]_<measure>`` and
    ``<side>_excluded_ml`` (see :meth:`segpipe.density.DensityReport.row`)."""
    return [*INFO_COLUMNS, *density.columns()]


def _scan_name(job: Job) -> str:
    """The scan's case name, as ``segpipe infer`` names its mask (``<name>_lungs.nii.gz``)."""
    from segpipe.metrics import case_name

    return case_name(job.mask)


def find_masks(jobs: list[Job], masks: str | Path) -> dict[Path, Path]:
    """The mask of each job's scan in ``masks``: a folder holding ``<name>_lungs.<ext>`` (what
    ``segpipe infer`` writes) or else ``<name>.<ext>`` for every scan name (ext: any image
    suffix), or one mask file for a single scan.

    Raises:
        InputError: ``masks`` does not exist, or a scan has no mask there (all such scans
            are named).
    """
    where = Path(masks)
    if not where.exists():
        raise InputError(f"masks not found: {where}")
    if where.is_file():
        if len(jobs) != 1:
            raise InputError(f"--masks {where} is one file but there are {len(jobs)} scans; give a folder of masks")
        if not io.image_suffix(where):
            raise InputError(f"{where}: unsupported mask file; expected one of {', '.join(io.IMAGE_SUFFIXES)}")
        return {jobs[0].input: where}
    found: dict[Path, Path] = {}
    missing = []
    for job in jobs:
        name = _scan_name(job)
        candidates = [where / f"{stem}{suffix}" for stem in (f"{name}_lungs", name) for suffix in io.IMAGE_SUFFIXES]
        match = next((c for c in candidates if c.is_file() and c.resolve() != job.input.resolve()), None)
        if match is None:
            missing.append(name)
        else:
            found[job.input] = match
    if missing:
        shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        raise InputError(f"no mask in {where} for {len(missing)} scan(s): {shown} (expected NAME_lungs.nii.gz or NAME.nii.gz)")
    return found


def collect_density(
    inputs: Sequence[str | Path],
    *,
    masks: str | Path | None = None,
    segmenter: LungSegmenter | None = None,
    hu_offset: float = 0.0,
    series_uid: str | None = None,
    progress: bool = True,
) -> list[dict[str, Any]]:
    """The density measures of every scan in ``inputs``, one row (dict) per scan.

    Args:
        inputs: image files, DICOM folders or folders of scans (as for ``segpipe infer``).
        masks: a folder of lung masks matched to the scans by name (see :func:`find_masks`),
            or one mask file for one scan; None: segment each scan with ``segmenter``.
        segmenter: the segmenter to use without ``masks`` (default: the bundled model).
        hu_offset: added to every voxel first (scans stored as HU + 1024: -1024).
        series_uid: DICOM series to read from a folder with several.
        progress: a progress bar over the scans.

    Returns:
        Rows with the keys of :func:`csv_columns` (measures in HU, mL, %; None where a lung
        is empty).

    Raises:
        InputError: a missing input, no scans, two scans of one name, a scan without a mask,
            or a scan or mask that cannot be read.
        GeometryError: a mask that is not on its scan's grid.
    """
    from segpipe.infer import plan_jobs

    jobs = plan_jobs(list(inputs), None)
    mask_of = find_masks(jobs, masks) if masks is not None else {}
    model = ""
    if masks is None:
        if segmenter is None:
            from segpipe.infer import LungSegmenter

            segmenter = LungSegmenter.default()
        from segpipe.model import DEFAULT_MODEL

        path = getattr(segmenter, "model_path", None)
        model = "" if path is None else "default" if Path(path).resolve() == DEFAULT_MODEL.resolve() else str(path)
    iterator: Any = jobs
    if progress and len(jobs) > 1:
        from tqdm.auto import tqdm

        iterator = tqdm(jobs, desc="scans", unit="scan")
    rows = []
    for job in iterator:
        warnings: list[str] = []
        if masks is not None:
            image = io.read_image(job.input, series_uid=series_uid)
            found = density.image_density(image, io.read_image(mask_of[job.input]), hu_offset=hu_offset)
            del image
            mask = str(mask_of[job.input])
        else:
            result = segmenter.predict_with_report(job.input, hu_offset=hu_offset, series_uid=series_uid)  # type: ignore[union-attr]
            found, warnings, mask = result.density, list(result.report.get("warnings", [])), "segpipe"
        info = {"scan": _scan_name(job), "input": str(job.input), "mask": mask, "segpipe_version": __version__,
                "model": model, "warnings": "; ".join(warnings)}
        rows.append({**info, **found.row()})  # type: ignore[union-attr]
    return rows


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.7g}" if math.isfinite(value) else ""
    return str(value)


def write_density_csv(rows: list[dict[str, Any]], path: str | Path) -> Path:
    """Write ``rows`` (from :func:`collect_density`) as CSV with :func:`csv_columns`,
    atomically (a temporary file, then a rename); an empty cell where a value is None."""
    buffer = _pyio.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    columns = csv_columns()
    writer.writerow(columns)
    for row in rows:
        writer.writerow([_cell(row.get(c)) for c in columns])
    return io.write_text_atomic(path, buffer.getvalue())


def density_stats(
    inputs: Sequence[str | Path],
    output: str | Path,
    *,
    masks: str | Path | None = None,
    segmenter: LungSegmenter | None = None,
    hu_offset: float = 0.0,
    series_uid: str | None = None,
    progress: bool = True,
) -> Path:
    """:func:`collect_density` of ``inputs`` written to the CSV file ``output`` (checked
    writable before any scan is read; written at the end, atomically). Returns its path."""
    io.check_output_path(output, image=False)
    rows = collect_density(inputs, masks=masks, segmenter=segmenter, hu_offset=hu_offset, series_uid=series_uid,
                           progress=progress)
    return write_density_csv(rows, output)
