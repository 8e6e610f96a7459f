"""Typed results of the stages, handed from a stage's ``run`` to its view and its notebook.

A stage's gate records and evidence are the audit; these dataclasses are what a reader
(or a researcher in the notebook) looks at next to them: the A/B outcome counts, each
parity candidate's measurements and drift, each clip's transcripts and WER, each compute
plan. They are built from the same values the stage wrote as evidence, never re-measured.
Stages 01 and 02 have no nested results: their ``StageReport.facts`` is a
:class:`BuildFacts` / :class:`ExportFacts` with named fields, whose ``rows()`` give the
labelled table the views show.

One code path: each stage builds its result (or facts) with this module's
``*_from_evidence`` function from the evidence files its gates cite, right after writing
them, and :func:`verifylib.open_run` calls the same function on a published run; every
file is digest-checked on the way (:func:`judged_evidence`). This module stays light (no
torch, coremltools or matplotlib): views and notebooks import it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from verifylib.evidence.gates import Status
from verifylib.evidence.schemas.parity import Measurement, ParityEvidence
from verifylib.evidence.schemas.placement import PlanEvidence
from verifylib.evidence.schemas.wer import HybridClip, HybridEvidence, WerClip, WerEvidence

__all__ = [
    "LifecycleSide", "LifecycleSummary", "SanitizerSide", "SanitizerSummary",
    "NegativeControl", "PositiveControl", "CanaryResult", "Drift", "ParityCandidate",
    "ParityResult", "parity_result_from_evidence", "ClipResult", "CorpusWer",
    "WerResult", "PlacementResult", "PRIVATE", "WER_FIELDS", "PLAN_VARIANTS", "judged_evidence",
    "canary_result_from_evidence",
    "wer_result_from_evidence", "placement_result_from_evidence", "build_facts_from_evidence",
    "export_facts_from_evidence", "describe_run", "BuildFacts", "SourceFacts", "GgmlBuildFacts",
    "SidecarBuildFacts", "CoremlBuildFacts", "ExportFacts", "ModelFacts", "PackageFacts",
    "ContractFacts", "CompiledFacts", "fact_rows",
]


def judged_evidence(run_dir, records: Mapping[str, Any], gate_id: str, name: str):
    """Return the verified evidence of ``gate_id`` if its rule judged it on file ``name``.

    The ``*_from_evidence`` builders below read a stage's result through this one door:
    a gate contributes to the result exactly when its rule judged it (PASS or FAIL) and
    its record cites the document the stage writes for it. Such evidence is complete (the
    stage writes it all before the rule judges it, and the rule read it); a gate that did
    not run, or broke (ERROR, perhaps with partial evidence), contributes nothing. Every
    cited file is digest-checked before anything is read.

    Parameters
    ----------
    run_dir : path-like
        The run directory.
    records : mapping
        Gate id -> :class:`verifylib.evidence.records.GateRecord`.
    gate_id : str
        The gate.
    name : str
        The evidence name of its main document (``"lifecycle"``, ``"wer"``, ...).

    Returns
    -------
    verifylib.evidence.records.EvidenceView or None

    Raises
    ------
    verifylib.errors.EvidenceInvalid
        If a cited file is missing or its digest differs from the record.
    """
    from pathlib import Path

    from verifylib.evidence.gates import Status
    from verifylib.evidence.records import EvidenceView

    rec = records.get(gate_id)
    if rec is None or rec.status not in (Status.PASS, Status.FAIL) \
            or not any(r.name == name for r in rec.evidence):
        return None
    return EvidenceView(Path(run_dir), rec.evidence, rec.identities)


# ----------------------------------------------------------------------------- 03_canary

_SIDES = ("unpatched", "patched")
"""The two builds of the lifecycle A/B and of ``canary.sanitizer``, in display order."""

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

    @classmethod
    def from_evidence(cls, doc: Any) -> "LifecycleSummary":
        """Build from the ``lifecycle`` evidence document of ``canary.lifecycle_ab``.

        Parameters
        ----------
        doc : mapping or LifecycleEvidence
            The document, as JSON or already read by
            :meth:`verifylib.evidence.schemas.canary.LifecycleEvidence.from_json`.

        Returns
        -------
        LifecycleSummary

        Raises
        ------
        verifylib.evidence.schemas.fields.SchemaError
            If the document does not parse.
        """
        import statistics

        from verifylib.evidence.schemas.canary import LifecycleEvidence

        ev = doc if isinstance(doc, LifecycleEvidence) else LifecycleEvidence.from_json(doc)
        sides = {}
        for side in _SIDES:
            s = ev.sides[side]
            if not s.available:
                sides[side] = LifecycleSide(False, reason=s.reason or "")
                continue
            walls = [r.wall_s for r in s.runs]
            sides[side] = LifecycleSide(True, binary_sha256=s.binary_sha256,
                                        counts=dict(s.counts or {}),
                                        wall_s_median=round(statistics.median(walls), 3),
                                        wall_s_total=round(sum(walls), 3))
        return cls(ev.runs_per_side, " ".join(ev.trigger), sides)

    def outcome_counts(self) -> dict[str, dict[str, int]]:
        """Build side -> run outcome -> number of runs (available sides only)."""
        return {side: dict(s.counts) for side, s in self.sides.items() if s.available}


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

    @classmethod
    def from_evidence(cls, doc: Any) -> "SanitizerSummary":
        """Build from the ``sanitizer`` evidence document of ``canary.sanitizer``.

        Per side: what each run ended with, and the first report's kind and frames.

        Parameters
        ----------
        doc : mapping or SanitizerEvidence
            The document, as JSON or already read by
            :meth:`verifylib.evidence.schemas.canary.SanitizerEvidence.from_json`.

        Returns
        -------
        SanitizerSummary

        Raises
        ------
        verifylib.evidence.schemas.fields.SchemaError
            If the document does not parse.
        """
        import statistics
        from collections import Counter

        from verifylib.evidence.schemas.canary import SanitizerEvidence
        from verifylib.runtime.sanitizer import Frame

        ev = doc if isinstance(doc, SanitizerEvidence) else SanitizerEvidence.from_json(doc)
        sides = {}
        for side in _SIDES:
            s = ev.sides[side]
            if not s.available:
                sides[side] = SanitizerSide(False, reason=s.reason or "")
                continue
            labels = Counter(r.report.described if r.report is not None
                             else f"{r.outcome}, no sanitizer report" for r in s.runs)
            first = next((r.report for r in s.runs if r.report is not None), None)
            frames = tuple(Frame(index=f.index, function=f.function, location=f.location).text()
                           for f in (first.frames if first is not None else ()))
            walls = [r.wall_s for r in s.runs]
            sides[side] = SanitizerSide(
                True, binary_sha256=s.binary_sha256,
                variant=s.build.variant if s.build is not None else None,
                outcomes=dict(sorted(labels.items())),
                kind=first.kind if first is not None else None, frames=frames,
                wall_s_median=round(statistics.median(walls), 3) if walls else None)
        return cls(ev.runs_per_side, " ".join(ev.trigger), ev.asan_options, sides)


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

    @classmethod
    def from_evidence(cls, doc: Any, stderr: bytes, stdout: bytes) -> "NegativeControl":
        """Build from the ``negative`` document and the run's stored streams.

        The outcome and its explanation are the runtime contract's classifier re-run on
        them.

        Parameters
        ----------
        doc : mapping or NegativeEvidence
            The document, as JSON or already read by
            :meth:`verifylib.evidence.schemas.canary.NegativeEvidence.from_json`.
        stderr, stdout : bytes
            The run's stored streams.

        Returns
        -------
        NegativeControl

        Raises
        ------
        verifylib.evidence.schemas.fields.SchemaError
            If the document does not parse.
        """
        from verifylib.evidence.schemas.canary import NegativeEvidence
        from verifylib.runtime.contracts import classify_negative

        ev = doc if isinstance(doc, NegativeEvidence) else NegativeEvidence.from_json(doc)
        run = ev.run
        c = classify_negative(run.to_json(), stderr, stdout)
        return cls(c.outcome, c.detail, run.wall_s, run.returncode, run.signal,
                   list(ev.scratch_listing))

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

    @classmethod
    def from_evidence(cls, doc: Any, stderr: bytes, stdout: bytes) -> "PositiveControl":
        """Build from the ``positive`` document and the measured run's stored streams.

        The outcome is the four-condition classifier re-run on them.

        Parameters
        ----------
        doc : mapping or PositiveEvidence
            The document, as JSON or already read by
            :meth:`verifylib.evidence.schemas.canary.PositiveEvidence.from_json`.
        stderr, stdout : bytes
            The measured run's stored streams.

        Returns
        -------
        PositiveControl

        Raises
        ------
        verifylib.evidence.schemas.fields.SchemaError
            If the document does not parse.
        """
        from verifylib.evidence.schemas.canary import PositiveEvidence
        from verifylib.runtime.contracts import classify_positive

        ev = doc if isinstance(doc, PositiveEvidence) else PositiveEvidence.from_json(doc)
        c = classify_positive(ev.measured.to_json(), stderr, stdout)
        return cls(c.outcome, c.detail, ev.warmup.wall_s, ev.measured.wall_s,
                   ev.warmup.encode_time_ms, ev.measured.encode_time_ms,
                   stdout.decode("utf-8", "replace").strip())

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


def canary_result_from_evidence(run_dir, records: Mapping[str, Any]) -> CanaryResult:
    """Stage 03's result, read from the evidence its gates cite (digest-checked).

    The stage returns exactly this (built from the files it just wrote), and
    :func:`verifylib.open_run` builds it the same way from a published run.

    Parameters
    ----------
    run_dir : path-like
        The run directory.
    records : mapping
        Gate id -> :class:`verifylib.evidence.records.GateRecord` (at least the canary gates).

    Returns
    -------
    CanaryResult
        A canary is None unless its gate was judged (PASS or FAIL; see
        :func:`judged_evidence`).
    """
    out = CanaryResult()
    v = judged_evidence(run_dir, records, "canary.lifecycle_ab", "lifecycle")
    if v is not None:
        out.lifecycle = LifecycleSummary.from_evidence(v.json("lifecycle"))
    v = judged_evidence(run_dir, records, "canary.sanitizer", "sanitizer")
    if v is not None:
        out.sanitizer = SanitizerSummary.from_evidence(v.json("sanitizer"))
    v = judged_evidence(run_dir, records, "canary.coreml_negative", "negative")
    if v is not None:
        out.negative = NegativeControl.from_evidence(
            v.json("negative"), v.bytes("negative_stderr"), v.bytes("negative_stdout"))
    v = judged_evidence(run_dir, records, "canary.coreml_positive", "positive")
    if v is not None:
        out.positive = PositiveControl.from_evidence(
            v.json("positive"), v.bytes("measured_stderr"), v.bytes("measured_stdout"))
    return out


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
    status : verifylib.evidence.gates.Status
        The gate's status (PASS or FAIL: only judged gates have a candidate).
    detail : str
        Its rule's explanation.
    measurements : tuple of verifylib.evidence.schemas.parity.Measurement
        One typed record (``input``, ``execution``, ``metrics``, ``seconds``) per input
        and execution mode, as stored.
    drift : Drift
    policy : dict
        The frozen policy's rules.
    reference_seconds : dict
        Input kind -> HF encoder wall time.
    attribution : verifylib.numerics.drift.Attribution or None
        Op-level attribution of the drift (program candidates).
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
    attribution: Any = None
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

PARITY_GATES = ("parity.program", "parity.runtime", "parity.program_fp16",
                "parity.runtime_fp16")


def parity_result_from_evidence(run_dir, records: Mapping[str, Any]) -> ParityResult:
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
        If a cited file is missing or altered, or a ``parity`` document does not parse
        (:class:`verifylib.evidence.schemas.parity.SchemaError`).
    """
    from pathlib import Path

    from verifylib.numerics.arrays import ArrayFile
    from verifylib.numerics.drift import Attribution

    run_dir = Path(run_dir)
    result = ParityResult()
    for gid in PARITY_GATES:
        view = judged_evidence(run_dir, records, gid, "parity")
        if view is None:
            continue
        rec = records[gid]
        doc = ParityEvidence.from_json(view.json("parity"))
        drift = view.json("drift") if view.has("drift") else {}
        att = Attribution.from_dict(view.json(ATTRIBUTION)) if view.has(ATTRIBUTION) else None
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


