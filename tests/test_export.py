"""Predictions written per cell, export and predict: a cell of every family writes dev and test
predictions in CoNLL form that score as its results.json says, and its exported folder tags the
test split (and raw text) exactly as the cell did."""
import json
from pathlib import Path

import pytest

from ner_lightning import export, predict
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
    assert _columns(out)[2] == saved and f"span F1 {result['test']['micro']['f1']:.4f}" in capsys.readouterr().err
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
