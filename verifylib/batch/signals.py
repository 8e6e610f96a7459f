"""Interrupts of a batch: SIGINT and SIGTERM become :class:`Interrupted`.

They are deferred where a step must finish.
"""

from __future__ import annotations

import signal
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM arrived while :func:`interrupts_raise` was active.

    A subclass of KeyboardInterrupt because asyncio (which papermill's kernel client
    runs on) re-raises only KeyboardInterrupt and SystemExit out of its callbacks; any
    other exception raised by a signal handler there is logged and swallowed, and the
    run would go on.

    Parameters
    ----------
    signum : int
        The signal received; its name is the exception's message.

    Attributes
    ----------
    signum : int
        The signal received.
    """

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@dataclass
class InterruptScope:
    """State of one :func:`interrupts_raise` block.

    Attributes
    ----------
    signum : int or None
        The first signal received, if any.
    published : list of Path
        Run directories :func:`run_one` published inside the block, so an interrupt
        report never says "nothing published" when a complete run was.
    """

    signum: int | None = None
    published: list = field(default_factory=list)


_SCOPE: InterruptScope | None = None


@contextmanager
def interrupts_raise() -> Iterator[InterruptScope]:
    """Turn SIGINT and SIGTERM into :class:`Interrupted` for the duration of the block.

    Only the first signal raises; later ones are ignored until the block ends, so a
    second Ctrl-C cannot cut short the kernel shutdown and staging removal that the
    first one started (both are bounded: papermill kills the kernel after a few
    seconds). The previous handlers are restored on exit. Outside the main thread
    signals cannot be handled, and the block only tracks publications.

    Yields
    ------
    InterruptScope
        The block's state: the first signal received and the runs published in it.
    """
    global _SCOPE
    scope, outer = InterruptScope(), _SCOPE

    def handler(signum, frame):  # noqa: ARG001 - signal handler signature
        if scope.signum is None:
            scope.signum = signum
            raise Interrupted(signum)

    previous = {}
    try:
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, handler)
    except ValueError:  # not the main thread
        pass
    _SCOPE = scope
    try:
        yield scope
    finally:
        _SCOPE = outer
        for sig, old in previous.items():
            signal.signal(sig, old)


def note_published(run_dir: Path) -> None:
    """Record a run published inside the active :func:`interrupts_raise` block, if any.

    An interrupt report then names the runs that were published before the signal.

    Parameters
    ----------
    run_dir : Path
        The published run directory.
    """
    if _SCOPE is not None:
        _SCOPE.published.append(Path(run_dir))


def interrupt_pending() -> int | None:
    """Return the signal that interrupted the active :func:`interrupts_raise` block, if any.

    Returns
    -------
    int or None
        The first signal number received in the innermost active block; None outside a
        block or when no signal came.
    """
    return _SCOPE.signum if _SCOPE is not None else None


@contextmanager
def signals_deferred() -> Iterator[None]:
    """Hold SIGINT/SIGTERM back until the block ends (its handler then runs at once).

    Cleanup that a signal cut short would leave a staging folder, a kernel or an
    unrecorded publication behind; a signal held back costs at most the block's time.
    Where ``signal.pthread_sigmask`` is missing, nothing is held back.

    Yields
    ------
    None
        Control, with SIGINT and SIGTERM blocked for the calling thread.
    """
    sigs = {signal.SIGINT, signal.SIGTERM}
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, sigs)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
