"""Lightning callbacks of our own: real (non-padding) sub-word tokens per second, the
precision dev/test evaluation runs in, when the best and resume checkpoints reach the disk, a
training budget counted in batches, MUNCH-Stack's phases and the MUNCHABLES paper's annealing
schedule."""
from __future__ import annotations

import logging
import time
from weakref import proxy

import pytorch_lightning as pl
import torch
from lightning_utilities.core.apply_func import apply_to_collection
from pytorch_lightning.callbacks import ModelCheckpoint

log = logging.getLogger("ner_lightning")


class TokenThroughput(pl.Callback):
    """Times every train / eval batch and counts its real and padded sub-word tokens.

    ``summary()`` gives tokens/s over the time spent inside batches (data loading excluded)
    and the padding overhead: positions the encoder computes / real tokens (the padded batch,
    or its packed rows under ``model.pack``).
    """

    STAGES = ("train", "eval")

    def __init__(self):
        self.seconds = dict.fromkeys(self.STAGES, 0.0)
        self.tokens = dict.fromkeys(self.STAGES, 0)
        self.padded = dict.fromkeys(self.STAGES, 0)
        self._t0 = 0.0

    def _start(self, *_args, **_kw) -> None:
        self._t0 = time.perf_counter()

    def _end(self, stage: str, batch: dict, module: pl.LightningModule) -> None:
        from ner_lightning.models.encoder import computed_positions

        self.seconds[stage] += time.perf_counter() - self._t0
        mask = batch["attention_mask"]
        self.tokens[stage] += int(mask.sum())
        self.padded[stage] += computed_positions(mask, getattr(module.encoder, "pack", False))

    on_train_batch_start = _start
    on_validation_batch_start = _start
    on_test_batch_start = _start

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self._end("train", batch, pl_module)

    def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0) -> None:
        self._end("eval", batch, pl_module)

    def on_test_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0) -> None:
        self._end("eval", batch, pl_module)

    def summary(self) -> dict:
        out = {}
        for s in self.STAGES:
            out[f"{s}_tokens"] = self.tokens[s]
            out[f"{s}_seconds"] = round(self.seconds[s], 3)
            out[f"{s}_tokens_per_s"] = round(self.tokens[s] / self.seconds[s], 1) if self.seconds[s] else None
            out[f"{s}_padding_ratio"] = round(self.padded[s] / self.tokens[s], 3) if self.tokens[s] else None
        return out


class EvalPrecision(pl.Callback):
    """Runs the encoder of every dev/test evaluation under ``precision`` (training keeps
    ``trainer.precision``): ``auto`` = bf16 where the hardware multiplies bf16 natively
    (``ner_lightning.hardware``), else fp32; or a Lightning name (32-true, bf16-mixed, 16-mixed).
    Heads, losses and decoding stay fp32 (``NERModule.word_states``)."""

    NAMES = ("auto", "32-true", "bf16-mixed", "16-mixed")

    def __init__(self, precision: str):
        if precision not in self.NAMES:
            raise ValueError(f"callbacks.eval_precision.precision must be one of {self.NAMES}, got {precision!r}")
        self.precision = precision
        self.chosen: str | None = None

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        from ner_lightning.hardware import precision_choice

        if self.chosen is None:
            accelerator = "gpu" if trainer.strategy.root_device.type == "cuda" else "cpu"
            best, why = precision_choice(accelerator)
            self.chosen, reason = (best, f"auto: {why}") if self.precision == "auto" else (
                self.precision, f"set in the config; auto would pick {best}: {why}")
            log.info("precision: training %s, evaluation %s (%s)", trainer.precision, self.chosen, reason)
        pl_module.eval_precision = self.chosen


