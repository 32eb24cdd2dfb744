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
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import SimpleITK as sitk
from scipy import ndimage

from segpipe.train.patches import denser_lungs

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "2026-12-07-dense-lungs"))

from denser import _segmenter, real_scans, score  # noqa: E402


def _variants(a: np.ndarray, ref: np.ndarray, spacing_zyx: tuple[float, ...]) -> Iterator[tuple[str, np.ndarray]]:
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
    rows = [score(seg, img, b, ref, scan=name, variant=variant)
            for name, img, ref in real_scans()
            for variant, b in _variants(sitk.GetArrayFromImage(img), ref, tuple(reversed(img.GetSpacing())))]
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
