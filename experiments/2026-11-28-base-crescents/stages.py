"""Where the lowest centimetres of a lung are lost, stage by stage: family B chest scans cut as
abdominal scans whose first slices hold the bases (the lowest ``cm`` of lung with 15 cm below).

Per reference piece of each lung (>= 0.5 mL): the share inside the fine stage's regions, found
by the fine network before and after its rules, inside the coarse stage's sided lungs, and in
the final mask (its own side / the other side).

Run from the project root: ``python experiments/2026-11-28-base-crescents/stages.py SEED:CM ...``
"""

import sys
from pathlib import Path

import numpy as np
import SimpleITK as sitk
from scipy import ndimage

sys.path.insert(0, "benchmarks")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "2026-11-28-coarse-lung-end"))
import family_b  # noqa: E402
from slabs import end_slab  # noqa: E402

from segpipe import LungSegmenter, spatial  # noqa: E402
from segpipe.infer import fine  # noqa: E402

store = []
run_once = fine._run_once


def recording(region, source, geometry, coarse, net, s):
    """``fine._run_once``, keeping the network's own P(background) beside the result."""
    raw = {}
    background = net.background

    def keep(hu):
        raw["b"] = background(hu)
        return raw["b"].copy()

    net.background = keep
    try:
        out = run_once(region, source, geometry, coarse, net, s)
    finally:
        net.background = background
    store.append((out[1], raw["b"], out[0].copy(), coarse))
    return out


fine._run_once = recording


def on_slab(array: np.ndarray, grid: spatial.Geometry, slab: sitk.Image) -> np.ndarray:
    """A fine-grid array (default 1: background) looked up on the slab's grid."""
    image = grid.apply(sitk.GetImageFromArray(array.astype(np.float32)))
    return sitk.GetArrayFromImage(spatial.resample_to_reference(image, slab, default_value=1.0, output_pixel_type=sitk.sitkFloat32))


seg = LungSegmenter.default()
for arg in sys.argv[1:]:
    seed, cm = int(arg.split(":")[0]), float(arg.split(":")[1])
    store.clear()
    image, label, _ = family_b.make_case(seed, "chest")
    can, lab = spatial.to_canonical(image)[0], sitk.GetArrayFromImage(spatial.to_canonical(label)[0])
    zz = np.nonzero(lab.any(axis=(1, 2)))[0]
    lo, hi = end_slab(zz, can.GetSpacing()[2], lab.shape[0], "bases", cm, 15)
    slab, ref = can[:, :, lo:hi], lab[lo:hi]
    ml = float(np.prod(slab.GetSpacing())) / 1000
    mask = sitk.GetArrayFromImage(seg.predict(slab))
    print(f"b{seed}, lowest {cm} cm: {len(store)} fine region(s)")
    if not store:
        continue
    covered, raw, ruled = (np.zeros(ref.shape, bool) for _ in range(3))
    for grid, b_raw, b_ruled, _ in store:
        covered |= on_slab(np.zeros(b_raw.shape), grid, slab) < 0.5
        raw |= on_slab(b_raw, grid, slab) < 0.5
        ruled |= on_slab(b_ruled, grid, slab) < 0.5
    support = store[0][3].support_on(spatial.Geometry.of(slab))
    for side in (1, 2):
        pieces, n = ndimage.label(ref == side)
        for i in range(1, n + 1):
            piece = pieces == i
            if piece.sum() * ml < 0.5:
                continue
            print(f"  {'RL'[side - 1]} piece {piece.sum() * ml:5.1f} mL: in regions {covered[piece].mean():.2f}, fine network "
                  f"{raw[piece].mean():.2f}, after fine rules {ruled[piece].mean():.2f}, coarse lung of its side "
                  f"{((support[piece] & side) > 0).mean():.2f}, final {(mask[piece] == side).mean():.2f} "
                  f"(other side {(mask[piece] == 3 - side).mean():.2f})")
