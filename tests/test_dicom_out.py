"""DICOM outputs: SEG and RTSTRUCT written on a generated CT series, read back and compared."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import SimpleITK as sitk

from segpipe import io
from segpipe.cli import main
from segpipe.errors import GeometryError, OutputError, OutputFormatError
from segpipe.io import dicom_out
from tests.conftest import SHARED_DATA

pydicom = pytest.importorskip("pydicom")
hd = pytest.importorskip("highdicom")
rt_utils = pytest.importorskip("rt_utils")

RIGHT_HU, LEFT_HU = -850, -800  # the phantom's lungs carry their label in their HU


def write_series(folder: Path, hu_zyx: np.ndarray, spacing_xyz: tuple[float, float, float], origin: tuple[float, float, float],
                 row_dir: tuple[float, ...] = (1, 0, 0), col_dir: tuple[float, ...] = (0, 1, 0), order: str = "shuffled",
                 seed: int = 0) -> dict[str, str]:
    """A CT series, one file per slice of ``hu_zyx`` (slice k at origin + k * dz * normal), file
    names in ``order`` (shuffled, reversed or in order). Returns the study/series/frame UIDs."""
    from pydicom.dataset import Dataset, FileMetaDataset
    from pydicom.uid import CTImageStorage, ExplicitVRLittleEndian, generate_uid

    folder.mkdir(parents=True, exist_ok=True)
    row, col = np.asarray(row_dir, float), np.asarray(col_dir, float)
    normal = np.cross(row, col)
    uids = {"study": generate_uid(), "series": generate_uid(), "frame": generate_uid()}
    n = hu_zyx.shape[0]
    ks = {"shuffled": np.random.default_rng(seed).permutation(n), "reversed": np.arange(n)[::-1], "sorted": np.arange(n)}[order]
    for i, k in enumerate(ks):
        meta = FileMetaDataset()
        meta.MediaStorageSOPClassUID, meta.MediaStorageSOPInstanceUID = CTImageStorage, generate_uid()
        meta.TransferSyntaxUID = ExplicitVRLittleEndian
        ds = Dataset()
        ds.file_meta = meta
        ds.SOPClassUID, ds.SOPInstanceUID, ds.Modality = CTImageStorage, meta.MediaStorageSOPInstanceUID, "CT"
        ds.PatientName, ds.PatientID, ds.PatientBirthDate, ds.PatientSex = "Phantom^Lung", "PH001", "19700101", "O"
        ds.StudyInstanceUID, ds.SeriesInstanceUID, ds.FrameOfReferenceUID = uids["study"], uids["series"], uids["frame"]
        ds.StudyID, ds.AccessionNumber, ds.StudyDate, ds.StudyTime, ds.ReferringPhysicianName = "1", "A1", "20260101", "120000", ""
        ds.SeriesNumber, ds.InstanceNumber, ds.AcquisitionNumber = 3, i + 1, 1
        ds.Manufacturer, ds.PositionReferenceIndicator, ds.PatientPosition, ds.KVP = "test", "", "HFS", 120
        ds.ImageType = ["ORIGINAL", "PRIMARY", "AXIAL"]
        ds.ImagePositionPatient = [float(v) for v in np.asarray(origin) + k * spacing_xyz[2] * normal]
        ds.ImageOrientationPatient = [float(v) for v in (*row, *col)]
        ds.PixelSpacing, ds.SliceThickness = [spacing_xyz[1], spacing_xyz[0]], spacing_xyz[2]
        ds.Rows, ds.Columns = hu_zyx.shape[1:]
        ds.SamplesPerPixel, ds.PhotometricInterpretation = 1, "MONOCHROME2"
        ds.BitsAllocated, ds.BitsStored, ds.HighBit, ds.PixelRepresentation = 16, 16, 15, 1
        ds.RescaleIntercept, ds.RescaleSlope, ds.RescaleType = -1024, 1, "HU"
        ds.PixelData = (hu_zyx[k].astype(np.int16) + 1024).astype("<i2").tobytes()
        ds.save_as(folder / f"IM{i:04d}", enforce_file_format=True)
    return uids


def lung_phantom(shape_zyx: tuple[int, int, int] = (36, 80, 80)) -> np.ndarray:
    """Two lung-sized ellipsoids (about 1 L each at 4 mm voxels) in soft tissue, right lung at
    low column index (LPS -x with the usual orientation), each a little bumpy."""
    z, y, x = np.mgrid[: shape_zyx[0], : shape_zyx[1], : shape_zyx[2]].astype(float)
    hu = np.full(shape_zyx, 40, np.int16)
    bump = 0.08 * np.sin(y / 3.0) * np.cos(z / 4.0)
    right = ((x - 24) / 13) ** 2 + ((y - 40) / 22) ** 2 + ((z - 18) / 15) ** 2 < 1 + bump
    left = ((x - 56) / 12) ** 2 + ((y - 40) / 21) ** 2 + ((z - 17) / 14) ** 2 < 1 - bump
    hu[right], hu[left] = RIGHT_HU, LEFT_HU
    return hu


def mask_of(image: sitk.Image) -> sitk.Image:
    """segpipe's mask for the phantom: labels from the lungs' HU, on the image's grid."""
    hu = sitk.GetArrayViewFromImage(image)
    mask = sitk.GetImageFromArray(((hu == RIGHT_HU) * 1 + (hu == LEFT_HU) * 2).astype(np.uint8))
    mask.CopyInformation(image)
    return mask


