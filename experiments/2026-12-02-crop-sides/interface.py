"""Where one connected lung of a crop's mask holds both labels: the two parts, the voxels where
they meet along x (the side boundary cuts rows), those voxels' HU, and the interface's share of
the smaller part.

    python experiments/2026-12-02-crop-sides/interface.py runs/crop_sides/*.npz
"""

from __future__ import annotations

import sys

import numpy as np
from scipy import ndimage


def main() -> None:
    for path in sys.argv[1:]:
        d = np.load(path)
        p, hu = d["p"], d["hu"]
        ml = float(np.prod(d["sp"])) / 1000
        labels, n = ndimage.label(p > 0)  # face connectivity
        for k in range(1, n + 1):
            piece = labels == k
            right, left = piece & (p == 1), piece & (p == 2)
            if not right.any() or not left.any():
                continue
            meet = (right[:, :, :-1] & left[:, :, 1:]) | (left[:, :, :-1] & right[:, :, 1:])
            iface = np.zeros_like(piece)
            iface[:, :, :-1] |= meet
            iface[:, :, 1:] |= meet
            hu_q = np.percentile(hu[iface], [25, 50, 75]).round().tolist() if iface.any() else None
            print(f"{path}: right {right.sum() * ml:.1f} mL, left {left.sum() * ml:.1f} mL, interface {iface.sum()} voxels "
                  f"(HU quartiles {hu_q}), {100 * iface.sum() / min(right.sum(), left.sum()):.2f} % of the smaller part")


if __name__ == "__main__":
    main()
