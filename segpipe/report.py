"""Reports: QC pictures of an image with its lung label.

:func:`qc_picture` draws axial, coronal and sagittal slices through the lungs so a person can
judge an image (and its label) at a glance. Slices are shown in anatomical orientation whatever
the storage orientation (the image is reoriented to LPS first) and in radiological convention:
the patient's right is on the viewer's left in axial and coronal views, anterior is up in axial
views and on the left in sagittal views, superior is up in coronal and sagittal views.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import SimpleITK as sitk

from segpipe.density import LAA950_HU, image_density
from segpipe.errors import GeometryError, InputError, OutputError

__all__ = ["qc_picture", "training_curves"]

#: Display window in HU (lung + soft tissue + bone all visible).
QC_WINDOW_HU = (-1350.0, 150.0)
#: Outline colours of label 1 (right lung) and label 2 (left lung).
QC_COLOURS = {1: "#ff5a36", 2: "#2fc7ff"}
#: Colour of the warning lines under the views.
QC_WARNING_COLOUR = "#ffa500"
#: Height (inches) of the picture without warnings, and of each warning line under the views.
QC_VIEWS_HEIGHT_IN, QC_LINE_IN = 4.2, 0.16
#: Colour (RGBA, 0..1) of the density overlay: lung voxels below -950 HU (LAA-950).
QC_LAA_COLOUR = (0.25, 1.0, 0.25, 0.8)


def qc_picture(
    image: sitk.Image,
    label: sitk.Image | None,
    path: str | os.PathLike[str],
    title: str | None = None,
    *,
    window: tuple[float, float] = QC_WINDOW_HU,
    dpi: int = 110,
    density_overlay: bool = False,
    hu_offset: float = 0.0,
    warnings: list[str] | tuple[str, ...] = (),
) -> Path:
    """Write a PNG with axial, coronal and sagittal slices through the lungs.

    The slices cross at the centre of the labelled lungs (or, without a label or with an empty
    one, at the centre of the air-filled region inside the body, else the volume centre). The
    label is drawn as outlines: right lung (1) and left lung (2) in two colours. With
    ``density_overlay``, the lung's voxels below -950 HU (LAA-950, see :mod:`segpipe.density`)
    are painted green and the title gives each lung's LAA-950 in %.

    Args:
        image: 3D CT image in HU, any storage orientation and spacing.
        label: Label image on the same grid (0 background, 1 right lung, 2 left lung) or None.
        path: Output PNG path; its folder must exist. Written atomically (temp file + rename).
        title: Optional first title line; the size and spacing are always added.
        window: Display window (low, high) in HU.
        dpi: Resolution of the PNG.
        density_overlay: paint the LAA-950 voxels of the lungs (needs ``label``).
        hu_offset: added to the image's values (HU) before display and the overlay, as the
            segmenter does (scans stored as HU + 1024: -1024).
        warnings: lines written under the views in orange (the segmenter's warnings: what to
            check in this picture, such as a lone lung's side).

    Returns:
        The written path.

    Raises:
        InputError: ``image`` is not 3D, or ``density_overlay`` without a label.
        GeometryError: ``label`` is not on the image's grid.
        OutputError: the folder of ``path`` does not exist.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    if image.GetDimension() != 3:
        raise InputError(f"expected a 3D image, got {image.GetDimension()}D")
    if label is not None:
        _check_same_grid(image, label)
    elif density_overlay:
        raise InputError("the density overlay paints the lungs' LAA-950 voxels: it needs a lung label")
    out = Path(path)
    if not out.parent.is_dir():
        raise OutputError(f"expected an existing folder for the QC picture, got {str(out.parent)!r}")

    lps = sitk.DICOMOrient(image, "LPS")
    arr = sitk.GetArrayViewFromImage(lps)  # (z, y, x), +x patient left, +y posterior, +z superior
    lab = sitk.GetArrayFromImage(sitk.DICOMOrient(label, "LPS")) if label is not None else None
    sx, sy, sz = lps.GetSpacing()
    ox, oy, oz = lps.GetOrigin()
    nz, ny, nx = arr.shape
    k, j, i = _centre_index(arr, lab)

    xs = ox + sx * np.arange(nx)
    ys = oy + sy * np.arange(ny)
    zs = oz + sz * np.arange(nz)
    half = np.array([sx, sy, sz]) / 2
    views = [  # (2D image, extent (left, right, bottom, top), horizontal mm, vertical mm, name, edge letters)
        (arr[k], (xs[0] - half[0], xs[-1] + half[0], ys[-1] + half[1], ys[0] - half[1]), xs, ys, f"axial z={zs[k]:.1f} mm", "RLAP"),
        (arr[:, j, :], (xs[0] - half[0], xs[-1] + half[0], zs[0] - half[2], zs[-1] + half[2]), xs, zs, f"coronal y={ys[j]:.1f} mm", "RLSI"),
        (arr[:, :, i], (ys[0] - half[1], ys[-1] + half[1], zs[0] - half[2], zs[-1] + half[2]), ys, zs, f"sagittal x={xs[i]:.1f} mm", "APSI"),
    ]
    labels2d = [None, None, None] if lab is None else [lab[k], lab[:, j, :], lab[:, :, i]]

    widths = [abs(v[1][1] - v[1][0]) for v in views]
    heights = [abs(v[1][3] - v[1][2]) for v in views]
    notes = [f"warning: {w}" for w in warnings]
    fig_h = QC_VIEWS_HEIGHT_IN + QC_LINE_IN * len(notes)  # a line under the views per warning
    fig_w = sum(w / h * 3.6 for w, h in zip(widths, heights)) + 0.6
    fig = Figure(figsize=(min(max(fig_w, 6.0), 18.0), fig_h), facecolor="black")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, 3, gridspec_kw={"width_ratios": [w / h for w, h in zip(widths, heights)]})
    lo, hi = window
    laa_below = LAA950_HU - hu_offset  # in the stored values
    for ax, (sl, extent, hmm, vmm, name, letters), lab2d in zip(axes, views, labels2d):
        origin = "upper" if letters == "RLAP" else "lower"
        ax.imshow(np.asarray(sl, dtype=np.float32), cmap="gray", vmin=lo - hu_offset, vmax=hi - hu_offset, extent=extent,
                  origin=origin, interpolation="nearest", aspect="equal")
        if density_overlay and lab2d is not None:
            paint = np.zeros((*np.shape(sl), 4), np.float32)
            paint[(np.asarray(lab2d) > 0) & (np.asarray(sl) < laa_below)] = QC_LAA_COLOUR
            ax.imshow(paint, extent=extent, origin=origin, interpolation="nearest", aspect="equal")
        if lab2d is not None:
            for value, colour in QC_COLOURS.items():
                mask = np.asarray(lab2d) == value
                if mask.any() and not mask.all():
                    ax.contour(hmm, vmm, mask.astype(np.float32), levels=[0.5], colors=[colour], linewidths=0.8)
        ax.set_xlim(extent[0], extent[1])
        ax.set_ylim(extent[2], extent[3])
        ax.set_title(name, color="white", fontsize=8)
        ax.set_xticks([])
        ax.set_yticks([])
        kw = {"color": "yellow", "fontsize": 8, "transform": ax.transAxes, "weight": "bold"}
        ax.text(0.01, 0.5, letters[0], ha="left", va="center", **kw)
        ax.text(0.99, 0.5, letters[1], ha="right", va="center", **kw)
        ax.text(0.5, 0.99, letters[2], ha="center", va="top", **kw)
        ax.text(0.5, 0.01, letters[3], ha="center", va="bottom", **kw)
    info = (
        f"size {image.GetSize()}  spacing {tuple(round(s, 3) for s in image.GetSpacing())} mm  "
        f"stored {_orientation(image)}  window {lo:.0f}..{hi:.0f} HU"
    )
    if lab is not None:
        info += "   outline: right lung (1) red, left lung (2) blue"
    if density_overlay:
        d = image_density(image, label, hu_offset=hu_offset)  # type: ignore[arg-type]
        laa = [getattr(d, side).whole.laa950_pct for side in ("right", "left")]
        info += "\ngreen: LAA-950 (below -950 HU) in the lungs: " + ", ".join(
            f"{side} {'-' if v is None else f'{v:.1f}%'}" for side, v in zip(("right", "left"), laa)
        )
    text = info if title is None else f"{title}\n{info}"
    fig.suptitle(text, color="white", fontsize=8)
    bottom = 0.02
    if notes:
        fig.text(0.01, 0.01, "\n".join(notes), color=QC_WARNING_COLOUR, fontsize=8, ha="left", va="bottom")
        bottom += (QC_LINE_IN * len(notes) + 0.05) / fig_h
    top = 0.9 - 0.04 * text.count("\n") * QC_VIEWS_HEIGHT_IN / fig_h  # the title's lines keep their height in inches
    fig.subplots_adjust(left=0.01, right=0.99, bottom=bottom, top=top, wspace=0.03)
    _atomic_savefig(fig, out, dpi)
    return out