def file_labels(ds: Any) -> np.ndarray:
    """The labels a source file's own pixels carry (rows, cols)."""
    hu = ds.pixel_array.astype(np.int32) - 1024
    return ((hu == RIGHT_HU) * 1 + (hu == LEFT_HU) * 2).astype(np.uint8)


def dice(a: np.ndarray, b: np.ndarray) -> float:
    return 2.0 * np.count_nonzero(a & b) / (np.count_nonzero(a) + np.count_nonzero(b))


SERIES = {  # name -> writer options: file order and slice direction
    "shuffled": {"order": "shuffled"},
    "normal-down-reversed": {"col_dir": (0, -1, 0), "order": "reversed"},
    "coronal": {"row_dir": (1, 0, 0), "col_dir": (0, 0, -1), "order": "shuffled"},
}


@pytest.fixture(scope="module", params=sorted(SERIES))
def series(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str], sitk.Image]:
    folder = tmp_path_factory.mktemp("series") / "dicom"
    uids = write_series(folder, lung_phantom(), (3.91, 3.91, 5.03), (-160.35, -170.71, -90.13), **SERIES[request.param])
    return folder, uids, mask_of(io.read_image(folder))


def source_files(folder: Path) -> dict[str, Any]:
    return {ds.SOPInstanceUID: ds for ds in (pydicom.dcmread(p) for p in sorted(folder.iterdir()))}


def dciodvfy_errors(path: Path) -> list[str]:
    run = subprocess.run(["dciodvfy", str(path)], capture_output=True, text=True, check=False)
    return [line for line in (run.stdout + run.stderr).splitlines() if line.startswith("Error")]


# ----------------------------------------------------------------------------- SEG
def test_seg_round_trip_is_voxel_identical_and_references_the_series(series: tuple[Path, dict[str, str], sitk.Image], tmp_path: Path) -> None:
    folder, uids, mask = series
    assert np.count_nonzero(sitk.GetArrayViewFromImage(mask) == 1) > 5000  # a lung-sized blob per side
    nifti = io.write_image(mask, tmp_path / "lungs.nii.gz")
    path = dicom_out.write_dicom_seg(mask, folder, tmp_path / "lungs_seg.dcm", model_name="tiny.pt")
    seg = hd.seg.segread(path)
    sources = source_files(folder)
    assert seg.StudyInstanceUID == uids["study"] and seg.FrameOfReferenceUID == uids["frame"]
    assert [s.SeriesInstanceUID for s in seg.ReferencedSeriesSequence] == [uids["series"]]
    referenced = {r.ReferencedSOPInstanceUID for r in seg.ReferencedSeriesSequence[0].ReferencedInstanceSequence}
    assert referenced == set(sources)
    # each source file's own pixels against the SEG's frames for that file (frames matched by UID)
    order = list(sources)
    labels = seg.get_pixels_by_source_instance(source_sop_instance_uids=order, combine_segments=True, skip_overlap_checks=True)
    for uid, frame in zip(order, labels):
        np.testing.assert_array_equal(frame, file_labels(sources[uid]))
    # and rebuilt on the mask's grid by position: identical to the NIfTI mask
    rebuilt = np.zeros(sitk.GetArrayViewFromImage(mask).shape, np.uint8)
    for uid, frame in zip(order, labels):
        k = mask.TransformPhysicalPointToIndex([float(v) for v in sources[uid].ImagePositionPatient])[2]
        rebuilt[k] = frame
    np.testing.assert_array_equal(rebuilt, sitk.GetArrayFromImage(io.read_image(nifti)))
    # only frames that hold lung
    lung_frames = sum(int(np.any(file_labels(ds) == v)) for ds in sources.values() for v in (1, 2))
    assert int(seg.NumberOfFrames) == lung_frames < 2 * len(sources)
    if shutil.which("dciodvfy"):
        assert dciodvfy_errors(path) == []


