"""Cells trained in lockstep: K cells of one family, encoder and optimiser, each with its own
batches, trained as one stacked model.

The cells' parameters are stacked along a leading cell axis (``torch.func.stack_module_state``)
and one ``vmap`` of ``grad_and_value`` over the family's fixed-shape loss
(``contracts.Stackable.padded_loss``) gives every cell's gradient of its own batch at once, with dropout
drawn independently per cell (``randomness="different"``). The update is each cell's own:
gradient-norm clipping per cell (``clip_grad_norm_``'s rule on that cell's gradient), and the
family's optimiser over the stacked tensors — AdamW, SGD and libauc's PESG act element-wise, so
one optimiser over the stack is K optimisers, each with its own state — with the family's
parameter groups (encoder, heads at ``head_lr``, the AUC losses' a, b) and linear warm-up and
decay; then what the family moves itself (``lockstep_after_step``: the AUC losses' α ascent).
Without dropout one lockstep step is the K cells' steps alone, up to float rounding
(``tests/test_lockstep.py``). What it buys: one launch of each operation serves K cells, so
cells too small to fill a GPU (or a CPU core's vector units, with the tiny encoder) share its
arithmetic; MiniLM on a CPU is compute-bound and gains nothing (``benchmarks/lockstep_step.py``).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import cast

import torch
from torch import nn
from torch.func import functional_call, grad_and_value, stack_module_state, vmap
from transformers import get_linear_schedule_with_warmup

from ner_lightning.models.base import NERModule
from ner_lightning.models.contracts import Stackable


class _PaddedLoss(nn.Module):
    """A family as the function ``vmap`` maps: its fixed-shape loss (or scores) of a batch."""

    def __init__(self, family: Stackable):
        super().__init__()
        self.family = family

    def forward(self, batch: dict, scores: bool = False) -> torch.Tensor:
        return self.family.padded_scores(batch) if scores else self.family.padded_loss(batch)


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


def build_cells(cfg, seeds: Sequence[int]) -> tuple[list[NERModule], object]:
    """The modules of cells that differ only in their initialisation seed (``seeds``), built from
    one composed config, and the data module they share (set up for fitting)."""
    from hydra.utils import instantiate

    from ner_lightning.build import build_datamodule, build_module

    modules, datamodule = [], None
    for seed in seeds:
        torch.manual_seed(seed)
        encoder = instantiate(cfg.model)
        if datamodule is None:
            datamodule = build_datamodule(cfg, encoder.tokenizer)
            datamodule.setup("fit")
        modules.append(build_module(cfg, encoder, datamodule))
    return modules, datamodule


class LockstepGroup:
    """K cells (modules of one family, built alike) trained as one stacked model (module docstring).

    ``step(batches)`` takes one batch per cell, updates every cell and returns the K losses;
    ``scores(batches)`` evaluates the K models; ``write_back()`` puts each cell's parameters into
    its module (for its evaluation, checkpoint and export as if it had trained alone)."""

    def __init__(self, modules: Sequence[NERModule], total_steps: int, clip_norm: float | None = None):
        refusals = {why for m in modules if (why := m.lockstep_refusal()) is not None}
        if refusals:
            raise ValueError(f"these cells cannot train in lockstep: {'; '.join(sorted(refusals))}")
        if len({type(m) for m in modules}) != 1:
            raise ValueError("a lockstep group holds cells of one objective family")
        self.modules = list(modules)
        wrapped = [_PaddedLoss(cast(Stackable, m)) for m in modules]
        stacked, self.buffers = stack_module_state(wrapped)
        self.params = {n: p for n, p in stacked.items() if p.requires_grad}  # what the optimiser steps
        self.buffers.update({n: p for n, p in stacked.items() if not p.requires_grad})  # a frozen encoder
        self.base = copy.deepcopy(wrapped[0]).to("meta")
        # Attention as plain matmuls: vmap batches them, while SDPA's CPU kernel has no batching
        # rule and runs once per cell (the same values up to float rounding).
        self.base.family.encoder.model.set_attn_implementation("eager")
        self.clip_norm = clip_norm
        first = modules[0]
        names = {id(p): f"family.{n}" for n, p in first.named_parameters()}
        groups = [
            {**g, "params": [self.params[names[id(p)]] for p in g["params"]]} for g in first.optimizer_parameters()
        ]
        self.stepped = [names[id(p)] for g in first.optimizer_parameters() for p in g["params"]]  # clipped together
        self.family = cast(Stackable, first)
        self.optimizer = first.optimizer_factory(params=groups)
        self.scheduler = get_linear_schedule_with_warmup(
            self.optimizer, int(first.warmup_ratio * total_steps), total_steps
        )
        self._grads = vmap(grad_and_value(self._loss), randomness="different")
        self._scores = vmap(self._cell_scores, randomness="different")

    def _loss(self, params: dict, buffers: dict, batch: dict) -> torch.Tensor:
        return functional_call(self.base, (params, buffers), (batch,))

    def _cell_scores(self, params: dict, buffers: dict, batch: dict) -> torch.Tensor:
        return functional_call(self.base, (params, buffers), (batch,), {"scores": True})

    def step(self, batches: dict[str, torch.Tensor]) -> torch.Tensor:
        """One optimiser step of every cell on its own batch (``stack_batches``); the K losses."""
        grads, losses = self._grads(self.params, self.buffers, batches)
        factor = None
        if self.clip_norm:
            norms = torch.stack([grads[n].flatten(1).pow(2).sum(1) for n in self.stepped]).sum(0).sqrt()
            factor = (self.clip_norm / (norms + 1e-6)).clamp(max=1.0)
        for name, p in self.params.items():
            g = grads[name]
            p.grad = g if factor is None else g * factor.view(-1, *[1] * (g.dim() - 1))
        self.optimizer.step()
        self.family.lockstep_after_step(self.params)
        self.optimizer.zero_grad(set_to_none=True)
        for p in self.params.values():
            p.grad = None  # those outside the optimiser (the AUC losses' α) too
        self.scheduler.step()
        return losses.detach()

    @torch.no_grad()
    def scores(self, batches: dict[str, torch.Tensor], cells: Sequence[int] | None = None) -> torch.Tensor:
        """The models' word scores ``(K, B, W, labels)`` of their batches, dropout off: all K, or
        those of ``cells`` (positions in the group; ``batches`` then holds one per listed cell)."""
        params, buffers = self.params, self.buffers
        if cells is not None and len(cells) != len(self.modules):
            index = torch.tensor(list(cells), device=next(iter(params.values())).device)
            params = {n: t.index_select(0, index) for n, t in params.items()}
            buffers = {n: t.index_select(0, index) for n, t in buffers.items()}
        self.base.eval()
        try:
            return self._scores(params, buffers, batches)
        finally:
            self.base.train()

    def cell_state(self, k: int) -> dict[str, torch.Tensor]:
        """Cell ``k``'s parameters and buffers as its module's ``state_dict`` names them (views)."""
        return {n.removeprefix("family."): t[k] for n, t in {**self.params, **self.buffers}.items()}

    @torch.no_grad()
    def write_back(self) -> None:
        """Each cell's current parameters and buffers into its own module."""
        for k, module in enumerate(self.modules):
            module.load_state_dict(self.cell_state(k), strict=False)
