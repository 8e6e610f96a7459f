"""The launch ledger: every launch of a whisper.cpp binary, appended as it happens.

Why it exists: a gate's evidence shows the runs the gate chose to keep. Nothing in it
shows the runs it dropped -- a negative control that crashed, was retried and then
"passed", or a positive gate that ran until a transcript looked right. The headless
contract (docs/runtime-contract.md §6) says *no retry*; this module makes that checkable
after the fact.
The runner (:func:`verifylib.runtime.runner.run_whisper_cli` and
:func:`verifylib.runtime.runner.run_whisper_binary`) appends one line per launch, before the
caller ever sees the result, to ``ledger.jsonl`` at the root of the run directory the
process is bound to (:func:`bind`, called by :class:`verifylib.stages.context.StageContext`).
``verifylib verify`` then requires (:func:`verifylib.evidence.accounting.check`) every
ledger entry to be cited by exactly one gate's evidence, every citation to match its
entry, and the single-shot negative control to own exactly one launch. A retried or hidden
launch becomes a line no gate cites, and the run fails verification.

The file is append-only and written by hand (no logging or database package gives the
needed properties together): each line is one canonical JSON object (see
:mod:`verifylib.canonical`), ``seq`` is the number of lines already in the file (so it
counts 0, 1, 2, ... with no gap), and each append holds an exclusive ``fcntl.flock`` on
the file, so two processes launching into one run directory get distinct, contiguous
numbers; the line is flushed and fsynced before the runner returns.
"""

from __future__ import annotations

import datetime as _dt
import fcntl
import os
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

from verifylib import canonical
from verifylib.canonical import is_sha256
from verifylib.errors import EvidenceInvalid
from verifylib.evidence.gates import CANARY_COREML_NEGATIVE

LEDGER_FILE = "ledger.jsonl"
"""Name of the ledger at the run-directory root."""

SCHEMA_KEYS = ("seq", "argv_sha256", "binary_sha256", "started_utc", "returncode", "signal",
               "timed_out", "stdout_sha256", "stderr_sha256")
"""The keys of every ledger entry, no more, no fewer."""

CITED_FIELDS = ("returncode", "signal", "timed_out", "stdout_sha256", "stderr_sha256")
"""Fields a citing record must repeat exactly as its ledger entry holds them (besides the
argv, compared through its digest, and the citation's ``binary_sha256``)."""

SINGLE_SHOT_GATES = (CANARY_COREML_NEGATIVE,)
"""Gates whose rule is about a first and only run: each must own exactly one launch."""

_bound: Path | None = None


class LedgerError(EvidenceInvalid):
    """The ledger cannot be appended to or read."""


# ----------------------------------------------------------------------------- binding

def bind(run_dir: str | os.PathLike | None) -> None:
    """Make ``run_dir/ledger.jsonl`` this process's ledger (``None`` unbinds).

    :class:`verifylib.stages.context.StageContext` binds its run directory when it is created, so
    every whisper.cpp launch a stage makes is recorded in that run. With nothing bound,
    launches are not recorded (``verifylib pin-check`` has no run directory).

    Parameters
    ----------
    run_dir : path-like or None
        The run directory (it must exist by the time something is appended).
    """
    global _bound
    _bound = None if run_dir is None else Path(run_dir).resolve() / LEDGER_FILE


def active() -> Path | None:
    """Return the path of the bound ledger file, or None when nothing is bound.

    Returns
    -------
    Path or None
        ``<run_dir>/ledger.jsonl`` (resolved) of the last :func:`bind`, or None.
    """
    return _bound


def argv_sha256(argv: Sequence[str | os.PathLike]) -> str:
    """Hash the canonical JSON of an argv list (how the ledger identifies argv).

    Parameters
    ----------
    argv : sequence
        The argument vector, binary first.

    Returns
    -------
    str
        Hex SHA-256 of ``canonical.dumps([str, ...])``.
    """
    return canonical.sha256_bytes(canonical.dumps([os.fspath(a) for a in argv]))


def utc_now() -> str:
    """Return the current UTC time as ISO 8601 with microseconds (a ledger ``started_utc``).

    Returns
    -------
    str
        E.g. ``2026-01-02T03:04:05.123456+00:00``.
    """
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="microseconds")


# ----------------------------------------------------------------------------- writing

