"""What identifies a grid cell: the experiment it really runs, not the text it was written as.

* ``settings`` — the resolved config (interpolations, environment variables and hardware
  resolvers such as ``${best_precision:}`` evaluated) without the values that say *where* it runs
  and not *what* (output folders, logger, W&B names, process settings, progress bar, workers,
  the folder a corpus or a local encoder lies in);
* ``inputs`` — a fingerprint of the files it reads: each corpus's split files (main and
  auxiliary), a local encoder's folder (content sha256, cached per file size and mtime) and the
  source file of every module of the user's own whose class the config instantiates
  (``code:<module>``, :func:`user_modules`).

Two cells with the same identity train the same model on the same data; a changed corpus copy
(``NER_DATA_DIR``), a changed default, another precision or a changed module of the user's
(a loss class of one's own, say) is another cell: that module is the experiment's, so a rerun
trains its cells again and says which module changed. The package's own code version is recorded
in results.json (:func:`code_version`), not hashed: a fix must not rerun a finished grid.
"""

from __future__ import annotations

import copy
import hashlib
import json
import site
import subprocess
import sysconfig
from importlib.machinery import PathFinder
from pathlib import Path

from omegaconf import DictConfig

from ner_lightning.settings import as_dict

# Top-level keys and key names (anywhere) that say where a cell runs, not what it computes.
WHERE_TOP = ("paths", "group", "run_name", "tags", "logger", "runtime", "hydra")
WHERE_NAMES = (
    "dirpath",
    "default_root_dir",
    "save_dir",
    "enable_progress_bar",
    "enable_model_summary",
    "num_workers",
    "devices",
    "aux_sort_from",
    "eval_batch_tokens",
    # a size it caps would otherwise be refused: a finished cell computed the same either way
    "eval_size_at_most",
)
_file_sha: dict[tuple[str, int, int], str] = {}


