"""The receipt and its validator.

``receipt.json`` binds every gate's status, reason and evidence digests to one identity
table and lists every file of the run with its SHA-256. :func:`verify` trusts none of it:
it re-hashes every file, re-runs each gate's registered rule on the stored evidence,
recomputes the verdict from the registry, and fails closed on any disagreement.
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from . import canonical, gates
from .capabilities import detect
from .evidence import EvidenceError, EvidenceView, GateRecord
from .gates import NotRunKind, Status, Verdict
from .stage import GATES_DIR, RUN_FILE, read_stage_file

RECEIPT_FILE = "receipt.json"
SCHEMA = "verifylib-receipt/1"
# Files the receipt covers; the rendered reports are derived from it and come after.
COVERED_DIRS = ("evidence", GATES_DIR, "notebooks", "fp32", "fp16")


def _ensure_rules_loaded() -> None:
    # Importing the stage modules registers their rules with the gate registry.
    from . import stages  # noqa: F401


def _covered_files(run_dir: Path) -> list[str]:
    out = [RUN_FILE] if (run_dir / RUN_FILE).exists() else []
    for d in COVERED_DIRS:
        base = run_dir / d
        if base.is_dir():
            out += [p.relative_to(run_dir).as_posix() for p in sorted(base.rglob("*"))
                    if p.is_file()]
    return sorted(out)


def collect_records(run_dir: Path, stage_errors: dict[str, str] | None = None
                    ) -> tuple[dict[str, GateRecord], dict[str, Any]]:
    """Gather every gate's record and the merged identity table from a run directory.

    A gate without a record (its stage crashed, or never ran) becomes ERROR when its
    stage is named in ``stage_errors``, else NOT_RUN(prerequisite) if a prerequisite did
    not pass, else ERROR ("stage wrote no record"): never PASS.

    Parameters
    ----------
    run_dir : Path
        The run directory.
    stage_errors : dict, optional
        Stage name to the error text of a notebook that raised.

    Returns
    -------
    (records, identities)
    """
    from .evidence import Reason
    stage_errors = stage_errors or {}
    records: dict[str, GateRecord] = {}
    identities: dict[str, Any] = {}
    conflicts = []
    for stage in gates.STAGES:
        data = read_stage_file(run_dir, stage)
        if not data:
            continue
        for rec in data["gates"]:
            records[rec["id"]] = GateRecord.from_record(rec)
        for k, v in data.get("identities", {}).items():
            if k in identities and identities[k] != v:
                conflicts.append(k)
            identities.setdefault(k, v)
    if conflicts:
        raise EvidenceError(f"stages recorded different values for identities: {conflicts}")
    for g in gates.GATES:
        if g.id in records:
            continue
        if g.stage in stage_errors:
            records[g.id] = GateRecord(g.id, Status.ERROR, Reason(
                "exception", f"stage {g.stage} raised before judging this gate:\n"
                             f"{stage_errors[g.stage]}"))
            continue
        unmet = [p for p in g.prerequisites
                 if p in records and records[p].status is not Status.PASS]
        if unmet:
            records[g.id] = GateRecord(g.id, Status.NOT_RUN, Reason(
                NotRunKind.PREREQUISITE.value,
                ", ".join(f"{p} is {records[p].status.value}" for p in unmet)))
        else:
            records[g.id] = GateRecord(g.id, Status.ERROR, Reason(
                "exception", f"stage {g.stage} wrote no record for this gate"))
    return records, identities


def build_receipt(run_dir: Path, stage_errors: dict[str, str] | None = None) -> dict:
    """Write ``receipt.json`` for a run directory and return it.

    Parameters
    ----------
    run_dir : Path
        A run directory whose stages have finished.
    stage_errors : dict, optional
        Stages whose notebook raised, with the error text.

    Returns
    -------
    dict
        The receipt as written.
    """
    run_dir = Path(run_dir)
    records, identities = collect_records(run_dir, stage_errors)
    run = canonical.read_json(run_dir / RUN_FILE)
    statuses = {k: r.status for k, r in records.items()}
    v = gates.verdict(statuses)
    receipt = {
        "schema": SCHEMA,
        "run_id": run["run_id"],
        "name": run["name"],
        "params_sha256": run["params_sha256"],
        "host": run["host"],
        "packages": run.get("packages", {}),
        "identities": identities,
        "gates": [dict(records[g.id].to_record(), stage=g.stage, required=g.required)
                  for g in gates.GATES],
        "verdict": v.value,
        "files": [{"path": p, "sha256": canonical.sha256_file(run_dir / p)}
                  for p in _covered_files(run_dir)],
    }
    canonical.write_json(run_dir / RECEIPT_FILE, receipt)
    return receipt


@dataclass
class VerifyResult:
    """Outcome of :func:`verify`.

    Attributes
    ----------
    ok : bool
        True when every check held.
    problems : list of str
        Each disagreement found, naming the file or gate.
    verdict : str or None
        The verdict recomputed from the evidence (None if it could not be).
    """

    ok: bool
    problems: list[str] = field(default_factory=list)
    verdict: str | None = None


def _identity_value_problem(key: str, value: Any) -> str | None:
    if key.endswith("sha256") or key.endswith("digest"):
        if not canonical.is_sha256(value):
            return f"identity {key}: malformed digest {value!r}"
    if key.endswith(".tree") or key.endswith(".commit"):
        if not (isinstance(value, str) and len(value) == 40
                and all(c in "0123456789abcdef" for c in value)):
            return f"identity {key}: malformed git id {value!r}"
    return None


def verify(run_dir: str | Path) -> VerifyResult:
    """Re-verify a run directory from its files alone.

    Parameters
    ----------
    run_dir : path-like
        A published run directory holding ``receipt.json``.

    Returns
    -------
    VerifyResult
        ``ok`` is False, with the problems named, on a missing or changed file, a
        malformed digest, a status that the evidence does not support, an edited verdict,
        or disagreeing identities.
    """
    _ensure_rules_loaded()
    run_dir = Path(run_dir)
    problems: list[str] = []
    rpath = run_dir / RECEIPT_FILE
    if not rpath.is_file():
        return VerifyResult(False, [f"{rpath}: receipt missing"])
    try:
        receipt = canonical.read_json(rpath)
    except ValueError as exc:
        return VerifyResult(False, [f"{rpath}: not strict JSON: {exc}"])
    if not isinstance(receipt, dict) or receipt.get("schema") != SCHEMA:
        return VerifyResult(False, [f"{rpath}: not a {SCHEMA} receipt"])

    # 1. Every covered file, re-hashed; nothing extra planted, nothing missing.
    listed = {}
    for f in receipt.get("files", []):
        path, sha = f.get("path"), f.get("sha256")
        if not isinstance(path, str) or PurePosixPath(path).is_absolute() or ".." in PurePosixPath(path).parts:
            problems.append(f"receipt lists a bad path {path!r}")
            continue
        listed[path] = sha
        if not canonical.is_sha256(sha):
            problems.append(f"{path}: malformed digest {sha!r}")
        elif not (run_dir / path).is_file():
            problems.append(f"{path}: missing")
        elif canonical.sha256_file(run_dir / path) != sha:
            problems.append(f"{path}: changed (SHA-256 differs from the receipt)")
    for path in _covered_files(run_dir):
        if path not in listed:
            problems.append(f"{path}: present but not listed in the receipt")
    if RUN_FILE not in listed:
        problems.append(f"{RUN_FILE}: not covered by the receipt")

    # 2. The receipt's gate rows must be exactly the registry's and match the sidecars.
    rows = {g.get("id"): g for g in receipt.get("gates", []) if isinstance(g, dict)}
    if len(rows) != len(receipt.get("gates", [])):
        problems.append("receipt gate rows are malformed or duplicated")
    unknown = sorted(set(rows) - set(gates.BY_ID), key=str)
    if unknown:
        problems.append(f"receipt names unknown gates: {unknown}")
    sidecar: dict[str, dict] = {}
    for stage in gates.STAGES:
        try:
            data = read_stage_file(run_dir, stage)
        except ValueError as exc:
            problems.append(f"{GATES_DIR}/{stage}.json: unreadable: {exc}")
            data = None
        for rec in (data or {}).get("gates", []):
            sidecar[rec.get("id")] = rec

    try:
        run = canonical.read_json(run_dir / RUN_FILE)
        host_caps = run["host"]["capabilities"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        problems.append(f"{RUN_FILE}: unreadable: {exc}")
        host_caps = {}

    statuses: dict[str, Status] = {}
    table = receipt.get("identities", {})
    if not isinstance(table, dict):
        problems.append("identity table malformed")
        table = {}
    for key, value in table.items():
        msg = _identity_value_problem(key, value)
        if msg:
            problems.append(msg)

    for g in gates.GATES:
        row = rows.get(g.id)
        if row is None:
            problems.append(f"gate {g.id}: missing from the receipt")
            continue
        if row.get("stage") != g.stage or row.get("required") != g.required:
            problems.append(f"gate {g.id}: stage/required differ from the registry")
        core = {k: v for k, v in row.items() if k not in ("stage", "required")}
        try:
            rec = GateRecord.from_record(core)
        except EvidenceError as exc:
            problems.append(f"gate {g.id}: {exc}")
            continue
        statuses[g.id] = rec.status
        if g.id in sidecar and sidecar[g.id] != core:
            problems.append(f"gate {g.id}: receipt row differs from {GATES_DIR}/{g.stage}.json")
        for k, v in rec.identities.items():
            if table.get(k) != v:
                problems.append(f"gate {g.id}: identity {k} differs from the identity table")
        problems += _check_status(run_dir, g, rec, host_caps)

    # 3. Prerequisites: nothing passes on top of a gate that did not.
    for g in gates.GATES:
        if statuses.get(g.id) is Status.PASS:
            for p in g.prerequisites:
                if statuses.get(p) is not Status.PASS:
                    problems.append(f"gate {g.id}: PASS although prerequisite {p} is "
                                    f"{statuses.get(p, 'missing')}")

    # 4. The verdict, recomputed.
    recomputed = None
    if len(statuses) == len(gates.GATES):
        recomputed = gates.verdict(statuses).value
        if receipt.get("verdict") != recomputed:
            problems.append(f"verdict: receipt says {receipt.get('verdict')!r}, evidence gives "
                            f"{recomputed!r}")
    return VerifyResult(not problems, problems, recomputed)


def _check_status(run_dir: Path, g: gates.Gate, rec: GateRecord, host_caps: dict) -> list[str]:
    out = []
    if rec.status in (Status.PASS, Status.FAIL):
        if host_caps and not host_caps.get(g.capability.value, False):
            out.append(f"gate {g.id}: {rec.status.value} recorded on a host without "
                       f"capability {g.capability.value}")
        fn = gates.RULES.get(g.id)
        if fn is None:
            return out + [f"gate {g.id}: {rec.status.value} but no rule exists to re-judge it"]
        if not rec.evidence:
            return out + [f"gate {g.id}: {rec.status.value} without evidence"]
        try:
            j = fn(EvidenceView(run_dir, rec.evidence))
        except EvidenceError as exc:
            return out + [f"gate {g.id}: {exc}"]
        except Exception as exc:  # a rule that cannot read the evidence rejects it
            return out + [f"gate {g.id}: evidence does not support re-judging "
                          f"({type(exc).__name__}: {exc})"]
        if j.status is not rec.status:
            out.append(f"gate {g.id}: recorded {rec.status.value} but the evidence gives "
                       f"{j.status.value} ({j.detail})")
    elif rec.status is Status.NOT_RUN:
        if rec.evidence:
            out.append(f"gate {g.id}: NOT_RUN but cites evidence")
        if rec.reason.kind == NotRunKind.PLATFORM.value and host_caps.get(g.capability.value):
            out.append(f"gate {g.id}: NOT_RUN(platform) on a host that has "
                       f"{g.capability.value}")
    elif rec.status is Status.ERROR:
        if not rec.reason.detail.strip():
            out.append(f"gate {g.id}: ERROR without its error text")
    return out
