"""What every objective family shares: encoder, optimiser + schedule, span evaluation.

A family subclasses :class:`NERModule` and implements ``training_loss(batch)`` and
``decode(batch)`` (word-level label ids ``(B, W)``, a tensor left on the device). A family that takes several optimiser
steps per batch (OVA-AUC's B/I/O groups, COMAUC-2T's CE + AUC steps) sets
``automatic_optimization = False`` and implements ``optimisation_steps(batch)``; the shared
manual loop here does each step (fresh forward, backward, clipping, step) and counts them.

Every family's parameters fall in two groups: the pretrained encoder at the optimiser's
learning rate and everything trained from scratch (heads, CRF transitions, BiLSTM) at one
``head_lr``, so no family gets a head learning rate another does not. Span evaluation:
``models/evaluation.py``; what a checkpoint carries beyond the weights: ``models/resume_state.py``.
"""

from __future__ import annotations

from typing import ClassVar

import pytorch_lightning as pl
import torch
from torch.optim.lr_scheduler import LRScheduler
from transformers import get_linear_schedule_with_warmup
from typing_extensions import Unpack  # typing.Unpack: Python 3.11+

from ner_lightning.clock import PROCESS
from ner_lightning.data.contract import ModelData, require_datamodule
from ner_lightning.data.corpus import LabelSet
from ner_lightning.data.datamodule import MAIN
from ner_lightning.models.contracts import FamilySettings, RatePolicy, ScheduleOwner, Step, TrainingRecord
from ner_lightning.models.encoder import TransformerEncoder
from ner_lightning.models.evaluation import SpanEvaluation
from ner_lightning.models.resume_state import ResumeState
from ner_lightning.models.step_losses import StepLosses
from ner_lightning.models.word_grid import RealWords, layout_of
from ner_lightning.optim import set_pdsca_phase

MIXED_PRECISION = {"bf16-mixed": torch.bfloat16, "16-mixed": torch.float16}  # Lightning name -> encoder dtype


