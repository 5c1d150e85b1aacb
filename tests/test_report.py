"""Report: statistics against scipy/numpy and hand computation on hand-made results, tables
and figures written."""
import json
import math

import numpy as np
import pytest
from scipy import stats

from ner_lightning.report import comparison_table, comparisons, load_runs, mixed_settings, paper_table, summary_table
from ner_lightning.report.__main__ import main
from ner_lightning.report.stats import bootstrap_mean, holm, paired_compare


def _result(loss, size, partition, f1, sha=None, wall=10.0, per_type=None, config=None):
    return {"overrides": [f"loss={loss}", f"size={size}", f"partition={partition}"],
            "config": {"size": size, "partition": partition, "seed": 42, "dataset": {"name": "toy"}, **(config or {})},
            "partition": {"sha256": sha or f"{size}-{partition}", "partition": partition},
            "compute": {"init_seed": 42},
            "test": {"micro": {"f1": f1}, "macro": {"f1": f1 / 2}, "per_type": per_type or {"PER": {"f1": f1}},
                     "lenient": {"micro": {"f1": f1}, "macro": {"f1": f1 / 2}}},
            "dev": {"micro": {"f1": f1 + 0.01}}, "wall_time_s": wall}


def _write(root, name, result):
    d = root / name
    d.mkdir(parents=True)
    (d / "results.json").write_text(json.dumps(result))


CE = {20: [0.45, 0.52, 0.56, 0.30], 50: [0.60, 0.62, 0.58, 0.66]}
MOM = {20: [0.50, 0.61, 0.55, 0.40], 50: [0.61, 0.64, 0.60, 0.65]}


@pytest.fixture
def sweep(tmp_path):
    tmp_path = tmp_path / "sweep"
    i = 0
    for loss, table in (("ce", CE), ("mom", MOM)):
        for size, f1s in table.items():
            for p, f1 in enumerate(f1s):
                _write(tmp_path, str(i), _result(loss, size, p, f1))
                i += 1
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "failure.json").write_text(json.dumps({"error": "ValueError: boom"}))
    return tmp_path


def test_bootstrap_mean_is_scipys_percentile_bootstrap():
    x = [0.2, 0.4, 0.35, 0.5]
    e = bootstrap_mean(x, resamples=2000, seed=3)
    ref = stats.bootstrap((np.array(x),), np.mean, n_resamples=2000, method="percentile", rng=np.random.default_rng(3))
    assert e.mean == pytest.approx(0.3625) and e.n == 4
    assert e.se == pytest.approx(ref.standard_error) and e.low == pytest.approx(ref.confidence_interval.low)
    assert e.low <= e.mean <= e.high
    assert bootstrap_mean([0.3, 0.3]).se == 0.0 and math.isnan(bootstrap_mean([0.3]).se)


def test_paired_comparison_known_difference():
    x, y = MOM[20], CE[20]
    c = paired_compare(x, y, resamples=5000, seed=0)
    assert c.n == 4 and c.diff.mean == pytest.approx((0.05 + 0.09 - 0.01 + 0.10) / 4)  # 0.0575 by hand
    assert c.p_ttest == pytest.approx(stats.ttest_rel(x, y).pvalue)
    assert c.p_wilcoxon == pytest.approx(stats.wilcoxon(x, y).pvalue)
    assert 0 <= c.p_bootstrap <= 1
    same = paired_compare([0.5, 0.6, 0.7], [0.5, 0.6, 0.7])
    assert same.diff.mean == 0 and same.p_bootstrap == 1.0 and same.p_ttest == 1.0
    shifted = paired_compare([0.6, 0.7, 0.8], [0.5, 0.6, 0.7])  # every partition +0.1
    assert shifted.p_bootstrap == 0.0 and shifted.diff.mean == pytest.approx(0.1)


