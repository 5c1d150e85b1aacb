"""Optimiser factories that need more than ``_target_`` + keyword arguments: libauc's PESG
and PDSCA, built over the module's trainable parameters.

Both optimisers take one flat parameter list and one learning rate, so parameter groups
(the AUC losses' a, b at ``loss.lr_ab``) are flattened: under PESG/PDSCA a and b move at the
optimiser's lr, as in libauc. Neither is given the AUC losses themselves: the module moves
each α (models/auc.py), so nothing is updated twice. Their epoch-decay reference starts as
N(0, 0.01²) noise in libauc, which would pull a pretrained encoder toward zero; it is
anchored at the starting weights here.
"""

from __future__ import annotations

import contextlib
import io
from typing import Any

import torch


def _flat(params) -> list[torch.nn.Parameter]:
    params = list(params)
    if params and isinstance(params[0], dict):
        return [p for group in params for p in group["params"]]
    return params


def _anchor(opt: Any, params: list[torch.nn.Parameter]) -> None:  # libauc's PESG or PDSCA (untyped)
    if opt.model_ref is not None:
        with torch.no_grad():
            for ref, p in zip(opt.model_ref[: len(params)], params, strict=True):  # PDSCA's ends with its a, b
                ref.copy_(p.detach())


def _quiet_anchored(optimizer_class: Any, params: list[torch.nn.Parameter], **settings: Any) -> torch.optim.Optimizer:
    """A libauc optimiser over ``params`` (its notices silenced), its decay reference anchored."""
    with contextlib.redirect_stdout(io.StringIO()):  # libauc prints notices (PESG: loss_fn is None)
        opt = optimizer_class(params, verbose=False, device=params[0].device, **settings)
    _anchor(opt, params)
    return opt


def pesg(
    params, lr: float, mode: str, clip_value: float, weight_decay: float, epoch_decay: float, momentum: float
) -> torch.optim.Optimizer:
    """libauc ``PESG`` (primal update of DAM, Yuan et al. 2021) with ``loss_fn=None``."""
    from libauc.optimizers import PESG

    return _quiet_anchored(
        PESG,
        _flat(params),
        loss_fn=None,
        lr=lr,
        mode=mode,
        clip_value=clip_value,
        weight_decay=weight_decay,
        epoch_decay=epoch_decay,
        momentum=momentum,
    )


class PhaseSwitch:
    """What libauc ``PDSCA`` reads from its ``loss_fn``. PDSCA takes its inner (CE) update
    when ``alpha.grad is None`` and its AUC update otherwise; the module sets the flag before
    each step with :func:`set_pdsca_phase`. a and b here are inert (never given a gradient,
    so PDSCA skips them); the AUC losses' own a, b are among ``params``.
    """

    def __init__(self, device):
        self.a = torch.zeros(1, device=device)
        self.b = torch.zeros(1, device=device)
        self.alpha = torch.zeros(1, device=device)
        self.margin = 1.0


def pdsca(
    params,
    lr: float,
    lr0: float | None,
    beta1: float,
    beta2: float,
    clip_value: float,
    weight_decay: float,
    epoch_decay: float,
) -> torch.optim.Optimizer:
    """libauc ``PDSCA`` (compositional training, Yuan et al. 2022) for COMAUC-2T: ``lr0`` for
    the CE steps (None = ``lr``), ``lr`` for the AUC steps; the warm-up/decay schedule scales
    ``lr`` only."""
    from libauc.optimizers import PDSCA

    flat = _flat(params)
    return _quiet_anchored(
        PDSCA,
        flat,
        loss_fn=PhaseSwitch(flat[0].device),
        lr=lr,
        lr0=lr0,
        beta1=beta1,
        beta2=beta2,
        clip_value=clip_value,
        weight_decay=weight_decay,
        epoch_decay=epoch_decay,
    )


def set_pdsca_phase(optimizer, auc: bool) -> None:
    """Tell a PDSCA built by :func:`pdsca` whether the coming step is an AUC step (no-op for
    any other optimiser)."""
    from libauc.optimizers import PDSCA
    from pytorch_lightning.core.optimizer import LightningOptimizer

    if isinstance(optimizer, LightningOptimizer):
        optimizer = optimizer.optimizer
    switch = optimizer.loss_fn if isinstance(optimizer, PDSCA) else None
    if isinstance(switch, PhaseSwitch):
        switch.alpha.grad = torch.zeros_like(switch.alpha) if auc else None
