"""The receipt and its validator.

``receipt.json`` binds every gate's status, reason and evidence digests to one identity
table and lists every file of the run with its SHA-256. :func:`verify` trusts none of it.
It re-hashes every file and re-justifies every status with its own knowledge -- the gate
registry (:mod:`verifylib.evidence.gates`), the rules registry
(:mod:`verifylib.evidence.registry`, never the stage modules), the packaged policies,
the pin manifest, the runtime contract and the launch ledger -- never with what the
evidence says about itself:

- PASS/FAIL: the gate's rule re-judged on the stored evidence (and a PASS must have read
  every file it cites); an identity that disagrees with an earlier stage's makes it FAIL.
- NOT_RUN(platform): the host record (its capabilities re-derived from its facts) lacks
  the gate's capability. NOT_RUN(prerequisite): it names a prerequisite whose verified
  status is not PASS. NOT_RUN(disabled): the bound parameters switch it off by a key the
  registry lists. NOT_RUN(not-implemented): the registry says the gate is unimplemented.
- ERROR (reason ``exception`` or ``prerequisite-broken``): it cites a stored traceback
  whose text is the recorded reason.

Building the receipt never aborts without a verdict: an identity conflict becomes a FAIL,
an unreadable stage file or any exception becomes ERROR gates citing their traceback.
"""

from __future__ import annotations

import re
import traceback
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Iterable, Mapping

from verifylib import canonical
from verifylib.errors import EvidenceInvalid, PrerequisiteBroken
from verifylib.evidence import accounting, gates
from verifylib.evidence import registry as rules
from verifylib.evidence.declarations import declaration_problems
from verifylib.evidence.gates import NotRunKind, Status
from verifylib.evidence.layout import (
    ERROR_SCHEMA,
    EVIDENCE_DIR,
    GATES_DIR,
    RECEIPT_FILE,
    RUN_FILE,
    TRACEBACK_EVIDENCE,
    error_document,
    error_filename,
    read_stage_file,
)
from verifylib.evidence.receipt_schema import (
    SCHEMA,
    SCHEMA_V1,
    SCHEMAS,
    FileDigest,
    Receipt,
    ReceiptGate,
)
from verifylib.evidence.records import (
    ERROR_EXCEPTION,
    ERROR_KINDS,
    ERROR_PREREQUISITE_BROKEN,
    EvidenceRef,
    EvidenceView,
    GateRecord,
    Reason,
)
from verifylib.runtime import ledger
from verifylib.runtime.capabilities import HostCapabilities
from verifylib.runtime.host_faults import host_fault

# Files the receipt covers; the rendered reports are derived from it and come after.
COVERED_DIRS = (EVIDENCE_DIR, GATES_DIR, "notebooks", "fp32", "fp16")
COVERED_TOP = (RUN_FILE, ledger.LEDGER_FILE)
RECEIPT_ERRORS = "_receipt"
"""Evidence folder of tracebacks written while building the receipt itself."""
CONFLICT = "identity conflict"


def _covered_files(run_dir: Path) -> list[str]:
    out = [name for name in COVERED_TOP if (run_dir / name).is_file()]
    for d in COVERED_DIRS:
        base = run_dir / d
        if base.is_dir():
            out += [p.relative_to(run_dir).as_posix() for p in sorted(base.rglob("*"))
                    if p.is_file()]
    return sorted(out)


# ----------------------------------------------------------------------------- identities

@dataclass(frozen=True)
class IdentityMerge:
    """The run's identity table and the gates whose identities contradict it.

    Attributes
    ----------
    table : dict
        Identity key to value; the first stage (in pipeline order) that records a key
        fixes its value.
    conflicts : dict
        Gate id to the conflict messages that make it FAIL.
    """

    table: dict[str, Any]
    conflicts: dict[str, list[str]]


