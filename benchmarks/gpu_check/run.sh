#!/usr/bin/env bash
# The GPU check: what a lent GPU machine (15 minutes, start-up included) must tell us, most
# important first, in parts whose time limits add up to 570 s (`benchmarks/gpu_check/run.sh OUT limits` prints
# them), so that unpacking the offline bundle and the check fit one 10-minute command. Each part
# writes its JSON into OUT as soon as it ends, so a lend cut short keeps what ran. `make gpu-check`
# runs it after installing; on a machine without a package index, inside the offline bundle (with
# wandb's packages on PYTHONPATH for the default logger): bash .offline/run.sh bash
# benchmarks/gpu_check/run.sh OUT [PART ...].
#   env        the machine, the versions, the commit
#   group      (a) a lockstep group of 8 CE cells (size 50) trains, selects and tests, in bf16-mixed
#              and in 32-true, under the default logger (W&B offline and CSV): group_<precision>.json
#   grid       (b) a complete slice of the AUC-2T paper's Table 2: sizes 50 and 500 x 30 partitions,
#              every cell to its end (GRID_EPOCHS=10, early stopping on), under lockstep, then under
#              the parallel launcher: grid_<launcher>.json, each with the Table 2 grid (12 sizes x 30
#              partitions x 4 methods) extrapolated from its slice, size by size, at the slice's epochs
#              and at the full protocol's 30 (summary.py). GRID_LAUNCHERS lists them, each
#              launcher[:override...] ("lockstep:hydra.launcher.groups_per_gpu=4")
#   agreement  (c, asked by name) 16 CE cells (size 50) under lockstep and alone (parallel): paired
#              test-F1 differences: agreement.json
# The same script runs on a CPU (CHECK_DEVICE=cpu, the tiny encoder: tests/test_gpu_check.py), so on
# a GPU only the device changes. CHECK_MODEL, CHECK_EXTRA (overrides of every run), GROUP_SIZE,
# GRID_SIZES, GRID_PARTITIONS and AGREE_PARTITIONS shape it.
set -u
OUT=${1:?usage: benchmarks/gpu_check/run.sh OUT [PART ...]}; shift
PY=${PY:-python3}; PARTS=${*:-env group grid}
DEVICE=${CHECK_DEVICE:-gpu}; MODEL=${CHECK_MODEL:-minilm}; EXTRA=${CHECK_EXTRA:-}
GROUP_SIZE=${GROUP_SIZE:-50}
GRID_SIZES=${GRID_SIZES:-50,500}
GRID_PARTITIONS=${GRID_PARTITIONS:-$(seq -s, 0 29)}
GRID_EPOCHS=${GRID_EPOCHS:-10}
GRID_LAUNCHERS=${GRID_LAUNCHERS:-lockstep parallel}
AGREE_PARTITIONS=${AGREE_PARTITIONS:-0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15}
# Seconds: env (a cold import of torch, transformers and Lightning took over 10 s on an H200
# machine); each precision of group; each launcher of grid; each side of agreement; each summary.
# (A process that ignores SIGTERM at its limit is killed 5 s later.) TOTAL: the default parts.
L_ENV=20; L_GROUP=65; L_GRID=170; L_AGREE=75; L_SUMMARY=5
TOTAL=$((L_ENV + 2 * L_GROUP + 2 * L_GRID + 4 * L_SUMMARY))
export WANDB_MODE=offline WANDB_SILENT=true TOKENIZERS_PARALLELISM=false
mkdir -p "$OUT"
# The offline bundle's tar rewrites the target of the link ner_lightning/conf -> ../conf: point it back.
[ -f ner_lightning/conf/config.yaml ] || ln -sfn ../conf ner_lightning/conf
if [ "$DEVICE" = gpu ] && [ "$PARTS" != limits ]; then
  $PY -c "import torch; assert torch.cuda.is_available(), 'the GPU check needs a GPU (a CUDA build of torch: docs/gpu_and_cluster.md)'" || exit 1
