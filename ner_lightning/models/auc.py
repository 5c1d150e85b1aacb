"""What the AUC objectives share: libauc AUC-M losses and the min-max update of α.

AUC-M (Yuan et al. 2021; AUC-2T eq. 3, OVA-AUC eq. 1) is min over (w, a, b), max over α ≥ 0.
The optimiser (AdamW or PESG) updates the network and a, b; α is kept out of it and moved by
projected gradient ascent after every step: α <- max(0, α + lr_alpha · ∂L/∂α), as libauc's
PESG does internally.
"""
from __future__ import annotations

import warnings

import torch
from torch import nn


def auc_losses(n: int, margin: float) -> nn.ModuleList:
    """``n`` independent libauc ``AUCMLoss`` (v1: a one-class batch gives 0 and zero gradient)."""
    from libauc.losses import AUCMLoss

    return nn.ModuleList([AUCMLoss(margin=margin, version="v1", device="cpu") for _ in range(n)])


def aucm(loss: nn.Module, scores: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """One AUC-M term on real words only (callers boolean-index away padding beforehand)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # libauc warns on every batch without positives
        return loss(scores, targets)


class AUCMinMax:
    """Mixin for an ``NERModule`` with ``self.auc`` (ModuleList of AUCMLoss, or None)."""

    auc: nn.ModuleList | None
    lr_alpha: float

    def alphas(self) -> list[nn.Parameter]:
        return [loss.alpha for loss in self.auc] if self.auc is not None else []

    def optimizer_parameters(self) -> list[nn.Parameter]:
        alphas = {id(a) for a in self.alphas()}
        return [p for p in super().optimizer_parameters() if id(p) not in alphas]

    def ascend_alphas(self) -> None:
        with torch.no_grad():
            for a in self.alphas():
                if a.grad is not None:
                    a.add_(self.lr_alpha * a.grad).clamp_(min=0.0)
                    a.grad = None

    def optimizer_step(self, *args, **kwargs):
        super().optimizer_step(*args, **kwargs)
        self.ascend_alphas()
