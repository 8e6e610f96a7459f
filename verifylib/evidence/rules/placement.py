"""Pass rule of stage 06 (placement): the compiled encoder's compute plan."""

from __future__ import annotations

import math
from collections import defaultdict
from fractions import Fraction
from typing import Any, Callable, Mapping

from verifylib.evidence.gates import Judgement
from verifylib.evidence.schemas.fields import SchemaError
from verifylib.evidence.schemas.placement import CostNotANumber, PlanEvidence
from verifylib.models.compute_plan import COST_SUM_TOLERANCE


def _rule_plan(ev) -> Judgement:
    j = judge_plan(ev.json("plan_fp32"))
    if j.ok and ev.has("plan_fp16"):
        j16 = judge_plan(ev.json("plan_fp16"))
        if not j16.ok:
            return Judgement.failed(f"fp16 plan: {j16.detail}")
        return Judgement.passed(f"{j.detail}; fp16: {j16.detail}")
    return j


RULES: dict[str, Callable[[Any], Judgement]] = {
    "placement.plan": _rule_plan,
}
"""Gate id to judge, for the gate of stage 06."""


_NOT_FINITE = "{} operation(s) with a cost that is not a finite number"


def judge_plan(evidence: PlanEvidence | Mapping[str, Any]) -> Judgement:
    """Judge ``placement.plan`` on stored evidence.

    PASS iff the plan lists operations, every operation that carries a cost names a
    preferred device, every cost is a finite number, and the cost shares sum to
    1 +/- 0.01 (limits included).

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
    missing = [o.operator for o in costed if not o.preferred]
    if missing:
        return Judgement.failed(f"{len(missing)} costed operation(s) without a preferred device")
    # A NaN share would make every comparison below false, i.e. pass the sum check.
    costs = [(o, o.cost) for o in costed if o.cost is not None]
    nonfinite = [o.operator for o, c in costs if not math.isfinite(c)]
    if nonfinite:
        return Judgement.failed(_NOT_FINITE.format(len(nonfinite)))
    total = sum(c for _, c in costs)
    # Decided on the exact sum of the decimals the evidence stores, not on the float sum
    # shown: in floats |(0.5 + 0.51) - 1| > 0.01, so a plan exactly at the tolerance would fail.
    exact = sum((Fraction(str(c)) for _, c in costs), Fraction(0))
    if abs(exact - 1) > Fraction(str(COST_SUM_TOLERANCE)):
        return Judgement.failed(f"cost shares sum to {total:.4f}, not 1 +/- {COST_SUM_TOLERANCE}")
    # The shares shown are recomputed from the per-op rows; the stored summary must agree.
    acc: defaultdict[str, float] = defaultdict(float)
    for o, c in costs:
        acc[o.preferred or "unplanned"] += c  # every costed op names one (checked above)
    by_device = dict(acc)
    stored = plan.cost_by_device
    if stored is None or set(stored) != set(by_device) or any(
            not math.isclose(
                stored[k], v, rel_tol=1e-9, abs_tol=1e-12) for k, v in by_device.items()):
        return Judgement.failed(f"stored cost by device {stored!r} is not what the "
                                f"per-op rows give "
                                f"{by_device!r}")
    shares = ", ".join(f"{k} {100 * v / total:.1f}%" for k, v in sorted(by_device.items()))
    return Judgement.passed(f"{len(ops)} operations planned "
                            f"({len(costed)} costed, sum {total:.4f}); "
                            f"cost share by preferred device: {shares}")
