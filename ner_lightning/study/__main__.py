"""``python -m ner_lightning.study CLAIMS.yaml [--sequential] [OVERRIDE ...]`` (the same as
``ner-lightning study``; ner_lightning/study/runner.py)."""

from ner_lightning.study.runner import main

main()
