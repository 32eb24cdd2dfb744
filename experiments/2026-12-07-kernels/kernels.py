"""The real scans as other reconstruction kernels would give them, against their masks: sharp
(unsharp masking, the scan plus AMOUNT times its difference from a 1 mm Gaussian blur: a lung or
bone kernel's rims at the lung's edge) and soft (a 2 mm Gaussian blur); and denser lungs
(`denser_lungs`, 250 HU) with the sharp kernel. References: COPDGene's label; LIDC's mask from
the bundled model on the scan as it is.

    python experiments/2026-12-07-kernels/kernels.py [MODEL[:RULE.PARAM=VALUE,...]] [--json OUT]

MODEL: 'default' or a model file; rules as in ``benchmarks/family_b_score.py --models``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import SimpleITK as sitk
from scipy import ndimage

from segpipe import LungSegmenter
from segpipe.io.image import read_image
from segpipe.metrics import dice
from segpipe.train.patches import denser_lungs

DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from family_b_score import _segmenter  # noqa: E402


def _variants(a: np.ndarray, ref: np.ndarray, spacing_zyx: tuple[float, ...]):  # type: ignore[no-untyped-def]
    def sharp(x: np.ndarray, amount: float) -> np.ndarray:
        return x + amount * (x - ndimage.gaussian_filter(x, [1.0 / s for s in spacing_zyx]))

    yield "as it is", a
    yield "sharp 0.75", sharp(a, 0.75)
    yield "sharp 1.5", sharp(a, 1.5)
    yield "soft 2 mm", ndimage.gaussian_filter(a, [2.0 / s for s in spacing_zyx])
    yield "denser 250, sharp 0.75", sharp(denser_lungs(a, ref, 250.0), 0.75)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model", nargs="?", default="default", help="MODEL or MODEL:RULE.PARAM=VALUE,...")
    ap.add_argument("--json")
    args = ap.parse_args()
    seg = _segmenter(args.model)
    lidc = sitk.Cast(read_image(DATA / "lidc-idri-0001" / "dicom"), sitk.sitkFloat32)
    copd = sitk.Cast(read_image(DATA / "copdgene-10002K-64" / "ct.nii.gz"), sitk.sitkFloat32)
    refs = {"COPDGene-10002K": (copd, sitk.GetArrayFromImage(sitk.ReadImage(str(DATA / "copdgene-10002K-64" / "lungs.nii.gz")))),
            "LIDC-IDRI-0001": (lidc, sitk.GetArrayFromImage(LungSegmenter.default().predict(lidc)))}
    rows = []
    for name, (img, ref) in refs.items():
        a = sitk.GetArrayFromImage(img)
        ml = float(np.prod(img.GetSpacing())) / 1000.0
        for variant, b in _variants(a, ref, tuple(reversed(img.GetSpacing()))):
            im2 = sitk.GetImageFromArray(np.asarray(b, np.float32))
            im2.CopyInformation(img)
            p = sitk.GetArrayFromImage(seg.predict(im2))
            row = {"scan": name, "variant": variant, "dice": [round(dice(p == v, ref == v), 4) for v in (1, 2)],
                   "volume_ratio": [round(float((p == v).sum() / max(1, (ref == v).sum())), 3) for v in (1, 2)],
                   "non_lung_ml": round(float(((p > 0) & (ref == 0)).sum()) * ml, 1)}
            rows.append(row)
            print(json.dumps(row), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
