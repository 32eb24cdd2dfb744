"""Label clean-up: components, holes, side check in physical space."""

from __future__ import annotations

import numpy as np
import pytest
import SimpleITK as sitk

from scipy import ndimage

from segpipe import postprocess, spatial


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
    cleaned, warnings = postprocess.clean_lungs(_image(a))
    out = sitk.GetArrayFromImage(cleaned)
    expected = _lungs()
    np.testing.assert_array_equal(out, expected)
    assert warnings == []


def test_piece_touching_the_other_lung_joins_it() -> None:
    a = _lungs()
    a[3:17, 5:25, 33:37] = 1  # the lateral part of the left lung labelled "right" by mistake
    out = sitk.GetArrayFromImage(postprocess.clean_lungs(_image(a))[0])
    np.testing.assert_array_equal(out, _lungs())


@pytest.mark.parametrize("orientation", ["LPS", "RAS", "LPI"])
def test_sides_are_checked_in_physical_space(orientation: str) -> None:
    good = _image(_lungs(), orientation)
    cleaned, warnings = postprocess.clean_lungs(good)
    assert warnings == []
    np.testing.assert_array_equal(sitk.GetArrayViewFromImage(cleaned), sitk.GetArrayViewFromImage(good))
    swapped = np.where(_lungs() == 1, 2, np.where(_lungs() == 2, 1, 0))
    fixed, warnings = postprocess.clean_lungs(_image(swapped, orientation))
    assert len(warnings) == 1 and "swapped" in warnings[0]
    np.testing.assert_array_equal(sitk.GetArrayViewFromImage(fixed), sitk.GetArrayViewFromImage(good))
    assert fixed.GetDirection() == good.GetDirection() and fixed.GetOrigin() == good.GetOrigin()


def test_tiny_lung_is_removed_with_a_warning() -> None:
    a = np.zeros((20, 30, 40), np.uint8)
    a[3:17, 5:25, 3:17] = 1
    a[5:6, 5:7, 30:32] = 2  # 4 voxels of 8 mm^3: 0.032 mL
    cleaned, warnings = postprocess.clean_lungs(_image(a), min_volume_ml=1.0)
    assert (sitk.GetArrayViewFromImage(cleaned) == 2).sum() == 0
    assert warnings and "left lung" in warnings[0]


def test_split_sides_by_geometry_two_components_and_touching_lungs() -> None:
    lungs = _lungs() > 0
    np.testing.assert_array_equal(postprocess.split_sides(lungs), _lungs())
    touching = lungs.copy()
    touching[3:17, 8:12, 17:23] = True  # anterior junction: one component
    sides = postprocess.split_sides(touching)
    assert (sides[_lungs() == 1] == 1).all() and (sides[_lungs() == 2] == 2).all()
    boundary = postprocess.side_boundary(_lungs())
    assert boundary.shape == (20, 30)
    assert (boundary[3:17, 5:25] == (16 + 23) / 2).all()  # middle of the gap in each row
    assert (boundary[0] == 19.5).all()  # rows without lungs take the median


def test_laterality_of_inference_is_physical() -> None:
    """Labels 1/2 follow LPS x whatever the storage orientation (checked through the whole
    clean-up on a reoriented image)."""
    for orientation in ("RAS", "LPI", "LAS"):
        label = _image(_lungs(), orientation)
        cleaned, _ = postprocess.clean_lungs(label)
        right = spatial.physical_centroid(cleaned, 1)
        left = spatial.physical_centroid(cleaned, 2)
        assert right is not None and left is not None and right[0] < left[0]


def test_a_single_lung_is_not_cut_in_two() -> None:
    only_right = _lungs() == 1
    assert set(np.unique(postprocess.split_sides(only_right)).tolist()) == {0, 1, 2}  # no midline: split
    sides = postprocess.split_sides(only_right, midline_x=19.5)
    assert (sides[only_right] == 1).all()
    only_left = _lungs() == 2
    assert (postprocess.split_sides(only_left, midline_x=19.5)[only_left] == 2).all()
    touching = _lungs() > 0
    touching[3:17, 8:12, 17:23] = True
    sides = postprocess.split_sides(touching, midline_x=19.5)  # straddles the midline: split
    assert (sides[_lungs() == 1] == 1).all() and (sides[_lungs() == 2] == 2).all()
    hu = np.full((4, 6, 40), -1000.0)
    hu[:, :, 10:30] = 40.0
    assert postprocess.body_midline_x(hu) == pytest.approx(19.5)


