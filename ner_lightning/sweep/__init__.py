"""Launching grids: the sweeper that writes the manifest and resumes, device slots for parallel
jobs, the per-cell records a sweep's status is read from, and ``python -m ner_lightning.sweep``.

A sweep folder holds ``manifest.json`` (the whole expanded grid, written before the first cell
starts) and one folder per cell with ``cell.json`` (start), then ``results.json`` or
``failure.json`` (end). See README "Sweeps at scale".
"""
