"""K cells of one family, encoder and optimiser, each with its own batches, as one stacked model.

The cells' parameters are stacked along a leading cell axis (``torch.func.stack_module_state``)
and one ``vmap`` of ``grad_and_value`` over the family's fixed-shape loss
(``contracts.Stackable.padded_loss``) gives every cell's gradient of its own batch at once, with
dropout drawn per cell (``randomness="different"``). The update is each cell's own: gradient-norm
clipping per cell (``clip_grad_norm_``'s rule on that cell's gradient), and the family's optimiser
over the stacked tensors — AdamW, SGD and libauc's PESG act element-wise, so one optimiser over the
stack is K optimisers, each with its own state — then what the family moves itself
(``lockstep_after_step``: the AUC losses' α ascent). Without dropout one stacked step is the K
cells' steps alone, up to float rounding (``tests/test_lockstep.py``). Dev batches are the same
for every cell of a group, so they are read once and scored by the K models (``vmap`` over the
parameters only). A cell that has stopped keeps its weights and optimiser state
(:class:`FrozenRows`). What it buys: one launch of each operation serves K cells, so cells too
small to fill a GPU (or a CPU core's vector units, with the tiny encoder) share its arithmetic:
one step of 8 MiniLM cells took a third of their 8 steps on an H200, yet a whole grid there ran
at half the parallel launcher's rate (docs/benchmarks.md "Lockstep on a GPU").
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import cast

import torch
from pytorch_lightning.core.optimizer import LightningOptimizer
from torch import nn
from torch.func import functional_call, grad_and_value, stack_module_state, vmap

from ner_lightning.models.base import NERModule
from ner_lightning.models.contracts import Stackable


class _PaddedLoss(nn.Module):
    """A family as the function ``vmap`` maps: its fixed-shape loss (or scores) of a batch, the
    encoder in ``dtype`` (None: fp32)."""

    def __init__(self, family: Stackable):
        super().__init__()
        self.family = family

    def forward(self, batch: dict, scores: bool = False, dtype: torch.dtype | None = None) -> torch.Tensor:
        return self.family.padded_scores(batch, dtype) if scores else self.family.padded_loss(batch, dtype)


def stack_batches(batches: Sequence[dict], pad_id: int) -> dict[str, torch.Tensor]:
    """Each cell's batch padded to the group's shape and stacked on a leading cell axis: rows,
    sub-words and words. A padding row attends to its first position (no row attends to nothing)
    and has no words, so it adds nothing to its cell's loss."""
    rows = max(b["input_ids"].size(0) for b in batches)
    tokens = max(b["input_ids"].size(1) for b in batches)
    words = max(b["word_starts"].size(1) for b in batches)
    fill = {"input_ids": pad_id, "attention_mask": 0, "labels": -100, "word_starts": 0, "word_mask": False}
    width = {"input_ids": tokens, "attention_mask": tokens, "labels": tokens, "word_starts": words, "word_mask": words}
    out = {}
    for key, value in fill.items():
        padded = []
        for b in batches:
            t = b[key]
            grown = t.new_full((rows, width[key]), value)
            grown[: t.size(0), : t.size(1)] = t
            if key == "attention_mask":
                grown[t.size(0) :, 0] = 1
            padded.append(grown)
        out[key] = torch.stack(padded)
    return out


def padded_batch(batch: dict) -> dict[str, torch.Tensor]:
    """The fixed-shape keys of one (dev) batch, as :func:`stack_batches` keeps them."""
    return {key: batch[key] for key in ("input_ids", "attention_mask", "labels", "word_starts", "word_mask")}


def build_cells(cfg, seeds: Sequence[int]) -> tuple[list[NERModule], object]:
    """The modules of cells that differ only in their initialisation seed (``seeds``), built from
    one composed config, and the data module they share (set up for fitting)."""
    from hydra.utils import instantiate

    from ner_lightning.cell.build import build_datamodule, build_module

    modules, datamodule = [], None
    for seed in seeds:
        torch.manual_seed(seed)
        encoder = instantiate(cfg.model)
        if datamodule is None:
            datamodule = build_datamodule(cfg, encoder.tokenizer)
            datamodule.setup("fit")
        modules.append(build_module(cfg, encoder, datamodule))
    return modules, datamodule


def _key(name: str) -> str:
    """A ``state_dict`` name as a key of a registered dict (no dots)."""
    return name.replace(".", "__")


