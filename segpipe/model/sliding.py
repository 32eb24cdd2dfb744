"""Sliding-window class probabilities of a stage's network, shared by inference and the
trainer's validation: fixed intensity normalisation (:func:`segpipe.model.intensity.normalise_hu`),
then MONAI's sliding-window inferer with Gaussian blending.

Example:
    >>> probs = sliding_window_probs(net, array_zyx, stage, (-1024.0, 400.0), device)  # doctest: +SKIP
    >>> lung = any_lung(probs)                                                          # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from segpipe.config import StageConfig
from segpipe.model.intensity import normalise_hu

__all__ = ["sliding_window_probs", "zoom_averaged_probs", "any_lung", "channel_probability_"]


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
    on ``accumulate_on`` (default ``device``). Shared by inference and validation. A volume
    smaller than a window is padded by repeating its edge voxels: a scan smaller than a coarse
    window (a cardiac-centred crop, a thin slab, the lung bases at the top of an abdominal
    scan) is seen as going on, not framed by a constant (MONAI's default 0 is about -312 HU
    after normalisation, a wall of soft tissue around a crop; air would end the lungs at the
    scan's edge).

    With ``channel``, only that class's probability ``(Z, Y, X)``, computed in place in the
    logits buffer (two fewer full-size channels than a softmax of all classes)."""
    import torch
    from monai.inferers import sliding_window_inference

    from segpipe.device import autocast, use_amp

    accumulate_on = device if accumulate_on is None else accumulate_on
    x = torch.from_numpy(normalise_hu(array_zyx, window_hu))[None, None].to(accumulate_on)
    with torch.inference_mode(), autocast(device, use_amp(device, stage.amp)):
        logits = sliding_window_inference(
            x, roi_size=tuple(reversed(stage.patch_xyz)), sw_batch_size=sw_batch or stage.batch_size, predictor=net,
            overlap=stage.overlap if overlap is None else overlap, mode="gaussian", sw_device=device, device=accumulate_on,
            padding_mode="replicate",
        )
        del x  # the input is not needed any more: its memory goes before the next step's
        if channel is None:
            return torch.softmax(logits.float(), dim=1)[0].cpu()
        return channel_probability_(logits.float()[0], channel).cpu()


def zoom_averaged_probs(run: Callable[[np.ndarray], Any], array_zyx: np.ndarray, zooms: tuple[float, ...], *,
                        plain: Any | None = None) -> Any:
    """``run`` (an array to its ``(C, Z, Y, X)`` probabilities, a CPU tensor, such as
    :func:`sliding_window_probs` with its network and stage) averaged over in-plane zooms of the
    array (test-time augmentation by scale): for each factor ``f`` of ``zooms`` the array is
    resampled (linear, the edge repeated) to ``f`` times its y and x size, run, and its
    probabilities resampled back to the array's grid. A factor of 1 is the plain run, or
    ``plain`` where given (its result, already run; left unchanged). Returns a new tensor."""
    import torch
    from scipy import ndimage

    total = None
    for f in zooms:
        if f == 1.0:
            probs = run(array_zyx) if plain is None else plain.clone()
        else:
            zoomed = ndimage.zoom(np.asarray(array_zyx, np.float32), (1.0, f, f), order=1, mode="nearest")
            small = run(zoomed).numpy()
            back = (1.0, array_zyx.shape[1] / zoomed.shape[1], array_zyx.shape[2] / zoomed.shape[2])
            probs = _fit(torch.from_numpy(np.stack([ndimage.zoom(c, back, order=1, mode="nearest") for c in small])), array_zyx.shape)
        total = probs if total is None else total.add_(probs)
    if total is None:
        raise ValueError("zoom_averaged_probs: expected one or more zooms")
    return total.div_(len(zooms))


def _fit(probs: Any, shape: tuple[int, ...]) -> Any:
    """``(C, Z, Y, X)`` cut or edge-padded to ``shape`` (Z, Y, X): a zoom there and back can be a voxel off."""
    import torch

    probs = probs[:, : shape[0], : shape[1], : shape[2]]
    if tuple(probs.shape[1:]) == tuple(shape):
        return probs
    pad = [(0, 0)] + [(0, a - b) for a, b in zip(shape, probs.shape[1:])]
    return torch.from_numpy(np.pad(probs.numpy(), pad, mode="edge"))


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
