"""Judging a sweep the way the seed papers do: ``python -m ner_lightning.report <sweep dir> …``.

* ``runs``: reading ``results.json`` / ``failure.json`` and values by dotted path;
* ``stats``: bootstrap SE and CI of a mean, paired comparisons, Holm's correction;
* ``tables``: summary per group, comparisons against a baseline, paper-style tables;
* ``plots``: the figures a sweep's axes allow.

See ``__main__`` for the command line.
"""

from ner_lightning.report.runs import load_runs, lookup, mixed_settings  # noqa: F401  (the package's API)
from ner_lightning.report.tables import comparison_table, comparisons, paper_table, summary_table  # noqa: F401  (API)
