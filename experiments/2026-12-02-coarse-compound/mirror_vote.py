"""``benchmarks/coarse_sides.py`` with the coarse side vote averaged over the input and its
left-right mirror (the mirror's right and left classes swapped): a vote bound to a find's place
in the view cancels, one that reads the anatomy stays. Experiment only; the package is untouched.

    python experiments/2026-12-02-coarse-compound/mirror_vote.py --random-seeds 57 58 [--json F]
"""

from __future__ import annotations

import sys
from functools import partial
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import coarse_sides  # noqa: E402

from segpipe.infer import coarse  # noqa: E402


def _network(array, coarse_img, weights, s):  # type: ignore[no-untyped-def]
    """``segpipe.infer.coarse._network`` with the mirrored vote averaged in."""
    from segpipe.model import any_lung, sliding_window_probs, zoom_averaged_probs

    net = coarse.load_network("coarse", s.coarse, weights, s.device)
    run = partial(sliding_window_probs, net, stage=s.coarse, window_hu=s.window_hu, device=s.device, accumulate_on=s.device,
                  sw_batch=s.window_batch(s.coarse), overlap=s.coarse.overlap)
    probs = run(array)
    lung = any_lung(probs)
    confident = (probs[0] <= 1.0 - s.confident).numpy()
    sx, sy = coarse_img.GetSpacing()[:2]
    zooms = s.coarse_zooms((array.shape[2] * sx, array.shape[1] * sy))
    votes = zoom_averaged_probs(run, array, zooms, plain=probs) if len(zooms) > 1 else probs.clone()
    mirror = np.ascontiguousarray(array[:, :, ::-1])
    mirrored = zoom_averaged_probs(run, mirror, zooms) if len(zooms) > 1 else run(mirror)
    mirrored = mirrored.flip(-1)[[0, 2, 1]]  # back to the scan's x, right and left swapped
    left_vote = ((votes[2] + mirrored[2]) > (votes[1] + mirrored[1])).numpy()
    return lung, confident, left_vote, zooms


if __name__ == "__main__":
    coarse._network = _network
    raise SystemExit(coarse_sides.main())
