"""Cells in lockstep (ner_lightning/lockstep/): one stacked step is the K cells' own steps, the K
stacked models score as each alone, and a cell trained in a group (one Trainer.fit) is the
experiment it is alone."""
import pytest
import torch
from torch import nn

from ner_lightning.config import complete_config
from ner_lightning.lockstep.stacking import FrozenRows, StackedCells, build_cells, stack_batches


def _cells(toy_cfg, k: int, *extra: str):
    """``k`` tiny CE cells, each with its own initialisation (seed 10 + i), dropout off, and a
    training batch of its own (batch i of the toy training set)."""
    cfg = complete_config(toy_cfg("model.pack=false", "data.batch_size=3", *extra))
    modules, datamodule = build_cells(cfg, [10 + i for i in range(k)])
    for module in modules:
        for layer in module.modules():
            if isinstance(layer, nn.Dropout):
                layer.p = 0.0
    batches = list(datamodule.train_dataloader())[:k]
    return modules, batches, datamodule.tokenizer.pad_token_id


class _Stepper:
    """A stack with the family's optimiser and schedule, stepped as a group's ``training_step``
    steps it (``lockstep.group_module``)."""

    def __init__(self, modules, total: int, clip: float | None):
        from transformers import get_linear_schedule_with_warmup

        self.stack = StackedCells(modules)
        first = modules[0]
        self.optimizer = first.optimizer_factory(params=self.stack.optimizer_groups())
        self.scheduler = get_linear_schedule_with_warmup(self.optimizer, int(first.warmup_ratio * total), total)
        self.clip, self.frozen = clip, FrozenRows()

    def step(self, batches, stopped=()) -> torch.Tensor:
        self.frozen.hold(list(stopped), self.stack, self.optimizer)
        losses = self.stack.step(batches, self.optimizer, self.clip, frozen=self.frozen)
        self.scheduler.step()
        return losses

    def write_back(self, modules) -> None:
        for k, module in enumerate(modules):
            module.load_state_dict(self.stack.cell_state(k), strict=False)


def _alone_steps(module, batch, clip: float, total: int, steps: int) -> list[float]:
    """The cell's own steps, as Lightning takes them: the family's training loss, backward,
    clipping by total norm, the family's optimiser groups and schedule (``configure_optimizers``)."""
    from transformers import get_linear_schedule_with_warmup

    optimizer = module.optimizer_factory(params=module.optimizer_parameters())
    scheduler = get_linear_schedule_with_warmup(optimizer, int(module.warmup_ratio * total), total)
    losses = []
    for _ in range(steps):
        loss = module.training_loss(batch)
        loss.backward()
        torch.nn.utils.clip_grad_norm_([p for p in module.parameters() if p.requires_grad], clip)
        optimizer.step()
        optimizer.zero_grad()
        scheduler.step()
        losses.append(loss.item())
    return losses


@pytest.mark.parametrize("clip", [1.0, 1e-3])  # 1e-3: every cell clipped, each by its own norm
def test_lockstep_steps_are_each_cells_steps_alone(toy_cfg, clip):
    """Three cells with their own initialisations and batches, three steps (AdamW's moments in
    play, no warm-up so the first step moves): the stacked steps' losses and the parameters they
    leave are each cell's own steps' (fp32, within 1e-5), and the cells stay apart."""
    import copy

    modules, batches, pad = _cells(toy_cfg, 3, "loss.warmup_ratio=0.0")
    alone = [copy.deepcopy(m) for m in modules]
    before = [copy.deepcopy(m.state_dict()) for m in modules]
    group = _Stepper(modules, total=10, clip=clip)
    stacked = stack_batches(batches, pad)
    losses = torch.stack([group.step(stacked) for _ in range(3)], 1)
    group.write_back(modules)
    for k, batch in enumerate(batches):
        assert losses[k].tolist() == pytest.approx(_alone_steps(alone[k], batch, clip, 10, 3), abs=1e-5)
        stepped, expected = modules[k].state_dict(), alone[k].state_dict()
        assert max((expected[n] - stepped[n]).abs().max().item() for n in expected) < 1e-5
        assert max((before[k][n] - stepped[n]).abs().max().item() for n in expected) > 1e-4  # it moved
    assert (modules[0].head.classifier.weight - modules[1].head.classifier.weight).abs().max() > 1e-3


