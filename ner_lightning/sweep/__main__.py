"""``python -m ner_lightning.sweep status <sweep dir>``: where a sweep stands.
``python -m ner_lightning.sweep export <sweep dir> <folder>``: what to commit of it.

``status`` (exit 0 for a healthy sweep: finished, or running with nothing failed since it
started) reads the manifest (the whole grid) and each cell's ``cell.json`` / ``results.json`` /
``failure.json``: done, failed, interrupted, running and missing cells, time per finished cell
and an ETA (remaining cells × mean cell time / cells running now), and how many cells run on each
device (``running: gpu 0 x4, gpu 1 x4``); a finished cell whose module of the user's own has
changed since it ran is named (a rerun trains it again). ``--cells`` lists every cell, with its device.

``export`` copies the manifest, ``multirun.yaml`` and each finished cell's ``results.json``
(and a tuning trial's ``tune.json``) — no checkpoints, logs or partial cells — into a folder
that the report reads and that a sweep resumes from: copy it back to a sweep folder and rerun
the sweep's command, and the exported cells are skipped (same config hash). A destination
ending in ``.jsonl.xz`` is one compressed file instead (a run store, ner_lightning/run_store.py),
which the report reads as the folder; ``python -m ner_lightning.run_store unpack`` makes the folder.

``resume`` runs the sweep's command (its manifest holds it, and the folder it ran in) again
into the sweep folder: finished cells are skipped and interrupted ones continue from their
``last.ckpt``; ``--dry-run`` prints the command.

``reidentify`` repairs the results of cells that the parallel launcher ran while it wrote the
device it pinned into ``trainer.accelerator`` (their identity then differed from the manifest's
and a rerun would have trained them again): see ``identity.accelerator_restored``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import shlex
import shutil
import statistics
import sys
from collections import Counter
from pathlib import Path

from ner_lightning import run_store
from ner_lightning.grid_time import time_spent, timeline
from ner_lightning.results import write_json_atomic
from ner_lightning.resuming import SWEEP_DIR, sweep_resume_command, with_folder
from ner_lightning.sweep import cells, folder_lock
from ner_lightning.sweep.identity import accelerator_restored, user_code_changed

STATES = ("done", "failed", "interrupted", "running", "missing")


def sweep_status(sweep_dir: Path) -> dict:
    manifest = cells.read_manifest(sweep_dir)
    if manifest is None:
        raise SystemExit(
            f"{sweep_dir}: no {cells.MANIFEST} — not a sweep folder, or a sweep made by a sweeper "
            "that writes none (hydra/sweeper=optuna; optuna_resumable writes one); its runs are still "
            "readable by python -m ner_lightning.report"
        )
    rows = []
    for c in manifest["cells"]:
        st: dict = cells.status_of(sweep_dir / c["dir"]) if "dir" in c else {"state": "missing", "record": None}
        if st["state"] == "missing" and c.get("last_error"):  # it failed before it could write anything
            st = {"state": "failed", "failure": {"error": c["last_error"]}, "record": None}
        if (
            st["state"] == "done"
            and c.get("config_sha256")
            and st["results"].get("config_sha256") != c["config_sha256"]
        ):
            st = {"state": "missing", "record": st["record"], "note": "results.json of another config"}
        elif st["state"] == "done" and (changed := user_code_changed(st["results"])):
            st["note"] = f"your module {', '.join(changed)} changed since it ran: a rerun trains it again"
        rows.append({**c, **st})
    return {"manifest": manifest, "rows": rows, "counts": Counter(r["state"] for r in rows)}


def _eta(rows: list[dict]) -> str:
    times = [r["results"]["wall_time_s"] for r in rows if r["state"] == "done" and r["results"].get("wall_time_s")]
    running = sum(r["state"] == "running" for r in rows)
    left = sum(r["state"] in ("running", "missing", "failed", "interrupted") for r in rows)
    if not times or not left:
        return ""
    mean = statistics.fmean(times)
    eta = left * mean / max(running, 1)
    return (
        f" | mean cell {mean / 60:.1f} min, ETA ~{dt.timedelta(seconds=round(eta))} at {max(running, 1)} cells at once"
    )


def where(row: dict) -> str | None:
    """Where a running or finished cell runs / ran: ``gpu 1`` (``, slot 5`` under the parallel
    launcher), ``cpu (2 threads)``, from its ``cell.json`` / ``results.json``."""
    record = row.get("results") if row["state"] == "done" else row.get("record")
    device = (record or {}).get("device")
    if not device:
        return None
    if device.get("accelerator") == "gpu" and device.get("index") is not None:
        place = f"gpu {device['index']}"
    else:
        place = f"{device.get('accelerator', '?')} ({device.get('threads', '?')} threads)"
    return place + (f", slot {device['slot']}" if device.get("slot") is not None else "")


def placement(rows: list[dict]) -> str:
    """``running: gpu 0 x4, gpu 1 x4`` — how many cells run on each device now."""
    counts = Counter(w.split(",")[0] for w in (where(r) for r in rows if r["state"] == "running") if w)
    return ", ".join(f"{device} x{n}" for device, n in sorted(counts.items()))


def export(sweep_dir: Path, dest: Path) -> tuple[int, int]:
    """Copy what a sweep's results need (see the module docstring) to the folder ``dest``, or into
    one run store when ``dest`` ends in ``.jsonl.xz`` (ner_lightning/run_store.py); returns the
    cells exported and the cells of the grid."""
    status = sweep_status(sweep_dir)
    done = [r for r in status["rows"] if r["state"] == "done"]
    files = [name for name in (cells.MANIFEST, "multirun.yaml") if (sweep_dir / name).is_file()]
    files += [
        f"{r['dir']}/{name}"
        for r in done
        for name in (cells.RESULTS, cells.TUNE)
        if (sweep_dir / r["dir"] / name).is_file()
    ]
    if dest.name.endswith(run_store.SUFFIX):
        run_store.write_store([(rel, (sweep_dir / rel).read_text(encoding="utf-8")) for rel in files], dest)
        return len(done), len(status["rows"])
    for rel in files:
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(sweep_dir / rel, dest / rel)
    return len(done), len(status["rows"])


def reidentify(sweep_dir: Path) -> tuple[int, int]:
    """Restore the composed ``trainer.accelerator`` in results whose identity then equals their
    manifest cell's; returns (results repaired, results of another identity left as they are)."""
    manifest = cells.read_manifest(sweep_dir)
    if manifest is None:
        raise SystemExit(f"{sweep_dir}: no {cells.MANIFEST} — not a sweep folder")
    repaired = other = 0
    for c in manifest["cells"]:
        path = sweep_dir / c["dir"] / cells.RESULTS
        res = cells.read_json(path)
        if res is None or res.get("config_sha256") == c["config_sha256"]:
            continue
        fixed = accelerator_restored(res, c["config_sha256"])
        if fixed is None:
            other += 1
            continue
        write_json_atomic(path, fixed)
        repaired += 1
    return repaired, other