# ----------------------------------------------------------------------------- 05_wer

PRIVATE = "(not public)"
"""What a non-public clip shows instead of its texts (runs persist only its counts)."""

WER_FIELDS = ("wer_source", "wer_ggml", "wer_hybrid", "wer_pairwise")
"""The per-clip WER fields of :class:`ClipResult`, for :meth:`WerResult.ranked`."""


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

    @classmethod
    def from_evidence(cls, clip: WerClip | Mapping[str, Any],
                      hybrid: HybridClip | Mapping[str, Any] | None = None,
                      hybrid_stdout: bytes | None = None) -> "ClipResult":
        """Build from one clip of the ``wer`` document (and of the ``hybrid`` one).

        Parameters
        ----------
        clip : WerClip or mapping
            The clip's entry in ``wer.ggml_vs_source``'s ``wer`` document: edit counts
            (``source``, ``ggml``, ``pairwise``) and, for a public clip, the raw texts. A
            mapping is read with :meth:`WerClip.from_json`.
        hybrid : HybridClip or mapping, optional
            The clip's entry in ``wer.hybrid``'s ``hybrid`` document, when that gate ran.
        hybrid_stdout : bytes, optional
            The hybrid run's stored stdout (public clips only): its transcript.

        Raises
        ------
        verifylib.errors.EvidenceInvalid
            If a clip does not parse, or lacks the ``pairwise`` counts or a public clip's
            texts.
        """
        from verifylib.errors import EvidenceInvalid
        from verifylib.numerics.scoring import WordCounts

        if not isinstance(clip, WerClip):
            clip = WerClip.from_json(clip)
        if hybrid is not None and not isinstance(hybrid, HybridClip):
            hybrid = HybridClip.from_json(hybrid)
        if clip.pairwise is None:
            raise EvidenceInvalid(f"clip {clip.id}: no pairwise counts")
        src, ggml, pair = (WordCounts(**c.to_json()) for c in (clip.source, clip.ggml,
                                                                clip.pairwise))
        hyb = WordCounts(**hybrid.hybrid.to_json()) if hybrid is not None else None
        public = clip.public
        if public and None in (clip.reference, clip.raw_source, clip.raw_ggml):
            raise EvidenceInvalid(f"public clip {clip.id}: its texts are not stored")
        if hyb is None:
            hybrid_text = None
        elif public:
            hybrid_text = " ".join((hybrid_stdout or b"").decode("utf-8", "replace").split())
        else:
            hybrid_text = PRIVATE
        raw_reference = clip.raw_reference
        if raw_reference is None:
            # Runs before raw_reference was stored kept only the normalized reference.
            raw_reference = clip.reference
        return cls(
            id=clip.id, public=public, words=src.ref_words,
            counts={"source": src.as_dict(), "ggml": ggml.as_dict(),
                    "hybrid": None if hyb is None else hyb.as_dict()},
            reference=str(raw_reference) if public else PRIVATE,
            source=str(clip.raw_source) if public else PRIVATE,
            ggml=str(clip.raw_ggml) if public else PRIVATE,
            hybrid=hybrid_text, wer_source=src.wer, wer_ggml=ggml.wer,
            wer_hybrid=None if hyb is None else hyb.wer, wer_pairwise=pair.wer)


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

    def ranked(self, key: str = "wer_ggml", *, worst_first: bool = True) -> list[ClipResult]:
        """Return the clips sorted by one of :data:`WER_FIELDS` (clips without that value last).

        Parameters
        ----------
        key : str, default "wer_ggml"
            The per-clip field to sort by, one of :data:`WER_FIELDS`.
        worst_first : bool, default True
            Sort from the highest value down (False: lowest first).

        Returns
        -------
        list of ClipResult
            The clips having a value for ``key`` in order, then those without it.

        Raises
        ------
        verifylib.errors.ParametersInvalid
            If ``key`` is not one of :data:`WER_FIELDS`.
        """
        if key not in WER_FIELDS:
            from verifylib.errors import ParametersInvalid
            raise ParametersInvalid(f"no per-clip WER field {key!r}; use one of {WER_FIELDS}")
        have = [c for c in self.clips if getattr(c, key) is not None]
        return (sorted(have, key=lambda c: getattr(c, key), reverse=worst_first)
                + [c for c in self.clips if getattr(c, key) is None])


