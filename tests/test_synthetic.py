"""The phantom generator: determinism, geometry, label semantics, tissue HU, CLI."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import SimpleITK as sitk

from segpipe.cli import main
from segpipe.errors import ConfigError
from segpipe.synthetic import (
    COVERAGE_WEIGHTS,
    COVERAGES,
    TISSUES,
    PhantomSpec,
    coverage_probabilities,
    make_phantom,
    sample_spec,
)

SMALL = (48, 44, 32)


def _arrays(ph):
    lps = [sitk.DICOMOrient(im, "LPS") for im in (ph.image, ph.label)]
    return [sitk.GetArrayFromImage(im) for im in lps]


def _physical_centroid(label: sitk.Image, value: int) -> np.ndarray:
    arr = sitk.GetArrayFromImage(label)
    idx = np.argwhere(arr == value)  # (z, y, x)
    assert len(idx), f"label {value} is empty"
    mean_xyz = idx.mean(axis=0)[::-1]
    return np.array(label.TransformContinuousIndexToPhysicalPoint([float(v) for v in mean_xyz]))


@pytest.fixture(scope="module")
def rich() -> object:
    """One phantom with every lung pathology but collapse, and its tissue map (2 mm grid)."""
    spec = PhantomSpec(seed=11, size_xyz=(176, 150, 120), spacing_xyz=(2.0, 2.0, 2.5), coverage="chest_abdomen",
                       noise_hu=8.0, nodules=1.0, consolidation=1.0, effusion=1.0, ground_glass=1.0, emphysema=1.0)
    return make_phantom(spec, tissue_map=True)


def test_spec_validation() -> None:
    with pytest.raises(ConfigError, match="coverage"):
        PhantomSpec(coverage="head")
    with pytest.raises(ConfigError, match="orientation"):
        PhantomSpec(orientation="LLS")
    with pytest.raises(ConfigError, match="size_xyz"):
        PhantomSpec(size_xyz=(64, 64))
    with pytest.raises(ConfigError, match="nodules"):
        PhantomSpec(nodules=1.5)
    with pytest.raises(ConfigError, match="unknown"):
        sample_spec(1, wings=2)
    with pytest.raises(ConfigError):
        make_phantom("seven")  # type: ignore[arg-type]
    spec = sample_spec(3, coverage="chest", orientation="ras")
    assert spec.coverage == "chest" and spec.orientation == "RAS"
    assert sample_spec(3) == sample_spec(3) and sample_spec(3) != sample_spec(4)


def test_coverage_weights() -> None:
    draws = [sample_spec(i, coverage_weights={"lung_bases": 0.88, "no_lungs": 0}) for i in range(400)]
    counts = {c: sum(s.coverage == c for s in draws) for c in COVERAGES}
    # lung_bases 0.88 / 1.68 = 52 %; no_lungs never
    assert counts["no_lungs"] == 0 and 0.45 * 400 < counts["lung_bases"] < 0.6 * 400
    assert counts["chest"] > 0 and counts["chest_abdomen"] > 0
    # the weights change the coverage only: every other draw of a seed stays the same
    for i, s in enumerate(draws[:50]):
        assert s.replace(coverage="chest") == sample_spec(i).replace(coverage="chest")
    assert coverage_probabilities() == pytest.approx(list(COVERAGE_WEIGHTS.values()))
    assert coverage_probabilities({"chest": 0, "chest_abdomen": 0, "neck_pelvis": 0, "no_lungs": 0}) == [0, 0, 0, 1, 0, 0]
    with pytest.raises(ConfigError, match="expected keys among"):
        sample_spec(1, coverage_weights={"head": 1.0})
    with pytest.raises(ConfigError, match="expected a number >= 0"):
        sample_spec(1, coverage_weights={"chest": float("nan")})
    with pytest.raises(ConfigError, match="at least one weight > 0"):
        coverage_probabilities(dict.fromkeys(COVERAGES, 0.0))


def test_same_seed_same_phantom_other_seed_differs() -> None:
    a = make_phantom(PhantomSpec(seed=5, size_xyz=SMALL, nodules=0.5))
    b = make_phantom(PhantomSpec(seed=5, size_xyz=SMALL, nodules=0.5))
    c = make_phantom(PhantomSpec(seed=6, size_xyz=SMALL, nodules=0.5))
    ia, la = _arrays(a)
    ib, lb = _arrays(b)
    ic, lc = _arrays(c)
    assert np.array_equal(ia, ib) and np.array_equal(la, lb)
    assert a.image.GetOrigin() == b.image.GetOrigin()
    assert not np.array_equal(ia, ic)
    assert set(np.unique(la)) == {0, 1, 2}


@pytest.mark.parametrize("orientation", ["LPS", "RAS", "LAS", "LPI"])
def test_geometry_and_right_lung_at_negative_x(orientation: str) -> None:
    dtype = "float32" if orientation == "LAS" else "int16"
    ph = make_phantom(PhantomSpec(seed=2, size_xyz=(40, 36, 30), spacing_xyz=(9.0, 9.0, 10.0), orientation=orientation,
                                  dtype=dtype, noise_hu=0.0))
    img, lab = ph.image, ph.label
    assert img.GetSize() == lab.GetSize() == (40, 36, 30)
    assert img.GetSpacing() == lab.GetSpacing() and img.GetOrigin() == lab.GetOrigin()
    assert img.GetDirection() == lab.GetDirection()
    assert sitk.DICOMOrientImageFilter.GetOrientationFromDirectionCosines(img.GetDirection()) == orientation
    assert sorted(round(s, 6) for s in img.GetSpacing()) == [9.0, 9.0, 10.0]
    assert lab.GetPixelID() == sitk.sitkUInt8
    assert img.GetPixelID() == (sitk.sitkFloat32 if dtype == "float32" else sitk.sitkInt16)
    right, left = _physical_centroid(lab, 1), _physical_centroid(lab, 2)
    assert right[0] < 0 < left[0]  # LPS: +x is the patient's left
    assert right[0] < left[0] - 100


def test_same_anatomy_on_any_grid() -> None:
    """The anatomy is built in mm: two grids of one spec give about the same lung volumes."""
    coarse = make_phantom(PhantomSpec(seed=8, size_xyz=(48, 48, 36), spacing_xyz=(8.0, 8.0, 9.0), noise_hu=0))
    fine = make_phantom(PhantomSpec(seed=8, size_xyz=(96, 96, 72), spacing_xyz=(4.0, 4.0, 4.5), noise_hu=0))
    for side in ("right", "left"):
        a, b = coarse.info["lung_volume_ml"][side], fine.info["lung_volume_ml"][side]
        assert 1200 < b < 4500
        assert abs(a - b) / b < 0.08


def test_no_lungs_and_lung_bases() -> None:
    none = make_phantom(PhantomSpec(seed=4, size_xyz=SMALL, coverage="no_lungs"))
    assert sitk.GetArrayViewFromImage(none.label).max() == 0
    bases = make_phantom(PhantomSpec(seed=4, size_xyz=SMALL, coverage="lung_bases"))
    chest = make_phantom(PhantomSpec(seed=4, size_xyz=SMALL, coverage="chest"))
    n_bases = int((sitk.GetArrayViewFromImage(bases.label) > 0).sum() * np.prod(bases.label.GetSpacing()))
    n_chest = int((sitk.GetArrayViewFromImage(chest.label) > 0).sum() * np.prod(chest.label.GetSpacing()))
    assert 0 < n_bases < 0.5 * n_chest


def test_abdomen_bases_cuts_the_lowest_lung() -> None:
    """An abdominal scan whose top edge cuts the lowest lung: some lung, all of it in the top
    of the scan, far less than a lung-bases scan of the same body."""
    vols, tops = [], []
    for seed in range(4):
        ph = make_phantom(PhantomSpec(seed=seed, size_xyz=(64, 64, 48), coverage="abdomen_bases"))
        lab = sitk.GetArrayFromImage(sitk.DICOMOrient(ph.label, "LPS"))  # z from feet to head
        bases = make_phantom(PhantomSpec(seed=seed, size_xyz=(64, 64, 48), coverage="lung_bases"))
        vols.append(((lab > 0).sum() * np.prod(ph.label.GetSpacing()) / 1000,
                     (sitk.GetArrayViewFromImage(bases.label) > 0).sum() * np.prod(bases.label.GetSpacing()) / 1000))
        z = np.nonzero((lab > 0).any(axis=(1, 2)))[0]
        tops.append(z.min() / lab.shape[0] if len(z) else 1.0)
    assert all(v < 0.6 * b for v, b in vols), vols
    assert sum(v > 0 for v, _ in vols) >= 3, vols
    assert min(tops) > 0.4, tops  # the lung is in the scan's upper part, the abdomen below it


def test_abdomen_detail_changes_the_gut_not_the_lungs() -> None:
    """``abdomen_detail`` adds gut and table detail from its own stream: the lungs and the
    plain phantom's other draws stay, and more of the abdomen is bowel gas and bowel."""
    spec = PhantomSpec(seed=3, size_xyz=(80, 80, 48), coverage="no_lungs")
    plain = make_phantom(spec, tissue_map=True)
    detail = make_phantom(spec.replace(abdomen_detail=1.0), tissue_map=True)
    assert np.array_equal(sitk.GetArrayViewFromImage(plain.label), sitk.GetArrayViewFromImage(detail.label))
    t0, t1 = sitk.GetArrayViewFromImage(plain.tissue), sitk.GetArrayViewFromImage(detail.tissue)
    assert (t0 != t1).mean() > 0.01
    assert (t1 == TISSUES["bowel"]).sum() > (t0 == TISSUES["bowel"]).sum()
    chest = PhantomSpec(seed=3, size_xyz=(48, 44, 32))
    a, b = make_phantom(chest), make_phantom(chest.replace(abdomen_detail=1.0))
    assert np.array_equal(sitk.GetArrayViewFromImage(a.label), sitk.GetArrayViewFromImage(b.label))
    with pytest.raises(ConfigError, match="abdomen_detail"):
        PhantomSpec(abdomen_detail=1.5)