class NERModule(SpanEvaluation, ResumeState, pl.LightningModule):
    """Base LightningModule: AdamW-style optimiser with linear warm-up and decay."""

    # What the family requires of the data (applied by config.apply_objective_requirements):
    framing: ClassVar[str] = "tagging"  # the encoder inputs it reads (data.framing); MRCModule: "mrc"
    untyped_spans: ClassVar[bool] = False  # predicts untyped spans (data.label_scheme untyped); TwoTaskModule

    def __init__(self, encoder: TransformerEncoder, label_set: LabelSet, **settings: Unpack[FamilySettings]):
        super().__init__()
        self.encoder = encoder
        self.label_set = label_set
        self.id2label = label_set.id2label
        self.optimizer_factory = settings["optimizer"]
        self.warmup_ratio = settings["warmup_ratio"]
        self.head_lr = settings["head_lr"]
        self.dropout_rate = settings["dropout"]
        self.train_batches = 0
        self.forward_passes = 0  # training forward passes (one per optimiser step)
        self.clip_val: float | None = None  # manual optimisation: the Trainer's clipping, taken over
        self.step_losses = StepLosses()  # this epoch's training losses, on the device
        self.eval_precision: str | None = None  # evaluate_in (callbacks.EvalPrecision); None = trainer.precision
        self.schedule_owner: ScheduleOwner | None = None  # use_schedule; None = the fit's stepping batches
        self.rate_policy: RatePolicy | None = None  # use_rate_policy; None = the schedule sets the rate
        self.train()  # from_pretrained leaves the encoder in eval mode (dropout off)

    # --- what other parts of the run hand to the module -------------------------------------------
    def evaluate_in(self, precision: str) -> None:
        """Run the encoder of dev/test evaluation in ``precision`` (a Lightning name), training
        keeping ``trainer.precision`` (:meth:`word_states`)."""
        self.eval_precision = precision

    def use_schedule(self, owner: ScheduleOwner) -> None:
        """``owner`` sets the length of the learning-rate schedule (one per run)."""
        if self.schedule_owner is not None and self.schedule_owner is not owner:
            raise ValueError(
                "two callbacks set the learning-rate schedule's length: "
                f"{type(self.schedule_owner).__name__}, {type(owner).__name__}; keep one of them"
            )
        self.schedule_owner = owner

    def use_rate_policy(self, policy: RatePolicy) -> None:
        """``policy`` sets the learning rate from the training loss (one per run)."""
        if self.rate_policy is not None and self.rate_policy is not policy:
            raise ValueError(
                "two callbacks set the learning rate from the loss: "
                f"{type(self.rate_policy).__name__}, {type(policy).__name__}; keep one of them"
            )
        self.rate_policy = policy

    # --- to implement per family ---------------------------------------------------------------
    def training_loss(self, batch: dict) -> torch.Tensor:
        raise NotImplementedError

    def lockstep_refusal(self) -> str | None:
        """Why this module's cells cannot train in lockstep (``ner_lightning.lockstep``), or None
        when they can: the family then is a ``contracts.Stackable``."""
        return f"{type(self).__name__} has no fixed-shape loss (contracts.Stackable)"

    def optimisation_steps(self, batch: dict) -> list[Step]:
        """Manual-optimisation families: the optimiser steps to take on this batch, in order."""
        raise NotImplementedError

    def fit_to_data(self, dm: ModelData) -> None:
        """What the family takes from its training data before its fit (WCE's label counts)."""

    def after_optimizer_step(self) -> None:
        """Called after every optimiser step (the AUC families ascend α here)."""

    def record(self) -> TrainingRecord:
        return TrainingRecord(
            list(self.history),
            self.scores.get("test"),
            dict(self.aux_scores),
            self.train_batches,
            self.forward_passes,
            self.eval_precision,
        )

    # --- shared helpers --------------------------------------------------------------------------
    def word_states(self, batch: dict) -> torch.Tensor:
        """Word states ``(B, W, H)`` in fp32. Under mixed precision (``trainer.precision`` when
        training, ``eval_precision`` when evaluating) only the encoder runs in bf16/fp16: every
        step body runs with autocast off (:meth:`_full_precision`), so heads, losses (CRF
        log-sum-exp, AUC squares, sigmoids) and decoding stay in fp32."""
        precision: str | None = self._trainer.precision if self._trainer is not None else None
        if not self.training and self.eval_precision is not None:
            precision = self.eval_precision
        dtype = MIXED_PRECISION.get(str(precision))
        extra = {key: batch[key] for key in ("token_type_ids", "pack") if key in batch}  # MRC segments, packing plan
        with torch.autocast(self.device.type, dtype=dtype, enabled=dtype is not None):
            hidden = self.encoder(batch["input_ids"], batch["attention_mask"], **extra)
        return self.encoder.word_states(hidden.float(), batch["word_starts"])

    @staticmethod
    def real_words(batch: dict) -> RealWords:
        """The batch's real words (:class:`RealWords`), from its layout."""
        mask = batch["word_mask"]
        return RealWords.of(layout_of(batch).words, mask.size(1), mask.device)

    def padded_word_states(self, batch: dict, dtype: torch.dtype | None = None) -> torch.Tensor:
        """Word states ``(B, W, H)`` in fp32 of a padded batch from fixed-shape operations only (for
        ``vmap``, ``ner_lightning.lockstep``): the encoder, autocast to ``dtype`` if given, with an
        additive key-padding mask ``(B, 1, T, T)`` (the form Hugging Face adds to the attention
        scores as it is, in every attention implementation, without asking the device)."""
        ids, keep = batch["input_ids"], batch["attention_mask"].bool()
        square = keep[:, None, None, :].expand(ids.size(0), 1, ids.size(1), ids.size(1))
        additive = torch.zeros(square.shape, device=ids.device).masked_fill(~square, torch.finfo(torch.float32).min)
        with torch.autocast(ids.device.type, dtype=dtype, enabled=dtype is not None):
            hidden = self.encoder.model(input_ids=ids, attention_mask=additive).last_hidden_state
        return self.encoder.word_states(hidden.float(), batch["word_starts"])

    @staticmethod
    def word_labels(batch: dict) -> torch.Tensor:
        """Gold label id per word ``(B, W)``; padding words are ``-100``."""
        labels = batch["labels"].gather(1, batch["word_starts"])
        return labels.masked_fill(~batch["word_mask"], -100)

    # --- Lightning hooks -------------------------------------------------------------------------
    def training_step(self, batch: dict, batch_idx: int) -> torch.Tensor | None:
        with self._full_precision():
            return self._training_step(batch)

    def _training_step(self, batch: dict) -> torch.Tensor | None:
        self.train_batches += 1
        if self.automatic_optimization:
            loss = self._keep_loss(self.training_loss(batch), batch)
            self.forward_passes += 1
            return loss
        opt, sched = self.optimizers(), self.lr_schedulers()
        if isinstance(opt, list) or not isinstance(sched, LRScheduler):
            raise TypeError("manual optimisation takes one optimiser and one schedule (configure_optimizers)")
        for step in self.optimisation_steps(batch):
            set_pdsca_phase(opt, auc=step.kind == "auc")
            loss = self._keep_loss(step.loss(), batch)
            self.forward_passes += 1
            opt.zero_grad()
            self.manual_backward(loss)
            if self.clip_val:
                self.clip_gradients(opt.optimizer, gradient_clip_val=self.clip_val, gradient_clip_algorithm="norm")
            opt.step()
            self.after_optimizer_step()
        sched.step()
        return None

    def _keep_loss(self, loss: torch.Tensor, batch: dict) -> torch.Tensor:
        """Keep an optimiser step's loss on the device (:class:`StepLosses`), for the finite check,
        the epoch's mean and the loggers."""
        self.step_losses.add(
            loss, self.train_batches - 1, self.global_step, self.current_epoch, batch["input_ids"].size(0)
        )
        return loss

    def check_finite(self) -> None:
        """A diverged run must fail (failure.json), never be reported with F1 0 as a result: the
        losses since the last check, read on the host once per evaluation and epoch, not per step."""
        first = self.step_losses.first_nonfinite()
        if first is not None:
            raise FloatingPointError(
                f"training loss is {first.loss.item()} at epoch {first.epoch}, step {first.global_step}: the run "
                "diverged; try a lower optimizer.lr or head_lr (or gradient clipping, trainer.gradient_clip_val)"
            )

    def epoch_loss(self) -> float | None:
        """Mean main-corpus training loss of the current (or just finished) epoch, read by the
        convergence tests of ``callbacks.schedules`` (``HeadModule`` tracks it per corpus)."""
        mean = self.step_losses.epoch_mean(self.current_epoch)
        return float(mean) if mean is not None else None

    def log_epoch_loss(self) -> None:
        """``train/loss_epoch`` (progress bar and loggers) once per epoch, not through ``self.log``
        at every step (~0.5 ms of Lightning's bookkeeping a step)."""
        mean = self.step_losses.epoch_mean(self.current_epoch)
        if mean is not None:
            self.log("train/loss_epoch", mean, on_step=False, on_epoch=True, prog_bar=True)

    def flush_step_losses(self) -> None:
        """Log the batches' losses to the run's loggers: one transfer for the epoch."""
        # Lightning's logger connector sets Trainer.log_every_n_steps; the class does not declare it.
        self.step_losses.log_to(self.loggers, self.trainer.log_every_n_steps)  # type: ignore[attr-defined]

    def on_validation_start(self) -> None:
        PROCESS.open("dev")  # a dev evaluation inside the fit: its own phase of the cell's time
        self.check_finite()

    def on_validation_end(self) -> None:
        PROCESS.close("dev")

    def on_train_epoch_end(self) -> None:
        self.check_finite()
        self.log_epoch_loss()
        self.flush_step_losses()

    def on_train_end(self) -> None:
        self.check_finite()
        self.flush_step_losses()

    def optimizer_step(self, *args, **kwargs) -> None:
        super().optimizer_step(*args, **kwargs)
        self.after_optimizer_step()

    def configure_callbacks(self):
        # Lightning refuses automatic clipping under manual optimisation: the module clips.
        if not self.automatic_optimization and self.trainer is not None:
            self.clip_val, self.trainer.gradient_clip_val = self.trainer.gradient_clip_val, None
        return []

    def on_fit_start(self) -> None:
        self._check_framing()

    def on_test_start(self) -> None:
        self._check_framing()

    def _check_framing(self) -> None:
        framing = require_datamodule(self.trainer).framing
        if framing != self.framing:
            raise ValueError(
                f"{type(self).__name__} reads data.framing={self.framing} inputs but the data module "
                f"builds data.framing={framing}: leave data.framing null (the objective's)"
            )

    def per_word_classifier(self) -> torch.nn.Linear | None:
        """The linear layer over the encoder's first-sub-word states whose argmax is this family's
        decoding of the main corpus (labels in ``label_set`` order): then a Hugging Face
        token-classification model tags as it does (``ner_lightning.export``). None (here) for
        families that decode otherwise (Viterbi, two-task, one-vs-all, MRC)."""
        return None

    def head_label_sets(self) -> dict[str, LabelSet]:
        """The label set of each head: the main corpus's (``HeadModule``: and each auxiliary's)."""
        return {MAIN: self.label_set}

    def optimizer_parameters(self) -> list[dict]:
        """Two groups: the pretrained encoder (optimiser lr) and every parameter trained from
        scratch at ``head_lr`` (None = the optimiser's lr). Families with min-max variables
        add or exclude those."""
        encoder = {id(p) for p in self.encoder.parameters()}
        pretrained = [p for p in self.encoder.parameters() if p.requires_grad]
        heads = [p for p in self.parameters() if p.requires_grad and id(p) not in encoder and not self._own(p)]
        head_group = {"params": heads} if self.head_lr is None else {"params": heads, "lr": self.head_lr}
        return [
            group for group in ({"params": pretrained}, head_group) if group["params"]
        ]  # frozen encoder: heads only

    def _own(self, p: torch.nn.Parameter) -> bool:
        """Parameters a family optimises itself (AUC losses' a, b, α)."""
        return False

    def configure_optimizers(self):
        optimizer = self.optimizer_factory(params=self.optimizer_parameters())
        # A callback may own the schedule's length (use_schedule): MUNCH-Stack's phases (it
        # restarts once per phase), a batch budget (callbacks.batch_budget).
        owner = self.schedule_owner
        total = owner.schedule_steps(self.trainer) if owner is not None else self.trainer.estimated_stepping_batches
        scheduler = get_linear_schedule_with_warmup(optimizer, int(self.warmup_ratio * total), total)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}
