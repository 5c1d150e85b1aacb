"""What a family's checkpoint carries beyond weights, optimiser, schedule and loops (a mixin of
``NERModule``): the dev history, the batch and forward-pass counters, every random generator's
state and the family's own training state (:meth:`ResumeState.extra_state`), so a fit resumed
from ``last.ckpt`` goes on as the uninterrupted fit would."""

from __future__ import annotations

import pytorch_lightning as pl

from ner_lightning.checkpoint_io import rng_states, set_rng_states


class ResumeState(pl.LightningModule):
    """Lightning's checkpoint hooks of a family."""

    # Provided by the module (``NERModule.__init__``):
    history: list[dict]  # dev scores of every validation epoch
    train_batches: int
    forward_passes: int

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        checkpoint["ner_lightning"] = {
            "history": self.history,
            "train_batches": self.train_batches,
            "forward_passes": self.forward_passes,
            "rng": rng_states(),
            "extra_state": self.extra_state(),
        }

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        """Resuming a fit restores the training state; loading the best weights to test does not."""
        from pytorch_lightning.trainer.states import TrainerFn

        if self._trainer is None or self.trainer.state.fn != TrainerFn.FITTING or "ner_lightning" not in checkpoint:
            return
        state = checkpoint["ner_lightning"]
        self.history = state["history"]
        self.train_batches, self.forward_passes = state["train_batches"], state["forward_passes"]
        self.load_extra_state(state["extra_state"])
        set_rng_states(state["rng"])

    def extra_state(self) -> dict:
        """State outside ``state_dict`` that training changes (the AUC losses' a, b, α)."""
        return {}

    def load_extra_state(self, state: dict) -> None:
        """Inverse of :meth:`extra_state`."""