def test_holm_by_hand():
    # sorted 0.01, 0.03, 0.04 (m = 3): 0.03, max(0.03, 0.06) = 0.06, max(0.06, 0.04) = 0.06
    assert holm([0.01, 0.04, 0.03, math.nan])[:3] == pytest.approx([0.03, 0.06, 0.06])
    assert math.isnan(holm([0.01, math.nan])[1]) and holm([0.6, 0.9]) == pytest.approx([1.0, 1.0])


def test_summary_table_reports_missing_partitions(sweep):
    (sweep / "0" / "results.json").unlink()  # ce, size 20, partition 0 gone
    runs, failed = load_runs([sweep])
    assert len(runs) == 15 and len(failed) == 1
    out = summary_table(runs, ["loss", "size"], ["test.micro.f1"], 1000, 0).splitlines()
    ref = stats.bootstrap((np.array(CE[20][1:]),), np.mean, n_resamples=1000, method="percentile",
                          rng=np.random.default_rng(0))  # scipy's percentile bootstrap, the same draws
    low, high = ref.confidence_interval
    assert out[2] == (f"| ce | 20 | 0.4600 ± {ref.standard_error:.4f} [{low:.4f}, {high:.4f}] | 3 | 0 | 10 |")
    assert out[3].startswith("| ce | 50 |") and out[3].endswith("| 4 | – | 10 |")


def test_comparisons_pair_by_partition_and_holm_across_the_table(sweep):
    runs, _ = load_runs([sweep])
    found = comparisons(runs, ["loss", "size"], ["test.micro.f1"], "loss=ce", 2000, 0)
    assert [k for k, _, _ in found] == [("mom", "20"), ("mom", "50")]
    for (_, size), _, c in found:
        assert c.diff.mean == pytest.approx(np.mean(np.array(MOM[int(size)]) - np.array(CE[int(size)])))
    assert [c.p_holm for _, _, c in found] == pytest.approx(holm([c.p_wilcoxon for _, _, c in found]))
    found = comparisons(runs, ["loss", "size"], ["test.micro.f1"], "loss=ce", 2000, 0, test="ttest")
    assert [c.p_holm for _, _, c in found] == pytest.approx(holm([c.p_ttest for _, _, c in found]))


def test_comparison_table_warns_when_too_few_pairs_for_wilcoxon_and_bootstrap(sweep, tmp_path):
    runs, _ = load_runs([sweep])  # 4 partitions: exact two-sided Wilcoxon p ≥ 2/2^4
    table = comparison_table(comparisons(runs, ["loss", "size"], ["test.micro.f1"], "loss=ce", 500, 0),
                             ["loss", "size"], "loss=ce", 0.05)
    assert "fewest: 4" in table and "0.1250" in table
    assert stats.wilcoxon([1, 2, 3, 4], [0, 0, 0, 0]).pvalue == pytest.approx(2 / 2 ** 4)  # the floor, by scipy
    for p in range(6):
        _write(tmp_path / "six", f"ce{p}", _result("ce", 20, p, 0.5 + p / 100))
        _write(tmp_path / "six", f"mom{p}", _result("mom", 20, p, 0.52 + p / 90))
    runs, _ = load_runs([tmp_path / "six"])
    table = comparison_table(comparisons(runs, ["loss"], ["test.micro.f1"], "loss=ce", 500, 0), ["loss"], "loss=ce", 0.05)
    assert "| mom | test.micro.f1 |" in table and "fewer than 6 pairs" not in table


@pytest.mark.parametrize("written, values", [("false", (False, True)), ("null", (None, 1e-3)), ("1e-3", (1e-3, None))])
def test_baseline_is_written_as_on_the_command_line(tmp_path, written, values):
    """--baseline data.group_by_length=false / head_lr=null / head_lr=1e-3 name the rows the
    config stores as False / None / 0.001."""
    base, other = values
    for i, (value, f1s) in enumerate(((base, [0.4, 0.5, 0.6]), (other, [0.5, 0.7, 0.6]))):
        for p, f1 in enumerate(f1s):
            _write(tmp_path, f"{i}_{p}", _result("ce", 50, p, f1, config={"knob": value}))
    runs, _ = load_runs([tmp_path])
    found = comparisons(runs, ["knob"], ["test.micro.f1"], f"knob={written}", 2000, 0)
    assert [k for k, _, _ in found] == [(str(other),)]
    assert found[0][2].diff.mean == pytest.approx(0.1)


