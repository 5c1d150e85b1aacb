"""Pre-registration of a study (``ner-lightning study FILE --register``): its design fixed in git
before any cell runs, and the proof of it afterwards.

``--register`` refuses a study file that git does not hold unchanged at HEAD, or a study whose
partitions a committed run already used, and writes ``FILE.registration.json`` beside it: the
file's sha256, the commit, the date, the plan (looks, spending, boundaries per family size), and
per claim the power the design has for the paper's own Δ at the claim's ``planning_sd`` (the SD
of paired differences the exploratory runs showed) and the Δ it detects with 80 % power
(``report/sequential.py``, simulated null and shifted studies). The record is then committed;
the study runs only while

* the record is committed unchanged, the study file's sha256 is the record's and the plan is
  the record's, and
* the working tree has no uncommitted change to a tracked file (each cell records its commit).

:func:`provenance` says "registered at <commit>, <date>, before its first cell" only when git
shows the record's commit and every cell of the study ran at a descendant commit of it, from a
clean tree, after it was committed; otherwise it says what it cannot prove.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from ner_lightning import run_store
from ner_lightning.report.claim_spec import family, family_directions, load_claims
from ner_lightning.results import write_json_atomic
from ner_lightning.study.plan import claim_power


def record_path(study_file: Path) -> Path:
    """Where a study file's registration record lives: beside it, ``NAME.registration.json``."""
    return Path(study_file).with_suffix(".registration.json")


def read(study_file: Path) -> dict | None:
    path = record_path(study_file)
    return json.loads(path.read_text()) if path.exists() else None


def _git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True, timeout=30).stdout


def _sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _committed_unchanged(path: Path) -> bool:
    """Whether git tracks ``path`` and it has no uncommitted change."""
    folder = Path(path).resolve().parent
    try:
        _git("ls-files", "--error-unmatch", Path(path).name, cwd=folder)
        return not _git("status", "--porcelain", "--", Path(path).name, cwd=folder).strip()
    except (OSError, subprocess.CalledProcessError):
        return False


def used_partitions(root: Path) -> set[int]:
    """The partitions of every committed cell under ``root`` (run stores and results.json files)."""
    used: set[int] = set()
    files = _git("ls-files", "*.jsonl.xz", "*results.json", cwd=root).split()
    for name in files:
        path = root / name
        if name.endswith(".jsonl.xz"):
            texts = [text for rel, text in run_store.read_store(path).items() if rel.endswith("results.json")]
        else:
            texts = [path.read_text()]
        for text in texts:
            used.update(
                int(o.split("=", 1)[1])
                for o in json.loads(text).get("overrides", [])
                if o.startswith("partition=") and o.split("=", 1)[1].isdigit()
            )
    return used


