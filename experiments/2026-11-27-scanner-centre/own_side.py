"""For random crops: physical x extent of each lung in the crop and how much lies on its own side of x=0."""

import json
import os
import sys

import numpy as np
import SimpleITK as sitk

sys.path.insert(0, "benchmarks")
import fov_consistency as F

from segpipe import io, spatial

lidc = io.read_image(str(F.SHARED / "lidc-idri-0001" / "dicom"))
copd = io.read_image(str(F.SHARED / "copdgene-10002K-64" / "ct.nii.gz"))
copd_ref = io.read_image(str(F.SHARED / "copdgene-10002K-64" / "lungs.nii.gz"))

cache = "runs/lidc_ref.npy"
seeds = [int(s) for s in sys.argv[1:]]
out = []
for name, img, ref in (("LIDC-IDRI-0001", lidc, None), ("COPDGene-10002K", copd, copd_ref)):
    canonical, _ = spatial.to_canonical(img)
    if ref is None:
        if os.path.exists(cache):
            ref_a = np.load(cache)
        else:
            import segpipe

            seg = segpipe.LungSegmenter.default()
            ref_c, _ = spatial.to_canonical(seg.predict(canonical))
            ref_a = sitk.GetArrayFromImage(ref_c)
            np.save(cache, ref_a)
    else:
        ref_c, _ = spatial.to_canonical(ref)
        ref_a = sitk.GetArrayFromImage(ref_c)
    for seed in seeds:
        rng = np.random.default_rng([seed, sum(map(ord, name))])
        for i in range(30):
            desc, cimg, r = F.random_crop(canonical, ref_a, rng)
            nx = r.shape[2]
            x = np.array([cimg.TransformIndexToPhysicalPoint((k, 0, 0))[0] for k in range(nx)])
            for v in (1, 2):
                m = r == v
                ml = m.sum() * np.prod(cimg.GetSpacing()) / 1000
                if ml < 50:
                    continue
                cnt = m.sum(axis=(0, 1))
                own = cnt[(x < 0) if v == 1 else (x > 0)].sum() / cnt.sum()
                out.append(dict(seed=seed, case=name, i=i, desc=desc, lung=v, ml=round(ml, 1), own=round(float(own), 3), xlo=round(x[0]), xhi=round(x[-1])))
json.dump(out, open("runs/xprior_{}.json".format("_".join(map(str, seeds))), "w"))
own = np.array([o["own"] for o in out])
print(len(out), "own>=0.9:", (own >= 0.9).mean(), "own<0.5:", (own < 0.5).mean())
for o in out:
    if o["own"] < 0.5:
        print(o)
