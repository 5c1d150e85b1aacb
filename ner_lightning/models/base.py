"""What every objective family shares: encoder, optimiser + schedule, span evaluation.

A family subclasses :class:`NERModule` and implements ``training_loss(batch)`` and
``decode(batch)`` (word-level label ids ``(B, W)``, a tensor left on the device). A family that takes several optimiser
steps per batch (OVA-AUC's B/I/O groups, COMAUC-2T's CE + AUC steps) sets
``automatic_optimization = False`` and implements ``optimisation_steps(batch)``; the shared
manual loop here does each step (fresh forward, backward, clipping, step) and counts them.

Every family's parameters fall in two groups: the pretrained encoder at the optimiser's
learning rate and everything trained from scratch (heads, CRF transitions, BiLSTM) at one
``head_lr``, so no family gets a head learning rate another does not. Evaluation collects
the word predictions of every chunk on the device, moves them to the host once per epoch,
reassembles whole sentences and scores them with seqeval
(strict and lenient modes) against the full gold word sequences of the split — in a
multi-corpus run (``models/heads.py``), each auxiliary corpus's test set with its own head too.
"""
from __future__ import annotations

import dataclasses
import random
from typing import Callable, ClassVar, Iterable, NamedTuple, Protocol

import numpy as np
import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from lightning_fabric.utilities.apply_func import move_data_to_device
from transformers import get_linear_schedule_with_warmup

from ner_lightning.clock import PROCESS
from ner_lightning.data.alignment import BatchLayout
from ner_lightning.data.corpus import OUTSIDE, LabelSet
from ner_lightning.data.datamodule import MAIN
from ner_lightning.metrics import flat_scores, span_scores
from ner_lightning.models.encoder import TransformerEncoder
from ner_lightning.models.step_losses import StepLosses
from ner_lightning.optim import set_pdsca_phase

SPLIT_OF_STAGE = {"val": "dev", "test": "test"}
MIXED_PRECISION = {"bf16-mixed": torch.bfloat16, "16-mixed": torch.float16}  # Lightning name -> encoder dtype


def sentences_seen(gold: list[list[str]], chunks: list) -> tuple[list[list[str]], list]:
    """The gold sentences whose every word was predicted by ``chunks`` (``(sentence, word
    offset, label ids)``), and those chunks renumbered to them: what a batch-limited evaluation
    can score."""
    words: dict[int, int] = {}
    for si, _, ids in chunks:
        words[si] = words.get(si, 0) + len(ids)
    seen = sorted(si for si, n in words.items() if n == len(gold[si]))
    new_index = {si: i for i, si in enumerate(seen)}
    return [gold[si] for si in seen], [(new_index[si], off, ids) for si, off, ids in chunks if si in new_index]


def layout_of(batch: dict) -> BatchLayout:
    """The batch's :class:`BatchLayout`: carried by every collated batch; rebuilt here (asking
    the device) for a batch made by hand."""
    if "layout" in batch:
        return batch["layout"]
    rows = batch["word_mask"].size(0)
    return BatchLayout(
        words=tuple(batch["word_mask"].sum(1).tolist()),
        sentences=tuple(batch["sentence_index"].tolist()) if "sentence_index" in batch else tuple(range(rows)),
        offsets=tuple(batch["word_offset"].tolist()) if "word_offset" in batch else (0,) * rows,
        types=tuple(batch["type_index"].tolist()) if "type_index" in batch else (),
        corpora=tuple(batch["corpus"].tolist()) if "corpus" in batch else (0,) * rows)


def host_index(values: list[int], device: torch.device) -> torch.Tensor:
    """Indices the host knows, as a long tensor on ``device`` without waiting for it: on a GPU a
    pinned copy sent asynchronously (a plain copy to the GPU waits for every queued kernel)."""
    index = torch.tensor(values, dtype=torch.long)
    return index.pin_memory().to(device, non_blocking=True) if device.type == "cuda" else index


