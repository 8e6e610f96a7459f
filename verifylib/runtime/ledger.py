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
``verifylib verify`` then requires (:func:`check`) every ledger entry to be cited by
exactly one gate's evidence, every citation to match its entry, and the single-shot
negative control to own exactly one launch. A retried or hidden launch becomes a line
no gate cites, and the run fails verification.

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
from verifylib.evidence import gates
from verifylib.evidence.gates import Status
from verifylib.evidence.records import EvidenceError, EvidenceView, GateRecord

LEDGER_FILE = "ledger.jsonl"
"""Name of the ledger at the run-directory root."""

SCHEMA_KEYS = ("seq", "argv_sha256", "binary_sha256", "started_utc", "returncode", "signal",
               "timed_out", "stdout_sha256", "stderr_sha256")
"""The keys of every ledger entry, no more, no fewer."""

CITED_FIELDS = ("returncode", "signal", "timed_out", "stdout_sha256", "stderr_sha256")
"""Fields a citing record must repeat exactly as its ledger entry holds them (besides the
argv, compared through its digest, and the citation's ``binary_sha256``)."""

SINGLE_SHOT_GATES = ("canary.coreml_negative",)
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
    """Return the path of the bound ledger file, or None when nothing is bound."""
    return _bound


def argv_sha256(argv: Sequence[str | os.PathLike]) -> str:
    """SHA-256 of the canonical JSON of an argv list (how the ledger identifies argv).

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
    """The current UTC time as ISO 8601 with microseconds (a ledger ``started_utc``)."""
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
    so it stays a malformed line of its own that :func:`check` reports, and the new entry's
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
    """The ledger's lines, a torn last line included (as :func:`append` numbers them)."""
    if not data:
        return []
    lines = data.split(b"\n")
    return lines[:-1] if data.endswith(b"\n") else lines


# ----------------------------------------------------------------------------- reading

def mark() -> int:
    """Current number of entries (lines) of the bound ledger; 0 when none is bound.

    Pass it to :func:`since` later to get the launches made in between (the stage
    plumbing does this around a gate, so a gate that raised still cites its launches).
    """
    return 0 if _bound is None else len(_lines(_read_locked(_bound)))


def since(mark_: int) -> list[dict]:
    """Entries of the bound ledger appended after :func:`mark` returned ``mark_``.

    Lines that do not parse as an entry are skipped here (:func:`check` reports them).

    Parameters
    ----------
    mark_ : int
        A value :func:`mark` returned.

    Returns
    -------
    list of dict
        The entries, in ``seq`` order.
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
    """Every entry of a run directory's ledger (an empty list when it has none).

    Raises
    ------
    LedgerError
        If any line is malformed or the ``seq`` values are not 0, 1, 2, ...
    """
    entries, problems = _scan(_read_locked(Path(run_dir) / LEDGER_FILE))
    if problems:
        raise LedgerError("; ".join(problems))
    return [entries[k] for k in sorted(entries)]


def citation(entry: Mapping[str, Any]) -> dict:
    """What a run record carries to cite its ledger entry: ``{"seq", "binary_sha256"}``."""
    return {"seq": entry["seq"], "binary_sha256": entry["binary_sha256"]}


def entry_record(entry: Mapping[str, Any]) -> dict:
    """A citing record built from a ledger entry alone.

    For evidence that has no :class:`verifylib.runtime.runner.RunResult` at hand (an ERROR gate
    citing the launches made before it raised, from :func:`since`): the argv appears as
    its digest ``argv_sha256``, which :func:`check` accepts in place of ``argv``.

    Returns
    -------
    dict
        ``launch`` (:func:`citation`), ``argv_sha256`` and :data:`CITED_FIELDS`.
    """
    out = {"launch": citation(entry), "argv_sha256": entry["argv_sha256"]}
    out.update({k: entry[k] for k in CITED_FIELDS})
    return out


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _parse_line(line: bytes) -> tuple[dict | None, str | None]:
    """An entry and None, or None and why the line is not a well-formed entry."""
    try:
        obj = canonical.loads(line)
    except (ValueError, UnicodeDecodeError) as exc:
        return None, f"not strict JSON ({exc})"
    if not isinstance(obj, dict) or set(obj) != set(SCHEMA_KEYS):
        keys = sorted(obj) if isinstance(obj, dict) else type(obj).__name__
        return None, f"not a ledger entry (keys {keys})"
    bad = [k for k in ("argv_sha256", "binary_sha256", "stdout_sha256", "stderr_sha256")
           if not is_sha256(obj[k])]
    if not _is_int(obj["seq"]) or obj["seq"] < 0:
        bad.append("seq")
    if not isinstance(obj["started_utc"], str):
        bad.append("started_utc")
    if obj["returncode"] is not None and not _is_int(obj["returncode"]):
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


def _scan(data: bytes) -> tuple[dict[int, dict], list[str]]:
    """Parse a ledger: well-formed entries by seq, and the ledger's own problems."""
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
    """The ledger ``seq`` numbers a JSON document cites (wherever its run records sit)."""
    return {c["launch"]["seq"] for _, c in _walk(doc)
            if isinstance(c["launch"], dict) and _is_int(c["launch"].get("seq"))}


