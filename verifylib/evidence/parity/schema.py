"""Schemas of the stage 04 (parity) documents: the candidate against the reference, its drift.

:class:`ParityEvidence` is the document :func:`verifylib.stages.parity.run` writes for each
parity gate (``program.json``, ``runtime.json``, ...): the policy record, the variant and
kind, the measured artifact, the inputs and reference descriptions, and one
:class:`Measurement` (input, execution, :class:`MeasurementMetrics`) per input and
execution mode. :class:`AttributionEvidence` is a program candidate's op-level attribution
(``<gate>-attribution.json``, as :meth:`verifylib.numerics.attribution.Attribution.as_dict`
writes it): one :class:`OpRow` per op, the two rankings, one :class:`ModuleSummary` per
region of the encoder.

``from_json`` is strict and fails closed: a field that is missing or of the wrong JSON type
raises :class:`SchemaError` (an :class:`verifylib.errors.EvidenceInvalid`) whose ``path``
names it, e.g. ``measurements[2].metrics.snr_db``. A few keys are optional because records
written by hand for the rules' own tests omit them (``seconds``, ``finite``, the
descriptions, ``measurements``); the parity rule then refuses what it needs and does not
find. ``to_json`` gives back exactly the dict the stage writes; statistics stored as
``"inf"``, ``"-inf"`` or ``"nan"`` come back as floats, which the canonical JSON writes as
the same strings, so the canonical bytes are the same either way.

This module checks shapes and types only; whether the figures agree with their sums, the
policy is the packaged one, the artifact the exported one, or the attribution's ΔSNRs,
rankings and summary follow from its SNRs is the rule's job
(:mod:`verifylib.evidence.parity.rules`). It imports nothing from verifylib but
:mod:`verifylib.errors` (through :mod:`.fields`), so views and readers may use it.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Iterable, Self

from verifylib.evidence.fields import (
    Schema,
    SchemaError,
    array_of,
    boolean,
    field,
    integer,
    join,
    map_of,
    mapping,
    nullable,
    obj,
    real,
    string,
    string_or_null,
    strings,
)

__all__ = ["PolicyRecord", "Artifact", "MeasurementMetrics", "Measurement",
           "PolicyChoiceRecord", "ParityEvidence", "OpRow", "ModuleSummary",
           "AttributionEvidence", "UNRECORDED_CEILING_DB"]


class PolicyRecord(Schema):
    """The policy a parity record was measured under (as ``policy_record`` writes it).

    Attributes
    ----------
    id : str
        ``fp32-v1`` or ``fp16-v1``.
    sha256 : str
        Digest of the policy resource.
    rules : dict
        The policy's rules as stored (compared whole with the packaged resource).
    """

    _path = "policy"

    id: str = field(string)
    sha256: str = field(string)
    rules: dict[str, Any] = field(mapping)


class Artifact(Schema, kw_only=True):
    """The measured artifact of a parity record.

    Attributes
    ----------
    tree_digest : str or None
        Tree digest of the folder that was measured.
    exported_tree_digest : str or None
        The digest the export (or compile) stage bound for it.
    path : str or None
        Its path in the run directory (None when the record omits it).
    """

    _path = "artifact"

    path: str | None = field(string, optional=True, default=None)
    tree_digest: str | None = field(string_or_null)
    exported_tree_digest: str | None = field(string_or_null)


class MeasurementMetrics(Schema):
    """The float64 statistics of one measurement (:class:`verifylib.numerics.parity.Metrics`).

    Attributes
    ----------
    n : int
        Number of elements.
    signal_energy, noise_energy, dot, candidate_energy : float
        The sums the rule recomputes SNR and cosine from.
    snr_db, cosine : float
        The stored figures (``inf`` / ``nan`` as floats).
    max_abs_error, mean_abs_error : float
        Recorded, not gating.
    finite : bool or None
        Whether every candidate element was finite; None when the record omits it (the
        rule counts that as not finite).
    """

    _path = "metrics"

    n: int = field(integer)
    signal_energy: float = field(real)
    noise_energy: float = field(real)
    dot: float = field(real)
    candidate_energy: float = field(real)
    snr_db: float = field(real)
    cosine: float = field(real)
    max_abs_error: float = field(real)
    mean_abs_error: float = field(real)
    finite: bool | None = field(boolean, optional=True, default=None)


class Measurement(Schema):
    """One input through one execution mode of a candidate.

    Attributes
    ----------
    input : str
        ``fixture`` or ``random``.
    execution : str
        ``float32``, ``float64`` (program executor) or ``coreml-all`` (Core ML).
    metrics : MeasurementMetrics
    seconds : float or None
        Wall time of the candidate; None when the record omits it.
    """

    _path = "measurement"

    input: str = field(string)
    execution: str = field(string)
    metrics: MeasurementMetrics = field(MeasurementMetrics)
    seconds: float | None = field(real, optional=True, default=None)

    @property
    def label(self) -> str:
        """``input/execution``, as the rule's figures name a measurement."""
        return f"{self.input}/{self.execution}"


