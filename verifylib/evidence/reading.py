"""What every stage's facts and result builders share.

Evidence is read only from judged, cited gates (:func:`judged_evidence`); a run record is
described in one set of words (:func:`describe_run`); a facts table is the rows its facts
give (:func:`fact_rows`).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Mapping

if TYPE_CHECKING:
    from verifylib.evidence.records import EvidenceView, GateRecord

__all__ = ["judged_evidence", "describe_run", "fact_rows", "has_rows"]


def judged_evidence(run_dir: str | os.PathLike[str], records: Mapping[str, GateRecord],
                    gate_id: str, name: str) -> EvidenceView | None:
    """Return the verified evidence of ``gate_id`` if its rule judged it on file ``name``.

    The ``*_from_evidence`` builders below read a stage's result through this one door:
    a gate contributes to the result exactly when its rule judged it (PASS or FAIL) and
    its record cites the document the stage writes for it. Such evidence is complete (the
    stage writes it all before the rule judges it, and the rule read it); a gate that did
    not run, or broke (ERROR, perhaps with partial evidence), contributes nothing. Every
    cited file is digest-checked before anything is read.

    Parameters
    ----------
    run_dir : path-like
        The run directory.
    records : mapping
        Gate id -> :class:`verifylib.evidence.records.GateRecord`.
    gate_id : str
        The gate.
    name : str
        The evidence name of its main document (``"lifecycle"``, ``"wer"``, ...).

    Returns
    -------
    verifylib.evidence.records.EvidenceView or None

    Raises
    ------
    verifylib.errors.EvidenceInvalid
        If a cited file is missing or its digest differs from the record.
    """
    from pathlib import Path

    from verifylib.evidence.gates import Status
    from verifylib.evidence.records import EvidenceView

    rec = records.get(gate_id)
    if rec is None or rec.status not in (Status.PASS, Status.FAIL) \
            or not any(r.name == name for r in rec.evidence):
        return None
    return EvidenceView(Path(run_dir), rec.evidence, rec.identities)


def describe_run(record: Mapping[str, Any]) -> str:
    """Describe how a recorded run ended.

    The words are those of :meth:`verifylib.runtime.runner.RunResult.describe`.
    """
    if record.get("timed_out"):
        return f"timed out after {record['wall_s']:.1f}s"
    if record.get("signal"):
        return f"killed by {record['signal']} (return code {record['returncode']})"
    return f"exit {record['returncode']}"


def has_rows(facts: Any) -> bool:
    """Tell whether a facts object has any row to show (its ``__bool__``).

    Parameters
    ----------
    facts : object
        Typed facts with a ``rows()`` method.

    Returns
    -------
    bool
    """
    return bool(facts.rows())


def fact_rows(facts: Any) -> list[tuple[str, Any]]:
    """Return the (label, value) rows a stage's facts table shows.

    Parameters
    ----------
    facts : typed facts or mapping
        ``StageReport.facts``: the typed facts of stages 01/02 (their ``rows()``), or a
        plain label -> value mapping (the empty dict of the other stages).

    Returns
    -------
    list of (str, object)
    """
    rows = getattr(facts, "rows", None)
    if callable(rows):
        table: list[tuple[str, Any]] = rows()
        return table
    return list(dict(facts or {}).items())
