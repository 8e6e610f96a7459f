"""``verifylib run``: execute the six stage notebooks with papermill, then publish.

Each parameter file gets its own run directory, staged under
``reports/<name>/.staging/<run-id>`` and renamed to ``reports/<name>/<run-id>`` once the
receipt and both reports are written. A stage notebook that raises is kept (papermill
saves it with the error) and its unjudged gates become ERROR; later stages see that and
record NOT_RUN(prerequisite) for the gates that depended on it.

Interrupts (SIGINT, and SIGTERM under :func:`interrupts_raise`) publish nothing: the
stage kernel is shut down by papermill, the staging folder is removed and
:class:`Interrupted` reaches the caller. A process killed outright (SIGKILL, power loss)
cannot clean up, so every staging folder has an owner record beside it
(``.staging/<run-id>.owner.json``: pid, process start time, host) and
:func:`remove_stale_staging` removes the folders whose owner is provably gone.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import weakref
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Mapping, Sequence

from verifylib import canonical, resources
from verifylib.evidence import gates
from verifylib.views import report
from verifylib.errors import EvidenceInvalid
from verifylib.params import Params, load
from verifylib.evidence.receipt import build_receipt
from verifylib.stages.context import init_run_dir, new_run_id, read_stage_file

from jupyter_client.manager import AsyncKernelManager  # noqa: E402
from traitlets import CaselessStrEnum, default  # noqa: E402


class LocalKernelManager(AsyncKernelManager):
    """A kernel manager that talks to the stage kernels over local IPC sockets.

    The default TCP transport makes every kernel warn that it runs unencrypted on
    localhost; the kernels here never leave this host, and IPC needs no open port.
    """

    transport = CaselessStrEnum(["tcp", "ipc"], default_value="ipc", config=True)

    @default("ip")
    def _ip_default(self) -> str:
        # An IPC "address" is a socket path prefix; jupyter_client's default is relative to
        # the current folder, which is the notebooks folder (inside site-packages for a
        # wheel install) and would collect stray socket files there. And it numbers the
        # sockets by the first free name, so two kernels launched before either has bound
        # (the next stage's kernel starts while this one boots; concurrent audits) would
        # pick the same paths: every kernel gets a prefix of its own.
        import secrets
        import tempfile
        folder = Path(tempfile.gettempdir()) / f"verifylib-kernels-{os.getuid()}"
        folder.mkdir(mode=0o700, exist_ok=True)
        return str(folder / f"k-{os.getpid()}-{secrets.token_hex(4)}")

    async def shutdown_kernel(self, now: bool = False, restart: bool = False) -> None:
        """Shut the kernel down; at once (SIGKILL to its process group) after an interrupt.

        After an interrupt the cell's result is discarded anyway, and a graceful shutdown
        only lets the kernel race its own socket teardown against the interrupted cell's
        reply and print that error to the stderr it shares with ``verifylib run``.
        The interrupted cell's tasks are cancelled first: left pending, they would log
        "Kernel died" and "Task exception was never retrieved" once the kernel is gone.
        """
        interrupted = _interrupt_pending() is not None
        if interrupted:
            import asyncio
            current = asyncio.current_task()
            for task in asyncio.all_tasks():
                if task is not current:
                    task.cancel()
                    task.add_done_callback(_consume_result)
            _kill_kernel_tools(self.provisioner)
        await super().shutdown_kernel(now=now or interrupted, restart=restart)

    async def start_kernel(self, **kw) -> None:
        """Start the kernel and remember the manager for :func:`_kill_leftover_kernels`."""
        _KERNEL_MANAGERS.add(self)
        await super().start_kernel(**kw)


# papermill shuts a kernel down only once its client is up: an interrupt while the kernel
# starts leaves it running until it notices its parent is gone. run_one kills those.
_KERNEL_MANAGERS: "weakref.WeakSet[LocalKernelManager]" = weakref.WeakSet()


def _kill_kernel_tools(provisioner) -> None:
    """Kill what the kernel started in sessions of its own.

    verifylib.runtime.runner starts every tool (git, cmake, the compiler, whisper-cli) in a new
    session so that a timeout can kill its whole group; the kernel's process-group kill
    does not reach them, and a build orphaned by an interrupt would go on writing into the
    cache's work folder that the next run empties. They are found by parentage (psutil,
    an ipykernel dependency) while the kernel still lives.
    """
    proc = getattr(provisioner, "process", None)
    if proc is None or proc.poll() is not None:
        return
    try:
        import psutil
        tools = psutil.Process(proc.pid).children(recursive=True)
    except Exception:  # noqa: BLE001 - best effort: without psutil only the kernel dies
        return
    spare = {os.getpgrp(), getattr(provisioner, "pgid", None)}
    groups = set()
    for tool in tools:
        try:
            groups.add(os.getpgid(tool.pid))
        except OSError:
            pass
    for group in groups - spare:
        try:
            os.killpg(group, signal.SIGKILL)
        except OSError:
            pass
    for tool in tools:
        try:
            tool.kill()
        except psutil.Error:
            pass


def _kill_leftover_kernels() -> None:
    """Kill every stage kernel (and its tools) that is still running."""
    for km in list(_KERNEL_MANAGERS):
        proc = getattr(km.provisioner, "process", None)
        if proc is not None and proc.poll() is None:
            _kill_kernel_tools(km.provisioner)
            try:
                pgid = getattr(km.provisioner, "pgid", None)
                if pgid and hasattr(os, "killpg"):
                    os.killpg(pgid, signal.SIGKILL)  # the kernel leads its own group
                else:
                    proc.kill()
                proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                pass
            km.cleanup_connection_file()
            km.cleanup_ipc_files()
        _KERNEL_MANAGERS.discard(km)


def _consume_result(task) -> None:
    # Reading it marks a cancelled cell's exception as seen, so asyncio does not log it.
    if not task.cancelled():
        task.exception()


@dataclass
class RunOutcome:
    """What one parameter file's audit produced.

    Attributes
    ----------
    name : str
        Model name.
    run_dir : Path
        The published run directory.
    verdict : gates.Verdict
        The run's verdict.
    report : Path
        ``report.html``.
    stage_seconds : dict
        Per stage: ``wall`` (papermill, kernel and all) and ``verifylib`` (inside the
        stage's verifylib calls, from its sidecar).
    """

    name: str
    run_dir: Path
    verdict: gates.Verdict
    report: Path
    stage_seconds: dict = field(default_factory=dict)


def _notebook(stage: str) -> Path:
    return resources.notebook(stage)


def _error_text(exc: BaseException) -> str:
    # papermill's PapermillExecutionError carries the kernel-side traceback lines.
    tb = getattr(exc, "traceback", None)
    if tb:
        import re
        plain = "\n".join(re.sub(r"\x1b\[[0-9;]*m", "", line) for line in tb)
        return f"{getattr(exc, 'ename', type(exc).__name__)}: {getattr(exc, 'evalue', '')}\n{plain}"
    return f"{type(exc).__name__}: {exc}"


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM arrived while :func:`interrupts_raise` was active.

    A subclass of KeyboardInterrupt because asyncio (which papermill's kernel client
    runs on) re-raises only KeyboardInterrupt and SystemExit out of its callbacks; any
    other exception raised by a signal handler there is logged and swallowed, and the
    run would go on.

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


def _interrupt_pending() -> int | None:
    """The signal that interrupted the active :func:`interrupts_raise` block, if any."""
    return _SCOPE.signum if _SCOPE is not None else None


@contextmanager
def _signals_deferred() -> Iterator[None]:
    """Hold SIGINT/SIGTERM back until the block ends (its handler then runs at once).

    Cleanup that a signal cut short would leave a staging folder, a kernel or an
    unrecorded publication behind; a signal held back costs at most the block's time.
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


STAGING = ".staging"
OWNER_SUFFIX = ".owner.json"
# A staging folder without a readable owner record comes from a verifylib that wrote
# none (or a damaged disk); it is removed only when nothing in it changed for this long.
UNOWNED_STALE_SECONDS = 3600.0
_RUN_ID = re.compile(r"^\d{8}T\d{6}Z-[0-9a-f]{4,}$")


def _process_start(pid: int) -> str | None:
    """An identity of process ``pid``'s start, or None when no such live process exists.

    A pid alone is not an identity: the kernel reuses pids, so a dead owner's pid may
    belong to an unrelated process by the time anyone looks. The start time (in clock
    ticks since boot, plus the boot id) tells the two apart; a zombie counts as gone.
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
    """The owner record written beside a staging folder.

    Parameters
    ----------
    pid : int, optional
        Owner process (this one by default).

    Returns
    -------
    dict
        ``pid``, ``start`` (see :func:`_process_start`), ``host`` and ``created``.
    """
    pid = os.getpid() if pid is None else pid
    return {"pid": pid, "start": _process_start(pid), "host": socket.gethostname(),
            "created": time.time()}


def owner_is_gone(record: dict) -> bool:
    """True only when the record's owner provably no longer runs.

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
    now = _process_start(pid)
    if now is None:
        return True
    comparable = start not in (None, "unknown") and now != "unknown" and \
        start.split(":", 1)[0] == now.split(":", 1)[0]
    return comparable and now != start


def _newest_mtime(path: Path) -> float:
    newest = path.lstat().st_mtime
    for dirpath, dirnames, filenames in os.walk(path):
        for name in dirnames + filenames:
            try:
                newest = max(newest, os.lstat(os.path.join(dirpath, name)).st_mtime)
            except OSError:
                pass
    return newest


def remove_stale_staging(reports_root: Path, *, now: float | None = None) -> list[Path]:
    """Remove staging folders (and owner records) left by processes that are gone.

    Several ``verifylib run`` processes may share one reports folder, so a staging
    folder is removed only when (a) its owner record names this host and a process that
    no longer runs (its pid is free, a zombie, or now belongs to a process started at
    another time), or (b) it has no readable owner record and nothing in it changed for
    :data:`UNOWNED_STALE_SECONDS`. A record on another host keeps its folder: whether
    that owner lives cannot be told from here. Only ``<root>/<name>/.staging/<run-id>``
    entries are considered.

    Parameters
    ----------
    reports_root : Path
        The reports folder (``reports/`` by default).
    now : float, optional
        Current time, for the age rule (tests).

    Returns
    -------
    list of Path
        Staging folders removed (owner records without a folder are removed silently).
    """
    now = time.time() if now is None else now
    removed: list[Path] = []
    for area in sorted(Path(reports_root).glob(f"*/{STAGING}")):
        try:
            entries = sorted(area.iterdir())
        except OSError:
            continue
        for entry in entries:
            if entry.name.endswith(OWNER_SUFFIX):
                run_id, folder = entry.name[:-len(OWNER_SUFFIX)], None
            elif _RUN_ID.match(entry.name) and entry.is_dir() and not entry.is_symlink():
                run_id, folder = entry.name, entry
            else:
                continue
            if not _RUN_ID.match(run_id):
                continue
            owner = area / f"{run_id}{OWNER_SUFFIX}"
            if folder is None and (area / run_id).exists():
                continue  # judged with its folder
            try:
                record = json.loads(owner.read_text())
                gone = owner_is_gone(record)
            except (OSError, ValueError, KeyError, TypeError, AttributeError):
                record, gone = None, False
            if record is None:
                try:
                    age = now - (_newest_mtime(folder) if folder is not None
                                 else owner.lstat().st_mtime)
                except OSError:
                    continue
                gone = age > UNOWNED_STALE_SECONDS
            if not gone:
                continue
            if folder is not None:
                shutil.rmtree(folder, ignore_errors=True)
                if folder.exists():
                    continue
                removed.append(folder)
            owner.unlink(missing_ok=True)
        for empty in (area, area.parent):
            try:
                empty.rmdir()  # a live run's files keep them
            except OSError:
                break
    return removed


def _link_exclusive(path: Path, data: bytes) -> None:
    """Publish ``data`` at ``path`` complete and only if ``path`` does not exist yet.

    Written to a private file first and hard-linked into place: the link is atomic (no
    reader sees a partial record) and fails with FileExistsError when the name is taken.
    """
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.link(tmp, path)
    finally:
        os.unlink(tmp)


def _create_staging(staging: Path) -> None:
    """Reserve ``staging``'s run id: write the owner record, then create the folder it owns.

    The record comes first so that no staging folder ever exists without one (a folder
    without a record is treated as foreign until it is an hour old). It is created
    exclusively, so of two processes that drew the same run id exactly one gets it; the
    other gets FileExistsError and touches nothing of the winner's. Another process may
    remove the empty ``.staging`` area between our mkdir and our write; retry then.

    Raises
    ------
    FileExistsError
        When the run id is already taken in this staging area.
    """
    area = staging.parent
    owner = area / f"{staging.name}{OWNER_SUFFIX}"
    for attempt in range(5):
        area.mkdir(parents=True, exist_ok=True)
        try:
            _link_exclusive(owner, canonical.dumps(owner_record()))
        except FileNotFoundError:
            if attempt == 4:
                raise
            continue
        try:
            staging.mkdir()
        except BaseException:
            owner.unlink(missing_ok=True)
            raise
        return
    raise AssertionError("unreachable")


def _reserve_staging(model_root: Path) -> tuple[str, Path]:
    """Draw a run id no other run of this model holds and create its staging folder.

    Several ``verifylib run`` processes may audit the same model into one reports folder
    in the same second. An id is taken when its owner record exists (a run in progress)
    or its run directory does (a finished run: the record goes only after publication).

    Returns
    -------
    (str, Path)
        The run id and its staging folder ``<model_root>/.staging/<run-id>``.
    """
    for _ in range(100):
        run_id = new_run_id()
        staging = model_root / STAGING / run_id
        try:
            _create_staging(staging)
        except FileExistsError:
            continue
        if (model_root / run_id).exists():
            _remove_staging(staging)
            continue
        return run_id, staging
    raise FileExistsError(f"no free run id in {model_root} after 100 draws")


def _remove_staging(staging: Path) -> None:
    """Remove a staging folder (if still there), its owner record and emptied parents."""
    shutil.rmtree(staging, ignore_errors=True)
    (staging.parent / f"{staging.name}{OWNER_SUFFIX}").unlink(missing_ok=True)
    for empty in (staging.parent, staging.parent.parent):
        try:
            empty.rmdir()  # other runs' folders keep it alive
        except OSError:
            break


def _start_kernel(cwd: str, manager: type[LocalKernelManager] = None) -> LocalKernelManager:
    """Launch a stage kernel and return its manager without waiting for it to be ready.

    papermill (through nbclient) uses a manager it is given as is and leaves its shutdown
    to the caller (:func:`_stop_kernel`); it waits for the kernel to be ready itself.
    """
    from jupyter_core.utils import run_sync
    km = (manager or LocalKernelManager)(kernel_name="python3")
    run_sync(km.start_kernel)(cwd=cwd)
    return km


def _stop_kernel(km: LocalKernelManager) -> None:
    """Stop a stage kernel whose notebook has finished (its outputs are already saved).

    Killed at once rather than asked to shut down: nothing is left to flush, and the
    graceful handshake would add a few tenths of a second to every stage.
    """
    from jupyter_core.utils import run_sync
    try:
        if km.has_kernel:
            run_sync(km.shutdown_kernel)(now=True)
    except Exception:  # noqa: BLE001 - the leftover-kernel sweep kills it in the end
        pass


def executor_record(kind: str = "local", **extra) -> dict:
    """The ``executor`` record of ``run.json``: how and on which machine an audit ran.

    Parameters
    ----------
    kind : str
        ``local`` (``verifylib run`` on this host, one model after another or in
        ``--jobs`` worker processes) or ``ray`` (a task on a Ray cluster).
    **extra
        Further JSON-able facts: ``jobs`` for a parallel batch, ``ray_node_id``.

    Returns
    -------
    dict
        ``kind``, ``node`` (the host name of the machine that ran the stages) and
        ``extra``.
    """
    return {"kind": kind, "node": socket.gethostname(), **extra}


def record_published(run_dir: Path) -> None:
    """Note a run directory published outside :func:`run_one` (by a batch driver).

    An interrupt report then names it instead of saying "nothing published".

    Parameters
    ----------
    run_dir : Path
        The published run directory.
    """
    if _SCOPE is not None:
        _SCOPE.published.append(Path(run_dir))


def run_one(params: Params, reports_root: Path, *, log: Callable[[str], None] = print,
            progress: bool = True, stages: Sequence[str] = gates.STAGES,
            kernel_manager: type[LocalKernelManager] | None = None,
            executor: Mapping | None = None,
            on_stage_done: Callable[[str], None] | None = None) -> RunOutcome:
    """Audit one model: run every stage notebook, write the receipt and the reports.

    Parameters
    ----------
    params : Params
        Validated parameters.
    reports_root : Path
        Usually ``reports/``; the run goes to ``<root>/<name>/<run-id>``.
    log : callable
        Receives progress lines.
    progress : bool
        Show papermill's per-cell progress bar.
    stages : sequence of str
        Stages to execute (all, in order, by default).
    kernel_manager : type, optional
        A :class:`LocalKernelManager` subclass for the stage kernels. Only the test
        suite's simulated Mac passes one (its kernels start with the simulated
        toolchain); the command line never does.
    executor : mapping, optional
        The ``executor`` record for ``run.json`` (see :func:`executor_record`); this
        process on this host by default.
    on_stage_done : callable, optional
        Called with each stage's name once its notebook has ended (whatever its gates
        say); a parallel batch uses it to start the models that share this one's build.

    Returns
    -------
    RunOutcome

    Raises
    ------
    KeyboardInterrupt
        :class:`Interrupted` under :func:`interrupts_raise`. Nothing is published then
        (unless the interrupt came after the publishing rename), the kernel is shut down
        and the staging folder is removed, as it is for any other exception.
    """
    import papermill as pm

    # Reserved before the cleanup below guards it: a clash on the run id must never
    # remove the staging folder of the other run that holds that id.
    run_id, staging = _reserve_staging(reports_root / params.name)
    final = reports_root / params.name / run_id
    # Whatever ends this run (an interrupt, a bug, a full disk), the staging folder goes;
    # once published it is already gone and only its owner record is left to remove.
    try:
        init_run_dir(staging, params, run_id,
                     executor=dict(executor) if executor is not None else executor_record())
        (staging / "notebooks").mkdir()
        errors: dict[str, str] = {}
        seconds: dict[str, dict] = {}
        cwd = str(resources.notebooks_dir())
        ahead = _start_kernel(cwd, kernel_manager)
        for i, stage in enumerate(stages, 1):
            log(f"[{i}/{len(stages)}] {params.name}: stage {stage}")
            t0 = time.perf_counter()
            # Each stage gets a fresh kernel of its own, started while the previous stage
            # ran: its start-up (most of a second) overlaps that stage's work.
            km, ahead = ahead, (_start_kernel(cwd, kernel_manager) if i < len(stages) else None)
            try:
                pm.execute_notebook(
                    str(_notebook(stage)), str(staging / "notebooks" / f"{stage}.ipynb"),
                    parameters=dict(params.as_papermill(), run_dir=str(staging)),
                    progress_bar=progress, kernel_name="python3", cwd=cwd,
                    report_mode=False, km=km)
            except Exception as exc:  # noqa: BLE001 - any stage failure is recorded, not raised
                if _interrupt_pending() is not None:
                    # papermill's kernel cleanup may replace the interrupt with its own error
                    raise Interrupted(_interrupt_pending()) from exc
                errors[stage] = _error_text(exc)
                log(f"      stage {stage} raised: {errors[stage].splitlines()[0]}")
            finally:
                _stop_kernel(km)
            wall = time.perf_counter() - t0
            data = read_stage_file(staging, stage) or {}
            seconds[stage] = {"wall": round(wall, 3),
                              "verifylib": data.get("verifylib_seconds")}
            statuses = ", ".join(f"{r['id']}={r['status']}" for r in data.get("gates", []))
            log(f"      {wall:.1f} s; {statuses or 'no gate recorded'}")
            if on_stage_done is not None:
                on_stage_done(stage)
        t0 = time.perf_counter()
        receipt = build_receipt(staging, errors)
        short, _ = report.render(staging, list(stages))
        seconds["receipt+report"] = {"wall": round(time.perf_counter() - t0, 3),
                                     "verifylib": None}
        canonical.write_json(staging / "timings.json", seconds)
        log(f"      receipt and report: {seconds['receipt+report']['wall']:.1f} s")
        canonical.publish_dir(staging, final)
    finally:
        with _signals_deferred():
            if final.is_dir() and _SCOPE is not None:
                _SCOPE.published.append(final)
            _kill_leftover_kernels()
            _remove_staging(staging)
    return RunOutcome(params.name, final, gates.Verdict(receipt["verdict"]),
                      final / short.name, seconds)


class RunImportRefused(EvidenceInvalid):
    """A run directory audited elsewhere was not published: the archive is not a run
    directory of the expected model, its id is taken, or it does not verify."""


# How much of a member file is read at once while streaming an archive (less for small
# chunks); a chunk is assembled from such reads, so a stream holds about two at most.
_READ_BYTES = 1 << 20


@dataclass(frozen=True)
class ArchiveMember:
    """One member of a run archive: its tar header and how many data bytes follow.

    Attributes
    ----------
    path : Path
        The file or folder on disk.
    header : bytes
        Its tar header blocks (PAX format, as :mod:`tarfile` writes them).
    size : int
        Data bytes that follow the header (0 for a folder), before block padding.
    is_file : bool
        A regular file (its content follows the header), else a folder.
    """

    path: Path
    header: bytes
    size: int
    is_file: bool


@dataclass(frozen=True)
class RunArchive:
    """A published run directory planned as an uncompressed tar, streamed in chunks.

    Uncompressed because most of a run's bytes are model weights, which do not
    compress. The bytes are exactly those :mod:`tarfile` writes for the same members
    (``tar.add(path, arcname, recursive=False)`` in sorted order, PAX format), but they
    are produced piece by piece from the files, so a run of several GB never has to be
    held in memory or written twice on the machine that sends it.

    Attributes
    ----------
    run_dir : Path
        The run directory.
    members : tuple of ArchiveMember
        Regular files and folders, in sorted order, paths relative to the run.
    size : int
        Total bytes of the archive, end-of-archive blocks and record padding included.
    """

    run_dir: Path
    members: tuple[ArchiveMember, ...]
    size: int

    def chunks(self, chunk_bytes: int) -> Iterator[bytes]:
        """The archive as consecutive chunks of ``chunk_bytes`` (the last one shorter).

        Parameters
        ----------
        chunk_bytes : int
            Size of every chunk but the last; positive.

        Yields
        ------
        bytes

        Raises
        ------
        RunImportRefused
            When a file changed size since the archive was planned (the announced
            size would no longer hold).
        """
        import tarfile
        if isinstance(chunk_bytes, bool) or not isinstance(chunk_bytes, int) or chunk_bytes < 1:
            raise ValueError(f"chunk size must be a positive integer, got {chunk_bytes!r}")
        buf = bytearray()
        sent = 0

        def full():
            nonlocal sent
            while len(buf) >= chunk_bytes:
                piece = bytes(buf[:chunk_bytes])
                del buf[:chunk_bytes]
                sent += len(piece)
                yield piece

        for m in self.members:
            buf += m.header
            yield from full()
            if not m.is_file:
                continue
            with open(m.path, "rb") as fh:
                left = m.size
                while left:
                    data = fh.read(min(left, _READ_BYTES, max(chunk_bytes, tarfile.BLOCKSIZE)))
                    if not data:
                        raise RunImportRefused(f"{m.path}: shorter than when it was packed")
                    buf += data
                    left -= len(data)
                    yield from full()
                if fh.read(1):
                    raise RunImportRefused(f"{m.path}: longer than when it was packed")
            pad = -m.size % tarfile.BLOCKSIZE
            buf += tarfile.NUL * pad
            yield from full()
        tail = self.size - sent - len(buf)
        buf += tarfile.NUL * tail
        yield from full()
        if buf:
            sent += len(buf)
            yield bytes(buf)


def plan_run_archive(run_dir: Path) -> RunArchive:
    """Plan a published run directory as a tar archive (see :class:`RunArchive`).

    Parameters
    ----------
    run_dir : Path
        A published run directory.

    Returns
    -------
    RunArchive

    Raises
    ------
    RunImportRefused
        If the folder holds anything but regular files and folders (a link could point
        outside the run on the machine that unpacks it).
    """
    import io
    import tarfile
    run_dir = Path(run_dir)
    members = []
    offset = 0
    # A TarFile only to describe members exactly as tar.add would; nothing is kept.
    with tarfile.open(fileobj=io.BytesIO(), mode="w", format=tarfile.PAX_FORMAT) as describer:
        for path in sorted(run_dir.rglob("*")):
            if path.is_symlink() or not (path.is_file() or path.is_dir()):
                raise RunImportRefused(f"{path}: not a regular file or folder")
            info = describer.gettarinfo(str(path),
                                        arcname=path.relative_to(run_dir).as_posix())
            header = info.tobuf(describer.format, describer.encoding, describer.errors)
            size = info.size if info.isreg() else 0
            members.append(ArchiveMember(path, header, size, info.isreg()))
            offset += len(header) + size + (-size % tarfile.BLOCKSIZE)
    offset += 2 * tarfile.BLOCKSIZE
    offset += -offset % tarfile.RECORDSIZE
    return RunArchive(run_dir, tuple(members), offset)


def import_run(archive: bytes | str | os.PathLike, name: str, reports_root: Path, *,
               allow_simulated: bool = False) -> RunOutcome:
    """Verify a run directory audited elsewhere (:class:`RunArchive`) and publish it here.

    The archive is unpacked into a staging folder of ``reports_root`` (with an owner
    record, as :func:`run_one` stages), re-verified from its own files by
    :func:`verifylib.evidence.receipt.verify` (nothing the other machine says is trusted: the
    verdict is the one verification recomputes) and renamed into
    ``<reports_root>/<name>/<run-id>``. A published run is never replaced.

    Parameters
    ----------
    archive : bytes or path-like
        The tar of one published run directory, in memory or in a file (read as a
        stream, never loaded whole).
    name : str
        The model the run must belong to (``run.json``'s ``name``).
    reports_root : Path
        The reports folder.
    allow_simulated : bool
        Accept a run recorded on the test suite's simulated host.

    Returns
    -------
    RunOutcome
        Of the published run; its verdict is the verified one.

    Raises
    ------
    RunImportRefused
        When nothing was published, with the reason.
    KeyboardInterrupt
        :class:`Interrupted`; the staging folder is removed as in :func:`run_one`.
    """
    import io
    import tarfile
    from verifylib.evidence.receipt import verify
    from verifylib.stages.context import RUN_FILE
    try:
        if isinstance(archive, (bytes, bytearray, memoryview)):
            tar = tarfile.open(fileobj=io.BytesIO(bytes(archive)), mode="r:")
        else:
            tar = tarfile.open(name=os.fspath(archive), mode="r:")
    except (tarfile.TarError, OSError) as exc:
        raise RunImportRefused(f"{name}: the returned run is not a tar archive: {exc}") from None
    with tar:
        try:
            run = canonical.loads(tar.extractfile(tar.getmember(RUN_FILE)).read())
        except (KeyError, AttributeError, ValueError, tarfile.TarError) as exc:
            raise RunImportRefused(f"{name}: the returned run has no readable {RUN_FILE}: "
                                   f"{exc}") from None
        run_id = run.get("run_id") if isinstance(run, dict) else None
        if not isinstance(run_id, str) or not _RUN_ID.match(run_id):
            raise RunImportRefused(f"{name}: the returned run has a malformed run id "
                                   f"{run_id!r}")
        if run.get("name") != name:
            raise RunImportRefused(f"{name}: the returned run belongs to {run.get('name')!r}")
        final = Path(reports_root) / name / run_id
        staging = Path(reports_root) / name / STAGING / run_id
        if final.exists() or staging.exists():
            raise RunImportRefused(f"{name}: run {run_id} is already here; not replaced")
        try:
            _create_staging(staging)
        except FileExistsError:
            raise RunImportRefused(f"{name}: run {run_id} is already being published") \
                from None
        try:
            # Checked again under the reservation: another importer may have published
            # this id and released it between the check above and ours.
            if final.exists():
                raise RunImportRefused(f"{name}: run {run_id} is already here; not replaced")
            # "data": no absolute paths, no "..", no links leaving the folder, no devices.
            tar.extractall(staging, filter="data")
            res = verify(staging, allow_simulated=allow_simulated)
            if not res.ok:
                raise RunImportRefused(f"{name}: the returned run {run_id} does not verify: "
                                       + "; ".join(res.problems[:5]))
            canonical.publish_dir(staging, final)
        finally:
            with _signals_deferred():
                if final.is_dir() and _SCOPE is not None:
                    _SCOPE.published.append(final)
                _remove_staging(staging)
    try:
        seconds = canonical.read_json(final / "timings.json")
    except (OSError, ValueError):
        seconds = {}
    return RunOutcome(name, final, gates.Verdict(res.verdict), final / report.REPORT,
                      seconds if isinstance(seconds, dict) else {})


def load_all(paths: Sequence[str | Path]) -> list[Params]:
    """Validate every parameter file (or folder of ``*.yaml``) before any work starts.

    Raises
    ------
    verifylib.params.ParameterError
        For the first unusable file, naming it and the key.
    """
    from verifylib.params import ParameterError
    files: list[Path] = []
    for p in paths:
        p = Path(p)
        if p.is_dir():
            found = sorted(list(p.glob("*.yaml")) + list(p.glob("*.yml")))
            if not found:
                raise ParameterError(f"{p}: folder holds no *.yaml parameter files")
            files += found
        else:
            files.append(p)
    out = [load(f) for f in files]
    names = [p.name for p in out]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise ParameterError(f"several parameter files use the same name: {sorted(dup)}")
    return out
