"""Host faults: a full, read-only or failing disk, told apart from a harness bug.

A gate that raises is recorded ERROR and its stage goes on (:mod:`verifylib.stages.context`).
That is right for a bug and wrong for a disk: every later write fails too, each stage runs
for nothing, and publishing fails with a traceback. So an ``OSError`` whose errno is one of
:data:`HOST_FAULT_ERRNOS`, anywhere in an exception's chain, becomes a
:class:`verifylib.errors.HostFault` that no gate swallows; the audit's runner stops at once,
removes its staging folder and reports one line naming the path and the error.

The same fault seen from the parent process arrives as a notebook cell's error name and
value (papermill's ``PapermillExecutionError``); :func:`fault_of_cell` reads it back.
"""

from __future__ import annotations

import errno
import os
import re

from verifylib.errors import HostFault

__all__ = ["HOST_FAULT_ERRNOS", "host_fault", "fault_of_cell", "describe"]

HOST_FAULT_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EROFS})
"""No space, over quota, an I/O error, a read-only filesystem: the host's, never the model's."""

_ERRNO_RE = re.compile(r"\[Errno (\d+)\]")


def describe(err: OSError, where: str | os.PathLike[str] | None = None) -> str:
    """Return one line naming the error and the path of a host fault.

    Parameters
    ----------
    err : OSError
        The fault.
    where : path-like, optional
        The folder being written when the error names no file (a ``write`` on an open
        file does not).

    Returns
    -------
    str
        E.g. ``No space left on device (ENOSPC): /reports/tiny/.staging/x/fp32/model.bin``.
    """
    code = err.errno or 0
    name = errno.errorcode.get(code, str(code))
    what = err.strerror or os.strerror(code)
    if err.filename is not None:
        path = os.fsdecode(err.filename) if isinstance(err.filename, bytes) else err.filename
        return f"{what} ({name}): {path}"
    return f"{what} ({name})" + (f": writing under {os.fspath(where)}" if where else "")


def host_fault(exc: BaseException | None,
               where: str | os.PathLike[str] | None = None) -> HostFault | None:
    """Return the host fault behind ``exc``, or None when it is something else.

    Parameters
    ----------
    exc : BaseException or None
        Any exception; its ``__cause__`` and ``__context__`` chain is followed.
    where : path-like, optional
        The folder being written, named when the error names no file.

    Returns
    -------
    HostFault or None
        ``exc`` itself when it already is one; else a new one describing the first
        ``OSError`` of the chain whose errno is in :data:`HOST_FAULT_ERRNOS`.
    """
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, HostFault):
            return exc
        if isinstance(exc, OSError) and exc.errno in HOST_FAULT_ERRNOS:
            return HostFault(exc.errno, describe(exc, where))
        exc = exc.__cause__ or exc.__context__
    return None


def fault_of_cell(ename: str | None, evalue: str | None) -> HostFault | None:
    """Return the host fault a notebook cell's error stands for, or None.

    Parameters
    ----------
    ename, evalue : str or None
        The error's class name and value, as papermill reports a failed cell.

    Returns
    -------
    HostFault or None
        For ``HostFault`` itself, or an ``OSError`` family name whose value carries one of
        :data:`HOST_FAULT_ERRNOS` (``[Errno 28] No space left on device: '…'``).
    """
    text = evalue or ""
    if ename == "HostFault":
        m = _ERRNO_RE.search(text)
        return HostFault(int(m.group(1)) if m else errno.EIO, _strip_errno(text))
    if ename in ("OSError", "IOError", "PermissionError", "FileNotFoundError"):
        m = _ERRNO_RE.search(text)
        if m and int(m.group(1)) in HOST_FAULT_ERRNOS:
            code = int(m.group(1))
            path = text.split(": ", 1)[1].strip("'\"") if ": " in text else None
            return HostFault(code, describe(OSError(code, os.strerror(code), path)))
    return None


def _strip_errno(text: str) -> str:
    return _ERRNO_RE.sub("", text, count=1).strip()