def resume(sweep_dir: Path, dry_run: bool = False) -> int:
    """Run the command its manifest recorded again, in the folder it ran in, into ``sweep_dir``
    (``hydra.sweep.dir`` made explicit): the sweeper skips finished cells and resumes the rest."""
    manifest = cells.read_manifest(sweep_dir)
    if manifest is None:
        raise SystemExit(
            f"{sweep_dir}: no {cells.MANIFEST} — not a sweep folder (a single run resumes with its "
            "command and hydra.run.dir=<its folder>, as its failure.json says)"
        )
    recorded = manifest.get("command")
    if not isinstance(recorded, list) or not all(isinstance(a, str) for a in recorded):
        raise SystemExit(
            f"{sweep_dir / cells.MANIFEST}: its `command` is not a command line; rerun the sweep's command "
            f"with hydra.sweep.dir={sweep_dir.resolve()}"
        )
    arguments = with_folder(recorded[1:], SWEEP_DIR, sweep_dir)
    if "-m" not in arguments and "--multirun" not in arguments:
        arguments.insert(0, "-m")
    cwd = manifest.get("cwd") if isinstance(manifest.get("cwd"), str) and Path(manifest["cwd"]).is_dir() else None
    shown = shlex.join(["python", "-m", "ner_lightning.run", *arguments])
    print(f"resuming {sweep_dir}: {shown}" + (f"  (in {cwd})" if cwd else ""), flush=True)
    if dry_run:
        return 0
    if cwd:
        os.chdir(cwd)
    os.execv(sys.executable, [sys.executable, "-m", "ner_lightning.run", *arguments])
    return 1  # not reached


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ner_lightning.sweep", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    st = sub.add_parser("status", help="done / failed / running / missing cells of a sweep")
    st.add_argument("sweep_dir", type=Path)
    st.add_argument("--cells", action="store_true", help="one line per cell")
    ex = sub.add_parser(
        "export",
        help="copy the manifest and finished cells' results.json (no checkpoints) to a folder, "
        "or a run store (DEST ending in .jsonl.xz)",
    )
    ex.add_argument("sweep_dir", type=Path)
    ex.add_argument("dest", type=Path)
    rs = sub.add_parser(
        "resume",
        help="run the sweep's command again in its folder: finished cells are skipped, interrupted ones "
        "continue from their last checkpoint",
    )
    rs.add_argument("sweep_dir", type=Path)
    rs.add_argument("--dry-run", action="store_true", help="print the command, run nothing")
    re = sub.add_parser("reidentify", help="repair results recorded with the device the parallel launcher pinned")
    re.add_argument("sweep_dir", type=Path)
    args = parser.parse_args(argv)

    if args.command == "resume":
        return resume(args.sweep_dir, args.dry_run)

    if args.command == "reidentify":
        repaired, other = reidentify(args.sweep_dir)
        print(
            f"{args.sweep_dir}: {repaired} results repaired (trainer.accelerator as composed); "
            f"{other} results of another identity left as they are (a rerun trains those cells again)"
        )
        return 0

    if args.command == "export":
        n, total = export(args.sweep_dir, args.dest)
        print(f"{args.dest}: {n} of {total} cells exported (results.json), with {cells.MANIFEST} and multirun.yaml")
        return 0

    return print_status(args.sweep_dir, args.cells)


