"""Token-level losses for the softmax head: ``loss(logits (N, K), targets (N,)) -> scalar``.

Every loss implements ``per_token`` (N,) and averages it over the N real words it is given
(padding and non-first sub-tokens are never passed in). ``sentence`` (N,) says which example
each word belongs to (an example's words consecutive); only MoM uses it. Losses that depend on the training data's label
counts (weighted CE) override ``fit_counts(counts)``; the family calls it once with the label
counts of the training set it trains on. A new loss is a subclass here (or anywhere importable)
plus ``conf/token_loss/<name>.yaml`` naming it as ``_target_``.
"""

from __future__ import annotations

from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import nn


class TokenLoss(nn.Module):
    """A loss over the real words of a batch. Every family that takes a token loss (the softmax
    heads of ``loss=ce`` and its variants, MoM's base, the MRC heads, each corpus's head in a
    multi-corpus run) receives an instance of a subclass, built by Hydra from
    ``conf/token_loss/<name>.yaml``."""

    # Whether the loss is the mean of ``per_token`` over the real words (``forward`` as here), so
    # a masked mean over a padded batch gives it (lockstep training: ``ner_lightning.lockstep``).
    per_token_mean: ClassVar[bool] = True

    def per_token(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def fit_counts(self, counts: torch.Tensor) -> None:
        """Called once with the label counts of the training set; only the weighted losses use them."""

    def forward(self, logits: torch.Tensor, targets: torch.Tensor, sentence: torch.Tensor | None = None):
        return self.per_token(logits, targets).mean()


class CrossEntropy(TokenLoss):
    """ℓ = −log p_y, averaged over tokens."""

    def per_token(self, logits, targets):
        return F.cross_entropy(logits, targets, reduction="none")


class WeightedCrossEntropy(TokenLoss):
    """MoM paper eq. 4: ℓ = −Σ_k ω_k y_k log p_k, averaged over tokens (not over Σω).

    ``scheme="inverse_frequency"`` (WCE-1): ω_k = s / s_k; ``scheme="log_ratio"`` (WCE-2):
    ω_k = log10((s − s_k)/s_k + β). s_k = training tokens of class k (at least 1), s = all.
    """

    def __init__(self, scheme: str, beta: float = 1.0):
        super().__init__()
        if scheme not in ("inverse_frequency", "log_ratio"):
            raise ValueError(f"loss.token_loss.scheme must be inverse_frequency or log_ratio, got {scheme!r}")
        self.scheme, self.beta = scheme, beta
        self.weight: torch.Tensor
        self.register_buffer("weight", torch.empty(0))

    def fit_counts(self, counts: torch.Tensor) -> None:
        s_k = counts.double().clamp(min=1)
        s = counts.double().sum()
        w = s / s_k if self.scheme == "inverse_frequency" else torch.log10((s - s_k) / s_k + self.beta)
        self.weight = w.float().to(self.weight.device)

    def per_token(self, logits, targets):
        if self.weight.numel() == 0:
            raise RuntimeError("WeightedCrossEntropy.fit_counts was not called")
        return self.weight[targets] * F.cross_entropy(logits, targets, reduction="none")


class FocalLoss(TokenLoss):
    """MoM paper eq. 5 (Lin et al. 2017), multi-class: ℓ = −(1 − p_y)^γ log p_y."""

    def __init__(self, gamma: float = 2.0):
        super().__init__()
        self.gamma = gamma

    def per_token(self, logits, targets):
        logp = F.log_softmax(logits, -1).gather(1, targets[:, None]).squeeze(1)
        return -(1 - logp.exp()).pow(self.gamma) * logp


class DiceLoss(TokenLoss):
    """Self-adjusting Dice, one-vs-rest over the K classes.

    ``variant="li2020"`` (``loss=dice``): Li et al. (2020) eq. 12, the loss the MoM paper cites,
    DSC_k = (2(1 − p_k)^ε p_k y_k + δ) / ((1 − p_k)^ε p_k + y_k + δ).
    ``variant="eq6"`` (``loss=dice_eq6``): MoM paper eq. 6 as printed, without the p_k factor
    in the denominator: DSC_k = (2(1 − p_k)^ε p_k y_k + δ) / ((1 − p_k)^ε + y_k + δ). A wrong
    class's term then grows with its probability, and the loss is minimised below p_y = 0.5.
    ε = 0 gives plain smoothed Dice in both. Finite for every input (denominators ≥ δ > 0).

    ``level="token"``: the DSC of each word, ℓ = 1 − mean_k DSC_k, averaged over words (eq. 12
    as printed). ``level="set"``: Li et al.'s released code — one DSC per class over all the
    words of the batch, sums in numerator and denominator, ℓ = 1 − mean_k DSC_k; with K = 2 (the
    MRC heads) only the positive class k = 1, as their binary case. ``square``: their
    ``--dice_square``, x² + y² in the denominator (li2020 only), with x = (1 − p)^ε p.
    With K = 2 and ε = 1 (the MoM paper's MRC setting) every li2020 form is label-blind: each
    term depends on p only through (1 − p)p, so p and 1 − p cost the same (tests/test_losses.py);
    the released code's defaults (ε = 0.01, squares, set level) are not.
    """

    per_token_mean: ClassVar[bool] = False  # a set-level loss

    VARIANTS = ("li2020", "eq6")
    LEVELS = ("token", "set")

    def __init__(
        self,
        epsilon: float = 1.0,
        delta: float = 1.0,
        variant: str = "li2020",
        level: str = "token",
        square: bool = False,
    ):
        super().__init__()
        if delta <= 0:
            raise ValueError("loss.token_loss.delta must be > 0")
        if variant not in self.VARIANTS:
            raise ValueError(f"loss.token_loss.variant must be one of {self.VARIANTS}, got {variant!r}")
        if level not in self.LEVELS:
            raise ValueError(f"Dice level must be one of {self.LEVELS}, got {level!r}")
        if square and variant != "li2020":
            raise ValueError("Dice square denominators exist for variant li2020 only")
        self.epsilon, self.delta, self.variant, self.level, self.square = epsilon, delta, variant, level, square

    def _terms(self, logits, targets):
        p = logits.softmax(-1)
        y = F.one_hot(targets, p.size(-1)).to(p.dtype)
        a = self._one_minus_p_pow(logits)
        if self.square:
            return 2 * a * p * y, (a * p).square() + y
        return 2 * a * p * y, (a * p if self.variant == "li2020" else a) + y

    def _one_minus_p_pow(self, logits):
        """(1 − p_k)^ε from log(1 − p_k) = logsumexp of the other logits − logsumexp of all: the
        plain power has an infinite gradient at p_k = 1 for ε < 1 (NaN once a softmax saturates)."""
        k = logits.size(-1)
        others = logits.unsqueeze(-2).expand(*logits.shape[:-1], k, k)
        others = others.masked_fill(torch.eye(k, dtype=torch.bool, device=logits.device), float("-inf"))
        log_q = others.logsumexp(-1) - logits.logsumexp(-1, keepdim=True)
        return (self.epsilon * log_q).exp()

    def per_token(self, logits, targets):
        if self.level == "set":
            raise ValueError("set-level Dice has no per-token loss (as MoM's base, Dice needs level=token)")
        numerator, denominator = self._terms(logits, targets)
        return 1 - ((numerator + self.delta) / (denominator + self.delta)).mean(-1)

    def forward(self, logits, targets, sentence=None):
        if self.level == "token":
            return self.per_token(logits, targets).mean()
        numerator, denominator = self._terms(logits, targets)
        dsc = (numerator.sum(0) + self.delta) / (denominator.sum(0) + self.delta)
        return 1 - (dsc[1] if dsc.numel() == 2 else dsc.mean())


class MoMLoss(TokenLoss):
    """MoM learning (MoM paper eqs. 1-3): λ·L + (1 − λ)·L_MoM over any per-token ``base`` loss.

    L is the base loss averaged over the batch's words; L_MoM = mean over the batch's sentences
    n of (1/M) Σ_{i in n, y_i = O} ℓ(y_i, p_i) (eq. 1). ``m``: an int is the paper's constant M,
    "the number of tokens in the longest sentence" (§III-A), 128 in its experiments (§IV-D,
    inputs padded to 128); ``"sentence"`` divides by each sentence's own word count instead (an
    earlier reading: it weighs O tokens ≈ 1/λ times as much as entity tokens, ≈ 5.7× at λ = 0.175,
    against 1 + (1 − λ)·n̄/(M·λ) ≈ 1.5× with M = 128 and CoNLL's n̄ ≈ 14 words a sentence). Eq. 1
    prints a leading minus although ℓ is already a loss; here L_MoM is the penalty on O-tokens
    that is minimised (the minus is dropped), the reading under which λ < 1 adds weight to
    O-class errors, as the paper describes. λ = 1 gives the base loss exactly.
    """

    per_token_mean: ClassVar[bool] = False  # its O-token term is a per-sentence mean

    def __init__(self, base: TokenLoss, lam: float, m: int | str = 128, outside_id: int = 0):
        super().__init__()
        if m != "sentence" and not (isinstance(m, int) and m > 0):
            raise ValueError(f"loss.token_loss.m must be a positive int (the paper's M = 128) or 'sentence', got {m!r}")
        self.base, self.lam, self.m, self.outside_id = base, lam, m, outside_id

    def fit_counts(self, counts: torch.Tensor) -> None:
        self.base.fit_counts(counts)

    def forward(self, logits, targets, sentence=None):
        if sentence is None:
            raise ValueError("MoMLoss needs the sentence index of every word (each sentence's words consecutive)")
        per = self.base.per_token(logits, targets)
        # each sentence's words are consecutive (a batch's real words, row by row): number the
        # sentences 0, 1, ... on the device (torch.unique would wait for it to size its output)
        starts = torch.ones_like(sentence, dtype=torch.bool)
        starts[1:] = sentence[1:] != sentence[:-1]
        segment = starts.cumsum(0) - 1
        length = torch.zeros_like(per).scatter_add_(0, segment, torch.ones_like(per))
        outside = (targets == self.outside_id).to(per.dtype)
        m = length[segment] if self.m == "sentence" else float(self.m)
        l_mom = (per * outside / m).sum() / starts.sum()
        return self.lam * per.mean() + (1 - self.lam) * l_mom
