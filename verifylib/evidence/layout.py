"""The run directory's names and its one run-id format.

This is what every writer and reader of a run agrees on. A run directory holds
``run.json``, ``gates/<stage>.json``, ``evidence/<stage>/`` and ``receipt.json``; this
module names them, creates ``run.json``, reads the stage files back and owns the run id
(:func:`new_run_id` makes one, :data:`RUN_ID_RE` recognises one).
"""

from __future__ import annotations

import datetime as _dt
import os
import re
import secrets
from pathlib import Path
from typing import Any, Sequence

from verifylib import canonical
from verifylib.evidence import gates, identities
from verifylib.evidence.records import GateRecord

RUN_FILE = "run.json"


GATES_DIR = "gates"


EVIDENCE_DIR = "evidence"


RECEIPT_FILE = "receipt.json"


ERROR_SCHEMA = "verifylib-error/1"


TRACEBACK_EVIDENCE = "traceback"


def error_document(gate_id: str, text: str,
                   launches: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """Return the stored traceback of an ERROR gate (with the launches made before it broke).

    Parameters
    ----------
    gate_id : str
        The gate that errored.
    text : str
        The traceback or the stage's error text.
    launches : list of dict, optional
        Run records (with their ledger citations) of launches made inside the gate.
    """
    return {"schema": ERROR_SCHEMA, "gate": gate_id, "traceback": text,
            "launches": list(launches or [])}


def error_filename(gate_id: str) -> str:
    """File name of a gate's stored traceback inside its stage's evidence folder."""
    return f"error.{gate_id}.json"


STAMP_FORMAT = "%Y%m%dT%H%M%SZ"
"""The UTC second at the head of a run id (and of other sortable names, such as
``verifylib compare``'s output folders)."""


def new_run_id() -> str:
    """Return a sortable run id such as ``20261130T062000Z-3f9a07c2``.

    The UTC second sorts runs by start; the 32 random bits tell apart runs of one model
    started in the same second (several ``verifylib run`` processes on one reports
    folder). Uniqueness is not left to chance: ``verifylib run`` reserves the id
    exclusively in the model's staging area and draws again on a clash.

    Returns
    -------
    str
        ``<YYYYmmddTHHMMSSZ>-<8 hex digits>``.
    """
    now = _dt.datetime.now(_dt.timezone.utc).strftime(STAMP_FORMAT)
    return f"{now}-{secrets.token_hex(4)}"


def run_id_time(run_id: str) -> _dt.datetime:
    """Return the UTC time a run id was made.

    Parameters
    ----------
    run_id : str
        A run id (:data:`RUN_ID_RE`).

    Returns
    -------
    datetime.datetime
        The second at its head, timezone-aware (UTC).

    Raises
    ------
    ValueError
        When ``run_id`` does not start with a UTC stamp.
    """
    stamp = _dt.datetime.strptime(run_id.split("-", 1)[0], STAMP_FORMAT)
    return stamp.replace(tzinfo=_dt.timezone.utc)


def read_stage_file(run_dir: Path, stage: str) -> dict[str, Any] | None:
    """Return a stage's gates file, or None if the stage has not written one."""
    path = Path(run_dir) / GATES_DIR / f"{stage}.json"
    return canonical.read_json(path) if path.exists() else None


def recorded_gates(run_dir: Path) -> dict[str, GateRecord]:
    """All gate records written so far in a run directory, by gate id."""
    out = {}
    for stage in gates.STAGES:
        data = read_stage_file(run_dir, stage)
        if data:
            for rec in data["gates"]:
                out[rec["id"]] = GateRecord.from_record(rec)
    return out


RUN_ID_RE = re.compile(r"^\d{8}T\d{6}Z-[0-9a-f]{4,}$")


UNPATCHED_SIDECAR = "unpatched_build"
"""Stage 01's sidecar for the unpatched build (the "A" side of the lifecycle A/B)."""


UNPATCHED_IDENTITY = identities.BINARY_GGML_UNPATCHED
"""Stage 01's identity for the unpatched binary's digest."""


ASAN_SIDECAR = "asan_builds"
"""Stage 01's sidecar for the AddressSanitizer builds (the two sides of ``canary.sanitizer``)."""

SEAM_SIDECAR = "seam_builds"
"""Stage 01's sidecar for the seam builds (patched, unpatched, unpatched under
AddressSanitizer: docs/runtime-contract.md §11)."""


USER_PINS_FOLDER = "user-pins"
"""Folder of stage 01's evidence holding the copy of a user's pin manifest and its patches,
at their paths relative to the manifest, byte for byte."""

USER_MANIFEST_EVIDENCE = "user_manifest"
"""Evidence name of the carried copy of a user's pin manifest."""

USER_PATCH_EVIDENCE = "user_patch:"
"""Prefix of the evidence names of the carried patch files (``user_patch:<path>``, the
path as the manifest names it)."""


def stamped_dir(parent: Path, prefix: str, now: _dt.datetime | None = None) -> Path:
    """Return ``parent/<prefix>-<UTC time>`` that does not exist yet (``-2``, ``-3`` … appended).

    Parameters
    ----------
    parent : Path
        The folder to name it in.
    prefix : str
        The name before the time.
    now : datetime, optional
        The time to name the folder after (default: now).

    Returns
    -------
    Path
    """
    stamp = (now or _dt.datetime.now(_dt.timezone.utc)).strftime(STAMP_FORMAT)
    out = parent / f"{prefix}-{stamp}"
    n = 1
    while out.exists():  # two in one second keep both
        n += 1
        out = parent / f"{prefix}-{stamp}-{n}"
    return out


def inside_a_run(out_dir: str | os.PathLike[str],
                 runs: Sequence[str | os.PathLike[str]]) -> str | None:
    """Return the run directory ``out_dir`` lies in, if any (nothing writes into a run).

    Parameters
    ----------
    out_dir : path-like
        Where the page would be written.
    runs : sequence of path-like
        The compared run directories.

    Returns
    -------
    str or None
        The resolved run directory that is ``out_dir`` or holds it; None if none does.
    """
    out = Path(out_dir).expanduser().resolve()
    for r in runs:
        rp = Path(r).expanduser().resolve()
        if out == rp or rp in out.parents:
            return str(rp)
    return None
