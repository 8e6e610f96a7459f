"""Display of a cross-run comparison (:class:`verifylib.compare.model.Comparison`).

One page, like the audit report: the computed *what changed* summary, the runs (each
verified verdict, a run that does not verify flagged), the gate matrix coloured like the
report's gate table, the identities that differ, the drift overlays (per-layer SNR curves
and SNR along the program of every run on one plot, the worst ops side by side, the
op-by-op or per-module table) and the WER per clip. Plots are drawn with matplotlib's Agg
canvas on :class:`matplotlib.figure.Figure` objects (no pyplot state, no display needed)
and embedded as base64 PNG, so the page is one self-contained file; all HTML comes from
``compare*.html.j2`` with autoescaping.

This module takes the :class:`~verifylib.compare.model.Comparison` it is given and never reads a
run itself (views reach no runner, ledger or rules, and :mod:`verifylib.compare.runs` reads
runs through :mod:`verifylib.evidence.runs`, which verifies with the rules). Its numbers are
written by :mod:`verifylib.views.formats`, like the comparison's summary lines.
"""

from __future__ import annotations

import base64
import io
import math
import os
from pathlib import Path
from typing import Any, Iterable, Sequence

from verifylib.evidence.gates import PARITY_PROGRAM
from verifylib.views import render, show_html
from verifylib.views.formats import delta_text, snr_cell, wer_text
from verifylib.views.parity import SNR_CAP_DB

PAGE = "compare.html"
"""File name of the page ``verifylib compare`` writes."""

# Exact (infinite-SNR) points are drawn where the stage 04 view draws them, so a curve
# reads the same on the report and on the comparison page.

_MODE_STYLES = ("-", "--", ":", "-.")


# ----------------------------------------------------------------------------- plot values

def _drawn(values: Iterable[Any]) -> tuple[list[float], bool]:
    """Values for a plot: None/NaN as gaps, +inf at :data:`SNR_CAP_DB` (and whether any was)."""
    out, exact = [], False
    for v in values:
        if v is None or (isinstance(v, float) and math.isnan(v)):
            out.append(math.nan)
        elif math.isinf(v) and v > 0:
            out.append(SNR_CAP_DB)
            exact = True
        else:
            out.append(float(v))
    return out, exact


def _run_colors(labels: Sequence[str]) -> dict[str, str]:
    return {lab: f"C{i % 10}" for i, lab in enumerate(labels)}


# ----------------------------------------------------------------------------- plots

