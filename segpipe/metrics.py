"""Segmentation metrics in physical units: Dice, HD95 and ASSD in mm, volumes in mL, and the
evaluation of a folder of predicted masks against a folder of reference masks.

Surface distances use MONAI's implementation with the voxel spacing, on a crop around the
two masks (so a 512x512x1000 scan costs no more than its lungs). Geometry of the prediction
and the reference must agree: a mismatch is an error, never a silent resample.

Conventions for empty masks (per lung; a scan without lungs has both empty):

- both empty: Dice 1, HD95 0, ASSD 0, volume error 0 mL and 0 %;
- one empty, the other not: Dice 0; HD95 and ASSD are undefined (no surface to measure to),
  and so is the volume error in % when the reference is empty. :func:`binary_metrics` and
  :func:`lung_metrics` return ``nan`` for them; the folder evaluation
  (:func:`evaluate_folders`) reports them as ``inf``, leaves them out of the mean and median
  and counts them as the worst value. CSV files write ``inf``; JSON has no infinity, so there
  they are ``null`` and the row's ``note`` says which mask was empty.

Example:
    >>> m = lung_metrics(pred, ref)                          # doctest: +SKIP
    >>> m["right"]["dice"], m["right"]["hd95_mm"]            # doctest: +SKIP
    >>> result = evaluate_folders("masks/", "labelsTr/")     # doctest: +SKIP
    >>> print(format_table(result)); write_csv(result, "scores.csv")   # doctest: +SKIP
"""

from __future__ import annotations

import logging
import math
import warnings
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np
import SimpleITK as sitk

from segpipe import io, spatial
from segpipe.errors import GeometryError, InputError

__all__ = [
    "dice",
    "surface_distances",
    "binary_metrics",
    "lung_metrics",
    "LUNG_LABELS",
    "METRIC_COLUMNS",
    "CasePair",
    "EvaluationRow",
    "EvaluationResult",
    "case_name",
    "match_cases",
    "evaluate_folders",
    "format_table",
    "write_csv",
    "write_json",
]

log = logging.getLogger("segpipe")

LUNG_LABELS = {"right": 1, "left": 2}


def dice(pred: np.ndarray, ref: np.ndarray) -> float:
    """Dice of two boolean masks; 1.0 when both are empty."""
    p, r = np.asarray(pred, bool), np.asarray(ref, bool)
    denom = int(p.sum()) + int(r.sum())
    return 1.0 if denom == 0 else 2.0 * int(np.logical_and(p, r).sum()) / denom


