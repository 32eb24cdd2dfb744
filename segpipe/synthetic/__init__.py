"""Chest CT phantoms built from anatomy in physical millimetres (images + lung labels).

Real scans cannot be downloaded where segpipe is developed, so these phantoms are the training
data of the bundled model and the test data of the package. Anatomy (body wall, skeleton,
lungs with vessel and bronchial trees, mediastinum, abdomen, pathology) is built in a canonical
LPS frame in mm, painted with partial-volume occupancies onto any grid, passed through a scanner
model (blur, correlated noise, field of view) and stored in the requested orientation and dtype.

Labels: 0 background, 1 the patient's right lung, 2 the left lung. Trachea, main bronchi,
pleural effusion, pneumothorax and bowel gas are 0; vessels, small bronchi, nodules and
consolidation inside the lungs are lung.

Example:
    >>> from segpipe.synthetic import PhantomSpec, make_phantom, sample_spec
    >>> ph = make_phantom(PhantomSpec(seed=3, size_xyz=(96, 96, 64), nodules=1.0))
    >>> ph.label.GetSize()
    (96, 96, 64)
    >>> spec = sample_spec(7, coverage="chest")      # a random, varied spec
"""

from __future__ import annotations

from segpipe.synthetic.dataset import case_spec, write_dataset
from segpipe.synthetic.render import Phantom, make_phantom
from segpipe.synthetic.shapes import TISSUES
from segpipe.synthetic.spec import (
    COVERAGE_WEIGHTS,
    COVERAGES,
    DTYPES,
    ORIENTATIONS,
    PADDING_VALUES,
    PATHOLOGIES,
    PhantomSpec,
    coverage_probabilities,
    sample_spec,
)

__all__ = [
    "PhantomSpec",
    "sample_spec",
    "coverage_probabilities",
    "COVERAGE_WEIGHTS",
    "make_phantom",
    "Phantom",
    "write_dataset",
    "case_spec",
    "TISSUES",
    "COVERAGES",
    "ORIENTATIONS",
    "DTYPES",
    "PADDING_VALUES",
    "PATHOLOGIES",
]
