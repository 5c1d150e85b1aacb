"""Studies: a claims file whose grids run and whose claims are decided by the study itself.

``plan`` turns a study file into looks, levels and power; ``registration`` fixes the design in git
before any result (``--register``), refuses a run that departs from it and replays the
registered rule; ``looks`` launches the undecided claims' grids and decides at each look;
``runner`` is ``ner-lightning study FILE`` (also ``python -m ner_lightning.study``). The wing uses
the report floor (claims, sequential tests, tables) and the sweep floor; nothing below imports it.
"""