def wer_result_from_evidence(run_dir, records: Mapping[str, Any]) -> WerResult | None:
    """Stage 05's result, read from the evidence its gates cite (digest-checked).

    The stage returns exactly this (built from the files it just wrote), and
    :func:`verifylib.open_run` builds it the same way from a published run. A non-public
    clip shows :data:`PRIVATE` for every text, with its edit counts and WERs.

    Parameters
    ----------
    run_dir : path-like
        The run directory.
    records : mapping
        Gate id -> :class:`verifylib.evidence.records.GateRecord` (at least the WER gates).

    Returns
    -------
    WerResult or None
        None unless ``wer.ggml_vs_source`` was judged (PASS or FAIL).

    Raises
    ------
    verifylib.errors.EvidenceInvalid
        If a cited file is missing or altered, or a document does not parse
        (:class:`verifylib.evidence.schemas.wer.SchemaError`).
    """
    from verifylib.numerics.scoring import corpus_wer

    v = judged_evidence(run_dir, records, "wer.ggml_vs_source", "wer")
    if v is None:
        return None
    clips = WerEvidence.from_json(v.json("wer")).clips
    hv = judged_evidence(run_dir, records, "wer.hybrid", "hybrid")
    hybrid = ({c.id: c for c in HybridEvidence.from_json(hv.json("hybrid")).clips}
              if hv is not None else {})

    def stdout(cid: str) -> bytes | None:
        name = f"hybrid_stdout_{cid}"
        return hv.bytes(name) if hv is not None and hv.has(name) else None

    return WerResult(
        [ClipResult.from_evidence(c, hybrid.get(c.id), stdout(c.id)) for c in clips],
        CorpusWer(corpus_wer([c.source.to_json() for c in clips]),
                  corpus_wer([c.ggml.to_json() for c in clips]),
                  corpus_wer([c.pairwise.to_json() for c in clips if c.pairwise is not None])))


