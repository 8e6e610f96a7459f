"""Display of stage 06_placement: where MLComputePlan prefers to run each operation.

The stage's output opens with the plan's rows as Core ML gave them, per variant: how many
operations carry a device and a cost, the cost per preferred device and the sum of the
costs as recorded (an estimate, not a share forced to 1), the rows grouped by operator,
every row without a preferred device, then every row in full. A plan of a float32 program
says why it has no Neural Engine share. When ``placement.plan`` was not judged, the note
says how it ended and no device share is shown.
"""

from __future__ import annotations

from dataclasses import dataclass

from verifylib.evidence.gates import PLACEMENT_PLAN
from verifylib.evidence.placement.schema import PlanOp
from verifylib.models.compute_plan import (
    NO_DEVICE,
    NO_DEVICE_OPS,
    NOT_PLACED,
    PLACED,
    UNPLACED_COMPUTE,
    row_kind,
)
from verifylib.models.converter_precision import fp32_plan_explanation
from verifylib.views import display_html
from verifylib.views.gates import status_text

GATE = PLACEMENT_PLAN

TOP_OPS = 10
"""Operations listed per variant, costliest first."""

KINDS = (PLACED, NOT_PLACED, NO_DEVICE, UNPLACED_COMPUTE)
"""The kinds of plan row (:func:`verifylib.models.compute_plan.row_kind`), in table order."""

WITHOUT_DEVICE = "no device"
"""How the preferred-device columns name a row that has none."""


@dataclass(frozen=True)
class OperatorRows:
    """The plan's rows of one operator.

    Attributes
    ----------
    operator : str
        The MIL operator, e.g. ``ios17.conv``.
    count : int
        Its rows.
    devices : tuple of (str, int)
        Preferred device (:data:`WITHOUT_DEVICE` when the plan gives none) and its row
        count.
    costed : int
        Rows that carry a cost.
    cost : float
        Their summed cost.
    """

    operator: str
    count: int
    devices: tuple[tuple[str, int], ...]
    costed: int
    cost: float


@dataclass(frozen=True)
class PlanRow:
    """One row of the plan, with its kind.

    Attributes
    ----------
    op : PlanOp
        The row as recorded.
    kind : str
        Its kind (:func:`verifylib.models.compute_plan.row_kind`): placed, not placed, no
        device (a costed ``cast`` or ``const``), unplaced compute (the rule fails the plan).
    """

    op: PlanOp
    kind: str


@dataclass(frozen=True)
class PlanSummary:
    """What the report says about one variant's compute plan.

    Attributes
    ----------
    variant : str
        ``fp32`` or ``fp16``.
    ops : int
        Rows of the plan.
    costed : int
        Rows with a cost.
    kinds : tuple of (str, int)
        Row count of each kind of :data:`KINDS`.
    without_device : tuple of PlanRow
        The rows with a cost and no preferred device, shown in full.
    cost_sum : float or None
        The sum of the costs as recorded (an estimate: about 1, not exactly).
    cost_by_device : tuple of (str, float)
        Summed cost per preferred device as recorded, largest first, then the costed rows
        without a device (:data:`WITHOUT_DEVICE`) when the plan has any.
    by_operator : tuple of OperatorRows
        The rows grouped by operator, costliest first.
    top : tuple of PlanOp
        The costliest rows.
    rows : tuple of PlanRow
        Every row, in plan order.
    claim : str or None
        The Neural Engine claim worded from the plan.
    precision : str or None
        The planned program's declared compute precision, as the plan records it (None in
        plans recorded before it was).
    no_neural_engine : str or None
        Why the plan has no Neural Engine share, for a float32 program; None otherwise.
    """

    variant: str
    ops: int
    costed: int
    kinds: tuple[tuple[str, int], ...]
    without_device: tuple[PlanRow, ...]
    cost_sum: float | None
    cost_by_device: tuple[tuple[str, float], ...]
    by_operator: tuple[OperatorRows, ...]
    top: tuple[PlanOp, ...]
    rows: tuple[PlanRow, ...]
    claim: str | None
    precision: str | None = None
    no_neural_engine: str | None = None


