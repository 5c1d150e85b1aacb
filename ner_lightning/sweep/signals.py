"""Ctrl-C and SIGTERM while a cell or a sweep runs: raised as :class:`Interrupted` wherever the
process is (set-up, training, testing, between cells), recorded so that no ``except`` on the way
can turn them into an ordinary failure, and ended with exit code 130 / 143."""

from __future__ import annotations

import contextlib
import signal
import sys
from collections.abc import Iterator

EXIT_CODES: dict[int, int] = {signal.SIGINT: 130, signal.SIGTERM: 143}  # 128 + the signal, as shells report them
_received: list[int] = []  # the signals this process received while a handler of ours was installed


class Interrupted(BaseException):
    """Ctrl-C or SIGTERM (not an ``Exception``: nothing may swallow it)."""

    def __init__(self, signum: int):
        super().__init__(f"interrupted by {signal.Signals(signum).name}")
        self.signum = signum


def _raise_interrupted(signum: int, _frame) -> None:
    _received.append(signum)
    raise Interrupted(signum)


@contextlib.contextmanager
def interrupts_raised() -> Iterator[None]:
    """Install the handlers while the block runs; left alone where another handler is installed
    (submitit's, under the SLURM launcher, or ours already)."""
    defaults = {signal.SIGINT: signal.default_int_handler, signal.SIGTERM: signal.SIG_DFL}
    previous = {s: signal.getsignal(s) for s in defaults}
    for s, default in defaults.items():
        if previous[s] is default:
            signal.signal(s, _raise_interrupted)
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def exit_code(err: BaseException) -> int | None:
    """The exit code of an interrupted cell or sweep (130 Ctrl-C, 143 SIGTERM), or None for a failure."""
    if _received:  # whatever the signal's exception became on its way up
        return EXIT_CODES[_received[-1]]
    if isinstance(err, Interrupted):
        return EXIT_CODES[err.signum]
    if "pytorch_lightning" in sys.modules:  # else no error here can be Lightning's
        from pytorch_lightning.utilities.exceptions import SIGTERMException

        if isinstance(err, SIGTERMException):
            return EXIT_CODES[signal.SIGTERM]
    if isinstance(err, (KeyboardInterrupt, SystemExit)):  # Lightning turns Ctrl-C into SystemExit(1)
        return EXIT_CODES[signal.SIGINT]
    return None
