"""Run a script with the side of a scan-end piece as before this experiment (the network's vote
must confirm nine tenths of it: ``piece_side``), for before/after runs from one checkout.

Run: ``python experiments/2026-11-28-split-vote-crescent/before.py SCRIPT ARGS...``
"""

from __future__ import annotations

import runpy
import sys

from segpipe.infer import coarse
from segpipe.refine import sides

if __name__ == "__main__":
    coarse.end_piece_side = sides.piece_side  # type: ignore[attr-defined]
    sides.end_piece_side = sides.piece_side
    sys.argv = sys.argv[1:]
    runpy.run_path(sys.argv[0], run_name="__main__")