def test_a_stopped_cell_keeps_its_weights_and_optimiser_state_while_the_others_step(toy_cfg):
    """After one step of all three cells, cell 1 stops: two more stacked steps leave its
    parameters and AdamW moments exactly as they were, and the others as their own steps leave them."""
    import copy

    modules, batches, pad = _cells(toy_cfg, 3, "loss.warmup_ratio=0.0")
    alone = [copy.deepcopy(m) for m in modules]
    group = _Stepper(modules, total=10, clip=1.0)
    stacked = stack_batches(batches, pad)
    group.step(stacked)
    held = {n: t[1].clone() for n, t in group.stack.params().items()}
    moments = {n: group.optimizer.state[p]["exp_avg"][1].clone() for n, p in group.stack.params().items()}
    group.step(stacked, stopped=[1])
    group.step(stacked, stopped=[1])
    for n, p in group.stack.params().items():
        assert torch.equal(p[1], held[n]) and torch.equal(group.optimizer.state[p]["exp_avg"][1], moments[n])
    group.write_back(modules)
    for k in (0, 2):
        _alone_steps(alone[k], batches[k], 1.0, 10, 3)
        expected, got = alone[k].state_dict(), modules[k].state_dict()
        assert max((expected[n] - got[n]).abs().max().item() for n in expected) < 1e-5


def test_the_stacked_models_score_a_shared_batch_as_each_alone_and_refusals_say_why(toy_cfg):
    """One dev batch, read once, scored by the three models (and by a subset of them): each
    model's scores are its own module's."""
    modules, batches, _ = _cells(toy_cfg, 3)
    stack = StackedCells(modules)
    batch = batches[0]
    scores = stack.scores(batch, [0, 1, 2])
    subset = stack.scores(batch, [2, 0])
    real = batch["word_mask"]
    for k, module in enumerate(modules):
        module.eval()
        with torch.no_grad():
            alone = module.logits(batch)
        assert torch.allclose(scores[k][real], alone[real], atol=1e-5)
        assert torch.equal(scores[k][real].argmax(-1), alone[real].argmax(-1))
    assert torch.allclose(subset[0], scores[2]) and torch.allclose(subset[1], scores[0])
    dice, _, _ = _cells(toy_cfg, 2, "loss=dice")
    with pytest.raises(ValueError, match="DiceLoss is not a mean over words"):
        StackedCells(dice)


def test_stacked_batches_pad_rows_words_and_sub_words_without_empty_attention():
    a = {"input_ids": torch.tensor([[5, 6, 7]]), "attention_mask": torch.tensor([[1, 1, 1]]),
         "labels": torch.tensor([[0, 1, 2]]), "word_starts": torch.tensor([[0, 1]]),
         "word_mask": torch.tensor([[True, True]])}
    b = {"input_ids": torch.tensor([[8], [9]]), "attention_mask": torch.tensor([[1], [1]]),
         "labels": torch.tensor([[3], [4]]), "word_starts": torch.tensor([[0], [0]]),
         "word_mask": torch.tensor([[True], [True]])}
    stacked = stack_batches([a, b], pad_id=0)
    assert stacked["input_ids"].tolist() == [[[5, 6, 7], [0, 0, 0]], [[8, 0, 0], [9, 0, 0]]]
    assert stacked["attention_mask"].tolist() == [[[1, 1, 1], [1, 0, 0]], [[1, 0, 0], [1, 0, 0]]]
    assert stacked["word_mask"].tolist() == [[[True, True], [False, False]], [[True, False], [True, False]]]
    assert stacked["labels"][0, 1].tolist() == [-100, -100, -100]


NO_DROPOUT = ["loss.dropout=0.0", "+model.random_init.hidden_dropout_prob=0.0",
              "+model.random_init.attention_probs_dropout_prob=0.0"]
# Several batches an epoch (8 sentences, batch 2) and several epochs, early stopping at patience 1
# from the first epoch: the cells of a partition grid stop at different epochs.
SEVERAL = ("data.batch_size=2", "trainer.max_epochs=10", "trainer.min_epochs=1",
           "callbacks.early_stopping.patience=1", "optimizer.lr=1e-3")


