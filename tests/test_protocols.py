"""In-process runs of ner_lightning.cell.protocols (one cell, tuning) on the hand-written toy corpus."""
import json

import pytest
import pytorch_lightning as pl
from hydra.utils import instantiate

from ner_lightning.models.encoder import EncoderLoadError, TransformerEncoder
from tests.helpers import train


def test_fast_dev_run(toy_cfg):
    cfg = toy_cfg("+trainer.fast_dev_run=true", "callbacks=none")
    results = train(cfg)
    assert results["status"] == "ok" and results["test"]["micro"]["support"] > 0


def test_run_writes_results_and_partition(toy_cfg, tmp_path):
    cfg = toy_cfg("trainer.max_epochs=3")
    results = train(cfg)
    on_disk = json.loads((tmp_path / "run" / "results.json").read_text())
    assert on_disk["test"] == results["test"]
    for key in ("config", "partition", "dev", "test", "epochs", "wall_time_s", "throughput", "best_epoch"):
        assert key in on_disk
    assert on_disk["epochs"] == 3 and on_disk["best_epoch"] in (0, 1, 2)
    assert on_disk["dev_monitor"] == on_disk["dev"]["micro"]["f1"]  # what main() returns to a sweeper
    grid = on_disk["grid"]  # flat keys, also the W&B config's top level
    assert grid["loss"] == "ce" and grid["model"] == "tiny" and grid["size"] == 8 and grid["partition"] == 0
    assert grid["label_scheme"] == "typed" and grid["head_lr"] == 5e-5  # CE's default: the head at optimizer.lr
    assert grid["trainer_max_epochs"] == "3"  # a command-line override, as given
    assert set(on_disk["test"]["per_type"]) <= {"LOC", "MISC", "ORG", "PER"}
    assert on_disk["throughput"]["train_tokens_per_s"] > 0 and on_disk["throughput"]["eval_tokens"] > 0
    partition = json.loads((tmp_path / "run" / "partition.json").read_text())
    assert len(partition["sentence_ids"]) == 8 and partition["sha256"] == on_disk["partition"]["sha256"]
    assert not (tmp_path / "run" / "checkpoints" / "best.ckpt").exists()  # keep_checkpoint=false
    assert (tmp_path / "run" / "csv" / "metrics.csv").is_file()


def test_same_config_and_seed_give_same_metrics(toy_cfg):
    a = train(toy_cfg("trainer.max_epochs=2"))
    b = train(toy_cfg("trainer.max_epochs=2"))
    assert a["test"] == b["test"] and a["dev"] == b["dev"]


def test_init_seed_varies_training_with_the_partition_fixed(toy_cfg, tmp_path):
    import csv

    def first_losses(*extra):
        res = train(toy_cfg("trainer.max_epochs=1", *extra))
        rows = list(csv.DictReader((tmp_path / "run" / "csv" / "metrics.csv").open()))
        return res, [r["train/loss_step"] for r in rows if r.get("train/loss_step")]

    a, la = first_losses()  # init_seed defaults to seed (42)
    b, lb = first_losses("init_seed=42")
    c, lc = first_losses("init_seed=7")
    assert la == lb and a["test"] == b["test"]
    assert c["partition"]["sha256"] == a["partition"]["sha256"] and lc != la
    assert c["compute"]["init_seed"] == 7 and c["config"]["data"]["seed"] == 42


def test_tuning_trial_averages_dev_over_partitions_and_never_tests(toy_cfg, tmp_path):
    from ner_lightning.cell.protocols import tune

    value = tune(toy_cfg("tune_partitions=[0,1]", "evaluate_test=false", "trainer.max_epochs=1"))
    res = [json.loads((tmp_path / "run" / f"partition{p}" / "results.json").read_text()) for p in (0, 1)]
    assert res[0]["partition"]["sha256"] != res[1]["partition"]["sha256"]
    assert all(r["test"] is None for r in res)
    assert value == pytest.approx((res[0]["dev_monitor"] + res[1]["dev_monitor"]) / 2)
    record = json.loads((tmp_path / "run" / "tune.json").read_text())
    assert record["mean"] == pytest.approx(value) and set(record["partitions"]) == {"0", "1"}


