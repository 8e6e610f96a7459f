"""Typed results of the stages, handed from a stage's ``run`` to its view and its notebook.

A stage's gate records and evidence are the audit; these dataclasses are what a reader
(or a researcher in the notebook) looks at next to them: the A/B outcome counts, each
parity candidate's measurements and drift, each clip's transcripts and WER, each compute
plan. They are built from the same values the stage wrote as evidence, never re-measured.
Stages 01 and 02 have no nested results: their ``StageReport.facts`` is a flat table of
labelled values.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

__all__ = [
    "LifecycleSide", "LifecycleSummary", "SanitizerSide", "SanitizerSummary",
    "NegativeControl", "PositiveControl", "CanaryResult", "Drift", "ParityCandidate", "ParityResult", "ClipResult", "CorpusWer",
    "WerResult", "PlacementResult",
]


# ----------------------------------------------------------------------------- 03_canary

@dataclass(frozen=True)
class LifecycleSide:
    """One build's side of the lifecycle A/B.

    Attributes
    ----------
    available : bool
        False when the build is missing (``reason`` says why).
    reason : str
        Why the side is unavailable ("" otherwise).
    binary_sha256 : str or None
        The whisper-cli that ran.
    counts : dict
        Outcome label -> number of runs.
    wall_s_median, wall_s_total : float or None
        Wall times of the runs.
    """

    available: bool
    reason: str = ""
    binary_sha256: str | None = None
    counts: Mapping[str, int] = field(default_factory=dict)
    wall_s_median: float | None = None
    wall_s_total: float | None = None


@dataclass(frozen=True)
class LifecycleSummary:
    """The batch-lifecycle A/B: the trigger, and per side what happened.

    Attributes
    ----------
    runs_per_side : int
    trigger : str
        The trigger arguments, joined.
    sides : dict
        ``"unpatched"`` / ``"patched"`` -> :class:`LifecycleSide`.
    """

    runs_per_side: int
    trigger: str
    sides: Mapping[str, LifecycleSide]


@dataclass(frozen=True)
class SanitizerSide:
    """One AddressSanitizer build's side of ``canary.sanitizer``.

    Attributes
    ----------
    available : bool
        False when the build is missing (``reason`` says why).
    reason : str
        Why the side is unavailable ("" otherwise).
    binary_sha256 : str or None
        The ASan whisper-cli that ran.
    variant : str or None
        Its build variant (``ggml-unpatched-asan`` or ``ggml-asan``).
    outcomes : dict
        What runs ended with -> number of runs: the report's one-line description, or the
        lifecycle outcome followed by ``, no sanitizer report``.
    kind : str or None
        The first report's kind in ASan's words (None when no run printed one).
    frames : tuple of str
        The first report's stack, one ``#N function location`` per frame.
    wall_s_median : float or None
        Median wall time of the runs.
    """

    available: bool
    reason: str = ""
    binary_sha256: str | None = None
    variant: str | None = None
    outcomes: Mapping[str, int] = field(default_factory=dict)
    kind: str | None = None
    frames: tuple[str, ...] = ()
    wall_s_median: float | None = None


@dataclass(frozen=True)
class SanitizerSummary:
    """``canary.sanitizer``: the trigger under AddressSanitizer, per side what it printed.

    Attributes
    ----------
    runs_per_side : int
    trigger : str
        The trigger arguments, joined.
    asan_options : str
        The ``ASAN_OPTIONS`` every run got.
    sides : dict
        ``"unpatched"`` / ``"patched"`` -> :class:`SanitizerSide`.
    """

    runs_per_side: int
    trigger: str
    asan_options: str
    sides: Mapping[str, SanitizerSide]


@dataclass(frozen=True)
class NegativeControl:
    """The Core ML negative control's one run.

    Attributes
    ----------
    outcome, detail : str
        The classifier's label and its explanation.
    wall_s : float
    returncode, signal : int or None
    scratch_listing : list of str
        What the scratch folder held (the model alone, no ``.mlmodelc``).
    """

    outcome: str
    detail: str
    wall_s: float
    returncode: int | None
    signal: int | None
    scratch_listing: list[str]

    def rows(self) -> list[tuple[str, Any]]:
        """Labelled values for a key/value table, in display order."""
        return [("outcome", self.outcome), ("detail", self.detail), ("wall_s", self.wall_s),
                ("returncode", self.returncode), ("signal", self.signal),
                ("scratch_listing", self.scratch_listing)]


@dataclass(frozen=True)
class PositiveControl:
    """The Core ML positive gate's warm-up and measured run.

    Attributes
    ----------
    outcome, detail : str
        The classifier's label and its explanation (measured run).
    warmup_wall_s, measured_wall_s : float
    warmup_encode_ms, measured_encode_ms : float or None
        whisper.cpp's own ``encode time``.
    transcript : str
        The measured run's stdout, stripped.
    """

    outcome: str
    detail: str
    warmup_wall_s: float
    measured_wall_s: float
    warmup_encode_ms: float | None
    measured_encode_ms: float | None
    transcript: str

    def rows(self) -> list[tuple[str, Any]]:
        """Labelled values for a key/value table, in display order."""
        return [("outcome", self.outcome), ("detail", self.detail),
                ("warm-up wall s", self.warmup_wall_s), ("measured wall s", self.measured_wall_s),
                ("warm-up encode time ms", self.warmup_encode_ms),
                ("measured encode time ms", self.measured_encode_ms),
                ("transcript", self.transcript)]


@dataclass
class CanaryResult:
    """Stage 03's result: whichever of the canaries ran."""

    lifecycle: LifecycleSummary | None = None
    sanitizer: SanitizerSummary | None = None
    negative: NegativeControl | None = None
    positive: PositiveControl | None = None


