"""Display of stage 04_parity: policies, measurements and the drift plots."""

from __future__ import annotations

import numpy as np

from ..parity import snr_series
from . import display_html, html_object

SNR_CAP_DB = 160.0
"""Where an exact (infinite-SNR) point is drawn; labelled as such in the legend."""


def show(report):
    """Show the policies, every measurement (escaped tables) and the drift plots.

    The plots are the error histogram, SNR along time frames and SNR per layer.

    Parameters
    ----------
    report : StageReport
        The result of :func:`verifylib.stages.parity.run`.

    Returns
    -------
    IPython.display.HTML or None
        A note when the parity gates did not run; otherwise everything is displayed.
    """
    result = report.result
    cands = result.candidates if result is not None else {}
    if not cands:
        return html_object("parity.html.j2", style=True, candidates={})
    policies = {c.policy["id"]: c.policy for c in cands.values()}
    display_html("parity.html.j2", style=True, candidates=cands,
                 policies=sorted(policies.items()),
                 reference=result.reference or {}, inputs=result.inputs or {},
                 reference_seconds=next(iter(cands.values())).reference_seconds)
    _plots(cands)
    return None


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
            names = [r["label"] for r in rows]
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
