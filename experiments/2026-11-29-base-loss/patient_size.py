"""The named field-of-view crops of the real scans as a smaller or larger patient: each scan's spacing and
origin (its reference's too) scaled by F before ``benchmarks/fov_consistency.py`` crops it, so the crops'
physical sizes (an 18 cm cardiac cube, a 5 cm apex slab, ...) cover more or less of the chest.

    python experiments/2026-11-29-base-loss/patient_size.py F rows.json
"""

import sys
from pathlib import Path

import SimpleITK as sitk

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import fov_consistency  # noqa: E402

factor = float(sys.argv[1])
cases = fov_consistency.cases


def scaled(image: sitk.Image) -> sitk.Image:
    out = sitk.Image(image)
    out.SetSpacing(tuple(s * factor for s in image.GetSpacing()))
    out.SetOrigin(tuple(o * factor for o in image.GetOrigin()))
    return out


fov_consistency.cases = lambda n, seed: [(name, scaled(im), None if ref is None else scaled(ref)) for name, im, ref in cases(n, seed)]
sys.argv = ["fov_consistency.py", "--phantoms", "0", "--json", sys.argv[2]]
fov_consistency.main()
