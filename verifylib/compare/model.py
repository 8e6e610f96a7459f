"""Cross-run comparison: what differs between published runs, as one typed :class:`Comparison`.

A researcher asks *did checkpoint 2 drift more than checkpoint 1?*, a maintainer *did the
pin bump or the coremltools upgrade change anything?* Both questions are about several
published runs side by side. :func:`~verifylib.compare.runs.compare_runs` reads each run through
:func:`verifylib.open_run` (digest-checked, never written) and lays out:

- **runs** (:class:`RunInfo`): each run's id, model name, recorded verdict and, by default,
  its verified verdict (:meth:`verifylib.evidence.runs.Run.verify`). A run that does not verify, or
  cannot be read at all, is kept and *flagged* (with its problems), never hidden: the
  comparison is about what the runs say, and the flag says how far to trust it.
- **gate matrix** (:class:`GateRow`): every gate's status in every run.
- **identities** (:class:`IdentityRow`): the receipt's identity table (model source
  digest, whisper.cpp pin, commit and tree id, binary and artifact digests, policies,
  fixtures), the package versions of ``run.json``, the parameters' digest and the host;
  :attr:`Comparison.identity_diffs` holds what differs, :attr:`Comparison.identity_same`
  what is the same in all runs.
- **drift** (:class:`CandidateComparison`, one per parity gate): the gated SNR and cosine,
  and for the two program candidates (``parity.program``, ``parity.program_fp16``) the
  per-layer curves (``drift.layers``) and the op-level attribution
  (:class:`verifylib.evidence.parity.schema.AttributionEvidence`): precision and conversion SNR
  along the program,
  the worst ops of each run side by side, and either an op-by-op table (programs of the
  same length, ops matched by name *and* type) or, when the programs differ in length,
  the per-module summaries.
- **WER** (:class:`WerComparison`): per-clip WER of each side (Hugging Face, GGML,
  hybrid) and the corpus WER, per run.
- **notes** (:class:`Note`): everything that could not be compared and why (a stage that
  did not run, a gate missing from an older receipt, curves of different lengths, a clip
  only one run has). Nothing is dropped silently.
- **summary**: a few computed lines saying what changed against the **baseline**, the
  first run given.

This module holds the typed comparison only: its dataclasses, none of which reads a run.
:mod:`verifylib.compare.runs` builds it (:func:`~verifylib.compare.runs.compare_runs`),
:mod:`verifylib.compare.summary` writes the summary's sentences, and display is
:mod:`verifylib.views.compare` (the command ``verifylib compare``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Sequence

from verifylib.evidence.gates import (
    PARITY_PROGRAM,
    PARITY_PROGRAM_FP16,
    PARITY_RUNTIME,
    PARITY_RUNTIME_FP16,
    Status,
)

__all__ = ["Comparison", "RunInfo", "GateCell", "GateRow", "IdentityRow", "LayerCurve",
           "OpCurve", "OpRow", "ModuleRow", "WorstEntry", "WorstRow", "CandidateComparison",
           "ClipRow", "CorpusRow", "WerComparison", "Note", "PROGRAM_GATES", "PARITY_GATE_IDS"]

PROGRAM_GATES = (PARITY_PROGRAM, PARITY_PROGRAM_FP16)
"""The parity gates whose candidate is the ML program: they carry per-layer curves and an
op-level attribution."""

PARITY_GATE_IDS = (PARITY_PROGRAM, PARITY_RUNTIME, PARITY_PROGRAM_FP16,
                   PARITY_RUNTIME_FP16)
"""Every parity gate, in table order (their gated SNR is compared)."""


# ----------------------------------------------------------------------------- dataclasses

@dataclass(frozen=True)
class RunInfo:
    """One compared run, as a column of every table.

    Attributes
    ----------
    label : str
        ``A``, ``B``, … in the order given; ``A`` is the baseline.
    path : Path
        The run directory.
    run_id, name, created_utc : str or None
        From the receipt and ``run.json`` (None when the run could not be read).
    simulated : bool
        Made on the test suite's simulated Mac.
    recorded_verdict : str or None
        The verdict the receipt records.
    verified_verdict : str or None
        The verdict :meth:`verifylib.evidence.runs.Run.verify` recomputed (None when not
        verified or not recomputable).
    verification : str
        ``verified`` (re-verified, no problem), ``failed`` (re-verified, problems found),
        ``skipped`` (verification not asked for) or ``unreadable`` (the receipt or
        ``run.json`` could not be read: nothing else of this run is compared).
    problems : tuple of str
        What verification (or reading) found.
    """

    label: str
    path: Path
    run_id: str | None
    name: str | None
    created_utc: str | None
    simulated: bool
    recorded_verdict: str | None
    verified_verdict: str | None
    verification: str
    problems: tuple[str, ...] = ()

    @property
    def flagged(self) -> bool:
        """Whether the run failed verification or could not be read."""
        return self.verification in ("failed", "unreadable")

    @property
    def verdict(self) -> str | None:
        """The verdict to show: the verified one when there is one, else the recorded."""
        return self.verified_verdict or self.recorded_verdict

    @property
    def title(self) -> str:
        """``A: <name> <run id>``, for legends and headings."""
        return f"{self.label}: {self.name or '?'} {self.run_id or self.path.name}"


@dataclass(frozen=True)
class GateCell:
    """One gate in one run: status (None when the run has no such gate), reason, detail."""

    status: Status | None
    reason: str = ""
    detail: str = ""


@dataclass(frozen=True)
class GateRow:
    """One gate across the runs.

    Attributes
    ----------
    gate, stage : str
    required : bool or None
        Whether the gate moves the verdict (None for a gate this version does not know).
    cells : tuple of GateCell
        One per run, in run order.
    """

    gate: str
    stage: str
    required: bool | None
    cells: tuple[GateCell, ...]

    @property
    def differs(self) -> bool:
        """Whether the status is not the same in every run."""
        return len({c.status for c in self.cells}) > 1


@dataclass(frozen=True)
class IdentityRow:
    """One identity across the runs.

    Attributes
    ----------
    key : str
        ``model.source_digest``, ``runtime.pin``, ``package.coremltools``,
        ``parameters.sha256``, ``host.system`` …
    group : str
        ``identity`` (the receipt's identity table), ``package`` (``run.json`` packages),
        ``parameters`` or ``host``.
    values : tuple of str or None
        One per run; None where the run does not record the key.
    """

    key: str
    group: str
    values: tuple[str | None, ...]

    @property
    def differs(self) -> bool:
        """Whether the value (or its presence) is not the same in every run."""
        return len(set(self.values)) > 1


@dataclass(frozen=True)
class LayerCurve:
    """One run's per-layer SNR curve of a program candidate in one execution mode.

    ``snr_db`` holds floats (``inf`` for an exact point), one per ``labels`` entry.
    """

    run: str
    mode: str
    labels: tuple[str, ...]
    snr_db: tuple[float, ...]


@dataclass(frozen=True)
class OpCurve:
    """One run's SNR along the program (op index order), from its attribution.

    Attributes
    ----------
    run : str
        The run's label.
    index : tuple of int
    name, type : tuple of str
    region : tuple of str
        The per-module summary's region of each op (``layers.2``, ``conv1`` …).
    precision_snr_db, snr_db : tuple of float or None
        Precision SNR (against float64) and conversion SNR (against HF; None unmapped).
    """

    run: str
    index: tuple[int, ...]
    name: tuple[str, ...]
    type: tuple[str, ...]
    region: tuple[str, ...]
    precision_snr_db: tuple[float | None, ...]
    snr_db: tuple[float | None, ...]


@dataclass(frozen=True)
class OpRow:
    """One op matched across runs by name and type (programs of the same length).

    ``precision_snr_db`` … ``delta_snr_db`` hold one value per run (None where the run has
    no attribution for the candidate or the op has no such figure).
    """

    index: int
    name: str
    type: str
    where: str
    precision_snr_db: tuple[float | None, ...]
    precision_delta_snr_db: tuple[float | None, ...]
    snr_db: tuple[float | None, ...]
    delta_snr_db: tuple[float | None, ...]

    @property
    def differs(self) -> bool:
        """Whether any figure of the op is not the same in every run."""
        return any(len(set(v)) > 1 for v in (self.precision_snr_db, self.snr_db))


@dataclass(frozen=True)
class ModuleRow:
    """One region's attribution summary across runs.

    The summary is a :class:`verifylib.evidence.parity.schema.ModuleSummary` per run. Each tuple
    holds one value per run, None where the run has no such region (or no attribution).
    """

    module: str
    snr_db: tuple[float | None, ...]
    delta_snr_db: tuple[float | None, ...]
    precision_delta_snr_db: tuple[float | None, ...]
    worst_op: tuple[str | None, ...]
    precision_worst_op: tuple[str | None, ...]


@dataclass(frozen=True)
class WorstEntry:
    """One ranked op of one run.

    Its name, type, where, ΔSNR, and whether it is *new* (not among the baseline's ranked
    ops; always False for the baseline).
    """

    name: str
    type: str
    where: str
    delta_snr_db: float | None
    new: bool


@dataclass(frozen=True)
class WorstRow:
    """Rank ``rank`` (1 = worst) of each run's ``top`` or ``precision_top``.

    None where a run ranks fewer ops (or has no attribution).
    """

    rank: int
    entries: tuple[WorstEntry | None, ...]


@dataclass(frozen=True)
class CandidateComparison:
    """One parity gate across the runs.

    Attributes
    ----------
    gate : str
    variant, kind : str or None
        ``fp32``/``fp16`` and ``program``/``runtime`` (from the gate id).
    status : tuple of Status or None
        The gate's status per run.
    gated_snr_db, gated_cosine : tuple of float or None
        The gated measurement (the policy's input and execution) per run; None where the
        candidate was not judged.
    layers : tuple of LayerCurve
        Every run's per-layer curves (program candidates).
    layer_labels : tuple of str
        The union of the curves' labels, in residual-stream order.
    layer_mode : str or None
        The execution mode the summary compares (the policy's gated program execution).
    op_curves : tuple of OpCurve
        Every run's SNR along the program (runs with an attribution).
    op_matching : str
        ``op`` (ops matched by name and type: programs of the same length), ``module``
        (lengths differ: :attr:`modules` compares the per-module summaries) or ``none``
        (fewer than two runs have an attribution).
    ops : tuple of OpRow
        Matched ops, in program order (``op`` matching only).
    modules : tuple of ModuleRow
        Per-module summaries, regions in order of first appearance.
    op_counts : tuple of int or None
        Ops in each run's program (None without an attribution).
    top, precision_top : tuple of WorstRow
        Each run's worst ops by conversion / precision ΔSNR, side by side. An entry is
        *new* when the baseline does not rank the same op (same name and type where the
        two programs have the same length, else the same region and op type).
    """

    gate: str
    variant: str | None
    kind: str | None
    status: tuple[Status | None, ...]
    gated_snr_db: tuple[float | None, ...]
    gated_cosine: tuple[float | None, ...]
    layers: tuple[LayerCurve, ...] = ()
    layer_labels: tuple[str, ...] = ()
    layer_mode: str | None = None
    op_curves: tuple[OpCurve, ...] = ()
    op_matching: str = "none"
    ops: tuple[OpRow, ...] = ()
    modules: tuple[ModuleRow, ...] = ()
    op_counts: tuple[int | None, ...] = ()
    top: tuple[WorstRow, ...] = ()
    precision_top: tuple[WorstRow, ...] = ()

    @property
    def is_program(self) -> bool:
        """Whether this is a program candidate (per-layer and per-op drift)."""
        return self.gate in PROGRAM_GATES

    @property
    def judged(self) -> tuple[bool, ...]:
        """Per run, whether the candidate was judged (has measurements)."""
        return tuple(s is not None for s in self.gated_snr_db)

    def layer_curve(self, run: str, mode: str | None = None) -> LayerCurve | None:
        """One run's curve in ``mode`` (default :attr:`layer_mode`), or None."""
        mode = mode or self.layer_mode
        return next((c for c in self.layers if c.run == run and c.mode == mode), None)


@dataclass(frozen=True)
class ClipRow:
    """One clip across the runs.

    Per run the WER of each side (None where the run has no such clip, or no such side).
    """

    id: str
    words: tuple[int | None, ...]
    wer_source: tuple[float | None, ...]
    wer_ggml: tuple[float | None, ...]
    wer_hybrid: tuple[float | None, ...]

    @property
    def differs(self) -> bool:
        """Whether any side's WER differs between runs."""
        return any(len(set(v)) > 1 for v in (self.wer_source, self.wer_ggml, self.wer_hybrid))


@dataclass(frozen=True)
class CorpusRow:
    """One run's corpus WER (summed edits over summed words) per side.

    ``hybrid`` is None unless every clip has a hybrid transcript.
    """

    source: float
    ggml: float
    hybrid: float | None
    pairwise: float


@dataclass(frozen=True)
class WerComparison:
    """Per-clip and corpus WER across the runs.

    ``corpus`` holds None for a run without a WER result.
    """

    clips: tuple[ClipRow, ...]
    corpus: tuple[CorpusRow | None, ...]


@dataclass(frozen=True)
class Note:
    """Something that could not be compared (or holds with a caveat), and where."""

    topic: str
    text: str


@dataclass(frozen=True)
class DeltaRow:
    """One measurement in the baseline, and each other run's difference from it (B−A).

    Attributes
    ----------
    measure : str
        What was measured (``export.pair SNR``, ``GGML WER, clip jfk``, ``corpus GGML WER``).
    unit : str
        ``dB`` (higher is better) or ``rate`` (a WER or CER fraction: lower is better).
    baseline : float or None
        The baseline's value (None where it has none).
    deltas : tuple of float or None
        For each run after the baseline, its value minus the baseline's (None where either
        has no value).
    """

    measure: str
    unit: str
    baseline: float | None
    deltas: tuple[float | None, ...]

    @property
    def worse(self) -> tuple[bool, ...]:
        """For each run after the baseline, whether it moved the wrong way."""
        sign = -1.0 if self.unit == "dB" else 1.0
        return tuple(d is not None and sign * d > 0 for d in self.deltas)


@dataclass(frozen=True)
class StatusChange:
    """A gate whose status in a run differs from the baseline's."""

    gate: str
    run: str
    baseline: str
    status: str


def _minus(values: Sequence[float | None]) -> tuple[float | None, tuple[float | None, ...]]:
    base = values[0] if values else None
    # Equal values differ by 0, exact ones (inf dB) included, where inf - inf is nan.
    return base, tuple(None if base is None or v is None else 0.0 if v == base else v - base
                       for v in values[1:])


@dataclass(frozen=True)
class Comparison:
    """Several published runs side by side; built by :func:`compare_runs`.

    Attributes
    ----------
    runs : tuple of RunInfo
        The columns, the baseline first.
    gates : tuple of GateRow
        The gate matrix, in the order of the gate table.
    identities : tuple of IdentityRow
        Every identity row (see :attr:`identity_diffs`, :attr:`identity_same`).
    candidates : tuple of CandidateComparison
        One per parity gate, in table order.
    wer : WerComparison or None
        None when no run has a WER result.
    notes : tuple of Note
        What could not be compared, and why.
    summary : tuple of str
        What changed against the baseline, computed.
    created_utc : str
        When the comparison was made.
    """

    runs: tuple[RunInfo, ...]
    gates: tuple[GateRow, ...]
    identities: tuple[IdentityRow, ...]
    candidates: tuple[CandidateComparison, ...]
    wer: WerComparison | None
    notes: tuple[Note, ...]
    summary: tuple[str, ...]
    created_utc: str = field(default_factory=lambda: _now())

    @property
    def labels(self) -> tuple[str, ...]:
        """The runs' labels, in order."""
        return tuple(r.label for r in self.runs)

    @property
    def identity_diffs(self) -> tuple[IdentityRow, ...]:
        """The identity rows whose value differs between runs."""
        return tuple(r for r in self.identities if r.differs)

    @property
    def identity_same(self) -> tuple[IdentityRow, ...]:
        """The identity rows with the same value in every run."""
        return tuple(r for r in self.identities if not r.differs)

    def same_summary(self) -> str:
        """One line counting what is the same in all runs, by group.

        Returns
        -------
        str
            e.g. ``same in all runs: 2 parameter facts, 20 identities, 9 package versions``.
        """
        counts: dict[str, int] = {}
        for r in self.identity_same:
            counts[r.group] = counts.get(r.group, 0) + 1
        if not counts:
            return "nothing is the same in all runs"
        words = {"identity": "identities", "package": "package versions",
                 "parameters": "parameter facts", "host": "host facts"}
        parts = [f"{n} {words.get(g, g)}" for g, n in counts.items()]
        return "same in all runs: " + ", ".join(parts)

    def candidate(self, gate: str) -> CandidateComparison:
        """Return the comparison of one parity gate.

        Parameters
        ----------
        gate : str
            One of :data:`PARITY_GATE_IDS`.

        Returns
        -------
        CandidateComparison

        Raises
        ------
        KeyError
            For any other gate id.
        """
        for c in self.candidates:
            if c.gate == gate:
                return c
        raise KeyError(gate)

    @property
    def status_changes(self) -> tuple[StatusChange, ...]:
        """Every gate whose status in a later run differs from the baseline's."""
        out = []
        for g in self.gates:
            base = g.cells[0].status if g.cells else None
            for run, cell in zip(self.runs[1:], g.cells[1:]):
                if cell.status != base:
                    out.append(StatusChange(g.gate, run.label,
                                            base.value if base else "missing",
                                            cell.status.value if cell.status else "missing"))
        return tuple(out)

    @property
    def differences(self) -> tuple[DeltaRow, ...]:
        """Each measurement the runs share, as the baseline's value and every run's B−A.

        The gated SNR of each parity gate, then corpus and per-clip error rates (source,
        GGML, hybrid); a row appears only where some run differs from the baseline.
        """
        rows = []
        for c in self.candidates:
            base, deltas = _minus(c.gated_snr_db)
            rows.append(DeltaRow(f"{c.gate} SNR", "dB", base, deltas))
        if self.wer is not None:
            sides = (("source", "HF source"), ("ggml", "GGML"), ("hybrid", "hybrid"))
            for attr, side in sides:
                base, deltas = _minus([getattr(cr, attr) if cr else None
                                       for cr in self.wer.corpus])
                rows.append(DeltaRow(f"corpus {side} WER", "rate", base, deltas))
            for clip in self.wer.clips:
                for attr, side in sides:
                    base, deltas = _minus(getattr(clip, f"wer_{attr}"))
                    rows.append(DeltaRow(f"{side} WER, clip {clip.id}", "rate", base, deltas))
        return tuple(r for r in rows if any(d for d in r.deltas))

    def notes_on(self, topic: str) -> list[str]:
        """Return the notes about one topic.

        Parameters
        ----------
        topic : str
            ``runs``, ``gates``, ``parity`` (a stage that could not be read), a parity
            gate id (``parity.program`` …) or ``wer``.

        Returns
        -------
        list of str
        """
        return [n.text for n in self.notes if n.topic == topic]


# ----------------------------------------------------------------------------- helpers

def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
