"""Studies: the group-sequential boundaries against published values, their type-I error by
simulation, and `ner-lightning study` on a toy claims file (tiny encoder, toy corpus)."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import yaml
from scipy import stats

from ner_lightning.report.sequential import (boundaries, nominal_levels, spent, t_boundaries, type_one_error,
                                             z_nominal_bounds)


def test_boundaries_are_the_published_lan_demets_values():
    """One-sided α = 0.025 (gsDesign's sfLDOF / sfLDPocock, Jennison & Turnbull Table 2.x):
    O'Brien–Fleming type at 2 and 3 equally spaced looks, Pocock type at 2; the first boundary
    by hand from the spending function; every function spends exactly α by the end."""
    assert boundaries([0.5, 1], 0.025) == pytest.approx([2.9626, 1.9686], abs=2e-4)
    assert boundaries([1 / 3, 2 / 3, 1], 0.025) == pytest.approx([3.7103, 2.5114, 1.9930], abs=2e-4)
    assert boundaries([0.5, 1], 0.025, "pocock") == pytest.approx([2.1570, 2.2010], abs=2e-4)
    by_hand = stats.norm.isf(2 - 2 * stats.norm.cdf(stats.norm.isf(0.025 / 2) / np.sqrt(0.4)))
    assert boundaries([0.4, 1], 0.025)[0] == pytest.approx(by_hand)
    assert spent(1.0, 0.05) == pytest.approx(0.05) and spent(1.0, 0.05, "pocock") == pytest.approx(0.05)
    assert boundaries([1.0], 0.05) == pytest.approx([stats.norm.isf(0.05)])
    with pytest.raises(ValueError, match="must increase to 1"):
        boundaries([0.5, 0.4, 1], 0.05)


def test_the_sequential_t_test_keeps_its_type_one_error_and_naive_peeking_does_not():
    """2,000 simulated studies under H0 (paired Δ normal, mean 0), looks at 4, 7 and 10
    partitions: rejecting the first time a look's one-sided t-test p falls below its O'Brien–Fleming
    nominal level rejects in ≤ α + 3 SE of studies; testing each look at α (optional stopping)
    rejects in clearly more."""
    alpha, stages, studies = 0.05, [4, 7, 10], 2000
    levels = nominal_levels([s / stages[-1] for s in stages], alpha)
    d = np.random.default_rng(7).normal(0.0, 0.024, size=(studies, stages[-1]))
    p = np.stack([stats.ttest_1samp(d[:, :n], 0.0, axis=1, alternative="greater").pvalue for n in stages], axis=1)
    sequential = float(np.mean((p < np.asarray(levels)).any(axis=1)))
    naive = float(np.mean((p < alpha).any(axis=1)))
    se = np.sqrt(alpha * (1 - alpha) / studies)
    assert sequential <= alpha + 3 * se, sequential
    assert naive > alpha + 3 * se, naive


TOY = ["dataset.name=toy", "dataset.dir=${paths.data_dir}/toy", "size=8", "debug=tiny", "data.dev_size=null",
       "trainer=cpu", "trainer.max_epochs=1", "trainer.min_epochs=1", "logger=csv"]


def _claims_file(tmp_path, stages):
    """Two grids: `lr` whose claim is a large, certain effect (the head learning rate each run
    records, 0.1 against 0.001) and `loss` whose claim is null (ce and focal train on the same
    sentences: the training-set token count differs by exactly 0)."""
    claim = {"paper": "toy", "source": "-", "relation": ">"}
    spec = {"alpha": 0.05, "resamples": 100,
            "study": {"dir": str(tmp_path / "study"), "partitions": stages[-1], "stages": stages},
            "grids": {"lr": ["head_lr=0.001,0.1", *TOY], "loss": ["loss=ce,focal", *TOY]},
            "claims": [{**claim, "id": "large", "statement": "a higher head lr is recorded", "grid": "lr",
                        "key": "head_lr", "method": 0.1, "baseline": 0.001, "metric": "compute.head_lr"},
                       {**claim, "id": "null", "statement": "focal trains on more tokens", "grid": "loss",
                        "key": "loss", "method": "focal", "baseline": "ce", "metric": "training_set.after.tokens"}]}
    path = tmp_path / "toy_claims.yaml"
    path.write_text(yaml.safe_dump(spec, allow_unicode=True))
    return path


def _run(args, cwd, data_dir, module="ner_lightning.run"):
    env = dict(os.environ, NER_DATA_DIR=str(data_dir), WANDB_MODE="offline", WANDB_SILENT="true",
               HYDRA_FULL_ERROR="0", OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, "-m", module, *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=900)


def _results(folder):
    return {p.parent.name: p.stat().st_mtime_ns for p in folder.glob("*/results.json")}


@pytest.mark.slow  # four multiruns of the tiny encoder, then three again
def test_a_sequential_study_runs_only_missing_cells_stops_when_decided_and_resumes(toy_data_dir, tmp_path):
    """`ner-lightning study --sequential` with looks at 2 and 3 partitions: a cell run before by
    hand is kept; the large effect is decided at look 1 (its grid never grows past 2 partitions),
    the null one runs every look and ends inconclusive. A cell lost to an interruption is the only
    one the same command runs again (at look 1: a rerun keeps the grid the folder holds); another
    plan for the same folder is refused."""
    path = _claims_file(tmp_path, [2, 3])
    study = tmp_path / "study"
    before = _run(["-m", "loss=ce", *TOY, "partition=0", f"hydra.sweep.dir={study / 'loss'}"], tmp_path,
                  toy_data_dir)
    assert before.returncode == 0, before.stderr[-3000:]
    (kept,) = _results(study / "loss").items()

    proc = _run(["study", str(path), "--sequential"], tmp_path, toy_data_dir)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert "4 cells — 0 done, 4 to run" in out and "4 cells — 1 done, 3 to run" in out  # look 1: lr, loss
    assert "6 cells — 4 done, 2 to run" in out  # look 2 adds partition 2 of the null claim's grid only
    loss, lr = _results(study / "loss"), _results(study / "lr")
    assert len(loss) == 6 and loss[kept[0]] == kept[1]  # the hand-run cell was not run again
    assert len(lr) == 4 and all("partition=2" not in name for name in lr)  # stopped at look 1
    record = json.loads((study / "study.json").read_text())
    assert record["verdicts"] == {"large": {"verdict": "replicated", "look": 1, "partitions": 2},
                                  "null": {"verdict": "inconclusive", "look": 2, "partitions": 3}}
    look1 = record["looks"][0]["claims"]["large"]
    bounds = t_boundaries([2, 3], 0.05 / 4, "obrien_fleming", 2_000_000, 0)
    assert look1["level"] == pytest.approx(stats.t.sf(bounds[0], 1))
    assert look1["alpha_spent"] == pytest.approx(4 * spent(2 / 3, 0.05 / 4))
    assert "| large | replicated | 1 (2) |" in proc.stdout and "| null | inconclusive | 2 (3) |" in proc.stdout

    lost = next(name for name in loss if "partition=1" in name)  # a cell interrupted before its result
    (study / "loss" / lost / "results.json").unlink()
    again = _run(["study", str(path), "--sequential", "trainer.max_epochs=1"], tmp_path, toy_data_dir)  # overrides
    assert again.returncode == 0, (again.stdout + again.stderr)[-3000:]  # may follow --sequential
    out = again.stdout + again.stderr
    assert "6 cells — 5 done, 1 to run" in out and "6 cells — 6 done, 0 to run" in out
    after = _results(study / "loss")
    assert {k for k in after if after[k] != loss.get(k)} == {lost} and _results(study / "lr") == lr
    assert json.loads((study / "study.json").read_text())["verdicts"] == record["verdicts"]

    shown = _run(["study", str(path), "--show"], tmp_path, toy_data_dir)  # the recorded design, nothing launched
    assert shown.returncode == 0 and shown.stdout.startswith(again.stdout[again.stdout.rindex("study of "):].strip())
    tampered = {**record, "verdicts": {**record["verdicts"], "null": {**record["verdicts"]["null"], "verdict": "x"}}}
    (study / "study.json").write_text(json.dumps(tampered))
    refused = _run(["study", str(path), "--show"], tmp_path, toy_data_dir)
    assert refused.returncode != 0 and "the cells changed since the study ran" in refused.stderr
    (study / "study.json").write_text(json.dumps(record))

    _claims_file(tmp_path, [2, 4])  # growing the study after looking: refused
    refused = _run(["study", str(path), "--sequential"], tmp_path, toy_data_dir)
    assert refused.returncode != 0 and "ran with another plan (partitions, stages" in refused.stderr


def test_a_study_plan_is_checked_before_anything_runs(tmp_path):
    from ner_lightning.study.runner import plan_of

    path = _claims_file(tmp_path, [2, 3])
    spec = yaml.safe_load(path.read_text())
    assert plan_of(path, True)["stages"] == [2, 3] and plan_of(path, False)["stages"] == [3]
    for change, message in (({"study": {**spec["study"], "stages": [3, 2]}}, "must increase"),
                            ({"grids": {**spec["grids"], "lr": ["partition=0,1"]}}, "sets partition"),
                            ({"study": {**spec["study"], "spending": "linear"}}, "is not one of")):
        path.write_text(yaml.safe_dump({**spec, **change}, allow_unicode=True))
        with pytest.raises(SystemExit, match=message):
            plan_of(path, True)
    path.write_text(yaml.safe_dump({**spec, "claims": [{**spec["claims"][0], "grid": "nope"}]}, allow_unicode=True))
    with pytest.raises(SystemExit, match="grid 'nope' is not one of the file's grids"):
        plan_of(path, True)


def _write(folder, loss, partition, f1, lenient_f1=None, **extra):
    """A hand-made cell result (as tests/test_claims.py writes them)."""
    d = folder / f"{loss}_{partition}"
    d.mkdir(parents=True)
    test = {"micro": {"f1": f1}, **({"lenient": {"micro": {"f1": lenient_f1}}} if lenient_f1 is not None else {})}
    (d / "results.json").write_text(json.dumps({
        "overrides": [f"loss={loss}", "size=20", f"partition={partition}"],
        "config": {"size": 20, "partition": partition, "seed": 42, "dataset": {"name": "toy"},
                   "data": {"label_scheme": "untyped"}},
        "partition": {"sha256": f"p{partition}", "partition": partition}, "compute": {"init_seed": 42},
        "test": test, "wall_time_s": 1.0, "resumed_from": None, **extra}))


def test_a_study_is_judged_on_its_papers_registered_scorer(tmp_path, monkeypatch):
    """A study file registers `scorer: lenient` for its paper: each look reads the lenient F1
    (here +0.05 for the method on every partition) and not the strict one (−0.05); the Wilcoxon
    test it registers as its second analysis stands beside the t-test, marked registered."""
    from ner_lightning.study import runner as study

    rng = np.random.default_rng(5)
    for p in range(6):
        for loss, strict_f1, lenient_f1 in (("ce", 0.5, 0.5), ("m", 0.45 + rng.normal(0, 0.01), 0.55 + rng.normal(0, 0.01))):
            _write(tmp_path / "study" / "g", loss, p, strict_f1, lenient_f1)
    path = tmp_path / "claims.yaml"
    path.write_text(yaml.safe_dump({
        "resamples": 100, "papers": {"toy": {"scorer": "lenient"}},
        "study": {"dir": str(tmp_path / "study"), "partitions": 6, "stages": [6], "robust": "wilcoxon",
                  "simulation_studies": 20_000}, "grids": {"g": ["loss=ce,m"]},
        "claims": [{"id": "c", "paper": "toy", "source": "-", "statement": "m > ce", "key": "loss", "method": "m",
                    "baseline": "ce", "metric": "test.micro.f1", "relation": ">", "grid": "g"}]}))
    monkeypatch.setattr(study, "launch", lambda *args: None)
    record = study.run_study(path, sequential=True)
    look = record["looks"][0]["claims"]["c"]
    assert record["scoring"] == "paper" and look["mean"] > 0.04
    assert record["verdicts"]["c"]["verdict"] == "replicated"
    assert look["robust"] == {"test": "wilcoxon", "registered": True, "p": {"claim": 1 / 64, "reverse": 1.0}}
    assert "| 0.01562 / 1 |" in study.table(record)  # all six Δ positive: 2⁻⁶, one-sided


@pytest.mark.parametrize("sequential", [True, False])
def test_study_decisions_on_hand_made_results(tmp_path, monkeypatch, sequential):
    """Launching stubbed (the cells are written by hand): sequentially, a large effect is decided
    at the first look and only the null grid is launched again; the fixed design launches each grid
    once over all partitions and gives the claims rule's verdicts."""
    from ner_lightning.study import runner as study
    from ner_lightning.report.claims import symmetric_verdicts

    rng = np.random.default_rng(3)
    large = 0.5 + 0.1 + rng.normal(0, 0.001, 6)  # t ≈ 170 at 3 partitions: below even the first O-F level
    null = 0.5 + rng.normal(0, 0.02, 6)
    for p in range(6):
        for grid, method in (("big", large[p]), ("same", null[p])):
            _write(tmp_path / "study" / grid, "ce", p, 0.5)
            _write(tmp_path / "study" / grid, "m", p, method)
    claim = {"paper": "toy", "source": "-", "statement": "m > ce", "key": "loss", "method": "m", "baseline": "ce",
             "metric": "test.micro.f1", "relation": ">"}
    path = tmp_path / "claims.yaml"
    path.write_text(yaml.safe_dump({
        "resamples": 100, "study": {"dir": str(tmp_path / "study"), "partitions": 6, "stages": [3, 6]},
        "grids": {"big": ["loss=ce,m"], "same": ["loss=ce,m"]},
        "claims": [{**claim, "id": "big", "grid": "big"}, {**claim, "id": "same", "grid": "same"}]}))
    launched = []
    monkeypatch.setattr(study, "launch", lambda grid, overrides, partitions, folder, extra:
                        launched.append((grid, partitions[-1] + 1)))
    record = study.run_study(path, sequential)
    if sequential:
        assert launched == [("big", 3), ("same", 3), ("same", 6)]
        assert record["verdicts"]["big"] == {"verdict": "replicated", "look": 1, "partitions": 3}
        assert record["verdicts"]["same"]["look"] == 2
        level = stats.t.sf(t_boundaries([3, 6], 0.05 / 4, "obrien_fleming", 2_000_000, 0)[1], 5)
        last = record["looks"][1]["claims"]["same"]
        expected = ("replicated" if last["p"] < level else "not replicated" if last["p_reverse"] < level
                    else "inconclusive")
        assert record["verdicts"]["same"]["verdict"] == expected
        assert last["p"] == pytest.approx(stats.ttest_1samp(null - 0.5, 0.0, alternative="greater").pvalue)
    else:
        assert launched == [("big", 6), ("same", 6)]
        looks = record["looks"][0]["claims"]
        rule = symmetric_verdicts([looks[c]["p"] for c in ("big", "same")],
                                  [looks[c]["p_reverse"] for c in ("big", "same")], ["toy", "toy"], 0.05)
        assert [record["verdicts"][c]["verdict"] for c in ("big", "same")] == rule and rule[0] == "replicated"
    assert "| big | replicated |" in study.table(record)


def test_the_committed_mom_table6_study_is_its_cells_verdicts_and_the_pages_table(monkeypatch):
    """The MoM Table 6 study as committed: its record, judged again from its exported cells
    (docs/results/runs/study_mom_table6), and the table in replication.md are the same."""
    from pathlib import Path

    from ner_lightning.study.runner import run_study, show

    root = Path(__file__).resolve().parents[1]
    monkeypatch.chdir(root)  # the record names its claims file relative to the repository
    record = run_study(Path("docs/results/study_mom_table6.yaml"), folder=Path("docs/results/runs/study_mom_table6"),
                       replay=True)
    page = (root / "docs/results/replication.md").read_text()
    start = page.index("<!-- study table: docs/results/study_mom_table6.yaml -->")
    block = page[page.index("\n", start) + 1:page.index("<!-- end study table -->", start)]
    assert block.strip() == show(record).strip()
    assert "as_run" not in record  # strict F1, as the MoM paper's scorer: the same metrics as it ran


def test_t_exact_boundaries_keep_alpha_over_a_million_null_studies_and_the_z_nominal_ones_do_not():
    """MoM Table 6's design (looks at 4 / 7 / 10 partitions, O'Brien–Fleming, α / 6 per direction),
    checked on 4·10⁶ null studies independent of the 2·10⁶ the t boundaries were calibrated on:
    the t-exact boundaries stay within α + 3 SE, the z-nominal levels applied to t p-values
    exceed it (0.0087 against 0.0083)."""
    stages, alpha = [4, 7, 10], 0.05 / 6
    exact = type_one_error(stages, t_boundaries(stages, alpha), 4_000_000, seed=7)
    earlier = type_one_error(stages, z_nominal_bounds(stages, alpha), 4_000_000, seed=7)
    assert exact[0] <= alpha + 3 * exact[1], exact
    assert earlier[0] > alpha + 3 * earlier[1], earlier


def _git(cwd, *args, when=None):
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t",
               GIT_COMMITTER_EMAIL="t@t", **({"GIT_COMMITTER_DATE": when, "GIT_AUTHOR_DATE": when} if when else {}))
    return subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True, check=True).stdout.strip()