def test_dev_every_k_epochs_selects_among_evaluated_epochs(toy_cfg):
    """trainer.check_val_every_n_epoch=2 (a protocol option: fewer candidates for selection)
    evaluates after epochs 1 and 3 only; early-stopping patience then counts evaluations."""
    from hydra.utils import instantiate

    cfg = toy_cfg("trainer.max_epochs=4", "trainer.min_epochs=4", "trainer.check_val_every_n_epoch=2")
    encoder = instantiate(cfg.model)
    dm = instantiate(cfg.data, tokenizer=encoder.tokenizer)
    module = instantiate(cfg.loss, encoder=encoder, label_set=dm.label_set)
    trainer = instantiate(cfg.trainer, callbacks=[], logger=False, enable_checkpointing=False)
    trainer.fit(module, datamodule=dm)
    assert [h["epoch"] for h in module.history] == [1, 3]


def test_evaluation_batches_are_padded_once_and_reused(toy_cfg):
    from hydra.utils import instantiate

    cfg = toy_cfg()
    encoder = instantiate(cfg.model)
    dm = instantiate(cfg.data, tokenizer=encoder.tokenizer)
    dm.setup("fit")
    first, again = list(dm.val_dataloader()), list(dm.val_dataloader())
    assert all(a["input_ids"] is b["input_ids"] for a, b in zip(first, again))
    lengths = [int(m.sum(1).max()) for m in (b["attention_mask"] for b in first)]
    assert lengths == sorted(lengths) and sum(len(b["input_ids"]) for b in first) == len(dm.sentences["dev"])


def test_learns_the_toy_corpus(toy_cfg):
    """A tiny encoder fits 24 toy sentences well enough to find entities in test."""
    cfg = toy_cfg("size=full", "trainer.max_epochs=20", "optimizer.lr=5e-3",
                  "callbacks.early_stopping.patience=20", "data.batch_size=4")
    results = train(cfg)
    assert results["dev"]["micro"]["f1"] > 0.5


def test_diverging_run_fails_instead_of_reporting(toy_cfg, tmp_path, monkeypatch):
    from ner_lightning.losses import CrossEntropy

    real = CrossEntropy.per_token
    calls = []

    def diverges_at_third_step(self, logits, targets):
        calls.append(1)
        out = real(self, logits, targets)
        return out * float("nan") if len(calls) >= 3 else out

    monkeypatch.setattr(CrossEntropy, "per_token", diverges_at_third_step)
    with pytest.raises(FloatingPointError, match=r"training loss is nan at epoch 0, step 2: .*lower optimizer.lr"):
        train(toy_cfg("trainer.max_epochs=1", "data.batch_size=2"))
    assert not (tmp_path / "run" / "results.json").exists()


def test_size_larger_than_corpus_is_an_error(toy_cfg):
    with pytest.raises(ValueError, match="size=1000 is larger than toy/train, which has 24 sentences"):
        train(toy_cfg("size=1000"))


def test_missing_encoder_folder_is_a_clear_error(tmp_path):
    with pytest.raises(EncoderLoadError, match="folder not found: .*no_such_model"):
        TransformerEncoder(str(tmp_path / "no_such_model"))


def test_tiny_encoder_refuses_a_name_it_would_ignore(toy_cfg):
    """debug=tiny model.name_or_path=X would train a random BERT while results.json said X."""
    with pytest.raises(Exception, match=r"model.name_or_path=.bert-base-cased. would be ignored: model.random_init"):
        instantiate(toy_cfg("model.name_or_path=bert-base-cased").model)