# ----------------------------------------------------------------------------- 06_placement

@dataclass
class PlacementResult:
    """Stage 06's result: the compute-plan evidence of each variant that had a plan.

    Attributes
    ----------
    plans : dict
        Variant -> the ``placement.plan`` evidence document, typed
        (:class:`verifylib.evidence.schemas.placement.PlanEvidence`: ``ops``,
        ``cost_by_device``, ``cost_sum``, ``claim`` …).
    """

    plans: dict[str, PlanEvidence] = field(default_factory=dict)

    def device_share(self, variant: str = "fp32") -> dict[str, float]:
        """Preferred device -> its share of the plan's estimated cost, for one variant.

        Raises
        ------
        KeyError
            If the variant has no plan.
        """
        plan = self.plans[variant]
        total = plan.cost_sum or 1.0
        return {dev: cost / total for dev, cost in sorted((plan.cost_by_device or {}).items())}


PLAN_VARIANTS = ("fp32", "fp16")
"""Variants ``placement.plan`` may have planned, in display order."""


def placement_result_from_evidence(run_dir, records: Mapping[str, Any]) -> PlacementResult | None:
    """Stage 06's result, read from the evidence ``placement.plan`` cites (digest-checked).

    Parameters
    ----------
    run_dir : path-like
        The run directory.
    records : mapping
        Gate id -> :class:`verifylib.evidence.records.GateRecord` (at least ``placement.plan``).

    Returns
    -------
    PlacementResult or None
        None unless the gate was judged (PASS or FAIL).

    Raises
    ------
    verifylib.errors.EvidenceInvalid
        If a cited file is missing or altered, or a plan does not parse
        (:class:`verifylib.evidence.schemas.placement.SchemaError`).
    """
    v = judged_evidence(run_dir, records, "placement.plan", "plan_fp32")
    if v is None:
        return None
    return PlacementResult({variant: PlanEvidence.from_json(v.json(f"plan_{variant}"))
                            for variant in PLAN_VARIANTS if v.has(f"plan_{variant}")})