def summarize(variant: str, plan) -> PlanSummary:
    """Summarize one variant's plan from its rows, exactly as recorded.

    Parameters
    ----------
    variant : str
        The variant.
    plan : verifylib.evidence.placement.schema.PlanEvidence
        Its ``placement.plan`` evidence.

    Returns
    -------
    PlanSummary
    """
    rows = tuple(PlanRow(o, row_kind(o.operator, o.preferred, o.cost)) for o in plan.ops)
    groups: dict[str, list[PlanOp]] = {}
    for o in plan.ops:
        groups.setdefault(o.operator, []).append(o)
    by_operator = []
    for operator, ops in groups.items():
        devices: dict[str, int] = {}
        for o in ops:
            key = o.preferred or WITHOUT_DEVICE
            devices[key] = devices.get(key, 0) + 1
        costs = [o.cost for o in ops if o.cost is not None]
        by_operator.append(OperatorRows(operator, len(ops), tuple(sorted(devices.items())),
                                        len(costs), sum(costs)))
    by_operator.sort(key=lambda r: (-r.cost, r.operator))
    costed = plan.costed()
    by_device = sorted((plan.cost_by_device or {}).items(), key=lambda kv: (-kv[1], kv[0]))
    # Plans recorded before cost_without_device existed kept those rows in cost_by_device
    # (as "unplanned"); a recorded figure is shown as recorded, never recomputed.
    if plan.cost_without_device:
        by_device.append((WITHOUT_DEVICE, plan.cost_without_device))
    return PlanSummary(
        variant=variant, ops=len(plan.ops), costed=len(costed),
        kinds=tuple((k, sum(r.kind == k for r in rows)) for k in KINDS),
        without_device=tuple(r for r in rows if r.op.cost is not None and r.op.preferred is None),
        cost_sum=plan.cost_sum, cost_by_device=tuple(by_device),
        by_operator=tuple(by_operator),
        top=tuple(sorted(costed, key=lambda o: -(o.cost or 0.0))[:TOP_OPS]),
        rows=rows, claim=plan.claim, precision=plan.precision,
        no_neural_engine=fp32_plan_explanation(plan.precision))


def show(report) -> None:
    """Display the plan's rows per variant, the cost share chart, and every row in full.

    Parameters
    ----------
    report : StageReport
        The result of :func:`verifylib.stages.placement.run`; when ``placement.plan`` was
        not judged, a note says how it ended and nothing else is displayed.
    """
    plans = report.result.plans if report.result is not None else {}
    if not plans:
        display_html("placement.html.j2", style=True, summary=None,
                     why=status_text(report.records, GATE))
        return
    summaries = [summarize(v, p) for v, p in plans.items()]
    for i, summary in enumerate(summaries):
        display_html("placement.html.j2", style=i == 0, summary=summary, why=None,
                     status=status_text(report.records, GATE) if i == 0 else None,
                     no_device_ops=", ".join(sorted(NO_DEVICE_OPS)))
    _cost_chart(summaries)


def _cost_chart(summaries: list[PlanSummary]) -> None:
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6, 1 + 0.6 * len(summaries)))
    colors: dict[str, str] = {}
    for i, s in enumerate(summaries):
        left = 0.0
        total = s.cost_sum or 1.0
        for dev, cost in s.cost_by_device:
            new = dev not in colors
            colors.setdefault(dev, f"C{len(colors)}")
            ax.barh(i, cost / total, left=left, color=colors[dev], label=dev if new else None)
            left += cost / total
    ax.set_yticks(range(len(summaries)), [s.variant for s in summaries])
    ax.set_xlabel("share of the summed estimated cost (preferred device)")
    ax.legend(loc="lower right")
    fig.tight_layout()
    plt.show()
