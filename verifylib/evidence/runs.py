"""Read-only access to a published run: ``verifylib.open_run(path)`` returns a :class:`Run`.

A researcher exploring a run in a notebook, ``verifylib compare`` and any script want the
run's gates, identities and typed stage results without re-running anything and without
trusting what they read more than ``verifylib verify`` would. A :class:`Run` is that view:

- **Published runs only.** :func:`open_run` needs ``receipt.json``. A run directory without
  it is refused (:class:`RunNotFound`): its stages may still be writing, it has no identity
  table, and a gate whose stage never recorded it has no final status until the receipt
  assigns one.
- **Every byte is digest-checked when read.** Opening reads ``receipt.json`` and
  ``run.json`` (checked against the receipt's digest, its parameters against
  ``params_sha256``), nothing else. Each later read is checked against the digest that
  binds it: a stage file (``gates/<stage>.json``) and a sidecar against the receipt's file
  list, an evidence file against its gate record
  (:class:`verifylib.evidence.records.EvidenceView`), an array file on first access
  (:class:`verifylib.numerics.arrays.ArrayFile`). A changed file raises
  :class:`verifylib.errors.EvidenceInvalid` naming it.
- **One code path for results.** A stage's typed result (or facts table) is rebuilt from
  the evidence its gates cite by the same ``*_from_evidence`` function (in
  ``evidence/<stage>/``) the stage itself returned it with; nothing comes from a summary
  the stage wrote. This module never imports a stage module.
- **Recorded versus verified.** :attr:`Run.verdict` is what the receipt records;
  :meth:`Run.verify` re-judges every gate with :func:`verifylib.evidence.receipt.verify` and
  returns the verified verdict. That is not done on open (about 0.2 s for a tiny.en run on two
  cores, but a run made on the simulated Mac refuses it without ``allow_simulated``, and a
  run that does not verify is still worth reading); ``open_run(path, verify=True)`` opts in.
- **Never writes.** Nothing here creates, changes or caches a file; results are kept in
  memory only.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path, PurePosixPath
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Callable, Literal, Mapping, TypeVar, overload

from verifylib import canonical
from verifylib.errors import EvidenceInvalid, ParametersInvalid
from verifylib.evidence import gates
from verifylib.evidence.gates import Verdict
from verifylib.evidence.layout import (
    ASAN_SIDECAR,
    EVIDENCE_DIR,
    GATES_DIR,
    RECEIPT_FILE,
    RUN_FILE,
    UNPATCHED_SIDECAR,
)
from verifylib.evidence.receipt_schema import SCHEMA as RECEIPT_SCHEMA
from verifylib.evidence.receipt_schema import SCHEMAS as RECEIPT_SCHEMAS
from verifylib.evidence.receipt_schema import Receipt, ReceiptInvalid
from verifylib.evidence.records import EvidenceRef, EvidenceView, GateRecord
from verifylib.evidence.stage_report import StageFacts, StageReport, StageResult
from verifylib.params import PARAMETERS_DIR, Params

if TYPE_CHECKING:
    from verifylib.evidence.build.facts import BuildFacts
    from verifylib.evidence.canary.result import CanaryResult
    from verifylib.evidence.export.facts import ExportFacts
    from verifylib.evidence.parity.result import ParityResult
    from verifylib.evidence.placement.result import PlacementResult
    from verifylib.evidence.receipt import VerifyResult
    from verifylib.evidence.wer.result import WerResult
    from verifylib.numerics.arrays import ArrayFile

__all__ = ["open_run", "Run", "RunNotFound", "RunInvalid", "is_published"]

_R = TypeVar("_R")

_FACTS_STAGES = ("01_build", "02_export")
"""The stages whose typed output is facts (a table), not a nested result."""


def _result_builder(stage: str
                    ) -> Callable[[Path, Mapping[str, GateRecord]], StageResult | None] | None:
    """Return the function that builds a stage's typed result (03-06), imported when asked.

    Each lives beside the stage's documents and rules (``evidence/<stage>/result.py``);
    imported lazily, so reading a run's receipt loads none of them.
    """
    if stage == "03_canary":
        from verifylib.evidence.canary.result import canary_result_from_evidence
        return canary_result_from_evidence
    if stage == "04_parity":
        from verifylib.evidence.parity.result import parity_result_from_evidence
        return parity_result_from_evidence
    if stage == "05_wer":
        from verifylib.evidence.wer.result import wer_result_from_evidence
        return wer_result_from_evidence
    if stage == "06_placement":
        from verifylib.evidence.placement.result import placement_result_from_evidence
        return placement_result_from_evidence
    return None

# The two stage-01 sidecars behind the unpatched and AddressSanitizer rows of its facts.
_BUILD_SIDECARS = {"unpatched": UNPATCHED_SIDECAR, "asan": ASAN_SIDECAR}


class RunNotFound(ParametersInvalid):
    """The path is not a published run directory.

    It is missing, not a folder, or without ``receipt.json`` (an unpublished run).
    """


class RunInvalid(EvidenceInvalid):
    """A published run cannot be read as recorded.

    Its receipt, run record or a stage file is malformed or changed, its evidence does not
    give a stage's result, or (with ``open_run(..., verify=True)``) it does not verify.

    Attributes
    ----------
    problems : list of str
        What is wrong, one item per problem.
    """

    def __init__(self, message: str, problems: list[str] | None = None):
        super().__init__(message)
        self.problems = list(problems or [message])


def is_published(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a run directory holding ``receipt.json`` (a published run)."""
    return (Path(path) / RECEIPT_FILE).is_file()


