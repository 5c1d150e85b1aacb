"""Building one run from its config: the data module, the objective family, the callbacks, the
loggers and the Trainer (``ner_lightning.cell.protocols`` runs what this builds)."""

from __future__ import annotations

import logging

import pytorch_lightning as pl
from hydra.core.hydra_config import HydraConfig
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf
from pytorch_lightning.callbacks import EarlyStopping

from ner_lightning.data.datamodule import MAIN, LowResourceDataModule
from ner_lightning.models.base import NERModule
from ner_lightning.models.contracts import ScheduleOwner
from ner_lightning.models.heads import build_family
from ner_lightning.precision.plugin import trainer_precision
from ner_lightning.results import grid_keys
from ner_lightning.settings import as_dict

log = logging.getLogger("ner_lightning")


def overrides() -> list[str]:
    """The command-line overrides of the running Hydra job (none outside Hydra)."""
    try:
        return list(HydraConfig.get().overrides.task)
    except ValueError:
        return []


def check_protocol(cfg: DictConfig) -> None:
    """Refuse configs whose model selection would read the training data, or whose training would
    never end (``trainer=batch_budget`` without the budget of ``callbacks=batch_budget``)."""
    max_steps = OmegaConf.select(cfg, "trainer.max_steps", default=None)
    if (
        cfg.trainer.get("max_epochs") == -1
        and max_steps in (None, -1)
        and not (cfg.get("callbacks") or {}).get("batch_budget")
    ):
        raise ValueError(
            "trainer.max_epochs=-1 (trainer=batch_budget) with nothing that ends training: add "
            "callbacks=batch_budget (the budget in batches, callbacks.batch_budget.batches) or set "
            "trainer.max_steps"
        )
    ckpt = (cfg.get("callbacks") or {}).get("model_checkpoint")
    if cfg.data.get("train_on_dev") and ckpt and ckpt.get("monitor") is not None:
        raise ValueError(
            "data.train_on_dev=true trains on the dev sentences, so selecting the checkpoint on dev "
            f"({ckpt.monitor}) would select on training data: set callbacks.model_checkpoint.monitor=null "
            "and callbacks.early_stopping=null to test the final model (experiment=munch_paper does)"
        )


def build_module(cfg: DictConfig, encoder, datamodule: LowResourceDataModule) -> NERModule:
    """The objective family of ``cfg.loss`` with a head for each corpus of the data module."""
    return build_family(cfg.loss, encoder, {MAIN: datamodule.label_set, **datamodule.aux_label_sets})


def build_datamodule(cfg: DictConfig, tokenizer) -> LowResourceDataModule:
    """``data``'s data module; under a multi-corpus scheme, ``multitask.datamodule`` built with
    every ``data`` key on top of its own (the main corpus exactly as a single-corpus run has it)."""
    if cfg.multitask.get("datamodule") is None:
        return instantiate(cfg.data, tokenizer=tokenizer)
    main = {k: v for k, v in as_dict(cfg.data, resolve=True).items() if k not in ("_target_", "tokenizer")}
    return instantiate(cfg.multitask.datamodule, tokenizer=tokenizer, **main)


def _instantiate_group(group: DictConfig | None) -> list:
    if not group:
        return []
    return [instantiate(c) for c in group.values() if isinstance(c, DictConfig) and "_target_" in c]


def build_callbacks(cfg: DictConfig) -> list[pl.Callback]:
    """The ``callbacks`` group, plus the scheme's phases callback (``multitask.phases``:
    MUNCH-Stack's, a :class:`ScheduleOwner`). Phases that restart the learning-rate schedule
    (``restarts_schedule``) end training themselves, so early stopping is left out: it would end
    the run in the first phase."""
    callbacks = _instantiate_group(cfg.get("callbacks"))
    phases = cfg.multitask.get("phases")
    if phases is None or "_target_" not in phases:  # a grid-wide `++multitask.phases.max_epochs=…` adds none
        return callbacks
    horizon: ScheduleOwner = instantiate(phases)
    if horizon.restarts_schedule and any(isinstance(c, EarlyStopping) for c in callbacks):
        log.info("early stopping left out: %s restarts the schedule and ends training itself", type(horizon).__name__)
        callbacks = [c for c in callbacks if not isinstance(c, EarlyStopping)]
    return [*callbacks, horizon]


def instantiate_trainer(cfg: DictConfig, **given) -> pl.Trainer:
    """``cfg.trainer`` with ``given`` (callbacks, logger, …) at the precision its plugins take
    (``precision.plugin.trainer_precision``): a cell's Trainer, and a lockstep group's."""
    precision = trainer_precision(
        cfg.trainer.precision, cfg.trainer.accelerator, instantiate(cfg.trainer.get("plugins"))
    )
    return instantiate(cfg.trainer, **given, **precision)


def build_trainer(cfg: DictConfig) -> tuple[pl.Trainer, list, list]:
    """The Trainer with the run's callbacks and loggers (the grid keys logged on top)."""
    callbacks = build_callbacks(cfg)
    loggers = _instantiate_group(cfg.get("logger"))
    trainer = instantiate_trainer(cfg, callbacks=callbacks, logger=loggers or False)
    grid = grid_keys(cfg, overrides())
    for lg in loggers:  # flat grid keys on top (W&B group-by), the whole resolved config under "config"
        lg.log_hyperparams({**grid, "config": OmegaConf.to_container(cfg, resolve=True)})
    return trainer, callbacks, loggers
