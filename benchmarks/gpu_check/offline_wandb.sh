#!/usr/bin/env bash
# Pack wandb and the packages it needs beyond a GPU image's (Python 3.12, x86-64) into
# .whl/wandbsite.tar.xz (about 15 MB; add "/.whl/" to .git/info/exclude and carry .whl), so the GPU
# check's default logger (W&B offline + CSV) runs on a machine with no package index, beside the
# offline bundle (../shared/tools/offline_bundle.sh, which leaves wandb out). There:
#   mkdir -p /tmp/ws && tar -xJf .whl/wandbsite.tar.xz -C /tmp/ws
#   bash .offline/run.sh bash -c 'export PYTHONPATH=$PYTHONPATH:/tmp/ws; bash benchmarks/gpu_check/run.sh $OUT'
# Versions: those of this checkout's .venv where it has them. wandb's parquet reader (10 MB, for
# reading run histories back) is left out: offline logging never loads it.
set -euo pipefail
root=$(git rev-parse --show-toplevel); cd "$root"
py=.venv/bin/python; [ -x $py ] || { echo "no .venv: run make install first"; exit 1; }
version() { $py -m pip show "$1" 2>/dev/null | awk '/^Version/{print "=="$2}'; }
pkgs="wandb cwevals opentelemetry-api opentelemetry-sdk opentelemetry-proto opentelemetry-semantic-conventions
  opentelemetry-exporter-otlp-proto-http opentelemetry-exporter-otlp-proto-common opentelemetry-exporter-http-transport
  opentelemetry-exporter-otlp-common googleapis-common-protos protobuf pydantic pydantic-core annotated-types
  typing-inspection typing-extensions platformdirs xxhash distro sniffio"
specs=$(for p in $pkgs; do echo "$p$(version $p)"; done)
platforms="--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64"
tmp=$(mktemp -d); mkdir -p .whl
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp $platforms -d "$tmp/wheels" $specs
python3 -m pip install -q --no-deps --no-compile --target "$tmp/site" --python-version 3.12 --implementation cp \
  --only-binary=:all: $platforms "$tmp"/wheels/*.whl
rm -f "$tmp"/site/wandb/bin/librust_parquet_ffi.so
tar -C "$tmp/site" -cf - . | xz -T0 -9 > .whl/wandbsite.tar.xz
rm -rf "$tmp"; ls -la .whl/wandbsite.tar.xz
