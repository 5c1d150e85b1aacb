# ner_lightning — set-up, runs and tests. `make help` lists the targets.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# The CPU build of torch (an unpinned torch pulls a CUDA build of several GB). For a GPU, a CUDA
# build from PyTorch's index (docs/gpu_and_cluster.md):
#   make install TORCH_INDEX=https://download.pytorch.org/whl/cu128
TORCH_SPEC ?= torch==2.13.0
TORCH_INDEX ?=
STAMP  := $(VENV)/.installed

.PHONY: help install run sweep lint test test-fast bench gpu-check slurm-check clean
help:  ## list targets
	@grep -E '^[a-z-]+:.*##' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q "$(TORCH_SPEC)" $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	$(BIN)/python -m pip install -q -e ".[test]"
	# libauc's wheel declares torchvision, torch_geometric, ogb ... that its losses and
	# optimizers never import: install it alone and check that what we use imports.
	$(BIN)/python -m pip install -q --no-deps "libauc==2.0.1"
	$(BIN)/python -c "from libauc.losses import AUCMLoss, CompositionalAUCLoss; from libauc.optimizers import PESG, PDSCA"
	touch $(STAMP)

install: $(STAMP)  ## create .venv and install everything (minutes)

run: install  ## the default job: CE, MiniLM, real CoNLL-2003, size 50, partition 0
	$(BIN)/python -m ner_lightning.run

sweep: install  ## the 2-cell example grid: loss=ce x size=20,50
	$(BIN)/python -m ner_lightning.run -m loss=ce size=20,50

lint: install  ## ruff (lint and format check) and mypy over the package; rules in pyproject.toml
	$(BIN)/ruff check ner_lightning hydra_plugins
	$(BIN)/ruff format --check ner_lightning hydra_plugins
	$(BIN)/mypy

test: lint  ## the lint checks, then the whole test suite (incl. the slow multirun tests)
	$(BIN)/python -m pytest -q -n auto

test-fast: install  ## tests without the subprocess multiruns
	$(BIN)/python -m pytest -q -n auto -m "not slow"

bench: install  ## one CE cell vs the raw encoder limit, a plain loop and HF Trainer: ratios (docs/benchmarks.md)
	$(BIN)/python -m pip install -q -e ".[bench]"
	$(BIN)/python benchmarks/bench_ce.py $(if $(BENCH_OUT),--out $(BENCH_OUT))

GPU_OUT ?= multirun/gpu-check
gpu-check: install  ## (a GPU machine; parts within 570 s in all) a lockstep group of MiniLM cells in bf16 and fp32, lockstep vs parallel on the AUC-2T Table 2 shape, lockstep vs alone test F1; JSON in $(GPU_OUT)
	$(BIN)/python -m pip install -q -e ".[bench]"
	PY=$(BIN)/python bash benchmarks/gpu_check/run.sh $(GPU_OUT)

slurm-check: install  ## (root) start a one-node SLURM here, run the 4-cell grid via local and hydra/launcher=slurm
	bash benchmarks/slurm_localhost.sh
	$(BIN)/python benchmarks/launchers.py compare --launchers local,slurm

clean:  ## remove run outputs (keeps .venv)
	find multirun -mindepth 1 -maxdepth 1 ! -name README.md -exec rm -rf {} +
