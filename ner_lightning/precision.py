"""The fastest precision this machine really has for an encoder: measured, not read off CPU flags.

``${best_precision:${trainer.accelerator},${model},train}`` (``trainer.precision``) and ``…,eval}``
(``callbacks.eval_precision.precision``) resolve through :func:`best_precision`:

* flags only pre-filter the candidates — ``32-true`` always; ``bf16-mixed`` on a GPU with bf16 or
  a CPU with AVX-512 BF16 / AMX (emulated bf16 is never worth measuring); ``16-mixed`` on a GPU;
* the candidates take turns (``ROUNDS`` interleaved rounds, A B A B …) of training steps on a
  training-sized batch and of forward passes on an evaluation-sized batch of the actual encoder
  (:func:`batch_shapes`: on a GPU, as large as a cell's evaluation batches),
  each round at least ``ROUND_S`` seconds (the device waited for at its end); a candidate's rate is
  the median over rounds of its rate / fp32's rate in the same round (paired: untouched by the
  machine's speed drifting between rounds), and a low precision wins only when that ratio is at least
  ``MARGIN``;
* a measurement is **trusted** only when the machine was not busy (the 1-minute load average
  below the core count, and on a CPU the process got at least ``MIN_CPU_SHARE`` of its threads'
  time) and in at least ``AGREE`` rounds the choice is within ``MARGIN`` of the round's
  fastest candidate (two low precisions that tie may take turns). An untrusted measurement
  is never cached: the run says why and uses the cached entry if there is one, else ``32-true``;
* a trusted result is cached per (device, CPU model and flags, torch version, encoder, batch
  shapes) in ``$NER_LIGHTNING_CACHE`` or ``~/.cache/ner_lightning/precision.json``: a machine
  measures once, and every cell of a sweep reads the entry the sweeper wrote when it composed the
  grid — whatever its thread count: a cell's precision is always the one its identity was
  composed with. An untrusted choice reaches the processes the sweeper starts through the
  environment (``NER_LIGHTNING_PRECISION``) for the same reason. Measuring holds a lock beside the
  cache (``precision.json.lock``): two sweeps started at once measure once.

``python -m ner_lightning.precision show | measure [--force] | clear`` reads, remeasures or empties
the cache.
"""
from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import logging
import os
import platform
import statistics
import time
from functools import lru_cache
from pathlib import Path

import torch

from ner_lightning import hardware

log = logging.getLogger("ner_lightning")
TRAIN_BATCH = (8, 48)  # sentences x sub-words: data.batch_size, a long CoNLL-2003 batch
EVAL_BATCH = (64, 32)  # data.eval_batch_size, a length-sorted batch of mid-length sentences
ROUNDS = 5  # interleaved rounds per candidate and stage
ROUND_S = 0.5  # seconds a round lasts at least
AGREE = 4  # rounds whose fastest candidate the choice must be within MARGIN of
MIN_CPU_SHARE = 0.75  # CPU: the process's CPU time / (wall time x threads) below this = another job competed
MARGIN = 1.05  # a low precision must be this much faster than fp32 to be chosen
SAFE = "32-true"
DTYPES = {"bf16-mixed": torch.bfloat16, "16-mixed": torch.float16, "32-true": None}
ENV = "NER_LIGHTNING_PRECISION"  # untrusted choices of a parent process, by key (JSON)
_memo: dict[str, dict] = {}


def candidates(accelerator: str) -> tuple[list[str], str]:
    """The precisions worth measuring here and why the others are not."""
    if accelerator in ("gpu", "cuda") and not torch.cuda.is_available():
        raise ValueError(
            f"trainer.accelerator={accelerator} but this process sees no GPU, so the GPU's fastest precision cannot "
            "be measured here (a SLURM sweep composes every cell on the machine it is submitted from, and a cell's "
            "precision is part of its identity). Set it: trainer.precision=bf16-mixed "
            "callbacks.eval_precision.precision=bf16-mixed (or 32-true / 16-mixed; docs/gpu_and_cluster.md), "
            "or submit from a machine with the nodes' GPU")
    if hardware.uses_gpu(accelerator):
        name = torch.cuda.get_device_name()
        if torch.cuda.is_bf16_supported():
            return ["32-true", "bf16-mixed", "16-mixed"], f"{name} has native bf16"
        return ["32-true", "16-mixed"], f"{name} has no bf16: fp16 with loss scaling"
    native = [f for f in hardware.CPU_BF16_FLAGS if f in hardware.cpu_flags()]
    if native:
        return ["32-true", "bf16-mixed"], f"the CPU has {' and '.join(native)}"
    return ["32-true"], ("the CPU has no native bf16 (neither " + " nor ".join(hardware.CPU_BF16_FLAGS)
                         + " in /proc/cpuinfo): emulated bf16 would be slower than fp32")


