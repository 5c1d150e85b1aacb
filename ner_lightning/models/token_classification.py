"""Token classification family: a softmax head on each word's first sub-token (``loss=ce``)."""

from __future__ import annotations

import copy

import torch
from typing_extensions import Unpack  # typing.Unpack: Python 3.11+

from ner_lightning.data.corpus import LabelSet
from ner_lightning.losses import TokenLoss
from ner_lightning.models.contracts import FamilySettings
from ner_lightning.models.encoder import TransformerEncoder
from ner_lightning.models.heads import HeadModule, SoftmaxHead


class TokenClassificationModule(HeadModule[SoftmaxHead]):
    """Linear head over word states (:class:`~ner_lightning.models.heads.SoftmaxHead`);
    ``token_loss(logits (N, K), targets (N,), sentence)`` is any ``ner_lightning.losses`` loss
    (ce, wce1, wce2, focal, dice, mom), a copy of it per corpus.

    Only first sub-tokens of real words enter the loss, so padding and continuation pieces
    never contribute. Decoding is the per-word argmax.
    """

    def __init__(
        self,
        encoder: TransformerEncoder,
        label_set: LabelSet,
        token_loss: TokenLoss,
        aux_label_sets: dict[str, LabelSet] | None = None,
        **settings: Unpack[FamilySettings],
    ):
        def make_head(labels: LabelSet) -> SoftmaxHead:
            return SoftmaxHead(encoder.hidden_size, labels, copy.deepcopy(token_loss), settings["dropout"])

        super().__init__(encoder, label_set, make_head, aux_label_sets, **settings)

    @property
    def token_loss(self) -> TokenLoss:
        return self.head.token_loss

    def lockstep_refusal(self) -> str | None:
        """One head (no auxiliary corpora) and a token loss that is a mean over words train in lockstep."""
        if len(self.heads) > 1:
            return "a multi-corpus run (one head per corpus) does not train in lockstep"
        if not self.token_loss.per_token_mean:
            return f"{type(self.token_loss).__name__} is not a mean over words (a set- or sentence-level loss)"
        return None

    def padded_scores(self, batch: dict, dtype: torch.dtype | None = None) -> torch.Tensor:
        """Main-head word scores ``(B, W, K)`` of a padded batch (``padded_word_states``)."""
        return self.head.scores(self.padded_word_states(batch, dtype), batch["word_mask"])

    @staticmethod
    def decode_scores(scores: torch.Tensor) -> torch.Tensor:
        """The per-word argmax of :meth:`padded_scores` (this family's decoding)."""
        return scores.argmax(-1)

    def lockstep_after_step(self, params: dict[str, torch.Tensor]) -> None:
        """Nothing moves outside the optimiser."""

    def padded_loss(self, batch: dict, dtype: torch.dtype | None = None) -> torch.Tensor:
        """The token loss's mean over the real words, as a masked mean over every word slot."""
        scores, keep = self.padded_scores(batch, dtype), batch["word_mask"]
        targets = self.word_labels(batch).clamp(min=0)
        per_word = self.token_loss.per_token(scores.flatten(0, 1), targets.flatten()).view_as(keep)
        return (per_word * keep).sum() / keep.sum()

    def logits(self, batch: dict) -> torch.Tensor:
        """Main-head scores ``(B, W, K)``."""
        return self.head.scores(self.word_states(batch), batch["word_mask"])
