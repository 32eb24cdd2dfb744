"""The cascade: :class:`LungSegmenter` turns a CT scan into a lung label map.

Data flow (DESIGN.md): read -> canonical (LPS) -> coarse stage on the whole scan at the coarse
spacing -> one box per lung in physical mm -> fine stage per lung (crop of the original image
at the box, resampled to the fine spacing, MONAI sliding window with Gaussian blending) ->
probabilities back onto the crop's region of the original grid, incremental argmax, both
lungs combined -> postprocess -> original orientation -> exactly the input's geometry.
When the two lungs' boxes overlap so much that one sliding window over their union takes
no more windows than one per box (the usual case: the boxes share the mediastinum), the fine
stage runs once over the union (report: ``fine_regions``); sides come from geometry either way.
Where the fine stage's lungs cover a region's face, the coarse stage cut the lung short (a
scan unlike its training data): that face grows by a row of windows and the region runs again
(report: ``fine_regions[...]["grown_mm"]``).
Fat (:func:`segpipe.postprocess.fat_in_lung`), the trachea and main bronchi, and air outside
the body are never lung. Where aerated lung meets tissue, the edge is moved (by at most
1.5 mm, in-plane) onto the scan's own air/tissue boundary (:func:`segpipe.postprocess.snap_edges`):
the fine stage's 1.5 mm voxels cannot place it closer. Dense lung that the fine stage left out
but the coarse stage, which sees the whole chest, is sure of (a consolidated lobe) is added
back (:func:`segpipe.postprocess.dense_lung`).

Memory stays bounded: no full-scan float array at the fine spacing and no full-scan
probability map is ever built; the largest arrays are the input itself, the uint8 output
(held only over the lungs' boxes until the end) and one lung crop. A scan the segmenter read
itself (a path) is freed before the full-size mask is built. The coarse network is released
before the fine stage runs. On CUDA out-of-memory the fine stage retries with the
accumulation buffer on the CPU and a window batch of 1, then entirely on the CPU, and the
report says so.

Example:
    >>> seg = LungSegmenter.from_file("runs/x/model.pt")            # doctest: +SKIP
    >>> mask = seg.predict("scan.nii.gz")                           # SimpleITK uint8 image
    >>> report = seg.predict_file("scan.nii.gz", "scan_lungs.nii.gz")
"""

from __future__ import annotations

import ctypes
import logging
import math
import resource
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import SimpleITK as sitk

from segpipe import io, spatial
from segpipe._version import __version__
from segpipe.config import NetworkConfig, StageConfig, from_dict
from segpipe.errors import InputError, ModelError

__all__ = ["LungSegmenter", "DEFAULT_MODEL", "Prediction", "Job", "plan_jobs", "run_jobs", "segment_job", "sliding_window_probs", "any_lung"]

log = logging.getLogger("segpipe")

DEFAULT_MODEL = Path(__file__).resolve().parent / "weights" / "default.pt"
_SIDES = (("right", 1), ("left", 2))
_SLAB = 32  # slices per slab when probabilities go back to the original grid
_FIT_TRIM_MM = 3.0  # a fine region gives up at most this much margin per side to save windows
MIN_LUNG_ML = 50.0  # default of LungSegmenter(min_lung_ml=...)
_CONFIDENT = 0.9  # coarse lung probability that counts towards min_lung_ml
_AIRWAY_HU = -900.0  # airway lumen on the coarse grid (trachea tracking)
_GROW_MIN_MM2 = 200.0  # lung on a fine region's face over this area: the lung goes on past it
_GROW_ROUNDS = 3  # a fine region grows at most this many times (one window row per face each time)
_FACES = ("x-", "x+", "y-", "y+", "z-", "z+")


@dataclass
class Prediction:
    """A label map with the input's geometry and the run's report (JSON-able dict)."""

    label: sitk.Image
    report: dict[str, Any] = field(default_factory=dict)


def _peak_rss_bytes() -> int:
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024  # Linux: KiB


def _release_freed_memory() -> None:
    """Hand memory that was freed but kept by the C allocator back to the system (glibc's
    ``malloc_trim``; nothing elsewhere). Between the stages this lowers the peak: the coarse
    stage's buffers would otherwise still count while the fine stage runs (about 60 MB on a
    512x512x1000 scan)."""
    global _MALLOC_TRIM
    if _MALLOC_TRIM is None:
        try:
            _MALLOC_TRIM = ctypes.CDLL("libc.so.6").malloc_trim
        except (OSError, AttributeError):  # not glibc
            _MALLOC_TRIM = False
    if _MALLOC_TRIM:
        _MALLOC_TRIM(0)


_MALLOC_TRIM: Any = None


def sliding_window_probs(
    net: Any,
    array_zyx: np.ndarray,
    stage: StageConfig,
    window_hu: tuple[float, float],
    device: Any,
    *,
    accumulate_on: Any | None = None,
    sw_batch: int | None = None,
    overlap: float | None = None,
    channel: int | None = None,
) -> Any:
    """Class probabilities ``(C, Z, Y, X)`` (a CPU tensor) for a HU array: fixed
    normalisation, then MONAI's sliding-window inferer with Gaussian blending, windows of the
    stage's patch size run on ``device`` under inference mode and AMP, the accumulation buffer
    on ``accumulate_on`` (default ``device``). Shared by inference and validation.

    With ``channel``, only that class's probability ``(Z, Y, X)``, computed in place in the
    logits buffer (two fewer full-size channels than a softmax of all classes)."""
    import torch
    from monai.inferers import sliding_window_inference

    from segpipe.data import normalise_hu
    from segpipe.device import autocast, use_amp

    accumulate_on = device if accumulate_on is None else accumulate_on
    x = torch.from_numpy(normalise_hu(array_zyx, window_hu))[None, None].to(accumulate_on)
    with torch.inference_mode(), autocast(device, use_amp(device, stage.amp)):
        logits = sliding_window_inference(
            x, roi_size=tuple(reversed(stage.patch_xyz)), sw_batch_size=sw_batch or stage.batch_size, predictor=net,
            overlap=stage.overlap if overlap is None else overlap, mode="gaussian", sw_device=device, device=accumulate_on,
        )
        del x  # the input is not needed any more: its memory goes before the next step's
        if channel is None:
            return torch.softmax(logits.float(), dim=1)[0].cpu()
        return channel_probability_(logits.float()[0], channel).cpu()


def any_lung(probs: Any) -> np.ndarray:
    """Where a lung class beats background in class probabilities ``(C, Z, Y, X)`` (a CPU
    tensor): ``argmax != 0`` exactly (a tie goes to background, as argmax's first maximum),
    without torch's argmax over the class axis, which is slow on the CPU (0.38 s for the 2 M
    voxels of a neck-to-pelvis scan's coarse volume, against a few ms)."""
    import torch

    return (probs[0] < torch.amax(probs[1:], dim=0)).numpy()


