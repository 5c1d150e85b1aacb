"""``benchmarks/bench_ce.py`` (``make bench``): the limit's timed steps do no host work, every
contender runs in every interleaved round, and the verdict refuses a framework faster than its
limit. With the tiny encoder on a toy corpus (the figures themselves mean nothing here)."""
from __future__ import annotations

import collections
import json
import sys

import pytest
import torch

from ner_lightning.config import REPO_ROOT
from tests.host_syncs import count_conversions

sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
import bench_ce  # noqa: E402


def _toy(toy_data_dir) -> list[str]:
    return [f"paths.data_dir={toy_data_dir}", "dataset.name=toy", "dataset.dir=${paths.data_dir}/toy",
            "trainer=cpu", "trainer.precision=32-true", "callbacks.eval_precision.precision=32-true",
            "data.batch_size=4", "data.eval_batch_size=2"]


def _encoder_and_data(tmp_path, toy_data_dir, epochs: int):
    """The benchmark's tiny encoder and its data module, set up, on the toy corpus."""
    from hydra.utils import instantiate

    args = bench_ce._arguments(["--model", "tiny", "--size", "8", "--epochs", str(epochs), *_toy(toy_data_dir)])
    cfg = bench_ce._config(args, tmp_path)
    encoder = instantiate(cfg.model)
    dm = instantiate(cfg.data, tokenizer=encoder.tokenizer)
    dm.setup("fit")
    return encoder, dm


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_the_limits_timed_steps_make_no_conversion_and_no_data_sized_operation(tmp_path, toy_data_dir, precision):
    args = bench_ce._arguments(["--model", "tiny", "--size", "8", "--epochs", "1", *_toy(toy_data_dir)])
    limit = bench_ce.LimitInputs(bench_ce._config(args, tmp_path))
    encoder = limit.encoder
    head = torch.nn.Linear(encoder.hidden_size, limit.n_labels)
    opt = bench_ce._fastest_adamw([*encoder.parameters(), *head.parameters()], lr=1e-3)
    batches = [b for epoch in limit.train_epochs["framework"] for b in epoch]
    assert len(batches) > 1 and len(limit.test_batches) > 1
    where = collections.Counter()
    encoder.pack = True  # the framework's batches run packed, by their plans
    with count_conversions(where):
        for b in batches:
            bench_ce.train_step(encoder, head, opt, precision, b)
        encoder.eval()
        encoder.pack = True  # evaluation decides per batch whether to pack, from the plan's shapes (host data)
        with torch.inference_mode():
            for b in limit.test_batches:
                bench_ce.eval_step(encoder, b)
    assert where == collections.Counter(), where
    # the control: the same step given a batch without its plan asks the device for the lengths
    b = dict(batches[0], pack=None)
    encoder.train()
    encoder.pack = True
    with count_conversions() as counts:
        bench_ce.train_step(encoder, head, opt, precision, b)
    assert counts["tolist"] >= 1


def test_a_limit_batch_selects_the_real_words_as_the_mask_does(tmp_path, toy_data_dir):
    from ner_lightning.data.alignment import collate_features

    encoder, dm = _encoder_and_data(tmp_path, toy_data_dir, epochs=1)
    batch = collate_features(dm.features["train"][:4], encoder.tokenizer.pad_token_id)
    limit = bench_ce.limit_batch(batch, torch.device("cpu"))
    grid = torch.arange(batch["word_mask"].numel()).view(batch["word_mask"].shape)
    assert torch.equal(grid.flatten()[limit["flat"]], grid[batch["word_mask"]])
    assert torch.equal(limit["gold"], batch["labels"].gather(1, batch["word_starts"])[batch["word_mask"]])


@pytest.mark.parametrize("ratio, expected", [
    ({"train_vs_limit": 1.02, "eval_vs_limit": 0.9}, "faster than the limit"),
    ({"train_vs_limit": 0.9, "eval_vs_limit": 0.5}, "below 75%"),
    ({"train_vs_limit": 0.9, "eval_vs_limit": 1.0}, None),
])
def test_the_verdict_refuses_a_framework_faster_than_its_limit(ratio, expected):
    failed = bench_ce.verdict(ratio, {"train": "limit@bf16", "eval": "limit@bf16"}, 0.75)
    assert (failed is None) if expected is None else (expected in failed)


