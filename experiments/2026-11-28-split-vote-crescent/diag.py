"""One family B scan cut as a lung-end slab (``fbthin.py``'s lowest CM cm with 15 cm below):
the coarse stage's pieces of lung (mL, sure mL, side by ``piece_side`` and by ``end_piece_side``,
kept or not) and each lung's volume and overlap with the reference.

Run: ``python experiments/2026-11-28-split-vote-crescent/diag.py SEED CM`` from the project root.
"""

from __future__ import annotations

import sys

import numpy as np
import SimpleITK as sitk

sys.path[:0] = ["benchmarks", "experiments/2026-11-28-coarse-lung-end"]
import family_b  # noqa: E402
from slabs import end_slab  # noqa: E402

from segpipe import LungSegmenter, spatial  # noqa: E402
from segpipe.infer import coarse  # noqa: E402
from segpipe.refine._util import label  # noqa: E402

_parts = coarse.confident_parts


def _spy(mask: np.ndarray, confident: np.ndarray, voxel_ml: float, min_ml: float, **kw):
    out = _parts(mask, confident, voxel_ml, min_ml, **kw)
    if "share" not in kw and kw.get("side_of") is not None:
        labels, n = label(mask)
        for i in range(1, n + 1):
            piece = labels == i
            if piece.sum() * voxel_ml < 0.5:
                continue
            z, _, x = np.nonzero(piece)
            print(f"  piece {i}: {piece.sum() * voxel_ml:.1f} mL, sure {np.count_nonzero(piece & confident) * voxel_ml:.1f} mL, "
                  f"x {x.min()}-{x.max()}, z {z.min()}-{z.max()} of {mask.shape[0]}, side {kw['side_of'](piece)} / "
                  f"{kw['beside_of'](piece) if kw.get('beside_of') else '-'}, kept {bool(out[piece].any())}")
    return out


if __name__ == "__main__":
    seed, cm = int(sys.argv[1]), float(sys.argv[2])
    image, ref_image, info = family_b.make_case(seed, "chest")
    can = spatial.to_canonical(image)[0]
    ref = sitk.GetArrayFromImage(spatial.to_canonical(ref_image)[0])
    lo, hi = end_slab(np.nonzero(ref.any(axis=(1, 2)))[0], can.GetSpacing()[2], ref.shape[0], "bases", cm, 15)
    slab, ref = can[:, :, lo:hi], ref[lo:hi]
    print("slab", slab.GetSize(), "pathology", info["pathology"])
    coarse.confident_parts = _spy
    pred = sitk.GetArrayFromImage(LungSegmenter.default().predict(slab))
    ml = float(np.prod(slab.GetSpacing())) / 1000
    for value in (1, 2):
        print(f"side {value}: reference {np.sum(ref == value) * ml:.1f} mL, mask {np.sum(pred == value) * ml:.1f}, "
              f"overlap {np.sum((pred == value) & (ref == value)) * ml:.1f}")