class RealWords(NamedTuple):
    """The real (non-padding) words of a ``(B, W)`` word grid, from the words per row the host
    knows (:class:`BatchLayout`): ``x.flatten(0, 1)[flat]`` is ``x[word_mask]`` (same words, same
    order) without the device computing where the mask is true, which waits for the queued work."""

    flat: torch.Tensor  # (N,) index of each real word in the flattened grid
    rows: torch.Tensor  # (N,) its row

    @classmethod
    def of(cls, words: tuple[int, ...], width: int, device: torch.device) -> "RealWords":
        flat = [r * width + j for r, n in enumerate(words) for j in range(n)]
        return cls(host_index(flat, device), host_index([r for r, n in enumerate(words) for _ in range(n)], device))

    def select(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, W, ...) -> (N, ...)``: the real words' entries, as ``x[word_mask]``."""
        return x.flatten(0, 1)[self.flat]


@dataclasses.dataclass(frozen=True)
class TrainingRecord:
    """What a fitted (and tested) family reports for ``results.json``."""

    history: list[dict]  # every dev evaluation: epoch, batches, flat metrics, span scores
    test: dict | None  # test span scores of the main corpus
    test_aux: dict[str, dict]  # test span scores of each auxiliary corpus (multi-corpus)
    train_batches: int
    forward_passes: int  # training forward passes (one per optimiser step)
    eval_precision: str | None  # the precision dev/test ran in (None: trainer.precision)


class Step(NamedTuple):
    """One optimiser step of a multi-step batch: ``kind`` ("ce" or "auc", read by PDSCA) and a
    callable doing a fresh forward pass and returning the step's loss."""

    kind: str
    loss: Callable[[], torch.Tensor]


def rng_states() -> dict:
    """torch, CUDA, numpy and Python RNG states in types ``torch.load(weights_only=True)`` accepts."""
    name, keys, pos, has_gauss, gauss = np.random.get_state()
    return {"torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
            "numpy": [name, torch.from_numpy(keys.astype(np.int64)), pos, has_gauss, gauss],
            "python": random.getstate()}