def merge_identities(stage_files: Mapping[str, Any]) -> IdentityMerge:
    """Merge the stages' identity tables in pipeline order (used to build and to verify).

    A gate that binds a value other than the one an earlier stage recorded gets a
    conflict; so does every judged gate of a stage whose own table disagrees without any
    gate carrying the key (the stage as a whole relied on another value).
    """
    table: dict[str, Any] = {}
    origin: dict[str, str] = {}
    conflicts: dict[str, list[str]] = {}
    for stage in gates.STAGES:
        data = stage_files.get(stage)
        if not isinstance(data, Mapping):
            continue
        recs = [r for r in data.get("gates", []) if isinstance(r, Mapping)]
        ids = data.get("identities")
        for key, value in (ids.items() if isinstance(ids, Mapping) else ()):
            if key in table and table[key] != value:
                carriers = [r["id"] for r in recs if isinstance(r.get("identities"), Mapping)
                            and key in r["identities"] and r["identities"][key] != table[key]]
                if not carriers:
                    carriers = [r["id"] for r in recs
                                if r.get("status") in (Status.PASS, Status.FAIL)]
                for gid in carriers:
                    conflicts.setdefault(gid, []).append(
                        f"{CONFLICT}: {key} is {value!r} here but stage {origin[key]} recorded "
                        f"{table[key]!r}")
            else:
                table.setdefault(key, value)
                origin.setdefault(key, stage)
    return IdentityMerge(table, {k: sorted(set(v)) for k, v in conflicts.items()})


# ----------------------------------------------------------------------------- building

def _write_traceback(run_dir: Path, folder: str, gate_id: str, text: str) -> EvidenceRef:
    base = Path(run_dir) / EVIDENCE_DIR / folder
    path = base / error_filename(gate_id)
    n = 1
    while path.exists():  # a gate's own traceback is never replaced
        n += 1
        path = base / error_filename(f"{gate_id}.{n}")
    sha = canonical.write_json(path, error_document(gate_id, text))
    return EvidenceRef(TRACEBACK_EVIDENCE, path.relative_to(run_dir).as_posix(), sha)


_BROKEN = f"{PrerequisiteBroken.__module__}.{PrerequisiteBroken.__qualname__}"


def _final_exception(text: str) -> str | None:
    """Return the qualified class name of the exception a formatted traceback ends with.

    The last ``Traceback (most recent call last):`` block is the exception that escaped
    (earlier blocks are its causes); its frames are indented, and the first line after
    them names the class. A text that is not a traceback (a stage that wrote no record)
    names none.
    """
    lines = text.splitlines()
    starts = [i for i, line in enumerate(lines) if line == "Traceback (most recent call last):"]
    if not starts:
        return None
    for line in lines[starts[-1] + 1:]:
        if not line.startswith(" "):
            return line.split(":", 1)[0].strip() or None
    return None


def _error_record(run_dir: Path, folder: str, gate_id: str, text: str) -> GateRecord:
    ref = _write_traceback(run_dir, folder, gate_id, text)
    return GateRecord(gate_id, Status.ERROR, Reason(ERROR_EXCEPTION, text), (ref,))


def _read_stage_files(run_dir: Path) -> tuple[dict[str, dict[str, Any] | None], dict[str, str]]:
    files: dict[str, dict[str, Any] | None] = {}
    broken: dict[str, str] = {}
    for stage in gates.STAGES:
        try:
            data = read_stage_file(run_dir, stage)
            if data is not None:
                if not isinstance(data, dict) or not isinstance(data.get("gates"), list):
                    raise EvidenceInvalid(f"{GATES_DIR}/{stage}.json is not a stage record")
                for rec in data["gates"]:
                    GateRecord.from_record(rec)
            files[stage] = data
        except Exception:  # noqa: BLE001 - an unreadable stage file makes its gates ERROR
            broken[stage] = traceback.format_exc()
    return files, broken


