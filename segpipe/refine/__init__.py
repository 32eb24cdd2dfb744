"""Clean-up after the networks: always-on steps and switchable heuristic rules.

Every step is one module with a frozen parameter dataclass and one entry point
``rule(mask, context, params) -> (mask, RuleReport)``; :mod:`segpipe.refine.rules` holds their
one order, the :class:`RuleSet` of all parameters (stored in the model file's header) and the
runner :func:`run_rules`. Steps on the fine grid run on each fine region's lattice before its
probabilities go back to the scan; the others run once on the scan's grid.

Example:
    >>> from segpipe.refine import RuleSet
    >>> RuleSet().updated({"fat": False}).enabled("fat")
    False
"""

from __future__ import annotations

from segpipe.refine.airways import coarse_airways, track_airways
from segpipe.refine.base import FineContext, RuleReport, ScanContext
from segpipe.refine.body import body_cut_side, body_in_view, body_interior, body_midline_x, padding_of, skin_slack
from segpipe.refine.components import check_sides, clean_lungs, clean_lungs_array, fill_holes, fill_slice_holes, largest_component
from segpipe.refine.rules import STEPS, RuleSet, Step, describe, run_rules
from segpipe.refine.sides import end_piece_side, join_cut_pieces, lying_side, piece_side, side_boundary, split_sides

__all__ = [
    "RuleSet", "Step", "STEPS", "run_rules", "describe", "RuleReport", "FineContext", "ScanContext",
    "clean_lungs", "clean_lungs_array", "check_sides", "largest_component", "fill_holes", "fill_slice_holes",
    "split_sides", "piece_side", "lying_side", "end_piece_side", "join_cut_pieces", "side_boundary", "body_interior", "body_in_view", "padding_of",
    "body_midline_x", "body_cut_side",
    "skin_slack", "track_airways", "coarse_airways",
]