def channel_probability_(logits: Any, channel: int) -> Any:
    """Softmax probability of one class from ``(C, ...)`` logits, computed in place in the
    other channels (they are overwritten; no full-size temporaries): p_k = 1 / sum_j
    exp(l_j - l_k). Where exp overflows to inf, p_k is 0, as it should be."""
    others = [j for j in range(logits.shape[0]) if j != channel]
    if not others:  # one class: probability 1
        return logits[channel].fill_(1.0)
    for j in others:
        logits[j].sub_(logits[channel]).exp_()
    total = logits[others[0]]
    for j in others[1:]:
        total.add_(logits[j])
    return total.add_(1.0).reciprocal_()


def _positions_in(grid: spatial.Geometry, ref: spatial.Geometry) -> list[np.ndarray]:
    """Per axis (x, y, z), the continuous index in ``ref`` of each voxel centre of ``grid``
    (both in the same, canonical, directions)."""
    direction = np.asarray(ref.GetDirection()).reshape(3, 3)
    shift = direction.T @ (np.asarray(grid.GetOrigin()) - np.asarray(ref.GetOrigin()))
    return [(shift[a] + np.arange(grid.GetSize()[a]) * grid.GetSpacing()[a]) / ref.GetSpacing()[a] for a in range(3)]


def _lung_on_faces(lung: np.ndarray, grid: spatial.Geometry, box: spatial.Box, faces: tuple[str, ...]) -> tuple[str, ...]:
    """Which of ``faces`` of ``box`` the ``(z, y, x)`` lung mask on ``grid`` (canonical
    directions) covers over more than :data:`_GROW_MIN_MM2`: its outermost planes of voxels
    inside the box. Only the lungs count (components of at least a fifth of the largest one):
    bowel gas that the network took for lung is a small island, and is cleared later anyway."""
    if not faces:
        return ()
    corners = spatial._physical_to_index(grid, np.array([box.lo_xyz, box.hi_xyz], float))
    size = np.asarray(grid.size)
    first = np.clip(np.ceil(corners.min(0) - 1e-6).astype(int), 0, size - 1)
    last = np.clip(np.floor(corners.max(0) + 1e-6).astype(int), first, size - 1)
    inside = lung[first[2]:last[2] + 1, first[1]:last[1] + 1, first[0]:last[0] + 1]
    spacing = np.asarray(grid.spacing, float)

    def planes(mask: np.ndarray) -> list[str]:
        out = []
        for face in faces:
            axis = "xyz".index(face[0])
            plane = np.take(mask, 0 if face[1] == "-" else -1, axis=2 - axis)
            if np.count_nonzero(plane) * float(np.prod(np.delete(spacing, axis))) > _GROW_MIN_MM2:
                out.append(face)
        return out

    if not planes(inside):  # the usual case: nothing on any face
        return ()
    from segpipe.postprocess import _label, component_sizes

    labels, n = _label(inside)
    sizes = component_sizes(labels, n)
    sizes[0] = 0
    return tuple(planes((sizes >= 0.2 * sizes.max())[labels]))


def _reframe(out: np.ndarray, lo: np.ndarray, lo_new: np.ndarray, hi_new: np.ndarray) -> np.ndarray:
    """``out`` (the canonical grid's voxels from index ``lo``, x y z) copied into a larger
    frame from ``lo_new`` to ``hi_new``."""
    new = np.zeros(tuple(int(v) for v in (hi_new - lo_new)[::-1]), out.dtype)
    d = np.asarray(lo) - np.asarray(lo_new)
    new[d[2]:d[2] + out.shape[0], d[1]:d[1] + out.shape[1], d[0]:d[0] + out.shape[2]] = out
    return new


def _in_scan(grid: spatial.Geometry, scan: spatial.Geometry) -> np.ndarray:
    """``(z, y, x)`` mask of the voxels of ``grid`` that lie inside ``scan`` (same directions):
    a fine grid reaching past the scan's end is filled with made-up air there."""
    axes = [(pos >= -0.5) & (pos <= scan.GetSize()[a] - 0.5) for a, pos in enumerate(_positions_in(grid, scan))]
    return axes[2][:, None, None] & axes[1][None, :, None] & axes[0][None, None, :]


def window_count(size_xyz: tuple[int, ...], patch_xyz: tuple[int, ...], overlap: float) -> int:
    """How many windows MONAI's sliding-window inferer runs over a volume of ``size_xyz``
    (its ``dense_patch_slices``: windows ``int(patch * (1 - overlap))`` apart, the last one
    flush with the end; a volume smaller than the patch is padded to one window)."""
    n = 1
    for size, patch in zip(size_xyz, patch_xyz):
        interval = patch if size == patch else window_interval(patch, overlap)
        n *= max(0, math.ceil((size - patch) / interval)) + 1
    return n


def window_interval(patch: int, overlap: float) -> int:
    """Voxels between two of MONAI's sliding windows along an axis."""
    return max(int(patch * (1 - overlap)), 1)


