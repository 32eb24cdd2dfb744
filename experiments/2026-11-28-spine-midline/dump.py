"""Dump, per random crop of the real scans (``fov_consistency.random_crop``, seed S), the coarse grid's HU and body, the
finds and inputs of ``split_sides``, the coarse sides and the reference on the coarse grid: ``dump.py S`` writes
runs/spine/dump_S.pkl (about 40 s a seed)."""
import pickle
import sys

import numpy as np
import SimpleITK as sitk

sys.path.insert(0, "benchmarks")
import fov_consistency as fc

import segpipe.infer.coarse as C
from segpipe import LungSegmenter, spatial
from segpipe.infer.scan import read_scan

seed = int(sys.argv[1])
seg = LungSegmenter.default()
cases = [(n, im, ref if ref is not None else seg.predict(im)) for n, im, ref in fc.cases(0, 0)]
rec = {}
o_split, o_body = C.split_sides, C.body_in_view


def spy_split(found, **kw):
    rec["found"], rec["kw"] = found, {k: v for k, v in kw.items() if k != "cues"}
    out = o_split(found, **kw)
    rec["cues"] = list(kw.get("cues") or [])
    return out


def spy_body(hu, spacing, *a, **kw):
    rec["hu"], rec["spacing"] = np.array(hu), spacing
    out = o_body(hu, spacing, *a, **kw)
    rec["body"] = out
    return out


C.split_sides, C.body_in_view = spy_split, spy_body
out = []
for name, image, ref in cases:
    canonical, _ = spatial.to_canonical(image)
    ref_a = sitk.GetArrayFromImage(spatial.to_canonical(ref)[0])
    rng = np.random.default_rng([seed, sum(map(ord, name))])
    for i in range(30):
        desc, crop, ref_crop = fc.random_crop(canonical, ref_a, rng)
        scan, _ = read_scan(crop)
        result, _ = C.locate(scan, seg.weights["coarse"], seg.settings)
        g = result.geometry
        grid = sitk.Image(list(g.size), sitk.sitkUInt8)
        grid.SetSpacing(g.spacing)
        grid.SetOrigin(g.origin)
        grid.SetDirection(g.direction)
        rc = sitk.GetArrayFromImage(sitk.Resample(spatial.copy_geometry(ref_crop.astype(np.uint8), scan), grid, sitk.Transform(),
                                                  sitk.sitkNearestNeighbor, 0))
        out.append(dict(case=name, i=i, desc=desc, rc=rc, sides=result.sides, x0=g.origin[0], sx=g.spacing[0], **rec))
        rec = {}
pickle.dump(out, open(f"runs/spine/dump_{seed}.pkl", "wb"))
print("done", len(out))