# ----------------------------------------------------------------------------- 01_build, 02_export

def describe_run(record: Mapping[str, Any]) -> str:
    """Describe how a recorded run ended.

    The words are those of :meth:`verifylib.runtime.runner.RunResult.describe`.
    """
    if record.get("timed_out"):
        return f"timed out after {record['wall_s']:.1f}s"
    if record.get("signal"):
        return f"killed by {record['signal']} (return code {record['returncode']})"
    return f"exit {record['returncode']}"


def _system_info_line(text: str) -> str | None:
    from verifylib.runtime.contracts import SYSTEM_INFO_PREFIX

    return next((line.strip() for line in text.splitlines() if SYSTEM_INFO_PREFIX in line), None)


# ----------------------------------------------------------------------------- stages 01 and 02

def _rows_bool(self) -> bool:
    return bool(self.rows())


@dataclass(frozen=True)
class SourceFacts:
    """The source folder ``build.source_identity`` judged.

    Attributes
    ----------
    path : str or None
        The folder (None when the evidence names none).
    """

    path: str | None


@dataclass(frozen=True)
class GgmlBuildFacts:
    """The GGML whisper-cli of ``build.ggml``, as the facts table shows it.

    Attributes
    ----------
    binary, sha256 : str
        The published binary and its digest.
    cached : bool
        Reused from the build cache.
    build_seconds : float
        Time spent building (or checking the cache).
    system_info : str or None
        The probe's ``system_info:`` line (None: absent).
    compiler : dict
        The compiler identity.
    """

    binary: str
    sha256: str
    cached: bool
    build_seconds: float
    system_info: str | None
    compiler: dict

    def rows(self) -> list[tuple[str, Any]]:
        """Return the (label, value) rows of this build, in display order.

        Returns
        -------
        list of (str, object)
        """
        return [("binary", self.binary), ("sha256", self.sha256), ("cached", self.cached),
                ("build_seconds", self.build_seconds),
                ("system_info", self.system_info or "(absent)"), ("compiler", self.compiler)]


@dataclass(frozen=True)
class SidecarBuildFacts:
    """A build no gate judges (the unpatched and AddressSanitizer whisper-cli): built or not.

    Attributes
    ----------
    built : bool
        Whether it built.
    binary, sha256 : str or None
        The binary and its digest (None when it did not build).
    cached : bool or None
        Reused from the build cache.
    build_seconds : float or None
        Time spent.
    error : str or None
        Why it did not build (None when it built).
    """

    built: bool
    binary: str | None = None
    sha256: str | None = None
    cached: bool | None = None
    build_seconds: float | None = None
    error: str | None = None

    @classmethod
    def from_record(cls, ev: Mapping[str, Any]) -> "SidecarBuildFacts":
        """Read a sidecar build record (``{"built": True, ...}`` or ``{"built": False, "error"}``).

        Parameters
        ----------
        ev : mapping
            The record.

        Returns
        -------
        SidecarBuildFacts
        """
        if ev["built"]:
            return cls(True, ev["binary"], ev["sha256"], ev["cached"], ev["seconds"])
        return cls(False, error=ev["error"])