def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def append(argv: Sequence[str | os.PathLike], *, binary_sha256: str, started_utc: str,
           returncode: int | None, signal: str | None, timed_out: bool,
           stdout_sha256: str, stderr_sha256: str,
           path: str | os.PathLike | None = None) -> dict:
    """Append one launch to the ledger and return its entry.

    The file is opened for appending and held under an exclusive ``fcntl.flock`` while
    the existing lines are counted (``seq`` is their number) and the new line is written,
    flushed and fsynced. A torn last line (a writer killed mid-line) is first terminated,
    so it stays a malformed line of its own that
    :func:`verifylib.evidence.accounting.check` reports, and the new entry's
    ``seq`` still equals its line index.

    Parameters
    ----------
    argv : sequence
        The launched argument vector (stored as :func:`argv_sha256`).
    binary_sha256 : str
        SHA-256 of ``argv[0]``'s bytes, hashed right before the launch.
    started_utc : str
        When the launch started (:func:`utc_now`).
    returncode : int or None
        Raw return code (None after a timeout).
    signal : str or None
        Signal name when the child died by a signal.
    timed_out : bool
        True if the child was killed at its timeout.
    stdout_sha256, stderr_sha256 : str
        Digests of both complete streams.
    path : path-like, optional
        The ledger file; defaults to the bound one (:func:`active`).

    Returns
    -------
    dict
        The entry as written (keys :data:`SCHEMA_KEYS`).

    Raises
    ------
    LedgerError
        If no ledger is bound and no ``path`` is given.
    """
    target = Path(path) if path is not None else _bound
    if target is None:
        raise LedgerError("no ledger is bound (verifylib.runtime.ledger.bind(run_dir) first)")
    entry: dict[str, Any] = {
        "seq": -1, "argv_sha256": argv_sha256(argv), "binary_sha256": binary_sha256,
        "started_utc": started_utc, "returncode": returncode, "signal": signal,
        "timed_out": bool(timed_out), "stdout_sha256": stdout_sha256,
        "stderr_sha256": stderr_sha256}
    created = not target.exists()
    fd = os.open(target, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            data = _read_fd(fd)
            seq = data.count(b"\n")
            prefix = b""
            if data and not data.endswith(b"\n"):
                prefix, seq = b"\n", seq + 1
            entry["seq"] = seq
            _write_all(fd, prefix + canonical.dumps(entry))
            os.fsync(fd)
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
    if created:
        # The new file's directory entry must survive a crash as well as its bytes.
        dfd = os.open(target.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    return entry


def _read_fd(fd: int) -> bytes:
    chunks = []
    offset = 0
    while True:
        chunk = os.pread(fd, 1 << 20, offset)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        offset += len(chunk)


def _read_locked(path: Path) -> bytes:
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return b""
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
        try:
            return _read_fd(fd)
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _lines(data: bytes) -> list[bytes]:
    """Split the ledger into lines, a torn last line included (as :func:`append` numbers them)."""
    if not data:
        return []
    lines = data.split(b"\n")
    return lines[:-1] if data.endswith(b"\n") else lines


# ----------------------------------------------------------------------------- reading

def mark() -> int:
    """Count the entries (lines) of the bound ledger; 0 when none is bound.

    Pass it to :func:`since` later to get the launches made in between (the stage
    plumbing does this around a gate, so a gate that raised still cites its launches).

    Returns
    -------
    int
        The number of lines, a torn last line included; 0 when nothing is bound or the
        file does not exist yet.
    """
    return 0 if _bound is None else len(_lines(_read_locked(_bound)))


def since(mark_: int) -> list[dict]:
    """Return the entries of the bound ledger appended after :func:`mark` returned ``mark_``.

    Lines that do not parse as an entry are skipped here
    (:func:`verifylib.evidence.accounting.check` reports them).

    Parameters
    ----------
    mark_ : int
        A value :func:`mark` returned.

    Returns
    -------
    list of dict
        The entries, in ``seq`` order; empty when nothing is bound.
    """
    if _bound is None:
        return []
    out = []
    for line in _lines(_read_locked(_bound))[mark_:]:
        entry, _ = _parse_line(line)
        if entry is not None:
            out.append(entry)
    return out


def read(run_dir: str | os.PathLike) -> list[dict]:
    """Read every entry of a run directory's ledger (an empty list when it has none).

    Parameters
    ----------
    run_dir : path-like
        The run directory holding :data:`LEDGER_FILE`.

    Returns
    -------
    list of dict
        The entries, in ``seq`` order.

    Raises
    ------
    LedgerError
        If any line is malformed or the ``seq`` values are not 0, 1, 2, ...
    """
    entries, problems = scan(_read_locked(Path(run_dir) / LEDGER_FILE))
    if problems:
        raise LedgerError("; ".join(problems))
    return [entries[k] for k in sorted(entries)]


def citation(entry: Mapping[str, Any]) -> dict:
    """Build what a run record carries to cite its ledger entry.

    Parameters
    ----------
    entry : mapping
        A ledger entry (as :func:`append` returns it).

    Returns
    -------
    dict
        ``{"seq", "binary_sha256"}`` copied from the entry.
    """
    return {"seq": entry["seq"], "binary_sha256": entry["binary_sha256"]}


def entry_record(entry: Mapping[str, Any]) -> dict:
    """Build a citing record from a ledger entry alone.

    For evidence that has no :class:`verifylib.runtime.runner.RunResult` at hand (an ERROR gate
    citing the launches made before it raised, from :func:`since`): the argv appears as
    its digest ``argv_sha256``, which :func:`verifylib.evidence.accounting.check` accepts
    in place of ``argv``.

    Parameters
    ----------
    entry : mapping
        A ledger entry (e.g. one of :func:`since`).

    Returns
    -------
    dict
        ``launch`` (:func:`citation`), ``argv_sha256`` and :data:`CITED_FIELDS`.
    """
    out = {"launch": citation(entry), "argv_sha256": entry["argv_sha256"]}
    out.update({k: entry[k] for k in CITED_FIELDS})
    return out


def is_int(v: Any) -> bool:
    """Tell whether ``v`` is an int proper (a bool is not one).

    Parameters
    ----------
    v : Any
        The value to check.

    Returns
    -------
    bool
        True iff ``v`` is an ``int`` and not a ``bool``.
    """
    return isinstance(v, int) and not isinstance(v, bool)


def _parse_line(line: bytes) -> tuple[dict | None, str | None]:
    """Parse one line: an entry and None, or None and why it is not a well-formed entry."""
    try:
        obj = canonical.loads(line)
    except (ValueError, UnicodeDecodeError) as exc:
        return None, f"not strict JSON ({exc})"
    if not isinstance(obj, dict) or set(obj) != set(SCHEMA_KEYS):
        keys = sorted(obj) if isinstance(obj, dict) else type(obj).__name__
        return None, f"not a ledger entry (keys {keys})"
    bad = [k for k in ("argv_sha256", "binary_sha256", "stdout_sha256", "stderr_sha256")
           if not is_sha256(obj[k])]
    if not is_int(obj["seq"]) or obj["seq"] < 0:
        bad.append("seq")
    if not isinstance(obj["started_utc"], str):
        bad.append("started_utc")
    if obj["returncode"] is not None and not is_int(obj["returncode"]):
        bad.append("returncode")
    if obj["signal"] is not None and not isinstance(obj["signal"], str):
        bad.append("signal")
    if not isinstance(obj["timed_out"], bool):
        bad.append("timed_out")
    if bad:
        return None, f"malformed field(s) {', '.join(bad)}"
    if canonical.dumps(obj) != line + b"\n":
        return None, "not canonical JSON"
    return obj, None


def scan(data: bytes) -> tuple[dict[int, dict], list[str]]:
    """Parse a ledger: well-formed entries by seq, and the ledger's own problems.

    Parameters
    ----------
    data : bytes
        The ledger file's bytes (a torn last line counts as a line).

    Returns
    -------
    entries : dict
        ``seq`` -> entry, for every well-formed line (the first of a duplicated seq).
    problems : list of str
        Each malformed line, duplicated seq and seq that is not its line index,
        prefixed ``ledger:``.
    """
    entries: dict[int, dict] = {}
    problems = []
    for i, line in enumerate(_lines(data)):
        entry, why = _parse_line(line)
        if entry is None:
            problems.append(f"ledger: line {i + 1} is malformed: {why}")
            continue
        seq = entry["seq"]
        if seq in entries:
            problems.append(f"ledger: duplicate seq {seq} (line {i + 1})")
            continue
        if seq != i:
            problems.append(f"ledger: non-contiguous seq: line {i + 1} holds seq {seq}, "
                            f"expected {i}")
        entries[seq] = entry
    return entries, problems


# ----------------------------------------------------------------------------- validation

def cited_seqs(doc: Any) -> set[int]:
    """Collect the ledger ``seq`` numbers a JSON document cites (wherever its run records sit).

    Parameters
    ----------
    doc : Any
        A decoded JSON document (dicts and lists nested to any depth).

    Returns
    -------
    set of int
        The ``seq`` of every ``"launch"`` citation whose value is a dict with an integer
        ``seq``.
    """
    return {c["launch"]["seq"] for _, c in walk_citations(doc)
            if isinstance(c["launch"], dict) and is_int(c["launch"].get("seq"))}


def walk_citations(value: Any, pointer: str = "") -> Iterator[tuple[str, dict]]:
    """Walk a JSON document for every dict holding a ``"launch"`` key, with its JSON pointer.

    Parameters
    ----------
    value : Any
        The decoded JSON document (dict keys are visited in sorted order).
    pointer : str
        The JSON pointer of ``value`` itself (empty for the document root).

    Yields
    ------
    (str, dict)
        The pointer (``"/"`` for the root) and the dict holding ``"launch"``.
    """
    if isinstance(value, dict):
        if "launch" in value:
            yield pointer or "/", value
        for k in sorted(value):
            yield from walk_citations(value[k], f"{pointer}/{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from walk_citations(v, f"{pointer}/{i}")


def same_value(a: Any, b: Any) -> bool:
    """Compare two JSON values strictly: same type and equal (so ``1`` is not ``True``).

    Parameters
    ----------
    a, b : Any
        The values.

    Returns
    -------
    bool
        True iff both have exactly the same type and compare equal.
    """
    return type(a) is type(b) and a == b


