"""Shared test helpers."""
from __future__ import annotations

from ner_lightning import protocols


def train(cfg, **kwargs) -> dict:
    """Run one cell in-process (``protocols.train``) and return its ``results.json`` content."""
    return protocols.train(cfg, **kwargs).to_json()