class PolicyChoiceRecord(Schema):
    """The ``choice`` entry: why this policy, decided before measuring.

    Attributes
    ----------
    precision : str
        The encoder's declared compute precision.
    source_ftype : str or None
        The model-file tensor type the reference was rebuilt from (None: not a ggml file).
    policy_id : str
        The chosen policy.
    why : str
        The rule in words (shown).
    """

    _path = "choice"

    precision: str = field(string)
    source_ftype: str | None = field(string_or_null)
    policy_id: str = field(string)
    why: str = field(string)


class ParityEvidence(Schema, kw_only=True):
    """The ``parity`` document of one parity gate.

    Attributes
    ----------
    policy : PolicyRecord
    variant : str
        ``fp32`` or ``fp16``.
    kind : str
        ``program`` or ``runtime``.
    artifact : Artifact
    measurements : tuple of Measurement or None
        None when the record holds no ``measurements`` key (the rule then finds no gated
        measurement).
    candidate, reference, inputs : dict or None
        Descriptions of the candidate executor, the reference encoder and the two inputs,
        as stored (shown, not judged); None when omitted.
    choice : PolicyChoiceRecord or None
        For an encoder audited as given (or a ggml-file source): the declared precision and
        source ftype the policy was chosen from; None for the suite's own export, whose
        variant names its policy.
    """

    policy: PolicyRecord = field(PolicyRecord)
    variant: str = field(string)
    kind: str = field(string)
    candidate: dict[str, Any] | None = field(mapping, optional=True, default=None)
    reference: dict[str, Any] | None = field(mapping, optional=True, default=None)
    artifact: Artifact = field(Artifact)
    inputs: dict[str, Any] | None = field(mapping, optional=True, default=None)
    measurements: tuple[Measurement, ...] | None = field(
        array_of(Measurement.from_json), optional=True, default=None)
    choice: PolicyChoiceRecord | None = field(PolicyChoiceRecord, optional=True, default=None)

    def measured(self) -> tuple[Measurement, ...]:
        """Return the measurements (empty when the record holds none).

        Returns
        -------
        tuple of Measurement
        """
        return self.measurements or ()


# ----------------------------------------------------------------------------- attribution

_real_or_null = nullable(real)


class OpRow(Schema):
    """One op of an attribution document and the drift it introduces (an ``ops`` entry).

    Keys beyond these are not read. SNRs and cosines are numbers, ``"inf"``, ``"-inf"``,
    ``"nan"`` or ``null``.

    Attributes
    ----------
    index : int
        Position in program order (const ops excluded).
    name : str
        The op's (first) output value.
    type : str
        MIL op type.
    module : str or None
        The HF module whose output this value is (None: no counterpart).
    scope : str
        Region of the encoder the op sits in.
    inputs : tuple of str
        Its non-constant input values.
    snr_db, cosine, delta_snr_db : float or None
        Conversion drift, and its ΔSNR across the op.
    precision_snr_db, precision_cosine, precision_delta_snr_db : float or None
        Precision drift, and its ΔSNR across the op.
    """

    _path = "op"

    index: int = field(integer)
    name: str = field(string)
    type: str = field(string)
    module: str | None = field(string_or_null)
    scope: str = field(string)
    inputs: tuple[str, ...] = field(strings)
    snr_db: float | None = field(_real_or_null)
    cosine: float | None = field(_real_or_null)
    delta_snr_db: float | None = field(_real_or_null)
    precision_snr_db: float | None = field(_real_or_null)
    precision_cosine: float | None = field(_real_or_null)
    precision_delta_snr_db: float | None = field(_real_or_null)


class ModuleSummary(Schema):
    """One region of the encoder in an attribution document (a ``modules`` entry).

    Every key is declared (a summary is compared whole with the one its ops give).

    Attributes
    ----------
    module : str
        The region (``conv1``, ``embeddings``, ``layers.k``, ``layer_norm``).
    ops, mapped : int
        Ops in it, and those with an HF counterpart.
    snr_db : float or None
        Conversion SNR at the region's last comparison point.
    delta_snr_db : float
        Sum of its mapped ops' conversion ΔSNR.
    worst_op : str or None
        Its op with the most negative conversion ΔSNR.
    precision_delta_snr_db : float
        Sum of its ops' precision ΔSNR.
    precision_worst_op : str or None
        Its op with the most negative precision ΔSNR.
    """

    _path = "module"
    _closed = "not a field of this record"

    module: str = field(string)
    ops: int = field(integer)
    mapped: int = field(integer)
    snr_db: float | None = field(_real_or_null)
    delta_snr_db: float = field(real)
    worst_op: str | None = field(string_or_null)
    precision_delta_snr_db: float = field(real)
    precision_worst_op: str | None = field(string_or_null)


UNRECORDED_CEILING_DB = 150.0
"""The differencing ceiling of a document that does not record its own: the one it was made
with (:data:`verifylib.numerics.attribution.CEILING_DB`, which has never changed)."""


# Keys documents made by earlier versions may lack, and the value each then had.
_ABSENT: dict[str, Any] = {"points": [], "compute": "float32", "variant": None,
                           "fixture": None, "seconds": 0.0,
                           "ceiling_db": UNRECORDED_CEILING_DB, "input_precision": {}}


