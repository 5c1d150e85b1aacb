"""A loss class in a module of the user's own (``--config-dir``), changed between two runs of
one sweep: the rerun names the module and trains its cells again (it is part of a cell's
identity, ``sweep.identity``); ``sweep status`` names it before that."""
import json
import os
import subprocess
import sys

import pytest

from tests.test_sweep import ONE_THREAD_PER_WORKER, TOY, run_cli

USER_LOSS = '''import torch.nn.functional as F

from ner_lightning.losses import TokenLoss


class Smooth(TokenLoss):
    def __init__(self, smoothing: float):
        super().__init__()
        self.smoothing = {factor} * smoothing

    def per_token(self, logits, targets):
        return F.cross_entropy(logits, targets, reduction="none", label_smoothing=self.smoothing)
'''


@pytest.mark.slow  # three sweeps of two tiny cells
def test_a_changed_user_module_is_named_and_its_cells_rerun(toy_data_dir, tmp_path):
    (tmp_path / "userloss.py").write_text(USER_LOSS.format(factor=1))
    (tmp_path / "mine" / "token_loss").mkdir(parents=True)
    (tmp_path / "mine" / "token_loss" / "usr.yaml").write_text("_target_: userloss.Smooth\nsmoothing: 0.1\n")
    sweep = tmp_path / "s"
    args = ["--config-dir", str(tmp_path / "mine"), "-m", "partition=0,1", *TOY, "token_loss@loss.token_loss=usr",
            f"hydra.sweep.dir={sweep}", "hydra.sweep.subdir=${hydra.job.num}"]

    def results():
        return [json.loads((sweep / str(k) / "results.json").read_text()) for k in (0, 1)]

    first = run_cli(args, tmp_path, toy_data_dir)
    assert first.returncode == 0, first.stderr[-3000:]
    recorded = [r["identity"]["inputs"]["code:userloss"] for r in results()]
    again = run_cli(args, tmp_path, toy_data_dir)
    assert "2 cells — 2 done, 0 to run" in again.stdout + again.stderr

    (tmp_path / "userloss.py").write_text(USER_LOSS.format(factor=2))  # its smoothing doubled
    status = subprocess.run([sys.executable, "-m", "ner_lightning.sweep", "status", str(sweep)], cwd=tmp_path,
                            capture_output=True, text=True, timeout=120, env=dict(os.environ, **ONE_THREAD_PER_WORKER))
    assert status.stdout.count("your module userloss changed since it ran: a rerun trains it again") == 2, status.stdout
    rerun = run_cli(args, tmp_path, toy_data_dir)
    out = rerun.stdout + rerun.stderr
    assert rerun.returncode == 0, out[-3000:]
    assert "2 finished cell(s) will rerun" in out and "2 × your module userloss changed since it ran" in out
    assert "2 cells — 0 done, 2 to run" in out
    now = [r["identity"]["inputs"]["code:userloss"] for r in results()]
    assert now[0] == now[1] != recorded[0] == recorded[1]