fi
WORK=${CHECK_WORK:-/tmp/gpu_check}; rm -rf "$WORK"; mkdir -p "$WORK"
COMMON="trainer=$DEVICE model=$MODEL trainer.enable_progress_bar=false $EXTRA"
part() { echo "== $1 ($(date -u +%T))"; }
count() { tr ',' '\n' <<< "$1" | wc -l; }
# run LIMIT SWEEP ARGS...: a multirun bounded by LIMIT seconds; prints its wall seconds and exit code.
run() {
  local limit=$1 sweep=$2; shift 2
  local t0; t0=$(date +%s%N)
  timeout -k 5 "$limit" $PY -m ner_lightning.run -m "$@" hydra.sweep.dir="$sweep" > "$sweep.log" 2>&1
  local rc=$? ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  printf '%d.%03d %d\n' $((ms / 1000)) $((ms % 1000)) "$rc"
}
summary() {  # summary SWEEP OUT.json WALL RC [EXPECTED]
  timeout "$L_SUMMARY" $PY benchmarks/gpu_check/summary.py "$1" "$2" --wall "$3" --exit "$4" ${5:+--expected "$5"}
}
for p in $PARTS; do
  case $p in
    limits) echo "limits: env $L_ENV s, group 2x$L_GROUP s, grid 2x$L_GRID s, summaries 4x$L_SUMMARY s: $TOTAL s in all (agreement, asked by name: 2x$L_AGREE+20 s)" ;;
    env) part env
      timeout "$L_ENV" bash -c "{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>/dev/null || lscpu | grep 'Model name'; nproc
        $PY -c 'import torch, transformers, pytorch_lightning as pl; print(\"torch\", torch.__version__, \"| transformers\", transformers.__version__, \"| lightning\", pl.__version__)'
        $PY -c 'import wandb; print(\"wandb\", wandb.__version__)' 2>&1 | tail -1
        git rev-parse --short HEAD 2>/dev/null || true; }" | tee "$OUT/env.txt" ;;
    group) part group  # (a)
      for precision in bf16-mixed 32-true; do
        read -r wall rc < <(run "$L_GROUP" "$WORK/group_$precision" loss=ce size="$GROUP_SIZE" partition=0,1,2,3,4,5,6,7 \
          hydra/launcher=lockstep trainer.precision=$precision callbacks.eval_precision.precision=$precision \
          logger=default trainer.max_epochs=3 trainer.min_epochs=1 data.dev_size=500 $COMMON)
        summary "$WORK/group_$precision" "$OUT/group_$precision.json" "$wall" "$rc" 8
      done ;;
    grid) part grid  # (b)
      expected=$(( $(count "$GRID_SIZES") * $(count "$GRID_PARTITIONS") ))
      for spec in $GRID_LAUNCHERS; do
        launcher=${spec%%:*}; overrides=$([ "$spec" = "$launcher" ] || tr ':' ' ' <<< "${spec#*:}")
        name=grid_$(sed 's/hydra\.launcher\.//g; s/:/_/g; s/=/-/g' <<< "$spec")
        read -r wall rc < <(run "$L_GRID" "$WORK/$name" loss=auc2t size="$GRID_SIZES" partition="$GRID_PARTITIONS" \
          hydra/launcher=$launcher $overrides trainer.precision=bf16-mixed callbacks.eval_precision.precision=bf16-mixed \
          logger=csv trainer.max_epochs=$GRID_EPOCHS trainer.min_epochs=3 data.dev_size=500 $COMMON)
        summary "$WORK/$name" "$OUT/$name.json" "$wall" "$rc" "$expected"
      done ;;
    agreement) part agreement  # (c)
      timeout -k 5 $((2 * L_AGREE + 20)) $PY benchmarks/lockstep_agreement.py --grid "loss=ce size=$GROUP_SIZE partition=$AGREE_PARTITIONS" \
        --extra "trainer.precision=bf16-mixed callbacks.eval_precision.precision=bf16-mixed data.dev_size=500 trainer.max_epochs=3 trainer.min_epochs=1 $COMMON" \
        --alone parallel --timeout "$L_AGREE" --root "$WORK/agreement" --out "$OUT/agreement.json" ;;
    *) echo "unknown part $p"; exit 2 ;;
  esac
done
echo "== done ($(date -u +%T))"
