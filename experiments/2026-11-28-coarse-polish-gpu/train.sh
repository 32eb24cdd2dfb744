# coarse-stage training runs A (polish from the bundled model) and B (from scratch), side by side
set -x
export PYTHONUNBUFFERED=1
if [ -z "$LOCAL" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 3
  tar xJf .whl/sitk.tar.xz -C /tmp/site || exit 3
  export PYTHONPATH=$PWD:/tmp/site
  nvidia-smi --query-gpu=name,memory.total --format=csv
fi
nproc
EP=${EP:-15}; SPE=${SPE:-200}; DEV=${DEV:-cuda}; NW=${NW:-5}; TL=${TL:-330}
t0=$(date +%s)
timeout 170 python3 experiments/2026-11-27-coarse-side-cut/prepare.py ${PW:-15} > $OUT/prep.log 2>&1; echo prep rc $? $(( $(date +%s) - t0 )) s
C=experiments/2026-11-28-coarse-lung-end/config.yaml
common="--config $C --data runs/ph35000 --device $DEV --quiet --set coarse.batch_size=8 --set coarse.epochs=$EP --set coarse.steps_per_epoch=$SPE --set data.num_workers=$NW"
timeout $TL python3 -m segpipe train $common --out runs/gA --set coarse.lr=0.0001 > $OUT/A.log 2>&1 &
timeout $TL python3 -m segpipe train $common --out runs/gB --set init_model=null --set coarse.lr=0.002 --set optim.warmup_steps=200 > $OUT/B.log 2>&1 &
timeout $TL python3 -m segpipe train $common --out runs/gC --set coarse.lr=0.0003 > $OUT/C.log 2>&1 &
wait
echo train done $(( $(date +%s) - t0 )) s
tar czf $OUT/runs.tgz runs/gA/coarse_best.pt runs/gA/coarse_latest.pt runs/gA/metrics.jsonl runs/gB/coarse_best.pt runs/gB/coarse_latest.pt runs/gB/metrics.jsonl runs/gC/coarse_best.pt runs/gC/coarse_latest.pt runs/gC/metrics.jsonl
ls -la $OUT; tail -n 4 $OUT/A.log $OUT/B.log $OUT/C.log