@dataclass(frozen=True)
class CoremlBuildFacts:
    """The Core ML whisper-cli of ``build.coreml``, as the facts table shows it.

    Attributes
    ----------
    binary, sha256 : str
        The published binary and its digest.
    build_seconds : float
        Time spent.
    bench_system_info : str or None
        The ``system_info:`` line of the ``whisper-bench`` built alike (None: absent).
    """

    binary: str
    sha256: str
    build_seconds: float
    bench_system_info: str | None

    def rows(self) -> list[tuple[str, Any]]:
        """Return the (label, value) rows of this build, in display order.

        Returns
        -------
        list of (str, object)
        """
        return [("Core ML binary", self.binary), ("Core ML sha256", self.sha256),
                ("Core ML build_seconds", self.build_seconds),
                ("whisper-bench system_info", self.bench_system_info or "(absent)")]


@dataclass(frozen=True)
class BuildFacts:
    """Stage 01's facts: what was built, from the evidence its gates cite and two sidecars.

    Each part is None (or, for ``asan``, absent) when its gate or sidecar gave nothing.
    :meth:`rows` gives the table the view and the report show.

    Attributes
    ----------
    source : SourceFacts or None
        The source folder (``build.source_identity``).
    ggml : GgmlBuildFacts or None
        The GGML build (``build.ggml``, when it built).
    unpatched : SidecarBuildFacts or None
        The unpatched build of the lifecycle A/B (``unpatched_build.json``).
    asan : dict of str to SidecarBuildFacts
        Side (``unpatched``, ``patched``) -> its AddressSanitizer build (``asan_builds.json``).
    coreml : CoremlBuildFacts or None
        The Core ML build (``build.coreml``, when it built).
    """

    source: SourceFacts | None = None
    ggml: GgmlBuildFacts | None = None
    unpatched: SidecarBuildFacts | None = None
    asan: dict = field(default_factory=dict)
    coreml: CoremlBuildFacts | None = None

    def rows(self) -> list[tuple[str, Any]]:
        """Return the (label, value) rows of the facts table, in display order.

        Returns
        -------
        list of (str, object)
            The source folder, the GGML build, the unpatched and AddressSanitizer builds,
            the Core ML build (each when there is one).
        """
        out: list[tuple[str, Any]] = []
        if self.source is not None:
            out.append(("source", self.source.path))
        if self.ggml is not None:
            out += self.ggml.rows()
        u = self.unpatched
        if u is not None and u.built:
            out += [("unpatched binary (lifecycle A/B only)", u.binary),
                    ("unpatched sha256", u.sha256), ("unpatched cached", u.cached),
                    ("unpatched build_seconds", u.build_seconds)]
        elif u is not None:
            out.append(("unpatched build", f"failed: {u.error}"))
        for name in _SIDES:
            if name not in self.asan:
                continue
            a, label = self.asan[name], f"{name} ASan (canary.sanitizer only)"
            if a.built:
                out += [(f"{label} sha256", a.sha256),
                        (f"{label} build_seconds", a.build_seconds),
                        (f"{label} cached", a.cached)]
            else:
                out.append((f"{label} build", f"failed: {a.error}"))
        if self.coreml is not None:
            out += self.coreml.rows()
        return out

    __bool__ = _rows_bool


def build_facts_from_evidence(run_dir, records: Mapping[str, Any],
                              sidecars: Mapping[str, Any] | None = None) -> BuildFacts:
    """Stage 01's facts, read from the evidence its gates cite (digest-checked).

    Parameters
    ----------
    run_dir : path-like
        The run directory.
    records : mapping
        Gate id -> :class:`verifylib.evidence.records.GateRecord` (at least the build gates).
    sidecars : mapping, optional
        ``"unpatched"`` / ``"asan"`` -> the :class:`verifylib.evidence.records.EvidenceRef` of the
        stage's two sidecars (``unpatched_build.json``, ``asan_builds.json`` of
        :mod:`verifylib.stages.artifacts`). No gate cites them; the stage passes the references
        it wrote, a published run the digests its receipt lists.

    Returns
    -------
    BuildFacts
        The source folder, the GGML build, the unpatched and AddressSanitizer builds, the
        Core ML build (each when it was built); :meth:`BuildFacts.rows` is the table.
    """
    from pathlib import Path

    from verifylib.evidence.records import EvidenceView

    source = ggml = unpatched = coreml = None
    asan: dict[str, SidecarBuildFacts] = {}
    v = judged_evidence(run_dir, records, "build.source_identity", "source")
    if v is not None:
        source = SourceFacts(v.json("source")["path"])
    v = judged_evidence(run_dir, records, "build.ggml", "build")
    if v is not None:
        ev = v.json("build")
        if ev.get("built"):
            ggml = GgmlBuildFacts(ev["binary"], ev["sha256"], ev["cached"], ev["seconds"],
                                  ev["probe"]["system_info_line"], ev["compiler"])
    refs = {k: r for k, r in (sidecars or {}).items() if r is not None}
    side = EvidenceView(Path(run_dir), list(refs.values())) if refs else None
    if side is not None and "unpatched" in refs:
        unpatched = SidecarBuildFacts.from_record(side.json(refs["unpatched"].name))
    if side is not None and "asan" in refs:
        builds = side.json(refs["asan"].name)
        asan = {name: SidecarBuildFacts.from_record(builds[name]) for name in _SIDES
                if name in builds}
    v = judged_evidence(run_dir, records, "build.coreml", "coreml_build")
    if v is not None:
        ev = v.json("coreml_build")
        if ev.get("built"):
            coreml = CoremlBuildFacts(ev["binary"], ev["sha256"], ev["seconds"],
                                      _system_info_line(v.text("bench_stderr")))
    return BuildFacts(source, ggml, unpatched, asan, coreml)


