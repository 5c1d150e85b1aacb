"""The precision a cell runs in is the fastest measured here, cached; flags only pre-filter."""
import json
import statistics

import pytest
from omegaconf import OmegaConf

from ner_lightning.precision import choice as precision
from ner_lightning.precision import measure as precision_measure

TINY = None


@pytest.fixture
def tiny(toy_cfg):
    return OmegaConf.to_container(toy_cfg("model=tiny").model, resolve=True)


@pytest.fixture
def timing(monkeypatch, flags):
    """A CPU with AVX-512 BF16 on an idle machine whose measured rates the test sets (the same in
    every round unless a test sets per-round lists); counts the measurements per candidate."""
    flags("avx512_bf16")
    rates, calls = {}, []

    def measure_rounds(model, names, device):
        calls.extend(names)
        def rounds(value):
            return list(value) if isinstance(value, (list, tuple)) and len(value) == precision.ROUNDS else \
                [value] * precision.ROUNDS
        return {"rates": {n: {"train": rounds(rates[n][0]), "eval": rounds(rates[n][1])} for n in names},
                "cpu_share": 1.0}

    monkeypatch.setattr(precision, "measure_rounds", measure_rounds)
    monkeypatch.setattr(precision, "machine_load", lambda: (0.1, 2))
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
    measure = precision.measure_rounds

    def slow_measure(model, names, device):  # each measurement sees other rates: a racing pair would disagree
        time.sleep(0.2)
        rates.update({"32-true": (100, 100), "bf16-mixed": (300, 300) if not calls else (50, 50)})
        return measure(model, names, device)

    monkeypatch.setattr(precision, "measure_rounds", slow_measure)
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
    monkeypatch.setattr(precision, "measure_rounds", lambda *a: pytest.fail("measured"))
    assert precision.best_precision("cpu", tiny, "train") == "32-true"


def test_every_cell_of_a_sweep_resolves_the_same_precision(timing, toy_cfg, monkeypatch, tmp_path):
    """The sweeper resolves each cell's config (its identity); all cells read one measurement."""
    rates, calls = timing
    monkeypatch.setenv("NER_LIGHTNING_CACHE", str(tmp_path))
    rates.update({"32-true": (100, 100), "bf16-mixed": (300, 300)})
    cells = [toy_cfg("model=tiny", "trainer.precision='${best_precision:cpu,${model},train}'", f"loss={loss}")
             for loss in ("ce", "crf", "ova_auc")]
    assert {c.trainer.precision for c in cells} == {"bf16-mixed"} and calls == ["32-true", "bf16-mixed"]


def test_the_measurement_runs_the_real_encoder_in_interleaved_timed_rounds(tiny, monkeypatch):
    import time

    monkeypatch.setattr(precision_measure, "ROUND_S", 0.05)
    t0 = time.perf_counter()
    out = precision.measure_rounds(tiny, ["32-true", "bf16-mixed"], "cpu")
    assert time.perf_counter() - t0 >= 2 * 2 * precision.ROUNDS * 0.05  # every round lasted its minimum
    for name in ("32-true", "bf16-mixed"):
        for stage in ("train", "eval"):
            rounds = out["rates"][name][stage]
            assert len(rounds) == precision.ROUNDS and all(0 < v < float("inf") for v in rounds)
    assert 0 < out["cpu_share"]


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
    monkeypatch.setattr(precision, "measure_rounds", lambda *a: pytest.fail("measured"))
    with pytest.raises(ValueError, match="trainer.precision=bf16-mixed callbacks.eval_precision.precision="):
        precision.best_precision("gpu", tiny, "train")
    assert precision.candidates("auto")[0][0] == "32-true"  # auto on a CPU machine: its CPU


