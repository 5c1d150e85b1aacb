"""Shared test helpers."""
from __future__ import annotations

from ner_lightning.cell import steps as cell
from ner_lightning.cell import protocols


def train(cfg, **kwargs) -> dict:
    """Run one cell in-process (``protocols.train``) and return its ``results.json`` content."""
    return protocols.train(cfg, **kwargs).to_json()


def train_watching(cfg, monkeypatch) -> tuple[dict, dict[str, float]]:
    """Run one cell in-process; returns its results and, per floating-point tensor of the module's
    state, how far it ended from its value when the module was built (max |change|) — what the
    run trained, and what it left alone."""
    built = {}
    real = cell.build_module

    def build(*args):
        module = real(*args)
        built["module"] = module
        built["start"] = {k: v.detach().clone() for k, v in module.state_dict().items()}
        return module

    monkeypatch.setattr(cell, "build_module", build)
    results = train(cfg)
    end = built["module"].state_dict()
    return results, {k: (end[k].detach().cpu() - v.cpu()).abs().max().item()
                     for k, v in built["start"].items() if v.is_floating_point() and v.numel()}
