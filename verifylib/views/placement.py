"""Display of stage 06_placement: where MLComputePlan prefers to run each operation."""

from __future__ import annotations

from verifylib.views import display_html

TOP_OPS = 10
"""Operations listed per variant, costliest first."""


def show(report) -> None:
    """Display cost share per device (chart), the claim, and the top operations by cost.

    Parameters
    ----------
    report : StageReport
        The result of :func:`verifylib.stages.placement.run`; a note is displayed when
        ``placement.plan`` did not run.
    """
    plans = report.result.plans if report.result is not None else {}
    if not plans:
        display_html("placement.html.j2", style=True, variant=None)
        return
    variants = list(plans)
    _cost_chart(plans, variants)
    for i, v in enumerate(variants):
        ev = plans[v]
        top = sorted(ev.costed(), key=lambda o: -(o.cost or 0.0))[:TOP_OPS]
        display_html("placement.html.j2", style=i == 0, variant=v, claim=ev.claim, top=top)


def _cost_chart(facts: dict, variants: list) -> None:
    # facts: variant -> verifylib.evidence.schemas.placement.PlanEvidence
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6, 1 + 0.6 * len(variants)))
    for i, v in enumerate(variants):
        left = 0.0
        total = facts[v].cost_sum or 1.0
        for dev, share in sorted((facts[v].cost_by_device or {}).items()):
            ax.barh(i, share / total, left=left, label=f"{dev}" if i == 0 else None)
            left += share / total
    ax.set_yticks(range(len(variants)), variants)
    ax.set_xlabel("share of estimated cost (preferred device)")
    ax.legend(loc="lower right")
    fig.tight_layout()
    plt.show()