@pytest.mark.parametrize("busy", ["load", "cpu_share"])
def test_a_busy_machine_neither_picks_the_slower_precision_nor_caches(timing, tiny, monkeypatch, tmp_path, busy):
    """The issue's case: measured while another job ran, bf16 (really 3x faster) looked slower.
    Busy by the load average or by the process's CPU share: fp32 (the safe choice) is used for
    now, nothing is cached, and the next measurement on an idle machine is cached."""
    rates, calls = timing
    monkeypatch.setenv("NER_LIGHTNING_CACHE", str(tmp_path))
    rates.update({"32-true": (549, 549), "bf16-mixed": (336, 336)})  # what the busy machine measured
    if busy == "load":
        monkeypatch.setattr(precision, "machine_load", lambda: (2.7, 2))
    else:
        real = precision.measure_rounds
        monkeypatch.setattr(precision, "measure_rounds", lambda *a: {**real(*a), "cpu_share": 0.41})
    entry = precision.calibration("cpu", tiny)
    assert (entry["train"], entry["eval"]) == ("32-true", "32-true") and "not cached" in entry["why"]
    assert not (tmp_path / "precision.json").exists()
    monkeypatch.setattr(precision, "_memo", {})  # a later process, the machine idle again
    monkeypatch.delenv(precision.ENV)
    monkeypatch.setattr(precision, "machine_load", lambda: (0.1, 2))
    monkeypatch.setattr(precision, "measure_rounds", timing_rounds(rates))
    rates.update({"32-true": (7375, 7375), "bf16-mixed": (23845, 23845)})  # idle: bf16 3.2x
    assert precision.calibration("cpu", tiny)["eval"] == "bf16-mixed"
    assert json.loads((tmp_path / "precision.json").read_text())  # cached now


def timing_rounds(rates):
    def measure_rounds(model, names, device):
        return {"rates": {n: {"train": [rates[n][0]] * precision.ROUNDS, "eval": [rates[n][1]] * precision.ROUNDS}
                          for n in names}, "cpu_share": 1.0}
    return measure_rounds


def test_rounds_that_disagree_are_not_cached_and_children_inherit_the_choice(timing, tiny, monkeypatch, tmp_path):
    """Launch-bound noise (the H200's calibration batch): the rounds flip between fp32 and bf16.
    Not cached; a process the sweeper starts (same environment) reads the same choice instead of
    measuring again and perhaps choosing otherwise (the cell's identity was composed with it)."""
    rates, calls = timing
    monkeypatch.setenv("NER_LIGHTNING_CACHE", str(tmp_path))
    rates.update({"32-true": (100, [100, 100, 100, 100, 100]), "bf16-mixed": (100, [160, 60, 150, 70, 140])})
    entry = precision.calibration("cpu", tiny)
    assert entry["eval"] == "32-true" and "only 3 of 5 rounds had bf16-mixed within 5% of their fastest" in entry["why"]
    assert not (tmp_path / "precision.json").exists() and len(calls) == 2
    monkeypatch.setattr(precision, "_memo", {})  # a worker process started by this one
    assert precision.calibration("cpu", tiny)["eval"] == "32-true" and len(calls) == 2


def test_two_low_precisions_that_tie_leave_the_measurement_trusted():
    """An H200's evaluation rounds (2026-11-26): bf16 and fp16 both ~3.3x fp32, taking turns as
    the fastest. The choice is within 5 % of every round's fastest: trusted, the faster median
    chosen. A round where fp32 beats the choice by more than 5 % still disagrees."""
    rates = {"32-true": [1_684] * 5, "bf16-mixed": [5_600, 5_500, 5_600, 5_500, 5_500],
             "16-mixed": [5_500, 5_600, 5_500, 5_600, 5_600]}
    entry = precision.judge({"rates": {n: {"train": [100] * 5, "eval": r} for n, r in rates.items()}}, (0.1, 16))
    assert (entry["train"], entry["eval"], entry["trusted"]) == ("32-true", "16-mixed", True)
    rates["32-true"] = [1_684, 7_000, 1_684, 7_000, 1_684]  # fp32 the fastest in two rounds: doubtful
    entry = precision.judge({"rates": {n: {"train": [100] * 5, "eval": r} for n, r in rates.items()}}, (0.1, 16))
    assert not entry["trusted"] and f"eval: only 3 of 5 rounds had {entry['eval']} within 5%" in entry["doubts"][0]


