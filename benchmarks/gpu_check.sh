#!/usr/bin/env bash
# The GPU check (make gpu-check runs it after installing; on a machine without a package index,
# inside the offline bundle: bash .offline/run.sh bash benchmarks/gpu_check.sh OUT [PART ...]).
# Parts (default: all, in this order): env, precision, bench, default, grid, lockstep, lockstep-grid,
# agreement.
# GRID_SIZES and GRID_EXTRA (more overrides, e.g. "trainer.max_epochs=3 trainer.min_epochs=3")
# shape the grid parts; each grid part ends with every cell's phases (results.json phase_s).
# Each part writes its tables to stdout and its JSON or text into OUT; a failing part does not stop
# the others, and each is bounded by its own time limit.
set -u
OUT=${1:?usage: gpu_check.sh OUT [PART ...]}; shift
PY=${PY:-python3}; PARTS=${*:-env precision bench default grid lockstep lockstep-grid agreement}
SIZES=${GRID_SIZES:-20,50,100,150,200,250,300,350,400,450,500,1000}; EXTRA=${GRID_EXTRA:-}
mkdir -p "$OUT"
# The offline bundle's tar rewrites the target of the link ner_lightning/conf -> ../conf: point it back.
[ -f ner_lightning/conf/config.yaml ] || ln -sfn ../conf ner_lightning/conf
$PY -c "import torch; assert torch.cuda.is_available(), 'the GPU check needs a GPU (a CUDA build of torch: docs/gpu_and_cluster.md)'" || exit 1
part() { echo "== $1 ($(date -u +%T))"; }
phases() {  # each cell's seconds by phase, from its results.json
  $PY -c "import json, sys, pathlib
for f in sorted(pathlib.Path(sys.argv[1]).glob('*/results.json'), key=lambda f: int(f.parent.name.split('_')[0])):
    r = json.loads(f.read_text()); print(f.parent.name.split('_')[0], {k: round(v, 1) for k, v in r.get('phase_s', {}).items()})" "$1" | tee "$2"
}
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
        trainer=gpu logger=csv trainer.enable_progress_bar=false hydra.sweep.dir=/tmp/gpu_check/grid_row_sample $EXTRA
      $PY -m ner_lightning.sweep status /tmp/gpu_check/grid_row_sample --cells | tee "$OUT/grid_row_sample.txt"
      phases /tmp/gpu_check/grid_row_sample "$OUT/grid_row_sample_phases.txt" ;;
    lockstep) part lockstep
      timeout 240 $PY benchmarks/lockstep_step.py --device cuda --models ${LOCKSTEP_MODELS:-tiny,minilm} --cells 8,32 --precisions 32,bf16 \
        --out "$OUT/lockstep_step.json" ;;
    lockstep-grid) part lockstep-grid  # CE (a family that stacks): each size's 8 partitions, parallel then lockstep
      [ -f conf/hydra/launcher/lockstep.yaml ] || { echo "no lockstep launcher in this commit"; continue; }
      for launcher in parallel lockstep; do
        TIMEFORMAT="$launcher: wall %R s"
        time (timeout 300 $PY -m ner_lightning.run -m loss=ce size=$SIZES partition=0,1,2,3,4,5,6,7 \
          hydra/launcher=$launcher trainer=gpu trainer.precision=32-true logger=csv trainer.enable_progress_bar=false \
          hydra.sweep.dir=/tmp/gpu_check/ce_$launcher $EXTRA 2>&1 | grep -v INFO)
        $PY -m ner_lightning.sweep status /tmp/gpu_check/ce_$launcher | tee "$OUT/ce_$launcher.txt"
        phases /tmp/gpu_check/ce_$launcher "$OUT/ce_${launcher}_phases.txt"
      done ;;
    agreement) part agreement  # 16 MiniLM CE cells (size 50) under parallel and lockstep: paired test-F1 differences
      timeout 420 $PY benchmarks/lockstep_agreement.py --extra "trainer=gpu trainer.precision=32-true $EXTRA" --alone parallel \
        --out "$OUT/lockstep_agreement.json" ;;
    *) echo "unknown part $p"; exit 2 ;;
  esac
done
echo "== done ($(date -u +%T))"
