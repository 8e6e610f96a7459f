"""Cross-process locks around the shared cache and reports folder.

Any number of ``verifylib run`` processes may share one cache (``$VERIFYLIB_CACHE``) and
one reports folder. Every entry they produce there is content-addressed (a source by its
git tree id, a build by its key, a model by its digest), so two processes that want the
same entry want the same bytes: one of them must produce it while the other waits and
then reuses it. Without that, two CMake runs filled one build folder and one of them
failed (a false REJECTED), and a second fetch replaced a source folder another build was
reading.

The operating-system lock comes from the maintained ``filelock`` package (``flock`` on
POSIX, so a lock dies with its process: a killed holder never leaves a stale lock). This
module only adds what the cache needs on top of it:

* one lock file per entry, ``<root>/<kind>-<key>.lock``, held only while that one entry is
  produced, so unrelated entries (another variant, another model) never wait on each other;
* a holder record beside it (pid, host, command, what it produces, since when) so that a
  process that has to wait can say who it waits for, instead of appearing to hang;
* :func:`produce_once`, the check / lock / re-check / produce pattern every producer uses.
"""

from __future__ import annotations

import os
import re
import socket
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, TypeVar

from filelock import FileLock, Timeout

from verifylib.canonical import read_json, write_json
from verifylib.errors import ParametersInvalid, RunFailure

__all__ = ["LockTimeout", "LOCKS_DIR", "lock_path", "holder_of", "held", "produce_once"]

LOCKS_DIR = "locks"
"""Folder of the cache's lock files, ``<cache>/locks``."""

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_HOLDER_SUFFIX = ".holder.json"
# How often a waiter repeats its progress line: often enough that a user sees it is alive,
# rarely enough that a 5-minute build does not flood the output.
_REMIND_SECONDS = 60.0
_POLL_SECONDS = 0.2
_GRACE_SECONDS = 0.5

RELAYED_ENV = "VERIFYLIB_KERNEL_RELAYED"
"""Set (to ``1``) in the environment of a stage kernel whose printed lines ``verifylib run``
relays to its console as they come (:mod:`verifylib.batch.kernel`): a waiting line is then
not echoed to the kernel's stderr as well, which would print it twice."""

T = TypeVar("T")


class LockTimeout(RunFailure):
    """A lock held by another process was not released within the allowed time."""


def _stderr_echo(line: str) -> None:
    # Inside a stage kernel, print() lands in the notebook, which the user running
    # `verifylib run` does not see until the stage ends; the kernel's original stderr is
    # the terminal. Outside a kernel the two are the same stream and nothing is repeated.
    orig = getattr(sys, "__stderr__", None)
    if orig is None or orig is sys.stderr or os.environ.get(RELAYED_ENV):
        return
    try:
        orig.write(line + "\n")
        orig.flush()
    except (OSError, ValueError):
        pass


def lock_path(root: str | os.PathLike, kind: str, key: str) -> Path:
    """Return the lock file of one entry.

    Parameters
    ----------
    root : path-like
        Folder of the lock files (``<cache>/locks`` for cache entries).
    kind : str
        What the entry is (``"build"``, ``"source"``, ``"model"``, ...).
    key : str
        The entry's content key (hex digest or another file-name-safe string).

    Returns
    -------
    Path
        ``<root>/<kind>-<key>.lock``.

    Raises
    ------
    verifylib.errors.ParametersInvalid
        If ``kind`` or ``key`` is not a plain file-name component.
    """
    for label, value in (("kind", kind), ("key", key)):
        if not isinstance(value, str) or not _NAME_RE.match(value) or len(value) > 128:
            raise ParametersInvalid(f"lock {label} must be a short file-name-safe string, "
                                    f"got {value!r}")
    return Path(root) / f"{kind}-{key}.lock"


def _holder_file(lock: Path) -> Path:
    return lock.with_name(lock.name + _HOLDER_SUFFIX)


def holder_of(lock: str | os.PathLike) -> dict | None:
    """Read the holder record of a lock, as its holder wrote it, or None.

    The record is advisory: written right after the lock is taken and removed right
    before it is released, so it may be missing (between those moments) or left over by a
    killed holder. It is only ever used to tell a waiting user who they wait for.

    Parameters
    ----------
    lock : path-like
        A lock file (see :func:`lock_path`).

    Returns
    -------
    dict or None
        ``{"pid", "host", "command", "what", "since"}`` when readable.
    """
    try:
        rec = read_json(_holder_file(Path(lock)))
    except (OSError, ValueError):
        return None
    return rec if isinstance(rec, dict) else None


def _describe(rec: dict | None) -> str:
    if not rec:
        return "another process"
    since = rec.get("since")
    age = f", for {time.time() - since:.0f} s" if isinstance(since, (int, float)) else ""
    if rec.get("pid") == os.getpid() and rec.get("host") == socket.gethostname():
        # Two threads of this process need one entry (stage 01's builds share one ggml
        # build): this step is waiting for its own other half, not for a competitor.
        return (f"pid {rec.get('pid')}, this process itself: another of its threads is "
                f"producing {rec.get('what')}{age}")
    return (f"pid {rec.get('pid')} on {rec.get('host')} ({rec.get('command')}), producing "
            f"{rec.get('what')}{age}")