def flags_choice(accelerator: str = "auto") -> tuple[str, str]:
    """``(Lightning precision, why)`` by the flags alone: the lowest precision worth measuring —
    what ``${best_precision:<accelerator>}`` without a model gives."""
    names, why = candidates(accelerator)
    return names[1] if len(names) > 1 else names[0], why


@lru_cache(maxsize=None)
def _cpu_model() -> str:
    try:
        return next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                    if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


def _device_name(accelerator: str) -> str:
    if hardware.uses_gpu(accelerator):
        return f"cuda:{torch.cuda.get_device_name()}"
    flags = hashlib.sha256(" ".join(sorted(hardware.cpu_flags())).encode()).hexdigest()[:12]
    return f"cpu:{_cpu_model()}:flags {flags}"


def cache_path() -> Path:
    return Path(os.environ.get("NER_LIGHTNING_CACHE") or Path.home() / ".cache" / "ner_lightning") / "precision.json"


# --- measuring -------------------------------------------------------------------------------------
def machine_load() -> tuple[float, int]:
    """(1-minute load average, cores) — a load at or above the core count means other work."""
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = 0.0
    return load, os.cpu_count() or 1


def batch_shapes(gpu: bool) -> dict[str, tuple[int, int]]:
    """The batches the candidates are timed on: ``TRAIN_BATCH``, and the evaluation batch a cell
    runs — ``EVAL_BATCH`` on a CPU; on a GPU as many of its sentences as ``data.eval_batch_tokens``
    holds (``hardware.GPU_EVAL_BATCH_TOKENS``): 64 sentences leave a GPU launch-bound, where every
    precision runs at the same speed and the rounds disagree by noise."""
    rows = hardware.GPU_EVAL_BATCH_TOKENS // EVAL_BATCH[1] if gpu else EVAL_BATCH[0]
    return {"train": TRAIN_BATCH, "eval": (rows, EVAL_BATCH[1])}


def measure_rounds(model: dict, names: list[str], device: str) -> dict:
    """Interleaved timed rounds of every candidate (see the module docstring): ``{"rates":
    {name: {"train": [tok/s per round], "eval": [...]}}, "cpu_share": float | None}``;
    ``cpu_share``: the process's CPU time over wall time x threads (None on a GPU)."""
    from hydra.utils import instantiate

    torch.manual_seed(0)
    encoder = instantiate(model).to(device)
    opt = torch.optim.AdamW(encoder.parameters(), lr=1e-6, fused=True)
    inputs = {stage: torch.randint(1000, 2000, shape, device=device)
              for stage, shape in batch_shapes(device.startswith("cuda")).items()}

    def step(name: str, stage: str) -> None:
        ids = inputs[stage]
        dtype = DTYPES[name]
        with torch.autocast(torch.device(device).type, dtype=dtype, enabled=dtype is not None):
            if stage == "eval":
                with torch.inference_mode():
                    encoder.model(input_ids=ids, attention_mask=torch.ones_like(ids))
                return
            out = encoder.model(input_ids=ids, attention_mask=torch.ones_like(ids)).last_hidden_state
        opt.zero_grad()
        out.float().pow(2).mean().backward()
        opt.step()

    def timed_round(name: str, stage: str) -> float:
        steps, t0 = 0, time.perf_counter()
        while True:
            step(name, stage)
            steps += 1
            if device.startswith("cuda"):
                torch.cuda.synchronize()
            elapsed = time.perf_counter() - t0
            if elapsed >= ROUND_S:
                return steps * inputs[stage].numel() / elapsed

    rates = {name: {"train": [], "eval": []} for name in names}
    wall0, cpu0 = time.perf_counter(), time.process_time()
    for stage in ("train", "eval"):
        encoder.train(stage == "train")
        for name in names:  # warm-up: kernels, autocast caches, allocator
            step(name, stage)
        for r in range(ROUNDS):
            for name in (names if r % 2 == 0 else names[::-1]):  # A B, B A, …: no candidate always first
                rates[name][stage].append(round(timed_round(name, stage), 1))
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    share = None if device.startswith("cuda") else round(cpu / (wall * torch.get_num_threads()), 3)
    return {"rates": rates, "cpu_share": share}