def _registered_cell(folder, name, partition, commit, finished, dirty=False, attempts=None):
    d = folder / "g" / name
    d.mkdir(parents=True)
    (d / "results.json").write_text(json.dumps({
        "overrides": [f"partition={partition}"], "code": {"commit": commit, "dirty": dirty},
        "finished": finished, "wall_time_s": 10.0, "attempts": attempts}))


def test_a_registered_study_refuses_changes_and_its_proof_needs_git_and_the_cells_times(tmp_path):
    """`--register` refuses an uncommitted file and used partitions; the record lists the design's
    power; running refuses an uncommitted record, a changed file and a dirty tree; the proof holds
    only for cells run later, from clean descendants of the registration commit, with the record
    unchanged since."""
    from ner_lightning.study import registration
    from ner_lightning.study.runner import look_levels, plan_of, study_wide_error

    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    claim = {"id": "c", "paper": "toy", "source": "-", "statement": "m > ce", "grid": "g", "key": "loss",
             "method": "m", "baseline": "ce", "metric": "test.micro.f1", "relation": ">", "paper_delta": 0.02,
             "paper_delta_from": {"where": "Table 1", "method": 0.52, "baseline": 0.5, "train_sentences": 20,
                                  "metric": "F1", "scorer": "strict"}, "planning_sd": 0.01}
    spec = {"study": {"partitions": 4, "first_partition": 200, "stages": [2, 4], "spending": "pocock",
                      "simulation_studies": 20_000, "exclusions": [], "alpha_recycling": "none"},
            "grids": {"g": ["loss=ce,m"]}, "claims": [claim]}
    study = repo / "study.yaml"
    study.write_text(yaml.safe_dump(spec, allow_unicode=True))
    used = repo / "old" / "results.json"
    used.parent.mkdir()
    used.write_text(json.dumps({"overrides": ["partition=201"]}))
    plan = plan_of(study, True)
    levels = {"toy": look_levels(plan, 2)}
    error = study_wide_error(plan, ["toy"])
    folder = repo / "multirun"
    with pytest.raises(SystemExit, match="commit the study file first"):
        registration.register(study, plan, levels, folder, error)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "study", when="2026-01-01T00:00:00+00:00")
    with pytest.raises(SystemExit, match=r"partitions \[201\] were used by committed runs"):
        registration.register(study, plan, levels, folder, error)
    _git(repo, "rm", "-q", str(used))
    _git(repo, "commit", "-qm", "drop", when="2026-01-01T00:00:00+00:00")
    said = registration.register(study, plan, levels, folder, error)
    assert "family-wise error per family: toy 0.05; study-wide: at most 0.0500" in said
    record = registration.read(study)
    assert record["sha256"] == registration._sha256(study) and record["plan"] == plan
    assert record["study_wide_error"] == error and record["rule"] == registration.rule_fingerprint()
    assert set(record["rule"]) == set(registration.RULE) and record["levels"] == {"toy": levels["toy"]}
    assert record["claims"]["c"]["power_at_paper_delta"] > 0.3 and record["claims"]["c"]["detectable_delta"] > 0
    with pytest.raises(SystemExit, match="registration.json is not committed unchanged"):
        registration.check_before_running(study, record, plan)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "register", when="2026-01-02T00:00:00+00:00")
    registered = _git(repo, "rev-parse", "HEAD")
    registration.check_before_running(study, record, plan)  # committed, clean: runs
    study.write_text(study.read_text() + "# a note\n")
    with pytest.raises(SystemExit, match="changed since it was registered.*uncommitted changes"):
        registration.check_before_running(study, record, plan)
    _git(repo, "checkout", "-q", "--", "study.yaml")

    _registered_cell(folder, "a", 200, registered, "2026-01-03T00:00:00+00:00")
    assert "before its first cell (1 cells checked)" in registration.provenance(study, record, folder)
    _registered_cell(folder, "b", 201, registered, "2026-01-01T12:00:00+00:00")  # finished before registering
    assert registration.provenance(study, record, folder).startswith("not proven registered before its cells")
    (folder / "g" / "b").rename(folder / "g" / "b_dirty")
    (folder / "g" / "b_dirty" / "results.json").unlink()
    _registered_cell(folder, "c", 201, registered, "2026-01-03T00:00:00+00:00", dirty=True)
    assert "uncommitted tree" in registration.provenance(study, record, folder)
    (folder / "g" / "c" / "results.json").unlink()
    _registered_cell(folder, "d", 201, registered, "2026-01-03T00:00:00+00:00", attempts=[  # resumed after
        {"started": "2026-01-01T12:00:00+00:00", "wall_time_s": None},  # an attempt begun before registering
        {"started": "2026-01-02T23:59:50+00:00", "wall_time_s": 10.0}])
    assert registration.provenance(study, record, folder).startswith("not proven registered before its cells")
    (folder / "g" / "d" / "results.json").unlink()
    tampered = registration.record_path(study)
    tampered.write_text(tampered.read_text().replace('"toy"', '"toy"') + "\n")
    _git(repo, "commit", "-qam", "edit the record")
    assert "the registration record changed after" in registration.provenance(study, record, folder)


