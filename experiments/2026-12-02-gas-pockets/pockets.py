"""Pockets of pure air inside the final lung mask, and what encloses them (offline probe).

    python experiments/2026-12-02-gas-pockets/pockets.py fb SEED_FIRST SEED_END [--out rows.json]
    python experiments/2026-12-02-gas-pockets/pockets.py real [--out rows.json]

Per case: the bundled model's mask; inside it, the connected pockets of pure air (the scan
smoothed by a 1 mm Gaussian, below AIR_HU) of MIN_ML or more; per pocket its mL, how much of it
the reference calls lung, and its shell (the voxels within SHELL_MM of it that are not pure air
themselves): the share of the shell that is tissue (smoothed above TISSUE_HU). Gas in the
stomach or bowel is enclosed by its wall; a bulla or emphysema by lung.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import SimpleITK as sitk
from scipy import ndimage

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from segpipe import LungSegmenter, spatial

AIR_HU, TISSUE_HU, SHELL_MM, MIN_ML, SIGMA_MM = -960.0, -500.0, 3.0, 0.5, 1.0


def pockets(hu: np.ndarray, mask: np.ndarray, ref: np.ndarray, spacing_zyx: tuple[float, ...]) -> list[dict]:
    smooth = ndimage.gaussian_filter(hu.astype(np.float32), [SIGMA_MM / s for s in spacing_zyx])
    air = smooth < AIR_HU
    ml = float(np.prod(spacing_zyx)) / 1000.0
    labels, n = ndimage.label(air & (mask > 0), structure=np.ones((3, 3, 3), bool))
    out = []
    pad = [int(np.ceil(SHELL_MM / s)) + 1 for s in spacing_zyx]
    for k, box in enumerate(ndimage.find_objects(labels), 1):
        piece = labels[box] == k
        if piece.sum() * ml < MIN_ML:
            continue
        big = tuple(slice(max(b.start - p, 0), min(b.stop + p, n_)) for b, p, n_ in zip(box, pad, hu.shape))
        inner = labels[big] == k
        dist = ndimage.distance_transform_edt(~inner, sampling=spacing_zyx)
        shell = (dist <= SHELL_MM) & ~inner & ~air[big]
        sh = smooth[big][shell]
        tissue = float((sh > TISSUE_HU).mean()) if sh.size else 1.0
        out.append({"ml": round(float(piece.sum()) * ml, 2), "tissue_share": round(tissue, 3),
                    "pocket_hu": round(float(np.median(smooth[big][inner])), 0), "raw_p10": round(float(np.percentile(hu[big][inner], 10)), 0),
                    "shell_q": [round(float(q)) for q in np.percentile(sh, [10, 50, 90])] if sh.size else None, "label": int(np.bincount(mask[big][inner]).argmax()),
                    "z": [box[0].start, box[0].stop], "ref_lung_share": round(float((ref[big][inner] > 0).mean()), 3)})
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["fb", "real"])
    ap.add_argument("range", type=int, nargs="*")
    ap.add_argument("--out")
    a = ap.parse_args()
    seg = LungSegmenter.default()
    rows = []
    if a.what == "fb":
        import family_b
        kinds = list(family_b.CASES)
        seeds = range(*a.range) if len(a.range) == 2 else a.range[2:]
        items = [(f"b{s}", *family_b.make_case(s, kinds[(s - a.range[0]) % len(kinds)])[:2]) for s in seeds]
    else:
        import fov_consistency as fc
        items = [(name, image, ref) for name, image, ref in fc.cases(0, 0)]
    for name, image, label in items:
        can = spatial.to_canonical(image)[0]
        hu = sitk.GetArrayFromImage(can)
        mask = sitk.GetArrayFromImage(spatial.to_canonical(seg.predict(image))[0])
        ref = sitk.GetArrayFromImage(spatial.to_canonical(label)[0]) if label is not None else mask
        sp = tuple(reversed(can.GetSpacing()))
        found = pockets(hu, mask, ref, sp)
        print(name, found, flush=True)
        rows.append({"case": name, "pockets": found})
    if a.out:
        Path(a.out).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