def _choose(rates: dict[str, float]) -> str:
    fp32 = rates["32-true"]
    best = max(rates, key=rates.get)
    return best if rates[best] >= MARGIN * fp32 else "32-true"


def paired_ratios(rates: dict[str, list[float]]) -> dict[str, float]:
    """Each candidate's median over rounds of its rate / fp32's rate *in the same round*: rounds
    follow each other within seconds, so a round's ratio is untouched by the machine speeding up or
    slowing down between rounds, which moves unpaired medians (fp32 is 1.0)."""
    fp32 = rates["32-true"]
    return {name: statistics.median(r / f for r, f in zip(rs, fp32)) for name, rs in rates.items()}


def judge(measured: dict, load: tuple[float, int]) -> dict:
    """The choice for training and evaluation from :func:`measure_rounds`, each candidate's median
    rates (``measured``), and whether the choice can be trusted (``trusted``, with the reasons it
    cannot: ``doubts``)."""
    rates, doubts, entry = measured["rates"], [], {}
    medians: dict[str, dict[str, float]] = {name: {} for name in rates}
    for stage in ("train", "eval"):
        median = {name: statistics.median(r[stage]) for name, r in rates.items()}
        paired = paired_ratios({name: r[stage] for name, r in rates.items()})
        entry[stage] = _choose(paired)
        rounds = [{name: r[stage][k] for name, r in rates.items()} for k in range(ROUNDS)]
        # a round agrees when the choice is within MARGIN of its fastest candidate: two low
        # precisions that tie (bf16 and fp16 on a GPU) may take turns without making it doubtful
        agree = sum(MARGIN * rnd[entry[stage]] >= max(rnd.values()) for rnd in rounds)
        if agree < AGREE:
            doubts.append(f"{stage}: only {agree} of {ROUNDS} rounds had {entry[stage]} within {MARGIN - 1:.0%} of "
                          f"their fastest (fastest per round: {', '.join(_choose(rnd) for rnd in rounds)})")
        for name, value in median.items():
            medians[name][f"{stage}_tok_s"] = round(value, 1)
            medians[name][f"{stage}_vs_fp32"] = round(paired[name], 3)
    loadavg, cores = load
    if loadavg >= cores:
        doubts.append(f"load average {loadavg:.2f} on {cores} cores before measuring")
    share = measured.get("cpu_share")
    if share is not None and share < MIN_CPU_SHARE:
        doubts.append(f"the process got {share:.0%} of its threads' CPU time: another job competed")
    return {**entry, "measured": medians, "trusted": not doubts, "doubts": doubts}


def _key(device_name: str, model: dict, names: list[str]) -> str:
    encoder = {k: model.get(k) for k in ("name_or_path", "random_init", "tokenizer")}
    return json.dumps({"device": device_name, "torch": torch.__version__, "encoder": encoder,
                       "batch": batch_shapes(device_name.startswith("cuda")), "candidates": names},
                      sort_keys=True, default=str)


def recorded(accelerator: str, model: dict) -> dict | None:
    """What this process measured or read for the encoder (for results.json), or None."""
    return _memo.get(_key(_device_name(accelerator), model, candidates(accelerator)[0]))


