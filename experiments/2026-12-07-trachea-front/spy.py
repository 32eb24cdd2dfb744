"""Where the trachea's seed in front of the spine changes the airways: every random crop of the
real scans (``fov_consistency.random_crop``, seeds as given) through the coarse stage, with the
airways tracked both ways on the same coarse grid (the seed not level with the bone in the
spine's column, and anywhere near the column as before); per crop where they differ, the mL of
each and the mL of the reference lung inside each.

    python experiments/2026-12-07-trachea-front/spy.py SEED [SEED ...]
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import SimpleITK as sitk

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import fov_consistency as fc  # noqa: E402

import segpipe.refine.airways as aw  # noqa: E402
from segpipe import LungSegmenter, spatial  # noqa: E402
from segpipe.infer import coarse  # noqa: E402
from segpipe.infer.scan import read_scan  # noqa: E402


def main() -> None:
    seg = LungSegmenter.default()
    seen: dict = {}
    tracked = coarse.coarse_airways

    def spy(hu, body, spacing, p, spine_x=None):
        new = tracked(hu, body, spacing, p, spine_x=spine_x)
        keep, aw.VERTEBRA_HU = aw.VERTEBRA_HU, np.inf  # no bone: the seed anywhere near the column
        old = tracked(hu, body, spacing, p, spine_x=spine_x)
        aw.VERTEBRA_HU = keep
        seen.update(new=new, old=old)
        return new

    coarse.coarse_airways = spy
    for seed in map(int, sys.argv[1:]):
        for name, image, ref in fc.cases(0, 0):
            ref = ref if ref is not None else seg.predict(image)
            canonical, _ = spatial.to_canonical(image)
            ref_a = sitk.GetArrayFromImage(spatial.to_canonical(ref)[0])
            rng = fc.crop_rng(seed, name)
            for i in range(30):
                desc, crop, ref_crop = fc.random_crop(canonical, ref_a, rng)
                scan, _ = read_scan(crop)
                result, _ = coarse.locate(scan, seg.weights["coarse"], seg.settings)
                if np.array_equal(seen["new"], seen["old"]):
                    continue
                grid = sitk.Image(list(result.geometry.size), sitk.sitkUInt8)
                grid.SetSpacing(result.geometry.spacing)
                grid.SetOrigin(result.geometry.origin)
                grid.SetDirection(result.geometry.direction)
                ref_img = spatial.copy_geometry(ref_crop.astype(np.uint8), scan)
                lung = sitk.GetArrayFromImage(sitk.Resample(ref_img, grid, sitk.Transform(), sitk.sitkNearestNeighbor, 0)) > 0
                ml = float(np.prod(result.spacing_mm)) / 1000.0
                print(f"seed {seed} {name} random{i:02d} {desc}: airways before {seen['old'].sum() * ml:.1f} mL "
                      f"({(seen['old'] & lung).sum() * ml:.1f} mL on the lung), now {seen['new'].sum() * ml:.1f} mL "
                      f"({(seen['new'] & lung).sum() * ml:.1f} mL on the lung)", flush=True)


if __name__ == "__main__":
    main()
