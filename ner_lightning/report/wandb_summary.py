"""W&B side of a report: one summary run in the sweep's W&B group holding the aggregated table
(``wandb.Table``) and the figures (``wandb.Image``); and reading an offline run back (W&B's own
``wandb leet inspect --json``) to check what a dashboard will show."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Literal

from ner_lightning.report.runs import group, labels, lookup
from ner_lightning.report.stats import bootstrap_mean
from ner_lightning.report.tables import values


def publish(
    runs: list[dict],
    by: list[str],
    metrics: list[str],
    figures: list[Path],
    out_dir: Path,
    mode: Literal["online", "offline", "disabled"],
    resamples: int,
    seed: int,
) -> Path:
    """Log the summary run (offline by default: ``wandb sync`` uploads it later); returns its folder."""
    import wandb

    config = runs[0]["config"]
    wb = config.get("logger", {}).get("wandb", {}) if isinstance(config.get("logger"), dict) else {}
    columns = by + [f"{m} {s}" for m in metrics for s in ("mean", "se", "ci_low", "ci_high")] + ["n"]
    table = wandb.Table(columns=list[str | int](columns))
    for key, rs in group(runs, by).items():
        row = list(key)
        for m in metrics:
            e = bootstrap_mean(values(rs, m), resamples, seed)
            row += [e.mean, e.se, e.low, e.high]
        table.add_data(*row, len(rs))
    run = wandb.init(
        project=wb.get("project", "ner_lightning"),
        group=config.get("group"),
        job_type="report",
        name="summary",
        dir=str(out_dir),
        mode=mode,
        reinit="finish_previous",
        config={"report_by": ",".join(by), "report_metrics": ",".join(metrics), "runs": len(runs)},
    )
    run.log(
        {
            "summary_table": table,
            "cells_table": cells_table(runs, by, metrics),
            **{f"figures/{p.stem}": wandb.Image(str(p)) for p in figures if p.suffix == ".png"},
        }
    )
    folder = Path(run.dir).parent
    run.finish()
    return folder


CELL_COLUMNS = ("partition", "W&B run", "prediction tables")


def cells_table(runs: list[dict], by: list[str], metrics: list[str]):
    """One row per run: its ``by`` values, partition and metrics, the id of its own W&B run in the
    same project and group, and the prediction tables that run holds (``predictions/<split>``,
    ``logger.wandb.prediction_table_rows``): from a row of the summary to its sentences."""
    import wandb

    table = wandb.Table(columns=[*by, *CELL_COLUMNS[:1], *metrics, *CELL_COLUMNS[1:]])
    columns = [labels(runs, k) for k in by]
    for i, r in enumerate(runs):
        wb = (r["config"].get("logger") or {}).get("wandb") or {}
        tables = (
            [f"predictions/{split}" for split in (r.get("predictions") or {})]
            if wb.get("prediction_table_rows")
            else []
        )
        table.add_data(
            *(c[i] for c in columns),
            r["partition"]["partition"],
            *(lookup(r, m) for m in metrics),
            wb.get("id"),
            ", ".join(tables),
        )
    return table


def read_offline_run(folder: Path) -> dict:
    """Config, summary (media as flat ``key._type``, ``key.path`` …) and the files of an offline
    run folder (``offline-run-*``)."""
    log = next(Path(folder).glob("run-*.wandb"))
    exe = shutil.which("wandb", path=str(Path(sys.executable).parent)) or "wandb"
    out = subprocess.run([exe, "leet", "inspect", "--json", str(log)], capture_output=True, text=True, check=True)
    config, summary, files = {}, {}, []
    for line in out.stdout.splitlines():
        if not line.startswith("{"):
            continue
        rec = json.loads(line)
        kind = rec.get("type")
        if kind == "run":
            config.update(rec["run"].get("config", {}).get("update", {}))
        elif kind == "config":
            config.update(rec["config"].get("update", {}))
        elif kind == "summary":
            summary.update(rec["summary"].get("update", {}))
        elif kind == "files":
            files += [f["path"] for f in rec["files"].get("files", [])]
    return {"config": config, "summary": summary, "files": files}