def _sweep(launcher: str, tmp_path, toy_data_dir, *extra: str, partitions: str = "0,1,2") -> dict:
    import json

    from tests.test_sweep import TOY, run_cli

    out = tmp_path / launcher
    args = ["-m", f"partition={partitions}", *TOY, "trainer.max_epochs=3", "trainer.min_epochs=3", *NO_DROPOUT,
            f"hydra/launcher={launcher}", f"hydra.sweep.dir={out}", "hydra.sweep.subdir=${hydra.job.num}", *extra]
    proc = run_cli(args, tmp_path, toy_data_dir)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    results = {}
    for p in out.glob("*/results.json"):
        r = json.loads(p.read_text())
        r["_dir"] = p.parent
        results[r["partition"]["partition"]] = r
    return results


def _dev_rows(cell) -> int:
    """Rows of the cell's CSV metrics that hold a dev evaluation."""
    import csv

    with open(cell / "csv" / "metrics.csv") as f:
        return sum(1 for row in csv.DictReader(f) if row.get("val/f1"))


def _numbers(scores, path: str = "") -> dict:
    """A nested dict of scores as {path: number}."""
    if isinstance(scores, dict):
        return {k: v for key, value in scores.items() for k, v in _numbers(value, f"{path}/{key}").items()}
    return {path: scores}


def _assert_same_experiments(alone: dict, grouped: dict, cells: int = 3) -> None:
    """Every cell's dev history (each evaluation's scores), selected epoch, epochs, steps, test
    scores (the group's stacked test against each cell's own ``trainer.test``) and test
    predictions are those of the cell alone; its CSV log has one dev row per dev
    evaluation; results.json names the group."""
    assert sorted(grouped) == sorted(alone)
    for p, a in alone.items():
        g = grouped[p]
        assert g["lockstep"]["cells"] == cells and len(g["lockstep"]["group"]) == cells and "lockstep" not in a
        assert (g["epochs"], g["global_steps"], g["best_epoch"]) == (a["epochs"], a["global_steps"], a["best_epoch"])
        assert g["compute"]["train_batches"] == a["compute"]["train_batches"]
        assert g["dev"]["micro"] == pytest.approx(a["dev"]["micro"], abs=1e-9)
        assert g["lockstep"]["test"] == "stacked"  # the group's one test pass, not each cell's trainer.test
        assert _numbers(g["test"]) == pytest.approx(_numbers(a["test"]), abs=1e-6)  # every score, every type
        assert g["config_sha256"] == a["config_sha256"]
        assert (g["_dir"] / "predictions" / "test.conll").read_text() == (a["_dir"] / "predictions" / "test.conll").read_text()
        assert (g["_dir"] / "predictions" / "dev.conll").read_text() == (a["_dir"] / "predictions" / "dev.conll").read_text()
        assert _dev_rows(g["_dir"]) == _dev_rows(a["_dir"]) >= 1


def _learns(results: dict) -> None:
    assert max(r["test"]["micro"]["f1"] for r in results.values()) > 0.05  # the comparison is not at F1 0


@pytest.mark.slow
@pytest.mark.parametrize("family", [
    ("loss=ce",),
    ("loss=wce1",),
    ("loss=focal",),
    ("loss=ce2t", "data.label_scheme=untyped", "loss.threshold=0.2", "optimizer.lr=1e-2"),
    ("loss=auc2t", "optimizer=pesg", "data.label_scheme=untyped", "loss.threshold=0.2", "optimizer.lr=1e-2",
     "loss.head_lr=0.1", "loss.lam=1.0", "callbacks.early_stopping.patience=2"),
], ids=["ce", "wce1", "focal", "ce2t", "auc2t-pesg"])
def test_a_lockstep_cell_is_the_experiment_it_is_alone(toy_data_dir, tmp_path, family):
    """Three partitions, several batches an epoch and several epochs, dropout off, under
    hydra/launcher=lockstep (one group, one Trainer.fit) and under the local launcher: each cell
    ends as the same experiment (``_assert_same_experiments``), with cells that stop at different
    epochs, for every family that stacks."""
    alone = _sweep("local", tmp_path, toy_data_dir, *SEVERAL, *family)
    grouped = _sweep("lockstep", tmp_path, toy_data_dir, *SEVERAL, *family)
    _learns(alone)
    assert len({r["epochs"] for r in alone.values()}) > 1  # early stopping ends the cells apart
    _assert_same_experiments(alone, grouped)


