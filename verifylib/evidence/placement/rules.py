"""Pass rule of stage 06 (placement): the compiled encoder's compute plan."""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from fractions import Fraction
from typing import Any, Callable, Iterable, Mapping, Sequence

from verifylib.evidence.fields import SchemaError
from verifylib.evidence.gates import PLACEMENT_PLAN, Judgement
from verifylib.evidence.placement.schema import CostNotANumber, PlanEvidence, PlanOp
from verifylib.evidence.records import EvidenceView
from verifylib.models.compute_plan import (
    COST_SUM_TOLERANCE,
    NO_DEVICE,
    NOT_PLACED,
    UNPLACED_COMPUTE,
    base_operator,
    row_kind,
)


def _rule_plan(ev: EvidenceView) -> Judgement:
    j = judge_plan(ev.json("plan_fp32"))
    if j.ok and ev.has("plan_fp16"):
        j16 = judge_plan(ev.json("plan_fp16"))
        if not j16.ok:
            return Judgement.failed(f"fp16 plan: {j16.detail}")
        return Judgement.passed(f"{j.detail}; fp16: {j16.detail}")
    return j


RULES: dict[str, Callable[[EvidenceView], Judgement]] = {
    PLACEMENT_PLAN: _rule_plan,
}
"""Gate id to judge, for the gate of stage 06."""


_NOT_FINITE = "{} operation(s) with a cost that is not a finite number"


def _named(operators: Iterable[str]) -> str:
    counts = Counter(operators)
    return ", ".join(op if n == 1 else f"{op} x{n}" for op, n in sorted(counts.items()))


def _shares(costs: Sequence[tuple[PlanOp, str, float]]
            ) -> tuple[dict[str, float], float, list[str]]:
    """Sum costs per preferred device; also the cost without a device and who carries it."""
    acc: defaultdict[str, float] = defaultdict(float)
    without, no_device = 0.0, []
    for o, k, c in costs:
        if k == NO_DEVICE:
            without += c
            no_device.append(o.operator)
        else:
            acc[str(o.preferred)] += c  # PLACED: every other costed row names one
    return dict(acc), without, no_device


def _stored_summary_problem(plan: PlanEvidence, by_device: Mapping[str, float], without: float,
                            no_device: Sequence[str]) -> str | None:
    """Say how the plan's stored summary differs from what its rows give; None if it does not."""
    stored = plan.cost_by_device
    if stored is None or set(stored) != set(by_device) or any(
            not math.isclose(
                stored[k], v, rel_tol=1e-9, abs_tol=1e-12) for k, v in by_device.items()):
        return (f"stored cost by device {stored!r} is not what the "
                f"per-op rows give "
                f"{by_device!r}")
    stored_without = plan.cost_without_device
    if (stored_without is None and no_device) or (stored_without is not None and not
                                                   math.isclose(stored_without, without,
                                                                rel_tol=1e-9, abs_tol=1e-12)):
        return (f"stored cost without a device {stored_without!r} is not what "
                f"the per-op rows give ({without!r})")
    return None


def judge_plan(evidence: PlanEvidence | Mapping[str, Any]) -> Judgement:
    """Judge ``placement.plan`` on stored evidence.

    Each row is read with :func:`verifylib.models.compute_plan.row_kind`. PASS iff the plan
    lists operations, some operation carries a cost, every costed operation names a
    preferred device unless it is a ``const`` or ``cast`` (a cost without a device there is
    Core ML's own: recorded, counted in the sum, in no device's share), every cost is a
    finite number, the cost shares sum to 1 +/- 0.01 (limits included), and the stored
    summary (cost per device, cost without a device) is what the rows give. Rows with
    neither a device nor a cost move no share; those other than ``const`` are named.

    Parameters
    ----------
    evidence : PlanEvidence or mapping
        A mapping is read with :meth:`PlanEvidence.from_json`; one that does not parse is
        a FAIL naming the field (a cost that is not a number is counted as such).

    Returns
    -------
    Judgement
    """
    try:
        plan = evidence if isinstance(evidence, PlanEvidence) else PlanEvidence.from_json(evidence)
    except CostNotANumber as exc:
        return Judgement.failed(_NOT_FINITE.format(len(exc.paths)))
    except SchemaError as exc:
        return Judgement.failed(f"the plan does not parse: {exc}")
    ops = plan.ops
    if not ops:
        return Judgement.failed("the plan lists no operations")
    costed = plan.costed()
    if not costed:
        return Judgement.failed("the plan gives no cost for any operation")
    # An empty device name is no device: the rule never trusts a falsy name as a device.
    kinds = [(o, row_kind(o.operator, o.preferred or None, o.cost)) for o in ops]
    unplaced = [o.operator for o, k in kinds if k == UNPLACED_COMPUTE]
    if unplaced:
        return Judgement.failed(f"{len(unplaced)} costed operation(s) without a preferred "
                                f"device: {_named(unplaced)}")
    # A NaN share would make every comparison below false, i.e. pass the sum check.
    costs = [(o, k, o.cost) for o, k in kinds if o.cost is not None]
    nonfinite = [o.operator for o, _, c in costs if not math.isfinite(c)]
    if nonfinite:
        return Judgement.failed(_NOT_FINITE.format(len(nonfinite)))
    total = sum(c for _, _, c in costs)
    # Decided on the exact sum of the decimals the evidence stores, not on the float sum
    # shown: in floats |(0.5 + 0.51) - 1| > 0.01, so a plan exactly at the tolerance would fail.
    exact = sum((Fraction(str(c)) for _, _, c in costs), Fraction(0))
    if abs(exact - 1) > Fraction(str(COST_SUM_TOLERANCE)):
        return Judgement.failed(f"cost shares sum to {total:.4f}, not 1 +/- {COST_SUM_TOLERANCE}")
    # The shares shown are recomputed from the per-op rows; the stored summary must agree.
    by_device, without, no_device = _shares(costs)
    mismatch = _stored_summary_problem(plan, by_device, without, no_device)
    if mismatch is not None:
        return Judgement.failed(mismatch)
    shares = ", ".join(f"{k} {100 * v / total:.1f}%" for k, v in sorted(by_device.items()))
    detail = (f"{len(ops)} operations planned ({len(costed)} costed, sum {total:.4f}); "
              f"cost share by preferred device: {shares}")
    if no_device:
        detail += f"; no device: {100 * without / total:.1f}% ({_named(no_device)})"
    bare = [o.operator for o, k in kinds
            if k == NOT_PLACED and base_operator(o.operator) != "const"]
    if bare:
        detail += f"; {len(bare)} operation(s) with neither a device nor a cost: {_named(bare)}"
    return Judgement.passed(detail)
