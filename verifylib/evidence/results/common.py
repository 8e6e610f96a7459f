"""What every stage's result builder shares: evidence read only from judged, cited gates."""

from __future__ import annotations

from typing import Any, Mapping

__all__ = ["judged_evidence"]


def judged_evidence(run_dir, records: Mapping[str, Any], gate_id: str, name: str):
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


# ----------------------------------------------------------------------------- 03_canary


# ----------------------------------------------------------------------------- 04_parity


# ----------------------------------------------------------------------------- 05_wer


# ----------------------------------------------------------------------------- 06_placement


# ----------------------------------------------------------------------------- 01_build, 02_export


# ----------------------------------------------------------------------------- stages 01 and 02