@pytest.mark.slow
@pytest.mark.parametrize("rule", [
    ("trainer.min_epochs=4", "callbacks.early_stopping.min_delta=0.05"),
    ("trainer.check_val_every_n_epoch=2", "trainer.max_epochs=9"),
    ("callbacks.model_checkpoint.monitor=null", "callbacks.early_stopping=null", "trainer.max_epochs=4"),
], ids=["min-epochs-min-delta", "dev-every-2-epochs", "no-selection"])
def test_a_lockstep_cell_stops_and_selects_by_its_own_rules(toy_data_dir, tmp_path, rule):
    """The stopping and selection rules a cell alone follows hold in its group: ``min_epochs``
    and ``min_delta``, dev every other epoch, and no selection monitor (the final model)."""
    alone = _sweep("local", tmp_path, toy_data_dir, *SEVERAL, *rule)
    grouped = _sweep("lockstep", tmp_path, toy_data_dir, *SEVERAL, *rule)
    _assert_same_experiments(alone, grouped)


def test_groups_are_cells_alike_but_for_partition_and_init_seed():
    from omegaconf import OmegaConf

    from ner_lightning.lockstep.launcher import Job, plan_groups

    def job(i, **keys):
        base = {"size": 20, "partition": 0, "init_seed": 42, "loss": {"name": "ce"}, "hydra": {"job": {"num": i}}}
        return Job(i, [], OmegaConf.create({**base, **keys}))

    jobs = [job(0), job(1, partition=1), job(2, partition=2, init_seed=7), job(3, size=50),
            job(4, partition=3), job(5, loss={"name": "crf"}), job(6, partition=4)]
    refuse_crf = lambda cfg: "crf refused" if cfg.loss.name == "crf" else None  # noqa: E731
    plan = plan_groups(jobs, 3, refuse_crf)
    assert [([j.index for j in group], why) for group, why in plan] == [
        ([5], "crf refused"),
        ([0, 1, 2], None), ([4, 6], None),  # at most 3 a group, in sweep order
        ([3], "no other cell of the sweep differs from it only in partition or init_seed")]


def test_the_lockstep_launcher_groups_what_it_can_and_runs_the_rest_alone(toy_data_dir, tmp_path):
    """CE cells train as a group; CRF cells (no fixed-shape loss) and a cell whose folder cannot be
    made run alone, with the reason on the console; every other cell writes its results. The two
    groups are the tasks of two worker processes."""
    import json

    from tests.test_sweep import TOY, run_cli

    sweep = tmp_path / "s"
    sweep.mkdir()
    (sweep / "1").write_text("not a folder")  # cell 1 (ce, partition 1) cannot be set up
    args = ["-m", "loss=ce,crf", "partition=0,1,2", *TOY, "hydra/launcher=lockstep", "hydra.launcher.n_jobs=2",
            f"hydra.sweep.dir={sweep}", "hydra.sweep.subdir=${hydra.job.num}"]
    proc = run_cli(args, tmp_path, toy_data_dir)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "could not start" in out
    assert "6 cells: 6 in 2 lockstep groups, 0 alone; on 2 worker processes" in out
    assert "these 3 cells run alone: CRFModule has no fixed-shape loss" in out
    results = {int(p.parent.name): json.loads(p.read_text()) for p in sweep.glob("*/results.json")}
    assert sorted(results) == [0, 2, 3, 4, 5]
    assert [results[k].get("lockstep", {}).get("cells") for k in (0, 2, 3, 4, 5)] == [2, 2, None, None, None]
    pids = [results[k]["device"]["pid"] for k in (0, 2, 3, 4, 5)]
    # a group's cells share their worker; which worker runs the cells alone is the scheduler's business
    assert pids[0] == pids[1] and len(set(pids)) <= 2


def test_on_a_cpu_a_large_encoder_runs_alone(toy_data_dir, tmp_path):
    import json

    from tests.test_sweep import TOY, run_cli

    args = ["-m", "partition=0,1", *TOY, "hydra/launcher=lockstep", "hydra.launcher.cpu_max_hidden=16",
            f"hydra.sweep.dir={tmp_path / 's'}", "hydra.sweep.subdir=${hydra.job.num}"]
    proc = run_cli(args, tmp_path, toy_data_dir)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert "these 2 cells run alone: on a CPU an encoder of hidden size 32 trains slower stacked" in out
    results = [json.loads(p.read_text()) for p in (tmp_path / "s").glob("*/results.json")]
    assert len(results) == 2 and all(r.get("lockstep") is None for r in results)  # they trained alone


