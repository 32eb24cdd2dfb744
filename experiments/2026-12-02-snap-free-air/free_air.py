"""``edge_snap``'s added tissue that is not lung on ``eval_model.py``'s held-out phantoms, per variant
of its parameters, side by side with the rule off.

    python experiments/2026-12-02-snap-free-air/free_air.py '{"none": {"darker_hu": null}, "d50": {"darker_hu": 50}}' [N]

Per phantom and variant: Dice per lung, the tissue outside the reference that the rule added (mL) and
the reference lung it removed (mL); then the totals.
"""

import json
import sys
from pathlib import Path

import numpy as np
import SimpleITK as sitk

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from eval_model import held_out_specs  # noqa: E402

from segpipe import LungSegmenter  # noqa: E402
from segpipe.metrics import dice  # noqa: E402
from segpipe.synthetic import make_phantom  # noqa: E402


def main() -> None:
    variants = json.loads(sys.argv[1])
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 10
    segs = {"off": LungSegmenter.default(rules={"edge_snap": {"enabled": False}})}
    segs |= {k: LungSegmenter.default(rules={"edge_snap": v}) for k, v in variants.items()}
    totals = {k: [0.0, 0.0, []] for k in segs}
    for spec in held_out_specs(n):
        ph = make_phantom(spec)
        ref = sitk.GetArrayFromImage(ph.label)
        voxel_ml = float(np.prod(ph.image.GetSpacing())) / 1000
        preds = {k: sitk.GetArrayFromImage(s.predict(ph.image)) for k, s in segs.items()}
        off = preds["off"] > 0
        line = [f"phantom_{spec.seed}"]
        for k, p in preds.items():
            ds = [dice(p == v, ref == v) for v in (1, 2) if (ref == v).any()]
            non_lung = float(((p > 0) & ~off & (ref == 0)).sum() * voxel_ml)
            removed = float((off & (p == 0) & (ref > 0)).sum() * voxel_ml)
            totals[k][0] += non_lung
            totals[k][1] += removed
            totals[k][2] += ds
            line.append(f"{k}: {np.round(ds, 4).tolist()} +non-lung {non_lung:.1f} -lung {removed:.1f}")
        print(" | ".join(line), flush=True)
    for k, (non_lung, removed, ds) in totals.items():
        print(k, "mean Dice", round(float(np.mean(ds)), 4), "non-lung added", round(non_lung, 1), "lung removed", round(removed, 1))


if __name__ == "__main__":
    main()
