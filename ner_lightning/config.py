"""Composing ``conf/`` outside ``@hydra.main`` and completing a composed config before anything
is built: values checked, the data the objective needs, the auxiliary corpora's dataset nodes.
The resolvers ``conf/`` uses live in ``ner_lightning/resolvers.py``."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol, runtime_checkable

from omegaconf import DictConfig, OmegaConf, open_dict

from ner_lightning import settings

settings.register()  # conf/config.yaml's defaults list names the schema: it must be there first

PACKAGE_DIR = Path(__file__).resolve().parent
REPO_ROOT = PACKAGE_DIR.parent  # the checkout (an installed wheel: the folder the package lies in)
CONFIG_DIR = PACKAGE_DIR / "conf"  # in a checkout a link to its conf/; a wheel carries the files


def root_dir() -> Path:
    """``paths.root_dir`` (``${repo_root:}``): the checkout the package runs from; for a package
    installed from a wheel, the working folder (the data root then defaults to ``../shared/datasets``
    beside it; ``NER_DATA_DIR`` sets it)."""
    return REPO_ROOT if (REPO_ROOT / "pyproject.toml").is_file() else Path.cwd()


def compose_config(overrides: list[str], output_dir: str | Path):
    """Compose ``conf/config.yaml`` outside ``@hydra.main`` (tests, benchmarks, notebooks).

    Sets the Hydra runtime so ``${hydra:...}`` interpolations resolve, with outputs in
    ``output_dir``; returns the job config (without the ``hydra`` node).
    """
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.hydra_config import HydraConfig

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = compose("config", overrides=overrides, return_hydra_config=True)
        with open_dict(cfg):
            cfg.hydra.runtime.output_dir = str(output_dir)
            cfg.hydra.job.override_dirname = ",".join(overrides)
        HydraConfig().set_config(cfg)
        with open_dict(cfg):
            del cfg["hydra"]
        return complete_config(cfg)


def complete_config(cfg: DictConfig) -> DictConfig:
    """What a composed config leaves to the run, filled in in one place before anything is built
    (the cell's identity is the config as composed, before this): values checked
    (:func:`check_values`), the data the objective needs (:func:`apply_objective_requirements`)
    and the auxiliary corpora's dataset nodes
    (:func:`compose_auxiliary_datasets`). Runs inside Hydra (the app, or ``compose_config``)."""
    return compose_auxiliary_datasets(apply_objective_requirements(check_values(cfg)))


def compose_auxiliary_datasets(cfg: DictConfig) -> DictConfig:
    """``aux_datasets``: the ``conf/dataset`` node of every name in ``aux`` (in order, the main
    corpus left out: one aux list serves a sweep over main corpora), composed by Hydra with the
    run's config search path, so a user's own dataset configs work as auxiliaries too. Their
    interpolations (``${paths.data_dir}``) resolve against the run's config."""
    import logging

    from hydra import compose
    from hydra.core.hydra_config import HydraConfig
    from hydra.errors import MissingConfigException

    names = list(cfg.get("aux") or [])
    if cfg.get("multitask", {}).get("datamodule") is None or not names:
        return cfg
    if len(set(names)) != len(names):
        raise ValueError(f"aux={names} lists a corpus twice")
    searchpath = list(HydraConfig.get().searchpath)
    extra = [f"hydra.searchpath=[{','.join(searchpath)}]"] if searchpath else []
    nodes = {}
    for name in names:
        if not isinstance(name, str):
            raise ValueError(f"aux must be a list of dataset names, e.g. aux=[bc2gm,linnaeus], got an entry {name!r}")
        if name == cfg.dataset.name:
            logging.getLogger("ner_lightning").info("aux: %s is the main corpus, not an auxiliary of itself", name)
            continue
        try:
            nodes[name] = compose("config", overrides=[f"dataset={name}", *extra]).dataset
        except MissingConfigException as err:
            raise ValueError(f"aux: {name!r} has no dataset config (conf/dataset/{name}.yaml): {err}") from None
    with open_dict(cfg):
        cfg.aux_datasets = nodes
    return cfg


def apply_objective_requirements(cfg: DictConfig) -> DictConfig:
    """Fill in what the objective family (``cfg.loss._target_``) requires of the data, in one
    place instead of loss configs writing into the data group: ``data.framing`` (null = the
    family's ``framing``, an explicit conflicting value is refused) and ``data.label_scheme``
    (null = untyped for families with ``untyped_spans``, else typed). Runs before the data
    module is built; the cell's identity is the config as composed, before this."""
    if OmegaConf.select(cfg, "loss._target_") is None or "data" not in cfg:
        return cfg  # not a config of ours (e.g. Hydra's own tests of our sweeper)
    family = objective_family(cfg)
    data = cfg.data
    with open_dict(cfg):
        if data.get("framing") is None:
            data.framing = family.framing
        elif data.framing != family.framing:
            raise ValueError(
                f"loss={cfg.loss._target_.rsplit('.', 1)[-1]} reads data.framing={family.framing} inputs, "
                f"but data.framing={data.framing} was set: drop the data.framing override"
            )
        data.label_scheme = label_scheme_needed(cfg) or data.label_scheme
    return cfg


def label_scheme_needed(cfg: DictConfig) -> str | None:
    """The ``data.label_scheme`` the objective will choose for this config, or None when the
    config sets it explicitly (or is not one of ours)."""
    if OmegaConf.select(cfg, "loss._target_") is None or OmegaConf.select(cfg, "data.label_scheme") is not None:
        return None
    return "untyped" if objective_family(cfg).untyped_spans else "typed"


@runtime_checkable
class ObjectiveFamily(Protocol):
    """What the config reads of the class ``loss._target_`` names: the data the family requires
    (class attributes of every ``models.base.NERModule``)."""

    framing: str
    untyped_spans: bool


def objective_family(cfg: DictConfig) -> ObjectiveFamily:
    """The objective family ``loss._target_`` names, as far as the data it requires."""
    from hydra.utils import get_class

    family = get_class(cfg.loss._target_)
    if not isinstance(family, ObjectiveFamily):
        raise ValueError(
            f"loss._target_={cfg.loss._target_} is not an objective family: name a subclass of "
            "ner_lightning.models.base.NERModule (conf/loss/*.yaml)"
        )
    return family


# Keys whose type a typo would otherwise turn into an error deep inside Lightning or torch:
# dotted path -> (expected types, what the value must be).
CHECKED_KEYS = {
    "trainer.max_epochs": ((int,), "an int >= 1, or -1 for no epoch limit (a batch budget)"),
    "trainer.min_epochs": ((int,), "an int >= 0, at most trainer.max_epochs"),
    "partition": ((int,), "an int >= 0"),
    "seed": ((int,), "an int"),
    "init_seed": ((int,), "an int"),
    "data.batch_size": ((int,), "an int >= 1"),
    "data.eval_batch_size": ((int,), "an int >= 1"),
    "data.eval_batch_tokens": ((int,), "an int >= 1 (padded sub-word positions per evaluation batch), or null"),
    "optimizer.lr": ((int, float), "a number > 0"),
}


def check_values(cfg: DictConfig) -> DictConfig:
    """Refuse, naming the key, values of the wrong type or out of range for the keys above (the
    rest is checked where it is used), before anything is loaded or trained."""
    for key, (types, what) in CHECKED_KEYS.items():
        value = OmegaConf.select(cfg, key, default=None)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, types):
            raise ValueError(f"{key}={value!r}: expected {what}")
    max_epochs = OmegaConf.select(cfg, "trainer.max_epochs", default=None)
    min_epochs = OmegaConf.select(cfg, "trainer.min_epochs", default=None) or 0
    if max_epochs is not None and (max_epochs == 0 or max_epochs < -1):
        raise ValueError(
            f"trainer.max_epochs={max_epochs}: train at least one epoch (or -1: no epoch limit, "
            "training ends by a batch budget or trainer.max_steps)"
        )
    if max_epochs is not None and max_epochs > 0 and min_epochs > max_epochs:
        raise ValueError(f"trainer.min_epochs={min_epochs} > trainer.max_epochs={max_epochs}: lower min_epochs")
    _check_one_device(OmegaConf.select(cfg, "trainer.devices", default=1))
    return cfg


def _check_one_device(devices) -> None:
    """A cell runs on one device (docs/gpu_and_cluster.md: several GPUs run several cells at once)."""
    many = (
        devices in ("auto", -1, "-1")
        or isinstance(devices, int)
        and devices > 1
        or isinstance(devices, str)
        and devices.isdigit()
        and int(devices) > 1
        or not isinstance(devices, (int, str))
        and len(devices) > 1
    )
    if many:
        raise ValueError(
            f"trainer.devices={devices}: a cell trains on one device — several GPUs serve a grid as one "
            "cell per GPU (hydra/launcher=parallel or slurm, docs/gpu_and_cluster.md), not one cell "
            "across GPUs (DDP is out of scope)"
        )
