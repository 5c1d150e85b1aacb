#!/usr/bin/env bash
# The GPU check (make gpu-check runs it after installing; on a machine without a package index,
# inside the offline bundle: bash .offline/run.sh bash benchmarks/gpu_check.sh OUT [PART ...]).
# Parts (default: all, in this order): env, precision, bench, default, grid, lockstep, lockstep-grid.
# Each part writes its tables to stdout and its JSON or text into OUT; a failing part does not stop
# the others, and each is bounded by its own time limit.
set -u
OUT=${1:?usage: gpu_check.sh OUT [PART ...]}; shift
PY=${PY:-python3}; PARTS=${*:-env precision bench default grid lockstep lockstep-grid}
SIZES=20,50,100,150,200,250,300,350,400,450,500,1000
mkdir -p "$OUT"
$PY -c "import torch; assert torch.cuda.is_available(), 'the GPU check needs a GPU (a CUDA build of torch: docs/gpu_and_cluster.md)'" || exit 1
part() { echo "== $1 ($(date -u +%T))"; }
for p in $PARTS; do
  case $p in
    env) part env
      { nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; nproc
        $PY -c "import torch, transformers, pytorch_lightning as pl; print('torch', torch.__version__, '| transformers', transformers.__version__, '| lightning', pl.__version__)"
        git rev-parse --short HEAD 2>/dev/null || true; } | tee "$OUT/env.txt" ;;
    precision) part precision; timeout 120 $PY -m ner_lightning.precision measure --accelerator gpu --force ;;
    bench) part bench; timeout 300 $PY benchmarks/bench_ce.py --out "$OUT/bench_ce.json" trainer=gpu ;;
    default) part default; timeout 120 $PY benchmarks/default_job.py --out "$OUT/default_cell.json" trainer=gpu logger=csv ;;
    grid) part grid
      timeout 300 $PY -m ner_lightning.run -m loss=auc2t size=$SIZES partition=0,1 hydra/launcher=parallel \
        trainer=gpu logger=csv trainer.enable_progress_bar=false hydra.sweep.dir=/tmp/gpu_check/grid_row_sample
      $PY -m ner_lightning.sweep status /tmp/gpu_check/grid_row_sample --cells | tee "$OUT/grid_row_sample.txt" ;;
    lockstep) part lockstep
      timeout 240 $PY benchmarks/lockstep_step.py --device cuda --models tiny,minilm --cells 8,32 --precisions 32,bf16 \
        --out "$OUT/lockstep_step.json" ;;
    lockstep-grid) part lockstep-grid
      [ -f conf/hydra/launcher/lockstep.yaml ] || { echo "no lockstep launcher in this commit"; continue; }
      timeout 300 $PY -m ner_lightning.run -m loss=auc2t size=$SIZES partition=0,1 hydra/launcher=lockstep \
        trainer=gpu logger=csv trainer.enable_progress_bar=false hydra.sweep.dir=/tmp/gpu_check/grid_row_lockstep
      $PY -m ner_lightning.sweep status /tmp/gpu_check/grid_row_lockstep --cells | tee "$OUT/grid_row_lockstep.txt" ;;
    *) echo "unknown part $p"; exit 2 ;;
  esac
done
echo "== done ($(date -u +%T))"
