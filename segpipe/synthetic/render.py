"""Rasterise a phantom onto a voxel grid and simulate the scanner.

Painting: items are painted in order, slab of slices by slab, each only inside its bounding box:
``image += occupancy * (hu - image)``. Lung items set the lung occupancies, ``in_lung`` items are
clipped to them and ``carve`` items remove their occupancy from them; the label is
``lung occupancy > 0.5`` (1 right, 2 left). Then the scanner: in-plane Gaussian blur,
spatially correlated noise (filtered-backprojection-like texture) whose level grows with the
patient's water-equivalent diameter, clipping to the CT range, the circular field of view.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import SimpleITK as sitk
from scipy import ndimage

from segpipe.errors import ConfigError
from segpipe.synthetic.abdomen import build_abdomen
from segpipe.synthetic.anatomy import Body
from segpipe.synthetic.gut import build_gut_detail
from segpipe.synthetic.lungs import build_lungs
from segpipe.synthetic.shapes import F32, TISSUES, Grid, Item
from segpipe.synthetic.skeleton import build_skeleton
from segpipe.synthetic.spec import PhantomSpec, sample_spec

__all__ = ["Phantom", "make_phantom"]


@dataclass
class Phantom:
    """A rendered phantom.

    Attributes:
        image: CT image in HU (int16 or float32), in the spec's storage orientation.
        label: uint8 label on the same grid: 0 background, 1 right lung, 2 left lung.
        spec: The spec it was made from.
        info: What was placed, JSON-able: landmarks, pathologies with physical centres (LPS mm),
            airway centreline, bowel-gas points, the diaphragm's shape, lung volumes (ml), timings (s).
        tissue: With ``tissue_map=True``: uint8 image of the topmost structure per voxel
            (ids in :data:`segpipe.synthetic.TISSUES`), else None.
    """

    image: sitk.Image
    label: sitk.Image
    spec: PhantomSpec
    info: dict[str, Any] = field(default_factory=dict)
    tissue: sitk.Image | None = None


def _streams(seed: int) -> list[np.random.Generator]:
    """Independent generators: body, pathology, grid, noise, abdomen detail (a child's stream does
    not depend on how many are spawned, so adding one keeps the others' phantoms)."""
    return [np.random.default_rng(s) for s in np.random.SeedSequence(int(seed)).spawn(5)]


def build(spec: PhantomSpec) -> tuple[Body, list[Item], Any]:
    """Anatomy of ``spec``: the body and the ordered paint items (independent of the grid)."""
    r_body, r_path, _, _, r_detail = _streams(spec.seed)
    detailed = bool(r_detail.random() < spec.abdomen_detail)
    body = Body(spec, r_body, detail=r_detail if detailed else None)
    body.build_body()
    build_abdomen(body)
    build_gut_detail(body)
    body.build_mediastinum()
    build_skeleton(body)
    parts = build_lungs(body, r_path)
    items = body.items_pre + parts.lungs + parts.in_lung + parts.carve_first + body.items_post + parts.carve_last
    return body, items, parts


def _coverage(body: Body, spec: PhantomSpec, rng: np.random.Generator) -> tuple[float, float]:
    L, S, u = body.L, body.S, rng.uniform
    z = {
        "chest": (L["lung_min"] - u(10, 35) * S, L["apex"] + u(15, 45) * S),
        "chest_abdomen": (L["iliac"] - u(0, 30) * S, L["apex"] + u(15, 40) * S),
        "neck_pelvis": (L["pubis"] - u(20, 50) * S, L["apex"] + u(90, 130) * S),
        "lung_bases": (L["iliac"] - u(0, 60) * S, L["domeR"] + u(15, 70) * S),
        "no_lungs": (L["pubis"] - u(10, 50) * S, L["lung_min"] - u(15, 40) * S),
    }
    # drawn after the others (and only for it) so that the other coverages' grids stay as they were;
    # the top edge from just above the recesses' floor up to the right dome, mostly low
    if spec.coverage == "abdomen_bases":
        return L["iliac"] - u(0, 100) * S, L["lung_min"] + (8 + 85 * u(0, 1) ** 1.5) * S
    return z[spec.coverage]


def _grid(body: Body, spec: PhantomSpec, rng: np.random.Generator) -> tuple[Grid, np.ndarray]:
    """Canonical grid (voxel centres in the anatomy frame) and the anatomy->physical offset."""
    z0, z1 = _coverage(body, spec, rng)
    zz = np.linspace(body.L["pubis"], body.L["apex"], 50)
    a, ba, bp, yc = body.body_profile()
    width = 2 * float(np.max(a(zz)))
    y_front = float(np.min(yc(zz) - ba(zz)))
    y_back = body.table_y() + 45 * body.S
    fov = spec.fov_mm or float(np.clip(width * 1.12, 256, 500))
    size, spacing = spec.size_xyz, spec.spacing_xyz
    length = z1 - z0
    if size is None and spacing is None:
        spacing = (fov / 512, fov / 512, spec.slice_mm)
        size = (512, 512, max(1, int(round(length / spec.slice_mm))))
    elif spacing is None:
        spacing = (fov / size[0], fov / size[1], length / size[2])
    elif size is None:
        size = (max(4, int(round(fov / spacing[0]))), max(4, int(round(fov / spacing[1]))),
                max(1, int(round(length / spacing[2]))))
    cx = rng.normal(0, 8)
    cy = (y_front + y_back) / 2 + rng.normal(0, 10)
    cz = (z0 + z1) / 2
    vec = []
    for n, s, c in zip(size, spacing, (cx, cy, cz)):
        vec.append((c + (np.arange(n) - (n - 1) / 2) * s).astype(F32))
    grid = Grid(vec[0], vec[1], vec[2], tuple(float(s) for s in spacing))
    offset = np.array([0.0, rng.uniform(-60, 120), rng.uniform(-500, 100)])
    return grid, offset


def _noise_bank(rng: np.random.Generator, ny: int, nx: int, spacing: tuple[float, float], kernel: float,
                n: int = 6) -> np.ndarray:
    """Unit-variance noise tiles (n, ny2, nx2) with a CT-like noise power spectrum
    ``|f| * exp(-(f / fc)^2)`` (fc from the kernel sharpness), larger than a slice so random
    crops give different slices; periodic."""
    ny2, nx2 = int(ny * 1.5) + 8, int(nx * 1.5) + 8
    fy = np.fft.fftfreq(ny2, d=spacing[1])[:, None]
    fx = np.fft.rfftfreq(nx2, d=spacing[0])[None, :]
    f = np.sqrt(fx**2 + fy**2)
    fc = 0.22 + 0.55 * kernel
    amp = np.sqrt(f * np.exp(-((f / fc) ** 2)) + 0.02 * fc)
    out = np.empty((n, ny2, nx2), dtype=F32)
    for i in range(n):
        w = rng.standard_normal((ny2, nx2)).astype(F32)
        t = np.fft.irfft2(np.fft.rfft2(w) * amp, s=(ny2, nx2)).astype(F32)
        t /= t.std() + 1e-6
        out[i] = t
    return out


def _paint(items: list[Item], grid: Grid, boxes, tissue: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Paint items on ``grid`` (a slab); returns image (HU), label (uint8) and tissue map."""
    img = np.full(grid.shape, -1000.0, dtype=F32)
    lung = {"lung_right": np.zeros(grid.shape, F32), "lung_left": np.zeros(grid.shape, F32)}
    tmap = np.zeros(grid.shape, np.uint8) if tissue else None
    lung_win = [grid.window(lo, hi) for lo, hi in boxes]
    lung_win = [w[0] for w in lung_win if w is not None]
    for it in items:
        win = grid.window(it.shape.lo, it.shape.hi)
        if win is None:
            continue
        sl, sub = win
        occ = np.broadcast_to(it.shape.occupancy(sub), sub.shape)
        if it.mode == "in_lung":
            lm = np.maximum(lung["lung_right"][sl], lung["lung_left"][sl])
            occ = np.minimum(occ, lm)
        if not occ.flags.writeable or occ.dtype != F32:
            occ = np.array(occ, dtype=F32)
        if it.alpha != 1.0:
            occ *= F32(it.alpha)
        if not occ.any():
            continue
        hu = it.hu if isinstance(it.hu, float | int) else it.hu.sample(sub)
        view = img[sl]
        delta = np.subtract(F32(hu), view) if np.isscalar(hu) else np.subtract(hu, view, dtype=F32)
        delta *= occ
        view += delta
        if it.mode in ("lung_right", "lung_left"):
            np.maximum(lung[it.mode][sl], occ, out=lung[it.mode][sl])
        elif it.mode == "carve" and any(_overlap(sl, w) for w in lung_win):
            inv = F32(1.0) - occ
            for arr in lung.values():
                np.minimum(arr[sl], inv, out=arr[sl])
        if tmap is not None:
            if it.mode == "carve":
                tmap[sl][occ >= 0.5] = it.tissue
            else:
                tmap[sl][occ > 0.5] = it.tissue
    label = np.zeros(grid.shape, np.uint8)
    label[lung["lung_right"] > 0.5] = 1
    label[lung["lung_left"] > 0.5] = 2
    return img, label, tmap


def _overlap(a: tuple[slice, ...], b: tuple[slice, ...]) -> bool:
    return all(x.start < y.stop and y.start < x.stop for x, y in zip(a, b))


def make_phantom(spec: PhantomSpec | int, *, tissue_map: bool = False, **overrides: Any) -> Phantom:
    """Render one phantom.

    Args:
        spec: A :class:`PhantomSpec`, or an integer seed for :func:`sample_spec` (a varied spec).
        tissue_map: Also return the tissue map (``Phantom.tissue``).
        **overrides: Spec fields to change (e.g. ``size_xyz=(128, 128, 96)``).

    Returns:
        :class:`Phantom` with image (HU) and label (uint8) on the same grid and geometry.

    Raises:
        ConfigError: bad spec values.

    Example:
        >>> from segpipe.synthetic import PhantomSpec, make_phantom
        >>> ph = make_phantom(PhantomSpec(seed=1, size_xyz=(64, 64, 48)))
        >>> ph.image.GetSize() == ph.label.GetSize()
        True
    """
    if isinstance(spec, bool) or not isinstance(spec, PhantomSpec | int | np.integer):
        raise ConfigError(f"expected a PhantomSpec or an integer seed, got {type(spec).__name__}")
    if not isinstance(spec, PhantomSpec):
        spec = sample_spec(int(spec), **overrides)
    elif overrides:
        spec = spec.replace(**overrides)
    t0 = time.perf_counter()
    body, items, parts = build(spec)
    _, _, r_grid, r_noise, _ = _streams(spec.seed)
    grid, offset = _grid(body, spec, r_grid)
    nx, ny, nz = len(grid.x), len(grid.y), len(grid.z)
    if nx * ny * nz > 1024**3:
        raise ConfigError(f"phantom grid: expected at most 1024^3 voxels, got {nx}x{ny}x{nz}")
    t1 = time.perf_counter()
    bank = _noise_bank(r_noise, ny, nx, grid.spacing[:2], spec.kernel)
    image = np.empty((nz, ny, nx), dtype=F32)
    label = np.empty((nz, ny, nx), dtype=np.uint8)
    tissue = np.empty((nz, ny, nx), dtype=np.uint8) if tissue_map else None
    fov = _fov_mask(grid) if spec.padding_value is not None else None
    step = max(1, int(2_000_000 // (nx * ny)))
    sigma_px = (spec.blur_mm / grid.spacing[0], spec.blur_mm / grid.spacing[1])
    pix_area = grid.spacing[0] * grid.spacing[1]
    for k0 in range(0, nz, step):
        k1 = min(nz, k0 + step)
        slab = Grid(grid.x, grid.y, grid.z[k0:k1], grid.spacing)
        for f in body.shared:
            f.start_slab(slab)
        img, lab, tm = _paint(items, slab, parts.boxes, tissue_map)
        for ax, s in ((2, sigma_px[0]), (1, sigma_px[1])):
            if s >= 0.2:
                ndimage.gaussian_filter1d(img, s, axis=ax, output=img, truncate=3.0, mode="nearest")
        if spec.noise_hu > 0:
            for k in range(k1 - k0):
                # noise grows with the water-equivalent diameter of the slice
                area = float(np.clip(img[k] + 1000.0, 0, 2000).sum()) / 1000.0 * pix_area
                dw = 2 * np.sqrt(area / np.pi)
                sigma = spec.noise_hu * float(np.clip(np.exp(0.011 * (dw - 250.0)), 0.5, 3.0))
                t = int(r_noise.integers(len(bank)))
                oy = int(r_noise.integers(bank.shape[1] - ny + 1))
                ox = int(r_noise.integers(bank.shape[2] - nx + 1))
                tile = bank[t, oy:oy + ny, ox:ox + nx]
                if r_noise.random() < 0.5:
                    tile = tile[::-1]
                if r_noise.random() < 0.5:
                    tile = tile[:, ::-1]
                img[k] += F32(sigma) * tile
        np.clip(img, -1024.0, 3071.0, out=img)
        if fov is not None:
            img[:, ~fov] = spec.padding_value
            lab[:, ~fov] = 0
            if tm is not None:
                tm[:, ~fov] = TISSUES["padding"]
        image[k0:k1] = img
        label[k0:k1] = lab
        if tissue is not None:
            tissue[k0:k1] = tm
    for f in body.shared:
        f.start_slab(None)
    t2 = time.perf_counter()
    if spec.dtype == "int16":
        image_out = sitk.GetImageFromArray(np.rint(image).astype(np.int16))
    else:
        image_out = sitk.GetImageFromArray(image)
    del image
    origin = (float(grid.x[0] + offset[0]), float(grid.y[0] + offset[1]), float(grid.z[0] + offset[2]))
    images = [image_out, sitk.GetImageFromArray(label)]
    if tissue is not None:
        images.append(sitk.GetImageFromArray(tissue))
    for im in images:
        im.SetSpacing(grid.spacing)
        im.SetOrigin(origin)
    if spec.orientation != "LPS":
        images = [sitk.DICOMOrient(im, spec.orientation) for im in images]
    t3 = time.perf_counter()
    info = _info(body, parts, offset, label, grid)
    info["timing_s"] = {"anatomy": round(t1 - t0, 3), "render": round(t2 - t1, 3), "output": round(t3 - t2, 3)}
    return Phantom(images[0], images[1], spec, info, images[2] if tissue is not None else None)


def _fov_mask(grid: Grid) -> np.ndarray:
    cx, cy = (grid.x[0] + grid.x[-1]) / 2, (grid.y[0] + grid.y[-1]) / 2
    r = min(grid.x[-1] - grid.x[0] + grid.spacing[0], grid.y[-1] - grid.y[0] + grid.spacing[1]) / 2
    return ((grid.x[None, :] - cx) ** 2 + (grid.y[:, None] - cy) ** 2) <= r * r


def _info(body: Body, parts, offset: np.ndarray, label: np.ndarray, grid: Grid) -> dict[str, Any]:
    """JSON-able description with positions moved to physical (LPS) mm."""

    def move(obj: Any) -> Any:
        if isinstance(obj, dict):
            return {k: (move_pt(v) if k.endswith("_mm") and k != "radius_mm" else move(v)) for k, v in obj.items()}
        if isinstance(obj, list):
            return [move(v) for v in obj]
        return obj

    def move_pt(v: Any) -> Any:
        arr = np.asarray(v, dtype=float)
        if arr.shape and arr.shape[-1] == 3:
            return (arr + offset).round(3).tolist()
        if arr.ndim == 2:
            return [(np.asarray(p) + offset).round(3).tolist() for p in arr]
        return v

    info: dict[str, Any] = {"landmarks_z_mm": {k: round(v + offset[2], 2) for k, v in body.L.items()}}
    info.update(move(parts.info))
    info["bowel_gas_points_mm"] = [(np.asarray(p) + offset).round(3).tolist() for p in body.gas_points]
    # the domes' shape (mm; ``y`` the domes' centre front to back in the anatomy frame)
    info["diaphragm"] = {k: round(float(body.dome[k]), 2) for k in ("Lx", "Ly", "y", "depth", "tilt", "toward")}
    # how far the colon's highest point lies below the left dome's top (mm)
    info["colon_below_left_dome_mm"] = round(float(body.L["domeL"] - body.colon[0][:, 2].max()), 1)
    vox_ml = float(np.prod(grid.spacing)) / 1000.0
    counts = np.bincount(label.ravel(), minlength=3)
    info["lung_volume_ml"] = {"right": round(float(counts[1]) * vox_ml, 1), "left": round(float(counts[2]) * vox_ml, 1)}
    return info

