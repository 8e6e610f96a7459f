"""Building a cross-run comparison from published runs.

:func:`compare_runs` reads published runs and lays them out as one typed
:class:`~verifylib.compare.model.Comparison`. Each run is read through
:func:`verifylib.open_run` (digest-checked, never written) and, by default, re-verified; a
run that does not verify, or cannot be read, is kept and flagged. What this module cannot
compare becomes a :class:`~verifylib.compare.model.Note`; the summary's sentences come from
:mod:`verifylib.compare.summary`. :func:`default_output_dir` decides where ``verifylib
compare`` writes its page by default (never inside a run:
:func:`verifylib.evidence.layout.inside_a_run`).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Iterable, Sequence

from verifylib import canonical
from verifylib.compare.model import (
    PARITY_GATE_IDS,
    PROGRAM_GATES,
    CandidateComparison,
    ClipRow,
    Comparison,
    CorpusRow,
    GateCell,
    GateRow,
    IdentityRow,
    LayerCurve,
    ModuleRow,
    Note,
    OpCurve,
    OpRow,
    RunInfo,
    WerComparison,
    WorstEntry,
    WorstRow,
)
from verifylib.compare.summary import summary_lines
from verifylib.errors import ParametersInvalid, VerifylibError
from verifylib.evidence import gates
from verifylib.evidence.gates import WER_GGML_VS_SOURCE
from verifylib.evidence.layout import RECEIPT_FILE

__all__ = ["compare_runs", "CompareInputInvalid", "label_for", "default_output_dir"]


class CompareInputInvalid(ParametersInvalid):
    """The runs cannot be compared at all.

    Fewer than two were given, or a path is not a published run directory.
    """


# ----------------------------------------------------------------------------- helpers

def label_for(i: int) -> str:
    """Return the label of the ``i``-th run (0-based).

    The labels run ``A`` … ``Z``, then ``AA``, ``AB`` …

    Parameters
    ----------
    i : int
        The 0-based index of the run.

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
    """Return a stored number (``"inf"`` strings included) as a float; None stays None."""
    if v is None:
        return None
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def _region(path: str) -> str:
    from verifylib.numerics.program_map import region
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
    """Return a run's typed stage result, or None with a note when it cannot be read."""
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
                         GateCell(rec.status, rec.reason.kind, rec.reason.detail))
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
    """Return the gated measurement of a candidate (the policy's input and execution)."""
    gated = (c.policy or {}).get("gated") or {}
    want_input = gated.get("input", "fixture")
    want_exec = gated.get(f"{c.kind}_execution")
    for m in c.measurements:  # verifylib.evidence.parity.schema.Measurement
        if m.input == want_input and (want_exec is None or m.execution == want_exec):
            return _float(m.metrics.snr_db), _float(m.metrics.cosine)
    return None, None


def _gated_mode(cands: Iterable[Any]) -> str | None:
    for c in cands:
        if c is not None:
            mode = ((c.policy or {}).get("gated") or {}).get("program_execution")
            if mode:
                return mode
    return None


