"""Multi-corpus schemes (MUNCHABLES): batch schedules, per-corpus heads and label sets, phases."""
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from hydra.errors import InstantiationException
from hydra.utils import instantiate
from omegaconf import open_dict

from ner_lightning.cell.build import build_datamodule, build_module
from ner_lightning.cell.steps import Cell
from ner_lightning.data.corpus import LabelSet
from ner_lightning.data.multi_corpus import MultiCorpusDataModule, singleaux_dev_scores
from ner_lightning.data.schedules import alternate_types, check_scheme, epoch_schedule, extract
from tests.helpers import train

B = 4
BAD_CONFIG = (ValueError, InstantiationException)  # the data module's ValueError, as instantiate wraps it
SIZES = [10, 7, 13, 5]  # main, then three auxiliaries


def corpora(batch):
    return {c for c, _ in batch}


# --- schedules (Algorithms 1-4) ------------------------------------------------------------------
def test_singleaux_alternates_an_auxiliary_batch_then_a_main_batch():
    sched = epoch_schedule("singleaux", [10, 7], B, seed=1, epoch=0)
    assert len(sched) == 2 * 3  # ITERATION = ceil(10 / 4) main batches, each after one aux batch
    assert [corpora(b) for b in sched] == [{1}, {0}] * 3
    main = [i for b in sched[1::2] for _, i in b]
    assert sorted(main) == list(range(10))  # one pass over the main training data
    aux = [i for b in sched[0::2] for _, i in b]
    assert len(aux) == 3 * B and all(len(b) == B for b in sched[0::2])
    assert sorted(aux[:7]) == list(range(7)) and len(set(aux[7:])) == 5  # extract: without replacement, then a new pass


def test_munch_conc_draws_auxiliary_batches_from_all_auxiliaries_concatenated():
    sched = epoch_schedule("munch_conc", SIZES, B, seed=1, epoch=0)
    assert [corpora(b) <= {1, 2, 3} for b in sched[0::2]] == [True] * 3
    assert all(corpora(b) == {0} for b in sched[1::2])
    drawn = [x for b in sched[0::2] for x in b]
    assert len(set(drawn)) == len(drawn) == 12  # 12 of the 25 pooled examples, no repeat within a pass
    mixed = epoch_schedule("munch_conc", SIZES, 8, seed=1, epoch=0)
    assert any(len(corpora(b)) > 1 for b in mixed[0::2])  # a batch can mix corpora


def test_munch_iter_switches_the_auxiliary_every_epoch():
    for epoch in range(7):
        sched = epoch_schedule("munch_iter", SIZES, B, seed=1, epoch=epoch)
        assert all(corpora(b) == {1 + epoch % 3} for b in sched[0::2]), epoch
        assert all(corpora(b) == {0} for b in sched[1::2])


def test_munch_stack_uses_the_phase_auxiliary_whatever_the_epoch():
    for phase in range(3):
        for epoch in (0, 5, 11):
            sched = epoch_schedule("munch_stack", SIZES, B, seed=1, epoch=epoch, phase=phase)
            assert all(corpora(b) == {1 + phase} for b in sched[0::2])
    with pytest.raises(ValueError, match="phase 3"):
        epoch_schedule("munch_stack", SIZES, B, seed=1, epoch=0, phase=3)


