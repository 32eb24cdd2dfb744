"""Run a script with ``part_at_spine`` as before this experiment (the network's vote alone gives the
part of a find beyond the spine to the other side), for before/after runs from one checkout.

Run: ``python experiments/2026-11-28-spine-junction/before.py SCRIPT ARGS...``
"""

from __future__ import annotations

import runpy
import sys

from segpipe.infer import coarse
from segpipe.refine import spine

if __name__ == "__main__":
    def vote_only(found, sides, at, left_vote, voxel_ml, aerated=None):  # type: ignore[no-untyped-def]
        return spine.part_at_spine(found, sides, at, left_vote, voxel_ml)

    coarse.part_at_spine = vote_only  # type: ignore[attr-defined]
    sys.argv = sys.argv[1:]
    runpy.run_path(sys.argv[0], run_name="__main__")