def test_unpaired_partitions_are_refused(tmp_path):
    _write(tmp_path, "a", _result("ce", 20, 0, 0.5, sha="aaa"))
    _write(tmp_path, "b", _result("mom", 20, 0, 0.6, sha="bbb"))
    runs, _ = load_runs([tmp_path])
    with pytest.raises(SystemExit, match="refusing to pair"):
        comparisons(runs, ["loss", "size"], ["test.micro.f1"], "loss=ce", 100, 0)
    with pytest.raises(SystemExit, match="KEY=VALUE"):
        comparisons(runs, ["loss"], ["test.micro.f1"], "optimizer=adamw", 100, 0)


def test_paper_table_marks_best_second_and_significance(sweep, tmp_path):
    _write(sweep, "z", _result("dice", 50, 0, 0.10))
    runs, _ = load_runs([sweep])
    md = paper_table(runs, "loss", "size", "test.micro.f1", "ce", 0.05, 2000, 0, test="bootstrap").splitlines()
    assert md[0] == "| loss | size=20 | size=50 |"
    ce, dice, mom = md[2], md[3], md[4]
    # mom − ce at size 20: +0.05, +0.09, −0.01, +0.10: the bootstrap (Holm over 2) calls it a difference
    assert mom.split("|")[2].endswith("† ") and "†" not in mom.split("|")[3]
    assert ce.startswith("| ce | <u>0.4575</u>") and mom.startswith("| mom | **0.5150**")
    assert "**0.6250**" in mom and "<u>0.6150</u>" in ce and dice.startswith("| dice | – | 0.1000<sub>–</sub>")
    latex = paper_table(runs, "loss", "size", "test.micro.f1", None, 0.05, 200, 0, "latex")
    assert latex.startswith("\\begin{tabular}{lrr}") and "\\textbf{0.5150}" in latex and "\\bottomrule" in latex
    csv_rows = paper_table(runs, "loss", "size", "test.micro.f1", None, 0.05, 200, 0, "csv").splitlines()
    assert csv_rows[0] == "loss,size,mean,se,ci_low,ci_high,n,differs_from_baseline" and len(csv_rows) == 6


def test_mixed_label_schemes_are_flagged():
    runs = [{"overrides": ["loss=ce"], "config": {"data": {"label_scheme": "typed"}, "dataset": {"name": "x"}}},
            {"overrides": ["loss=auc2t"], "config": {"data": {"label_scheme": "untyped"}, "dataset": {"name": "x"}}}]
    notes = mixed_settings(runs, ["loss", "size"])
    assert len(notes) == 1 and "data.label_scheme (typed, untyped)" in notes[0]
    assert mixed_settings(runs, ["loss", "data.label_scheme"]) == []
    assert mixed_settings(runs[:1], ["loss"]) == []