def test_the_committed_confirmatory_study_replays_from_its_cells_and_proves_its_registration(monkeypatch):
    """The registered confirmatory study as committed: its looks judged again from its exported
    cells (docs/results/runs/study_confirmatory) match its record, git and the cells' times prove
    it was registered before its first cell, and replication.md shows that table."""
    from pathlib import Path

    from ner_lightning.study.runner import run_study, show

    root = Path(__file__).resolve().parents[1]
    monkeypatch.chdir(root)
    record = run_study(Path("docs/results/study_confirmatory.yaml"),
                       folder=Path("docs/results/runs/study_confirmatory"), replay=True)
    # judged as registered: C1 and C2 on the lenient F1 of their papers, C2's Δ not comparable
    c2 = record["looks"][3]["claims"]["C2 OVA-AUC"]
    assert c2["mean"] == pytest.approx(-0.0362, abs=5e-5) and record["as_run"]["looks"][3]["claims"]["C2 OVA-AUC"][
        "mean"] == pytest.approx(0.0143, abs=5e-5)
    assert record["verdicts"]["C2 OVA-AUC"]["verdict"] == "inconclusive (no comparable paper Δ)"
    assert record["verdicts"]["C4 MoM vs CE"]["verdict"] == "inconclusive (no comparable paper Δ)"
    assert record["looks"][3]["claims"]["C4 MoM vs CE"]["interval_at_level"] == pytest.approx([-0.0071, 0.0010],
                                                                                            abs=5e-5)
    assert record["study_wide_error"]["independent"] == pytest.approx(1 - 0.95 ** 5)
    page = (root / "docs/results/replication.md").read_text()
    start = page.index("<!-- study table: docs/results/study_confirmatory.yaml -->")
    block = page[page.index("\n", start) + 1:page.index("<!-- end study table -->", start)]
    shallow = subprocess.run(["git", "rev-parse", "--is-shallow-repository"], cwd=root, capture_output=True,
                             text=True).stdout.strip() == "true"
    if shallow:  # a clone without the history cannot prove the registration, and says so
        assert record["registration"].startswith("not proven")
        proven = next(line for line in block.splitlines() if line.startswith("registered at "))
        record = {**record, "registration": proven}
    assert record["registration"].startswith("registered at ") and "before its first cell" in record["registration"]
    assert block.strip() == show(record).strip()


