"""Image I/O: geometry round trips through every format, DICOM series, bad input, atomic writes."""

from __future__ import annotations

import gzip
import logging
import os
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest
import SimpleITK as sitk

from segpipe import io
from segpipe.errors import GeometryError, InputError, OutputError
from tests.conftest import ORIENTATIONS, SHARED_DATA, make_volume, oblique_permuted

FORMATS = [".nii.gz", ".nii", ".nrrd", ".nhdr", ".mha", ".mhd"]


def assert_same_image(a: sitk.Image, b: sitk.Image, atol: float = 1e-5) -> None:
    assert a.GetSize() == b.GetSize()
    np.testing.assert_allclose(a.GetSpacing(), b.GetSpacing(), rtol=0, atol=atol)
    np.testing.assert_allclose(a.GetOrigin(), b.GetOrigin(), rtol=0, atol=atol)
    np.testing.assert_allclose(a.GetDirection(), b.GetDirection(), rtol=0, atol=atol)
    np.testing.assert_array_equal(sitk.GetArrayViewFromImage(a), sitk.GetArrayViewFromImage(b))


@pytest.mark.parametrize("suffix", FORMATS)
@pytest.mark.parametrize("orientation", ORIENTATIONS + ["oblique"])
def test_geometry_round_trip_every_format(tmp_path: Path, suffix: str, orientation: str) -> None:
    image = make_volume(orientation="LPS" if orientation == "oblique" else orientation)
    if orientation == "oblique":
        image = oblique_permuted(image)
    out = io.write_image(image, tmp_path / f"case{suffix}")
    back = io.read_image(out)
    assert_same_image(image, back)
    assert back.GetPixelID() == image.GetPixelID()


@pytest.mark.parametrize("dtype", [np.uint8, np.int16, np.float32])
def test_pixel_types_survive(tmp_path: Path, dtype: type) -> None:
    image = make_volume(dtype=np.int16)
    image = sitk.Cast(image, {np.uint8: sitk.sitkUInt8, np.int16: sitk.sitkInt16, np.float32: sitk.sitkFloat32}[dtype])
    back = io.read_image(io.write_image(image, tmp_path / "x.nii.gz"))
    assert back.GetPixelID() == image.GetPixelID()


def test_write_with_reference_takes_its_exact_geometry(tmp_path: Path) -> None:
    reference = oblique_permuted(make_volume(orientation="RAS"))
    mask = sitk.Image(reference.GetSize(), sitk.sitkUInt8)  # default geometry
    written = io.read_image(io.write_image(mask, tmp_path / "mask.nii.gz", reference=reference))
    assert written.GetSpacing() == pytest.approx(reference.GetSpacing(), abs=1e-6)
    assert written.GetOrigin() == pytest.approx(reference.GetOrigin(), abs=1e-5)
    assert written.GetDirection() == pytest.approx(reference.GetDirection(), abs=1e-6)
    with pytest.raises(GeometryError, match="reference size"):
        io.write_image(sitk.Image((3, 3, 3), sitk.sitkUInt8), tmp_path / "bad.nii.gz", reference=reference)
    assert not (tmp_path / "bad.nii.gz").exists()


def test_write_is_atomic_and_leaves_nothing_on_failure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    image = make_volume()
    target = tmp_path / "out.nii.gz"
    io.write_image(image, target)
    before = target.read_bytes()

    def boom(*args: object, **kwargs: object) -> None:
        partial = Path(str(args[1]))
        partial.write_bytes(b"partial")  # a writer that dies half way
        raise RuntimeError("disk full")

    monkeypatch.setattr(io.sitk, "WriteImage", boom)
    with pytest.raises(OutputError, match="disk full"):
        io.write_image(make_volume(seed=1), target)
    assert target.read_bytes() == before  # the old file is untouched
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.nii.gz"]  # no temp files left


def test_mhd_pair_is_written_under_its_final_names(tmp_path: Path) -> None:
    io.write_image(make_volume(), tmp_path / "scan.mhd")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["scan.mhd", "scan.zraw"]
    assert "scan.zraw" in (tmp_path / "scan.mhd").read_text()