class BestCheckpoint(ModelCheckpoint):
    """Lightning's ``ModelCheckpoint`` (``best.ckpt``: the weights selected on dev) whose writes
    wait in memory, a copy of the checkpoint, until the resume checkpoint is written
    (:class:`ResumeCheckpoint` writes the held one first) or training ends. Dev improves in most
    early epochs, and a write per improvement costs more than the copy. A crash loses only what
    the resume checkpoint would recompute anyway, and a rerun finds a ``best.ckpt`` that matches
    the state it resumes. ``hold: false`` = written at once, as Lightning does."""

    def __init__(self, hold: bool = True, **kwargs):
        super().__init__(**kwargs)
        self.hold = bool(hold)
        self._held: tuple[str, dict] | None = None

    def _save_checkpoint(self, trainer: pl.Trainer, filepath: str) -> None:
        if not self.hold:
            return super()._save_checkpoint(trainer, filepath)
        checkpoint = trainer._checkpoint_connector.dump_checkpoint(self.save_weights_only)  # as Trainer.save_checkpoint
        self._held = (filepath, apply_to_collection(checkpoint, torch.Tensor, lambda t: t.detach().clone()))
        self._last_global_step_saved = trainer.global_step
        self._last_checkpoint_saved = filepath

    def write_held(self, trainer: pl.Trainer) -> None:
        """Write the checkpoint held in memory, if any."""
        if self._held is None:
            return
        filepath, checkpoint = self._held
        trainer.strategy.save_checkpoint(checkpoint, filepath)
        self._held = None
        for logger in trainer.loggers:
            logger.after_save_checkpoint(proxy(self))

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        super().on_train_end(trainer, pl_module)
        self.write_held(trainer)  # not on a crash: the held weights may be newer than last.ckpt


class ResumeCheckpoint(ModelCheckpoint):
    """The full-state checkpoint (weights, optimiser, schedule, loops, RNG) a rerun resumes a
    cell from. Written where Lightning's ``ModelCheckpoint`` would write it, but only when
    ``min_interval_s`` seconds have passed since the previous write, or when another checkpoint
    was written to disk at this step, so that a ``best.ckpt`` on disk is never newer than the
    state a rerun resumes; a :class:`BestCheckpoint`'s held checkpoint is written just before.
    A crash then costs at most ``min_interval_s`` plus one epoch of recomputation, and the
    resumed cell still ends exactly as an uninterrupted one (tests/test_launching.py).
    ``min_interval_s: 0`` = every time (every epoch). Runs after every other checkpoint callback
    (it moves itself to the end of ``trainer.callbacks``) to see what they wrote."""

    def __init__(self, min_interval_s: float = 0.0, **kwargs):
        if float(min_interval_s) < 0:
            raise ValueError(f"callbacks.last_checkpoint.min_interval_s must be >= 0 seconds, got {min_interval_s}")
        super().__init__(**kwargs)
        self.min_interval_s = float(min_interval_s)
        self._written_at: float | None = None

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        super().setup(trainer, pl_module, stage)
        trainer.callbacks.remove(self)
        trainer.callbacks.append(self)

    def _save_checkpoint(self, trainer: pl.Trainer, filepath: str) -> None:
        holding = [cb for cb in trainer.checkpoint_callbacks if isinstance(cb, BestCheckpoint) and cb.hold]
        others_wrote = any(cb is not self and cb not in holding and cb._last_global_step_saved == trainer.global_step
                           for cb in trainer.checkpoint_callbacks)
        recent = self._written_at is not None and time.monotonic() - self._written_at < self.min_interval_s
        if recent and not others_wrote:
            return
        for cb in holding:
            cb.write_held(trainer)
        super()._save_checkpoint(trainer, filepath)
        self._written_at = time.monotonic()


class BatchBudget(pl.Callback):
    """Train for exactly ``batches`` training batches, however many epochs that is (the
    replication protocol, docs/results/replication.md: every method at every size gets the same
    number of batches, where an epoch at size 20 is 3 of them and at size 200 25). The
    learning-rate schedule spans the budget (:meth:`schedule_steps`). Families that take several
    optimiser steps per batch (COMAUC-2T, OVA-AUC) keep them: the budget counts data, not
    updates (``compute.optimizer_steps`` in results.json records both). Dev evaluation every
    ``trainer.val_check_interval`` batches across epochs (``trainer=batch_budget``)."""

    def __init__(self, batches: int):
        if int(batches) < 1:
            raise ValueError(f"callbacks.batch_budget.batches must be a positive number of training batches, got {batches}")
        self.batches = int(batches)

    def setup(self, trainer, pl_module, stage: str) -> None:
        if stage != "fit":
            return
        if trainer.max_epochs not in (None, -1) or trainer.max_steps not in (None, -1):
            raise ValueError(f"callbacks.batch_budget ends training after {self.batches} batches, but trainer.max_epochs="
                             f"{trainer.max_epochs} / trainer.max_steps={trainer.max_steps} may end it first: "
                             "set trainer.max_epochs=-1 trainer.max_steps=-1 (trainer=batch_budget does)")
        if trainer.fit_loop.min_epochs or trainer.fit_loop.min_steps:
            raise ValueError(f"callbacks.batch_budget: trainer.min_epochs={trainer.fit_loop.min_epochs} / trainer.min_steps="
                             f"{trainer.fit_loop.min_steps} would keep training past the budget: set them to 0 "
                             "(trainer=batch_budget does)")
        if trainer.check_val_every_n_epoch is not None:
            raise ValueError("callbacks.batch_budget counts batches across epochs: set trainer.check_val_every_n_epoch=null "
                             "and trainer.val_check_interval=<batches between dev evaluations> (trainer=batch_budget does)")

    def schedule_steps(self, trainer) -> int:
        """Length of the learning-rate schedule: the budget (the schedule steps once a batch)."""
        return self.batches

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.fit_loop.epoch_loop.total_batch_idx + 1 >= self.batches:
            trainer.should_stop = True