def test_an_alpha_split_is_registrable_and_the_study_wide_error_is_computed_by_hand(tmp_path):
    """Two families with α 0.03 and 0.02: each family's looks spend its own α; across families at
    most 0.05, and 1 − 0.97 · 0.98 = 0.0494 when independent; a split must name every family."""
    from ner_lightning.study.runner import look_levels, plan_of, study_wide_error

    claim = {"source": "-", "statement": "m > ce", "grid": "g", "key": "loss", "method": "m", "baseline": "ce",
             "metric": "test.micro.f1", "relation": ">"}
    spec = {"study": {"partitions": 4, "stages": [2, 4], "spending": "pocock", "simulation_studies": 20_000,
                      "alpha_split": {"A": 0.03, "B": 0.02}},
            "grids": {"g": ["loss=ce,m"]}, "claims": [{**claim, "id": 1, "paper": "A"}, {**claim, "id": 2, "paper": "B"}]}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(spec, allow_unicode=True))
    plan = plan_of(path, True)
    error = study_wide_error(plan, ["A", "B"])
    assert error == {"families": {"A": 0.03, "B": 0.02}, "bound": pytest.approx(0.05),
                     "independent": pytest.approx(1 - 0.97 * 0.98)}
    assert look_levels(plan, 2, 0.03)[-1] > look_levels(plan, 2, 0.02)[-1]
    path.write_text(yaml.safe_dump({**spec, "study": {**spec["study"], "alpha_split": {"A": 0.05}}}, allow_unicode=True))
    with pytest.raises(SystemExit, match=r"alpha_split must give each family \(A, B\)"):
        plan_of(path, True)