def collect_records(run_dir: Path, stage_errors: dict[str, str] | None = None
                    ) -> tuple[dict[str, GateRecord], dict[str, Any]]:
    """Gather every gate's record and the merged identity table from a run directory.

    A gate without a record (its stage crashed, or never ran) becomes ERROR, citing a
    traceback written now, when its stage is named in ``stage_errors`` or its stage file
    is unreadable; else NOT_RUN(prerequisite) if a prerequisite did not pass; else ERROR
    ("stage wrote no record"): never PASS. A judged gate whose identities contradict an
    earlier stage's becomes FAIL with the conflict as its reason.

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
    run_dir = Path(run_dir)
    stage_errors = dict(stage_errors or {})
    files, broken = _read_stage_files(run_dir)
    for stage, text in broken.items():
        stage_errors[stage] = (stage_errors.get(stage, "") + "\n" + text).strip()
    merged = merge_identities(files)
    records: dict[str, GateRecord] = {}
    for stage, data in files.items():
        if data is None:
            continue
        for raw in data["gates"]:
            rec = GateRecord.from_record(raw)
            if rec.id in merged.conflicts and rec.status in (Status.PASS, Status.FAIL):
                rec = GateRecord(rec.id, Status.FAIL, Reason(
                    "rule", "; ".join(merged.conflicts[rec.id])), rec.evidence, rec.identities)
            records[rec.id] = rec
    for g in gates.GATES:
        if g.id in records:
            continue
        if g.stage in stage_errors:
            records[g.id] = _error_record(run_dir, g.stage, g.id, (
                f"stage {g.stage} raised before judging this gate:\n{stage_errors[g.stage]}"))
            continue
        unmet = [p for p in g.prerequisites
                 if p in records and records[p].status is not Status.PASS]
        if unmet:
            records[g.id] = GateRecord(g.id, Status.NOT_RUN, Reason(
                NotRunKind.PREREQUISITE.value,
                ", ".join(f"{p} is {records[p].status.value}" for p in unmet)))
        else:
            records[g.id] = _error_record(run_dir, g.stage, g.id,
                                          f"stage {g.stage} wrote no record for this gate")
    return records, merged.table


def build_receipt(run_dir: Path, stage_errors: dict[str, str] | None = None) -> Receipt:
    """Write ``receipt.json`` for a run directory and return it.

    Never raises for a problem inside the run: if anything goes wrong while collecting
    the records, every gate becomes ERROR citing that traceback, and a receipt with the
    verdict REJECTED is still written.

    Parameters
    ----------
    run_dir : Path
        A run directory whose stages have finished.
    stage_errors : dict, optional
        Stages whose notebook raised, with the error text.

    Returns
    -------
    Receipt
        The receipt as written.
    """
    run_dir = Path(run_dir)
    try:
        run = canonical.read_json(run_dir / RUN_FILE)
        records, identities = collect_records(run_dir, stage_errors)
    except Exception as exc:  # noqa: BLE001 - always a verdict, never an abort without one
        fault = host_fault(exc)
        if fault is not None:  # the host's disk, not the run: no verdict to give
            raise fault from exc
        text = "building the receipt failed:\n" + traceback.format_exc()
        try:
            run = canonical.read_json(run_dir / RUN_FILE)
        except Exception:  # noqa: BLE001
            run = {}
        records = {g.id: _error_record(run_dir, RECEIPT_ERRORS, g.id, text) for g in gates.GATES}
        identities = {}
    statuses = {k: r.status for k, r in records.items()}
    receipt = Receipt(
        run_id=run.get("run_id", run_dir.name),
        name=run.get("name"),
        params_sha256=run.get("params_sha256"),
        host=run.get("host"),
        packages=run.get("packages", {}),
        identities=identities,
        gates=tuple(ReceiptGate(records[g.id], g.stage, g.required) for g in gates.GATES),
        verdict=gates.verdict(statuses),
        files=tuple(FileDigest(p, canonical.sha256_file(run_dir / p))
                    for p in _covered_files(run_dir)),
        versions=versions_of(run_dir, records.values()),
    )
    canonical.write_json(run_dir / RECEIPT_FILE, receipt.to_json())
    return receipt


def _policy_ids(doc: Any) -> set[str]:
    """Return the ids of the policies an evidence document names (itself, or ``policy``)."""
    found: set[str] = set()
    if isinstance(doc, Mapping):
        for candidate in (doc, doc.get("policy")):
            if isinstance(candidate, Mapping) and isinstance(candidate.get("id"), str) and \
                    isinstance(candidate.get("rules"), Mapping):
                found.add(candidate["id"])
    return found


def versions_of(run_dir: Path, records: Iterable[GateRecord],
                gate_table: int = gates.GATE_TABLE) -> dict[str, Any]:
    """Return what a run is judged under: the ``versions`` its receipt records.

    Parameters
    ----------
    run_dir : Path
        The run.
    records : iterable of GateRecord
        Its gates' records (their evidence names the policies they were judged by).
    gate_table : int
        The gate table's version.

    Returns
    -------
    dict
        ``verifylib`` (this package's version), ``gate_table``, ``receipt`` (the receipt
        format) and ``policies``: each gate whose evidence names policies, to their ids.
    """
    from verifylib.resources import package_version

    made_by = package_version()
    policies: dict[str, list[str]] = {}
    for rec in records:
        ids: set[str] = set()
        for ref in rec.evidence:
            if ref.path.endswith(".json"):
                try:
                    ids |= _policy_ids(canonical.read_json(run_dir / ref.path))
                except (OSError, ValueError):
                    continue
        if ids:
            policies[rec.id] = sorted(ids)
    return {"verifylib": made_by, "gate_table": gate_table, "receipt": SCHEMA,
            "policies": dict(sorted(policies.items()))}


# ----------------------------------------------------------------------------- verifying

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
    cause : str or None
        The likely cause, when the problems share one a reader can act on (every one a
        notebook saved or a checkpoint written after publishing: Jupyter's).
    versions : dict or None
        What the run was judged under (its receipt format, gate table, policies, and the
        verifylib that made it); None when the receipt could not be read that far.
    """

    ok: bool
    problems: list[str] = field(default_factory=list)
    verdict: str | None = None
    cause: str | None = None
    versions: dict[str, Any] | None = None


