"""The real scans with lighter lungs (emphysema): HU + 1000 of every voxel in or within two
voxels of the lungs scaled by a tissue factor, by its lung share (no voxel goes below air),
scored against their masks (`denser.py`'s references):

    python experiments/2026-12-07-dense-lungs/lighter.py [MODEL[:RULE.PARAM=VALUE,...]]
"""

from __future__ import annotations

import argparse

import numpy as np
import SimpleITK as sitk
from denser import _segmenter, real_scans, score
from scipy import ndimage

from segpipe.spatial import LUNG_HU, TISSUE_HU


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model", nargs="?", default="default", help="MODEL or MODEL:RULE.PARAM=VALUE,...")
    ap.add_argument("--factors", type=float, nargs="+", default=[0.75, 0.6, 0.45])
    args = ap.parse_args()
    seg = _segmenter(args.model)
    for name, img, ref in real_scans():
        a = sitk.GetArrayFromImage(img)
        near = ndimage.binary_dilation(ref > 0, iterations=2)
        share = np.clip((TISSUE_HU - a) / (TISSUE_HU - LUNG_HU), 0.0, 1.0)
        for f in args.factors:  # less tissue per voxel: HU + 1000 scaled by f, by the voxel's lung share
            lighter = -1000.0 + (a + 1000.0) * f
            b = np.where(near, a + share * (lighter - a), a)
            score(seg, img, b, ref, scan=name, tissue_factor=f, lung_median_hu=round(float(np.median(b[ref > 0]))))


if __name__ == "__main__":
    main()
