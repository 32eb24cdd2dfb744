"""What every clean-up step shares: the two grids it runs on, what it reads besides the mask
(a context), and what it reports.

A rule is one function ``rule(mask, context, params) -> (mask, RuleReport)``:

- on a fine region's grid (:class:`FineContext`), before the fine stage's probabilities go
  back to the scan, ``mask`` is a boolean ``(z, y, x)`` lung mask and a new one is returned;
- on the scan's grid (:class:`ScanContext`), ``mask`` is the uint8 ``(z, y, x)`` label array
  over the lungs' region (lung where non-zero), changed in place and returned (the scan may be
  large: no copy of it is made).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

__all__ = ["FineContext", "ScanContext", "RuleReport"]


@dataclass(frozen=True)
class FineContext:
    """What a rule on one fine region's lattice reads besides the mask.

    Args:
        hu: ``(z, y, x)`` float32 HU of the scan on the lattice.
        spacing_xyz: the lattice's spacing (mm).
        inside: inside the body and outside the trachea and main bronchi (the coarse stage's
            masks, nearest voxel); a lung lies nowhere else.
        in_scan: voxels of the lattice inside the scan (a lattice that reaches past the scan's
            end holds made-up air there; the rules' reports count only what they change here:
            nothing beyond it reaches the mask).
        network_lung: the fine network's own lung (before any rule).
        coarse_prior: the coarse stage's lung probability on the lattice (computed on demand).
        body_centre_yx: per slice, the body's centre as a ``(y, x)`` index of the lattice,
            ``(Z, 2)`` (computed on demand).
        network_background: the fine network's P(background) (float32, read only; None where
            only its lung is known).
    """

    hu: np.ndarray
    spacing_xyz: tuple[float, float, float]
    inside: np.ndarray
    in_scan: np.ndarray
    network_lung: np.ndarray
    coarse_prior: Callable[[], np.ndarray]
    body_centre_yx: Callable[[], np.ndarray]
    network_background: np.ndarray | None = None

    grid = "fine"

    @property
    def voxel_ml(self) -> float:
        return float(np.prod(self.spacing_xyz)) / 1000.0


@dataclass(frozen=True)
class ScanContext:
    """What a rule on the scan's grid reads besides the mask: the canonical scan's voxels over
    the lungs' region, and the coarse stage's anatomy looked up per slice.

    Args:
        scan_hu: returns the ``(z, y, x)`` HU of the scan over the mask's region (a view, not a
            copy; read it through :attr:`hu`).
        release_scan: called once no later step reads the scan (its memory can go).
        spacing_xyz: the scan's spacing (mm).
        body: slice ``z`` of the region -> ``(y, x)`` mask of the body's inside (coarse stage).
        airways: slice ``z`` -> ``(y, x)`` mask of the trachea and main bronchi (empty when the
            ``airways`` rule is off).
        side_boundary: slice ``z`` -> per row ``y``, the x index (of the scan's grid) that
            separates the right lung (below it) from the left one: the middle between the
            coarse stage's sided lungs.
        geometry: the canonical scan's grid (volumes and physical sides).
        offset_xyz: index of the region's first voxel on that grid.
        lung_support: a block of the region (``(z, y, x)`` slices) -> uint8 where the coarse
            stage's sided lungs, each grown by one coarse voxel, reach there: bit 1 the right
            lung, bit 2 the left one (``None``: unknown, and a lung keeps its largest piece).
        found_sides: the sides (1 right, 2 left) of which the coarse stage found a lung
            (``None``: unknown). The coarse stage decides which lungs a scan holds; the fine
            stage only draws them, so lung on a side it did not find is not kept.
        unsure_sides: the found sides of which the coarse stage was unsure: a lung the scan's
            edge cuts, with little sure lung (rule ``gas`` checks them on the scan's voxels).
    """

    scan_hu: Callable[[], np.ndarray]
    release_scan: Callable[[], None]
    spacing_xyz: tuple[float, float, float]
    body: Callable[[int], np.ndarray]
    airways: Callable[[int], np.ndarray]
    side_boundary: Callable[[int], np.ndarray]
    geometry: object
    offset_xyz: tuple[int, int, int]
    lung_support: Callable[[tuple[slice, slice, slice]], np.ndarray] | None = None
    found_sides: frozenset[int] | None = None
    unsure_sides: frozenset[int] = frozenset()

    grid = "scan"

    @property
    def hu(self) -> np.ndarray:
        """The scan's HU over the mask's region (``(z, y, x)`` view)."""
        return self.scan_hu()

    @property
    def voxel_ml(self) -> float:
        return float(np.prod(self.spacing_xyz)) / 1000.0

    @property
    def spacing_yx(self) -> tuple[float, float]:
        return float(self.spacing_xyz[1]), float(self.spacing_xyz[0])

    def inside(self, z: int) -> np.ndarray:
        """Slice ``z``: inside the body and outside the airways."""
        return self.body(z) & ~self.airways(z)


@dataclass(frozen=True)
class RuleReport:
    """What one step did: its name, the grid it ran on, whether it was on, the lung volume it
    added and removed (mL), warnings for the user, and, for a step that looks even when it is
    off (``dense_lung``), the volume it would have added (mL)."""

    name: str
    grid: str
    enabled: bool = True
    added_ml: float = 0.0
    removed_ml: float = 0.0
    warnings: tuple[str, ...] = ()
    would_add_ml: float = 0.0

    @classmethod
    def of(cls, name: str, ctx: FineContext | ScanContext, added: int = 0, removed: int = 0,
           warnings: tuple[str, ...] | list[str] = ()) -> RuleReport:
        """From voxel counts on the context's grid."""
        return cls(name, ctx.grid, True, float(added) * ctx.voxel_ml, float(removed) * ctx.voxel_ml, tuple(warnings))

    def plus(self, other: RuleReport) -> RuleReport:
        """The sum of two runs of the same step (two fine regions)."""
        return RuleReport(self.name, self.grid, self.enabled or other.enabled, self.added_ml + other.added_ml,
                          self.removed_ml + other.removed_ml, self.warnings + other.warnings,
                          self.would_add_ml + other.would_add_ml)

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {"enabled": self.enabled, "grid": self.grid,
                                  "added_ml": round(self.added_ml, 1), "removed_ml": round(self.removed_ml, 1)}
        if self.would_add_ml:
            out["would_add_ml"] = round(self.would_add_ml, 1)
        return out
