"""The classical baseline on a real scan (shared data) and on phantoms."""

from __future__ import annotations

import pytest

from segpipe import baseline, io, metrics, spatial
from tests.conftest import SHARED_DATA

COPD = SHARED_DATA / "copdgene-10002K-64"


@pytest.mark.skipif(not COPD.is_dir(), reason="shared/data/copdgene-10002K-64 not present")
@pytest.mark.parametrize("orientation", ["LPS", "RAS"])
def test_baseline_on_real_copdgene_scan(orientation: str) -> None:
    image = spatial.reorient(io.read_image(COPD / "ct.nii.gz"), orientation)
    reference = spatial.reorient(io.read_image(COPD / "lungs.nii.gz"), orientation)
    pred = baseline.segment_lungs_classical(image)
    assert spatial.same_geometry(pred, image)
    m = metrics.lung_metrics(pred, reference)
    assert m["right"]["dice"] >= 0.97 and m["left"]["dice"] >= 0.97