def calibration(accelerator: str, model: dict, force: bool = False) -> dict:
    """The choice for training and evaluation (see the module docstring): this process's, a
    parent's untrusted one, the cache's, or measured now (``force``: measured now, replacing the
    cached entry only with a trusted measurement)."""
    names, why = candidates(accelerator)
    device_name = _device_name(accelerator)
    key = _key(device_name, model, names)
    if key in _memo and not force:
        return _memo[key]
    if len(names) == 1:
        _memo[key] = {"train": names[0], "eval": names[0], "why": why, "measured": None}
        return _memo[key]
    path = cache_path()
    cached = None if force else _inherited().get(key) or _read(path).get(key)
    if cached is None:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path.with_name(path.name + ".lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # another process measuring this key: wait, then read its entry
            cached = (None if force else _read(path).get(key)) or _measure(path, key, model, names, why, device_name)
    _memo[key] = cached
    return cached


def _measure(path: Path, key: str, model: dict, names: list[str], why: str, device_name: str) -> dict:
    """Measure every candidate; cache a trusted result, else fall back (never cached)."""
    device = "cuda" if device_name.startswith("cuda") else "cpu"
    load = machine_load()
    t0 = time.perf_counter()
    verdict = judge(measure_rounds(model, names, device), load)
    seconds = time.perf_counter() - t0
    measured = verdict["measured"]
    figures = ", ".join(f"{n} train {m['train_tok_s']:,.0f} / eval {m['eval_tok_s']:,.0f} tok/s" for n, m in measured.items())
    if verdict["trusted"]:
        entry = {"train": verdict["train"], "eval": verdict["eval"], "measured": measured,
                 "why": f"measured ({why}) in {seconds:.1f} s, {ROUNDS} interleaved rounds, paired ratios to fp32"}
        from ner_lightning.results import write_json_atomic

        write_json_atomic(path, {**_read(path), key: entry})
        log.info("precision measured on %s: %s -> training %s, evaluation %s (cached in %s)", device_name, figures,
                 entry["train"], entry["eval"], path)
        return entry
    previous = _read(path).get(key)
    fallback = previous or {"train": SAFE, "eval": SAFE, "measured": None}
    entry = {**fallback, "why": (f"{'the cached entry' if previous else 'the safe choice'}: the measurement here "
                                 f"could not be trusted ({'; '.join(verdict['doubts'])}), not cached"),
             "untrusted": {"measured": measured, "doubts": verdict["doubts"]}}
    log.warning("precision: the measurement on %s cannot be trusted (%s; %s); using %s: training %s, evaluation %s. "
                "Not cached: measure again on an idle machine (python -m ner_lightning.precision measure --force)",
                device_name, "; ".join(verdict["doubts"]), figures,
                "the cached entry" if previous else "the safe choice", entry["train"], entry["eval"])
    os.environ[ENV] = json.dumps({**_inherited(), key: entry})  # the processes this one starts agree with it
    return entry


def _inherited() -> dict:
    try:
        return json.loads(os.environ.get(ENV) or "{}")
    except ValueError:
        return {}


def _read(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def best_precision(accelerator: str, model=None, stage: str = "train") -> str:
    """Resolver ``${best_precision:<accelerator>,${model},train|eval}``; without a model
    (``${best_precision:<accelerator>}``), the flags' rule (:func:`flags_choice`)."""
    if model is None:
        return flags_choice(str(accelerator))[0]
    if stage not in ("train", "eval"):
        raise ValueError(f"${{best_precision:…,{stage}}}: the stage is train or eval")
    from omegaconf import DictConfig, OmegaConf

    node = OmegaConf.to_container(model, resolve=True) if isinstance(model, DictConfig) else dict(model)
    return calibration(str(accelerator), node)[stage]


# --- command line ------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m ner_lightning.precision", description=(
        "The measured-precision cache: show its entries, measure an encoder again, or clear it. "
        "measure exits 3 when its measurement could not be trusted (nothing cached)."))
    ap.add_argument("command", choices=("show", "measure", "clear"))
    ap.add_argument("--model", default="minilm", help="conf/model/<name> to measure (default: minilm)")
    ap.add_argument("--accelerator", default="auto", help="cpu, gpu or auto (default)")
    ap.add_argument("--force", action="store_true", help="measure even if an entry is cached")
    args = ap.parse_args(argv)
    path = cache_path()
    if args.command == "clear":
        existed = path.exists()
        path.unlink(missing_ok=True)
        print(f"{'removed' if existed else 'no cache at'} {path}")
        return 0
    if args.command == "show":
        entries = _read(path)
        print(f"{path}: {len(entries)} entr{'y' if len(entries) == 1 else 'ies'}")
        for key, entry in entries.items():
            k = json.loads(key)
            print(f"- {k['device']} | torch {k['torch']} | {k['encoder']['name_or_path']}: training {entry['train']}, "
                  f"evaluation {entry['eval']}\n  {entry.get('why', '')}")
            for name, m in (entry.get("measured") or {}).items():
                print(f"    {name}: train {m['train_tok_s']:,.0f} tok/s, eval {m['eval_tok_s']:,.0f} tok/s")
        return 0
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    from hydra import compose, initialize_config_dir
    from hydra.errors import MissingConfigException
    from omegaconf import OmegaConf

    from ner_lightning.config import CONFIG_DIR

    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        try:
            node = compose("config", overrides=[f"model={args.model}"]).model
        except MissingConfigException:
            ap.error(f"--model {args.model}: no {CONFIG_DIR / 'model' / args.model}.yaml")
    entry = calibration(args.accelerator, OmegaConf.to_container(node, resolve=True), force=args.force)
    print(f"training {entry['train']}, evaluation {entry['eval']}: {entry['why']}")
    return 0 if "untrusted" not in entry else 3


if __name__ == "__main__":
    raise SystemExit(main())