def test_multitask_takes_every_example_of_every_corpus_once_in_mixed_order():
    sched = epoch_schedule("multitask", SIZES, B, seed=1, epoch=0)
    assert all(len(corpora(b)) == 1 for b in sched)  # a batch belongs to one corpus (one head)
    seen = Counter(x for b in sched for x in b)
    assert set(seen.values()) == {1} and len(seen) == sum(SIZES)
    assert len(sched) == sum(-(-n // B) for n in SIZES)
    first = [next(iter(corpora(b))) for b in sched]
    assert first != sorted(first)  # corpora interleaved, not one after the other


def test_schedules_depend_only_on_seed_epoch_and_phase():
    a = epoch_schedule("munch_iter", SIZES, B, seed=3, epoch=2)
    assert a == epoch_schedule("munch_iter", SIZES, B, seed=3, epoch=2)
    assert a != epoch_schedule("munch_iter", SIZES, B, seed=3, epoch=5)  # same auxiliary (2 % 3 == 5 % 3), new draw
    assert a != epoch_schedule("munch_iter", SIZES, B, seed=4, epoch=2)
    drawn = extract(3, 7, np.random.default_rng(0))
    assert sorted(drawn[:3]) == sorted(drawn[3:6]) == [0, 1, 2] and len(drawn) == 7


def test_scheme_arguments_are_checked():
    with pytest.raises(ValueError, match="exactly one auxiliary"):
        check_scheme("singleaux", 2)
    with pytest.raises(ValueError, match="needs auxiliary corpora"):
        check_scheme("munch_iter", 0)
    with pytest.raises(ValueError, match="must be one of"):
        check_scheme("munch", 1)


def test_random_order_keeps_corpora_of_one_entity_type_apart():
    types = {"a": {"Disease"}, "b": {"Disease"}, "c": {"Gene"}, "d": {"Species"}, "e": {"Chemical"}}
    for seed in range(20):
        order = alternate_types(list(types), types, seed)
        assert sorted(order) == sorted(types)
        assert all(not (types[x] & types[y]) for x, y in zip(order, order[1:]))
    assert len({tuple(alternate_types(list(types), types, s)) for s in range(20)}) > 1
    with pytest.raises(ValueError, match="multitask.aux_order=listed"):
        alternate_types(["a", "b"], types, 0)


# --- corpora, label sets and heads ---------------------------------------------------------------


def _data(cfg):
    from ner_lightning.models.encoder import TransformerEncoder

    encoder = instantiate(cfg.model)
    assert isinstance(encoder, TransformerEncoder)
    dm = build_datamodule(cfg, encoder.tokenizer)
    dm.setup("fit")
    return encoder, dm


def test_each_corpus_keeps_its_labels_and_gets_its_own_head(multi_cfg):
    cfg = multi_cfg("multitask=munch_conc", "loss=crf")
    encoder, dm = _data(cfg)
    assert dm.corpus_names == ["main", "bc2gm", "linnaeus"]
    assert dm.aux_label_sets == {"bc2gm": LabelSet(["GENE"]), "linnaeus": LabelSet(["Species"])}
    module = build_module(cfg, encoder, dm)
    assert list(module.heads) == ["main", "bc2gm", "linnaeus"]
    assert module.heads["main"].crf.num_tags == 9 and module.heads["bc2gm"].crf.num_tags == 3
    ids = {"O": 0, "B-GENE": 1, "I-GENE": 2}  # bc2gm's own label ids
    sents = dm.aux_sentences["bc2gm"]["train"]
    for f in dm.aux_features["bc2gm"]["train"]:
        assert [label for label in f.labels if label >= 0] == [ids[t] for t in sents[f.sentence_index].tags]
    assert len(dm.aux_sentences["bc2gm"]["train"]) == 6  # aux_size
    encoder_ids = {id(p) for p in module.encoder.parameters()}
    assert all(id(p) not in encoder_ids for h in module.heads.values() for p in h.parameters())


def test_main_partition_is_the_single_corpus_partition(multi_cfg, toy_cfg):
    _, single = _data(toy_cfg("partition=1"))
    for scheme in ("multitask", "singleaux", "munch_stack"):
        aux = ["aux=[bc2gm]"] if scheme == "singleaux" else []
        _, dm = _data(multi_cfg(f"multitask={scheme}", "partition=1", *aux))
        assert dm.partition_record()["sha256"] == single.partition_record()["sha256"]
        assert [s.id for s in dm.sentences["train"]] == [s.id for s in single.sentences["train"]]


def test_auxiliary_sample_is_paired_with_the_partition(multi_cfg):
    _, a = _data(multi_cfg("multitask=munch_conc", "partition=0"))
    _, b = _data(multi_cfg("multitask=munch_iter", "partition=0", "multitask.aux_order=listed"))
    _, c = _data(multi_cfg("multitask=munch_conc", "partition=1"))
    ids = lambda dm: [s.id for s in dm.aux_sentences["bc2gm"]["train"]]  # noqa: E731
    assert ids(a) == ids(b) != ids(c)


def test_mixed_batch_routes_each_row_to_its_corpus_head(multi_cfg):
    cfg = multi_cfg("multitask=munch_conc", "loss=ce")
    encoder, dm = _data(cfg)
    module = build_module(cfg, encoder, dm)
    module.eval()
    items = [(0, dm.features["train"][0]), (1, dm.aux_features["bc2gm"]["train"][0]),
             (2, dm.aux_features["linnaeus"]["train"][1])]
    from ner_lightning.data.multi_corpus import collate_corpora

    batch = collate_corpora(items, encoder.tokenizer.pad_token_id)
    states, labels, mask = module.word_states(batch), module.word_labels(batch), batch["word_mask"]
    expected = sum(module.heads[name].loss(states[[i]], labels[[i]], mask[[i]]) / 3
                   for i, name in enumerate(["main", "bc2gm", "linnaeus"]))
    assert torch.allclose(module.training_loss(batch), expected)
    decoded = [row[m].tolist() for row, m in zip(module.decode(batch), mask)]
    assert max(decoded[1]) <= 2 and max(decoded[2]) <= 2  # GENE / Species heads: O, B, I only
    for i, name in enumerate(["main", "bc2gm", "linnaeus"]):
        alone = module.heads[name].decode(states[[i]], mask[[i]], batch["layout"].words[i : i + 1])[0]
        assert decoded[i] == alone[mask[i]].tolist()


def test_families_without_a_head_per_corpus_are_refused(multi_cfg):
    cfg = multi_cfg("multitask=munch_conc", "loss=auc2t")
    encoder, dm = _data(cfg)
    with pytest.raises(ValueError, match="no per-corpus head"):
        build_module(cfg, encoder, dm)


def test_bad_auxiliary_lists_are_errors(multi_cfg):
    with pytest.raises(ValueError, match="'nosuchcorpus' has no dataset config"):
        multi_cfg("multitask=munch_conc", "aux=[bc2gm,nosuchcorpus]")
    with pytest.raises(ValueError, match="lists a corpus twice"):
        multi_cfg("multitask=munch_conc", "aux=[bc2gm,bc2gm]")
    with pytest.raises(BAD_CONFIG, match="exactly one auxiliary"):
        _data(multi_cfg("multitask=singleaux"))
    with pytest.raises(BAD_CONFIG, match="aux_sort_from"):
        _data(multi_cfg("multitask=munch_iter_sort"))


# --- whole runs ----------------------------------------------------------------------------------
def test_multi_corpus_run_scores_main_and_auxiliary_test_sets(multi_cfg):
    cfg = multi_cfg("multitask=multitask", "loss=crf")
    results = train(cfg)
    # each test set scored with its own head against all its gold spans (counted by hand above):
    # GENE 3 (BRCA1, p53 protein, ABL2), Species 3 (Mice, zebrafish, Human)
    assert {c: s["micro"]["support"] for c, s in results["test_aux"].items()} == {"bc2gm": 3, "linnaeus": 3}
    assert set(results["test_aux"]["bc2gm"]["per_type"]) == {"GENE"}
    assert set(results["test_aux"]["linnaeus"]["per_type"]) == {"Species"}
    assert results["test"]["micro"]["support"] > 0 and results["phases"] is None
    record = json.loads((Path(cfg.paths.output_dir) / "partition.json").read_text())
    assert record["multi_corpus"]["auxiliaries"]["bc2gm"]["test_sentences"] == 3
    # MultiTask epoch = every batch of every corpus: 8/8 + 6/8 + 6/8 rounded up = 3 steps
    assert results["global_steps"] == 3 * results["epochs"]


class _Stub:
    def __init__(self, **kw):
        self.__dict__.update(kw)


def _stack_trainer(*callbacks, n_aux=3):
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: max(0.0, 1 - step / 10))
    dm = _Stub(scheme="munch_stack", aux_names=[f"aux{k}" for k in range(n_aux)], phase=0, has_phases=True)
    dm.use_phase = lambda phase: MultiCorpusDataModule.use_phase(dm, phase)  # the data module's own rule
    return _Stub(datamodule=dm, callbacks=list(callbacks), current_epoch=0, should_stop=False,
                 lr_scheduler_configs=[_Stub(scheduler=sched)], optimizers=[opt])


def _module(callbacks, loss):
    """The module as the callbacks' setup leaves it: the phases own the schedule
    (``use_schedule``), the annealing sets the rate (``use_rate_policy``)."""
    from ner_lightning.callbacks import AnnealOnPlateau, ScheduleHorizon

    return _Stub(epoch_loss=lambda: loss,
                 schedule_owner=next((c for c in callbacks if isinstance(c, ScheduleHorizon)), None),
                 rate_policy=next((c for c in callbacks if isinstance(c, AnnealOnPlateau)), None))


def _epochs(trainer, callbacks, losses):
    """Feed one main-corpus epoch loss per epoch; the auxiliary phase of each epoch."""
    used = []
    for epoch, loss in enumerate(losses):
        trainer.current_epoch = epoch
        used.append(trainer.datamodule.phase)
        module = _module(callbacks, loss)
        for cb in callbacks:
            cb.on_train_epoch_end(trainer, module)
        if trainer.should_stop:
            break
    return used


def test_munch_stack_moves_on_when_the_main_loss_converges():
    from ner_lightning.callbacks import AuxiliaryPhases

    cb = AuxiliaryPhases(patience=2, min_epochs=3, max_epochs=6)
    trainer = _stack_trainer(cb)
    sched = trainer.lr_scheduler_configs[0].scheduler
    for _ in range(5):
        sched.optimizer.step()
        sched.step()
    losses = [5, 4, 4.5, 4.2,  # phase 0: minimum 4 at its 2nd epoch, then 2 epochs without -> converged
              3, 2.9, 2.8, 2.0, 2.5, 2.6,  # phase 1: new minima until its 4th epoch; max_epochs first
              9, 8, 7, 6, 5, 4]  # phase 2: always improving -> ends at max_epochs 6, the run stops
    used = _epochs(trainer, [cb], losses)
    assert used == [0] * 4 + [1] * 6 + [2] * 6
    assert [(p["auxiliary"], p["epochs"]) for p in cb.history] == [("aux0", 4), ("aux1", 6), ("aux2", 6)]
    assert cb.history[0]["ended_by"].startswith("main loss") and cb.history[2]["ended_by"] == "6 epochs"
    assert trainer.should_stop
    assert sched.optimizer.param_groups[0]["lr"] == 1.0 and sched.last_epoch == 0  # schedule restarted


def test_munch_stack_phase_needs_min_epochs_and_annealing_decides_under_the_paper_schedule():
    from ner_lightning.callbacks import AnnealOnPlateau, AuxiliaryPhases

    cb = AuxiliaryPhases(patience=1, min_epochs=3, max_epochs=50)
    trainer = _stack_trainer(cb, n_aux=2)
    assert _epochs(trainer, [cb], [1, 2, 2, 2, 2]) == [0, 0, 0, 1, 1]  # no move before min_epochs

    anneal = AnnealOnPlateau(factor=0.5, patience=2, min_lr=0.2)
    cb = AuxiliaryPhases(patience=1, min_epochs=1, max_epochs=50)
    trainer = _stack_trainer(anneal, cb, n_aux=2)
    anneal.on_train_start(trainer, None)
    # flat loss: halved after 2 bad epochs each time: 1 -> .5 (epoch 2) -> .25 (4) -> .125 (6) < 0.2
    used = _epochs(trainer, [anneal, cb], [1.0] * 20)
    assert used[:8] == [0] * 7 + [1]
    # lr 1 -> .5 (epoch 2) -> .25 (4) -> .125 (6) < 0.2: the phase ends and the rate starts over
    assert cb.history[0]["ended_by"] == "learning rate below 0.2"
    assert [p["epochs"] for p in cb.history] == [7, 7] and len(used) == 14 and trainer.should_stop


def test_anneal_on_plateau_halves_after_patience_bad_epochs_and_stops_below_min_lr():
    from ner_lightning.callbacks import AnnealOnPlateau

    anneal = AnnealOnPlateau(factor=0.5, patience=4, min_lr=0.1)
    trainer = _stack_trainer(anneal)
    anneal.on_train_start(trainer, None)
    lrs = []
    for epoch, loss in enumerate([3, 2, 2, 2, 2, 1.5, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2]):
        trainer.current_epoch = epoch
        anneal.on_train_epoch_end(trainer, _module([anneal], loss))
        lrs.append(trainer.optimizers[0].param_groups[0]["lr"])
        if trainer.should_stop:
            break
    # epochs 2-4 bad (3), 5 improves; 6-9 bad: halve at 9; 10-13 bad: 0.25 at 13; 14-17: 0.125 ...
    assert lrs[:9] == [1.0] * 9
    assert lrs[9] == 0.5 and lrs[13] == 0.25
    assert not trainer.should_stop  # 0.25 >= 0.1


def test_munch_stack_phase_ends_at_max_epochs_and_restarts_the_schedule(multi_cfg):
    cfg = multi_cfg("multitask=munch_stack", "multitask.aux_order=listed", "multitask.phases.max_epochs=2",
                    "multitask.phases.patience=50", "loss.warmup_ratio=0.5")
    results = train(cfg)
    assert [(p["auxiliary"], p["epochs"], p["ended_by"]) for p in results["phases"]] == [
        ("bc2gm", 2, "2 epochs"), ("linnaeus", 2, "2 epochs")]
    assert results["epochs"] == 4  # trainer.max_epochs=2 does not bound the phases


def test_sorted_order_reads_singleaux_main_dev_scores_of_the_same_partition(multi_cfg, tmp_path):
    from omegaconf import OmegaConf

    sweep = tmp_path / "singleaux"
    for k, (aux, partition, dev) in enumerate([("bc2gm", 0, 0.6), ("linnaeus", 0, 0.4), ("linnaeus", 1, 0.9)]):
        cfg = multi_cfg("multitask=singleaux", f"aux=[{aux}]", f"partition={partition}")
        (sweep / str(k)).mkdir(parents=True)
        (sweep / str(k) / "results.json").write_text(json.dumps(
            {"config": OmegaConf.to_container(cfg, resolve=True), "dev_monitor": dev}))
    _, dm = _data(multi_cfg("multitask=munch_iter_sort", f"aux_sort_from=[{sweep}]"))
    assert dm.aux_names == ["linnaeus", "bc2gm"]  # ascending: the most helpful auxiliary last
    assert dm.partition_record()["multi_corpus"]["order"] == ["linnaeus", "bc2gm"]
    with pytest.raises(BAD_CONFIG, match=r"no SingleAux result for auxiliaries \['bc2gm'\]"):
        _data(multi_cfg("multitask=munch_stack_sort", f"aux_sort_from=[{sweep}]", "partition=1"))


def test_train_on_dev_adds_the_dev_sentences_and_tests_the_final_model(toy_cfg):
    with pytest.raises(ValueError, match="train_on_dev"):
        train(toy_cfg("data.train_on_dev=true"))
    cfg = toy_cfg("data.train_on_dev=true", "callbacks.model_checkpoint.monitor=null", "callbacks.early_stopping=null",
                  "trainer.max_epochs=3")
    _, dm = _data(cfg)
    assert [s.id for s in dm.sentences["train"]] == [s.id for s in dm.partition_sentences + dm.sentences["dev"]]
    results = train(cfg)
    assert results["training_set"]["after"]["sentences"] == 8 + 4
    assert results["best_epoch"] == 2  # the final model, whatever dev says


def test_frozen_encoder_trains_only_the_heads(toy_cfg):
    cfg = toy_cfg("model.freeze=true", "loss=crf")
    encoder = instantiate(cfg.model)
    module = instantiate(cfg.loss, encoder=encoder, label_set=LabelSet(["PER"]))
    assert not any(p.requires_grad for p in encoder.parameters())
    (group,) = module.optimizer_parameters()
    assert {id(p) for p in group["params"]} == {id(p) for p in module.heads.parameters()}


def test_paper_schedule_anneals_and_ends_the_run_in_lightning(multi_cfg):
    cfg = multi_cfg("multitask=munch_conc", "optimizer=sgd", "optimizer.lr=0.1", "head_lr=null", "trainer.max_epochs=30",
                    "+callbacks.anneal_on_plateau._target_=ner_lightning.callbacks.schedules.AnnealOnPlateau",
                    "+callbacks.anneal_on_plateau.factor=0.1", "+callbacks.anneal_on_plateau.patience=1",
                    "+callbacks.anneal_on_plateau.min_lr=0.05", "trainer.min_epochs=0", "callbacks.early_stopping=null")
    results = train(cfg)
    # lr 0.1 until the main loss fails to improve once, then 0.01 < 0.05: the run ends there
    assert 2 <= results["epochs"] < 30


def test_singleaux_cell_trains_one_run_per_auxiliary_and_keeps_the_best_on_dev(multi_cfg, monkeypatch):
    from ner_lightning.cell import protocols

    cfg = multi_cfg("multitask=singleaux")
    dev = {"bc2gm": 0.2, "linnaeus": 0.7}
    real_train, calls = protocols.train, []

    def train(run, resume=None, cell=None):
        (name,) = run.aux
        calls.append(name)
        result = real_train(run, resume=resume, cell=cell)
        result.dev_monitor = dev[name]  # the choice must follow dev, whatever the test scores
        result.write(Path(run.paths.output_dir) / "results.json")
        return result

    monkeypatch.setattr(protocols, "train", train)
    results = protocols.singleaux(cfg, Cell(identity={"sha256": "abc"})).to_json()
    out = Path(cfg.paths.output_dir)
    assert calls == ["bc2gm", "linnaeus"]
    assert results["singleaux"]["chosen"] == "linnaeus" and results["singleaux"]["dev_monitor"] == dev
    chosen = json.loads((out / "aux_linnaeus" / "candidate.json").read_text())
    assert results["test"] == chosen["test"] and set(results["test_aux"]) == {"linnaeus"}
    assert not (out / "aux_bc2gm" / "results.json").exists()  # candidates are not cells of the grid
    assert json.loads((out / "results.json").read_text())["config"]["aux"] == ["bc2gm", "linnaeus"]
    protocols.singleaux(cfg, Cell(identity={"sha256": "abc"}))  # a rerun reuses finished candidates
    assert calls == ["bc2gm", "linnaeus"]
    protocols.singleaux(cfg, Cell(identity={"sha256": "changed"}))  # another config retrains them
    assert calls == ["bc2gm", "linnaeus"] * 2
    assert singleaux_dev_scores([out], "toy", 8, 0, 42) == dev  # what the *_sort schemes read


def test_lightning_epochs_reach_the_schedule(multi_cfg, monkeypatch):
    """In a real fit, MUNCH-Iter's auxiliary batches come from auxiliary ``epoch mod M`` and
    alternate with main batches (Lightning passes the epoch to the batch sampler)."""
    from ner_lightning.models.heads import HeadModule

    seen, real = [], HeadModule.training_loss

    def record(self, batch):
        seen.append((self.current_epoch, sorted(set(batch["corpus"].tolist()))))
        return real(self, batch)

    monkeypatch.setattr(HeadModule, "training_loss", record)
    train(multi_cfg("multitask=munch_iter", "multitask.aux_order=listed", "trainer.max_epochs=3", "trainer.min_epochs=3",
                    "data.batch_size=4"))
    # main: 8 sentences -> 2 batches an epoch, each after an auxiliary batch
    assert seen == [(e, c) for e in range(3) for c in ([1 + e % 2], [0]) * 2]


@pytest.mark.parametrize("multitask, phases", [("munch_stack", True), ("munch_iter", False), ("singletask", False)])
def test_the_phases_callback_comes_from_multitask_phases_and_leaves_early_stopping_out(multi_cfg, multitask, phases):
    """What a run's callbacks are follows ``multitask.phases`` (set by munch_stack only), not the
    scheme's name: a scheme of one's own with ``phases`` set gets them too."""
    from pytorch_lightning.callbacks import EarlyStopping

    from ner_lightning.cell.build import build_callbacks
    from ner_lightning.callbacks import AuxiliaryPhases

    types = lambda cfg: {type(c) for c in build_callbacks(cfg)}  # noqa: E731
    found = types(multi_cfg(f"multitask={multitask}"))
    assert (AuxiliaryPhases in found) == phases and (EarlyStopping in found) == (not phases)
    renamed = multi_cfg("multitask=munch_stack", "multitask.scheme=munch_stack")
    with open_dict(renamed):
        renamed.multitask.phases = None  # the scheme's name alone adds no phases
    assert AuxiliaryPhases not in types(renamed) and EarlyStopping in types(renamed)
