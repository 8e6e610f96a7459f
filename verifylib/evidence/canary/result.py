"""Typed result of stage 03 (canary): lifecycle A/B, sanitizer runs, the Core ML controls."""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping

from verifylib.evidence.canary.schema import SIDES
from verifylib.evidence.gates import (
    CANARY_COREML_NEGATIVE,
    CANARY_COREML_POSITIVE,
    CANARY_LIFECYCLE_AB,
    CANARY_SANITIZER,
    CANARY_SEAM_NEGATIVE,
    CANARY_SEAM_POSITIVE,
)
from verifylib.evidence.reading import judged_evidence

if TYPE_CHECKING:
    from verifylib.evidence.records import GateRecord

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
    ran_on : str or None
        The OS the runs ran on, from the signal table their records name
        (:func:`verifylib.evidence.canary.rules.runs_system`).
    """

    available: bool
    reason: str = ""
    binary_sha256: str | None = None
    counts: Mapping[str, int] = field(default_factory=dict)
    wall_s_median: float | None = None
    wall_s_total: float | None = None
    ran_on: str | None = None


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
            :meth:`verifylib.evidence.canary.schema.LifecycleEvidence.from_json`.

        Returns
        -------
        LifecycleSummary

        Raises
        ------
        verifylib.evidence.fields.SchemaError
            If the document does not parse.
        """
        import statistics

        from verifylib.evidence.canary.rules import runs_system
        from verifylib.evidence.canary.schema import LifecycleEvidence

        ev = doc if isinstance(doc, LifecycleEvidence) else LifecycleEvidence.from_json(doc)
        sides = {}
        for side in SIDES:
            s = ev.sides[side]
            if not s.available:
                sides[side] = LifecycleSide(False, reason=s.reason or "")
                continue
            walls = [r.wall_s for r in s.runs]
            sides[side] = LifecycleSide(True, binary_sha256=s.binary_sha256,
                                        counts=dict(s.counts or {}),
                                        wall_s_median=round(statistics.median(walls), 3),
                                        wall_s_total=round(sum(walls), 3),
                                        ran_on=runs_system(r.to_json() for r in s.runs))
        return cls(ev.runs_per_side, " ".join(ev.trigger), sides)

    def outcome_counts(self) -> dict[str, dict[str, int]]:
        """Build side -> run outcome -> number of runs (available sides only)."""
        return {side: dict(s.counts) for side, s in self.sides.items() if s.available}

    def unpatched_caveat(self) -> str | None:
        """Say why a clean unpatched side is no evidence the defect is gone, when it ran on macOS.

        Returns
        -------
        str or None
            :func:`verifylib.evidence.canary.rules.unpatched_caveat` of the unpatched side:
            the caveat when every one of its runs was clean and they ran on macOS, else
            None (also when the side is unavailable).
        """
        from verifylib.evidence.canary.rules import unpatched_caveat
        from verifylib.runtime.contracts import CLEAN_LIFECYCLE
        u = self.sides.get("unpatched")
        if u is None or not u.available:
            return None
        clean = bool(u.counts) and set(u.counts) == {CLEAN_LIFECYCLE}
        return unpatched_caveat(u.ran_on, clean)


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
            :meth:`verifylib.evidence.canary.schema.SanitizerEvidence.from_json`.

        Returns
        -------
        SanitizerSummary

        Raises
        ------
        verifylib.evidence.fields.SchemaError
            If the document does not parse.
        """
        import statistics

        from verifylib.evidence.canary.schema import SanitizerEvidence
        from verifylib.runtime.sanitizer import Frame

        ev = doc if isinstance(doc, SanitizerEvidence) else SanitizerEvidence.from_json(doc)
        sides = {}
        for side in SIDES:
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
    returncode : int or None
    signal : str or None
        The signal's name (``SIGSEGV``) when one ended the run.
    scratch_listing : list of str
        What the scratch folder held (the model alone, no ``.mlmodelc``).
    """

    outcome: str
    detail: str
    wall_s: float
    returncode: int | None
    signal: str | None
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
            :meth:`verifylib.evidence.canary.schema.NegativeEvidence.from_json`.
        stderr, stdout : bytes
            The run's stored streams.

        Returns
        -------
        NegativeControl

        Raises
        ------
        verifylib.evidence.fields.SchemaError
            If the document does not parse.
        """
        from verifylib.evidence.canary.schema import NegativeEvidence
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
            :meth:`verifylib.evidence.canary.schema.PositiveEvidence.from_json`.
        stderr, stdout : bytes
            The measured run's stored streams.

        Returns
        -------
        PositiveControl

        Raises
        ------
        verifylib.evidence.fields.SchemaError
            If the document does not parse.
        """
        from verifylib.evidence.canary.schema import PositiveEvidence
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


