"""OmegaConf resolvers used by ``conf/``: ``${repo_root:}`` and ``${package_dir:pkg,sub}``."""
from __future__ import annotations

from pathlib import Path

from omegaconf import OmegaConf

REPO_ROOT = Path(__file__).resolve().parents[1]
CONFIG_DIR = REPO_ROOT / "conf"


def _package_dir(package: str, sub: str = "") -> str:
    from ner_lightning.models.encoder import package_dir

    return package_dir(package, sub)


def register_resolvers() -> None:
    if not OmegaConf.has_resolver("repo_root"):
        OmegaConf.register_new_resolver("repo_root", lambda: str(REPO_ROOT))
    if not OmegaConf.has_resolver("package_dir"):
        OmegaConf.register_new_resolver("package_dir", _package_dir)