def register(study_file: Path, plan: dict, levels: dict[str, list[float]], folder: Path, error: dict) -> str:
    """Write the study file's registration record (module docstring) with each family's look
    ``levels`` and the study-wide ``error`` (``study.study_wide_error``); returns what to do next."""
    study_file = Path(study_file)
    if record_path(study_file).exists():
        raise SystemExit(
            f"{record_path(study_file)}: the study is registered already; a new design is a new study "
            "file (and a new study folder)"
        )
    if not _committed_unchanged(study_file):
        raise SystemExit(
            f"{study_file}: commit the study file first — a registration names the commit that holds it, unchanged"
        )
    if Path(folder).exists() and any(Path(folder).rglob("results.json")):
        raise SystemExit(f"{folder}: the study folder holds cells already; a study registers before its first cell")
    root = Path(_git("rev-parse", "--show-toplevel", cwd=study_file.resolve().parent).strip())
    wanted = set(
        range(plan["first_partition"], plan["first_partition"] + plan["partitions"] + len(plan.get("exclusions", [])))
    )
    reused = sorted(wanted & used_partitions(root))
    if reused:
        raise SystemExit(
            f"{study_file}: partitions {reused} were used by committed runs; a confirmatory study runs "
            "on fresh partitions (study.first_partition)"
        )
    settings, claims = load_claims(study_file)
    directions = family_directions(claims)
    record: dict = {
        "study_file": study_file.as_posix(),
        "sha256": _sha256(study_file),
        "commit": _git("rev-parse", "HEAD", cwd=root).strip(),
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "plan": plan,
        "levels": dict(sorted(levels.items())),
        "claims": {
            str(c["id"]): claim_power(c, plan, levels[family(c)], directions[family(c)])
            for c in claims
            if not c.get("vacuous")
        },
        "vacuous": {str(c["id"]): c["vacuous"] for c in claims if c.get("vacuous")},
        "study_wide_error": error,
        "rule": rule_fingerprint(),
    }
    write_json_atomic(record_path(study_file), record)
    families = ", ".join(f"{name} {a:g}" for name, a in error["families"].items())
    return (
        f"registered {study_file} at {record['commit'][:12]} ({record['date']}): commit "
        f"{record_path(study_file)} before running the study\nfamily-wise error per family: {families}; "
        f"study-wide: at most {error['bound']:.4f} (Bonferroni), {error['independent']:.4f} if the families "
        "are independent"
    )


RULE = (
    "study/runner.py",
    "study/looks.py",
    "study/plan.py",
    "report/claims.py",
    "report/claim_spec.py",
    "report/sequential.py",
    "report/stats.py",
    "report/runs.py",
    "report/tables.py",
)  # the modules that compute verdicts and their labels


def rule_fingerprint() -> dict[str, str]:
    """The sha256 of each module of the judging rule (:data:`RULE`, paths in the package), as this
    process runs it. A study registered before the study wing existed names ``study.py``,
    ``study_looks.py`` and ``study_plan.py``: those count as changed, and the registered rule
    judges again (:func:`rule_check`)."""
    package = Path(__file__).resolve().parents[1]
    return {name: _sha256(package / name) for name in RULE}


REGISTERED_RULE = """
import json, sys
from pathlib import Path
try:
    from ner_lightning.study.runner import run_study
except ImportError:  # a package from before the study wing: ner_lightning/study.py
    from ner_lightning.study import run_study
record = run_study(Path(sys.argv[1]), folder=Path(sys.argv[2]), replay=True)
print(json.dumps(record["verdicts"]))
"""


def rule_check(study_file: Path, record: dict, folder: Path, verdicts: dict) -> str:
    """Whether the rule that judged now is the registered one; if not, the registered commit's
    rule (its package, from git) judges the study again in a fresh process and every label the
    two rules give differently is named."""
    if "rule" not in record:
        return "the judging rule was not registered (the record predates rule fingerprints)"
    changed = [name for name, sha in rule_fingerprint().items() if record["rule"].get(name) != sha]
    if not changed:
        return "judged by the registered rule (its modules unchanged)"
    said = f"the judging rule changed since registration ({', '.join(changed)})"
    cwd = Path(study_file).resolve().parent
    try:
        archive = subprocess.run(
            ["git", "archive", record["commit"], "--", "ner_lightning"],
            capture_output=True,
            check=True,
            timeout=120,
            cwd=Path(_git("rev-parse", "--show-toplevel", cwd=cwd).strip()),
        )
    except (OSError, subprocess.CalledProcessError):
        return f"{said}; git holds no package at the registered commit to judge with: judged by the current rule"
    with tempfile.TemporaryDirectory() as tmp:
        tarfile.open(fileobj=io.BytesIO(archive.stdout)).extractall(tmp, filter="data")
        env = {**os.environ, "PYTHONPATH": tmp}
        proc = subprocess.run(
            [sys.executable, "-c", REGISTERED_RULE, str(Path(study_file).resolve()), str(Path(folder).resolve())],
            capture_output=True,
            text=True,
            env=env,
            cwd=cwd,
        )
    if proc.returncode:
        return f"{said}; the registered rule failed to judge it ({proc.stderr.strip().splitlines()[-1:]})"
    registered = json.loads(proc.stdout.strip().splitlines()[-1])
    differ = [
        f"{cid}: registered rule {registered.get(cid, {}).get('verdict')!r}, current {v['verdict']!r}"
        for cid, v in verdicts.items()
        if registered.get(cid, {}).get("verdict") != v["verdict"]
    ]
    return f"{said}; " + (
        "labels that differ from the registered rule's: " + "; ".join(differ)
        if differ
        else "the registered rule gives every label the current one does"
    )