def test_tiny_encoder_word_states_pick_first_subtokens(toy_cfg):
    import torch

    encoder = instantiate(toy_cfg().model)
    hidden = torch.arange(2 * 5 * 3, dtype=torch.float).view(2, 5, 3)
    starts = torch.tensor([[1, 3], [2, 4]])
    out = encoder.word_states(hidden, starts)
    assert torch.equal(out[0, 1], hidden[0, 3]) and torch.equal(out[1, 0], hidden[1, 2])


@pytest.mark.slow  # a subprocess importing transformers
def test_hub_name_offline_is_a_clear_error():
    import os
    import subprocess
    import sys

    env = dict(os.environ, HF_HUB_OFFLINE="1")
    code = ("from ner_lightning.models.encoder import TransformerEncoder\n"
            "TransformerEncoder('bert-base-cased')")
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert "could not load tokenizer 'bert-base-cased'" in proc.stderr and "model=minilm" in proc.stderr


BUDGET = ("callbacks=batch_budget", "trainer.max_epochs=-1", "trainer.min_epochs=0",
          "trainer.check_val_every_n_epoch=null", "+trainer.val_check_interval=3", "data.batch_size=2")


@pytest.mark.parametrize("loss, steps_per_batch", [("ce", 1), ("comauc2t", 2)])
def test_batch_budget_trains_that_many_batches_across_epochs(toy_cfg, loss, steps_per_batch):
    """callbacks=batch_budget: 7 batches of 4 out of 8 sentences = 3 epochs of 2 batches + 1; dev
    every 3 batches across epoch ends (batches 3, 6) and at the stop (7); the schedule spans the 7
    batches (warm-up, then decay to 0) whatever the optimiser steps per batch (COMAUC-2T takes 2)."""
    from ner_lightning.callbacks import BatchBudget

    cfg = toy_cfg(*BUDGET, "callbacks.batch_budget.batches=7", f"loss={loss}", "data.batch_size=4")
    encoder = instantiate(cfg.model)
    dm = instantiate(cfg.data, tokenizer=encoder.tokenizer)
    module = instantiate(cfg.loss, encoder=encoder, label_set=dm.label_set)
    budget = BatchBudget(batches=7)
    trainer = instantiate(cfg.trainer, callbacks=[budget], logger=False, enable_checkpointing=False)
    trainer.fit(module, datamodule=dm)
    assert module.train_batches == 7 and trainer.global_step == 7 * steps_per_batch
    assert [h["batches"] for h in module.history] == [3, 6, 7]
    assert [h["epoch"] for h in module.history] == [1, 2, 3]
    scheduler = trainer.lr_scheduler_configs[0].scheduler
    assert scheduler.last_epoch == 7 and scheduler.get_last_lr()[0] == 0.0


def test_batch_budget_cell_records_the_selected_batch(toy_cfg):
    results = train(toy_cfg(*BUDGET, "callbacks.batch_budget.batches=5"))
    assert results["compute"]["train_batches"] == 5 and results["epochs"] == 2  # one epoch and the start of a second
    assert results["best_batch"] in (3, 5) and results["test"] is not None


@pytest.mark.parametrize("bad, key", [(("trainer.max_epochs=3",), "trainer.max_epochs=-1"),
                                      (("trainer.min_epochs=2",), "trainer.min_epochs"),
                                      (("trainer.check_val_every_n_epoch=1",), "check_val_every_n_epoch=null")])
def test_batch_budget_refuses_a_trainer_that_would_override_it(toy_cfg, bad, key):
    with pytest.raises(ValueError, match=key.replace(".", r"\.")):
        train(toy_cfg(*BUDGET, *bad))


def test_batch_limited_evaluation_scores_the_sentences_it_saw(toy_cfg):
    """debug=fast on a real corpus: one dev batch of many; the scores cover that batch's sentences."""
    cfg = toy_cfg("+trainer.fast_dev_run=true", "callbacks=none", "data.eval_batch_size=2")
    results = train(cfg)
    assert results["status"] == "ok"
    assert results["test"]["micro"]["support"] > 0 and results["dev"]["micro"]["support"] > 0