class LungSegmenter:
    """Two-stage lung segmentation with a segpipe model file.

    Args:
        header: the model file's header (see :mod:`segpipe.modelfile`).
        weights: ``{"coarse": state_dict, "fine": state_dict}``.
        device: ``"auto"`` (CUDA when present), ``"cpu"`` or ``"cuda"``.
        fast: no window overlap in the fine stage (about 2-3x fewer windows; slightly rougher
            borders between windows).
        sw_batch_size: windows per forward pass (default: one on a CPU running bf16, where that
            is fastest, else the stage's training batch size; :meth:`window_batch`).
        progress: log each stage.
        min_lung_ml: a side counts as found only when the coarse network is confident
            (lung probability >= 0.9) on at least this volume of it; smaller or unsure finds
            are gas in the bowel or stomach of a scan without lungs, not lung. Lung bases
            smaller than this (a sliver at the top of an abdominal scan) are not segmented.
        dense_from_coarse: add the dense lung (a consolidated lobe) that the fine stage left
            out where the coarse stage, which sees the whole chest, is sure it is lung
            (:func:`segpipe.postprocess.dense_lung`; report: ``dense_lung_ml``). Off only to
            measure what the rule adds.
    """

    def __init__(
        self,
        header: dict[str, Any],
        weights: dict[str, dict[str, Any]],
        *,
        device: str = "auto",
        fast: bool = False,
        sw_batch_size: int | None = None,
        progress: bool = False,
        min_lung_ml: float = MIN_LUNG_ML,
        dense_from_coarse: bool = True,
    ) -> None:
        # the inference libraries are imported here, with the model, not inside the first
        # predict: importing MONAI alone takes 2-4 s, a set-up cost paid once per process
        import monai.inferers  # noqa: F401
        import scipy.ndimage  # noqa: F401

        from segpipe.device import resolve_device

        if not min_lung_ml >= 0:
            raise ValueError(f"min_lung_ml: expected >= 0, got {min_lung_ml}")
        self.min_lung_ml = float(min_lung_ml)
        self.header = header
        self.weights = weights
        self.device = resolve_device(device)
        self.fast = fast
        self.sw_batch_size = sw_batch_size
        self.progress = progress
        self.dense_from_coarse = dense_from_coarse
        try:
            self.coarse_cfg = self._stage_config("coarse")
            self.fine_cfg = self._stage_config("fine")
            self.coarse_mm = tuple(header["spacing"]["coarse_mm"])
            self.fine_mm = tuple(header["spacing"]["fine_mm"])
            self.coarse_size = header["spacing"].get("coarse_size_xyz")
            self.window_hu = tuple(header["intensity"]["window_hu"])
            self.margin_mm = float(header.get("margin_mm", 12.0))
        except (KeyError, TypeError, ValueError) as err:
            raise ModelError(f"the model file's header is incomplete or invalid ({err})") from err

    def _stage_config(self, stage: str) -> StageConfig:
        h = self.header[stage]
        network = from_dict(NetworkConfig, {**h["network"], "checkpointing": "none"}, f"{stage}.network")
        return StageConfig(
            network=network, patch_xyz=tuple(h["patch_xyz"]), batch_size=int(h.get("batch_size", 2)),
            amp=bool(h.get("amp", True)), overlap=float(h.get("overlap", 0.25)),
        )

    # ------------------------------------------------------------------------- constructors
    @classmethod
    def from_file(cls, path: str | Path, **kwargs: Any) -> LungSegmenter:
        """Load a model file written by ``segpipe train``."""
        from segpipe.modelfile import load_model

        header, weights = load_model(path)
        return cls(header, weights, **kwargs)

    @classmethod
    def default(cls, **kwargs: Any) -> LungSegmenter:
        """The bundled default model (``segpipe/weights/default.pt``)."""
        if not DEFAULT_MODEL.is_file():
            raise ModelError(
                f"the bundled default model is missing ({DEFAULT_MODEL}); train one with "
                "'segpipe train --out RUN' and pass --model RUN/model.pt"
            )
        return cls.from_file(DEFAULT_MODEL, **kwargs)

    # ------------------------------------------------------------------------- networks
    def _network(self, stage: str, device: Any) -> Any:
        from segpipe.network import build_network

        cfg = self.coarse_cfg if stage == "coarse" else self.fine_cfg
        net = build_network(cfg.network)
        try:
            net.load_state_dict(self.weights[stage])
        except (RuntimeError, KeyError) as err:
            raise ModelError(f"the model file's {stage} weights do not match its network settings") from err
        from segpipe.device import for_inference

        return for_inference(net, device)

    def window_batch(self, stage: StageConfig) -> int:
        """Windows per forward pass for ``stage``: ``sw_batch_size`` when given, else
        :func:`segpipe.device.window_batch` (one on a CPU running bf16, the stage's batch
        elsewhere)."""
        from segpipe.device import use_amp, window_batch

        return self.sw_batch_size or window_batch(self.device, stage.batch_size, use_amp(self.device, stage.amp))

    def _predict_probs(
        self, net: Any, array_zyx: np.ndarray, stage: StageConfig, device: Any, accumulate_on: Any, sw_batch: int,
        overlap: float, channel: int | None = None,
    ) -> Any:
        return sliding_window_probs(
            net, array_zyx, stage, self.window_hu, device, accumulate_on=accumulate_on, sw_batch=sw_batch,
            overlap=overlap, channel=channel,
        )

    def _fine_with_fallback(self, array_zyx: np.ndarray, notes: list[str]) -> Any:
        """Fine-stage P(background) (Z, Y, X) on the CPU, retrying after CUDA OOM."""
        import torch

        stage = self.fine_cfg
        overlap = self._fine_overlap
        batch = self.window_batch(stage)
        attempts = [(self.device, self.device, batch)]
        if self.device.type == "cuda":
            attempts += [(self.device, torch.device("cpu"), 1), (torch.device("cpu"), torch.device("cpu"), 1)]
        for i, (dev, acc, sw_batch) in enumerate(attempts):
            net = self._fine_net if dev == self._fine_net_device else self._move_fine(dev)
            try:
                return self._predict_probs(net, array_zyx, stage, dev, acc, sw_batch, overlap, channel=0)
            except torch.cuda.OutOfMemoryError:
                if i + 1 == len(attempts):
                    raise
                torch.cuda.empty_cache()
                nxt = attempts[i + 1]
                note = (
                    f"CUDA out of memory in the fine stage; retried with the accumulation buffer on {nxt[1].type}, "
                    f"window batch {nxt[2]}, windows on {nxt[0].type}"
                )
                notes.append(note)
                log.warning(note)
        raise AssertionError("unreachable")  # pragma: no cover

    def _move_fine(self, device: Any) -> Any:
        from segpipe.device import for_inference

        self._fine_net = for_inference(self._fine_net, device)
        self._fine_net_device = device
        return self._fine_net

    # ------------------------------------------------------------------------- the cascade
    def _as_image(self, image: sitk.Image | str | Path | np.ndarray, spacing: tuple[float, float, float] | None, series_uid: str | None) -> sitk.Image:
        if isinstance(image, (str, Path)):
            return io.read_image(image, series_uid=series_uid)
        if isinstance(image, np.ndarray):
            if spacing is None:
                raise InputError("a numpy array needs its voxel spacing: predict(array_zyx, spacing=(sx, sy, sz))")
            if image.ndim != 3:
                raise InputError(f"expected a 3D array (z, y, x), got shape {image.shape}")
            out = sitk.GetImageFromArray(np.ascontiguousarray(image))
            out.SetSpacing(tuple(float(s) for s in spacing))
            return out
        if isinstance(image, sitk.Image):
            return image
        raise InputError(f"expected a SimpleITK image, a path or a numpy array, got {type(image).__name__}")

    def predict(
        self,
        image: sitk.Image | str | Path | np.ndarray,
        *,
        spacing: tuple[float, float, float] | None = None,
        hu_offset: float = 0.0,
        series_uid: str | None = None,
    ) -> sitk.Image:
        """Segment the lungs: uint8 label image (0 background, 1 right, 2 left lung) with
        exactly the input's geometry.

        Args:
            image: a SimpleITK image (HU), an image path or DICOM folder, or a ``(z, y, x)``
                numpy array with ``spacing``.
            spacing: (x, y, z) mm, for a numpy array only.
            hu_offset: added to every voxel first (e.g. -1024 for scans stored as HU + 1024).
            series_uid: DICOM series to read from a folder with several.
        """
        return self.predict_with_report(image, spacing=spacing, hu_offset=hu_offset, series_uid=series_uid).label

    def predict_with_report(
        self,
        image: sitk.Image | str | Path | np.ndarray,
        *,
        spacing: tuple[float, float, float] | None = None,
        hu_offset: float = 0.0,
        series_uid: str | None = None,
    ) -> Prediction:
        """As :meth:`predict`, plus the report: volumes, boxes, spacings, timings, memory,
        warnings."""
        import torch

        from segpipe.device import precision_name, use_amp

        timings: dict[str, float] = {}
        warnings: list[str] = []
        notes: list[str] = []
        t0 = time.perf_counter()

        def read(check: bool = False) -> sitk.Image:
            """The scan with the HU offset applied (checked the first time; read once more
            when a fine region grows past the part of it kept)."""
            name = str(image) if isinstance(image, (str, Path)) else "image"
            scan = self._as_image(image, spacing, series_uid)
            if check:
                io.validate_image(scan, name)
            if hu_offset:
                scan = sitk.Cast(scan, sitk.sitkFloat32) + float(hu_offset)
            if check:
                io.check_hu(scan, name)
            return scan

        img = read(check=True)
        canonical, code = spatial.to_canonical(img)
        # the scan is ours to drop when this call read, shifted or reoriented it (not the
        # caller's own image): then only the lungs' region of it is kept for the fine stage
        owned = canonical is not image
        geometry, geometry_c = spatial.Geometry.of(img), spatial.Geometry.of(canonical)
        timings["read_s"] = time.perf_counter() - t0
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)

        # coarse stage ------------------------------------------------------------------
        t = time.perf_counter()
        coarse_mm = spatial.spacing_for_size(canonical, tuple(self.coarse_size)) if self.coarse_size else self.coarse_mm
        coarse_img = spatial.resample_image(canonical, coarse_mm)
        coarse_arr = sitk.GetArrayFromImage(coarse_img)
        net = self._network("coarse", self.device)
        probs = self._predict_probs(net, coarse_arr, self.coarse_cfg, self.device, self.device,
                                    self.window_batch(self.coarse_cfg), self.coarse_cfg.overlap)
        coarse_lung = any_lung(probs)
        confident = (probs[0] <= 1.0 - _CONFIDENT).numpy()
        del net, probs, coarse_arr
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
        _release_freed_memory()
        boxes = self._lung_boxes(coarse_lung, coarse_img, confident)
        self._coarse_airways = self._airways(coarse_img)
        self._coarse_geometry = spatial.Geometry.of(coarse_img)
        self._coarse_prob = spatial.copy_geometry(np.asarray(coarse_lung, np.float32), coarse_img)
        timings["coarse_s"] = time.perf_counter() - t
        if not boxes:
            warnings.append("no lung found: the scan may not include the chest; the mask is empty")

        # fine stage per lung ------------------------------------------------------------
        # the output is held only for the lungs' boxes (their union, in canonical voxels); the
        # rest of the scan is background and is never touched
        t = time.perf_counter()
        size_xyz = np.asarray(geometry_c.size)
        ranges = [spatial.box_index_range(geometry_c, b) for b in boxes.values()]
        lo = hi = np.zeros(3, int)
        if ranges:
            lo = np.clip(np.min([r[0] for r in ranges], axis=0), 0, size_xyz)
            hi = np.maximum(np.clip(np.max([r[1] for r in ranges], axis=0), 0, size_xyz), lo)
        offset = tuple(int(v) for v in lo)
        out = np.zeros(tuple(int(v) for v in (hi - lo)[::-1]), np.uint8)
        regions = self._fine_regions(geometry_c, boxes)
        self._pleural_ml = 0.0
        self._dense_ml = 0.0
        fine_regions = {name: {**box.to_dict(), "windows": self._windows(geometry_c, box)} for name, box in regions.items()}
        # a region thinner than a window reads the scan around it (a window of real context,
        # not padding), and writes only inside itself
        context = {name: self._one_window_at_least(geometry_c, box) for name, box in regions.items()}
        # the voxels the fine stage reads: the whole scan, or, when the scan is ours, only the
        # lungs' region of it (a neck-to-pelvis scan's 500 MB become about 100 MB)
        source, source_start = canonical, (0, 0, 0)
        if owned and boxes and out.size:
            reach = [spatial.box_index_range(geometry_c, b) for b in context.values()]
            source, source_start = self._scan_region(
                canonical, np.clip(np.min([lo, *[r[0] for r in reach]], axis=0), 0, size_xyz),
                np.clip(np.max([hi, *[r[1] for r in reach]], axis=0), 0, size_xyz),
            )
        del img, canonical
        if boxes and out.size:
            self._fine_net = self._network("fine", self.device)
            self._fine_net_device = self.device
            for name, box in regions.items():
                ctx, grown = context[name], [0.0] * 6
                for round_ in range(_GROW_ROUNDS + 1):
                    faces = self._growable_faces(geometry_c, box, name) if round_ < _GROW_ROUNDS else ()
                    touched = self._segment_lung(source, geometry_c, box, out, offset, notes, context=ctx, grow=faces)
                    if not touched:
                        break
                    # the lung goes on past the region (the coarse stage missed part of it):
                    # grow it there by a row of windows and run it again
                    box, step = self._grow(geometry_c, box, touched)
                    grown = [g + d for g, d in zip(grown, step)]
                    ctx = self._one_window_at_least(geometry_c, box)
                    log.info("the %s fine region grew by %s mm (lung on its faces %s)", name,
                             [round(d, 1) for d in step], ", ".join(touched))
                    lo_new, hi_new = spatial.box_index_range(geometry_c, box)
                    lo_new, hi_new = np.clip(np.minimum(lo, lo_new), 0, size_xyz), np.clip(np.maximum(hi, hi_new), 0, size_xyz)
                    if np.any(lo_new != lo) or np.any(hi_new != hi):
                        out = _reframe(out, lo, lo_new, hi_new)
                        lo, hi, offset = lo_new, hi_new, tuple(int(v) for v in lo_new)
                    if owned:
                        c_lo, c_hi = (np.clip(v, 0, size_xyz) for v in spatial.box_index_range(geometry_c, ctx))
                        s_lo, s_hi = np.asarray(source_start), np.asarray(source_start) + np.asarray(source.GetSize())
                        if np.any(c_lo < s_lo) or np.any(c_hi > s_hi):
                            source, source_start = self._scan_region(
                                spatial.to_canonical(read())[0], np.minimum(s_lo, c_lo), np.maximum(s_hi, c_hi))
                if any(grown):
                    fine_regions[name] = {**box.to_dict(), "windows": self._windows(geometry_c, box),
                                          "grown_mm": dict(zip(_FACES, [round(g, 1) for g in grown]))}
            del self._fine_net
            self._assign_sides(out, offset, source, source_start, coarse_img)
            if self.device.type == "cuda":
                torch.cuda.empty_cache()
        timings["fine_s"] = time.perf_counter() - t
        if self._pleural_ml >= 1.0:
            warnings.append(
                f"took {self._pleural_ml:.0f} mL of vessel-free air at the lungs' edge out of the mask "
                "(a pneumothorax, or gas under the diaphragm): check the QC picture"
            )

        # postprocess and back to the input's grid --------------------------------------
        t = time.perf_counter()
        from segpipe.postprocess import clean_lungs_array

        # the scan is no longer needed: when this call read it, its memory goes back now
        del source
        warnings += clean_lungs_array(out, geometry_c, offset_xyz=offset)
        voxel_ml = spatial.voxel_volume_ml(geometry)
        volumes = {side: round(float(np.count_nonzero(out == v)) * voxel_ml, 2) for side, v in _SIDES}
        full = np.zeros(tuple(reversed(geometry_c.size)), np.uint8)  # untouched pages cost no memory
        full[lo[2]:hi[2], lo[1]:hi[1], lo[0]:hi[0]] = out
        del out
        label_c = geometry_c.apply(sitk.GetImageFromArray(full))
        del full
        label = spatial.from_canonical(label_c, geometry) if code != spatial.CANONICAL else geometry.apply(label_c)
        del label_c
        timings["postprocess_s"] = time.perf_counter() - t
        timings["total_s"] = time.perf_counter() - t0

        report: dict[str, Any] = {
            "segpipe_version": __version__,
            "input": str(image) if isinstance(image, (str, Path)) else type(image).__name__,
            "size_xyz": list(geometry.size),
            "spacing_xyz_mm": [round(s, 5) for s in geometry.spacing],
            "orientation": code,
            "volumes_ml": volumes,
            "boxes_mm": {side: box.to_dict() for side, box in boxes.items()},
            "fine_regions": fine_regions,
            "spacings_used_mm": {"coarse": [round(s, 4) for s in coarse_mm], "fine": list(self.fine_mm)},
            "timings_s": {k: round(v, 3) for k, v in timings.items()},
            "peak_memory": {
                "rss_bytes": _peak_rss_bytes(),
                "cuda_max_allocated": int(torch.cuda.max_memory_allocated(self.device)) if self.device.type == "cuda" else None,
            },
            "device": str(self.device),
            "precision": precision_name(self.device, use_amp(self.device, self.fine_cfg.amp)),
            "fast": self.fast,
            "hu_offset": hu_offset,
            "pleural_air_ml": round(self._pleural_ml, 1),
            "dense_lung_ml": round(self._dense_ml, 1),
            "fallbacks": notes,
            "warnings": warnings,
        }
        return Prediction(label, report)

    def predict_file(
        self,
        input: str | Path,
        output: str | Path,
        *,
        qc: bool = False,
        overwrite: bool = True,
        hu_offset: float = 0.0,
        series_uid: str | None = None,
    ) -> dict[str, Any]:
        """Segment the scan at ``input`` (file or DICOM folder) and write the mask to
        ``output`` with the input's exact geometry, plus ``<output stem>.json`` (the report)
        and, with ``qc``, ``<output stem>.png``. Returns the report."""
        job = Job(Path(input), io.check_output_path(output, overwrite=overwrite))
        return segment_job(self, job, qc=qc, hu_offset=hu_offset, series_uid=series_uid)

    def _windows(self, canonical: sitk.Image | spatial.Geometry, box: spatial.Box) -> int:
        """Fine-stage windows for ``box`` (its part of the scan's fine lattice)."""
        size = spatial.lattice_grid(canonical, self.fine_mm, box).GetSize()
        return window_count(size, self.fine_cfg.patch_xyz, self._fine_overlap)

    @property
    def _fine_overlap(self) -> float:
        """The fine stage's window overlap (none with ``fast``)."""
        return 0.0 if self.fast else self.fine_cfg.overlap

    def _fine_regions(self, canonical: sitk.Image | spatial.Geometry, boxes: dict[str, spatial.Box]) -> dict[str, spatial.Box]:
        """Where the fine stage runs: each lung's box, or the union of both when that takes
        no more windows (the boxes overlap in the mediastinum, and a sliding window wastes the
        part of its last window that sticks out of a box), each fitted to the window grid
        (:meth:`_fit_windows`). Sides never depend on it: they come from geometry
        (:meth:`_assign_sides`)."""
        fitted = {side: self._fit_windows(canonical, box) for side, box in boxes.items()}
        if len(boxes) == 2:
            union = self._fit_windows(canonical, boxes["right"].union(boxes["left"]))
            # a tie goes to the union: one pass sees both lungs and the mediastinum between
            # them (COPDGene: 0.986 / 0.983 per box, 0.987 / 0.986 over the union, 48 windows each)
            if self._windows(canonical, union) <= sum(self._windows(canonical, b) for b in fitted.values()):
                return {"both": union}
        return fitted

    def _fit_windows(self, canonical: sitk.Image | spatial.Geometry, box: spatial.Box) -> spatial.Box:
        """``box`` shrunk by at most :data:`_FIT_TRIM_MM` per side on each axis where that
        drops a whole row of windows: a box a voxel longer than what ``k`` windows cover
        takes ``k + 1`` (a 312 mm box at 1.5 mm is 209 voxels: 5 windows of 64 where 208
        takes 4, 25 % more windows for one voxel). The boxes carry the training margin plus a
        coarse voxel (16 mm by default), so the lungs stay well inside."""
        interval = [window_interval(p, self._fine_overlap) for p in self.fine_cfg.patch_xyz]
        windows = self._windows(canonical, box)
        size = spatial.lattice_grid(canonical, self.fine_mm, box).GetSize()
        for axis in range(3):
            patch = int(self.fine_cfg.patch_xyz[axis])
            if size[axis] <= patch:
                continue
            rows = math.ceil((size[axis] - patch) / interval[axis]) + 1
            excess_mm = (size[axis] - (patch + (rows - 2) * interval[axis])) * self.fine_mm[axis]
            for extra in (0.0, 0.5, 1.0):  # the lattice's rounding may keep a voxel more
                trim = excess_mm / 2 + extra * self.fine_mm[axis]
                if trim > _FIT_TRIM_MM or trim * 2 >= box.size_mm[axis]:
                    break
                shrink = [0.0, 0.0, 0.0]
                shrink[axis] = -trim
                candidate = box.expand(tuple(shrink))  # type: ignore[arg-type]
                if (n := self._windows(canonical, candidate)) < windows:
                    box, windows = candidate, n
                    break
        return box

    def _one_window_at_least(self, canonical: sitk.Image | spatial.Geometry, box: spatial.Box) -> spatial.Box:
        """``box`` grown evenly on each axis where its part of the fine lattice is shorter than
        a window, to one window: the same windows, but the network sees the scan around a
        thin region (the lung bases at the top of an abdominal scan) instead of the sliding
        window's constant padding, which it never met in training."""
        patch = self.fine_cfg.patch_xyz
        for _ in range(3):  # the lattice's rounding may leave a voxel short
            size = spatial.lattice_grid(canonical, self.fine_mm, box).GetSize()
            grow = [max(0.0, (int(patch[a]) - int(size[a])) * self.fine_mm[a] / 2) for a in range(3)]
            if not any(grow):
                break
            box = box.expand(tuple(g + (0.25 * self.fine_mm[a] if g else 0.0) for a, g in enumerate(grow)))  # type: ignore[arg-type]
        return box

    def _lung_boxes(self, coarse_lung: np.ndarray, coarse_img: sitk.Image, confident: np.ndarray | None = None) -> dict[str, spatial.Box]:
        """Physical box per lung from the coarse prediction (``coarse_lung``: a lung class
        wins, as a boolean or label array), expanded by the training margin
        plus one coarse voxel. Sides come from geometry (:func:`segpipe.postprocess.split_sides`
        on the predicted lung), never from which class the network picked; a side with less
        than ``min_lung_ml`` of ``confident`` voxels counts as absent. The sided coarse mask is
        kept in ``self._coarse_sides``, the body mask in ``self._coarse_body``."""
        from segpipe.postprocess import body_interior, body_midline_x, skin_slack, split_sides

        hu = sitk.GetArrayViewFromImage(coarse_img)
        # a lung lies inside the body: "lung" in the air around the patient is dropped (one
        # coarse voxel of slack for partial volume at the chest wall)
        # the fine stage's lungs must lie inside the body itself (no slack: the chest wall is
        # thicker than a coarse voxel), the coarse lungs within one voxel of it (partial volume)
        self._coarse_body = body_interior(hu)
        sides = split_sides((coarse_lung > 0) & skin_slack(self._coarse_body), midline_x=body_midline_x(hu))
        voxel_ml = spatial.voxel_volume_ml(coarse_img)
        sure = (coarse_lung > 0) if confident is None else confident
        for value in (1, 2):
            if np.count_nonzero((sides == value) & sure) * voxel_ml < self.min_lung_ml:
                sides[sides == value] = 0
        self._coarse_sides = sides
        boxes = {}
        extra = max(coarse_img.GetSpacing())
        for side, value in _SIDES:
            box = spatial.box_from_mask(spatial.copy_geometry(sides, coarse_img), value)
            if box is not None:
                boxes[side] = box.expand(self.margin_mm + extra)
        return boxes

    def _airways(self, coarse_img: sitk.Image) -> np.ndarray:
        """The trachea and main bronchi on the coarse grid (never lung): tracked from the top
        through the lumen (below -900 HU, inside the body; :func:`segpipe.postprocess.track_airways`)
        and grown by one voxel in-plane for the walls' partial volume."""
        from scipy import ndimage

        from segpipe.postprocess import track_airways

        hu = sitk.GetArrayViewFromImage(coarse_img)
        tracked = track_airways((hu < _AIRWAY_HU) & self._coarse_body, coarse_img.GetSpacing())
        in_plane = ndimage.generate_binary_structure(3, 1) & np.array([0, 1, 0], bool)[:, None, None]
        return ndimage.binary_dilation(tracked, structure=in_plane)

    def _segment_lung(
        self, source: sitk.Image, canonical: spatial.Geometry, box: spatial.Box, out: np.ndarray,
        offset: tuple[int, int, int], notes: list[str], context: spatial.Box | None = None,
        grow: tuple[str, ...] = (),
    ) -> tuple[str, ...]:
        """Fine stage for one lung: crop, resample, sliding window, then the probability of
        "any lung" (1 - background) back onto the crop's region of the original grid; voxels
        above 0.5 are marked in ``out`` (the part of the canonical grid ``canonical`` that
        starts at index ``offset``, x y z; sides are assigned afterwards, from geometry). The
        network reads ``context`` (a larger box around ``box``, when given) and only ``box``
        is written. The voxels come from ``source``: the canonical scan or a region of it that holds the box
        (:meth:`_scan_region`). ``grow``: faces of ``box`` (``x-`` ... ``z+``) to check; when
        the lung covers more than :data:`_GROW_MIN_MM2` of one of them nothing is written and
        the faces are returned (the region is too small), else ``()``."""
        # the box's part of the fine grid of the whole scan (same lattice): the result does
        # not depend on where exactly the box starts, and no original-resolution crop is copied
        lattice = spatial.lattice_grid(canonical, self.fine_mm, context or box)
        fine = spatial.resample_to_reference(
            source, lattice, interpolator=sitk.sitkLinear,
            default_value=-1024.0, output_pixel_type=sitk.sitkFloat32,
        )
        grid = spatial.Geometry.of(fine)
        hu = sitk.GetArrayFromImage(fine)
        del fine  # only its geometry is needed from here on
        # only the background channel is needed: lung = 1 - background
        from segpipe.postprocess import dense_lung, dense_to_wall, pleural_air

        background = self._fine_with_fallback(hu, notes).numpy()
        # a pneumothorax inside the network's lung is taken out (it is air outside the lung);
        # air around the patient and in the large airways is cleared later anyway
        inside = self._inside_on(grid)
        if self.dense_from_coarse:
            # a consolidated lobe: dense, and lung only to the coarse stage, which sees the whole chest
            prior = sitk.GetArrayFromImage(spatial.resample_to_reference(
                self._coarse_prob, lattice, interpolator=sitk.sitkLinear,
                default_value=0.0, output_pixel_type=sitk.sitkFloat32))
            added = dense_lung(background < 0.5, prior, hu, self.fine_mm, allowed=inside)
            del prior
            if added.any():  # and its rim against the ribs, which neither stage calls lung
                added |= dense_to_wall(added, background < 0.5, hu, self.fine_mm, self._body_centre_on(grid), allowed=inside)
            background[added] = 0.0
            self._dense_ml += float(np.count_nonzero(added)) * float(np.prod(self.fine_mm)) / 1000.0
        pleural = pleural_air((background < 0.5) & inside, hu, self.fine_mm, valid=inside & _in_scan(grid, canonical))
        self._pleural_ml += float(np.count_nonzero(pleural)) * float(np.prod(self.fine_mm)) / 1000.0
        background[pleural] = 1.0
        del hu, pleural
        # (air around the patient that the network calls lung is cleared later: it does not count)
        touched = _lung_on_faces((background < 0.5) & inside, grid, box, grow)
        del inside
        if touched:
            return touched
        background = grid.apply(sitk.GetImageFromArray(background))
        _release_freed_memory()  # the window pass's buffers, before the slabs go back to the scan
        start, stop = spatial.box_index_range(canonical, box)
        lo = np.maximum(start, 0)
        hi = np.minimum(stop, np.asarray(canonical.GetSize()))
        if np.any(hi <= lo):
            return ()
        # back onto the original grid in slabs of slices: a float copy of the whole crop at the
        # original resolution is never held (it can be several GB for a large scan)
        direction = np.asarray(canonical.GetDirection()).reshape(3, 3)
        spacing = np.asarray(canonical.GetSpacing())
        for z0 in range(lo[2], hi[2], _SLAB):
            z1 = min(z0 + _SLAB, hi[2])
            ref = sitk.Image([int(hi[0] - lo[0]), int(hi[1] - lo[1]), int(z1 - z0)], sitk.sitkUInt8)
            ref.SetSpacing(canonical.GetSpacing())
            ref.SetDirection(canonical.GetDirection())
            origin = np.asarray(canonical.GetOrigin()) + direction @ (np.array([lo[0], lo[1], z0]) * spacing)
            ref.SetOrigin(tuple(float(v) for v in origin))
            back = spatial.resample_to_reference(
                background, ref, interpolator=sitk.sitkLinear, default_value=1.0, output_pixel_type=sitk.sitkFloat32
            )
            ox, oy, oz = offset
            region = out[z0 - oz:z1 - oz, lo[1] - oy:hi[1] - oy, lo[0] - ox:hi[0] - ox]
            region[sitk.GetArrayViewFromImage(back) < 0.5] = 1
        return ()

    def _growable_faces(self, canonical: sitk.Image | spatial.Geometry, box: spatial.Box, name: str) -> tuple[str, ...]:
        """The faces of a fine region that may grow: those inside the scan, less the medial
        face of a one-lung region (the other lung lies past it)."""
        lo, hi = spatial.box_index_range(canonical, box)
        size = np.asarray(canonical.GetSize())
        faces = []
        for axis, letter in enumerate("xyz"):
            if lo[axis] > 0:
                faces.append(letter + "-")
            if hi[axis] < size[axis]:
                faces.append(letter + "+")
        medial = {"right": "x+", "left": "x-"}.get(name)  # canonical LPS: x grows toward the patient's left
        # and only where the scan goes on (a face within a voxel of its end cannot grow)
        return tuple(f for f in faces if f != medial and self._grow(canonical, box, (f,))[1][_FACES.index(f)] > 1e-3)

    def _grow(self, canonical: sitk.Image | spatial.Geometry, box: spatial.Box, faces: tuple[str, ...]) -> tuple[spatial.Box, list[float]]:
        """``box`` grown by one row of fine windows on each of ``faces``, not past the scan;
        and how far it grew per face (mm, in :data:`_FACES` order)."""
        geometry = spatial.Geometry.of(canonical) if isinstance(canonical, sitk.Image) else canonical
        first = spatial.index_to_physical(geometry, np.zeros((1, 3)))[0]
        last = spatial.index_to_physical(geometry, np.asarray(geometry.size, float)[None] - 1.0)[0]
        scan_lo, scan_hi = np.minimum(first, last), np.maximum(first, last)
        lo, hi = np.array(box.lo_xyz, float), np.array(box.hi_xyz, float)
        step = [0.0] * 6
        for face in faces:
            axis = "xyz".index(face[0])
            row = window_interval(int(self.fine_cfg.patch_xyz[axis]), self._fine_overlap) * self.fine_mm[axis]
            if face[1] == "-":
                new = max(lo[axis] - row, min(lo[axis], scan_lo[axis]))
                step[_FACES.index(face)], lo[axis] = lo[axis] - new, new
            else:
                new = min(hi[axis] + row, max(hi[axis], scan_hi[axis]))
                step[_FACES.index(face)], hi[axis] = new - hi[axis], new
        return spatial.Box(tuple(float(v) for v in lo), tuple(float(v) for v in hi)), [float(v) for v in step]  # type: ignore[arg-type]

    def _scan_region(self, canonical: sitk.Image, lo: np.ndarray, hi: np.ndarray) -> tuple[sitk.Image, tuple[int, int, int]]:
        """The voxels ``lo``..``hi`` (x y z index range, exclusive) of ``canonical`` and its
        start index: an exact copy with its own origin, padded by two fine voxels and two of
        the scan's own on each side, so every fine-lattice point of a box in the range
        (:func:`segpipe.spatial.lattice_grid` reaches up to one fine voxel past it) interpolates
        from the same voxels as on the whole scan."""
        spacing = np.asarray(canonical.GetSpacing())
        pad = np.ceil(2.0 * np.asarray(self.fine_mm) / spacing).astype(int) + 2
        start = np.maximum(np.asarray(lo) - pad, 0)
        stop = np.minimum(np.asarray(hi) + pad, np.asarray(canonical.GetSize()))
        region = canonical[int(start[0]):int(stop[0]), int(start[1]):int(stop[1]), int(start[2]):int(stop[2])]
        return region, (int(start[0]), int(start[1]), int(start[2]))

    def _inside_on(self, grid: spatial.Geometry) -> np.ndarray:
        """The coarse stage's body mask less its airways, looked up (nearest voxel) on ``grid``
        (canonical directions, as the coarse grid), as a ``(z, y, x)`` array."""
        coarse = self._coarse_geometry
        index = [np.clip(np.round(pos).astype(int), 0, coarse.size[a] - 1) for a, pos in enumerate(_positions_in(grid, coarse))]
        inside = self._coarse_body & ~self._coarse_airways
        return inside[np.ix_(index[2], index[1], index[0])]

    def _body_centre_on(self, grid: spatial.Geometry) -> np.ndarray:
        """Per slice of ``grid`` (canonical directions, as the coarse grid), the centre of the
        coarse stage's body mask in that slice as a ``(y, x)`` voxel index of ``grid``:
        ``(Z, 2)`` float. Slices without body take the nearest slice's centre."""
        body = self._coarse_body
        coarse = self._coarse_geometry
        zz, yy, xx = np.nonzero(body)
        nz = body.shape[0]
        if len(zz) == 0:  # no body found: the middle of the coarse grid
            centre = np.tile([(body.shape[1] - 1) / 2, (body.shape[2] - 1) / 2], (nz, 1))
        else:
            count = np.bincount(zz, minlength=nz).astype(float)
            has = count > 0
            centre = np.stack([np.bincount(zz, yy, nz), np.bincount(zz, xx, nz)], axis=1)[has] / count[has, None]
            slices = np.arange(nz)
            centre = np.stack([np.interp(slices, slices[has], centre[:, k]) for k in range(2)], axis=1)
        pos = _positions_in(grid, coarse)  # x, y, z: continuous coarse index of each voxel of grid
        k = np.clip(np.round(pos[2]).astype(int), 0, nz - 1)
        scale = [coarse.GetSpacing()[a] / grid.GetSpacing()[a] for a in range(3)]
        return np.stack([(centre[k, 0] - pos[1][0]) * scale[1], (centre[k, 1] - pos[0][0]) * scale[0]], axis=1)

    def _assign_sides(
        self, out: np.ndarray, offset: tuple[int, int, int], source: sitk.Image, source_start: tuple[int, int, int],
        coarse_img: sitk.Image,
    ) -> None:
        """Turn the lung voxels of ``out`` (the part of the canonical grid that starts at index
        ``offset``, x y z) into 1 (right) / 2 (left) with the per-row boundary between the
        coarse stage's sided lungs (physical geometry); the scan's voxels come from ``source``,
        the part of the canonical scan that starts at index ``source_start``. Voxels outside the body (the coarse body
        mask), in the trachea and main bronchi (tracked on the coarse grid) or in fat
        (:func:`segpipe.postprocess.fat_in_lung`, on the scan's own voxels) are cleared: air
        around the patient inside a lung's box, the large airways and fat are never lung. Then
        the edge of aerated lung is snapped onto the scan's voxels
        (:func:`segpipe.postprocess.snap_edges`)."""
        from segpipe.postprocess import fat_in_lung, map_parallel, side_boundary, snap_edges

        hu = sitk.GetArrayViewFromImage(source)  # a view: no copy of the scan
        spacing_yx = (float(source.GetSpacing()[1]), float(source.GetSpacing()[0]))
        boundary_c = side_boundary(self._coarse_sides)
        sp_f = np.asarray(source.GetSpacing())
        sp_c = np.asarray(coarse_img.GetSpacing())
        fz, fy, fx = out.shape
        cz, cy, cx = self._coarse_body.shape
        ox, oy, oz = offset
        sx, sy, sz = source_start
        kc = np.clip(np.round((np.arange(fz) + oz + 0.5) * sp_f[2] / sp_c[2] - 0.5).astype(int), 0, cz - 1)
        jc = np.clip(np.round((np.arange(fy) + oy + 0.5) * sp_f[1] / sp_c[1] - 0.5).astype(int), 0, cy - 1)
        ic = np.clip(np.round((np.arange(fx) + ox + 0.5) * sp_f[0] / sp_c[0] - 0.5).astype(int), 0, cx - 1)
        xs = np.arange(fx) + ox

        def one(z: int) -> None:  # slices are independent: they run in parallel
            sl = out[z]
            lung = sl > 0
            if not lung.any():
                return
            inside = (self._coarse_body[kc[z]] & ~self._coarse_airways[kc[z]])[np.ix_(jc, ic)]
            lung &= inside
            hu_z = hu[z + oz - sz, oy - sy:oy - sy + fy, ox - sx:ox - sx + fx]
            lung &= ~fat_in_lung(lung, hu_z, spacing_yx)
            lung = snap_edges(lung, hu_z, spacing_yx, inside)
            sl[~lung] = 0
            bf = (boundary_c[kc[z], jc] + 0.5) * sp_c[0] / sp_f[0] - 0.5  # (fy,) in full-grid x units
            right = xs[None, :] < bf[:, None]
            sl[lung & right] = 1
            sl[lung & ~right] = 2

        map_parallel(one, fz)


