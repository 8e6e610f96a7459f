"""Display of stage 04_parity: Core ML's figures, policies, measurements, drift plots.

The stage's output opens with what only a Mac measures, ``parity.runtime`` (and its fp16
twin): the SNR and cosine of the compiled model under Core ML beside the ML program's own,
or, when the gate did not run, its status and reason and no figure at all.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from verifylib.evidence.gates import (
    PARITY_PROGRAM,
    PARITY_PROGRAM_FP16,
    PARITY_RUNTIME,
    PARITY_RUNTIME_FP16,
)
from verifylib.evidence.parity.schema import Measurement
from verifylib.numerics.layouts import LAYOUTS
from verifylib.numerics.parity import snr_series
from verifylib.views import display_html
from verifylib.views.formats import snr_change
from verifylib.views.gates import status_text

SNR_CAP_DB = 160.0
"""Where an exact (infinite-SNR) point is drawn; labelled as such in the legend."""

RUNTIME_GATES = ((PARITY_RUNTIME, PARITY_PROGRAM),
                 (PARITY_RUNTIME_FP16, PARITY_PROGRAM_FP16))
"""Each Core ML runtime parity gate, with the program gate of the same variant."""


@dataclass(frozen=True)
class RuntimeParity:
    """What the report says about one Core ML runtime parity gate.

    Attributes
    ----------
    gate : str
        ``parity.runtime`` or ``parity.runtime_fp16``.
    status : str
        The gate's status as recorded.
    why : str or None
        Status, reason kind and detail when the gate was not judged (no figure is shown
        then); None when it was.
    detail : str
        The rule's explanation of a judged gate (empty otherwise).
    policy : str or None
        The policy's id, with its thresholds when they are fixed numbers.
    gated_input : str or None
        The input the policy gates on (``fixture``).
    measurements : tuple of Measurement
        The Core ML measurements, the gated input first.
    program_gate : str
        The ML program's gate of the same variant.
    program_snr_db : float or None
        The program's SNR on the gated input (conversion drift alone), None when that
        gate was not judged.
    change : str
        How the SNR moved from the program to the Core ML runtime
        (:func:`verifylib.views.formats.snr_change`).
    """

    gate: str
    status: str
    why: str | None
    detail: str = ""
    policy: str | None = None
    gated_input: str | None = None
    measurements: tuple[Measurement, ...] = ()
    program_gate: str = ""
    program_snr_db: float | None = None
    change: str = "not comparable"


def _gated(policy: dict, kind: str) -> tuple[str | None, str | None]:
    # The policies name the gated input and execution in one of two shapes: fp32-v1 and
    # fp16-v1 under "gated", pair-v1 (a quantized source) at the top level.
    gated = policy.get("gated")
    if isinstance(gated, dict):
        return gated.get("input"), gated.get(f"{kind}_execution")
    inputs = policy.get("inputs") or [None]
    return inputs[0], policy.get(f"{kind}_execution")


def _policy_text(policy: dict) -> str | None:
    pid = policy.get("id")
    rule = policy.get("pass")
    if isinstance(rule, dict):
        return (f"{pid}: SNR ≥ {float(rule['snr_db_min']):g} dB and cosine ≥ "
                f"{float(rule['cosine_min']):g}")
    return f"{pid}: the floor for the model file's ftype (the gate's reason names it)"


def runtime_parity(report) -> list[RuntimeParity]:
    """Describe each Core ML runtime parity gate of a stage 04 report, measured or not.

    Parameters
    ----------
    report : StageReport
        The result of :func:`verifylib.stages.parity.run`.

    Returns
    -------
    list of RuntimeParity
        One per gate of :data:`RUNTIME_GATES` that has a record or a candidate; a gate
        without a candidate carries ``why`` and no measurement.
    """
    cands = report.result.candidates if report.result is not None else {}
    ids = {r.id for r in report.records}
    out = []
    for gid, program_gid in RUNTIME_GATES:
        c = cands.get(gid)
        if c is None:
            if gid in ids:
                rec = next(r for r in report.records if r.id == gid)
                out.append(RuntimeParity(gid, rec.status.value, status_text(report.records, gid),
                                         program_gate=program_gid))
            continue
        inp, exe = _gated(dict(c.policy), c.kind)
        runs = [m for m in c.measurements if exe is None or m.execution == exe]
        runs.sort(key=lambda m: m.input != inp)
        program, program_snr = cands.get(program_gid), None
        if program is not None:
            pinp, pexe = _gated(dict(program.policy), program.kind)
            program_snr = next((m.metrics.snr_db for m in program.measurements
                                if m.input == pinp and m.execution == pexe), None)
        runtime_snr = next((m.metrics.snr_db for m in runs if m.input == inp), None)
        out.append(RuntimeParity(
            gid, c.status.value, None, c.detail, _policy_text(dict(c.policy)), inp,
            tuple(runs), program_gid, program_snr,
            snr_change(program_snr, runtime_snr)))
    return out


def show(report) -> None:
    """Display the Core ML runtime's figures, the policies, every measurement and the plots.

    The runtime block (:func:`runtime_parity`) comes first: the SNR Core ML gave, or why no
    Core ML figure exists on this run. The plots are the error histogram, SNR along time
    frames and SNR per layer, then each program candidate's op-level attribution
    (:func:`attribution`).

    Parameters
    ----------
    report : StageReport
        The result of :func:`verifylib.stages.parity.run`; a note is displayed when the
        parity gates did not run.
    """
    result = report.result
    cands = result.candidates if result is not None else {}
    runtime = runtime_parity(report)
    if not cands:
        display_html("parity.html.j2", style=True, candidates={}, runtime=runtime)
        return
    policies = {c.policy["id"]: c.policy for c in cands.values()}
    display_html("parity.html.j2", style=True, candidates=cands, runtime=runtime,
                 policies=sorted(policies.items()),
                 layouts={layout.name: layout.description for layout in LAYOUTS},
                 reference=result.reference or {}, inputs=result.inputs or {},
                 reference_seconds=next(iter(cands.values())).reference_seconds)
    _plots(cands)
    for c in cands.values():
        if c.attribution is not None:
            attribution(c)


def _label(ax, x: str, y: str, title: str, legend: str) -> None:
    ax.set_xlabel(x)
    ax.set_ylabel(y)
    ax.set_title(title)
    ax.legend(fontsize=7, loc=legend)


def _capped(values) -> tuple[np.ndarray, bool]:
    snr = np.asarray(snr_series(values), dtype=float)
    exact = bool(np.isposinf(snr).any())
    return np.where(np.isposinf(snr), SNR_CAP_DB, snr), exact


def _plots(cands: dict) -> None:
    import matplotlib.pyplot as plt

    series = []  # (label, drift, mode)
    for c in cands.values():
        for mode in c.drift.frames:
            series.append((f"{c.variant} {c.kind} {mode}", c.drift, mode))
    if not series:
        return
    colors = {label: f"C{i}" for i, (label, _, _) in enumerate(series)}
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))

    ax = axes[0]
    for label, d, mode in series:
        h = d.histogram[mode]
        edges = np.asarray(h["edges"])
        counts = np.asarray(h["counts"], dtype=float)
        n = counts.sum() + h["zeros"]
        tag = f"{label} ({100 * h['zeros'] / n:.0f}% exactly 0)" if n else label
        if counts.sum():
            ax.stairs(counts, edges, color=colors[label], label=tag)
        else:
            ax.plot([], [], color=colors[label], label=tag)
    ax.set_xscale("log")
    ax.set_yscale("log")
    _label(ax, "|candidate - reference| (fixture input)", "elements", "Error histogram",
           "upper left")

    ax = axes[1]
    speech = None
    for label, d, mode in series:
        snr, exact = _capped(d.frames[mode])
        ax.plot(np.arange(len(snr)), snr, lw=0.8, color=colors[label],
                label=label + (f" (inf drawn at {SNR_CAP_DB:g})" if exact else ""))
        speech = d.speech_frames if d.speech_frames is not None else speech
    if speech:
        ax.axvline(speech, color="gray", ls="--", lw=0.8)
        ax.annotate("end of audio", (speech, 0.02), xycoords=("data", "axes fraction"),
                    fontsize=7)
    _label(ax, "encoder output frame", "SNR dB", "SNR along time frames (fixture)",
           "center right")

    ax = axes[2]
    plotted = False
    for c in cands.values():
        for mode, rows in c.drift.layers.items():
            label = f"{c.variant} {c.kind} {mode}"
            names = [r["label"] + (" (unmapped)" if r.get("unmapped") else "") for r in rows]
            snr, exact = _capped([r["snr_db"] for r in rows])
            ax.plot(range(len(rows)), snr, marker="o", color=colors.get(label),
                    label=label + (f" (inf drawn at {SNR_CAP_DB:g})" if exact else ""))
            ax.set_xticks(range(len(rows)), names, rotation=30, ha="right", fontsize=7)
            plotted = True
    if plotted:
        ax.set_ylabel("SNR dB")
        ax.set_title("SNR per layer (program executor vs HF)")
        ax.legend(fontsize=7, loc="best")
    else:
        ax.set_axis_off()
        ax.text(0.5, 0.5, "no per-layer drift available", ha="center")
    fig.tight_layout()
    plt.show()


# ----------------------------------------------------------------------------- attribution

def attribution(candidate, *, plots: bool = True) -> None:
    """Display one program candidate's op-level attribution: tables, then its two plots.

    Parameters
    ----------
    candidate : verifylib.evidence.parity.result.ParityCandidate
        A program candidate (``parity.program`` or ``parity.program_fp16``); nothing is
        displayed when it has no attribution.
    plots : bool
        Also draw :func:`program_snr_plot` and :func:`worst_ops_plot`.
    """
    from verifylib.numerics.attribution import empty_ranking_sentence, mapping_sentence

    att = candidate.attribution
    if att is None:
        return
    # The coverage sentences come from the analysis, so the page never says more about
    # the unmapped ops than the CLI does.
    display_html("parity_attribution.html.j2", style=False, att=att, gate=candidate.gate,
                 coverage=mapping_sentence(att),
                 conversion_none=empty_ranking_sentence(att, "conversion"),
                 precision_none=empty_ranking_sentence(att, "precision"))
    if plots:
        program_snr_plot(att)
        worst_ops_plot(att)


def _op_colors(types) -> dict:
    return {t: f"C{i % 10}" for i, t in enumerate(sorted(set(types)))}


def program_snr_plot(att, *, start: int = 0, stop: int | None = None):
    """Plot the SNR of every op's output along the program, coloured by op type.

    Two panels: precision drift (every op, against float64) and conversion drift (ops
    with a Hugging Face counterpart). ``start``/``stop`` zoom on a range of op indices.

    Parameters
    ----------
    att : AttributionEvidence or Attribution
        The candidate's op-level attribution as stored
        (:class:`verifylib.evidence.parity.schema.AttributionEvidence`), or one just
        computed (:class:`verifylib.numerics.attribution.Attribution`).
    start, stop : int, optional
        Op index range to draw.

    Returns
    -------
    matplotlib.figure.Figure
    """
    import matplotlib.pyplot as plt

    ops = [o for o in att.ops if o.index >= start and (stop is None or o.index < stop)]
    colors = _op_colors(o.type for o in att.ops)
    fig, axes = plt.subplots(2, 1, figsize=(15, 6.5), sharex=True)
    # Layer boundaries help read the x axis: one tick where each region begins.
    seen, ticks = set(), []
    for o in ops:
        region = _region_label(o)
        if region not in seen:
            seen.add(region)
            ticks.append((o.index, region))
    for ax, key, title in ((axes[0], "precision_snr_db",
                            f"Precision drift: each op against the program in float64 "
                            f"({att.variant}, {att.compute})"),
                           (axes[1], "snr_db", "Conversion drift: each mapped op against its "
                                               "Hugging Face module")):
        exact = False
        values = [float(getattr(o, key)) for o in ops if getattr(o, key) is not None]
        if values and all(np.isposinf(values)):
            # Every op exact: a row of points at an arbitrary height says less than words.
            ax.text(0.5, 0.5, f"identical: all {len(values)} ops equal the reference "
                              "exactly (infinite SNR)", transform=ax.transAxes,
                    ha="center", va="center", fontsize=10)
            ax.set_yticks([])
            ax.set_title(title, fontsize=9)
            continue
        for t, c in colors.items():
            pts = [(o.index, getattr(o, key)) for o in ops
                   if o.type == t and getattr(o, key) is not None]
            if not pts:
                continue
            x = np.array([p[0] for p in pts])
            y = np.array([p[1] for p in pts], dtype=float)
            exact |= bool(np.isposinf(y).any())
            ax.scatter(x, np.where(np.isposinf(y), SNR_CAP_DB, y), s=14, color=c, label=t)
        for x, _ in ticks:
            ax.axvline(x - 0.5, color="0.85", lw=0.6, zorder=0)
        ax.set_ylabel("SNR dB")
        ax.set_title(title + (f" (exact drawn at {SNR_CAP_DB:g})" if exact else ""),
                     fontsize=9)
        # Beside the axes, never over the points.
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.005, 1.0),
                  borderaxespad=0.0, title="op type", title_fontsize=7)
    # Labelled ticks at least 1/40 of the range apart, so the labels do not overlap (the
    # grey lines still mark every module).
    span = max((ops[-1].index - ops[0].index) if ops else 1, 1)
    labelled: list[tuple[int, str]] = []
    for t in ticks:
        if not labelled or t[0] - labelled[-1][0] >= span / 40:
            labelled.append(t)
    axes[1].set_xticks([t[0] for t in labelled], [t[1] for t in labelled], rotation=30,
                       ha="right", fontsize=7)
    axes[1].set_xlabel("op (program order); ticks where each module begins")
    fig.tight_layout()
    plt.show()
    return fig


def _region_label(o) -> str:
    from verifylib.numerics.program_map import region
    return region(o.module or o.scope)


def worst_ops_plot(att, n: int = 10):
    """Bar charts of the ops that lose the most: conversion and precision ΔSNR.

    An empty panel says what was compared (never that no op loses anything when some
    ops were not compared), and the conversion panel's title carries the mapped count
    when some ops have no reference module.

    Returns
    -------
    matplotlib.figure.Figure
    """
    import textwrap

    import matplotlib.pyplot as plt

    from verifylib.numerics.attribution import empty_ranking_sentence, mapping_sentence

    fig, axes = plt.subplots(1, 2, figsize=(15, 3.8))
    colors = _op_colors(o.type for o in att.ops)
    partial = att.mapped < att.executed
    for ax, kind, ops, key, title in (
            (axes[0], "conversion", att.top[:n], "delta_snr_db",
             "Worst ops: conversion ΔSNR (against HF)"
             + (f"\n{mapping_sentence(att)}" if partial else "")),
            (axes[1], "precision", att.precision_top[:n], "precision_delta_snr_db",
             "Worst ops: precision ΔSNR (against float64)")):
        if not ops:
            ax.set_axis_off()
            ax.text(0.5, 0.5, textwrap.fill(empty_ranking_sentence(att, kind), 60),
                    ha="center", va="center")
            continue
        labels = [f"{o.name} ({o.module or o.scope})" for o in ops][::-1]
        vals = [getattr(o, key) for o in ops][::-1]
        ax.barh(range(len(ops)), vals, color=[colors[o.type] for o in ops][::-1])
        ax.set_yticks(range(len(ops)), labels, fontsize=7)
        ax.set_xlabel("ΔSNR dB (negative: drift introduced by the op)")
        ax.set_title(title, fontsize=9)
        # The bars' colours are op types: say which, once per type shown.
        from matplotlib.patches import Patch
        shown = list(dict.fromkeys(o.type for o in ops))
        # Lower left: the bars are sorted worst (longest) first at the top, so the
        # short ones leave that corner empty.
        ax.legend(handles=[Patch(color=colors[t], label=t) for t in shown], fontsize=7,
                  title="op type", title_fontsize=7, loc="lower left")
    fig.tight_layout()
    plt.show()
    return fig


def layer_frames_plot(candidate, layers=None):
    """SNR per time frame at residual-stream points (zoom on a layer), from stored arrays.

    Parameters
    ----------
    candidate : verifylib.evidence.parity.result.ParityCandidate
        A program candidate with stored outputs.
    layers : iterable of str, optional
        Labels as in ``candidate.drift.layers`` (``"block 2"`` …); all by default.

    Returns
    -------
    matplotlib.figure.Figure or None
        None when the candidate stored no per-layer arrays.
    """
    import matplotlib.pyplot as plt

    if candidate.outputs is None or "layer_frame_snr_db" not in candidate.outputs:
        return None
    rows = next(iter(candidate.drift.layers.values()), [])
    labels = [r["label"] for r in rows]
    snr = np.asarray(candidate.outputs["layer_frame_snr_db"], dtype=float)
    want = labels if layers is None else list(layers)
    fig, ax = plt.subplots(figsize=(15, 3.8))
    for label in want:
        i = labels.index(label)
        y = snr[i]
        ax.plot(np.where(np.isposinf(y), SNR_CAP_DB, y), lw=0.8, label=label)
    if candidate.drift.speech_frames:
        ax.axvline(candidate.drift.speech_frames, color="gray", ls="--", lw=0.8)
    _label(ax, "encoder frame", "SNR dB",
           f"SNR per frame along the residual stream ({candidate.variant} program, float32)",
           "lower left")
    fig.tight_layout()
    plt.show()
    return fig