def _stage_name(stage: str) -> str:
    if stage in gates.STAGES:
        return stage
    matches = [s for s in gates.STAGES if s.split("_", 1)[1] == stage]
    if len(matches) != 1:
        raise ParametersInvalid(f"unknown stage {stage!r}; stages are {', '.join(gates.STAGES)} "
                                f"(or their short names)")
    return matches[0]


class Run:
    """A published run directory, read-only; made by :func:`open_run`.

    Attributes
    ----------
    path : Path
        The run directory (resolved).
    receipt_sha256 : str
        SHA-256 of ``receipt.json`` as read, to tie what is shown to the file.

    Notes
    -----
    Mappings handed out are read-only proxies; the objects inside them (records, result
    dataclasses) are copies in memory: changing one never touches the run.
    """

    def __init__(self, path: Path, receipt: Receipt, receipt_sha256: str):
        # Internal: open_run validates the path and parses the receipt first.
        self.path = path
        self.receipt_sha256 = receipt_sha256
        self._receipt = receipt
        self._files = {f.path: f.sha256 for f in receipt.files}
        by_id = {row.record.id: row.record for row in receipt.gates}
        # Table order, the order every view and the receipt use.
        self._gates = {g.id: by_id.pop(g.id) for g in gates.GATES if g.id in by_id} | by_id
        self._identities = receipt.identities
        self._record = self._read_run_record()
        self._stage_files: dict[str, dict[str, Any] | None] = {}
        self._results: dict[str, StageResult | None] = {}
        self._facts: dict[str, StageFacts] = {}

    # ------------------------------------------------------------------ reading

    def _covered_bytes(self, rel: str) -> bytes:
        """Return the bytes of a file the receipt lists, checked against its digest."""
        sha = self._files.get(rel)
        if sha is None:
            raise RunInvalid(f"{rel}: not covered by {RECEIPT_FILE}")
        try:
            data = (self.path / rel).read_bytes()
        except OSError as exc:
            raise RunInvalid(f"{rel}: unreadable: {exc}") from None
        if canonical.sha256_bytes(data) != sha:
            raise RunInvalid(f"{rel}: changed (SHA-256 differs from {RECEIPT_FILE})")
        return data

    def _covered_json(self, rel: str) -> Any:
        try:
            return canonical.loads(self._covered_bytes(rel))
        except ValueError as exc:
            if isinstance(exc, EvidenceInvalid):
                raise
            raise RunInvalid(f"{rel}: not strict JSON: {exc}") from None

    def _read_run_record(self) -> dict[str, Any]:
        rec = self._covered_json(RUN_FILE)
        if not isinstance(rec, dict) or not isinstance(rec.get("params"), dict):
            raise RunInvalid(f"{RUN_FILE}: not a run record")
        bound = rec.get("params_sha256")
        if canonical.sha256_bytes(canonical.dumps(rec["params"])) != bound or \
                self._receipt.params_sha256 != bound:
            raise RunInvalid(f"{RUN_FILE}: its parameters do not hash to the bound "
                             f"params_sha256")
        return rec

    # ------------------------------------------------------------------ the run

    @property
    def run_id(self) -> str:
        """The run id (``<UTC time>-<random hex>``)."""
        return self._receipt.run_id

    @property
    def name(self) -> str:
        """The model name of the parameters (``reports/<name>/``)."""
        return str(self._record.get("name"))

    @property
    def created_utc(self) -> str | None:
        """When the run directory was created (ISO 8601, UTC)."""
        return self._record.get("created_utc")

    @property
    def params(self) -> Params:
        """The parameters the run was made with, as bound in ``run.json``.

        They are not re-validated, so a run stays readable where its fixture files no longer
        exist.
        """
        return Params(name=str(self._record.get("name")),
                      data=copy.deepcopy(self._record["params"]),
                      origin=str(self.path / RUN_FILE), base_dir=PARAMETERS_DIR)

    @property
    def params_sha256(self) -> str:
        """Digest of the canonical parameters (equal for runs of the same parameters)."""
        return str(self._record["params_sha256"])

    @property
    def host(self) -> Mapping[str, Any]:
        """The host record: facts, capabilities, ``simulated``."""
        return MappingProxyType(copy.deepcopy(self._record.get("host") or {}))

    @property
    def simulated(self) -> bool:
        """Whether the run was made on the test suite's simulated Mac."""
        return (self._record.get("host") or {}).get("simulated", False) is not False

    @property
    def packages(self) -> Mapping[str, str]:
        """Versions of the packages the evidence depends on (``absent`` when missing)."""
        return MappingProxyType(dict(self._record.get("packages") or {}))

    @property
    def executor(self) -> Mapping[str, Any] | None:
        """How ``verifylib run`` executed the audit, when ``run.json`` records it."""
        ex = self._record.get("executor")
        return MappingProxyType(copy.deepcopy(ex)) if isinstance(ex, dict) else None

    @property
    def verdict(self) -> Verdict:
        """The verdict as the receipt records it (see :meth:`verify` for the verified one)."""
        return self._receipt.verdict

    @property
    def gates(self) -> Mapping[str, GateRecord]:
        """Gate id -> its record (status, reason, evidence references, identities).

        In the order of the gate table (:data:`verifylib.evidence.gates.GATES`).
        """
        return MappingProxyType(dict(self._gates))

    @property
    def identities(self) -> Mapping[str, Any]:
        """The receipt's identity table.

        Identity key (``model.source_digest``, ``binary.ggml.sha256``, ``runtime.pin`` …)
        -> value.
        """
        return MappingProxyType(copy.deepcopy(self._identities))

    @property
    def files(self) -> Mapping[str, str]:
        """Every file the receipt covers: relative POSIX path -> SHA-256."""
        return MappingProxyType(dict(self._files))

    @property
    def receipt(self) -> Receipt:
        """The receipt as read (typed, immutable; ``run.verify()`` checks it against the files)."""
        return self._receipt

    def __repr__(self) -> str:
        return (f"<Run {self.name} {self.run_id}: {self._receipt.verdict.value} "
                f"(recorded) at {self.path}>")

    def verify(self, *, allow_simulated: bool = False) -> VerifyResult:
        """Re-verify the run from its files alone (:func:`verifylib.evidence.receipt.verify`).

        Parameters
        ----------
        allow_simulated : bool
            Accept a run made on the simulated Mac (tests only).

        Returns
        -------
        verifylib.evidence.receipt.VerifyResult
            ``ok``, the ``problems`` found and the ``verdict`` recomputed from the evidence.
        """
        from verifylib.evidence.receipt import verify
        return verify(self.path, allow_simulated=allow_simulated)

    # ------------------------------------------------------------------ gates and evidence

    def gate(self, gate_id: str) -> GateRecord:
        """Return the record of one gate.

        Parameters
        ----------
        gate_id : str
            The gate id.

        Returns
        -------
        GateRecord
            Its status, reason, evidence references and identities.

        Raises
        ------
        verifylib.errors.ParametersInvalid
            If the receipt has no such gate.
        """
        try:
            return self._gates[gate_id]
        except KeyError:
            raise ParametersInvalid(f"{self.path}: no gate {gate_id!r} in the receipt") from None

    def stage_records(self, stage: str) -> list[GateRecord]:
        """Return the records of one stage's gates, in table order.

        Parameters
        ----------
        stage : str
            The stage (``"04_parity"`` or ``"parity"``).

        Returns
        -------
        list of GateRecord
            The records the receipt holds for the stage's gates.
        """
        stage = _stage_name(stage)
        return [self._gates[g.id] for g in gates.stage_gates(stage) if g.id in self._gates]

    def evidence(self, gate_id: str) -> EvidenceView:
        """Return the verified evidence files a gate cites (digest-checked on construction).

        Parameters
        ----------
        gate_id : str
            The gate id.

        Returns
        -------
        EvidenceView
            The gate's cited files and identities.

        Raises
        ------
        verifylib.errors.EvidenceInvalid
            If a cited file is missing or changed.
        """
        rec = self.gate(gate_id)
        return EvidenceView(self.path, rec.evidence, rec.identities)

    def evidence_ref(self, gate_id: str, name: str) -> EvidenceRef:
        """Return the reference (path and digest) of one evidence file a gate cites.

        Parameters
        ----------
        gate_id : str
            The gate id.
        name : str
            The evidence name.

        Returns
        -------
        EvidenceRef
            The cited file's name, path and digest.

        Raises
        ------
        verifylib.errors.ParametersInvalid
            If the gate cites no evidence named ``name`` (or there is no such gate).
        """
        for ref in self.gate(gate_id).evidence:
            if ref.name == name:
                return ref
        raise ParametersInvalid(f"gate {gate_id} cites no evidence named {name!r}")

    def arrays(self, gate_id: str, name: str) -> ArrayFile:
        """One cited ``.npz`` evidence file as lazily loaded, digest-bound arrays.

        Returns
        -------
        verifylib.numerics.arrays.ArrayFile
            Nothing is read until a key is asked for; then the file's digest is checked
            against the gate record's.
        """
        from verifylib.numerics.arrays import ArrayFile
        ref = self.evidence_ref(gate_id, name)
        return ArrayFile(self.path / ref.path, ref.sha256)

    def stage_file(self, stage: str) -> dict[str, Any] | None:
        """Return a stage's ``gates/<stage>.json`` (its records, identities and seconds).

        The file is checked against the receipt's digest.

        Parameters
        ----------
        stage : str
            The stage (``"04_parity"`` or ``"parity"``).

        Returns
        -------
        dict or None
            A copy of the stage file; None when the stage wrote none.
        """
        stage = _stage_name(stage)
        if stage not in self._stage_files:
            rel = f"{GATES_DIR}/{stage}.json"
            self._stage_files[stage] = self._covered_json(rel) if rel in self._files else None
        return copy.deepcopy(self._stage_files[stage])

    def sidecars(self, stage: str) -> dict[str, EvidenceRef]:
        """Return a stage's evidence files that no gate cites (stage 01's build sidecars).

        Parameters
        ----------
        stage : str
            The stage (``"01_build"`` or ``"build"``).

        Returns
        -------
        dict of str to EvidenceRef
            The files named by file stem and bound to the receipt's digests.
        """
        stage = _stage_name(stage)
        cited = {r.path for rec in self._gates.values() for r in rec.evidence}
        prefix = f"{EVIDENCE_DIR}/{stage}/"
        out = {}
        for rel, sha in self._files.items():
            if rel.startswith(prefix) and rel not in cited:
                stem = PurePosixPath(rel).stem
                out[stem] = EvidenceRef(stem, rel, sha)
        return out

    # ------------------------------------------------------------------ typed results

    def facts(self, stage: str) -> StageFacts | dict[str, Any]:
        """Return a stage's facts, rebuilt from its gates' evidence as the stage built them.

        Parameters
        ----------
        stage : str
            The stage (``"01_build"``, ``"build"``, ...).

        Returns
        -------
        BuildFacts, ExportFacts or dict
            :class:`~verifylib.evidence.build.facts.BuildFacts` for 01_build,
            :class:`~verifylib.evidence.export.facts.ExportFacts` for 02_export (frozen; their
            ``rows()`` are the table the notebooks show), an empty dict for the others.
        """
        stage = _stage_name(stage)
        return self._typed_facts(stage) if stage in _FACTS_STAGES else {}

    def _typed_facts(self, stage: str) -> StageFacts:
        """Build (once) the typed facts of stage 01 or 02, of their canonical names."""
        if stage not in self._facts:
            facts: StageFacts
            if stage == "01_build":
                from verifylib.evidence.build.facts import build_facts_from_evidence
                sc = self.sidecars(stage)
                sidecars = {role: sc.get(stem) for role, stem in _BUILD_SIDECARS.items()}
                facts = self._built(stage, build_facts_from_evidence, sidecars)
            else:
                from verifylib.evidence.export.facts import export_facts_from_evidence
                facts = self._built(stage, export_facts_from_evidence)
            self._facts[stage] = facts
        return self._facts[stage]

    # One overload per stage, under both of its names, so a caller naming the stage gets its
    # class; a stage chosen at run time gets the union.
    @overload
    def result(self, stage: Literal["01_build", "build"]) -> BuildFacts: ...
    @overload
    def result(self, stage: Literal["02_export", "export"]) -> ExportFacts: ...
    @overload
    def result(self, stage: Literal["03_canary", "canary"]) -> CanaryResult: ...
    @overload
    def result(self, stage: Literal["04_parity", "parity"]) -> ParityResult: ...
    @overload
    def result(self, stage: Literal["05_wer", "wer"]) -> WerResult | None: ...
    @overload
    def result(self, stage: Literal["06_placement", "placement"]) -> PlacementResult | None: ...
    @overload
    def result(self, stage: str) -> StageResult | None: ...

    def result(self, stage: str) -> StageResult | None:
        """Return a stage's typed result, rebuilt from the evidence its gates cite.

        Parameters
        ----------
        stage : str
            The stage (``"04_parity"`` or ``"parity"``).

        Returns
        -------
        StageResult or None
            Every stage's (:data:`verifylib.evidence.stage_report.StageResult`): the facts of
            01/02 (as :meth:`facts`: ``BuildFacts``, ``ExportFacts``), the results of 03-06
            (``evidence/<stage>/result.py``: ``CanaryResult``, ``ParityResult``,
            ``WerResult``, ``PlacementResult``); None where the stage's builder gives None
            (WER and placement when their gate did not run). Type checkers see the one class
            of a stage named by a literal. Arrays inside load lazily, digest-checked.

        Raises
        ------
        verifylib.errors.EvidenceInvalid
            If an evidence file changed, or does not hold what the stage writes
            (:class:`RunInvalid`).
        """
        stage = _stage_name(stage)
        if stage in _FACTS_STAGES:
            return self._typed_facts(stage)
        if stage not in self._results:
            builder = _result_builder(stage)
            self._results[stage] = None if builder is None else self._built(stage, builder)
        return self._results[stage]

    def _built(self, stage: str, builder: Callable[..., _R], *extra: Any) -> _R:
        from verifylib.evidence.fields import SchemaError  # every stage's schemas
        try:
            return builder(self.path, self._gates, *extra)
        except SchemaError as exc:  # a stage's document without its schema's shape
            raise RunInvalid(f"{self.path}: the evidence of stage {stage} does not give its "
                             f"result ({type(exc).__name__}: {exc})") from None
        except EvidenceInvalid:
            raise
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
            raise RunInvalid(f"{self.path}: the evidence of stage {stage} does not give its "
                             f"result ({type(exc).__name__}: {exc})") from None

    def report(self, stage: str) -> StageReport:
        """Return the stage's report as its notebook shows it.

        Records, identities, seconds, facts and typed result, all read from the run
        (``view.show(report)`` works).

        Parameters
        ----------
        stage : str
            The stage (``"04_parity"`` or ``"parity"``).

        Returns
        -------
        StageReport
            The stage's report.
        """
        stage = _stage_name(stage)
        data = self.stage_file(stage) or {}
        return StageReport(stage, self.stage_records(stage), dict(data.get("identities") or {}),
                           float(data.get("verifylib_seconds") or 0.0), self.facts(stage),
                           # As the stage returned it: stages 01 and 02 hand their facts over
                           # as ``facts`` and no nested result.
                           None if stage in _FACTS_STAGES else self.result(stage))

    @property
    def canary(self) -> CanaryResult:
        """Stage 03's :class:`~verifylib.evidence.canary.result.CanaryResult`."""
        return self.result("03_canary")

    @property
    def parity(self) -> ParityResult:
        """Stage 04's :class:`~verifylib.evidence.parity.result.ParityResult`."""
        return self.result("04_parity")

    @property
    def wer(self) -> WerResult | None:
        """Stage 05's :class:`~verifylib.evidence.wer.result.WerResult`, or None if not run."""
        return self.result("05_wer")

    @property
    def placement(self) -> PlacementResult | None:
        """Stage 06's :class:`~verifylib.evidence.placement.result.PlacementResult` or None."""
        return self.result("06_placement")


