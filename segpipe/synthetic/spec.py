"""The phantom's variation knobs (:class:`PhantomSpec`) and a sampler of varied specs."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from segpipe.errors import ConfigError

__all__ = ["PhantomSpec", "sample_spec", "coverage_probabilities", "COVERAGES", "COVERAGE_WEIGHTS", "ORIENTATIONS", "DTYPES", "PADDING_VALUES", "PATHOLOGIES"]

#: Body regions a scan can cover (z range), see :class:`PhantomSpec`.
COVERAGES = ("chest", "chest_abdomen", "neck_pelvis", "lung_bases", "no_lungs", "abdomen_bases")
#: Storage orientations drawn by :func:`sample_spec` (any valid 3-letter code is accepted).
ORIENTATIONS = ("LPS", "RAS", "LAS", "LPI")
DTYPES = ("int16", "float32")
#: Values scanners write outside the reconstructed circle.
PADDING_VALUES = (-1024, -2048, -3024)
#: How often :func:`sample_spec` draws each coverage (mostly chest).
#: ``abdomen_bases`` is last with weight 0 so that a default draw is what it was before it existed.
COVERAGE_WEIGHTS = {"chest": 0.55, "chest_abdomen": 0.17, "neck_pelvis": 0.08, "lung_bases": 0.12, "no_lungs": 0.08, "abdomen_bases": 0.0}
#: Pathologies and the probability fields that control them.
PATHOLOGIES = ("nodules", "consolidation", "ground_glass", "emphysema", "effusion", "collapse")

_AXES = {"L": 0, "R": 0, "P": 1, "A": 1, "S": 2, "I": 2}


def _valid_orientation(code: str) -> bool:
    return (isinstance(code, str) and len(code) == 3 and all(c in _AXES for c in code.upper())
            and sorted(_AXES[c] for c in code.upper()) == [0, 1, 2])


@dataclass(frozen=True)
class PhantomSpec:
    """Everything that varies between phantoms. Lengths in mm, intensities in HU.

    The grid: when both ``size_xyz`` and ``spacing_xyz`` are given they are used as they are
    (field of view centred on the body, z range centred on the coverage). When only one is
    given the other follows from the in-plane field of view ``fov_mm`` (None: fitted to the
    body) and the coverage's z length. When neither is given the grid is 512 x 512 in-plane
    with ``slice_mm`` slices.

    Attributes:
        seed: Seed of everything random in the phantom (anatomy, pathology, noise).
        size_xyz: Voxels (x, y, z) or None.
        spacing_xyz: Voxel spacing (x, y, z) in mm or None.
        fov_mm: In-plane field of view (mm, square) used when size or spacing is None.
        slice_mm: Slice spacing used when neither size nor spacing is given.
        coverage: One of :data:`COVERAGES`: ``chest`` (apex to bases), ``chest_abdomen``
            (apex to iliac crest), ``neck_pelvis``, ``lung_bases`` (abdominal scan that cuts
            through the lung bases), ``no_lungs`` (abdomen and pelvis below the lungs) or
            ``abdomen_bases`` (an abdominal scan whose top edge cuts the lowest few cm of lung, down
            to the costophrenic recesses alone).
        orientation: Storage orientation code (``LPS``, ``RAS``, ``LAS``, ``LPI`` = feet first...).
        dtype: ``int16`` or ``float32`` voxels.
        patient_scale: Overall size of the patient (1 = average adult).
        fat: Subcutaneous and visceral fat, 0 (lean) to 1.5 (obese).
        breathing: 0 = expiration, 1 = deep inspiration (diaphragm height, lung density).
        female: Adds breasts.
        arms: ``up`` (beside the head) or ``down`` (beside the chest).
        contrast: Intravenous contrast (bright vessels, heart, enhancing organs).
        noise_hu: Standard deviation of the noise in soft tissue at chest level (5..60 HU typ.).
        kernel: Reconstruction kernel sharpness 0 (smooth) .. 1 (sharp): shapes the noise texture.
        blur_mm: In-plane point-spread function (Gaussian sigma, mm).
        padding_value: Value outside the circular field of view, or None (no circle).
        abdomen_detail: Probability that the phantom gets the detailed abdomen (drawn from
            ``seed``): colon with haustral folds and gas bubbles in stool, small-bowel loops
            with fluid, oral contrast or gas, flat or curved tables with an air gap under the pad.
        nodules, consolidation, ground_glass, emphysema, effusion, collapse: Probability of each
            pathology (drawn per phantom from ``seed``). ``collapse`` is one partially
            collapsed lung with pneumothorax or fluid around it.
        whole_lobe: Share of the lobar consolidations that fill their whole lobe out to the
            pleura, the diaphragm and the fissure (lobar pneumonia, a drowned lobe) rather than
            2-4 of its lobules.
        diaphragm_variety: Probability that the diaphragm's shape is drawn from a wider range:
            domes narrower front to back, centred further back and less tilted, so that the
            anterior costophrenic recesses reach as low as the posterior ones (the lung in
            front of the heart and the liver shows in the top slices of an abdominal scan).
        recess_variety: Probability that each dome's floor slopes down toward a direction
            drawn all round it (the front, a side or the back; 15-45 mm lower at the rim), so
            that the lowest lung, which the top slices of an abdominal scan cut, is a crescent
            there rather than always the posterior recess.
        flexure_variety: Probability that the colon's splenic flexure lies high under the
            left dome (15-50 mm below it, often in front of the stomach) with the transverse
            colon rising to it: gas and stool in the top slices of an abdominal scan, beside
            or below the lung bases.
        table_variety: Probability of a thick foam mattress under the patient: 25-70 mm of
            -900..-600 HU (lung-like at 4 mm), flat (the flanks rise off it over wedges of
            air) or following the back, over the whole length of the scan.
    """

    seed: int = 0
    size_xyz: tuple[int, int, int] | None = None
    spacing_xyz: tuple[float, float, float] | None = None
    fov_mm: float | None = None
    slice_mm: float = 2.5
    coverage: str = "chest"
    orientation: str = "LPS"
    dtype: str = "int16"
    patient_scale: float = 1.0
    fat: float = 0.6
    breathing: float = 0.8
    female: bool = False
    arms: str = "up"
    contrast: bool = False
    noise_hu: float = 20.0
    kernel: float = 0.4
    blur_mm: float = 0.5
    padding_value: int | None = None
    abdomen_detail: float = 0.0
    nodules: float = 0.0
    consolidation: float = 0.0
    ground_glass: float = 0.0
    emphysema: float = 0.0
    effusion: float = 0.0
    collapse: float = 0.0
    whole_lobe: float = 0.0
    diaphragm_variety: float = 0.0
    recess_variety: float = 0.0
    flexure_variety: float = 0.0
    table_variety: float = 0.0

    def __post_init__(self) -> None:
        def bad(name: str, expected: str) -> ConfigError:
            return ConfigError(f"phantom {name}: expected {expected}, got {getattr(self, name)!r}")

        if self.size_xyz is not None:
            s = tuple(self.size_xyz)
            if len(s) != 3 or any(int(v) != v or v < 4 for v in s):
                raise bad("size_xyz", "three integers >= 4")
            object.__setattr__(self, "size_xyz", tuple(int(v) for v in s))
        if self.spacing_xyz is not None:
            s = tuple(self.spacing_xyz)
            if len(s) != 3 or any(not (0.05 <= float(v) <= 50) for v in s):
                raise bad("spacing_xyz", "three spacings in 0.05..50 mm")
            object.__setattr__(self, "spacing_xyz", tuple(float(v) for v in s))
        if self.fov_mm is not None and not 50 <= self.fov_mm <= 1000:
            raise bad("fov_mm", "a field of view in 50..1000 mm")
        if not 0.1 <= self.slice_mm <= 20:
            raise bad("slice_mm", "a slice spacing in 0.1..20 mm")
        if self.coverage not in COVERAGES:
            raise bad("coverage", "one of " + ", ".join(COVERAGES))
        if not _valid_orientation(self.orientation):
            raise bad("orientation", "a 3-letter orientation code like LPS, RAS, LAS or LPI")
        object.__setattr__(self, "orientation", self.orientation.upper())
        if self.dtype not in DTYPES:
            raise bad("dtype", "int16 or float32")
        if not 0.6 <= self.patient_scale <= 1.4:
            raise bad("patient_scale", "a number in 0.6..1.4")
        if not 0 <= self.fat <= 2:
            raise bad("fat", "a number in 0..2")
        if not 0 <= self.breathing <= 1:
            raise bad("breathing", "a number in 0..1")
        if self.arms not in ("up", "down"):
            raise bad("arms", "'up' or 'down'")
        if not 0 <= self.noise_hu <= 200:
            raise bad("noise_hu", "a noise level in 0..200 HU")
        if not 0 <= self.kernel <= 1:
            raise bad("kernel", "a sharpness in 0..1")
        if not 0 <= self.blur_mm <= 5:
            raise bad("blur_mm", "a blur in 0..5 mm")
        if self.padding_value is not None and self.padding_value not in PADDING_VALUES:
            raise bad("padding_value", "None or one of -1024, -2048, -3024")
        for name in (*PATHOLOGIES, "abdomen_detail", "whole_lobe", "diaphragm_variety", "recess_variety", "flexure_variety",
                     "table_variety"):
            if not 0 <= getattr(self, name) <= 1:
                raise bad(name, "a probability in 0..1")

    def replace(self, **changes: Any) -> PhantomSpec:
        """A copy with some fields changed (validated)."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able dict of the fields."""
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in dataclasses.asdict(self).items()}


