"""The stage notebooks' Jupyter kernels: local IPC sockets, start and stop, no tool left behind.

The kernels talk over AF_UNIX sockets, whose paths the OS limits (``sizeof(sun_path) - 1``
bytes: 103 on macOS, 107 on Linux; libzmq refuses a longer one). macOS's ``$TMPDIR`` is a
long per-user folder (``/var/folders/xx/…/T/``), so the sockets live in a short private
folder, ``/tmp/verifylib-kernels-<uid>``, and only fall back to ``$TMPDIR`` when that one
is unusable and ``$TMPDIR`` is short enough (:func:`socket_folder`).

A kernel is killed once its notebook ends, and at once on an interrupt, so no ``finally``
or ``atexit`` of the stage runs: a temporary folder it made (a tree id's scratch
repository, with git's ``index.lock``, after a SIGTERM in stage 01) would stay in
``$TMPDIR``. So each kernel gets a ``$TMPDIR`` of its own, ``$TMPDIR/verifylib-kernel-*``,
which the tools it starts inherit; it is removed once the kernel is stopped or killed,
and one left by a killed ``verifylib run`` is swept at the next kernel start once its
owner is provably gone (:mod:`verifylib.locks`). The kernel's connection file (its key and
socket names) is written in that folder too, not in ``$TMPDIR`` where jupyter_client puts
it by default, so it goes with the folder; the IPC socket files of a killed ``verifylib
run`` (named after its pid) are swept at the next kernel start (:func:`sweep_dead_sockets`).
"""

from __future__ import annotations

import os
import platform
import signal
import stat
import subprocess
import weakref
from pathlib import Path
from typing import Sequence

from jupyter_client.manager import AsyncKernelManager  # noqa: E402
from traitlets import CaselessStrEnum, default  # noqa: E402

from verifylib.batch.signals import interrupt_pending
from verifylib.errors import ParametersInvalid
from verifylib.locks import make_owned_dir, process_start, remove_owned_dir

SOCKET_PATH_MAX = {"Darwin": 103, "Linux": 107}
"""Longest AF_UNIX socket path each OS binds, in bytes: ``sizeof(sun_path)`` less the NUL."""

_SOCKET_PATH_MAX_ELSEWHERE = 103
"""Other systems get the smaller (BSD) size."""

SHORT_ROOT = Path("/tmp")
"""The short folder the socket folder is made in first (``/tmp`` on every Unix)."""

KERNEL_TMP_PREFIX = "verifylib-kernel-"
"""Start of the name of each kernel's own ``$TMPDIR``, made in this process's."""

# The longest socket name in the folder: the prefix ``k-<pid>-<8 hex>`` with a pid of
# Linux's widest (pid_max is at most 4194304: 7 digits) and jupyter's channel suffix
# ``-<n>`` (1 to 5 after a fresh prefix; two digits leave room).
_LONGEST_NAME = "k-" + "9" * 7 + "-" + "f" * 8 + "-99"


class SocketFolderUnusable(ParametersInvalid):
    """No folder of this host gives the kernels' IPC sockets paths the OS accepts."""


def socket_path_limit(system: str | None = None) -> int:
    """Return the longest AF_UNIX socket path an OS binds.

    Parameters
    ----------
    system : str, optional
        ``platform.system()``'s value (``Darwin``, ``Linux``); this host's by default.

    Returns
    -------
    int
        Bytes, without the terminating NUL.
    """
    return SOCKET_PATH_MAX.get(system or platform.system(), _SOCKET_PATH_MAX_ELSEWHERE)


def longest_socket_path(folder: Path) -> int:
    """Return the byte length of the longest socket path a kernel could bind in ``folder``.

    Parameters
    ----------
    folder : Path
        The socket folder.

    Returns
    -------
    int
        Bytes of ``folder/k-<pid>-<hex>-<channel>`` at its widest.
    """
    return len(os.fsencode(str(Path(folder) / _LONGEST_NAME)))


def _candidate_folders() -> list[Path]:
    import tempfile
    name = f"verifylib-kernels-{os.getuid()}"
    out = [SHORT_ROOT / name, Path(tempfile.gettempdir()) / name]
    return list(dict.fromkeys(out))  # one entry where $TMPDIR is /tmp