def _identity_value_problem(key: str, value: Any) -> str | None:
    if key.endswith("sha256") or key.endswith("digest"):
        if not canonical.is_sha256(value):
            return f"identity {key}: malformed digest {value!r}"
    if key.endswith(".tree") or key.endswith(".commit"):
        if not (isinstance(value, str) and len(value) == 40
                and all(c in "0123456789abcdef" for c in value)):
            return f"identity {key}: malformed git id {value!r}"
    return None


def host_capabilities(host: Any) -> dict[str, bool]:
    """Each capability of a stored host record, re-derived from its facts.

    The stored ``capabilities`` booleans are not trusted: the same checks that decide on
    a live host (:class:`verifylib.runtime.capabilities.HostCapabilities`) are applied to the
    recorded system, macOS version and ``coremlc`` path.

    Raises
    ------
    verifylib.errors.EvidenceInvalid
        If the record is malformed (a ``ValueError``).
    """
    if not isinstance(host, Mapping):
        raise EvidenceInvalid("host record is not a mapping")
    ver = host.get("macos_version")
    if ver is not None:
        if not isinstance(ver, str) or not re.fullmatch(r"\d+(\.\d+)*", ver):
            raise EvidenceInvalid(f"malformed macos_version {ver!r}")
        ver = tuple(int(x) for x in ver.split("."))
    if (ver is None) != (host.get("system") != "Darwin"):
        raise EvidenceInvalid("macos_version contradicts the system")
    coremlc = host.get("coremlc")
    if coremlc is not None and not isinstance(coremlc, str):
        raise EvidenceInvalid("malformed coremlc")
    hc = HostCapabilities(str(host.get("system")), str(host.get("machine")), ver, coremlc)
    return {c.value: hc.has(c) for c in gates.Capability}


def _named_gates(detail: str, candidates: Iterable[str]) -> list[str]:
    return [c for c in candidates if re.search(rf"(?<![\w.]){re.escape(c)}(?![\w.])", detail)]


