"""Progress lines for long steps: one line at least every :data:`INTERVAL` seconds.

A cold audit spends minutes in single steps (a source download, a whisper.cpp build, an
encoder conversion, the lifecycle A/B loop). A user who sees nothing for that long cannot
tell work from a hang. A :class:`Ticker` prints a line naming the step and its elapsed
time every :data:`TICK` seconds until the step ends; :func:`verifylib.runtime.runner.run`
takes one and feeds it the child's output, so the line also carries cmake's own ``[NN%]``.

Why this is hand-written: the lines go through the caller's ``log`` (``print`` in a stage
kernel, whose output the CLI relays with its ``[model]`` prefix), so they must be plain
lines, not a terminal progress bar (tqdm and rich redraw one line, which a notebook
output and a ``--jobs`` prefix cannot carry). Nothing here touches evidence.
"""

from __future__ import annotations

import re
import threading
import time
from typing import Callable

INTERVAL = 15.0
"""Seconds between two progress lines of one step (the issue's upper bound)."""

TICK = 10.0
"""How often a step actually prints: below :data:`INTERVAL`, so scheduling jitter and a
slow log consumer never stretch a gap past it."""

_PERCENT_RE = re.compile(rb"\[\s*(\d{1,3})%\]")

# When a ticker that is not ``outer`` last printed (any thread): what silences the outer ones.
_last_inner = [0.0]


def elapsed_text(seconds: float) -> str:
    """Format elapsed seconds for a progress line: ``42 s`` or ``3 min 05 s``.

    Parameters
    ----------
    seconds : float
        Elapsed time.

    Returns
    -------
    str
    """
    s = int(seconds)
    return f"{s} s" if s < 60 else f"{s // 60} min {s % 60:02d} s"


class Ticker:
    """Print ``<label>: <elapsed> …`` every :data:`TICK` seconds while a step runs.

    Parameters
    ----------
    label : str
        What runs, e.g. ``building whisper-cli [ggml-asan]``.
    log : callable
        Receives each line.
    interval : float
        Seconds between lines.

    outer : bool
        A catch-all around a larger step (a whole gate): it stays silent while any other
        ticker has printed within ``interval``, so a step inside it that names itself
        more precisely (a build, a conversion) is not shown twice.
    announce : str, optional
        A line printed when the ticker starts (the step's first line).

    Notes
    -----
    :meth:`output` feeds it a child's output as it arrives; the line then ends with the
    last cmake-style ``[NN%]`` seen, so a build shows how far it is.
    """

    def __init__(self, label: str, log: Callable[[str], None], interval: float = TICK,
                 *, outer: bool = False, announce: str | None = None):
        self.label = label
        self.log = log
        self.interval = interval
        self.outer = outer
        self.announce = announce
        self._t0 = time.monotonic()
        self._percent: int | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def output(self, chunk: bytes) -> None:
        """Take a chunk of a child's output and remember its last ``[NN%]``.

        Parameters
        ----------
        chunk : bytes
            Raw bytes, as read.
        """
        found = _PERCENT_RE.findall(chunk)
        if found:
            self._percent = int(found[-1])

    def line(self) -> str:
        """Return the progress line for now.

        Returns
        -------
        str
        """
        text = f"{self.label}: {elapsed_text(time.monotonic() - self._t0)}"
        if self._percent is not None:
            text += f", [{self._percent:3d}%]"
        return text + " …"

    def start(self) -> "Ticker":
        """Start printing in a daemon thread; returns itself."""
        self._t0 = time.monotonic()
        if self.announce is not None:
            if not self.outer:
                _last_inner[0] = self._t0
            self.log(self.announce)
        self._thread = threading.Thread(target=self._loop, name=f"progress {self.label}",
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop printing (idempotent); waits for the thread."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            if self.outer and time.monotonic() - _last_inner[0] < self.interval:
                continue
            if not self.outer:
                _last_inner[0] = time.monotonic()
            try:
                self.log(self.line())
            except Exception:  # noqa: BLE001  (a closed stream must not kill the step)
                return


class ticking:
    """Context manager: a :class:`Ticker` for a step of Python work (no child process).

    Parameters
    ----------
    label : str
        What runs, e.g. ``converting the fp32 encoder``.
    log : callable
        Receives each line.
    interval : float
        Seconds between lines.
    outer : bool
        See :class:`Ticker`.

    Examples
    --------
    >>> with ticking("tracing the encoder", print):  # doctest: +SKIP
    ...     trace()
    """

    def __init__(self, label: str, log: Callable[[str], None] = print,
                 interval: float = TICK, *, outer: bool = False) -> None:
        self._ticker = Ticker(label, log, interval, outer=outer, announce=f"{label} …")

    def __enter__(self) -> Ticker:
        return self._ticker.start()

    def __exit__(self, *exc: object) -> None:
        self._ticker.stop()


def last_drawing(line: str) -> str:
    """Return what a terminal shows of a line redrawn with carriage returns (tqdm's bars).

    Parameters
    ----------
    line : str
        One line, without its newline.

    Returns
    -------
    str
        Its text after the last carriage return (a trailing one ignored).
    """
    return line.rstrip("\r").rsplit("\r", 1)[-1]


class LineRelay:
    """A write-only text stream that hands each complete line to ``log``.

    papermill writes a stage kernel's standard output to such a stream as the kernel
    sends it (``execute_notebook(stdout_file=...)``), so the stage's own lines, progress
    lines included, reach the command line while the stage runs, not when it ends.

    Parameters
    ----------
    log : callable
        Receives each line, without its newline.
    """

    def __init__(self, log: Callable[[str], None]) -> None:
        self._log = log
        self._partial = ""

    def write(self, text: str) -> int:
        """Take text; every line it completes goes to ``log``.

        Parameters
        ----------
        text : str
            As the kernel sent it (any number of lines, possibly a partial one).

        Returns
        -------
        int
            Characters taken.
        """
        *lines, self._partial = (self._partial + text).split("\n")
        for line in lines:
            # A bar redrawn with carriage returns (tqdm) ends as its last drawing.
            self._log(last_drawing(line))
        return len(text)

    def flush(self) -> None:
        """Do nothing: a line goes out once it is complete (see :meth:`close`)."""

    def close(self) -> None:
        """Hand on a last line that never got its newline."""
        if self._partial:
            self._log(last_drawing(self._partial))
            self._partial = ""
