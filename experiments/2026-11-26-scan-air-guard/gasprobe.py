import sys
sys.path.insert(0, "/work/main/benchmarks")
import numpy as np, SimpleITK as sitk
import family_b, abdomen_bench
from segpipe import LungSegmenter, spatial
from segpipe.infer.scan import read_scan
from segpipe.model import sliding_window_probs, any_lung
from segpipe.infer.settings import load_network
from segpipe.refine._util import label, component_sizes, on_faces
seg = LungSegmenter.default(); s = seg.settings
net = load_network("coarse", s.coarse, seg.weights["coarse"], s.device)
def probe(name, image, labelimg):
    canonical, scan = read_scan(image)
    cimg = spatial.resample_image(canonical, s.coarse_mm)
    ca = sitk.GetArrayFromImage(cimg)
    probs = sliding_window_probs(net, ca, s.coarse, s.window_hu, s.device, accumulate_on=s.device, sw_batch=1, overlap=s.coarse.overlap)
    lung = any_lung(probs).numpy() if hasattr(any_lung(probs), "numpy") else np.asarray(any_lung(probs))
    conf = (probs[0] <= 0.1).numpy()
    ref = sitk.GetArrayFromImage(sitk.Resample(labelimg, cimg, sitk.Transform(), sitk.sitkNearestNeighbor, 0)) > 0 if labelimg is not None else np.zeros(lung.shape, bool)
    na = sitk.GetArrayViewFromImage(canonical)
    # coarse index of each native voxel (both grids share the corner)
    sp_f, sp_c = np.asarray(canonical.GetSpacing()), np.asarray(cimg.GetSpacing())
    idx = [np.clip(np.round((np.arange(n) + 0.5) * sp_f[a] / sp_c[a] - 0.5).astype(int), 0, ca.shape[2 - a] - 1) for a, n in enumerate(canonical.GetSize())]
    labels, n = label(lung)
    cut = on_faces(labels, n)
    vml = np.prod(sp_c) / 1000
    sure = component_sizes(np.where(conf, labels, 0), n) * vml
    for i in range(1, n + 1):
        if not cut[i] or sure[i] < 0.5: continue
        pc = labels == i
        lab_native = pc[np.ix_(idx[2], idx[1], idx[0])]
        hu = na[lab_native]
        from scipy import ndimage
        zs, ys, xs = np.nonzero(lab_native); box = (slice(zs.min(), zs.max()+1), slice(max(0, ys.min()-2), ys.max()+3), slice(max(0, xs.min()-2), xs.max()+3))
        sm = ndimage.uniform_filter(np.asarray(na[box], np.float32), size=(1, 3, 3))
        hs = sm[lab_native[box]]
        a2 = hs < -400
        sm975 = float((hs[a2] < -975).mean()) if a2.any() else 0
        crop = np.asarray(na[box], np.float32)
        tissue_near = ndimage.maximum_filter(crop, size=(1, 5, 5)) > -200
        smc = ndimage.uniform_filter(crop, size=(1, 3, 3))
        pa = (smc < -975) & tissue_near
        gt = float(pa[lab_native[box]].sum()) / max(1, int((crop[lab_native[box]] < -400).sum()))
        sm975 = (sm975, round(gt, 3))
        airish = hu < -400
        share975 = float((hu[airish] < -975).mean()) if airish.any() else 0
        share950 = float((hu[airish] < -950).mean()) if airish.any() else 0
        coarse_air = float((ca[pc & conf] < -975).mean()) if (pc & conf).any() else 0
        inref = float(ref[pc].mean())
        print(f"{name} piece {i}: sure {sure[i]:.1f} mL, in ref lung {inref:.2f}, coarse<-975 {coarse_air:.2f}, native airish {airish.sum()} share<-975 {share975:.2f} <-950 {share950:.2f} smoothed<-975,gas-by-tissue {sm975}, mean airish HU {hu[airish].mean() if airish.any() else 0:.0f}", flush=True)
if sys.argv[1] == "real":
    import fov_consistency as fc
    for name, image, ref in fc.cases(0, 0):
        canonical, _ = spatial.to_canonical(image)
        refi = ref if ref is not None else seg.predict(canonical)
        ref_c, _ = spatial.to_canonical(refi)
        ref_a = sitk.GetArrayFromImage(ref_c)
        for crop in ("bases", "apex", "lower_half", "inplane70", "cardiac"):
            img, r = fc.crop_of(canonical, ref_a, crop)
            rl = sitk.GetImageFromArray(r); rl.CopyInformation(img)
            probe(f"{name}-{crop}", img, rl)
    sys.argv = sys.argv[:1]
for spec in sys.argv[1:]:
    fam, kind, sd = spec.split(":")
    if fam == "b":
        img, lab, _ = family_b.make_case(int(sd), kind)
    else:
        ph = abdomen_bench.case(int(sd)); img, lab = ph.image, ph.label
    probe(f"{fam}{sd}", img, lab)