@dataclass(frozen=True)
class SeamNegativeSummary:
    """What ``canary.seam_negative`` recorded: outcome counts per seam build.

    Attributes
    ----------
    runs_per_side : int
    counts : dict
        Side (``patched``, ``unpatched``, ``unpatched ASan``) -> outcome -> runs.
    """

    runs_per_side: int
    counts: Mapping[str, Mapping[str, int]]

    @classmethod
    def from_evidence(cls, doc: Any) -> "SeamNegativeSummary":
        """Read the summary from a ``seam_negative`` document.

        Parameters
        ----------
        doc : mapping
            The document as written.

        Returns
        -------
        SeamNegativeSummary
        """
        from verifylib.evidence.canary.seam_schema import SeamNegativeEvidence
        ev = SeamNegativeEvidence.from_json(doc)
        counts: dict[str, Mapping[str, int]] = {}
        for side in ("patched", "unpatched"):
            s = ev.sides[side]
            if s.available:
                counts[side] = dict(s.counts or {})
        if ev.asan.available:
            kinds = Counter((r.report.kind if r.report else f"no report, {r.outcome}")
                            for r in ev.asan.runs)
            counts["unpatched ASan"] = dict(sorted(kinds.items()))
        return cls(ev.runs_per_side, counts)

    def rows(self) -> list[tuple[str, Any]]:
        """Return the summary as (label, value) rows.

        Returns
        -------
        list of (str, Any)
        """
        return [(f"{side} seam build", ", ".join(f"{n}x {k}" for k, n in c.items()))
                for side, c in self.counts.items()]


@dataclass(frozen=True)
class SeamPositiveSummary:
    """What ``canary.seam_positive`` recorded of its one launch.

    Attributes
    ----------
    outcome : str
    encoder : str
        The variant, kind and tree digest of the program the seam loaded.
    encode_calls : int
        Calls the executor served.
    executor_start_s, program_load_s, wall_s : float
        The executor's start, the program's load and the launch's wall time.
    encode_ms : float or None
        whisper.cpp's own ``encode time``.
    transcript : str
    """

    outcome: str
    encoder: str
    encode_calls: int
    executor_start_s: float
    program_load_s: float
    wall_s: float
    encode_ms: float | None
    transcript: str

    @classmethod
    def from_evidence(cls, doc: Any, stdout: bytes) -> "SeamPositiveSummary":
        """Read the summary from a ``seam_positive`` document and the launch's stdout.

        Parameters
        ----------
        doc : mapping
            The document as written.
        stdout : bytes
            The launch's stored standard output.

        Returns
        -------
        SeamPositiveSummary
        """
        from verifylib.evidence.canary.seam_schema import SeamPositiveEvidence
        ev = SeamPositiveEvidence.from_json(doc)
        enc = ev.encoder
        return cls(ev.outcome, f"{enc.variant} {enc.kind} {enc.tree_digest[:12]}...",
                   len(ev.executor.calls) if ev.executor else 0, ev.executor_start_s,
                   ev.program_load_s, ev.run.wall_s, ev.run.encode_time_ms,
                   " ".join(stdout.decode("utf-8", "replace").split()))

    def rows(self) -> list[tuple[str, Any]]:
        """Return the summary as (label, value) rows.

        Returns
        -------
        list of (str, Any)
        """
        return [("outcome", self.outcome), ("program", self.encoder),
                ("encode calls executed by the seam", self.encode_calls),
                ("executor start s", self.executor_start_s),
                ("program load s", self.program_load_s), ("launch wall s", self.wall_s),
                ("whisper.cpp encode time ms", self.encode_ms),
                ("transcript", self.transcript)]


@dataclass
class CanaryResult:
    """Stage 03's result: whichever of the canaries ran."""

    lifecycle: LifecycleSummary | None = None
    sanitizer: SanitizerSummary | None = None
    negative: NegativeControl | None = None
    positive: PositiveControl | None = None
    seam_negative: SeamNegativeSummary | None = None
    seam_positive: SeamPositiveSummary | None = None


def canary_result_from_evidence(run_dir: str | os.PathLike[str],
                                records: Mapping[str, GateRecord]) -> CanaryResult:
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
    v = judged_evidence(run_dir, records, CANARY_LIFECYCLE_AB, "lifecycle")
    if v is not None:
        out.lifecycle = LifecycleSummary.from_evidence(v.json("lifecycle"))
    v = judged_evidence(run_dir, records, CANARY_SANITIZER, "sanitizer")
    if v is not None:
        out.sanitizer = SanitizerSummary.from_evidence(v.json("sanitizer"))
    v = judged_evidence(run_dir, records, CANARY_COREML_NEGATIVE, "negative")
    if v is not None:
        out.negative = NegativeControl.from_evidence(
            v.json("negative"), v.bytes("negative_stderr"), v.bytes("negative_stdout"))
    v = judged_evidence(run_dir, records, CANARY_COREML_POSITIVE, "positive")
    if v is not None:
        out.positive = PositiveControl.from_evidence(
            v.json("positive"), v.bytes("measured_stderr"), v.bytes("measured_stdout"))
    v = judged_evidence(run_dir, records, CANARY_SEAM_NEGATIVE, "seam_negative")
    if v is not None:
        out.seam_negative = SeamNegativeSummary.from_evidence(v.json("seam_negative"))
    v = judged_evidence(run_dir, records, CANARY_SEAM_POSITIVE, "seam_positive")
    if v is not None:
        out.seam_positive = SeamPositiveSummary.from_evidence(
            v.json("seam_positive"), v.bytes("seam_positive_stdout"))
    return out
