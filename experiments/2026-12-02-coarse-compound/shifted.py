"""`segpipe train` with every in-plane box and side cut moved to a random place in its patch.

A cut keeps its part where it lay in the patch, so a kept left lung stays at high x and the
network can name the side from the place. Here ``segpipe.train.patches._keep_box`` (with
``fill="edge"``) moves the kept part along y and x to a random offset (the edge repeated around
it, as before). Experiment only; the package is untouched.

    python experiments/2026-12-02-coarse-compound/shifted.py --config C --data D --out O
"""

from __future__ import annotations

import sys

import numpy as np

from segpipe import cli
from segpipe.train import patches

RNG = np.random.default_rng(55)


def _keep_box_shifted(img, lbl, box, fill, edge_label):  # type: ignore[no-untyped-def]
    if fill != "edge":
        return _keep_box(img, lbl, box, fill, edge_label)
    pads = []
    for axis, (s, n) in enumerate(zip(box, img.shape)):
        start, stop, _ = s.indices(n)
        spare = n - (stop - start)
        before = int(RNG.integers(0, spare + 1)) if axis > 0 and spare > 0 else start
        pads.append((before, spare - before))
    out_img = np.pad(img[box], pads, mode="edge")
    if edge_label:
        return out_img, np.pad(lbl[box], pads, mode="edge")
    out_lbl = np.pad(lbl[box], pads, mode="constant")
    return out_img, out_lbl


_keep_box = patches._keep_box

if __name__ == "__main__":
    patches._keep_box = _keep_box_shifted
    raise SystemExit(cli.main(["train", *sys.argv[1:]]))
