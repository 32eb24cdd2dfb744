"""Offline: ``split_sides`` of revision REV against the working tree's, on dumped coarse inputs
(``runs/vc/TAG.pkl``, from experiments/2026-11-27-scanner-centre/dump.py). Per lung of 50 mL or
more: the share on its own side, the lungs under half, the lung on the other side; then every
crop whose sides differ.

    python experiments/2026-11-28-centre-guard/offline_split.py REV TAG [TAG ...]
"""

from __future__ import annotations

import importlib.util
import pickle
import subprocess
import sys

import numpy as np

from segpipe.refine import sides as new_sides


def module_at(rev: str) -> object:
    src = subprocess.run(["git", "show", f"{rev}:segpipe/refine/sides.py"], capture_output=True, text=True, check=True).stdout
    spec = importlib.util.spec_from_loader("sides_at_rev", loader=None)
    assert spec is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["sides_at_rev"] = mod
    exec(compile(src, f"{rev}:sides.py", "exec"), mod.__dict__)  # noqa: S102
    return mod


def main() -> None:
    versions = {"before": module_at(sys.argv[1]), "after": new_sides}
    share: dict[str, list[float]] = {k: [] for k in versions}
    other = dict.fromkeys(versions, 0.0)
    changed = []
    for tag in sys.argv[2:]:
        with open(f"runs/vc/{tag}.pkl", "rb") as f:
            dumps = pickle.load(f)  # noqa: S301
        for d in dumps:
            if "found" not in d:
                continue
            res = {k: m.split_sides(d["found"], **{**d["kw"], "cues": []}) for k, m in versions.items()}
            voxel_ml = d.get("voxel_ml", 0.064)
            for v in (1, 2):
                ref = d["rc"] == v
                for k, r in res.items():
                    other[k] += float(((r == 3 - v) & ref).sum()) * voxel_ml
                    if ref.sum() * voxel_ml >= 50:
                        share[k].append(float((r[ref] == v).mean()))
            if not np.array_equal(res["before"], res["after"]):
                own = [f"{v}: {(d['rc'] == v).sum() * voxel_ml:.0f} mL {float((res['before'][d['rc'] == v] == v).mean()):.2f} -> "
                       f"{float((res['after'][d['rc'] == v] == v).mean()):.2f}" for v in (1, 2) if (d["rc"] == v).any()]
                changed.append(f"{tag} {str(d.get('case', ''))[:14]} #{d.get('i')} {d.get('desc', '')}: " + ", ".join(own))
    for k in versions:
        v = np.array(share[k])
        print(f"{k}: {len(v)} lungs >= 50 mL: own side {v.mean():.4f}, under half {(v < 0.5).sum()}, other side {other[k]:.0f} mL")
    print(f"{len(changed)} crops changed")
    for c in changed:
        print("  ", c)


if __name__ == "__main__":
    main()
