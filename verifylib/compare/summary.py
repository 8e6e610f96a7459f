"""The *what changed* lines of a comparison: English sentences against the baseline.

:func:`summary_lines` reads the typed parts of a comparison (runs, gate matrix, identities,
parity candidates, WER) and says, in a few lines, what differs from the first run: the
verdicts, runs that do not verify, the gates and identities that differ (the first few,
"+N more" for the rest), each candidate's gated SNR with its change, the largest per-layer
drop and the worst new op, and the corpus and per-clip WER. Numbers are written by
:mod:`verifylib.views.formats`, as on the comparison page.
"""

from __future__ import annotations

from typing import Sequence

from verifylib.compare.model import (
    CandidateComparison,
    GateRow,
    IdentityRow,
    RunInfo,
    WerComparison,
)
from verifylib.views.formats import capped_snr, snr_change, snr_text, wer_text

__all__ = ["summary_lines"]

_TOP_SHOWN = 3
"""How many differing gates / identities the summary names before saying "+N more"."""


def summary_lines(runs: Sequence[RunInfo], gate_rows: Sequence[GateRow],
                  identities: Sequence[IdentityRow], cands: Sequence[CandidateComparison],
                  wer: WerComparison | None) -> tuple[str, ...]:
    """Say what changed against the baseline (the first run), in a few English lines.

    Parameters
    ----------
    runs : sequence of RunInfo
        The compared runs, the baseline first.
    gate_rows : sequence of GateRow
        The gate matrix.
    identities : sequence of IdentityRow
        Every identity row (those that differ are named).
    cands : sequence of CandidateComparison
        One per parity gate.
    wer : WerComparison or None
        The WER comparison, None when no run has a WER result.

    Returns
    -------
    tuple of str
        The lines of :attr:`verifylib.compare.model.Comparison.summary`; the last says
        "no difference ..." when nothing differs.
    """
    lines = _verdict_lines(runs)
    verdicts = [r.verdict for r in runs]
    changed = [g for g in gate_rows if g.differs]
    if changed:
        lines.append("gates that differ: " + _listed([
            f"{g.gate} (" + ", ".join(f"{r.label} {c.status.value if c.status else 'missing'}"
                                      for r, c in zip(runs, g.cells)) + ")" for g in changed]))
    diffs = [r for r in identities if r.differs]
    if diffs:
        lines.append("identities that differ: " + _listed([
            f"{r.key} (" + ", ".join(f"{run.label} {_short(v)}"
                                     for run, v in zip(runs, r.values)) + ")" for r in diffs]))
    for c in cands:
        lines += _candidate_lines(c, runs)
    if wer is not None:
        lines += _wer_summary(runs, wer)
    drift_changed = any(_drift_changed(c) for c in cands)
    wer_changed = wer is not None and (any(r.differs for r in wer.clips)
                                       or len(set(wer.corpus)) > 1)
    if not (changed or diffs or drift_changed or wer_changed or len(set(verdicts)) > 1):
        lines.append("no difference in verdicts, gates, identities, drift or WER")
    return tuple(lines)


def _verdict_lines(runs: Sequence[RunInfo]) -> list[str]:
    """Say the runs' verdicts (one line when they agree) and which runs do not verify."""
    lines = []
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
    return lines


def _candidate_lines(c: CandidateComparison, runs: Sequence[RunInfo]) -> list[str]:
    """Say how one candidate's gated SNR moved from the baseline in each other run.

    Nothing for a candidate judged in no run, or a runtime one judged everywhere alike.
    """
    if not any(c.judged):
        return []
    what = f"{c.variant} {c.kind} SNR"
    if not c.is_program and all(c.judged) and len(set(c.gated_snr_db)) == 1:
        return []  # a runtime candidate that did not change says nothing new
    base = runs[0]
    lines = []
    for j, r in enumerate(runs[1:], start=1):
        a, v = c.gated_snr_db[0], c.gated_snr_db[j]
        if a is None or v is None:
            missing = [(x.label, c.status[i]) for i, x in ((0, base), (j, r))
                       if c.gated_snr_db[i] is None]
            lines.append(f"{what}: not judged in " + ", ".join(
                f"run {lab} ({st.value if st else 'missing'})" for lab, st in missing)
                + f"; nothing to compare between runs {base.label} and {r.label}")
            continue
        line = (f"{what}: run {base.label} {snr_text(a)}, run {r.label} {snr_text(v)} "
                f"({snr_change(a, v)})")
        if c.is_program:
            line += _layer_change(c, base.label, r.label)
            na, nb = c.op_counts[0], c.op_counts[j]
            if na is not None and nb is not None and na != nb:
                line += (f"; the programs differ in length ({na} and {nb} ops), "
                         f"ops compared per region")
            line += _new_worst(c, j)
        lines.append(line)
    return lines


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
        xa, xb = capped_snr(va), capped_snr(vb)
        if xa is None or xb is None:
            continue
        d = xb - xa
        if worst is None or d < worst[0]:
            worst = (d, lab, va, vb)
    if worst is None or worst[0] >= -0.05:
        return "; per-layer: no point lost SNR"
    d, lab, va, vb = worst
    return f"; largest per-layer drop at {lab} ({snr_text(va)} → {snr_text(vb)})"


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
                f"run {r.label} {wer_text(v)}" for r, v in zip(runs, vals)))
    changed = [r.id for r in wer.clips if r.differs]
    if changed:
        out.append(f"per-clip WER differs for {len(changed)} clip(s): {_listed(changed)}")
    elif base is not None and not out:
        out.append("WER: the same for every clip in every run")
    return out


def _listed(items: Sequence[str]) -> str:
    shown = ", ".join(items[:_TOP_SHOWN])
    return shown + (f" (+{len(items) - _TOP_SHOWN} more)" if len(items) > _TOP_SHOWN else "")
