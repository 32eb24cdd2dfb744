"""Inference speed and peak memory of the cascade at two revisions, side by side in one run.

The issue targets say speed and memory must stay within 10 % of an earlier state. This script
checks that: it checks the earlier revision out into a temporary ``git worktree`` and runs
``benchmarks/infer_bench.py --methods cascade`` of each revision (that revision's code and its
bundled model) on the same generated scans (one cache folder, so both read the same files),
alternating the two revisions repeat by repeat so that machine noise hits them alike. Then it
prints, per scan, the medians and the ratios head / base.

Usage::

    python benchmarks/revision_bench.py --base 7fb5b75 [--sizes small chest neck_pelvis] [--repeats 3] [--json out.json]

Run it on an otherwise idle machine; the scans are generated once into ``--cache``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
LIMIT = 1.10  # the "within 10 %"


def _run(tree: Path, sizes: list[str], cache: Path, out: Path) -> dict[str, Any]:
    """One repeat of ``infer_bench.py --methods cascade`` of the revision checked out at ``tree``."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    cmd = [sys.executable, str(tree / "benchmarks" / "infer_bench.py"), "--methods", "cascade", "--repeats", "1",
           "--sizes", *sizes, "--cache", str(cache), "--json", str(out)]
    subprocess.run(cmd, cwd=tree, env=env, check=True, stdout=subprocess.DEVNULL)
    scans = json.loads(out.read_text())["scans"]
    return {name: scans[name]["methods"]["cascade"] for name in sizes}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base", required=True, help="the earlier revision (a commit, tag or branch)")
    ap.add_argument("--sizes", nargs="+", default=["small", "chest", "neck_pelvis"],
                    help="infer_bench.py's scans (default: small chest neck_pelvis)")
    ap.add_argument("--repeats", type=int, default=3, help="runs per revision and scan; figures are medians (default 3)")
    ap.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "segpipe_bench_scans",
                    help="folder of generated scans, shared by both revisions")
    ap.add_argument("--json", type=Path, help="write the figures here")
    args = ap.parse_args(argv)
    if args.repeats < 1:
        ap.error("--repeats: expected at least 1")
    base = subprocess.run(["git", "rev-parse", "--short", args.base], cwd=REPO, capture_output=True, text=True, check=False)
    if base.returncode != 0:
        print(f"error: unknown revision {args.base!r}", file=sys.stderr)
        return 2
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True, check=True).stdout.strip()
    args.cache.mkdir(parents=True, exist_ok=True)
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {"base": {s: [] for s in args.sizes}, "head": {s: [] for s in args.sizes}}
    with tempfile.TemporaryDirectory(prefix="segpipe_rev_") as tmp:
        tree = Path(tmp) / "base"
        subprocess.run(["git", "worktree", "add", "--detach", "--quiet", str(tree), base.stdout.strip()], cwd=REPO, check=True)
        try:
            for rep in range(args.repeats):
                # head first in the first repeat: it writes the scans the base then reads
                for name, root in (("head", REPO), ("base", tree)):
                    figures = _run(root, args.sizes, args.cache, Path(tmp) / f"{name}_{rep}.json")
                    for scan, m in figures.items():
                        runs[name][scan].append(m)
                        print(f"  {name} ({head if name == 'head' else base.stdout.strip()}) {scan:<12} run {rep + 1}/{args.repeats}: "
                              f"{m['wall_s']:7.2f} s, peak RSS {m['peak_rss_mib']:6.0f} MiB", flush=True)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=REPO, check=False)
    rows = []
    print(f"\ncascade, base {base.stdout.strip()} -> head {head} (medians of {args.repeats})")
    print(f"{'scan':<12} {'base s':>8} {'head s':>8} {'time':>6} {'base MiB':>9} {'head MiB':>9} {'memory':>7}  within 10 %")
    for scan in args.sizes:
        b_s = statistics.median(m["wall_s"] for m in runs["base"][scan])
        h_s = statistics.median(m["wall_s"] for m in runs["head"][scan])
        b_m = statistics.median(m["peak_rss_mib"] for m in runs["base"][scan])
        h_m = statistics.median(m["peak_rss_mib"] for m in runs["head"][scan])
        ok = h_s / b_s <= LIMIT and h_m / b_m <= LIMIT
        rows.append({"scan": scan, "base_s": b_s, "head_s": h_s, "time_ratio": h_s / b_s, "base_mib": b_m, "head_mib": h_m,
                     "memory_ratio": h_m / b_m, "within_10_percent": ok})
        print(f"{scan:<12} {b_s:8.2f} {h_s:8.2f} {h_s / b_s:6.2f} {b_m:9.0f} {h_m:9.0f} {h_m / b_m:7.2f}  {'yes' if ok else 'NO'}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        tmp_json = args.json.with_name(args.json.name + ".tmp")
        tmp_json.write_text(json.dumps({"base": base.stdout.strip(), "head": head, "repeats": args.repeats, "rows": rows,
                                        "runs": runs}, indent=1))
        tmp_json.replace(args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
