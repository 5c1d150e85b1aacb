"""``python -m ner_lightning.precision [measure|show|clear] ...`` (ner_lightning/precision/choice.py)."""

from ner_lightning.precision.choice import main

raise SystemExit(main())