class _Checker:
    """One verification pass over a run directory (state shared by the checks)."""

    def __init__(self, run_dir: Path, receipt: dict[str, Any], allow_simulated: bool,
                 table: tuple[gates.Gate, ...] = gates.GATES):
        self.run_dir = run_dir
        self.receipt = receipt
        self.allow_simulated = allow_simulated
        self.table = table  # the gate table the run was made under
        self.problems: list[str] = []
        self.verified: dict[str, Status | None] = {}

    def files(self) -> None:
        listed = {}
        for f in self.receipt.get("files", []):
            path, sha = (f.get("path"), f.get("sha256")) if isinstance(f, dict) else (None, None)
            if not isinstance(path, str) or PurePosixPath(path).is_absolute() or \
                    ".." in PurePosixPath(path).parts:
                self.problems.append(f"receipt lists a bad path {path!r}")
                continue
            listed[path] = sha
            if not canonical.is_sha256(sha):
                self.problems.append(f"{path}: malformed digest {sha!r}")
            elif not (self.run_dir / path).is_file():
                self.problems.append(f"{path}: missing")
            elif canonical.sha256_file(self.run_dir / path) != sha:
                self.problems.append(f"{path}: changed (SHA-256 differs from the receipt)")
        litter = set(canonical.os_litter(self.run_dir))
        for path in _covered_files(self.run_dir):
            if path not in listed:
                why = ""
                if path in litter or any(path.startswith(f + "/") for f in litter):
                    # Finder and macOS's tar write these on their own; say so, or a Mac
                    # user who opened the run folder is left guessing.
                    why = (" (macOS writes it on its own: "
                           + canonical.describe_litter(self.run_dir, (path,)) + ")")
                self.problems.append(f"{path}: present but not listed in the receipt{why}")
        if RUN_FILE not in listed:
            self.problems.append(f"{RUN_FILE}: not covered by the receipt")

    def run_record(self) -> tuple[dict[str, Any], dict[str, bool]]:
        try:
            run = canonical.read_json(self.run_dir / RUN_FILE)
            if not isinstance(run, dict):
                raise EvidenceInvalid("not a mapping")
        except (OSError, ValueError) as exc:
            self.problems.append(f"{RUN_FILE}: unreadable: {exc}")
            return {}, {}
        host = run.get("host")
        if self.receipt.get("host") != host:
            self.problems.append("host record: the receipt's differs from run.json's")
        params = run.get("params")
        if canonical.sha256_bytes(canonical.dumps(params)) != run.get("params_sha256") or \
                self.receipt.get("params_sha256") != run.get("params_sha256"):
            self.problems.append("parameters: run.json's params do not hash to the bound "
                                 "params_sha256")
        if isinstance(host, Mapping) and host.get("simulated", False) is not False and \
                not self.allow_simulated:
            self.problems.append("host record: the run was made on a simulated host "
                                 "(verify --allow-simulated to inspect it anyway)")
        try:
            caps = host_capabilities(host)
        except ValueError as exc:
            self.problems.append(f"host record: {exc}")
            return run, {}
        stored = host.get("capabilities") if isinstance(host, Mapping) else None
        if stored != caps:
            self.problems.append(f"host record: stored capabilities {stored!r} do not follow "
                                 f"from its facts {caps!r}")
        return run, caps

    def rows(self) -> dict[str, dict[str, Any]]:
        gate_rows = self.receipt.get("gates", [])
        rows = {str(g.get("id")): g for g in gate_rows if isinstance(g, dict)} \
            if isinstance(gate_rows, list) else {}
        if not isinstance(gate_rows, list) or len(rows) != len(gate_rows):
            self.problems.append("receipt gate rows are malformed or duplicated")
        unknown = sorted(set(rows) - {g.id for g in self.table}, key=str)
        if unknown:
            self.problems.append(f"receipt names unknown gates: {unknown}")
        return rows

    def identity_table(self, merged: IdentityMerge) -> dict[str, Any]:
        """Return the receipt's identity table, noting where it is not the stages' merged one."""
        table = self.receipt.get("identities", {})
        if not isinstance(table, dict):
            self.problems.append("identity table malformed")
            table = {}
        if table != merged.table:
            self.problems.append("identity table: the receipt's differs from the stages' "
                                 "merged identities")
        for key, value in table.items():
            msg = _identity_value_problem(key, value)
            if msg:
                self.problems.append(msg)
        return table

    def gate_records(self, rows: Mapping[str, Mapping[str, Any]], sidecar: Mapping[str, Any],
                     table: Mapping[str, Any], merged: IdentityMerge, run: Mapping[str, Any],
                     caps: Mapping[str, bool]) -> dict[str, GateRecord]:
        """Read and justify each registry gate's receipt row; return the rows that parse.

        Gates are taken in table order, so prerequisites are verified before dependants.
        """
        records: dict[str, GateRecord] = {}
        for g in self.table:
            row = rows.get(g.id)
            if row is None:
                self.problems.append(f"gate {g.id}: missing from the receipt")
                continue
            if row.get("stage") != g.stage or row.get("required") != g.required:
                self.problems.append(f"gate {g.id}: stage/required differ from the registry")
            core = {k: v for k, v in row.items() if k not in ("stage", "required")}
            try:
                rec = GateRecord.from_record(core)
            except EvidenceInvalid as exc:
                msg = str(exc)
                self.problems.append(msg if msg.startswith(f"gate {g.id}")
                                     else f"gate {g.id}: {msg}")
                continue
            records[g.id] = rec
            if g.id in sidecar and sidecar[g.id] != core and not (
                    g.id in merged.conflicts and rec.status is Status.FAIL):
                self.problems.append(f"gate {g.id}: receipt row differs from "
                                     f"{GATES_DIR}/{g.stage}.json")
            for k, v in rec.identities.items():
                if table.get(k) != v and g.id not in merged.conflicts:
                    self.problems.append(f"gate {g.id}: identity {k} differs from the identity "
                                         f"table")
            found = self.justify(g, rec, run, caps, merged.conflicts)
            self.problems += found
            self.verified[g.id] = None if found else rec.status
        return records

    def prerequisites(self, statuses: dict[str, Status], merged: IdentityMerge) -> None:
        """Note each PASS that rests on a prerequisite that did not pass."""
        # An identity conflict found when the receipt was built does not count: the
        # dependant ran on a PASS.
        for g in self.table:
            if statuses.get(g.id) is Status.PASS:
                for p in g.prerequisites:
                    if statuses.get(p) is not Status.PASS and not (
                            p in merged.conflicts and statuses.get(p) is Status.FAIL):
                        self.problems.append(
                            f"gate {g.id}: PASS although prerequisite {p} is "
                            f"{getattr(statuses.get(p), 'value', 'missing')}")

    def justify(self, g: gates.Gate, rec: GateRecord, run: Mapping[str, Any],
                caps: Mapping[str, bool], conflicts: Mapping[str, list[str]]) -> list[str]:
        """Problems with ``rec`` as the status of ``g``; empty when it is justified."""
        if rec.status in (Status.PASS, Status.FAIL):
            return self._judged(g, rec, run, caps, conflicts)
        if rec.status is Status.ERROR:
            return self._error(g, rec)
        return self._not_run(g, rec, run, caps)

    def _judged(self, g: gates.Gate, rec: GateRecord, run: Mapping[str, Any],
                caps: Mapping[str, bool], conflicts: Mapping[str, list[str]]) -> list[str]:
        out = []
        st = rec.status.value
        view: EvidenceView | None = None
        broken: EvidenceInvalid | None = None
        if rec.evidence:
            try:
                view = EvidenceView(self.run_dir, rec.evidence, rec.identities)
            except EvidenceInvalid as exc:
                broken = exc
        # A given compiled model's program read from its model.mil needed no Core ML.
        from_text = view is not None and rules.program_from_text(g.id, view)
        cap = gates.capability_of(g, run.get("params") or {}, program_from_text=from_text)
        if not caps.get(cap.value, False):
            out.append(f"gate {g.id}: {st} recorded on a host without capability "
                       f"{cap.value}")
        if not g.implemented or g.id not in rules.RULES:
            return out + [f"gate {g.id}: {st} but this version has no rule to re-judge it"]
        if not rec.evidence:
            return out + [f"gate {g.id}: {st} without evidence"]
        if view is None:
            return out + [f"gate {g.id}: {broken}"]
        try:
            j = rules.judge(g.id, view)
        except EvidenceInvalid as exc:
            return out + [f"gate {g.id}: {exc}"]
        except Exception as exc:  # noqa: BLE001 - a rule that cannot read it rejects it
            return out + [f"gate {g.id}: evidence does not support re-judging "
                          f"({type(exc).__name__}: {exc})"]
        if g.id in conflicts:
            want = "; ".join(conflicts[g.id])
            if rec.status is not Status.FAIL or rec.reason.detail != want:
                out.append(f"gate {g.id}: recorded {st} but its identities conflict with an "
                           f"earlier stage's ({want})")
            return out
        if j.status is not rec.status:
            out.append(f"gate {g.id}: recorded {st} but the evidence gives "
                       f"{j.status.value} ({j.detail})")
        elif j.status is Status.PASS and view.unread():
            out.append(f"gate {g.id}: PASS cites evidence its rule does not read: "
                       f"{view.unread()}")
        return out

    def _error(self, g: gates.Gate, rec: GateRecord) -> list[str]:
        # Both kinds rest on the same stored traceback; which one a gate carries is the
        # stage's account of the exception and does not move the verdict.
        if rec.reason.kind not in ERROR_KINDS:
            return [f"gate {g.id}: ERROR with reason kind {rec.reason.kind!r}"]
        if not rec.reason.detail.strip():
            return [f"gate {g.id}: ERROR without its error text"]
        tb = [r for r in rec.evidence if r.name == TRACEBACK_EVIDENCE]
        if len(tb) != 1:
            return [f"gate {g.id}: ERROR does not cite exactly one stored traceback"]
        try:
            doc = EvidenceView(self.run_dir, rec.evidence).json(TRACEBACK_EVIDENCE)
        except EvidenceInvalid as exc:
            return [f"gate {g.id}: {exc}"]
        if not isinstance(doc, dict) or doc.get("schema") != ERROR_SCHEMA or \
                doc.get("gate") != g.id or not isinstance(doc.get("traceback"), str) or \
                not doc["traceback"].strip():
            return [f"gate {g.id}: ERROR cites {tb[0].path}, which is not its traceback"]
        if doc["traceback"] != rec.reason.detail:
            return [f"gate {g.id}: ERROR text differs from its stored traceback"]
        want = (ERROR_PREREQUISITE_BROKEN if _final_exception(doc["traceback"]) == _BROKEN
                else ERROR_EXCEPTION)
        if rec.reason.kind != want:
            return [f"gate {g.id}: ERROR({rec.reason.kind}) but its traceback says {want}"]
        return []

    def _not_run(self, g: gates.Gate, rec: GateRecord, run: Mapping[str, Any],
                 caps: Mapping[str, bool]) -> list[str]:
        kind, detail = rec.reason.kind, rec.reason.detail
        if rec.evidence:
            return [f"gate {g.id}: NOT_RUN but cites evidence"]
        if kind == NotRunKind.PLATFORM.value:
            cap = gates.capability_of(g, run.get("params") or {})
            if cap.value not in caps:
                return [f"gate {g.id}: NOT_RUN(platform) but no usable host record says "
                        f"what the host lacks"]
            if caps[cap.value]:
                return [f"gate {g.id}: NOT_RUN(platform) but the host record has "
                        f"{cap.value}"]
            readable = self._readable_program(g, run.get("params") or {})
            if readable is not None:
                # Any host runs a program read from its text, so this NOT_RUN could be
                # hiding a FAIL: the recording host had what the gate needed.
                return [f"gate {g.id}: NOT_RUN(platform) but the given compiled model's "
                        f"program ({readable}/model.mil) reads whole here, and any host runs "
                        f"it with verifylib's executor"]
        elif kind == NotRunKind.PREREQUISITE.value:
            named = _named_gates(detail, g.prerequisites)
            unmet = [p for p in named if self.verified.get(p) is not Status.PASS]
            if not unmet:
                return [f"gate {g.id}: NOT_RUN(prerequisite) names no prerequisite that did "
                        f"not pass ({detail!r}; verified: "
                        f"{ {p: getattr(self.verified.get(p), 'value', None) for p in g.prerequisites} })"]  # noqa: E501
        elif kind == NotRunKind.DISABLED.value:
            key = gates.disabling_key(g, run.get("params") or {})
            if key is None or key not in detail:
                return [f"gate {g.id}: NOT_RUN(disabled) but the bound parameters do not "
                        f"disable it"]
        elif kind == NotRunKind.NOT_IMPLEMENTED.value:
            if g.implemented:
                return [f"gate {g.id}: NOT_RUN(not-implemented) but this version implements it"]
        return []


    def _readable_program(self, g: gates.Gate, params: Mapping[str, Any]) -> str | None:
        """Return the placed compiled encoder when a program gate could have run it here.

        A program gate of a given ``.mlmodelc`` needs macOS only when its ``model.mil``
        cannot be read (:func:`verifylib.evidence.gates.capability_of`); this reads it
        again, with the reader the stage used, from the folder the receipt covers.
        """
        if g.id not in gates.PROGRAM_GATES or gates.given_compiled_encoder(params) is None:
            return None
        listed = {f.get("path") for f in self.receipt.get("files", []) if isinstance(f, dict)}
        folders = sorted({str(PurePosixPath(p).parent) for p in listed
                          if isinstance(p, str) and p.endswith(".mlmodelc/model.mil")})
        from verifylib.numerics.mil_compiled import load_compiled_program
        for rel in folders:
            try:
                load_compiled_program(self.run_dir / rel)
            except Exception:  # noqa: BLE001 - unreadable here too: the NOT_RUN stands
                continue
            return rel
        return None