def test_show_judges_with_the_registered_rule_and_names_the_labels_a_changed_rule_gives(tmp_path, monkeypatch):
    """In a temporary repository holding the package: a study registered with its rule's
    fingerprint replays "by the registered rule"; with the judging code changed (a tampered label),
    --show names the changed module, judges again with the registered commit's package in a fresh
    process and names the label that differs."""
    import shutil
    from pathlib import Path

    from ner_lightning.study import registration
    from ner_lightning.study import runner as study
    from ner_lightning.study import looks as study_looks
    from ner_lightning.study.runner import look_levels, plan_of, study_wide_error

    repo = tmp_path / "repo"
    shutil.copytree(Path(study.__file__).resolve().parents[1], repo / "ner_lightning", symlinks=True,
                    ignore=shutil.ignore_patterns("__pycache__"))
    _git(repo, "init", "-q")
    spec = {"resamples": 100, "study": {"partitions": 4, "first_partition": 200, "stages": [4], "spending": "pocock",
                                        "simulation_studies": 20_000, "exclusions": [], "alpha_recycling": "none",
                                        "dir": "multirun"},
            "grids": {"g": ["loss=ce,m"]},
            "claims": [{"id": "c", "paper": "toy", "source": "-", "statement": "m > ce", "grid": "g", "key": "loss",
                        "method": "m", "baseline": "ce", "metric": "test.micro.f1", "relation": ">",
                        "planning_sd": 0.02}]}
    path = repo / "study.yaml"
    path.write_text(yaml.safe_dump(spec, allow_unicode=True))
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "study")
    plan = plan_of(path, True)
    registration.register(path, plan, {"toy": look_levels(plan, 2)}, repo / "multirun", study_wide_error(plan, ["toy"]))
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "register")
    monkeypatch.chdir(repo)
    for p, d in zip(range(200, 204), (0.01, -0.02, 0.015, -0.005)):  # a null effect: undecided
        _write(repo / "multirun" / "g", "ce", p, 0.5)
        _write(repo / "multirun" / "g", "m", p, 0.5 + d)
    monkeypatch.setattr(study, "launch", lambda *args: None)
    study.run_study(Path("study.yaml"), sequential=True)
    replayed = study.run_study(Path("study.yaml"), replay=True)
    assert replayed["rule"] == "judged by the registered rule (its modules unchanged)"
    assert replayed["verdicts"]["c"]["verdict"] == "inconclusive"
    changed = {**registration.rule_fingerprint(), "report/claims.py": "0" * 64}
    monkeypatch.setattr(registration, "rule_fingerprint", lambda: changed)
    monkeypatch.setattr(study_looks, "undecided_verdict", lambda *args: "underpowered; 0 excluded")
    tampered = study.run_study(Path("study.yaml"), replay=True)
    assert tampered["verdicts"]["c"]["verdict"] == "underpowered; 0 excluded"
    assert tampered["rule"] == ("the judging rule changed since registration (report/claims.py); labels that differ "
                                "from the registered rule's: c: registered rule 'inconclusive', current 'underpowered; 0 excluded'")
