"""Cross-run comparison: what differs between published runs, as one typed :class:`Comparison`.

A researcher asks *did checkpoint 2 drift more than checkpoint 1?*, a maintainer *did the
pin bump or the coremltools upgrade change anything?* Both questions are about several
published runs side by side. :func:`compare_runs` reads each run through
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
  (:class:`verifylib.numerics.drift.Attribution`): precision and conversion SNR along the program,
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

This module is pure: it reads runs and returns dataclasses; display is
:mod:`verifylib.views.compare`, the command ``verifylib compare``.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Sequence

from verifylib.errors import ParametersInvalid, VerifylibError
from verifylib.evidence import gates

__all__ = ["compare_runs", "Comparison", "RunInfo", "GateCell", "GateRow", "IdentityRow",
           "LayerCurve", "OpCurve", "OpRow", "ModuleRow", "WorstEntry", "WorstRow",
           "CandidateComparison", "ClipRow", "CorpusRow", "WerComparison", "Note",
           "CompareInputInvalid", "PROGRAM_GATES", "PARITY_GATE_IDS", "CEILING_DB",
           "label_for", "fmt_db", "default_output_dir", "inside_a_run"]

PROGRAM_GATES = ("parity.program", "parity.program_fp16")
"""The parity gates whose candidate is the ML program: they carry per-layer curves and an
op-level attribution."""

PARITY_GATE_IDS = ("parity.program", "parity.runtime", "parity.program_fp16",
                   "parity.runtime_fp16")
"""Every parity gate, in table order (their gated SNR is compared)."""

CEILING_DB = 150.0
"""SNRs at or above this count as exact when SNRs of two runs are *differenced* (the same
ceiling as :data:`verifylib.numerics.drift.CEILING_DB`): float32 rounding alone gives about
145-150 dB, so an exact run and one off by rounding are not reported as a change."""

_TOP_SHOWN = 3
"""How many differing gates / identities the summary names before saying "+N more"."""


class CompareInputInvalid(ParametersInvalid):
    """The runs cannot be compared at all: fewer than two, or a path that is not a
    published run directory."""


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
        The verdict :meth:`verifylib.evidence.runs.Run.verify` recomputed (None when not verified or
        not recomputable).
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

    status: str | None
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
    """One region's attribution summary across runs (:class:`verifylib.numerics.drift.ModuleDrift`).

    Each tuple holds one value per run, None where the run has no such region (or no
    attribution).
    """

    module: str
    snr_db: tuple[float | None, ...]
    delta_snr_db: tuple[float | None, ...]
    precision_delta_snr_db: tuple[float | None, ...]
    worst_op: tuple[str | None, ...]
    precision_worst_op: tuple[str | None, ...]


@dataclass(frozen=True)
class WorstEntry:
    """One ranked op of one run: name, type, where, ΔSNR, and whether it is *new* (not
    among the baseline's ranked ops; always False for the baseline)."""

    name: str
    type: str
    where: str
    delta_snr_db: float | None
    new: bool


@dataclass(frozen=True)
class WorstRow:
    """Rank ``rank`` (1 = worst) of each run's ``top`` or ``precision_top``; None where a
    run ranks fewer ops (or has no attribution)."""

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
    status : tuple of str or None
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
    status: tuple[str | None, ...]
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
    """One clip across the runs: per run the WER of each side (None where the run has no
    such clip, or no such side)."""

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
    """One run's corpus WER (summed edits over summed words) per side; ``hybrid`` None
    unless every clip has a hybrid transcript."""

    source: float
    ggml: float
    hybrid: float | None
    pairwise: float


@dataclass(frozen=True)
class WerComparison:
    """Per-clip and corpus WER across the runs; ``corpus`` holds None for a run without a
    WER result."""

    clips: tuple[ClipRow, ...]
    corpus: tuple[CorpusRow | None, ...]


@dataclass(frozen=True)
class Note:
    """Something that could not be compared (or holds with a caveat), and where."""

    topic: str
    text: str


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
        """The comparison of one parity gate.

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

    def notes_on(self, topic: str) -> list[str]:
        """The notes about one topic.

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


def label_for(i: int) -> str:
    """The label of the ``i``-th run (0-based): ``A`` … ``Z``, then ``AA``, ``AB`` …

    Parameters
    ----------
    i : int

    Returns
    -------
    str
    """
    out = ""
    i += 1
    while i:
        i, r = divmod(i - 1, 26)
        out = chr(ord("A") + r) + out
    return out


def _float(v: Any) -> float | None:
    """A stored number (``"inf"`` strings included) as a float; None stays None."""
    if v is None:
        return None
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def _capped(v: float | None) -> float | None:
    if v is None or math.isnan(v):
        return None
    return min(v, CEILING_DB)


def fmt_db(v: float | None) -> str:
    """An SNR for the summary: one decimal and ``dB`` (``inf dB`` for exact, a dash for
    nothing).

    Parameters
    ----------
    v : float or None

    Returns
    -------
    str
    """
    if v is None:
        return "—"
    if math.isinf(v):
        return "inf dB" if v > 0 else "-inf dB"
    return f"{v:.1f} dB"


def _fmt_change(a: float | None, b: float | None) -> str:
    ca, cb = _capped(a), _capped(b)
    if ca is None or cb is None:
        return "not comparable"
    if a == b:
        return "unchanged"
    d = cb - ca
    if abs(d) < 0.05:
        return "within 0.1 dB"
    return f"{'+' if d > 0 else '−'}{abs(d):.1f} dB"


def _fmt_pct(v: float | None) -> str:
    return "—" if v is None else f"{100 * v:.1f}%"


def _listed(items: Sequence[str]) -> str:
    shown = ", ".join(items[:_TOP_SHOWN])
    return shown + (f" (+{len(items) - _TOP_SHOWN} more)" if len(items) > _TOP_SHOWN else "")


def _region(path: str) -> str:
    from verifylib.numerics.drift import region
    return region(path)


# ----------------------------------------------------------------------------- opening

@dataclass
class _Opened:
    info: RunInfo
    run: Any  # verifylib.evidence.runs.Run or None when unreadable


def _open(label: str, path: Path, *, verify: bool, allow_simulated: bool) -> _Opened:
    from verifylib.evidence.runs import RunNotFound, open_run

    try:
        run = open_run(path)
    except RunNotFound as exc:
        raise CompareInputInvalid(f"run {label}: {exc}") from None
    except VerifylibError as exc:
        # Published (it has a receipt) but its receipt or run record cannot be read: keep
        # the column, flagged, so the reader sees the run was given and why it is empty.
        return _Opened(RunInfo(label, Path(path).resolve(), None, None, None, False, None,
                               None, "unreadable", (str(exc),)), None)
    try:
        recorded = run.verdict.value
    except VerifylibError:  # an unknown verdict: shown as missing, verification says why
        recorded = None
    verified, state, problems = None, "skipped", ()
    if verify:
        try:
            res = run.verify(allow_simulated=allow_simulated)
            verified, problems = res.verdict, tuple(res.problems)
            state = "verified" if res.ok else "failed"
        except VerifylibError as exc:
            state, problems = "failed", (f"verification broke: {exc}",)
    return _Opened(RunInfo(label, run.path, run.run_id, run.name, run.created_utc,
                           run.simulated, recorded, verified, state, problems), run)


def _result(op: _Opened, stage: str, notes: list[Note], topic: str):
    """A run's typed stage result, or None with a note when it cannot be read."""
    if op.run is None:
        return None
    try:
        return op.run.result(stage)
    except VerifylibError as exc:
        notes.append(Note(topic, f"run {op.info.label}: stage {stage} could not be read "
                                 f"({exc}); not compared"))
        return None


# ----------------------------------------------------------------------------- gates

def _gate_rows(opened: Sequence[_Opened], notes: list[Note]) -> tuple[GateRow, ...]:
    known = [g.id for g in gates.GATES]
    extra: list[str] = []
    for op in opened:
        if op.run is not None:
            extra += [gid for gid in op.run.gates if gid not in known and gid not in extra]
    rows = []
    for gid in known + extra:
        cells = []
        for op in opened:
            rec = op.run.gates.get(gid) if op.run is not None else None
            cells.append(GateCell(None) if rec is None else
                         GateCell(rec.status.value, rec.reason.kind, rec.reason.detail))
        try:
            g = gates.gate(gid)
            stage, required = g.stage, g.required
        except (KeyError, ParametersInvalid):
            stage, required = "?", None
        row = GateRow(gid, stage, required, tuple(cells))
        missing = [op.info.label for op, c in zip(opened, cells)
                   if c.status is None and op.run is not None]
        if missing:
            notes.append(Note("gates", f"gate {gid}: not in the receipt of run(s) "
                                       f"{', '.join(missing)} (another verifylib version); "
                                       f"shown as missing"))
        rows.append(row)
    return tuple(rows)


# ----------------------------------------------------------------------------- identities

def _host_facts(run) -> dict[str, str]:
    host = run.host
    out = {}
    for key in ("system", "machine", "macos_version", "python"):
        if host.get(key) is not None:
            out[f"host.{key}"] = str(host[key])
    out["host.simulated"] = "yes" if run.simulated else "no"
    return out


def _identity_rows(opened: Sequence[_Opened]) -> tuple[IdentityRow, ...]:
    per_run: list[dict[str, tuple[str, str]]] = []
    order: list[str] = []
    for op in opened:
        vals: dict[str, tuple[str, str]] = {}
        if op.run is not None:
            run = op.run
            vals["parameters.name"] = ("parameters", str(run.name))
            vals["parameters.sha256"] = ("parameters", str(run.params_sha256))
            for k, v in sorted(run.identities.items()):
                vals[k] = ("identity", v if isinstance(v, str) else repr(v))
            for k, v in sorted(run.packages.items()):
                vals[f"package.{k}"] = ("package", str(v))
            for k, v in _host_facts(run).items():
                vals[k] = ("host", v)
        per_run.append(vals)
        order += [k for k in vals if k not in order]
    group_rank = {"parameters": 0, "identity": 1, "package": 2, "host": 3}
    groups = {k: next(v[k][0] for v in per_run if k in v) for k in order}
    keys = sorted(order, key=lambda k: (group_rank[groups[k]], k))
    return tuple(IdentityRow(k, groups[k], tuple(v[k][1] if k in v else None for v in per_run))
                 for k in keys)


# ----------------------------------------------------------------------------- parity

def _gated(c) -> tuple[float | None, float | None]:
    """The gated measurement of a candidate (the policy's input and execution)."""
    gated = (c.policy or {}).get("gated") or {}
    want_input = gated.get("input", "fixture")
    want_exec = gated.get(f"{c.kind}_execution")
    for m in c.measurements:
        if m.get("input") == want_input and (want_exec is None or m.get("execution") == want_exec):
            metrics = m.get("metrics") or {}
            return _float(metrics.get("snr_db")), _float(metrics.get("cosine"))
    return None, None


def _gated_mode(cands: Iterable[Any]) -> str | None:
    for c in cands:
        if c is not None:
            mode = ((c.policy or {}).get("gated") or {}).get("program_execution")
            if mode:
                return mode
    return None


def _merge_labels(lists: Sequence[Sequence[str]]) -> tuple[str, ...]:
    """The union of label sequences, keeping each sequence's order (curves of different
    lengths, e.g. 4 and 6 blocks, line up by label)."""
    out: list[str] = []
    for seq in lists:
        pos = 0
        for lab in seq:
            if lab in out:
                pos = out.index(lab) + 1
            else:
                out.insert(pos, lab)
                pos += 1
    return tuple(out)


def _worst_rows(atts: Sequence[Any], attr: str, key: str) -> tuple[WorstRow, ...]:
    base = atts[0]

    def ident(o, by_op: bool) -> tuple:
        # Programs of the same length: the same op is the same name and type; otherwise
        # only where it sits (region and op type) can be compared.
        return (o.name, o.type) if by_op else (_region(o.module or o.scope), o.type)

    def by_op(a) -> bool:
        return base is not None and a is not None and len(a.ops) == len(base.ops)

    base_keys = ({True: {ident(o, True) for o in getattr(base, attr)},
                  False: {ident(o, False) for o in getattr(base, attr)}}
                 if base is not None else None)
    depth = max((len(getattr(a, attr)) for a in atts if a is not None), default=0)
    rows = []
    for i in range(depth):
        entries = []
        for j, a in enumerate(atts):
            ranked = getattr(a, attr) if a is not None else ()
            if i >= len(ranked):
                entries.append(None)
                continue
            o = ranked[i]
            new = (j > 0 and base_keys is not None
                   and ident(o, by_op(a)) not in base_keys[by_op(a)])
            entries.append(WorstEntry(o.name, o.type, o.module or o.scope,
                                      getattr(o, key), new))
        rows.append(WorstRow(i + 1, tuple(entries)))
    return tuple(rows)


def _module_rows(atts: Sequence[Any]) -> tuple[ModuleRow, ...]:
    order: list[str] = []
    for a in atts:
        if a is not None:
            order += [m.module for m in a.modules if m.module not in order]
    rows = []
    for name in order:
        per = [next((m for m in a.modules if m.module == name), None) if a is not None else None
               for a in atts]
        rows.append(ModuleRow(
            name, tuple(m.snr_db if m else None for m in per),
            tuple(m.delta_snr_db if m else None for m in per),
            tuple(m.precision_delta_snr_db if m else None for m in per),
            tuple(m.worst_op if m else None for m in per),
            tuple(m.precision_worst_op if m else None for m in per)))
    return tuple(rows)


def _candidate(gid: str, opened: Sequence[_Opened], parity: Sequence[Any],
               notes: list[Note]) -> CandidateComparison:
    labels = [op.info.label for op in opened]
    cands = [p.candidates.get(gid) if p is not None else None for p in parity]
    status = tuple(op.run.gates[gid].status.value
                   if op.run is not None and gid in op.run.gates else None for op in opened)
    gated = [_gated(c) if c is not None else (None, None) for c in cands]
    variant = "fp16" if gid.endswith("_fp16") else "fp32"
    kind = gid.split(".")[1].split("_")[0]
    not_judged = []
    for op, st, c in zip(opened, status, cands):
        if c is None:
            why = st or "missing"
            if op.run is not None and gid in op.run.gates:
                why += f" {op.run.gates[gid].reason.kind}"
            not_judged.append(f"{op.info.label} ({why})")
    if not_judged and len(not_judged) < len(labels):
        notes.append(Note(gid, f"{gid} was not judged in run(s) {', '.join(not_judged)}: "
                               f"compared only where it was"))
    base = CandidateComparison(gid, variant, kind, status, tuple(g[0] for g in gated),
                               tuple(g[1] for g in gated))
    if gid not in PROGRAM_GATES or all(c is None for c in cands):
        return base

    # Per-layer curves.
    curves = []
    for lab, c in zip(labels, cands):
        if c is None:
            continue
        if not c.drift.layers:
            notes.append(Note(gid, f"run {lab}: no per-layer curve"
                                   + (f" ({c.drift.layers_unavailable})"
                                      if c.drift.layers_unavailable else "")))
        for mode, rows in c.drift.layers.items():
            curves.append(LayerCurve(lab, mode, tuple(str(r.get("label")) for r in rows),
                                     tuple(_float(r.get("snr_db")) if _float(r.get("snr_db"))
                                           is not None else math.nan for r in rows)))
    mode = _gated_mode(cands) or (curves[0].mode if curves else None)
    lists = [c.labels for c in curves]
    union = _merge_labels(lists)
    if curves and len({c.labels for c in curves}) > 1:
        only = sorted({lab for lab in union if sum(lab in c.labels for c in curves)
                       < len(curves)})
        lens = ", ".join(sorted({f"{c.run} {len(c.labels)}" for c in curves}))
        notes.append(Note(gid, f"per-layer curves have different points (points per curve: "
                               f"{lens}); overlaid by label, points not in every curve: "
                               f"{', '.join(only)}"))

    # Op-level attribution.
    atts = [c.attribution if c is not None else None for c in cands]
    with_att = [(lab, a) for lab, a in zip(labels, atts) if a is not None]
    for lab, c in zip(labels, cands):
        if c is not None and c.attribution is None:
            notes.append(Note(gid, f"run {lab}: no op-level attribution (a run made before "
                                   f"attribution was stored); its ops are not compared"))
    op_curves = tuple(OpCurve(lab, tuple(o.index for o in a.ops), tuple(o.name for o in a.ops),
                              tuple(o.type for o in a.ops),
                              tuple(_region(o.module or o.scope) for o in a.ops),
                              tuple(o.precision_snr_db for o in a.ops),
                              tuple(o.snr_db for o in a.ops)) for lab, a in with_att)
    matching, ops = "none", ()
    if len(with_att) >= 2:
        lengths = {len(a.ops) for _, a in with_att}
        if len(lengths) == 1:
            matching, ops = "op", _match_ops(gid, labels, atts, notes)
        else:
            matching = "module"
            lens = ", ".join(f"{lab} {len(a.ops)}" for lab, a in with_att)
            notes.append(Note(gid, f"the programs differ in length (ops per run: {lens}), so "
                                   f"they cannot be matched op by op: the per-module "
                                   f"summaries are compared instead"))
    elif with_att:
        notes.append(Note(gid, f"only run {with_att[0][0]} has an op-level attribution: "
                               f"nothing to compare op by op"))
    return CandidateComparison(
        gid, variant, kind, status, base.gated_snr_db, base.gated_cosine,
        layers=tuple(curves), layer_labels=union, layer_mode=mode, op_curves=op_curves,
        op_matching=matching, ops=ops, modules=_module_rows(atts),
        op_counts=tuple(len(a.ops) if a is not None else None for a in atts),
        top=_worst_rows(atts, "top", "delta_snr_db"),
        precision_top=_worst_rows(atts, "precision_top", "precision_delta_snr_db"))


def _match_ops(gid: str, labels: Sequence[str], atts: Sequence[Any],
               notes: list[Note]) -> tuple[OpRow, ...]:
    """Ops of equal-length programs matched by name and type (in the first program's order)."""
    present = [a for a in atts if a is not None]
    common = set.intersection(*({(o.name, o.type) for o in a.ops} for a in present))
    keyed = [{(o.name, o.type): o for o in a.ops} if a is not None else None for a in atts]
    rows = []
    for o in present[0].ops:
        if (o.name, o.type) not in common:
            continue
        per = [kd.get((o.name, o.type)) if kd is not None else None for kd in keyed]
        rows.append(OpRow(o.index, o.name, o.type, o.module or o.scope,
                          tuple(p.precision_snr_db if p else None for p in per),
                          tuple(p.precision_delta_snr_db if p else None for p in per),
                          tuple(p.snr_db if p else None for p in per),
                          tuple(p.delta_snr_db if p else None for p in per)))
    unmatched = {lab: sum((o.name, o.type) not in common for o in a.ops)
                 for lab, a in zip(labels, atts) if a is not None}
    unmatched = {lab: n for lab, n in unmatched.items() if n}
    if unmatched:
        notes.append(Note(gid, "programs of the same length whose ops differ by name or type: "
                               + ", ".join(f"{n} op(s) of run {lab}" for lab, n in
                                           unmatched.items())
                               + " have no op of the same name and type in every run and are "
                                 "not compared op by op"))
    return tuple(rows)


# ----------------------------------------------------------------------------- WER

def _wer(opened: Sequence[_Opened], results: Sequence[Any],
         notes: list[Note]) -> WerComparison | None:
    from verifylib.numerics.scoring import corpus_wer

    labels = [op.info.label for op in opened]
    if all(r is None for r in results):
        if any(op.run is not None for op in opened):
            notes.append(Note("wer", "no run has a WER result (wer.ggml_vs_source did not run "
                                     "in any): nothing to compare"))
        return None
    for lab, op, r in zip(labels, opened, results):
        if r is None and op.run is not None:
            g = op.run.gates.get("wer.ggml_vs_source")
            why = f"{g.status.value} {g.reason.kind}" if g is not None else "missing"
            notes.append(Note("wer", f"run {lab}: no WER result (wer.ggml_vs_source {why}); "
                                     f"its column is empty"))
    ids: list[str] = []
    for r in results:
        if r is not None:
            ids += [c.id for c in r.clips if c.id not in ids]
    by_run = [{c.id: c for c in r.clips} if r is not None else None for r in results]
    rows = []
    for cid in ids:
        per = [b.get(cid) if b is not None else None for b in by_run]
        missing = [lab for lab, b, c in zip(labels, by_run, per) if b is not None and c is None]
        if missing:
            notes.append(Note("wer", f"clip {cid}: not in the fixtures of run(s) "
                                     f"{', '.join(missing)}"))
        rows.append(ClipRow(cid, tuple(c.words if c else None for c in per),
                            tuple(c.wer_source if c else None for c in per),
                            tuple(c.wer_ggml if c else None for c in per),
                            tuple(c.wer_hybrid if c else None for c in per)))
    corpus = []
    for r in results:
        if r is None or r.corpus is None:
            corpus.append(None)
            continue
        hyb = [c.counts.get("hybrid") for c in r.clips]
        corpus.append(CorpusRow(r.corpus.source, r.corpus.ggml,
                                corpus_wer(hyb) if hyb and all(h for h in hyb) else None,
                                r.corpus.pairwise))
    return WerComparison(tuple(rows), tuple(corpus))


# ----------------------------------------------------------------------------- summary

def _summary(runs: Sequence[RunInfo], gate_rows: Sequence[GateRow],
             identities: Sequence[IdentityRow], cands: Sequence[CandidateComparison],
             wer: WerComparison | None) -> tuple[str, ...]:
    lines: list[str] = []
    base = runs[0]
    verdicts = [r.verdict for r in runs]
    if len(set(verdicts)) == 1 and not any(r.flagged for r in runs):
        lines.append(f"verdict {verdicts[0] or '—'} in every run")
    else:
        lines.append("verdict: " + ", ".join(
            f"run {r.label} {r.verdict or '—'}" + (" (does not verify)" if r.flagged else "")
            for r in runs))
    for r in runs:
        if r.verification == "failed":
            lines.append(f"run {r.label} does not verify ({len(r.problems)} problem(s)); "
                         f"shown flagged, its figures are as recorded")
        elif r.verification == "unreadable":
            lines.append(f"run {r.label} cannot be read; nothing of it is compared")
    changed = [g for g in gate_rows if g.differs]
    if changed:
        lines.append("gates that differ: " + _listed([
            f"{g.gate} (" + ", ".join(f"{r.label} {c.status or 'missing'}"
                                      for r, c in zip(runs, g.cells)) + ")" for g in changed]))
    diffs = [r for r in identities if r.differs]
    if diffs:
        lines.append("identities that differ: " + _listed([
            f"{r.key} (" + ", ".join(f"{run.label} {_short(v)}"
                                     for run, v in zip(runs, r.values)) + ")" for r in diffs]))
    for c in cands:
        if not any(c.judged):
            continue
        what = f"{c.variant} {c.kind} SNR"
        if not c.is_program and all(c.judged) and len(set(c.gated_snr_db)) == 1:
            continue  # a runtime candidate that did not change says nothing new
        for j, r in enumerate(runs[1:], start=1):
            a, v = c.gated_snr_db[0], c.gated_snr_db[j]
            if a is None or v is None:
                missing = [(x.label, c.status[i]) for i, x in ((0, base), (j, r))
                           if c.gated_snr_db[i] is None]
                lines.append(f"{what}: not judged in " + ", ".join(
                    f"run {lab} ({st or 'missing'})" for lab, st in missing)
                    + f"; nothing to compare between runs {base.label} and {r.label}")
                continue
            line = (f"{what}: run {base.label} {fmt_db(a)}, run {r.label} {fmt_db(v)} "
                    f"({_fmt_change(a, v)})")
            if c.is_program:
                line += _layer_change(c, base.label, r.label)
                na, nb = c.op_counts[0], c.op_counts[j]
                if na is not None and nb is not None and na != nb:
                    line += (f"; the programs differ in length ({na} and {nb} ops), "
                             f"ops compared per region")
                line += _new_worst(c, j)
            lines.append(line)
    if wer is not None:
        lines += _wer_summary(runs, wer)
    drift_changed = any(_drift_changed(c) for c in cands)
    wer_changed = wer is not None and (any(r.differs for r in wer.clips)
                                       or len(set(wer.corpus)) > 1)
    if not (changed or diffs or drift_changed or wer_changed or len(set(verdicts)) > 1):
        lines.append("no difference in verdicts, gates, identities, drift or WER")
    return tuple(lines)


def _drift_changed(c: CandidateComparison) -> bool:
    if len(set(c.gated_snr_db)) > 1 or any(o.differs for o in c.ops):
        return True
    modes = {cur.mode for cur in c.layers}
    # NaN never equals itself: compare the curves as text.
    return any(len({(cur.labels, repr(cur.snr_db)) for cur in c.layers if cur.mode == m}) > 1
               for m in modes)


def _short(v: str | None) -> str:
    if v is None:
        return "absent"
    return v[:12] + "…" if len(v) > 16 and all(ch in "0123456789abcdef" for ch in v) else v


def _layer_change(c: CandidateComparison, a: str, b: str) -> str:
    ca, cb = c.layer_curve(a), c.layer_curve(b)
    if ca is None or cb is None:
        return ""
    worst = None
    for lab, va in zip(ca.labels, ca.snr_db):
        if lab not in cb.labels:
            continue
        vb = cb.snr_db[cb.labels.index(lab)]
        xa, xb = _capped(va), _capped(vb)
        if xa is None or xb is None:
            continue
        d = xb - xa
        if worst is None or d < worst[0]:
            worst = (d, lab, va, vb)
    if worst is None or worst[0] >= -0.05:
        return "; per-layer: no point lost SNR"
    d, lab, va, vb = worst
    return f"; largest per-layer drop at {lab} ({fmt_db(va)} → {fmt_db(vb)})"


def _new_worst(c: CandidateComparison, j: int) -> str:
    for rows, what in ((c.top, "conversion"), (c.precision_top, "precision")):
        for row in rows:
            e = row.entries[j] if j < len(row.entries) else None
            if e is not None and e.new:
                return (f"; worst new {what} op {e.where} ({e.name}, {e.type}, "
                        f"ΔSNR {e.delta_snr_db:.1f} dB)")
    return ""


def _wer_summary(runs: Sequence[RunInfo], wer: WerComparison) -> list[str]:
    out = []
    base = wer.corpus[0]
    for side in ("ggml", "hybrid", "source"):
        vals = [getattr(c, side) if c is not None else None for c in wer.corpus]
        if len(set(vals)) > 1:
            out.append(f"corpus WER {side}: " + ", ".join(
                f"run {r.label} {_fmt_pct(v)}" for r, v in zip(runs, vals)))
    changed = [r.id for r in wer.clips if r.differs]
    if changed:
        out.append(f"per-clip WER differs for {len(changed)} clip(s): {_listed(changed)}")
    elif base is not None and not out:
        out.append("WER: the same for every clip in every run")
    return out


# ----------------------------------------------------------------------------- entry point

def compare_runs(runs: Sequence[str | os.PathLike], *, verify: bool = True,
                 allow_simulated: bool = False) -> Comparison:
    """Compare published runs; the first is the baseline.

    Parameters
    ----------
    runs : sequence of path-like
        Two or more published run directories (each holding ``receipt.json``).
    verify : bool
        Re-verify each run (:meth:`verifylib.evidence.runs.Run.verify`, about 0.2 s each) and show
        its verified verdict; a run that does not verify is flagged, not left out.
    allow_simulated : bool
        Verify runs made on the test suite's simulated Mac as any other (tests only);
        otherwise such a run is flagged as not verifying.

    Returns
    -------
    Comparison

    Raises
    ------
    CompareInputInvalid
        Fewer than two runs, or a path that is not a published run directory.

    Notes
    -----
    Nothing is written: every run is read through :func:`verifylib.open_run`, each file
    digest-checked as it is read. A stage result that cannot be read (a changed evidence
    file) leaves that run's column empty for the stage, with a note.
    """
    if isinstance(runs, (str, os.PathLike)):
        raise CompareInputInvalid("give a list of run directories, not one path")
    paths = [Path(p).expanduser() for p in runs]
    if len(paths) < 2:
        raise CompareInputInvalid(f"compare needs at least two runs (got {len(paths)})"
                                  + _published_hint())
    opened = [_open(label_for(i), p, verify=verify, allow_simulated=allow_simulated)
              for i, p in enumerate(paths)]
    notes: list[Note] = []
    infos = tuple(op.info for op in opened)
    seen: dict[Path, str] = {}
    for info in infos:
        if info.path in seen:
            notes.append(Note("runs", f"runs {seen[info.path]} and {info.label} are the same "
                                      f"directory"))
        seen.setdefault(info.path, info.label)
        if info.verification == "unreadable":
            notes.append(Note("runs", f"run {info.label} cannot be read "
                                      f"({info.problems[0]}): none of its gates, identities, "
                                      f"drift or WER are compared"))
    names = {i.name for i in infos if i.name is not None}
    if len(names) > 1:
        notes.append(Note("runs", "the runs audit different models ("
                                  + ", ".join(f"{i.label} {i.name}" for i in infos
                                              if i.name is not None)
                                  + "): compared where they have the same gates, layers, "
                                    "ops and clips"))
    gate_rows = _gate_rows(opened, notes)
    idents = _identity_rows(opened)
    parity = [_result(op, "04_parity", notes, "parity") for op in opened]
    cands = tuple(_candidate(gid, opened, parity, notes) for gid in PARITY_GATE_IDS)
    for c in cands:
        if c.is_program and not any(c.judged) and any(op.run is not None for op in opened):
            why = [f"{op.info.label} {s or 'missing'}"
                   + (f" {op.run.gates[c.gate].reason.kind}"
                      if s and op.run is not None else "")
                   for op, s in zip(opened, c.status)]
            notes.append(Note(c.gate, f"{c.gate} was judged in no run ({', '.join(why)}): "
                                      f"no drift to compare"))
    wer_results = [_result(op, "05_wer", notes, "wer") for op in opened]
    wer = _wer(opened, wer_results, notes)
    summary = _summary(infos, gate_rows, idents, cands, wer)
    return Comparison(infos, gate_rows, idents, cands, wer, tuple(notes), summary)


def _published_hint(limit: int = 6) -> str:
    """Published runs under ``./reports`` to name when too few runs were given."""
    from verifylib.evidence.runs import is_published
    from verifylib.resources import reports_dir

    root = reports_dir()
    found = sorted((p.parent for p in root.glob("*/*/receipt.json") if is_published(p.parent)),
                   key=lambda p: p.name, reverse=True) if root.is_dir() else []
    if not found:
        return ""
    return ("; published runs under ./reports (newest first): "
            + ", ".join(str(p) for p in found[:limit])
            + (f" (+{len(found) - limit} more)" if len(found) > limit else ""))


def default_output_dir(now: datetime | None = None) -> Path:
    """Where ``verifylib compare`` writes without ``-o``:
    ``./reports/compare-<UTC time>/`` of the current directory (``-2``, ``-3`` … appended
    when that folder exists).

    Parameters
    ----------
    now : datetime, optional
        The time to name the folder after (default: now).

    Returns
    -------
    Path
    """
    from verifylib.resources import reports_dir
    stamp = (now or datetime.now(timezone.utc)).strftime("%Y%m%dT%H%M%SZ")
    out = reports_dir() / f"compare-{stamp}"
    n = 1
    while out.exists():  # two comparisons in one second keep both pages
        n += 1
        out = reports_dir() / f"compare-{stamp}-{n}"
    return out


def inside_a_run(out_dir: str | os.PathLike, runs: Sequence[str | os.PathLike]) -> str | None:
    """The run directory ``out_dir`` lies in, if any (compare never writes into a run).

    Parameters
    ----------
    out_dir : path-like
        Where the page would be written.
    runs : sequence of path-like
        The compared run directories.

    Returns
    -------
    str or None
        The resolved run directory that is ``out_dir`` or holds it; None if none does.
    """
    out = Path(out_dir).expanduser().resolve()
    for r in runs:
        rp = Path(r).expanduser().resolve()
        if out == rp or rp in out.parents:
            return str(rp)
    return None