def test_seg_describes_the_lungs_and_the_algorithm(series: tuple[Path, dict[str, str], sitk.Image], tmp_path: Path) -> None:
    folder, _, mask = series
    seg = pydicom.dcmread(dicom_out.write_dicom_seg(mask, folder, tmp_path / "s.dcm", model_name="tiny.pt"))
    assert seg.Modality == "SEG" and seg.SegmentationType == "BINARY"
    got = [(s.SegmentNumber, s.SegmentLabel, s.SegmentedPropertyTypeCodeSequence[0].CodeValue,
            s.SegmentedPropertyTypeCodeSequence[0].CodingSchemeDesignator, s.SegmentedPropertyCategoryCodeSequence[0].CodeValue)
           for s in seg.SegmentSequence]
    assert got == [(1, "Right lung", "3341006", "SCT", "91723000"), (2, "Left lung", "44029006", "SCT", "91723000")]
    algo = seg.SegmentSequence[0].SegmentationAlgorithmIdentificationSequence[0]
    from segpipe import __version__

    assert (algo.AlgorithmName, algo.AlgorithmVersion) == ("segpipe", __version__)
    assert "tiny.pt" in algo.AlgorithmParameters and seg.ManufacturerModelName == "tiny.pt"


# ----------------------------------------------------------------------------- RTSTRUCT
def test_rtstruct_round_trip_dice_and_references(series: tuple[Path, dict[str, str], sitk.Image], tmp_path: Path) -> None:
    folder, uids, mask = series
    path = dicom_out.write_rtstruct(mask, folder, tmp_path / "lungs_rtstruct.dcm", model_name="tiny.pt")
    ds = pydicom.dcmread(path)
    sources = source_files(folder)
    assert ds.Modality == "RTSTRUCT" and ds.StudyInstanceUID == uids["study"] and ds.FrameOfReferenceUID == uids["frame"]
    frame = ds.ReferencedFrameOfReferenceSequence[0]
    assert frame.FrameOfReferenceUID == uids["frame"]
    ref_series = frame.RTReferencedStudySequence[0].RTReferencedSeriesSequence[0]
    assert ref_series.SeriesInstanceUID == uids["series"]
    assert {c.ReferencedSOPInstanceUID for c in ref_series.ContourImageSequence} == set(sources)
    assert [r.ROIName for r in ds.StructureSetROISequence] == ["Lung_R", "Lung_L"]
    assert all(r.ReferencedFrameOfReferenceUID == uids["frame"] for r in ds.StructureSetROISequence)
    # every contour lies in the plane of the slice it references
    for roi in ds.ROIContourSequence:
        for contour in roi.ContourSequence:
            src = sources[contour.ContourImageSequence[0].ReferencedSOPInstanceUID]
            normal = np.cross(*np.reshape(np.asarray(src.ImageOrientationPatient, float), (2, 3)))
            points = np.reshape(np.asarray(contour.ContourData, float), (-1, 3))
            np.testing.assert_allclose(points @ normal, np.dot(src.ImagePositionPatient, normal), atol=0.01)
    # decimal strings (DS) hold at most 16 characters (str() of a DS read from a file is its text)
    assert max(len(str(v)) for roi in ds.ROIContourSequence for c in roi.ContourSequence for v in c.ContourData) <= 16
    # rasterised back by rt-utils (its slice order, each slice's own file): Dice per lung
    back = rt_utils.RTStructBuilder.create_from(str(folder), str(path))
    truth = np.stack([file_labels(sources[s.SOPInstanceUID]) for s in back.series_data], axis=-1)
    for label, name in ((1, "Lung_R"), (2, "Lung_L")):
        assert dice(back.get_roi_mask_by_name(name), truth == label) >= 0.97
    if shutil.which("dciodvfy"):
        assert dciodvfy_errors(path) == []