def _short(argv: list[str]) -> str:
    if not argv:
        return "?"
    text = " ".join([Path(argv[0]).name] + list(argv[1:]))
    return text if len(text) <= 200 else text[:197] + "..."


def _command_line() -> str:
    own = _short(list(sys.argv)) if sys.argv and sys.argv[0] else "python"
    if "ipykernel" not in sys.modules:
        return own
    # A stage kernel's own command line (``ipykernel_launcher.py -f …``) says nothing to
    # the user; the ``verifylib run`` that started it does.
    try:
        import psutil
        parent = psutil.Process(os.getppid())
        return f"stage kernel of: {_short(parent.cmdline())}"
    except Exception:  # noqa: BLE001 - advisory text only
        return own


@contextmanager
def held(root: str | os.PathLike, kind: str, key: str, *, what: str,
         log: Callable[[str], None] = print, timeout: float | None = None) -> Iterator[Path]:
    """Hold the lock of one entry for the duration of a ``with`` block.

    When another process holds it, a progress line names the holder (pid, host, command,
    what it produces, for how long) and repeats every minute while waiting.

    Parameters
    ----------
    root : path-like
        Folder of the lock files (created if missing).
    kind, key : str
        Name the entry (see :func:`lock_path`).
    what : str
        What the holder produces, for other processes' progress lines
        (e.g. ``"whisper-cli [ggml] build 26a2fd81…"``).
    log : callable
        Receives the progress lines (also echoed to the terminal from a stage kernel).
    timeout : float, optional
        Seconds to wait at most; default wait as long as the holder lives (a killed
        holder releases the lock with its process).

    Yields
    ------
    Path
        The lock file.

    Raises
    ------
    LockTimeout
        If ``timeout`` passed while another process held the lock.
    """
    path = lock_path(root, kind, key)
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(path)
    t0 = time.monotonic()
    try:
        # A short grace before saying anything: most waits end within it, and by its end
        # the holder has written its record, so the line can name it.
        lock.acquire(timeout=_GRACE_SECONDS if timeout is None else min(timeout, _GRACE_SECONDS),
                     poll_interval=0.05)
    except Timeout:
        while True:
            line = (f"waiting for {what}: lock {path.name} is held by "
                    f"{_describe(holder_of(path))}")
            log(line)
            _stderr_echo(f"verifylib: {line}")
            step = _REMIND_SECONDS
            if timeout is not None:
                left = timeout - (time.monotonic() - t0)
                if left <= 0:
                    raise LockTimeout(f"gave up after {timeout:.0f} s {line}") from None
                step = min(step, left)
            try:
                lock.acquire(timeout=step, poll_interval=_POLL_SECONDS)
                break
            except Timeout:
                continue
        waited = time.monotonic() - t0
        log(f"lock {path.name} acquired after waiting {waited:.0f} s")
        _stderr_echo(f"verifylib: lock {path.name} acquired after waiting {waited:.0f} s")
    holder = _holder_file(path)
    try:
        try:
            write_json(holder, {"pid": os.getpid(), "host": socket.gethostname(),
                                "command": _command_line(), "what": what,
                                "since": time.time()})
        except OSError:
            pass  # the record is advisory; the lock itself is what serializes
        yield path
    finally:
        try:
            holder.unlink(missing_ok=True)
        finally:
            lock.release()


def produce_once(root: str | os.PathLike, kind: str, key: str, *, check: Callable[[], T | None],
                 produce: Callable[[], T], what: str, log: Callable[[str], None] = print,
                 timeout: float | None = None) -> T:
    """Return a content-addressed entry, producing it at most once across processes.

    ``check`` is tried first without the lock (the common, warm case costs no lock). If it
    finds nothing usable, the entry's lock is taken and ``check`` runs again: a process
    that waited while another produced the entry reuses that entry (after ``check`` has
    verified it) instead of producing it over it. Only then does ``produce`` run, still
    under the lock, so no two processes ever fill one staging or build folder.

    Parameters
    ----------
    root : path-like
        Folder of the lock files.
    kind, key : str
        Name the entry (see :func:`lock_path`).
    check : callable
        Returns the verified, published entry, or None when there is none to reuse. It
        must not modify anything outside the lock (it runs once without it).
    produce : callable
        Produces and publishes the entry (atomically) and returns it.
    what : str
        Description for other processes' progress lines.
    log : callable
        Receives progress lines.
    timeout : float, optional
        See :func:`held`.

    Returns
    -------
    object
        What ``check`` or ``produce`` returned.

    Raises
    ------
    LockTimeout
        See :func:`held`; anything ``check`` or ``produce`` raises passes through (the
        lock is released).
    """
    found = check()
    if found is not None:
        return found
    with held(root, kind, key, what=what, log=log, timeout=timeout):
        found = check()
        if found is not None:
            return found
        return produce()
