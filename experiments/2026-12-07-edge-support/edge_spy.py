"""Every lung piece of 1 mL or more before the `components` step, against the reference: its
size, the scan faces it reaches, its share in the coarse stage's lung of its side (``own``) and of
either side (``any``), whether the step kept it, its share in the reference's same and other lung.

    python experiments/2026-12-07-edge-support/edge_spy.py random SEED [SEED ...] > out.json
    python experiments/2026-12-07-edge-support/edge_spy.py familyb SEED_BASE N KIND [KIND ...] > out.json
"""

import json
import sys

import numpy as np
import SimpleITK as sitk
from scipy import ndimage as ndi

sys.path.insert(0, "benchmarks")
import segpipe.refine.components as C
from segpipe import LungSegmenter, spatial

REF: dict = {}
OUT: list = []
_clean = C.clean_lungs_array


def spy(array, reference, *, offset_xyz=(0, 0, 0), support=None, **kw):
    before = array.copy()
    res = _clean(array, reference, offset_xyz=offset_xyz, support=support, **kw)
    if support is None or REF.get("r") is None:
        return res
    oz, oy, ox = reversed(offset_xyz)
    rr = REF["r"][oz : oz + array.shape[0], oy : oy + array.shape[1], ox : ox + array.shape[2]]
    if rr.shape != array.shape:  # the scan's grid is the reference's (canonical inputs)
        print("shape mismatch", rr.shape, array.shape, file=sys.stderr)
        return res
    size = tuple(reversed(spatial.Geometry.of(reference).size))
    ml = spatial.voxel_volume_ml(reference)
    sup = support(tuple(slice(0, n) for n in array.shape))
    for v in (1, 2):
        lab, n = ndi.label(before == v)
        if n < 2:
            continue
        for i in range(1, n + 1):
            m = lab == i
            if m.sum() * ml < 1.0:
                continue
            zz, yy, xx = np.nonzero(m)
            lo, hi = (zz.min() + oz, yy.min() + oy, xx.min() + ox), (zz.max() + oz, yy.max() + oy, xx.max() + ox)
            edge = [int(f) for a in range(3) for f in (lo[a] == 0, hi[a] == size[a] - 1)]
            OUT.append({"case": REF["case"], "side": v, "ml": round(float(m.sum() * ml), 1), "edge": edge,
                        "own": round(float(((sup[m] & v) > 0).mean()), 3), "any": round(float((sup[m] > 0).mean()), 3),
                        "kept": round(float((array[m] == v).mean()), 2), "true_same": round(float((rr[m] == v).mean()), 2),
                        "true_other": round(float((rr[m] == 3 - v).mean()), 2)})
    return res


C.clean_lungs_array = spy
seg = LungSegmenter.default()
if sys.argv[1] == "random":
    import fov_consistency as fc

    for seed in map(int, sys.argv[2:]):
        for name, scan, ref in fc.cases(0, 0):
            canonical = spatial.to_canonical(scan)[0]
            ref_a = sitk.GetArrayFromImage(spatial.to_canonical(ref if ref is not None else seg.predict(canonical))[0])
            rng = fc.crop_rng(seed, name)
            for i in range(30):
                _, img, r = fc.random_crop(canonical, ref_a, rng)
                REF.update(r=r, case=f"{name[:4]}{seed}_{i}")
                seg.predict(img)
        print(seed, len(OUT), file=sys.stderr, flush=True)
else:
    import family_b

    base, n, kinds = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
    for i in range(n):
        img, lab, _ = family_b.make_case(base + i, kinds[i % len(kinds)])
        REF.update(r=sitk.GetArrayFromImage(spatial.to_canonical(lab)[0]), case=f"b{base + i}")
        seg.predict(spatial.to_canonical(img)[0])
print(json.dumps(OUT))
