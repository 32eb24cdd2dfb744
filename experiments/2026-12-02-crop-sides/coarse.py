"""The coarse stage's finds in a crop and what named their sides.

    python experiments/2026-12-02-crop-sides/coarse.py CROP.nii.gz [CROP.nii.gz ...]

Per crop: the spine's column and the scanner's centre (coarse x index), the view's cut side;
per find (connected coarse lung): mL, x range, slices, the sides it was given, the network's
left vote over it, and the mL of it beyond the spine from its larger part (what
`segpipe.refine.spine.part_at_spine` weighs against SPINE_MIN_ML). Then each slice's bone
regions that `segpipe.refine.spine.spine_x` weighs (area cm2, centroid x, y, mean HU) where it
found a spine.
"""

from __future__ import annotations

import sys

import numpy as np
import SimpleITK as sitk
from scipy import ndimage

from segpipe import LungSegmenter, spatial
from segpipe.infer import coarse
from segpipe.refine._util import label
from segpipe.refine.spine import SPINE_BONE_HU


def main() -> None:
    seg = LungSegmenter.default()
    seen: dict = {}
    name_sides = coarse.name_sides

    def spy(found, **kw):
        out = name_sides(found, **kw)
        seen.update(found=found.copy(), kw=kw, sides=out[0])
        return out

    spine_x = coarse.spine_x

    def spy_spine(hu, spacing, body, *args):
        seen.update(hu=np.array(hu), body=body)  # the coarse grid's HU and body that the spine was sought in
        return spine_x(hu, spacing, body, *args)

    coarse.name_sides, coarse.spine_x = spy, spy_spine
    for path in sys.argv[1:]:
        canonical = spatial.to_canonical(sitk.ReadImage(path))[0]
        coarse.locate(canonical, seg.weights["coarse"], seg.settings)
        found, kw, sides = seen["found"], seen["kw"], seen["sides"]
        spine = kw["spine"]
        ml = float(np.prod(seg.settings.coarse_mm)) / 1000
        print(path, "spine x", None if spine is None else round(spine, 1), "scanner centre x", kw["centre_x"], "view cut side", kw["view_side"])
        labels, n = label(found)
        xs = np.arange(found.shape[2])[None, None, :]
        for k in range(1, n + 1):
            piece = labels == k
            zz, _, xx = np.nonzero(piece)
            line = (f"  find {k}: {piece.sum() * ml:.1f} mL, x {xx.min()}-{xx.max()}, slices {zz.min()}-{zz.max()}, "
                    f"sides (none, right, left) {np.bincount(sides[piece], minlength=3).tolist()}, left vote {kw['left_vote'][piece].mean():.2f}")
            if spine is not None:
                left = piece & (xs > spine)
                beyond = left if 2 * left.sum() < piece.sum() else piece & ~left
                line += f", beyond the spine {beyond.sum() * ml:.1f} mL (left vote there {kw['left_vote'][beyond].mean() if beyond.any() else float('nan'):.2f})"
            print(line)
        if spine is None:
            continue
        hu, body = seen["hu"], seen["body"]
        pixel_cm2 = seg.settings.coarse_mm[0] * seg.settings.coarse_mm[1] / 100
        for z in range(0, hu.shape[0], 3):
            regions, _ = ndimage.label((hu[z] > SPINE_BONE_HU[0]) & body[z], structure=np.ones((3, 3), bool))
            out = []
            for k, box in enumerate(ndimage.find_objects(regions), 1):
                part = regions[box] == k
                if part.sum() * pixel_cm2 >= 2:
                    cy, cx = ndimage.center_of_mass(part)
                    out.append(f"{part.sum() * pixel_cm2:.1f} cm2 at x {cx + box[1].start:.1f} y {cy + box[0].start:.1f}, {hu[z][box][part].mean():.0f} HU")
            print(f"  slice {z}: " + "; ".join(out))


if __name__ == "__main__":
    main()
