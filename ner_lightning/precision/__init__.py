"""Precision: the fastest precision this machine really has for an encoder, measured.

``measure`` times the candidate precisions (interleaved rounds, paired ratios to fp32) and judges
whether the machine was quiet enough to trust them; ``choice`` turns a trusted measurement into
the cached choice behind ``${best_precision:…}`` and records it in each cell's results; ``plugin`` is
the Lightning precision a Trainer gets for it. ``choice`` is
also the command ``python -m ner_lightning.precision``. It uses ``hardware`` (which precisions are
native) below it; the resolvers and the cell wing use it.
"""