def check_before_running(study_file: Path, record: dict, plan: dict) -> None:
    """Refuse to run a registered study whose file, plan or record changed, or from a dirty tree."""
    problems = []
    if _sha256(study_file) != record["sha256"]:
        problems.append(f"{study_file} changed since it was registered (sha256 differs)")
    if plan != record["plan"]:
        problems.append("its plan is not the registered one")
    if not _committed_unchanged(record_path(study_file)):
        problems.append(f"{record_path(study_file)} is not committed unchanged")
    folder = Path(study_file).resolve().parent
    if _git("status", "--porcelain", "--untracked-files=no", cwd=folder).strip():
        problems.append("the working tree has uncommitted changes (a registered study's cells run from a commit)")
    if problems:
        raise SystemExit(f"{study_file}: registered study refused: " + "; ".join(problems))


def _start(result: dict) -> dt.datetime | None:
    """When a cell's first attempt started (``attempts``; a result without them: its finish time
    less its wall time)."""
    if result.get("attempts"):
        return min(dt.datetime.fromisoformat(a["started"]) for a in result["attempts"])
    if not result.get("finished") or result.get("wall_time_s") is None:
        return None
    return dt.datetime.fromisoformat(result["finished"]) - dt.timedelta(seconds=float(result["wall_time_s"]))


def provenance(study_file: Path, record: dict, folder: Path) -> str:
    """ "registered at <commit>, <date>, before its first cell" when git and the cells prove it,
    else what is not proven."""
    cwd = Path(study_file).resolve().parent
    name = record_path(study_file).name
    try:
        added = _git("log", "--diff-filter=A", "--format=%H %cI", "--", name, cwd=cwd).split()
    except (OSError, subprocess.CalledProcessError):
        added = []
    if len(added) < 2:
        return "not proven registered: git holds no commit adding the registration record"
    commit, when = added[-2], dt.datetime.fromisoformat(added[-1])
    if _git("log", "--format=%H", f"{commit}..", "--", name, cwd=cwd).strip():
        return f"not proven registered: the registration record changed after {commit[:12]}"
    if _sha256(study_file) != record["sha256"]:
        return "not proven registered: the study file is not the one registered"
    results = [
        (p.parent.as_posix(), json.loads(run_store.read_text(p)))
        for p in run_store.files_named(Path(folder), "results.json")
    ]
    if not results:
        return f"registered at {commit[:12]}, {when.isoformat()}; no cell has run"
    descends: dict[str, bool] = {}  # cell commit -> whether it descends from the registration commit
    for where, r in results:
        code, start = r.get("code") or {}, _start(r)
        if not code.get("commit") or code.get("dirty") is not False:
            return f"not proven registered before its cells: {where} ran from an unknown or uncommitted tree"
        if code["commit"] not in descends:
            descends[code["commit"]] = (
                subprocess.run(
                    ["git", "merge-base", "--is-ancestor", commit, code["commit"]], cwd=cwd, capture_output=True
                ).returncode
                == 0
            )
        if not descends[code["commit"]] or start is None or start < when:
            return f"not proven registered before its cells: {where} ran before or beside the registration commit"
    return f"registered at {commit[:12]}, {when.isoformat()}, before its first cell ({len(results)} cells checked)"
