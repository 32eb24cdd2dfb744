"""Dump the coarse stage's inputs to the side split for held-out phantoms of eval_model.py
(by index), with their labels on the coarse grid: runs/vc/held38_0.pkl.

    python experiments/2026-11-27-turned-patient/dump_phantoms.py 0 1 2 3 4 5 6 10 12 14
"""

from __future__ import annotations

import pickle
import sys

import SimpleITK as sitk

sys.path.insert(0, "benchmarks")
from eval_model import held_out_specs  # noqa: E402

import segpipe.infer.coarse as C  # noqa: E402
from segpipe import LungSegmenter, spatial  # noqa: E402
from segpipe.infer.scan import read_scan  # noqa: E402
from segpipe.synthetic import make_phantom  # noqa: E402

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
specs = held_out_specs(20)
out = []
for i in [int(a) for a in sys.argv[1:]]:
    ph = make_phantom(specs[i])
    scan, _ = read_scan(spatial.to_canonical(ph.image)[0])
    result, _ = C.locate(scan, seg.weights["coarse"], seg.settings)
    g = result.geometry
    grid = sitk.Image(list(g.size), sitk.sitkUInt8)
    grid.SetSpacing(g.spacing)
    grid.SetOrigin(g.origin)
    grid.SetDirection(g.direction)
    rc = sitk.GetArrayFromImage(sitk.Resample(spatial.to_canonical(ph.label)[0], grid, sitk.Transform(), sitk.sitkNearestNeighbor, 0))
    out.append(dict(seed=0, case=f"held{i}", i=i, desc=specs[i].coverage, rc=rc, sides=result.sides, **rec))
    rec = {}
    print(i, flush=True)
pickle.dump(out, open("runs/vc/held38_0.pkl", "wb"))
