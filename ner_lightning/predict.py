"""``python -m ner_lightning.predict EXPORT INPUT [--out FILE]``: tag text with an exported model,
writing CoNLL. The command's code lives with the exports: ner_lightning/export/predict.py."""

import sys

from ner_lightning.export.predict import main

if __name__ == "__main__":
    sys.exit(main())