def test_a_collapsed_lung_beside_a_whole_one_is_kept() -> None:
    """A right lung of 8% of the left one (below min_fraction): with the midline it is the
    right lung (the two lie on opposite sides); a piece that straddles the midline, or a
    call without the midline, stays dropped."""
    lungs = _lungs() == 2
    collapsed = np.zeros_like(lungs)
    collapsed[8:12, 12:17, 6:11] = True  # 100 voxels against the left lung's 14 x 20 x 14
    assert collapsed.sum() < 0.15 * lungs.sum()
    sides = postprocess.split_sides(lungs | collapsed, midline_x=19.5)
    assert (sides[collapsed] == 1).all() and (sides[lungs] == 2).all()
    assert not postprocess.split_sides(lungs | collapsed)[collapsed].any()
    across = np.zeros_like(lungs)
    across[8:12, 12:17, 16:23] = True  # on the midline, touching nothing
    across[:, :, 23:] = False
    sides = postprocess.split_sides((lungs & (np.arange(40) >= 26)) | across, midline_x=19.5)
    assert not sides[across].any()


def test_body_interior_holds_the_lungs_not_the_air_around_the_patient() -> None:
    hu = np.full((6, 60, 80), -1000.0, np.float32)  # air all around
    yy, xx = np.mgrid[:60, :80]
    body = ((yy - 30) / 20.0) ** 2 + ((xx - 40) / 35.0) ** 2 <= 1
    hu[:, body] = 40.0
    lung = ((yy - 30) / 12.0) ** 2 + ((xx - 25) / 8.0) ** 2 <= 1
    hu[:, lung] = -850.0
    hu[:, 55:58, 10:70] = 200.0  # the table: tissue-dense, apart from the body
    hu[5] = -1000.0  # a slice past the patient
    inside = postprocess.body_interior(hu)
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
    assert np.array_equal(postprocess.fill_holes(lung), lung)  # no 3D cavity
    filled = postprocess.fill_slice_holes(lung)
    assert filled[10, 14, 14] and filled[2, 14, 14] and filled[17, 14, 14]  # the core, top to bottom
    assert not filled[10, 14, 22] and not filled[3, 14, 22]  # the notch stays open
    assert not (filled & ~lung)[:, :, 19:].any()
    assert np.array_equal(postprocess.fill_slice_holes(np.zeros((3, 4, 5), bool)), np.zeros((3, 4, 5), bool))
    # the same as scipy's 2D filling slice by slice (face connectivity)
    rng = np.random.default_rng(3)
    cross = ndimage.generate_binary_structure(2, 1)
    for i in range(30):
        mask = rng.random(tuple(int(v) for v in rng.integers(2, 24, 3))) < rng.uniform(0.2, 0.95)
        if i % 2:
            mask = ndimage.binary_opening(mask)
        expected = np.stack([ndimage.binary_fill_holes(sl, structure=cross) for sl in mask])
        assert np.array_equal(postprocess.fill_slice_holes(mask), expected), i


def test_fill_holes_equals_scipy_with_face_connectivity() -> None:
    from scipy import ndimage

    rng = np.random.default_rng(7)
    for i in range(40):
        shape = tuple(int(v) for v in rng.integers(2, 24, 3))
        mask = rng.random(shape) < rng.uniform(0.2, 0.95)
        if i % 2:
            mask = ndimage.binary_opening(mask)
        expected = ndimage.binary_fill_holes(mask, structure=ndimage.generate_binary_structure(3, 1))
        assert np.array_equal(postprocess.fill_holes(mask), expected), (i, shape)
    # a cavity is filled; a tunnel to the border (here: along the last axis) is not
    shell = np.zeros((9, 9, 9), bool)
    shell[1:8, 1:8, 1:8] = True
    shell[3:6, 3:6, 3:6] = False
    assert postprocess.fill_holes(shell)[4, 4, 4]
    shell[4, 4, 6:] = False
    assert not postprocess.fill_holes(shell)[4, 4, 4]
    assert not postprocess.fill_holes(np.zeros((4, 4, 4), bool)).any()


