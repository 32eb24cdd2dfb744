"""Two ``benchmarks/coarse_sides.py --json`` outputs side by side: the lungs whose share found on
their side moved by more than 0.15.

Run: ``python experiments/2026-11-28-coarse-polish-gpu/compare.py A.json B.json``
"""

from __future__ import annotations

import json
import sys


def rows(path: str) -> dict[tuple, dict]:
    data = json.load(open(path))
    return {(r["seed"], r["case"], r["crop"], r["lung"]): r for r in (data["rows"] if isinstance(data, dict) else data)}


if __name__ == "__main__":
    a, b = rows(sys.argv[1]), rows(sys.argv[2])
    common = sorted(set(a) & set(b), key=str)
    up = down = 0
    for key in common:
        x, y = a[key]["found"], b[key]["found"]
        if abs(x - y) > 0.15:
            up, down = up + (y > x), down + (y < x)
            print(key, f"{a[key]['ref_ml']:.0f} mL  {x:.2f}/{a[key]['other']:.2f} -> {y:.2f}/{b[key]['other']:.2f}")
    print("common", len(common), "up", up, "down", down)