def test_new_coverage_keeps_default_draws() -> None:
    """``abdomen_bases`` has default weight 0: a default draw never gives it."""
    assert COVERAGE_WEIGHTS["abdomen_bases"] == 0
    assert all(sample_spec(i).coverage != "abdomen_bases" for i in range(200))
    assert sum(sample_spec(i, coverage_weights={"abdomen_bases": 1.0}).coverage == "abdomen_bases" for i in range(200)) > 50


def test_padding_outside_field_of_view() -> None:
    ph = make_phantom(PhantomSpec(seed=1, size_xyz=SMALL, padding_value=-2048))
    img = sitk.GetArrayViewFromImage(ph.image)
    assert img[:, 0, 0].max() == -2048  # corners are outside the circle
    inside = img[:, SMALL[1] // 2, SMALL[0] // 2]
    assert inside.min() >= -1024


def test_tissue_hu_ranges(rich) -> None:
    img = sitk.GetArrayFromImage(rich.image).astype(np.float32)
    tissue = sitk.GetArrayFromImage(rich.tissue)
    lab = sitk.GetArrayFromImage(rich.label)

    def median(name: str) -> float:
        sel = img[tissue == TISSUES[name]]
        assert sel.size > 50, name
        return float(np.median(sel))

    assert -1024 <= median("air") <= -980
    assert -930 <= median("lung") <= -720
    assert -140 <= median("fat") <= -60
    assert 15 <= median("muscle") <= 85
    assert median("cortical_bone") >= 250
    assert 0 <= median("effusion") <= 40
    lung_vals = img[lab > 0]
    assert -920 <= np.median(lung_vals) <= -700
    assert np.percentile(lung_vals, 99) > -300  # vessels and lesions inside the lungs


def test_label_semantics(rich) -> None:
    """Airways, bowel gas and effusion are not lung; nodules and consolidation are."""
    tissue = sitk.GetArrayFromImage(rich.tissue)
    lab = sitk.GetArrayFromImage(rich.label)
    img = sitk.GetArrayFromImage(rich.image)
    for name in ("airway", "bowel_gas", "effusion", "mediastinal_fat", "blood", "cortical_bone"):
        sel = tissue == TISSUES[name]
        assert sel.sum() > 0, name
        assert lab[sel].max() == 0, name
    for name in ("nodule", "consolidation", "vessel", "bronchus"):
        sel = tissue == TISSUES[name]
        assert sel.sum() > 0, name
        assert lab[sel].min() >= 1, name
    assert np.median(img[tissue == TISSUES["airway"]]) < -700
    assert np.median(img[tissue == TISSUES["bowel_gas"]]) < -600
    # the reported nodule centres (physical mm) fall in the lungs, the airway centreline does not
    size = rich.label.GetSize()
    checked = 0
    for nod in rich.info["nodules"]:
        idx = rich.label.TransformPhysicalPointToIndex(nod["centre_mm"])
        if not all(0 <= i < n for i, n in zip(idx, size)):
            continue
        if nod["pleural"]:  # centred at the lung's edge: lung within a few voxels of it
            x, y, z = idx
            assert lab[max(z - 3, 0) : z + 4, max(y - 3, 0) : y + 4, max(x - 3, 0) : x + 4].max() in (1, 2)
        else:
            assert rich.label[idx] in (1, 2)
        checked += 1
    assert checked >= 1
    zs = [rich.image.GetOrigin()[2], rich.image.GetOrigin()[2] + rich.image.GetSpacing()[2] * (rich.image.GetSize()[2] - 1)]
    points = [p for p in rich.info["airway_centreline_mm"] if min(zs) + 5 < p[2] < max(zs) - 5]
    assert points
    for p in points:
        assert rich.label[rich.label.TransformPhysicalPointToIndex(p)] == 0


def test_cli_writes_decathlon_layout(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "phantoms"
    code = main(["synth", "--out", str(out), "--n", "2", "--seed", "3", "--size", "40,36,24", "--coverage", "chest",
                 "--orientation", "ras", "--pathology", "nodules,effusion", "--abdomen-detail", "1", "--preview", "--quiet"])
    assert code == 0
    assert "wrote 2 case(s)" in capsys.readouterr().out
    meta = json.loads((out / "dataset.json").read_text())
    assert meta["labels"] == {"0": "background", "1": "right_lung", "2": "left_lung"}
    assert meta["modality"] == {"0": "CT"} and meta["numTraining"] == 2 and len(meta["training"]) == 2
    for entry in meta["training"]:
        image = sitk.ReadImage(str(out / entry["image"]))
        label = sitk.ReadImage(str(out / entry["label"]))
        assert image.GetSize() == label.GetSize() == (40, 36, 24)
        assert np.allclose(image.GetDirection(), label.GetDirection())
        assert sitk.DICOMOrientImageFilter.GetOrientationFromDirectionCosines(image.GetDirection()) == "RAS"
        assert set(np.unique(sitk.GetArrayViewFromImage(label))) <= {0, 1, 2}
    assert sorted(p.name for p in (out / "preview").iterdir()) == ["phantom_000.png", "phantom_001.png"]
    cases = meta["segpipe_phantoms"]["cases"]
    assert all("nodules" in c and "effusion" in c for c in cases)
    # case i depends on (seed, i) only
    main(["synth", "--out", str(tmp_path / "one"), "--n", "1", "--seed", "3", "--size", "40,36,24", "--coverage", "chest",
          "--orientation", "ras", "--pathology", "nodules,effusion", "--abdomen-detail", "1", "--quiet"])
    a = sitk.GetArrayFromImage(sitk.ReadImage(str(out / "imagesTr" / "phantom_000.nii.gz")))
    b = sitk.GetArrayFromImage(sitk.ReadImage(str(tmp_path / "one" / "imagesTr" / "phantom_000.nii.gz")))
    assert np.array_equal(a, b)


def test_cli_workers_make_the_same_cases(tmp_path: Path) -> None:
    """``--workers 2`` makes the cases in two processes: the same images, labels and records,
    in case order."""
    args = ["--n", "3", "--seed", "7", "--size", "40,36,24", "--coverage", "chest", "--quiet"]
    assert main(["synth", "--out", str(tmp_path / "one"), *args]) == 0
    assert main(["synth", "--out", str(tmp_path / "two"), "--workers", "2", *args]) == 0
    one, two = (json.loads((tmp_path / d / "dataset.json").read_text()) for d in ("one", "two"))
    assert one["training"] == two["training"] and one["segpipe_phantoms"] == two["segpipe_phantoms"]
    for entry in one["training"]:
        for key in ("image", "label"):
            a, b = (sitk.GetArrayFromImage(sitk.ReadImage(str(tmp_path / d / entry[key]))) for d in ("one", "two"))
            assert np.array_equal(a, b)


def test_cli_whole_lobe_consolidation(tmp_path: Path) -> None:
    """``--whole-lobe 1`` with consolidation: the lobar consolidations fill their lobe (the
    dataset's case record says so) and the lung holds more dense tissue than without it."""
    dense = {}
    for p in ("0", "1"):
        out = tmp_path / p
        assert main(["synth", "--out", str(out), "--n", "1", "--seed", "5", "--size", "64,64,48", "--coverage", "chest",
                     "--pathology", "consolidation", "--whole-lobe", p, "--quiet"]) == 0
        meta = json.loads((out / "dataset.json").read_text())
        found = meta["segpipe_phantoms"]["cases"][0]["consolidation"]
        assert all(c["whole_lobe"] == (p == "1" and c["lobe"] != "patchy") for c in found)
        image = sitk.GetArrayFromImage(sitk.ReadImage(str(out / "imagesTr" / "phantom_000.nii.gz")))
        label = sitk.GetArrayFromImage(sitk.ReadImage(str(out / "labelsTr" / "phantom_000.nii.gz")))
        dense[p] = int(((label > 0) & (image > -300)).sum())
        if p == "1":
            assert any(c["lobe"] != "patchy" for c in found)
    assert dense["1"] > 1.5 * dense["0"]


@pytest.mark.parametrize(
    "args",
    [
        ["--n", "0"],
        ["--size", "64,64"],
        ["--spacing", "0.7,-1,2"],
        ["--coverage", "head"],
        ["--pathology", "warts"],
        ["--noise", "900"],
        ["--orientation", "XYZ"],
        ["--abdomen-detail", "2"],
        ["--whole-lobe", "1.5"],
        ["--diaphragm-variety", "-0.1"],
        ["--recess-variety", "1.5"],
        ["--flexure-variety", "2"],
        ["--table-variety", "-1"],
    ],
)
def test_cli_bad_options_one_line_exit_2(args: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "never"
    try:
        code = main(["synth", "--out", str(out), "--quiet", *args])
    except SystemExit as stop:
        code = stop.code
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1 and err[0].startswith("segpipe synth: error: ")
    assert not out.exists()


def test_emphysema_includes_confluent_dark_lung_that_stays_lung(rich) -> None:
    """Confluent low-attenuation areas (no wall) are drawn inside the lungs and keep the lung
    label: dark lung next to the pleura is lung (a pneumothorax is not)."""
    info = rich.info["emphysema"]
    assert len(info["confluent"]) >= 2
    assert any(c["subpleural"] for c in info["confluent"]) or len(info["confluent"]) >= 2
    img = sitk.GetArrayFromImage(rich.image)
    label = sitk.GetArrayFromImage(rich.label)
    tissue = sitk.GetArrayFromImage(rich.tissue)
    emph = tissue == TISSUES["emphysema"]
    assert np.count_nonzero(emph) > 0
    assert np.all(label[emph] > 0)
    assert -1000 < np.median(img[emph]) < -900


def test_consolidation_is_denser_than_effusion_and_holds_air_bronchograms(rich) -> None:
    """Consolidation (lung) and effusion (not lung) differ as on real scans: the consolidation's
    core is denser than the fluid, and air-filled bronchi cross it, still labelled lung."""
    from scipy import ndimage

    img = sitk.GetArrayFromImage(rich.image)
    label = sitk.GetArrayFromImage(rich.label)
    tissue = sitk.GetArrayFromImage(rich.tissue)
    cons = tissue == TISSUES["consolidation"]
    core = {name: ndimage.binary_erosion(tissue == TISSUES[name]) for name in ("consolidation", "effusion")}
    assert core["consolidation"].sum() > 1000 and core["effusion"].sum() > 500
    assert np.all(label[cons] > 0) and np.all(label[tissue == TISSUES["effusion"]] == 0)
    assert np.median(img[core["consolidation"]]) > np.median(img[core["effusion"]]) + 8
    assert np.median(img[core["consolidation"]]) >= 10
    found = rich.info["consolidation"]
    assert all(c["lobe"] in ("lower", "upper", "middle", "patchy") for c in found)
    if any(c["air_bronchogram"] for c in found):
        bronchogram = ndimage.binary_closing(cons, iterations=2) & (tissue == TISSUES["bronchus"])
        assert bronchogram.sum() > 20
        assert np.median(img[bronchogram]) < -400 and np.all(label[bronchogram] > 0)


def test_consolidation_fades_through_a_ground_glass_rim(rich) -> None:
    """Around a consolidation with a margin the aerated lung does not start at once: the 4-5 mm
    next to it is ground glass (still lung), between the dense core and the aerated lung."""
    from scipy import ndimage

    (found,) = rich.info["consolidation"]
    assert found["margin"] and found["lobe"] == "patchy"
    img = sitk.GetArrayFromImage(rich.image)
    label = sitk.GetArrayFromImage(rich.label)
    tissue = sitk.GetArrayFromImage(rich.tissue)
    cons = tissue == TISSUES["consolidation"]
    shell = ndimage.binary_dilation(cons, iterations=2) & ~cons & (label > 0)
    aerated = (label > 0) & ~ndimage.binary_dilation(cons, iterations=8)
    assert shell.sum() > 1000
    assert np.mean(tissue[shell] == TISSUES["ground_glass"]) > 0.8
    assert np.median(img[aerated]) + 150 < np.median(img[shell]) < -400


@pytest.mark.slow
def test_lobar_consolidation_ends_on_a_fissure() -> None:
    """Across seeds both kinds occur, and a lobar consolidation is cut by its fissure planes:
    all its voxels lie on the lobe's side of each (the plane's normal points out of the lobe)."""
    lobes: set[str] = set()
    checked = 0
    for seed in range(12):
        spec = PhantomSpec(seed=seed, size_xyz=(96, 96, 64), spacing_xyz=(4.0, 4.0, 5.0), consolidation=1.0)
        ph = make_phantom(spec, tissue_map=True)
        found = ph.info["consolidation"]
        lobes |= {c["lobe"] for c in found}
        if checked or len(found) != 1 or found[0]["lobe"] == "patchy":
            continue
        tissue = sitk.GetArrayFromImage(ph.tissue)
        idx = np.argwhere(tissue == TISSUES["consolidation"])[:, ::-1].astype(float)  # (x, y, z)
        assert len(idx) > 50
        pts = np.array([ph.tissue.TransformContinuousIndexToPhysicalPoint(list(v)) for v in idx])
        for plane in found[0]["fissures"]:
            side = (pts - plane["point_mm"]) @ np.asarray(plane["normal"])
            assert side.max() <= 4.0  # within about a voxel of the plane (partial volume)
            assert side.min() < -20.0
        checked += 1
    assert "patchy" in lobes and lobes & {"lower", "upper", "middle"} and checked == 1


def test_whole_lobe_consolidation_fills_its_lobe_to_the_pleura() -> None:
    """With ``whole_lobe`` a lobar consolidation is the lobe itself: every lung voxel of that
    side well inside its fissure planes is dense (consolidation, or the vessels and air
    bronchograms crossing it), none aerated, and it reaches the lung's outer surface; without
    it the same seed draws 2-4 lobules, which leave aerated lung in the lobe."""
    from scipy import ndimage

    from segpipe.spatial import index_to_physical

    for seed in range(40):
        spec = PhantomSpec(seed=seed, size_xyz=(96, 96, 64), spacing_xyz=(4.0, 4.0, 5.0), consolidation=1.0,
                           whole_lobe=1.0)
        ph = make_phantom(spec, tissue_map=True)
        found = ph.info["consolidation"]
        if len(found) == 1 and found[0]["lobe"] != "patchy":
            break
    else:
        pytest.fail("no seed drew a single lobar consolidation")
    (c,) = found
    assert c["whole_lobe"] and not c["margin"]
    tissue = sitk.GetArrayFromImage(ph.tissue)
    label = sitk.GetArrayFromImage(ph.label)
    side = label == (1 if c["side"] == "right" else 2)
    zyx = np.argwhere(side)
    pts = index_to_physical(ph.label, zyx[:, ::-1].astype(float))
    deep = np.ones(len(pts), bool)
    for plane in c["fissures"]:
        deep &= (pts - plane["point_mm"]) @ np.asarray(plane["normal"]) < -8.0
    lobe = np.zeros(side.shape, bool)
    lobe[tuple(zyx[deep].T)] = True
    t = tissue[lobe]
    assert lobe.sum() > 100
    assert np.mean(t == TISSUES["lung"]) < 0.02
    assert np.mean(t == TISSUES["consolidation"]) > 0.6
    surface = side & ~ndimage.binary_erosion(side)
    assert np.count_nonzero(surface & (tissue == TISSUES["consolidation"])) > 50
    lobules = make_phantom(spec.replace(whole_lobe=0.0), tissue_map=True)
    assert not lobules.info["consolidation"][0]["whole_lobe"]
    assert np.mean(sitk.GetArrayFromImage(lobules.tissue)[lobe] == TISSUES["lung"]) > 0.1


def test_diaphragm_variety_brings_the_anterior_recesses_down() -> None:
    """With ``diaphragm_variety`` the domes are narrower front to back and less tilted: the
    lung's floor in front (before the heart and the liver) comes down toward the posterior
    recesses, which stay the lowest lung; the rest of the phantom is drawn as before."""

    def floor_gap(ph) -> float:  # median floor height of the front fifth of lung columns less that of the back fifth
        lab = sitk.DICOMOrient(ph.label, "LPS")
        lung = sitk.GetArrayFromImage(lab) > 0
        columns = lung.any(0)
        floor = np.argmax(lung, axis=0) * lab.GetSpacing()[2]  # LPS: z index 0 is the feet
        y = np.nonzero(columns)[0]
        rows = np.arange(lung.shape[1])[:, None]
        front = np.median(floor[columns & (rows <= np.percentile(y, 20))])
        back = np.median(floor[columns & (rows >= np.percentile(y, 80))])
        return float(front - back)

    for seed in (3, 11, 42):
        spec = PhantomSpec(seed=seed, size_xyz=(96, 96, 96), coverage="chest")
        plain, varied = make_phantom(spec), make_phantom(spec.replace(diaphragm_variety=1.0))
        gap, varied_gap = floor_gap(plain), floor_gap(varied)
        assert gap > 30.0 and 0.0 <= varied_gap < gap - 8.0, (seed, gap, varied_gap)
        assert varied.info["diaphragm"] != plain.info["diaphragm"]
    with pytest.raises(ConfigError, match="diaphragm_variety"):
        PhantomSpec(diaphragm_variety=1.5)


def test_recess_variety_puts_the_lowest_lung_toward_the_direction_drawn() -> None:
    """With ``recess_variety`` each dome's floor slopes down toward a direction drawn all round
    (0: the back, pi/2: the side away from the midline, pi: the front): the lowest tenth of
    each lung's floor lies that way from the lung's centre, in front or at the side too, where
    the plain domes keep it behind."""

    def lowest_way(ph, value: int) -> np.ndarray:  # unit (x, y) from a lung's footprint centre to its lowest tenth
        lab = sitk.DICOMOrient(ph.label, "LPS")
        lung = sitk.GetArrayFromImage(lab) == value
        columns = lung.any(0)
        floor = np.argmax(lung, axis=0)[columns]  # LPS: z index 0 is the feet
        y, x = np.nonzero(columns)
        low = floor <= np.percentile(floor, 10)
        way = np.array([x[low].mean() - x.mean(), y[low].mean() - y.mean()])
        return way / np.linalg.norm(way)

    agree = []
    for seed in (3, 5, 11):  # drawn toward the front (3, 11) and the side (5)
        spec = PhantomSpec(seed=seed, size_xyz=(96, 96, 96), coverage="chest")
        plain, varied = make_phantom(spec), make_phantom(spec.replace(recess_variety=1.0))
        toward = varied.info["diaphragm"]["toward"]
        assert plain.info["diaphragm"]["toward"] == 0.0
        for value, outward in ((1, -1.0), (2, 1.0)):  # right lung: its side is -x (LPS); left: +x
            drawn = np.array([np.sin(toward) * outward, np.cos(toward)])
            assert lowest_way(varied, value) @ drawn > 0.85, (seed, value, toward)
            agree.append(lowest_way(plain, value) @ drawn)
    assert min(agree) < 0.0  # the plain domes' lowest lung is not in front
    with pytest.raises(ConfigError, match="recess_variety"):
        PhantomSpec(recess_variety=1.5)


def test_flexure_variety_brings_the_colon_up_under_the_left_dome() -> None:
    """With ``flexure_variety`` the colon's splenic flexure lies 15-50 mm below the left dome
    (about 60 mm without), so a scan whose top edge is just below the lungs shows gas and stool
    there; gas and stool stay below the diaphragm."""
    from segpipe.synthetic import TISSUES

    for seed in (3, 11, 42):
        spec = PhantomSpec(seed=seed, size_xyz=(96, 96, 96), coverage="chest_abdomen", abdomen_detail=1.0)
        plain, high = make_phantom(spec), make_phantom(spec.replace(flexure_variety=1.0), tissue_map=True)
        below, high_below = plain.info["colon_below_left_dome_mm"], high.info["colon_below_left_dome_mm"]
        assert below > 50.0 and 10.0 <= high_below < below - 8.0, (seed, below, high_below)
        tissue, lab = sitk.GetArrayFromImage(high.tissue), sitk.GetArrayFromImage(high.label)
        assert not np.any(np.isin(tissue, [TISSUES["bowel_gas"], TISSUES["bowel"]]) & (lab > 0))
    with pytest.raises(ConfigError, match="flexure_variety"):
        PhantomSpec(flexure_variety=1.5)


def test_table_variety_lays_the_patient_on_a_thick_mattress_as_dense_as_lung() -> None:
    """With ``table_variety`` the patient lies on 25-70 mm of foam of -900..-600 HU along the
    whole scan (the plain pad is at most 40 mm, or absent), touching the back; the mattress is
    table, never body or lung."""

    def mattress_mm(ph) -> list[float]:
        """Per slice, mm of table tissue at lung-like HU straight under the back (midline column)."""
        tissue, hu = sitk.GetArrayFromImage(ph.tissue), sitk.GetArrayFromImage(ph.image)
        out = []
        for z in range(0, tissue.shape[0], 8):
            col, vals = tissue[z, :, tissue.shape[2] // 2], hu[z, :, tissue.shape[2] // 2]
            back = int(np.nonzero(np.isin(col, [TISSUES["skin"], TISSUES["fat"], TISSUES["muscle"]]))[0].max())
            run = 0
            while back + 1 + run < len(col) and col[back + 1 + run] == TISSUES["table"] and -950 < vals[back + 1 + run] < -550:
                run += 1
            out.append(run * ph.image.GetSpacing()[1])
        return out

    for seed in (3, 11):
        spec = PhantomSpec(seed=seed, size_xyz=(96, 96, 64), coverage="chest_abdomen")
        plain, thick = make_phantom(spec, tissue_map=True), make_phantom(spec.replace(table_variety=1.0), tissue_map=True)
        assert max(mattress_mm(plain)) <= 40.0 + 2 * plain.image.GetSpacing()[1], seed
        assert min(mattress_mm(thick)) >= 25.0 - 2 * thick.image.GetSpacing()[1], (seed, mattress_mm(thick))
        tissue, lab = sitk.GetArrayFromImage(thick.tissue), sitk.GetArrayFromImage(thick.label)
        assert not np.any((tissue == TISSUES["table"]) & (lab > 0))
    with pytest.raises(ConfigError, match="table_variety"):
        PhantomSpec(table_variety=-0.5)


def test_zero_length_capsule_is_a_ball() -> None:
    """A capsule whose ends coincide (a smoothed path with a repeated knot) is a ball."""
    from segpipe.synthetic.shapes import Capsule, Grid

    ax = (np.arange(21, dtype=np.float32) - 10) * 1.0
    g = Grid(ax, ax, ax, (1.0, 1.0, 1.0))
    occ = np.broadcast_to(Capsule((0, 0, 0), (0, 0, 0), 5.0).occupancy(g), g.shape)
    assert occ.sum() == pytest.approx(4 / 3 * np.pi * 125, rel=0.05)
    assert occ[10, 10, 10] == 1 and occ[0, 0, 0] == 0
