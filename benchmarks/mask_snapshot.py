"""Masks of the bundled model on fixed cases, to show that a change keeps them identical.

``write DIR`` segments the real scans in ../shared/data (LIDC-IDRI-0001, COPDGene, the abdomen
slab; those present) and the 20 held-out phantoms of ``eval_model.py``, and saves each mask
(``.npy``) and report (``.json``). ``compare A B`` prints, per case, whether B's mask equals A's
voxel for voxel, and whether the warnings and fine regions match.

Usage (before and after a change, ~2 min each on 2 cores)::

    python benchmarks/mask_snapshot.py write /tmp/before
    python benchmarks/mask_snapshot.py write /tmp/after
    python benchmarks/mask_snapshot.py compare /tmp/before /tmp/after
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
REAL = {
    "lidc": ROOT.parent / "shared/data/lidc-idri-0001/dicom",
    "copd": ROOT.parent / "shared/data/copdgene-10002K-64/ct.nii.gz",
    "abdomen": ROOT.parent / "shared/data/abdomen-slab-dicom",
}


def write(out: Path) -> None:
    import SimpleITK as sitk

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from eval_model import held_out_specs

    from segpipe import LungSegmenter
    from segpipe.synthetic import make_phantom

    out.mkdir(parents=True, exist_ok=True)
    seg = LungSegmenter.default()
    cases: list[tuple[str, object]] = [(name, path) for name, path in REAL.items() if path.exists()]
    cases += [(f"held{i}", spec) for i, spec in enumerate(held_out_specs(20))]
    for name, case in cases:
        image = case if isinstance(case, Path) else make_phantom(case).image
        result = seg.predict_with_report(image)
        np.save(out / f"{name}.npy", sitk.GetArrayFromImage(result.label))
        (out / f"{name}.json").write_text(json.dumps(result.report, indent=1, default=str))
        print(name, result.report["volumes_ml"], flush=True)


def compare(a: Path, b: Path) -> int:
    different = 0
    for f in sorted(a.glob("*.npy")):
        g = b / f.name
        if not g.exists():
            print(f"{f.stem}: missing in {b}")
            different += 1
            continue
        x, y = np.load(f), np.load(g)
        same = x.shape == y.shape and np.array_equal(x, y)
        ra, rb = (json.loads((d / f"{f.stem}.json").read_text()) for d in (a, b))
        notes = [k for k in ("warnings", "fine_regions") if ra.get(k) != rb.get(k)]
        print(f"{f.stem}: {'identical' if same else f'{np.count_nonzero(x != y)} voxels differ'}"
              + (f"; {', '.join(notes)} differ" if notes else ""))
        different += not same
    print(f"cases whose mask differs: {different}")
    return 1 if different else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("write").add_argument("out", type=Path)
    cmp = sub.add_parser("compare")
    cmp.add_argument("a", type=Path)
    cmp.add_argument("b", type=Path)
    args = parser.parse_args()
    if args.command == "write":
        write(args.out)
        return 0
    return compare(args.a, args.b)


if __name__ == "__main__":
    raise SystemExit(main())