class StackedCells(nn.Module):
    """The K cells' parameters and buffers on a leading cell axis, registered (so the module that
    holds this one saves, moves and optimises them), and the maps of the module docstring.

    Names are the cells' own ``state_dict`` names behind ``family.``; ``stepped`` lists, in
    optimiser-group order, those the family's optimiser steps (clipped together)."""

    def __init__(self, modules: Sequence[NERModule]):
        super().__init__()
        refusals = {why for m in modules if (why := m.lockstep_refusal()) is not None}
        if refusals:
            raise ValueError(f"these cells cannot train in lockstep: {'; '.join(sorted(refusals))}")
        if len({type(m) for m in modules}) != 1:
            raise ValueError("a lockstep group holds cells of one objective family")
        self.cells = len(modules)
        self.step_dtype: torch.dtype | None = None  # the encoder's dtype in the latest step (gradients)
        wrapped = [_PaddedLoss(cast(Stackable, m)) for m in modules]
        stacked, buffers = stack_module_state(wrapped)
        trainable = {n for n, p in stacked.items() if p.requires_grad}
        self.weights = nn.ParameterDict(
            {_key(n): nn.Parameter(p.detach()) for n, p in stacked.items() if n in trainable}
        )
        self.fixed = nn.ParameterDict(
            {
                _key(n): nn.Parameter(t.detach(), requires_grad=False)
                for n, t in {**stacked, **buffers}.items()
                if n not in trainable
            }
        )
        self.trainable = [n for n in stacked if n in trainable]
        self.others = [n for n in {**stacked, **buffers} if n not in trainable]
        base = copy.deepcopy(wrapped[0]).to("meta")
        # Attention as plain matmuls: vmap batches them, while SDPA's CPU kernel has no batching
        # rule and runs once per cell (the same values up to float rounding).
        base.family.encoder.model.set_attn_implementation("eager")
        base.train()  # dropout on in the step; scores() turns it off for its call only
        self._base = (base,)  # a template for functional_call, not a submodule (nothing of it is saved)
        first = modules[0]
        names = {id(p): f"family.{n}" for n, p in first.named_parameters()}
        self._groups = [[names[id(p)] for p in g["params"]] for g in first.optimizer_parameters()]
        self._group_options = [{k: v for k, v in g.items() if k != "params"} for g in first.optimizer_parameters()]
        self.stepped = [n for g in self._groups for n in g]
        self.family = cast(Stackable, first)
        self._grads = vmap(grad_and_value(self._loss), in_dims=(0, 0, 0, None), randomness="different")
        self._scores = vmap(self._cell_scores, in_dims=(0, 0, None, None), randomness="different")

    # --- the stacked tensors by their cells' names ----------------------------------------------
    def params(self) -> dict[str, torch.Tensor]:
        return {n: self.weights[_key(n)] for n in self.trainable}

    def buffers_by_name(self) -> dict[str, torch.Tensor]:
        return {n: self.fixed[_key(n)] for n in self.others}

    def optimizer_groups(self) -> list[dict]:
        """The family's optimiser groups (encoder; heads at ``head_lr``; the AUC losses' a, b) over
        the stacked tensors."""
        return [
            {**options, "params": [self.weights[_key(n)] for n in group]}
            for group, options in zip(self._groups, self._group_options, strict=True)
        ]

    def cell_state(self, k: int) -> dict[str, torch.Tensor]:
        """Cell ``k``'s parameters and buffers as its module's ``state_dict`` names them (views)."""
        tensors = {**self.params(), **self.buffers_by_name()}
        return {n.removeprefix("family."): t[k] for n, t in tensors.items()}

    @torch.no_grad()
    def load_cell_state(self, k: int, state: dict[str, torch.Tensor]) -> None:
        """Cell ``k``'s rows set to ``state`` (its module's ``state_dict``: the weights it tests)."""
        for name, rows in self.cell_state(k).items():
            if name in state:
                rows.copy_(state[name])

    # --- the maps -------------------------------------------------------------------------------
    def _loss(self, params: dict, buffers: dict, batch: dict, dtype: torch.dtype | None) -> torch.Tensor:
        return functional_call(self._base[0], (params, buffers), (batch,), {"dtype": dtype})

    def _cell_scores(self, params: dict, buffers: dict, batch: dict, dtype: torch.dtype | None) -> torch.Tensor:
        return functional_call(self._base[0], (params, buffers), (batch,), {"scores": True, "dtype": dtype})

    def gradients(
        self, batches: dict[str, torch.Tensor], dtype: torch.dtype | None = None
    ) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        """Every cell's gradient of its own batch (``stack_batches``) and its loss ``(K,)``; the
        encoder's ``dtype`` is kept as ``step_dtype`` (what the group's cells record)."""
        self.step_dtype = dtype or torch.float32
        return self._grads(self.params(), self.buffers_by_name(), batches, dtype)

    def set_grads(self, grads: dict[str, torch.Tensor], clip_norm: float | None) -> None:
        """Each cell's gradient into ``.grad``, scaled as ``clip_grad_norm_(clip_norm)`` scales it
        for that cell alone (the norm over the optimiser's parameters)."""
        params = self.params()
        if clip_norm:  # one norm per cell and tensor, then one per cell; one fused multiply (foreach)
            norms = torch.stack(
                [torch.linalg.vector_norm(grads[n], dim=tuple(range(1, grads[n].dim()))) for n in self.stepped]
            )
            factor = (clip_norm / (torch.linalg.vector_norm(norms, dim=0) + 1e-6)).clamp(max=1.0)
            scales = [factor.view(-1, *[1] * (grads[n].dim() - 1)) for n in params]
            scaled = torch._foreach_mul([grads[n] for n in params], scales)
            for p, g in zip(params.values(), scaled, strict=True):
                p.grad = g
            return
        for name, p in params.items():
            p.grad = grads[name]

    def after_step(self) -> None:
        """What the family moves outside its optimiser (the AUC losses' α ascent); gradients cleared."""
        params = self.params()
        self.family.lockstep_after_step(params)
        for p in params.values():
            p.grad = None

    def step(
        self,
        batches: dict[str, torch.Tensor],
        optimizer: torch.optim.Optimizer | LightningOptimizer,
        clip_norm: float | None,
        dtype: torch.dtype | None = None,
        frozen: FrozenRows | None = None,
    ) -> torch.Tensor:
        """One optimiser step of every cell on its own batch — gradients, clipping per cell, the
        family's optimiser (``optimizer``: over :meth:`optimizer_groups`), what the family moves
        itself — with the ``frozen`` cells' rows put back; the K losses. Under a Trainer,
        ``optimizer`` is its ``LightningOptimizer``, whose step Lightning counts."""
        grads, losses = self.gradients(batches, dtype)
        self.set_grads(grads, clip_norm)
        optimizer.step()
        self.after_step()
        if frozen is not None:
            frozen.restore(optimizer.optimizer if isinstance(optimizer, LightningOptimizer) else optimizer)
        return losses.detach()

    @torch.no_grad()
    def scores(self, batch: dict, cells: Sequence[int], dtype: torch.dtype | None = None) -> torch.Tensor:
        """Word scores ``(len(cells), B, W, labels)`` of one batch that every cell reads (a dev
        batch), by the models of ``cells`` (positions in the group), dropout off."""
        params, buffers = self.params(), self.buffers_by_name()
        if len(cells) != self.cells:
            index = torch.tensor(list(cells), device=next(iter(params.values())).device)
            params = {n: t.index_select(0, index) for n, t in params.items()}
            buffers = {n: t.index_select(0, index) for n, t in buffers.items()}
        self._base[0].eval()
        try:
            return self._scores(params, buffers, padded_batch(batch), dtype)
        finally:
            self._base[0].train()


