"""A trained cell as a folder that tags new text, with or without this project.

Families whose decoding is a per-word argmax of one linear layer (the softmax head: CE, WCE,
focal, Dice, MoM) export a Hugging Face **token-classification model** at the folder's top
(``config.json`` with ``id2label``, the encoder and that layer as its ``classifier``, the
tokenizer), which ``transformers.pipeline("token-classification", model=<folder>,
aggregation_strategy="first")`` loads without this project: a word's label is its first
sub-word's, the rule the model was trained with ("simple" would also read the labels of later
sub-words, which no loss ever saw). Other families (CRF, two-task, one-vs-all, MRC) keep the
encoder in ``save_pretrained`` form under ``encoder/`` and tag through ``ner_lightning.predict``;
``model.json`` says which (``pipeline``). Every export also holds ``heads.pt`` (every parameter
trained on top of the encoder, the per-corpus heads of a multi-corpus run included),
``model.json`` (label map, MRC queries, evaluation precision), ``config.yaml`` (the cell's
composed config) and ``README.md``, a model card with the cell's scores. Written during a run
(``export=true``) or afterwards from a cell's kept checkpoint::

    python -m ner_lightning.export multirun/.../0_loss=ce,size=50      # needs keep_checkpoint=true

``ner_lightning.predict`` loads any export (:func:`load`) and tags raw text or CoNLL files.
"""

from __future__ import annotations

import argparse
import copy
import json
import pickle
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

import torch
from hydra.utils import instantiate
from omegaconf import OmegaConf

from ner_lightning.data.alignment import SubwordAligner, aligner_for, collate_features
from ner_lightning.data.batching import sorted_batches
from ner_lightning.data.corpus import OUTSIDE, LabelSet, Sentence
from ner_lightning.export.model_card import model_card
from ner_lightning.export.portable_paths import local_roots, portable
from ner_lightning.export.trust import Trust, add_trust_options, check_buildable, for_tagging, trust_of
from ner_lightning.hardware import eval_batch_tokens
from ner_lightning.models.base import NERModule
from ner_lightning.models.encoder import TransformerEncoder
from ner_lightning.models.heads import build_family
from ner_lightning.results import typed_fields

FORMAT = 2  # model.json's layout version (1: the encoder always under encoder/, no pipeline model)
READS = (1, 2)
PIPELINE = {"task": "token-classification", "aggregation_strategy": "first"}
ENCODER_DIRS = (".", "encoder")
PRECISIONS = ("32-true", "bf16-mixed", "16-mixed")


def token_classification_model(module: NERModule):
    """The module as a Hugging Face ``AutoModelForTokenClassification`` (encoder + its per-word
    classifier, ``id2label`` from the main corpus's labels), or a string saying why it cannot be one."""
    from transformers import AutoModelForTokenClassification

    classifier = module.per_word_classifier()
    if classifier is None:
        return f"{type(module).__name__} does not decode by a per-word argmax: tag with ner_lightning.predict"
    if module.framing != "tagging":
        return f"data.framing={module.framing} inputs are not plain sentences: tag with ner_lightning.predict"
    labels = module.label_set.labels
    config = copy.deepcopy(module.encoder.model.config)
    config.num_labels = len(labels)
    config.id2label, config.label2id = dict(enumerate(labels)), {label: i for i, label in enumerate(labels)}
    config.architectures = None
    model = AutoModelForTokenClassification.from_config(config)
    missing, _ = model.base_model.load_state_dict(module.encoder.model.state_dict(), strict=False)  # pooler: unused
    head = getattr(model, "classifier", None)
    if missing or not isinstance(head, torch.nn.Linear) or head.weight.shape != classifier.weight.shape:
        return (
            f"{type(model).__name__} has no token classifier this family's head maps to: tag with ner_lightning.predict"
        )
    head.load_state_dict(classifier.state_dict())
    return model.eval()


