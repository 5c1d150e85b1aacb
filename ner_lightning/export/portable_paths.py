"""Paths an export may not carry: the exporting machine's folders named by what they are
(``<cell>``, ``<data_dir>``, ``<root_dir>``, ``<site-packages>``, ``<python>``, ``~``), any other
absolute path as ``<local path>``."""

from __future__ import annotations

import os
import re
import sys
import sysconfig
from pathlib import Path

ABSOLUTE_PATH = re.compile(r"(?:(?<=^)|(?<=[=\s,\['\"]))/[^\s,\]'\"]+")


def local_roots(config: dict) -> dict[str, str]:
    """The exporting machine's folders a cell's config may name, each with the name an export
    writes instead (longest first): the cell, the corpora, the project, the Python environment."""
    paths = config.get("paths") or {}
    named = {
        "<cell>": paths.get("output_dir"),
        "<data_dir>": paths.get("data_dir"),
        "<root_dir>": paths.get("root_dir"),
        "<site-packages>": sysconfig.get_paths()["purelib"],
        "<python>": sys.prefix,
        "~": str(Path.home()),
    }
    roots: dict[str, str] = {}
    for name, folder in named.items():
        for form in {str(folder), os.path.normpath(str(folder)), os.path.realpath(str(folder))} if folder else ():
            if len(form) > 1:
                roots.setdefault(form.rstrip("/"), name)
    return dict(sorted(roots.items(), key=lambda kv: -len(kv[0])))


def portable(value, roots: dict[str, str]):
    """``value`` (a config, a result) with every local folder named as in :func:`local_roots`, and
    any other absolute path as ``<local path>``: an export carries no machine's paths."""
    if isinstance(value, dict):
        return {k: portable(v, roots) for k, v in value.items()}
    if isinstance(value, list):
        return [portable(v, roots) for v in value]
    if not isinstance(value, str):
        return value
    for folder, name in roots.items():
        value = re.sub(re.escape(folder) + r"(?=/|$|[\s,\]'\"])", name, value)  # names hold no backslash
    return ABSOLUTE_PATH.sub("<local path>", value)
