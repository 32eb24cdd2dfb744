"""The preprocessing cache: each training case resampled once into memory-mappable arrays.

A case (:class:`segpipe.train.dataset.Case`) becomes a :class:`CachedCase`: the whole scan at
the coarse spacing and one crop per lung at the fine spacing, reoriented to LPS and stored as
``.npy`` (int16 HU, uint8 labels) under a key that hashes the settings and the source files
(:func:`build_cache`).

Example:
    >>> cached = build_cache(discover("data_samples"), "runs/demo/cache")  # doctest: +SKIP
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import SimpleITK as sitk

from segpipe import io, spatial
from segpipe._parallel import in_processes
from segpipe.train.dataset import Case

__all__ = [
    "CACHE_VERSION",
    "CachedCase",
    "CachedVolume",
    "build_cache",
    "preprocess_case",
]

CACHE_VERSION = 2  # 2: the scanner's padding raised to air before resampling, as at inference


@dataclass(frozen=True)
class CachedVolume:
    """One preprocessed volume in the cache: ``image`` (int16 HU) and ``label`` (uint8) arrays
    in ``(z, y, x)`` order, canonical (LPS) orientation, with their physical geometry."""

    image: Path
    label: Path
    shape_zyx: tuple[int, int, int]
    spacing_xyz: tuple[float, float, float]
    origin_xyz: tuple[float, float, float]

    def load(self, mmap: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """The (image, label) arrays, memory-mapped by default (no copy in RAM)."""
        mode = "r" if mmap else None
        return np.load(self.image, mmap_mode=mode), np.load(self.label, mmap_mode=mode)

    def to_json(self) -> dict:
        return {
            "image": self.image.name,
            "label": self.label.name,
            "shape_zyx": list(self.shape_zyx),
            "spacing_xyz": list(self.spacing_xyz),
            "origin_xyz": list(self.origin_xyz),
        }

    @classmethod
    def from_json(cls, folder: Path, d: dict) -> CachedVolume:
        return cls(
            folder / d["image"], folder / d["label"], tuple(d["shape_zyx"]),  # type: ignore[arg-type]
            tuple(d["spacing_xyz"]), tuple(d["origin_xyz"]),  # type: ignore[arg-type]
        )


@dataclass(frozen=True)
class CachedCase:
    """A case in the cache: the whole scan at the coarse spacing and one crop per lung at the
    fine spacing (``fine["right"]``, ``fine["left"]``; a lung absent from the label is absent;
    ``fine["decoy_right"]`` and ``fine["decoy_left"]``: :func:`decoy_boxes` crops, where asked for)."""

    name: str
    coarse: CachedVolume
    fine: dict[str, CachedVolume]


def _cache_key(cases: list[Case], settings: dict) -> str:
    import hashlib

    h = hashlib.sha256(json.dumps({"version": CACHE_VERSION, "settings": settings}, sort_keys=True).encode())
    for case in cases:
        for p in (case.image, case.label):
            st = p.stat()
            h.update(f"{case.name}|{p.resolve()}|{st.st_size}|{st.st_mtime_ns}\n".encode())
    return h.hexdigest()[:16]


def _save_volume(folder: Path, stem: str, image: sitk.Image, label: sitk.Image) -> CachedVolume:
    img = sitk.GetArrayFromImage(image)
    img = np.clip(np.rint(img), -32768, 32767).astype(np.int16)
    lbl = sitk.GetArrayFromImage(label).astype(np.uint8)
    paths = (folder / f"{stem}_img.npy", folder / f"{stem}_lbl.npy")
    for path, array in zip(paths, (img, lbl)):
        tmp = path.with_suffix(".tmp.npy")
        np.save(tmp, array)
        tmp.replace(path)
    return CachedVolume(
        paths[0], paths[1], tuple(img.shape),  # type: ignore[arg-type]
        tuple(image.GetSpacing()), tuple(image.GetOrigin()),  # type: ignore[arg-type]
    )


def preprocess_case(
    case: Case,
    folder: Path,
    *,
    coarse_spacing_mm: tuple[float, float, float],
    fine_spacing_mm: tuple[float, float, float],
    margin_mm: float,
    coarse_size_xyz: tuple[int, int, int] | None = None,
    below_mm: float = 0.0,
    decoy_mm: float = 0.0,
) -> CachedCase:
    """Preprocess one case into ``folder`` (see :func:`build_cache`). The scanner's padding
    (below -1024 HU) is raised to air first, as inference does before it resamples."""
    image, _ = spatial.to_canonical(io.read_image(case.image))
    image = spatial.air_floor(image)
    label, _ = spatial.to_canonical(io.read_image(case.label))
    label = sitk.Cast(label, sitk.sitkUInt8)
    if coarse_size_xyz is not None:
        coarse_spacing_mm = spatial.spacing_for_size(image, coarse_size_xyz)
    coarse = _save_volume(
        folder, f"{case.name}_coarse",
        spatial.resample_image(image, coarse_spacing_mm),
        spatial.resample_label(label, coarse_spacing_mm),
    )
    fine = {}
    for side, value in (("right", 1), ("left", 2)):
        box = spatial.box_from_mask(label, value)
        if box is None:
            continue
        box = box.expand(margin_mm)
        if below_mm > 0:  # on down toward the feet, not past the scan's first slice (canonical LPS: z up)
            lo = list(box.lo_xyz)
            lo[2] = min(lo[2], max(lo[2] - below_mm, float(image.GetOrigin()[2])))
            box = spatial.Box(tuple(lo), box.hi_xyz)  # type: ignore[arg-type]
        crop_img = spatial.crop_to_box(image, box, pad_value=-1024)
        crop_lbl = spatial.crop_to_box(label, box, pad_value=0)
        fine[side] = _save_volume(
            folder, f"{case.name}_fine_{side}",
            spatial.resample_image(crop_img, fine_spacing_mm),
            spatial.resample_label(crop_lbl, fine_spacing_mm),
        )
    if decoy_mm > 0:
        for side, box in decoy_boxes(image, label, decoy_mm).items():
            fine[f"decoy_{side}"] = _save_volume(
                folder, f"{case.name}_fine_decoy_{side}",
                spatial.resample_image(spatial.crop_to_box(image, box, pad_value=-1024), fine_spacing_mm),
                spatial.resample_label(spatial.crop_to_box(label, box, pad_value=0), fine_spacing_mm),
            )
    return CachedCase(case.name, coarse, fine)


def decoy_boxes(image: sitk.Image, label: sitk.Image, decoy_mm: float, body_hu: float = -500.0) -> dict[str, spatial.Box]:
    """For each lung absent from ``label`` (canonical LPS, z up), the box of that side of the
    body (from the body's middle out) in the scan's top ``decoy_mm``: what the fine stage is
    sent to when the coarse stage takes gas under the diaphragm for lung. Empty where both
    lungs are present or no body shows in that slab."""
    labels = sitk.GetArrayViewFromImage(label)
    missing = [(side, value) for side, value in (("right", 1), ("left", 2)) if not (labels == value).any()]
    if not missing:
        return {}
    from segpipe.refine import largest_component

    hu = sitk.GetArrayViewFromImage(image)
    nz = hu.shape[0]
    top = max(1, min(nz, int(round(decoy_mm / image.GetSpacing()[2]))))
    body = np.zeros(hu.shape, bool)
    body[nz - top:] = largest_component(hu[nz - top:] > body_hu)[0]  # the body, not the table
    if not body.any():
        return {}
    xs = np.flatnonzero(body.any(axis=(0, 1)))
    middle = int(round(np.nonzero(body)[2].mean()))
    out = {}
    for side, value in missing:  # canonical LPS: x grows toward the patient's left
        span = slice(xs[0], middle + 1) if value == 1 else slice(middle, xs[-1] + 1)
        region = np.zeros(hu.shape, np.uint8)
        region[:, :, span] = body[:, :, span]
        box = spatial.box_from_mask(spatial.copy_geometry(region, image))
        if box is not None:
            out[side] = box
    return out


def build_cache(
    cases: list[Case],
    cache_dir: str | Path,
    *,
    coarse_spacing_mm: tuple[float, float, float] = (4.0, 4.0, 4.0),
    fine_spacing_mm: tuple[float, float, float] = (1.5, 1.5, 1.5),
    margin_mm: float = 12.0,
    coarse_size_xyz: tuple[int, int, int] | None = None,
    below_mm: float = 0.0,
    decoy_mm: float = 0.0,
    progress: bool = False,
    workers: int = 1,
) -> list[CachedCase]:
    """Preprocess ``cases`` once into ``cache_dir/<key>/`` and return them.

    Each case becomes a coarse volume (whole scan at ``coarse_spacing_mm``, or resampled to
    ``coarse_size_xyz`` voxels when that is given) and one crop per
    lung (the lung's box plus ``margin_mm``, and ``below_mm`` more toward the feet within the
    scan, at ``fine_spacing_mm``; with ``decoy_mm``, for each lung the label lacks, a
    :func:`decoy_boxes` crop as well), reoriented to LPS and
    stored as ``.npy`` (int16 HU, uint8 labels) for memory-mapped reading. The key hashes the
    settings and each file's path, size and modification time: an unchanged dataset reuses
    the cache, any change builds a new one. Cases are processed one at a time, so RAM stays
    bounded by one case whatever the dataset size (``workers`` > 1: that many cases at once, in
    worker processes); an interrupted build resumes where it stopped (finished cases are kept).
    """
    settings = {
        "coarse_spacing_mm": list(coarse_spacing_mm),
        "fine_spacing_mm": list(fine_spacing_mm),
        "margin_mm": margin_mm,
        "coarse_size_xyz": list(coarse_size_xyz) if coarse_size_xyz else None,
        **({"below_mm": below_mm} if below_mm else {}),  # (absent when off: earlier caches keep their key)
        **({"decoy_mm": decoy_mm} if decoy_mm else {}),
    }
    folder = Path(cache_dir) / _cache_key(cases, settings)
    folder.mkdir(parents=True, exist_ok=True)
    manifest_path = folder / "manifest.json"
    done: dict[str, dict] = {}
    if manifest_path.is_file():
        try:
            done = json.loads(manifest_path.read_text()).get("cases", {})
        except json.JSONDecodeError:
            done = {}
    todo = [c for c in cases if not (c.name in done and all((folder / v).exists() for v in _entry_files(done[c.name])))]
    kwargs = dict(coarse_spacing_mm=coarse_spacing_mm, fine_spacing_mm=fine_spacing_mm, margin_mm=margin_mm,
                  coarse_size_xyz=coarse_size_xyz, below_mm=below_mm, decoy_mm=decoy_mm)
    from tqdm.auto import tqdm

    with tqdm(total=len(todo), desc="preprocessing", unit="case", disable=not (progress and todo)) as bar:
        for _, cached in in_processes(_preprocess, [(case, folder, kwargs) for case in todo], workers):
            done[cached.name] = {"coarse": cached.coarse.to_json(), "fine": {k: v.to_json() for k, v in cached.fine.items()}}
            tmp = manifest_path.with_suffix(".tmp")
            tmp.write_text(json.dumps({"version": CACHE_VERSION, "settings": settings, "cases": done}, indent=1))
            tmp.replace(manifest_path)
            bar.update()
    return [_case_from_json(folder, c.name, done[c.name]) for c in cases]


def _preprocess(case: Case, folder: Path, kwargs: dict) -> CachedCase:
    """:func:`preprocess_case` with its settings as one mapping (a job of :func:`in_processes`)."""
    return preprocess_case(case, folder, **kwargs)


def _entry_files(entry: dict) -> list[str]:
    vols = [entry["coarse"], *entry["fine"].values()]
    return [v[k] for v in vols for k in ("image", "label")]


def _case_from_json(folder: Path, name: str, entry: dict) -> CachedCase:
    return CachedCase(
        name,
        CachedVolume.from_json(folder, entry["coarse"]),
        {k: CachedVolume.from_json(folder, v) for k, v in entry["fine"].items()},
    )
