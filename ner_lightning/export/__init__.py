"""Exports: a trained cell as a folder that tags new text, and reading such a folder back.

``folder`` writes an export (and ``python -m ner_lightning.export CELL``) and loads one;
``trust`` decides what a config read from a file made elsewhere may build, before anything is
imported; ``model_card`` writes the folder's README; ``portable_paths`` keeps the exporting
machine's folders out of it; ``predict`` tags CoNLL or plain text with an export
(``python -m ner_lightning.predict``). The cell wing calls ``export_model`` and ``load_weights``
when a cell ends; nothing else below imports this wing.
"""