# ----------------------------------------------------------------------------- batch jobs
@dataclass(frozen=True)
class Job:
    """One scan to segment and where its outputs go."""

    input: Path
    mask: Path

    @property
    def report(self) -> Path:
        return self.mask.with_name(io.strip_suffix(self.mask) + ".json")

    @property
    def qc(self) -> Path:
        return self.mask.with_name(io.strip_suffix(self.mask) + ".png")


def _scans_in(folder: Path) -> list[Path]:
    """Image files and DICOM series folders directly inside ``folder``, sorted by name."""
    found = []
    for p in sorted(folder.iterdir()):
        if p.name.startswith("."):
            continue
        if p.is_file() and io.image_suffix(p):
            found.append(p)
        elif p.is_dir() and io.list_dicom_series(p):
            found.append(p)
    return found


def _dicom_name(folder: Path) -> str:
    """A DICOM folder's case name: its own name, or its parent's when it has a generic one
    (``LIDC-IDRI-0001/dicom`` -> ``LIDC-IDRI-0001``)."""
    generic = {"dicom", "dcm", "series", "images", "image", "ct"}
    folder = folder.resolve()
    return folder.parent.name if folder.name.lower() in generic and folder.parent.name else folder.name


def plan_jobs(inputs: list[str | Path], output: str | Path | None, *, shard: tuple[int, int] | None = None) -> list[Job]:
    """Expand inputs (files, DICOM folders, folders of scans) into jobs, apply ``shard``
    (every n-th scan from i, so cluster array jobs split a folder), and name the outputs
    (``<name>_lungs.nii.gz`` in ``output`` or the current folder; ``output`` may be a file
    name when there is exactly one scan)."""
    scans: list[Path] = []
    for item in inputs:
        p = Path(item)
        if not p.exists():
            raise InputError(f"input not found: {p}")
        if p.is_dir() and not io.list_dicom_series(p):
            inside = _scans_in(p)
            if not inside:
                raise InputError(f"{p}: no scans found (expected image files or DICOM folders inside)")
            scans += inside
        else:
            scans.append(p)
    if shard is not None:
        i, n = shard
        scans = scans[i::n]
    single_file = output is not None and io.image_suffix(output) != ""
    if single_file and len(scans) != 1:
        raise InputError(f"-o {output} names one file but there are {len(scans)} scans; give a folder")
    jobs = []
    names: set[str] = set()
    for scan in scans:
        if single_file:
            mask = Path(output)  # type: ignore[arg-type]
        else:
            name = io.strip_suffix(scan) if scan.is_file() else _dicom_name(scan)
            if name in names:
                raise InputError(f"two scans are both named {name!r}; process them into different folders")
            names.add(name)
            mask = Path(output or ".") / f"{name}_lungs.nii.gz"
        jobs.append(Job(scan, mask))
    return jobs


