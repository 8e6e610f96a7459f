"""Evidence: references to sidecar files, verified views of them, and gate records.

A gate's status is never trusted on its own. Each record names the evidence files it
rests on (relative path + SHA-256); :class:`EvidenceView` refuses to hand out a file whose
bytes changed, and the gate's registered rule is re-run on the view by the validator.
"""

from __future__ import annotations

import builtins
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from verifylib import canonical
from verifylib.errors import EvidenceInvalid
from verifylib.evidence.gates import NotRunKind, Status

if TYPE_CHECKING:
    from numpy.typing import NDArray

ERROR_EXCEPTION = "exception"
"""Reason kind of an ERROR the harness caused: an exception other than
:class:`verifylib.errors.PrerequisiteBroken`, a gate left unjudged, a stage that crashed."""
ERROR_PREREQUISITE_BROKEN = "prerequisite-broken"
"""Reason kind of an ERROR raised as :class:`verifylib.errors.PrerequisiteBroken`."""
ERROR_KINDS = frozenset({ERROR_EXCEPTION, ERROR_PREREQUISITE_BROKEN})
"""Every reason kind an ERROR may carry; each cites the gate's stored traceback."""


@dataclass(frozen=True)
class EvidenceRef:
    """One evidence file of a run.

    Attributes
    ----------
    name : str
        Role of the file for its gate's rule (e.g. ``"source"``).
    path : str
        POSIX path relative to the run directory.
    sha256 : str
        Digest of the file's bytes.
    """

    name: str
    path: str
    sha256: str

    @staticmethod
    def from_record(rec: Any) -> "EvidenceRef":
        """Parse a stored reference, refusing malformed ones."""
        if not isinstance(rec, dict) or set(rec) != {"name", "path", "sha256"}:
            raise EvidenceInvalid(f"malformed evidence reference: {rec!r}")
        if not canonical.is_sha256(rec["sha256"]):
            raise EvidenceInvalid(f"malformed digest for {rec.get('path')!r}: {rec['sha256']!r}")
        p = PurePosixPath(rec["path"])
        if p.is_absolute() or ".." in p.parts:
            raise EvidenceInvalid(f"evidence path escapes the run directory: {rec['path']!r}")
        return EvidenceRef(rec["name"], rec["path"], rec["sha256"])


class EvidenceView:
    """Verified, read-only access to a gate's evidence files.

    Parameters
    ----------
    run_dir : Path
        The run directory.
    refs : sequence of EvidenceRef
        The gate's evidence.
    identities : mapping, optional
        The identities the gate binds to (a rule may require its evidence to agree with
        them; the validator checks them against the run's identity table).

    Raises
    ------
    EvidenceInvalid
        On construction, if any file is missing or its digest differs.
    """

    def __init__(self, run_dir: Path, refs: Sequence[EvidenceRef],
                 identities: Mapping[str, Any] | None = None):
        self.run_dir = Path(run_dir)
        self.identities = dict(identities or {})
        self._refs = {r.name: r for r in refs}
        if len(self._refs) != len(refs):
            raise EvidenceInvalid("two evidence files share one name")
        self._cache: dict[str, bytes] = {}
        self._read: set[str] = set()
        for r in refs:
            self._load(r.name)

    def names(self) -> list[str]:
        """Names of the available evidence files."""
        return sorted(self._refs)

    def has(self, name: str) -> bool:
        """Tell whether the gate cites an evidence file named ``name``.

        Parameters
        ----------
        name : str
            The evidence name.

        Returns
        -------
        bool
            True if ``name`` is among the cited files.
        """
        return name in self._refs

    def path_of(self, name: str) -> str:
        """Return the run-relative path of evidence ``name`` (a link's target).

        Parameters
        ----------
        name : str
            A cited evidence name.

        Returns
        -------
        str
            The path the gate's reference records, relative to the run directory.
        """
        if name not in self._refs:
            raise EvidenceInvalid(f"no evidence named {name!r}")
        return self._refs[name].path

    def unread(self) -> list[str]:
        """Names of cited files the rule has not read (a rule must read what a gate cites)."""
        return sorted(set(self._refs) - self._read)

    def bytes(self, name: str) -> bytes:
        """Return the verified bytes of evidence ``name``."""
        data = self._load(name)
        self._read.add(name)
        return data

    def _load(self, name: str) -> builtins.bytes:
        if name in self._cache:
            return self._cache[name]
        if name not in self._refs:
            raise EvidenceInvalid(f"no evidence named {name!r}")
        ref = self._refs[name]
        path = self.run_dir / ref.path
        if not path.is_file():
            raise EvidenceInvalid(f"evidence file missing: {ref.path}")
        data = path.read_bytes()
        if canonical.sha256_bytes(data) != ref.sha256:
            raise EvidenceInvalid(f"evidence file changed: {ref.path} "
                                  "(digest differs from record)")
        self._cache[name] = data
        return data

    def json(self, name: str) -> Any:
        """Return evidence ``name`` parsed as strict JSON."""
        try:
            return canonical.loads(self.bytes(name))
        except ValueError as exc:
            raise EvidenceInvalid(f"evidence {name!r} is not strict JSON: {exc}") from None

    def arrays(self, name: str) -> dict[str, NDArray[Any]]:
        """Return evidence ``name`` parsed as a numeric ``.npz``.

        The file is decoded by :mod:`verifylib.numerics.arrays`.
        """
        from verifylib.numerics.arrays import decode
        try:
            return decode(self.bytes(name))
        except EvidenceInvalid as exc:
            raise EvidenceInvalid(f"evidence {name!r}: {exc}") from None

    def text(self, name: str) -> str:
        """Return evidence ``name`` decoded as UTF-8 (undecodable bytes replaced)."""
        return self.bytes(name).decode("utf-8", "replace")


