"""MUNCH-Stack's phases (MUNCHABLES Alg. 4): one auxiliary corpus after the other."""

from __future__ import annotations

import logging

from ner_lightning.callbacks.schedules import ScheduleHorizon, restart_schedule

log = logging.getLogger("ner_lightning")


class AuxiliaryPhases(ScheduleHorizon):
    """MUNCH-Stack (MUNCHABLES Alg. 4): one phase per auxiliary corpus (``data.phase``), each
    until the main model converges (``is_converge_main``): the epoch's mean main-corpus training
    loss has not reached a new minimum for ``patience`` epochs (after ``min_epochs``), or
    ``max_epochs`` epochs have passed, or the run's rate policy (``NERModule.use_rate_policy``:
    ``AnnealOnPlateau``, when present) has taken the learning rate below its minimum. Then the next
    auxiliary takes over and the learning-rate schedule starts again; after the last phase the run ends."""

    restarts_schedule = True

    def __init__(self, patience: int, min_epochs: int, max_epochs: int):
        self.patience, self.min_epochs, self.max_epochs = patience, min_epochs, max_epochs
        self.phase, self.epochs_in_phase, self.bad_epochs = 0, 0, 0
        self.best: float | None = None
        self.history: list[dict] = []  # per phase: auxiliary, epochs, first/last epoch, why it ended

    def state_dict(self) -> dict:
        return {
            "phase": self.phase,
            "epochs_in_phase": self.epochs_in_phase,
            "bad_epochs": self.bad_epochs,
            "best": self.best,
            "history": self.history,
        }

    def load_state_dict(self, state: dict) -> None:
        for key, value in state.items():
            setattr(self, key, value)

    def result_section(self, out_dir) -> dict:
        return {"phases": self.history}

    def on_train_start(self, trainer, pl_module) -> None:
        trainer.datamodule.use_phase(self.phase)  # where a resumed run left off

    def setup(self, trainer, pl_module, stage: str) -> None:
        """The phases bound the run: at most ``max_epochs`` per auxiliary (``trainer.max_epochs``
        and ``min_epochs`` do not apply under MUNCH-Stack)."""
        super().setup(trainer, pl_module, stage)
        dm = trainer.datamodule
        if not dm.has_phases:
            raise ValueError("AuxiliaryPhases (multitask.phases) is MUNCH-Stack's: use it with multitask=munch_stack")
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
            self.history.append(
                {
                    "phase": self.phase,
                    "auxiliary": dm.aux_names[self.phase],
                    "epochs": self.epochs_in_phase,
                    "last_epoch": trainer.current_epoch - 1,
                    "ended_by": "the trainer stopped (trainer.max_epochs or another callback)",
                }
            )
        if self.phase + 1 < len(dm.aux_names):
            log.warning(
                "MUNCH-Stack ended in phase %d of %d (%s): auxiliaries %s were never used",
                self.phase + 1,
                len(dm.aux_names),
                self.history[-1]["ended_by"],
                dm.aux_names[self.phase + 1 :],
            )

    def converged(self, trainer, pl_module) -> str | None:
        """Why the current phase has converged, or None."""
        policy = pl_module.rate_policy
        if policy is not None and policy.below_minimum(trainer):
            return f"learning rate below {policy.min_lr}"
        if self.epochs_in_phase >= self.max_epochs:
            return f"{self.max_epochs} epochs"
        if policy is None and self.epochs_in_phase >= self.min_epochs and self.bad_epochs >= self.patience:
            return f"main loss without a new minimum for {self.patience} epochs"
        return None

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        dm = trainer.datamodule
        loss = pl_module.epoch_loss()
        self.epochs_in_phase += 1
        if loss is not None and (self.best is None or loss < self.best):
            self.best, self.bad_epochs = loss, 0
        else:
            self.bad_epochs += 1
        why = self.converged(trainer, pl_module)
        if why is None:
            return
        aux = dm.aux_names[self.phase]
        self.history.append(
            {
                "phase": self.phase,
                "auxiliary": aux,
                "epochs": self.epochs_in_phase,
                "last_epoch": trainer.current_epoch,
                "ended_by": why,
            }
        )
        log.info("MUNCH-Stack phase %d (%s) converged after %d epochs (%s)", self.phase, aux, self.epochs_in_phase, why)
        if self.phase + 1 >= len(dm.aux_names):
            trainer.should_stop = True
            return
        self.phase += 1
        dm.use_phase(self.phase)
        self.epochs_in_phase, self.bad_epochs, self.best = 0, 0, None
        if pl_module.rate_policy is not None:
            pl_module.rate_policy.restart(trainer)
        else:
            restart_schedule(trainer)
        log.info("MUNCH-Stack phase %d: auxiliary %s", self.phase, dm.aux_names[self.phase])
