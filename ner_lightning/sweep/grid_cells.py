"""A grid's cells before they run: the product of the sweep's overrides (:func:`expand_grid`), each
cell checked for what needs no measurement (:func:`preflight_cell`), then composed as its launcher
will compose it and described for the manifest — folder, identity, precision, and why a finished
result in its folder is of another cell (:func:`describe_cell`)."""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator
from pathlib import Path

from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.types import Override
from hydra.errors import HydraException
from hydra.types import HydraContext
from omegaconf import DictConfig, OmegaConf, open_dict

from ner_lightning.config import complete_config
from ner_lightning.settings import as_dict
from ner_lightning.sweep import cells
from ner_lightning.sweep.identity import identity_of, why_different
from ner_lightning.sweep.preflight import Refused, check_cell


def expand_grid(overrides: list[Override]) -> list[list[str]]:
    """The product of the sweep overrides (``a=1,2 b=x,y``: 4 jobs), in the order given; a key
    given twice keeps its last value, as in Hydra."""
    axes: dict[str, list[str]] = {}
    for override in overrides:
        key = override.get_key_element()
        if not override.is_sweep_override():
            axes[key] = [f"{key}={override.get_value_element_as_str()}"]
        elif override.is_discrete_sweep():
            axes[key] = [f"{key}={value}" for value in override.sweep_string_iterator()]
        else:
            raise HydraException(
                f"hydra/sweeper=grid sweeps lists and ranges, not {override.value_type} "
                f"({key}): use hydra/sweeper=optuna for intervals"
            )
    return [list(job) for job in itertools.product(*axes.values())]


@contextlib.contextmanager
def composed(hydra_context: HydraContext, master_config: DictConfig, k: int, overrides: list[str]) -> Iterator:
    """Cell ``k`` composed as its launcher will, Hydra's runtime set to it while the block runs
    (``${hydra:…}`` resolves): its whole config and its job config (without ``hydra``)."""
    sweep_config = hydra_context.config_loader.load_sweep_config(
        master_config=master_config, sweep_overrides=list(overrides)
    )
    with open_dict(sweep_config):
        sweep_config.hydra.job.num = k
        sweep_config.hydra.job.id = k
    saved = HydraConfig.instance().cfg
    HydraConfig.instance().set_config(sweep_config)
    try:
        yield sweep_config, OmegaConf.masked_copy(sweep_config, [str(key) for key in sweep_config if key != "hydra"])
    finally:
        HydraConfig.instance().cfg = saved


def preflight_cell(
    hydra_context: HydraContext, master_config: DictConfig, k: int, overrides: list[str], grid: list[list[str]]
) -> None:
    """Cell ``k`` checked by ``preflight.check_cell`` (nothing resolved that measures); a refusal
    names the cell by the overrides that tell it from the ``grid``'s other cells."""
    with composed(hydra_context, master_config, k, overrides) as (_, job):
        try:
            check_cell(job)
        except Refused as err:
            own = [o for o in overrides if sum(o in other for other in grid) < len(grid)]
            raise Refused(f"cell {k}" + (f" ({' '.join(own)})" if own else "") + f": {err}") from err


def describe_cell(
    hydra_context: HydraContext, master_config: DictConfig, k: int, overrides: list[str], sweep_dir: Path
) -> dict:
    """Compose cell ``k`` as its launcher will — its folder and identity (resolved settings and
    input files, ``sweep.identity``), which also validates it — and, when its folder holds the
    result of another cell, why it will rerun."""
    with composed(hydra_context, master_config, k, overrides) as (sweep_config, job):
        subdir = str(OmegaConf.select(sweep_config, "hydra.sweep.subdir"))
        resolved = as_dict(complete_config(job), resolve=True)
        ident = identity_of(resolved)
    precision = {
        "train": (resolved.get("trainer") or {}).get("precision"),
        "eval": ((resolved.get("callbacks") or {}).get("eval_precision") or {}).get("precision"),
    }
    cell = {
        "cell": k,
        "overrides": list(overrides),
        "dir": subdir,
        "config_sha256": ident["sha256"],
        "precision": precision,
    }
    old = cells.read_json(sweep_dir / subdir / cells.RESULTS)
    if old is not None and old.get("status") == "ok" and old.get("config_sha256") != ident["sha256"]:
        cell["rerun_because"] = why_different(old, ident, resolved)
    elif cells.unreadable(sweep_dir / subdir / cells.RESULTS):
        cell["rerun_because"] = "its results.json is corrupt"
    return cell