def layer_plot(comparison, gate: str = PARITY_PROGRAM, *, modes: Sequence[str] | None = None,
               labels: Sequence[str] | None = None):
    """Plot every run's per-layer SNR curve of one program candidate on one plot.

    Parameters
    ----------
    comparison : verifylib.compare.model.Comparison
        The runs' comparison (:func:`verifylib.compare.runs.compare_runs`).
    gate : str
        ``parity.program`` or ``parity.program_fp16``.
    modes : sequence of str, optional
        Execution modes to draw (``float32``, ``float64``); all by default.
    labels : sequence of str, optional
        Residual-stream points to draw (``"embeddings"``, ``"block 2"`` …), to zoom on a
        few layers; all by default.

    Returns
    -------
    matplotlib.figure.Figure or None
        None when no run has a per-layer curve for the gate.
    """
    from matplotlib.figure import Figure

    cand = comparison.candidate(gate)
    curves = [c for c in cand.layers if modes is None or c.mode in modes]
    if not curves:
        return None
    points = list(labels) if labels is not None else list(cand.layer_labels)
    colors = _run_colors(comparison.labels)
    all_modes = sorted({c.mode for c in cand.layers}, key=lambda m: (m != cand.layer_mode, m))
    fig = Figure(figsize=(11, 4.2))
    ax = fig.subplots()
    for c in curves:
        xs = [points.index(p) for p in c.labels if p in points]
        ys, exact = _drawn(v for p, v in zip(c.labels, c.snr_db) if p in points)
        if not xs:
            continue
        base = c.run == comparison.labels[0]
        # The baseline drawn wide underneath, so a run that matches it stays visible.
        ax.plot(xs, ys, marker="o", color=colors[c.run], lw=3.0 if base else 1.2,
                ms=8 if base else 5, zorder=1 if base else 2,
                ls=_MODE_STYLES[all_modes.index(c.mode) % len(_MODE_STYLES)],
                label=f"{c.run} {c.mode}" + (f" (inf drawn at {SNR_CAP_DB:g})" if exact else ""))
    ax.set_xticks(range(len(points)), points, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("SNR dB")
    ax.set_title(f"SNR per layer, {gate} (program executor vs HF): one colour per run, one "
                 f"line style per execution", fontsize=9)
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    return fig


def op_plot(comparison, gate: str = PARITY_PROGRAM, *, start: int = 0,
            stop: int | None = None):
    """Plot every run's SNR along the program.

    Precision drift (against float64) above, conversion drift (mapped ops, against HF)
    below.

    Parameters
    ----------
    comparison : verifylib.compare.model.Comparison
        The runs' comparison (:func:`verifylib.compare.runs.compare_runs`).
    gate : str
        ``parity.program`` or ``parity.program_fp16``.
    start, stop : int, optional
        Op index range to draw (zoom on a block).

    Returns
    -------
    matplotlib.figure.Figure or None
        None when no run has an op-level attribution for the gate.
    """
    from matplotlib.figure import Figure

    cand = comparison.candidate(gate)
    if not cand.op_curves:
        return None
    colors = _run_colors(comparison.labels)
    fig = Figure(figsize=(11, 6))
    axes = fig.subplots(2, 1, sharex=True)
    for ax, key, title in ((axes[0], "precision_snr_db",
                            "Precision drift: each op against the program in float64"),
                           (axes[1], "snr_db",
                            "Conversion drift: each mapped op against its Hugging Face module")):
        exact = False
        for c in cand.op_curves:
            keep = [i for i, x in enumerate(c.index) if x >= start and (stop is None or x < stop)
                    and getattr(c, key)[i] is not None]
            ys, ex = _drawn(getattr(c, key)[i] for i in keep)
            exact |= ex
            base = c.run == comparison.labels[0]
            ax.plot([c.index[i] for i in keep], ys, marker=".", ms=6 if base else 4,
                    lw=2.6 if base else 0.8, zorder=1 if base else 2, color=colors[c.run],
                    label=f"{c.run} ({len(c.index)} ops)")
        ax.set_ylabel("SNR dB")
        ax.set_title(title + (f" (exact drawn at {SNR_CAP_DB:g})" if exact else ""), fontsize=9)
        ax.legend(fontsize=7, loc="lower left")
    # Region boundaries of the first run help read the x axis.
    first = cand.op_curves[0]
    ticks, seen = [], set()
    for x, reg in zip(first.index, first.region):
        if reg not in seen and x >= start and (stop is None or x < stop):
            seen.add(reg)
            ticks.append((x, reg))
    for ax in axes:
        for x, _ in ticks:
            ax.axvline(x - 0.5, color="0.85", lw=0.6, zorder=0)
    axes[1].set_xticks([t[0] for t in ticks], [t[1] for t in ticks], rotation=30, ha="right",
                       fontsize=7)
    axes[1].set_xlabel(f"op (program order); ticks where each module of run {first.run} begins")
    fig.tight_layout()
    return fig


def wer_plot(comparison):
    """Plot the per-clip WER of every run, one panel per side (GGML, hybrid, Hugging Face).

    Parameters
    ----------
    comparison : verifylib.compare.model.Comparison
        The runs' comparison (:func:`verifylib.compare.runs.compare_runs`).

    Returns
    -------
    matplotlib.figure.Figure or None
        None when no run has a WER result.
    """
    from matplotlib.figure import Figure

    wer = comparison.wer
    if wer is None or not wer.clips:
        return None
    sides = [("wer_ggml", "GGML"), ("wer_hybrid", "hybrid (Core ML)"),
             ("wer_source", "Hugging Face")]
    sides = [s for s in sides if any(v is not None for r in wer.clips for v in getattr(r, s[0]))]
    labels = comparison.labels
    colors = _run_colors(labels)
    fig = Figure(figsize=(11, 1.2 + 2.4 * len(sides)))
    axes = fig.subplots(len(sides), 1, sharex=True, squeeze=False)[:, 0]
    width = 0.8 / len(labels)
    ids = [r.id for r in wer.clips]
    for ax, (key, title) in zip(axes, sides):
        for j, lab in enumerate(labels):
            vals = [getattr(r, key)[j] for r in wer.clips]
            xs = [i + (j - (len(labels) - 1) / 2) * width for i in range(len(ids))]
            ax.bar([x for x, v in zip(xs, vals) if v is not None],
                   [v for v in vals if v is not None], width, color=colors[lab], label=lab)
        top = max((v for r in wer.clips for v in getattr(r, key) if v is not None),
                  default=0.0)
        # One unit everywhere: a fraction, as the report and the tables write it.
        ax.set_ylim(0, max(0.01, 1.15 * top))
        ax.set_ylabel("WER (fraction)")
        ax.set_title(f"WER per clip: {title}" + (" (0 for every clip in every run)"
                                                  if top == 0 else ""), fontsize=9)
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.005, 1.0),
                  borderaxespad=0.0)
    axes[-1].set_xticks(range(len(ids)), ids, rotation=30, ha="right", fontsize=8)
    fig.tight_layout()
    return fig