@dataclass(frozen=True)
class Reason:
    """Why a gate ended the way it did.

    ``kind`` is ``"rule"`` for PASS/FAIL, one of :class:`NotRunKind` for NOT_RUN, and
    one of :data:`ERROR_KINDS` for ERROR (``"prerequisite-broken"`` when what an earlier
    gate passed on no longer held, ``"exception"`` otherwise).
    """

    kind: str
    detail: str


@dataclass(frozen=True)
class GateRecord:
    """The stored outcome of one gate.

    Attributes
    ----------
    id : str
        Gate id.
    status : Status
        The outcome.
    reason : Reason
        Why.
    evidence : tuple of EvidenceRef
        Files the status rests on (empty for NOT_RUN).
    identities : dict
        Identity values (digests, ids) this gate's evidence binds to.
    """

    id: str
    status: Status
    reason: Reason
    evidence: tuple[EvidenceRef, ...] = ()
    identities: dict[str, Any] = field(default_factory=dict)

    def to_record(self) -> dict[str, Any]:
        """Return the record as stored in ``gates/<stage>.json``.

        Returns
        -------
        dict
            ``id``, ``status``, ``reason`` (``kind``, ``detail``), ``evidence`` (name, path,
            sha256 of each file) and ``identities``.
        """
        return {"id": self.id, "status": self.status.value,
                "reason": {"kind": self.reason.kind, "detail": self.reason.detail},
                "evidence": [{"name": e.name, "path": e.path, "sha256": e.sha256}
                             for e in self.evidence],
                "identities": dict(self.identities)}

    @staticmethod
    def from_record(rec: Any) -> "GateRecord":
        """Parse a stored gate record, refusing malformed ones."""
        keys = {"id", "status", "reason", "evidence", "identities"}
        if not isinstance(rec, dict) or set(rec) != keys:
            raise EvidenceInvalid(f"malformed gate record: {rec!r}")
        try:
            status = Status(rec["status"])
        except ValueError:
            raise EvidenceInvalid(f"gate {rec['id']}: unknown status {rec['status']!r}") from None
        reason = rec["reason"]
        if not isinstance(reason, dict) or set(reason) != {"kind", "detail"}:
            raise EvidenceInvalid(f"gate {rec['id']}: malformed reason")
        allowed = {Status.PASS: {"rule"}, Status.FAIL: {"rule"},
                   Status.ERROR: ERROR_KINDS,
                   Status.NOT_RUN: {k.value for k in NotRunKind}}[status]
        if reason["kind"] not in allowed:
            raise EvidenceInvalid(f"gate {rec['id']}: reason kind {reason['kind']!r} is not "
                                  f"allowed for {status.value}")
        if not isinstance(rec["identities"], dict):
            raise EvidenceInvalid(f"gate {rec['id']}: malformed identities")
        return GateRecord(rec["id"], status, Reason(reason["kind"], str(reason["detail"])),
                          tuple(EvidenceRef.from_record(e) for e in rec["evidence"]),
                          dict(rec["identities"]))
