"""The coarse side step on the dumped random crops (runs/spine/dump_S.pkl, ``../2026-11-28-spine-midline/dump.py``) with
the scanner's centre moved, as a file whose origin was reset or shifted would place it: ``shift.py WHERE SEED ...``.
WHERE is ``low`` (x = 0 at the array's first x column, where a reset origin puts it), ``high`` (at its last), ``none``
(no centre: ``sides.scanner_centre`` off) or a shift in mm (``+100``: x = 0 lies 100 mm further to the patient's left).
``inside``: the real coordinates, the centre taken only where it lies inside the view's x extent (or ``REACH_MM``
beyond it); ``GUARD=inside`` adds that guard to the other forms. Compared with the crops as dumped (the real
scans' own coordinates)."""

import os
import sys
from pathlib import Path

import numpy as np

from segpipe.infer import coarse

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "2026-11-28-spine-midline"))
from replay import compare  # noqa: E402

GUARD = os.environ.get("GUARD") == "inside" or sys.argv[1] == "inside"
REACH_MM = float(os.environ.get("REACH_MM", "0"))  # how far beyond the view's x extent the centre may lie


def moved(r: dict, kw: dict, where: str) -> dict:
    kw = dict(kw)
    nx = r["found"].shape[2]
    if where == "low":
        kw["centre_x"] = -0.5
    elif where == "high":
        kw["centre_x"] = nx - 0.5
    elif where == "none":
        kw["centre_x"] = None
    elif where != "inside" and kw.get("centre_x") is not None:
        kw["centre_x"] = kw["centre_x"] + float(where) / r["spacing"][0]
    reach = REACH_MM / r["spacing"][0]
    if GUARD and kw.get("centre_x") is not None and not -0.5 - reach <= kw["centre_x"] <= nx - 0.5 + reach:
        kw["centre_x"] = None
    return kw


def run(r: dict, kw: dict, spine: float | None) -> np.ndarray:
    sides, _, _ = coarse.name_sides(r["found"], spine=spine, voxel_ml=float(np.prod(r["spacing"])) / 1000, edge=None, **kw)
    return sides


if __name__ == "__main__":
    where = sys.argv[1]
    compare(sys.argv[2:], run, lambda r, kw, spine: run(r, moved(r, kw, where), spine))
