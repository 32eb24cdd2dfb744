"""Each piece of the output mask (26-connected, on the scan's own grid) with what tells lung from
gas: its volume, the share of its voxels below -980 HU (pure air), its HU percentiles, and how
much of it is reference lung; with rule ``gas`` off and the cut-lung share patched in
(``coarse.CUT_LUNG_SHARE``).

    PYTHONPATH=benchmarks:experiments/2026-11-28-coarse-lung-end \\
        python experiments/2026-11-28-cut-gas/pieces.py SHARE SET out.jsonl

SET: ``real`` (the real-scan lung-end slabs of thin.py, bases only), ``fbslab:FIRST:END`` (family B
lung-end slabs, bases 1.5 / 2.5 cm with 15 cm below), ``abd:FIRST:END`` (abdominal phantoms of
abdomen_bench.py), ``fb:FIRST:END`` (family B whole cases, kinds as family_b_score.py)."""

import json
import sys

import numpy as np
import SimpleITK as sitk
from scipy import ndimage

import segpipe.infer.coarse as C
from segpipe import LungSegmenter, spatial

C.CUT_LUNG_SHARE = float(sys.argv[1])
which, out = sys.argv[2], open(sys.argv[3], "a")
seg = LungSegmenter.default(rules={"gas": False})  # what rule gas would look at


def cases():  # (name, canonical image, canonical reference array or None)
    kind, *rng = which.split(":")
    seeds = range(int(rng[0]), int(rng[1])) if rng else ()
    if kind == "real":
        import fov_consistency as fc
        from slabs import end_slab

        for name, image, ref in fc.cases(0, 0):
            can = spatial.to_canonical(image)[0]
            ref_c = spatial.to_canonical(ref if ref is not None else seg.predict(can))[0]
            ra = sitk.GetArrayFromImage(ref_c)
            zz = np.nonzero(ra.any(axis=(1, 2)))[0]
            for cm, below in ((1.5, 20), (2.5, 20), (4, 6)):
                for mm in (None, 3.0, 5.0):
                    lo, hi = end_slab(zz, can.GetSpacing()[2], ra.shape[0], "bases", cm, below)
                    img, r = can[:, :, lo:hi], ref_c[:, :, lo:hi]
                    if mm:
                        img = spatial.resample_image(img, (*img.GetSpacing()[:2], mm))
                        r = sitk.Resample(r, img, sitk.Transform(), sitk.sitkNearestNeighbor, 0)
                    yield f"{name} bases{cm}+{below} {mm or 'own'}", img, sitk.GetArrayFromImage(r)
    elif kind == "fbslab":
        import family_b
        from slabs import end_slab

        for seed in seeds:
            image, label, _ = family_b.make_case(seed, "chest")
            can, lab = spatial.to_canonical(image)[0], spatial.to_canonical(label)[0]
            la = sitk.GetArrayFromImage(lab)
            zz = np.nonzero(la.any(axis=(1, 2)))[0]
            for cm in (1.5, 2.5):
                lo, hi = end_slab(zz, can.GetSpacing()[2], la.shape[0], "bases", cm, 15)
                yield f"fb{seed} bases{cm}", can[:, :, lo:hi], la[lo:hi]
    elif kind == "abd":
        import abdomen_bench

        for seed in seeds:
            ph = abdomen_bench.case(seed)
            can, perm = spatial.to_canonical(ph.image)
            yield f"abd{seed}", can, sitk.GetArrayFromImage(spatial.to_canonical(ph.label)[0])
    elif kind == "fb":
        import family_b

        for i, seed in enumerate(seeds):
            k = family_b.CASES[i % len(family_b.CASES)]
            image, label, _ = family_b.make_case(seed, k)
            yield f"fb{seed} {k}", spatial.to_canonical(image)[0], sitk.GetArrayFromImage(spatial.to_canonical(label)[0])


for name, img, ref in cases():
    res = seg.predict_with_report(img)
    p = sitk.GetArrayFromImage(res.label)
    hu = sitk.GetArrayFromImage(img).astype(np.float32)
    vml = float(np.prod(img.GetSpacing())) / 1000
    lab, n = ndimage.label(p > 0, np.ones((3, 3, 3), bool))
    for i in range(1, n + 1):
        m = lab == i
        ml = m.sum() * vml
        if ml < 0.5:
            continue
        h = hu[m]
        inner = ndimage.binary_erosion(m)  # away from the piece's surface (partial volume)
        row = dict(case=name, side=int(np.bincount(p[m]).argmax()), ml=round(ml, 1),
                   lung_share=round(float((ref[m] > 0).mean()), 3) if ref is not None else None,
                   air=round(float((h < -980).mean()), 3), air950=round(float((h < -950).mean()), 3),
                   inner_air=round(float((hu[inner] < -980).mean()), 3) if inner.any() else None,
                   p10=int(np.percentile(h, 10)), p50=int(np.percentile(h, 50)), p90=int(np.percentile(h, 90)),
                   slice=round(img.GetSpacing()[2], 2), nz=int(np.ptp(np.nonzero(m)[0]) + 1))
        out.write(json.dumps(row) + "\n")
        out.flush()
        print(json.dumps(row), flush=True)
