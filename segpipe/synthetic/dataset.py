"""Write phantoms as a Medical Segmentation Decathlon (MSD) style dataset.

Layout::

    OUT/imagesTr/phantom_000.nii.gz   CT in HU
    OUT/labelsTr/phantom_000.nii.gz   0 background, 1 right lung, 2 left lung
    OUT/dataset.json                  MSD fields + "segpipe_phantoms" (the specs and what was placed)
    OUT/preview/phantom_000.png       QC pictures (optional)

Case ``i`` depends only on ``(seed, i)`` and the options, not on ``n``: asking for more cases
later reproduces the first ones.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from segpipe._parallel import in_processes
from segpipe.errors import OutputError
from segpipe.io.image import atomic_target
from segpipe.report import qc_picture
from segpipe.synthetic.render import make_phantom
from segpipe.synthetic.spec import PhantomSpec, sample_spec

__all__ = ["write_dataset", "case_spec", "LABELS"]

LABELS = {"0": "background", "1": "right_lung", "2": "left_lung"}


def case_spec(seed: int, index: int, **overrides: Any) -> PhantomSpec:
    """The spec of case ``index`` of a dataset made with ``seed`` (independent of the count)."""
    child = np.random.SeedSequence([int(seed), int(index)])
    return sample_spec(np.random.default_rng(child), **overrides)


def _write_json(path: Path, data: dict) -> None:
    with atomic_target(path) as tmp:
        Path(tmp).write_text(json.dumps(data, indent=2, default=_plain) + "\n", encoding="utf-8")


def write_dataset(
    out_dir: str | os.PathLike[str],
    n: int,
    seed: int = 0,
    *,
    preview: bool | str = False,
    progress: bool = True,
    prefix: str = "phantom",
    on_case: Callable[[int, Path, Path], None] | None = None,
    workers: int = 1,
    **overrides: Any,
) -> Path:
    """Generate ``n`` phantoms and write them in the MSD layout.

    Args:
        out_dir: Output folder (created if missing; existing case files are overwritten).
        n: Number of cases (>= 1).
        seed: Dataset seed; case ``i`` uses :func:`case_spec(seed, i) <case_spec>`.
        preview: False (none), True (a QC PNG per case in ``OUT/preview/``), ``"first"`` (only
            the first case) or a PNG path (the first case's picture written there).
        progress: Show a tqdm progress bar on stderr.
        prefix: Case name prefix (``phantom_000``...).
        on_case: Called as ``on_case(i, image_path, label_path)`` after each case is written.
        workers: Cases made at once, in worker processes (1: one at a time, here); the
            cases are the same either way.
        **overrides: :class:`~segpipe.synthetic.PhantomSpec` fields fixed for every case
            (e.g. ``size_xyz=(128, 128, 96)``, ``coverage="chest"``, ``nodules=1.0``), or
            ``coverage_weights`` (see :func:`~segpipe.synthetic.sample_spec`).

    Returns:
        Path of the written ``dataset.json``.

    Raises:
        ConfigError: bad overrides or ``n``.
        OutputError: ``out_dir`` cannot be created or written.
    """
    from segpipe.errors import ConfigError

    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ConfigError(f"dataset size: expected a positive integer, got {n!r}")
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ConfigError(f"workers: expected a positive integer, got {workers!r}")
    case_spec(seed, 0, **overrides)  # validate the options before creating anything
    root = Path(out_dir)
    try:
        (root / "imagesTr").mkdir(parents=True, exist_ok=True)
        (root / "labelsTr").mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise OutputError(f"cannot create the dataset folder: expected a writable path, got {str(root)!r} ({err.strerror})") from err
    preview_dir = None
    if preview is True or preview == "first":
        preview_dir = root / "preview"
        preview_dir.mkdir(exist_ok=True)
    elif preview:
        Path(preview).parent.mkdir(parents=True, exist_ok=True)
    from tqdm import tqdm

    def picture(i: int, name: str) -> Path | None:
        if preview_dir is not None and (preview is True or i == 0):
            return preview_dir / f"{name}.png"
        if preview and preview is not True and preview != "first" and i == 0:
            return Path(preview)
        return None

    jobs = [(root, seed, i, f"{prefix}_{i:03d}", picture(i, f"{prefix}_{i:03d}"), overrides) for i in range(n)]
    entries: dict[int, dict] = {}
    bar = tqdm(total=n, desc="phantoms", unit="case", disable=not progress, dynamic_ncols=True)
    for i, entry in in_processes(_write_case, jobs, workers):
        entries[i] = entry
        bar.update()
        if on_case is not None:
            on_case(i, root / "imagesTr" / f"{entry['name']}.nii.gz", root / "labelsTr" / f"{entry['name']}.nii.gz")
    bar.close()
    cases = [entries[i] for i in range(n)]
    training = [{"image": f"./imagesTr/{c['name']}.nii.gz", "label": f"./labelsTr/{c['name']}.nii.gz"} for c in cases]
    meta = {
        "name": "segpipe_phantoms",
        "description": "Synthetic chest CT phantoms (segpipe.synthetic): lungs labelled right (1) and left (2)",
        "reference": "generated by segpipe synth",
        "licence": "CC0-1.0",
        "release": "1.0",
        "tensorImageSize": "3D",
        "modality": {"0": "CT"},
        "labels": LABELS,
        "numTraining": n,
        "numTest": 0,
        "training": training,
        "test": [],
        "segpipe_phantoms": {"seed": int(seed), "options": _jsonable(overrides), "cases": cases},
    }
    path = root / "dataset.json"
    _write_json(path, meta)
    return path


def _write_case(root: Path, seed: int, i: int, name: str, picture: Path | None, overrides: dict) -> dict:
    """Make case ``i`` and write its image, label and (``picture``) QC picture; its entry for
    ``dataset.json``."""
    from segpipe.io import write_image

    spec = case_spec(seed, i, **overrides)
    ph = make_phantom(spec)
    write_image(ph.image, root / "imagesTr" / f"{name}.nii.gz")
    write_image(ph.label, root / "labelsTr" / f"{name}.nii.gz")
    if picture is not None:
        qc_picture(ph.image, ph.label, picture, title=_title(name, spec, ph.info))
    return {"name": name, "spec": spec.to_dict(), "size": list(ph.image.GetSize()),
            "spacing": [round(v, 5) for v in ph.image.GetSpacing()],
            **{k: v for k, v in ph.info.items() if k not in ("airway_centreline_mm", "timing_s")}}


def _title(name: str, spec: PhantomSpec, info: dict) -> str:
    path = [p for p in ("nodules", "consolidation", "ground_glass", "emphysema", "effusion", "collapse") if p in info]
    return f"{name}  seed {spec.seed}  coverage {spec.coverage}  {spec.orientation} {spec.dtype}" + (
        f"  ({', '.join(path)})" if path else "")


def _plain(obj: Any) -> Any:
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    raise TypeError(f"not JSON serializable: {type(obj).__name__}")


def _jsonable(d: dict) -> dict:
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in d.items()}
