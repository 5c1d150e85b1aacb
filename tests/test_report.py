import json

import pytest

from ner_lightning.report import load_runs, table


def _write(d, name, loss, size, f1, wall):
    p = d / name
    p.mkdir(parents=True)
    (p / "results.json").write_text(json.dumps({
        "overrides": [f"loss={loss}", f"size={size}"], "config": {"size": size, "dataset": {"name": "toy"}},
        "test": {"micro": {"f1": f1}, "macro": {"f1": f1 / 2}}, "wall_time_s": wall}))


def test_table_means_sd_and_ranges(tmp_path):
    _write(tmp_path, "0", "ce", 20, 0.2, 10)
    _write(tmp_path, "1", "ce", 20, 0.4, 30)
    _write(tmp_path, "2", "auc2t", 20, 0.5, 5)
    (tmp_path / "3").mkdir()
    (tmp_path / "3" / "failure.json").write_text(json.dumps({"error": "ValueError: boom"}))
    runs, failed = load_runs([tmp_path])
    assert len(runs) == 3 and len(failed) == 1
    out = table(runs, ["loss", "size"], ["test.micro.f1"]).splitlines()
    # rows sorted by key; ce: mean 0.3, sd sqrt(0.02) = 0.1414
    assert out[2] == "| auc2t | 20 | 0.5000 ± 0.0000 [0.5000, 0.5000] | 1 | 5 |"
    assert out[3] == "| ce | 20 | 0.3000 ± 0.1414 [0.2000, 0.4000] | 2 | 20 |"


def test_mixed_label_schemes_are_flagged():
    runs = [{"overrides": ["loss=ce"], "config": {"data": {"label_scheme": "typed"}, "dataset": {"name": "x"}}},
            {"overrides": ["loss=auc2t"], "config": {"data": {"label_scheme": "untyped"}, "dataset": {"name": "x"}}}]
    from ner_lightning.report import mixed_settings

    notes = mixed_settings(runs, ["loss", "size"])
    assert len(notes) == 1 and "data.label_scheme (typed, untyped)" in notes[0]
    assert mixed_settings(runs, ["loss", "data.label_scheme"]) == []
    assert mixed_settings(runs[:1], ["loss"]) == []


def test_paired_t_test_matches_scipy_and_pairs_by_partition():
    from scipy import stats

    from ner_lightning.report import paired_tests

    def run(loss, sha, f1):
        return {"overrides": [f"loss={loss}"], "config": {"seed": 42, "size": 20}, "partition": {"sha256": sha},
                "test": {"macro": {"f1": f1}}, "wall_time_s": 1}

    mom = [0.50, 0.61, 0.55, 0.40]
    ce = [0.45, 0.52, 0.56, 0.30]
    # listed in a different order for ce: pairing must follow the partition, not the order
    runs = [run("mom", s, f) for s, f in zip("abcd", mom)] + [run("ce", s, f) for s, f in reversed(list(zip("abcd", ce)))]
    out = paired_tests(runs, ["loss", "size"], ["test.macro.f1"], "loss=mom", 0.05).splitlines()
    t, p = stats.ttest_rel(ce, mom)
    diff = sum(c - m for c, m in zip(ce, mom)) / 4  # by hand: (-0.05 - 0.09 + 0.01 - 0.10) / 4 = -0.0575
    assert diff == pytest.approx(-0.0575)
    assert len(out) == 3 and out[2] == (f"| ce | 20 | test.macro.f1 | {diff:+.4f} | {t:.3f} | {p:.4f} | 4 | "
                                        f"{'yes' if p < 0.05 else 'no'} |")
    with pytest.raises(SystemExit, match="KEY=VALUE"):
        paired_tests(runs, ["loss"], ["test.macro.f1"], "optimizer=adamw", 0.05)