def verify(run_dir: str | Path, *, allow_simulated: bool = False) -> VerifyResult:
    """Re-verify a run directory from its files alone.

    Parameters
    ----------
    run_dir : path-like
        A published run directory holding ``receipt.json``.
    allow_simulated : bool
        Accept a run recorded on a simulated host (tests only).

    Returns
    -------
    VerifyResult
        ``ok`` is False, with the problems named, on a missing or changed file, a
        malformed digest, a status the validator cannot re-justify, a launch that no gate
        or two gates cite, an edited verdict, or disagreeing identities.
    """
    run_dir = Path(run_dir)
    rpath = run_dir / RECEIPT_FILE
    if not rpath.is_file():
        return VerifyResult(False, [f"{rpath}: receipt missing"])
    try:
        receipt = canonical.read_json(rpath)
    except ValueError as exc:
        return VerifyResult(False, [f"{rpath}: not strict JSON: {exc}"])
    if not isinstance(receipt, dict) or receipt.get("schema") not in SCHEMAS:
        return VerifyResult(False, [f"{rpath}: not a {SCHEMA} receipt"])
    version, why = _gate_table_of(receipt)
    if version is None:
        return VerifyResult(False, [f"{rpath}: {why}"])

    chk = _Checker(run_dir, receipt, allow_simulated, gates.table(version))
    chk.files()
    run, caps = chk.run_record()
    rows = chk.rows()
    files, broken = _read_stage_files(run_dir)
    for stage, text in broken.items():
        chk.problems.append(f"{GATES_DIR}/{stage}.json: unreadable: "
                            f"{text.strip().splitlines()[-1]}")
    sidecar = {rec["id"]: rec for data in files.values() if data for rec in data["gates"]}
    merged = merge_identities(files)

    table = chk.identity_table(merged)
    records = chk.gate_records(rows, sidecar, table, merged, run, caps)
    statuses = {gid: rec.status for gid, rec in records.items()}
    chk.prerequisites(statuses, merged)

    # Every launch of a whisper.cpp binary is owned by exactly one gate.
    try:
        chk.problems += accounting.check(run_dir, records)
    except Exception as exc:  # noqa: BLE001 - an unreadable ledger rejects the run
        chk.problems.append(f"{ledger.LEDGER_FILE}: unreadable: {type(exc).__name__}: {exc}")

    # The declarations the policies were chosen from, read from the published bytes.
    chk.problems += declaration_problems(run_dir, records, run.get("params"))

    recomputed = None
    if len(statuses) == len(chk.table):
        recomputed = gates.verdict(statuses, chk.table).value
        if receipt.get("verdict") != recomputed:
            chk.problems.append(f"verdict: receipt says {receipt.get('verdict')!r}, evidence "
                                f"gives {recomputed!r}")
    used = versions_of(run_dir, records.values(), version)
    if receipt.get("schema") == SCHEMA:
        recorded = receipt.get("versions")
        if not isinstance(recorded, dict) or \
                {k: recorded.get(k) for k in ("gate_table", "receipt", "policies")} != \
                {k: used[k] for k in ("gate_table", "receipt", "policies")}:
            chk.problems.append("versions: the receipt's differ from what its evidence was "
                                "judged under")
    used["receipt"] = receipt.get("schema")
    used["verifylib"] = (receipt.get("versions") or {}).get("verifylib") \
        if receipt.get("schema") == SCHEMA else "0.1.0"
    return VerifyResult(not chk.problems, chk.problems, recomputed, jupyter_cause(chk.problems),
                        used)


