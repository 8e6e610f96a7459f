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
(:mod:`verifylib.evidence.rules.parity`). It imports nothing from verifylib but
:mod:`verifylib.errors` (through :mod:`.fields`), so views and readers may use it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from verifylib.evidence.schemas.fields import (
    SchemaError,
    array_of,
    boolean,
    integer,
    mapping,
    obj,
    opt,
    put,
    real,
    req,
    string,
    string_or_null,
)

__all__ = ["SchemaError", "PolicyRecord", "Artifact", "MeasurementMetrics", "Measurement",
           "ParityEvidence"]


@dataclass(frozen=True)
class PolicyRecord:
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

    id: str
    sha256: str
    rules: dict[str, Any]

    @classmethod
    def from_json(cls, doc: Any, path: str = "policy") -> "PolicyRecord":
        """Read a policy record.

        Parameters
        ----------
        doc : Any
            The ``policy`` value of a parity record.
        path : str
            Where it sits, for error messages.

        Returns
        -------
        PolicyRecord

        Raises
        ------
        SchemaError
            If a field is missing or of the wrong type.
        """
        o = obj(doc, path)
        return cls(req(o, "id", path, string), req(o, "sha256", path, string),
                   req(o, "rules", path, mapping))

    def to_json(self) -> dict[str, Any]:
        """Return the record as the stage writes it.

        Returns
        -------
        dict
        """
        return {"id": self.id, "sha256": self.sha256, "rules": self.rules}


@dataclass(frozen=True)
class Artifact:
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

    tree_digest: str | None
    exported_tree_digest: str | None
    path: str | None = None

    @classmethod
    def from_json(cls, doc: Any, path: str = "artifact") -> "Artifact":
        """Read the ``artifact`` of a parity record.

        Parameters
        ----------
        doc : Any
            The ``artifact`` value.
        path : str
            Where it sits, for error messages.

        Returns
        -------
        Artifact

        Raises
        ------
        SchemaError
            If a field is missing or of the wrong type.
        """
        o = obj(doc, path)
        return cls(req(o, "tree_digest", path, string_or_null),
                   req(o, "exported_tree_digest", path, string_or_null),
                   opt(o, "path", path, string))

    def to_json(self) -> dict[str, Any]:
        """Return the artifact as the stage writes it.

        Returns
        -------
        dict
        """
        out: dict[str, Any] = {}
        put(out, "path", self.path)
        out["tree_digest"] = self.tree_digest
        out["exported_tree_digest"] = self.exported_tree_digest
        return out


_SUMS = ("signal_energy", "noise_energy", "dot", "candidate_energy")
_FIGURES = ("snr_db", "cosine", "max_abs_error", "mean_abs_error")


@dataclass(frozen=True)
class MeasurementMetrics:
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

    n: int
    signal_energy: float
    noise_energy: float
    dot: float
    candidate_energy: float
    snr_db: float
    cosine: float
    max_abs_error: float
    mean_abs_error: float
    finite: bool | None = None

    @classmethod
    def from_json(cls, doc: Any, path: str = "metrics") -> "MeasurementMetrics":
        """Read the ``metrics`` of a measurement.

        Parameters
        ----------
        doc : Any
            The ``metrics`` value.
        path : str
            Where it sits, e.g. ``measurements[0].metrics``.

        Returns
        -------
        MeasurementMetrics

        Raises
        ------
        SchemaError
            If a field is missing or not a number (``"inf"``, ``"-inf"``, ``"nan"`` are).
        """
        o = obj(doc, path)
        f = {k: req(o, k, path, real) for k in _SUMS + _FIGURES}
        return cls(n=req(o, "n", path, integer), signal_energy=f["signal_energy"],
                   noise_energy=f["noise_energy"], dot=f["dot"],
                   candidate_energy=f["candidate_energy"], snr_db=f["snr_db"],
                   cosine=f["cosine"], max_abs_error=f["max_abs_error"],
                   mean_abs_error=f["mean_abs_error"], finite=opt(o, "finite", path, boolean))

    def to_json(self) -> dict[str, Any]:
        """Return the metrics as :meth:`verifylib.numerics.parity.Metrics.as_dict` writes them.

        Returns
        -------
        dict
        """
        out: dict[str, Any] = {"n": self.n}
        for k in _SUMS + _FIGURES:
            out[k] = getattr(self, k)
        put(out, "finite", self.finite)
        return out


@dataclass(frozen=True)
class Measurement:
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

    input: str
    execution: str
    metrics: MeasurementMetrics
    seconds: float | None = None

    @property
    def label(self) -> str:
        """``input/execution``, as the rule's figures name a measurement."""
        return f"{self.input}/{self.execution}"

    @classmethod
    def from_json(cls, doc: Any, path: str = "measurement") -> "Measurement":
        """Read one entry of ``measurements``.

        Parameters
        ----------
        doc : Any
            The entry.
        path : str
            Where it sits, e.g. ``measurements[2]``.

        Returns
        -------
        Measurement

        Raises
        ------
        SchemaError
            If a field is missing or of the wrong type.
        """
        o = obj(doc, path)
        return cls(req(o, "input", path, string), req(o, "execution", path, string),
                   req(o, "metrics", path, MeasurementMetrics.from_json),
                   opt(o, "seconds", path, real))

    def to_json(self) -> dict[str, Any]:
        """Return the entry as the stage writes it.

        Returns
        -------
        dict
        """
        out: dict[str, Any] = {"input": self.input, "execution": self.execution,
                               "metrics": self.metrics.to_json()}
        put(out, "seconds", self.seconds)
        return out


@dataclass(frozen=True)
class ParityEvidence:
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
    """

    policy: PolicyRecord
    variant: str
    kind: str
    artifact: Artifact
    measurements: tuple[Measurement, ...] | None = None
    candidate: dict[str, Any] | None = None
    reference: dict[str, Any] | None = None
    inputs: dict[str, Any] | None = None

    @classmethod
    def from_json(cls, doc: Any) -> "ParityEvidence":
        """Read a parity record, strictly.

        Parameters
        ----------
        doc : Any
            The decoded JSON document.

        Returns
        -------
        ParityEvidence

        Raises
        ------
        SchemaError
            If a field is missing or of the wrong type; ``path`` names it.
        """
        o = obj(doc, "")
        return cls(policy=req(o, "policy", "", PolicyRecord.from_json),
                   variant=req(o, "variant", "", string), kind=req(o, "kind", "", string),
                   artifact=req(o, "artifact", "", Artifact.from_json),
                   measurements=opt(o, "measurements", "",
                                    array_of(Measurement.from_json)),
                   candidate=opt(o, "candidate", "", mapping),
                   reference=opt(o, "reference", "", mapping),
                   inputs=opt(o, "inputs", "", mapping))

    def measured(self) -> tuple[Measurement, ...]:
        """Return the measurements (empty when the record holds none).

        Returns
        -------
        tuple of Measurement
        """
        return self.measurements or ()

    def to_json(self) -> dict[str, Any]:
        """Return the record as the stage writes it.

        Returns
        -------
        dict
        """
        out: dict[str, Any] = {"policy": self.policy.to_json(), "variant": self.variant,
                               "kind": self.kind}
        put(out, "candidate", self.candidate)
        put(out, "reference", self.reference)
        out["artifact"] = self.artifact.to_json()
        put(out, "inputs", self.inputs)
        if self.measurements is not None:
            out["measurements"] = [m.to_json() for m in self.measurements]
        return out
