"""The spine as the midline of a view that cuts the body (segpipe.refine.spine)."""

from __future__ import annotations

import numpy as np
import pytest

from segpipe.refine.sides import split_sides
from segpipe.refine.spine import SPINE_MIN_ML, join_beyond_spine, part_at_spine, spine_x

SPACING = (4.0, 4.0, 4.0)
VOXEL_ML = 0.064


def _chest(spine_at: int | None = 30, rib: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """A 4 mm canonical (z, y, x) slab of soft tissue (40 HU) with a vertebra (400 HU, 3.6 x 3.2 cm)
    in the posterior half at x index ``spine_at``, and a thin rib (a 1 x 8 voxel bar) in front."""
    hu = np.full((12, 60, 70), 40.0, np.float32)
    body = np.ones(hu.shape, bool)
    if spine_at is not None:
        hu[:, 40:48, spine_at - 4:spine_at + 5] = 400.0
    if rib:
        hu[:, 12, 10:18] = 400.0
    return hu, body


def test_spine_x_is_the_vertebra_not_a_rib() -> None:
    hu, body = _chest(spine_at=30)
    assert spine_x(hu, SPACING, body) == pytest.approx(30.0)


def test_spine_x_ignores_bone_in_front_and_needs_a_quarter_of_the_slices() -> None:
    hu, body = _chest(spine_at=None)
    hu[:, 5:13, 26:35] = 400.0  # as large as a vertebra, but in the body's anterior half (a sternum's place)
    assert spine_x(hu, SPACING, body) is None
    hu, body = _chest(spine_at=30)
    hu[2:, 40:48, 26:35] = 40.0  # the vertebra in 2 of 12 slices only
    assert spine_x(hu, SPACING, body) is None


def test_spine_x_finds_thin_bone_at_the_second_threshold() -> None:
    hu, body = _chest(spine_at=30)
    hu[hu == 400.0] = 170.0  # the vertebra and the rib of an elderly patient at 4 mm: below 200 HU
    assert spine_x(hu, SPACING, body) == pytest.approx(30.0)
    assert spine_x(hu, SPACING, body, bone_hu=(200.0,)) is None


def test_spine_x_needs_a_column_not_bones_scattered_across_the_view() -> None:
    hu, body = _chest(spine_at=None, rib=False)
    for z, x in enumerate([10, 60] * 5 + [35, 35]):  # a humerus's or a scapula's place by turns, at each side of the view
        hu[z, 40:48, x - 4:x + 5] = 400.0
    assert spine_x(hu, SPACING, body) is None  # a median of 35, with 2 of the 3 slices needed within 20 mm of it
    hu[:2] = 40.0
    hu[:2, 40:48, 31:40] = 400.0  # two more slices of a vertebra at x 35: a column in 4 of 12 slices
    assert spine_x(hu, SPACING, body) == pytest.approx(35.0)


def _joined(strip_vote_left: float, strip_x: tuple[int, int] = (18, 30)) -> tuple[np.ndarray, ...]:
    """One find: a left lung (x 30-60) joined to a strip of the right lung (``strip_x``), all named
    left; the network's vote on the strip ``strip_vote_left`` (share voting left), left elsewhere."""
    found = np.zeros((12, 40, 70), bool)
    found[:, 5:35, 30:60] = True
    found[:, 5:20, strip_x[0]:strip_x[1]] = True
    sides = np.where(found, 2, 0).astype(np.uint8)
    vote = found.copy()
    strip = np.zeros(found.shape, bool)
    strip[:, 5:20, strip_x[0]:strip_x[1]] = True
    rng = np.random.default_rng(0)
    vote[strip] = rng.random(int(strip.sum())) < strip_vote_left
    return found, sides, vote, strip


def test_a_strip_beyond_the_spine_goes_to_the_other_side_where_the_vote_agrees() -> None:
    found, sides, vote, strip = _joined(strip_vote_left=0.05)
    out, moved = part_at_spine(found, sides, 29.5, vote, VOXEL_ML)
    assert (out[strip] == 1).all() and (out[found & ~strip] == 2).all()
    assert moved == pytest.approx(strip.sum() * VOXEL_ML)
    assert (sides[strip] == 2).all()  # the input is left as it was


def test_the_strip_stays_where_the_vote_does_not_agree_or_it_is_small() -> None:
    found, sides, vote, _ = _joined(strip_vote_left=0.6)  # the network calls much of it left: a lung across the line
    out, moved = part_at_spine(found, sides, 29.5, vote, VOXEL_ML)
    assert np.array_equal(out, sides) and moved == 0
    found, sides, vote, strip = _joined(strip_vote_left=0.0, strip_x=(29, 30))  # one column: under SPINE_MIN_ML
    assert strip.sum() * VOXEL_ML < SPINE_MIN_ML
    out, moved = part_at_spine(found, sides, 29.5, vote, VOXEL_ML)
    assert np.array_equal(out, sides) and moved == 0


def test_a_find_parted_away_from_the_spine_is_one_lung_where_little_of_it_lies_beyond() -> None:
    found = np.zeros((12, 40, 40), bool)
    found[:, 5:35, 3:34] = True  # a right lung in a view over it: the spine at its edge (x 34.5)
    found[:, 10:14, 34:36] = True  # its front reaches across the spine's line by 1.5 voxels: 3 mL
    sides = np.where(found, np.where(np.arange(40) < 19, 1, 2), 0).astype(np.uint8)  # parted at its own middle
    vote = sides == 2  # the network's vote agrees with the halves
    out, moved = part_at_spine(found, sides, 34.5, vote, VOXEL_ML)
    assert (out[found] == 1).all() and moved == 0
    assert (sides[:, :, 19:][found[:, :, 19:]] == 2).all()  # the input is left as it was
    out, moved = part_at_spine(found, sides, 20.5, vote, VOXEL_ML)  # a spine across it: two lungs, parted as they were
    assert np.array_equal(out, sides) and moved == 0


def test_a_find_named_against_the_spine_and_the_scanners_centre_takes_their_side() -> None:
    found = np.zeros((12, 40, 40), bool)
    found[:, 5:35, 3:34] = True  # a right lung beside the spine (x 34.5), voted left by the network
    found[:, 10:14, 34:36] = True  # 3 mL of it across the spine's line
    sides = np.where(found, 2, 0).astype(np.uint8)
    vote = found.copy()
    out, moved = part_at_spine(found, sides, 34.5, vote, VOXEL_ML, centre_x=36.0)
    assert (out[found] == 1).all() and moved == 0
    assert (sides[found] == 2).all()  # the input is left as it was
    for centre in (None, 18.0):  # without the scanner's centre, or with it inside the find: the vote's side stays
        out, _ = part_at_spine(found, sides, 34.5, vote, VOXEL_ML, centre_x=centre)
        assert np.array_equal(out, sides)
    sides[:, 5:10, 3:5] = 1  # a piece named the other side (under 20 mL) in it: not named wholly the other side
    out, _ = part_at_spine(found, sides, 34.5, vote, VOXEL_ML, centre_x=36.0)
    assert np.array_equal(out, sides)


def test_name_sides_reports_the_lung_that_the_spine_named() -> None:
    from segpipe.infer.coarse import name_sides

    found = np.zeros((12, 40, 40), bool)
    found[:, 5:35, 3:34] = True  # a lone right lung beside the spine (x 34.5), voted left by the network
    split = dict(left_vote=found.copy(), midline_x=20.0, view_side=3, centre_x=36.0)
    sides, parted_ml, named_ml = name_sides(found, spine=None, voxel_ml=VOXEL_ML, edge=None, **split)
    assert (sides[found] == 2).all() and parted_ml == named_ml == 0.0  # no spine: the vote's side
    sides, parted_ml, named_ml = name_sides(found, spine=34.5, voxel_ml=VOXEL_ML, edge=None, **split)
    assert (sides[found] == 1).all() and parted_ml == 0.0
    assert named_ml == pytest.approx(found.sum() * VOXEL_ML)


def _at_a_junction() -> tuple[np.ndarray, ...]:
    """One find named left: a left lung (x 30-60) and a strip of the right lung (x 14-28) that meet
    only at a junction line (x 29-30, two rows), the network voting the strip left as well."""
    found = np.zeros((12, 40, 70), bool)
    found[:, 5:35, 30:60] = True
    found[:, 5:20, 14:29] = True
    found[:, 12:14, 29:30] = True
    strip = np.zeros(found.shape, bool)
    strip[:, :, :30] = found[:, :, :30]
    return found, np.where(found, 2, 0).astype(np.uint8), found.copy(), strip


def test_a_strip_that_meets_the_lung_at_a_junction_line_goes_to_the_other_side() -> None:
    found, sides, vote, strip = _at_a_junction()
    assert strip.sum() * VOXEL_ML >= SPINE_MIN_ML
    out, moved = part_at_spine(found, sides, 29.5, vote, VOXEL_ML)  # without the lung's density: the vote decides
    assert np.array_equal(out, sides) and moved == 0
    out, moved = part_at_spine(found, sides, 29.5, vote, VOXEL_ML, aerated=found)  # tissue between them: two lungs
    assert (out[strip] == 1).all() and (out[found & ~strip] == 2).all()
    assert moved == pytest.approx(strip.sum() * VOXEL_ML)
    out, moved = part_at_spine(found, sides, 29.5, vote, VOXEL_ML, aerated=np.ones_like(found))  # aerated lung between: one
    assert np.array_equal(out, sides) and moved == 0


@pytest.mark.parametrize("spine", [32.5, 34.5])  # 34.5: the spine within 15 % of the find's width of its edge
def test_a_strip_beyond_a_neck_past_the_spines_line_goes_to_the_other_side(spine: float) -> None:
    # a right lung (x 4-35) that reaches across the spine's line, joined at a neck (x 36, two
    # rows) to a strip of the left lung at the view's edge (x 37-39), all voted right
    found = np.zeros((12, 40, 40), bool)
    found[:, 5:35, 4:36] = True
    found[:, 12:14, 36] = True
    found[:, 5:30, 37:40] = True
    strip = np.zeros(found.shape, bool)
    strip[:, :, 37:] = found[:, :, 37:]
    assert strip.sum() * VOXEL_ML >= SPINE_MIN_ML
    sides = np.where(found, 1, 0).astype(np.uint8)
    vote = np.zeros(found.shape, bool)
    out, moved = part_at_spine(found, sides, spine, vote, VOXEL_ML)  # without the lung's density: the vote decides
    assert np.array_equal(out, sides) and moved == 0
    out, moved = part_at_spine(found, sides, spine, vote, VOXEL_ML, aerated=found)  # tissue around the neck: two lungs
    assert (out[strip] == 2).all() and (out[found & ~strip & (np.arange(40) < 36)] == 1).all()
    assert moved >= strip.sum() * VOXEL_ML
    out, moved = part_at_spine(found, sides, spine, vote, VOXEL_ML, aerated=np.ones_like(found))  # aerated lung at the neck: one
    assert np.array_equal(out, sides) and moved == 0


def test_a_lung_across_the_spines_line_stays_whole_whatever_its_density() -> None:
    found, sides, vote, _ = _joined(strip_vote_left=0.9)  # touches across its whole section
    out, moved = part_at_spine(found, sides, 29.5, vote, VOXEL_ML, aerated=found)
    assert np.array_equal(out, sides) and moved == 0


def _lung_and_edge_of_the_other() -> tuple[np.ndarray, ...]:
    """A left lung (x 30-60) named left, and beyond the spine (x 25) two small finds that the side
    step left without a side: the other lung's edge at the view's side (x 0-8), and a piece inside
    the view (x 2-6: gas, say)."""
    found = np.zeros((12, 40, 70), bool)
    found[:, 5:35, 30:60] = True
    edge = np.zeros(found.shape, bool)
    edge[:, 10:30, 0:8] = True
    front = np.zeros(found.shape, bool)
    front[4:8, 2:6, 2:6] = True
    found |= edge | front
    sides = np.where(found & ~edge & ~front, 2, 0).astype(np.uint8)
    return found, sides, edge, front


def test_a_find_left_without_a_side_beyond_the_spine_is_the_other_lung() -> None:
    found, sides, edge, front = _lung_and_edge_of_the_other()
    unsure = np.where(found, 0.5, 0.0) > np.random.default_rng(0).random(found.shape)  # the vote split on the small finds
    unsure[sides == 2] = True
    out = join_beyond_spine(found, sides, 25.0, unsure)
    assert (out[edge] == 1).all() and (out[sides == 2] == 2).all()
    assert not out[front].any()  # inside the view: no side from the spine
    assert not sides[edge].any()  # the input is left as it was
    out = join_beyond_spine(found, sides, 25.0, found)  # the vote clearly calls them the lung's side: left out
    assert np.array_equal(out, sides)
    out = join_beyond_spine(found, sides, 4.0, unsure)  # the spine inside them: no side beyond it for them
    assert np.array_equal(out, sides)


def _off_centre_pair() -> np.ndarray:
    """Two touching lungs in a view that shows little of the right one: the right lung at x 0-8,
    joined at x 9 over 4 rows to the left lung at x 10-39, which narrows to 3 rows at x 20 (a
    find whose middle, x 19, lies inside the left lung)."""
    find = np.zeros((6, 20, 40), bool)
    find[:, 2:18, 0:9] = True
    find[:, 8:12, 9] = True
    find[:, 2:18, 10:40] = True
    find[:, 2:18, 20] = False
    find[:, 7:10, 20] = True
    return find


def test_the_side_split_cuts_a_find_near_the_spine() -> None:
    find = _off_centre_pair()
    without = split_sides(find)
    assert (without[:, :, 10:20][find[:, :, 10:20]] == 1).all()  # cut at the find's middle, inside the left lung
    sides = split_sides(find, spine_x=9.5)
    assert (sides[:, :, :9][find[:, :, :9]] == 1).all() and (sides[:, :, 10:][find[:, :, 10:]] == 2).all()
    # a spine less than 15 % of the find's width inside it is ignored: the find's middle, as without it
    np.testing.assert_array_equal(split_sides(find, spine_x=4.0), without)