def _gate_table_of(receipt: Mapping[str, Any]) -> tuple[int | None, str]:
    """Return the gate-table version a receipt was judged under, or None and why not."""
    if receipt.get("schema") == SCHEMA:
        versions = receipt.get("versions")
        version = versions.get("gate_table") if isinstance(versions, Mapping) else None
        if not isinstance(version, int) or isinstance(version, bool) or \
                not 1 <= version <= gates.GATE_TABLE:
            return None, (f"names gate table {version!r}, which this version of verifylib "
                          f"does not know (it knows 1 to {gates.GATE_TABLE})")
        return version, ""
    rows = receipt.get("gates")
    ids = [str(r.get("id")) for r in rows if isinstance(r, Mapping)] \
        if isinstance(rows, list) else []
    version = gates.table_of_ids(ids)
    if version is None:
        return None, (f"a {SCHEMA_V1} receipt whose gates are those of no gate table this "
                      f"version knows")
    return version, ""


JUPYTER_CAUSE = ("saved by Jupyter after publishing: only the run's notebooks changed or "
                 "Jupyter's checkpoints appeared, its evidence is as published. Explore a run "
                 "with `verifylib lab RUN`, which works on copies outside it; restore the "
                 "notebooks from a copy of the run to make this one verify again")
"""What :func:`jupyter_cause` says."""

_NOTEBOOK_PROBLEM = re.compile(
    r"^notebooks/(?:[^/]+\.ipynb: changed \(|(?:.*/)?\.ipynb_checkpoints(?:/.*)?: present but "
    r"not listed|\.ipynb_checkpoints/)")


def jupyter_cause(problems: Iterable[str]) -> str | None:
    """Name Jupyter as the likely cause when it explains every problem.

    Parameters
    ----------
    problems : iterable of str
        A verification's problems.

    Returns
    -------
    str or None
        :data:`JUPYTER_CAUSE` when there are problems and each one is a published notebook
        whose bytes changed or a ``.ipynb_checkpoints`` entry under ``notebooks/``;
        otherwise None.
    """
    found = list(problems)
    if found and all(_NOTEBOOK_PROBLEM.match(p) for p in found):
        return JUPYTER_CAUSE
    return None
