"""Everything one prediction needs to know, resolved once from the model file's header and
the user's options (:class:`Settings`), and the process helpers the steps share."""

from __future__ import annotations

import ctypes
import importlib.abc
import resource
import sys
from dataclasses import dataclass
from typing import Any

from segpipe.config import StageConfig
from segpipe.refine import RuleSet

__all__ = ["Settings", "MIN_LUNG_ML", "VIEW_ZOOMS", "NARROW_VIEW_MM", "import_monai_lean", "MONAI_EXTRAS_LEFT_OUT"]

MIN_LUNG_ML = 50.0  # default of LungSegmenter(min_lung_ml=...)
VIEW_ZOOMS = (0.8, 1.0, 1.25)  # the coarse stage's in-plane zooms in a narrow view
NARROW_VIEW_MM = 300.0  # a field of view narrower than this in x or y is narrower than a body


@dataclass(frozen=True)
class Settings:
    """The cascade's settings for one segmenter (frozen; no state of a call lives here).

    Args:
        coarse, fine: the stages (network, window size, overlap, window batch, AMP).
        coarse_mm: coarse spacing (x, y, z mm), unless ``coarse_size_xyz`` fixes the size.
        fine_mm: fine spacing (x, y, z mm).
        window_hu: the fixed intensity window of the networks.
        margin_mm: margin around each coarse lung (the training crops' margin).
        device: torch device.
        fast: no window overlap in the fine stage, and one coarse pass in a narrow view.
        sw_batch_size: windows per forward pass (None: :func:`segpipe.device.window_batch`).
        min_lung_ml: a side counts as found only with this much confident coarse lung.
        confident: coarse lung probability that counts towards ``min_lung_ml``.
        rules: the clean-up steps' parameters.
        view_zooms: in a narrow view (:attr:`narrow_view_mm`), the coarse network's side vote
            (right or left) is averaged over these in-plane zooms of its input
            (:func:`segpipe.model.zoom_averaged_probs`; its lung and confidence stay the plain
            run's); ``(1.0,)``: one pass.
        narrow_view_mm: a scan whose field of view is narrower than this in x or y (narrower
            than a body: a cardiac-centred crop, a field of view over one lung).
    """

    coarse: StageConfig
    fine: StageConfig
    coarse_mm: tuple[float, float, float]
    coarse_size_xyz: tuple[int, int, int] | None
    fine_mm: tuple[float, float, float]
    window_hu: tuple[float, float]
    margin_mm: float
    device: Any
    fast: bool = False
    sw_batch_size: int | None = None
    min_lung_ml: float = MIN_LUNG_ML
    confident: float = 0.9
    rules: RuleSet = RuleSet()
    view_zooms: tuple[float, ...] = VIEW_ZOOMS
    narrow_view_mm: float = NARROW_VIEW_MM

    def coarse_zooms(self, extent_mm_xy: tuple[float, float]) -> tuple[float, ...]:
        """The in-plane zooms of the coarse stage for a scan whose field of view spans
        ``extent_mm_xy`` (x, y mm): :attr:`view_zooms` in a narrow view (not with ``fast``),
        else one pass."""
        narrow = min(extent_mm_xy) < self.narrow_view_mm
        return self.view_zooms if narrow and not self.fast else (1.0,)

    @property
    def fine_overlap(self) -> float:
        """The fine stage's window overlap (none with ``fast``)."""
        return 0.0 if self.fast else self.fine.overlap

    def window_batch(self, stage: StageConfig) -> int:
        """Windows per forward pass for ``stage``: ``sw_batch_size`` when given, else
        :func:`segpipe.device.window_batch` (one on a CPU running bf16, the stage's batch
        elsewhere)."""
        from segpipe.device import use_amp, window_batch

        return self.sw_batch_size or window_batch(self.device, stage.batch_size, use_amp(self.device, stage.amp))


def peak_rss_bytes() -> int:
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024  # Linux: KiB


_MALLOC_TRIM: Any = None


def release_freed_memory() -> None:
    """Hand memory that was freed but kept by the C allocator back to the system (glibc's
    ``malloc_trim``; nothing elsewhere). Between the stages this lowers the peak: the coarse
    stage's buffers would otherwise still count while the fine stage runs (about 60 MB on a
    512x512x1000 scan)."""
    global _MALLOC_TRIM
    if _MALLOC_TRIM is None:
        try:
            _MALLOC_TRIM = ctypes.CDLL("libc.so.6").malloc_trim
        except (OSError, AttributeError):  # not glibc
            _MALLOC_TRIM = False
    if _MALLOC_TRIM:
        _MALLOC_TRIM(0)


def load_network(stage_name: str, stage: StageConfig, weights: dict[str, Any], device: Any) -> Any:
    """The stage's network with the model file's weights, ready for inference on ``device``."""
    from segpipe.device import for_inference
    from segpipe.errors import ModelError
    from segpipe.model import build_network

    net = build_network(stage.network)
    try:
        net.load_state_dict(weights)
    except (RuntimeError, KeyError) as err:
        raise ModelError(f"the model file's {stage_name} weights do not match its network settings") from err
    return for_inference(net, device)


# Packages that importing MONAI loads through its optional imports (``monai/__init__`` imports
# every subpackage) and that segpipe never uses through MONAI: plotting, OpenCV, scikit-image,
# NIfTI/DICOM readers, HTTP, scipy's signal and stats. Left out, a process starts about 1 s
# sooner and about 90 MB smaller (``segpipe infer`` on the 2-core machine).
MONAI_EXTRAS_LEFT_OUT = ("matplotlib", "cv2", "skimage", "nibabel", "PIL", "requests", "pydicom", "scipy.signal",
                         "scipy.stats")


class _LeaveOut(importlib.abc.MetaPathFinder):
    """An import finder that refuses the packages in ``names`` (and their submodules)."""

    def __init__(self, names: tuple[str, ...]) -> None:
        self.names = names

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> None:
        if any(fullname == n or fullname.startswith(n + ".") for n in self.names):
            raise ModuleNotFoundError(f"left out while MONAI is imported: {fullname}", name=fullname)


def import_monai_lean() -> bool:
    """Import MONAI without the optional packages of ``MONAI_EXTRAS_LEFT_OUT``, for a process
    that uses MONAI only through segpipe (the ``segpipe`` command calls it before it loads a
    model). Afterwards, in this process, MONAI's own functions that need one of them (its
    plots, its OpenCV or scikit-image transforms) raise MONAI's ``OptionalImportError``; the
    packages themselves import as usual. Returns whether MONAI was imported so: not when it
    was imported already, nor when this MONAI version cannot do without one of them (then it
    is imported as usual)."""
    if "monai" in sys.modules:
        return False
    finder = _LeaveOut(MONAI_EXTRAS_LEFT_OUT)
    sys.meta_path.insert(0, finder)
    try:
        import monai.inferers  # noqa: F401
    except ImportError:
        for name in [n for n in sys.modules if n == "monai" or n.startswith("monai.")]:
            del sys.modules[name]
        sys.meta_path.remove(finder)
        import monai.inferers  # noqa: F401

        return False
    finally:
        if finder in sys.meta_path:
            sys.meta_path.remove(finder)
    return True
