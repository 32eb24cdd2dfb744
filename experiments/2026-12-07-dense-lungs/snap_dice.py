"""Dice of `benchmarks/mask_snapshot.py` snapshots against the 20 held-out phantoms' labels (and
COPDGene's), side by side: ``python snap_dice.py BEFORE_DIR AFTER_DIR``."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import SimpleITK as sitk

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

from eval_model import held_out_specs  # noqa: E402

from segpipe.metrics import dice  # noqa: E402
from segpipe.synthetic import make_phantom  # noqa: E402


def main(a: Path, b: Path) -> None:
    refs = {"copd": sitk.GetArrayFromImage(sitk.ReadImage(str(ROOT.parent / "shared/data/copdgene-10002K-64/lungs.nii.gz")))}
    for i, spec in enumerate(held_out_specs(20)):
        refs[f"held{i}"] = sitk.GetArrayFromImage(make_phantom(spec).label)
    rows = []
    for name, ref in refs.items():
        x, y = np.load(a / f"{name}.npy"), np.load(b / f"{name}.npy")
        da = [dice(x == v, ref == v) for v in (1, 2) if (ref == v).any()]
        db = [dice(y == v, ref == v) for v in (1, 2) if (ref == v).any()]
        rows.append((da, db))
        print(name, [round(v, 4) for v in da], "->", [round(v, 4) for v in db], flush=True)
    held = [(u, v) for (da, db) in rows[1:] for u, v in zip(da, db)]
    before, after = [u for u, _ in held], [v for _, v in held]
    print(f"held-out phantoms: mean {np.mean(before):.4f} -> {np.mean(after):.4f} over {len(held)} lungs; "
          f"worst {min(before):.4f} -> {min(after):.4f}")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
