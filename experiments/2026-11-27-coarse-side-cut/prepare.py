"""The phantoms of runs/ph35000 (the eighth and ninth models' coarse data) and the coarse
training cache of this experiment, made in worker processes.

Run: ``python experiments/2026-11-27-coarse-side-cut/prepare.py [WORKERS]`` from the project root.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path

from segpipe import synthetic
from segpipe._config_load import load_yaml
from segpipe.config import TrainConfig
from segpipe.train.run import prepare_data

HERE = Path(__file__).resolve().parent

if __name__ == "__main__":
    workers = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    start = time.perf_counter()
    if not Path("runs/ph35000/dataset.json").is_file():
        synthetic.write_dataset(
            "runs/ph35000", 160, seed=35000, size_xyz=(224, 224, 160), consolidation=0.3, effusion=0.3, emphysema=0.2,
            collapse=0.1, abdomen_detail=0.7, diaphragm_variety=0.6, progress=False, workers=workers,
            coverage_weights={"chest": 0.3, "chest_abdomen": 0.1, "neck_pelvis": 0.05, "lung_bases": 0.15, "no_lungs": 0.05,
                              "abdomen_bases": 0.35})
    print(f"phantoms: {time.perf_counter() - start:.0f} s", flush=True)
    cfg = load_yaml(HERE / "config.yaml", TrainConfig)
    cfg = dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, num_workers=workers))
    train, val, _ = prepare_data(cfg, "runs/ph35000", cfg.data.cache_dir)
    print(f"cache: {len(train)} train, {len(val)} validation cases, {time.perf_counter() - start:.0f} s", flush=True)