def _epoch_main_loss(module) -> float | None:
    """Mean main-corpus training loss of the epoch that just ended (``HeadModule`` families
    track it per corpus; others: the logged epoch mean of ``train/loss``)."""
    if hasattr(module, "epoch_loss"):
        return module.epoch_loss()
    value = module.trainer.callback_metrics.get("train/loss_epoch")
    return float(value) if value is not None else None


def _restart_schedule(trainer: "pl.Trainer") -> None:
    """Back to step 0 of the learning-rate schedule (warm-up again, then decay over a phase)."""
    for config in trainer.lr_scheduler_configs:
        sched = config.scheduler
        sched.last_epoch = 0
        for group, base, fn in zip(sched.optimizer.param_groups, sched.base_lrs, sched.lr_lambdas):
            group["lr"] = base * fn(0)


class AnnealOnPlateau(pl.Callback):
    """The MUNCHABLES paper's schedule (§4.1, flair's AnnealOnPlateau): a constant learning rate,
    halved (``factor``) when the epoch's main training loss has not reached a new minimum for
    ``patience`` consecutive epochs; training ends when the rate falls below ``min_lr`` — or,
    under MUNCH-Stack (:class:`AuxiliaryPhases`), the phase does and the rate starts over.
    Replaces the family's warm-up/decay (its LambdaLR multipliers become 1)."""

    def __init__(self, factor: float, patience: int, min_lr: float):
        self.factor, self.patience, self.min_lr = factor, patience, min_lr
        self.best: float | None = None
        self.bad_epochs = 0
        self.scale = 1.0  # current rate / initial rate
        self.converged = False

    def state_dict(self) -> dict:
        return {"best": self.best, "bad_epochs": self.bad_epochs, "scale": self.scale}

    def load_state_dict(self, state: dict) -> None:
        self.best, self.bad_epochs, self.scale = state["best"], state["bad_epochs"], state["scale"]

    def on_train_start(self, trainer, pl_module) -> None:
        for config in trainer.lr_scheduler_configs:
            sched = config.scheduler
            sched.lr_lambdas = [self._multiplier for _ in sched.lr_lambdas]
            for group, base in zip(sched.optimizer.param_groups, sched.base_lrs):
                group["lr"] = base * self.scale

    def _multiplier(self, step: int) -> float:
        return self.scale

    def restart(self, trainer) -> None:
        self.best, self.bad_epochs, self.scale, self.converged = None, 0, 1.0, False
        _restart_schedule(trainer)

    def learning_rate(self, trainer) -> float:
        """The largest learning rate of any parameter group (the paper's one rate; with a smaller
        encoder rate, training ends when the heads' rate falls below ``min_lr``)."""
        return max(g["lr"] for opt in trainer.optimizers for g in opt.param_groups)

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        loss = _epoch_main_loss(pl_module)
        if loss is None:
            return
        if self.best is None or loss < self.best:
            self.best, self.bad_epochs = loss, 0
        else:
            self.bad_epochs += 1
        if self.bad_epochs >= self.patience:
            self.scale *= self.factor
            self.bad_epochs = 0
            _restart_schedule(trainer)  # applies the new multiplier
            log.info("epoch %d: main loss has not improved for %d epochs, learning rate x%g (now %.2e)",
                     trainer.current_epoch, self.patience, self.factor, self.learning_rate(trainer))
        self.converged = self.learning_rate(trainer) < self.min_lr
        if self.converged and not any(isinstance(c, AuxiliaryPhases) for c in trainer.callbacks):
            log.info("learning rate below %g: training ends", self.min_lr)
            trainer.should_stop = True