# ----------------------------------------------------------------------------- DICOM
def _write_dicom_series(folder: Path, image: sitk.Image, uid: str, intercept: int = -1024) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    writer = sitk.ImageFileWriter()
    writer.KeepOriginalImageUIDOn()
    direction = image.GetDirection()
    for k in range(image.GetSize()[2]):
        s = image[:, :, k]
        s.SetMetaData("0008|0060", "CT")
        s.SetMetaData("0020|000e", uid)
        s.SetMetaData("0020|0013", str(k + 1))
        s.SetMetaData("0020|0032", "\\".join(f"{v:.6f}" for v in image.TransformIndexToPhysicalPoint((0, 0, k))))
        s.SetMetaData("0020|0037", "\\".join(f"{v:.6f}" for v in (direction[0], direction[3], direction[6], direction[1], direction[4], direction[7])))
        s.SetMetaData("0028|1052", str(intercept))
        s.SetMetaData("0028|1053", "1")
        writer.SetFileName(str(folder / f"{uid[-3:]}_{k:03d}.dcm"))
        writer.Execute(s)


def test_dicom_series_rescale_applied_and_geometry_kept(tmp_path: Path) -> None:
    image = make_volume(size_xyz=(12, 10, 6), spacing_xyz=(0.7, 0.7, 2.5))
    _write_dicom_series(tmp_path / "dcm", image, "1.2.826.0.1.3680043.2.1125.7.101")
    first = sorted((tmp_path / "dcm").iterdir())[0]
    stored = np.frombuffer(first.read_bytes()[-12 * 10 * 2 :], dtype="<i2").reshape(10, 12)
    hu = sitk.GetArrayViewFromImage(image)[0]
    np.testing.assert_array_equal(stored.astype(int) - 1024, hu)  # the file holds HU + 1024
    back = io.read_image(tmp_path / "dcm")
    np.testing.assert_array_equal(sitk.GetArrayViewFromImage(back), sitk.GetArrayViewFromImage(image))
    np.testing.assert_allclose(back.GetSpacing(), image.GetSpacing(), atol=1e-5)
    np.testing.assert_allclose(back.GetOrigin(), image.GetOrigin(), atol=1e-4)


