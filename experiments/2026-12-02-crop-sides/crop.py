"""Re-cut random crops of `benchmarks/fov_consistency.py` and say where each lung's error lies.

    python experiments/2026-12-02-crop-sides/crop.py CASE SEED I [I ...] [--out DIR]

CASE: LIDC-IDRI-0001 or COPDGene-10002K; SEED: the benchmark's --random-seed; I: crop numbers.
Per crop and lung: reference, extra, missed, and how much of it the other lung's label holds;
the crop (and its reference) as NIfTI and the arrays as .npz in DIR for `coarse.py` and
`interface.py`; a picture of the slice with the most error and two beside it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import matplotlib
import numpy as np
import SimpleITK as sitk

matplotlib.use("Agg")
import matplotlib.pyplot as plt

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import fov_consistency as fc

from segpipe import LungSegmenter, spatial


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("case", choices=["LIDC-IDRI-0001", "COPDGene-10002K"])
    ap.add_argument("seed", type=int)
    ap.add_argument("crops", type=int, nargs="+")
    ap.add_argument("--out", type=Path, default=Path("runs/crop_sides"))
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    seg = LungSegmenter.default()
    _, scan, ref = next(c for c in fc.cases(0, 0) if c[0] == a.case)
    canonical = spatial.to_canonical(scan)[0]
    ref_a = sitk.GetArrayFromImage(spatial.to_canonical(ref if ref is not None else seg.predict(canonical))[0])
    rng = fc.crop_rng(a.seed, a.case)
    for i in range(max(a.crops) + 1):
        desc, img, r = fc.random_crop(canonical, ref_a, rng)
        if i not in a.crops:
            continue
        stem = a.out / f"{a.case[:4]}{a.seed}_{i}"
        sitk.WriteImage(img, f"{stem}.nii.gz")
        p = sitk.GetArrayFromImage(seg.predict(img))
        hu = sitk.GetArrayFromImage(img)
        np.savez_compressed(f"{stem}.npz", p=p, r=r, hu=hu, sp=np.array(img.GetSpacing()))
        ml = float(np.prod(img.GetSpacing())) / 1000
        print(i, desc, img.GetSize())
        for v, side in ((1, "right"), (2, "left")):
            print(f"  {side}: ref {(r == v).sum() * ml:.1f} extra {((p == v) & (r != v)).sum() * ml:.1f} "
                  f"missed {((r == v) & (p != v)).sum() * ml:.1f}, of it labelled the other side {((r == v) & (p == 3 - v)).sum() * ml:.1f} mL")
        z = int(np.argmax(((p > 0) != (r > 0)).sum((1, 2)) + (p != r).sum((1, 2))))
        fig, ax = plt.subplots(1, 3, figsize=(18, 6))
        for axis, zz in zip(ax, (max(z - 6, 0), z, min(z + 6, p.shape[0] - 1))):
            axis.imshow(hu[zz], cmap="gray", vmin=-1000, vmax=300)
            for lab, colour, style in ((r == 1, "lime", "solid"), (r == 2, "cyan", "solid"), (p == 1, "red", "dashed"), (p == 2, "yellow", "dashed")):
                if lab[zz].any():
                    axis.contour(lab[zz], [0.5], colors=colour, linestyles=style)
            axis.set_title(f"crop {i} z{zz}: reference right/left green/cyan, mask red/yellow")
        plt.tight_layout()
        plt.savefig(f"{stem}.png", dpi=50)
        plt.close(fig)


if __name__ == "__main__":
    main()
