"""The spine's x on the coarse grid (offline probe): per axial slice, the largest bone region (above
``bone_hu``) of 5-40 cm^2, at most 8 cm wide and 10 cm tall, in the posterior half of the body;
the median of its centroid's x over the slices, where a quarter of them have one."""

import numpy as np
from scipy import ndimage


def spine_x(hu: np.ndarray, spacing: tuple[float, ...], body: np.ndarray, bone_hu: float = 200.0,
            min_cm2: float = 5.0) -> float | None:
    pixel_cm2 = spacing[0] * spacing[1] / 100.0
    xs = []
    for z in range(hu.shape[0]):
        labels, n = ndimage.label((hu[z] > bone_hu) & body[z], structure=np.ones((3, 3)))
        rows = np.nonzero(body[z].any(axis=1))[0]
        if n == 0 or rows.size == 0:
            continue
        y_mid = (rows[0] + rows[-1]) / 2
        best = None
        for k, box in enumerate(ndimage.find_objects(labels), 1):
            piece = labels[box] == k
            area = piece.sum() * pixel_cm2
            wide, tall = (box[1].stop - box[1].start) * spacing[0] / 10, (box[0].stop - box[0].start) * spacing[1] / 10
            if not (min_cm2 <= area <= 40 and wide <= 8 and tall <= 10):
                continue
            cy, cx = ndimage.center_of_mass(piece)
            if cy + box[0].start >= y_mid and (best is None or area > best[0]):
                best = (area, cx + box[1].start)
        if best:
            xs.append(best[1])
    return float(np.median(xs)) if len(xs) >= max(2, hu.shape[0] // 4) else None
