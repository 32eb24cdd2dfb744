"""Training patches from the cache: patch extraction, centre sampling (lung, dense tissue,
uniform) and augmentation (spatial and intensity, left-right mirroring with label swap, a cut
field of view), served by :class:`PatchDataset`.

Example:
    >>> ds = PatchDataset(volumes, (96, 96, 96), 100, (-1024.0, 400.0))  # doctest: +SKIP
    >>> item = ds[0]                                                    # doctest: +SKIP
"""

from __future__ import annotations

import numpy as np

from segpipe.model.intensity import normalise_hu
from segpipe.spatial import LUNG_HU, TISSUE_HU
from segpipe.train.cache import CachedVolume
from segpipe.train.dataset import DatasetError

__all__ = [
    "DENSE_MIN_ML",
    "PatchDataset",
    "augment_patch",
    "cut_beside_lung",
    "cut_field_of_view",
    "dense_points",
    "extract_patch",
    "foreground_points",
    "mirror_left_right",
    "sample_patch_center",
]

# ----------------------------------------------------------------------------- patch sampling
def extract_patch(
    array_zyx: np.ndarray, center_zyx: tuple[int, int, int], size_zyx: tuple[int, int, int], pad_value: float
) -> np.ndarray:
    """The ``size_zyx`` block of ``array_zyx`` centred on ``center_zyx`` (a copy), padded with
    ``pad_value`` where it leaves the array. Reads only the block from a memory map."""
    out = np.full(size_zyx, pad_value, dtype=array_zyx.dtype)
    src, dst = [], []
    for c, s, n in zip(center_zyx, size_zyx, array_zyx.shape):
        lo = c - s // 2
        a, b = max(lo, 0), min(lo + s, n)
        if b <= a:
            return out
        src.append(slice(a, b))
        dst.append(slice(a - lo, b - lo))
    out[tuple(dst)] = array_zyx[tuple(src)]
    return out


def foreground_points(label_zyx: np.ndarray, max_points: int = 20000, seed: int = 0) -> np.ndarray:
    """Up to ``max_points`` lung voxel positions (N, 3) in ``(z, y, x)``, a seeded random
    subset, used to centre foreground patches without scanning the label every time."""
    return _subsample(np.argwhere(np.asarray(label_zyx) > 0), max_points, seed)


def _subsample(points: np.ndarray, max_points: int | None, seed: int) -> np.ndarray:
    """At most ``max_points`` of ``points`` (a seeded random subset, in their order), int32."""
    if max_points is not None and len(points) > max_points:
        points = points[np.sort(np.random.default_rng(seed).choice(len(points), max_points, replace=False))]
    return points.astype(np.int32)


#: Dense tissue below this volume (mL) in a training volume (hilar vessels, a nodule) is not a
#: region worth oversampling (:class:`PatchDataset`'s ``dense_fraction``).
DENSE_MIN_ML = 5.0


def dense_points(
    image_zyx: np.ndarray, label_zyx: np.ndarray, *, beside: bool = False, min_hu: float = -300.0,
    max_points: int | None = 20000, seed: int = 0,
) -> np.ndarray:
    """Up to ``max_points`` (``None``: all) positions (N, 3) in ``(z, y, x)`` inside *dense
    lung*: lung voxels whose ~7-voxel neighbourhood is at least 90 % denser than ``min_hu``
    (consolidation, collapse, atelectasis, masses). The neighbourhood test leaves out vessels and airway walls,
    which are dense but thin. Empty where a volume has no such region. With ``beside``, the
    dense tissue that is *not* lung within 7 voxels of it instead (chest wall, heart, liver
    dome, effusion): the negatives that look the same.

    These are the rare voxels where a lung is easiest to get wrong; a uniform pick among lung
    voxels almost never lands on them, so :class:`PatchDataset` can centre a share of its lung
    patches on both kinds (``dense_fraction``).
    """
    from scipy import ndimage as ndi

    lung = np.asarray(label_zyx) > 0
    if not lung.any():
        return np.zeros((0, 3), np.int32)
    dense = ndi.uniform_filter((np.asarray(image_zyx) > min_hu).astype(np.float32), size=7, mode="constant")
    if beside:
        near = ndi.uniform_filter(lung.astype(np.float32), size=15, mode="constant") > 0
        return _subsample(np.argwhere(~lung & near & (dense >= 0.9)), max_points, seed)
    return _subsample(np.argwhere(lung & (dense >= 0.9)), max_points, seed)