def test_rtstruct_keeps_an_empty_lung_as_an_roi_without_contours(tmp_path: Path) -> None:
    hu = lung_phantom((20, 64, 64))
    hu[hu == RIGHT_HU] = 40  # the right lung is missing
    write_series(tmp_path / "dcm", hu, (5.0, 5.0, 8.0), (-160.0, -160.0, -80.0))
    mask = mask_of(io.read_image(tmp_path / "dcm"))
    ds = pydicom.dcmread(dicom_out.write_rtstruct(mask, tmp_path / "dcm", tmp_path / "rt.dcm"))
    assert [r.ROIName for r in ds.StructureSetROISequence] == ["Lung_R", "Lung_L"]
    assert ["ContourSequence" in r for r in ds.ROIContourSequence] == [False, True]
    if shutil.which("dciodvfy"):
        assert dciodvfy_errors(tmp_path / "rt.dcm") == []


def test_seg_of_a_scan_without_lungs_keeps_empty_frames(tmp_path: Path) -> None:
    hu = lung_phantom((10, 48, 48))
    hu[hu < 0] = 40
    write_series(tmp_path / "dcm", hu, (6.0, 6.0, 10.0), (-150.0, -150.0, -60.0))
    mask = mask_of(io.read_image(tmp_path / "dcm"))
    seg = hd.seg.segread(dicom_out.write_dicom_seg(mask, tmp_path / "dcm", tmp_path / "seg.dcm"))
    assert seg.number_of_segments == 2 and int(seg.NumberOfFrames) == 2 * 10  # highdicom cannot omit every frame
    assert not np.any(seg.pixel_array)


# ----------------------------------------------------------------------------- errors
def test_a_mask_off_the_series_grid_is_refused(series: tuple[Path, dict[str, str], sitk.Image], tmp_path: Path) -> None:
    folder, _, mask = series
    moved = sitk.Image(mask)
    moved.SetOrigin(tuple(np.asarray(mask.GetOrigin()) + np.asarray(mask.GetDirection()).reshape(3, 3)[:, 0] * 6.0))
    for writer in (dicom_out.write_dicom_seg, dicom_out.write_rtstruct):
        with pytest.raises(GeometryError, match="on no slice of the mask's grid"):
            writer(moved, folder, tmp_path / "x.dcm")
    cropped = sitk.RegionOfInterest(mask, [*mask.GetSize()[:2], mask.GetSize()[2] - 1], [0, 0, 0])
    with pytest.raises(GeometryError):
        dicom_out.write_dicom_seg(cropped, folder, tmp_path / "x.dcm")
    assert list(tmp_path.iterdir()) == []