def set_rng_states(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    if state["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    name, keys, pos, has_gauss, gauss = state["numpy"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), pos, has_gauss, gauss))
    random.setstate(state["python"])


class ScheduleOwner(Protocol):
    """What owns the length of the learning-rate schedule when the fit's stepping batches do not
    (a batch budget, MUNCH-Stack's phases: ``callbacks.schedules.ScheduleHorizon``)."""

    def schedule_steps(self, trainer: pl.Trainer) -> int:
        """Optimiser-scheduler steps of one run of the schedule."""


class NERModule(pl.LightningModule):
    """Base LightningModule: AdamW-style optimiser with linear warm-up and decay."""

    # What the family requires of the data (applied by config.apply_objective_requirements):
    framing: ClassVar[str] = "tagging"  # the encoder inputs it reads (data.framing); MRCModule: "mrc"
    untyped_spans: ClassVar[bool] = False  # predicts untyped spans (data.label_scheme untyped); TwoTaskModule

    def __init__(
        self,
        encoder: TransformerEncoder,
        label_set: LabelSet,
        optimizer: Callable[..., torch.optim.Optimizer],
        warmup_ratio: float,
        head_lr: float | None,
    ):
        super().__init__()
        self.encoder = encoder
        self.label_set = label_set
        self.id2label = label_set.id2label
        self.optimizer_factory = optimizer
        self.warmup_ratio = warmup_ratio
        self.head_lr = head_lr
        self.train_batches = 0
        self.forward_passes = 0  # training forward passes (one per optimiser step)
        self.clip_val: float | None = None  # manual optimisation: the Trainer's clipping, taken over
        self.step_losses = StepLosses()  # this epoch's training losses, on the device
        self.scores: dict[str, dict] = {}  # latest span scores per stage
        self.history: list[dict] = []  # dev scores of every validation epoch
        self.aux_scores: dict[str, dict] = {}  # test span scores of each auxiliary corpus (multi-corpus)
        self.predictions: dict[str, dict[str, list[list[str]]]] = {}  # latest IOB2 tags per stage and corpus
        self._predictions: dict[str, list] = {"val": [], "test": []}  # (decoded output, layout) per batch
        self.eval_precision: str | None = None  # evaluate_in (callbacks.EvalPrecision); None = trainer.precision
        self.schedule_owner: ScheduleOwner | None = None  # use_schedule; None = the fit's stepping batches
        self.train()  # from_pretrained leaves the encoder in eval mode (dropout off)

    # --- what other parts of the run hand to the module -------------------------------------------
    def evaluate_in(self, precision: str) -> None:
        """Run the encoder of dev/test evaluation in ``precision`` (a Lightning name), training
        keeping ``trainer.precision`` (:meth:`word_states`)."""
        self.eval_precision = precision

    def use_schedule(self, owner: ScheduleOwner) -> None:
        """``owner`` sets the length of the learning-rate schedule (one per run)."""
        if self.schedule_owner is not None and self.schedule_owner is not owner:
            raise ValueError("two callbacks set the learning-rate schedule's length: "
                             f"{type(self.schedule_owner).__name__}, {type(owner).__name__}; keep one of them")
        self.schedule_owner = owner

    # --- to implement per family ---------------------------------------------------------------
    def training_loss(self, batch: dict) -> torch.Tensor:
        raise NotImplementedError

    def decode(self, batch: dict) -> torch.Tensor:
        """Predicted label ids ``(B, W)`` for the words of each example, on the device (values
        outside ``word_mask`` are ignored). Decoding never moves data to the host: evaluation
        collects every batch's output and moves them once per epoch."""
        raise NotImplementedError

    def optimisation_steps(self, batch: dict) -> list[Step]:
        """Manual-optimisation families: the optimiser steps to take on this batch, in order."""
        raise NotImplementedError

    def after_optimizer_step(self) -> None:
        """Called after every optimiser step (the AUC families ascend α here)."""

    def record(self) -> TrainingRecord:
        return TrainingRecord(list(self.history), self.scores.get("test"), dict(self.aux_scores), self.train_batches,
                              self.forward_passes, self.eval_precision)

    # --- shared helpers --------------------------------------------------------------------------
    def word_states(self, batch: dict) -> torch.Tensor:
        """Word states ``(B, W, H)`` in fp32. Under mixed precision (``trainer.precision`` when
        training, ``eval_precision`` when evaluating) only the encoder runs in bf16/fp16: every
        step body runs with autocast off (:meth:`_full_precision`), so heads, losses (CRF
        log-sum-exp, AUC squares, sigmoids) and decoding stay in fp32."""
        precision = self._trainer.precision if self._trainer is not None else None
        if not self.training and self.eval_precision is not None:
            precision = self.eval_precision
        dtype = MIXED_PRECISION.get(str(precision))
        extra = {key: batch[key] for key in ("token_type_ids", "pack") if key in batch}  # MRC segments, packing plan
        with torch.autocast(self.device.type, dtype=dtype, enabled=dtype is not None):
            hidden = self.encoder(batch["input_ids"], batch["attention_mask"], **extra)
        return self.encoder.word_states(hidden.float(), batch["word_starts"])

    def _full_precision(self):
        return torch.autocast(self.device.type, enabled=False)

    @staticmethod
    def real_words(batch: dict) -> RealWords:
        """The batch's real words (:class:`RealWords`), from its layout."""
        mask = batch["word_mask"]
        return RealWords.of(layout_of(batch).words, mask.size(1), mask.device)

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
        for step in self.optimisation_steps(batch):
            set_pdsca_phase(opt, auc=step.kind == "auc")
            loss = self._keep_loss(step.loss(), batch)
            self.forward_passes += 1
            opt.zero_grad()
            self.manual_backward(loss)
            if self.clip_val:
                self.clip_gradients(opt, gradient_clip_val=self.clip_val, gradient_clip_algorithm="norm")
            opt.step()
            self.after_optimizer_step()
        sched.step()
        return None

    def _keep_loss(self, loss: torch.Tensor, batch: dict) -> torch.Tensor:
        """Keep an optimiser step's loss on the device (:class:`StepLosses`), for the finite check,
        the epoch's mean and the loggers."""
        self.step_losses.add(loss, self.train_batches - 1, self.global_step, self.current_epoch,
                             batch["input_ids"].size(0))
        return loss

    def check_finite(self) -> None:
        """A diverged run must fail (failure.json), never be reported with F1 0 as a result: the
        losses since the last check, read on the host once per evaluation and epoch, not per step."""
        first = self.step_losses.first_nonfinite()
        if first is not None:
            raise FloatingPointError(
                f"training loss is {first.loss.item()} at epoch {first.epoch}, step {first.global_step}: the run "
                "diverged; try a lower optimizer.lr or head_lr (or gradient clipping, trainer.gradient_clip_val)")

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
        """Log the batches' losses (``train/loss_step``, every ``trainer.log_every_n_steps``-th batch
        as Lightning would) to the run's loggers: one transfer for the epoch."""
        kept = [(s, loss) for s, loss in self.step_losses.take() if (s.batch + 1) % self.trainer.log_every_n_steps == 0]
        if not kept or not self.loggers:
            return
        values = torch.stack([loss for _, loss in kept]).tolist()
        for logger in self.loggers:
            for (s, _), value in zip(kept, values):
                logger.log_metrics({"train/loss_step": value, "epoch": s.epoch}, step=s.batch)

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

    # --- resume: what a checkpoint needs beyond weights, optimiser, schedule and loops -----------
    def on_save_checkpoint(self, checkpoint: dict) -> None:
        checkpoint["ner_lightning"] = {
            "history": self.history, "train_batches": self.train_batches, "forward_passes": self.forward_passes,
            "rng": rng_states(), "extra_state": self.extra_state(),
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

    def configure_callbacks(self):
        # Lightning refuses automatic clipping under manual optimisation: the module clips.
        if not self.automatic_optimization and self.trainer is not None:
            self.clip_val, self.trainer.gradient_clip_val = self.trainer.gradient_clip_val, None
        return []

    def validation_step(self, batch: dict, batch_idx: int) -> None:
        self._collect("val", batch)

    def test_step(self, batch: dict, batch_idx: int) -> None:
        self._collect("test", batch)

    def _collect(self, stage: str, batch: dict) -> None:
        """Keep the batch's decoded output on the device with its layout; nothing reaches the
        host before the epoch ends (:meth:`_host_entries`)."""
        with self._full_precision():
            self._predictions[stage].append((self.decode(batch), layout_of(batch)))

    def _host_entries(self, collected: list[tuple[torch.Tensor, BatchLayout]]) -> dict[int, list[tuple]]:
        """Per corpus index, the :meth:`entry` of every example the epoch decoded: all outputs
        moved to the host in one transfer."""
        if not collected:
            return {}
        width = max(out.size(1) for out, _ in collected)
        padded = [F.pad(out, (0, 0) * (out.dim() - 2) + (0, width - out.size(1))) for out, _ in collected]
        values = iter(torch.cat(padded).tolist())
        entries: dict[int, list[tuple]] = {}
        for _, layout in collected:
            for row, n_words in enumerate(layout.words):
                entries.setdefault(layout.corpora[row], []).append(self.entry(layout, row, next(values)[:n_words]))
        return entries

    def entry(self, layout: BatchLayout, row: int, values: list) -> tuple:
        """What :meth:`predicted_tags` reassembles of one decoded example: ``(sentence index,
        word offset, label ids)``."""
        return layout.sentences[row], layout.offsets[row], values

    @torch.inference_mode()
    def tag(self, batches: Iterable[dict], lengths: list[int]) -> list[list[str]]:
        """IOB2 tags of whole sentences (main corpus) from their encoded batches, outside a
        Trainer (``ner_lightning.predict``); ``lengths``: words per sentence."""
        collected = []
        for batch in batches:
            batch = move_data_to_device(batch, self.device)
            with self._full_precision():
                collected.append((self.decode(batch), layout_of(batch)))
        return self.predicted_tags(self._host_entries(collected).get(0, []), lengths, "predict")

    def on_fit_start(self) -> None:
        self._check_framing()

    def on_test_start(self) -> None:
        self._check_framing()

    def _check_framing(self) -> None:
        framing = self.trainer.datamodule.framing
        if framing != self.framing:
            raise ValueError(f"{type(self).__name__} reads data.framing={self.framing} inputs but the data module "
                             f"builds data.framing={framing}: leave data.framing null (the objective's)")

    def on_validation_epoch_end(self) -> None:
        self._score("val")

    def on_test_epoch_end(self) -> None:
        self._score("test")

    def _score(self, stage: str) -> None:
        batches, self._predictions[stage] = self._predictions[stage], []
        if self.trainer.sanity_checking:
            return
        collected = self._host_entries(batches)
        dm, split = self.trainer.datamodule, SPLIT_OF_STAGE[stage]
        self.predictions[stage] = {}
        for c in sorted(set(collected) | {0}):  # the main corpus; in a multi-corpus run, each auxiliary (test only)
            name = dm.corpus_names[c]
            gold, chunks = dm.gold_tags(split, name), collected.get(c, [])
            if self._batches_limited(stage):  # debug=fast, limit_val_batches: score the sentences evaluated
                gold, chunks = sentences_seen(gold, chunks)
            lengths = [len(g) for g in gold]
            pred = (self.predicted_tags(chunks, lengths, stage) if c == 0 else
                    self.predicted_tags(chunks, lengths, f"{stage} {name}", self.id2label_of(name)))
            self.predictions[stage][name] = pred
            scores = span_scores(gold, pred)
            if c:
                self.aux_scores[name] = scores
                self.log(f"{stage}_aux/{name}/f1", scores["micro"]["f1"])
                continue
            self.scores[stage] = scores
            flat = flat_scores(scores, stage)
            if stage == "val":
                self.history.append({"epoch": self.current_epoch, "batches": self.train_batches,
                                     "metrics": dict(flat), "scores": scores})
            self.log(f"{stage}/f1", flat.pop(f"{stage}/f1"), prog_bar=True)
            self.log_dict(flat)

    def _batches_limited(self, stage: str) -> bool:
        """Whether Lightning evaluated only some batches of the stage (``fast_dev_run``,
        ``limit_val_batches`` / ``limit_test_batches`` below 1.0)."""
        limit = self.trainer.limit_val_batches if stage == "val" else self.trainer.limit_test_batches
        return bool(self.trainer.fast_dev_run) or limit != 1.0

    def per_word_classifier(self) -> torch.nn.Linear | None:
        """The linear layer over the encoder's first-sub-word states whose argmax is this family's
        decoding of the main corpus (labels in ``label_set`` order): then a Hugging Face
        token-classification model tags as it does (``ner_lightning.export``). None (here) for
        families that decode otherwise (Viterbi, two-task, one-vs-all, MRC)."""
        return None

    def head_label_sets(self) -> dict[str, LabelSet]:
        """The label set of each head: the main corpus's (``HeadModule``: and each auxiliary's)."""
        return {MAIN: self.label_set}

    def id2label_of(self, corpus: str) -> dict[int, str]:
        """Label names of a corpus's head (only ``HeadModule`` families have auxiliary corpora)."""
        return self.id2label

    def predicted_tags(self, collected: list, lengths: list[int], stage: str,
                       id2label: dict[int, str] | None = None) -> list[list[str]]:
        """Whole-sentence IOB2 predictions from the ``(sentence, word offset, label ids)`` of every
        chunk (:meth:`entry`); ``lengths``: words per sentence, each predicted exactly
        once. ``id2label``: an auxiliary corpus's labels (default: the main corpus's)."""
        id2label = id2label or self.id2label
        pred = [[OUTSIDE] * n for n in lengths]
        covered = 0
        for si, off, ids in collected:
            pred[si][off : off + len(ids)] = [id2label[i] for i in ids]
            covered += len(ids)
        if covered != sum(lengths):
            raise RuntimeError(f"{stage}: predicted {covered} words for {sum(lengths)} words")
        return pred

    def optimizer_parameters(self) -> list[dict]:
        """Two groups: the pretrained encoder (optimiser lr) and every parameter trained from
        scratch at ``head_lr`` (None = the optimiser's lr). Families with min-max variables
        add or exclude those."""
        encoder = {id(p) for p in self.encoder.parameters()}
        pretrained = [p for p in self.encoder.parameters() if p.requires_grad]
        heads = [p for p in self.parameters() if p.requires_grad and id(p) not in encoder and not self._own(p)]
        head_group = {"params": heads} if self.head_lr is None else {"params": heads, "lr": self.head_lr}
        return [group for group in ({"params": pretrained}, head_group) if group["params"]]  # frozen encoder: heads only

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
