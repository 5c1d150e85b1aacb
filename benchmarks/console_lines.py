"""Console lines per cell of a sweep, progress bars left out: runs the command given after
``--`` (a ``-m`` sweep) and counts what it prints.

    python benchmarks/console_lines.py -- python -m ner_lightning.run -m loss=auc2t,ce size=20,50

A progress bar redraws itself with carriage returns (tqdm) or cursor moves (rich); those
updates, and the metric columns a bar wraps onto following lines in a narrow terminal, count as
the bar. Every other line counts, once.
"""
from __future__ import annotations

import re
import subprocess
import sys
import time

BAR = re.compile(r"\r|\x1b\[|it/s\]|s/it\]|^\s*(Epoch|Validation|Testing|Sanity Checking)\b")
WRAPPED_METRIC = re.compile(r"^\s{20,}\S.*$")  # a bar's metric column wrapped onto its own line


def main(argv: list[str]) -> int:
    if "--" not in argv:
        raise SystemExit(__doc__)
    command = argv[argv.index("--") + 1:]
    t0 = time.monotonic()
    proc = subprocess.run(command, capture_output=True, text=True)
    lines = (proc.stdout + proc.stderr).split("\n")
    kept = [line for line in lines if line.strip() and not BAR.search(line) and not WRAPPED_METRIC.match(line)]
    cells = max(1, sum(" | train: " in line for line in kept))
    print("\n".join(kept))
    print(f"\n{len(kept)} lines outside progress bars for {cells} cells: {len(kept) / cells:.1f} per cell "
          f"(exit code {proc.returncode}, {time.monotonic() - t0:.0f} s)")
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