def open_run(path: str | os.PathLike[str], *, verify: bool = False,
             allow_simulated: bool = False) -> Run:
    """Open a published run directory read-only.

    Parameters
    ----------
    path : path-like
        The run directory (``reports/<name>/<run-id>/``) or its ``receipt.json``.
    verify : bool
        Also re-verify the whole run first (:meth:`Run.verify`) and refuse it on any
        problem. Off by default: reads are digest-checked anyway.
    allow_simulated : bool
        With ``verify``, accept a run made on the simulated Mac (tests only).

    Returns
    -------
    Run

    Raises
    ------
    RunNotFound
        If ``path`` does not exist, is not a folder, or holds no ``receipt.json`` (the
        message says whether it is an unpublished run or names published runs below it).
    RunInvalid
        If the receipt or ``run.json`` is malformed or changed, or ``verify`` found problems.
    """
    p = Path(path).expanduser()
    if p.name == RECEIPT_FILE and p.is_file():
        p = p.parent
    if not p.exists():
        raise RunNotFound(f"{p}: no such run directory")
    if not p.is_dir():
        raise RunNotFound(f"{p}: not a run directory (a folder holding {RECEIPT_FILE})")
    p = p.resolve()
    if not is_published(p):
        if (p / RUN_FILE).is_file():
            raise RunNotFound(f"{p} is not published (it has {RUN_FILE} but no {RECEIPT_FILE}): "
                              f"its stages may still be writing and no receipt binds its "
                              f"files yet; open a published run")
        below = sorted(str(r.parent) for pattern in (f"*/{RECEIPT_FILE}", f"*/*/{RECEIPT_FILE}")
                       for r in p.glob(pattern))
        hint = f"; published runs below it: {', '.join(below[:5])}" if below else ""
        raise RunNotFound(f"{p}: no {RECEIPT_FILE}, so not a published run{hint}")
    raw = (p / RECEIPT_FILE).read_bytes()
    try:
        receipt = canonical.loads(raw)
    except ValueError as exc:
        raise RunInvalid(f"{p / RECEIPT_FILE}: not strict JSON: {exc}") from None
    if not isinstance(receipt, dict) or receipt.get("schema") not in RECEIPT_SCHEMAS:
        raise RunInvalid(f"{p / RECEIPT_FILE}: not a {RECEIPT_SCHEMA} receipt")
    try:
        typed = Receipt.from_json(receipt)
    except ReceiptInvalid as exc:
        raise RunInvalid(f"{p / RECEIPT_FILE}: {exc}") from None
    run = Run(p, typed, canonical.sha256_bytes(raw))
    if verify:
        res = run.verify(allow_simulated=allow_simulated)
        if not res.ok:
            raise RunInvalid(f"{p} does not verify: " + "; ".join(res.problems[:5]),
                             res.problems)
    return run
