"""The clean-up steps in their one order, their parameters as one frozen :class:`RuleSet`, and
the runner that applies them (:func:`run_rules`).

Order (docs/pipeline.md has the table):

========  ==============  =====  ==========================================================
 order     step           grid   what
========  ==============  =====  ==========================================================
 1         dense_lung     fine   a consolidated lobe the coarse stage is sure of is added
 2         dense_to_wall  fine   that consolidation is followed out to the ribs
 3         pleural_air    fine   vessel-free air at the lung's edge (pneumothorax) goes
 4         body           scan   always on: lung only inside the body
 5         airways        scan   the trachea and main bronchi go
 6         fat            scan   fat goes
 7         edge_snap      scan   aerated lung's edge moves onto the scan's air/tissue edge
 8         sides          scan   always on: right / left from physical geometry
 9         components     scan   always on: the lung pieces the coarse stage backs, holes
10         gas            scan   a lung the coarse stage was unsure of goes where it is gas
========  ==============  =====  ==========================================================

The fine-grid steps run on each fine region's lattice before its probabilities go back to the
scan (they decide whether a region must grow, and they act on the probabilities that are
interpolated back); the scan-grid steps run once, on the scan's own voxels, after all regions.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from segpipe.config import from_dict, to_dict
from segpipe.errors import ConfigError
from segpipe.refine import airways, body, components, dense_lung, dense_to_wall, edge_snap, fat, gas, pleural_air, sides
from segpipe.refine.base import FineContext, RuleReport, ScanContext

__all__ = ["Step", "STEPS", "RuleSet", "run_rules", "describe"]


@dataclass(frozen=True)
class Step:
    """One clean-up step: its name, grid (``"fine"`` or ``"scan"``), entry point and whether
    it can be switched off; ``check`` (optional) runs instead of it when it is off and reports
    what it would have done, leaving the mask alone. ``reads_when`` (optional, scan grid): whether
    it reads the scan's voxels for this context (the scan is released after the last step that
    does, and one that reads it for few scans should not hold it for all)."""

    name: str
    grid: str
    run: Callable[..., tuple[np.ndarray, RuleReport]]
    switchable: bool
    summary: str
    reads_scan: bool = True
    check: Callable[..., RuleReport] | None = None
    reads_when: Callable[[ScanContext], bool] | None = None


STEPS: tuple[Step, ...] = (
    Step("dense_lung", "fine", dense_lung.rule, True, "a consolidated lobe the coarse stage is sure of is added",
         check=dense_lung.check),
    Step("dense_to_wall", "fine", dense_to_wall.rule, True, "that consolidation is followed out to the ribs"),
    Step("pleural_air", "fine", pleural_air.rule, True, "vessel-free air at the lung's edge (pneumothorax) goes"),
    Step("body", "scan", body.rule, False, "lung only inside the body", False),
    Step("airways", "scan", airways.rule, True, "the trachea and main bronchi go", False),
    Step("fat", "scan", fat.rule, True, "fat goes"),
    Step("edge_snap", "scan", edge_snap.rule, True, "aerated lung's edge moves onto the scan's air/tissue boundary"),
    Step("sides", "scan", sides.rule, False, "right / left from the boundary between the coarse stage's lungs", False),
    Step("components", "scan", components.rule, False, "the lung pieces the coarse stage supports, holes filled, tiny lungs dropped, label check",
         False),
    Step("gas", "scan", gas.rule, True, "a lung the coarse stage was unsure of goes where it is pure air (bowel gas)",
         reads_when=gas.reads_scan),
)
_BY_NAME = {s.name: s for s in STEPS}


@dataclass(frozen=True)
class RuleSet:
    """The parameters of every clean-up step (one frozen dataclass each), stored in the model
    file's header under ``refine``. A model file without them gets today's defaults.

    Example:
        >>> rules = RuleSet().updated({"dense_lung": False, "pleural_air": {"min_ml": 20}})
        >>> rules.enabled("dense_lung"), rules.pleural_air.min_ml
        (False, 20.0)
    """

    dense_lung: dense_lung.DenseLungParams = field(default_factory=dense_lung.DenseLungParams)
    dense_to_wall: dense_to_wall.DenseToWallParams = field(default_factory=dense_to_wall.DenseToWallParams)
    pleural_air: pleural_air.PleuralAirParams = field(default_factory=pleural_air.PleuralAirParams)
    body: body.BodyParams = field(default_factory=body.BodyParams)
    airways: airways.AirwaysParams = field(default_factory=airways.AirwaysParams)
    fat: fat.FatParams = field(default_factory=fat.FatParams)
    edge_snap: edge_snap.EdgeSnapParams = field(default_factory=edge_snap.EdgeSnapParams)
    sides: sides.SidesParams = field(default_factory=sides.SidesParams)
    components: components.ComponentsParams = field(default_factory=components.ComponentsParams)
    gas: gas.GasParams = field(default_factory=gas.GasParams)

    def enabled(self, name: str) -> bool:
        """Whether step ``name`` runs (always-on steps always do)."""
        return bool(getattr(self._params(name), "enabled", True))

    def _params(self, name: str) -> Any:
        if name not in _BY_NAME:
            raise ConfigError(f"unknown rule {name!r} (rules: {', '.join(_BY_NAME)})")
        return getattr(self, name)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None, where: str = "rules") -> RuleSet:
        """From a mapping ``{name: {param: value}}`` (a header's ``refine`` section or a
        config's ``rules``); missing steps and parameters take today's defaults, unknown ones
        are errors."""
        return cls().updated(data or {}, where)

    def updated(self, changes: Mapping[str, Any], where: str = "rules") -> RuleSet:
        """A copy with ``changes`` applied: per step name, ``True``/``False`` (switch it on or
        off) or a mapping of parameters (``enabled`` among them)."""
        if not isinstance(changes, Mapping):
            raise ConfigError(f"{where}: expected a mapping of rule names, got {type(changes).__name__}")
        new = {}
        for name, change in changes.items():
            if name not in _BY_NAME:
                raise ConfigError(f"{where}: unknown rule {name!r} (rules: {', '.join(_BY_NAME)})")
            current = getattr(self, name)
            if isinstance(change, bool):
                change = {"enabled": change}
            if not isinstance(change, Mapping):
                raise ConfigError(f"{where}.{name}: expected true, false or a mapping of parameters, got {change!r}")
            if "enabled" in change and not _BY_NAME[name].switchable:
                if change["enabled"] is not True:
                    raise ConfigError(f"{where}.{name}: this step is always on (it cannot be switched off)")
                change = {k: v for k, v in change.items() if k != "enabled"}
            new[name] = from_dict(type(current), {**to_dict(current), **dict(change)}, f"{where}.{name}")
        return dataclasses.replace(self, **new)

    def switched(self, on: tuple[str, ...] | list[str] = (), off: tuple[str, ...] | list[str] = ()) -> RuleSet:
        """A copy with the steps in ``on`` switched on and those in ``off`` switched off."""
        both = set(on) & set(off)
        if both:
            raise ConfigError(f"rule {sorted(both)[0]!r} is both switched on and off")
        return self.updated({**{n: True for n in on}, **{n: False for n in off}})

    def to_dict(self) -> dict[str, dict[str, Any]]:
        """JSON-able ``{name: {param: value}}`` in step order."""
        return {s.name: to_dict(getattr(self, s.name)) for s in STEPS}


def run_rules(grid: str, mask: np.ndarray, ctx: FineContext | ScanContext, rules: RuleSet) -> tuple[np.ndarray, list[RuleReport]]:
    """Run the steps of ``grid`` (``"fine"`` or ``"scan"``) in order on ``mask``; returns the
    new mask and one report per step (switched-off steps report ``enabled: false``). On the
    scan grid, the scan's voxels are released as soon as no later step reads them."""
    steps = [s for s in STEPS if s.grid == grid]

    def reads(s: Step) -> bool:
        return s.reads_scan and (rules.enabled(s.name) or s.check is not None) and (
            s.reads_when is None or not isinstance(ctx, ScanContext) or s.reads_when(ctx))

    last_reader = max((i for i, s in enumerate(steps) if reads(s)), default=-1)
    reports = []
    if isinstance(ctx, ScanContext) and last_reader < 0:
        ctx.release_scan()
    for i, step in enumerate(steps):
        params = getattr(rules, step.name)
        if rules.enabled(step.name):
            mask, report = step.run(mask, ctx, params)
        else:  # a switched-off step with a check still looks, leaving the mask alone
            report = step.check(mask, ctx, params) if step.check else RuleReport(step.name, grid, enabled=False)
        reports.append(report)
        if isinstance(ctx, ScanContext) and i == last_reader:
            ctx.release_scan()
    return mask, reports


def describe(rules: RuleSet) -> list[str]:
    """One line per step, in order: name, grid, on/off/always, parameters."""
    lines = []
    for i, step in enumerate(STEPS, 1):
        params = to_dict(getattr(rules, step.name))
        state = "always" if not step.switchable else ("on" if params.pop("enabled") else "off")
        values = ", ".join(f"{k}={v}" for k, v in params.items())
        lines.append(f"{i}. {step.name:<13} {step.grid:<4} {state:<6} {step.summary}" + (f" [{values}]" if values else ""))
    return lines
