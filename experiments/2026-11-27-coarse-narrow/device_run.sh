#!/usr/bin/env bash
# device run: phantoms + cache in 14 processes, then two coarse fine-tunes side by side on the GPU
set -u
T0=$(date +%s)
mkdir -p /tmp/site
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 3
tar -C /tmp/site -xJf .gpu/sitk.tar.xz || exit 3
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 SEGPIPE_HOME=/tmp/sp
E=experiments/2026-11-27-coarse-narrow
timeout 150 python3 experiments/2026-11-27-coarse-side-cut/prepare.py 14 2>&1 | tail -5
echo "prepared after $(( $(date +%s) - T0 )) s"
for v in C:0.9 D:0.75; do
  n=${v%%:*}; s=${v#*:}
  extra=""; [ $n = D ] && extra="--set augment.fov_keep=[0.15,0.9]"
  timeout ${TRAIN_LIMIT:-330} python3 -m segpipe train --config $E/config.yaml --data runs/ph35000 --out runs/cnar$n $extra --set coarse.epochs=50 \
    --set augment.fov_probability=$s --quiet > runs/train$n.log 2>&1 &
done
wait
echo "trained after $(( $(date +%s) - T0 )) s"
for n in C D; do
  tail -4 runs/train$n.log
  cp runs/cnar$n/model.pt $OUT/model_$n.pt 2>/dev/null
  cp runs/cnar$n/coarse_best.pt $OUT/coarse_best_$n.pt 2>/dev/null
  cp runs/cnar$n/metrics.jsonl $OUT/metrics_$n.jsonl 2>/dev/null; cp runs/train$n.log $OUT/ 2>/dev/null
done
ls -la $OUT
