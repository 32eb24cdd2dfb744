"""One family B lung-end slab through the pipeline: the voxels of each predicted side against
each reference side (mL), and the coarse finds handed to the side split (size, x range, mean x,
slices, the network's left vote, the body's midline) with the sides it gave them.

    PYTHONPATH=benchmarks:experiments/2026-11-28-coarse-lung-end \\
        python experiments/2026-11-28-cut-base-share/diag.py 26313 bases 2.5 15
"""

import sys

import family_b
import numpy as np
import SimpleITK as sitk
from slabs import end_slab

import segpipe.infer.coarse as C
from segpipe import LungSegmenter, spatial
from segpipe.refine._util import label

seed, kind, cm, beyond = int(sys.argv[1]), sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
image, reference, _ = family_b.make_case(seed, "chest")
can = spatial.to_canonical(image)[0]
ref = sitk.GetArrayFromImage(spatial.to_canonical(reference)[0])
zz = np.nonzero(ref.any(axis=(1, 2)))[0]
lo, hi = end_slab(zz, can.GetSpacing()[2], ref.shape[0], kind, cm, beyond)
img, ref = can[:, :, lo:hi], ref[lo:hi]
split = C.split_sides


def spy(found: np.ndarray, **kw):  # type: ignore[no-untyped-def]
    labels, n = label(found)
    for i in range(1, n + 1):
        m = labels == i
        z, _, x = np.nonzero(m)
        print(f"find {i}: {m.sum()} voxels, x {x.min()}-{x.max()} (mean {x.mean():.1f}), slices {z.min()}-{z.max()} "
              f"of {found.shape[0]}, left vote {kw['left_vote'][m].mean():.2f}, midline x {kw['midline_x']:.1f}")
    sides = split(found, **kw)
    for i in range(1, n + 1):
        print(f"find {i}: side {np.bincount(sides[labels == i], minlength=3).argmax()}")
    return sides


C.split_sides = spy
res = LungSegmenter.default().predict_with_report(img)
p = sitk.GetArrayFromImage(res.label)
vml = float(np.prod(img.GetSpacing())) / 1000
print({f"pred {a} ref {b}": round(float(((p == a) & (ref == b)).sum() * vml), 1) for a in (0, 1, 2) for b in (0, 1, 2) if a or b})
print(res.report["warnings"])
