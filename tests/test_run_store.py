"""Run stores: a folder of runs as one compressed file that the report reads as the folder."""
import json
import shutil

import pytest

from ner_lightning import run_store
from ner_lightning.report.__main__ import main as report
from ner_lightning.report.claims_table import claims_table
from tests.test_report import _result, _write


@pytest.fixture
def study(tmp_path):
    """Two sweeps of a study, cells named as Hydra names them, a failed cell and a stray log."""
    root = tmp_path / "runs" / "study"
    for sweep, loss in (("base", "ce"), ("other", "mom")):
        for i, (size, p) in enumerate((s, p) for s in (20, 100) for p in range(3)):
            _write(root / sweep, f"{i}_loss={loss},partition={p},size={size}",
                   _result(loss, size, p, 0.3 + 0.01 * i + (0.05 if loss == "mom" else 0) + 0.003 * p * p))
        (root / sweep / "manifest.json").write_text(json.dumps({"cells": []}))
    (root / "other" / "9_broken").mkdir()
    (root / "other" / "9_broken" / "failure.json").write_text(json.dumps({"error": "ValueError: boom"}))
    (root / "other" / "9_broken" / "train.log").write_text("not stored")
    return root


def _report(capsys, *args) -> str:
    report([*args, "--by", "loss,size", "--metrics", "test.micro.f1", "--baseline", "loss=ce", "--resamples", "200"])
    return capsys.readouterr().out


def test_pack_and_unpack_give_the_folder_back_byte_for_byte_without_what_is_not_stored(study, tmp_path):
    store, n = run_store.pack(study)
    assert store == study.with_name("study.jsonl.xz") and n == 15  # 12 results, 2 manifests, 1 failure
    back, _ = run_store.unpack(store, tmp_path / "back")
    kept = sorted(p.relative_to(study) for p in study.rglob("*") if p.is_file() and p.name != "train.log")
    assert sorted(p.relative_to(back) for p in back.rglob("*") if p.is_file()) == kept
    assert all((back / p).read_bytes() == (study / p).read_bytes() for p in kept)


def test_the_report_prints_the_same_bytes_from_the_store_as_from_the_folders(study, capsys, monkeypatch):
    monkeypatch.chdir(study.parents[1])
    args = ["runs/study/base", "runs/study/other/*size=20", "runs/study/other/*size=100"]
    from_folders = _report(capsys, *[str(p) for a in args for p in sorted(study.parents[1].glob(a))])
    run_store.pack(study)
    shutil.rmtree(study)
    assert _report(capsys, *args) == from_folders  # the patterns the shell would have expanded
    assert "1 failed cell(s):\n- 9_broken: ValueError: boom" in _report(capsys, "runs/study")
    assert run_store.files_named(study / "other", "failure.json") == [study / "other" / "9_broken" / "failure.json"]


def test_claims_read_their_glob_patterns_inside_a_store(study, tmp_path):
    claims = study.parents[1] / "claims.yaml"
    claims.write_text("""alpha: 0.05
resamples: 200
seed: 0
claims:
- id: 1
  paper: test
  source: a table
  statement: MoM > CE at size 100
  key: loss
  runs: [runs/study/base, runs/study/other/*size=100]
  where: {size: 100}
  method: mom
  baseline: ce
  metric: test.micro.f1
  relation: ">"
""")
    before = claims_table(claims)
    run_store.pack(study)
    shutil.rmtree(study)
    assert claims_table(claims) == before and "| 1 |" in before


def test_a_path_or_pattern_that_nothing_holds_is_an_error_naming_it(study, capsys):
    run_store.pack(study)
    shutil.rmtree(study)
    with pytest.raises(SystemExit, match="no_such: no such folder"):
        _report(capsys, str(study / "no_such"))
    assert run_store.expand(str(study / "other" / "*size=50")) == []
    (study.with_name("study.jsonl.xz")).write_bytes(b"not xz")
    with pytest.raises(SystemExit, match="not a readable run store"):
        run_store.files_named(study / "base", "results.json")


def test_a_folder_of_sweep_stores_reads_as_the_folder_of_sweeps(study, capsys, monkeypatch):
    """One store per sweep inside the study's folder on disk: the folder, a sweep and a pattern
    into a sweep read as they did before packing."""
    monkeypatch.chdir(study.parents[1])
    args = (["runs/study"], ["runs/study/base", "runs/study/other"],
            ["runs/study/base/*size=20", "runs/study/other/*size=100"])
    before = [_report(capsys, *[str(p) for a in arg for p in sorted(study.parents[1].glob(a))]) for arg in args]
    for sweep in ("base", "other"):
        run_store.pack(study / sweep)
        shutil.rmtree(study / sweep)
    assert sorted(p.name for p in study.iterdir()) == ["base.jsonl.xz", "other.jsonl.xz"]
    assert [_report(capsys, *arg) for arg in args] == before