def run_jobs(
    segmenter: LungSegmenter,
    jobs: list[Job],
    *,
    overwrite: bool = False,
    qc: bool = False,
    hu_offset: float = 0.0,
    series_uid: str | None = None,
    progress: bool = True,
) -> list[str]:
    """Segment each job's scan and write mask, report (and QC picture); one summary line per
    scan. Scans with an existing mask are skipped unless ``overwrite``. Outputs are written
    atomically, the report last, so a mask never exists without being complete."""
    lines = []
    if jobs:
        folder = jobs[0].mask.parent
        if not folder.exists():
            folder.mkdir(parents=True)
    for job in jobs:
        io.check_output_path(job.mask, overwrite=True)
    iterator: Any = jobs
    if progress and len(jobs) > 1:
        from tqdm.auto import tqdm

        iterator = tqdm(jobs, desc="scans", unit="scan")
    for job in iterator:
        if job.mask.exists() and not overwrite:
            lines.append(f"skipped {job.input} ({job.mask} exists; --overwrite redoes it)")
            continue
        report = segment_job(segmenter, job, qc=qc, hu_offset=hu_offset, series_uid=series_uid)
        v = report["volumes_ml"]
        warn = f"; warnings: {'; '.join(report['warnings'])}" if report["warnings"] else ""
        lines.append(
            f"wrote {job.mask}: right {v['right'] / 1000:.2f} L, left {v['left'] / 1000:.2f} L, "
            f"{report['timings_s']['total_s']:.1f} s{warn}"
        )
    return lines


def segment_job(
    segmenter: LungSegmenter, job: Job, *, qc: bool = False, hu_offset: float = 0.0, series_uid: str | None = None
) -> dict[str, Any]:
    """Segment one scan and write its mask, JSON report (and QC picture); return the report.
    Everything is written atomically, the report last."""
    import json

    from segpipe.report import qc_picture

    # without a QC picture the segmenter reads the scan itself, so it can free it before the
    # mask is built (lower peak memory on large scans)
    image: sitk.Image | Path = io.read_image(job.input, series_uid=series_uid) if qc else job.input
    result = segmenter.predict_with_report(image, hu_offset=hu_offset, series_uid=None if qc else series_uid)
    result.report["input"] = str(job.input)
    io.write_image(result.label, job.mask, compress=True)
    result.report["output"] = str(job.mask)
    if qc:
        qc_picture(image, result.label, job.qc, title=f"{job.input.name}: segpipe lungs")
        result.report["qc"] = str(job.qc)
    tmp = job.report.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(result.report, indent=1))
    tmp.replace(job.report)
    return result.report
