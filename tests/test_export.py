"""Predictions written per cell, export and predict: a cell of every family writes dev and test
predictions in CoNLL form that score as its results.json says, and its exported folder tags the
test split (and raw text) exactly as the cell did."""
import json
import re
from pathlib import Path

import pytest

from ner_lightning.export import folder as export
from ner_lightning.export import predict
from ner_lightning.data.corpus import read_conll
from ner_lightning.metrics import span_scores
from tests.helpers import train

FAMILIES = {  # one loss config per objective family (and both MRC heads)
    "ce": [], "crf": [], "auc2t": [], "ova_auc": [], "mrc": [], "mrc_pointer": ["loss=mrc", "loss.head=pointer"],
}


def _columns(path: Path) -> tuple[list[list[str]], list[list[str]], list[list[str]]]:
    """Words, gold and predicted tags of a predictions file, read as written (a prediction need not
    be valid IOB2: an argmax may put I-LOC after ORG, which seqeval scores as a new span)."""
    words, gold, pred = [], [], []
    for block in path.read_text().split("\n\n"):
        rows = [line.split("\t") for line in block.splitlines()]
        if rows:
            words.append([r[0] for r in rows]), gold.append([r[1] for r in rows]), pred.append([r[2] for r in rows])
    assert [list(s.tags) for s in read_conll(path, tag_column=1)] == gold  # the gold column is valid IOB2
    return words, gold, pred


