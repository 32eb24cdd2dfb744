"""Two ``fbthin.py`` outputs side by side: the lungs and non-lung volumes that differ.

Run: ``python experiments/2026-11-28-split-vote-crescent/compare.py BEFORE.json AFTER.json``
"""

from __future__ import annotations

import json
import sys

if __name__ == "__main__":
    a, b = ({(r["seed"], r["kind"]): r for r in json.load(open(path))} for path in sys.argv[1:3])
    for key, row in a.items():
        new = b[key]
        for i in range(2):
            if row["default"][i] != new["default"][i] or row["default_nonlung"] != new["default_nonlung"]:
                print(key, "right left".split()[i], row["ref_ml"][i], "mL:", row["default"][i], "->", new["default"][i],
                      "non-lung", row["default_nonlung"], "->", new["default_nonlung"])