def coverage_probabilities(weights: Mapping[str, float] | None = None) -> list[float]:
    """Probabilities of :data:`COVERAGES` (in that order): :data:`COVERAGE_WEIGHTS` with the
    given weights replacing the defaults, normalised to sum 1.

    Raises:
        ConfigError: an unknown coverage, a negative or non-finite weight, or all weights 0.
    """
    merged = dict(COVERAGE_WEIGHTS)
    for name, w in (weights or {}).items():
        if name not in COVERAGE_WEIGHTS:
            raise ConfigError(f"coverage weights: expected keys among {', '.join(COVERAGES)}, got {name!r}")
        if isinstance(w, bool) or not isinstance(w, (int, float)) or not np.isfinite(w) or w < 0:
            raise ConfigError(f"coverage weight of {name}: expected a number >= 0, got {w!r}")
        merged[name] = float(w)
    total = sum(merged.values())
    if total <= 0:
        raise ConfigError("coverage weights: expected at least one weight > 0, got all 0")
    return [merged[c] / total for c in COVERAGES]


def sample_spec(
    rng: np.random.Generator | int | None = None,
    *,
    coverage_weights: Mapping[str, float] | None = None,
    **overrides: Any,
) -> PhantomSpec:
    """Draw a varied, realistic spec; ``overrides`` fix chosen fields.

    Draws coverage (mostly chest), in-plane field of view (so 512 x 512 grids get 0.5-1.0 mm
    pixels), slice spacing 0.6-5 mm, storage orientation, dtype, patient size, fat, breathing,
    arms, contrast, noise level and texture, blur, out-of-field padding and pathology
    probabilities (about 60% of phantoms get at least one pathology).

    Args:
        rng: Generator or integer seed (None: fresh entropy). The returned spec's ``seed`` is
            drawn from it unless given in ``overrides``.
        coverage_weights: Relative weights of coverages (keys of :data:`COVERAGES`) that
            replace the defaults of :data:`COVERAGE_WEIGHTS`; a coverage left out keeps its
            default weight, 0 never draws it. E.g. ``{"lung_bases": 0.88}`` draws abdominal
            scans through the lung bases half the time. The same seed draws the same
            everything else whatever the weights.
        **overrides: Any :class:`PhantomSpec` field.

    Returns:
        A validated :class:`PhantomSpec`.

    Raises:
        ConfigError: an override is not a field or has a bad value, or the coverage weights
            name an unknown coverage, are negative or are all 0.
    """
    weights = coverage_probabilities(coverage_weights)
    unknown = set(overrides) - {f.name for f in dataclasses.fields(PhantomSpec)}
    if unknown:
        raise ConfigError(f"phantom spec: expected fields of PhantomSpec, got unknown {sorted(unknown)}")
    if not isinstance(rng, np.random.Generator):
        rng = np.random.default_rng(rng)
    scale = float(np.clip(rng.normal(1.0, 0.06), 0.85, 1.15))
    fat = float(np.clip(rng.gamma(3.0, 0.2), 0.05, 1.6))
    body_w = 330 * scale * (1 + 0.25 * fat)
    p = rng.random
    spec: dict[str, Any] = {
        "seed": int(rng.integers(0, 2**31 - 1)),
        "coverage": str(rng.choice(COVERAGES, p=weights)),
        "fov_mm": float(np.clip(body_w * rng.uniform(1.0, 1.3), 256, 500)),
        "slice_mm": float(rng.choice([0.625, 0.8, 1.0, 1.25, 1.5, 2.0, 2.5, 3.0, 5.0],
                                     p=[0.1, 0.08, 0.16, 0.12, 0.08, 0.1, 0.16, 0.1, 0.1])),
        "orientation": str(rng.choice(ORIENTATIONS, p=[0.4, 0.2, 0.2, 0.2])),
        "dtype": str(rng.choice(DTYPES, p=[0.6, 0.4])),
        "patient_scale": scale,
        "fat": fat,
        "breathing": float(np.clip(rng.beta(4, 1.5), 0, 1)),
        "female": bool(p() < 0.45),
        "arms": "down" if p() < 0.2 else "up",
        "contrast": bool(p() < 0.4),
        "noise_hu": float(np.clip(np.exp(rng.normal(np.log(18), 0.5)), 5, 60)),
        "kernel": float(p()),
        "blur_mm": float(rng.uniform(0.3, 0.9)),
        "padding_value": [None, -1024, -2048, -3024][int(rng.choice(4, p=[0.4, 0.2, 0.3, 0.1]))],
        "nodules": 0.35,
        "consolidation": 0.15,
        "ground_glass": 0.12,
        "emphysema": 0.15,
        "effusion": 0.15,
        "collapse": 0.07,
    }
    spec.update(overrides)
    if "size_xyz" in overrides or "spacing_xyz" in overrides:
        spec.setdefault("size_xyz", None)
    return PhantomSpec(**spec)
