"""The trachea tracked on the coarse grid of LIDC-IDRI-0001 as other protocols give it
(`benchmarks/scan_quality.py`'s variants): the slices it spans and its voxels, with the lumen
threshold on the coarse HU as they are and after an in-plane median (3 x 3) or Gaussian
(0.7 voxel) filter, at -900 and -850 HU.

Run from the project root: ``python experiments/2026-11-28-airway-seed/track.py``
"""

import sys

import numpy as np
from scipy import ndimage

sys.path.insert(0, "benchmarks")
from scan_quality import variant  # noqa: E402

import segpipe.infer.coarse as coarse_step  # noqa: E402
from segpipe import LungSegmenter, io  # noqa: E402
from segpipe.refine.airways import track_airways  # noqa: E402

seen = {}
coarse_airways = coarse_step.coarse_airways


def keep_inputs(hu, body, spacing, p):
    """``coarse_airways``, keeping its inputs."""
    seen.update(hu=np.array(hu), body=body.copy(), spacing=spacing)
    return coarse_airways(hu, body, spacing, p)


coarse_step.coarse_airways = keep_inputs
seg = LungSegmenter.default()
image = io.read_image("../shared/data/lidc-idri-0001/dicom")
FILTERS = {"as is": lambda h: h, "median 3x3": lambda h: ndimage.median_filter(h, size=(1, 3, 3)),
           "gauss 0.7": lambda h: ndimage.gaussian_filter(h, (0, 0.7, 0.7))}
for name in ("as it is", "smooth", "noise80", "noise150", "thick3x", "matrix256"):
    seg.predict(image if name == "as it is" else variant(image, name))
    for filt, f in FILTERS.items():
        h = f(seen["hu"])
        for lumen in (-900, -850):
            tracked = track_airways((h < lumen) & seen["body"], seen["spacing"])
            zs = np.flatnonzero(tracked.any(axis=(1, 2)))
            span = f"slices {zs.min()}-{zs.max()}" if zs.size else "nothing"
            print(f"{name:<9} {filt:<10} {lumen}: {span}, {int(tracked.sum())} voxels", flush=True)
