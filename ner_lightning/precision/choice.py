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
import json
import logging
import os
import time
from pathlib import Path

import torch

from ner_lightning.precision.measure import (
    ROUNDS,
    SAFE,
    batch_shapes,
    candidates,
    device_label,
    flags_choice,
    judge,
    machine_load,
    measure_rounds,
)

log = logging.getLogger("ner_lightning")
_memo: dict[str, dict] = {}
ENV = "NER_LIGHTNING_PRECISION"  # untrusted choices of a parent process, by key (JSON)


def cache_path() -> Path:
    return Path(os.environ.get("NER_LIGHTNING_CACHE") or Path.home() / ".cache" / "ner_lightning") / "precision.json"


def _key(device_name: str, model: dict, names: list[str]) -> str:
    encoder = {k: model.get(k) for k in ("name_or_path", "random_init", "tokenizer")}
    return json.dumps(
        {
            "device": device_name,
            "torch": torch.__version__,
            "encoder": encoder,
            "batch": batch_shapes(device_name.startswith("cuda")),
            "candidates": names,
        },
        sort_keys=True,
        default=str,
    )


def recorded(accelerator: str, model: dict) -> dict | None:
    """What this process measured or read for the encoder (for results.json), or None."""
    return _memo.get(_key(device_label(accelerator), model, candidates(accelerator)[0]))


def calibration(accelerator: str, model: dict, force: bool = False) -> dict:
    """The choice for training and evaluation (see the module docstring): this process's, a
    parent's untrusted one, the cache's, or measured now (``force``: measured now, replacing the
    cached entry only with a trusted measurement)."""
    names, why = candidates(accelerator)
    device_name = device_label(accelerator)
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
    figures = ", ".join(
        f"{n} train {m['train_tok_s']:,.0f} / eval {m['eval_tok_s']:,.0f} tok/s" for n, m in measured.items()
    )
    if verdict["trusted"]:
        entry = {
            "train": verdict["train"],
            "eval": verdict["eval"],
            "measured": measured,
            "why": f"measured ({why}) in {seconds:.1f} s, {ROUNDS} interleaved rounds, paired ratios to fp32",
        }
        from ner_lightning.results import write_json_atomic

        write_json_atomic(path, {**_read(path), key: entry})
        log.info(
            "precision measured on %s: %s -> training %s, evaluation %s (cached in %s)",
            device_name,
            figures,
            entry["train"],
            entry["eval"],
            path,
        )
        return entry
    previous = _read(path).get(key)
    fallback = previous or {"train": SAFE, "eval": SAFE, "measured": None}
    entry = {
        **fallback,
        "why": (
            f"{'the cached entry' if previous else 'the safe choice'}: the measurement here "
            f"could not be trusted ({'; '.join(verdict['doubts'])}), not cached"
        ),
        "untrusted": {"measured": measured, "doubts": verdict["doubts"]},
    }
    log.warning(
        "precision: the measurement on %s cannot be trusted (%s; %s); using %s: training %s, evaluation %s. "
        "Not cached: measure again on an idle machine (python -m ner_lightning.precision measure --force)",
        device_name,
        "; ".join(verdict["doubts"]),
        figures,
        "the cached entry" if previous else "the safe choice",
        entry["train"],
        entry["eval"],
    )
    os.environ[ENV] = json.dumps({**_inherited(), key: entry})  # the processes this one starts agree with it
    return entry


def decided() -> dict[str, dict]:
    """Every choice this process made or read, by key: a sweep records them in its manifest."""
    return {key: dict(entry) for key, entry in _memo.items()}


def pin(choices: dict[str, dict]) -> None:
    """Use ``choices`` (a resumed sweep's, as :func:`decided` gave them) for the keys this process has
    not decided yet, and pass them on to the processes it starts: a sweep's cells keep the precision
    their identity was composed with, and a resume measures nothing. A key names the device, CPU and
    torch version: on another machine nothing matches and the precision is chosen anew."""
    fresh = {
        k: v for k, v in choices.items() if k not in _memo and isinstance(v, dict) and "train" in v and "eval" in v
    }
    if fresh:
        _memo.update(fresh)
        os.environ[ENV] = json.dumps({**_inherited(), **fresh})


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
    assert isinstance(node, dict)
    return calibration(str(accelerator), node)[stage]


# --- command line ------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m ner_lightning.precision",
        description=(
            "The measured-precision cache: show its entries, measure an encoder again, or clear it. "
            "measure exits 3 when its measurement could not be trusted (nothing cached)."
        ),
    )
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
            print(
                f"- {k['device']} | torch {k['torch']} | {k['encoder']['name_or_path']}: training {entry['train']}, "
                f"evaluation {entry['eval']}\n  {entry.get('why', '')}"
            )
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
    model = OmegaConf.to_container(node, resolve=True)
    assert isinstance(model, dict)
    entry = calibration(args.accelerator, model, force=args.force)
    print(f"training {entry['train']}, evaluation {entry['eval']}: {entry['why']}")
    return 0 if "untrusted" not in entry else 3