def _make_private(folder: Path) -> None:
    """Create ``folder`` (mode 0700) or accept it only as a real folder of ours, private."""
    try:
        folder.mkdir(mode=0o700)
    except FileExistsError:
        pass
    # In a shared /tmp another user can create the name first, or plant a symlink there:
    # the kernels' sockets carry no key of their own, so only a folder we own will do.
    st = os.lstat(folder)
    if stat.S_ISLNK(st.st_mode):
        raise OSError(f"{folder} is a symbolic link")
    if not stat.S_ISDIR(st.st_mode):
        raise OSError(f"{folder} is not a folder")
    if st.st_uid != os.getuid():
        raise OSError(f"{folder} belongs to uid {st.st_uid}, not to this user ({os.getuid()})")
    if stat.S_IMODE(st.st_mode) != 0o700:
        os.chmod(folder, 0o700)


def socket_folder(candidates: Sequence[Path] | None = None, *,
                  system: str | None = None) -> Path:
    """Return the private folder the stage kernels' IPC sockets are made in.

    The first candidate whose longest socket path fits the OS's limit and that is (or is
    made) a folder of this user's alone, mode 0700, not a symbolic link.

    Parameters
    ----------
    candidates : sequence of Path, optional
        Folders to try in order; by default ``/tmp/verifylib-kernels-<uid>``, then the
        same name in ``tempfile.gettempdir()`` (``$TMPDIR``).
    system : str, optional
        The OS whose limit applies (:func:`socket_path_limit`); this host's by default.

    Returns
    -------
    Path
        The folder.

    Raises
    ------
    SocketFolderUnusable
        When no candidate will do, naming each one's problem and the fix.
    """
    limit = socket_path_limit(system)
    problems = []
    for folder in candidates if candidates is not None else _candidate_folders():
        longest = longest_socket_path(folder)
        if longest > limit:
            problems.append(f"{folder} would give socket paths of {longest} bytes, above "
                            f"this OS's limit of {limit}")
            continue
        try:
            _make_private(folder)
        except OSError as exc:
            problems.append(str(exc))
            continue
        return folder
    raise SocketFolderUnusable(
        "no folder for the notebook kernels' sockets: " + "; ".join(problems)
        + ". Remove or fix the first folder, or point TMPDIR at a short folder of your own "
        "(for example `mkdir -m 700 -p /tmp/$USER && export TMPDIR=/tmp/$USER`)")


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
        # The folder is short and private (socket_folder): a long $TMPDIR, as macOS's is,
        # would push the paths past the OS's limit and no kernel would start.
        import secrets
        return str(socket_folder() / f"k-{os.getpid()}-{secrets.token_hex(4)}")

    async def shutdown_kernel(self, now: bool = False, restart: bool = False) -> None:
        """Shut the kernel down; at once (SIGKILL to its process group) after an interrupt.

        After an interrupt the cell's result is discarded anyway, and a graceful shutdown
        only lets the kernel race its own socket teardown against the interrupted cell's
        reply and print that error to the stderr it shares with ``verifylib run``.
        The interrupted cell's tasks are cancelled first: left pending, they would log
        "Kernel died" and "Task exception was never retrieved" once the kernel is gone.

        Parameters
        ----------
        now : bool
            Kill the kernel rather than ask it to shut down (always so after an
            interrupt).
        restart : bool
            Passed on to ``AsyncKernelManager.shutdown_kernel``.
        """
        interrupted = interrupt_pending() is not None
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
        """Start the kernel and remember the manager for :func:`kill_leftover_kernels`.

        Parameters
        ----------
        **kw
            Passed on to ``AsyncKernelManager.start_kernel`` (e.g. ``cwd``).
        """
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


def kill_leftover_kernels() -> None:
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
        _remove_kernel_tmp(km)
        _KERNEL_MANAGERS.discard(km)


def kernel_tmp(km: LocalKernelManager) -> Path | None:
    """Return the ``$TMPDIR`` a kernel was started with, None when it had none of its own.

    Parameters
    ----------
    km : LocalKernelManager
        A manager returned by :func:`start_kernel`.

    Returns
    -------
    Path or None
        The kernel's private temporary folder (gone once the kernel is stopped).
    """
    return getattr(km, "_verifylib_tmp", None)


