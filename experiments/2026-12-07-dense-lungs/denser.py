"""The real scans with denser lungs (an expiratory scan, diffuse ground glass), against their
masks: every voxel in or within two voxels of the lungs moves by S times its lung share
(`segpipe.train.patches.denser_lungs`, the training augmentation), S = 0, 150, 250, 350 HU.
References: COPDGene's lung label; LIDC's mask from the bundled model on the scan as it is.

    python experiments/2026-12-07-dense-lungs/denser.py [MODEL[:RULE.PARAM=VALUE,...]] [--json OUT]

MODEL: 'default' or a model file; rules as in ``benchmarks/family_b_score.py --models``.
``real_scans`` and ``score`` serve ``experiments/2026-12-07-kernels/kernels.py`` too.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import SimpleITK as sitk

from segpipe import LungSegmenter
from segpipe.io.image import read_image
from segpipe.metrics import dice
from segpipe.train.patches import denser_lungs

DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from family_b_score import _segmenter  # noqa: E402


def real_scans() -> Iterator[tuple[str, sitk.Image, np.ndarray]]:
    """(name, scan as float32, reference label array): COPDGene with its label, LIDC with the
    bundled model's mask of it."""
    copd = sitk.Cast(read_image(DATA / "copdgene-10002K-64" / "ct.nii.gz"), sitk.sitkFloat32)
    yield "COPDGene-10002K", copd, sitk.GetArrayFromImage(sitk.ReadImage(str(DATA / "copdgene-10002K-64" / "lungs.nii.gz")))
    lidc = sitk.Cast(read_image(DATA / "lidc-idri-0001" / "dicom"), sitk.sitkFloat32)
    yield "LIDC-IDRI-0001", lidc, sitk.GetArrayFromImage(LungSegmenter.default().predict(lidc))


def score(seg: Any, like: sitk.Image, array: np.ndarray, ref: np.ndarray, **row: Any) -> dict[str, Any]:
    """``seg``'s mask of ``array`` (on ``like``'s grid) against ``ref``: Dice and volume ratio per
    lung, lung outside ``ref`` (mL); printed as one JSON line and returned with ``row``'s keys first."""
    image = sitk.GetImageFromArray(np.asarray(array, np.float32))
    image.CopyInformation(like)
    p = sitk.GetArrayFromImage(seg.predict(image))
    ml = float(np.prod(like.GetSpacing())) / 1000.0
    row |= {"dice": [round(dice(p == v, ref == v), 4) for v in (1, 2)],
            "volume_ratio": [round(float((p == v).sum() / max(1, (ref == v).sum())), 3) for v in (1, 2)],
            "non_lung_ml": round(float(((p > 0) & (ref == 0)).sum()) * ml, 1)}
    print(json.dumps(row), flush=True)
    return row


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model", nargs="?", default="default", help="MODEL or MODEL:RULE.PARAM=VALUE,...")
    ap.add_argument("--shifts", type=float, nargs="+", default=[0.0, 150.0, 250.0, 350.0])
    ap.add_argument("--json")
    args = ap.parse_args()
    seg = _segmenter(args.model)
    rows = []
    for name, img, ref in real_scans():
        a = sitk.GetArrayFromImage(img)
        for s in args.shifts:
            b = denser_lungs(a, ref, s)
            rows.append(score(seg, img, b, ref, scan=name, shift_hu=s, lung_median_hu=round(float(np.median(b[ref > 0])), 0)))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