def sample_patch_center(
    shape_zyx: tuple[int, int, int],
    size_zyx: tuple[int, int, int],
    fg_points: np.ndarray,
    foreground: bool,
    rng: np.random.Generator,
) -> tuple[int, int, int]:
    """A patch centre: on a random lung voxel when ``foreground`` (and there is lung), else
    uniform over the positions that keep most of the patch inside the volume."""
    if foreground and len(fg_points):
        return tuple(int(v) for v in fg_points[rng.integers(len(fg_points))])  # type: ignore[return-value]
    center = []
    for n, s in zip(shape_zyx, size_zyx):
        lo, hi = min(s // 2, n // 2), max(n - (s - s // 2), n // 2)
        center.append(int(rng.integers(lo, hi + 1)))
    return tuple(center)  # type: ignore[return-value]


def mirror_left_right(image_zyx: np.ndarray, label_zyx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mirror canonical (LPS) arrays along x, the patient's left-right axis, and swap labels
    1 and 2: the right lung seen in a mirror is a left lung. Any left-right flip in
    augmentation must go through here."""
    image = np.ascontiguousarray(image_zyx[..., ::-1])
    flipped = label_zyx[..., ::-1]
    label = np.where(flipped == 1, 2, np.where(flipped == 2, 1, flipped)).astype(label_zyx.dtype)
    return image, label


class PatchDataset:
    """Random training patches from cached volumes, deterministic per (seed, epoch, index).

    Each item is a dict with ``image`` (1, Z, Y, X) float32 normalised and ``label``
    (Z, Y, X) int64. A share ``fg_fraction`` of patches is centred on a lung voxel; the rest is
    uniform. Of the lung-centred ones, a share ``dense_fraction`` is centred on dense tissue
    (:func:`dense_points`), half on dense lung and half on the dense non-lung beside it,
    each where a volume has at least :data:`DENSE_MIN_ML` of it: learning only the first
    teaches "dense = lung" (liver and chest wall taken in). With ``spacing_jitter`` > 0 the
    patch is cut from a region ``factor`` times larger
    (or smaller) and resized: multi-scale training. Augmentation (see
    :class:`segpipe.config.AugmentConfig`) never swaps sides without swapping labels.

    Args:
        volumes: cached volumes to sample from (coarse volumes, or fine lung crops).
        patch_xyz: patch size in voxels (x, y, z).
        length: items per epoch (``steps * batch * accumulation``).
        window_hu: intensity window for :func:`segpipe.model.intensity.normalise_hu`.
        fg_fraction: share of lung-centred patches.
        dense_fraction: share of the lung-centred patches centred on dense tissue, half in
            the lung and half beside it (0: none).
        augment: augmentation settings, or ``None`` for none (validation).
        spacing_jitter: multi-scale factor range, 0 for none.
        seed: base seed.
    """

    def __init__(
        self,
        volumes: list[CachedVolume],
        patch_xyz: tuple[int, int, int],
        length: int,
        window_hu: tuple[float, float],
        fg_fraction: float = 0.5,
        augment: object | None = None,
        spacing_jitter: float = 0.0,
        seed: int = 0,
        dense_fraction: float = 0.0,
    ) -> None:
        if not volumes:
            raise DatasetError("no training volumes to sample patches from")
        self.volumes = volumes
        self.patch_zyx = tuple(reversed(patch_xyz))
        self.length = int(length)
        self.window_hu = window_hu
        self.fg_fraction = fg_fraction
        self.dense_fraction = dense_fraction
        self.augment = augment
        self.spacing_jitter = spacing_jitter
        self.seed = seed
        self.epoch = 0
        self._fg: dict[int, np.ndarray] = {}
        self._dense: dict[tuple[int, bool], np.ndarray] = {}

    def set_epoch(self, epoch: int) -> None:
        """Patches depend on the epoch (call before each epoch, in every worker's copy)."""
        self.epoch = int(epoch)

    def __len__(self) -> int:
        return self.length

    def _fg_points(self, i: int) -> np.ndarray:
        if i not in self._fg:
            _, label = self.volumes[i].load()
            self._fg[i] = foreground_points(label, seed=self.seed + i)
        return self._fg[i]

    def _dense_points(self, i: int, beside: bool = False) -> np.ndarray:
        key = (i, beside)
        if key not in self._dense:
            image, label = self.volumes[i].load()
            points = dense_points(image, label, beside=beside, max_points=None)
            voxel_ml = float(np.prod(self.volumes[i].spacing_xyz)) / 1000.0
            if len(points) * voxel_ml < DENSE_MIN_ML:  # a few thick vessels or a nodule: not a region
                points = points[:0]
            self._dense[key] = _subsample(points, 20000, self.seed + i)
        return self._dense[key]

    def __getitem__(self, index: int) -> dict:
        import torch

        rng = np.random.default_rng([self.seed, self.epoch, int(index)])
        vi = int(rng.integers(len(self.volumes)))
        image, label = self.volumes[vi].load()
        factor = 1.0
        if self.spacing_jitter > 0:
            factor = float(rng.uniform(1 - self.spacing_jitter, 1 + self.spacing_jitter))
        region = tuple(max(2, int(round(p * factor))) for p in self.patch_zyx)
        fg = rng.random() < self.fg_fraction
        points = self._fg_points(vi)
        if fg and self.dense_fraction > 0 and rng.random() < self.dense_fraction:  # no draw when off
            dense = self._dense_points(vi, beside=rng.random() < 0.5)
            points = dense if len(dense) else points
        center = sample_patch_center(image.shape, region, points, fg, rng)  # type: ignore[arg-type]
        img = extract_patch(image, center, region, pad_value=-1024).astype(np.float32)  # type: ignore[arg-type]
        lbl = extract_patch(label, center, region, pad_value=0)  # type: ignore[arg-type]
        if region != self.patch_zyx:
            img, lbl = _resize_pair(img, lbl, self.patch_zyx)  # type: ignore[arg-type]
        if self.augment is not None:
            spacing_zyx = tuple(s * factor for s in reversed(self.volumes[vi].spacing_xyz))
            img, lbl = augment_patch(img, lbl, self.augment, rng, spacing_zyx)  # type: ignore[arg-type]
            fov = getattr(self.augment, "fov_probability", 0.0)
            if fov > 0 and rng.random() < fov:  # no draw when off: older configs keep their random stream
                fill = getattr(self.augment, "fov_fill", "air")
                edge_label = getattr(self.augment, "fov_label", "background") == "edge"
                side = getattr(self.augment, "fov_side", 0.0)
                strip = tuple(getattr(self.augment, "fov_side_strip", SIDE_STRIP))
                cut = (cut_beside_lung(img, lbl, rng, strip, fill=fill, edge_label=edge_label)  # type: ignore[arg-type]
                       if side > 0 and rng.random() < side else None)
                kinds = IN_PLANE_CUTS  # what a side cut can take on as well
                end = getattr(self.augment, "fov_end", 0.0)
                if cut is None and end > 0 and rng.random() < end:  # no draw when off
                    cut = cut_lung_end(img, lbl, rng, self.augment.fov_keep,  # type: ignore[attr-defined,arg-type]
                                       tuple(self.augment.fov_end_slices), fill=fill,  # type: ignore[attr-defined]
                                       edge_label=edge_label)
                    kinds = END_PLANE_CUTS
                compound = getattr(self.augment, "fov_compound", 0.0)
                if cut is not None and compound > 0 and rng.random() < compound:  # no draw when off
                    kind = kinds[int(rng.integers(len(kinds)))]
                    beside = cut_beside_lung(*cut, rng, strip, fill=fill, edge_label=edge_label) if kind == "side" else None
                    cut = beside if beside is not None else cut_field_of_view(
                        *cut, rng, self.augment.fov_keep, fill=fill, edge_label=edge_label,  # type: ignore[attr-defined]
                        kinds=("box",) if kind == "side" else (kind,))
                img, lbl = cut if cut is not None else cut_field_of_view(
                    img, lbl, rng, self.augment.fov_keep, fill=fill, edge_label=edge_label)  # type: ignore[attr-defined]
        return {
            "image": torch.from_numpy(normalise_hu(img, self.window_hu)[None]),
            "label": torch.from_numpy(np.ascontiguousarray(lbl).astype(np.int64)),
        }


FOV_CUTS = ("box", "slab", "circle")
IN_PLANE_CUTS = ("box", "circle")  # the in-plane cuts a side cut can take on as well
END_PLANE_CUTS = ("side", "box", "circle")  # those a lung-end slab can: "side" keeps one base and a strip of the other


def cut_field_of_view(img: np.ndarray, lbl: np.ndarray, rng: np.random.Generator,
                      keep: tuple[float, float] = (0.35, 0.9), fill: str = "air",
                      edge_label: bool = False, kinds: tuple[str, ...] = FOV_CUTS) -> tuple[np.ndarray, np.ndarray]:
    """A ``(z, y, x)`` HU patch and its labels as a scan whose field of view cuts the body:
    outside the part kept the image is air (-1024 HU, what both stages see beyond a scan's
    edge: the fine lattice's fill, the coarse window's padding) and the label background.
    One of: ``box`` (each in-plane axis keeps a share drawn from ``keep`` at a random place:
    a cardiac-centred crop, a field of view narrower than the body), ``slab`` (the z axis
    keeps a few cm: a thin scan, an apex or base slab), ``circle`` (the scanner's
    reconstruction circle, radius a share of the patch's half-width). Axis-aligned and applied
    after the other augmentation, as real scan edges are. With ``fill="edge"`` the image beyond
    a box or slab repeats the kept part's edge instead (what the coarse stage's sliding window
    shows beyond a scan smaller than a window); beyond a circle it is air either way. With
    ``edge_label`` (and ``fill="edge"``) the labels beyond a box or slab repeat the kept
    part's edge labels too. ``kinds``: the cuts drawn from (:data:`IN_PLANE_CUTS` for a patch
    already cut along z or x)."""
    kind = kinds[int(rng.integers(len(kinds)))]
    shape = img.shape
    if kind != "circle":
        sl = [slice(None)] * 3
        for a in (1, 2) if kind == "box" else (0,):
            n = shape[a]
            length = max(2, int(round(float(rng.uniform(*keep)) * n)))
            start = int(rng.integers(0, n - length + 1))
            sl[a] = slice(start, start + length)
        return _keep_box(img, lbl, tuple(sl), fill, edge_label)
    img, lbl = img.copy(), lbl.copy()
    r = float(rng.uniform(*keep)) * min(shape[1:]) / 2
    cy, cx = (float(rng.uniform(0.3, 0.7)) * n for n in shape[1:])
    yy, xx = np.ogrid[:shape[1], :shape[2]]
    outside = np.broadcast_to((yy - cy) ** 2 + (xx - cx) ** 2 > r * r, shape)
    img[outside] = -1024.0
    lbl[outside] = 0
    return img, lbl


def _keep_box(img: np.ndarray, lbl: np.ndarray, box: tuple[slice, ...], fill: str,
              edge_label: bool) -> tuple[np.ndarray, np.ndarray]:
    """New image and labels that keep ``box`` (a slice per axis) of the patch. Beyond it: air
    and background, or with ``fill="edge"`` the box's edge voxels repeated (the labels too with
    ``edge_label``, else background)."""
    if fill == "edge":
        pads = [(s.indices(n)[0], n - s.indices(n)[1]) for s, n in zip(box, img.shape)]
        out_img = np.pad(img[box], pads, mode="edge")
        if edge_label:
            return out_img, np.pad(lbl[box], pads, mode="edge")
    else:
        out_img = np.full_like(img, -1024.0)
        out_img[box] = img[box]
    out_lbl = np.zeros_like(lbl)
    out_lbl[box] = lbl[box]
    return out_img, out_lbl


def cut_lung_end(img: np.ndarray, lbl: np.ndarray, rng: np.random.Generator, keep: tuple[float, float] = (0.35, 0.9),
                 slices: tuple[int, int] = (1, 10), fill: str = "air",
                 edge_label: bool = False) -> tuple[np.ndarray, np.ndarray] | None:
    """A ``(z, y, x)`` patch (z: feet to head) cut as a slab that ends in a lung's lowest or
    highest slices: the bases in the first slices of an abdominal scan, the apices in the last
    of a neck scan. The slab keeps a number of lung slices drawn from ``slices`` (at most the
    lungs' extent) at the lungs' end, the rest of its length (a share of the patch drawn from
    ``keep``) beyond them; beyond the cut as :func:`cut_field_of_view`'s slab (``fill``,
    ``edge_label``). Of the lungs' two ends, one inside the patch is drawn; None when neither
    end lies inside it (the caller cuts another way)."""
    zs = np.flatnonzero(np.any(lbl > 0, axis=(1, 2)))
    n = img.shape[0]
    ends = ([0] if zs.size and zs[0] > 0 else []) + ([1] if zs.size and zs[-1] < n - 1 else [])
    if not ends:
        return None
    top = bool(ends[int(rng.integers(len(ends)))])
    t = int(rng.integers(slices[0], slices[1] + 1))
    t = max(1, min(t, int(zs[-1] - zs[0] + 1)))
    length = max(t + 1, int(round(float(rng.uniform(*keep)) * n)))
    if top:  # the apices: lung in the slab's first t slices, the neck above
        start = int(zs[-1]) - t + 1
        sl = slice(max(start, 0), min(start + length, n))
    else:  # the bases: lung in the slab's last t slices, the abdomen below
        stop = int(zs[0]) + t
        sl = slice(max(stop - length, 0), min(stop, n))
    return _keep_box(img, lbl, (sl, slice(None), slice(None)), fill, edge_label)


SIDE_STRIP = (0.05, 0.35)  # share of the other lung's width that a side cut keeps


def cut_beside_lung(img: np.ndarray, lbl: np.ndarray, rng: np.random.Generator,
                    strip: tuple[float, float] = SIDE_STRIP, fill: str = "air",
                    edge_label: bool = False) -> tuple[np.ndarray, np.ndarray] | None:
    """A ``(z, y, x)`` HU patch and its labels cut as a view that holds one lung and only a
    medial strip of the other (a cardiac-centred crop, a field of view off the midline): the x
    cut runs through the other lung at a share drawn from ``strip`` of its width, counted
    from its medial face, and keeps the side of the first lung. A negative share cuts in the
    gap between the two lungs instead, that share of the way from the other lung's medial face
    to the kept lung's (-1: at the kept lung's face): a view that holds one lung only. Beyond
    the cut the image is air, or with ``fill="edge"`` the kept part's edge repeated; the labels there are
    background (with ``edge_label`` and ``fill="edge"``: the edge's labels repeated too).
    Which lung is kept whole is drawn. None when the patch does not hold both
    lungs side by side (the caller cuts another way)."""
    xs = [np.flatnonzero(np.any(lbl == c, axis=(0, 1))) for c in (1, 2)]
    if any(len(x) < 2 for x in xs):
        return None
    (r0, r1), (l0, l1) = (x[[0, -1]] for x in xs)
    if not (r0 < l0 and r1 < l1) and not (l0 < r0 and l1 < r1):
        return None  # not side by side along x
    whole = int(rng.integers(2))  # index into xs: the lung kept whole
    w0, w1 = (r0, r1) if whole == 0 else (l0, l1)
    o0, o1 = (l0, l1) if whole == 0 else (r0, r1)
    share = float(rng.uniform(*strip))
    n = img.shape[2]
    if o0 > w0:  # the other lung lies at higher x: keep [0, cut)
        if share >= 0:
            cut = o0 + max(1, int(round(share * (o1 - o0 + 1))))
        else:  # in the gap: from the other lung's first column back toward the kept lung's last
            cut = max(w1 + 1, o0 + int(round(share * max(0, o0 - w1 - 1))))
        keep = slice(0, min(n, cut))
    else:  # it lies at lower x: keep [cut, n)
        if share >= 0:
            cut = o1 + 1 - max(1, int(round(share * (o1 - o0 + 1))))
        else:
            cut = min(w0, o1 + 1 - int(round(share * max(0, w0 - o1 - 1))))
        keep = slice(max(0, cut), n)
    return _keep_box(img, lbl, (slice(None), slice(None), keep), fill, edge_label)


def _resize_pair(img: np.ndarray, lbl: np.ndarray, size_zyx: tuple[int, int, int]) -> tuple[np.ndarray, np.ndarray]:
    import torch
    import torch.nn.functional as F

    t = torch.from_numpy(np.ascontiguousarray(img))[None, None]
    img = F.interpolate(t, size=size_zyx, mode="trilinear", align_corners=False)[0, 0].numpy()
    t = torch.from_numpy(np.ascontiguousarray(lbl))[None, None].float()
    lbl = F.interpolate(t, size=size_zyx, mode="nearest")[0, 0].numpy().astype(np.uint8)
    return img, lbl


def augment_patch(
    img: np.ndarray,
    lbl: np.ndarray,
    cfg: object,
    rng: np.random.Generator,
    spacing_zyx: tuple[float, float, float] = (1.0, 1.0, 1.0),
) -> tuple[np.ndarray, np.ndarray]:
    """Spatial (rotation, scale, optional elastic; MONAI) and intensity (shift, scale, low
    resolution, blur, noise) augmentation of one HU patch and its labels, each applied with ``cfg.probability``.
    Left-right mirroring (``cfg.mirror``) goes through :func:`mirror_left_right`."""
    from scipy import ndimage as ndi

    p = cfg.probability  # type: ignore[attr-defined]
    if cfg.mirror and rng.random() < 0.5:  # type: ignore[attr-defined]
        img, lbl = mirror_left_right(img, lbl)
    spatial_on = rng.random() < p and (cfg.rotate_deg > 0 or cfg.scale != (1.0, 1.0))  # type: ignore[attr-defined]
    if spatial_on or (cfg.elastic and rng.random() < p):  # type: ignore[attr-defined]
        img, lbl = _monai_spatial(img, lbl, cfg, int(rng.integers(2**31)), spatial_on)
    lo, hi = cfg.lung_shift_hu  # type: ignore[attr-defined]
    if rng.random() < p and (lo or hi):
        img = np.where(lbl > 0, img + float(rng.uniform(lo, hi)), img).astype(np.float32)
    dlo, dhi = getattr(cfg, "lung_density_hu", (0.0, 0.0))
    if (dlo or dhi) and rng.random() < p:  # no draw when off: older configs keep their random stream
        img = denser_lungs(img, lbl, float(rng.uniform(dlo, dhi)))
    if rng.random() < p and cfg.intensity_scale > 0:  # type: ignore[attr-defined]
        # scale around water so air stays near air: a contrast change, not an offset
        img = (img + 1000.0) * float(rng.uniform(1 - cfg.intensity_scale, 1 + cfg.intensity_scale)) - 1000.0  # type: ignore[attr-defined]
    if rng.random() < p and cfg.intensity_shift_hu > 0:  # type: ignore[attr-defined]
        img = img + float(rng.uniform(-cfg.intensity_shift_hu, cfg.intensity_shift_hu))  # type: ignore[attr-defined]
    zlo, zhi = getattr(cfg, "lowres_zoom", (1.0, 1.0))
    if zlo < 1.0 and rng.random() < p:  # no draw when off: older configs keep their random stream
        img = _simulate_low_resolution(img, (zlo, zhi), int(rng.integers(2**31)))
    if rng.random() < p and cfg.blur_sigma_mm > 0:  # type: ignore[attr-defined]
        sigma_mm = float(rng.uniform(0.2, 1.0)) * cfg.blur_sigma_mm  # type: ignore[attr-defined]
        img = ndi.gaussian_filter(img, [sigma_mm / s for s in spacing_zyx])
    slo, shi = getattr(cfg, "sharpen", (0.0, 0.0))
    if shi > 0 and rng.random() < p:  # no draw when off: older configs keep their random stream
        img = img + float(rng.uniform(slo, shi)) * (img - ndi.gaussian_filter(img, [1.0 / s for s in spacing_zyx]))
    if rng.random() < p and cfg.noise_hu > 0:  # type: ignore[attr-defined]
        sigma = float(rng.uniform(0, cfg.noise_hu))  # type: ignore[attr-defined]
        img = img + rng.normal(0.0, sigma, img.shape).astype(np.float32)
    return img.astype(np.float32, copy=False), lbl


def denser_lungs(img: np.ndarray, lbl: np.ndarray, shift_hu: float) -> np.ndarray:
    """A ``(z, y, x)`` HU patch whose lungs (``lbl > 0``) are ``shift_hu`` denser (lighter where
    negative): each voxel in or within two voxels of them moves by ``shift_hu`` times its lung
    share, ``(TISSUE_HU - hu) / (TISSUE_HU - LUNG_HU)`` clipped to 0..1 (a vessel or the chest
    wall 0, aerated lung 1, the partial volume at the edge in between), as in an expiratory scan
    or diffuse ground glass; the labels stay. A lighter lung stops at air (-1000 HU): no voxel
    moves below it."""
    from scipy import ndimage as ndi

    near = ndi.binary_dilation(lbl > 0, iterations=2)
    if not near.any():
        return img
    share = np.clip((TISSUE_HU - img[near]) / (TISSUE_HU - LUNG_HU), 0.0, 1.0)
    out = np.array(img, dtype=np.float32)
    moved = img[near] + np.float32(shift_hu) * share.astype(np.float32)
    out[near] = np.maximum(moved, np.minimum(img[near], np.float32(-1000.0))) if shift_hu < 0 else moved
    return out


def _simulate_low_resolution(img: np.ndarray, zoom_range: tuple[float, float], seed: int) -> np.ndarray:
    """MONAI's ``RandSimulateLowResolution`` (nnU-Net's transform): the patch is resampled
    down by a factor from ``zoom_range`` (nearest) and back up (trilinear); labels unchanged."""
    import torch
    from monai.transforms import RandSimulateLowResolution

    t = RandSimulateLowResolution(prob=1.0, zoom_range=zoom_range)
    t.set_random_state(seed=seed)
    out = t(torch.from_numpy(np.ascontiguousarray(img, dtype=np.float32))[None])
    return np.asarray(out[0], dtype=np.float32)


def _monai_spatial(
    img: np.ndarray, lbl: np.ndarray, cfg: object, seed: int, affine_on: bool
) -> tuple[np.ndarray, np.ndarray]:
    import torch
    from monai.transforms import Rand3DElasticd, RandAffined

    data = {
        "image": torch.from_numpy(np.ascontiguousarray(img))[None],
        "label": torch.from_numpy(np.ascontiguousarray(lbl))[None],
    }
    rot = np.deg2rad(cfg.rotate_deg)  # type: ignore[attr-defined]
    lo, hi = cfg.scale  # type: ignore[attr-defined]
    if affine_on:
        t = RandAffined(
            keys=("image", "label"), prob=1.0, rotate_range=(rot, rot, rot),
            scale_range=((lo - 1, hi - 1),) * 3, mode=("bilinear", "nearest"),
            padding_mode=("border", "zeros"), cache_grid=False,
        )
        t.set_random_state(seed=seed)
        data = t(data)
    if cfg.elastic:  # type: ignore[attr-defined]
        e = Rand3DElasticd(
            keys=("image", "label"), sigma_range=(6, 9), magnitude_range=(50, 150), prob=1.0,
            mode=("bilinear", "nearest"), padding_mode=("border", "zeros"),
        )
        e.set_random_state(seed=seed + 1)
        data = e(data)
    img_out = np.asarray(data["image"][0], dtype=np.float32)
    lbl_out = np.asarray(data["label"][0]).astype(np.uint8)
    return img_out, lbl_out
