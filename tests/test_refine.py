"""The clean-up steps of segpipe.refine: each step's own function (components, holes, sides,
body, airways, fat, edge snap, pleural air, dense lung), the RuleSet of their parameters, the
runner run_rules and describe."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np
import pytest
import SimpleITK as sitk
from scipy import ndimage

from segpipe import spatial
from segpipe.errors import ConfigError
from segpipe.refine import _util, rules
from segpipe.refine.airways import AirwaysParams, coarse_airways, track_airways
from segpipe.refine.base import FineContext, RuleReport, ScanContext
from segpipe.refine.body import BodyParams, body_cut_side, body_interior, body_midline_x
from segpipe.refine.components import ComponentsParams, clean_lungs, clean_lungs_array, fill_holes, fill_slice_holes, lung_pieces
from segpipe.refine.dense_lung import DenseLungParams, dense_lung
from segpipe.refine.dense_lung import check as dense_lung_check
from segpipe.refine.dense_to_wall import DenseToWallParams, dense_to_wall
from segpipe.refine.edge_snap import EdgeSnapParams, snap_edges, snap_label_edges
from segpipe.refine.fat import FatParams, clear_fat, fat_in_lung
from segpipe.refine.pleural_air import PleuralAirParams, pleural_air
from segpipe.refine.rules import STEPS, RuleSet, describe, run_rules
from segpipe.refine.sides import join_cut_pieces, piece_side, side_boundary, split_sides


def _image(array: np.ndarray, orientation: str = "LPS") -> sitk.Image:
    base = sitk.Image(*reversed(array.shape), sitk.sitkUInt8)
    base.SetSpacing((2.0, 2.0, 2.0))
    return spatial.reorient(spatial.copy_geometry(array.astype(np.uint8), base), orientation)


def _lungs() -> np.ndarray:
    a = np.zeros((20, 30, 40), np.uint8)
    a[3:17, 5:25, 3:17] = 1  # low x (LPS): the patient's right
    a[3:17, 5:25, 23:37] = 2
    return a


def test_keeps_largest_component_and_fills_holes() -> None:
    a = _lungs()
    a[8:11, 12:15, 8:11] = 0  # a vessel the network missed, enclosed in the right lung
    a[0:2, 0:2, 0:2] = 1  # a speck of false positive
    cleaned, warnings = clean_lungs(_image(a))
    out = sitk.GetArrayFromImage(cleaned)
    expected = _lungs()
    np.testing.assert_array_equal(out, expected)
    assert warnings == []


def test_piece_touching_the_other_lung_joins_it() -> None:
    a = _lungs()
    a[3:17, 5:25, 33:37] = 1  # the lateral part of the left lung labelled "right" by mistake
    out = sitk.GetArrayFromImage(clean_lungs(_image(a))[0])
    np.testing.assert_array_equal(out, _lungs())


@pytest.mark.parametrize("orientation", ["LPS", "RAS", "LPI"])
def test_sides_are_checked_in_physical_space(orientation: str) -> None:
    good = _image(_lungs(), orientation)
    cleaned, warnings = clean_lungs(good)
    assert warnings == []
    np.testing.assert_array_equal(sitk.GetArrayViewFromImage(cleaned), sitk.GetArrayViewFromImage(good))
    swapped = np.where(_lungs() == 1, 2, np.where(_lungs() == 2, 1, 0))
    fixed, warnings = clean_lungs(_image(swapped, orientation))
    assert len(warnings) == 1 and "swapped" in warnings[0]
    np.testing.assert_array_equal(sitk.GetArrayViewFromImage(fixed), sitk.GetArrayViewFromImage(good))
    assert fixed.GetDirection() == good.GetDirection() and fixed.GetOrigin() == good.GetOrigin()


def test_the_cascade_keeps_the_sides_steps_sides_in_a_cut_view() -> None:
    """A field of view over the right lung with a small piece of the left one at its low-x
    side in a few other slices (the per-row side boundary put it there): the left piece's
    centroid lies beyond the right lung's, which :func:`clean_lungs` reads as swapped labels.
    The cascade's ``components`` step keeps the ``sides`` step's labels."""
    from segpipe.refine import components

    a = np.zeros((20, 30, 40), np.uint8)
    a[2:16, 5:25, 12:36] = 1  # the right lung, cut by the view
    a[16:19, 8:18, 2:10] = 2  # a piece of the left lung below it (1.9 mL)
    _, warnings = clean_lungs(_image(a))
    assert len(warnings) == 1 and "swapped" in warnings[0]  # what the centroid check alone does
    geometry = spatial.Geometry.of(_image(a))
    ctx = ScanContext(scan_hu=lambda: np.zeros(a.shape, np.int16), release_scan=lambda: None, spacing_xyz=(2.0, 2.0, 2.0),
                      body=lambda z: np.ones(a.shape[1:], bool), airways=lambda z: np.zeros(a.shape[1:], bool),
                      side_boundary=lambda z: np.full(a.shape[1], 10.0), geometry=geometry, offset_xyz=(0, 0, 0))
    out, report = components.rule(a.copy(), ctx, ComponentsParams())
    np.testing.assert_array_equal(out, a)
    assert report.warnings == ()


def test_tiny_lung_is_removed_with_a_warning() -> None:
    a = np.zeros((20, 30, 40), np.uint8)
    a[3:17, 5:25, 3:17] = 1
    a[5:6, 5:7, 30:32] = 2  # 4 voxels of 8 mm^3: 0.032 mL
    cleaned, warnings = clean_lungs(_image(a), min_volume_ml=1.0)
    assert (sitk.GetArrayViewFromImage(cleaned) == 2).sum() == 0
    assert warnings == ["removed a left lung of only 0.032 mL (below 1 mL)"]


def test_a_base_of_a_few_ml_is_kept_by_default() -> None:
    """The tip of a recess at the top of an abdominal scan (3.2 mL) is a lung: the default
    ``min_ml`` (1 mL) keeps it (the test above: a speck under 1 mL goes)."""
    a = np.zeros((20, 30, 40), np.uint8)
    a[3:17, 5:25, 3:17] = 1
    a[12:20, 20:25, 25:35] = 2  # 400 voxels of 8 mm^3: 3.2 mL
    cleaned, warnings = clean_lungs(_image(a))
    left = sitk.GetArrayViewFromImage(cleaned) == 2
    assert warnings == [] and left.sum() == 400 and left[12:20, 20:25, 25:35].all()
    assert ComponentsParams().min_ml == 1.0


def test_split_sides_by_geometry_two_components_and_touching_lungs() -> None:
    lungs = _lungs() > 0
    np.testing.assert_array_equal(split_sides(lungs), _lungs())
    touching = lungs.copy()
    touching[3:17, 8:12, 17:23] = True  # anterior junction: one component
    sides = split_sides(touching)
    assert (sides[_lungs() == 1] == 1).all() and (sides[_lungs() == 2] == 2).all()
    boundary = side_boundary(_lungs())
    assert boundary.shape == (20, 30)
    assert (boundary[3:17, 5:25] == (16 + 23) / 2).all()  # middle of the gap in each row
    assert (boundary[0] == 19.5).all()  # rows without lungs take the median


def _turned_lungs(degrees: float) -> np.ndarray:
    """Two lungs (ellipses in each slice, 1 right at low x, 2 left) of a patient turned by
    ``degrees`` in the scanner, touching at a front junction: one component."""
    z, y, x = np.mgrid[0:24, 0:64, 0:64].astype(float)
    t = np.radians(degrees)
    u = (x - 32) * np.cos(t) + (y - 32) * np.sin(t)  # the patient's left-right axis
    v = -(x - 32) * np.sin(t) + (y - 32) * np.cos(t)  # front-back
    out = np.zeros((24, 64, 64), np.uint8)
    out[((u + 12) / 10) ** 2 + (v / 20) ** 2 <= 1] = 1
    out[((u - 12) / 10) ** 2 + (v / 20) ** 2 <= 1] = 2
    junction = (np.abs(u) <= 9) & (v >= -19) & (v <= -14)  # the lungs meet in front of the heart
    out[junction & (out == 0) & (u < 0)] = 1
    out[junction & (out == 0) & (u >= 0)] = 2
    out[:2] = out[-2:] = 0
    return out


def test_touching_lungs_of_a_turned_patient_are_split_along_their_junction() -> None:
    """The front junction of a patient turned by 25 degrees runs at a slant: a per-slice
    column along y gives a piece of one lung to the other; columns square to the line between
    the lungs' cores cut along the junction. A patient lying straight is cut along y as before."""
    from segpipe.refine.columns import column_halves, split_single

    for degrees in (-25.0, 0.0, 25.0):
        truth = _turned_lungs(degrees)
        find = truth > 0
        assert _util.label(find)[1] == 1
        sides = split_sides(find)
        for v in (1, 2):
            assert (sides[truth == v] == v).mean() >= 0.98, (degrees, v)
    column = column_halves(_turned_lungs(25.0) > 0)
    assert min((column[_turned_lungs(25.0) == v] == v).mean() for v in (1, 2)) < 0.9
    straight = _turned_lungs(0.0) > 0
    np.testing.assert_array_equal(split_single(straight), column_halves(straight))
    # a window over one lung and a strip of the other, joined in front: the strip is too thin
    # to have a core, so the column halves stand
    strip = np.zeros((24, 64, 64), bool)
    strip[2:22, 12:52, 10:40] = True  # the whole lung
    strip[2:22, 12:52, 44:46] = True  # two voxels of the other
    strip[2:22, 12:15, 40:44] = True  # the front junction
    assert _util.label(strip)[1] == 1
    np.testing.assert_array_equal(split_single(strip), column_halves(strip))


def test_side_boundary_never_cuts_the_one_lung_of_a_slice() -> None:
    """A view over the right lung with a small piece of the left one at its edge in two slices:
    the other slices' boundary lies beyond the right lung (it used to be the two slices'
    median, through the right lung, giving its medial part to the left); rows of a slice with
    both lungs keep the slice's median."""
    sides = np.zeros((20, 30, 40), np.uint8)
    sides[2:18, 4:26, 2:30] = 1  # the right lung across most of the view
    sides[8:10, 10:14, 20:] = 0
    sides[8:10, 10:14, 22:25] = 2  # the left lung's piece, past the right lung's row end
    boundary = side_boundary(sides)
    assert (boundary[8:10, 10:14] == 20.5).all()  # middle of the gap
    assert (boundary[2:18, 4:26][~np.isin(np.arange(20), [8, 9])[2:18]] >= 29 + 1.5).all()
    assert (boundary[8:10, 4:10] == 20.5).all()  # rows with the right lung alone, in a slice with both
    assert (boundary[0] == 20.5).all()  # a slice without lung: the overall median
    flipped = np.array([0, 2, 1], np.uint8)[sides[:, :, ::-1]]  # the left lung across the view
    assert (side_boundary(flipped)[2:8, 4:26] <= 39 - 29 - 1.5).all()


def test_laterality_of_inference_is_physical() -> None:
    """Labels 1/2 follow LPS x whatever the storage orientation (checked through the whole
    clean-up on a reoriented image)."""
    for orientation in ("RAS", "LPI", "LAS"):
        label = _image(_lungs(), orientation)
        cleaned, _ = clean_lungs(label)
        right = spatial.physical_centroid(cleaned, 1)
        left = spatial.physical_centroid(cleaned, 2)
        assert right is not None and left is not None and right[0] < left[0]


def test_a_single_lung_is_not_cut_in_two() -> None:
    only_right = _lungs() == 1
    assert set(np.unique(split_sides(only_right)).tolist()) == {0, 1, 2}  # no midline: split
    sides = split_sides(only_right, midline_x=19.5)
    assert (sides[only_right] == 1).all()
    only_left = _lungs() == 2
    assert (split_sides(only_left, midline_x=19.5)[only_left] == 2).all()
    touching = _lungs() > 0
    touching[3:17, 8:12, 17:23] = True
    sides = split_sides(touching, midline_x=19.5)  # straddles the midline: split
    assert (sides[_lungs() == 1] == 1).all() and (sides[_lungs() == 2] == 2).all()
    hu = np.full((4, 6, 40), -1000.0)
    hu[:, :, 10:30] = 40.0
    assert body_midline_x(hu) == pytest.approx(19.5)


def test_a_lung_alone_in_a_cut_field_of_view_takes_the_networks_side() -> None:
    """A field of view over the left lung alone: the body's middle is the view's middle, so
    the lung straddles the "midline". The coarse network's vote (left on 80 % of it, unsure
    on some slices) makes it one left lung; two touching lungs whose halves the vote
    confirms are still split; with one lung only the scan-grid boundary lies beyond it."""
    lung = _lungs() == 2
    lung = np.roll(lung, -13, axis=2)  # the left lung, centred in the view (x 10..23)
    left_vote = lung.copy()
    left_vote[::5] = False  # a fifth of its slices vote right
    assert 0.7 < left_vote[lung].mean() < 0.9
    assert set(np.unique(split_sides(lung, midline_x=16.5)[lung]).tolist()) == {1, 2}  # by the midline alone: cut in two
    sides = split_sides(lung, midline_x=16.5, left_vote=left_vote)
    assert (sides[lung] == 2).all()
    assert (split_sides(lung, left_vote=~left_vote & lung)[lung] == 1).all()  # mirrored vote: one right lung
    touching = _lungs() > 0
    touching[3:17, 8:12, 17:23] = True
    sides = split_sides(touching, midline_x=19.5, left_vote=np.broadcast_to(np.arange(40) >= 20, touching.shape))
    assert (sides[_lungs() == 1] == 1).all() and (sides[_lungs() == 2] == 2).all()
    # a small piece of the right lung at the view's right edge, beside the left one: the other
    # lung by the vote (below min_fraction, and the "midline" puts both on one side)
    piece = np.zeros_like(lung)
    piece[6:14, 10:20, 0:3] = True
    assert piece.sum() < 0.15 * lung.sum()
    vote = lung.copy()
    sides = split_sides(lung | piece, midline_x=16.5, left_vote=vote)
    assert (sides[piece] == 1).all() and (sides[lung] == 2).all()
    assert not split_sides(lung | piece, midline_x=16.5)[piece].any()  # without the vote: dropped
    vote[6, 10:20, 0:3] = True  # one of its 8 slices votes left: still three quarters right
    assert (split_sides(lung | piece, midline_x=16.5, left_vote=vote)[piece] == 1).all()
    vote[7:9, 10:20, 0:3] = True  # 3 of 8 slices left: unsure, dropped
    assert not split_sides(lung | piece, midline_x=16.5, left_vote=vote)[piece].any()
    # a find that is two touching lungs by the vote (a small left one: four fifths of it vote
    # right) and a speck voted left beyond them: the speck is not the left lung
    two = np.zeros(lung.shape, bool)
    two[3:17, 5:25, 3:17] = True
    two[3:17, 5:25, 23:26] = True
    two[3:17, 8:12, 17:23] = True
    speck = np.zeros_like(two)
    speck[6:14, 10:20, 38:40] = True
    by_x = np.broadcast_to(np.arange(40) >= 20, two.shape) | speck
    assert 0.75 < 1 - by_x[two].mean() < 0.9
    sides = split_sides(two | speck, midline_x=16.5, left_vote=by_x)
    assert not sides[speck].any() and (sides[3:17, 5:25, 23:26] == 2).all() and (sides[3:17, 5:25, 3:17] == 1).all()
    assert (side_boundary(np.where(lung, 2, 0).astype(np.uint8)) < 0).all()  # every voxel left of it is the left lung
    assert (side_boundary(np.where(lung, 1, 0).astype(np.uint8)) >= lung.shape[2]).all()


def test_a_view_that_cuts_the_body_at_one_side_shows_that_sides_lung() -> None:
    """A view that keeps the patient's right flank and cuts the body at its high-x side shows
    the right half of the patient: a lone lung there, whose network vote is unsure (0.43 left),
    is the right lung, though the "midline" (the view's middle) cuts it in two."""
    body = np.zeros((20, 30, 40), bool)
    body[:, 2:28, 6:] = True  # skin at x 6, cut by the view's high-x face
    assert body_cut_side(body) == 1 and body_cut_side(body[:, :, ::-1]) == 2
    whole = np.zeros_like(body)
    whole[:, 2:28, 6:34] = True
    assert body_cut_side(whole) == 0  # the body's width in view
    assert body_cut_side(np.ones_like(body)) == 3  # cut at both sides alike
    circle = np.zeros_like(body)  # the scanner's padding at the high-x side (x 36 on), grown by one: the body runs into it
    circle[:, :, 35:] = True
    body_in_circle = whole.copy()
    body_in_circle[:, 2:28, 34:36] = True
    assert body_cut_side(body_in_circle, circle) == 1
    lung = np.zeros_like(body)
    lung[3:17, 5:25, 12:30] = True
    vote = np.broadcast_to(np.arange(20)[:, None, None] < 9, lung.shape)  # its upper slices vote left: 0.43
    assert 0.25 < vote[lung].mean() < 0.5
    sides = split_sides(lung, midline_x=float(np.nonzero(body)[2].mean()), left_vote=vote, view_side=1)
    assert (sides[lung] == 1).all()
    assert set(np.unique(split_sides(lung, midline_x=22.5, left_vote=vote)[lung]).tolist()) == {1, 2}  # without: cut in two
    assert (split_sides(lung, midline_x=22.5, left_vote=vote, view_side=3)[lung] == 1).all()  # both sides cut: the majority


def test_a_lone_lung_beside_the_air_outside_one_flank_is_that_sides_lung() -> None:
    """A view of the right chest, cut by the scanner's circle at both sides: the outside air
    beyond the right flank shows in the lung's rows at its low-x side only. Where the vote
    halves the lung (a position the network reads, not anatomy) and the view's middle puts it
    on the left, or the vote is unsure (0.57 left), it is the right lung; with the air on both
    flanks (the body's width in view), on neither, or beyond the reach (the chest wall's width
    at most), the flank shows no side."""
    from segpipe.refine.sides import flank_side

    lung = np.zeros((20, 30, 40), bool)
    lung[3:17, 5:25, 16:36] = True  # the right lung, at the view's high-x side
    outside = np.zeros_like(lung)
    outside[:, :, 0:4] = True  # the air beyond the right flank's skin (x 4-15: the chest wall)
    assert flank_side(lung, outside, 14) == 1 and flank_side(lung[:, :, ::-1], outside[:, :, ::-1], 14) == 2
    both = outside.copy()
    both[:, :, 38:] = True
    assert flank_side(lung, both, 14) == 0 and flank_side(lung, np.zeros_like(lung), 14) == 0
    assert flank_side(lung, outside, 12) == 0  # the air lies 13-16 voxels below the lung: beyond a reach of 12
    rows = outside.copy()
    rows[:, 5:23] = False  # outside air beside 2 of its 20 rows per slice: a tenth
    assert flank_side(lung, rows, 14) == 1
    rows[:, 5:24] = False
    assert flank_side(lung, rows, 14) == 0
    halves = np.broadcast_to(np.arange(40) >= 26, lung.shape)  # the vote halves it at its middle column
    assert set(np.unique(split_sides(lung, midline_x=14.5, left_vote=halves)[lung]).tolist()) == {2}  # the view's middle
    assert (split_sides(lung, midline_x=14.5, left_vote=halves, outside=outside, flank_reach=14)[lung] == 1).all()
    unsure = np.broadcast_to(np.arange(20)[:, None, None] >= 9, lung.shape) & lung  # 0.57 left, not by halves
    assert 0.5 < unsure[lung].mean() < 0.75
    assert (split_sides(lung, midline_x=14.5, left_vote=unsure, view_side=3)[lung] == 2).all()  # the majority
    assert (split_sides(lung, midline_x=14.5, left_vote=unsure, view_side=3, outside=outside, flank_reach=14)[lung] == 1).all()
    assert (split_sides(lung, midline_x=14.5, left_vote=unsure, view_side=3, outside=both, flank_reach=14)[lung] == 2).all()


