"""``python -m ner_lightning.export CELL [--out DIR]`` (ner_lightning/export/folder.py)."""

import sys

from ner_lightning.export.folder import main

sys.exit(main())