def _remove_kernel_tmp(km: LocalKernelManager) -> None:
    # Only once the kernel is dead: a live one (or a tool it left) could still write there.
    proc = getattr(km.provisioner, "process", None) if km.provisioner is not None else None
    tmp = kernel_tmp(km)
    if tmp is not None and (proc is None or proc.poll() is not None):
        remove_owned_dir(tmp)


def start_kernel(cwd: str, manager: type[LocalKernelManager] = None) -> LocalKernelManager:
    """Launch a stage kernel and return its manager without waiting for it to be ready.

    papermill (through nbclient) uses a manager it is given as is and leaves its shutdown
    to the caller (:func:`stop_kernel`); it waits for the kernel to be ready itself.

    Parameters
    ----------
    cwd : str
        The kernel's working directory (the notebooks folder).
    manager : type, optional
        The manager class; :class:`LocalKernelManager` by default.

    Returns
    -------
    LocalKernelManager
        The manager of the started ``python3`` kernel.
    """
    import tempfile

    from jupyter_core.utils import run_sync

    from verifylib.locks import RELAYED_ENV
    from verifylib.numerics.memory import allocator_environment
    km = (manager or LocalKernelManager)(kernel_name="python3")
    # In this process's $TMPDIR (where a user who moved it wants large files), swept of
    # the folders of kernels whose ``verifylib run`` was killed.
    tmp = make_owned_dir(Path(tempfile.gettempdir()), KERNEL_TMP_PREFIX)
    km._verifylib_tmp = tmp
    km.connection_file = str(tmp / "kernel.json")
    if km.transport == "ipc":
        sweep_dead_sockets(Path(km.ip).parent)
    try:
        # The kernel's printed lines reach the console through papermill's stdout relay.
        # The stage's numerics run in the kernel: its allocator is set up at its start.
        run_sync(km.start_kernel)(cwd=cwd, env={**os.environ, **allocator_environment(os.environ),
                                                RELAYED_ENV: "1", "TMPDIR": str(tmp)})
    except BaseException:
        # A kernel that did start is killed, its folder with it, by kill_leftover_kernels.
        _remove_kernel_tmp(km)
        raise
    return km


def sweep_dead_sockets(folder: Path) -> list[Path]:
    """Remove the IPC socket files of kernels whose ``verifylib run`` is gone.

    A socket's name starts ``k-<pid>-`` with the pid of the process that managed its
    kernel (:meth:`LocalKernelManager._ip_default`); a process killed outright cannot
    unlink them. Files of a pid that is alive (even if reused by another process) stay; a
    zombie counts as gone (:func:`verifylib.locks.process_start`).

    Parameters
    ----------
    folder : Path
        The socket folder (:func:`socket_folder`).

    Returns
    -------
    list of Path
        The files removed.
    """
    removed = []
    try:
        entries = list(folder.iterdir())
    except OSError:
        return removed
    for path in entries:
        parts = path.name.split("-")
        if len(parts) < 3 or parts[0] != "k" or not parts[1].isdigit():
            continue
        if process_start(int(parts[1])) is not None:
            continue
        try:
            path.unlink()
            removed.append(path)
        except OSError:
            pass
    return removed


def stop_kernel(km: LocalKernelManager) -> None:
    """Stop a stage kernel whose notebook has finished (its outputs are already saved).

    Killed at once rather than asked to shut down: nothing is left to flush, and the
    graceful handshake would add a few tenths of a second to every stage.

    Parameters
    ----------
    km : LocalKernelManager
        The kernel's manager; an error while stopping is ignored (the leftover-kernel
        sweep kills the kernel in the end).
    """
    from jupyter_core.utils import run_sync
    try:
        if km.has_kernel:
            run_sync(km.shutdown_kernel)(now=True)
    except Exception:  # noqa: BLE001 - the leftover-kernel sweep kills it in the end
        pass
    _remove_kernel_tmp(km)


def _consume_result(task) -> None:
    # Reading it marks a cancelled cell's exception as seen, so asyncio does not log it.
    if not task.cancelled():
        task.exception()
