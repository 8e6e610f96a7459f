"""The receipt (``receipt.json``, format ``verifylib-receipt/1``) as one typed record.

:func:`verifylib.evidence.receipt.build_receipt` writes a :class:`Receipt` and
:func:`verifylib.evidence.runs.open_run` reads one back; both go through
:meth:`Receipt.to_json` / :meth:`Receipt.from_json`, so the bytes on disk and the fields
read agree by construction. ``verifylib verify`` reads a receipt it does not trust:
:meth:`Receipt.from_json` refuses a malformed one naming the field, and the validator
reports every disagreement it finds in a well-formed one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from verifylib.errors import EvidenceInvalid
from verifylib.evidence.gates import Verdict
from verifylib.evidence.records import GateRecord

SCHEMA = "verifylib-receipt/1"
"""The receipt format this version writes and reads."""


class ReceiptInvalid(EvidenceInvalid):
    """A receipt document does not have the receipt format (names the field)."""


def _field(doc: Mapping[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    if key not in doc:
        raise ReceiptInvalid(f"receipt: {where}{key} missing")
    value = doc[key]
    if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
        raise ReceiptInvalid(f"receipt: {where}{key} is not a {_kind_name(kind)}")
    return value


def _kind_name(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join("null" if k is type(None) else k.__name__ for k in kinds)


@dataclass(frozen=True)
class ReceiptGate:
    """One row of the receipt's gate table: the gate's record with its place in the table.

    Attributes
    ----------
    record : GateRecord
        Status, reason, evidence references and identities of the gate.
    stage : str
        The stage the gate belongs to.
    required : bool
        Whether the gate counts towards the verdict.
    """

    record: GateRecord
    stage: str
    required: bool

    def to_json(self) -> dict:
        """The row as written.

        Returns
        -------
        dict
            The gate record's fields, then ``stage`` and ``required``.
        """
        return dict(self.record.to_record(), stage=self.stage, required=self.required)

    @staticmethod
    def from_json(row: Any, index: int = 0) -> "ReceiptGate":
        """Read one row of the gate table.

        Parameters
        ----------
        row : object
            The row as parsed from JSON.
        index : int
            Its position, for messages.

        Returns
        -------
        ReceiptGate

        Raises
        ------
        ReceiptInvalid
            When the row is not a gate row (naming ``gates[index].field``).
        """
        where = f"gates[{index}]."
        if not isinstance(row, Mapping):
            raise ReceiptInvalid(f"receipt: gates[{index}] is not a mapping")
        stage = _field(row, "stage", str, where)
        required = _field(row, "required", bool, where)
        try:
            record = GateRecord.from_record({k: v for k, v in row.items()
                                             if k not in ("stage", "required")})
        except EvidenceInvalid as exc:
            raise ReceiptInvalid(f"receipt: gates[{index}]: {exc}") from None
        return ReceiptGate(record, stage, required)


@dataclass(frozen=True)
class FileDigest:
    """One covered file of the run and its SHA-256.

    Attributes
    ----------
    path : str
        Path relative to the run directory (POSIX separators).
    sha256 : str
        Its digest when the receipt was written.
    """

    path: str
    sha256: str

    def to_json(self) -> dict:
        """The entry as written.

        Returns
        -------
        dict
            ``{"path": ..., "sha256": ...}``.
        """
        return {"path": self.path, "sha256": self.sha256}


@dataclass(frozen=True)
class Receipt:
    """The receipt of a run: gate table, identity table, verdict and covered files.

    Attributes
    ----------
    run_id : str
        The run's id.
    name : str or None
        The model's name (None only in a receipt of a run whose ``run.json`` was unreadable).
    params_sha256 : str or None
        Digest of the bound parameters.
    host : dict or None
        The host record of ``run.json``.
    packages : dict
        Package versions of ``run.json``.
    identities : dict
        Identity key to value, merged from every stage.
    gates : tuple of ReceiptGate
        Every gate of the table, in table order.
    verdict : Verdict
        The verdict of the required gates.
    files : tuple of FileDigest
        Every covered file with its digest.
    schema : str
        The format (:data:`SCHEMA`).
    """

    run_id: str
    name: str | None
    params_sha256: str | None
    host: dict | None
    packages: dict
    identities: dict
    gates: tuple[ReceiptGate, ...]
    verdict: Verdict
    files: tuple[FileDigest, ...] = ()
    schema: str = SCHEMA

    def gate(self, gate_id: str) -> ReceiptGate:
        """The row of one gate.

        Parameters
        ----------
        gate_id : str
            A gate id of the table.

        Returns
        -------
        ReceiptGate

        Raises
        ------
        KeyError
            When the receipt has no row for the gate.
        """
        for row in self.gates:
            if row.record.id == gate_id:
                return row
        raise KeyError(gate_id)

    def to_json(self) -> dict:
        """The receipt as written to ``receipt.json``.

        Returns
        -------
        dict
            Keys in the order of format ``verifylib-receipt/1``.
        """
        return {
            "schema": self.schema,
            "run_id": self.run_id,
            "name": self.name,
            "params_sha256": self.params_sha256,
            "host": self.host,
            "packages": dict(self.packages),
            "identities": dict(self.identities),
            "gates": [g.to_json() for g in self.gates],
            "verdict": self.verdict.value,
            "files": [f.to_json() for f in self.files],
        }

    @staticmethod
    def from_json(doc: Any) -> "Receipt":
        """Read a receipt document strictly.

        Parameters
        ----------
        doc : object
            ``receipt.json`` as parsed.

        Returns
        -------
        Receipt

        Raises
        ------
        ReceiptInvalid
            When the document is not a ``verifylib-receipt/1`` receipt; the message names
            the field.
        """
        if not isinstance(doc, Mapping):
            raise ReceiptInvalid("receipt: not a mapping")
        if doc.get("schema") != SCHEMA:
            raise ReceiptInvalid(f"receipt: schema is not {SCHEMA!r}")
        rows = _field(doc, "gates", list, "")
        files = _field(doc, "files", list, "")
        entries = []
        for i, f in enumerate(files):
            if not isinstance(f, Mapping):
                raise ReceiptInvalid(f"receipt: files[{i}] is not a mapping")
            entries.append(FileDigest(_field(f, "path", str, f"files[{i}]."),
                                      _field(f, "sha256", str, f"files[{i}].")))
        try:
            verdict = Verdict(_field(doc, "verdict", str, ""))
        except ValueError:
            raise ReceiptInvalid(f"receipt: verdict {doc['verdict']!r} is not a verdict") from None
        host = _field(doc, "host", (dict, type(None)), "")
        return Receipt(
            run_id=_field(doc, "run_id", str, ""),
            name=_field(doc, "name", (str, type(None)), ""),
            params_sha256=_field(doc, "params_sha256", (str, type(None)), ""),
            host=dict(host) if host is not None else None,
            packages=dict(_field(doc, "packages", dict, "")),
            identities=dict(_field(doc, "identities", dict, "")),
            gates=tuple(ReceiptGate.from_json(r, i) for i, r in enumerate(rows)),
            verdict=verdict,
            files=tuple(entries),
        )