def test_a_limited_evaluation_counts_whole_sentences_only():
    """Chunks of three sentences, the first lacking its second word: placed at their words, and
    only the sentences decoded whole counted (their tags come back; the other's spans do not count)."""
    import torch

    from ner_lightning.data.alignment import BatchLayout
    from ner_lightning.models.word_grid import placed_words
    from ner_lightning.span_counts import PredictedTags, SplitCounter, TagCodes

    gold = [["B-PER", "O"], ["O", "O", "B-LOC"], ["O"]]
    codes = TagCodes(["O", "B-PER", "I-PER", "B-LOC", "I-LOC"])
    counter = SplitCounter(codes, gold)
    ids = torch.tensor([[0, 0], [3, 0], [0, 0], [1, 0]])  # rows: (1, 0), (1, 2), (2, 0), (0, 0)
    layout = BatchLayout(words=(2, 1, 1, 1), sentences=(1, 1, 2, 0), offsets=(0, 2, 0, 0), types=(), corpora=(0,) * 4)
    placed = placed_words([(ids, layout)], counter.starts, counter.lengths, 0, codes.outside, "val", True)
    assert placed.seen == [1, 2] and placed.counted.tolist() == [False, False, True, True, True, True]
    assert PredictedTags(counter, placed.tags, placed.seen).as_lists() == [gold[1], gold[2]]
    scores = counter.scores(counter.counts(placed.tags, placed.counted).numpy())
    assert scores["micro"]["support"] == 1 and scores["micro"]["f1"] == 1.0  # PER of sentence 0 not counted
    with pytest.raises(RuntimeError, match="val: predicted 5 words for 6 words"):
        placed_words([(ids, layout)], counter.starts, counter.lengths, 0, codes.outside, "val", False)
    # the placement is kept for the same layout objects (a cached loader), built anew for others
    cache: dict = {}
    args = (counter.starts, counter.lengths, 0, codes.outside, "val", True, cache)
    placed_words([(ids, layout)], *args)
    kept = cache["placement"]
    again = placed_words([(ids + 0, layout)], *args)
    assert cache["placement"] is kept and again.tags.equal(placed.tags)
    other = layout._replace(sentences=(1, 1, 0, 2))  # rows of sentences 0 and 2 swapped
    moved = placed_words([(ids, other)], *args)
    assert cache["placement"] is not kept and moved.tags.tolist() == [0, 0, 0, 0, 3, 1]


def test_a_batch_budget_trainer_without_its_budget_is_refused_naming_it(toy_cfg, tmp_path):
    endless = ("trainer.max_epochs=-1", "trainer.min_epochs=0")  # what trainer=batch_budget sets
    with pytest.raises(ValueError, match="trainer.max_epochs=-1 .* add callbacks=batch_budget"):
        train(toy_cfg(*endless))
    assert not (tmp_path / "run" / "partition.json").exists()  # refused before anything ran
    assert train(toy_cfg(*BUDGET))["global_steps"] > 0
    assert train(toy_cfg(*endless, "+trainer.max_steps=3"))["global_steps"] == 3


def test_step_losses_sum_a_batchs_steps_weigh_batches_by_rows_and_find_the_first_nonfinite():
    import torch

    from ner_lightning.models.step_losses import StepLosses

    kept = StepLosses()
    kept.add(torch.tensor(1.0), batch=0, global_step=0, epoch=0, rows=2)
    kept.add(torch.tensor([0.5]), batch=0, global_step=1, epoch=0, rows=2)  # a second step of batch 0 (libauc shape)
    kept.add(torch.tensor(3.0), batch=1, global_step=2, epoch=0, rows=1)
    assert [loss.item() for _, loss in kept.batches()] == [1.5, 3.0]
    assert kept.epoch_mean(0).item() == pytest.approx((1.5 * 2 + 3.0 * 1) / 3) and kept.epoch_mean(1) is None
    assert kept.first_nonfinite() is None
    kept.add(torch.tensor(float("nan")), batch=2, global_step=3, epoch=0, rows=2)
    kept.add(torch.tensor(float("inf")), batch=3, global_step=4, epoch=0, rows=2)
    assert kept.first_nonfinite().global_step == 3 and kept.first_nonfinite() is None  # each record read once
    assert len(kept.take()) == 4 and kept.steps == []