def _right_lung_and_left_edge() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The right lung (x 2-29), the left lung's edge at the view's high-x side (x 35-39) and a
    junction two rows thick in front between them (x 30-34), on a (20, 30, 40) grid."""
    right = np.zeros((20, 30, 40), bool)
    right[3:17, 5:25, 2:30] = True
    left = np.zeros_like(right)
    left[3:17, 5:25, 35:40] = True
    junction = np.zeros_like(right)
    junction[3:17, 5:7, 30:35] = True
    return right, left, junction


def test_a_find_of_two_lungs_joined_at_a_junction_line_is_split_by_the_vote() -> None:
    """A view over the right lung and the edge of the left one: the coarse stage finds both
    as one piece, joined in front of the heart. The vote parts them (the left piece a tenth
    of the find, so by the vote's share the find is one right lung), the two touch only at
    the junction line, and the tissue between them is the mediastinum: two lungs, each voxel
    with the nearer piece (``joined_lungs``; in a view whose middle is the body's, where the
    column split looks for its cut near the find's middle, away from the junction). Where
    aerated lung lies between the two (a lobe beyond a fissure that the network voted the
    other side, unsure between them; in a view that cuts the body too, where the split would
    look near the vote), a part is under ``min_lung``, or the vote's "left" lies at lower x, it
    stays one lung; so does a lone lung that the vote halves (it touches across its whole
    section)."""
    from segpipe.refine.sides import joined_lungs

    right, left, junction = _right_lung_and_left_edge()
    find = right | left | junction
    vote = np.broadcast_to(np.arange(40) >= 33, find.shape)
    assert vote[find].mean() < 0.25  # one right lung by the vote's share alone
    tissue = np.zeros_like(find)  # the mediastinum between them: not aerated
    assert (split_sides(find, left_vote=vote)[find] == 1).all()  # without the scan's density: one lung
    assert (split_sides(find, left_vote=vote, aerated=tissue, min_lung=2000)[find] == 1).all()  # too small
    sides = split_sides(find, left_vote=vote, aerated=tissue, min_lung=500)
    assert (sides[right] == 1).all() and (sides[left] == 2).all()
    assert (sides[3:17, 5:7, 30:33] == 1).all() and (sides[3:17, 5:7, 33:35] == 2).all()
    lobe = ~find  # aerated lung between the parts: one lung the network was unsure about
    assert joined_lungs(find, vote, lobe, 500) is None
    assert (split_sides(find, left_vote=vote, aerated=lobe, min_lung=500)[find] == 1).all()
    assert (split_sides(find, left_vote=vote, view_side=3, aerated=lobe, min_lung=500)[find] == 1).all()  # cut view too
    assert joined_lungs(find, ~vote & find, tissue, 500) is None  # the vote's "left" at lower x: not two lungs
    solid = np.zeros_like(right)
    solid[3:17, 5:25, 10:34] = True
    assert joined_lungs(solid, np.broadcast_to(np.arange(40) >= 22, solid.shape), tissue, 500) is None


def test_in_a_view_that_cuts_the_body_the_split_looks_for_its_cut_where_the_vote_parts_the_find() -> None:
    """The find of the test above in a view that cuts the body (its middle, x 20, is not the
    body's) and no spine in view: the column split looks for its thinnest column near x 32.5,
    where one cut best parts the vote, and cuts at the junction (two rows thick): two lungs, even
    without the scan's density. In a whole view it looks near the find's middle, whose halves the
    vote does not confirm: one lung. A find that votes one side throughout has its vote column
    at its edge, and the split looks near its middle as before."""
    from segpipe.refine.columns import vote_column

    right, left, junction = _right_lung_and_left_edge()
    find = right | left | junction
    vote = np.broadcast_to(np.arange(40) >= 33, find.shape)
    assert vote_column(find, vote) == 32.5
    sides = split_sides(find, left_vote=vote, view_side=3)
    assert (sides[right] == 1).all() and (sides[left] == 2).all() and (sides[junction] == 2).all()
    assert (split_sides(find, left_vote=vote)[find] == 1).all()
    assert vote_column(find, np.zeros_like(find)) == 39.5  # every voxel votes right: past the last column
    assert vote_column(find, find.copy()) == -0.5


def test_a_strip_joined_to_a_lung_is_parted_by_a_smaller_piece_of_its_vote(monkeypatch: pytest.MonkeyPatch) -> None:
    """A window over the left lung and a strip of the right one, joined in front: the vote
    calls the strip right, and also a larger block inside the left lung (the network unsure
    there). The largest piece of the right vote, the block, does not lie at lower x than the
    left vote's piece, so it seeds no parts; the next piece, the strip, parts the find at the
    junction line: the strip is the right lung, the block stays left. With only the largest
    piece of each side tried it stays one lung."""
    from segpipe.refine import sides as sides_mod

    strip = np.zeros((20, 30, 40), bool)
    strip[3:17, 5:25, 0:5] = True
    left = np.zeros_like(strip)
    left[3:17, 5:25, 10:38] = True
    junction = np.zeros_like(strip)
    junction[3:17, 5:7, 5:10] = True  # two rows thick, in front
    find = strip | left | junction
    block = np.zeros_like(strip)
    block[3:17, 8:22, 20:30] = True  # 1,960 voxels voted right inside the left lung
    vote = np.broadcast_to(np.arange(40) >= 8, find.shape) & ~block
    assert np.count_nonzero(block) > np.count_nonzero(find & ~vote & ~block)  # the block is the largest right piece
    tissue = np.zeros_like(find)
    joined = sides_mod.joined_lungs(find, vote, tissue, 500)
    assert joined is not None and (joined[strip] == 1).all() and (joined[left] == 2).all()
    assert sides_mod.joined_lungs(find, vote, tissue, 2000) is None  # the strip's part under min_lung
    monkeypatch.setattr(sides_mod, "JOINED_SEEDS", 1)
    assert sides_mod.joined_lungs(find, vote, tissue, 500) is None


def test_a_whole_lung_beside_a_small_find_of_the_other_gives_up_its_joined_edge() -> None:
    """As above (a view whose middle is the body's), and a further piece of the left lung, a few
    slices lower, found on its own: the coarse stage sees the small piece beside a whole lung
    (opposite sides by the vote), and the whole one still holds the left lung's edge, joined to
    it in front. That edge is the left lung too (the vote parts it off at a junction line, the
    mediastinum between); where aerated lung lies between the parts it stays with the right
    lung."""
    right, left, junction = _right_lung_and_left_edge()
    piece = np.zeros_like(right)
    piece[18:20, 10:20, 34:40] = True  # apart from the find (slice 17 holds no lung)
    lungs = right | left | junction | piece
    vote = np.broadcast_to(np.arange(40) >= 33, lungs.shape)
    tissue = np.zeros_like(lungs)
    before = split_sides(lungs, left_vote=vote)  # without the scan's density
    assert (before[piece] == 2).all() and (before[right | left] == 1).all()
    sides = split_sides(lungs, left_vote=vote, aerated=tissue, min_lung=500)
    assert (sides[right] == 1).all() and (sides[left] == 2).all() and (sides[piece] == 2).all()
    lobe = ~lungs
    assert (split_sides(lungs, left_vote=vote, aerated=lobe, min_lung=500)[right | left] == 1).all()


def test_a_lone_lung_the_vote_and_flank_leave_open_takes_the_scanner_centres_side() -> None:
    """A view inside the left chest (cut at both sides, no flank): the network's vote is unsure
    (0.57 right). With the scanner's centre (physical x = 0) at x index 5, the whole lung lies
    on its left: the left lung, whatever the majority, and ``cues`` says why. Without the centre,
    or where the lung straddles it, the majority decides as before; a clear vote or a flank comes
    first; a view that holds the body's width (``view_side`` 0) does not read the centre."""
    from segpipe.refine.sides import centre_side

    lung = np.zeros((20, 30, 40), bool)
    lung[3:17, 5:25, 10:36] = True
    unsure = np.broadcast_to(np.arange(20)[:, None, None] < 9, lung.shape) & lung  # 0.43 left: the majority says right
    assert 0.25 < unsure[lung].mean() < 0.5
    assert centre_side(lung, 5.0) == 2 and centre_side(lung, 38.0) == 1 and centre_side(lung, 20.0) == 0
    assert centre_side(lung, None) == 0
    cues: list[str] = []
    assert (split_sides(lung, midline_x=22.5, left_vote=unsure, view_side=3, centre_x=5.0, cues=cues)[lung] == 2).all()
    assert cues == ["the scanner's centre"]
    assert (split_sides(lung, midline_x=22.5, left_vote=unsure, view_side=3)[lung] == 1).all()  # the majority
    assert (split_sides(lung, midline_x=22.5, left_vote=unsure, view_side=3, centre_x=20.0)[lung] == 1).all()  # straddles it
    clear = np.zeros_like(lung)  # a clear vote for the right lung
    assert (split_sides(lung, midline_x=22.5, left_vote=clear, view_side=3, centre_x=5.0)[lung] == 1).all()
    outside = np.zeros_like(lung)
    outside[:, :, 0:2] = True  # the air beyond the right flank: the flank, not the centre
    assert (split_sides(lung, midline_x=22.5, left_vote=unsure, view_side=3, outside=outside, flank_reach=14,
                        centre_x=5.0)[lung] == 1).all()
    cues.clear()
    split_sides(lung, midline_x=22.5, left_vote=unsure, view_side=0, centre_x=5.0, cues=cues)
    assert "the scanner's centre" not in cues


def test_a_find_the_vote_splits_that_does_not_reach_the_scanner_centre_is_one_lung() -> None:
    """A narrow view inside the right chest (cut at both sides, no flank): the network's vote
    splits the lone find into two touching lungs (its medial half voted left), but the whole
    find lies right of the scanner's centre, where the body's middle, and the junction of two
    lungs, would be: it is the right lung, with the scanner's centre as its cue. A find that
    reaches across the centre, or a view that holds the body's width, is split as before."""
    from segpipe.refine.sides import beyond_centre

    lung = np.zeros((20, 30, 40), bool)
    lung[3:17, 5:25, 4:36] = True
    vote = np.zeros_like(lung)
    vote[:, :, 20:] = True  # the vote's halves: right at low x, left at high x
    vote &= lung
    assert beyond_centre(lung, 38.0) == 1 and beyond_centre(lung, 2.0) == 2 and beyond_centre(lung, 20.0) == 0
    assert beyond_centre(lung, None) == 0 and beyond_centre(np.zeros_like(lung), 38.0) == 0
    split = split_sides(lung, midline_x=20.0, left_vote=vote, view_side=3)
    assert (split[lung] == 1).any() and (split[lung] == 2).any()  # two lungs by the vote
    cues: list[str] = []
    assert (split_sides(lung, midline_x=20.0, left_vote=vote, view_side=3, centre_x=38.0, cues=cues)[lung] == 1).all()
    assert cues == ["the scanner's centre"]
    assert (split_sides(lung, midline_x=20.0, left_vote=vote, view_side=3, centre_x=2.0)[lung] == 2).all()
    assert np.array_equal(split_sides(lung, midline_x=20.0, left_vote=vote, view_side=3, centre_x=30.0), split)
    assert np.array_equal(split_sides(lung, midline_x=20.0, left_vote=vote, view_side=0, centre_x=38.0), split)


def test_two_finds_wholly_beyond_the_scanner_centre_are_one_lung() -> None:
    """The top of an abdominal scan whose view cuts the body: one left base falls into two
    crescents on the coarse grid, at either side of the view's middle, and the network's vote
    names them after their place in the view (the one at low x right). Both lie wholly left of
    the scanner's centre (x index 2), the nearer 9 voxels beyond it: one left lung. Within the
    margin of the centre (unless the vote calls both left), across it, with the spine between them, where the vote calls both the
    other side, without the centre, or in a view that holds the body's width, they stay two
    lungs named by their place; a third find across the centre is then the other lung."""
    lungs = np.zeros((12, 30, 44), bool)
    near, far = np.zeros_like(lungs), np.zeros_like(lungs)
    near[2:10, 8:20, 11:18] = True
    far[2:10, 8:20, 28:38] = True
    lungs = near | far
    vote = far.copy()  # the vote by place in the view: the crescent at low x "right"
    args = dict(midline_x=22.0, left_vote=vote, view_side=3, centre_margin=8)
    two = split_sides(lungs, **args)
    assert (two[near] == 1).all() and (two[far] == 2).all()
    cues: list[str] = []
    assert (split_sides(lungs, centre_x=2.0, cues=cues, **args)[lungs] == 2).all()
    assert cues == ["the scanner's centre"]  # the report warns: check its side
    assert np.array_equal(split_sides(lungs, centre_x=5.0, **args), two)  # the nearer only 6 voxels beyond
    both_left = {**args, "left_vote": lungs.copy()}  # ... unless the vote calls both left too (a window's two finds)
    assert (split_sides(lungs, centre_x=5.0, **both_left)[lungs] == 2).all()
    assert np.array_equal(split_sides(lungs, centre_x=24.0, **both_left), two)  # not across the centre
    assert np.array_equal(split_sides(lungs, centre_x=24.0, **args), two)  # across the centre
    assert np.array_equal(split_sides(lungs, centre_x=2.0, spine_x=22.0, **args), two)  # the spine between them
    assert np.array_equal(split_sides(lungs, centre_x=2.0, **{**args, "left_vote": np.zeros_like(vote)}), two)
    assert np.array_equal(split_sides(lungs, **{**args, "view_side": 0}, centre_x=2.0), two)
    other = np.zeros_like(lungs)
    other[4:8, 10:14, 0:1] = True  # a small find across the centre: the right lung
    beside = split_sides(lungs | other, centre_x=1.5, **args)
    assert (beside[lungs] == 2).all() and (beside[other] == 1).all()


def test_two_finds_beside_one_flank_are_pieces_of_that_sides_lung() -> None:
    """A view of the right chest in which the coarse stage finds the right lung in two pieces
    (front and back, the larger one at higher x): by their mean x the smaller would be the
    right lung and the larger the left one. The air beyond the right flank lies beside both:
    both are the right lung, unless the vote clearly puts one of them on the left. Two lungs
    with the body's width in view show no common flank and keep their sides."""
    front = np.zeros((20, 30, 40), bool)
    front[3:17, 3:12, 12:24] = True
    back = np.zeros_like(front)
    back[3:17, 14:27, 16:36] = True
    assert np.nonzero(front)[2].mean() < np.nonzero(back)[2].mean() and back.sum() > front.sum()
    outside = np.zeros_like(front)
    outside[:, :, 0:4] = True
    vote = np.zeros(front.shape, bool)
    vote[3:17, 14:27, 28:36] = True  # a third of the back piece votes left: unsure
    by_x = split_sides(front | back, left_vote=vote)
    assert (by_x[front] == 1).all() and (by_x[back] == 2).all()
    sides = split_sides(front | back, left_vote=vote, outside=outside, flank_reach=14)
    assert (sides[front | back] == 1).all()
    vote[3:17, 14:27, 16:36] = True  # the back piece clearly left by the vote: the vote stands
    assert (split_sides(front | back, left_vote=vote, outside=outside, flank_reach=14)[back] == 2).all()
    both = outside.copy()
    both[:, :, 38:] = True
    assert np.array_equal(split_sides(_lungs() > 0, outside=both, flank_reach=14), _lungs())


def test_two_finds_on_one_side_that_the_vote_calls_that_side_are_one_lung() -> None:
    """A slab that ends in a left base: the scan's edge cuts it into a medial piece (the larger,
    at lower x) and a lateral one, both left of the body's midline. The network calls three
    fifths of the medial piece left and all of the lateral one: both are the left lung, not a
    right lung (the lower mean x) and a left one. Where the vote calls the medial piece right
    (two fifths left), or the midline runs through it, mean x decides."""
    medial = np.zeros((12, 30, 60), bool)
    medial[2:12, 10:20, 32:44] = True
    lateral = np.zeros_like(medial)
    lateral[8:12, 10:18, 50:56] = True  # a fifth of the medial piece
    vote = lateral.copy()
    vote[6:12, 10:20, 32:44] = True  # 6 of the medial piece's 10 slices vote left
    sides = split_sides(medial | lateral, midline_x=29.5, left_vote=vote)
    assert (sides[medial | lateral] == 2).all()
    vote[6:8, 10:20, 32:44] = False  # 4 of 10: the vote calls it right
    sides = split_sides(medial | lateral, midline_x=29.5, left_vote=vote)
    assert (sides[medial] == 1).all() and (sides[lateral] == 2).all()
    vote[2:12, 10:20, 32:44] = True
    sides = split_sides(medial | lateral, midline_x=38.5, left_vote=vote)  # the midline through it
    assert (sides[medial] == 1).all() and (sides[lateral] == 2).all()


def test_a_collapsed_lung_beside_a_whole_one_is_kept() -> None:
    """A right lung of 8% of the left one (below min_fraction): with the midline it is the
    right lung (the two lie on opposite sides); a piece that straddles the midline, or a
    call without the midline, stays dropped."""
    lungs = _lungs() == 2
    collapsed = np.zeros_like(lungs)
    collapsed[8:12, 12:17, 6:11] = True  # 100 voxels against the left lung's 14 x 20 x 14
    assert collapsed.sum() < 0.15 * lungs.sum()
    sides = split_sides(lungs | collapsed, midline_x=19.5)
    assert (sides[collapsed] == 1).all() and (sides[lungs] == 2).all()
    assert not split_sides(lungs | collapsed)[collapsed].any()
    across = np.zeros_like(lungs)
    across[8:12, 12:17, 16:23] = True  # on the midline, touching nothing
    across[:, :, 23:] = False
    sides = split_sides((lungs & (np.arange(40) >= 26)) | across, midline_x=19.5)
    assert not sides[across].any()


def test_a_clear_vote_overrules_the_midline_of_a_view_that_cuts_the_body() -> None:
    """A window over the left lung: the body's middle is the view's, so the lung lies on the
    "right" of that midline, and a speck at the view's high-x edge on its "left". The midline
    alone makes them two lungs (the lung right, the speck left); where the network clearly calls
    the lung left, the midline does not make the speck the other lung, and the lung is left."""
    lungs = np.zeros((20, 30, 40), bool)
    lungs[3:17, 5:25, 2:26] = True  # the lung, left of x = 27 in the view
    speck = np.zeros_like(lungs)
    speck[8:10, 12:14, 34:37] = True
    vote = lungs.copy()  # the network: all of the lung is the left lung
    assert (split_sides(lungs | speck, midline_x=27.0)[lungs] == 1).all()  # no vote: the midline decides
    sides = split_sides(lungs | speck, midline_x=27.0, left_vote=vote, view_side=2)
    assert (sides[lungs] == 2).all() and not (sides[speck] == 1).any()


def test_two_pieces_of_one_cut_lung_are_that_lung() -> None:
    """The top of an abdominal scan cuts the left recess into two pieces larger than the
    right base: with the midline and the coarse network's side vote agreeing, both pieces are
    the left lung and the small piece on the right is the right lung. Without the vote the
    two largest stay two lungs (sided by their mean x); a vote that disagrees changes nothing."""
    lungs = np.zeros((20, 30, 40), bool)
    lungs[15:20, 5:12, 24:30] = True  # left recess, anterior piece
    lungs[15:20, 18:26, 31:38] = True  # left recess, posterior piece
    lungs[17:20, 20:23, 6:9] = True  # right base: small
    left_vote = np.zeros(lungs.shape, bool)
    left_vote[:, :, 20:] = True
    sides = split_sides(lungs, midline_x=19.5, left_vote=left_vote)
    assert (sides[:, :, 20:][lungs[:, :, 20:]] == 2).all()
    assert (sides[:, :, :20][lungs[:, :, :20]] == 1).all()
    without = split_sides(lungs, midline_x=19.5)
    assert set(np.unique(without[lungs]).tolist()) == {0, 1, 2} and not without[:, :, :20].any()
    np.testing.assert_array_equal(split_sides(lungs, midline_x=19.5, left_vote=~left_vote), without)
    whole = _lungs() > 0  # two whole lungs: the vote changes nothing
    np.testing.assert_array_equal(split_sides(whole, midline_x=19.5, left_vote=_lungs() == 2), _lungs())


def test_further_pieces_the_scans_end_cuts_off_join_their_lung() -> None:
    """The top slice cuts the right recess into three pieces (lateral, anterior, posterior):
    the pieces that reach that slice on the right by midline and vote join the right lung. A
    piece that does not reach the slice, one across the midline, one the vote calls the
    other side, and a strip at an in-plane edge of the view stay out."""
    lungs = np.zeros((20, 30, 40), bool)
    lungs[14:20, 10:20, 26:36] = True  # left base
    lungs[15:20, 12:20, 0:6] = True  # right recess, lateral piece (largest on the right), cut in-plane too
    lungs[17:20, 3:7, 10:15] = True  # right recess, anterior piece
    lungs[18:20, 24:27, 8:12] = True  # right recess, posterior piece
    lungs[10:13, 24:27, 12:16] = True  # right, below the top slice: not cut by it
    lungs[16:20, 2:5, 17:23] = True  # across the midline
    lungs[17:20, 26:29, 24:28] = True  # left by position, right by the vote
    lungs[0:16, 29, 0:3] = True  # a strip at the in-plane edge of the view the lateral piece reaches
    left_vote = np.zeros(lungs.shape, bool)
    left_vote[:, :, 20:] = True
    left_vote[:, 26:29, 24:28] = False
    sides = split_sides(lungs, midline_x=19.5, left_vote=left_vote)
    assert (sides[15:20, 12:20, 0:6] == 1).all() and (sides[14:20, 10:20, 26:36] == 2).all()
    assert not sides[17:20, 3:7, 10:15].any()  # split_sides alone sides two pieces
    joined = join_cut_pieces(lungs, sides, 19.5, left_vote)
    assert (joined[17:20, 3:7, 10:15] == 1).all() and (joined[18:20, 24:27, 8:12] == 1).all()
    for stays_out in (np.s_[10:13, 24:27, 12:16], np.s_[16:20, 2:5, 17:23], np.s_[17:20, 26:29, 24:28], np.s_[0:16, 29, 0:3]):
        assert not joined[stays_out].any()
    np.testing.assert_array_equal(joined[sides > 0], sides[sides > 0])  # nothing re-sided
    whole = _lungs()  # two whole lungs: nothing to join
    np.testing.assert_array_equal(join_cut_pieces(whole > 0, whole, 19.5, whole == 2), whole)


def test_a_piece_whose_side_vote_is_split_joins_the_base_on_its_side() -> None:
    """The front of a left base beside the heart, cut off by the scan's top slice, where the
    network's side vote is split: nine tenths of it on the left of the midline and the vote not
    clearly right (:func:`lying_side`), it joins the left base that the same slice cuts; a piece
    that the vote clearly calls right does not, nor one with a split vote at the view's side
    edge (air beyond the skin there can look like lung), and none joins where no left base
    reaches that slice."""
    from segpipe.refine.sides import end_piece_side, lying_side

    lungs = np.zeros((20, 30, 40), bool)
    lungs[14:20, 15:28, 26:36] = True  # left base, posterior and lateral
    lungs[16:20, 2:6, 21:25] = True  # its front, beside the heart
    lungs[16:20, 2:6, 28:32] = True  # a second front piece, the vote clearly right
    lungs[14:20, 12:20, 2:12] = True  # right base
    lungs[16:20, 8:11, 37:40] = True  # at the view's side edge, its vote split
    left_vote = np.zeros(lungs.shape, bool)
    left_vote[:, :, 20:] = True
    left_vote[16:20, 2:4, 21:25] = False  # half of the first front piece votes right
    left_vote[16:20, 2:6, 28:32] = False
    left_vote[16:20, 2:3, 28:32] = True  # a quarter of the second votes left
    left_vote[16:20, 8:10, 37:40] = False
    front, other = np.zeros(lungs.shape, bool), np.zeros(lungs.shape, bool)
    front[16:20, 2:6, 21:25] = True
    other[16:20, 2:6, 28:32] = True
    assert lying_side(front, 19.5, left_vote) == 2 and piece_side(front, 19.5, left_vote) == 0
    assert lying_side(other, 19.5, left_vote) == 0
    rim = np.zeros(lungs.shape, bool)
    rim[16:20, 8:11, 37:40] = True
    assert lying_side(rim, 19.5, left_vote) == 2 and end_piece_side(rim, 19.5, left_vote) == 0
    assert end_piece_side(front, 19.5, left_vote) == 2
    circle = np.zeros(lungs.shape, bool)
    circle[:, 0:3, 20:26] = True  # the scanner's circle beside the front piece: the view's edge there
    assert end_piece_side(front, 19.5, left_vote, circle) == 0
    assert not join_cut_pieces(lungs, split_sides(lungs, midline_x=19.5, left_vote=left_vote), 19.5, left_vote, circle)[front].any()
    assert lying_side(lungs[:, :, :] & (np.arange(40) < 12)[None, None, :], 19.5, left_vote) == 1
    sides = split_sides(lungs, midline_x=19.5, left_vote=left_vote)
    assert (sides[14:20, 15:28, 26:36] == 2).all() and (sides[14:20, 12:20, 2:12] == 1).all()
    joined = join_cut_pieces(lungs, sides, 19.5, left_vote)
    assert (joined[front] == 2).all() and not joined[other].any() and not joined[rim].any()
    no_left = np.where(sides == 2, 0, sides).astype(np.uint8)  # no left base at that slice: nothing to join
    assert not join_cut_pieces(lungs, no_left, 19.5, left_vote)[front].any()


def test_body_interior_holds_the_lungs_not_the_air_around_the_patient() -> None:
    hu = np.full((6, 60, 80), -1000.0, np.float32)  # air all around
    yy, xx = np.mgrid[:60, :80]
    body = ((yy - 30) / 20.0) ** 2 + ((xx - 40) / 35.0) ** 2 <= 1
    hu[:, body] = 40.0
    lung = ((yy - 30) / 12.0) ** 2 + ((xx - 25) / 8.0) ** 2 <= 1
    hu[:, lung] = -850.0
    hu[:, 55:58, 10:70] = 200.0  # the table: tissue-dense, apart from the body
    hu[5] = -1000.0  # a slice past the patient
    inside = body_interior(hu)
    assert inside[:5][:, lung].all()  # the lung is a hole in the body's cross-section
    assert not inside[:5, 2, 2].any() and not inside[:5, 51:55, 40].any()  # outside air, gap above the table
    assert not inside[5].any()
    assert inside[:5][:, body].all()


def test_slice_holes_are_filled_even_when_they_open_in_3d() -> None:
    """A consolidation's core (and the air bronchus through it) that the lung rings in each
    axial slice is filled, though it runs up to the airways (no 3D cavity); a notch open to
    the lung's edge within the slice (the hilum, the mediastinum's side) is not."""
    lung = np.zeros((20, 30, 30), bool)
    lung[2:18, 5:25, 5:25] = True
    lung[2:18, 12:18, 12:18] = False  # a core through every slice, open at both ends in 3D
    lung[2:18, 13:16, 20:30] = False  # and a notch from the lung's edge at x = 24 inwards
    lung[5:15, 13:16, 19:25] = False
    assert np.array_equal(fill_holes(lung), lung)  # no 3D cavity
    filled = fill_slice_holes(lung)
    assert filled[10, 14, 14] and filled[2, 14, 14] and filled[17, 14, 14]  # the core, top to bottom
    assert not filled[10, 14, 22] and not filled[3, 14, 22]  # the notch stays open
    assert not (filled & ~lung)[:, :, 19:].any()
    assert np.array_equal(fill_slice_holes(np.zeros((3, 4, 5), bool)), np.zeros((3, 4, 5), bool))
    # the same as scipy's 2D filling slice by slice (face connectivity)
    rng = np.random.default_rng(3)
    cross = ndimage.generate_binary_structure(2, 1)
    for i in range(30):
        mask = rng.random(tuple(int(v) for v in rng.integers(2, 24, 3))) < rng.uniform(0.2, 0.95)
        if i % 2:
            mask = ndimage.binary_opening(mask)
        expected = np.stack([ndimage.binary_fill_holes(sl, structure=cross) for sl in mask])
        assert np.array_equal(fill_slice_holes(mask), expected), i


def test_fill_holes_equals_scipy_with_face_connectivity() -> None:
    rng = np.random.default_rng(7)
    for i in range(40):
        shape = tuple(int(v) for v in rng.integers(2, 24, 3))
        mask = rng.random(shape) < rng.uniform(0.2, 0.95)
        if i % 2:
            mask = ndimage.binary_opening(mask)
        expected = ndimage.binary_fill_holes(mask, structure=ndimage.generate_binary_structure(3, 1))
        assert np.array_equal(fill_holes(mask), expected), (i, shape)
    # a cavity is filled; a tunnel to the border (here: along the last axis) is not
    shell = np.zeros((9, 9, 9), bool)
    shell[1:8, 1:8, 1:8] = True
    shell[3:6, 3:6, 3:6] = False
    assert fill_holes(shell)[4, 4, 4]
    shell[4, 4, 6:] = False
    assert not fill_holes(shell)[4, 4, 4]
    assert not fill_holes(np.zeros((4, 4, 4), bool)).any()


@pytest.mark.parametrize("swap", [False, True])
def test_clean_lungs_array_on_a_part_of_the_grid_equals_the_whole(swap: bool) -> None:
    """The cascade cleans only the lungs' boxes (an offset part of the grid): same labels and
    same side check as cleaning the whole map, the sides judged at their true position; the
    lung voxels it added (the hole) and removed (the speck) are counted."""
    a = _lungs()
    a[8:11, 12:15, 8:11] = 0  # hole
    a[4:6, 20:22, 20:22] = 2  # a speck that is dropped
    if swap:
        a = np.where(a == 1, 2, np.where(a == 2, 1, 0)).astype(np.uint8)
    big = np.zeros((30, 50, 60), np.uint8)
    big[6:26, 11:41, 13:53] = a
    reference = _image(big)
    whole, warnings_whole = clean_lungs(reference)
    part = big[6:26, 11:41, 13:53].copy()
    before = part.copy()
    warnings, (added, removed) = clean_lungs_array(part, spatial.Geometry.of(reference), offset_xyz=(13, 11, 6))
    np.testing.assert_array_equal(part, sitk.GetArrayViewFromImage(whole)[6:26, 11:41, 13:53])
    np.testing.assert_array_equal(part, _lungs())
    assert warnings == warnings_whole
    assert len(warnings) == int(swap)
    assert added == int(np.count_nonzero((part > 0) & (before == 0))) == 27  # the 3 x 3 x 3 hole
    assert removed == int(np.count_nonzero((part == 0) & (before > 0))) == 8  # the 2 x 2 x 2 speck
    assert clean_lungs_array(np.zeros((4, 5, 6), np.uint8), spatial.Geometry.of(reference)) == ([], (0, 0))


def _support_of(array: np.ndarray) -> object:
    """A ``lung_pieces`` support over blocks of ``array`` (uint8, bit 1 right, bit 2 left)."""
    return lambda block: array[block]


def test_lung_pieces_keeps_the_piece_the_coarse_stage_supports_not_the_largest() -> None:
    """A small base the coarse stage found beats a larger pocket of bowel gas it did not."""
    mask = np.zeros((30, 20, 20), bool)
    mask[20:26, 5:10, 5:10] = True  # the base: 150 voxels
    mask[2:12, 5:15, 5:15] = True  # bowel gas: 1000 voxels
    coarse = np.zeros(mask.shape, np.uint8)
    coarse[19:27, 4:11, 4:11] = 2  # the coarse stage's left lung
    kept, dropped = lung_pieces(mask, 2)  # without support: the largest
    assert kept.sum() == 1000
    kept, dropped = lung_pieces(mask, 2, _support_of(coarse))
    assert kept.sum() == 150 and kept[22, 7, 7] and dropped.sum() == 1000
    kept, _ = lung_pieces(mask, 1, _support_of(coarse))  # the other side's support: none, the largest
    assert kept.sum() == 1000


def test_lung_pieces_keeps_the_pieces_the_scans_edge_cuts() -> None:
    """Pieces that reach a face marked as the scan's edge and lie in the coarse lung are kept;
    an unsupported piece at the edge, and a supported one inside the view, are not."""
    mask = np.zeros((20, 30, 30), bool)
    mask[12:20, 2:10, 2:10] = True  # 512: the main piece, at the top edge
    mask[16:20, 20:25, 2:6] = True  # 80: a recess of the same lung, cut by the top edge
    mask[16:20, 20:25, 20:25] = True  # 100: gas at the top edge, outside the coarse lung
    mask[2:5, 2:5, 20:25] = True  # 45: inside the view
    coarse = np.zeros(mask.shape, np.uint8)
    coarse[11:20, 1:11, 1:11] = 1
    coarse[15:20, 19:26, 1:7] = 1
    coarse[1:6, 1:6, 19:26] = 3  # both sides reach here
    top = (False, True, False, False, False, False)
    kept, dropped = lung_pieces(mask, 1, _support_of(coarse), top)
    assert kept.sum() == 512 + 80 and dropped.sum() == 100 + 45
    kept, _ = lung_pieces(mask, 1, _support_of(coarse), (False,) * 6)  # no edge: the main piece only
    assert kept.sum() == 512
    kept, _ = lung_pieces(mask, 1, _support_of(coarse), top, min_support=0.95)
    assert kept.sum() == 512 + 80  # the recess lies wholly in the coarse lung


def test_clean_lungs_array_keeps_edge_pieces_only_at_the_scans_own_edge() -> None:
    """The edge is the scan's, not the region's: the same pieces in a region away from the
    scan's top are dropped."""
    a = np.zeros((10, 30, 40), np.uint8)
    a[2:10, 5:25, 3:15] = 1
    a[6:10, 5:10, 16:19] = 1  # a recess cut by the scan's top
    support = np.where(a > 0, 1, 0).astype(np.uint8)
    for nz, edge in ((10, True), (12, False)):
        reference = spatial.Geometry((40, 30, nz), (2.0, 2.0, 2.0), (0.0, 0.0, 0.0), (1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0))
        part = a.copy()
        clean_lungs_array(part, reference, support=_support_of(support), min_support=ComponentsParams().min_support)
        assert bool(part[8, 7, 17]) == edge
        assert part[5, 10, 10] == 1



def test_clean_lungs_array_keeps_no_lung_on_a_side_the_coarse_stage_did_not_find() -> None:
    """Only the left lung was found: the fine lung labelled right (bowel gas in the left
    lung's region, across the side boundary) goes, and a right-labelled piece that touches
    the left lung joins it; without ``found_sides`` both stay as they were."""
    a = np.zeros((20, 30, 40), np.uint8)
    a[4:16, 5:25, 22:36] = 2  # the left lung: 3360 voxels
    a[4:16, 5:25, 19:22] = 1  # cut off it by the side boundary: 720
    a[2:6, 10:16, 3:9] = 1  # gas far from it: 144
    reference = spatial.Geometry((40, 30, 20), (2.0, 2.0, 2.0), (0.0, 0.0, 0.0), (1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0))
    part = a.copy()
    warnings, (added, removed) = clean_lungs_array(part, reference, found_sides={2})
    assert not (part == 1).any() and (part == 2).sum() == 3360 + 720
    assert removed == 144 and added == 0
    assert warnings == ["left out 1.15 mL labelled right lung, where the coarse stage found no right lung"]
    part = a.copy()
    assert clean_lungs_array(part, reference)[0] == []
    assert (part == 1).sum() == 720 and (part == 2).sum() == 3360
    part = a.copy()
    assert clean_lungs_array(part, reference, found_sides={1, 2})[0] == []
    assert (part == 1).sum() == 720

@pytest.mark.parametrize("seed", [11, 13])
def test_track_airways_finds_the_trachea_and_never_lung(seed: int) -> None:
    """On a 4 mm grid (the coarse stage's), tracking from the top follows the trachea and the
    main bronchi down to the hilum: every voxel it takes is airway, none is lung."""
    from segpipe.synthetic import TISSUES, PhantomSpec, make_phantom

    ph = make_phantom(
        PhantomSpec(seed=seed, size_xyz=(160, 140, 150), spacing_xyz=(2.0, 2.0, 2.5), coverage="chest"), tissue_map=True
    )
    coarse = spatial.resample_image(ph.image, (4.0, 4.0, 4.0))
    hu = sitk.GetArrayFromImage(coarse)
    lung = sitk.GetArrayFromImage(spatial.resample_label(ph.label, (4.0, 4.0, 4.0))) > 0
    airway = sitk.GetArrayFromImage(spatial.resample_label(ph.tissue, (4.0, 4.0, 4.0))) == TISSUES["airway"]
    tracked = track_airways((hu < -900) & body_interior(hu), coarse.GetSpacing())
    slices = np.flatnonzero(tracked.any(axis=(1, 2)))
    assert len(slices) >= 25  # >= 10 cm of trachea and bronchi
    assert slices[-1] >= hu.shape[0] - 3  # from the top of the scan
    assert not (tracked & lung).any()
    assert np.all(airway[tracked])
    # lung bases only (no trachea in the field of view): nothing is taken
    low = hu[: slices[0] - 2]
    assert not track_airways((low < -900) & body_interior(low), coarse.GetSpacing()).any()


@pytest.mark.parametrize("seed", [11, 13])
def test_track_airways_near_the_spine_in_a_view_that_cuts_the_body(seed: int) -> None:
    """A view that cuts the body at a side (its left edge 24 mm right of the trachea) puts the
    trachea off the view's middle: sought there, a lung apex is taken for it; sought near the
    spine's column the trachea and bronchi are tracked exactly as in the whole scan."""
    from segpipe.refine.airways import TRACHEA_FROM_SPINE_MM
    from segpipe.refine.spine import spine_x
    from segpipe.synthetic import PhantomSpec, make_phantom

    ph = make_phantom(PhantomSpec(seed=seed, size_xyz=(160, 140, 150), spacing_xyz=(2.0, 2.0, 2.5), coverage="chest"))
    coarse = spatial.resample_image(ph.image, (4.0, 4.0, 4.0))
    hu, body = sitk.GetArrayFromImage(coarse), body_interior(sitk.GetArrayFromImage(coarse))
    lung = sitk.GetArrayFromImage(spatial.resample_label(ph.label, (4.0, 4.0, 4.0))) > 0
    whole = track_airways((hu < -900) & body, coarse.GetSpacing())
    x0 = int(round(np.nonzero(whole)[2].mean())) - 6
    air, cut_body = (hu < -900)[:, :, x0:] & body[:, :, x0:], body[:, :, x0:]
    off_middle = track_airways(air, coarse.GetSpacing())
    assert off_middle.any() and np.all(lung[:, :, x0:][off_middle])  # the view's middle: an apex
    spine = spine_x(hu[:, :, x0:], coarse.GetSpacing(), cut_body)
    assert spine is not None
    tracked = track_airways(air, coarse.GetSpacing(), centre_x=spine, reach_x=TRACHEA_FROM_SPINE_MM / 4.0)
    assert tracked.sum() > 250 and np.array_equal(tracked, whole[:, :, x0:])
    assert not (tracked & lung[:, :, x0:]).any()
    # the rule's own search (also not level with the vertebrae in the spine's column) finds the same trachea
    grown = coarse_airways(hu[:, :, x0:], cut_body, coarse.GetSpacing(), spine_x=spine)
    assert (grown & tracked).sum() == tracked.sum() and not (grown & lung[:, :, x0:] & ~tracked).sum() > 0.05 * grown.sum()


def test_trachea_seed_ignores_specks_and_needs_a_tube() -> None:
    """Specks of air (noise at the corners of a coarse matrix) beside the trachea's top slices do
    not hide it; a round pocket of air in the last slices, which does not go on as a tube, is
    not taken for it; the lung apices beside it do count as other air."""
    from segpipe.refine.airways import trachea_seed

    nz, ny, nx = 30, 64, 64
    air = np.zeros((nz, ny, nx), bool)
    yy, xx = np.mgrid[:ny, :nx]
    tube = (yy - 30) ** 2 + (xx - 32) ** 2 <= 4  # about 2 cm^2 at 4 mm
    air[10:, tube] = True  # the trachea from the top (z grows upward) down to slice 10
    air[:, 0, 0] = air[:, 0, nx - 1] = air[:, ny - 1, 0] = True  # three one-voxel specks in every slice
    seed = trachea_seed(air, (4.0, 4.0, 4.0))
    assert seed is not None and seed[0] == nz - 1 and np.array_equal(seed[1], tube)
    apices = air.copy()
    apices[nz - 4:, 20:40, 5:15] = apices[nz - 4:, 20:40, 49:59] = True  # both apices in the top 4 slices
    seed = trachea_seed(apices, (4.0, 4.0, 4.0))
    assert seed is not None and seed[0] == nz - 5  # the first slice below them, where the trachea is alone
    pocket = np.zeros_like(air)
    pocket[:2, tube] = True  # round gas in the last two slices only: no tube
    assert trachea_seed(pocket, (4.0, 4.0, 4.0)) is None
    carina = np.zeros_like(air)
    carina[nz - 1, tube] = True  # the view's top slice just above the carina: the main bronchi below
    carina[: nz - 1, 29:32, 27:30] = carina[: nz - 1, 29:32, 34:37] = True
    seed = trachea_seed(carina, (4.0, 4.0, 4.0))
    assert seed is not None and seed[0] == nz - 1
    at_edge = np.zeros_like(air)
    at_edge[10:, 29:32, :3] = True  # a round tube that the view's side edge cuts: its shape is unknown
    assert trachea_seed(at_edge, (4.0, 4.0, 4.0), centre_x=1.0, reach_x=6.0) is None
    at_edge[10:, 29:32, :3] = False
    at_edge[10:, 29:32, 1:4] = True  # the same tube whole, one column in
    assert trachea_seed(at_edge, (4.0, 4.0, 4.0), centre_x=1.0, reach_x=6.0) is not None
    vertebra = np.zeros_like(air)
    vertebra[:, 27:36, 5:8] = True  # bone in the spine's column at the tube's rows: a lung's apex beside the spine
    assert trachea_seed(at_edge, (4.0, 4.0, 4.0), centre_x=1.0, reach_x=6.0, vertebra=vertebra) is None
    vertebra[:] = False
    vertebra[:, 34:44, 5:8] = True  # the vertebra behind the tube: the trachea in front of the spine
    assert trachea_seed(at_edge, (4.0, 4.0, 4.0), centre_x=1.0, reach_x=6.0, vertebra=vertebra) is not None


def test_near_the_spine_the_trachea_is_not_level_with_a_vertebra() -> None:
    """In a view that cuts the body the trachea is sought near the spine's column: an air tube
    beside a vertebra, level with it (a lung's apex beside the spine), is not the trachea; one
    inside a calcified ring (the cricoid, tracheal cartilage: bone-dense but thin) still is,
    unless the ring's bone is as large as a vertebra's section."""
    nz, ny, nx = 30, 60, 60
    hu = np.full((nz, ny, nx), 40.0)
    body = np.ones(hu.shape, bool)
    apex = hu.copy()
    apex[:, 26:37, 22:31] = 400.0  # a vertebra in the spine's column (x 28), 14 cm^2
    apex[8:, 28:32, 33:36] = -1000.0  # an air tube beside it, level with it
    assert not coarse_airways(apex, body, (4.0, 4.0, 4.0), spine_x=28.0).any()
    assert coarse_airways(apex, body, (4.0, 4.0, 4.0)).any()  # sought at the view's middle (x 30) it is taken
    ring = hu.copy()
    ring[8:, 27:32, 27:31] = 400.0  # a calcified ring in the spine's column, 2.2 cm^2 of bone ...
    ring[8:, 28:31, 28:30] = -1000.0  # ... around the lumen
    ring[:, 45:56, 22:35] = 400.0  # the vertebra behind it
    found = coarse_airways(ring, body, (4.0, 4.0, 4.0), spine_x=28.0)
    assert found[8:, 28:31, 28:30].all()
    ring[8:, 27:32, 26] = 400.0  # a thicker ring, 3.0 cm^2: bone as large as a small vertebra
    assert not coarse_airways(ring, body, (4.0, 4.0, 4.0), spine_x=28.0).any()


def test_track_airways_stops_at_fragmented_dark_parenchyma() -> None:
    """Below the trachea, dark lung broken into many small air pieces (emphysema, noise at
    -900 HU) must not be followed: each piece is small, but together they are no airway."""
    nz, ny, nx = 40, 64, 64
    air = np.zeros((nz, ny, nx), bool)
    yy, xx = np.mgrid[:ny, :nx]
    tube = (yy - 30) ** 2 + (xx - 32) ** 2 <= 4  # 13 px of 4 x 4 mm: about 2 cm^2
    air[20:, tube] = True  # trachea in the upper half (z grows upward)
    rng = np.random.default_rng(0)
    air[:20, 10:54, 8:56] = rng.random((20, 44, 48)) < 0.3  # speckled dark lung right under it
    tracked = track_airways(air, (4.0, 4.0, 4.0))
    assert tracked[20:].sum() == 20 * tube.sum()  # the whole trachea
    assert tracked[:20].sum() <= tube.sum()  # at most one slice of speckle, never a walk through it
    # coarse_airways: the same tracking through the lumen of the HU, one voxel wider in-plane; its params are read
    hu = np.where(air, -1000.0, 40.0).astype(np.float32)
    body = np.ones(air.shape, bool)
    airways = coarse_airways(hu, body, (4.0, 4.0, 4.0))
    assert np.array_equal(airways, np.stack([ndimage.binary_dilation(t, ndimage.generate_binary_structure(2, 1)) for t in tracked]))
    assert not coarse_airways(hu, body, (4.0, 4.0, 4.0), AirwaysParams(enabled=False)).any()  # off: nothing is cleared
    assert not coarse_airways(hu, body, (4.0, 4.0, 4.0), AirwaysParams(lumen_hu=-1001.0)).any()  # no lumen that dark
    small = coarse_airways(hu, body, (4.0, 4.0, 4.0), AirwaysParams(max_area_cm2=0.5))  # the trachea is larger:
    assert np.flatnonzero(small.any(axis=(1, 2))).tolist() == [air.shape[0] - 1]  # its top slice (the seed) only


# ----------------------------------------------------------------------------- gas
def _gas_case(seed: int = 0) -> tuple[np.ndarray, Callable[[frozenset[int]], ScanContext], list[int]]:
    """A scan-grid region (1 mm voxels, the side boundary at x = 20): as the right lung a
    crescent of aerated lung (-860 HU with noise, vessels at +40), as the left one a pocket of gas
    (-1000 HU inside, a rim of partial volume with its wall); the context for a set of unsure
    sides, and the log of the scan's reads."""
    rng = np.random.default_rng(seed)
    shape = (8, 30, 40)
    hu = rng.normal(-860.0, 25.0, shape).astype(np.float32)
    hu[:, ::5, ::5] = 40.0  # vessels
    mask = np.zeros(shape, np.uint8)
    mask[1:7, 5:25, 3:17] = 1
    zz, yy, xx = np.mgrid[: shape[0], : shape[1], : shape[2]]
    r = np.sqrt(((zz - 4) * 1.5) ** 2 + (yy - 15) ** 2 + (xx - 30) ** 2)
    hu[(r < 8) & (xx >= 20)] = np.where(r < 6, rng.normal(-1000.0, 10.0, shape), -700.0)[(r < 8) & (xx >= 20)]
    mask[(r < 8) & (xx >= 20)] = 2
    geometry = spatial.Geometry(shape[::-1], (1.0, 1.0, 1.0), (0.0, 0.0, 0.0), (1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0))
    reads: list[int] = []

    def ctx(unsure: frozenset[int]) -> ScanContext:
        def scan_hu() -> np.ndarray:
            reads.append(1)
            return hu
        return ScanContext(scan_hu=scan_hu, release_scan=lambda: None, spacing_xyz=(1.0, 1.0, 1.0),
                           body=lambda z: np.ones(shape[1:], bool), airways=lambda z: np.zeros(shape[1:], bool),
                           side_boundary=lambda z: np.full(shape[1], 20.0), geometry=geometry, offset_xyz=(0, 0, 0),
                           found_sides=frozenset({1, 2}), unsure_sides=unsure)
    return mask, ctx, reads


def test_gas_drops_an_unsure_side_that_is_pure_air_and_keeps_unsure_lung() -> None:
    from segpipe.refine import gas

    mask, ctx, reads = _gas_case()
    left, right = mask == 2, mask == 1
    shares = gas.air_shares(mask, ctx(frozenset({1, 2})), {1, 2}, -980.0)
    assert shares[1][1] == 0 and shares[1][0] == right.sum()  # aerated lung: none of it pure air
    assert shares[2][0] == left.sum() and shares[2][1] > 0.25 * shares[2][0]  # gas: the inside of the pocket
    out, report = gas.rule(mask.copy(), ctx(frozenset({1, 2})), gas.GasParams())
    assert np.array_equal(out, np.where(right, 1, 0))  # the gas goes, the unsure lung stays
    assert report.removed_ml == pytest.approx(left.sum() / 1000) and report.added_ml == 0
    assert len(report.warnings) == 1 and report.warnings[0].startswith("dropped a ") and "left lung" in report.warnings[0]
    assert "pure air" in report.warnings[0]
    # a side the coarse stage was sure of is never touched, and with no unsure side the scan is not read
    out, report = gas.rule(mask.copy(), ctx(frozenset({1})), gas.GasParams())
    assert np.array_equal(out, mask) and report.removed_ml == 0 and report.warnings == ()
    reads.clear()
    out, report = gas.rule(mask.copy(), ctx(frozenset()), gas.GasParams())
    assert np.array_equal(out, mask) and not reads
    # the share is the parameter: a pocket of gas under it stays
    out, _ = gas.rule(mask.copy(), ctx(frozenset({2})), gas.GasParams(max_air_share=0.9))
    assert np.array_equal(out, mask)


def test_gas_is_a_switchable_step_after_components() -> None:
    from segpipe.refine import gas

    mask, ctx, _ = _gas_case()
    rules = RuleSet()
    assert rules.enabled("gas") and rules.gas == gas.GasParams()
    out, reports = run_rules("scan", mask.copy(), ctx(frozenset({2})), rules)
    by_name = {r.name: r for r in reports}
    assert by_name["gas"].removed_ml > 0 and not (out == 2).any() and (out == 1).sum() >= (mask == 1).sum()
    out, reports = run_rules("scan", mask.copy(), ctx(frozenset({2})), rules.switched(off=["gas"]))
    assert {r.name: r for r in reports}["gas"].enabled is False and (out == 2).sum() >= (mask == 2).sum() // 2


# ----------------------------------------------------------------------------- fat is never lung
def _slice_with_blobs(spacing: float) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    """A 120 x 120 mm slice: soft tissue (+40 HU) with an ellipse of lung (-850 HU, noisy)
    holding a fat pad (-100 HU), a consolidation (+35 HU) and ground glass (-500 HU), each a
    12 mm disc; the network's lung mask covers the whole ellipse (blobs included)."""
    n = int(round(120 / spacing))
    yy, xx = (np.mgrid[0:n, 0:n] + 0.5) * spacing
    rng = np.random.default_rng(0)
    hu = np.full((n, n), 40.0, np.float32)
    lung = ((yy - 60) / 45) ** 2 + ((xx - 60) / 35) ** 2 <= 1
    hu[lung] = -850.0
    blobs = {}
    for name, (cy, cx, value) in {"fat": (30, 60, -100.0), "consolidation": (60, 50, 35.0), "ground_glass": (85, 65, -500.0)}.items():
        blobs[name] = (yy - cy) ** 2 + (xx - cx) ** 2 <= 6.0**2
        hu[blobs[name]] = value
    hu += rng.normal(0, 25, hu.shape).astype(np.float32)
    return lung, hu, blobs


@pytest.mark.parametrize("spacing", [0.6, 0.9])
def test_fat_blob_in_the_lung_mask_is_cleared_and_nothing_else(spacing: float) -> None:
    lung, hu, blobs = _slice_with_blobs(spacing)
    fat = fat_in_lung(lung, hu, (spacing, spacing))
    assert np.array_equal(fat_in_lung(lung, hu, (spacing, spacing), FatParams()), fat)
    assert not fat_in_lung(lung, hu, (spacing, spacing), FatParams(hu=(-60.0, -30.0))).any()  # the range is read
    assert not fat_in_lung(lung, hu, (spacing, spacing), FatParams(open_mm=10.0)).any()  # so is the opening
    assert fat.sum() >= 0.8 * blobs["fat"].sum()                       # the fat pad goes
    assert not (fat & blobs["consolidation"]).any()                    # consolidation stays lung
    assert not (fat & blobs["ground_glass"]).any()                     # ground glass stays lung
    assert not (fat & ~blobs["fat"]).sum() > 0.05 * blobs["fat"].sum()  # partial-volume rims stay
    edge = lung & ~ndimage.binary_erosion(lung, iterations=3)
    assert not (fat & edge).any()  # the lung's own edge against soft tissue is not "fat"


def test_clear_fat_works_slice_by_slice_on_a_label_volume() -> None:
    lung, hu, blobs = _slice_with_blobs(0.8)
    label = np.stack([np.where(lung, 1, 0), np.where(lung, 2, 0), np.zeros_like(lung, int)]).astype(np.uint8)
    hu3 = np.stack([hu, hu, hu])
    untouched = label.copy()
    assert clear_fat(untouched, hu3, (0.8, 0.8, 2.5), FatParams(hu=(-60.0, -30.0))) == 0  # the params reach every slice
    assert np.array_equal(untouched, label)
    cleared = clear_fat(label, hu3, (0.8, 0.8, 2.5))
    gone = (label == 0) & np.stack([lung, lung, np.zeros_like(lung)])
    assert cleared == int(gone.sum()) > 0
    assert (gone[0] == gone[1]).all() and not gone[2].any()  # the same per slice, whatever the side
    assert gone[0].sum() >= 0.8 * blobs["fat"].sum() and not (gone[0] & blobs["consolidation"]).any()


def _chest_slice(spacing: float, lung_hu: float = -850.0, noise: float = 15.0, outside_hu: float = 40.0) -> tuple[np.ndarray, np.ndarray]:
    """A 2D chest: soft tissue (``outside_hu``, +40 HU) with an elliptic lung (``lung_hu``) whose
    true edge is at partial volume (the 50 % level of a 0.5 mm blur); returns (true lung mask, HU)."""
    n = int(round(200 / spacing))
    y, x = (np.mgrid[0:n, 0:n] + 0.5) * spacing
    r = np.sqrt(((y - 100) / 60) ** 2 + ((x - 100) / 45) ** 2)
    truth = r < 1.0
    frac = ndimage.gaussian_filter(truth.astype(np.float32), 0.5 / spacing)
    hu = outside_hu + (lung_hu - outside_hu) * frac
    hu += np.random.default_rng(0).normal(0, noise, hu.shape)
    return truth, hu.astype(np.float32)


@pytest.mark.parametrize("spacing", [0.6, 0.9])
@pytest.mark.parametrize("shift", [-1, 1])
def test_snap_edges_moves_a_shifted_edge_onto_the_scan(spacing: float, shift: int) -> None:
    truth, hu = _chest_slice(spacing)
    steps = max(1, int(1.2 / spacing))  # the fine stage's edge, about 1 mm off
    lung = ndimage.binary_dilation(truth, iterations=steps) if shift > 0 else ndimage.binary_erosion(truth, iterations=steps)
    before = int((lung ^ truth).sum())
    snapped = snap_edges(lung, hu, (spacing, spacing))
    after = int((snapped ^ truth).sum())
    assert after < 0.25 * before  # most of the ring moves onto the scan's own edge
    assert not (snapped & ~ndimage.binary_dilation(lung, iterations=3)).any()  # bounded reach
    # the params are read: no HU is aerated lung, so nothing moves
    assert np.array_equal(snap_edges(lung, hu, (spacing, spacing), p=EdgeSnapParams(hu=(-2000.0, -1500.0))), lung)


@pytest.mark.parametrize("shift", [-1, 1])
def test_snap_edges_follows_a_denser_lung_to_its_half_way_edge(shift: int) -> None:
    """An expiratory lung (-600 HU): its edge's half-lung voxels lie near -280 HU, above the
    fixed -450 of a -850 HU lung; the edge still lands on the true one. A -850 HU lung's edge
    moves as without the density's follow."""
    spacing = 0.7
    truth, hu = _chest_slice(spacing, lung_hu=-600.0)
    lung = ndimage.binary_dilation(truth, iterations=2) if shift > 0 else ndimage.binary_erosion(truth, iterations=2)
    before = int((lung ^ truth).sum())
    follow = int((snap_edges(lung, hu, (spacing, spacing)) ^ truth).sum())
    fixed = int((snap_edges(lung, hu, (spacing, spacing), p=EdgeSnapParams(follow_lung=False)) ^ truth).sum())
    assert follow < 0.25 * before and follow <= fixed
    if shift < 0:  # the fixed end stops at the -450 HU ring, inside the true edge
        assert follow < 0.5 * fixed
    truth, hu = _chest_slice(spacing)
    lung = ndimage.binary_erosion(truth, iterations=2)
    assert np.array_equal(snap_edges(lung, hu, (spacing, spacing)),
                          snap_edges(lung, hu, (spacing, spacing), p=EdgeSnapParams(follow_lung=False)))


def test_snap_edges_leaves_dense_lung_and_pneumothorax_alone() -> None:
    spacing = 0.8
    # consolidation: the lung's outer part is dense (+35 HU) against the chest wall (+40 HU)
    truth, hu = _chest_slice(spacing)
    dense = truth & ~ndimage.binary_erosion(truth, iterations=12)
    hu[dense] = 35.0
    lung = ndimage.binary_dilation(truth, iterations=1) & ~ndimage.binary_erosion(truth, iterations=40) | truth
    assert (snap_edges(lung, hu, (spacing, spacing)) == lung).all()
    # a collapsed lung (-400 HU) inside pneumothorax air (-1000 HU): no air is added to it
    truth, hu = _chest_slice(spacing, lung_hu=-400.0)
    air = ndimage.binary_dilation(truth, iterations=15) & ~truth
    hu[air] = -1000.0 + np.random.default_rng(1).normal(0, 15, int(air.sum()))
    snapped = snap_edges(truth, hu, (spacing, spacing))
    assert not (snapped & air).any() and (snapped == truth).all()


@pytest.mark.parametrize("lung_hu", [-650.0, -500.0])
def test_snap_edges_adds_no_free_air_at_a_blurred_edge(lung_hu: float) -> None:
    """A partly collapsed lung inside free air (a pneumothorax), its edge blurred by the scanner:
    the partial-volume voxels outside the edge lie between lung and air, in aerated lung's HU
    range, but far darker than the lung; ``darker_hu`` keeps them out, and against tissue it
    changes nothing."""
    spacing = 0.8
    truth, hu = _chest_slice(spacing, lung_hu=lung_hu, noise=10.0, outside_hu=-1000.0)
    p = EdgeSnapParams()
    assert p.darker_hu is not None
    air = ~truth
    assert (snap_edges(truth, hu, (spacing, spacing), p=EdgeSnapParams(darker_hu=None)) & air).sum() > 50  # the blur is added without it
    assert not (snap_edges(truth, hu, (spacing, spacing), p=p) & air).any()
    for lung_hu_tissue in (lung_hu, -850.0):  # against tissue the test changes nothing
        truth, hu = _chest_slice(spacing, lung_hu=lung_hu_tissue, noise=40.0)
        lung = ndimage.binary_erosion(truth, iterations=1)
        snapped = snap_edges(lung, hu, (spacing, spacing), p=p)
        assert np.array_equal(snapped, snap_edges(lung, hu, (spacing, spacing), p=EdgeSnapParams(darker_hu=None)))


def test_edge_rules_read_the_scanners_padding_as_air() -> None:
    """A lung the reconstruction circle cuts: beyond the circle the scanner's padding (-3024)
    is smoothed as air (-1024). Smoothed as it is, it made the lung at the circle darker than
    aerated lung (``edge_snap`` added nothing there) and mixed with tissue into fat's range."""
    spacing = 0.8
    truth, hu = _chest_slice(spacing)
    lung = ndimage.binary_erosion(truth, iterations=2)
    cut = np.zeros_like(truth)
    cut[:, : int(np.flatnonzero(truth.any(axis=0))[0]) + 12] = True  # the circle's edge crosses the lung
    results = []
    for padding in (-1024.0, -3024.0):
        h = np.where(cut, padding, hu).astype(np.float32)
        results.append((snap_edges(lung & ~cut, h, (spacing, spacing), ~cut), fat_in_lung(truth & ~cut, h, (spacing, spacing))))
    assert np.array_equal(results[0][0], results[1][0]) and np.array_equal(results[0][1], results[1][1])
    assert (results[1][0] & ~lung).any() and not results[1][1].any()
    # the padding is no free air next to the lung: the lung is added up to the circle as without
    # the darker-than-lung test
    plain = snap_edges(lung & ~cut, h, (spacing, spacing), ~cut, EdgeSnapParams(darker_hu=None))  # h: the -3024 padding
    assert np.array_equal(results[1][0], plain)
    smooth = _util.smoothed_hu(np.where(cut, -3024.0, hu), 1.0)
    assert smooth.dtype == np.float32 and smooth.min() >= spatial.AIR_HU


def test_snap_edges_adds_only_where_allowed() -> None:
    spacing = 0.7
    truth, hu = _chest_slice(spacing)
    lung = ndimage.binary_erosion(truth, iterations=2)
    allowed = np.ones_like(truth)
    allowed[:, : truth.shape[1] // 2] = False  # e.g. the trachea's column on the coarse grid
    snapped = snap_edges(lung, hu, (spacing, spacing), allowed)
    added = snapped & ~lung
    assert added.any() and not (added & ~allowed).any()


def test_snap_label_edges_keeps_each_lung_its_side() -> None:
    spacing = 0.8
    truth, hu = _chest_slice(spacing)
    half = truth.shape[1] // 2
    ref = np.where(truth, 1, 0).astype(np.uint8)
    ref[:, half:][truth[:, half:]] = 2
    hu[:, half - 2:half + 2] = 40.0  # a mediastinal wall between the two lungs
    ref[:, half - 2:half + 2] = 0
    label = np.stack([ref, ref])
    for z in range(2):
        for v in (1, 2):
            m = label[z] == v
            label[z][m & ~ndimage.binary_erosion(m, iterations=1)] = 0  # the fine stage's edge, 0.8 mm in
    before = int((label != np.stack([ref, ref])).sum())
    unchanged = label.copy()
    assert snap_label_edges(unchanged, np.stack([hu, hu]), (spacing, spacing, 2.0), EdgeSnapParams(hu=(-2000.0, -1500.0))) == 0
    assert np.array_equal(unchanged, label)
    changed = snap_label_edges(label, np.stack([hu, hu]), (spacing, spacing, 2.0))
    after = int((label != np.stack([ref, ref])).sum())
    assert changed > 0 and after < 0.25 * before
    assert set(np.unique(label[:, :, : half - 2])) <= {0, 1} and set(np.unique(label[:, :, half + 2:])) <= {0, 2}


def test_snap_edges_never_drops_very_dark_lung_at_the_edge() -> None:
    spacing = 0.8
    truth, hu = _chest_slice(spacing)
    rim = truth & ~ndimage.binary_erosion(truth, iterations=4)
    hu[rim & (np.arange(truth.shape[1])[None, :] < truth.shape[1] // 2)] = -995.0  # a subpleural bulla
    snapped = snap_edges(truth, hu, (spacing, spacing))
    assert not (truth & ~snapped).any()


def test_map_parallel_keeps_order_and_threads_change_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """Slice-by-slice clean-up runs on several threads: the results must be those of one
    thread, voxel for voxel (fat, edge snap and the per-lung clean-up)."""
    assert _util.map_parallel(lambda i: i * i, 37) == [i * i for i in range(37)]
    spacing = 0.8
    truth, hu = _chest_slice(spacing)
    lung, hu_fat, _ = _slice_with_blobs(spacing)
    n = min(truth.shape[0], lung.shape[0]), min(truth.shape[1], lung.shape[1])
    rng = np.random.default_rng(3)
    slices, hus = [], []
    for z in range(12):  # every slice different: a shifted edge, fat blobs on some
        m = np.roll(truth, z - 6, axis=1)[: n[0], : n[1]] | (lung[: n[0], : n[1]] if z % 3 == 0 else False)
        slices.append(np.where(m, 1 + (np.arange(n[1]) >= n[1] // 2)[None, :], 0).astype(np.uint8))
        hus.append((hu[: n[0], : n[1]] if z % 3 else hu_fat[: n[0], : n[1]]) + rng.normal(0, 5, n).astype(np.float32))
    label0, hu3 = np.stack(slices), np.stack(hus)
    label0[5:7, 40:45, 40:45] = 2  # a stray piece for the per-lung clean-up
    results = []
    for threads in (1, 2, 3):
        monkeypatch.setattr(_util, "worker_threads", lambda threads=threads: threads)
        label = label0.copy()
        counts = (clear_fat(label, hu3, (spacing, spacing, 2.0)), snap_label_edges(label, hu3, (spacing, spacing, 2.0)))
        cleaned = clean_lungs_array(label, _image(label))  # (warnings, (added, removed))
        results.append((label, counts, cleaned))
    assert results[0][1][0] > 0 and results[0][1][1] > 0  # both steps changed something
    for label, counts, cleaned in results[1:]:
        np.testing.assert_array_equal(label, results[0][0])
        assert counts == results[0][1] and cleaned == results[0][2]


def _chest_with_pleural_air(pneumothorax: bool, bulla: bool, spacing: float = 1.5) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A 3D hemithorax: soft tissue (+40 HU) around an elliptic cavity. The lung (-860 HU, with
    vessels: thin bright tubes) fills it, or, with ``pneumothorax``, it is shrunk towards the
    middle and vessel-free air (-1000 HU) fills a 10-25 mm crescent between it and the wall.
    ``bulla``: a 15 mm air sphere with a 1.5 mm wall (-300 HU) inside the lung, against the
    pleura. Returns (cavity mask, true air-outside-the-lung mask, HU), (z, y, x)."""
    rng = np.random.default_rng(5)
    n = (int(120 / spacing), int(150 / spacing), int(120 / spacing))
    z, y, x = ((np.indices(n) + 0.5) * spacing).astype(np.float32)
    r = np.sqrt(((z - 60) / 52) ** 2 + ((y - 75) / 65) ** 2 + ((x - 60) / 50) ** 2)
    cavity = r < 1.0
    hu = np.full(n, 40.0, np.float32)
    lung = cavity.copy()
    if pneumothorax:  # the lung pulled 10-25 mm away from the lateral and front wall
        shift = 10 + 15 * (x / x.max())
        lung = cavity & (np.sqrt(((z - 60) / 52) ** 2 + ((y - 75 + shift * 0.5) / 65) ** 2 + ((x - 60 + shift) / 50) ** 2) < 1.0)
    air_out = cavity & ~lung
    hu[lung] = -860.0
    for _ in range(60):  # vessels: random segments, 3 mm thick, through the lung
        p0 = np.array([rng.uniform(10, 110), rng.uniform(10, 140), rng.uniform(10, 110)])
        d = rng.normal(size=3)
        d /= np.linalg.norm(d)
        rel = np.stack([z - p0[0], y - p0[1], x - p0[2]])
        t = np.clip(np.tensordot(d, rel, axes=1), 0, 40)
        dist = np.sqrt(((rel - t[None] * d[:, None, None, None]) ** 2).sum(0))
        hu[lung & (dist < 1.5)] = 40.0
    if bulla:
        rb = np.sqrt((z - 60) ** 2 + (y - 75) ** 2 + (x - 60 + 50 - 17) ** 2)  # against the medial pleura
        hu[cavity & (rb < 16.5)] = -300.0
        hu[cavity & (rb < 15.0)] = -1000.0
    hu[air_out] = -1000.0
    hu += rng.normal(0, 15, n).astype(np.float32)
    return cavity, air_out, hu


@pytest.mark.parametrize("part_left_out", [False, True])
def test_pleural_air_finds_a_pneumothorax_in_the_lung_mask(part_left_out: bool) -> None:
    """The network took the whole cavity (lung and the air around it) for lung; the air outside
    the lung is found, the lung itself stays. With ``part_left_out`` the network had already
    left the outer half of the air out of its mask."""
    cavity, air_out, hu = _chest_with_pleural_air(pneumothorax=True, bulla=False)
    mask = cavity.copy()
    if part_left_out:
        mask &= ~(air_out & ~ndimage.binary_erosion(cavity, iterations=4))  # the outer 6 mm of the air
    found = pleural_air(mask, hu, (1.5, 1.5, 1.5))
    target = air_out & mask
    lung = cavity & ~air_out
    assert (found & target).sum() >= 0.8 * target.sum()
    assert (found & lung).sum() <= 0.02 * lung.sum()  # at most the lung's partial-volume rim against the air
    assert not (found & ~mask).any()


def test_pleural_air_leaves_lung_with_a_bulla_alone() -> None:
    """A bulla against the pleura is vessel-free air too, but walled and inside the lung: nothing
    of a whole lung (bulla included) is taken out, at two spacings."""
    for spacing in (1.5, 2.0):
        cavity, air_out, hu = _chest_with_pleural_air(pneumothorax=False, bulla=True, spacing=spacing)
        assert not air_out.any() and (hu[cavity] < -975).sum() * spacing**3 / 1000 > 10  # the bulla: > 10 mL of air
        assert not pleural_air(cavity, hu, (spacing,) * 3).any()


def test_pleural_air_takes_a_thin_shell_of_pneumothorax_around_a_collapsed_lung() -> None:
    """A collapsed lung (-450 HU sphere) in a pneumothorax: the network's mask reaches 4 mm into
    the air all round (too thin for a pocket). The shell goes, on the lung's own edge (the
    midpoint between air and lung), because the air goes on outside the mask; air outside the
    mask that is not valid (past the scan's end) does not count."""
    rng = np.random.default_rng(3)
    n = 90
    d = np.sqrt(((np.indices((n, n, n)) + 0.5 - n / 2) ** 2).sum(0)).astype(np.float32)  # 1 mm voxels
    lung = d < 20.0
    cavity = d < 40.0
    hu = np.where(cavity, -1000.0, 40.0).astype(np.float32)
    hu[lung] = -450.0
    hu += rng.normal(0, 15, hu.shape).astype(np.float32)
    mask = d < 24.0
    found = pleural_air(mask, hu, (1.0, 1.0, 1.0))
    shell = mask & ~lung
    assert (found & shell).sum() >= 0.9 * shell.sum()
    assert (found & lung).sum() <= 0.01 * lung.sum()
    kept = mask & ~found
    assert 2 * (kept & lung).sum() / (kept.sum() + lung.sum()) > 0.99
    assert not pleural_air(mask, hu, (1.0, 1.0, 1.0), valid=np.zeros_like(mask)).any()
    assert not pleural_air(mask, hu, (1.0, 1.0, 1.0), p=PleuralAirParams(min_ml=1e6)).any()  # min_ml is read


def _collapsed_lung_in_a_shell(n: int, cavity_mm: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """A collapsed lung (-450 HU sphere, radius 20 mm, 1 mm voxels) in a pneumothorax out to
    ``cavity_mm``; the network's mask reaches 4 mm into the air, which reads -930 HU there
    (partial volume of a thick-slice scan). Returns (lung, mask, cavity, HU)."""
    rng = np.random.default_rng(4)
    d = np.sqrt(((np.indices((n, n, n)) + 0.5 - n / 2) ** 2).sum(0)).astype(np.float32)
    lung, mask, cavity = d < 20.0, d < 24.0, d < cavity_mm
    hu = np.where(cavity, -1000.0, 40.0).astype(np.float32)
    hu[mask] = -930.0
    hu[lung] = -450.0
    hu += rng.normal(0, 15, hu.shape).astype(np.float32)
    return lung, mask, cavity, hu


def test_pleural_air_takes_a_partial_volume_shell_next_to_a_pneumothorax_left_out() -> None:
    """A thick-slice scan: the 4 mm of pneumothorax the network kept around a collapsed lung
    read -930 HU, not -1000 (partial volume), too light for the vessel-free air test. The shell
    goes because it is more air than lung and touches the pneumothorax the network left out;
    without that air outside the mask (not valid) nothing is taken, nor next to the lumen of a
    bronchus the mask ends in."""
    lung, mask, cavity, hu = _collapsed_lung_in_a_shell(90, 40.0)
    rng = np.random.default_rng(4)
    shell = mask & ~lung
    p = PleuralAirParams()
    assert 24.0 - 20.0 <= p.grow_mm and (ndimage.gaussian_filter(hu, p.smooth_mm)[shell] < p.hu).mean() < 0.01
    found = pleural_air(mask, hu, (1.0, 1.0, 1.0))
    assert (found & shell).sum() >= 0.95 * shell.sum()
    assert (found & lung).sum() <= 0.01 * lung.sum()
    assert not pleural_air(mask, hu, (1.0, 1.0, 1.0), valid=~cavity).any()
    # the shell goes by its contact with the air left out: with a larger contact needed, it stays
    assert not pleural_air(mask, hu, (1.0, 1.0, 1.0), p=PleuralAirParams(min_contact_mm2=1e9)).any()
    # a bronchus (16 mm lumen, 19 mL of air outside the mask, inside the lung's box) that the
    # mask ends in, its 6 mm branch going on inside the mask: that lumen is air too, but the
    # contact is a bronchus's cross-section (2 cm2), not a pleura
    hu = np.full((160, 60, 60), 40.0, np.float32)
    mask = np.zeros(hu.shape, bool)
    mask[100:, 5:55, 5:55] = True
    mask[5:, 5:55, 48:55] = True  # lung beside the bronchus as well
    hu[mask] = -860.0
    z, y, x = np.indices(hu.shape)
    r2 = (y - 30) ** 2 + (x - 25) ** 2
    hu[(r2 < 8**2) & (z < 100)] = -1000.0
    hu[(r2 < 3**2) & (z >= 100) & (z < 130)] = -1000.0
    hu += rng.normal(0, 15, hu.shape).astype(np.float32)
    assert ((r2 < 8**2) & (z < 100)).sum() / 1000 > 10
    assert not pleural_air(mask, hu, (1.0, 1.0, 1.0)).any()


def test_pleural_air_leaves_lung_around_a_bulla_left_out_alone() -> None:
    """The network left a walled bulla (vessel-free air, > 10 mL) out of its mask: air outside
    the mask that the mask touches, but behind a wall; aerated lung next to it is not air-like
    enough to go (at most the wall's partial-volume rim)."""
    cavity, _, hu = _chest_with_pleural_air(pneumothorax=False, bulla=True)
    bulla = cavity & (hu < -975) & ndimage.binary_erosion(hu < -500, iterations=2)
    mask = cavity & ~ndimage.binary_dilation(bulla, iterations=2)
    found = pleural_air(mask, hu, (1.5, 1.5, 1.5))
    assert found.sum() <= 0.002 * mask.sum()


@pytest.mark.parametrize("dtype", [np.uint16, np.int32])
def test_component_sizes_count_like_bincount(dtype: type) -> None:
    rng = np.random.default_rng(3)
    for n in (0, 1, 7, 300):
        labels = rng.integers(0, n + 1, size=(20, 30, 40)).astype(dtype)
        labels[0, 0, 0] = n  # the top label is counted, not dropped off the end
        np.testing.assert_array_equal(_util.component_sizes(labels, n), np.bincount(labels.ravel(), minlength=n + 1))


def _lobe_on_the_liver(consolidated: bool, spacing: float = 1.5) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """A lung cavity above a liver dome; its lower third (below a tilted fissure) aerated or
    consolidated (40 HU, like the liver's 55). Returns the cavity, the lower lobe, HU and a
    coarse-stage-like lung probability (the cavity at 4 mm, blurred)."""
    rng = np.random.default_rng(3)
    n = (int(150 / spacing), int(120 / spacing), int(100 / spacing))
    z, y, x = ((np.indices(n) + 0.5) * spacing).astype(np.float32)
    cavity = np.sqrt(((z - 85) / 60) ** 2 + ((y - 60) / 50) ** 2 + ((x - 50) / 40) ** 2) < 1.0
    liver = ~cavity & (z < 45 + 0.004 * ((y - 60) ** 2 + (x - 50) ** 2))
    lower = cavity & (z < 40 + 0.6 * y)  # behind and below an oblique fissure
    hu = np.full(n, 40.0, np.float32)  # chest wall
    hu[cavity] = -860.0
    hu[liver] = 55.0
    if consolidated:
        hu[lower] = 40.0
    hu += rng.normal(0, 15, n).astype(np.float32)
    prior = ndimage.gaussian_filter(cavity.astype(np.float32), 4.0 / spacing)
    return cavity, lower, hu, prior


def test_dense_lung_adds_a_consolidated_lobe_the_coarse_stage_calls_lung() -> None:
    """The fine stage left the consolidated lower lobe out (only the aerated lung is in its
    mask); the coarse stage's probability covers the whole cavity: the lobe is added, the
    liver under it and the chest wall are not."""
    cavity, lower, hu, prior = _lobe_on_the_liver(consolidated=True)
    added = dense_lung(cavity & ~lower, prior, hu, (1.5, 1.5, 1.5))
    assert np.array_equal(dense_lung(cavity & ~lower, prior, hu, (1.5, 1.5, 1.5), p=DenseLungParams()), added)
    for params in (DenseLungParams(sure=1.01), DenseLungParams(min_ml=1e4), DenseLungParams(hu=100.0)):  # each is read
        assert not dense_lung(cavity & ~lower, prior, hu, (1.5, 1.5, 1.5), p=params).any(), params
    assert (added & lower).sum() >= 0.9 * lower.sum()
    assert (added & ~cavity).sum() <= 0.05 * lower.sum()  # the coarse edge's blur, at most
    assert not (added & cavity & ~lower).any()


def test_dense_lung_leaves_a_clean_lung_and_unsure_regions_alone() -> None:
    """An aerated lung whole in the mask: the coarse stage's blurred rim around it is no lobe.
    A consolidated lobe the coarse stage is unsure of (p < 0.9 everywhere) is not added either."""
    cavity, lower, hu, prior = _lobe_on_the_liver(consolidated=False)
    assert not dense_lung(cavity, prior, hu, (1.5, 1.5, 1.5)).any()
    cavity, lower, hu, prior = _lobe_on_the_liver(consolidated=True)
    assert not dense_lung(cavity & ~lower, 0.85 * prior, hu, (1.5, 1.5, 1.5)).any()
    # dense but not touching the lung mask (an organ the coarse stage mistook): not lung
    assert not dense_lung(np.zeros_like(cavity), prior, hu, (1.5, 1.5, 1.5)).any()


def test_dense_lung_needs_a_little_of_the_fine_networks_belief() -> None:
    """The fine network gives a consolidated lobe a little lung probability (a few hundredths);
    soft tissue that the coarse stage's edge takes in where a view cuts the lung gets next to
    none: with the network's P(background) at hand, only the first is added."""
    cavity, lower, hu, prior = _lobe_on_the_liver(consolidated=True)
    lung = cavity & ~lower
    without = dense_lung(lung, prior, hu, (1.5, 1.5, 1.5))
    assert without.sum() >= 0.9 * lower.sum()
    for belief, kept in ((0.03, True), (0.005, False)):
        background = np.where(lung, 0.02, 1.0 - belief).astype(np.float32)
        added = dense_lung(lung, prior, hu, (1.5, 1.5, 1.5), background=background)
        assert np.array_equal(added, without) if kept else not added.any(), belief
    low = DenseLungParams(min_network=0.004)
    assert np.array_equal(dense_lung(lung, prior, hu, (1.5, 1.5, 1.5), p=low, background=background), without)


def test_dense_lung_switched_off_reports_what_it_would_add() -> None:
    """Off, the rule changes nothing but still looks, on every second voxel: the volume it
    would add is the rule's own within a tenth; a clean lung, a switched-off look
    (``warn_ml`` 0) and a lattice whose lobe lies past the scan report none."""
    cavity, lower, hu, prior = _lobe_on_the_liver(consolidated=True)
    lung = cavity & ~lower
    lung.flags.writeable = False
    ctx = FineContext(hu=hu, spacing_xyz=(1.5, 1.5, 1.5), inside=np.ones(hu.shape, bool), in_scan=np.ones(hu.shape, bool),
                      network_lung=lung, coarse_prior=lambda: prior, body_centre_yx=lambda: np.zeros((hu.shape[0], 2)))
    added = dense_lung(lung, prior, hu, (1.5, 1.5, 1.5)).sum() * ctx.voxel_ml
    off = RuleSet().dense_lung
    out, reports = run_rules("fine", lung, ctx, RuleSet())
    assert not off.enabled and np.array_equal(out, lung) and not reports[0].enabled and reports[0].added_ml == 0
    assert reports[0].would_add_ml == pytest.approx(added, rel=0.1) and added > 100
    assert reports[0].to_dict()["would_add_ml"] == round(reports[0].would_add_ml, 1)
    assert reports[0].plus(reports[0]).would_add_ml == pytest.approx(2 * reports[0].would_add_ml)
    assert dense_lung_check(lung, ctx, dataclasses.replace(off, warn_ml=0.0)).would_add_ml == 0
    assert dense_lung_check(cavity, ctx, off).would_add_ml == 0  # nothing left out
    beyond = dataclasses.replace(ctx, in_scan=~lower)  # the lobe beyond the scan's faces
    assert dense_lung_check(lung, beyond, off).would_add_ml <= 0.1 * added
    assert "would_add_ml" not in RuleReport("dense_lung", "fine", enabled=False).to_dict()


def _consolidation_against_the_ribs(spacing: float = 1.5) -> dict[str, np.ndarray]:
    """Axial slices through a chest: muscle (45 HU) around and between the ribs (arcs of bone
    at 100-106 mm from the axis, 20 degrees long with 10 degree gaps, turning with height as
    ribs run obliquely), aerated lung inside them out to 97 mm, a heart of 40 HU in the middle,
    and a consolidation (40 HU) in the lung's lateral wedge out to the wall. ``lung``: the
    aerated lung; ``core``: the consolidation out to 84 mm, which the coarse stage found;
    ``rim``: the rest of it, out to the wall."""
    rng = np.random.default_rng(5)
    n = (24, int(260 / spacing), int(260 / spacing))
    z, y, x = (np.indices(n) + 0.5).astype(np.float32) * spacing
    r = np.hypot(y - 130.0, x - 130.0)
    angle = np.degrees(np.arctan2(y - 130.0, x - 130.0)) % 360
    body = r < 125
    ribs = body & (r >= 100) & (r < 106) & (((angle + 1.5 * z) % 30) < 20)
    heart = r < 35
    cavity = (r < 97) & (r > 38)
    wedge = cavity & ((angle < 30) | (angle > 330)) & (r > 45)
    core = wedge & (r < 84)
    hu = np.full(n, -1000.0, np.float32)
    hu[body] = 45.0
    hu[ribs] = 450.0
    hu[cavity] = -850.0
    hu[wedge] = 40.0
    hu[heart] = 40.0
    hu[heart & (r > 20) & (r < 30) & ((angle < 10) | (angle > 350))] = 300.0  # an enhancing vessel, not a rib
    hu += rng.normal(0, 15, n).astype(np.float32)
    centre = np.full((n[0], 2), (n[1] - 1) / 2, np.float32)
    return {"hu": hu, "lung": cavity & ~wedge, "core": core, "rim": wedge & ~core, "body": body, "heart": heart,
            "cavity": cavity, "r": r, "centre": centre}


def test_dense_to_wall_follows_a_consolidation_out_to_the_ribs() -> None:
    """The coarse stage's mask of a consolidation stops 13 mm short of the ribs: the rest of
    it, out to the ribs, is added; the muscle between and outside the ribs (the same density)
    is not, nor the heart (the same density, nearer the body's axis)."""
    c = _consolidation_against_the_ribs()
    out = dense_to_wall(c["core"], c["lung"], c["hu"], (1.5, 1.5, 1.5), c["centre"], allowed=c["body"])
    assert (out & c["rim"]).sum() >= 0.85 * c["rim"].sum()
    assert not (out & c["heart"]).any()
    assert not (out & (c["lung"] | c["core"])).any()
    assert (out & ~c["cavity"]).sum() <= 0.02 * c["rim"].sum()  # the ribs' blurred inner edge, at most


def test_dense_to_wall_follows_the_wall_down_into_the_recess() -> None:
    """Below the lobe the coarse stage found, the liver dome (120 HU, contrast) fills the
    middle and the consolidated lung only the recess between it and the ribs: the recess is
    added up to the reach below the lobe, the liver is not."""
    c = _consolidation_against_the_ribs()
    below = np.arange(c["hu"].shape[0])[:, None, None] < 12
    liver = below & c["core"]
    hu = c["hu"].copy()
    hu[liver] += 80.0
    core = c["core"] & ~below
    out = dense_to_wall(core, c["lung"], hu, (1.5, 1.5, 1.5), c["centre"], allowed=c["body"])
    recess = c["rim"] & below
    assert (out & recess).sum() >= 0.8 * recess.sum()
    assert not (out & liver).any()
    assert (out & ~c["cavity"]).sum() <= 0.02 * c["rim"].sum()


def test_dense_to_wall_needs_ribs_and_stops_at_fat() -> None:
    """Without ribs around it (an abdominal slice) nothing is added; extrapleural fat between
    the consolidation and the ribs stops it (the lung ends there)."""
    c = _consolidation_against_the_ribs()
    hu = c["hu"].copy()
    hu[hu > 300] = 45.0  # no ribs: muscle only
    assert not dense_to_wall(c["core"], c["lung"], hu, (1.5, 1.5, 1.5), c["centre"], allowed=c["body"]).any()
    # the same with the ribs there but a bone threshold nothing reaches
    assert not dense_to_wall(c["core"], c["lung"], c["hu"], (1.5, 1.5, 1.5), c["centre"], allowed=c["body"],
                             p=DenseToWallParams(rib_hu=1e9)).any()
    short = dense_to_wall(c["core"], c["lung"], c["hu"], (1.5, 1.5, 1.5), c["centre"], allowed=c["body"],
                          p=DenseToWallParams(reach_mm=4.5))  # the reach is read: not out to the ribs (97 mm)
    assert short.any() and not (short & (c["r"] > 84 + 2 * 4.5 + 1.5)).any()  # out, then along the wall
    hu = c["hu"].copy()
    fat = c["rim"] & (c["r"] > 88)
    hu[fat] = -100.0
    out = dense_to_wall(c["core"], c["lung"], hu, (1.5, 1.5, 1.5), c["centre"], allowed=c["body"])
    assert (out & c["rim"] & ~fat).sum() >= 0.85 * (c["rim"] & ~fat).sum()
    assert not (out & (c["r"] > 88)).any()


# ----------------------------------------------------------------------------- RuleSet
SWITCHABLE = [s.name for s in STEPS if s.switchable]
DEFAULT_ON = {n: n not in ("dense_lung", "dense_to_wall") for n in SWITCHABLE}
ALL_ON = RuleSet().switched(on=SWITCHABLE)  # every rule on, as the fine-grid tests need
ALWAYS_ON = [s.name for s in STEPS if not s.switchable]


def test_steps_are_ten_in_one_order() -> None:
    assert [s.name for s in STEPS] == ["dense_lung", "dense_to_wall", "pleural_air", "body", "airways", "fat", "edge_snap",
                                       "sides", "components", "gas"]
    assert [s.grid for s in STEPS] == ["fine"] * 3 + ["scan"] * 7
    assert ALWAYS_ON == ["body", "sides", "components"]
    # the scan's voxels go after the last step that reads them (gas: only where the coarse stage was unsure of a side)
    assert [s.name for s in STEPS if s.reads_scan and s.grid == "scan"] == ["fat", "edge_snap", "gas"]
    assert [s.name for s in STEPS if s.reads_when] == ["gas"]


def test_rule_set_defaults_round_trip_through_a_dict() -> None:
    import json

    defaults = RuleSet()
    data = defaults.to_dict()
    assert list(data) == [s.name for s in STEPS]
    assert {n: data[n]["enabled"] for n in SWITCHABLE} == DEFAULT_ON  # dense_lung, dense_to_wall off (rule ablation)
    assert all("enabled" not in data[n] for n in ALWAYS_ON)  # nothing to switch
    assert data["pleural_air"]["hu"] == PleuralAirParams().hu and data["fat"]["hu"] == list(FatParams().hu)
    assert RuleSet.from_dict(data) == defaults
    assert RuleSet.from_dict(json.loads(json.dumps(data))) == defaults  # tuples come back from lists
    assert RuleSet.from_dict(None) == RuleSet.from_dict({}) == defaults  # a model file without them
    assert all(defaults.enabled(s.name) == DEFAULT_ON.get(s.name, True) for s in STEPS)
    changed = defaults.updated({"fat": {"hu": [-150, -50]}, "components": {"min_ml": 2}})
    assert RuleSet.from_dict(json.loads(json.dumps(changed.to_dict()))) == changed
    assert changed.fat.hu == (-150.0, -50.0) and changed.components.min_ml == 2.0


def test_rule_set_updated_switches_and_sets_parameters() -> None:
    defaults = ALL_ON
    new = defaults.updated({"dense_lung": False, "pleural_air": {"min_ml": 20}})
    assert not new.enabled("dense_lung") and new.enabled("pleural_air")
    assert new.pleural_air.min_ml == 20.0 and isinstance(new.pleural_air.min_ml, float)
    assert new.pleural_air == PleuralAirParams(min_ml=20.0)  # the other parameters stay
    assert new.dense_lung == DenseLungParams(enabled=False)
    for name in ("dense_to_wall", "body", "airways", "fat", "edge_snap", "gas", "sides", "components"):
        assert getattr(new, name) == getattr(defaults, name), name
    assert defaults == ALL_ON and defaults.enabled("dense_lung")  # a copy: the original is frozen
    # changes build on the copy they are applied to
    assert new.updated({"pleural_air": {"hu": -990}}).pleural_air == PleuralAirParams(min_ml=20.0, hu=-990.0)
    assert new.updated({"dense_lung": True}).dense_lung == DenseLungParams(enabled=True)
    assert defaults.updated({}) == defaults


@pytest.mark.parametrize("name", SWITCHABLE)
def test_rule_set_bool_shorthand(name: str) -> None:
    off = ALL_ON.updated({name: False})
    assert off == ALL_ON.updated({name: {"enabled": False}}) == ALL_ON.switched(off=[name])
    assert not off.enabled(name)
    assert all(off.enabled(other) for other in (s.name for s in STEPS) if other != name)
    assert off.updated({name: True}) == ALL_ON == off.switched(on=[name])


@pytest.mark.parametrize(("changes", "message"), [
    ({"lobes": False}, "unknown rule 'lobes' (rules: dense_lung, "),                     # unknown rule
    ({"fat": True, "postprocess": {}}, "unknown rule 'postprocess'"),
    ({"fat": {"smooth": 2.0}}, "unknown config key {where}.fat.smooth (allowed: "),     # unknown parameter
    ({"pleural_air": {"min_ml": 20, "grow": 1}}, "unknown config key {where}.pleural_air.grow "),
    ({"body": {"enabled": True, "threshold": -400}},
     "unknown config key {where}.body.threshold (allowed: air_cm2, air_hu, air_share, cut_share, hu, padding_hu, "
     "padding_max_hu, part_share, table_lung_share, table_share)"),
    ({"pleural_air": {"min_ml": "20 mL"}}, "{where}.pleural_air.min_ml: expected a number"),  # wrong types
    ({"pleural_air": {"min_ml": True}}, "{where}.pleural_air.min_ml: expected a number"),
    ({"fat": {"enabled": "no"}}, "{where}.fat.enabled: expected true or false"),
    ({"fat": {"hu": -100}}, "{where}.fat.hu: expected a list"),
    ({"fat": {"hu": [-200, -100, -30]}}, "{where}.fat.hu: expected 2 values"),
    ({"fat": {"hu": ["a", -30]}}, "{where}.fat.hu[0]: expected a number"),
    ({"dense_to_wall": {"rib_bins": 120.5}}, "{where}.dense_to_wall.rib_bins: expected an integer"),
    ({"edge_snap": "off"}, "{where}.edge_snap: expected true, false or a mapping"),
    ({"airways": 0}, "{where}.airways: expected true, false or a mapping"),
])
def test_rule_set_errors_name_what_is_wrong(changes: dict, message: str) -> None:
    """Each error names the rule or parameter (and, but for an unknown rule, where it came from)."""
    for where in ("rules", "model.refine"):
        with pytest.raises(ConfigError) as err:
            RuleSet.from_dict(changes, where) if where != "rules" else RuleSet().updated(changes)
        assert message.format(where=where) in str(err.value), str(err.value)


def test_rule_set_rejects_what_is_not_a_mapping_and_unknown_names() -> None:
    with pytest.raises(ConfigError, match="expected a mapping"):
        RuleSet().updated(["fat"])  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="'nope'"):
        RuleSet().enabled("nope")
    with pytest.raises(ConfigError, match="'nope'"):
        RuleSet().switched(off=["nope"])


@pytest.mark.parametrize("name", ALWAYS_ON)
def test_always_on_steps_cannot_be_switched_off(name: str) -> None:
    for change in (False, {"enabled": False}):
        with pytest.raises(ConfigError, match=f"{name}.*always on"):
            RuleSet().updated({name: change})
    with pytest.raises(ConfigError, match=f"{name}.*always on"):
        RuleSet().switched(off=[name])
    # switching one on is harmless, and its parameters can still change
    assert RuleSet().updated({name: True}) == RuleSet() == RuleSet().updated({name: {"enabled": True}})
    assert RuleSet().switched(on=[name]) == RuleSet() and RuleSet().enabled(name)


def test_switched_rejects_a_rule_both_on_and_off() -> None:
    with pytest.raises(ConfigError, match="'fat'"):
        RuleSet().switched(on=["fat", "airways"], off=["dense_lung", "fat"])
    with pytest.raises(ConfigError, match="'body'"):
        RuleSet().switched(on=["body"], off=["body"])
    rule_set = RuleSet().switched(on=["fat"], off=["dense_lung", "edge_snap"])
    assert rule_set.enabled("fat") and not rule_set.enabled("dense_lung") and not rule_set.enabled("edge_snap")
    assert RuleSet().switched() == RuleSet()


def test_rule_report_counts_voxels_of_its_grid() -> None:
    class Grid:
        grid = "scan"
        voxel_ml = 0.002

    report = RuleReport.of("fat", Grid(), added=3, removed=500, warnings=["w"])  # type: ignore[arg-type]
    assert report == RuleReport("fat", "scan", True, 0.006, 1.0, ("w",))
    total = report.plus(RuleReport("fat", "scan", False, 1.0, 0.34, ("v",)))  # two fine regions
    assert total.name == "fat" and total.enabled and total.warnings == ("w", "v")
    assert total.added_ml == pytest.approx(1.006) and total.removed_ml == pytest.approx(1.34)
    assert total.to_dict() == {"enabled": True, "grid": "scan", "added_ml": 1.0, "removed_ml": 1.3}


# ----------------------------------------------------------------------------- run_rules
def _fine_case() -> tuple[np.ndarray, FineContext, dict[str, np.ndarray]]:
    """A fine region's lattice (1.5 mm) through the chest with ribs: the network's lung is the
    aerated lung only, the coarse stage is sure of the consolidation's core (dense_lung adds
    it, dense_to_wall follows it out to the ribs), and a pocket of vessel-free air at the lateral
    wall on the other side, inside the network's lung (pleural_air takes it out)."""
    c = _consolidation_against_the_ribs()
    hu = c["hu"].copy()
    yy, xx = (np.indices(hu.shape[1:]) + 0.5) * 1.5
    angle = np.degrees(np.arctan2(yy - 130.0, xx - 130.0)) % 360
    pocket = c["lung"] & ((angle > 150) & (angle < 210))[None] & (c["r"] > 75)
    hu[pocket] = -1000.0 + np.random.default_rng(1).normal(0, 15, int(pocket.sum())).astype(np.float32)
    prior = c["core"].astype(np.float32)
    lung = c["lung"].copy()
    lung.flags.writeable = False  # a fine rule returns a new mask
    ctx = FineContext(hu=hu, spacing_xyz=(1.5, 1.5, 1.5), inside=c["body"], in_scan=np.ones(hu.shape, bool),
                      network_lung=lung, coarse_prior=lambda: prior, body_centre_yx=lambda: c["centre"])
    return lung, ctx, {**c, "pocket": pocket}


SCAN_SPACING = (0.8, 0.8, 2.5)  # x, y, z (mm)


def _scan_case() -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    """Five axial slices of a scan (0.8 x 0.8 x 2.5 mm, no noise: every count is exact): air
    around a body (+40 HU) holding two lungs (-850 HU), a bronchus (-1000 HU) entering the left
    one, and a fat pad (-100 HU) against the right one's medial side. The network's label (all 1:
    the sides come later) takes both lungs, the bronchus, the fat pad and a speck of the air
    around the patient; it misses a vessel (+40 HU) in the right lung and puts the left lung's
    lateral edge one voxel in. Returns HU, label and the parts."""
    nz, ny, nx = 5, 70, 110
    yy, xx = np.mgrid[:ny, :nx].astype(np.float32)
    body = ((yy - 35) / 30) ** 2 + ((xx - 55) / 50) ** 2 <= 1
    right = ((yy - 35) / 20) ** 2 + ((xx - 30) / 15) ** 2 <= 1  # low x in LPS: the patient's right
    left = ((yy - 35) / 20) ** 2 + ((xx - 80) / 15) ** 2 <= 1
    fat = ((yy - 40) ** 2 + (xx - 49) ** 2 <= 5.5**2) & ~right  # 92 pixels; the fat rule finds each of them
    trachea = ((yy - 35) ** 2 + (xx - 61) ** 2 <= 3.0**2) & ~left  # touches the left lung
    vessel = (np.abs(yy - 30) <= 1) & (np.abs(xx - 25) <= 1)
    speck = np.zeros((ny, nx), bool)
    speck[2:4, 2:4] = True
    hu2 = np.full((ny, nx), -1000.0, np.float32)
    hu2[body] = 40.0
    hu2[right | left] = -850.0
    hu2[fat] = -100.0
    hu2[vessel] = 40.0
    hu2[trachea] = -1000.0
    hu = np.repeat(hu2[None], nz, axis=0)
    label = np.zeros((nz, ny, nx), np.uint8)
    left_in = left & (ndimage.binary_erosion(left) | (xx < 75))  # the lateral edge one voxel in
    label[:, (right & ~vessel) | left_in | fat | trachea | speck] = 1
    assert (ndimage.binary_dilation(fat) & right).any() and (ndimage.binary_dilation(trachea) & left).any()
    parts = {"body": body, "right": right, "left": left, "fat": fat, "trachea": trachea, "speck": speck, "vessel": vessel}
    return hu, label, {k: np.repeat(v[None], nz, axis=0) for k, v in parts.items()}


def _scan_context(hu: np.ndarray, parts: dict[str, np.ndarray], events: list[str] | None = None) -> ScanContext:
    """The scan-grid context of :func:`_scan_case`; with ``events``, it logs each read of the
    scan ("read") and the release ("release"), and reading the scan after the release fails."""
    released = []

    def scan_hu() -> np.ndarray:
        assert not released, "the scan was read after it was released"
        if events is not None:
            events.append("read")
        return hu

    def release() -> None:
        released.append(True)
        if events is not None:
            events.append("release")

    nz, ny, nx = hu.shape
    geometry = spatial.Geometry((nx, ny, nz), SCAN_SPACING, (-40.0, 10.0, -300.0), (1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0))
    return ScanContext(scan_hu=scan_hu, release_scan=release, spacing_xyz=SCAN_SPACING, body=lambda z: parts["body"][z],
                       airways=lambda z: parts["trachea"][z], side_boundary=lambda z: np.full(ny, 55.0),
                       geometry=geometry, offset_xyz=(0, 0, 0))


def _step_by_step(grid: str, mask: np.ndarray, ctx: FineContext | ScanContext, rule_set: RuleSet
                  ) -> tuple[np.ndarray, dict[str, tuple[int, int]]]:
    """Each enabled step's own entry point in order on a copy of ``mask``: the final mask and,
    per step, the lung voxels it added and removed."""
    mask = mask.copy()
    changes = {}
    for step in STEPS:
        if step.grid != grid or not rule_set.enabled(step.name):
            continue
        before = mask > 0
        mask, _ = step.run(mask, ctx, getattr(rule_set, step.name))
        after = mask > 0
        changes[step.name] = int(np.count_nonzero(after & ~before)), int(np.count_nonzero(before & ~after))
    return mask, changes


def test_run_rule_seton_the_fine_grid() -> None:
    lung, ctx, c = _fine_case()
    out, reports = run_rules("fine", lung, ctx, ALL_ON)
    assert [r.name for r in reports] == ["dense_lung", "dense_to_wall", "pleural_air"]
    assert all(r.grid == "fine" and r.enabled and r.warnings == () for r in reports)
    expected, changes = _step_by_step("fine", lung, ctx, ALL_ON)
    assert np.array_equal(out, expected) and out.dtype == bool
    for report in reports:
        added, removed = changes[report.name]
        assert report.added_ml == pytest.approx(added * ctx.voxel_ml) and report.removed_ml == pytest.approx(removed * ctx.voxel_ml)
    # each rule did its part: all of them changed something
    assert changes["dense_lung"][0] > 0 and changes["dense_to_wall"][0] > 0 and changes["pleural_air"][1] > 0
    assert (out & c["core"]).sum() >= 0.9 * c["core"].sum() and (out & c["rim"]).sum() >= 0.85 * c["rim"].sum()
    assert not (out & c["pocket"]).any()
    assert changes["dense_lung"][1] == changes["dense_to_wall"][1] == changes["pleural_air"][0] == 0
    net = int(np.count_nonzero(out)) - int(np.count_nonzero(lung))
    assert sum(r.added_ml - r.removed_ml for r in reports) == pytest.approx(net * ctx.voxel_ml)
    assert ctx.voxel_ml == pytest.approx(1.5**3 / 1000)


def test_fine_rule_reports_count_only_what_lies_inside_the_scan() -> None:
    """A region's lattice reaches past the scan's faces, where it holds made-up air that is
    never pasted: a rule's change there (the network's lung in that air taken out as pleural
    air, say) is no change to the mask, and its report leaves it out (a cardiac crop once
    warned of 113 mL of pneumothorax, all of it beyond the scan)."""
    lung, ctx, c = _fine_case()
    whole, whole_reports = run_rules("fine", lung, ctx, ALL_ON)
    beyond = np.zeros(lung.shape, bool)
    beyond[:, :, : lung.shape[2] // 2] = True  # the pocket's side of the lattice lies past the scan
    assert (c["pocket"] & beyond).sum() == c["pocket"].sum()
    cut = dataclasses.replace(ctx, in_scan=~beyond)
    out, reports = run_rules("fine", lung, cut, ALL_ON)
    assert np.array_equal(out, whole)  # the same mask: only the counts differ
    for report, before in zip(reports, whole_reports):
        assert report.removed_ml <= before.removed_ml and report.added_ml <= before.added_ml
    assert reports[2].removed_ml == pytest.approx(np.count_nonzero(lung & ~whole & ~beyond) * ctx.voxel_ml)
    assert reports[2].removed_ml < whole_reports[2].removed_ml  # the pocket beyond the scan is not counted


@pytest.mark.parametrize("off", ["dense_lung", "dense_to_wall", "pleural_air"])
def test_a_fine_rule_switched_off_leaves_the_mask_as_without_it(off: str) -> None:
    lung, ctx, c = _fine_case()
    rule_set = ALL_ON.switched(off=[off])
    out, reports = run_rules("fine", lung, ctx, rule_set)
    assert [r.name for r in reports] == ["dense_lung", "dense_to_wall", "pleural_air"]
    assert [r.enabled for r in reports] == [r.name != off for r in reports]
    report = reports[[r.name for r in reports].index(off)]
    if off == "dense_lung":  # it still looks: what it would add, the mask left alone
        assert dataclasses.replace(report, would_add_ml=0.0) == RuleReport(off, "fine", enabled=False)
    else:
        assert report == RuleReport(off, "fine", enabled=False)
    expected, _ = _step_by_step("fine", lung, ctx, rule_set)
    assert np.array_equal(out, expected)
    default, _ = run_rules("fine", lung, ctx, ALL_ON)
    assert not np.array_equal(out, default)  # the rule mattered here
    if off == "dense_lung":  # nothing added, so nothing to follow out to the ribs
        assert reports[1].added_ml == 0 and not (out & ~lung).any()


def test_run_rule_seton_the_scan_grid() -> None:
    hu, label, parts = _scan_case()
    ctx = _scan_context(hu, parts)
    voxel_ml = float(np.prod(SCAN_SPACING)) / 1000
    mask = label.copy()
    out, reports = run_rules("scan", mask, ctx, RuleSet())
    assert out is mask  # in place: no copy of the scan's labels
    assert [r.name for r in reports] == ["body", "airways", "fat", "edge_snap", "sides", "components", "gas"]
    assert all(r.grid == "scan" and r.enabled and r.warnings == () for r in reports)
    expected, changes = _step_by_step("scan", label, _scan_context(hu, parts), RuleSet())
    np.testing.assert_array_equal(out, expected)
    by_name = {r.name: r for r in reports}
    for name, (added, removed) in changes.items():
        assert by_name[name].added_ml == pytest.approx(added * voxel_ml), name
        assert by_name[name].removed_ml == pytest.approx(removed * voxel_ml), name
    # each step's share, from the case itself
    assert by_name["body"].removed_ml == pytest.approx(parts["speck"].sum() * voxel_ml) and by_name["body"].added_ml == 0
    assert by_name["airways"].removed_ml == pytest.approx(parts["trachea"].sum() * voxel_ml)
    assert by_name["fat"].added_ml == 0
    assert by_name["fat"].removed_ml == pytest.approx(parts["fat"].sum() * voxel_ml)  # the pad's volume
    assert by_name["edge_snap"].added_ml > 0  # the left lung's edge, back onto the scan's
    assert by_name["gas"] == RuleReport("gas", "scan")  # the coarse stage was sure of both lungs
    assert by_name["sides"] == RuleReport("sides", "scan")  # labels change, the lung does not
    assert by_name["components"].added_ml == pytest.approx(parts["vessel"].sum() * voxel_ml)  # the hole filled
    assert by_name["components"].removed_ml == 0
    net = int(np.count_nonzero(out)) - int(np.count_nonzero(label))
    assert sum(r.added_ml - r.removed_ml for r in reports) == pytest.approx(net * voxel_ml)
    truth = np.where(parts["right"], 1, np.where(parts["left"], 2, 0))
    wrong = out != truth  # only the left lung's one-pixel tips, which the edge snap leaves out
    assert {(int(y), int(x)) for _, y, x in np.argwhere(wrong)} <= {(15, 80), (55, 80), (35, 95)} and not out[wrong].any()


def test_fat_rule_on_a_label_array_removes_the_blobs_volume() -> None:
    """The fat rule alone on the scan's grid: removed_ml is the fat pad's volume (its voxels
    times the voxel's volume), and nothing else changes."""
    from segpipe.refine import fat

    hu, label, parts = _scan_case()
    before = label.copy()
    ctx = _scan_context(hu, parts)
    out, report = fat.rule(label, ctx, FatParams())
    assert out is label
    np.testing.assert_array_equal(before & ~parts["fat"], out)  # the pad went, nothing else
    assert report == RuleReport("fat", "scan", removed_ml=report.removed_ml)
    assert report.removed_ml == pytest.approx(parts["fat"].sum() * ctx.voxel_ml)  # the pad's volume, to the voxel
    assert parts["fat"].sum() == 5 * 92
    _, report = fat.rule(label, ctx, FatParams())  # nothing left to take
    assert report.removed_ml == 0


@pytest.mark.parametrize("off", ["airways", "fat", "edge_snap"])
def test_a_scan_rule_switched_off_leaves_the_mask_as_without_it(off: str) -> None:
    hu, label, parts = _scan_case()
    rule_set = RuleSet().switched(off=[off])
    out, reports = run_rules("scan", label.copy(), _scan_context(hu, parts), rule_set)
    assert [r.name for r in reports] == ["body", "airways", "fat", "edge_snap", "sides", "components", "gas"]
    assert [r.enabled for r in reports] == [r.name != off for r in reports]
    assert reports[[r.name for r in reports].index(off)] == RuleReport(off, "scan", enabled=False)
    expected, _ = _step_by_step("scan", label, _scan_context(hu, parts), rule_set)
    np.testing.assert_array_equal(out, expected)
    default, _ = run_rules("scan", label.copy(), _scan_context(hu, parts), RuleSet())
    assert not np.array_equal(out, default)  # the rule mattered here


@pytest.mark.parametrize(("grid", "changes", "off"), [
    ("fine", {"dense_lung": {"sure": 1.01}}, "dense_lung"),  # a parameter that leaves the rule nothing to do
    ("fine", {"dense_to_wall": {"rib_hu": 1e9}}, "dense_to_wall"),
    ("fine", {"pleural_air": {"min_ml": 1e6}}, "pleural_air"),
    ("scan", {"fat": {"hu": [-60.0, -30.0]}}, "fat"),
    ("scan", {"edge_snap": {"hu": [-2000.0, -1500.0]}}, "edge_snap"),
])
def test_run_rule_setpasses_each_rule_its_parameters(grid: str, changes: dict, off: str) -> None:
    """A RuleSet's parameters reach the rule through run_rules: one that leaves a rule nothing
    to do gives the mask of that rule switched off (and a report of nothing done)."""
    if grid == "fine":
        lung, ctx, _ = _fine_case()
        runs = [run_rules(grid, lung, ctx, r) for r in (ALL_ON.updated(changes), ALL_ON.switched(off=[off]), ALL_ON)]
    else:
        hu, label, parts = _scan_case()
        runs = [run_rules(grid, label.copy(), _scan_context(hu, parts), r)
                for r in (ALL_ON.updated(changes), ALL_ON.switched(off=[off]), ALL_ON)]
    (changed, reports), (switched_off, _), (default, _) = runs
    assert np.array_equal(changed, switched_off) and not np.array_equal(changed, default)
    report = next(r for r in reports if r.name == off)
    assert report.enabled and report.added_ml == report.removed_ml == 0


def test_components_min_ml_reaches_the_scan_grid() -> None:
    hu, label, parts = _scan_case()
    ctx = _scan_context(hu, parts)
    before = int(np.count_nonzero(label))
    out, reports = run_rules("scan", label, ctx, RuleSet().updated({"components": {"min_ml": 1e6}}))
    assert not out.any()  # both lungs are below it
    last = reports[-2]
    assert last.name == "components" and len(last.warnings) == 2
    assert "removed a right lung" in last.warnings[0] and "removed a left lung" in last.warnings[1]
    assert last.added_ml == 0  # the hole it filled went with the lung
    assert sum(r.added_ml - r.removed_ml for r in reports) == pytest.approx(-before * ctx.voxel_ml)  # every voxel accounted for


@pytest.mark.parametrize(("off", "after"), [
    ((), "edge_snap"),  # gas reads the scan only where a side is unsure: none here
    (("fat",), "edge_snap"),
    (("edge_snap",), "fat"),
    (("fat", "edge_snap"), None),  # no step reads the scan: released before the first
    (("airways", "edge_snap"), "fat"),
])
def test_the_scan_is_released_once_after_its_last_reader(monkeypatch: pytest.MonkeyPatch, off: tuple[str, ...],
                                                         after: str | None) -> None:
    import dataclasses

    events: list[str] = []

    def logged(step: rules.Step) -> rules.Step:
        def run(mask: np.ndarray, ctx: ScanContext, p: object) -> tuple[np.ndarray, RuleReport]:
            events.append(f"start {step.name}")
            out = step.run(mask, ctx, p)
            events.append(f"end {step.name}")
            return out

        return dataclasses.replace(step, run=run)

    monkeypatch.setattr(rules, "STEPS", tuple(logged(s) for s in STEPS))
    hu, label, parts = _scan_case()
    rule_set = RuleSet().switched(off=list(off))
    out, reports = run_rules("scan", label, _scan_context(hu, parts, events), rule_set)
    assert events.count("release") == 1  # once; the context fails a read after it
    at = events.index("release")
    if after is None:  # before the first step, and the scan was never read
        assert at == 0 and "read" not in events
    else:  # right after the last reader ends, before the next step starts
        assert events[at - 1] == f"end {after}" and events[at + 1].startswith("start ")
        assert "read" in events[:at] and "read" not in events[at:]
    ran = [e[len("start "):] for e in events if e.startswith("start")]
    assert ran == [s.name for s in STEPS if s.grid == "scan" and s.name not in off]
    assert [r.enabled for r in reports] == [s.name not in off for s in STEPS if s.grid == "scan"]
    expected, _ = _step_by_step("scan", _scan_case()[1], _scan_context(hu, parts), rule_set)
    np.testing.assert_array_equal(out, expected)


def test_the_scan_is_held_for_gas_only_where_a_side_is_unsure() -> None:
    """Rule ``gas`` runs last and reads the scan for a side the coarse stage was unsure of: the
    scan is released after it there, and after ``edge_snap`` elsewhere."""
    import dataclasses

    hu, label, parts = _scan_case()
    for unsure, after in ((frozenset(), "edge_snap"), (frozenset({2}), "gas")):
        events: list[str] = []
        ctx = dataclasses.replace(_scan_context(hu, parts, events), unsure_sides=unsure)
        _, reports = run_rules("scan", label.copy(), ctx, RuleSet())
        names = [r.name for r in reports]
        at = events.index("release")
        assert events.count("release") == 1 and "read" not in events[at:]
        # the steps that read: fat and edge_snap (per slice) and, for an unsure side, gas once more
        if after == "gas":
            assert names[-1] == "gas" and reports[-1].removed_ml == 0  # the left lung is lung, not gas
            assert events.count("read") > _read_count_without_gas(hu, label, parts)
        else:
            assert events.count("read") == _read_count_without_gas(hu, label, parts)


def _read_count_without_gas(hu: np.ndarray, label: np.ndarray, parts: dict[str, np.ndarray]) -> int:
    events: list[str] = []
    run_rules("scan", label.copy(), _scan_context(hu, parts, events), RuleSet().switched(off=["gas"]))
    return events.count("read")


def test_all_fine_rule_setoff_leave_the_network_lung() -> None:
    lung, ctx, _ = _fine_case()
    off = RuleSet().switched(off=["dense_lung", "dense_to_wall", "pleural_air"]).updated({"dense_lung": {"warn_ml": 0}})
    out, reports = run_rules("fine", lung, ctx, off)
    assert np.array_equal(out, lung)
    assert reports == [RuleReport(n, "fine", enabled=False) for n in ("dense_lung", "dense_to_wall", "pleural_air")]
    assert all(r.to_dict() == {"enabled": False, "grid": "fine", "added_ml": 0.0, "removed_ml": 0.0} for r in reports)
    looked, _ = run_rules("fine", lung, ctx, off.updated({"dense_lung": {"warn_ml": 50}}))
    assert np.array_equal(looked, lung)  # looking changes nothing


# ----------------------------------------------------------------------------- describe
def test_describe_gives_ten_numbered_lines_in_order() -> None:
    lines = describe(RuleSet())
    assert len(lines) == 10
    for i, (line, step) in enumerate(zip(lines, STEPS), 1):
        assert line.startswith(f"{i}. {step.name} "), line
        assert line.split()[2] == step.grid
        assert line.split()[3] == (("on" if DEFAULT_ON[step.name] else "off") if step.switchable else "always")
        assert step.summary in line
    assert "[hu=-975.0, smooth_mm=1.0" in lines[2]  # the parameters, without "enabled"
    assert "enabled" not in "".join(lines)
    assert lines[8].endswith("[min_ml=1.0, min_support=0.5]")
    assert lines[9].endswith("[air_hu=-980.0, max_air_share=0.1]")
    changed = describe(RuleSet().updated({"dense_lung": False, "pleural_air": {"min_ml": 20}}))
    assert changed[0].split()[3] == "off" and changed[2].split()[3] == "on" and "min_ml=20.0" in changed[2]
    assert changed[1:2] + changed[3:] == lines[1:2] + lines[3:]
    assert "[hu=[-200.0, -30.0], smooth_mm=1.0, open_mm=2.0, lung_mid_hu=-475.0]" in lines[5]


# ----------------------------------------------------------------------------- body in view
def _coarse_chest_slice(n: int = 60) -> np.ndarray:
    """One coarse (4 mm) axial slice: air around an elliptic body with two lungs in it and a
    mattress under it; (1, y, x), canonical LPS (y grows posteriorly)."""
    rng = np.random.default_rng(0)
    yy, xx = np.mgrid[:n, :n].astype(float)
    hu = np.full((n, n), -1000.0) + rng.normal(0, 8, (n, n))
    body = ((xx - n / 2) / (0.42 * n)) ** 2 + ((yy - n / 2) / (0.3 * n)) ** 2 <= 1
    hu[body] = 40.0
    for cx in (0.33 * n, 0.67 * n):
        lung = ((xx - cx) / (0.12 * n)) ** 2 + ((yy - n / 2) / (0.2 * n)) ** 2 <= 1
        hu[lung] = -850.0 + rng.normal(0, 20, lung.sum())
    hu[int(0.82 * n):int(0.9 * n), 2:-2] = -900.0  # the table's mattress under the patient
    return hu[None].astype(np.float32)


def test_body_in_view_is_the_filled_body_when_air_surrounds_the_patient() -> None:
    from segpipe.refine import body_in_view

    hu = _coarse_chest_slice()
    np.testing.assert_array_equal(body_in_view(hu, (4.0, 4.0, 4.0)), body_interior(hu))


def test_body_in_view_leaves_out_the_air_a_tables_shells_enclose() -> None:
    """A table of two shells with air between them (a sandwich table) encloses that air as
    the chest wall encloses a lung, but apart from the patient: not body, nor are arms beside
    the chest; the patient's inside is unchanged."""
    from segpipe.refine import body_in_view

    hu = _coarse_chest_slice()[0]
    n = hu.shape[0]
    plain = body_in_view(hu[None], (4.0, 4.0, 4.0))[0]
    hu[int(0.9 * n):int(0.97 * n), 3:-3] = 300.0  # the table: shells (bone-like) ...
    hu[int(0.92 * n):int(0.95 * n), 5:-5] = -1000.0  # ... with air between them
    yy, xx = np.mgrid[:n, :n].astype(float)
    arms = (np.minimum(np.abs(xx - 1.5), np.abs(xx - n + 2.5)) / 1.2) ** 2 + ((yy - n / 2) / 6.0) ** 2 <= 1  # apart from the chest
    hu[arms] = 40.0
    got = body_in_view(hu[None], (4.0, 4.0, 4.0))[0]
    np.testing.assert_array_equal(got, plain)
    assert not got[int(0.9 * n):].any() and not (got & arms).any()


def test_body_in_view_keeps_lungs_the_field_of_view_cuts() -> None:
    from segpipe.refine import body_in_view

    hu = _coarse_chest_slice()
    n = hu.shape[1]
    crop = hu[:, int(0.3 * n):int(0.7 * n), int(0.25 * n):int(0.75 * n)]  # inside the body: both lungs cut
    lung = crop < -500
    assert not (body_interior(crop) & lung).any()  # the old body: nothing encloses the cut lungs
    assert (body_in_view(crop, (4.0, 4.0, 4.0)) & lung).sum() == lung.sum()


def _circle_outside(shape: tuple[int, int]) -> np.ndarray:
    yy, xx = np.mgrid[:shape[0], :shape[1]]
    r = min(shape) / 2
    return (yy - (shape[0] - 1) / 2) ** 2 + (xx - (shape[1] - 1) / 2) ** 2 > r * r


def test_padding_of_finds_air_valued_padding_not_air() -> None:
    from segpipe.refine import padding_of

    rng = np.random.default_rng(1)
    hu = np.repeat(_coarse_chest_slice(), 6, axis=0) + rng.normal(0, 8, (6, 60, 60)).astype(np.float32)
    hu = np.maximum(hu, -1024.0)  # air clipped at -1024 here and there, as scanners store it
    hu[0, 0, 0] = hu[0, -1, -1] = -1024.0  # the first slice's corners among them
    assert padding_of(hu) is None  # noisy air is not padding, even where clipped
    outside = _circle_outside(hu.shape[1:])
    padded = hu.copy()
    padded[:, outside] = -1024.0
    np.testing.assert_array_equal(padding_of(padded)[0], outside)
    assert padding_of(padded[:3]) is None  # too few slices to tell
    padded[:, outside] = -3024.0
    np.testing.assert_array_equal(padding_of(padded)[0], outside)
    assert padding_of(padded + 2100.0) is None  # the padding's value (-924) is not air-like
    padded[:, outside] = -1024.0
    padded[2, 30, 30] = -1200.0  # a darker voxel elsewhere (noise, a streak) changes nothing
    np.testing.assert_array_equal(padding_of(padded)[0], outside)


def test_body_in_view_keeps_lungs_cut_by_a_circle_padded_with_air() -> None:
    from segpipe.refine import body_in_view, padding_of

    hu = np.repeat(_coarse_chest_slice(), 5, axis=0)
    n = hu.shape[1]
    crop = hu[:, :, int(0.25 * n):int(0.75 * n)].copy()  # the sides cut through both lungs
    outside = _circle_outside(crop.shape[1:])
    crop[:, outside] = -1024.0
    lungs = (crop[0] > -950) & (crop[0] < -500)
    lungs[int(0.8 * n):] = False  # not the mattress
    assert body_in_view(crop, (4.0, 4.0, 4.0))[0][lungs].mean() < 0.5  # the circle taken for air around the patient
    body = body_in_view(crop, (4.0, 4.0, 4.0), padding=padding_of(crop)[0])[0]
    assert body[lungs].mean() > 0.98 and not body[outside].any()


def test_body_in_view_keeps_an_emphysematous_lung_the_view_cuts() -> None:
    """Emphysema's pure-air patches (several cm2) in a lung that the field of view cuts do not
    make it air around the patient: that is mostly pure air, a lung is not."""
    from segpipe.refine import body_in_view

    hu = _coarse_chest_slice()
    n = hu.shape[1]
    crop = hu[:, int(0.3 * n):int(0.7 * n), int(0.25 * n):int(0.75 * n)].copy()  # inside the body: both lungs cut
    lung = (crop > -950) & (crop < -500)
    crop[0, 8:11, 3:7] = -1010.0  # bullae at the cut edge: 12 pixels, 1.9 cm2
    crop[0, 14:17, 3:7] = -1010.0
    lung |= crop < -1000
    assert (body_in_view(crop, (4.0, 4.0, 4.0))[0] & lung[0]).sum() == lung[0].sum()
    assert not (body_in_view(crop, (4.0, 4.0, 4.0), BodyParams(air_share=0.0))[0] & lung[0]).all()  # by pure air alone: out


def test_body_in_view_leaves_out_air_gaps_between_the_patient_and_the_circle() -> None:
    """A circle slightly narrower than the patient's width: it cuts the sides, and thin gaps of
    air remain between the body and the circle in front and behind. They are air around the
    patient (mostly pure air, partial volume at the skin and the ring at the circle
    notwithstanding), whatever the padding's value."""
    from segpipe.refine import body_in_view, padding_of

    rng = np.random.default_rng(3)
    n, mm = 240, 1.0
    yy, xx = np.mgrid[:n, :n].astype(float) - (n - 1) / 2
    body = (xx / 150) ** 2 + (yy / 90) ** 2 <= 1  # 300 x 180 mm
    outside = xx ** 2 + yy ** 2 > 110 ** 2  # the circle: radius 110 mm
    for pad in (-1024.0, -3024.0):
        hu = np.where(body, 40.0, -1000.0) + rng.normal(0, 10, (4, n, n))
        hu = np.maximum(hu, -1024.0).astype(np.float32)
        hu[:, outside] = pad
        scan = sitk.GetImageFromArray(hu)
        scan.SetSpacing((mm, mm, 5.0))
        coarse = spatial.resample_image(scan, (3.0, 3.0, 5.0))
        a = sitk.GetArrayFromImage(coarse)
        found = padding_of(hu)
        fp = None if found is None else found[0]
        fp_c = None if fp is None else fp[::3, ::3][:a.shape[1], :a.shape[2]]
        got = body_in_view(a, (3.0, 3.0, 5.0), padding=fp_c)[0]
        gaps = ~body[::3, ::3][:a.shape[1], :a.shape[2]] & ~outside[::3, ::3][:a.shape[1], :a.shape[2]]
        gaps &= ndimage.binary_erosion(gaps, iterations=2)  # away from the skin and the circle's ring
        assert gaps.sum() > 100 and not got[gaps].any(), (pad, int(got[gaps].sum()), int(gaps.sum()))


def test_body_in_view_keeps_a_lung_along_one_side_of_the_circle() -> None:
    """A cardiac-centred field of view inside the body: a lung runs along the posterior arc of
    the circle on one side of the spine; it is not the table's mattress, which spans the width."""
    from segpipe.refine import body_in_view

    n = 40
    yy, xx = np.mgrid[:n, :n].astype(float)
    hu = np.full((n, n), 40.0, np.float32)  # tissue fills the view
    lung = (((xx - 26) / 16) ** 2 + ((yy - 27) / 15) ** 2 <= 1) & (xx > 14)  # the left lung, posterior and lateral
    hu[lung] = -850.0
    outside = _circle_outside((n, n))
    hu[outside] = -2048.0
    inside_lung = lung & ~outside
    assert (body_in_view(hu[None], (4.0, 4.0, 4.0))[0] & inside_lung).sum() == inside_lung.sum()
    # it runs along 50-60 % of the arc's columns: a mattress at table_share 0.5
    assert not (body_in_view(hu[None], (4.0, 4.0, 4.0), BodyParams(table_share=0.5))[0] & inside_lung).any()


def test_body_in_view_keeps_a_lung_the_network_sees_along_the_whole_posterior_arc() -> None:
    """A small field of view over one lung: the lung runs along the whole posterior arc of the
    circle, as the mattress would. Where the coarse network calls it lung it is inside; a
    region the network does not call lung is still the mattress."""
    from segpipe.refine import body_in_view

    n = 40
    yy, xx = np.mgrid[:n, :n].astype(float)
    hu = np.full((n, n), 40.0, np.float32)
    lung = ((xx - 20) / 22) ** 2 + ((yy - 30) / 14) ** 2 <= 1  # posterior, across the view
    hu[lung] = -850.0
    outside = _circle_outside((n, n))
    hu[outside] = -2048.0
    inside_lung = lung & ~outside
    assert not (body_in_view(hu[None], (4.0, 4.0, 4.0))[0] & inside_lung).any()  # by HU alone: the mattress
    called = np.zeros((1, n, n), bool)
    called[0] = inside_lung & (xx > 12)  # the network calls three quarters of it lung
    assert body_in_view(hu[None], (4.0, 4.0, 4.0), lung=called)[0][inside_lung].all()
    called[0] = inside_lung & (xx > 24)  # a third: not enough
    assert not (body_in_view(hu[None], (4.0, 4.0, 4.0), lung=called)[0] & inside_lung).any()
    with pytest.raises(ValueError, match="lung of shape"):
        body_in_view(hu[None], (4.0, 4.0, 4.0), lung=called[0])


def test_body_in_view_leaves_out_outside_air_padding_and_the_mattress_of_a_cut_slice() -> None:
    from segpipe.refine import body_in_view

    hu = _coarse_chest_slice()
    n = hu.shape[1]
    crop = hu[:, :, int(0.25 * n):int(0.75 * n)].copy()  # the sides cut through both lungs
    yy, xx = np.mgrid[:crop.shape[1], :crop.shape[2]]
    r = min(crop.shape[1:]) / 2
    circle = (yy - (crop.shape[1] - 1) / 2) ** 2 + (xx - (crop.shape[2] - 1) / 2) ** 2 > r * r
    padded = crop.copy()
    padded[:, circle] = -2048.0
    for image, called in ((crop, False), (padded, False), (padded, True)):
        lungs = (image[0] > -950) & (image[0] < -500)
        lungs[int(0.8 * n):] = False  # not the mattress
        body = body_in_view(image, (4.0, 4.0, 4.0), lung=lungs[None] if called else None)[0]
        assert body[lungs].mean() > 0.98  # cut lungs inside
        assert not body[:3].any()  # the air in front of the patient: outside
        assert not body[int(0.84 * n), crop.shape[2] // 2]  # the mattress: outside
        assert not body[image[0] < -1100].any()  # the scanner's padding: never body




@pytest.mark.parametrize("layer_mm", [7.5, 12.0])
def test_pleural_air_min_depth_takes_a_layer_of_air_not_a_band(layer_mm: float) -> None:
    """Vessel-free air along one wall of a lung mask: by default a layer 7.5 mm thick goes as a
    12 mm one does; with ``min_depth_mm`` 4.5 (a tenth of a pocket's voxels that deep: for scans
    whose metal streaks make pockets of that depth) the 7.5 mm layer stays and the 12 mm one
    still goes (thinner layers never did: the smoothing against the wall leaves too little air)."""
    n, k = 64, int(round(layer_mm / 1.5))
    mask = np.zeros((n, n, n), bool)
    mask[4:-4, 4:-4, 4:-4] = True
    hu = np.where(mask, -860.0, 40.0).astype(np.float32)
    layer = mask.copy()
    layer[:, :, 4 + k:] = False
    hu[layer] = -1000.0
    hu += np.random.default_rng(7).normal(0, 10, hu.shape).astype(np.float32)
    assert layer.sum() * 1.5**3 / 1000 > 20
    assert (pleural_air(mask, hu, (1.5, 1.5, 1.5)) & layer).sum() >= 0.9 * layer.sum()
    found = pleural_air(mask, hu, (1.5, 1.5, 1.5), p=PleuralAirParams(min_depth_mm=4.5))
    if layer_mm > 10:
        assert (found & layer).sum() >= 0.9 * layer.sum()
    else:
        assert not found.any()


def test_pleural_air_follows_only_a_body_of_air_of_min_outside_ml() -> None:
    """The shell of :func:`test_pleural_air_takes_a_partial_volume_shell_next_to_a_pneumothorax_left_out`,
    but the air the network left out around it is 4 mm thick (10-30 mL of it reads as
    vessel-free air next to the wall, as the dark bands of metal streaks that the network left
    out can): by default (``min_outside_ml`` 10) the shell goes; with 30 (the setting for scans
    with metal in the chest wall) nothing is followed into the mask."""
    lung, mask, cavity, hu = _collapsed_lung_in_a_shell(74, 28.0)
    p = PleuralAirParams()
    assert p.min_outside_ml < ((ndimage.gaussian_filter(hu, p.smooth_mm) < p.hu) & ~mask).sum() / 1000 < 30
    found = pleural_air(mask, hu, (1.0, 1.0, 1.0))
    assert (found & mask & ~lung).sum() >= 0.9 * (mask & ~lung).sum()
    assert not pleural_air(mask, hu, (1.0, 1.0, 1.0), p=PleuralAirParams(min_outside_ml=30.0)).any()


def test_pleural_air_warns_of_metal_in_a_region_it_took_air_from() -> None:
    """The rule took a pneumothorax out of a region that holds metal (a 6 mm disc of 3000 HU in
    the chest wall): its report says the streaks' dark bands may be what it took and names the
    metal setting; without metal, or with the metal setting on, it says nothing of the kind."""
    from segpipe.refine import pleural_air as pleural_air_module

    cavity, _, hu = _chest_with_pleural_air(pneumothorax=True, bulla=False)
    z, y, x = (np.indices(hu.shape) + 0.5) * 1.5

    def report(hu: np.ndarray, p: PleuralAirParams) -> tuple[str, ...]:
        ctx = FineContext(hu=hu, spacing_xyz=(1.5, 1.5, 1.5), inside=np.ones(hu.shape, bool), in_scan=np.ones(hu.shape, bool),
                          network_lung=cavity, coarse_prior=lambda: np.zeros(hu.shape, np.float32),
                          body_centre_yx=lambda: np.zeros((hu.shape[0], 2)))
        out, rep = pleural_air_module.rule(cavity, ctx, p)
        assert rep.removed_ml > 50 and not (out & ~cavity).any()
        return rep.warnings

    metal = hu.copy()
    metal[(z - 60) ** 2 + (y - 75) ** 2 + (x - 113) ** 2 < 3.0**2 * 4] = 3000.0
    assert report(hu, PleuralAirParams()) == ()
    warned = report(metal, PleuralAirParams())
    assert len(warned) == 1 and "metal" in warned[0] and "pleural_air.min_depth_mm=4.5" in warned[0]
    assert report(metal, PleuralAirParams(min_depth_mm=4.5)) == ()  # the setting on: no hint
