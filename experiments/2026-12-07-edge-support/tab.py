"""What each `components.min_support` line below 0.5 would keep of the edge pieces the step dropped.

    python experiments/2026-12-07-edge-support/tab.py OUT.json [OUT.json ...]
"""

import json
import sys

rows = [x for f in sys.argv[1:] for x in json.load(open(f))]
cand = [x for x in rows if sum(x["edge"]) > 0 and x["own"] < 0.5]
print("edge pieces with own support under 0.5:", len(cand))
for x in sorted(cand, key=lambda x: -x["ml"])[:40]:
    print(x["case"], x["side"], x["ml"], "own", x["own"], "any", x["any"], "kept", x["kept"], "same", x["true_same"], "other", x["true_other"])
for t in (0.5, 0.4, 0.3, 0.25, 0.2, 0.1, 0.0):
    gain = [x for x in cand if x["own"] >= t and x["kept"] < 0.5]
    good = sum(x["ml"] * x["true_same"] for x in gain)
    bad = sum(x["ml"] * (1 - x["true_same"]) for x in gain)
    print(f"line {t}: {len(gain)} pieces, lung kept {good:.1f} mL, non-lung {bad:.1f} mL")