class FrozenRows:
    """The rows of stopped cells held still: their parameters and optimiser state (every state
    tensor with the cell axis) as they were when the cell stopped, put back after each stacked
    step, so a stopped cell no longer changes while the others train on."""

    def __init__(self) -> None:
        self.held: dict[int, list[tuple[torch.Tensor, str | None, torch.Tensor]]] = {}

    def hold(self, cells: Sequence[int], stack: StackedCells, optimizer: torch.optim.Optimizer) -> None:
        """Take the rows of ``cells`` not held yet (those that stopped since the last step)."""
        for k in cells:
            if k in self.held:
                continue
            rows: list[tuple[torch.Tensor, str | None, torch.Tensor]] = []
            for p in stack.params().values():
                rows.append((p, None, p.detach()[k].clone()))
                for key, t in optimizer.state.get(p, {}).items():
                    if isinstance(t, torch.Tensor) and t.shape == p.shape:
                        rows.append((p, key, t[k].clone()))
            self.held[k] = rows

    @torch.no_grad()
    def restore(self, optimizer: torch.optim.Optimizer) -> None:
        """Put every held row back (state tensors looked up again: an optimiser may replace them)."""
        for k, rows in self.held.items():
            for p, key, row in rows:
                (p if key is None else optimizer.state[p][key])[k].copy_(row)

    def clear(self) -> None:
        self.held = {}