def _merge_labels(lists: Sequence[Sequence[str]]) -> tuple[str, ...]:
    """Return the union of label sequences, keeping each sequence's order.

    Curves of different lengths (e.g. 4 and 6 blocks) line up by label.
    """
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
    status = tuple(op.run.gates[gid].status
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

    curves, union, mode = _layer_curves(gid, labels, cands, notes)
    atts = [c.attribution if c is not None else None for c in cands]
    op_curves, matching, ops = _op_comparison(gid, labels, cands, atts, notes)
    return CandidateComparison(
        gid, variant, kind, status, base.gated_snr_db, base.gated_cosine,
        layers=tuple(curves), layer_labels=union, layer_mode=mode, op_curves=op_curves,
        op_matching=matching, ops=ops, modules=_module_rows(atts),
        op_counts=tuple(len(a.ops) if a is not None else None for a in atts),
        top=_worst_rows(atts, "top", "delta_snr_db"),
        precision_top=_worst_rows(atts, "precision_top", "precision_delta_snr_db"))


def _layer_curves(gid: str, labels: Sequence[str], cands: Sequence[Any], notes: list[Note]
                  ) -> tuple[list[LayerCurve], tuple[str, ...], str | None]:
    """Return each run's per-layer curves, the union of their labels, and the mode shown.

    A judged run without a curve, and curves whose points differ, are noted.
    """
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
    shown = _gated_mode(cands) or (curves[0].mode if curves else None)
    lists = [c.labels for c in curves]
    union = _merge_labels(lists)
    if curves and len({c.labels for c in curves}) > 1:
        only = sorted({lab for lab in union if sum(lab in c.labels for c in curves)
                       < len(curves)})
        lens = ", ".join(sorted({f"{c.run} {len(c.labels)}" for c in curves}))
        notes.append(Note(gid, f"per-layer curves have different points (points per curve: "
                               f"{lens}); overlaid by label, points not in every curve: "
                               f"{', '.join(only)}"))
    return curves, union, shown


def _op_comparison(gid: str, labels: Sequence[str], cands: Sequence[Any],
                   atts: Sequence[Any], notes: list[Note]
                   ) -> tuple[tuple[OpCurve, ...], str, tuple[OpRow, ...]]:
    """Return each run's op-level curve, how the runs' ops are matched, and the matched ops.

    Ops are matched one to one when every attributed program has the same length, else
    per module ("module", no op rows); a run without attribution is noted.
    """
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
    return op_curves, matching, ops


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
            g = op.run.gates.get(WER_GGML_VS_SOURCE)
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


# ----------------------------------------------------------------------------- entry point

def _receipt_digest(run_dir: Path) -> str | None:
    """Return the SHA-256 of a run's ``receipt.json``, or None when it cannot be read."""
    try:
        return canonical.sha256_file(Path(run_dir) / RECEIPT_FILE)
    except OSError:
        return None


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
    infos = tuple(op.info for op in opened)
    notes = _run_notes(infos)
    gate_rows = _gate_rows(opened, notes)
    idents = _identity_rows(opened)
    parity = [_result(op, "04_parity", notes, "parity") for op in opened]
    cands = tuple(_candidate(gid, opened, parity, notes) for gid in PARITY_GATE_IDS)
    for c in cands:
        _note_never_judged(c, opened, notes)
    wer_results = [_result(op, "05_wer", notes, "wer") for op in opened]
    wer = _wer(opened, wer_results, notes)
    summary = summary_lines(infos, gate_rows, idents, cands, wer)
    # A run beside a copy of itself: said first, since every line after it is vacuous.
    same = [n.text for n in notes if n.topic == "runs" and " are the same run " in n.text]
    summary = tuple(f"warning: {t}" for t in same) + tuple(summary)
    return Comparison(infos, gate_rows, idents, cands, wer, tuple(notes), summary)


def _run_notes(infos: Sequence[RunInfo]) -> list[Note]:
    """Note what about the runs themselves makes the comparison say less.

    A directory given twice, a copy of a run beside it (the same receipt), a run that
    cannot be read, and runs that audit different models.
    """
    notes: list[Note] = []
    seen: dict[Path, str] = {}
    by_receipt: dict[str, str] = {}
    for info in infos:
        receipt = _receipt_digest(info.path)
        if info.path in seen:
            notes.append(Note("runs", f"runs {seen[info.path]} and {info.label} are the same "
                                      f"directory"))
        elif receipt is not None and receipt in by_receipt:
            # The receipt covers every file of a run: the same receipt is the same run, so
            # every difference below is zero by construction, which says nothing.
            notes.append(Note("runs", f"runs {by_receipt[receipt]} and {info.label} are the "
                                      f"same run ({info.run_id}, identical receipt) in two "
                                      "folders: a copy compared with itself, nothing below "
                                      "can differ"))
        seen.setdefault(info.path, info.label)
        if receipt is not None:
            by_receipt.setdefault(receipt, info.label)
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
    return notes


def _note_never_judged(c: CandidateComparison, opened: Sequence[_Opened],
                       notes: list[Note]) -> None:
    """Note a program candidate judged in no readable run: there is no drift to compare."""
    if c.is_program and not any(c.judged) and any(op.run is not None for op in opened):
        why = [f"{op.info.label} {s.value if s else 'missing'}"
               + (f" {op.run.gates[c.gate].reason.kind}"
                  if s and op.run is not None else "")
               for op, s in zip(opened, c.status)]
        notes.append(Note(c.gate, f"{c.gate} was judged in no run ({', '.join(why)}): "
                                  f"no drift to compare"))


def _published_hint(limit: int = 6) -> str:
    """Name the published runs under ``./reports`` when too few runs were given."""
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
    """Return where ``verifylib compare`` writes without ``-o``.

    That is ``./reports/compare-<UTC time>/`` of the current directory (``-2``, ``-3`` …
    appended when that folder exists).

    Parameters
    ----------
    now : datetime, optional
        The time to name the folder after (default: now).

    Returns
    -------
    Path
    """
    from verifylib.evidence.layout import stamped_dir
    from verifylib.resources import reports_dir
    return stamped_dir(reports_dir(), "compare", now)
