"""The real scans under image artefacts that real CT shows and the phantoms do not draw: metal
streaks (dark and bright lines fanning out of a metal object: a spinal rod, a pacemaker, a
shoulder prosthesis), low-dose noise, and ring artefacts; each against the scan's own mask
(COPDGene's label; LIDC's mask from the bundled model on the scan as it is).

    python experiments/2026-12-07-artefacts/artefacts.py [MODEL[:RULE.PARAM=VALUE,...]] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import SimpleITK as sitk
from scipy import ndimage as ndi

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "2026-12-07-dense-lungs"))

from denser import _segmenter, real_scans, score  # noqa: E402


def streaks(a: np.ndarray, spacing: tuple[float, ...], centre_yx_mm: tuple[float, float], strength: float,
            n_lines: int, rng: np.random.Generator, metal_mm: float = 6.0) -> np.ndarray:
    """Metal streaks in every slice ``a[z]``: a disc of metal (3000 HU) at ``centre_yx_mm`` and
    ``n_lines`` lines through it, alternately dark and bright (``strength`` HU at the metal,
    falling as 1 / distance), each a few voxels wide, the in-plane pattern turning a little slice
    by slice."""
    nz, ny, nx = a.shape
    sx, sy = spacing[:2]
    yy, xx = np.mgrid[:ny, :nx]
    dy, dx = yy * sy - centre_yx_mm[0], xx * sx - centre_yx_mm[1]
    r = np.hypot(dx, dy)
    theta = np.arctan2(dy, dx)
    out = a.astype(np.float32).copy()
    angles = rng.uniform(0, np.pi, n_lines)
    signs = np.where(np.arange(n_lines) % 2 == 0, -1.0, 1.0)
    for z in range(nz):
        field = np.zeros((ny, nx), np.float32)
        turn = 0.02 * z
        for ang, sign in zip(angles + turn, signs):
            dist = np.abs(r * np.sin(theta - ang))  # distance (mm) to the line through the metal
            field += sign * strength * np.exp(-0.5 * (dist / 1.5) ** 2) * np.minimum(1.0, 20.0 / np.maximum(r, 1e-3))
        out[z] += field
        out[z][r < metal_mm] = 3000.0
    return np.clip(out, -1024, 3071)


def noise(a: np.ndarray, sigma: float, rng: np.random.Generator, corr_vox: float = 1.0) -> np.ndarray:
    """Correlated Gaussian noise of standard deviation ``sigma`` HU (in-plane blur ``corr_vox``)."""
    n = ndi.gaussian_filter(rng.standard_normal(a.shape).astype(np.float32), (0, corr_vox, corr_vox))
    n *= sigma / max(float(n.std()), 1e-6)
    body = a > -2000  # the scanner's padding stays as it is
    return np.where(body, a + n, a)


def rings(a: np.ndarray, spacing: tuple[float, ...], amplitude: float, rng: np.random.Generator) -> np.ndarray:
    """Ring artefacts: concentric rings about the image centre (a detector element out of
    calibration), ``amplitude`` HU, a few at random radii."""
    nz, ny, nx = a.shape
    sx, sy = spacing[:2]
    yy, xx = np.mgrid[:ny, :nx]
    r = np.hypot((yy - ny / 2) * sy, (xx - nx / 2) * sx)
    field = np.zeros((ny, nx), np.float32)
    for rad in rng.uniform(10, min(nx * sx, ny * sy) / 2, 8):
        field += rng.choice([-1, 1]) * amplitude * np.exp(-0.5 * ((r - rad) / 0.8) ** 2)
    return np.where(a > -2000, a + field[None], a)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model", nargs="?", default="default")
    ap.add_argument("--json")
    args = ap.parse_args()
    seg = _segmenter(args.model)
    rows = []
    for name, image, ref in real_scans():
        a = np.asarray(sitk.GetArrayFromImage(image), np.float32)
        sp = image.GetSpacing()
        ny, nx = a.shape[1:]
        # the spine: the body's back in the middle column; a spinal rod in front of it
        body_rows = np.nonzero(a[a.shape[0] // 2, :, nx // 2] > -300)[0]
        spine_y = (body_rows.max() - 40.0 / sp[1]) * sp[1]
        centre = nx / 2 * sp[0]
        variants = {
            "as it is": a,
            "streaks 400 HU, spinal rod": streaks(a, sp, (spine_y, centre), 400.0, 6, np.random.default_rng(1)),
            "streaks 800 HU, spinal rod": streaks(a, sp, (spine_y, centre), 800.0, 10, np.random.default_rng(2)),
            "streaks 800 HU, right shoulder": streaks(a, sp, (ny * sp[1] * 0.45, nx * sp[0] * 0.12), 800.0, 10, np.random.default_rng(3)),
            "noise 100 HU": noise(a, 100.0, np.random.default_rng(4)),
            "noise 250 HU": noise(a, 250.0, np.random.default_rng(5)),
            "rings 100 HU": rings(a, sp, 100.0, np.random.default_rng(6)),
        }
        for variant, arr in variants.items():
            rows.append(score(seg, image, arr, ref, scan=name, variant=variant))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