@dataclass(frozen=True)
class ModelFacts:
    """The model and ``ggml-model.bin`` of ``export.ggml_model``.

    Attributes
    ----------
    kind : str
        How the model was taken in.
    source_digest : str
        Digest of the Hugging Face folder.
    hf_dir : str
        The folder.
    ggml_sha256 : str
        Digest of ``ggml-model.bin``.
    ggml_bytes : int
        Its length.
    hparams : dict
        The hyper-parameters written.
    load_probe : str
        How the load run ended (:func:`describe_run`).
    load_wall_s : float
        Its wall time.
    """

    kind: str
    source_digest: str
    hf_dir: str
    ggml_sha256: str
    ggml_bytes: int
    hparams: dict
    load_probe: str
    load_wall_s: float

    def rows(self) -> list[tuple[str, Any]]:
        """Return the (label, value) rows, in display order.

        Returns
        -------
        list of (str, object)
        """
        return [("model kind", self.kind), ("model source digest", self.source_digest),
                ("Hugging Face folder", self.hf_dir),
                ("ggml-model.bin", f"{self.ggml_sha256} ({self.ggml_bytes} bytes)"),
                ("hyper-parameters", self.hparams),
                ("load probe", f"{self.load_probe} in {self.load_wall_s:.2f} s")]


@dataclass(frozen=True)
class PackageFacts:
    """One exported ``.mlpackage`` variant of ``export.contract``.

    Attributes
    ----------
    precision : str
        ``fp32`` or ``fp16``.
    path : str
        Run-relative path.
    conversion_seconds : float
        Conversion time.
    compute_dtypes : tuple of str
        What the program computes in.
    placed : bool
        Whether it was placed.
    tree_digest : str or None
        The placed package's tree digest.
    problems : tuple of str
        How it broke the contract.
    """

    precision: str
    path: str
    conversion_seconds: float
    compute_dtypes: tuple
    placed: bool
    tree_digest: str | None
    problems: tuple

    def row(self) -> tuple[str, str]:
        """Return the (label, value) row of this package.

        Returns
        -------
        (str, str)
        """
        state = (f"placed, tree digest {self.tree_digest}" if self.placed
                 else f"NOT placed: {'; '.join(self.problems) or 'another variant failed'}")
        return (f"{self.precision} package",
                f"{self.path}: converted in {self.conversion_seconds:.2f} s, computes "
                f"{'/'.join(self.compute_dtypes)}; {state}")


@dataclass(frozen=True)
class ContractFacts:
    """The encoder contract and build facts of ``export.contract``.

    Attributes
    ----------
    input_name, output_name : str
        The encoder's input and output names.
    input_shape, output_shape : list of int
        Their shapes.
    config : dict
        The model values the contract is derived from.
    coremltools, torch : str
        Versions.
    torch_version_warning : tuple of str
        coremltools' torch-above-tested warning lines.
    trace_seconds : float
        Time to trace the encoder.
    packages : tuple of PackageFacts
        The exported variants, in export order.
    model_copies : tuple of (str, str)
        Run-relative path -> how ``ggml-model.bin`` was copied there (shown text).
    """

    input_name: str
    input_shape: list
    output_name: str
    output_shape: list
    config: dict
    coremltools: str
    torch: str
    torch_version_warning: tuple
    trace_seconds: float
    packages: tuple
    model_copies: tuple

    def rows(self) -> list[tuple[str, Any]]:
        """Return the (label, value) rows, in display order.

        Returns
        -------
        list of (str, object)
        """
        return [("encoder contract",
                 f"{self.input_name} float32 {self.input_shape} -> {self.output_name} float32 "
                 f"{self.output_shape} (from {self.config})"),
                ("coremltools / torch", f"{self.coremltools} / {self.torch}"),
                ("torch-above-tested warning", " ".join(self.torch_version_warning) or "none"),
                ("trace", f"{self.trace_seconds:.2f} s"),
                *(p.row() for p in self.packages), *self.model_copies]


