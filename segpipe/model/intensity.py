"""Fixed CT intensity normalisation, shared by training and inference.

The window is a model setting (``intensity.window_hu`` in the model header), never re-estimated
per scan: clip the HU values to the window and scale linearly to [-1, 1].

Example:
    >>> import numpy as np
    >>> normalise_hu(np.array([-2000.0, -312.0, 400.0]), (-1024.0, 400.0)).tolist()
    [-1.0, 0.0, 1.0]
"""

from __future__ import annotations

import numpy as np

__all__ = ["normalise_hu"]


def normalise_hu(array: np.ndarray, window_hu: tuple[float, float]) -> np.ndarray:
    """Clip HU to ``window_hu`` and scale linearly to [-1, 1] (float32). Fixed, never per scan."""
    lo, hi = window_hu
    out = np.clip(np.asarray(array, dtype=np.float32), lo, hi)
    out -= (lo + hi) / 2.0
    out /= (hi - lo) / 2.0
    return out
