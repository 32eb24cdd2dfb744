"""Typed configuration: frozen dataclasses loaded from YAML.

Rules (see DESIGN.md): every value has a default, unknown keys are errors, values are validated
in ``__post_init__``, and single values can be overridden from the CLI with ``key.sub=value``.
The typed loading itself (:func:`from_dict`, :func:`load_yaml`, :func:`apply_overrides`, ...)
lives in :mod:`segpipe._config_load`; it is re-exported here.

Example:
    >>> cfg = from_dict(NetworkConfig, {"base_width": 8})
    >>> cfg.base_width
    8
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from segpipe._config_load import apply_overrides, from_dict, load_yaml, read_yaml_mapping, to_dict
from segpipe.errors import ConfigError

__all__ = [
    "NetworkConfig",
    "SpacingConfig",
    "IntensityConfig",
    "AugmentConfig",
    "StageConfig",
    "OptimConfig",
    "DataConfig",
    "PHANTOM_KNOBS",
    "TrainConfig",
    "from_dict",
    "to_dict",
    "load_yaml",
    "read_yaml_mapping",
    "apply_overrides",
]


@dataclass(frozen=True)
class SpacingConfig:
    """Target spacings of the two stages, in mm (x, y, z).

    ``coarse_size_xyz`` switches the coarse stage from a fixed spacing to a fixed size: the
    whole scan is resampled to that many voxels (spacing then varies with the field of view).
    """

    coarse_mm: tuple[float, float, float] = (4.0, 4.0, 4.0)
    fine_mm: tuple[float, float, float] = (1.5, 1.5, 1.5)
    coarse_size_xyz: tuple[int, int, int] | None = None

    def __post_init__(self) -> None:
        for name in ("coarse_mm", "fine_mm"):
            value = getattr(self, name)
            if len(value) != 3 or any(v <= 0 for v in value):
                raise ConfigError(f"spacing.{name}: expected three positive numbers (mm), got {list(value)}")
        if self.coarse_size_xyz is not None and any(v < 8 for v in self.coarse_size_xyz):
            raise ConfigError(f"spacing.coarse_size_xyz: expected three sizes >= 8 voxels, got {list(self.coarse_size_xyz)}")


@dataclass(frozen=True)
class NetworkConfig:
    """Shape of a 3D UNet (see :mod:`segpipe.model.network`).

    Args:
        in_channels: input channels (1 for CT).
        num_classes: output classes including background: 3 (background, right, left lung) or 2
            (lung vs background; inference takes the sides from geometry either way).
        depth: number of downsamplings; input sizes must be multiples of ``2**depth``.
        base_width: channels of the first stage (narrow by default).
        growth: channel multiplier per stage.
        max_width: cap on the channels of any stage.
        block: ``"bottleneck"`` (residual 1x1x1-3x3x3-1x1x1) or ``"plain"`` (two 3x3x3 convs).
        blocks_per_stage: residual blocks per encoder stage.
        decoder_blocks: blocks per decoder stage (the first one also merges the skip connection).
        bottleneck_ratio: channel reduction inside a bottleneck block.
        norm: ``"instance"`` or ``"group"``.
        norm_groups: most groups of a group norm (the largest divisor of the channels up to this).
        negative_slope: slope of the (in-place) LeakyReLU for negative inputs.
        checkpointing: ``"none"``, ``"encoder"``, ``"all"``, or a list of stage names
            (``enc0`` .. ``enc<depth>``, ``dec0`` .. ``dec<depth-1>``).
    """

    in_channels: int = 1
    num_classes: int = 3
    depth: int = 3
    base_width: int = 16
    growth: float = 2.0
    max_width: int = 256
    block: str = "bottleneck"
    blocks_per_stage: int = 2
    decoder_blocks: int = 1
    bottleneck_ratio: int = 4
    norm: str = "instance"
    norm_groups: int = 8
    negative_slope: float = 0.01
    checkpointing: Any = "none"

    def __post_init__(self) -> None:
        if self.in_channels < 1 or self.num_classes < 2:
            raise ConfigError(
                f"network: expected in_channels >= 1 and num_classes >= 2, got {self.in_channels} and {self.num_classes}"
            )
        if not 1 <= self.depth <= 6:
            raise ConfigError(f"network.depth: expected 1..6, got {self.depth}")
        if self.base_width < 1 or self.max_width < self.base_width:
            raise ConfigError(f"network: expected 1 <= base_width <= max_width, got {self.base_width}, {self.max_width}")
        if self.growth < 1:
            raise ConfigError(f"network.growth: expected >= 1, got {self.growth}")
        if self.block not in ("bottleneck", "plain"):
            raise ConfigError(f"network.block: expected 'bottleneck' or 'plain', got {self.block!r}")
        if self.blocks_per_stage < 1:
            raise ConfigError(f"network.blocks_per_stage: expected >= 1, got {self.blocks_per_stage}")
        if self.decoder_blocks < 1:
            raise ConfigError(f"network.decoder_blocks: expected >= 1, got {self.decoder_blocks}")
        if self.bottleneck_ratio < 1:
            raise ConfigError(f"network.bottleneck_ratio: expected >= 1, got {self.bottleneck_ratio}")
        if self.norm not in ("instance", "group"):
            raise ConfigError(f"network.norm: expected 'instance' or 'group', got {self.norm!r}")
        if self.norm_groups < 1:
            raise ConfigError(f"network.norm_groups: expected >= 1, got {self.norm_groups}")
        if not 0 <= self.negative_slope < 1:
            raise ConfigError(f"network.negative_slope: expected 0 <= slope < 1, got {self.negative_slope}")
        if isinstance(self.checkpointing, list):
            object.__setattr__(self, "checkpointing", tuple(self.checkpointing))
        if isinstance(self.checkpointing, tuple):
            if not all(isinstance(name, str) for name in self.checkpointing):
                raise ConfigError(
                    f"network.checkpointing: expected a list of stage names, got {list(self.checkpointing)!r}"
                )
        elif self.checkpointing not in ("none", "encoder", "all"):
            raise ConfigError(
                f"network.checkpointing: expected 'none', 'encoder', 'all' or a list of stage names, got {self.checkpointing!r}"
            )


# ----------------------------------------------------------------------------- training
@dataclass(frozen=True)
class IntensityConfig:
    """Fixed CT normalisation, stored in the model file and never re-estimated per scan:
    clip to ``window_hu`` and scale linearly to [-1, 1]."""

    window_hu: tuple[float, float] = (-1024.0, 400.0)

    def __post_init__(self) -> None:
        lo, hi = self.window_hu
        if not hi > lo:
            raise ConfigError(f"intensity.window_hu: expected low < high, got {list(self.window_hu)}")


@dataclass(frozen=True)
class AugmentConfig:
    """Patch augmentation. Left-right mirroring swaps labels 1 and 2 (see
    :func:`segpipe.train.data.mirror_left_right`); other axes' flips are off: anatomy is not
    symmetric front-back or head-feet. ``lung_shift_hu`` moves the HU of the lung voxels only
    (inspiration depth, emphysema: real lungs range from about -800 to -950 HU).
    ``lung_density_hu`` makes the lungs denser (or lighter) with their edge: an expiratory scan,
    diffuse ground glass (real lungs reach -550 HU). Every voxel in or within two voxels of the
    lungs moves by a shift drawn from the range times its lung share (HU linear between soft
    tissue, +40, and aerated lung, -850; :func:`segpipe.train.patches.denser_lungs`), so the
    partial volume at the lungs' edge moves with it; ``(0, 0)`` turns it off.
    ``sharpen`` simulates a sharp reconstruction kernel (a lung or bone kernel: a bright rim
    on the tissue side of the lung's edge, a dark one inside): the patch plus an amount drawn
    from the range times its difference from a 1 mm Gaussian blur of itself (unsharp masking);
    ``(0, 0)`` turns it off.
    ``lowres_zoom`` simulates a coarser scan (MONAI ``RandSimulateLowResolution``: down by a
    factor drawn from the range, then back up); ``(1, 1)`` turns it off. Thick-slice or
    down-sampled scans (e.g. 4 mm) look blurrier than any phantom rendered at the fine spacing.
    ``fov_probability``: share of patches cut as a scan's field of view cuts the body
    (:func:`segpipe.train.data.cut_field_of_view`: a box, a slab or the scanner's circle, each
    side keeping a share drawn from ``fov_keep``); 0 turns it off. ``fov_fill``: what lies beyond
    a box or slab cut: ``"air"`` (-1024 HU) or ``"edge"`` (the kept part's edge repeated, as the
    coarse stage's sliding window pads a scan smaller than a window); beyond a circle, air.
    ``fov_side``: share of those cuts that are side cuts where the patch holds both lungs
    (:func:`segpipe.train.patches.cut_beside_lung`: a view that holds one lung and only a
    medial strip of the other, a cardiac-centred crop or a field of view off the midline); 0
    turns it off. ``fov_side_strip``: the share of the other lung's width a side cut keeps,
    drawn from this range; a negative share cuts in the gap between the lungs instead (-1 at
    the kept lung's medial face): a view that holds one lung and none of the other.
    ``fov_label``: the labels beyond a box, slab or side cut: ``"background"``,
    or with ``fov_fill: edge`` also ``"edge"`` (the kept part's edge labels repeated with its
    image, so a repeated lung edge is not taught as background: at inference that padding lies
    outside the scan and is dropped). ``fov_end``: share of the box and slab cuts that are
    lung-end slabs (:func:`segpipe.train.patches.cut_lung_end`: a slab whose edge lies just past
    the lowest or highest lung slice of the patch, keeping ``fov_end_slices`` of them: the lung
    bases in the first slices of an abdominal scan, the apices in the last of a neck scan); 0
    turns it off. ``fov_compound``: share of the side and lung-end cuts that are also cut in the
    plane: a side cut as a box or the scanner's circle, a lung-end slab as one of these or a side
    cut (an abdominal scan whose first slices hold a base and whose field of view also cuts the
    body, or keeps one base and a strip of the other); 0 turns it off."""

    probability: float = 0.3
    mirror: bool = False
    rotate_deg: float = 10.0
    scale: tuple[float, float] = (0.85, 1.15)
    elastic: bool = False
    intensity_shift_hu: float = 40.0
    intensity_scale: float = 0.1
    noise_hu: float = 25.0
    blur_sigma_mm: float = 1.0
    lung_shift_hu: tuple[float, float] = (-70.0, 30.0)
    lung_density_hu: tuple[float, float] = (0.0, 0.0)
    sharpen: tuple[float, float] = (0.0, 0.0)
    lowres_zoom: tuple[float, float] = (1.0, 1.0)
    fov_probability: float = 0.0
    fov_keep: tuple[float, float] = (0.35, 0.9)
    fov_fill: str = "air"
    fov_side: float = 0.0
    fov_side_strip: tuple[float, float] = (0.05, 0.35)
    fov_label: str = "background"
    fov_end: float = 0.0
    fov_end_slices: tuple[int, int] = (1, 10)
    fov_compound: float = 0.0

    def __post_init__(self) -> None:
        if not 0.0 <= self.fov_compound <= 1.0:
            raise ConfigError(f"augment.fov_compound: expected 0..1, got {self.fov_compound}")
        if not 0.0 <= self.fov_end <= 1.0:
            raise ConfigError(f"augment.fov_end: expected 0..1, got {self.fov_end}")
        if not 1 <= self.fov_end_slices[0] <= self.fov_end_slices[1]:
            raise ConfigError(f"augment.fov_end_slices: expected 1 <= low <= high, got {list(self.fov_end_slices)}")
        if self.fov_label not in ("background", "edge"):
            raise ConfigError(f"augment.fov_label: expected 'background' or 'edge', got {self.fov_label!r}")
        if self.fov_label == "edge" and self.fov_fill != "edge":
            raise ConfigError("augment.fov_label: 'edge' repeats the labels with the image; it needs fov_fill: edge")
        if not -1.0 <= self.fov_side_strip[0] <= self.fov_side_strip[1] <= 1.0:
            raise ConfigError(f"augment.fov_side_strip: expected -1 <= low <= high <= 1, got {list(self.fov_side_strip)}")
        if not 0.0 <= self.fov_side <= 1.0:
            raise ConfigError(f"augment.fov_side: expected 0..1, got {self.fov_side}")
        if self.fov_fill not in ("air", "edge"):
            raise ConfigError(f"augment.fov_fill: expected 'air' or 'edge', got {self.fov_fill!r}")
        if not 0.0 <= self.fov_probability <= 1.0:
            raise ConfigError(f"augment.fov_probability: expected 0..1, got {self.fov_probability}")
        if not 0 < self.fov_keep[0] <= self.fov_keep[1] <= 1:
            raise ConfigError(f"augment.fov_keep: expected 0 < low <= high <= 1, got {list(self.fov_keep)}")
        if not 0.0 <= self.probability <= 1.0:
            raise ConfigError(f"augment.probability: expected 0..1, got {self.probability}")
        if not 0 < self.scale[0] <= self.scale[1]:
            raise ConfigError(f"augment.scale: expected 0 < low <= high, got {list(self.scale)}")
        if self.lung_shift_hu[0] > self.lung_shift_hu[1]:
            raise ConfigError(f"augment.lung_shift_hu: expected low <= high, got {list(self.lung_shift_hu)}")
        if not 0.0 <= self.sharpen[0] <= self.sharpen[1]:
            raise ConfigError(f"augment.sharpen: expected 0 <= low <= high, got {list(self.sharpen)}")
        if self.lung_density_hu[0] > self.lung_density_hu[1]:
            raise ConfigError(f"augment.lung_density_hu: expected low <= high, got {list(self.lung_density_hu)}")
        if not 0 < self.lowres_zoom[0] <= self.lowres_zoom[1] <= 1:
            raise ConfigError(f"augment.lowres_zoom: expected 0 < low <= high <= 1, got {list(self.lowres_zoom)}")
        for name in ("rotate_deg", "intensity_shift_hu", "intensity_scale", "noise_hu", "blur_sigma_mm"):
            if getattr(self, name) < 0:
                raise ConfigError(f"augment.{name}: expected >= 0, got {getattr(self, name)}")


@dataclass(frozen=True)
class StageConfig:
    """One stage of the cascade (coarse localiser or fine segmenter).

    Args:
        network: the UNet of this stage.
        patch_xyz: training patch in voxels (x, y, z), multiples of ``2**network.depth``;
            inference uses it as the sliding-window size.
        batch_size: patches per step.
        accumulation: steps whose gradients add up before one optimiser update.
        amp: mixed precision (fp16 + GradScaler on CUDA, bf16 on CPU).
        epochs: passes over ``steps_per_epoch`` optimiser updates.
        steps_per_epoch: optimiser updates per epoch.
        lr: peak learning rate.
        fg_fraction: share of patches centred on lung (foreground oversampling).
        dense_fraction: share of those lung-centred patches centred on dense tissue (denser
            than -300 HU over ~1 cm, at least 5 mL): half on dense lung (consolidation,
            collapse), half on the dense non-lung within 7 voxels of the lung (chest wall,
            liver dome, effusion), so that "dense = lung" is not what is learnt; 0 leaves the
            pick uniform over lung voxels.
        spacing_jitter: multi-scale training: each patch is resampled by a random factor in
            ``[1 - jitter, 1 + jitter]`` (0 turns it off).
        overlap: sliding-window overlap for validation and inference.
        val_every: validate every this many epochs (and after the last one).
    """

    network: NetworkConfig = field(default_factory=NetworkConfig)
    patch_xyz: tuple[int, int, int] = (96, 96, 96)
    batch_size: int = 2
    accumulation: int = 1
    amp: bool = True
    epochs: int = 20
    steps_per_epoch: int = 100
    lr: float = 2e-3
    fg_fraction: float = 0.5
    dense_fraction: float = 0.0
    spacing_jitter: float = 0.0
    overlap: float = 0.25
    val_every: int = 1

    def __post_init__(self) -> None:
        if self.network.num_classes not in (2, 3):
            raise ConfigError(
                f"network.num_classes: expected 2 (lung vs background) or 3 (background, right, left) "
                f"for a training stage, got {self.network.num_classes}"
            )
        d = 2**self.network.depth
        if any(p < d or p % d for p in self.patch_xyz):
            raise ConfigError(f"patch_xyz: expected multiples of {d} (2**network.depth), got {list(self.patch_xyz)}")
        for name in ("batch_size", "accumulation", "epochs", "steps_per_epoch", "val_every"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name}: expected >= 1, got {getattr(self, name)}")
        if not self.lr > 0:
            raise ConfigError(f"lr: expected > 0, got {self.lr}")
        for name in ("fg_fraction", "dense_fraction"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ConfigError(f"{name}: expected 0..1, got {getattr(self, name)}")
        if not 0.0 <= self.spacing_jitter < 0.5:
            raise ConfigError(f"spacing_jitter: expected 0 <= jitter < 0.5, got {self.spacing_jitter}")
        if not 0.0 <= self.overlap < 1.0:
            raise ConfigError(f"overlap: expected 0 <= overlap < 1, got {self.overlap}")


def _coarse_default() -> StageConfig:
    return StageConfig(
        network=NetworkConfig(base_width=8, max_width=64),
        patch_xyz=(80, 80, 96),
        batch_size=2,
        fg_fraction=0.5,
        epochs=20,
        steps_per_epoch=50,
    )


@dataclass(frozen=True)
class OptimConfig:
    """Optimiser and schedule, shared by both stages."""

    optimizer: str = "adamw"
    weight_decay: float = 1e-4
    momentum: float = 0.99
    schedule: str = "poly"
    warmup_steps: int = 20
    grad_clip: float = 12.0
    max_nonfinite: int = 20

    def __post_init__(self) -> None:
        if self.optimizer not in ("adamw", "adam", "sgd"):
            raise ConfigError(f"optim.optimizer: expected adamw, adam or sgd, got {self.optimizer!r}")
        if self.schedule not in ("poly", "cosine", "constant"):
            raise ConfigError(f"optim.schedule: expected poly, cosine or constant, got {self.schedule!r}")
        if self.warmup_steps < 0 or self.grad_clip <= 0 or self.max_nonfinite < 1:
            raise ConfigError("optim: expected warmup_steps >= 0, grad_clip > 0 and max_nonfinite >= 1")


def _given(options: Any) -> dict[str, float]:
    """The fields of an all-optional dataclass that were set (not None)."""
    return {f.name: getattr(options, f.name) for f in dataclasses.fields(options) if getattr(options, f.name) is not None}


@dataclass(frozen=True)
class PhantomPathologyConfig:
    """Per-phantom probability of each pathology in the generated training phantoms
    (``data.phantom_pathology``); a key left out keeps the generator's default (see
    :func:`segpipe.synthetic.sample_spec`). Raise one to train on more of it, e.g.
    ``emphysema: 0.5`` for a COPD cohort. ``whole_lobe`` is the share of lobar consolidations
    that fill their whole lobe (default 0)."""

    nodules: float | None = None
    consolidation: float | None = None
    ground_glass: float | None = None
    emphysema: float | None = None
    effusion: float | None = None
    collapse: float | None = None
    whole_lobe: float | None = None

    def __post_init__(self) -> None:
        for name, v in _given(self).items():
            if not 0.0 <= v <= 1.0:
                raise ConfigError(f"data.phantom_pathology.{name}: expected a probability in [0, 1], got {v}")

    def overrides(self) -> dict[str, float]:
        """The probabilities that were set, as :func:`segpipe.synthetic.write_dataset` overrides."""
        return _given(self)


@dataclass(frozen=True)
class PhantomCoverageConfig:
    """Relative weight of each body coverage in the generated training phantoms
    (``data.phantom_coverage``); a key left out keeps the generator's default weight (see
    :data:`segpipe.synthetic.COVERAGE_WEIGHTS`: chest 0.55, chest_abdomen 0.17, neck_pelvis
    0.08, lung_bases 0.12, no_lungs 0.08, abdomen_bases 0), 0 leaves that coverage out. E.g.
    ``lung_bases: 0.88`` makes half the phantoms abdominal scans through the lung bases."""

    chest: float | None = None
    chest_abdomen: float | None = None
    neck_pelvis: float | None = None
    lung_bases: float | None = None
    no_lungs: float | None = None
    abdomen_bases: float | None = None

    def __post_init__(self) -> None:
        for name, v in _given(self).items():
            if not 0.0 <= v < float("inf"):
                raise ConfigError(f"data.phantom_coverage.{name}: expected a weight >= 0, got {v}")
        if self.weights():
            from segpipe.synthetic.spec import coverage_probabilities

            try:
                coverage_probabilities(self.weights())
            except ConfigError as err:
                raise ConfigError(f"data.phantom_coverage: {err}") from None

    def weights(self) -> dict[str, float]:
        """The weights that were set (``coverage_weights`` of :func:`segpipe.synthetic.sample_spec`)."""
        return _given(self)


#: PhantomSpec probabilities that DataConfig passes on as ``phantom_<name>`` (0: not drawn)
PHANTOM_KNOBS = ("abdomen_detail", "diaphragm_variety", "recess_variety", "flexure_variety", "table_variety")


@dataclass(frozen=True)
class DataConfig:
    """Where training data comes from and how it is prepared.

    ``margin_mm``: each lung's fine crop is its box plus this; ``fine_below_mm``: the crop goes
    on this much further toward the feet, within the scan (0: not), so the fine stage also
    learns the bowel under the bases, which it reads at inference where a region is widened
    to a window or grows. ``fine_decoy_mm``: for each lung a training label lacks, the fine stage
    also trains on that side of the body in the scan's top this many mm (0: not): the bowel gas
    under the diaphragm that the coarse stage can send it to in a scan without that lung.
    ``num_workers``: the data loader's worker processes, and as many (at least one) for checking
    the cases and preprocessing them into the cache.
    """

    cache_dir: str | None = None
    extra_phantoms: int = 0
    phantom_seed: int = 1000
    phantom_size_xyz: tuple[int, int, int] = (160, 160, 120)
    phantom_pathology: PhantomPathologyConfig = field(default_factory=PhantomPathologyConfig)
    phantom_coverage: PhantomCoverageConfig = field(default_factory=PhantomCoverageConfig)
    phantom_abdomen_detail: float = 0.0
    phantom_diaphragm_variety: float = 0.0
    phantom_recess_variety: float = 0.0
    phantom_flexure_variety: float = 0.0
    phantom_table_variety: float = 0.0
    val_fraction: float = 0.2
    num_workers: int = 2
    margin_mm: float = 12.0
    fine_below_mm: float = 0.0
    fine_decoy_mm: float = 0.0

    def __post_init__(self) -> None:
        if min(self.extra_phantoms, self.num_workers, self.margin_mm, self.fine_below_mm, self.fine_decoy_mm) < 0:
            raise ConfigError("data: expected extra_phantoms, num_workers, margin_mm, fine_below_mm and fine_decoy_mm >= 0")
        if not 0.0 <= self.val_fraction < 1.0:
            raise ConfigError(f"data.val_fraction: expected 0 <= fraction < 1, got {self.val_fraction}")
        for name in (f"phantom_{knob}" for knob in PHANTOM_KNOBS):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ConfigError(f"data.{name}: expected a probability in [0, 1], got {getattr(self, name)}")


@dataclass(frozen=True)
class TrainConfig:
    """Everything ``segpipe train`` needs; the resolved copy goes into the model file.

    ``init_model``: start each trained stage from this segpipe model file's weights
    (``"default"``: the bundled model) instead of random ones, to fine-tune it on new data;
    the stage's network settings, spacing and intensity window must match the file's. A
    stage that is not trained (``stages: fine``) is taken from that file unchanged, so the
    run still writes a complete ``model.pt``.
    """

    seed: int = 0
    device: str = "auto"
    stages: str = "both"
    init_model: str | None = None
    spacing: SpacingConfig = field(default_factory=SpacingConfig)
    intensity: IntensityConfig = field(default_factory=IntensityConfig)
    data: DataConfig = field(default_factory=DataConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    augment: AugmentConfig = field(default_factory=AugmentConfig)
    coarse: StageConfig = field(default_factory=_coarse_default)
    fine: StageConfig = field(default_factory=StageConfig)

    def __post_init__(self) -> None:
        if self.stages not in ("both", "coarse", "fine"):
            raise ConfigError(f"stages: expected both, coarse or fine, got {self.stages!r}")
        if self.device not in ("auto", "cpu", "cuda") and not self.device.startswith("cuda:"):
            raise ConfigError(f"device: expected auto, cpu or cuda[:N], got {self.device!r}")
        size = self.spacing.coarse_size_xyz
        if size is not None and tuple(size) != tuple(self.coarse.patch_xyz):
            raise ConfigError(
                f"spacing.coarse_size_xyz: the fixed-size coarse mode trains on whole volumes, so coarse.patch_xyz "
                f"must equal it; expected {list(size)}, got {list(self.coarse.patch_xyz)}"
            )


@dataclass(frozen=True)
class InferConfig:
    """Settings of ``segpipe infer`` from a YAML file (``--config``); the command line
    overrides them.

    Args:
        device: ``auto``, ``cpu`` or ``cuda``.
        fast: no window overlap in the fine stage.
        min_lung_ml: a side counts as found with this much confident coarse lung (None: the
            default, 50 mL).
        sw_batch_size: windows per forward pass (None: the device's default).
        rules: changes to the model file's clean-up rules: per rule name, true / false or a
            mapping of parameters (checked against :class:`segpipe.refine.RuleSet`).
    """

    device: str = "auto"
    fast: bool = False
    min_lung_ml: float | None = None
    sw_batch_size: int | None = None
    rules: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.device not in ("auto", "cpu", "cuda"):
            raise ConfigError(f"device: expected auto, cpu or cuda, got {self.device!r}")
        if self.min_lung_ml is not None and not self.min_lung_ml >= 0:
            raise ConfigError(f"min_lung_ml: expected >= 0, got {self.min_lung_ml}")
        if self.sw_batch_size is not None and self.sw_batch_size < 1:
            raise ConfigError(f"sw_batch_size: expected >= 1, got {self.sw_batch_size}")
        from segpipe.refine import RuleSet

        RuleSet.from_dict(self.rules)  # unknown rules and parameters are errors here