@dataclass(frozen=True)
class CompiledFacts:
    """One compiled ``.mlmodelc`` of ``export.compile``.

    Attributes
    ----------
    precision : str
        ``fp32`` or ``fp16``.
    placed_path : str
        Where it was placed.
    tree_digest : str
        Its tree digest.
    wall_s : float
        ``coremlc`` wall time.
    """

    precision: str
    placed_path: str
    tree_digest: str
    wall_s: float

    def row(self) -> tuple[str, str]:
        """Return the (label, value) row of this compiled model.

        Returns
        -------
        (str, str)
        """
        return (f"{self.precision} .mlmodelc",
                f"{self.placed_path} (tree {self.tree_digest}) in {self.wall_s:.1f} s")


@dataclass(frozen=True)
class ExportFacts:
    """Stage 02's facts, from the evidence its gates cite; :meth:`rows` is the table.

    Attributes
    ----------
    model : ModelFacts or None
        ``export.ggml_model``'s model and file (None when it did not judge).
    contract : ContractFacts or None
        ``export.contract``'s contract, versions and packages.
    compiled : tuple of CompiledFacts
        ``export.compile``'s compiled models (empty when it did not judge).
    """

    model: ModelFacts | None = None
    contract: ContractFacts | None = None
    compiled: tuple = ()

    def rows(self) -> list[tuple[str, Any]]:
        """Return the (label, value) rows of the facts table, in display order.

        Returns
        -------
        list of (str, object)
            The model and ``ggml-model.bin``, the encoder contract and build facts, each
            variant's package, and each compiled encoder.
        """
        out: list[tuple[str, Any]] = []
        if self.model is not None:
            out += self.model.rows()
        if self.contract is not None:
            out += self.contract.rows()
        out += [c.row() for c in self.compiled]
        return out

    __bool__ = _rows_bool


def fact_rows(facts: Any) -> list[tuple[str, Any]]:
    """Return the (label, value) rows a stage's facts table shows.

    Parameters
    ----------
    facts : BuildFacts, ExportFacts or mapping
        ``StageReport.facts``: the typed facts of stages 01/02, or a plain label -> value
        mapping (the empty dict of the other stages).

    Returns
    -------
    list of (str, object)
        :meth:`BuildFacts.rows` / :meth:`ExportFacts.rows`, or the mapping's items.
    """
    if isinstance(facts, (BuildFacts, ExportFacts)):
        return facts.rows()
    return list(dict(facts or {}).items())


def export_facts_from_evidence(run_dir, records: Mapping[str, Any]) -> ExportFacts:
    """Stage 02's facts, read from the evidence its gates cite (digest-checked).

    Parameters
    ----------
    run_dir : path-like
        The run directory.
    records : mapping
        Gate id -> :class:`verifylib.evidence.records.GateRecord` (at least the export gates).

    Returns
    -------
    ExportFacts
        The model and ``ggml-model.bin``, the encoder contract and build facts, each
        variant's package, and each compiled encoder; :meth:`ExportFacts.rows` is the table.
    """
    model = contract = None
    compiled: tuple = ()
    v = judged_evidence(run_dir, records, "export.ggml_model", "ggml")
    if v is not None:
        m, g = v.json("model"), v.json("ggml")
        model = ModelFacts(m["kind"], m["source_digest"], m["hf_dir"], g["sha256"], g["bytes"],
                           g["hparams"], describe_run(g["probe"]), g["probe"]["wall_s"])
    v = judged_evidence(run_dir, records, "export.contract", "contract")
    if v is not None:
        doc = v.json("contract")
        c, b = doc["contract"], doc["build"]
        packages = tuple(PackageFacts(r["precision"], r["path"], r["conversion"]["seconds"],
                                      tuple(r["description"]["compute_dtypes"]), r["placed"],
                                      r["tree_digest"], tuple(r["problems"]))
                         for r in doc["variants"])
        copies = tuple((k, f"{cp['how']} of {cp['from']} (sha256 {cp['sha256']})")
                       for k, cp in doc["model_copies"].items())
        contract = ContractFacts(c["input"]["name"], c["input"]["shape"], c["output"]["name"],
                                 c["output"]["shape"], doc["config"], b["coremltools"],
                                 b["torch"], tuple(b["torch_version_warning"]),
                                 b["trace_seconds"], packages, copies)
    v = judged_evidence(run_dir, records, "export.compile", "compile")
    if v is not None:
        compiled = tuple(CompiledFacts(e["precision"], e["placed_path"], e["tree_digest"],
                                       e["coremlc"]["wall_s"])
                         for e in v.json("compile")["variants"])
    return ExportFacts(model, contract, compiled)
