"""Typed result of stage 04 (parity): one candidate per parity gate, with its drift."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping

from verifylib.evidence.gates import (
    PARITY_PROGRAM,
    PARITY_PROGRAM_FP16,
    PARITY_RUNTIME,
    PARITY_RUNTIME_FP16,
    Status,
)
from verifylib.evidence.parity.schema import AttributionEvidence, Measurement, ParityEvidence
from verifylib.evidence.reading import judged_evidence

if TYPE_CHECKING:
    from verifylib.evidence.records import GateRecord


@dataclass(frozen=True)
class Drift:
    """Where and how a candidate departs from the reference (the fixture input).

    Attributes
    ----------
    frames : dict
        Execution mode -> SNR (dB) per encoder output frame.
    histogram : dict
        Execution mode -> ``{"edges", "counts", "zeros"}`` of the absolute error.
    layers : dict
        Execution mode -> ``[{"label", "value", "snr_db"}]`` along the residual stream
        (program candidates only); a tap no known layout maps carries ``"unmapped": true``
        and a NaN SNR.
    speech_frames : int or None
        Output frames covered by the fixture's audio (the rest is padding).
    layers_unavailable : str or None
        Why there is no per-layer curve, if there is none.
    op_counts : dict
        Operation type -> count in the program (program candidates).
    timings : dict
        Executor, load and predict seconds as measured.
    tap_layouts : dict
        Residual-stream label -> the layout (:mod:`verifylib.numerics.layouts`) its value
        was read through; empty for runs made before layouts were recorded.
    unmapped_taps : tuple of dict
        ``{"label", "value", "shape", "reference_shape", "layouts_tried"}`` of each tap no
        known layout maps onto the reference (shown, never compared).
    """

    # A non-finite SNR is the string the canonical JSON stores it as ("inf", "nan").
    frames: Mapping[str, list[float | str]]
    histogram: Mapping[str, Mapping[str, Any]]
    layers: Mapping[str, list[dict[str, Any]]] = field(default_factory=dict)
    speech_frames: int | None = None
    layers_unavailable: str | None = None
    op_counts: Mapping[str, int] = field(default_factory=dict)
    timings: Mapping[str, Any] = field(default_factory=dict)
    tap_layouts: Mapping[str, str] = field(default_factory=dict)
    unmapped_taps: tuple[Mapping[str, Any], ...] = ()

    @classmethod
    def from_evidence(cls, doc: Mapping[str, Any]) -> "Drift":
        """Build from a ``drift`` evidence document as the parity stage writes it."""
        timings = {k: doc[k] for k in ("executor_seconds", "load_seconds", "predict_seconds")
                   if k in doc}
        return cls(frames=dict(doc.get("frames", {})), histogram=dict(doc.get("histogram", {})),
                   layers=dict(doc.get("layers", {})), speech_frames=doc.get("speech_frames"),
                   layers_unavailable=doc.get("layers_unavailable"),
                   op_counts=dict(doc.get("op_counts", {})), timings=timings,
                   tap_layouts=dict(doc.get("tap_layouts", {})),
                   unmapped_taps=tuple(doc.get("unmapped_taps", ())))


@dataclass(frozen=True)
class ParityCandidate:
    """One parity gate's candidate, its measurements and its drift.

    Attributes
    ----------
    gate : str
        ``parity.program``, ``parity.runtime``, …
    variant : str
        ``fp32`` or ``fp16``.
    kind : str
        ``program`` (the ML program executed op by op) or ``runtime`` (Core ML).
    status : verifylib.evidence.gates.Status
        The gate's status (PASS or FAIL: only judged gates have a candidate).
    detail : str
        Its rule's explanation.
    measurements : tuple of verifylib.evidence.parity.schema.Measurement
        One typed record (``input``, ``execution``, ``metrics``, ``seconds``) per input
        and execution mode, as stored.
    drift : Drift
    policy : dict
        The frozen policy's rules.
    reference_seconds : dict
        Input kind -> HF encoder wall time.
    attribution : verifylib.evidence.parity.schema.AttributionEvidence or None
        Op-level attribution of the drift (program candidates), as stored.
    outputs : mapping or None
        The candidate's outputs as stored (:class:`verifylib.numerics.arrays.ArrayFile`):
        ``fixture`` and ``random`` (the gated execution) and, for program candidates,
        ``layer_frame_snr_db`` (one row per residual-stream point, one column per frame).
    """

    gate: str
    variant: str
    kind: str
    status: Status
    detail: str
    measurements: tuple[Measurement, ...]
    drift: Drift
    policy: Mapping[str, Any]
    reference_seconds: Mapping[str, float]
    attribution: AttributionEvidence | None = None
    outputs: Mapping[str, Any] | None = None


@dataclass
class ParityResult:
    """Stage 04's result: the reference's description and inputs, and each candidate.

    ``reference_outputs`` (:class:`verifylib.numerics.arrays.ArrayFile`) holds the Hugging Face
    encoder's ``fixture`` and ``random`` outputs as stored.
    """

    reference: Mapping[str, Any] | None = None
    inputs: Mapping[str, Any] | None = None
    candidates: dict[str, ParityCandidate] = field(default_factory=dict)
    reference_outputs: Mapping[str, Any] | None = None


REFERENCE_ARRAYS = "reference_outputs"
"""Evidence name of the Hugging Face outputs (``fixture``, ``random``) every parity gate cites."""


CANDIDATE_ARRAYS = "outputs"
"""Evidence name of a parity candidate's stored outputs (:attr:`ParityCandidate.outputs`)."""