def test_ratios_are_medians_of_the_ratios_within_each_round():
    def run(train_s, eval_s):
        return {"train_s": train_s, "eval_s": eval_s, "train_real_tokens": 100, "eval_real_tokens": 100}

    # the VM slows down from round to round: each round's ratio stays 0.9 (train) and 0.8 (eval)
    limit = [run(1.0, 1.0), run(2.0, 2.0), run(4.0, 4.0)]
    fw = [run(1 / 0.9, 1 / 0.8), run(2 / 0.9, 2 / 0.8), run(4 / 0.9, 4 / 0.8)]
    trainer = [run(2.0, 1.0), run(10.0, 1.0), run(6.0, 3.0)]
    out = bench_ce.ratios({"limit@fp32": limit, "ner_lightning": fw, "hf_trainer": trainer},
                          {"train": "limit@fp32", "eval": "limit@fp32"})
    assert out["train_vs_limit"] == pytest.approx(0.9) and out["eval_vs_limit"] == pytest.approx(0.8)
    assert out["time_vs_hf_trainer"] == pytest.approx((1 / 0.9 + 1 / 0.8) / 3)  # the middle of 0.79, 0.43, 1.05


def test_medians_and_spread_of_the_rounds():
    runs = [{"train_s": s, "eval_s": 1.0, "train_real_tokens": 100, "eval_real_tokens": 50, "test_f1": f}
            for s, f in ((2.0, 0.5), (4.0, 0.7), (1.0, 0.6))]
    row = bench_ce.summarise(runs)
    assert row["train_s"] == 2.0 and row["train_s_range"] == [1.0, 4.0]
    assert row["train_tokens_per_s"] == 50.0 and row["eval_tokens_per_s"] == 50.0 and row["test_f1"] == 0.6


def test_rounds_interleave_every_contender_in_a_rotated_order():
    order = []

    def contender(name):
        def run():
            order.append(name)
            return {"train_s": 1.0, "eval_s": 1.0}
        return run

    runs = bench_ce.rounds({n: contender(n) for n in "abc"}, 5, log=lambda *a, **k: None)
    assert {n: len(r) for n, r in runs.items()} == {"a": 5, "b": 5, "c": 5}
    assert order[:9] == list("abc" "bca" "cab")


def test_the_limit_trains_on_the_framework_s_batches_epoch_by_epoch(tmp_path, toy_data_dir):
    _, dm = _encoder_and_data(tmp_path, toy_data_dir, epochs=2)
    epochs = bench_ce.framework_epochs(dm, 2)
    loader = dm.train_dataloader()
    for epoch, batches in enumerate(epochs):  # what Lightning's loop draws: the sampler set to each epoch
        loader.sampler.set_epoch(epoch)
        assert [b["sentence_index"].tolist() for b in loader] == [b["sentence_index"].tolist() for b in batches]
    assert [b["sentence_index"].tolist() for b in epochs[0]] != [b["sentence_index"].tolist() for b in epochs[1]]


@pytest.mark.slow
def test_make_bench_runs_five_interleaved_rounds_with_the_tiny_encoder(tmp_path, toy_data_dir):
    out = tmp_path / "bench.json"
    rc = bench_ce.main(["--model", "tiny", "--size", "8", "--epochs", "1", "--rounds", "5", "--min-ratio", "0",
                        "--out", str(out), *_toy(toy_data_dir)])
    report = json.loads(out.read_text())
    assert set(report["runs"]) == {"limit@fp32", "limit@bf16", "limit@fp32 sorted", "plain", "hf_trainer", "ner_lightning"}
    assert all(len(r) == 5 for r in report["runs"].values())
    assert rc == (1 if report["verdict"] else 0)
    assert report["best"]["train"].startswith("limit@") and 0 < report["ratios"]["train_vs_limit"]
    assert "deterministic algorithms warn" in report["settings"]
    fw = report["rows"]["ner_lightning"]
    assert fw["precision"] == {"train": "32-true", "eval": "32-true", "measured": fw["precision"]["measured"]}
