"""Inference: the cascade as steps that hand frozen results on.

``scan`` (read, canonical) -> ``coarse`` (locate the lungs, the body, the airways) ->
``regions`` (where the fine stage runs) -> ``fine`` (segment a region, its fine-grid rules,
growth) -> ``assemble`` (back onto the scan's grid) -> :mod:`segpipe.refine` (scan-grid rules)
-> the input's geometry. :class:`LungSegmenter` (``segmenter.py``) chains them; ``batch.py``
runs folders of scans.
"""

from __future__ import annotations

from segpipe.infer.batch import Job, plan_jobs, run_jobs, segment_job
from segpipe.infer.segmenter import LungSegmenter, Prediction
from segpipe.infer.settings import MIN_LUNG_ML, import_monai_lean

__all__ = ["LungSegmenter", "Prediction", "Job", "plan_jobs", "run_jobs", "segment_job", "MIN_LUNG_ML", "import_monai_lean"]
