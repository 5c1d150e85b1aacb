"""What the AUC objectives share: libauc AUC-M losses and the min-max updates of a, b, α.

AUC-M (Yuan et al. 2021; AUC-2T eq. 3, OVA-AUC eq. 1) is min over (w, a, b), max over α ≥ 0.
The optimiser (AdamW, PESG or PDSCA) updates the network and a, b — a and b in their own
parameter group at ``lr_ab`` (default: the ``head_lr`` every family's from-scratch parameters
use) where the optimiser has groups (AdamW): at the encoder's learning rate they would barely
leave 0, and with a = b = 0 the min-max problem's fixed point
puts positive scores at 0.5, on the decision threshold. α is kept out of the optimiser and
moved after every step by libauc PESG's projected ascent,
α <- clamp(α + lr_alpha · (2(m + b − a) − 2α), 0, 999), which, unlike ∂L/∂α, is not scaled by
p(1 − p) or by a task weight such as λ = 100 (with that scaling the ascent overshoots).
"""

from __future__ import annotations

from typing import Protocol, cast

import torch
from torch import nn

from ner_lightning.models.base import NERModule


class AUCMVariables(Protocol):
    """What :func:`aucm` reads of a libauc ``AUCMLoss``: its min-max variables and its margin."""

    a: torch.Tensor
    b: torch.Tensor
    alpha: torch.Tensor
    margin: float


def auc_losses(n: int, margin: float) -> nn.ModuleList:
    """``n`` independent libauc ``AUCMLoss`` (v1: a one-class batch gives 0 and zero gradient)."""
    from libauc.losses import AUCMLoss

    return nn.ModuleList([AUCMLoss(margin=margin, version="v1", device="cpu") for _ in range(n)])


def aucm(loss: AUCMVariables, scores: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """One AUC-M term (AUC-2T eq. 3) on real words only (callers boolean-index away padding
    beforehand), with the a, b, α of the libauc ``AUCMLoss`` (v1) ``loss``: the same operations in
    the same order as its ``forward`` (p from the batch), without its ``sum(pos_mask) == 0``
    warning check, a Python loop over every word that waits for the device."""
    y_pred, y_true = scores.reshape(-1, 1), targets.reshape(-1, 1)
    pos, neg = (y_true == 1).float(), (y_true == 0).float()
    p = pos.sum() / y_true.shape[0]
    return (
        (1 - p) * torch.mean((y_pred - loss.a) ** 2 * pos)
        + p * torch.mean((y_pred - loss.b) ** 2 * neg)
        + 2 * loss.alpha * (p * (1 - p) * loss.margin + torch.mean(p * y_pred * neg - (1 - p) * y_pred * pos))
        - p * (1 - p) * loss.alpha**2
    )


def masked_aucm(loss: AUCMVariables, scores: torch.Tensor, targets: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """:func:`aucm` over the entries where ``keep`` is true, from fixed-shape operations (every
    mean over the kept entries is a masked sum over all of them divided by their number), for
    ``vmap`` (``ner_lightning.lockstep``)."""
    keep = keep.reshape(-1).float()
    y_pred, y_true = scores.reshape(-1), targets.reshape(-1)
    n = keep.sum().clamp(min=1.0)
    pos, neg = (y_true == 1).float() * keep, (y_true == 0).float() * keep
    p = pos.sum() / n

    def mean(x: torch.Tensor) -> torch.Tensor:
        return x.sum() / n

    return (
        (1 - p) * mean((y_pred - loss.a) ** 2 * pos)
        + p * mean((y_pred - loss.b) ** 2 * neg)
        + 2 * loss.alpha * (p * (1 - p) * loss.margin + mean(p * y_pred * neg - (1 - p) * y_pred * pos))
        - p * (1 - p) * loss.alpha**2
    ).reshape(())


class AUCMinMax(NERModule):
    """An ``NERModule`` whose objective has AUC-M terms: ``self.auc`` (ModuleList of
    AUCMLoss, from :func:`auc_losses`; None for an objective without one)."""

    auc: nn.ModuleList | None
    lr_alpha: float
    lr_ab: float | None

    def auc_terms(self) -> list[AUCMVariables]:
        """The min-max variables of each AUC-M term, in ``self.auc`` order."""
        return [cast(AUCMVariables, loss) for loss in self.auc or []]

    def _own(self, p: torch.nn.Parameter) -> bool:
        return any(p is q for loss in self.auc_terms() for q in (loss.a, loss.b, loss.alpha))

    def optimizer_parameters(self) -> list[dict]:
        """The network's groups plus the losses' a, b at ``lr_ab`` (None = ``head_lr``); α in none."""
        groups = super().optimizer_parameters()
        if self.auc is None:
            return groups
        lr = self.lr_ab if self.lr_ab is not None else self.head_lr
        ab = {"params": [p for loss in self.auc_terms() for p in (loss.a, loss.b)]}
        return groups + [ab if lr is None else {**ab, "lr": lr}]

    def ascend_alphas(self) -> None:
        """libauc PESG's α step for every loss used since the last call (α.grad set)."""
        with torch.no_grad():
            for loss in self.auc_terms():
                if loss.alpha.grad is not None:
                    step = 2 * (loss.margin + loss.b - loss.a) - 2 * loss.alpha
                    loss.alpha.add_(self.lr_alpha * step).clamp_(0.0, 999.0)
                    loss.alpha.grad = None

    def after_optimizer_step(self) -> None:
        self.ascend_alphas()

    def lockstep_after_step(self, params: dict[str, torch.Tensor]) -> None:
        """:meth:`ascend_alphas` on a lockstep group's stacked a, b, α (every loss is used at every
        step of the families that stack)."""
        with torch.no_grad():
            for i, loss in enumerate(self.auc_terms()):
                a, b, alpha = (params[f"family.auc.{i}.{n}"] for n in ("a", "b", "alpha"))
                alpha.add_(self.lr_alpha * (2 * (loss.margin + b - a) - 2 * alpha)).clamp_(0.0, 999.0)

    def extra_state(self) -> dict:
        """libauc keeps a, b, α as plain tensors, outside ``state_dict``: saved for resume."""
        return {
            "auc": [
                {"a": loss.a.detach().clone(), "b": loss.b.detach().clone(), "alpha": loss.alpha.detach().clone()}
                for loss in self.auc_terms()
            ]
        }

    def load_extra_state(self, state: dict) -> None:
        with torch.no_grad():
            for loss, saved in zip(self.auc_terms(), state["auc"], strict=True):
                loss.a.copy_(saved["a"])
                loss.b.copy_(saved["b"])
                loss.alpha.copy_(saved["alpha"])
