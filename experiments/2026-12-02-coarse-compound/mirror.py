"""The coarse stage's finds and side vote on a crop and on the same crop mirrored left-right in
its array (the anatomy mirrored, the geometry kept): a vote that reads the anatomy names every
find of the mirrored crop the other side; one that reads the place in the view keeps naming
low x right and high x left.

    python experiments/2026-12-02-coarse-compound/mirror.py CROP.nii.gz [CROP.nii.gz ...]

Per crop and form: each find's voxels, its x range (coarse grid) and its mean left vote.
"""

from __future__ import annotations

import sys

import numpy as np
import SimpleITK as sitk

from segpipe import LungSegmenter, spatial
from segpipe.infer import coarse
from segpipe.refine._util import label


def main() -> None:
    seg = LungSegmenter.default()
    seen: dict = {}
    name_sides = coarse.name_sides

    def spy(found, **kw):  # type: ignore[no-untyped-def]
        out = name_sides(found, **kw)
        seen.update(found=found.copy(), kw=kw)
        return out

    coarse.name_sides = spy
    for path in sys.argv[1:]:
        canonical = spatial.to_canonical(sitk.ReadImage(path))[0]
        array = sitk.GetArrayFromImage(canonical)
        for form, arr in (("as is", array), ("mirrored", np.ascontiguousarray(array[:, :, ::-1]))):
            image = sitk.GetImageFromArray(arr)
            image.CopyInformation(canonical)
            coarse.locate(image, seg.weights["coarse"], seg.settings)
            found, vote = seen["found"], seen["kw"]["left_vote"]
            labels, n = label(found)
            finds = []
            for k in range(1, n + 1):
                piece = labels == k
                xs = np.nonzero(piece)[2]
                finds.append(f"{int(piece.sum())} voxels at x {xs.min()}-{xs.max()}, left vote {vote[piece].mean():.2f}")
            print(f"{path} {form} (x 0-{found.shape[2] - 1}): " + "; ".join(finds))


if __name__ == "__main__":
    main()