ATTRIBUTION = "attribution"
"""Evidence name of a program candidate's op-level attribution."""


PARITY_GATES = (PARITY_PROGRAM, PARITY_RUNTIME, PARITY_PROGRAM_FP16,
                PARITY_RUNTIME_FP16)


def parity_result_from_evidence(run_dir: str | os.PathLike[str],
                                records: Mapping[str, GateRecord]) -> ParityResult:
    """Stage 04's result, read from the evidence its gates cite (digest-checked).

    The stage builds its own result with this function right after writing the evidence,
    and :func:`verifylib.open_run` builds it the same way from a published run, so both
    show the same thing. Arrays are not read here: they load lazily, digest-bound
    (:class:`verifylib.numerics.arrays.ArrayFile`).

    Parameters
    ----------
    run_dir : path-like
        The run directory.
    records : mapping
        Gate id -> :class:`verifylib.evidence.records.GateRecord` (at least the parity gates).

    Returns
    -------
    ParityResult
        One candidate per parity gate its rule judged (PASS or FAIL), see
        :func:`judged_evidence`.

    Raises
    ------
    verifylib.errors.EvidenceInvalid
        If a cited file is missing or altered, or a ``parity`` or ``attribution`` document
        does not parse (:class:`verifylib.evidence.fields.SchemaError`).
    """
    from pathlib import Path

    from verifylib.numerics.arrays import ArrayFile

    run_dir = Path(run_dir)
    result = ParityResult()
    for gid in PARITY_GATES:
        view = judged_evidence(run_dir, records, gid, "parity")
        if view is None:
            continue
        rec = records[gid]
        doc = ParityEvidence.from_json(view.json("parity"))
        drift = view.json("drift") if view.has("drift") else {}
        att = (AttributionEvidence.from_json(view.json(ATTRIBUTION))
               if view.has(ATTRIBUTION) else None)
        refs = {r.name: r for r in rec.evidence}
        outputs = (ArrayFile(run_dir / refs[CANDIDATE_ARRAYS].path,
                             refs[CANDIDATE_ARRAYS].sha256)
                   if CANDIDATE_ARRAYS in refs else None)
        if REFERENCE_ARRAYS in refs and result.reference_outputs is None:
            result.reference_outputs = ArrayFile(run_dir / refs[REFERENCE_ARRAYS].path,
                                                 refs[REFERENCE_ARRAYS].sha256)
        reference = doc.reference or {}
        result.reference = result.reference or reference
        result.inputs = result.inputs or doc.inputs
        result.candidates[gid] = ParityCandidate(
            gid, doc.variant, doc.kind, rec.status, rec.reason.detail, doc.measured(),
            Drift.from_evidence(drift), dict(doc.policy.rules),
            dict(reference.get("seconds") or {}), attribution=att, outputs=outputs)
    return result