class MadeUpSection(pl.Callback):
    """A component no part of the framework knows: it declares a results.json section."""

    def __init__(self, field: str):
        self.field = field

    def result_section(self, out_dir) -> dict:
        return {self.field: {"declared by": "a made-up component", "folder": out_dir.name}}


def test_every_section_a_component_declares_reaches_results_json_and_a_clash_is_refused(toy_cfg, tmp_path):
    made_up = "+callbacks.made_up._target_=tests.test_protocols.MadeUpSection"
    results = train(toy_cfg("trainer.max_epochs=1", made_up, "+callbacks.made_up.field=singleaux"))
    on_disk = json.loads((tmp_path / "run" / "results.json").read_text())
    assert results["singleaux"] == on_disk["singleaux"] == {"declared by": "a made-up component", "folder": "run"}
    assert on_disk["throughput"]["train_tokens_per_s"] > 0  # the framework's own sections stay
    with pytest.raises(ValueError, match=r"\['test'\] are filled by the run and also declared by a part"):
        train(toy_cfg("trainer.max_epochs=1", made_up, "+callbacks.made_up.field=test"))
    with pytest.raises(ValueError, match="MadeUpSection.result_section: 'sideways' is not a results.json field"):
        train(toy_cfg("trainer.max_epochs=1", made_up, "+callbacks.made_up.field=sideways"))


def test_best_epoch_is_the_evaluation_model_checkpoint_keeps_in_either_mode():
    """The first evaluation, then each strictly better one; mode=min keeps the lowest; a NaN ranks
    worst (ModelCheckpoint's rule with save_top_k=1)."""
    from ner_lightning.results import best_epoch

    history = [{"epoch": e, "metrics": {"m": v}} for e, v in enumerate([0.5, 0.2, 0.7, 0.2, float("nan"), 0.7])]
    assert best_epoch(history, "m")["epoch"] == 2
    assert best_epoch(history, "m", "min")["epoch"] == 1
    nan_first = [{"epoch": 0, "metrics": {"m": float("nan")}}, {"epoch": 1, "metrics": {"m": 0.9}}]
    assert best_epoch(nan_first, "m", "min")["epoch"] == 1 and best_epoch(nan_first, "m")["epoch"] == 1
    with pytest.raises(ValueError, match="mode='best'"):
        best_epoch(history, "m", "best")


def test_dev_predictions_are_written_once_from_the_selected_evaluation(toy_cfg, monkeypatch):
    """No selection (monitor=null: the final model) and no resume checkpoint: every evaluation is
    the selected one, yet dev.conll is written once, at the end, holding the last one's tags; test once."""
    from ner_lightning.callbacks import predictions

    written = []
    real = predictions.write_conll
    monkeypatch.setattr(predictions, "write_conll", lambda path, *cols: written.append(path.name) or real(path, *cols))
    cfg = toy_cfg("callbacks.model_checkpoint.monitor=null", "callbacks.early_stopping=null",
                  "~callbacks.last_checkpoint", "trainer.max_epochs=3", "trainer.min_epochs=3")
    results = train(cfg)
    assert results["epochs"] == 3 and results["best_epoch"] == 2
    assert written == ["dev.conll", "test.conll"]
    from pathlib import Path

    from ner_lightning.metrics import span_scores

    gold, pred = [[]], [[]]
    for line in (Path(cfg.paths.output_dir) / "predictions" / "dev.conll").read_text().splitlines():
        if not line.strip():
            gold.append([]), pred.append([])
            continue
        gold[-1].append(line.split()[-2]), pred[-1].append(line.split()[-1])
    # the file scores as the selected (final) evaluation scored
    assert span_scores(gold, pred)["micro"] == results["dev"]["micro"]