class AuxiliaryPhases(pl.Callback):
    """MUNCH-Stack (MUNCHABLES Alg. 4): one phase per auxiliary corpus (``data.phase``), each
    until the main model converges (``is_converge_main``): the epoch's mean main-corpus training
    loss has not reached a new minimum for ``patience`` epochs (after ``min_epochs``), or
    ``max_epochs`` epochs have passed, or :class:`AnnealOnPlateau` (when present) has taken the
    learning rate below its ``min_lr``. Then the next auxiliary takes over and the learning-rate
    schedule starts again; after the last phase the run ends."""

    def __init__(self, patience: int, min_epochs: int, max_epochs: int):
        self.patience, self.min_epochs, self.max_epochs = patience, min_epochs, max_epochs
        self.phase, self.epochs_in_phase, self.bad_epochs = 0, 0, 0
        self.best: float | None = None
        self.history: list[dict] = []  # per phase: auxiliary, epochs, first/last epoch, why it ended

    def state_dict(self) -> dict:
        return {"phase": self.phase, "epochs_in_phase": self.epochs_in_phase, "bad_epochs": self.bad_epochs,
                "best": self.best, "history": self.history}

    def load_state_dict(self, state: dict) -> None:
        for key, value in state.items():
            setattr(self, key, value)

    def on_train_start(self, trainer, pl_module) -> None:
        trainer.datamodule.phase = self.phase  # where a resumed run left off

    def setup(self, trainer, pl_module, stage: str) -> None:
        """The phases bound the run: at most ``max_epochs`` per auxiliary (``trainer.max_epochs``
        and ``min_epochs`` do not apply under MUNCH-Stack)."""
        dm = trainer.datamodule
        if getattr(dm, "scheme", None) != "munch_stack":
            raise ValueError("callbacks.aux_phases is MUNCH-Stack's: use it with multitask=munch_stack")
        if stage == "fit":
            trainer.fit_loop.max_epochs = self.max_epochs * len(dm.aux_names)
            trainer.fit_loop.min_epochs = 0

    def schedule_steps(self, trainer) -> int:
        """Length of one phase's learning-rate schedule: ``max_epochs`` epochs of steps."""
        per_epoch = trainer.estimated_stepping_batches / max(1, trainer.max_epochs)
        return max(1, int(self.max_epochs * per_epoch))

    def on_train_end(self, trainer, pl_module) -> None:
        dm = trainer.datamodule
        if not self.history or self.history[-1]["phase"] != self.phase:
            self.history.append({"phase": self.phase, "auxiliary": dm.aux_names[self.phase],
                                 "epochs": self.epochs_in_phase, "last_epoch": trainer.current_epoch - 1,
                                 "ended_by": "the trainer stopped (trainer.max_epochs or another callback)"})
        if self.phase + 1 < len(dm.aux_names):
            log.warning("MUNCH-Stack ended in phase %d of %d (%s): auxiliaries %s were never used", self.phase + 1, len(dm.aux_names), self.history[-1]["ended_by"],
                        dm.aux_names[self.phase + 1:])

    def converged(self, trainer, pl_module) -> str | None:
        """Why the current phase has converged, or None."""
        anneal = next((c for c in trainer.callbacks if isinstance(c, AnnealOnPlateau)), None)
        if anneal is not None and anneal.learning_rate(trainer) < anneal.min_lr:
            return f"learning rate below {anneal.min_lr}"
        if self.epochs_in_phase >= self.max_epochs:
            return f"{self.max_epochs} epochs"
        if anneal is None and self.epochs_in_phase >= self.min_epochs and self.bad_epochs >= self.patience:
            return f"main loss without a new minimum for {self.patience} epochs"
        return None

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        dm = trainer.datamodule
        loss = _epoch_main_loss(pl_module)
        self.epochs_in_phase += 1
        if loss is not None and (self.best is None or loss < self.best):
            self.best, self.bad_epochs = loss, 0
        else:
            self.bad_epochs += 1
        why = self.converged(trainer, pl_module)
        if why is None:
            return
        aux = dm.aux_names[self.phase]
        self.history.append({"phase": self.phase, "auxiliary": aux, "epochs": self.epochs_in_phase,
                             "last_epoch": trainer.current_epoch, "ended_by": why})
        log.info("MUNCH-Stack phase %d (%s) converged after %d epochs (%s)", self.phase, aux, self.epochs_in_phase, why)
        if self.phase + 1 >= len(dm.aux_names):
            trainer.should_stop = True
            return
        self.phase += 1
        dm.phase = self.phase
        self.epochs_in_phase, self.bad_epochs, self.best = 0, 0, None
        anneal = next((c for c in trainer.callbacks if isinstance(c, AnnealOnPlateau)), None)
        if anneal is not None:
            anneal.restart(trainer)
        else:
            _restart_schedule(trainer)
        log.info("MUNCH-Stack phase %d: auxiliary %s", self.phase, dm.aux_names[self.phase])
