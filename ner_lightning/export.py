"""A trained cell as a folder that tags new text without this project's training side.

``<folder>/encoder/`` holds the encoder and its tokenizer in Hugging Face ``save_pretrained``
form (loadable by ``AutoModel``/``AutoTokenizer`` on its own), ``heads.pt`` every parameter
trained on top of it (classifier heads, CRF transitions, BiLSTM; the per-corpus heads of a
multi-corpus run), ``model.json`` the label map, MRC queries and evaluation precision, and
``config.yaml`` the cell's composed config. Written during a run (``export=true``) or afterwards
from a cell's kept checkpoint::

    python -m ner_lightning.export multirun/.../0_loss=ce,size=50      # needs keep_checkpoint=true

``ner_lightning.predict`` loads such a folder (:func:`load`) and tags raw text or CoNLL files.
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

import torch
from hydra.utils import instantiate
from omegaconf import OmegaConf

from ner_lightning.data.alignment import SubwordAligner, aligner_for, collate_features
from ner_lightning.data.corpus import OUTSIDE, LabelSet, Sentence
from ner_lightning.data.datamodule import sorted_batches
from ner_lightning.models.base import NERModule
from ner_lightning.models.heads import build_family

FORMAT = 1  # model.json's layout version


def export_model(module: NERModule, config: dict, out: str | Path, eval_precision: str) -> Path:
    """Write ``module`` (with the weights it holds now) and its resolved ``config`` to ``out``,
    replacing a previous export there only once the new one is complete."""
    out = Path(out)
    partial = out.with_name(out.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    module.encoder.model.save_pretrained(partial / "encoder")
    module.encoder.tokenizer.save_pretrained(partial / "encoder")
    torch.save({k: v for k, v in module.state_dict().items() if not k.startswith("encoder.")}, partial / "heads.pt")
    queries = (config["data"]["corpus"].get("queries") or {})
    types = module.label_set.entity_types
    meta = {"format": FORMAT, "family": config["loss"]["_target_"], "framing": config["data"]["framing"],
            "entity_types": {name: list(ls.entity_types) for name, ls in module.head_label_sets().items()},
            "queries": [queries.get(t) or t for t in types], "max_length": config["data"]["max_length"],
            "eval_batch_size": config["data"]["eval_batch_size"], "precision": eval_precision}
    (partial / "model.json").write_text(json.dumps(meta, indent=2))
    OmegaConf.save(OmegaConf.create(config), partial / "config.yaml")
    shutil.rmtree(out, ignore_errors=True)
    partial.rename(out)
    return out


def load_weights(module: NERModule, checkpoint: str | Path) -> None:
    """The weights of one of our checkpoints (``best.ckpt``/``last.ckpt``) into ``module``."""
    state = torch.load(checkpoint, map_location="cpu", weights_only=False)["state_dict"]
    module.load_state_dict(state)


@dataclass
class ExportedModel:
    """An exported folder, loaded: tags whole sentences (lists of words) with the main corpus's labels."""

    module: NERModule
    aligner: SubwordAligner
    meta: dict

    def tag(self, sentences: list[list[str]]) -> list[list[str]]:
        if not sentences:
            return []
        items = [Sentence(f"predict:{i}", tuple(words), (OUTSIDE,) * len(words)) for i, words in enumerate(sentences)]
        features = self.aligner.encode(items, self.aligner.labels_for(self.module.label_set))
        pad = self.aligner.tokenizer.pad_token_id
        batches = sorted_batches(features, self.meta["eval_batch_size"], lambda b: collate_features(b, pad))
        return self.module.tag(batches, [len(s) for s in items])


def load(folder: str | Path, device: str = "cpu", precision: str | None = None) -> ExportedModel:
    """Load an export: the encoder from ``encoder/``, the family from ``config.yaml``, its
    heads' weights; evaluation in ``precision`` (default: the cell's evaluation precision)."""
    folder = Path(folder)
    meta_path = folder / "model.json"
    if not meta_path.is_file():
        raise FileNotFoundError(f"{folder} is not an exported model (no model.json): export a cell with "
                                "`python -m ner_lightning.export CELL_DIR`, or train it with export=true")
    meta = json.loads(meta_path.read_text())
    if meta.get("format") != FORMAT:
        raise ValueError(f"{meta_path}: format {meta.get('format')}, this version reads format {FORMAT}")
    config = OmegaConf.to_container(OmegaConf.load(folder / "config.yaml"))
    model = {**config["model"], "name_or_path": str(folder / "encoder"), "tokenizer": None, "random_init": None}
    encoder = instantiate(OmegaConf.create(model))
    heads = {name: LabelSet(types) for name, types in meta["entity_types"].items()}
    module = build_family(OmegaConf.create(config["loss"]), encoder, heads)
    missing, unexpected = module.load_state_dict(torch.load(folder / "heads.pt", map_location="cpu"), strict=False)
    wrong = [k for k in missing if not k.startswith("encoder.")] + list(unexpected)
    if wrong:
        raise ValueError(f"{folder / 'heads.pt'} does not fit {meta['family']}: {', '.join(wrong[:6])}")
    module.evaluate_in(precision or meta["precision"])
    module.eval().to(device)
    tokenizer = encoder.tokenizer
    aligner = aligner_for(meta["framing"], tokenizer, meta["max_length"], meta.get("queries") or [])
    return ExportedModel(module, aligner, meta)


def export_cell(cell_dir: str | Path, out: str | Path | None = None) -> Path:
    """Export a finished cell from its kept checkpoint (``keep_checkpoint=true``)."""
    cell_dir = Path(cell_dir)
    results = cell_dir / "results.json"
    if not results.is_file():
        raise FileNotFoundError(f"{results} not found: give the folder of a finished cell")
    result = json.loads(results.read_text())
    checkpoint = result.get("checkpoint")
    if not checkpoint or not Path(checkpoint).is_file():
        raise FileNotFoundError(f"{cell_dir}: no kept checkpoint ({checkpoint or 'keep_checkpoint was false'}); "
                                "rerun the cell with keep_checkpoint=true, or with export=true to export it as it ends")
    config = result["config"]
    encoder = instantiate(OmegaConf.create(config["model"]))
    heads = {name: LabelSet(types) for name, types in result["labels"].items()}
    module = build_family(OmegaConf.create(config["loss"]), encoder, heads)
    load_weights(module, checkpoint)
    return export_model(module, config, out or cell_dir / "export", result["precision"]["eval"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m ner_lightning.export", description=__doc__.split("\n\n")[0])
    ap.add_argument("cell", help="a finished cell's folder (its results.json names the kept checkpoint)")
    ap.add_argument("--out", help="the export folder (default: <cell>/export)")
    args = ap.parse_args(argv)
    from ner_lightning.console import quiet

    quiet()
    try:
        folder = export_cell(args.cell, args.out)
    except (FileNotFoundError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"exported {args.cell} -> {folder}\ntag text with: python -m ner_lightning.predict {folder} INPUT")
    return 0


if __name__ == "__main__":
    sys.exit(main())