def print_status(sweep_dir: Path, each_cell: bool = False) -> int:
    """``status``: the counts, ETA, where the time went, problems, and whether the sweep runs or
    how to resume it; the exit code of :func:`sweep_exit_code`."""
    status = sweep_status(sweep_dir)
    rows, counts = status["rows"], status["counts"]
    if each_cell:
        for r in rows:
            print(_cell_line(r))
    last = status["manifest"]["invocations"][-1] if status["manifest"].get("invocations") else {}
    print(
        f"{sweep_dir}: {len(rows)} cells — "
        + ", ".join(f"{counts.get(s, 0)} {s}" for s in STATES)
        + (f" | last started {last.get('started')}" if last else "")
        + _eta(rows)
    )
    finished = [r["results"] for r in rows if r["state"] == "done"]
    for line in (time_spent(finished), timeline(finished)):
        if line:
            print(f"  {line}")
    if placement(rows):
        print(f"  running: {placement(rows)}")
    for r in rows:
        if r["state"] in ("failed", "interrupted") and r.get("failure"):
            error = (r["failure"].get("error") or "").partition("\n")[0]
            print(f"  {r['state']}: {r['dir']}: {error[:200]}")
        elif r.get("note"):
            print(f"  {r['state']}: {r.get('dir', '?')}: {r['note']}")
    running = folder_lock.holder(sweep_dir)
    if running:
        print(f"  the sweep is running ({running})")
    elif counts.get("done", 0) < len(rows):
        print(f"  the sweep is not running; resume with: {sweep_resume_command(sweep_dir)}")
    return sweep_exit_code(rows, last.get("started"), running is not None)


def sweep_exit_code(rows: list[dict], launched: str | None, running: bool) -> int:
    """0 for a healthy sweep — every cell done, or running with no cell failed since this launch
    started (``launched``; earlier failures are retried by it) — else 1: something to fix or resume."""
    if all(r["state"] == "done" for r in rows):
        return 0
    failed_now = [
        r
        for r in rows
        if r["state"] == "failed" and str((r.get("failure") or {}).get("finished", "")) >= str(launched or "")
    ]
    return 0 if running and not failed_now else 1


def _cell_line(r: dict) -> str:
    """A cell's line of ``status --cells``: folder, state and what it has to show."""
    extra = ""
    if r["state"] == "done":
        done = r["results"]
        extra = f"dev {done.get('monitor')}={done.get('dev_monitor')}, {done.get('wall_time_s')} s"
    elif r["state"] in ("failed", "interrupted") and r.get("failure"):
        extra = r["failure"].get("error", "")[:120]
    elif r.get("record"):
        rec = r["record"]
        extra = f"started {rec.get('started')} on {rec.get('host')} pid {rec.get('pid')}"
    place = where(r) if r["state"] in ("running", "done") else None
    return f"{r.get('dir', '?'):<60} {r['state']:<12} {extra}" + (f" [{place}]" if place else "")


if __name__ == "__main__":
    sys.exit(main())
