"""Dump the coarse stage's inputs to the side split (the find, split_sides' arguments) with the
reference on the coarse grid, for offline.py:

- ``turned DEG ...``: the whole real scans turned in-plane (reference: LIDC-IDRI-0001's own mask
  of the unturned scan, COPDGene's reference, turned alike): runs/vc/rot38_0.pkl;
- ``phantoms I ...``: held-out phantoms of eval_model.py by index, with their labels:
  runs/vc/held38_0.pkl.

    python experiments/2026-11-27-turned-patient/dump.py turned 0 10 -10 15 -15 25 -25
    python experiments/2026-11-27-turned-patient/dump.py phantoms 0 1 2 3 4 5 6 10 12 14
"""

from __future__ import annotations

import pickle
import sys

import SimpleITK as sitk

sys.path.insert(0, "benchmarks")
import fov_consistency as fc  # noqa: E402
from eval_model import held_out_specs  # noqa: E402
from turned_scans import turned  # noqa: E402

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


def dump(image: sitk.Image, reference: sitk.Image, **fields) -> dict:
    """The coarse stage on ``image``; its split's inputs and the reference on its grid."""
    scan, _ = read_scan(spatial.to_canonical(image)[0])
    result, _ = C.locate(scan, seg.weights["coarse"], seg.settings)
    g = result.geometry
    grid = sitk.Image(list(g.size), sitk.sitkUInt8)
    grid.SetSpacing(g.spacing)
    grid.SetOrigin(g.origin)
    grid.SetDirection(g.direction)
    rc = sitk.GetArrayFromImage(sitk.Resample(spatial.to_canonical(reference)[0], grid, sitk.Transform(), sitk.sitkNearestNeighbor, 0))
    out = dict(seed=0, rc=rc, sides=result.sides, **fields, **rec)
    rec.clear()
    return out


C.split_sides, C.confident_parts = spy, spy2
mode, values = sys.argv[1], sys.argv[2:]
out = []
if mode == "turned":
    for name, image, ref in fc.cases(0, 0):
        base = seg.predict(image) if ref is None else ref
        for deg in map(float, values):
            out.append(dump(turned(image, deg), turned(base, deg, label=True), case=name, i=int(deg), desc=f"turned {deg:+g}"))
            print(name, deg, flush=True)
    pickle.dump(out, open("runs/vc/rot38_0.pkl", "wb"))
else:
    specs = held_out_specs(20)
    for i in map(int, values):
        ph = make_phantom(specs[i])
        out.append(dump(ph.image, ph.label, case=f"held{i}", i=i, desc=specs[i].coverage))
        print(i, flush=True)
    pickle.dump(out, open("runs/vc/held38_0.pkl", "wb"))