@pytest.mark.parametrize("family", FAMILIES)
def test_exported_model_tags_the_test_split_as_the_cell_did(toy_cfg, family, tmp_path, capsys):
    extra = FAMILIES[family] or [f"loss={family}"]
    result = train(toy_cfg(*extra, "export=true", "trainer.max_epochs=3"))
    cell = Path(result["config"]["paths"]["output_dir"])
    assert set(result["predictions"]) == {"dev", "test"} and result["export"] == "export"
    words, gold, saved = _columns(cell / result["predictions"]["test"])
    assert span_scores(gold, saved)["micro"] == result["test"]["micro"]  # the file is what was scored
    dev_words, dev_gold, dev_saved = _columns(cell / result["predictions"]["dev"])
    assert span_scores(dev_gold, dev_saved)["micro"] == result["dev"]["micro"]  # dev of the selected epoch
    model = export.load(cell / "export")
    assert model.tag(words) == saved
    # the command line: the cell's CoNLL test file in, token / gold / predicted out, scored
    out = tmp_path / "pred.conll"
    test_file = Path(result["config"]["dataset"]["dir"]) / result["config"]["dataset"]["splits"]["test"]
    assert predict.main([str(cell / "export"), str(test_file), "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert _columns(out)[2] == saved and f"span F1 {result['test']['micro']['f1']:.4f}" in err
    assert re.search(r"tagged \d+ sentences, \d+ words in [\d.]+ s on cpu \([\d,]+ words/s\)", err)
    raw = tmp_path / "raw.txt"
    raw.write_text("John Smith visited Paris.\n\nThe EU bought 5,000 tonnes .\n")
    assert predict.main([str(cell / "export"), str(raw)]) == 0
    lines = [line.split("\t") for line in capsys.readouterr().out.splitlines()]
    assert [row[0] for row in lines if row != [""]] == ["John", "Smith", "visited", "Paris", ".", "The", "EU",
                                                        "bought", "5,000", "tonnes", "."]
    assert all(len(row) == 2 for row in lines if row != [""])


def test_multi_corpus_cell_writes_each_corpus_and_exports_every_head(multi_cfg):
    result = train(multi_cfg("multitask=multitask", "export=true"))
    cell = Path(result["config"]["paths"]["output_dir"])
    assert set(result["predictions"]) == {"dev", "test", "test_bc2gm", "test_linnaeus"}
    _, gold, pred = _columns(cell / result["predictions"]["test_bc2gm"])
    assert span_scores(gold, pred)["micro"] == result["test_aux"]["bc2gm"]["micro"]
    meta = json.loads((cell / "export" / "model.json").read_text())
    assert set(meta["entity_types"]) == {"main", "bc2gm", "linnaeus"}
    words, _, saved = _columns(cell / result["predictions"]["test"])
    assert export.load(cell / "export").tag(words) == saved


def test_a_kept_checkpoint_exports_afterwards_and_a_cell_without_one_says_what_to_do(toy_cfg, tmp_path, capsys):
    result = train(toy_cfg("keep_checkpoint=true", "evaluate_test=false"))
    cell = Path(result["config"]["paths"]["output_dir"])
    assert "test" not in result["predictions"]
    assert export.main([str(cell), "--out", str(tmp_path / "later")]) == 0
    words, _, saved = _columns(cell / result["predictions"]["dev"])
    assert export.load(tmp_path / "later").tag(words) == saved  # the selected weights, not the last ones
    none = train(toy_cfg("hydra.run.dir=x", "paths.output_dir=" + str(tmp_path / "plain")))
    assert none["checkpoint"] is None
    assert export.main([str(tmp_path / "plain")]) == 2 and "keep_checkpoint=true" in capsys.readouterr().err


def test_predict_names_what_is_wrong(tmp_path, capsys):
    assert predict.main([str(tmp_path), str(tmp_path / "missing.txt")]) == 2
    assert "no such file" in capsys.readouterr().err
    text = tmp_path / "in.txt"
    text.write_text("a b\n")
    assert predict.main([str(tmp_path), str(text)]) == 2
    assert "not an exported model" in capsys.readouterr().err


PIPELINE_SCRIPT = r"""
import json, sys
from transformers import pipeline
folder, sentences = sys.argv[1], json.loads(sys.stdin.read())
tagger = pipeline("token-classification", model=folder, aggregation_strategy="none")
grouped = pipeline("token-classification", model=folder, aggregation_strategy="first")
texts = [" ".join(words) for words in sentences]
out = {"tokens": [tagger(t) for t in texts], "groups": [grouped(t) for t in texts]}
assert not any(name.startswith("ner_lightning") for name in sys.modules)
print(json.dumps(out, default=float))
"""


def _pipeline_tags(folder: Path, sentences: list[list[str]]) -> tuple[list[list[str]], list[set]]:
    """Run ``transformers.pipeline`` on ``folder`` in a fresh process that never imports
    ner_lightning; per sentence, each word's label (its first sub-word's, O where none) from
    ``aggregation_strategy="none"`` and the word spans of ``"first"``'s entity groups."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", PIPELINE_SCRIPT, str(folder)], input=json.dumps(sentences),
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    tags, groups = [], []
    for words, tokens, found in zip(sentences, out["tokens"], out["groups"]):
        starts = [sum(len(w) + 1 for w in words[:i]) for i in range(len(words))]
        by_start = {t["start"]: t["entity"] for t in tokens}
        tags.append([by_start.get(s, "O") for s in starts])
        word_at = {s: i for i, s in enumerate(starts)}
        ends = {s + len(w): i for i, (s, w) in enumerate(zip(starts, words))}
        groups.append({(g["entity_group"], word_at[g["start"]], ends[g["end"]]) for g in found})
    return tags, groups


@pytest.mark.parametrize("model", ["tiny", pytest.param("minilm", marks=pytest.mark.slow)])
def test_a_softmax_head_export_is_a_transformers_pipeline_model_that_tags_as_predict(toy_cfg, model, tmp_path):
    from ner_lightning.metrics import spans

    extra = ["model=minilm", "trainer.max_epochs=2"] if model == "minilm" else ["trainer.max_epochs=3"]
    result = train(toy_cfg("export=true", *extra))
    folder = Path(result["config"]["paths"]["output_dir"]) / "export"
    meta = json.loads((folder / "model.json").read_text())
    assert meta["pipeline"] == {"available": True, "task": "token-classification", "aggregation_strategy": "first"}
    config = json.loads((folder / "config.json").read_text())
    assert list(config["id2label"].values()) == ["O", "B-LOC", "I-LOC", "B-MISC", "I-MISC", "B-ORG", "I-ORG",
                                                 "B-PER", "I-PER"]
    words, _, saved = _columns(folder.parent / result["predictions"]["test"])
    assert export.load(folder).tag(words) == saved  # predict reads the same folder
    tags, groups = _pipeline_tags(folder, words)
    assert tags == saved
    assert groups == [set(spans(t, "lenient")) for t in saved]
    assert any(t != "O" for sentence in saved for t in sentence)  # the comparison saw entities


def test_a_crf_export_says_it_needs_predict_and_the_model_card_holds_the_cells_scores(toy_cfg):
    result = train(toy_cfg("loss=crf", "export=true", "trainer.max_epochs=2"))
    folder = Path(result["config"]["paths"]["output_dir"]) / "export"
    meta = json.loads((folder / "model.json").read_text())
    assert meta["pipeline"]["available"] is False and "ner_lightning.predict" in meta["pipeline"]["why"]
    assert not (folder / "config.json").exists() and (folder / "encoder" / "config.json").is_file()
    card = (folder / "README.md").read_text()
    assert card.startswith("---\n") and "Not loadable by `transformers.pipeline`" in card
    header = yaml_header(card)
    assert "pipeline_tag" not in header and header["datasets"] == [result["partition"]["dataset"]]
    metrics = {(r["dataset"]["split"], m["name"]): m["value"]
               for r in header["model-index"][0]["results"] for m in r["metrics"]}
    for split in ("dev", "test"):
        assert metrics[(split, f"{split} strict micro F1")] == round(result[split]["micro"]["f1"], 4)
        assert metrics[(split, f"{split} lenient micro F1")] == round(result[split]["lenient"]["micro"]["f1"], 4)
        assert f"F1 {result[split]['micro']['f1']:.4f}" in card
    assert result["partition"]["sha256"] in card and "python -m ner_lightning.run" in card


def yaml_header(card: str) -> dict:
    """The model card's YAML header, parsed as the Hub parses it (``huggingface_hub.ModelCard``)."""
    from huggingface_hub import ModelCard

    return ModelCard(card).data.to_dict()


def test_a_wandb_cell_run_holds_its_predictions_as_tables(toy_cfg, monkeypatch):
    """``logger=wandb`` (offline): the cell's run holds ``predictions/dev`` and ``predictions/test``
    tables, read back with W&B's own inspector; their rows are the prediction files' sentences
    with spans, errors marked and first, capped by ``logger.wandb.prediction_table_rows``."""
    from ner_lightning.report.wandb_summary import read_offline_run
    from ner_lightning.wandb_logging import TABLE_COLUMNS, finish_wandb, prediction_rows

    monkeypatch.setenv("WANDB_SILENT", "true")
    result = train(toy_cfg("logger=wandb", "trainer.max_epochs=3", "logger.wandb.prediction_table_rows=3",
                           "logger.wandb.tags=[toy]"))  # composed here, the default tags would read Hydra's read-only node
    finish_wandb()  # as the entry point does after each cell
    cell = Path(result["config"]["paths"]["output_dir"])
    (folder,) = list((cell / "wandb").glob("offline-run-*"))
    run = read_offline_run(folder)
    for split in ("dev", "test"):
        assert run["summary"][f"predictions/{split}._type"] == "table-file"
        table = json.loads((folder / "files" / run["summary"][f"predictions/{split}.path"]).read_text())
        assert table["columns"] == TABLE_COLUMNS
        words, gold, pred = _columns(cell / result["predictions"][split])
        expected = prediction_rows(cell / result["predictions"][split], 3)
        assert table["data"] == expected and 0 < len(expected) <= 3
        errors = sum(sp(g) != sp(p) for g, p in zip(gold, pred) if sp(g) or sp(p))
        assert [row[-1] for row in expected] == [False] * min(errors, 3) + [True] * (len(expected) - min(errors, 3))
        assert errors > 0  # a 3-epoch toy model errs: the first row is an error, checked by hand
        first = expected[0]
        k = next(i for i, (g, p) in enumerate(zip(gold, pred)) if sp(g) != sp(p))
        assert first[0] == " ".join(words[k])
        missed = sp(gold[k]) - sp(pred[k])
        assert first[3] == "; ".join(f"{t}: {' '.join(words[k][a:b + 1])}" for t, a, b in sorted(missed, key=lambda s: s[1:]))


def sp(tags: list[str]) -> set:
    from ner_lightning.metrics import spans

    return set(spans(tags, "strict"))
