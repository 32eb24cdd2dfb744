"""The coarse stage alone on random field-of-view crops: which lungs it finds, on which side.

A fast check (about two minutes for 60 crops per seed on a 2-core CPU, against ten or more for
the whole cascade in ``fov_consistency.py --random``) for changes to the coarse network or to
the steps that decide which lungs a scan holds and their sides (``locate``: the body, the
confident finds, ``split_sides``). Each crop of ``fov_consistency.random_crop`` (the same crops
for the same seed) runs through ``segpipe.infer.coarse.locate`` only; its sided lungs on the
4 mm grid are compared with the reference cut to the crop and resampled (nearest) onto that
grid. Per lung with at least 50 mL in the crop: the share of it found on its own side
(``found``) and the share given to the other side (``other``). A lung counts as lost where less
than a tenth of it is found on its side. The fine stage grows a partial coarse find into the
whole lung, so ``found`` is low on emphysematous lungs even where the cascade's Dice is high;
a lost lung here is lost in the cascade too, with rare exceptions. Lungs lost or with a tenth
or more of them named the other side are listed.

Usage::

    python benchmarks/coarse_sides.py --random-seeds 0 1 2 3 4 [--model M] [--shift-x MM] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import SimpleITK as sitk

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fov_consistency as fc  # noqa: E402

MIN_ML = 50.0
LOST_BELOW = 0.1
OTHER_SHOWN = 0.1  # a lung with this share of it given the other side is listed


def coarse_rows(seg: Any, name: str, image: sitk.Image, ref: sitk.Image, seed: int, n: int,
                shift_x_mm: float = 0.0) -> list[dict[str, Any]]:
    """The rows of ``n`` random crops (seed ``seed``) of one case: per lung of ``MIN_ML`` or
    more, the share of it the coarse stage finds on its side and on the other; with
    ``shift_x_mm`` the scan moved that far along physical x (a patient off the scanner's centre)."""
    from segpipe import spatial
    from segpipe.infer.coarse import locate
    from segpipe.infer.scan import read_scan

    canonical, _ = spatial.to_canonical(image)
    if shift_x_mm:
        canonical = fc.shifted(canonical, shift_x_mm)
    ref_a = sitk.GetArrayFromImage(spatial.to_canonical(ref)[0])
    rng = fc.crop_rng(seed, name)
    rows = []
    for i in range(n):
        desc, crop, ref_crop = fc.random_crop(canonical, ref_a, rng)
        scan, _ = read_scan(crop)
        result, _ = locate(scan, seg.weights["coarse"], seg.settings)
        grid = sitk.Image(list(result.geometry.size), sitk.sitkUInt8)
        grid.SetSpacing(result.geometry.spacing)
        grid.SetOrigin(result.geometry.origin)
        grid.SetDirection(result.geometry.direction)
        ref_img = spatial.copy_geometry(ref_crop.astype(np.uint8), scan)
        ref_c = sitk.GetArrayFromImage(sitk.Resample(ref_img, grid, sitk.Transform(), sitk.sitkNearestNeighbor, 0))
        voxel_ml = float(np.prod(result.spacing_mm)) / 1000.0
        for side, value in (("right", 1), ("left", 2)):
            lung = ref_c == value
            ml = float(lung.sum()) * voxel_ml
            if ml < MIN_ML:
                continue
            rows.append({"seed": seed, "case": name, "crop": f"random{i:02d} {desc}", "lung": side, "ref_ml": round(ml, 1),
                         "found": round(float((result.sides[lung] == value).mean()), 3),
                         "other": round(float((result.sides[lung] == 3 - value).mean()), 3)})
    return rows


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    lost = [r for r in rows if r["found"] < LOST_BELOW]
    return {"lungs": len(rows), "found": round(float(np.mean([r["found"] for r in rows])), 4) if rows else None,
            "other": round(float(np.mean([r["other"] for r in rows])), 4) if rows else None,
            "lost": len(lost), "lost_to_other_side": sum(r["other"] >= 0.5 for r in lost)}


def main() -> int:
    from segpipe import LungSegmenter

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--random-seeds", type=int, nargs="+", default=[0], help="crop seeds (fov_consistency's --random-seed)")
    ap.add_argument("--random", type=int, default=30, help="crops per case and seed (default 30)")
    ap.add_argument("--model", help="model file (default: the bundled model)")
    ap.add_argument("--shift-x", type=float, default=0.0, metavar="MM",
                    help="move every scan this far along physical x: a patient off the scanner's centre")
    ap.add_argument("--json", help="write the rows and summary here")
    args = ap.parse_args()
    seg = LungSegmenter.from_file(args.model) if args.model else LungSegmenter.default()
    cases = [(name, image, ref if ref is not None else seg.predict(image)) for name, image, ref in fc.cases(0, 0)]
    if not cases:
        print(f"no real scans in {fc.SHARED}", file=sys.stderr)
        return 2
    rows: list[dict[str, Any]] = []
    for seed in args.random_seeds:
        seed_rows = [row for name, image, ref in cases
                     for row in coarse_rows(seg, name, image, ref, seed, args.random, args.shift_x)]
        s = summary(seed_rows)
        print(f"seed {seed}: {s['lungs']} lungs >= {MIN_ML:g} mL, found on their side {s['found']}, on the other {s['other']}, "
              f"lost {s['lost']} ({s['lost_to_other_side']} to the other side)", flush=True)
        for r in seed_rows:
            if r["found"] < LOST_BELOW or r["other"] >= OTHER_SHOWN:
                what = "lost" if r["found"] < LOST_BELOW else "part named the other side"
                print(f"  {what}: {r['case']} {r['crop']} {r['lung']} {r['ref_ml']:g} mL (found {r['found']}, other side {r['other']})")
        rows += seed_rows
    total = summary(rows)
    print(f"all: {total}")
    if args.json:
        Path(args.json).write_text(json.dumps({"summary": total, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