def test_candidates_are_compared_round_by_round_not_by_unpaired_medians():
    """A 2-core Xeon with AMX (2026-11-27) whose speed drifted between rounds: bf16 the fastest in
    4 of 5 rounds, yet fp32's median rate the higher (6,222 vs 3,000 tok/s). The median of the
    per-round ratios chooses bf16, and 4 agreeing rounds trust it."""
    rates = {"32-true": [6_222, 6_500, 7_000, 2_000, 1_500], "bf16-mixed": [7_000, 3_000, 8_000, 2_500, 1_800]}
    assert statistics.median(rates["32-true"]) > statistics.median(rates["bf16-mixed"])
    entry = precision.judge({"rates": {n: {"train": [100] * 5, "eval": r} for n, r in rates.items()}}, (0.1, 16))
    assert (entry["eval"], entry["trusted"]) == ("bf16-mixed", True)
    assert entry["measured"]["bf16-mixed"]["eval_vs_fp32"] == pytest.approx(8_000 / 7_000, abs=1e-3)


def test_measure_force_keeps_the_cached_entry_when_the_new_measurement_is_untrusted(timing, tiny, monkeypatch,
                                                                                     tmp_path):
    rates, calls = timing
    monkeypatch.setenv("NER_LIGHTNING_CACHE", str(tmp_path))
    rates.update({"32-true": (100, 100), "bf16-mixed": (300, 300)})
    assert precision.calibration("cpu", tiny)["train"] == "bf16-mixed"
    before = (tmp_path / "precision.json").read_text()
    monkeypatch.setattr(precision, "machine_load", lambda: (5.0, 2))
    rates.update({"bf16-mixed": (30, 30)})
    entry = precision.calibration("cpu", tiny, force=True)
    assert entry["train"] == "bf16-mixed" and "the cached entry" in entry["why"] and len(calls) == 4
    assert (tmp_path / "precision.json").read_text() == before
    monkeypatch.setattr(precision, "machine_load", lambda: (0.1, 2))
    rates.update({"bf16-mixed": (90, 90)})  # idle and really slower now (say, another torch): replaced
    assert precision.calibration("cpu", tiny, force=True)["train"] == "32-true"
    assert "32-true" in (tmp_path / "precision.json").read_text()


def test_the_command_shows_measures_and_clears_the_cache(timing, monkeypatch, tmp_path, capsys):
    rates, calls = timing
    monkeypatch.setenv("NER_LIGHTNING_CACHE", str(tmp_path))
    rates.update({"32-true": (1465, 10183), "bf16-mixed": (1065, 5995)})
    assert precision.main(["measure", "--model", "tiny", "--accelerator", "cpu"]) == 0
    assert "training 32-true, evaluation 32-true" in capsys.readouterr().out
    assert precision.main(["show"]) == 0
    shown = capsys.readouterr().out
    assert "1 entry" in shown and "tiny-random-bert: training 32-true" in shown and "10,183" in shown
    assert precision.main(["clear"]) == 0 and not (tmp_path / "precision.json").exists()


def test_the_test_session_never_writes_the_users_cache():
    """conftest points the cache at a folder of its own whatever the user set."""
    import os
    import tempfile
    from pathlib import Path

    from tests.conftest import USER_CACHE

    session = Path(os.environ["NER_LIGHTNING_CACHE"])
    assert session.is_relative_to(Path(tempfile.gettempdir())) and session.name.startswith("ner_lightning_cache_")
    assert USER_CACHE is None or Path(USER_CACHE) != session