def _check_same_grid(image: sitk.Image, label: sitk.Image) -> None:
    same = (
        image.GetSize() == label.GetSize()
        and np.allclose(image.GetSpacing(), label.GetSpacing(), rtol=1e-5, atol=1e-6)
        and np.allclose(image.GetOrigin(), label.GetOrigin(), atol=1e-3)
        and np.allclose(image.GetDirection(), label.GetDirection(), atol=1e-5)
    )
    if not same:
        raise GeometryError(
            f"expected the label on the image grid (size {image.GetSize()}, spacing {image.GetSpacing()}), "
            f"got size {label.GetSize()}, spacing {label.GetSpacing()}"
        )


def _orientation(image: sitk.Image) -> str:
    try:
        return sitk.DICOMOrientImageFilter.GetOrientationFromDirectionCosines(image.GetDirection())
    except Exception:  # pragma: no cover - non-3D or odd direction
        return "?"


def _centre_index(arr: np.ndarray, lab: np.ndarray | None) -> tuple[int, int, int]:
    """Voxel index (k, j, i) where the three slices cross: the centre of the lungs."""
    nz, ny, nx = arr.shape
    step = max(1, int(round((nz * ny * nx / 2e6) ** (1 / 3))))
    if lab is not None:
        idx = np.nonzero(np.asarray(lab[::step, ::step, ::step]) > 0)
        if idx[0].size:
            return tuple(int(min(n - 1, np.median(v) * step)) for v, n in zip(idx, (nz, ny, nx)))  # type: ignore[return-value]
    small = np.asarray(arr[::step, ::step, ::step])
    air = small < -400
    # Air connected to the in-plane border is outside the body; what remains is lung, airway, gas.
    from scipy import ndimage

    lab_air, _ = ndimage.label(air, structure=ndimage.generate_binary_structure(3, 1))
    edge = np.unique(np.concatenate([lab_air[:, 0, :].ravel(), lab_air[:, -1, :].ravel(),
                                     lab_air[:, :, 0].ravel(), lab_air[:, :, -1].ravel()]))
    inner = air & ~np.isin(lab_air, edge)
    idx = np.nonzero(inner)
    if idx[0].size:
        return tuple(int(min(n - 1, np.median(v) * step)) for v, n in zip(idx, (nz, ny, nx)))  # type: ignore[return-value]
    return nz // 2, ny // 2, nx // 2