@pytest.mark.parametrize("swap", [False, True])
def test_clean_lungs_array_on_a_part_of_the_grid_equals_the_whole(swap: bool) -> None:
    """The cascade cleans only the lungs' boxes (an offset part of the grid): same labels and
    same side check as cleaning the whole map, the sides judged at their true position."""
    a = _lungs()
    a[8:11, 12:15, 8:11] = 0  # hole
    a[4:6, 20:22, 20:22] = 2  # a speck that is dropped
    if swap:
        a = np.where(a == 1, 2, np.where(a == 2, 1, 0)).astype(np.uint8)
    big = np.zeros((30, 50, 60), np.uint8)
    big[6:26, 11:41, 13:53] = a
    reference = _image(big)
    whole, warnings_whole = postprocess.clean_lungs(reference)
    part = big[6:26, 11:41, 13:53].copy()
    warnings = postprocess.clean_lungs_array(part, spatial.Geometry.of(reference), offset_xyz=(13, 11, 6))
    np.testing.assert_array_equal(part, sitk.GetArrayViewFromImage(whole)[6:26, 11:41, 13:53])
    np.testing.assert_array_equal(part, _lungs())
    assert warnings == warnings_whole
    assert len(warnings) == int(swap)


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
    tracked = postprocess.track_airways((hu < -900) & postprocess.body_interior(hu), coarse.GetSpacing())
    slices = np.flatnonzero(tracked.any(axis=(1, 2)))
    assert len(slices) >= 25  # >= 10 cm of trachea and bronchi
    assert slices[-1] >= hu.shape[0] - 3  # from the top of the scan
    assert not (tracked & lung).any()
    assert np.all(airway[tracked])
    # lung bases only (no trachea in the field of view): nothing is taken
    low = hu[: slices[0] - 2]
    assert not postprocess.track_airways((low < -900) & postprocess.body_interior(low), coarse.GetSpacing()).any()


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
    tracked = postprocess.track_airways(air, (4.0, 4.0, 4.0))
    assert tracked[20:].sum() == 20 * tube.sum()  # the whole trachea
    assert tracked[:20].sum() <= tube.sum()  # at most one slice of speckle, never a walk through it


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
    from segpipe.postprocess import fat_in_lung

    lung, hu, blobs = _slice_with_blobs(spacing)
    fat = fat_in_lung(lung, hu, (spacing, spacing))
    assert fat.sum() >= 0.8 * blobs["fat"].sum()                       # the fat pad goes
    assert not (fat & blobs["consolidation"]).any()                    # consolidation stays lung
    assert not (fat & blobs["ground_glass"]).any()                     # ground glass stays lung
    assert not (fat & ~blobs["fat"]).sum() > 0.05 * blobs["fat"].sum()  # partial-volume rims stay
    edge = lung & ~ndimage.binary_erosion(lung, iterations=3)
    assert not (fat & edge).any()  # the lung's own edge against soft tissue is not "fat"


def test_clear_fat_works_slice_by_slice_on_a_label_volume() -> None:
    from segpipe.postprocess import clear_fat

    lung, hu, blobs = _slice_with_blobs(0.8)
    label = np.stack([np.where(lung, 1, 0), np.where(lung, 2, 0), np.zeros_like(lung, int)]).astype(np.uint8)
    hu3 = np.stack([hu, hu, hu])
    cleared = clear_fat(label, hu3, (0.8, 0.8, 2.5))
    gone = (label == 0) & np.stack([lung, lung, np.zeros_like(lung)])
    assert cleared == int(gone.sum()) > 0
    assert (gone[0] == gone[1]).all() and not gone[2].any()  # the same per slice, whatever the side
    assert gone[0].sum() >= 0.8 * blobs["fat"].sum() and not (gone[0] & blobs["consolidation"]).any()


def _chest_slice(spacing: float, lung_hu: float = -850.0, noise: float = 15.0) -> tuple[np.ndarray, np.ndarray]:
    """A 2D chest: soft tissue (+40 HU) with an elliptic lung (``lung_hu``) whose true edge is
    at partial volume (the 50 % level of a 0.5 mm blur); returns (true lung mask, HU)."""
    n = int(round(200 / spacing))
    y, x = (np.mgrid[0:n, 0:n] + 0.5) * spacing
    r = np.sqrt(((y - 100) / 60) ** 2 + ((x - 100) / 45) ** 2)
    truth = r < 1.0
    frac = ndimage.gaussian_filter(truth.astype(np.float32), 0.5 / spacing)
    hu = 40.0 + (lung_hu - 40.0) * frac
    hu += np.random.default_rng(0).normal(0, noise, hu.shape)
    return truth, hu.astype(np.float32)


@pytest.mark.parametrize("spacing", [0.6, 0.9])
@pytest.mark.parametrize("shift", [-1, 1])
def test_snap_edges_moves_a_shifted_edge_onto_the_scan(spacing: float, shift: int) -> None:
    from segpipe.postprocess import snap_edges

    truth, hu = _chest_slice(spacing)
    steps = max(1, int(1.2 / spacing))  # the fine stage's edge, about 1 mm off
    lung = ndimage.binary_dilation(truth, iterations=steps) if shift > 0 else ndimage.binary_erosion(truth, iterations=steps)
    before = int((lung ^ truth).sum())
    snapped = snap_edges(lung, hu, (spacing, spacing))
    after = int((snapped ^ truth).sum())
    assert after < 0.25 * before  # most of the ring moves onto the scan's own edge
    assert not (snapped & ~ndimage.binary_dilation(lung, iterations=3)).any()  # bounded reach


