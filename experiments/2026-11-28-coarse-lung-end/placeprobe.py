"""Coarse lung probability on short real crops: the scan padded symmetrically (MONAI), flush with the
window's top (padding below), flush with its bottom (padding above), and the two blended along z."""

import sys

import numpy as np
import SimpleITK as sitk

sys.path.insert(0, "benchmarks")
import fov_consistency as fc
from slabs import end_slab

from segpipe import LungSegmenter, spatial
from segpipe.infer.settings import load_network
from segpipe.model import sliding_window_probs

seg = LungSegmenter.default()
s = seg.settings
net = load_network("coarse", s.coarse, seg.weights["coarse"], s.device)


def run(arr):
    return (
        1
        - sliding_window_probs(net, arr, stage=s.coarse, window_hu=s.window_hu, device=s.device, accumulate_on=s.device, sw_batch=1, overlap=s.coarse.overlap)[
            0
        ].numpy()
    )


for name, image, ref in fc.cases(0, 0):
    can, _ = spatial.to_canonical(image)
    if ref is None:
        ref = seg.predict(can)
    refc = spatial.to_canonical(ref)[0]
    ra = sitk.GetArrayFromImage(refc)
    zz = np.nonzero(ra.any(axis=(1, 2)))[0]
    sz = can.GetSpacing()[2]
    for kind, cm, below in [("bases", 1.5, 20), ("bases", 2.5, 20), ("bases", 4, 6), ("apex", 2, 6), ("apex", 3, 3), ("apex", 5, 6), ("bases", 6, 12)]:
        lo, hi = end_slab(zz, sz, ra.shape[0], kind, cm, below)
        ci = spatial.resample_image(can[:, :, lo:hi], (4.0, 4.0, 4.0))
        a = sitk.GetArrayFromImage(ci)
        rl = sitk.GetArrayFromImage(sitk.Resample(refc[:, :, lo:hi], ci, sitk.Transform(), sitk.sitkNearestNeighbor, 0))
        n = a.shape[0]
        d = 64 - n
        if d <= 0:
            continue
        sym = run(a)
        A = run(np.pad(a, ((d, 0), (0, 0), (0, 0)), mode="edge"))[d:]
        B = run(np.pad(a, ((0, d), (0, 0), (0, 0)), mode="edge"))[:n]
        w = np.linspace(0, 1, n)[:, None, None]
        blend = w * A + (1 - w) * B
        line = f"{name[:6]} {kind}{cm}+{below} n{n}:"
        for side, v in (("R", 1), ("L", 2)):
            rr = rl == v
            if rr.sum() * 0.064 < 1:
                continue
            line += f" {side} {rr.sum() * 0.064:6.1f} mL p>0.5:" + " ".join(f"{(x[rr] > 0.5).mean():.2f}" for x in (sym, A, B, blend))
        line += " | non-lung p>0.5 mL: " + " ".join(f"{((x > 0.5) & (rl == 0)).sum() * 0.064:.1f}" for x in (sym, A, B, blend))
        print(line, flush=True)
