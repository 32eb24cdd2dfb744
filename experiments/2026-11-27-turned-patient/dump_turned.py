"""Dump the coarse stage's inputs to the side split for the whole real scans turned in-plane
(reference: the unturned scan's mask, LIDC-IDRI-0001's own and COPDGene's reference, turned
alike, on the coarse grid): runs/vc/rot38_0.pkl.

    python experiments/2026-11-27-turned-patient/dump_turned.py 0 10 -10 15 -15 25 -25
"""

from __future__ import annotations

import pickle
import sys

import SimpleITK as sitk

sys.path.insert(0, "benchmarks")
import fov_consistency as fc  # noqa: E402
from turned_scans import turned  # noqa: E402

import segpipe.infer.coarse as C  # noqa: E402
from segpipe import LungSegmenter, spatial  # noqa: E402
from segpipe.infer.scan import read_scan  # noqa: E402

seg = LungSegmenter.default()
rec: dict = {}
split_sides, confident_parts = C.split_sides, C.confident_parts


def spy(found, **kw):
    rec["kw"], rec["found"] = kw, found
    return split_sides(found, **kw)


def spy2(mask, confident, voxel_ml, min_ml, **kw):
    rec["voxel_ml"] = voxel_ml
    return confident_parts(mask, confident, voxel_ml, min_ml, **kw)


C.split_sides, C.confident_parts = spy, spy2
out = []
for name, image, ref in fc.cases(0, 0):
    base = seg.predict(image) if ref is None else ref
    for deg in [float(a) for a in sys.argv[1:]]:
        img, want = turned(image, deg), turned(base, deg, label=True)
        scan, _ = read_scan(spatial.to_canonical(img)[0])
        result, _ = C.locate(scan, seg.weights["coarse"], seg.settings)
        g = result.geometry
        grid = sitk.Image(list(g.size), sitk.sitkUInt8)
        grid.SetSpacing(g.spacing)
        grid.SetOrigin(g.origin)
        grid.SetDirection(g.direction)
        rc = sitk.GetArrayFromImage(sitk.Resample(spatial.to_canonical(want)[0], grid, sitk.Transform(), sitk.sitkNearestNeighbor, 0))
        out.append(dict(seed=0, case=name, i=int(deg), desc=f"turned {deg:+g}", rc=rc, sides=result.sides, **rec))
        rec = {}
        print(name, deg, flush=True)
pickle.dump(out, open("runs/vc/rot38_0.pkl", "wb"))
