"""Datasets: discovery of image/label pairs in three layouts and their validation.

Layouts (detected in this order):

* Medical Segmentation Decathlon: ``dataset.json`` with a ``"training"`` list of
  ``{"image": ..., "label": ...}`` entries (paths relative to the folder).
* nnU-Net v2 raw: ``imagesTr/<case>_0000.nii.gz`` and ``labelsTr/<case>.nii.gz``
  (``dataset.json`` with ``"channel_names"`` and ``"file_ending"``, optional).
* Folder pairs: ``images/<name>.<ext>`` and ``labels/<name>.<ext>`` matched by name.

Every pair is checked before training (readable, same geometry, label values in the expected
set) and all problems are reported at once, one line per case.

Example:
    >>> cases = discover("data_samples")             # doctest: +SKIP
    >>> validate_cases(cases)                        # doctest: +SKIP
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import SimpleITK as sitk

from segpipe import io, spatial
from segpipe._parallel import in_processes
from segpipe.errors import InputError, SegpipeError

__all__ = [
    "Case",
    "DatasetError",
    "LABELS",
    "check_case",
    "discover",
    "validate_cases",
]

LABELS = {0: "background", 1: "right_lung", 2: "left_lung"}


class DatasetError(InputError):
    """A dataset cannot be used; ``problems`` holds one line per broken case."""

    def __init__(self, summary: str, problems: list[str] | None = None) -> None:
        self.problems = list(problems or [])
        text = summary if not self.problems else summary + "".join(f"\n  {p}" for p in self.problems)
        super().__init__(text)


@dataclass(frozen=True)
class Case:
    """One training case: an image and its label map (0 background, 1 right, 2 left lung)."""

    name: str
    image: Path
    label: Path


def _resolve(root: Path, entry: str) -> Path:
    p = Path(entry)
    return p if p.is_absolute() else (root / p).resolve()


def _discover_msd(root: Path, meta: dict) -> list[Case]:
    cases = []
    for i, item in enumerate(meta.get("training", [])):
        if not isinstance(item, dict) or "image" not in item or "label" not in item:
            raise DatasetError(f"{root / 'dataset.json'}: training entry {i} needs 'image' and 'label', got {item!r}")
        image = _resolve(root, item["image"])
        cases.append(Case(io.strip_suffix(image), image, _resolve(root, item["label"])))
    return cases


def _discover_nnunet(root: Path, file_ending: str | None) -> list[Case]:
    images_dir, labels_dir = root / "imagesTr", root / "labelsTr"
    cases = []
    for label in sorted(labels_dir.iterdir()):
        if not io.image_suffix(label) or (file_ending and not label.name.endswith(file_ending)):
            continue
        name = io.strip_suffix(label)
        suffix = io.image_suffix(label)
        cases.append(Case(name, images_dir / f"{name}_0000{suffix}", label))
    orphans = sorted(
        p.name for p in images_dir.iterdir()
        if io.image_suffix(p) and not (labels_dir / (io.strip_suffix(p).rsplit("_", 1)[0] + io.image_suffix(p))).exists()
    )
    if orphans:
        raise DatasetError(
            f"{root}: {len(orphans)} image(s) in imagesTr have no label in labelsTr",
            [f"{name}: no matching label" for name in orphans],
        )
    return cases


def _discover_pairs(root: Path) -> list[Case]:
    images = {io.strip_suffix(p): p for p in sorted((root / "images").iterdir()) if io.is_image_path(p)}
    labels = {io.strip_suffix(p): p for p in sorted((root / "labels").iterdir()) if io.is_image_path(p)}
    problems = [f"{n}: image without label" for n in sorted(set(images) - set(labels))]
    problems += [f"{n}: label without image" for n in sorted(set(labels) - set(images))]
    if problems:
        raise DatasetError(f"{root}: images/ and labels/ do not match by name", problems)
    return [Case(n, images[n], labels[n]) for n in sorted(images)]


def discover(root: str | Path) -> list[Case]:
    """Find the image/label pairs under ``root`` (MSD, nnU-Net v2 raw, or images/+labels/).

    Returns:
        Cases sorted by name.

    Raises:
        DatasetError: no known layout, no cases, or unmatched images/labels (all listed).
    """
    root = Path(root)
    if not root.is_dir():
        raise DatasetError(f"dataset folder not found: {root}")
    meta: dict = {}
    meta_path = root / "dataset.json"
    if meta_path.is_file():
        try:
            meta = json.loads(meta_path.read_text())
        except json.JSONDecodeError as err:
            raise DatasetError(f"{meta_path}: invalid JSON ({err.msg} at line {err.lineno})") from err
        if not isinstance(meta, dict):
            raise DatasetError(f"{meta_path}: expected a JSON object, got {type(meta).__name__}")
    if meta.get("training"):
        cases = _discover_msd(root, meta)
    elif (root / "imagesTr").is_dir() and (root / "labelsTr").is_dir():
        cases = _discover_nnunet(root, meta.get("file_ending"))
    elif (root / "images").is_dir() and (root / "labels").is_dir():
        cases = _discover_pairs(root)
    else:
        raise DatasetError(
            f"{root}: no dataset found; expected dataset.json (Decathlon), imagesTr/+labelsTr/ (nnU-Net) "
            "or images/+labels/ folders"
        )
    if not cases:
        raise DatasetError(f"{root}: the dataset holds no cases")
    names = [c.name for c in cases]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise DatasetError(f"{root}: case names must be unique", [f"{n}: listed more than once" for n in dupes])
    return sorted(cases, key=lambda c: c.name)


def check_case(case: Case, allowed_labels: Iterable[int] = tuple(LABELS)) -> str | None:
    """The reason ``case`` cannot be used (one line), or ``None`` when it is fine.

    Reads the image header and voxels, and the whole label map.
    """
    for kind, path in (("image", case.image), ("label", case.label)):
        if not path.exists():
            return f"{kind} file not found: {path}"
    try:
        image = io.read_image(case.image)
    except SegpipeError as err:
        return f"image: {err}"
    try:
        label = io.read_image(case.label)
    except SegpipeError as err:
        return f"label: {err}"
    if not spatial.same_geometry(image, label, atol_mm=1e-3):
        return (
            f"image and label geometry differ (size {image.GetSize()} vs {label.GetSize()}, "
            f"spacing {tuple(round(s, 4) for s in image.GetSpacing())} vs {tuple(round(s, 4) for s in label.GetSpacing())}, "
            f"origin or direction)"
        )
    values = np.unique(sitk.GetArrayViewFromImage(label))
    if label.GetPixelID() in (sitk.sitkFloat32, sitk.sitkFloat64) and not np.all(values == np.round(values)):
        return "label map holds non-integer values"
    extra = sorted(set(values.astype(np.int64).tolist()) - set(allowed_labels))
    if extra:
        return f"label values {extra[:5]} are outside the expected set {sorted(allowed_labels)}"
    return None


def validate_cases(cases: list[Case], allowed_labels: Iterable[int] = tuple(LABELS), progress: bool = False,
                   workers: int = 1) -> None:
    """Check every case; raise one :class:`DatasetError` that lists all broken cases.

    Args:
        cases: from :func:`discover`.
        allowed_labels: label values a label map may hold.
        progress: show a progress bar (long datasets).
        workers: cases checked at once, in worker processes (1: one at a time, here).
    """
    allowed = tuple(allowed_labels)
    reasons: list[str | None] = [None] * len(cases)
    from tqdm.auto import tqdm

    with tqdm(total=len(cases), desc="checking cases", unit="case", disable=not progress) as bar:
        for i, reason in in_processes(check_case, [(case, allowed) for case in cases], workers):
            reasons[i] = reason
            bar.update()
    problems = [f"{case.name}: {reason}" for case, reason in zip(cases, reasons) if reason is not None]
    if problems:
        raise DatasetError(f"{len(problems)} of {len(cases)} cases cannot be used", problems)