def png_base64(fig) -> str | None:
    """Return a figure as base64 PNG text (for a ``data:`` URI); None for no figure.

    Parameters
    ----------
    fig : matplotlib.figure.Figure or None
        The figure to encode (rendered with Agg at 90 dpi).

    Returns
    -------
    str or None
        The base64 text, or None when ``fig`` is None.
    """
    if fig is None:
        return None
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)  # Agg, whatever backend a notebook selected
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _images(comparison) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for c in comparison.candidates:
        if c.is_program:
            out[f"{c.gate}/layers"] = png_base64(layer_plot(comparison, c.gate))
            out[f"{c.gate}/ops"] = png_base64(op_plot(comparison, c.gate))
    out["wer"] = png_base64(wer_plot(comparison))
    return out


# ----------------------------------------------------------------------------- HTML

def _context(comparison) -> dict[str, Any]:
    return {"cmp": comparison, "images": _images(comparison), "db": snr_cell, "rate": wer_text,
            "delta": delta_text, "labels": comparison.labels}


def fragment(comparison, *, style: bool = True) -> str:
    """Render the comparison as an HTML fragment (a notebook output).

    Parameters
    ----------
    comparison : verifylib.compare.model.Comparison
        The runs' comparison (:func:`verifylib.compare.runs.compare_runs`).
    style : bool
        Open with the shared stylesheet's ``<style>`` block.

    Returns
    -------
    str
    """
    return render("compare_body.html.j2", style=style, **_context(comparison))


def page(comparison) -> str:
    """Render the comparison as one self-contained HTML document (stylesheet, plots inline).

    Parameters
    ----------
    comparison : verifylib.compare.model.Comparison
        The runs' comparison (:func:`verifylib.compare.runs.compare_runs`).

    Returns
    -------
    str
    """
    return render("compare.html.j2", **_context(comparison))


def write(comparison, out_dir: str | os.PathLike) -> Path:
    """Write ``compare.html`` into ``out_dir`` (created if needed).

    The page goes through a staging file renamed into place, so a reader never sees half a
    page.

    Parameters
    ----------
    comparison : verifylib.compare.model.Comparison
        The runs' comparison (:func:`verifylib.compare.runs.compare_runs`).
    out_dir : path-like
        The folder to write the page into.

    Returns
    -------
    Path
        The page.
    """
    from verifylib.canonical import atomic_write_bytes

    path = Path(out_dir) / PAGE
    atomic_write_bytes(path, page(comparison).encode("utf-8"))
    return path


def show(comparison) -> None:
    """Display the comparison in the running notebook: :func:`fragment`, plots included.

    Parameters
    ----------
    comparison : verifylib.compare.model.Comparison
        The runs' comparison (:func:`verifylib.compare.runs.compare_runs`).
    """
    show_html(fragment(comparison))


def show_figure(fig) -> None:
    """Display one of this module's figures in the running notebook (as PNG).

    Parameters
    ----------
    fig : matplotlib.figure.Figure or None
        Nothing is shown for None (no data to plot).
    """
    if fig is None:
        print("nothing to plot")
        return
    from IPython.display import Image, display
    display(Image(data=base64.b64decode(png_base64(fig))))
