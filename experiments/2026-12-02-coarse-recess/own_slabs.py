"""The same lung-end slabs (the lowest 2.5 cm of lung with 15 cm below) cut from new
`segpipe.synthetic` chest phantoms with `recess_variety` (seeds 990001-990010, development):
the bundled model against ``runs/crec/model.pt``, Dice per lung of 5 mL or more.

    python experiments/2026-12-02-coarse-recess/own_slabs.py
"""

import sys
from pathlib import Path

import numpy as np
import SimpleITK as sitk

sys.path[:0] = [str(Path(__file__).resolve().parents[1] / "2026-11-28-coarse-lung-end")]
from slabs import end_slab  # noqa: E402

from segpipe import LungSegmenter, spatial  # noqa: E402
from segpipe.synthetic import PhantomSpec, make_phantom  # noqa: E402


def main() -> None:
    segs = {"bundled": LungSegmenter.default(), "crec": LungSegmenter.from_file("runs/crec/model.pt")}
    res: dict[str, list[float]] = {k: [] for k in segs}
    for seed in range(990001, 990011):
        spec = PhantomSpec(seed=seed, size_xyz=(224, 224, 160), coverage="chest", recess_variety=1.0,
                           abdomen_detail=1.0, flexure_variety=0.5, slice_mm=2.5)
        ph = make_phantom(spec)
        can = spatial.to_canonical(ph.image)[0]
        la = sitk.GetArrayFromImage(spatial.to_canonical(ph.label)[0])
        lo, hi = end_slab(np.nonzero(la.any(axis=(1, 2)))[0], can.GetSpacing()[2], la.shape[0], "bases", 2.5, 15)
        img, r = can[:, :, lo:hi], la[lo:hi]
        vml = float(np.prod(img.GetSpacing())) / 1000
        line = [seed, round(ph.info["diaphragm"]["toward"], 2)]
        for k, seg in segs.items():
            p = sitk.GetArrayFromImage(seg.predict(img))
            for v in (1, 2):
                ref = r == v
                if ref.sum() * vml < 5:
                    continue
                d = float(2 * ((p == v) & ref).sum() / max((p == v).sum() + ref.sum(), 1))
                res[k].append(d)
                line.append(f"{k}:{'RL'[v - 1]} {ref.sum() * vml:.0f}mL {d:.3f}")
        print(*line, flush=True)
    for k, v in res.items():
        print(k, len(v), round(float(np.mean(v)), 3))


if __name__ == "__main__":
    main()
