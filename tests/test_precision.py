"""The precision a cell runs in is the fastest measured here, cached; flags only pre-filter."""
import json

import pytest
from omegaconf import OmegaConf

from ner_lightning import precision

TINY = None


@pytest.fixture
def tiny(toy_cfg):
    return OmegaConf.to_container(toy_cfg("model=tiny").model, resolve=True)


@pytest.fixture
def timing(monkeypatch, flags):
    """A CPU with AVX-512 BF16 whose measured rates the test sets; counts the measurements."""
    flags("avx512_bf16")
    rates, calls = {}, []

    def measure(model, name, device):
        calls.append(name)
        return {"train_tok_s": rates[name][0], "eval_tok_s": rates[name][1]}

    monkeypatch.setattr(precision, "measure", measure)
    return rates, calls


@pytest.fixture
def flags(monkeypatch):
    from ner_lightning import hardware

    def set_flags(*names):
        monkeypatch.setattr(hardware, "cpu_flags", lambda: frozenset(names))
    return set_flags


def test_bf16_slower_than_fp32_means_fp32_and_faster_means_bf16(timing, tiny, monkeypatch, tmp_path):
    rates, calls = timing
    monkeypatch.setenv("NER_LIGHTNING_CACHE", str(tmp_path / "slow"))
    rates.update({"32-true": (1465, 10183), "bf16-mixed": (1065, 5995)})  # the Intel Xeon of the issue
    assert (precision.best_precision("cpu", tiny, "train"), precision.best_precision("cpu", tiny, "eval")) == (
        "32-true", "32-true")
    monkeypatch.setattr(precision, "_memo", {})
    monkeypatch.setenv("NER_LIGHTNING_CACHE", str(tmp_path / "fast"))
    rates.update({"32-true": (1603, 8553), "bf16-mixed": (2760, 22586)})  # this AMD EPYC
    assert precision.best_precision("cpu", tiny, "train") == "bf16-mixed"
    monkeypatch.setattr(precision, "_memo", {})
    monkeypatch.setenv("NER_LIGHTNING_CACHE", str(tmp_path / "tie"))
    rates.update({"32-true": (1000, 1000), "bf16-mixed": (1030, 1030)})  # within timing noise: fp32
    assert precision.best_precision("cpu", tiny, "eval") == "32-true"


def test_a_machine_measures_once_and_reads_the_cache_after(timing, tiny, monkeypatch, tmp_path):
    rates, calls = timing
    monkeypatch.setenv("NER_LIGHTNING_CACHE", str(tmp_path))
    rates.update({"32-true": (100, 100), "bf16-mixed": (300, 300)})
    assert precision.best_precision("cpu", tiny, "train") == "bf16-mixed" and calls == ["32-true", "bf16-mixed"]
    monkeypatch.setattr(precision, "_memo", {})  # another process on the same machine
    assert precision.best_precision("cpu", tiny, "eval") == "bf16-mixed" and len(calls) == 2
    (entry,) = json.loads((tmp_path / "precision.json").read_text()).values()
    assert entry["measured"]["bf16-mixed"]["train_tok_s"] == 300 and entry["train"] == "bf16-mixed"


def test_two_processes_measuring_at_once_measure_once_and_agree(timing, tiny, monkeypatch, tmp_path):
    """Two sweeps started together on a machine with no entry: the second waits for the first's
    measurement and reads it (threads stand in for processes: each opens the lock on its own)."""
    import threading
    import time

    rates, calls = timing
    monkeypatch.setenv("NER_LIGHTNING_CACHE", str(tmp_path))
    measure = precision.measure

    def slow_measure(model, name, device):  # each measurement sees other rates: a racing pair would disagree
        time.sleep(0.2)
        rates.update({"32-true": (100, 100), "bf16-mixed": (300, 300) if len(calls) < 2 else (50, 50)})
        return measure(model, name, device)

    monkeypatch.setattr(precision, "measure", slow_measure)
    chosen = []

    def sweep():
        chosen.append(precision.calibration("cpu", tiny)["train"])
        precision._memo.clear()  # the other "process" has a memo of its own

    threads = [threading.Thread(target=sweep) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert chosen == ["bf16-mixed", "bf16-mixed"] and calls == ["32-true", "bf16-mixed"]


def test_without_native_bf16_nothing_is_measured(flags, tiny, monkeypatch):
    flags("avx2")
    monkeypatch.setattr(precision, "measure", lambda *a: pytest.fail("measured"))
    assert precision.best_precision("cpu", tiny, "train") == "32-true"


def test_every_cell_of_a_sweep_resolves_the_same_precision(timing, toy_cfg, monkeypatch, tmp_path):
    """The sweeper resolves each cell's config (its identity); all cells read one measurement."""
    rates, calls = timing
    monkeypatch.setenv("NER_LIGHTNING_CACHE", str(tmp_path))
    rates.update({"32-true": (100, 100), "bf16-mixed": (300, 300)})
    cells = [toy_cfg("model=tiny", "trainer.precision='${best_precision:cpu,${model},train}'", f"loss={loss}")
             for loss in ("ce", "crf", "ova_auc")]
    assert {c.trainer.precision for c in cells} == {"bf16-mixed"} and calls == ["32-true", "bf16-mixed"]


def test_the_measurement_runs_the_real_encoder(tiny):
    figures = precision.measure(tiny, "32-true", "cpu")
    assert set(figures) == {"train_tok_s", "eval_tok_s"} and all(0 < v < float("inf") for v in figures.values())


def test_processes_with_other_thread_counts_read_the_same_choice(timing, tiny, monkeypatch, tmp_path):
    """A sweep composes its cells in one process and runs them in workers with fewer threads:
    the machine's measurement is one entry, so a noisy second measurement in a worker can never
    give the cell another precision than the one its identity was composed with."""
    import torch

    rates, calls = timing
    monkeypatch.setenv("NER_LIGHTNING_CACHE", str(tmp_path))
    monkeypatch.setattr(precision, "_memo", {})
    rates.update({"32-true": (100, 100), "bf16-mixed": (200, 200)})
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        composed = precision.best_precision("cpu", tiny, "train")
        monkeypatch.setattr(precision, "_memo", {})  # a worker process
        rates.update({"bf16-mixed": (50, 50)})  # what a second measurement on a busy machine might say
        torch.set_num_threads(1)
        assert precision.best_precision("cpu", tiny, "train") == composed == "bf16-mixed"
    finally:
        torch.set_num_threads(before)
    assert len(calls) == 2  # fp32 and bf16, measured once


def test_a_gpu_precision_is_never_measured_on_a_cpu(tiny, monkeypatch):
    """A SLURM sweep composes cells where it is submitted: a login node without a GPU must not
    give `trainer=gpu` cells a precision measured on its CPU (the nodes would run another one)."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(precision, "measure", lambda *a: pytest.fail("measured"))
    with pytest.raises(ValueError, match="trainer.precision=bf16-mixed callbacks.eval_precision.precision="):
        precision.best_precision("gpu", tiny, "train")
    assert precision.candidates("auto")[0][0] == "32-true"  # auto on a CPU machine: its CPU
