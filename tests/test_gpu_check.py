"""The GPU check (benchmarks/gpu_check/run.sh) in its CPU form: the same parts with the tiny encoder on
the toy corpus, each writing its JSON, within limits that fit a 15-minute lend."""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _check(out: Path, *parts: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "benchmarks/gpu_check/run.sh", str(out), *parts], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=900)


def test_the_parts_limits_leave_room_to_unpack_within_one_ten_minute_command(tmp_path):
    proc = _check(tmp_path, "limits", env=dict(os.environ, PY=sys.executable))
    total = int(re.search(r": (\d+) s in all", proc.stdout).group(1))
    assert proc.returncode == 0 and 0 < total <= 570


@pytest.mark.slow
def test_the_gpu_check_runs_on_a_cpu_with_the_tiny_encoder(toy_data_dir, tmp_path):
    """(a) a lockstep group of 8 trains, selects and tests in bf16-mixed and in 32-true under the
    default logger; (b) the grid slice under lockstep and parallel, every cell done and extrapolated
    size by size;
    (c) lockstep against alone, paired over every partition."""
    env = dict(os.environ, PY=sys.executable, NER_DATA_DIR=str(toy_data_dir), CHECK_DEVICE="cpu", CHECK_MODEL="tiny",
               CHECK_EXTRA="dataset.name=toy dataset.dir=${paths.data_dir}/toy data.dev_size=null "
                           "hydra.sweep.subdir=${hydra.job.num}",
               GROUP_SIZE="8", GRID_SIZES="8,16", GRID_PARTITIONS="0,1", GRID_EPOCHS="5", AGREE_PARTITIONS="0,1,2,3",
               CHECK_WORK=str(tmp_path / "work"), OMP_NUM_THREADS="1")
    out = tmp_path / "out"
    proc = _check(out, "env", "group", "grid", "agreement", env=env)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    for precision in ("bf16-mixed", "32-true"):
        group = json.loads((out / f"group_{precision}.json").read_text())
        assert group["exit"] == 0 and group["cells_done"] == 8, group
        for cell in group["cells"]:
            assert cell["lockstep_cells"] == 8 and cell["precision"]["train"] == precision
            assert cell["best_epoch"] is not None and cell["test_f1"] is not None
    for launcher in ("lockstep", "parallel"):
        grid = json.loads((out / f"grid_{launcher}.json").read_text())
        assert grid["cells_done"] == grid["cells_expected"] == 4 and grid["table2_hours_at_this_rate"] > 0
        # the slice's two sizes weigh Table 2's twelve; the full protocol's 30 epochs scale it up
        assert set(grid["span_s_by_size"]) == {"8", "16"}
        assert 0 < grid["table2_hours_by_size"] <= grid["table2_hours_at_30_epochs"]
    assert {c["lockstep_cells"] for c in json.loads((out / "grid_lockstep.json").read_text())["cells"]} == {2}
    agreement = json.loads((out / "agreement.json").read_text())
    assert agreement["complete"] and agreement["paired"] == [0, 1, 2, 3]
    assert (out / "env.txt").read_text().strip()


def test_two_grid_parts_are_paired_by_size_and_partition():
    sys.path.insert(0, str(ROOT / "benchmarks" / "gpu_check"))
    from pairs import paired
    from scipy import stats

    def part(f1s: dict, best: int) -> dict:
        return {"cells_per_min": 1.0, "cells": [{"size": s, "partition": p, "test_f1": f, "best_epoch": best}
                                                for (s, p), f in f1s.items()]}
    a = part({(20, 0): 0.50, (20, 1): 0.40, (50, 0): 0.61, (50, 1): 0.30}, best=2)
    b = part({(20, 0): 0.48, (20, 1): 0.41, (50, 0): 0.60, (99, 9): 0.90}, best=3)
    out = paired(a, b)
    diffs = [0.02, -0.01, 0.01]  # (50, 1) and (99, 9) are in one part only
    ci = stats.ttest_1samp(diffs, 0.0).confidence_interval(0.95)
    assert out["paired"] == 3 and out["mean_diff"] == round(sum(diffs) / 3, 4)
    assert out["ci95"] == [round(ci.low, 4), round(ci.high, 4)]
    assert out["max_abs_diff"] == 0.02 and out["same_best_epoch"] == 0
