"""Offline: joined_lungs accepts the vote's two parts where the scanner's centre confirms them."""

import sys

import numpy as np
from scipy import ndimage

import segpipe.refine.sides as S

sys.path.insert(0, "experiments/2026-11-27-scanner-centre")
import offline as offx

orig_joined = S.joined_lungs
CX = {}


def joined(single, left_vote, aerated, min_lung):
    out = orig_joined(single, left_vote, aerated, min_lung)
    if out is not None or CX.get("cx") is None:
        return out
    left, right = S._largest(single & left_vote), S._largest(single & ~left_vote)
    if not left.any() or not right.any():
        return None
    nearer_left = ndimage.distance_transform_edt(~left) < ndimage.distance_transform_edt(~right)
    a, b = single & nearer_left, single & ~nearer_left
    if min(a.sum(), b.sum()) < max(min_lung, 1):
        return None
    if S.centre_side(a, CX["cx"]) == 2 and S.centre_side(b, CX["cx"]) == 1:
        return np.where(single, np.where(nearer_left, np.uint8(2), np.uint8(1)), np.uint8(0))
    return None


orig_split = S.split_sides


def split(found, **kw):
    CX["cx"] = kw.get("centre_x")
    return orig_split(found, **kw)


shift = float(sys.argv[1])
seeds = [int(x) for x in sys.argv[2:]]
a, ra = offx.score(seeds, shift_mm=shift)
S.joined_lungs, S.split_sides = joined, split
offx.compare(a, ra, *offx.score(seeds, shift_mm=shift), names=("A", "B"))
