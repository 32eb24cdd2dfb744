"""Field-of-view benchmark: crops of whole-chest scans, each segmented on its own and scored
against the mask of its whole scan.

Crops (canonical LPS index space, from the reference lungs' extent):

- ``cardiac``: an 18 cm cube centred between the lungs, a little left, anterior and low (the
  heart): the field of view lies inside the body;
- ``apex``: the top 5 cm of lung with 6 cm above it (a neck scan's bottom);
- ``bases``: the lowest 6 cm of lung with 12 cm below it (an abdominal scan's top);
- ``inplane70``: the middle 70 % of the lungs' width, all slices (the field of view cuts the
  body and both lungs at the sides);
- ``inplane70_circle2048``, ``inplane70_circle1024``: the same with the scanner's reconstruction
  circle: voxels outside the inscribed circle set to the padding value (-2048; -1024, which has
  the value of air) and left out of the reference;
- ``cardiac_circle1024``, ``cardiac_circle3024``: the cardiac cube with the circle (-1024, -3024);
- ``lower_half``: the lower half of the scan's slices;
- ``bases3_fill0``: the lowest 3 cm of lung with 12 cm below it and one slice of 0 above it
  (what a resample with SimpleITK's default value adds when it rounds its size up): the slice
  is not scanned, and the bases it touches are cut by the scan's edge there.

``--random N`` scores N random crops per case instead (seeded, the same on every run): a slab
of 4-20 cm, an in-plane window of 14-32 cm (x and y), or both, placed anywhere over the
lungs' extent (a slab may lie beyond the lungs: no lung expected), with the scanner's circle
and a padding of -1024, -2048 or -3024 HU on half of the windows. Beside each lung's Dice it
reports the lung found where the whole-scan mask has none (``extra_ml``).

``--reset-origin`` moves each crop's origin to (0, 0, 0), as in a file saved without its scanner
coordinates (x = 0 at its first column is then no scanner's centre); ``--shift-x`` moves the
whole scan along x first (a patient off the scanner's centre).

References: a real scan without a lung mask (LIDC-IDRI-0001) is scored against the same model's
mask of the whole scan; COPDGene against its reference labels; phantoms against their labels.
A lung counts where the reference holds at least 5 mL of it in the crop; the summary gives the
mean and worst Dice over all of them and over those with at least 50 mL (the issue's target),
and of the lungs of 50 mL lost, those that went to the other side (found, but named wrongly).
The real upper-abdomen slab (../shared/data/abdomen-slab-dicom) is segmented as it is: the lung
found there (mL) should be none, or a sliver of a base.

Usage::

    python benchmarks/fov_consistency.py [--phantoms 4] [--seed-base 930000] [--json out.json] [--no-rule NAME] [--qc DIR]
        [--random N --random-seed S] [--shift-x MM] [--reset-origin] [--rule-param NAME.KEY=VALUE]
    python benchmarks/fov_consistency.py --phantoms 0 --random 40 [--random-seed 0] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import SimpleITK as sitk

from segpipe.metrics import dice

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared" / "data"
CROPS = ("cardiac", "apex", "bases", "inplane70", "inplane70_circle2048", "inplane70_circle1024", "cardiac_circle1024",
         "cardiac_circle3024", "lower_half", "bases3_fill0")
MIN_REF_ML = 5.0


def _crop_slices(ref: np.ndarray, spacing_xyz: tuple[float, ...], name: str) -> tuple[slice, slice, slice]:
    """(z, y, x) slices of crop ``name`` for the canonical reference label ``ref``."""
    zz, yy, xx = np.nonzero(ref)
    sx, sy, sz = spacing_xyz
    nz, ny, nx = ref.shape
    zlo, zhi, ylo, yhi, xlo, xhi = zz.min(), zz.max(), yy.min(), yy.max(), xx.min(), xx.max()
    name = name.split("_circle", maxsplit=1)[0].split("_fill", maxsplit=1)[0]  # cut as the crop it is named after

    def span(lo_mm: float, hi_mm: float, centre: float, step: float, n: int) -> slice:
        a = int(round(centre + lo_mm / step))
        b = int(round(centre + hi_mm / step)) + 1
        return slice(max(a, 0), min(max(b, a + 1), n))

    full = slice(None)
    if name == "cardiac":
        cz = zlo + 0.35 * (zhi - zlo)
        cy = (ylo + yhi) / 2 - 10.0 / sy
        cx = (xlo + xhi) / 2 + 15.0 / sx
        return span(-90, 90, cz, sz, nz), span(-90, 90, cy, sy, ny), span(-90, 90, cx, sx, nx)
    if name == "apex":
        return span(-50, 60, zhi, sz, nz), full, full
    if name == "bases":
        return span(-120, 60, zlo, sz, nz), full, full
    if name == "bases3":
        return span(-120, 30, zlo, sz, nz), full, full
    if name.startswith("inplane70"):
        half = 0.35 * (xhi - xlo)
        c = (xlo + xhi) / 2
        return full, full, slice(int(round(c - half)), int(round(c + half)) + 1)
    if name == "lower_half":
        return slice(0, nz // 2), full, full
    raise ValueError(name)


def _crop(image: sitk.Image, sl: tuple[slice, slice, slice]) -> sitk.Image:
    size = image.GetSize()
    z, y, x = (s.indices(n) for s, n in zip(sl, reversed(size)))
    return image[x[0]:x[1], y[0]:y[1], z[0]:z[1]]


def outside_circle(image: sitk.Image) -> np.ndarray:
    """``(y, x)`` mask of the voxels outside the in-plane inscribed circle."""
    nx, ny = image.GetSize()[:2]
    sx, sy = image.GetSpacing()[:2]
    yy, xx = np.mgrid[:ny, :nx]
    r = min(nx * sx, ny * sy) / 2
    return ((xx - (nx - 1) / 2) * sx) ** 2 + ((yy - (ny - 1) / 2) * sy) ** 2 > r * r


def _circle(image: sitk.Image, value: float = -2048.0) -> sitk.Image:
    """Voxels outside the in-plane inscribed circle set to ``value`` (the scanner's padding)."""
    a = sitk.GetArrayFromImage(image).astype(np.float32)
    a[:, outside_circle(image)] = value
    out = sitk.GetImageFromArray(a)
    out.CopyInformation(image)
    return out


def _axial_picture(image: sitk.Image, label: sitk.Image, path: Path, title: str) -> None:
    """Top, middle and bottom axial slices (canonical LPS: anterior up, the patient's right on
    the left) with the mask's outlines: the QC picture of a thin slab, where coronal and
    sagittal cuts show little."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from segpipe import spatial

    img = sitk.GetArrayFromImage(spatial.to_canonical(image)[0])
    lab = sitk.GetArrayFromImage(spatial.to_canonical(label)[0])
    fig, axes = plt.subplots(1, 3, figsize=(15, 5.4), facecolor="black")
    for ax, z, name in zip(axes, (len(img) - 1, len(img) // 2, 0), ("top", "middle", "bottom")):
        ax.imshow(img[z], cmap="gray", vmin=-1350, vmax=150)
        for value, colour in ((1, "tab:red"), (2, "tab:cyan")):
            if (lab[z] == value).any():
                ax.contour(lab[z] == value, levels=[0.5], colors=colour, linewidths=1.0)
        ax.set_title(f"{name} slice", color="white")
        ax.axis("off")
    fig.suptitle(title, color="white")
    fig.tight_layout()
    fig.savefig(path, dpi=80, facecolor="black")
    plt.close(fig)


def crop_of(canonical: sitk.Image, ref_a: np.ndarray, crop: str) -> tuple[sitk.Image, np.ndarray]:
    """The ``crop`` of a canonical scan and of its whole-scan mask ``ref_a`` (``(z, y, x)``):
    the cut image (with the scanner's circle and padding for a ``_circle`` crop) and the mask
    cut the same way (nothing outside the circle: it is not in the scan)."""
    sl = _crop_slices(ref_a > 0, canonical.GetSpacing(), crop)
    img = _crop(canonical, sl)
    r = ref_a[sl].copy()
    if "_circle" in crop:
        r[:, outside_circle(img)] = 0
        img = _circle(img, -float(crop.split("_circle")[1]))
    if "_fill" in crop:  # one slice of the fill value above the crop (canonical: superior is high z)
        a = sitk.GetArrayFromImage(img)
        filled = sitk.GetImageFromArray(np.concatenate([a, np.full((1, *a.shape[1:]), float(crop.split("_fill")[1]), a.dtype)]))
        filled.SetOrigin(img.GetOrigin())
        filled.SetSpacing(img.GetSpacing())
        filled.SetDirection(img.GetDirection())
        img, r = filled, np.concatenate([r, np.zeros((1, *r.shape[1:]), r.dtype)])
    return img, r


def random_crop(canonical: sitk.Image, ref_a: np.ndarray, rng: np.random.Generator) -> tuple[str, sitk.Image, np.ndarray]:
    """One random crop (see the module's docstring): its description, the cut image and the
    whole-scan mask cut alike."""
    zz, yy, xx = np.nonzero(ref_a > 0)
    sx, sy, sz = canonical.GetSpacing()
    nz, ny, nx = ref_a.shape
    kind = str(rng.choice(["slab", "window", "box"]))
    full = slice(None)

    def cut(lo: int, hi: int, step: float, n: int, width_mm: float) -> slice:
        centre = rng.uniform(lo, hi)
        half = width_mm / step / 2
        return slice(max(int(round(centre - half)), 0), min(int(round(centre + half)) + 1, n))

    zs = cut(zz.min(), zz.max(), sz, nz, rng.uniform(40, 200)) if kind != "window" else full
    ys = xs = full
    if kind != "slab":
        ys = cut(yy.min(), yy.max(), sy, ny, rng.uniform(140, 320))
        xs = cut(xx.min(), xx.max(), sx, nx, rng.uniform(140, 320))
    padding = float(rng.choice([-1024, -2048, -3024])) if kind != "slab" and rng.random() < 0.5 else None
    sl = (zs, ys, xs)
    img, r = _crop(canonical, sl), ref_a[sl].copy()
    extent = "x".join(f"{(s.indices(n)[1] - s.indices(n)[0]) * step:.0f}" for s, n, step in zip((xs, ys, zs), (nx, ny, nz), (sx, sy, sz)))
    desc = f"{kind} {extent} mm"
    if padding is not None:
        r[:, outside_circle(img)] = 0
        img = _circle(img, padding)
        desc += f" circle {padding:.0f}"
    return desc, img, r


def crop_rng(random_seed: int, name: str) -> np.random.Generator:
    """The generator of case ``name``'s random crops for ``--random-seed``: each case's crops
    depend only on the seed and its name."""
    return np.random.default_rng([random_seed, sum(map(ord, name))])


def score_case(seg: Any, name: str, image: sitk.Image, ref: sitk.Image | None, qc_dir: Path | None = None,
               n_random: int = 0, random_seed: int = 0, reset_origin: bool = False) -> list[dict[str, Any]]:
    """All crops of one case (or ``n_random`` random ones): per crop and lung, Dice and volumes
    (and a QC picture of each crop's mask in ``qc_dir``); with ``reset_origin`` each crop's origin
    is moved to (0, 0, 0), as in a file saved without its scanner coordinates."""
    from segpipe import spatial
    from segpipe.report import qc_picture

    canonical, _ = spatial.to_canonical(image)
    if ref is None:
        ref = seg.predict(canonical)
    ref_c, _ = spatial.to_canonical(ref)
    ref_a = sitk.GetArrayFromImage(ref_c)
    voxel_ml = float(np.prod(canonical.GetSpacing())) / 1000.0
    rows = []
    rng = crop_rng(random_seed, name)
    for i, crop in enumerate(CROPS if not n_random else range(n_random)):
        if n_random:
            desc, img, r = random_crop(canonical, ref_a, rng)
            crop = f"random{i:02d} {desc}"
        else:
            img, r = crop_of(canonical, ref_a, crop)
        if reset_origin:
            img = sitk.Image(img)
            img.SetOrigin((0.0, 0.0, 0.0))
        t = time.perf_counter()
        result = seg.predict_with_report(img)
        pred = sitk.GetArrayFromImage(result.label)
        if qc_dir is not None:
            qc_picture(img, result.label, qc_dir / f"qc_{name}_{crop.split()[0]}.png", title=f"{name}: {crop} crop")
        for side, value in (("right", 1), ("left", 2)):
            ref_ml = float((r == value).sum()) * voxel_ml
            if n_random and (pred == value).any() and ref_ml < MIN_REF_ML:
                rows.append({"case": name, "crop": crop, "lung": side, "ref_ml": round(ref_ml, 1), "extra_ml":
                             round(float(((pred == value) & (r != value)).sum()) * voxel_ml, 1)})
            if ref_ml < MIN_REF_ML:
                continue
            rows.append({"case": name, "crop": crop, "lung": side, "ref_ml": round(ref_ml, 1),
                         "pred_ml": round(float((pred == value).sum()) * voxel_ml, 1),
                         "dice": round(dice(pred == value, r == value), 4),
                         "extra_ml": round(float(((pred == value) & (r != value)).sum()) * voxel_ml, 1),
                         "seconds": round(time.perf_counter() - t, 2), "warnings": result.report["warnings"]})
    return rows


def shifted(image: sitk.Image, shift_x_mm: float) -> sitk.Image:
    """A copy of ``image`` moved ``shift_x_mm`` along physical x (its voxels unchanged)."""
    out = sitk.Image(image)
    out.SetOrigin((image.GetOrigin()[0] + shift_x_mm, *image.GetOrigin()[1:]))
    return out


def cases(n_phantoms: int, seed_base: int) -> list[tuple[str, sitk.Image, sitk.Image | None]]:
    from segpipe import io
    from segpipe.synthetic import make_phantom, sample_spec

    out: list[tuple[str, sitk.Image, sitk.Image | None]] = []
    lidc = SHARED / "lidc-idri-0001" / "dicom"
    if lidc.is_dir():
        out.append(("LIDC-IDRI-0001", io.read_image(lidc), None))
    copd = SHARED / "copdgene-10002K-64"
    if copd.is_dir():
        out.append(("COPDGene-10002K", io.read_image(copd / "ct.nii.gz"), io.read_image(copd / "lungs.nii.gz")))
    for i in range(n_phantoms):
        ph = make_phantom(sample_spec(seed_base + i, coverage="chest", padding_value=None, slice_mm=2.0))
        out.append((f"phantom_{seed_base + i}", ph.image, ph.label))
    return out


def _to_other_side(row: dict[str, Any], rows: list[dict[str, Any]]) -> bool:
    """Whether a lost lung's ``row`` went to the other side: the other lung of the same case and
    crop was given more than half of its volume beyond its own (found, but named wrongly)."""
    other = next((r for r in rows if r["case"] == row["case"] and r["crop"] == row["crop"] and r["lung"] != row["lung"]), None)
    if other is None:
        return False
    gained = max(other.get("pred_ml", 0.0) - other["ref_ml"], other.get("extra_ml", 0.0))
    return gained > 0.5 * row["ref_ml"]


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    scored = [r for r in rows if "dice" in r]
    big = [r["dice"] for r in scored if r["ref_ml"] >= 50]
    out: dict[str, Any] = {"mean_dice": round(float(np.mean([r["dice"] for r in scored])), 4) if scored else None,
                           "lungs": len(scored), "mean_dice_50ml": round(float(np.mean(big)), 4) if big else None,
                           "worst_dice_50ml": round(float(np.min(big)), 4) if big else None,
                           "lost_50ml": sum(d < 0.1 for d in big), "lungs_50ml": len(big),
                           "lost_to_other_side_50ml": sum(_to_other_side(r, rows) for r in scored if r["ref_ml"] >= 50 and r["dice"] < 0.1),
                           "per_crop": {}}
    extra = [r["extra_ml"] for r in rows if "extra_ml" in r]
    if extra:
        out["extra_ml_total"], out["extra_ml_max"] = round(float(np.sum(extra)), 1), max(extra)
    random_kinds = sorted({r["crop"].split()[1] for r in rows if r["crop"].startswith("random")})
    for crop in (*CROPS, *random_kinds):
        d = [r["dice"] for r in scored if r["crop"] == crop or r["crop"].split()[1:2] == [crop]]
        if d:
            out["per_crop"][crop] = {"mean": round(float(np.mean(d)), 4), "min": round(float(np.min(d)), 4),
                                     "found": f"{sum(x > 0.1 for x in d)}/{len(d)}"}
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--phantoms", type=int, default=4, help="chest phantoms to crop (default 4)")
    p.add_argument("--seed-base", type=int, default=930_000, help="first phantom seed (default 930000)")
    p.add_argument("--model", help="model file (default: the bundled model)")
    p.add_argument("--no-rule", action="append", default=[], metavar="NAME", help="switch a rule off (repeatable)")
    p.add_argument("--rule-param", action="append", default=[], metavar="NAME.KEY=VALUE",
                   help="set a rule's parameter (YAML value; repeatable), e.g. sides.spine=false")
    p.add_argument("--json", help="write rows and summary here")
    p.add_argument("--only", help="comma-separated case names")
    p.add_argument("--random", type=int, default=0, metavar="N", help="score N random crops per case instead of the named ones")
    p.add_argument("--random-seed", type=int, default=0, help="seed of the random crops (default 0)")
    p.add_argument("--qc", type=Path, metavar="DIR", help="write a QC picture of every crop's mask (and of the abdomen slab) here")
    p.add_argument("--shift-x", type=float, default=0.0, metavar="MM",
                   help="move every case (scan and reference) this far along physical x: a patient off the scanner's centre")
    p.add_argument("--reset-origin", action="store_true",
                   help="move each crop's origin to (0, 0, 0): a file saved without its scanner coordinates")
    args = p.parse_args()
    from segpipe import LungSegmenter
    from segpipe.cli import _rule_changes  # the command's own --no-rule / --rule-param reading
    from segpipe.errors import ConfigError

    try:
        rules = _rule_changes(argparse.Namespace(rule=[], no_rule=args.no_rule, rule_param=args.rule_param), {})
    except ConfigError as err:
        p.error(str(err))
    seg = LungSegmenter.from_file(args.model, rules=rules) if args.model else LungSegmenter.default(rules=rules)
    if args.qc is not None:
        args.qc.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    for name, image, ref in cases(args.phantoms, args.seed_base):
        if args.only and name not in args.only.split(","):
            continue
        if args.shift_x:
            image, ref = shifted(image, args.shift_x), None if ref is None else shifted(ref, args.shift_x)
        got = score_case(seg, name, image, ref, args.qc, args.random, args.random_seed, args.reset_origin)
        for r in got:
            if "dice" not in r:
                print(f"{r['case']:<22} {r['crop']:<17} {r['lung']:<5} no lung expected: found {r['extra_ml']:.1f} mL", flush=True)
                continue
            print(f"{r['case']:<22} {r['crop']:<17} {r['lung']:<5} ref {r['ref_ml']:7.1f} mL  pred {r['pred_ml']:7.1f} mL  "
                  f"Dice {r['dice']:.3f}  outside {r['extra_ml']:.1f} mL", flush=True)
        rows += got
    s = summary(rows)
    slab = SHARED / "abdomen-slab-dicom"
    if slab.is_dir() and not args.only and not args.random:
        from segpipe import io

        slab_image = io.read_image(slab)
        result = seg.predict_with_report(slab_image)
        s["abdomen_slab_lung_ml"] = result.report["volumes_ml"]
        if args.qc is not None:
            _axial_picture(slab_image, result.label, args.qc / "qc_abdomen_slab.png",
                           f"abdomen-slab-dicom (real upper abdomen): lung found R {result.report['volumes_ml']['right']} mL, "
                           f"L {result.report['volumes_ml']['left']} mL")
    print(json.dumps(s, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps({"summary": s, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
