"""Four slices of a family B lung-end slab's left base: the reference lungs (green: left,
cyan: right) and the bundled model's mask (red, dashed). Writes ``viz_SEED.png``.

    python experiments/2026-12-02-coarse-recess/viz.py SEED
"""

import sys
from pathlib import Path

import matplotlib
import numpy as np
import SimpleITK as sitk

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "benchmarks"), str(ROOT / "experiments" / "2026-11-28-coarse-lung-end"),
                str(ROOT / "experiments" / "2026-11-29-base-loss")]
from where import base_slab  # noqa: E402

from segpipe import LungSegmenter  # noqa: E402


def main() -> None:
    seed = int(sys.argv[1])
    img, r = base_slab(seed, 2.5)
    p = sitk.GetArrayFromImage(LungSegmenter.default().predict(img))
    hu = sitk.GetArrayFromImage(img)
    zs = [z for z in range(r.shape[0]) if (r[z] == 2).any()]
    fig, ax = plt.subplots(1, 4, figsize=(20, 5.5))
    for a, z in zip(ax, np.linspace(zs[0], zs[-1], 4).astype(int)):
        a.imshow(hu[z], cmap="gray", vmin=-1000, vmax=300)
        a.contour(r[z] == 2, [0.5], colors="lime")
        a.contour(r[z] == 1, [0.5], colors="cyan")
        a.contour(p[z] > 0, [0.5], colors="red", linestyles="dashed")
        a.set_title(f"seed {seed} slice {z} of {r.shape[0]} ({img.GetSpacing()[2]:.1f} mm)")
        a.axis("off")
    plt.tight_layout()
    plt.savefig(f"viz_{seed}.png", dpi=60)


if __name__ == "__main__":
    main()