def _atomic_savefig(fig: object, out: Path, dpi: int) -> None:
    from segpipe.io.image import atomic_target

    with atomic_target(out, suffix=".tmp.png") as tmp:
        fig.savefig(tmp, format="png", dpi=dpi, facecolor="black")  # type: ignore[attr-defined]


def training_curves(metrics_path: str | Path, path: str | Path, *, dpi: int = 100) -> Path:
    """Plot loss and validation Dice per epoch (one column per stage) from a ``metrics.jsonl``
    written by the trainer; atomic PNG write."""
    import json

    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    rows = [json.loads(line) for line in Path(metrics_path).read_text().splitlines() if line.strip()]
    stages = [s for s in ("coarse", "fine") if any(r.get("stage") == s for r in rows)]
    out = Path(path)
    with plt.style.context("dark_background"):  # matches the QC pictures (saved on black)
        fig, axes = plt.subplots(2, max(1, len(stages)), figsize=(5 * max(1, len(stages)), 6), squeeze=False)
    for col, stage in enumerate(stages):
        rs = [r for r in rows if r.get("stage") == stage]
        epochs = [r["epoch"] for r in rs]
        ax = axes[0][col]
        ax.plot(epochs, [r["loss"] for r in rs], marker="o", color="white")
        ax.set_title(f"{stage} stage: training loss (Dice + CE)")
        ax.set_xlabel("epoch")
        ax.grid(alpha=0.3)
        ax = axes[1][col]
        for key, colour, name in (("dice_right", "tab:red", "right lung"), ("dice_left", "tab:blue", "left lung")):
            if any(key in r for r in rs):
                ax.plot(epochs, [r.get(key, float("nan")) for r in rs], marker="o", color=colour, label=name)
        ax.set_title(f"{stage} stage: validation Dice")
        ax.set_xlabel("epoch")
        ax.set_ylim(0, 1)
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(loc="lower right")
    fig.tight_layout()
    _atomic_savefig(fig, out, dpi)
    plt.close(fig)
    return out
