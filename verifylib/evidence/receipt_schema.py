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
from typing import Any

from verifylib.errors import EvidenceInvalid
from verifylib.evidence.fields import (
    SchemaError,
    array_of,
    boolean,
    mapping,
    mapping_or_null,
    obj,
    req,
    string,
    string_or_null,
)
from verifylib.evidence.gates import Verdict
from verifylib.evidence.records import GateRecord

SCHEMA = "verifylib-receipt/2"
"""The receipt format this version writes: ``/1`` plus ``versions``, what the run was judged
under (its gate table, its receipt format, its policies)."""

SCHEMA_V1 = "verifylib-receipt/1"
"""The format of verifylib 0.1.0 (runs made before 2026-12-07), still read and verified: its
gate table is the one whose gates it lists (:func:`verifylib.evidence.gates.table_of_ids`)."""

SCHEMAS = (SCHEMA_V1, SCHEMA)
"""Every receipt format this version reads."""


class ReceiptInvalid(SchemaError):
    """A receipt document does not have the receipt format.

    A :class:`~verifylib.evidence.fields.SchemaError` whose message begins
    ``receipt:``, e.g. ``receipt: gates[3].stage: expected a string, got null``.

    Parameters
    ----------
    path, problem : str
        As for :class:`~verifylib.evidence.fields.SchemaError`.
    """

    def __init__(self, path: str, problem: str):
        super().__init__(path, problem)
        self.args = (f"receipt: {path}: {problem}" if path else f"receipt: {problem}",)


def _refused(exc: SchemaError) -> ReceiptInvalid:
    return exc if isinstance(exc, ReceiptInvalid) else ReceiptInvalid(exc.path, exc.problem)


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

    def to_json(self) -> dict[str, Any]:
        """Return the row as written.

        Returns
        -------
        dict
            The gate record's fields, then ``stage`` and ``required``.
        """
        return dict(self.record.to_record(), stage=self.stage, required=self.required)

    @staticmethod
    def from_json(row: Any, index: int | str = 0) -> "ReceiptGate":
        """Read one row of the gate table.

        Parameters
        ----------
        row : object
            The row as parsed from JSON.
        index : int or str
            Its position (or its path, ``gates[3]``), for messages.

        Returns
        -------
        ReceiptGate

        Raises
        ------
        ReceiptInvalid
            When the row is not a gate row (naming ``gates[index].field``).
        """
        where = index if isinstance(index, str) else f"gates[{index}]"
        try:
            o = obj(row, where)
            stage = req(o, "stage", where, string)
            required = req(o, "required", where, boolean)
        except SchemaError as exc:
            raise _refused(exc) from None
        try:
            record = GateRecord.from_record({k: v for k, v in o.items()
                                             if k not in ("stage", "required")})
        except EvidenceInvalid as exc:
            raise ReceiptInvalid(where, str(exc)) from None
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

    def to_json(self) -> dict[str, Any]:
        """Return the entry as written.

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
        The format (:data:`SCHEMA`, or :data:`SCHEMA_V1` for a run made before 0.2.0).
    versions : dict or None
        What the run was judged under (``verifylib``, ``gate_table``, ``receipt``, and
        ``policies``: gate id to the policy ids its evidence names); None in a
        ``verifylib-receipt/1`` receipt, whose gate table is known by its gates.
    """

    run_id: str
    name: str | None
    params_sha256: str | None
    host: dict[str, Any] | None
    packages: dict[str, Any]
    identities: dict[str, Any]
    gates: tuple[ReceiptGate, ...]
    verdict: Verdict
    files: tuple[FileDigest, ...] = ()
    schema: str = SCHEMA
    versions: dict[str, Any] | None = None

    def gate(self, gate_id: str) -> ReceiptGate:
        """Return the row of one gate.

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

    def to_json(self) -> dict[str, Any]:
        """Return the receipt as written to ``receipt.json``.

        Returns
        -------
        dict
            Keys in the order of format ``verifylib-receipt/2`` (``versions`` last).
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
            **({} if self.versions is None else {"versions": dict(self.versions)}),
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
            When the document is not a receipt of :data:`SCHEMAS`; the message names the
            field.
        """
        try:
            o = obj(doc, "")
            if o.get("schema") not in SCHEMAS:
                raise ReceiptInvalid("schema", f"not a {SCHEMA} document "
                                               f"(schema {o.get('schema')!r})")
            verdict = req(o, "verdict", "", string)
            if verdict not in {v.value for v in Verdict}:
                raise ReceiptInvalid("verdict", f"{verdict!r} is not a verdict")
            return Receipt(
                run_id=req(o, "run_id", "", string),
                name=req(o, "name", "", string_or_null),
                params_sha256=req(o, "params_sha256", "", string_or_null),
                host=req(o, "host", "", mapping_or_null),
                packages=req(o, "packages", "", mapping),
                identities=req(o, "identities", "", mapping),
                gates=req(o, "gates", "", array_of(ReceiptGate.from_json)),
                verdict=Verdict(verdict),
                files=req(o, "files", "", array_of(_file_digest)),
                schema=o["schema"],
                versions=(req(o, "versions", "", mapping) if o["schema"] == SCHEMA
                          else None),
            )
        except SchemaError as exc:
            raise _refused(exc) from None


def _file_digest(value: Any, path: str) -> FileDigest:
    o = obj(value, path)
    return FileDigest(req(o, "path", path, string), req(o, "sha256", path, string))
