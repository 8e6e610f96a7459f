"""Cross-process coordination over the shared cache: locks, and owned staging folders.

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
  produced, so unrelated entries (another variant, another model) never wait on each other.
  The holder removes it before releasing it, so the folder holds only the locks being held
  (one per digest ever imported used to stay, 0 bytes each, refused inputs' too). A waiter
  that opened the file before its removal may then lock the removed file: it finds the file
  no longer linked at its path, releases it and takes the lock anew (:func:`held`). A file
  left by a killed holder is reused by the next one, and removed by it;
* a holder record beside it (pid, host, command, what it produces, since when) so that a
  process that has to wait can say who it waits for, instead of appearing to hang;
* :func:`produce_once`, the check / lock / re-check / produce pattern every producer uses.

A lock dies with its holder, but what the holder was writing does not: a process killed
outright (SIGKILL, the OOM killer, power loss) runs no ``finally``, and its half-written
staging folder stays where it was made, in the cache (a 148 MB ``models/ggml/.staging-*``
after a killed import) or in ``$TMPDIR``. So every such folder is owned
(:func:`make_owned_dir`): an owner record beside it (``<folder>.owner.json``: pid,
process start, host), and whoever makes the next folder of its family in the same place
first removes those whose owner is provably gone (:func:`sweep_owned_dirs`), as
``verifylib run`` does for the whole cache when it starts (:func:`sweep_cache_staging`).
A run's staging folder in the reports folder follows the same rule
(:mod:`verifylib.batch.staging`). "Provably gone" is strict: the owner is on this host and
its pid is free, a zombie, or belongs to a process started at another time; a record from
another host (a cache on a shared disk) is never called gone. A folder without a readable
record (made by a verifylib that wrote none, or caught between its creation and its
record) is removed only once nothing in it has changed for :data:`UNOWNED_STALE_SECONDS`.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, TypeVar

from filelock import FileLock, Timeout

from verifylib.canonical import read_json, write_json
from verifylib.errors import ParametersInvalid, RunFailure

__all__ = ["LockTimeout", "LOCKS_DIR", "lock_path", "holder_of", "held", "produce_once",
           "OWNER_SUFFIX", "STAGING_PREFIX", "UNOWNED_STALE_SECONDS", "process_start",
           "owner_record", "owner_is_gone", "newest_mtime", "make_owned_dir",
           "remove_owned_dir", "sweep_owned_dirs", "NESTED_AREAS", "sweep_cache_staging"]

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


def _wait(lock: FileLock, path: Path, what: str, log: Callable[[str], None],
          timeout: float | None, t0: float) -> None:
    """Acquire ``lock``, saying who holds it while waiting; raise LockTimeout past ``timeout``."""
    left = None if timeout is None else max(0.0, timeout - (time.monotonic() - t0))
    try:
        # A short grace before saying anything: most waits end within it, and by its end
        # the holder has written its record, so the line can name it.
        lock.acquire(timeout=_GRACE_SECONDS if left is None else min(left, _GRACE_SECONDS),
                     poll_interval=0.05)
        return
    except Timeout:
        pass
    while True:
        line = f"waiting for {what}: lock {path.name} is held by {_describe(holder_of(path))}"
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


def _is_linked(fd: int, path: Path) -> bool:
    """Whether the locked file ``fd`` is still the file at ``path``."""
    held_stat = os.fstat(fd)
    try:
        return held_stat.st_nlink > 0 and os.path.samestat(held_stat, os.stat(path))
    except FileNotFoundError:
        return False


@contextmanager
def held(root: str | os.PathLike, kind: str, key: str, *, what: str,
         log: Callable[[str], None] = print, timeout: float | None = None) -> Iterator[Path]:
    """Hold the lock of one entry for the duration of a ``with`` block.

    When another process holds it, a progress line names the holder (pid, host, command,
    what it produces, for how long) and repeats every minute while waiting. The lock file
    is removed when the block ends (see the module's notes).

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
    t0 = time.monotonic()
    while True:
        path.parent.mkdir(parents=True, exist_ok=True)
        # flock's descriptor, given once the lock is taken; none on a file system without
        # flock, where filelock falls back to a lock whose file is the lock itself.
        fds: list[int] = []
        lock = FileLock(path, on_acquired=fds.append)
        _wait(lock, path, what, log, timeout, t0)
        if not fds or _is_linked(fds[-1], path):
            break
        lock.release()  # its holder removed the file after we opened it: lock the new one
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
            if fds:
                # Removed while still held: whoever locks it next finds it unlinked, as
                # _is_linked checks, and retries on the path's new file.
                path.unlink(missing_ok=True)
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


# ----------------------------------------------------------------------------- owned folders

OWNER_SUFFIX = ".owner.json"
"""Suffix of the owner record beside an owned folder."""

STAGING_PREFIX = ".staging-"
"""The family of the cache's staging folders: every producer's staging name starts so."""

UNOWNED_STALE_SECONDS = 3600.0
"""How long a folder without a readable owner record must stay unchanged to be removed."""


def process_start(pid: int) -> str | None:
    """Identify process ``pid``'s start, or return None when no such live process exists.

    A pid alone is not an identity: the kernel reuses pids, so a dead owner's pid may
    belong to an unrelated process by the time anyone looks. The start time (in clock
    ticks since boot, plus the boot id) tells the two apart; a zombie counts as gone.

    Parameters
    ----------
    pid : int
        The process.

    Returns
    -------
    str or None
        ``linux:<boot id>:<ticks>``, ``psutil:<start time>``, ``unknown`` (alive, start not
        readable), or None when the process does not exist or is a zombie.
    """
    stat = Path(f"/proc/{pid}/stat")
    if Path("/proc/self/stat").exists():
        try:
            text = stat.read_text()
        except OSError:
            return None
        fields = text[text.rindex(")") + 2:].split()
        if fields[0] in ("Z", "X"):
            return None
        try:
            boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        except OSError:
            boot = "?"
        return f"linux:{boot}:{fields[19]}"
    try:
        import psutil
    except ImportError:
        psutil = None
    if psutil is not None:
        try:
            proc = psutil.Process(pid)
            if proc.status() == psutil.STATUS_ZOMBIE:
                return None
            return f"psutil:{proc.create_time():.2f}"
        except psutil.NoSuchProcess:
            return None
        except psutil.Error:
            pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass
    return "unknown"


def owner_record(pid: int | None = None) -> dict:
    """Build the owner record written beside an owned folder.

    Parameters
    ----------
    pid : int, optional
        Owner process (this one by default).

    Returns
    -------
    dict
        ``pid``, ``start`` (see :func:`process_start`), ``host`` and ``created``.
    """
    pid = os.getpid() if pid is None else pid
    return {"pid": pid, "start": process_start(pid), "host": socket.gethostname(),
            "created": time.time()}


def owner_is_gone(record: dict) -> bool:
    """Tell whether the record's owner provably no longer runs.

    An owner on another host cannot be checked from here and is never called gone; an
    owner whose start identity cannot be compared (``unknown``, or recorded with another
    method) is gone only when its pid no longer exists.

    Parameters
    ----------
    record : dict
        As written by :func:`owner_record`.

    Returns
    -------
    bool
        True only when the owner is on this host and its pid is free (or a zombie), or
        its comparable start identity differs from the recorded one.

    Raises
    ------
    KeyError, ValueError
        For a malformed record.
    """
    pid, start, host = record["pid"], record["start"], record["host"]
    if type(pid) is not int or pid <= 0 or not isinstance(start, (str, type(None))) \
            or not isinstance(host, str):
        raise ValueError(f"malformed owner record: {record!r}")
    if host != socket.gethostname():
        return False
    now = process_start(pid)
    if now is None:
        return True
    comparable = start not in (None, "unknown") and now != "unknown" and \
        start.split(":", 1)[0] == now.split(":", 1)[0]
    return comparable and now != start


def newest_mtime(path: Path) -> float:
    """Return the newest modification time of ``path`` and everything under it.

    Parameters
    ----------
    path : Path
        A folder (or file); entries that vanish while walked are skipped.

    Returns
    -------
    float
        Seconds since the epoch.
    """
    newest = path.lstat().st_mtime
    for dirpath, dirnames, filenames in os.walk(path):
        for name in dirnames + filenames:
            try:
                newest = max(newest, os.lstat(os.path.join(dirpath, name)).st_mtime)
            except OSError:
                pass
    return newest


def _record_of(folder: Path) -> Path:
    return folder.with_name(folder.name + OWNER_SUFFIX)


def make_owned_dir(parent: Path, prefix: str, *, family: str | None = None) -> Path:
    """Make a fresh folder in ``parent``, owned by this process; sweep its family first.

    Parameters
    ----------
    parent : Path
        Where (created if missing).
    prefix : str
        Start of the folder's name (a random part follows, as :func:`tempfile.mkdtemp`).
    family : str, optional
        Name start shared by the folders swept first (:func:`sweep_owned_dirs`);
        ``prefix`` by default.

    Returns
    -------
    Path
        The folder, empty, its owner record written beside it.
    """
    family = prefix if family is None else family
    if not prefix.startswith(family):
        raise ValueError(f"prefix {prefix!r} is not of the family {family!r}")
    parent.mkdir(parents=True, exist_ok=True)
    sweep_owned_dirs(parent, family)
    folder = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    try:
        write_json(_record_of(folder), owner_record())
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    return folder


def remove_owned_dir(folder: Path) -> None:
    """Remove an owned folder (if still there) and its owner record.

    Parameters
    ----------
    folder : Path
        As :func:`make_owned_dir` returned it; once renamed into place only its record is
        left to remove.
    """
    shutil.rmtree(folder, ignore_errors=True)
    if not folder.exists():
        _record_of(folder).unlink(missing_ok=True)


def sweep_owned_dirs(parent: Path, family: str, *, now: float | None = None) -> list[Path]:
    """Remove the folders of a family in ``parent`` whose owner is provably gone.

    Parameters
    ----------
    parent : Path
        The folder holding them.
    family : str
        Their names' start (``.staging-``, ``verifylib-kernel-``); other entries, and
        symbolic links, are never touched.
    now : float, optional
        Current time, for the age rule of folders without a record (tests).

    Returns
    -------
    list of Path
        The folders removed (records whose folder is gone are removed silently).
    """
    now = time.time() if now is None else now
    try:
        names = sorted(os.listdir(parent))
    except OSError:
        return []
    removed: list[Path] = []
    for name in names:
        if not name.startswith(family):
            continue
        is_record = name.endswith(OWNER_SUFFIX)
        folder = parent / (name[:-len(OWNER_SUFFIX)] if is_record else name)
        if is_record and folder.name in names:
            continue  # judged with its folder
        if not is_record and (folder.is_symlink() or not folder.is_dir()):
            continue
        if _owner_gone(folder, now):
            remove_owned_dir(folder)
            if not is_record and not folder.exists():
                removed.append(folder)
    return removed


def _owner_gone(folder: Path, now: float) -> bool:
    """Whether ``folder`` (or its record, when the folder is gone) may be removed."""
    record = _record_of(folder)
    try:
        return owner_is_gone(json.loads(record.read_text()))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        pass
    try:
        age = now - (newest_mtime(folder) if folder.exists() else record.lstat().st_mtime)
    except OSError:
        return False
    return age > UNOWNED_STALE_SECONDS


NESTED_AREAS = ("models/ggml",)
"""Cache areas below the top level that hold staging folders (the top-level areas all may)."""


def sweep_cache_staging(cache_dir: Path) -> list[Path]:
    """Remove the cache's staging folders whose owner is provably gone.

    Every producer sweeps its own area when it makes a staging folder; this sweeps every
    area at once, as ``verifylib run`` does when it starts, so a folder left by a killed
    import goes even when later runs never produce beside it.

    Parameters
    ----------
    cache_dir : Path
        The cache (``$VERIFYLIB_CACHE``). Its top-level areas (``sources/``, ``builds/``,
        ``models/`` …) and :data:`NESTED_AREAS` are swept, nothing inside a published
        entry.

    Returns
    -------
    list of Path
        The folders removed.
    """
    cache_dir = Path(cache_dir)
    try:
        areas = sorted(p for p in cache_dir.iterdir() if p.is_dir() and not p.is_symlink())
    except OSError:
        return []
    areas += [cache_dir / rel for rel in NESTED_AREAS]
    removed: list[Path] = []
    for area in areas:
        removed += sweep_owned_dirs(area, STAGING_PREFIX)
    return removed