def test_command_line_writes_tables_and_figures(sweep, tmp_path, capsys):
    lam_dir = tmp_path / "lam"
    for i, (lam, f1) in enumerate([(0.1, 0.3), (1.0, 0.4), (10.0, 0.35), (0.1, 0.32), (1.0, 0.45), (10.0, 0.3)]):
        r = _result("mom", 50, i // 3, f1, config={"loss": {"lam": lam}})
        r["overrides"].append(f"loss.lam={lam}")
        _write(lam_dir, str(i), r)
    figs = tmp_path / "figs"
    main([str(sweep), "--by", "loss,size", "--baseline", "loss=ce", "--paper", "loss:size", "--plots", str(figs),
          "--resamples", "500"])
    out = capsys.readouterr().out
    assert "Paired comparisons against loss=ce" in out and "| mom | 20 | test.micro.f1 |" in out
    assert "1 failed cell(s)" in out
    for name in ("test_micro_f1_vs_size", "per_type_f1_size20", "per_type_f1_size50", "paired_diff_vs_ce"):
        assert (figs / f"{name}.png").stat().st_size > 1000 and (figs / f"{name}.svg").is_file(), name
    main([str(lam_dir), "--by", "loss,loss.lam", "--plots", str(figs), "--resamples", "200"])
    assert (figs / "f1_vs_loss_lam.png").stat().st_size > 1000


def test_wandb_summary_run_reads_back(sweep, tmp_path):
    """The offline summary run, read back with W&B's own inspector: table and figures logged."""
    from ner_lightning.report.wandb_summary import read_offline_run

    figs = tmp_path / "figs"
    main([str(sweep), "--by", "loss,size", "--plots", str(figs), "--wandb", "offline", "--resamples", "200"])
    (folder,) = list((sweep / "wandb").glob("offline-run-*"))
    run = read_offline_run(folder)
    assert run["config"]["report_by"] == "loss,size" and run["config"]["runs"] == 16
    assert run["summary"]["summary_table._type"] == "table-file"
    assert run["summary"]["figures/test_micro_f1_vs_size._type"] == "image-file"
    table = json.loads((folder / "files" / run["summary"]["summary_table.path"]).read_text())
    row = dict(zip(table["columns"], table["data"][0]))
    assert row["loss"] == "ce" and row["size"] == "20" and row["test.micro.f1 mean"] == pytest.approx(0.4575)
    cells = json.loads((folder / "files" / run["summary"]["cells_table.path"]).read_text())
    assert cells["columns"] == ["loss", "size", "partition", "test.micro.f1", "test.macro.f1", "W&B run",
                                "prediction tables"]
    assert len(cells["data"]) == 16 and {tuple(c[:3]) for c in cells["data"]} == {
        (loss, size, p) for loss in ("ce", "mom") for size in ("20", "50") for p in range(4)}
    assert all(c[-2:] == [None, ""] for c in cells["data"])  # these runs logged to CSV only: no run, no tables


def _corpus_run(dataset, scheme, partition, f1, dev, correct, predicted, support, aux=None):
    r = _result("crf", 200, partition, f1, sha=f"{dataset}-{partition}",
                config={"dataset": {"name": dataset}, "aux": aux or []})
    r["grid"] = {"multitask": scheme, "dataset": dataset}
    r["test"]["micro"].update(correct=correct, predicted=predicted, support=support)
    r["dev_monitor"] = dev
    return r


def test_singleaux_auxiliary_is_chosen_on_dev_and_corpora_are_averaged(tmp_path, capsys):
    """SingleAux keeps, per corpus and partition, the auxiliary with the best main dev score
    (not test); macro = mean F1 over corpora, micro = F1 of the pooled span counts."""
    runs = [
        # a: SingleAux with x (dev .7, test .5) or y (dev .6, test .9): x is chosen, test .5
        _corpus_run("a", "singleaux", 0, 0.5, 0.7, 5, 10, 10, aux=["x"]),
        _corpus_run("a", "singleaux", 0, 0.9, 0.6, 9, 10, 10, aux=["y"]),
        _corpus_run("b", "singleaux", 0, 0.25, 0.3, 10, 30, 50, aux=["x"]),
        _corpus_run("a", "singletask", 0, 0.4, 0.5, 4, 10, 10),
        _corpus_run("b", "singletask", 0, 0.2, 0.5, 8, 30, 50),
        _corpus_run("a", "singletask", 1, 0.4, 0.5, 4, 10, 10),  # partition 1 has no b: left out of the average
    ]
    for i, r in enumerate(runs):
        _write(tmp_path, str(i), r)
    main([str(tmp_path), "--by", "dataset,multitask", "--metrics", "test.micro.f1", "--select-on-dev", "aux",
          "--average-over", "dataset", "--resamples", "200"])
    out = capsys.readouterr().out
    assert "a singleaux partition 0: aux=x chosen on dev (x 0.7000, y 0.6000)" in out
    rows = {line.split("|")[1].strip(): line for line in out.splitlines() if line.startswith("| single")}
    # singleaux: macro (0.5 + 0.25) / 2; micro 2 * (5 + 10) / ((10 + 30) + (10 + 50))
    assert "| 0.3750 ±" in rows["singleaux"] and "| 0.3000 ±" in rows["singleaux"]
    # singletask: macro (0.4 + 0.2) / 2; micro 2 * 12 / (40 + 60); partition 1 left out
    assert "| 0.3000 ±" in rows["singletask"] and "| 0.2400 ±" in rows["singletask"]
    assert rows["singletask"].rstrip().endswith("| 1 | 1 |")


def test_choose_on_dev_takes_the_best_mean_over_shared_partitions(tmp_path, capsys):
    """--choose head_lr: per loss, the value with the highest mean dev_monitor over the partitions
    all values ran on (partition 102 of one value alone does not count); test is not read."""
    dev = {("ce", 0.01): [0.50, 0.60, 0.99], ("ce", 0.1): [0.58, 0.56], ("crf", 0.01): [0.40, 0.46], ("crf", 0.1): [0.44, 0.44]}
    i = 0
    for (loss, lr), values in dev.items():
        for p, v in zip((100, 101, 102), values):
            r = _result(loss, 50, p, f1=1.0 - v, config={"loss": {"head_lr": lr}})
            r["dev_monitor"], r["best_batch"] = v, 100 + i
            _write(tmp_path, str(i), r)
            i += 1
    from ner_lightning.report.runs import choose_on_dev

    runs, _ = load_runs([tmp_path])
    choices = {c["row"]: c for c in choose_on_dev(runs, "loss.head_lr", ["loss", "loss.head_lr"])}
    assert choices[("ce",)]["best"] == "0.1" and choices[("ce",)]["partitions"] == ["100", "101"]
    assert choices[("ce",)]["means"] == pytest.approx({"0.01": 0.55, "0.1": 0.57})
    assert choices[("crf",)]["best"] == "0.1" and choices[("crf",)]["means"]["0.01"] == pytest.approx(0.43)
    main([str(tmp_path), "--by", "loss,loss.head_lr", "--metrics", "dev_monitor,best_batch", "--choose", "loss.head_lr",
          "--resamples", "100"])
    out = capsys.readouterr().out
    assert "- ce: loss.head_lr=0.1 (0.01 0.5500, 0.1 0.5700; partitions 100, 101)" in out
    assert "| ce | 0.01 | 0.6967 ± " in out and "| 101.0000 ± " in out  # best_batch is a results.json value


def test_paired_differences_across_label_schemes_are_refused(tmp_path, capsys):
    """AUC-2T on untyped spans vs CE on typed labels: the summary prints, the paired difference
    (and the paper table's marks) are refused naming the key; the same rows on one scheme pair."""
    for p in range(3):
        _write(tmp_path / "mixed", f"ce{p}", _result("ce", 20, p, 0.5, config={"data": {"label_scheme": "typed"}}))
        _write(tmp_path / "mixed", f"auc{p}", _result("auc2t", 20, p, 0.6, config={"data": {"label_scheme": "untyped"}}))
        for loss, f1 in (("ce", 0.5 + p / 100), ("auc2t", 0.6)):
            _write(tmp_path / "same", f"{loss}{p}", _result(loss, 20, p, f1, config={"data": {"label_scheme": "untyped"}}))
    runs, _ = load_runs([tmp_path / "mixed"])
    with pytest.raises(SystemExit, match=r"row auc2t 20 vs ce 20: data.label_scheme is untyped vs typed"):
        comparisons(runs, ["loss", "size"], ["test.micro.f1"], "loss=ce", 100, 0)
    with pytest.raises(SystemExit, match="data.label_scheme"):
        paper_table(runs, "loss", "size", "test.micro.f1", "ce", 0.05, 100, 0)
    message = _run_report(capsys, tmp_path / "mixed", "--by", "loss,size", "--baseline", "loss=ce")
    out = capsys.readouterr().out
    assert "data.label_scheme is untyped vs typed" in message and "| auc2t | 20 |" in out and "mean diff" not in out
    runs, _ = load_runs([tmp_path / "same"])
    (found,) = comparisons(runs, ["loss", "size"], ["test.micro.f1"], "loss=ce", 100, 0)
    assert found[0] == ("auc2t", "20") and found[2].n == 3 and found[2].diff.mean == pytest.approx(0.09)


def test_data_row_key_is_the_regime_preset(tmp_path):
    """``--by data`` labels a run by its conf/data preset: the one recorded in results.json's
    grid, else the command line's, else data/default."""
    from ner_lightning.report.runs import lookup

    recorded = {**_result("ce", 20, 0, 0.5), "grid": {"data": "bus"}}
    on_command_line = {**_result("ce", 20, 0, 0.5), "overrides": ["data=sCR", "size=20"]}
    neither = _result("ce", 20, 0, 0.5)
    assert [lookup(r, "data") for r in (recorded, on_command_line, neither)] == ["bus", "sCR", "default"]


def _run_report(capsys, *argv):
    with pytest.raises(SystemExit) as stop:
        main([str(a) for a in argv])
    return str(stop.value.code)


def test_a_row_that_pools_other_settings_is_refused_naming_them(tmp_path, capsys):
    """Two runs of one setting plus one with another entity share were one row, n=3."""
    for p in range(2):
        _write(tmp_path, f"a{p}", _result("ce", 50, p, 0.5 + p / 10, config={"data": {"imbalance": {"entity_share": None}}}))
    _write(tmp_path, "b0", _result("ce", 50, 2, 0.9, config={"data": {"imbalance": {"entity_share": 0.9}}}))
    message = _run_report(capsys, tmp_path, "--by", "loss,size", "--metrics", "test.micro.f1")
    assert "row ce 50: runs differ in data.imbalance.entity_share (0.9, None)" in message and "--pool" in message
    main([str(tmp_path), "--by", "loss,size", "--metrics", "test.micro.f1", "--pool", "data.imbalance.entity_share"])
    assert "| 3 |" in capsys.readouterr().out
    main([str(tmp_path), "--by", "loss,size,data.imbalance.entity_share", "--metrics", "test.micro.f1"])
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ce | 50 |")]
    assert [(r.split(" | ")[2], r.split(" | ")[3].split(" ±")[0], r.split(" | ")[4]) for r in rows] == [
        ("0.9", "0.9000", "1"), ("None", "0.5500", "2")]  # one row per setting: its mean, its n


def test_the_same_run_twice_is_refused_naming_both_folders_and_asking_to_delete_neither(tmp_path):
    _write(tmp_path, "first", _result("ce", 50, 0, 0.5))
    _write(tmp_path, "copy", _result("ce", 50, 0, 0.5))
    message = _run_report(None, tmp_path, "--by", "loss,size", "--metrics", "test.micro.f1")
    assert "the same run in two folders" in message and "first" in message and "copy" in message
    assert not any(word in message for word in ("remove", "delete"))


def test_runs_that_differ_in_a_setting_are_reported_as_such_not_as_the_same_run(tmp_path):
    """Two sweeps of one grid on the same partitions but other settings (label scheme, epochs,
    dev size): the report names those settings, and never calls them the same run."""
    for name, scheme, epochs, dev in (("A", "typed", 30, 300), ("B", "untyped", 10, 100)):
        config = {"data": {"label_scheme": scheme, "dev_size": dev}, "trainer": {"max_epochs": epochs}}
        _write(tmp_path, f"{name}/0", _result("ce", 50, 0, 0.5, config=config))
    message = _run_report(None, tmp_path, "--by", "loss,size", "--metrics", "test.micro.f1")
    for key in ("data.label_scheme", "trainer.max_epochs", "data.dev_size"):
        assert f"runs differ in {key}" in message
    assert "same run" not in message and "remove" not in message


@pytest.mark.parametrize("key, value, said", [
    (("test", "micro", "f1"), "0.9; rm -rf /", "test.micro.f1 is '0.9; rm -rf /', not a score in [0, 1]"),
    (("test", "micro", "f1"), 7.5, "test.micro.f1 is 7.5, not a score in [0, 1]"),
    (("test", "micro", "f1"), True, "test.micro.f1 is True, not a score in [0, 1]"),
    (("dev", "micro", "f1"), float("nan"), "dev.micro.f1 is nan, not a score in [0, 1]"),
    (("test", "micro", "support"), -3, "test.micro.support is -3, not a count"),
    (("wall_time_s",), "10", "wall_time_s is '10', not a number >= 0"),
    (("config",), "x", "config is 'x', not the cell's resolved config"),
    (("partition", "sha256"), 5, "partition.sha256 is 5, not a partition's hash"),
    (("status",), "failed", "status is 'failed', not 'ok'"),
])
def test_a_results_json_with_a_value_no_cell_writes_is_refused_naming_file_and_key(tmp_path, key, value, said):
    """A sweep folder from elsewhere is data: each value the report reads is checked first."""
    for p in range(3):
        _write(tmp_path, f"c{p}", _result("ce", 50, p, 0.5))
    bad = _result("ce", 50, 3, 0.5)
    node = bad
    for part in key[:-1]:
        node = node[part]
    node[key[-1]] = value
    _write(tmp_path, "edited", bad)
    message = _run_report(None, tmp_path, "--by", "loss,size", "--metrics", "test.micro.f1")
    assert message.startswith(f"{tmp_path / 'edited' / 'results.json'}: {said}"), message
    assert "Traceback" not in message


def test_keys_that_name_nothing_are_errors_that_list_what_exists(sweep):
    message = _run_report(None, sweep, "--by", "los", "--metrics", "test.micro.f1")
    assert "--by los: no run has it" in message and "loss" in message
    message = _run_report(None, sweep, "--by", "loss", "--metrics", "test.micro.f2")
    assert "--metrics test.micro.f2: no run has it" in message and "test.micro.f1" in message
    message = _run_report(None, sweep, "--by", "loss,size", "--metrics", "test.micro.f1", "--baseline", "loss=nope")
    assert "loss=nope" in message and "ce" in message and "mom" in message


def test_an_unreadable_results_json_is_named_and_skipped_or_stops_the_report(sweep, capsys):
    (sweep / "0" / "results.json").write_text('{"status": "ok", "te')
    main([str(sweep), "--by", "loss,size", "--metrics", "test.micro.f1"])
    captured = capsys.readouterr()
    assert f"skipped {sweep / '0' / 'results.json'}" in captured.err and "| ce | 20 |" in captured.out
    message = _run_report(None, sweep, "--by", "loss,size", "--strict")
    assert str(sweep / "0" / "results.json") in message


def test_swept_floats_are_rounded_but_kept_apart(tmp_path, capsys):
    """Optuna-sampled values print with 4 significant digits, more only where two would merge."""
    for p in range(2):
        for gamma, f1 in ((7.151893663724195, 0.5), (7.151993663724195, 0.6), (2.0, 0.4)):
            _write(tmp_path, f"g{gamma}-{p}", _result("focal", 50, p, f1 + p / 100,
                                                      config={"loss": {"token_loss": {"gamma": gamma}}}))
    main([str(tmp_path), "--by", "loss.token_loss.gamma", "--metrics", "test.micro.f1", "--resamples", "50",
          "--baseline", "loss.token_loss.gamma=2.0"])
    out = capsys.readouterr().out
    assert "| 7.1519 |" in out and "| 7.152 |" in out and "| 2 |" in out and "7.151893663724195" not in out
    assert "| 7.1519 | test.micro.f1 | +0.1000" in out


def test_best_is_last_tells_runs_whose_budget_may_bind():
    from ner_lightning.report.runs import lookup

    run = {"best_batch": 300, "compute": {"train_batches": 300}, "config": {}}
    assert lookup(run, "best_is_last") == 1.0
    assert lookup({**run, "best_batch": 275}, "best_is_last") == 0.0
    assert lookup({"config": {}}, "best_is_last") is None