def test_auc2t_lockstep_steps_with_pesg_are_each_cells_steps_alone(toy_cfg):
    """AUC-2T under libauc's PESG: three stacked steps (masked AUC-M losses, clipping over the
    optimiser's parameters, PESG's element-wise update, then each cell's α ascent) leave every
    parameter, a, b and α where the cell's own three steps leave them (fp32, within 1e-5)."""
    import copy

    modules, batches, pad = _cells(toy_cfg, 3, "loss=auc2t", "optimizer=pesg", "data.label_scheme=untyped",
                                   "loss.warmup_ratio=0.0", "optimizer.lr=0.05")
    alone = [copy.deepcopy(m) for m in modules]
    group = _Stepper(modules, total=10, clip=1.0)
    stacked = stack_batches(batches, pad)
    losses = torch.stack([group.step(stacked) for _ in range(3)], 1)
    group.write_back(modules)
    for k, (module, batch) in enumerate(zip(alone, batches)):
        from transformers import get_linear_schedule_with_warmup

        optimizer = module.optimizer_factory(params=module.optimizer_parameters())
        scheduler = get_linear_schedule_with_warmup(optimizer, 0, 10)
        stepped = [p for g in module.optimizer_parameters() for p in g["params"]]
        own = []
        for _ in range(3):
            loss = module.training_loss(batch)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(stepped, 1.0)
            optimizer.step()
            module.after_optimizer_step()  # α ascent
            optimizer.zero_grad()
            scheduler.step()
            own.append(loss.item())
        assert losses[k].tolist() == pytest.approx(own, abs=1e-5)
        expected, got = module.state_dict(), modules[k].state_dict()
        assert max((expected[n] - got[n]).abs().max().item() for n in expected) < 1e-5
        assert float(expected["auc.0.alpha"]) > 0  # α moved


def test_a_diverging_cell_stops_alone_and_its_group_goes_on(toy_cfg, tmp_path):
    """One cell of a group whose loss turns NaN gets an error of its own (no dev evaluation, no
    selected weights); the other trains and is evaluated every epoch."""
    from ner_lightning.cell.steps import Cell, setup_cell
    from ner_lightning.lockstep.fit import fit_group
    from ner_lightning.lockstep.members import Member

    members = []
    for p in range(2):
        cfg = toy_cfg(f"partition={p}", "trainer.max_epochs=2", "trainer.min_epochs=2", f"paths.output_dir={tmp_path / str(p)}")
        members.append(Member(cfg, Cell(f"cell {p}"), setup_cell(cfg, Cell(f"cell {p}"))))
    with torch.no_grad():
        members[1].run.module.head.classifier.weight.fill_(float("nan"))
    fit_group(members, tmp_path / "group")
    assert isinstance(members[1].error, FloatingPointError) and "at epoch 0" in str(members[1].error)
    assert members[1].run.module.history == [] and members[1].checkpoint is None
    assert members[0].error is None and [h["epoch"] for h in members[0].run.module.history] == [0, 1]
    assert members[0].position == (2, 2 * len(members[0].run.datamodule.train_dataloader()))
    assert members[0].checkpoint is not None


def test_a_grouped_cell_keeps_the_checkpoints_its_own_model_checkpoint_keeps_alone(toy_cfg, tmp_path):
    """The group drives each cell's ModelCheckpoint through its hooks: with ``save_top_k=2``, a
    filename template and ``every_n_epochs=2`` a cell keeps the files, the ranking and the best
    weights it keeps when it trains alone (its own Trainer)."""
    from pathlib import Path

    from ner_lightning.callbacks.checkpointing import selecting_checkpoint
    from ner_lightning.cell.steps import Cell, setup_cell
    from ner_lightning.export.folder import read_tensors
    from ner_lightning.lockstep.fit import fit_group
    from ner_lightning.lockstep.members import Member, config_refusal

    rules = ["callbacks.model_checkpoint.save_top_k=2", "callbacks.model_checkpoint.filename='best-{epoch}'",
             "+callbacks.model_checkpoint.every_n_epochs=2"]
    extra = [*NO_DROPOUT, "data.batch_size=2", "trainer.max_epochs=9", "trainer.min_epochs=9", "optimizer.lr=1e-2",
             "callbacks.early_stopping=null", "callbacks.last_checkpoint=null", *rules]

    def kept(trainer, folder: Path):
        ckpt = selecting_checkpoint(trainer)
        ranking = {Path(path).name: float(score) for path, score in ckpt.best_k_models.items()}
        files = sorted(f.name for f in (folder / "checkpoints").iterdir())
        return files, Path(ckpt.best_model_path).name, ranking, read_tensors(ckpt.best_model_path)["state_dict"]

    alone, members = {}, []
    for p in range(2):
        folder = tmp_path / "alone" / str(p)
        cfg = toy_cfg(f"partition={p}", f"paths.output_dir={folder}", *extra)
        assert config_refusal(cfg) is None  # a group takes the cell
        run = setup_cell(cfg, Cell(f"cell {p}"))
        run.trainer.fit(run.module, datamodule=run.datamodule)
        alone[p] = kept(run.trainer, folder)
        cfg = toy_cfg(f"partition={p}", f"paths.output_dir={tmp_path / 'grouped' / str(p)}", *extra)
        members.append(Member(cfg, Cell(f"cell {p}"), setup_cell(cfg, Cell(f"cell {p}"))))
    fit_group(members, tmp_path / "group")
    for p, member in enumerate(members):
        files, best, ranking, weights = kept(member.run.trainer, tmp_path / "grouped" / str(p))
        a_files, a_best, a_ranking, a_weights = alone[p]
        assert len(a_files) == 2 and all(int(f.removeprefix("best-").removesuffix(".ckpt")) % 2 == 1 for f in a_files)
        assert (files, best) == (a_files, a_best) and ranking == pytest.approx(a_ranking, abs=1e-9)
        assert member.checkpoint is not None and Path(member.checkpoint).name == best
        assert max((weights[n] - a_weights[n]).abs().max().item() for n in a_weights) < 1e-3  # float rounding only