def test_dicom_series_with_a_missing_slice_is_read_with_a_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A series with a slice missing is still read (evenly spaced, as SimpleITK builds it),
    and a warning says by how much slices move; an evenly spaced one gives no warning."""
    image = make_volume(size_xyz=(8, 8, 8), spacing_xyz=(0.7, 0.7, 2.5))
    _write_dicom_series(tmp_path / "even", image, "1.2.826.0.1.3680043.2.1125.7.301")
    _write_dicom_series(tmp_path / "gap", image, "1.2.826.0.1.3680043.2.1125.7.302")
    sorted((tmp_path / "gap").iterdir())[4].unlink()
    with caplog.at_level(logging.WARNING, logger="segpipe"):
        io.read_image(tmp_path / "even")
    assert "evenly" not in caplog.text
    with caplog.at_level(logging.WARNING, logger="segpipe"):
        back = io.read_image(tmp_path / "gap")
    assert back.GetSize() == (8, 8, 7)
    assert "not evenly spaced (2.5 to 5 mm apart" in caplog.text and "2.92 mm apart" in caplog.text and "up to 1.25 mm" in caplog.text


def test_dicom_folder_with_several_series(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    big_uid, small_uid = "1.2.826.0.1.3680043.2.1125.7.201", "1.2.826.0.1.3680043.2.1125.7.202"
    big = make_volume(size_xyz=(8, 8, 7), seed=1)
    small = make_volume(size_xyz=(8, 8, 4), seed=2)
    _write_dicom_series(tmp_path, big, big_uid)
    _write_dicom_series(tmp_path, small, small_uid)
    with caplog.at_level(logging.WARNING, logger="segpipe"):
        chosen = io.read_image(tmp_path)
    assert chosen.GetSize() == (8, 8, 7)
    assert "2 DICOM series" in caplog.text and small_uid in caplog.text and "--series" in caplog.text
    picked = io.read_image(tmp_path, series_uid=small_uid)
    np.testing.assert_array_equal(sitk.GetArrayViewFromImage(picked), sitk.GetArrayViewFromImage(small))
    with pytest.raises(InputError, match="no DICOM series 9.9"):
        io.read_image(tmp_path, series_uid="9.9")


@pytest.mark.skipif(not (SHARED_DATA / "lidc-idri-0001" / "dicom").is_dir(), reason="shared/data not present")
def test_real_dicom_series_reads_in_hu() -> None:
    image = io.read_image(SHARED_DATA / "lidc-idri-0001" / "dicom")
    assert image.GetSize() == (512, 512, 133)
    assert image.GetSpacing() == pytest.approx((0.703125, 0.703125, 2.5))
    array = sitk.GetArrayViewFromImage(image)
    air = np.percentile(array[:, :40, 200:300], 50)  # in front of the chest: air
    assert -1050 < air < -950


# ----------------------------------------------------------------------------- bad input
def _write_nifti_with_pixdim(path: Path, pixdim: tuple[float, float, float]) -> None:
    """A NIfTI-1 file whose header holds ``pixdim`` as given (nibabel would "fix" it on save)."""
    plain = path.with_name("plain.nii")
    nib.save(nib.Nifti1Image(np.zeros((4, 5, 6), np.int16), np.eye(4)), str(plain))
    data = bytearray(plain.read_bytes())
    plain.unlink()
    data[80:92] = np.asarray(pixdim, dtype="<f4").tobytes()  # pixdim[1:4] (pixdim starts at byte 76)
    data[252:256] = np.zeros(2, "<i2").tobytes()  # qform_code = sform_code = 0: spacing from pixdim
    if path.name.endswith(".gz"):
        path.write_bytes(gzip.compress(bytes(data)))
    else:
        path.write_bytes(bytes(data))


def _truncate(path: Path) -> Path:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    return path


def make_bad_input(kind: str, tmp_path: Path) -> Path:
    """Build one kind of broken input file; shared with the CLI tests."""
    if kind == "missing":
        return tmp_path / "nope.nii.gz"
    if kind == "empty":
        p = tmp_path / "empty.nii.gz"
        p.write_bytes(b"")
        return p
    if kind == "garbage":
        p = tmp_path / "garbage.mha"
        p.write_bytes(b"this is not an image\n" * 20)
        return p
    if kind == "unsupported":
        p = tmp_path / "scan.png"
        p.write_bytes(b"\x89PNG")
        return p
    if kind == "corrupt-.nii.gz":  # bytes flipped mid-stream: ITK would read garbage silently
        p = io.write_image(make_volume(size_xyz=(40, 30, 20)), tmp_path / "c.nii.gz")
        data = bytearray(p.read_bytes())
        for i in range(len(data) // 2, len(data) // 2 + 4):
            data[i] ^= 0xA5
        p.write_bytes(bytes(data))
        return p
    if kind.startswith("truncated"):
        suffix = kind.split("-", 1)[1]
        p = tmp_path / f"t{suffix}"
        io.write_image(make_volume(size_xyz=(40, 30, 20)), p)
        return _truncate(p)
    if kind == "2d":
        p = tmp_path / "slice.nii.gz"
        sitk.WriteImage(sitk.Image(16, 16, sitk.sitkInt16), str(p))
        return p
    if kind == "single-slice":
        p = tmp_path / "one.nii.gz"
        sitk.WriteImage(sitk.Image(16, 16, 1, sitk.sitkInt16), str(p))
        return p
    if kind == "4d":
        p = tmp_path / "fmri.nii.gz"
        nib.save(nib.Nifti1Image(np.zeros((4, 5, 6, 3), np.float32), np.eye(4)), str(p))
        return p
    if kind in ("nan", "inf"):
        array = np.zeros((6, 7, 8), np.float32)
        array[2, 3, 4] = np.nan if kind == "nan" else np.inf
        p = tmp_path / f"{kind}.nrrd"
        sitk.WriteImage(sitk.GetImageFromArray(array), str(p))
        return p
    if kind == "zero-spacing":
        p = tmp_path / "zero.nii.gz"
        _write_nifti_with_pixdim(p, (1.0, 0.0, 1.0))
        return p
    if kind == "negative-spacing":
        p = tmp_path / "neg.nii"
        _write_nifti_with_pixdim(p, (1.0, -2.0, 1.0))
        return p
    if kind == "zero-spacing-nrrd":
        (tmp_path / "z.raw").write_bytes(np.zeros(8, np.int16).tobytes())
        p = tmp_path / "z.nhdr"
        p.write_text(
            "NRRD0004\ntype: short\ndimension: 3\nspace: left-posterior-superior\nsizes: 2 2 2\n"
            "space directions: (1,0,0) (0,1,0) (0,0,0)\nkinds: domain domain domain\nendian: little\n"
            "encoding: raw\nspace origin: (0,0,0)\ndata file: z.raw\n"
        )
        return p
    if kind == "empty-dicom-folder":
        p = tmp_path / "dicomdir"
        p.mkdir()
        (p / "notes.txt").write_text("no dicom here")
        return p
    raise ValueError(kind)


BAD_INPUTS = {
    "missing": (InputError, "not found"),
    "empty": (InputError, "empty"),
    "garbage": (InputError, "cannot read"),
    "unsupported": (InputError, "unsupported file type"),
    "truncated-.nii.gz": (InputError, "truncated"),
    "corrupt-.nii.gz": (InputError, "truncated or corrupt"),
    "truncated-.nii": (InputError, "truncated"),
    "truncated-.nrrd": (InputError, "truncated"),
    "truncated-.mha": (InputError, "truncated"),
    "2d": (InputError, "2D image"),
    "single-slice": (InputError, "single slice"),
    "4d": (InputError, "4D image"),
    "nan": (InputError, "NaN/Inf"),
    "inf": (InputError, "NaN/Inf"),
    "zero-spacing": (GeometryError, "spacing must be positive"),
    "negative-spacing": (GeometryError, "spacing must be positive"),
    "zero-spacing-nrrd": (InputError, "Zero-valued spacing"),
    "empty-dicom-folder": (InputError, "no DICOM files"),
}


@pytest.mark.parametrize("kind", sorted(BAD_INPUTS))
def test_bad_input_raises_one_line_error(tmp_path: Path, kind: str) -> None:
    path = make_bad_input(kind, tmp_path)
    error, pattern = BAD_INPUTS[kind]
    with pytest.raises(error, match=pattern) as info:
        io.read_image(path)
    assert "\n" not in str(info.value)


def test_truncated_gzip_detected_without_reading_voxels_twice(tmp_path: Path) -> None:
    path = io.write_image(make_volume(size_xyz=(40, 30, 20)), tmp_path / "ok.nii.gz")
    with gzip.open(path) as fh:  # sanity: the file we start from is complete
        assert len(fh.read()) > 40 * 30 * 20 * 2
    io.read_image(path)


# ----------------------------------------------------------------------------- bad output
def test_output_folder_missing(tmp_path: Path) -> None:
    with pytest.raises(OutputError, match="does not exist"):
        io.write_image(make_volume(), tmp_path / "no" / "such" / "out.nii.gz")
    assert list(tmp_path.iterdir()) == []


def test_output_folder_not_writable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ro = tmp_path / "ro"
    ro.mkdir()
    if os.geteuid() == 0:  # root writes anywhere: simulate the permission answer
        real = os.access
        monkeypatch.setattr(io.os, "access", lambda p, mode: False if Path(p) == ro else real(p, mode))
    else:
        ro.chmod(0o500)
    try:
        with pytest.raises(OutputError, match="not writable"):
            io.write_image(make_volume(), ro / "out.nii.gz")
    finally:
        ro.chmod(0o700)
    assert list(ro.iterdir()) == []


def test_output_suffix_and_overwrite(tmp_path: Path) -> None:
    with pytest.raises(OutputError, match="unsupported output type"):
        io.check_output_path(tmp_path / "out.png")
    p = io.write_image(make_volume(), tmp_path / "a.nii.gz")
    with pytest.raises(OutputError, match="--overwrite"):
        io.write_image(make_volume(), p, overwrite=False)


def test_suffix_helpers() -> None:
    assert io.image_suffix("a/b/case.NII.GZ") == ".nii.gz"
    assert io.strip_suffix("case_01.nii.gz") == "case_01"
    assert io.strip_suffix("scan.mha") == "scan"
    assert io.image_suffix("notes.txt") == ""


# ----------------------------------------------------------------------------- HU sanity
def _ct_like(seed: int = 0) -> np.ndarray:
    """Air around a water-like body with lung-like holes, in HU, (z, y, x)."""
    rng = np.random.default_rng(seed)
    z, y, x = np.ogrid[:20, :64, :64]
    a = np.full((20, 64, 64), -1000.0, np.float32)
    a[(y - 32) ** 2 + (x - 32) ** 2 < 26**2 + 0 * z] = 40.0
    a[((y - 32) ** 2 + (x - 20) ** 2 < 8**2) | ((y - 32) ** 2 + (x - 44) ** 2 < 8**2) & (z >= 0)] = -850.0
    return a + rng.normal(0, 15, a.shape).astype(np.float32)


@pytest.mark.parametrize(
    "transform, pattern",
    [
        (lambda a: a + 1024, "--hu-offset -1024"),
        (lambda a: a + 1000, "--hu-offset -1000"),
        (lambda a: (a + 1024) / 3000, "normalised"),
        (lambda a: np.abs(a + 1000) * 0.3 + 20, "found no air"),  # MRI-like: dark background, no negatives
    ],
)
def test_check_hu_names_the_fix(transform, pattern: str) -> None:  # type: ignore[no-untyped-def]
    io.check_hu(sitk.GetImageFromArray(_ct_like()))  # real HU passes
    with pytest.raises(InputError, match=pattern.replace("-", r"\-")):
        io.check_hu(sitk.GetImageFromArray(transform(_ct_like()).astype(np.float32)), "scan.nii.gz")


def test_inference_reads_nan_as_padding_beyond_the_field_of_view(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from segpipe.infer.scan import NAN_PADDING_HU, read_scan

    a = _ct_like()
    yy, xx = np.mgrid[:64, :64]
    a[:, (yy - 32) ** 2 + (xx - 32) ** 2 > 30**2] = np.nan  # outside a reconstruction circle
    path = tmp_path / "nan_outside.nii.gz"
    sitk.WriteImage(sitk.GetImageFromArray(a), str(path))
    with pytest.raises(InputError, match="NaN/Inf"):
        io.read_image(path)  # other readers refuse it as before
    with caplog.at_level(logging.WARNING):
        canonical, _ = read_scan(path)
    out = sitk.GetArrayFromImage(canonical)
    assert np.isfinite(out).all() and np.array_equal(out == NAN_PADDING_HU, np.isnan(a))
    assert np.array_equal(out[~np.isnan(a)], a[~np.isnan(a)])
    assert any("are NaN: read as padding" in r.getMessage() for r in caplog.records)
    a[0, 0, 0] = np.inf
    sitk.WriteImage(sitk.GetImageFromArray(a), str(path))
    with pytest.raises(InputError, match="infinite"):
        read_scan(path)


def test_check_hu_accepts_a_crop_inside_the_body_of_an_expiratory_scan() -> None:
    a = _ct_like()
    a[a < -900] = 40.0  # no air around the body: the view lies inside it
    a[a < -700] = -600.0  # lungs at -600 HU
    io.check_hu(sitk.GetImageFromArray(a))
    with pytest.raises(InputError, match="found no air"):  # without the lungs it is no CT it can tell
        io.check_hu(sitk.GetImageFromArray(np.where(a < -500, 40.0, a).astype(np.float32)))


@pytest.mark.skipif(not SHARED_DATA.is_dir(), reason="shared/data not present")
def test_check_hu_accepts_real_scans() -> None:
    io.check_hu(io.read_image(SHARED_DATA / "copdgene-10002K-64" / "ct.nii.gz"))


# ----------------------------------------------------------------------------- lean NIfTI read
@pytest.mark.parametrize("suffix", [".nii.gz", ".nii"])
@pytest.mark.parametrize("orientation", ["LPS", "RAS", "LAI", "oblique"])
@pytest.mark.parametrize("pixel", [sitk.sitkInt16, sitk.sitkUInt8, sitk.sitkUInt16, sitk.sitkInt32, sitk.sitkFloat32, sitk.sitkFloat64])
def test_lean_nifti_read_equals_itk_read(tmp_path: Path, suffix: str, orientation: str, pixel: int) -> None:
    image = make_volume(size_xyz=(37, 29, 23), orientation="LPS" if orientation == "oblique" else orientation)
    if orientation == "oblique":
        image = oblique_permuted(image)
    image = sitk.Cast(image + 1024, pixel) if pixel in (sitk.sitkUInt8, sitk.sitkUInt16) else sitk.Cast(image, pixel)
    path = tmp_path / f"x{suffix}"
    sitk.WriteImage(image, str(path))
    lean = io._read_nifti_lean(path, io._check_nifti_file(path))
    assert lean is not None  # the one-copy path was taken
    itk = sitk.ReadImage(str(path))
    assert_same_image(lean, itk, atol=0)
    assert lean.GetPixelID() == itk.GetPixelID() == pixel


def test_lean_nifti_read_of_big_endian_and_multi_member_files(tmp_path: Path) -> None:
    data = np.arange(31 * 17 * 11, dtype=np.int16).reshape(31, 17, 11) - 900  # x y z, as nibabel stores
    affine = np.diag([-0.8, -0.8, 2.5, 1.0])
    big = nib.Nifti1Image(data.astype(">i2"), affine)
    big.header.set_data_dtype(">i2")
    nib.save(big, tmp_path / "big.nii")
    lean = io.read_image(tmp_path / "big.nii")
    assert lean.GetPixelID() == sitk.sitkInt16
    assert_same_image(lean, sitk.ReadImage(str(tmp_path / "big.nii")), atol=0)
    np.testing.assert_array_equal(sitk.GetArrayViewFromImage(lean), data.transpose(2, 1, 0))
    # a .gz written as two members (as concatenating streams or some writers do) reads whole
    raw = (tmp_path / "big.nii").read_bytes()
    (tmp_path / "two.nii.gz").write_bytes(gzip.compress(raw[:5000]) + gzip.compress(raw[5000:]))
    assert_same_image(io.read_image(tmp_path / "two.nii.gz"), lean, atol=0)


def test_scaled_nifti_is_read_by_itk(tmp_path: Path) -> None:
    data = np.arange(20 * 18 * 9, dtype=np.int16).reshape(20, 18, 9)
    img = nib.Nifti1Image(data, np.diag([0.7, 0.7, 2.0, 1.0]))
    img.header.set_slope_inter(2.0, -1024.0)
    nib.save(img, tmp_path / "scaled.nii.gz")
    path = tmp_path / "scaled.nii.gz"
    assert io._read_nifti_lean(path, io._check_nifti_file(path)) is None  # ITK applies the scaling
    read = io.read_image(path)
    np.testing.assert_allclose(sitk.GetArrayViewFromImage(read), data.transpose(2, 1, 0) * 2.0 - 1024.0)


@pytest.mark.parametrize("inflater", ["isal", "zlib"])
def test_gzip_inflate_checks_with_either_library(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, inflater: str) -> None:
    import zlib

    if inflater == "zlib":
        monkeypatch.setattr(io.nifti, "_ZLIB", zlib)
    image = make_volume(size_xyz=(40, 30, 20))
    good = io.write_image(image, tmp_path / "good.nii.gz")
    assert_same_image(io.read_image(good), image)
    raw = bytearray(good.read_bytes())
    corrupt = tmp_path / "corrupt.nii.gz"
    raw[len(raw) // 2] ^= 0xFF
    corrupt.write_bytes(bytes(raw))
    truncated = tmp_path / "truncated.nii.gz"
    truncated.write_bytes(good.read_bytes()[: len(raw) * 2 // 3])
    for bad in (corrupt, truncated):
        with pytest.raises(InputError, match="truncated or corrupt"):
            io.read_image(bad)
        assert len(list(tmp_path.iterdir())) == 3