def _walk(value: Any, pointer: str = "") -> Iterator[tuple[str, dict]]:
    """Every dict holding a ``"launch"`` key, with its JSON pointer."""
    if isinstance(value, dict):
        if "launch" in value:
            yield pointer or "/", value
        for k in sorted(value):
            yield from _walk(value[k], f"{pointer}/{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _walk(v, f"{pointer}/{i}")


def _same(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b


def _mismatches(cited: Mapping, entry: Mapping) -> list[str]:
    """Names of the citing record's fields that differ from its ledger entry."""
    out = []
    if "argv" in cited:
        argv = cited["argv"]
        ok = isinstance(argv, list) and all(isinstance(a, str) for a in argv) and \
            argv_sha256(argv) == entry["argv_sha256"]
        if not ok:
            out.append("argv")
    elif not _same(cited.get("argv_sha256"), entry["argv_sha256"]):
        out.append("argv (neither argv nor argv_sha256 matches)")
    for k in CITED_FIELDS:
        if k not in cited:
            out.append(f"{k} (missing)")
        elif not _same(cited[k], entry[k]):
            out.append(k)
    if not _same(cited["launch"].get("binary_sha256"), entry["binary_sha256"]):
        out.append("binary_sha256")
    return out


def _gate_order(records: Mapping[str, GateRecord]) -> list[str]:
    known = [g.id for g in gates.GATES if g.id in records]
    return known + sorted(set(records) - set(known))


def _short(digest: str) -> str:
    return f"{digest[:12]}…"


def check(run_dir: str | os.PathLike, records: Mapping[str, GateRecord]) -> list[str]:
    """Check the ledger against the launches the gates' evidence cites.

    Every JSON evidence file a gate cites is read (through
    :class:`verifylib.evidence.records.EvidenceView`, which verifies its digest) and walked; each
    dict holding a ``"launch"`` key is a citation ``{"seq", "binary_sha256"}`` and must
    repeat its entry's argv (as ``argv``, compared through :func:`argv_sha256`, or as
    ``argv_sha256``) and :data:`CITED_FIELDS`, and the citation's ``binary_sha256`` must
    be the entry's. Every entry must be cited exactly once, and each gate of
    :data:`SINGLE_SHOT_GATES` that ran must cite exactly one launch (at most one when it
    raised). A run without a ledger file is fine only if nothing cites a launch.

    Parameters
    ----------
    run_dir : path-like
        The run directory.
    records : mapping
        Gate id to :class:`verifylib.evidence.records.GateRecord` (e.g. from
        :func:`verifylib.evidence.receipt.collect_records`).

    Returns
    -------
    list of str
        Problems, each naming the gate it concerns (or ``ledger:`` for the file itself);
        empty when the ledger and the evidence agree.
    """
    run_dir = Path(run_dir)
    path = run_dir / LEDGER_FILE
    has_ledger = path.is_file()
    entries, problems = _scan(path.read_bytes()) if has_ledger else ({}, [])

    # Citations per evidence file, read once per path: two gates citing one shared file
    # (the same bytes) must not count its launches twice, so a file's citations belong to
    # the first gate, in registry order, that cites it.
    owner: dict[str, str] = {}
    per_file: dict[str, list[tuple[str, dict]]] = {}
    gate_files: dict[str, list[str]] = {}
    for gid in _gate_order(records):
        gate_files[gid] = []
        for ref in records[gid].evidence:
            if not ref.path.endswith(".json") or ref.path in gate_files[gid]:
                continue
            try:
                doc = EvidenceView(run_dir, [ref]).json(ref.name)
            except EvidenceError as exc:
                problems.append(f"{gid}: cannot read evidence {ref.path} for its launches: {exc}")
                continue
            gate_files[gid].append(ref.path)
            owner.setdefault(ref.path, gid)
            if ref.path not in per_file:
                per_file[ref.path] = list(_walk(doc))

    cited_by: dict[int, list[tuple[str, str]]] = {}
    for gid, files in gate_files.items():
        for fpath in files:
            for pointer, d in per_file[fpath]:
                where = f"{fpath}#{pointer}"
                launch = d["launch"]
                if not (isinstance(launch, dict) and set(launch) == {"seq", "binary_sha256"}
                        and _is_int(launch["seq"]) and launch["seq"] >= 0
                        and is_sha256(launch["binary_sha256"])):
                    problems.append(f"{gid}: malformed launch citation {launch!r} at {where}")
                    continue
                if owner[fpath] != gid:
                    continue  # counted under the file's first gate
                seq = launch["seq"]
                cited_by.setdefault(seq, []).append((gid, where))
                entry = entries.get(seq)
                if entry is None:
                    why = "" if has_ledger else f" (the run has no {LEDGER_FILE})"
                    problems.append(f"{gid}: launch #{seq} cited at {where} is missing from "
                                    f"the ledger{why}")
                    continue
                bad = _mismatches(d, entry)
                if bad:
                    problems.append(f"{gid}: launch #{seq} cited at {where} differs from its "
                                    f"ledger entry in {', '.join(bad)}")

    for seq, cites in sorted(cited_by.items()):
        if len(cites) < 2:
            continue
        gids = sorted({g for g, _ in cites}, key=_gate_order(records).index)
        places = ", ".join(w for _, w in cites)
        if len(gids) > 1:
            problems.append(f"{' and '.join(gids)}: launch #{seq} is cited by {len(gids)} "
                            f"gates ({places}); each launch belongs to exactly one gate")
        else:
            problems.append(f"{gids[0]}: launch #{seq} is cited {len(cites)} times ({places})")

    # Who launched what, to name the gate behind an uncited entry.
    by_argv: dict[str, list[tuple[str, int]]] = {}
    for seq, cites in cited_by.items():
        if seq in entries:
            by_argv.setdefault(entries[seq]["argv_sha256"], []).append((cites[0][0], seq))
    cited_seqs = sorted(s for s in cited_by if s in entries)
    for seq in sorted(entries):
        if seq in cited_by:
            continue
        e = entries[seq]
        same = sorted(by_argv.get(e["argv_sha256"], []), key=lambda t: t[1])
        if same:
            gid = same[0][0]
            problems.append(
                f"{gid}: uncited launch #{seq} (argv {_short(e['argv_sha256'])}, the same "
                f"command line as {gid}'s launch #{same[0][1]}, a retried or hidden run)")
            continue
        before = [s for s in cited_seqs if s < seq]
        after = [s for s in cited_seqs if s > seq]
        around = []
        if before:
            around.append(f"after {cited_by[before[-1]][0][0]}'s launch #{before[-1]}")
        if after:
            around.append(f"before {cited_by[after[0]][0][0]}'s launch #{after[0]}")
        problems.append(
            f"uncited launch #{seq} (argv {_short(e['argv_sha256'])}, binary "
            f"{_short(e['binary_sha256'])}, started {e['started_utc']}, "
            f"{' and '.join(around) or 'no gate cites any launch'}, a retried or hidden run)")

    for gid in SINGLE_SHOT_GATES:
        rec = records.get(gid)
        if rec is None:
            continue
        n = sum(len(per_file[f]) for f in gate_files.get(gid, []))
        ran = rec.status in (Status.PASS, Status.FAIL)
        if (ran and n != 1) or (not ran and n > 1):
            problems.append(f"{gid}: cites {n} launches; this single-shot gate owns exactly "
                            f"one launch (its first and only run)")
    return problems