def test_a_checkpoint_the_background_writer_could_not_write_stops_the_group(toy_cfg, tmp_path, monkeypatch):
    """The group writes its cells' best.ckpt on a background thread (Lightning's AsyncCheckpointIO):
    a write that fails stops the fit with its error, also when it is the fit's last write (raised
    when the writer is torn down), so no cell ends with a result whose checkpoint is not there (the
    launcher records the error for each cell of the group; a rerun resumes them)."""
    from ner_lightning.cell.steps import Cell, setup_cell
    from ner_lightning.checkpoint_io import StreamingCheckpointIO
    from ner_lightning.lockstep.fit import fit_group
    from ner_lightning.lockstep.members import Member

    def refuse(self, checkpoint, path, storage_options=None):
        raise OSError(28, "No space left on device", str(path))

    monkeypatch.setattr(StreamingCheckpointIO, "save_checkpoint", refuse)
    for n in (2, 1):  # a later write raises an earlier one's error; a lone last write, the writer's teardown
        cfgs = [toy_cfg(f"partition={p}", "callbacks.last_checkpoint=null", f"paths.output_dir={tmp_path / str(n) / str(p)}")
                for p in range(n)]
        members = [Member(cfg, Cell(f"cell {p}"), setup_cell(cfg, Cell(f"cell {p}"))) for p, cfg in enumerate(cfgs)]
        with pytest.raises(OSError, match="No space left on device.*best.ckpt"):
            fit_group(members, tmp_path / f"group{n}")


@pytest.mark.parametrize("override, named", [
    ("callbacks.model_checkpoint.save_top_k=3", None),
    ("callbacks.model_checkpoint.filename='best-{epoch}'", None),
    ("+callbacks.model_checkpoint.every_n_epochs=2 +callbacks.model_checkpoint.save_on_train_epoch_end=true", None),
    ("callbacks.model_checkpoint.save_last=true", "callbacks.model_checkpoint.save_last=True"),
    ("callbacks.model_checkpoint.save_weights_only=false", "callbacks.model_checkpoint.save_weights_only=False"),
    ("+callbacks.model_checkpoint.every_n_train_steps=5", "callbacks.model_checkpoint.every_n_train_steps=5"),
    ("logger=wandb", None),
    ("logger=wandb logger.wandb.log_model=true", "logger.wandb.log_model"),
    ("callbacks.early_stopping.patience=1 callbacks.early_stopping.min_delta=0.01", None),
])
def test_a_checkpoint_setting_a_group_cannot_honour_runs_the_cell_alone_naming_it(toy_cfg, override, named):
    """Each cell's EarlyStopping and ModelCheckpoint run as its own; a ModelCheckpoint setting a
    group cannot honour (its own last.ckpt, full-state files, saves between dev evaluations) is
    refused by name."""
    from ner_lightning.lockstep.members import config_refusal

    why = config_refusal(toy_cfg(*override.split()))
    assert (why is None) if named is None else (why is not None and why.startswith(named + ":")), why
