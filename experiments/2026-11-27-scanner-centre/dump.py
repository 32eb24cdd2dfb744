"""Dump the coarse stage's inputs to split_sides for random crops (offline side-rule experiments)."""

import pickle
import sys

import numpy as np
import SimpleITK as sitk

sys.path.insert(0, "benchmarks")
import fov_consistency as fc

import segpipe.infer.coarse as C
from segpipe import LungSegmenter, spatial
from segpipe.infer.scan import read_scan

seeds = [int(s) for s in sys.argv[1:]]
seg = LungSegmenter.default()
cases = [(n, im, ref if ref is not None else seg.predict(im)) for n, im, ref in fc.cases(0, 0)]
rec = {}
o1, o2 = C.split_sides, C.confident_parts


def spy(found, **kw):
    rec["kw"] = kw
    rec["found"] = found
    return o1(found, **kw)


def spy2(mask, confident, voxel_ml, min_ml, **kw):
    rec["confident"] = confident
    rec["edge"] = kw.get("edge")
    rec["voxel_ml"] = voxel_ml
    return o2(mask, confident, voxel_ml, min_ml, **kw)


C.split_sides, C.confident_parts = spy, spy2
for seed in seeds:
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
            rc = sitk.GetArrayFromImage(sitk.Resample(spatial.copy_geometry(ref_crop.astype(np.uint8), scan), grid, sitk.Transform(), sitk.sitkNearestNeighbor, 0))
            out.append(dict(seed=seed, case=name, i=i, desc=desc, rc=rc, sides=result.sides, x0=g.origin[0], sx=g.spacing[0], direction=g.direction, **rec))
            rec = {}
    pickle.dump(out, open(f"runs/vc/dumpx_{seed}.pkl", "wb"))
    print("seed", seed, "done", flush=True)
