"""Failure records: what a reports folder keeps of an audit that published no run.

A model whose audit ends ERROR without a run (its audit raised, its worker or Ray task
died, its returned run did not verify) has no receipt to be listed by, so the batch writes
``<reports>/<name>/.failed/<id>.json`` (format ``verifylib-failed-audit/1``): written
under a staging name and linked into place, never rewritten. The reports index lists these
records beside the runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from verifylib import canonical
from verifylib.errors import EvidenceInvalid
from verifylib.evidence.gates import Status

FAILED = ".failed"
"""Folder of a model's failure records: ``<reports>/<name>/.failed/<id>.json``."""


FAILURE_FORMAT = "verifylib-failed-audit/1"
"""The ``format`` of a failure record."""


MAX_REASON_CHARS = 2000


@dataclass(frozen=True)
class FailureRecord:
    """An audit that ended ERROR without publishing a run: what the index lists for it.

    Written once by the batch that saw the failure, into
    ``<reports>/<name>/.failed/<id>.json`` (canonical JSON), and never rewritten; a
    later run of the model does not remove it.

    Attributes
    ----------
    id : str
        ``<UTC second>-<8 hex>`` as a run id (sorts by time), also the file name.
    name : str
        Model name.
    parameters : str
        The parameter file the model came from (``Params.origin``).
    reason : str
        Why no run was published (the worker's exit, the task's exception, the refused
        run's problems).
    executor : dict
        How it ran: ``kind`` (``local`` or ``ray``), ``node`` (host name, None when
        unknown), and what else the executor knew (``jobs``, ``ray_node_id``).
    time : str
        When the failure was recorded, ISO 8601 UTC (``2026-12-01T08:31:18Z``).
    status : Status
        Always ``Status.ERROR``.
    traceback : str or None
        The traceback, when it was kept out of the console (a host fault says one line
        there); absent from older records.
    """

    id: str
    name: str
    parameters: str
    reason: str
    executor: dict[str, Any]
    time: str
    status: Status = Status.ERROR
    traceback: str | None = None

    def to_json(self) -> dict[str, Any]:
        """Return the record as stored (with its ``format``).

        Returns
        -------
        dict
        """
        return {"format": FAILURE_FORMAT, "id": self.id, "name": self.name,
                "parameters": self.parameters, "status": self.status.value, "reason": self.reason,
                "executor": dict(self.executor), "time": self.time,
                **({} if self.traceback is None else {"traceback": self.traceback})}

    @classmethod
    def from_json(cls, data: Any) -> "FailureRecord":
        """Read a stored record, checking every field's type.

        Parameters
        ----------
        data : any
            The parsed JSON.

        Returns
        -------
        FailureRecord

        Raises
        ------
        verifylib.errors.EvidenceInvalid
            A ``ValueError``, for a record of another format or with a missing or mistyped
            field (named); :func:`read_failures` pairs the message with the record's file.
        """
        if not isinstance(data, dict) or data.get("format") != FAILURE_FORMAT:
            raise EvidenceInvalid(f"not a {FAILURE_FORMAT} record")
        for key in ("id", "name", "parameters", "status", "reason", "time"):
            if not isinstance(data.get(key), str):
                raise EvidenceInvalid(f"field {key!r} is missing or not a string")
        if data["status"] != Status.ERROR.value:
            raise EvidenceInvalid(f"status {data['status']!r} is not ERROR")
        if not isinstance(data.get("executor"), dict):
            raise EvidenceInvalid("field 'executor' is missing or not an object")
        if data.get("traceback") is not None and not isinstance(data["traceback"], str):
            raise EvidenceInvalid("field 'traceback' is not a string")
        return cls(data["id"], data["name"], data["parameters"], data["reason"],
                   dict(data["executor"]), data["time"], Status.ERROR, data.get("traceback"))


def publish_failure(reports_root: str | Path, *, name: str, parameters: str, reason: str,
                    executor: dict[str, Any], traceback: str | None = None) -> Path:
    """Record that a model's audit ended ERROR without publishing a run.

    The record (:class:`FailureRecord`) is written to a staging file in
    ``<reports>/<name>/.failed/`` and linked to ``<id>.json`` once complete: a reader
    (the index rebuild of another process) never sees half a record, and an existing
    record is never replaced (a clash of ids draws another).

    Parameters
    ----------
    reports_root : path-like
        The reports folder.
    name : str
        Model name.
    parameters : str
        The model's parameter file.
    reason : str
        Why no run was published (cut to :data:`MAX_REASON_CHARS`).
    executor : dict
        How and where it ran (see :attr:`FailureRecord.executor`).
    traceback : str, optional
        The traceback kept out of the console (see :attr:`FailureRecord.traceback`).

    Returns
    -------
    Path
        The published record.
    """
    from verifylib.evidence.layout import new_run_id, run_id_time

    folder = Path(reports_root) / name / FAILED
    folder.mkdir(parents=True, exist_ok=True)
    if len(reason) > MAX_REASON_CHARS:
        reason = reason[:MAX_REASON_CHARS - 1] + "…"
    for _ in range(100):
        record_id = new_run_id()
        stamp = run_id_time(record_id)
        rec = FailureRecord(record_id, name, parameters, reason, dict(executor),
                            stamp.strftime("%Y-%m-%dT%H:%M:%SZ"), traceback=traceback)
        path = folder / f"{record_id}.json"
        try:
            canonical.atomic_write_bytes(path, canonical.dumps(rec.to_json()), replace=False)
        except FileExistsError:
            continue
        return path
    raise FileExistsError(f"no free failure record id in {folder} after 100 draws")


def read_failures(reports_root: str | Path) -> list[tuple[Path, FailureRecord | str]]:
    """Every failure record in the reports folder, oldest first within each model.

    Parameters
    ----------
    reports_root : path-like
        The reports folder.

    Returns
    -------
    list of (Path, FailureRecord or str)
        Each record file with its record, or with why it cannot be read (an unreadable
        record is reported, never skipped: it stands for a failure all the same).
    """
    out: list[tuple[Path, FailureRecord | str]] = []
    for path in sorted(Path(reports_root).glob(f"*/{FAILED}/*.json")):
        if path.name.startswith(".") or path.parent.parent.name.startswith("."):
            continue  # a record still being written, or not a model's folder
        try:
            rec = FailureRecord.from_json(canonical.read_json(path))
        except (OSError, ValueError) as exc:
            out.append((path, f"unreadable failure record: {exc}"))
            continue
        if rec.name != path.parent.parent.name or f"{rec.id}.json" != path.name:
            out.append((path, f"failure record of {rec.name!r} ({rec.id}) misplaced"))
            continue
        out.append((path, rec))
    return out