def file_sha256(path: Path) -> str:
    stat = path.stat()
    key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns)
    if key not in _file_sha:
        digest = hashlib.sha256()
        with path.open("rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
        _file_sha[key] = digest.hexdigest()
    return _file_sha[key]


def _folder_sha256(folder: Path) -> str:
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    return hashlib.sha256("".join(f"{p.relative_to(folder)}:{file_sha256(p)}\n" for p in files).encode()).hexdigest()


def _corpus_sha256(node: dict) -> str:
    """The split files a dataset config names; a missing file counts as missing (the cell then
    fails reading it, with the file named)."""
    folder = Path(str(node.get("dir")))
    parts = []
    for split, name in sorted((node.get("splits") or {}).items()):
        if name:
            path = folder / name
            parts.append(f"{split}:{file_sha256(path) if path.is_file() else 'missing'}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def _local_folder(value) -> Path | None:
    return Path(value) if isinstance(value, str) and Path(value).is_dir() else None


def targets(node, key: str = "") -> list[tuple[str, str]]:
    """(the key of the node that holds it, ``_target_``) of every ``_target_`` string below ``node``."""
    if isinstance(node, dict):
        own = [(key, node["_target_"])] if isinstance(node.get("_target_"), str) else []
        return own + [t for k, v in node.items() for t in targets(v, f"{key}.{k}" if key else str(k))]
    if isinstance(node, list):
        return [t for i, v in enumerate(node) for t in targets(v, f"{key}[{i}]")]
    return []


def module_file(target: str) -> tuple[str, Path] | None:
    """The module (the longest importable prefix of ``target``) and its source file, found on
    ``sys.path`` as ``import`` would find it, without importing (running) anything."""
    parts, found, search = target.split("."), None, None
    for k in range(len(parts)):
        spec = PathFinder.find_spec(".".join(parts[: k + 1]), search)
        if spec is None or not spec.origin or not spec.origin.endswith(".py"):
            break
        found, search = (".".join(parts[: k + 1]), Path(spec.origin)), spec.submodule_search_locations
        if search is None:
            break
    return found


_INSTALLED = tuple(
    Path(p).resolve()
    for p in [
        *(sysconfig.get_paths().get(key) for key in ("stdlib", "platstdlib", "purelib", "platlib")),
        *site.getsitepackages(),
        site.getusersitepackages(),
    ]
    if p
)


def installed(path: Path) -> bool:
    """A file of the standard library or of an installed package (not the user's own)."""
    return any(path.resolve().is_relative_to(p) for p in _INSTALLED)


def user_modules(resolved: dict) -> dict[str, Path]:
    """The modules of the user's own that the config instantiates from: a ``_target_``'s module
    outside this package and outside the interpreter's installed packages and standard library."""
    found = {}
    for _, target in targets(resolved):
        located = None if target.split(".")[0] == "ner_lightning" else module_file(target)
        if located is not None and not installed(located[1]):
            found[located[0]] = located[1]
    return found


def user_code_changed(results: dict) -> list[str]:
    """The modules of the user's own that a finished cell (its results.json) ran with and that
    have changed (or cannot be found) since: a rerun of its sweep trains it again."""
    recorded = ((results.get("identity") or {}).get("inputs") or {}).items()
    changed = []
    for key, sha in recorded:
        if key.startswith("code:"):
            located = module_file(key.removeprefix("code:"))
            if located is None or file_sha256(located[1]) != sha:
                changed.append(key.removeprefix("code:"))
    return changed


def inputs(resolved: dict) -> dict[str, str]:
    """Fingerprints of the files a cell reads (see the module docstring)."""
    dataset = resolved.get("dataset") or {}
    found = {f"dataset:{dataset.get('name')}": _corpus_sha256(dataset)} if dataset else {}
    for name, node in (resolved.get("aux_datasets") or {}).items():
        found[f"aux:{name}"] = _corpus_sha256(node)
    folder = _local_folder((resolved.get("model") or {}).get("name_or_path"))
    if folder is not None:
        found["model"] = _folder_sha256(folder)
    for module, path in sorted(user_modules(resolved).items()):
        found[f"code:{module}"] = file_sha256(path)
    return found


def _strip(node, top: bool = False):
    if isinstance(node, dict):
        corpus = "splits" in node  # a dataset node (wherever it is repeated): its folder is in inputs()
        return {
            k: _strip(v)
            for k, v in node.items()
            if k not in WHERE_NAMES and not (top and k in WHERE_TOP) and not (corpus and k == "dir")
        }
    if isinstance(node, list):
        return [_strip(v) for v in node]
    return node


def settings(resolved: dict) -> dict:
    """The resolved config without where-it-runs values; corpus folders and a local encoder's
    folder are left to :func:`inputs`."""
    out = _strip(resolved, top=True)
    if _local_folder((resolved.get("model") or {}).get("name_or_path")) is not None:
        out["model"]["name_or_path"] = "<local folder: inputs.model>"
    return out


def cell_identity(cfg: DictConfig) -> dict:
    """``sha256`` (the cell's identity), ``settings_sha256`` and ``inputs`` of a completed config
    (``config.complete_config``) inside Hydra's runtime."""
    return identity_of(as_dict(cfg, resolve=True))


def identity_of(resolved: dict) -> dict:
    """:func:`cell_identity` of a config already resolved to plain containers."""
    found = inputs(resolved)
    settings_sha = hashlib.sha256(json.dumps(settings(resolved), sort_keys=True, default=str).encode()).hexdigest()
    sha = hashlib.sha256(json.dumps({"settings": settings_sha, "inputs": found}, sort_keys=True).encode()).hexdigest()
    return {"sha256": sha, "settings_sha256": settings_sha, "inputs": found}


def accelerator_restored(results: dict, sha: str) -> dict | None:
    """``results`` of a cell that the parallel launcher ran while it still wrote the device it
    pinned (``cpu`` / ``gpu``) into ``trainer.accelerator`` — which made the recorded identity
    differ from the one its manifest composed (``auto``), so a rerun would train it again — with
    ``auto`` restored and the identity recomputed, when that gives exactly the manifest's
    ``sha``; the change is recorded under ``reidentified``. Anything else: None."""
    config = results.get("config") or {}
    pinned = (config.get("trainer") or {}).get("accelerator")
    if "slot" not in (results.get("device") or {}) or pinned not in ("cpu", "gpu"):
        return None
    composed = copy.deepcopy(config)
    composed["trainer"]["accelerator"] = "auto"
    ident = identity_of(composed)
    if ident["sha256"] != sha:
        return None
    return {
        **results,
        "config": composed,
        "config_sha256": sha,
        "identity": ident,
        "reidentified": {
            "trainer.accelerator": pinned,
            "recorded_config_sha256": results.get("config_sha256"),
            "why": "written by the parallel launcher, not composed; the device used is `device`",
        },
    }


def why_different(old: dict | None, new: dict, new_config: dict) -> str:
    """Why a finished cell (its results.json ``old``) is not this cell ``new``, in words."""
    if not old or "identity" not in old:
        return "made before cells were identified by their resolved config and data"
    before = old["identity"]
    changed = sorted(
        k for k in set(before["inputs"]) | set(new["inputs"]) if before["inputs"].get(k) != new["inputs"].get(k)
    )
    code = [k.removeprefix("code:") for k in changed if k.startswith("code:")]
    if code:
        return f"your module {', '.join(code)} changed since it ran"
    if changed:
        return f"other input files: {', '.join(changed)}"
    before, after = flat(settings(old.get("config") or {})), flat(settings(new_config))
    keys = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
    return f"other settings: {', '.join(keys[:6])}{' …' if len(keys) > 6 else ''}" if keys else "other settings"


def flat(node, prefix: str = "") -> dict[str, str]:
    """A nested config as ``{"dotted.key": "value"}`` (values as text)."""
    if isinstance(node, dict):
        return {k: v for key, value in node.items() for k, v in flat(value, f"{prefix}{key}.").items()}
    return {prefix.rstrip("."): str(node)}


def code_version() -> dict:
    """The package version and, in a git checkout, the commit and whether the tree has changes."""
    from ner_lightning import __version__
    from ner_lightning.config import REPO_ROOT

    out: dict = {"version": __version__, "commit": None, "dirty": None}
    try:
        git = ["git", "-C", str(REPO_ROOT)]
        out["commit"] = subprocess.run(
            [*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True, timeout=10
        ).stdout.strip()
        status = subprocess.run(
            [*git, "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        ).stdout
        out["dirty"] = bool(status.strip())
    except (OSError, subprocess.SubprocessError):
        pass
    return out
