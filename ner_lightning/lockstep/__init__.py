"""Lockstep training: the cells of a grid that differ only in partition (and initialisation seed)
trained as one stacked model, each cell still the experiment it is alone.

``stacking`` (the stacked step and the K models' dev scores), ``cell_fit`` (what Lightning and a
cell's callbacks keep for each cell), ``group_module`` (the group as one ``LightningModule``),
``fit`` (its ``Trainer.fit``), ``members`` (a group's cells and which configs can join one) and
``launcher`` (``hydra/launcher=lockstep``). It offers the floors above the launcher and the
:class:`~ner_lightning.lockstep.members.Member` that ``run`` sets up and ends.
"""
