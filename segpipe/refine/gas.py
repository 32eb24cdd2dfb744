"""Rule ``gas``: a lung the coarse stage was unsure of must not be gas.

The top of an abdominal scan or of a slab can cut a lung base to a crescent of which the coarse
stage is sure of only a few mL; gas in the bowel or stomach at the same place can give as much.
The coarse stage keeps such a cut find (:data:`segpipe.infer.coarse.CUT_LUNG_SHARE`) but marks
its side unsure where it holds less than :data:`segpipe.infer.coarse.SURE_CUT_SHARE` of sure
lung or where that share finds none of it; here, on the scan's own voxels (which show the inside
of a gas pocket, where the coarse grid averages it with the bowel's wall), that side's lung goes
where ``max_air_share`` or more of it is pure air. Aerated lung is tissue and blood as well as air (-950..-700 HU): in the bases of
real scans and in phantoms with emphysema under a tenth of it lies below -980 HU, in bowel gas a
quarter or more. Sides the coarse stage was sure of are never touched. Runs last, on the lungs
as they will be written (``components`` has dropped the pieces the coarse stage does not back);
the scan's voxels are held for it only where a side is unsure.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from segpipe.refine._util import map_parallel
from segpipe.refine.base import RuleReport, ScanContext

__all__ = ["GasParams", "air_shares", "reads_scan", "rule"]

@dataclass(frozen=True)
class GasParams:
    """Args:
        enabled: run the rule.
        air_hu: pure air: the scan's own voxels below this.
        max_air_share: an unsure side whose lung is this share or more pure air is gas.
    """

    enabled: bool = True
    air_hu: float = -980.0
    max_air_share: float = 0.10


def reads_scan(ctx: ScanContext) -> bool:
    """Whether the rule reads the scan's voxels for ``ctx``: only where a side is unsure."""
    return bool(ctx.unsure_sides)


def air_shares(mask: np.ndarray, ctx: ScanContext, sides: frozenset[int] | set[int],
               air_hu: float) -> dict[int, tuple[int, int]]:
    """Per side in ``sides`` (1 right, 2 left: the labels of ``mask``): its lung voxels and
    how many of them are below ``air_hu``."""
    hu = ctx.hu

    def one(z: int) -> dict[int, tuple[int, int]]:
        out = {}
        for v in sides:
            here = mask[z] == v
            out[v] = (int(np.count_nonzero(here)), int(np.count_nonzero(here & (hu[z] < air_hu))))
        return out

    total = {v: (0, 0) for v in sides}
    for part in map_parallel(one, mask.shape[0]):
        for v, (n, air) in part.items():
            total[v] = (total[v][0] + n, total[v][1] + air)
    return total


def rule(mask: np.ndarray, ctx: ScanContext, p: GasParams) -> tuple[np.ndarray, RuleReport]:
    """Clear (in place) the lung of each side the coarse stage was unsure of
    (``ctx.unsure_sides``) where ``p.max_air_share`` or more of it lies below ``p.air_hu``."""
    if not ctx.unsure_sides:
        return mask, RuleReport.of("gas", ctx)
    removed, warnings = 0, []
    for v, (n, air) in sorted(air_shares(mask, ctx, ctx.unsure_sides, p.air_hu).items()):
        if n == 0 or air < p.max_air_share * n:
            continue
        mask[mask == v] = 0
        removed += n
        side = ("right", "left")[v - 1]
        warnings.append(f"dropped a {n * ctx.voxel_ml:.1f} mL {side} lung that the coarse stage was unsure of: "
                        f"{100 * air / n:.0f} % of it is pure air (gas in the bowel or stomach, not lung)")
    return mask, RuleReport.of("gas", ctx, removed=removed, warnings=warnings)
