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


def test_baseline_on_phantoms_excludes_airways_and_misses_consolidation() -> None:
    """On a clean chest phantom the baseline is good and keeps the trachea out; on a phantom
    with consolidation it loses the dense lung, which is where a learned model must win."""
    import numpy as np
    import SimpleITK as sitk

    from segpipe import synthetic

    spec = synthetic.PhantomSpec(seed=3, size_xyz=(128, 128, 96), coverage="chest", orientation="RAS")
    clean = synthetic.make_phantom(spec, tissue_map=True)
    pred = baseline.segment_lungs_classical(clean.image)
    m = metrics.lung_metrics(pred, clean.label)
    assert m["right"]["dice"] > 0.95 and m["left"]["dice"] > 0.95
    tissue = sitk.GetArrayViewFromImage(clean.tissue)
    airway = tissue == synthetic.TISSUES["airway"]
    assert airway.sum() > 50
    assert (sitk.GetArrayViewFromImage(pred)[airway] > 0).mean() < 0.2

    sick = synthetic.make_phantom(spec.replace(consolidation=1.0, collapse=0.0, effusion=0.0), tissue_map=True)
    assert sick.info["consolidation"]
    sick_pred = baseline.segment_lungs_classical(sick.image)
    consolidation = sitk.GetArrayViewFromImage(sick.tissue) == synthetic.TISSUES["consolidation"]
    assert consolidation.sum() > 500  # about 20 mL of 3.4 mm voxels at least
    assert (sitk.GetArrayViewFromImage(sick_pred)[consolidation] > 0).mean() < 0.3
    sick_m = metrics.lung_metrics(sick_pred, sick.label)
    worst = min(sick_m["right"]["dice"], sick_m["left"]["dice"])
    assert np.isfinite(worst) and worst < min(m["right"]["dice"], m["left"]["dice"])
