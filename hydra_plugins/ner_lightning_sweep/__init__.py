"""Hydra loads sweepers and launchers only from classes defined in the ``hydra_plugins``
namespace: these name ours, which live in ``ner_lightning/sweep/`` (the lockstep launcher in
``ner_lightning/lockstep/launcher.py``, above the cell's run it drives) (conf/hydra/sweeper/grid.yaml,
conf/hydra/launcher/auto.yaml, local.yaml, parallel.yaml, lockstep.yaml, conf/hydra/sweeper/optuna_resumable.yaml)."""

from ner_lightning.lockstep import launcher as lockstep_launcher
from ner_lightning.sweep import launchers, optuna, sweeper


class GridSweeper(sweeper.GridSweeper):
    """See :class:`ner_lightning.sweep.sweeper.GridSweeper`."""


class LocalLauncher(launchers.LocalLauncher):
    """See :class:`ner_lightning.sweep.launchers.LocalLauncher`."""


class ParallelLauncher(launchers.ParallelLauncher):
    """See :class:`ner_lightning.sweep.launchers.ParallelLauncher`."""


class AutoLauncher(launchers.AutoLauncher):
    """See :class:`ner_lightning.sweep.launchers.AutoLauncher`."""


class LockstepLauncher(lockstep_launcher.LockstepLauncher):
    """See :class:`ner_lightning.lockstep.launcher.LockstepLauncher`."""


class OptunaSweeper(optuna.OptunaSweeper):
    """See :class:`ner_lightning.sweep.optuna.OptunaSweeper`."""
