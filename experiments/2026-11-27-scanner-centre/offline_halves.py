"""Offline: variant B of the centre cue: also where the vote halves a lone find (view cuts the body)."""

import sys

import segpipe.refine.sides as S

sys.path.insert(0, "experiments/2026-11-27-scanner-centre")
import offline as offx

orig = S._one_lung_side


def variant(single, halves, midline_x, left_vote, view_side, flank=0, centre_x=None):
    if left_vote is not None and S._halves_agree(halves, left_vote) and view_side and centre_x is not None:
        side = S.centre_side(single, centre_x)
        if side:
            return side, "the scanner's centre (halves)"
    return orig(single, halves, midline_x, left_vote, view_side, flank, centre_x)


shift = float(sys.argv[1])
seeds = [int(x) for x in sys.argv[2:]]
a, ra = offx.score(seeds, shift_mm=shift)
S._one_lung_side = variant
offx.compare(a, ra, *offx.score(seeds, shift_mm=shift), names=("A", "B"))
