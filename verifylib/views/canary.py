"""Display of stage 03_canary.

The batch-lifecycle A/B, its sanitizer runs, the Core ML controls.
"""

from __future__ import annotations

from verifylib.evidence.gates import (
    CANARY_COREML_NEGATIVE,
    CANARY_COREML_POSITIVE,
    CANARY_SANITIZER,
    CANARY_SEAM_NEGATIVE,
    CANARY_SEAM_POSITIVE,
)
from verifylib.runtime import contracts
from verifylib.runtime.contracts.seam import SEAM_DOES_NOT_PROVE, SEAM_PROVES
from verifylib.views import display_html

COLORS = {contracts.CLEAN_LIFECYCLE: "#2e7d32", "SIGSEGV": "#c62828", "SIGABRT": "#ad1457",
          "timeout": "#6a1b9a"}
"""Bar colour of each run outcome in the A/B chart (any other outcome is orange)."""

CONTROLS = (("negative", CANARY_COREML_NEGATIVE), ("positive", CANARY_COREML_POSITIVE))

SEAM_CONTROLS = (("seam_negative", CANARY_SEAM_NEGATIVE), ("seam_positive", CANARY_SEAM_POSITIVE))

SANITIZER_GATE = CANARY_SANITIZER


def show(report) -> None:
    """Display the A/B outcome table and chart, the sanitizer runs, the Core ML and seam runs.

    Each part that did not run is displayed as a note saying why. A clean unpatched side
    that ran on macOS is followed by the note that it is no evidence the defect is gone
    (:meth:`~verifylib.evidence.canary.result.LifecycleSummary.unpatched_caveat`).

    Parameters
    ----------
    report : StageReport
        The result of :func:`verifylib.stages.canary.run`.
    """
    result = report.result
    lc = result.lifecycle if result is not None else None
    # A clean unpatched side on macOS is said to be no evidence next to the table itself,
    # where a reader would otherwise take it for a fixed defect.
    display_html("canary_lifecycle.html.j2", style=True, lc=lc,
                 sides=list(lc.sides) if lc else [],
                 caveat=lc.unpatched_caveat() if lc else None)
    if lc:
        _lifecycle_chart(lc)
    sz = result.sanitizer if result is not None else None
    display_html("canary_sanitizer.html.j2", gate=SANITIZER_GATE, sz=sz,
                 sides=list(sz.sides) if sz else [], verdict=_status(report, SANITIZER_GATE))
    for key, gid in CONTROLS:
        facts = getattr(result, key, None)
        why = None if facts else _status(report, gid)
        display_html("canary_coreml.html.j2", gate=gid, facts=facts, why=why)
    display_html("seam_note.html.j2", proves=SEAM_PROVES, not_proved=SEAM_DOES_NOT_PROVE)
    for key, gid in SEAM_CONTROLS:
        facts = getattr(result, key, None)
        why = None if facts else _status(report, gid)
        display_html("canary_coreml.html.j2", gate=gid, facts=facts, why=why)


def _status(report, gate_id: str) -> str:
    rec = next((r for r in report.records if r.id == gate_id), None)
    return f"{rec.status.value} ({rec.reason.kind}): {rec.reason.detail}" if rec else "no record"


def _lifecycle_chart(lc) -> None:
    import matplotlib.pyplot as plt
    labels = sorted({lab for s in lc.sides.values() if s.available for lab in s.counts})
    avail = [side for side, s in lc.sides.items() if s.available]
    fig, ax = plt.subplots(figsize=(6, 1.2 + 0.6 * len(avail)))
    left = [0] * len(avail)
    for lab in labels:
        vals = [lc.sides[side].counts.get(lab, 0) for side in avail]
        ax.barh(avail, vals, left=left, label=lab, color=COLORS.get(lab, "#ef6c00"))
        left = [a + b for a, b in zip(left, vals)]
    ax.set_xlabel("runs")
    ax.set_xlim(0, lc.runs_per_side)
    ax.set_title("Outcome of each run, per build")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.45), ncol=3, fontsize="small")
    fig.tight_layout()
    plt.show()
