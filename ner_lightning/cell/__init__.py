"""One grid cell, from its config to its ``results.json``.

``build`` makes the data module, the objective family, the callbacks and the trainer from the
composed config; ``steps`` holds a cell's steps around its fit (set-up, fit, test, export, end),
shared by a cell trained alone and a lockstep group's member; ``protocols`` says what a cell runs
(one training run, a tuning trial, SingleAux); ``job`` wraps a cell as a Hydra job (placed on its
device, recorded in ``cell.json``, a failure written); ``log`` writes a cell's console lines.
``run`` and the lockstep wing use it; it uses the data, models, callbacks, export and precision
floors below.
"""
