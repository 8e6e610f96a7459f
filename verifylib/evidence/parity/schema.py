"""Schema of the stage 04 (parity) sidecar ``parity``: one candidate against the reference.

:class:`ParityEvidence` is the document :func:`verifylib.stages.parity.run` writes for each
parity gate (``program.json``, ``runtime.json``, ...): the policy record, the variant and
kind, the measured artifact, the inputs and reference descriptions, and one
:class:`Measurement` (input, execution, :class:`MeasurementMetrics`) per input and
execution mode.

``from_json`` is strict and fails closed: a field that is missing or of the wrong JSON type
raises :class:`SchemaError` (an :class:`verifylib.errors.EvidenceInvalid`) whose ``path``
names it, e.g. ``measurements[2].metrics.snr_db``. A few keys are optional because records
written by hand for the rules' own tests omit them (``seconds``, ``finite``, the
descriptions, ``measurements``); the parity rule then refuses what it needs and does not
find. ``to_json`` gives back exactly the dict the stage writes; statistics stored as
``"inf"``, ``"-inf"`` or ``"nan"`` come back as floats, which the canonical JSON writes as
the same strings, so the canonical bytes are the same either way.

This module checks shapes and types only; whether the figures agree with their sums, the
policy is the packaged one, or the artifact the exported one is the rule's job
(:mod:`verifylib.evidence.parity.rules`). It imports nothing from verifylib but
:mod:`verifylib.errors` (through :mod:`.fields`), so views and readers may use it.
"""

from __future__ import annotations

from typing import Any

from verifylib.evidence.fields import (
    Schema,
    array_of,
    boolean,
    field,
    integer,
    mapping,
    real,
    string,
    string_or_null,
)

__all__ = ["PolicyRecord", "Artifact", "MeasurementMetrics", "Measurement",
           "PolicyChoiceRecord", "ParityEvidence"]


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