def export_model(module: NERModule, result: dict, out: str | Path) -> Path:
    """Write ``module`` (with the weights it holds now), the cell's ``result`` (results.json: its
    config, scores and provenance) and a model card to ``out``, replacing a previous export there
    only once the new one is complete. No file names a local folder (:func:`portable`)."""
    out = Path(out)
    result = portable(typed_fields(result), local_roots(result["config"]))
    config = result["config"]  # the recipe the export is built from again (config.yaml)
    partial = out.with_name(out.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    standard = token_classification_model(module)
    if isinstance(standard, str):
        encoder_dir = "encoder"
        module.encoder.model.save_pretrained(partial / encoder_dir)
    else:
        encoder_dir = "."
        standard.save_pretrained(partial)
    module.encoder.tokenizer.save_pretrained(partial / encoder_dir)
    torch.save({k: v for k, v in module.state_dict().items() if not k.startswith("encoder.")}, partial / "heads.pt")
    queries = config["data"]["corpus"].get("queries") or {}
    types = module.label_set.entity_types
    meta = {
        "format": FORMAT,
        "family": result["objective"],
        "framing": config["data"]["framing"],
        "encoder_dir": encoder_dir,
        "pipeline": {"available": False, "why": standard}
        if isinstance(standard, str)
        else {"available": True, **PIPELINE},
        "entity_types": {name: list(ls.entity_types) for name, ls in module.head_label_sets().items()},
        "queries": [queries.get(t) or t for t in types],
        "max_length": config["data"]["max_length"],
        "eval_batch_size": config["data"]["eval_batch_size"],
        "precision": result["precision"]["eval"],
        "trained_on": {
            "dataset": result["partition"]["dataset"],
            "encoder": (result.get("grid") or {}).get("model"),
            "inputs_sha256": (result.get("identity") or {}).get("inputs"),
        },
    }
    (partial / "model.json").write_text(json.dumps(meta, indent=2))
    OmegaConf.save(OmegaConf.create(config), partial / "config.yaml")
    (partial / "README.md").write_text(model_card(result, meta, module.label_set.labels))
    shutil.rmtree(out, ignore_errors=True)
    partial.rename(out)
    return out


def load_weights(module: NERModule, checkpoint: str | Path) -> None:
    """The weights of one of our checkpoints (``best.ckpt``/``last.ckpt``) into ``module``: tensors
    and plain values only (``weights_only``: unpickling runs no code the file names)."""
    module.load_state_dict(read_tensors(checkpoint)["state_dict"])


def read_tensors(path: str | Path) -> dict:
    """A file written by ``torch.save``, read as data (``weights_only``: tensors and plain values;
    unpickling runs nothing the file names)."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        raise ValueError(f"{path}: not plain tensors, refused unread ({str(err).splitlines()[0]})") from err


def build_module(config: dict, heads: dict[str, LabelSet], where: str, trust: Trust, **encoder_keys) -> NERModule:
    """The encoder (``config["model"]``, ``encoder_keys`` replacing its keys) and the objective
    family (``config["loss"]``) of a cell's config read from ``where``, each checked by
    :func:`check_buildable` first. Loading trains nothing: the family's optimiser is not built."""
    model = {**config["model"], **encoder_keys}
    check_buildable(model, TransformerEncoder, "model", where, trust)
    loss = {**config["loss"], "optimizer": None}
    check_buildable(loss, NERModule, "loss", where, trust)
    return build_family(OmegaConf.create(loss), instantiate(OmegaConf.create(model)), heads)


@dataclass
class ExportedModel:
    """An exported folder, loaded: tags whole sentences (lists of words) with the main corpus's labels."""

    module: NERModule
    aligner: SubwordAligner
    meta: dict
    max_tokens: int | None = None  # padded sub-words per batch (a GPU: hardware.eval_batch_tokens), else sentences

    def tag(self, sentences: list[list[str]]) -> list[list[str]]:
        """Length-sorted batches as in evaluation; the tags come back in input order."""
        if not sentences:
            return []
        items = [Sentence(f"predict:{i}", tuple(words), (OUTSIDE,) * len(words)) for i, words in enumerate(sentences)]
        features = self.aligner.encode(items, self.module.label_set)
        pad = self.aligner.tokenizer.pad_token_id
        batches = sorted_batches(
            features, self.meta["eval_batch_size"], lambda b: collate_features(b, pad), max_tokens=self.max_tokens
        )
        return self.module.tag(batches, [len(s) for s in items])


def load(
    folder: str | Path, device: str = "cpu", precision: str | None = None, trust: Trust = Trust()
) -> ExportedModel:
    """Load an export: the encoder from ``encoder/``, the family from ``config.yaml`` (what it may
    build: ``trust``), its heads' weights; evaluation in ``precision`` (default: the cell's)."""
    folder = Path(folder)
    meta_path = folder / "model.json"
    if not meta_path.is_file():
        raise FileNotFoundError(
            f"{folder} is not an exported model (no model.json): export a cell with "
            "`python -m ner_lightning.export CELL_DIR`, or train it with export=true"
        )
    meta = json.loads(meta_path.read_text())
    if meta.get("format") not in READS:
        raise ValueError(f"{meta_path}: format {meta.get('format')}, this version reads formats {READS}")
    if meta.get("encoder_dir", "encoder") not in ENCODER_DIRS:
        raise ValueError(
            f"{meta_path}: encoder_dir {meta['encoder_dir']!r}: an export keeps its encoder in one of "
            f"{ENCODER_DIRS} inside its own folder"
        )
    if (precision or meta["precision"]) not in PRECISIONS:
        raise ValueError(f"{meta_path}: precision {meta['precision']!r} is not one of {PRECISIONS}")
    config = OmegaConf.to_container(OmegaConf.load(folder / "config.yaml"))
    if not isinstance(config, dict):
        raise ValueError(f"{folder / 'config.yaml'}: not a mapping of settings — not an export of ner_lightning")
    heads = {name: LabelSet(types) for name, types in meta["entity_types"].items()}
    tagging_loss, replaced = for_tagging(config["loss"], trust)  # tagging needs no training-only loss
    module = build_module(
        {**config, "loss": tagging_loss},
        heads,
        str(folder / "config.yaml"),
        trust,
        name_or_path=str(folder / meta.get("encoder_dir", "encoder")),
        tokenizer=None,
        random_init=None,
    )
    weights = read_tensors(folder / "heads.pt")
    missing, unexpected = module.load_state_dict(weights, strict=False)
    if replaced:  # said, not hidden: the export's own token loss is not what tags
        meta = {**meta, "token_loss_not_built": (config["loss"].get("token_loss") or {}).get("_target_")}
    wrong = [k for k in missing if not k.startswith("encoder.")] + [
        k
        for k in unexpected
        if not (replaced and "token_loss." in k)  # a training-only loss's buffers
    ]
    if wrong:
        raise ValueError(f"{folder / 'heads.pt'} does not fit {meta['family']}: {', '.join(wrong[:6])}")
    module.evaluate_in(precision or meta["precision"])
    module.eval().to(device)
    tokenizer = module.encoder.tokenizer
    aligner = aligner_for(meta["framing"], tokenizer, meta["max_length"], meta.get("queries") or [])
    return ExportedModel(module, aligner, meta, eval_batch_tokens(torch.device(device).type))


def export_cell(cell_dir: str | Path, out: str | Path | None = None, trust: Trust = Trust()) -> Path:
    """Export a finished cell from its kept checkpoint (``keep_checkpoint=true``); what its
    ``results.json`` may build: ``trust``."""
    cell_dir = Path(cell_dir)
    results = cell_dir / "results.json"
    if not results.is_file():
        raise FileNotFoundError(f"{results} not found: give the folder of a finished cell")
    result = json.loads(results.read_text())
    checkpoint = result.get("checkpoint")
    if not checkpoint or not Path(checkpoint).is_file():
        raise FileNotFoundError(
            f"{cell_dir}: no kept checkpoint ({checkpoint or 'keep_checkpoint was false'}); "
            "rerun the cell with keep_checkpoint=true, or with export=true to export it as it ends"
        )
    heads = {name: LabelSet(types) for name, types in result["labels"].items()}
    module = build_module(result["config"], heads, str(results), trust)
    load_weights(module, checkpoint)
    return export_model(module, result, out or cell_dir / "export")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m ner_lightning.export", description=__doc__.split("\n\n")[0])
    ap.add_argument("cell", help="a finished cell's folder (its results.json names the kept checkpoint)")
    ap.add_argument("--out", help="the export folder (default: <cell>/export)")
    add_trust_options(ap)
    args = ap.parse_args(argv)
    from ner_lightning.console import quiet

    quiet()
    try:
        folder = export_cell(args.cell, args.out, trust_of(args))
    except (FileNotFoundError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"exported {args.cell} -> {folder}\ntag text with: python -m ner_lightning.predict {folder} INPUT")
    if json.loads((folder / "model.json").read_text())["pipeline"]["available"]:
        print(
            f'or without this project: transformers.pipeline("token-classification", model="{folder}", '
            f'aggregation_strategy="first")'
        )
    return 0