# ----------------------------------------------------------------------------- 04_parity

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
        (program candidates only).
    speech_frames : int or None
        Output frames covered by the fixture's audio (the rest is padding).
    layers_unavailable : str or None
        Why there is no per-layer curve, if there is none.
    op_counts : dict
        Operation type -> count in the program (program candidates).
    timings : dict
        Executor, load and predict seconds as measured.
    """

    frames: Mapping[str, list]
    histogram: Mapping[str, Mapping[str, Any]]
    layers: Mapping[str, list] = field(default_factory=dict)
    speech_frames: int | None = None
    layers_unavailable: str | None = None
    op_counts: Mapping[str, int] = field(default_factory=dict)
    timings: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_evidence(cls, doc: Mapping[str, Any]) -> "Drift":
        """Build from a ``drift`` evidence document as the parity stage writes it."""
        timings = {k: doc[k] for k in ("executor_seconds", "load_seconds", "predict_seconds")
                   if k in doc}
        return cls(frames=dict(doc.get("frames", {})), histogram=dict(doc.get("histogram", {})),
                   layers=dict(doc.get("layers", {})), speech_frames=doc.get("speech_frames"),
                   layers_unavailable=doc.get("layers_unavailable"),
                   op_counts=dict(doc.get("op_counts", {})), timings=timings)


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
    status, detail : str
        The gate's status and its rule's explanation.
    measurements : list of dict
        ``{input, execution, metrics, seconds}`` per input and execution mode.
    drift : Drift
    policy : dict
        The frozen policy's rules.
    reference_seconds : dict
        Input kind -> HF encoder wall time.
    """

    gate: str
    variant: str
    kind: str
    status: str
    detail: str
    measurements: list[dict]
    drift: Drift
    policy: Mapping[str, Any]
    reference_seconds: Mapping[str, float]


@dataclass
class ParityResult:
    """Stage 04's result: the reference's description and inputs, and each candidate."""

    reference: Mapping[str, Any] | None = None
    inputs: Mapping[str, Any] | None = None
    candidates: dict[str, ParityCandidate] = field(default_factory=dict)


# ----------------------------------------------------------------------------- 05_wer

@dataclass(frozen=True)
class ClipResult:
    """One clip's texts and word error rates (texts replaced for non-public clips).

    Attributes
    ----------
    id : str
    public : bool
    words : int
        Words in the (normalized) reference.
    counts : dict
        ``source`` / ``ggml`` / ``hybrid`` -> edit counts (``hybrid`` None without Core ML).
    reference, source, ggml : str
        Raw texts, or ``"(not public)"``.
    hybrid : str or None
    wer_source, wer_ggml, wer_pairwise : float
    wer_hybrid : float or None
    """

    id: str
    public: bool
    words: int
    counts: Mapping[str, Mapping[str, int] | None]
    reference: str
    source: str
    ggml: str
    hybrid: str | None
    wer_source: float
    wer_ggml: float
    wer_hybrid: float | None
    wer_pairwise: float


@dataclass(frozen=True)
class CorpusWer:
    """Corpus WER (summed edits over summed words) of each side, and pairwise."""

    source: float
    ggml: float
    pairwise: float


@dataclass
class WerResult:
    """Stage 05's result: every clip, and the corpus figures."""

    clips: list[ClipResult] = field(default_factory=list)
    corpus: CorpusWer | None = None


# ----------------------------------------------------------------------------- 06_placement

@dataclass
class PlacementResult:
    """Stage 06's result: the compute-plan evidence of each variant that had a plan.

    Attributes
    ----------
    plans : dict
        Variant -> the ``placement.plan`` evidence document (``ops``, ``cost_by_device``,
        ``cost_sum``, ``claim`` …).
    """

    plans: dict[str, Mapping[str, Any]] = field(default_factory=dict)
