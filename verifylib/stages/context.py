"""Stage plumbing: run directories, prerequisite checks, and gate recording.

A stage (one notebook) opens a :class:`StageContext`, asks :meth:`StageContext.begin` for
each gate it implements, gathers evidence, and lets the gate's rule
(:mod:`verifylib.evidence.registry`) judge it. When the stage finishes, a gate the
registry declares unimplemented is recorded NOT_RUN(not-implemented); an implemented gate
the stage never judged is an ERROR, so a gate cannot silently disappear or pass by default.
Every ERROR cites a stored traceback file; its reason kind is ``prerequisite-broken`` when
the gate raised :class:`verifylib.errors.PrerequisiteBroken`, and ``exception`` otherwise.
"""

from __future__ import annotations

import datetime as _dt
import os
import time
import traceback
from pathlib import Path
from types import TracebackType
from typing import Any, Iterable, TypeVar

from verifylib import canonical
from verifylib.errors import ParametersInvalid, PrerequisiteBroken, StageRefusal
from verifylib.evidence import gates
from verifylib.evidence import registry as rules
from verifylib.evidence.fields import Schema
from verifylib.evidence.gates import Gate, NotRunKind, Status
from verifylib.evidence.layout import (
    EVIDENCE_DIR,
    GATES_DIR,
    RECEIPT_FILE,
    RUN_FILE,
    TRACEBACK_EVIDENCE,
    error_document,
    error_filename,
    recorded_gates,
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
from verifylib.evidence.stage_report import StageReport, StageResult
from verifylib.params import Params
from verifylib.runtime import ledger, progress
from verifylib.runtime.capabilities import detect
from verifylib.runtime.host_faults import host_fault

_D = TypeVar("_D", bound=Schema)


class GateRun:
    """One gate being evaluated; created by :meth:`StageContext.begin`.

    Used as a context manager: leaving it without :meth:`judge` records ERROR, and an
    exception inside it (other than KeyboardInterrupt, SystemExit and a host fault) is
    recorded as ERROR and swallowed, so the stage goes on. A host fault (a full, read-only
    or failing disk: :mod:`verifylib.runtime.host_faults`) leaves as a
    :class:`verifylib.errors.HostFault`, which stops the audit.

    Parameters
    ----------
    ctx : StageContext
        The stage the gate belongs to.
    g : Gate
        The gate.
    """

    def __init__(self, ctx: "StageContext", g: Gate):
        self.ctx = ctx
        self.gate = g
        self.done = False
        self._ledger_mark = ledger.mark()
        self._written_mark = len(ctx.written)

    def judge(self, evidence: Iterable[EvidenceRef],
              identities: dict[str, Any] | None = None) -> GateRecord:
        """Judge the gate by its registered rule on ``evidence`` and record the outcome.

        Parameters
        ----------
        evidence : iterable of EvidenceRef
            Files written with :meth:`StageContext.write_json` / ``write_bytes``.
        identities : dict, optional
            Identity values the evidence binds to (also merged into the stage's table).

        Returns
        -------
        GateRecord
            The recorded outcome (the rule's status and detail, the evidence, identities).

        Raises
        ------
        RuntimeError
            If the rule passed the gate without reading every file it cites.
        """
        refs = tuple(evidence)
        ids = dict(identities or {})
        view = EvidenceView(self.ctx.run_dir, refs, ids)
        j = rules.judge(self.gate.id, view)
        unread = view.unread()
        if j.status is Status.PASS and unread:
            # A PASS must rest on every file it cites; anything else is a harness bug, so
            # this is deliberately no PrerequisiteBroken (it records ERROR(exception)).
            raise RuntimeError(f"{self.gate.id} cites evidence its rule never read: {unread}")
        rec = GateRecord(self.gate.id, j.status, Reason("rule", j.detail), refs, ids)
        self.ctx._record(rec, ids)
        self.done = True
        return rec

    def __enter__(self) -> "GateRun":
        # A line every few seconds while the gate works, unless a step inside it prints
        # its own (a build, a conversion): progress only, nothing of it is evidence.
        self._ticker = progress.Ticker(f"{self.ctx.stage} {self.gate.id}", print,
                                       outer=True).start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> bool:
        self._ticker.stop()
        if exc_type is None:
            if not self.done:
                self.ctx.record_error(self.gate.id, "the stage ended this gate without judging "
                                      "it", ledger.since(self._ledger_mark),
                                      self.ctx.written[self._written_mark:])
            return False
        if issubclass(exc_type, (KeyboardInterrupt, SystemExit)):
            return False
        fault = host_fault(exc, self.ctx.run_dir)
        if fault is not None:
            # A full or failing disk is the host's, not this gate's: no record (it would
            # fail to write too), and no later gate or stage runs.
            if fault is exc:
                return False
            raise fault from exc
        text = "".join(traceback.format_exception(exc_type, exc, tb))
        # What the gate stood on changed under it (the environment, not the harness): the
        # record says so, so a reader does not go looking for a bug in verifylib.
        kind = (ERROR_PREREQUISITE_BROKEN if isinstance(exc, PrerequisiteBroken)
                else ERROR_EXCEPTION)
        self.ctx.record_error(self.gate.id, text, ledger.since(self._ledger_mark),
                              self.ctx.written[self._written_mark:], kind=kind)
        self.done = True
        return True  # the stage goes on; dependants become NOT_RUN(prerequisite)


class StageContext:
    """Evaluation context of one stage inside one run directory.

    Parameters
    ----------
    stage : str
        One of :data:`verifylib.evidence.gates.STAGES`.
    params : Params
        Validated parameters.
    run_dir : path-like
        The run directory; ``run.json`` is created if missing.
    """

    def __init__(self, stage: str, params: Params, run_dir: str | os.PathLike[str]):
        self.stage = stage
        self.gates = gates.stage_gates(stage)
        self.params = params
        self.run_dir = Path(run_dir).resolve()
        self.run = init_run_dir(self.run_dir, params)
        self.evidence_dir = self.run_dir / EVIDENCE_DIR / stage
        self.records: dict[str, GateRecord] = {}
        self.written: list[EvidenceRef] = []
        self.identities: dict[str, Any] = {}
        self.facts: dict[str, Any] = {}
        self.result: StageResult | None = None
        # The runtime source folder once this stage has checked its tree id again: once per
        # stage, not per use (each check hashes the whole tree, seconds apiece).
        self.checked_runtime_tree: Path | None = None
        self._t0 = time.perf_counter()
        # Evidence is never replaced: a second outcome in the same folder would hide the
        # first (a retried run), and a published run is read-only for every command.
        if (self.run_dir / RECEIPT_FILE).exists():
            raise StageRefusal(f"{self.run_dir} is a published run (it holds {RECEIPT_FILE}); "
                               f"it is never modified: run the stage with a new run directory")
        done = self.run_dir / GATES_DIR / f"{stage}.json"
        if done.exists() or self.evidence_dir.exists():
            raise StageRefusal(f"{self.run_dir} already holds the result of stage {stage}; "
                               f"a stage never runs twice into one run directory: use a new "
                               f"run id (a new run_dir)")
        ledger.bind(self.run_dir)

    # -- evidence -------------------------------------------------------------
    def write_json(self, name: str, value: Any, filename: str | None = None) -> EvidenceRef:
        """Write a canonical JSON evidence sidecar and return its reference.

        Parameters
        ----------
        name : str
            The evidence name a rule reads it by.
        value : Any
            The JSON-able content.
        filename : str, optional
            File name in the stage's evidence folder; ``<name>.json`` by default.

        Returns
        -------
        EvidenceRef
            The name, the path relative to the run directory and the SHA-256.

        Raises
        ------
        verifylib.errors.StageRefusal
            If the file exists already (evidence is never replaced).
        """
        path = self.evidence_dir / (filename or f"{name}.json")
        if path.exists():
            raise StageRefusal(f"evidence {path} exists already; evidence is never replaced")
        sha = canonical.write_json(path, value)
        ref = EvidenceRef(name, path.relative_to(self.run_dir).as_posix(), sha)
        self.written.append(ref)
        return ref

    def write_bytes(self, name: str, data: bytes, filename: str) -> EvidenceRef:
        """Write raw evidence bytes (a log stream, say) and return the reference.

        Parameters
        ----------
        name : str
            The evidence name a rule reads it by.
        data : bytes
            The content.
        filename : str
            File name in the stage's evidence folder.

        Returns
        -------
        EvidenceRef
            The name, the path relative to the run directory and the SHA-256.

        Raises
        ------
        verifylib.errors.StageRefusal
            If the file exists already (evidence is never replaced).
        """
        path = self.evidence_dir / filename
        if path.exists():
            raise StageRefusal(f"evidence {path} exists already; evidence is never replaced")
        sha = canonical.atomic_write_bytes(path, data)
        ref = EvidenceRef(name, path.relative_to(self.run_dir).as_posix(), sha)
        self.written.append(ref)
        return ref

    # -- gates ----------------------------------------------------------------
    def prior(self) -> dict[str, GateRecord]:
        """Collect the gate records of this run so far (other stages' files plus this stage's).

        Returns
        -------
        dict
            Gate id -> :class:`~verifylib.evidence.records.GateRecord`.
        """
        out = recorded_gates(self.run_dir)
        out.update(self.records)
        return out

    def evidence_of(self, gate_id: str, name: str) -> Any:
        """Read evidence ``name`` of an earlier gate that PASSed, verifying its digest.

        Parameters
        ----------
        gate_id : str
            The earlier gate.
        name : str
            The evidence name among the files it cites.

        Returns
        -------
        Any
            The decoded JSON content.

        Raises
        ------
        verifylib.errors.PrerequisiteBroken
            If the gate has not passed in this run directory.
        """
        rec = self.prior().get(gate_id)
        if rec is None or rec.status is not Status.PASS:
            raise PrerequisiteBroken(f"{gate_id} has not passed in {self.run_dir}")
        return EvidenceView(self.run_dir, rec.evidence).json(name)

    def document(self, gate_id: str, name: str, schema: type[_D]) -> _D:
        """Read evidence ``name`` of an earlier gate that PASSed as its typed document.

        Parameters
        ----------
        gate_id : str
            The earlier gate.
        name : str
            The evidence name among the files it cites.
        schema : type
            The document's :class:`~verifylib.evidence.fields.Schema` (``evidence/<stage>/
            schema.py``), the one the gate's rule read it with.

        Returns
        -------
        The document, read through ``schema`` (digest-checked, as :meth:`evidence_of`).

        Raises
        ------
        verifylib.errors.PrerequisiteBroken
            If the gate has not passed in this run directory.
        verifylib.evidence.fields.SchemaError
            If the file does not hold the document (it passed a rule that read it so).
        """
        return schema.from_json(self.evidence_of(gate_id, name), name)

    def artifact_path(self, *parts: str) -> Path:
        """Return a path for a published artifact inside the run directory (``fp32/...``).

        Parameters
        ----------
        *parts : str
            Path components below the run directory.

        Returns
        -------
        Path
            The path; its parent folder is created.
        """
        p = self.run_dir.joinpath(*parts)
        p.parent.mkdir(parents=True, exist_ok=True)
        return p

    def blocked_reason(self, gate_id: str, disabled_by: str | None = None, *,
                       program_from_text: bool = False,
                       platform_note: str | None = None) -> Reason | None:
        """Return why ``gate_id`` cannot run now, or None if it can.

        Order: disabled parameter, missing platform capability, unmet prerequisite.

        Parameters
        ----------
        gate_id : str
            The gate.
        disabled_by : str, optional
            The parameter key that switches the gate off, when one does.
        program_from_text : bool
            The gate will execute a given compiled model's program read from its
            ``model.mil`` (:func:`verifylib.evidence.gates.capability_of`).
        platform_note : str, optional
            Why that program could not be read, added to a ``platform`` reason.

        Returns
        -------
        Reason or None
            A NOT_RUN reason (``disabled``, ``platform`` or ``prerequisite``), or None.
        """
        g = gates.gate(gate_id)
        if disabled_by:
            value = dict(g.disabled_by).get(disabled_by)
            return Reason(NotRunKind.DISABLED.value,
                          f"disabled by parameter {disabled_by} = "
                          f"{canonical.dumps(value).decode().strip()}")
        missing = detect().missing(gates.capability_of(g, self.params.data,
                                                       program_from_text=program_from_text))
        if missing:
            return Reason(NotRunKind.PLATFORM.value,
                          f"{missing}; {platform_note}" if platform_note else missing)
        prior = self.prior()
        unmet = [p for p in g.prerequisites
                 if p not in prior or prior[p].status is not Status.PASS]
        if unmet:
            states = ", ".join(f"{p} is {prior[p].status.value if p in prior else 'not run yet'}"
                               for p in unmet)
            return Reason(NotRunKind.PREREQUISITE.value, states)
        return None

    def begin(self, gate_id: str, disabled_by: str | None = None, *,
              program_from_text: bool = False,
              platform_note: str | None = None) -> GateRun | None:
        """Start evaluating a gate of this stage.

        Returns None after recording NOT_RUN when the gate is disabled (by a parameter the
        registry names for it), lacks a platform capability, or has a prerequisite that did
        not pass; otherwise a :class:`GateRun` to use as a context manager (an exception
        inside it records ERROR).

        Parameters
        ----------
        gate_id : str
            A gate of this stage.
        disabled_by : str, optional
            The parameter key the caller found switching the gate off; it must agree with
            the registry's ``disabled_by`` (the validator judges NOT_RUN(disabled) by it).
        program_from_text, platform_note : bool, str
            As :meth:`blocked_reason`: a given compiled model's program read from its text
            (then no Core ML is needed), or why it could not be.

        Returns
        -------
        GateRun or None
            The gate run, or None when NOT_RUN was recorded.

        Raises
        ------
        ValueError
            If the gate belongs to another stage, or ``disabled_by`` disagrees with the
            registry and the parameters (a bug in the calling stage).
        """
        g = gates.gate(gate_id)
        # Both refusals below catch a stage calling begin wrongly, a bug in verifylib, so
        # they stay plain ValueErrors, outside VerifylibError (a refusal a caller acts on).
        if g.stage != self.stage:
            raise ValueError(f"{gate_id} belongs to stage {g.stage}, not {self.stage}")
        key = gates.disabling_key(g, self.params.data)
        if disabled_by != key:
            raise ValueError(f"{gate_id}: caller says disabled by {disabled_by!r}, the registry "
                             f"and the parameters say {key!r}")
        reason = self.blocked_reason(gate_id, key, program_from_text=program_from_text,
                                     platform_note=platform_note)
        if reason:
            self._record(GateRecord(gate_id, Status.NOT_RUN, reason), {})
            return None
        return GateRun(self, g)

    def identity(self, key: str, value: Any) -> None:
        """Record an identity of this run (e.g. ``runtime.tree``).

        Parameters
        ----------
        key : str
            The identity key.
        value : Any
            Its JSON-able value.

        Raises
        ------
        ValueError
            If the key was recorded before with another value.
        """
        old = self.identities.get(key)
        if old is not None and old != value:
            raise ValueError(f"identity {key} recorded twice with different values")
        self.identities[key] = value
        self._write()

    def record_error(self, gate_id: str, text: str, launches: list[dict[str, Any]] | None = None,
                     partial: list[EvidenceRef] | None = None,
                     kind: str = ERROR_EXCEPTION) -> GateRecord:
        """Record ``gate_id`` as ERROR, citing its stored traceback.

        Parameters
        ----------
        gate_id : str
            The gate that broke.
        text : str
            Its traceback.
        launches : list of dict, optional
            Ledger entries appended while the gate ran; those no partial evidence file
            cites are cited by the traceback, so no launch goes unaccounted for.
        partial : list of EvidenceRef, optional
            Evidence the gate wrote before it broke; cited too, so nothing is orphaned.
        kind : str, optional
            The reason kind, one of :data:`verifylib.evidence.records.ERROR_KINDS`:
            ``"exception"`` (a harness bug, the default) or ``"prerequisite-broken"``
            (:class:`verifylib.errors.PrerequisiteBroken` was raised).

        Returns
        -------
        GateRecord
            The ERROR record, citing the traceback file and the partial evidence.

        Raises
        ------
        ValueError
            If ``kind`` is not an ERROR reason kind.
        """
        if kind not in ERROR_KINDS:
            raise ValueError(f"{kind!r} is not an ERROR reason kind {sorted(ERROR_KINDS)}")
        partial = [r for r in (partial or []) if r.name != TRACEBACK_EVIDENCE]
        seen: set[int] = set()
        for r in partial:
            if r.path.endswith(".json"):
                seen |= ledger.cited_seqs(canonical.read_json(self.run_dir / r.path))
        cited = [ledger.entry_record(e) for e in (launches or []) if e["seq"] not in seen]
        ref = self.write_json(TRACEBACK_EVIDENCE, error_document(gate_id, text, cited),
                              filename=error_filename(gate_id))
        rec = GateRecord(gate_id, Status.ERROR, Reason(kind, text), (ref, *partial))
        self._record(rec, {})
        return rec

    def _record(self, rec: GateRecord, identities: dict[str, Any]) -> None:
        for k, v in identities.items():
            self.identities.setdefault(k, v)
        self.records[rec.id] = rec
        self._write()

    def _write(self) -> None:
        elapsed = time.perf_counter() - self._t0
        data = {
            "schema": "verifylib-stage/1",
            "stage": self.stage,
            "gates": [self.records[g.id].to_record() for g in self.gates if g.id in self.records],
            "identities": self.identities,
            "verifylib_seconds": round(elapsed, 3),
        }
        canonical.write_json(self.run_dir / GATES_DIR / f"{self.stage}.json", data)

    def finish(self) -> StageReport:
        """Close the stage and return its report.

        A gate never begun becomes NOT_RUN(not-implemented) if the registry declares it
        unimplemented, and ERROR otherwise (the stage skipped a gate it owns).

        Returns
        -------
        StageReport
            Every gate's record in the table's order, the identities, the seconds, the
            facts and the stage's result.
        """
        for g in self.gates:
            if g.id not in self.records:
                if not g.implemented:
                    missing = detect().missing(g.capability)
                    extra = f"; it would also need: {missing}" if missing else ""
                    self.records[g.id] = GateRecord(g.id, Status.NOT_RUN, Reason(
                        NotRunKind.NOT_IMPLEMENTED.value,
                        f"this version of verifylib declares this gate unimplemented{extra}"))
                else:
                    self.record_error(g.id, f"stage {self.stage} finished without judging "
                                            f"{g.id}, a gate it implements")
        self._write()
        seconds = time.perf_counter() - self._t0
        return StageReport(self.stage, [self.records[g.id] for g in self.gates],
                           dict(self.identities), seconds, dict(self.facts), self.result)


def package_versions() -> dict[str, str]:
    """Collect the versions of the packages whose behaviour the evidence depends on.

    Returns
    -------
    dict
        Package name -> installed version, or ``"absent"``.
    """
    from importlib import metadata
    out = {}
    for name in ("verifylib", "coremltools", "torch", "transformers", "numpy", "jiwer",
                 "papermill", "nbconvert", "nbformat", "matplotlib"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "absent"
    return out


def init_run_dir(run_dir: Path, params: Params, run_id: str | None = None, *,
                 executor: dict[str, Any] | None = None) -> dict[str, Any]:
    """Create a run directory's ``run.json`` unless it exists, and return its content.

    Parameters
    ----------
    run_dir : Path
        The run directory (created if missing).
    params : Params
        Validated parameters; a run directory belongs to one parameter set.
    run_id : str, optional
        Id to record; defaults to the folder name.
    executor : dict, optional
        How and where ``verifylib run`` executed the audit (``kind``, ``node``, ...), as
        :mod:`verifylib.batch.local` describes it; recorded as ``executor``. A notebook
        run by hand records none. Covered by the receipt like the rest of ``run.json``.

    Returns
    -------
    dict
        The run record.

    Raises
    ------
    verifylib.errors.ParametersInvalid
        If ``run.json`` exists and was written for other parameters.
    """
    run_dir = Path(run_dir)
    path = run_dir / RUN_FILE
    params_sha = canonical.sha256_bytes(canonical.dumps(params.data))
    if path.exists():
        rec: dict[str, Any] = canonical.read_json(path)
        if rec.get("params_sha256") != params_sha:
            raise ParametersInvalid(f"{run_dir} was created for other parameters "
                                    f"({rec.get('name')!r}); use a fresh run directory")
        return rec
    run_dir.mkdir(parents=True, exist_ok=True)
    rec = {
        "schema": "verifylib-run/1",
        "run_id": run_id or run_dir.name,
        "name": params.name,
        "params": params.data,
        "params_origin": params.origin,
        "params_sha256": params_sha,
        "created_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "host": detect().as_record(),
        "packages": package_versions(),
        **({"executor": dict(executor)} if executor is not None else {}),
    }
    canonical.write_json(path, rec)
    return rec
