"""A cell's identity is what it really runs on: the resolved settings and the files it reads."""
import shutil

from omegaconf import OmegaConf

from ner_lightning.sweep.identity import cell_identity, code_version, why_different


def _identity(cfg):
    return cell_identity(cfg), OmegaConf.to_container(cfg, resolve=True, throw_on_missing=False)


def test_same_experiment_same_identity_whatever_the_folders(toy_cfg, tmp_path):
    a, _ = _identity(toy_cfg("loss=ce"))
    b, _ = _identity(toy_cfg("loss=ce", f"paths.output_dir={tmp_path / 'elsewhere'}", "logger=none",
                             "trainer.enable_progress_bar=true", "runtime.malloc_top_pad_mb=0",
                             "data.eval_batch_tokens=4096"))  # how evaluation is batched: speed, not results
    assert a == b
    assert _identity(toy_cfg("loss=crf"))[0]["sha256"] != a["sha256"]
    assert _identity(toy_cfg("loss=ce", "head_lr=0.5"))[0]["sha256"] != a["sha256"]


def test_the_precision_a_resolver_picks_is_part_of_the_identity(toy_cfg):
    fp32, _ = _identity(toy_cfg("trainer.precision=32-true"))
    bf16, resolved = _identity(toy_cfg("trainer.precision=bf16-mixed"))
    assert fp32["sha256"] != bf16["sha256"] and fp32["inputs"] == bf16["inputs"]
    assert why_different({"status": "ok", "identity": fp32, "config": {**resolved, "trainer": {
        **resolved["trainer"], "precision": "32-true"}}}, bf16, resolved) == "other settings: trainer.precision"


def test_another_copy_of_the_corpus_is_another_cell(toy_cfg, toy_data_dir, tmp_path):
    """What NER_DATA_DIR (paths.data_dir) points at is hashed, not the path: the same files
    elsewhere are the same cell, other files under the same name are another."""
    same_files = tmp_path / "copy"
    shutil.copytree(toy_data_dir, same_files)
    first, _ = _identity(toy_cfg())
    copy, _ = _identity(toy_cfg(f"paths.data_dir={same_files}", f"dataset.dir={same_files}/toy"))
    assert copy == first
    with (same_files / "toy" / "train.txt").open("a") as fh:
        fh.write("Extra NN I-NP O\n\n")
    other, resolved = _identity(toy_cfg(f"paths.data_dir={same_files}", f"dataset.dir={same_files}/toy"))
    assert other["sha256"] != first["sha256"] and other["settings_sha256"] == first["settings_sha256"]
    assert why_different({"identity": first, "config": resolved}, other, resolved) == "other input files: dataset:toy"
    assert why_different({"config": resolved}, other, resolved).startswith("made before")


def test_code_version_names_the_commit_and_uncommitted_changes(tmp_path, monkeypatch):
    """In a git checkout of its own: the commit git names, clean, then dirty after a tracked file
    changes; outside git: no commit, unknown state."""
    import subprocess

    from ner_lightning import config

    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "a.txt").write_text("one\n")
    subprocess.run([*git, "add", "a.txt"], check=True)
    subprocess.run([*git, "commit", "-qm", "first"], check=True)
    head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    monkeypatch.setattr(config, "REPO_ROOT", repo)
    code = code_version()
    assert code["version"] and code["commit"] == head and code["dirty"] is False
    (repo / "a.txt").write_text("two\n")
    assert code_version()["dirty"] is True
    (repo / "untracked.txt").write_text("x")  # untracked files are not code changes
    (repo / "a.txt").write_text("one\n")
    assert code_version()["dirty"] is False
    monkeypatch.setattr(config, "REPO_ROOT", tmp_path / "not_a_repo")
    assert code_version()["commit"] is None and code_version()["dirty"] is None
