"""Run a script with the side step as before this experiment, for before/after runs from one checkout:
``before.py WHAT SCRIPT ARGS...``; WHAT ``junction``: ``part_at_spine`` by the network's vote alone;
``beyond``: no ``join_beyond_spine``; ``both``: both as before.
"""

from __future__ import annotations

import runpy
import sys

from segpipe.infer import coarse
from segpipe.refine import spine

if __name__ == "__main__":
    what = sys.argv[1]

    def vote_only(found, sides, at, left_vote, voxel_ml, aerated=None):  # type: ignore[no-untyped-def]
        return spine.part_at_spine(found, sides, at, left_vote, voxel_ml)

    if what in ("junction", "both"):
        coarse.part_at_spine = vote_only  # type: ignore[attr-defined]
    if what in ("beyond", "both"):
        coarse.join_beyond_spine = lambda found, sides, at, left_vote, edge=None: sides  # type: ignore[attr-defined]
    sys.argv = sys.argv[2:]
    runpy.run_path(sys.argv[0], run_name="__main__")