def test_snap_edges_leaves_dense_lung_and_pneumothorax_alone() -> None:
    from segpipe.postprocess import snap_edges

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


def test_snap_edges_adds_only_where_allowed() -> None:
    from segpipe.postprocess import snap_edges

    spacing = 0.7
    truth, hu = _chest_slice(spacing)
    lung = ndimage.binary_erosion(truth, iterations=2)
    allowed = np.ones_like(truth)
    allowed[:, : truth.shape[1] // 2] = False  # e.g. the trachea's column on the coarse grid
    snapped = snap_edges(lung, hu, (spacing, spacing), allowed)
    added = snapped & ~lung
    assert added.any() and not (added & ~allowed).any()


def test_snap_label_edges_keeps_each_lung_its_side() -> None:
    from segpipe.postprocess import snap_label_edges

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
    changed = snap_label_edges(label, np.stack([hu, hu]), (spacing, spacing, 2.0))
    after = int((label != np.stack([ref, ref])).sum())
    assert changed > 0 and after < 0.25 * before
    assert set(np.unique(label[:, :, : half - 2])) <= {0, 1} and set(np.unique(label[:, :, half + 2:])) <= {0, 2}


def test_snap_edges_never_drops_very_dark_lung_at_the_edge() -> None:
    from segpipe.postprocess import snap_edges

    spacing = 0.8
    truth, hu = _chest_slice(spacing)
    rim = truth & ~ndimage.binary_erosion(truth, iterations=4)
    hu[rim & (np.arange(truth.shape[1])[None, :] < truth.shape[1] // 2)] = -995.0  # a subpleural bulla
    snapped = snap_edges(truth, hu, (spacing, spacing))
    assert not (truth & ~snapped).any()


def test_map_parallel_keeps_order_and_threads_change_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """Slice-by-slice clean-up runs on several threads: the results must be those of one
    thread, voxel for voxel (fat, edge snap and the per-lung clean-up)."""
    from segpipe.postprocess import clean_lungs_array, clear_fat, map_parallel, snap_label_edges

    assert map_parallel(lambda i: i * i, 37) == [i * i for i in range(37)]
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
        monkeypatch.setattr(postprocess, "worker_threads", lambda threads=threads: threads)
        label = label0.copy()
        counts = (clear_fat(label, hu3, (spacing, spacing, 2.0)), snap_label_edges(label, hu3, (spacing, spacing, 2.0)))
        warnings = clean_lungs_array(label, _image(label))
        results.append((label, counts, warnings))
    assert results[0][1][0] > 0 and results[0][1][1] > 0  # both steps changed something
    for label, counts, warnings in results[1:]:
        np.testing.assert_array_equal(label, results[0][0])
        assert counts == results[0][1] and warnings == results[0][2]


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
    from segpipe.postprocess import pleural_air

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
    from segpipe.postprocess import pleural_air

    for spacing in (1.5, 2.0):
        cavity, air_out, hu = _chest_with_pleural_air(pneumothorax=False, bulla=True, spacing=spacing)
        assert not air_out.any() and (hu[cavity] < -975).sum() * spacing**3 / 1000 > 10  # the bulla: > 10 mL of air
        assert not pleural_air(cavity, hu, (spacing,) * 3).any()


def test_pleural_air_takes_a_thin_shell_of_pneumothorax_around_a_collapsed_lung() -> None:
    """A collapsed lung (-450 HU sphere) in a pneumothorax: the network's mask reaches 4 mm into
    the air all round (too thin for a pocket). The shell goes, on the lung's own edge (the
    midpoint between air and lung), because the air goes on outside the mask; air outside the
    mask that is not valid (past the scan's end) does not count."""
    from segpipe.postprocess import pleural_air

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


def test_pleural_air_takes_a_partial_volume_shell_next_to_a_pneumothorax_left_out() -> None:
    """A thick-slice scan: the 4 mm of pneumothorax the network kept around a collapsed lung
    read -930 HU, not -1000 (partial volume), too light for the vessel-free air test. The shell
    goes because it is more air than lung and touches the pneumothorax the network left out;
    without that air outside the mask (not valid) nothing is taken, nor next to the lumen of a
    bronchus the mask ends in."""
    from segpipe.postprocess import _PLEURAL_GROW_MM, PLEURAL_AIR_HU, pleural_air

    rng = np.random.default_rng(4)
    n = 90
    d = np.sqrt(((np.indices((n, n, n)) + 0.5 - n / 2) ** 2).sum(0)).astype(np.float32)  # 1 mm voxels
    lung, mask, cavity = d < 20.0, d < 24.0, d < 40.0
    hu = np.where(cavity, -1000.0, 40.0).astype(np.float32)
    hu[mask] = -930.0
    hu[lung] = -450.0
    hu += rng.normal(0, 15, hu.shape).astype(np.float32)
    shell = mask & ~lung
    assert 24.0 - 20.0 <= _PLEURAL_GROW_MM and (ndimage.gaussian_filter(hu, 1.0)[shell] < PLEURAL_AIR_HU).mean() < 0.01
    found = pleural_air(mask, hu, (1.0, 1.0, 1.0))
    assert (found & shell).sum() >= 0.95 * shell.sum()
    assert (found & lung).sum() <= 0.01 * lung.sum()
    assert not pleural_air(mask, hu, (1.0, 1.0, 1.0), valid=~cavity).any()
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
    from segpipe.postprocess import pleural_air

    cavity, _, hu = _chest_with_pleural_air(pneumothorax=False, bulla=True)
    bulla = cavity & (hu < -975) & ndimage.binary_erosion(hu < -500, iterations=2)
    mask = cavity & ~ndimage.binary_dilation(bulla, iterations=2)
    found = pleural_air(mask, hu, (1.5, 1.5, 1.5))
    assert found.sum() <= 0.002 * mask.sum()


@pytest.mark.parametrize("dtype", [np.uint16, np.int32])
def test_component_sizes_count_like_bincount(dtype: type) -> None:
    from segpipe.postprocess import component_sizes

    rng = np.random.default_rng(3)
    for n in (0, 1, 7, 300):
        labels = rng.integers(0, n + 1, size=(20, 30, 40)).astype(dtype)
        labels[0, 0, 0] = n  # the top label is counted, not dropped off the end
        np.testing.assert_array_equal(component_sizes(labels, n), np.bincount(labels.ravel(), minlength=n + 1))


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
    from segpipe.postprocess import dense_lung

    cavity, lower, hu, prior = _lobe_on_the_liver(consolidated=True)
    added = dense_lung(cavity & ~lower, prior, hu, (1.5, 1.5, 1.5))
    assert (added & lower).sum() >= 0.9 * lower.sum()
    assert (added & ~cavity).sum() <= 0.05 * lower.sum()  # the coarse edge's blur, at most
    assert not (added & cavity & ~lower).any()


def test_dense_lung_leaves_a_clean_lung_and_unsure_regions_alone() -> None:
    """An aerated lung whole in the mask: the coarse stage's blurred rim around it is no lobe.
    A consolidated lobe the coarse stage is unsure of (p < 0.9 everywhere) is not added either."""
    from segpipe.postprocess import dense_lung

    cavity, lower, hu, prior = _lobe_on_the_liver(consolidated=False)
    assert not dense_lung(cavity, prior, hu, (1.5, 1.5, 1.5)).any()
    cavity, lower, hu, prior = _lobe_on_the_liver(consolidated=True)
    assert not dense_lung(cavity & ~lower, 0.85 * prior, hu, (1.5, 1.5, 1.5)).any()
    # dense but not touching the lung mask (an organ the coarse stage mistook): not lung
    assert not dense_lung(np.zeros_like(cavity), prior, hu, (1.5, 1.5, 1.5)).any()


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
    from segpipe.postprocess import dense_to_wall

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
    from segpipe.postprocess import dense_to_wall

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
    from segpipe.postprocess import dense_to_wall

    c = _consolidation_against_the_ribs()
    hu = c["hu"].copy()
    hu[hu > 300] = 45.0  # no ribs: muscle only
    assert not dense_to_wall(c["core"], c["lung"], hu, (1.5, 1.5, 1.5), c["centre"], allowed=c["body"]).any()
    hu = c["hu"].copy()
    fat = c["rim"] & (c["r"] > 88)
    hu[fat] = -100.0
    out = dense_to_wall(c["core"], c["lung"], hu, (1.5, 1.5, 1.5), c["centre"], allowed=c["body"])
    assert (out & c["rim"] & ~fat).sum() >= 0.85 * (c["rim"] & ~fat).sum()
    assert not (out & (c["r"] > 88)).any()
