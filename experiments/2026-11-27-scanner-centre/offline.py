"""Offline: side split with the scanner-centre cue on dumpx (coarse inputs with geometry)."""

import pickle
import sys

import numpy as np

import segpipe.refine.sides as S
from segpipe.infer import coarse as C


def score(seeds, use_centre=True, shift_mm=0.0, verbose=False):
    rows = []
    ncue = {}
    for seed in seeds:
        for d in pickle.load(open(f"runs/vc/dumpx_{seed}.pkl", "rb")):
            if "kw" not in d:
                sides = np.zeros_like(d["rc"])
            else:
                kw = dict(d["kw"])
                found = d["found"]
                kw.pop("centre_x", None)
                kw.pop("cues", None)
                cues = []
                cx = (-(d["x0"] + shift_mm)) / d["sx"] if use_centre else None
                sides = S.split_sides(found, **kw, centre_x=cx, cues=cues)
                for c in cues:
                    ncue[c] = ncue.get(c, 0) + 1
                sides = S.join_cut_pieces(found, sides, kw["midline_x"], kw["left_vote"])
                for value in (1, 2):
                    side = sides == value
                    needed = 50.0 * (C.CUT_LUNG_SHARE if C._at_edge(side, d["edge"]) else 1.0)
                    if np.count_nonzero(side & d["confident"]) * d["voxel_ml"] < needed:
                        sides[side] = 0
            vml = d.get("voxel_ml", 0.064)
            for v in (1, 2):
                m = d["rc"] == v
                if m.sum() * vml < 50:
                    continue
                rows.append(
                    dict(
                        seed=seed,
                        case=d["case"],
                        i=d["i"],
                        desc=d["desc"],
                        lung=v,
                        ml=round(m.sum() * vml, 1),
                        found=float((sides[m] == v).mean()),
                        other=float((sides[m] == 3 - v).mean()),
                        base=float((d["sides"][m] == v).mean()),
                    )
                )
    s = dict(
        lungs=len(rows),
        found=round(float(np.mean([r["found"] for r in rows])), 4),
        base=round(float(np.mean([r["base"] for r in rows])), 4),
        lost=sum(r["found"] < 0.1 for r in rows),
        lost_base=sum(r["base"] < 0.1 for r in rows),
        cues=ncue,
    )
    if verbose:
        for r in rows:
            if abs(r["found"] - r["base"]) > 0.02:
                print(f"  {r['seed']} {r['case'][:6]} {r['i']:2d} {r['desc']:40s} {r['lung']} {r['ml']:7.1f}  {r['base']:.2f} -> {r['found']:.2f}")
    return s, rows


def compare(a, ra, b, rb, names=("without", "with")):
    """Print two runs' summaries and every lung whose found share moved by more than 0.02."""
    print(names[0], a)
    print(names[1], b)
    for x, y in zip(ra, rb):
        if abs(x["found"] - y["found"]) > 0.02:
            print(f"  {x['seed']} {x['case'][:6]} {x['i']:2d} {x['desc']:40s} {x['lung']} {x['ml']:7.1f}  {x['found']:.2f} -> {y['found']:.2f}")


if __name__ == "__main__":
    shift = float(sys.argv[1])
    seeds = [int(x) for x in sys.argv[2:]]
    compare(*score(seeds, use_centre=False), *score(seeds, shift_mm=shift))