def _crop_to_union(pred: np.ndarray, ref: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    union = pred | ref
    slices = []
    for axis in range(3):
        other = tuple(a for a in range(3) if a != axis)
        hit = np.flatnonzero(union.any(axis=other))
        slices.append(slice(max(hit[0] - 2, 0), hit[-1] + 3))
    s = tuple(slices)
    return pred[s], ref[s]


def surface_distances(
    pred: np.ndarray, ref: np.ndarray, spacing_zyx: tuple[float, float, float]
) -> tuple[float, float]:
    """(HD95, ASSD) in mm between the surfaces of two boolean ``(z, y, x)`` masks.

    Surface voxels are those removed by an erosion with the 6-neighbour cross (MONAI's
    definition). HD95 is the larger of the two directed 95th-percentile distances;
    ASSD averages the distances from every surface voxel of both masks to the other surface.
    Both are ``nan`` when either mask is empty.
    """
    import torch
    from monai.metrics import compute_average_surface_distance, compute_hausdorff_distance

    p, r = np.asarray(pred, bool), np.asarray(ref, bool)
    if not p.any() or not r.any():
        return math.nan, math.nan
    p, r = _crop_to_union(p, r)
    tp = torch.from_numpy(p)[None, None]
    tr = torch.from_numpy(r)[None, None]
    spacing = [float(s) for s in spacing_zyx]
    with warnings.catch_warnings():  # MONAI warns about its own internal use of a deprecated argument
        warnings.simplefilter("ignore", FutureWarning)
        hd95 = compute_hausdorff_distance(tp, tr, include_background=True, percentile=95, spacing=spacing)
        assd = compute_average_surface_distance(tp, tr, include_background=True, symmetric=True, spacing=spacing)
    return float(hd95.item()), float(assd.item())


def binary_metrics(pred: np.ndarray, ref: np.ndarray, spacing_xyz: tuple[float, float, float]) -> dict[str, float]:
    """Metrics of two boolean ``(z, y, x)`` masks with voxel spacing ``spacing_xyz`` (mm).

    Returns a dict with ``dice``, ``hd95_mm``, ``assd_mm``, ``volume_ml`` (prediction),
    ``ref_volume_ml``, ``volume_error_ml`` (pred - ref) and ``volume_error_pct``
    (100 * (pred - ref) / ref). Empty masks follow the module's conventions: both empty gives
    Dice 1 and distances 0; one empty gives Dice 0 and ``nan`` distances (undefined), and an
    empty reference a ``nan`` volume error in %.
    """
    voxel_ml = float(np.prod(spacing_xyz)) / 1000.0
    n_pred, n_ref = int(np.count_nonzero(pred)), int(np.count_nonzero(ref))
    if n_pred == 0 and n_ref == 0:
        hd95 = assd = 0.0
    else:  # nan when one mask is empty
        hd95, assd = surface_distances(pred, ref, tuple(reversed(spacing_xyz)))  # type: ignore[arg-type]
    vp, vr = n_pred * voxel_ml, n_ref * voxel_ml
    if n_ref:
        error_pct = 100.0 * (n_pred - n_ref) / n_ref
    else:
        error_pct = 0.0 if n_pred == 0 else math.nan
    return {
        "dice": dice(pred, ref),
        "hd95_mm": hd95,
        "assd_mm": assd,
        "volume_ml": vp,
        "ref_volume_ml": vr,
        "volume_error_ml": vp - vr,
        "volume_error_pct": error_pct,
    }


def _geometry_difference(pred: sitk.Image, ref: sitk.Image) -> str:
    """What differs between two grids, as ``what pred vs ref``, for error messages."""
    def r(values: tuple[float, ...], nd: int = 4) -> tuple[float, ...]:
        return tuple(round(float(v), nd) for v in values)

    if pred.GetSize() != ref.GetSize():
        return f"size {pred.GetSize()} vs {ref.GetSize()}"
    if not np.allclose(pred.GetSpacing(), ref.GetSpacing(), rtol=0, atol=1e-3):
        return f"spacing {r(pred.GetSpacing())} vs {r(ref.GetSpacing())} mm"
    if not np.allclose(pred.GetOrigin(), ref.GetOrigin(), rtol=0, atol=1e-3):
        return f"origin {r(pred.GetOrigin(), 3)} vs {r(ref.GetOrigin(), 3)} mm"
    return f"direction {spatial.orientation_code(pred)} {r(pred.GetDirection())} vs {spatial.orientation_code(ref)} {r(ref.GetDirection())}"


def lung_metrics(pred: sitk.Image, ref: sitk.Image, name: str = "prediction") -> dict[str, dict[str, float]]:
    """Per-lung metrics (``"right"``: label 1, ``"left"``: label 2) of two label maps, as
    :func:`binary_metrics` computes them.

    Raises:
        GeometryError: the two images do not share size, spacing, origin and direction (the
            message starts with ``name`` and says what differs).
    """
    if not spatial.same_geometry(pred, ref, atol_mm=1e-3):
        raise GeometryError(
            f"{name}: prediction and reference geometry differ ({_geometry_difference(pred, ref)}); "
            "a mask must lie exactly on its reference's grid (are these the same scan?)"
        )
    p = sitk.GetArrayViewFromImage(pred)
    r = sitk.GetArrayViewFromImage(ref)
    return {side: binary_metrics(p == v, r == v, pred.GetSpacing()) for side, v in LUNG_LABELS.items()}


# ----------------------------------------------------------------------------- folder evaluation
#: Metric columns of an :class:`EvaluationRow`, in table order.
METRIC_COLUMNS = (
    "dice", "hd95_mm", "assd_mm", "pred_volume_ml", "ref_volume_ml", "volume_error_ml", "volume_error_pct",
)
_SUMMARY_STATS = ("mean", "median", "worst")
_MASK_SUFFIX = "_lungs"  # segpipe infer / baseline write <case>_lungs.nii.gz


@dataclass(frozen=True)
class CasePair:
    """One case to score: its name and the two label files."""

    case: str
    pred: Path
    ref: Path


@dataclass(frozen=True)
class EvaluationRow:
    """Metrics of one lung of one case, or a summary statistic over the cases.

    ``case`` is the case name, or ``mean``/``median``/``worst`` in a summary row. Distances in
    mm, volumes in mL, errors are prediction minus reference. ``note`` says which mask was
    empty (case rows) or how many cases a mean/median left out (summary rows).
    """

    case: str
    lung: str
    dice: float
    hd95_mm: float
    assd_mm: float
    pred_volume_ml: float
    ref_volume_ml: float
    volume_error_ml: float
    volume_error_pct: float
    note: str = ""


@dataclass
class EvaluationResult:
    """What :func:`evaluate_folders` returns: one row per case and lung, the summary rows
    (mean, median, worst per lung), the worst case per lung and metric, and the cases skipped
    because one side lacked them."""

    pred: Path
    ref: Path
    cases: list[CasePair]
    rows: list[EvaluationRow]
    summary: list[EvaluationRow]
    worst_cases: dict[str, dict[str, str]] = field(default_factory=dict)
    skipped: dict[str, list[str]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able dict (non-finite numbers become ``None``)."""
        from segpipe._version import __version__

        def clean(row: EvaluationRow) -> dict[str, Any]:
            d = asdict(row)
            return {k: (_json_number(d[k]) if k in METRIC_COLUMNS else d[k]) for k in d if k not in ("case", "lung")}

        by_case = {(r.case, r.lung): r for r in self.rows}
        summary: dict[str, Any] = {}
        for r in self.summary:
            summary.setdefault(r.lung, {})[r.case] = clean(r)
        for lung, worst in self.worst_cases.items():
            summary.setdefault(lung, {})["worst_case"] = dict(worst)
        return {
            "segpipe_version": __version__,
            "pred": str(self.pred),
            "ref": str(self.ref),
            "labels": {"1": "right lung", "2": "left lung"},
            "conventions": (
                "both masks empty: Dice 1, distances 0; one empty: Dice 0, distances infinite (null here), "
                "left out of mean and median, counted as worst"
            ),
            "cases": [
                {"case": c.case, "pred": str(c.pred), "ref": str(c.ref),
                 **{lung: clean(by_case[(c.case, lung)]) for lung in LUNG_LABELS}}
                for c in self.cases
            ],
            "summary": summary,
            "skipped": {k: list(v) for k, v in self.skipped.items()},
        }


def _json_number(value: float) -> float | None:
    return float(f"{value:.7g}") if math.isfinite(value) else None


def case_name(path: str | Path) -> str:
    """The case a label file belongs to: its name without the image suffix and without a
    trailing ``_lungs`` (``case_01_lungs.nii.gz`` and ``case_01.nrrd`` are both ``case_01``)."""
    name = io.strip_suffix(path)
    if name.endswith(_MASK_SUFFIX) and len(name) > len(_MASK_SUFFIX):
        name = name[: -len(_MASK_SUFFIX)]
    return name


def _label_files(path: Path, what: str) -> dict[str, Path]:
    """Case name -> label file for a file or a folder of label files (not recursive)."""
    if not path.exists():
        raise InputError(f"{what} not found: {path}")
    if path.is_file():
        if not io.image_suffix(path):
            raise InputError(f"{path}: unsupported file type; expected one of {', '.join(io.IMAGE_SUFFIXES)}")
        return {case_name(path): path}
    found: dict[str, Path] = {}
    for p in sorted(path.iterdir()):
        if p.name.startswith(".") or not p.is_file() or not io.image_suffix(p):
            continue
        name = case_name(p)
        if name in found:
            raise InputError(f"{path}: {found[name].name} and {p.name} are both case {name!r}; keep one of them")
        found[name] = p
    if not found:
        raise InputError(f"{path}: no label files found (expected {', '.join(io.IMAGE_SUFFIXES)} files inside)")
    return found


def _name_list(names: list[str], most: int = 10) -> str:
    shown = ", ".join(names[:most])
    return shown + (f" and {len(names) - most} more" if len(names) > most else "")


def match_cases(
    pred: str | Path, ref: str | Path, *, allow_missing: bool = False
) -> tuple[list[CasePair], dict[str, list[str]]]:
    """Pair prediction and reference label files by case name (see :func:`case_name`).

    ``pred`` and ``ref`` are label files or folders of them. Two files are paired whatever
    their names; a file and a folder pair the file with the folder's file of the same case.

    Returns:
        The pairs sorted by case, and the skipped cases as ``{"no_reference": [...],
        "no_prediction": [...]}`` (empty lists unless ``allow_missing``).

    Raises:
        InputError: a path is missing or holds no label files; two files in one folder are the
            same case; a case is on one side only (unless ``allow_missing``, which skips it with
            a warning); no case is on both sides.
    """
    pred_p, ref_p = Path(pred), Path(ref)
    preds, refs = _label_files(pred_p, "prediction"), _label_files(ref_p, "reference")
    if pred_p.is_file() and ref_p.is_file():
        name = case_name(ref_p)
        return [CasePair(name, pred_p, ref_p)], {"no_reference": [], "no_prediction": []}
    if pred_p.is_file():
        refs = {k: v for k, v in refs.items() if k in preds}
    elif ref_p.is_file():
        preds = {k: v for k, v in preds.items() if k in refs}
    no_ref = sorted(set(preds) - set(refs))
    no_pred = sorted(set(refs) - set(preds))
    problems = []
    if no_ref:
        problems.append(f"{len(no_ref)} case(s) without a reference in {ref_p}: {_name_list(no_ref)}")
    if no_pred:
        problems.append(f"{len(no_pred)} case(s) without a prediction in {pred_p}: {_name_list(no_pred)}")
    common = sorted(set(preds) & set(refs))
    if problems and not allow_missing:
        raise InputError("; ".join(problems) + " (allow_missing=True / --allow-missing skips them)")
    if not common:
        raise InputError(f"no case is in both {pred_p} and {ref_p} (cases match by file name, see segpipe evaluate --help)")
    for problem in problems:
        log.warning("skipping %s", problem)
    return [CasePair(name, preds[name], refs[name]) for name in common], {"no_reference": no_ref, "no_prediction": no_pred}


def _check_labels(image: sitk.Image, where: str) -> None:
    """Raise :class:`InputError` unless the label map holds only 0, 1 and 2."""
    arr = sitk.GetArrayViewFromImage(image)
    if arr.size and (arr.min() < 0 or arr.max() > 2 or (arr.dtype.kind == "f" and np.any(arr != np.round(arr)))):
        bad = np.unique(arr[(arr != 0) & (arr != 1) & (arr != 2)])
        shown = ", ".join(f"{v:g}" for v in bad[:5]) + (", ..." if bad.size > 5 else "")
        raise InputError(f"{where}: expected labels 0 (background), 1 (right lung), 2 (left lung), got also {shown}")


def _case_rows(pair: CasePair) -> list[EvaluationRow]:
    pred, ref = io.read_image(pair.pred), io.read_image(pair.ref)
    _check_labels(pred, f"case {pair.case}: {pair.pred}")
    _check_labels(ref, f"case {pair.case}: {pair.ref}")
    m = lung_metrics(pred, ref, name=f"case {pair.case} ({pair.pred} vs {pair.ref})")
    rows = []
    for lung, v in m.items():
        # undefined (one mask empty) -> inf: as far off as can be, the worst value
        v = {k: (math.inf if math.isnan(x) else x) for k, x in v.items()}
        empty_p, empty_r = v["volume_ml"] == 0, v["ref_volume_ml"] == 0
        note = ("both empty" if empty_p and empty_r else "prediction empty" if empty_p
                else "reference empty" if empty_r else "")
        rows.append(EvaluationRow(
            case=pair.case, lung=lung, dice=v["dice"], hd95_mm=v["hd95_mm"], assd_mm=v["assd_mm"],
            pred_volume_ml=v["volume_ml"], ref_volume_ml=v["ref_volume_ml"],
            volume_error_ml=v["volume_error_ml"], volume_error_pct=v["volume_error_pct"], note=note,
        ))
    return rows


def _worst_index(column: str, values: np.ndarray) -> int | None:
    """Index of the worst value of a metric column, or None where "worst" means nothing."""
    if column == "dice":
        return int(np.argmin(values))
    if column in ("hd95_mm", "assd_mm"):
        return int(np.argmax(np.where(np.isnan(values), -np.inf, values)))
    if column.startswith("volume_error"):
        return int(np.argmax(np.where(np.isnan(values), -1.0, np.abs(values))))
    return None


def _summarise(rows: list[EvaluationRow]) -> tuple[list[EvaluationRow], dict[str, dict[str, str]]]:
    """Mean, median and worst per lung; non-finite values are left out of mean and median."""
    summary: list[EvaluationRow] = []
    worst_cases: dict[str, dict[str, str]] = {}
    for lung in LUNG_LABELS:
        lung_rows = [r for r in rows if r.lung == lung]
        if not lung_rows:
            continue
        table = {c: np.array([getattr(r, c) for r in lung_rows], dtype=np.float64) for c in METRIC_COLUMNS}
        n = len(lung_rows)
        n_distances = int(np.count_nonzero(np.isfinite(table["hd95_mm"])))
        left_out = f"HD95/ASSD over {n_distances} of {n} cases" if n_distances < n else ""
        worst_cases[lung] = {}
        for stat in _SUMMARY_STATS:
            values: dict[str, float] = {}
            for column, col in table.items():
                finite = col[np.isfinite(col)]
                if stat == "worst":
                    i = _worst_index(column, col)
                    values[column] = math.nan if i is None else float(col[i])
                    if i is not None:
                        worst_cases[lung][column] = lung_rows[i].case
                elif finite.size:
                    values[column] = float(np.mean(finite) if stat == "mean" else np.median(finite))
                else:
                    values[column] = math.nan
            summary.append(EvaluationRow(case=stat, lung=lung, note="" if stat == "worst" else left_out, **values))
    return summary, worst_cases


def evaluate_folders(
    pred: str | Path, ref: str | Path, *, allow_missing: bool = False, progress: bool = False
) -> EvaluationResult:
    """Score predicted lung masks against reference masks, per case and per lung.

    Args:
        pred: a label file or a folder of them (e.g. ``segpipe infer``'s ``<case>_lungs.nii.gz``).
        ref: a reference label file or folder; labels 0 background, 1 right lung, 2 left lung.
            Cases match by name (:func:`match_cases`).
        allow_missing: skip (with a warning) cases found on one side only instead of failing.
        progress: show a progress bar over the cases.

    Returns:
        Rows per case and lung (Dice, HD95 mm, ASSD mm, volumes mL, volume error mL and %),
        summary rows (mean, median, worst per lung) and the worst case per metric.

    Raises:
        InputError: unmatched or unreadable files, labels other than 0, 1, 2.
        GeometryError: a prediction's grid differs from its reference's (the message names
            the case); nothing is resampled.
    """
    cases, skipped = match_cases(pred, ref, allow_missing=allow_missing)
    iterator: Any = cases
    if progress and len(cases) > 1:
        from tqdm.auto import tqdm

        iterator = tqdm(cases, desc="cases", unit="case")
    rows: list[EvaluationRow] = []
    for pair in iterator:
        rows += _case_rows(pair)
    summary, worst_cases = _summarise(rows)
    return EvaluationResult(Path(pred), Path(ref), cases, rows, summary, worst_cases, skipped)


# ----------------------------------------------------------------------------- output
_TABLE_COLUMNS = (  # (column, header, format)
    ("dice", "Dice", "{:.4f}"),
    ("hd95_mm", "HD95 mm", "{:.2f}"),
    ("assd_mm", "ASSD mm", "{:.2f}"),
    ("pred_volume_ml", "pred mL", "{:.1f}"),
    ("ref_volume_ml", "ref mL", "{:.1f}"),
    ("volume_error_ml", "err mL", "{:+.1f}"),
    ("volume_error_pct", "err %", "{:+.1f}"),
)


def _cell(value: float, fmt: str) -> str:
    if math.isnan(value):
        return "-"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return fmt.format(value)


def format_table(result: EvaluationResult) -> str:
    """The rows and the summary as a plain-text table (``inf``: one mask empty; ``-``: not
    applicable)."""
    header = ["case", "lung", *(h for _, h, _ in _TABLE_COLUMNS), "note"]
    body = [
        [r.case, r.lung, *(_cell(getattr(r, c), f) for c, _, f in _TABLE_COLUMNS), r.note]
        for r in result.rows
    ]
    summary = [
        [r.case, r.lung, *(_cell(getattr(r, c), f) for c, _, f in _TABLE_COLUMNS), r.note]
        for r in result.summary
    ]
    widths = [max(len(line[i]) for line in [header, *body, *summary]) for i in range(len(header))]

    def fmt(line: list[str]) -> str:
        cells = [line[0].ljust(widths[0]), line[1].ljust(widths[1])]
        cells += [v.rjust(w) for v, w in zip(line[2:-1], widths[2:-1])]
        return "  ".join([*cells, line[-1]]).rstrip()

    rule = "-" * (sum(widths) + 2 * (len(widths) - 1))
    lines = [fmt(header), rule, *(fmt(line) for line in body), rule, *(fmt(line) for line in summary)]
    return "\n".join(lines)


def _csv_number(value: float) -> str:
    if math.isnan(value):
        return ""
    return f"{value:.7g}" if math.isfinite(value) else ("inf" if value > 0 else "-inf")


def write_csv(result: EvaluationResult, path: str | Path) -> Path:
    """Write the case rows, then the summary rows (``case`` = mean/median/worst), as CSV,
    atomically. Columns: case, lung, then :data:`METRIC_COLUMNS`, then note; ``inf`` for a
    distance with one mask empty, an empty cell where a value does not apply."""
    import csv
    import io as _pyio

    buffer = _pyio.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    columns = [f.name for f in fields(EvaluationRow)]
    writer.writerow(columns)
    for r in [*result.rows, *result.summary]:
        writer.writerow([_csv_number(getattr(r, c)) if c in METRIC_COLUMNS else getattr(r, c) for c in columns])
    return io.write_text_atomic(path, buffer.getvalue())


def write_json(result: EvaluationResult, path: str | Path) -> Path:
    """Write :meth:`EvaluationResult.to_dict` as JSON (strict: non-finite numbers are
    ``null``), atomically."""
    import json

    return io.write_text_atomic(path, json.dumps(result.to_dict(), indent=1, allow_nan=False) + "\n")