class AttributionEvidence(Schema, kw_only=True):
    """The ``attribution`` document of a program candidate: every op's drift, ranked.

    ``from_json`` reads what :meth:`verifylib.numerics.attribution.Attribution.as_dict`
    writes. ``top`` and ``precision_top`` name ops of ``ops`` (each row read is the op's own
    row); a key an earlier document lacks takes the value it then had (``points`` empty,
    ``compute`` float32, ``variant`` and ``fixture`` None, ``seconds`` 0,
    :data:`UNRECORDED_CEILING_DB`, ``input_precision`` empty), and the three counts, which
    documents made before they were recorded lack, are None then.

    Attributes
    ----------
    ops : tuple of OpRow
        Every op, in program order.
    top, precision_top : tuple of OpRow
        The ops that introduce the most conversion drift, and that lose the most precision,
        worst first.
    modules : tuple of ModuleSummary
        Per-region summary, in program order.
    points : tuple of dict
        Every HF comparison point, as stored (``{module, value, snr_db, cosine}``).
    compute : str
        Arithmetic of the candidate execution.
    variant, fixture : str or None
        ``fp32`` / ``fp16``, and the input's fixture id, when known.
    stated_unmapped, stated_mapped, stated_executed : int or None
        The ``unmapped``, ``mapped`` and ``executed`` counts the document states (None
        when it does not); :attr:`mapped` and :attr:`executed` are the ops' own.
    seconds : float
        Wall time of the attribution.
    ceiling_db : float
        The SNR ceiling used when differencing.
    input_precision : dict
        Function input -> precision SNR of the input as the candidate read it.
    """

    ops: tuple[OpRow, ...] = field(array_of(OpRow.from_json))
    top: tuple[OpRow, ...] = field(array_of(OpRow.from_json))
    precision_top: tuple[OpRow, ...] = field(array_of(OpRow.from_json))
    modules: tuple[ModuleSummary, ...] = field(array_of(ModuleSummary.from_json))
    points: tuple[dict[str, Any], ...] = field(array_of(mapping))
    compute: str = field(string)
    variant: str | None = field(string_or_null)
    fixture: str | None = field(string_or_null)
    stated_unmapped: int | None = field(integer, key="unmapped", optional=True, default=None)
    stated_mapped: int | None = field(integer, key="mapped", optional=True, default=None)
    stated_executed: int | None = field(integer, key="executed", optional=True, default=None)
    seconds: float = field(real)
    ceiling_db: float = field(real)
    input_precision: dict[str, float] = field(lambda v, p: map_of(v, p, real))

    @classmethod
    def from_json(cls, doc: Any, path: str | None = None) -> Self:
        """Read the document; absent optional keys take their earlier value, rankings name ops.

        Raises
        ------
        SchemaError
            If a field is missing or of the wrong type, or a ranked op is not in ``ops``
            (``top[2].name: names no op of ops``).
        """
        where = cls._path if path is None else path
        read = super().from_json({**_ABSENT, **obj(doc, where)}, where)
        rows = {o.name: o for o in read.ops}

        def resolved(key: str, ranked: tuple[OpRow, ...]) -> tuple[OpRow, ...]:
            for i, o in enumerate(ranked):
                if o.name not in rows:
                    raise SchemaError(join(where, f"{key}[{i}].name"),
                                      f"names no op of ops: {o.name!r}")
            return tuple(rows[o.name] for o in ranked)
        return dataclasses.replace(read, top=resolved("top", read.top),
                                   precision_top=resolved("precision_top", read.precision_top))

    @property
    def executed(self) -> int:
        """Ops executed (every op of the program but its constants)."""
        return len(self.ops)

    @property
    def mapped(self) -> int:
        """Ops compared with an HF module's output (the ones conversion drift covers)."""
        return sum(1 for o in self.ops if o.module is not None)

    @property
    def unmapped(self) -> int:
        """Ops without an HF counterpart (as the measurement's ``Attribution.unmapped``)."""
        return self.executed - self.mapped

    @property
    def precision_compared(self) -> int:
        """Ops whose output was compared with the float64 execution (floating values)."""
        return sum(1 for o in self.ops if o.precision_snr_db is not None)

    def op(self, name: str) -> OpRow:
        """Find the op whose output is ``name``.

        Parameters
        ----------
        name : str
            An output value name (:attr:`OpRow.name`).

        Returns
        -------
        OpRow
            The first op of :attr:`ops` with that name.

        Raises
        ------
        KeyError
            If no op has that name.
        """
        for o in self.ops:
            if o.name == name:
                return o
        raise KeyError(name)

    def table(self, ops: Iterable[OpRow] | None = None) -> list[dict[str, Any]]:
        """List one row per op (every field, by name), for a DataFrame.

        Parameters
        ----------
        ops : iterable of OpRow, optional
            The ops to list (e.g. :attr:`top`); every op by default.

        Returns
        -------
        list of dict
        """
        return [o.to_json() for o in (self.ops if ops is None else ops)]
