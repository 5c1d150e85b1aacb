"""Optimiser factories that need more than ``_target_`` + keyword arguments."""
from __future__ import annotations

import contextlib
import io

import torch


def pesg(params, lr: float, mode: str, clip_value: float, weight_decay: float, epoch_decay: float,
         momentum: float) -> torch.optim.Optimizer:
    """libauc ``PESG`` over a flat parameter list, its epoch-decay reference anchored at the
    starting weights (libauc initialises it with N(0, 0.01²) noise, which would pull a
    pretrained encoder toward zero). No ``loss_fn`` is given: the AUC losses' a, b are among
    ``params`` and the module ascends α itself, so nothing is updated twice.
    """
    from libauc.optimizers import PESG

    params = [p for p in params]
    with contextlib.redirect_stdout(io.StringIO()):  # PESG prints a notice when loss_fn is None
        opt = PESG(params, loss_fn=None, lr=lr, mode=mode, clip_value=clip_value, weight_decay=weight_decay,
                   epoch_decay=epoch_decay, momentum=momentum, verbose=False, device=params[0].device)
    if opt.model_ref is not None:
        with torch.no_grad():
            for ref, p in zip(opt.model_ref, params):
                ref.copy_(p.detach())
    return opt