def test_a_failed_write_leaves_no_file(series: tuple[Path, dict[str, str], sitk.Image], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder, _, mask = series

    def dies(self: Any, filename: Any, **kwargs: Any) -> None:
        Path(filename).write_bytes(b"DICM half")
        raise OSError("disk full")

    monkeypatch.setattr(pydicom.dataset.Dataset, "save_as", dies)
    for writer in (dicom_out.write_dicom_seg, dicom_out.write_rtstruct):
        with pytest.raises(OutputError, match="disk full"):
            writer(mask, folder, tmp_path / "out.dcm")
    assert list(tmp_path.iterdir()) == []


def test_format_names_parse_and_unknown_ones_fail() -> None:
    assert dicom_out.parse_formats(None) == ("nifti",)
    assert dicom_out.parse_formats("rtstruct, DICOM-SEG") == ("rtstruct", "dicom-seg")
    assert dicom_out.parse_formats(["nifti,dicom-seg", "dicom-seg", "rtstruct"]) == ("nifti", "dicom-seg", "rtstruct")
    with pytest.raises(OutputFormatError, match="unknown output format 'seg'"):
        dicom_out.parse_formats("nifti,seg")


def test_a_missing_package_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from segpipe.errors import DependencyError

    monkeypatch.setitem(sys.modules, "highdicom", None)  # import highdicom now raises ImportError
    with pytest.raises(DependencyError, match=r'pip install "segpipe\[dicom\]"'):
        dicom_out.require_dicom_packages(["nifti", "dicom-seg"])
    dicom_out.require_dicom_packages(["nifti", "rtstruct"])  # rt-utils does not need highdicom


# ----------------------------------------------------------------------------- CLI and API
class _FakeSegmenter:
    """Stands in for LungSegmenter: the phantom's own labels, no network."""

    model_path = Path("fake.pt")

    def predict_with_report(self, image: Any, **kwargs: Any) -> Any:
        from segpipe.infer import Prediction

        image = image if isinstance(image, sitk.Image) else io.read_image(image)
        report = {"volumes_ml": {"right": 1000.0, "left": 900.0}, "warnings": [], "timings_s": {"total_s": 0.1}}
        return Prediction(mask_of(image), report)


def test_cli_dicom_format_on_nifti_input_fails_first(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from segpipe import infer

    def no_model(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the model must not be loaded")

    monkeypatch.setattr(infer.LungSegmenter, "default", no_model)
    src = io.write_image(io.read_image(write_series_small(tmp_path)), tmp_path / "scan.nii.gz")
    for fmt in (["--format", "dicom-seg"], ["--format", "nifti,rtstruct"]):
        code = main(["infer", str(src), "-o", str(tmp_path / "out"), *fmt])
        err = capsys.readouterr().err
        assert code == 2
        assert err.count("\n") == 1 and err.startswith("segpipe infer: error: --format") and "DICOM series folder" in err
        assert not (tmp_path / "out").exists()
    # a series whose files lost their SOP Instance UIDs (over-anonymised) cannot be referenced
    folder = tmp_path / "case7" / "dicom"
    for f in folder.iterdir():
        ds = pydicom.dcmread(f)
        ds.SOPInstanceUID = ""
        ds.save_as(f)
    assert main(["infer", str(folder), "-o", str(tmp_path / "out"), "--format", "rtstruct"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "need SOPInstanceUID" in err and not (tmp_path / "out").exists()
    assert main(["infer", str(folder), "-o", str(tmp_path / "out"), "--format", "nifti,nope"]) == 2
    assert "unknown output format 'nope'" in capsys.readouterr().err


def write_series_small(tmp_path: Path) -> Path:
    write_series(tmp_path / "case7" / "dicom", lung_phantom((20, 64, 64)), (5.0, 5.0, 8.0), (-160.0, -160.0, -80.0))
    return tmp_path / "case7" / "dicom"


def test_cli_writes_every_format_asked_for(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from segpipe import infer

    monkeypatch.setattr(infer.LungSegmenter, "default", classmethod(lambda cls, **kw: _FakeSegmenter()))
    folder = write_series_small(tmp_path)
    out = tmp_path / "out"
    assert main(["infer", str(folder), "-o", str(out), "--format", "nifti,dicom-seg", "--format", "rtstruct", "--quiet"]) == 0
    names = sorted(p.name for p in out.iterdir())
    assert names == ["case7_lungs.json", "case7_lungs.nii.gz", "case7_lungs_rtstruct.dcm", "case7_lungs_seg.dcm"]
    import json

    report = json.loads((out / "case7_lungs.json").read_text())
    assert report["outputs"] == {"nifti": str(out / "case7_lungs.nii.gz"), "dicom-seg": str(out / "case7_lungs_seg.dcm"),
                                 "rtstruct": str(out / "case7_lungs_rtstruct.dcm")}
    assert {"dicom_seg_s", "rtstruct_s"} <= set(report["timings_s"])
    seg = hd.seg.segread(out / "case7_lungs_seg.dcm")
    assert seg.ManufacturerModelName == "fake.pt"
    from segpipe.infer.batch import _model_name
    from segpipe.model import DEFAULT_MODEL

    assert (_model_name(DEFAULT_MODEL), _model_name(None)) == ("segpipe default model (default.pt)", "segpipe model")
    # a second run skips the scan; the DICOM formats alone do not write the NIfTI mask
    assert main(["infer", str(folder), "-o", str(out), "--format", "dicom-seg,rtstruct"]) == 0
    assert "skipped" in capsys.readouterr().out
    only = tmp_path / "only"
    assert main(["infer", str(folder), "-o", str(only), "--format", "dicom-seg", "--quiet"]) == 0
    assert sorted(p.name for p in only.iterdir()) == ["case7_lungs.json", "case7_lungs_seg.dcm"]


def test_folder_of_series_and_predict_file(tmp_path: Path) -> None:
    from segpipe import infer

    for name in ("a", "b"):
        write_series(tmp_path / "in" / name, lung_phantom((12, 48, 48)), (6.0, 6.0, 10.0), (-150.0, -150.0, -60.0), seed=len(name))
    jobs = infer.plan_jobs([tmp_path / "in"], tmp_path / "out", formats="dicom-seg")
    assert [(j.input.name, j.seg.name, j.formats) for j in jobs] == [("a", "a_lungs_seg.dcm", ("dicom-seg",)), ("b", "b_lungs_seg.dcm", ("dicom-seg",))]
    infer.run_jobs(_FakeSegmenter(), jobs, progress=False)  # type: ignore[arg-type]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["a_lungs.json", "a_lungs_seg.dcm", "b_lungs.json", "b_lungs_seg.dcm"]
    seg = infer.LungSegmenter.__new__(infer.LungSegmenter)  # the API's predict_file with the fake's prediction
    seg.model_path = Path("fake.pt")
    seg.predict_with_report = _FakeSegmenter().predict_with_report  # type: ignore[method-assign]
    (tmp_path / "api").mkdir()
    report = seg.predict_file(tmp_path / "in" / "a", tmp_path / "api" / "lungs.nii.gz", formats=("nifti", "rtstruct"))
    assert sorted(report["outputs"]) == ["nifti", "rtstruct"] and (tmp_path / "api" / "lungs_rtstruct.dcm").is_file()
    with pytest.raises(OutputFormatError):
        seg.predict_file(tmp_path / "api" / "lungs.nii.gz", tmp_path / "api" / "again.nii.gz", formats="rtstruct")


# ----------------------------------------------------------------------------- a real series
@pytest.mark.skipif(not (SHARED_DATA / "copdgene-10002K-64" / "dicom").is_dir(), reason="shared/data not present")
def test_real_series_round_trip(tmp_path: Path) -> None:
    folder = SHARED_DATA / "copdgene-10002K-64" / "dicom"
    image = io.read_image(folder)
    reference = io.read_image(SHARED_DATA / "copdgene-10002K-64" / "lungs.nii.gz")
    assert reference.GetSize() == image.GetSize()
    np.testing.assert_allclose(reference.GetOrigin(), image.GetOrigin(), atol=1e-3)
    mask = sitk.Cast(reference, sitk.sitkUInt8)
    mask.CopyInformation(image)
    seg = hd.seg.segread(dicom_out.write_dicom_seg(mask, folder, tmp_path / "seg.dcm"))
    sources = {pydicom.dcmread(p, stop_before_pixels=True).SOPInstanceUID: p for p in sorted(folder.iterdir())}
    labels = seg.get_pixels_by_source_instance(source_sop_instance_uids=list(sources), combine_segments=True, skip_overlap_checks=True)
    rebuilt = np.zeros(sitk.GetArrayViewFromImage(mask).shape, np.uint8)
    for uid, frame in zip(sources, labels):
        k = mask.TransformPhysicalPointToIndex([float(v) for v in pydicom.dcmread(sources[uid], stop_before_pixels=True).ImagePositionPatient])[2]
        rebuilt[k] = frame
    np.testing.assert_array_equal(rebuilt, sitk.GetArrayViewFromImage(mask))
    back = rt_utils.RTStructBuilder.create_from(str(folder), str(dicom_out.write_rtstruct(mask, folder, tmp_path / "rt.dcm")))
    truth = np.stack([sitk.GetArrayViewFromImage(mask)[mask.TransformPhysicalPointToIndex([float(v) for v in s.ImagePositionPatient])[2]]
                      for s in back.series_data], axis=-1)
    for label, name in ((1, "Lung_R"), (2, "Lung_L")):
        assert dice(back.get_roi_mask_by_name(name), truth == label) >= 0.97
