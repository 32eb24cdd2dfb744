"""Training data, one import away: re-exports the public names of the three modules along
the data flow, so ``from segpipe.train import data`` keeps working.

* :mod:`segpipe.train.dataset`: discovery of image/label pairs (Decathlon, nnU-Net v2 raw,
  images/+labels/) and their validation.
* :mod:`segpipe.train.cache`: preprocessing of each case into the memory-mapped cache.
* :mod:`segpipe.train.patches`: patch sampling and augmentation (:class:`PatchDataset`).

Example:
    >>> cases = discover("data_samples")             # doctest: +SKIP
    >>> validate_cases(cases)                        # doctest: +SKIP
"""

from __future__ import annotations

from segpipe.train.cache import CACHE_VERSION, CachedCase, CachedVolume, build_cache, preprocess_case
from segpipe.train.dataset import LABELS, Case, DatasetError, check_case, discover, validate_cases
from segpipe.train.patches import (
    DENSE_MIN_ML,
    PatchDataset,
    augment_patch,
    cut_field_of_view,
    dense_points,
    extract_patch,
    foreground_points,
    mirror_left_right,
    sample_patch_center,
)

__all__ = [
    "Case",
    "CachedCase",
    "CachedVolume",
    "CACHE_VERSION",
    "DatasetError",
    "DENSE_MIN_ML",
    "LABELS",
    "build_cache",
    "check_case",
    "cut_field_of_view",
    "dense_points",
    "discover",
    "extract_patch",
    "foreground_points",
    "mirror_left_right",
    "PatchDataset",
    "augment_patch",
    "preprocess_case",
    "sample_patch_center",
    "validate_cases",
]
