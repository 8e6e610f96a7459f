"""Pass rule of stage 06 (placement): the compiled encoder's compute plan.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any, Callable, Mapping

from verifylib.evidence.gates import Judgement
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


def judge_plan(evidence: Mapping[str, Any]) -> Judgement:
    """The ``placement.plan`` rule on stored evidence.

    PASS iff the plan lists operations, every operation that carries a cost names a
    preferred device, every cost is a finite number, and the cost shares sum to
    1 +/- 0.01 (limits included).
    """
    ops = evidence.get("ops") or []
    if not ops:
        return Judgement.failed("the plan lists no operations")
    costed = [o for o in ops if o.get("cost") is not None]
    if not costed:
        return Judgement.failed("the plan gives no cost for any operation")
    missing = [o["operator"] for o in costed if not o.get("preferred")]
    if missing:
        return Judgement.failed(f"{len(missing)} costed operation(s) without a preferred device")
    # A NaN share would make every comparison below false, i.e. pass the sum check.
    nonfinite = [o["operator"] for o in costed if isinstance(o["cost"], bool)
                 or not isinstance(o["cost"], (int, float)) or not math.isfinite(o["cost"])]
    if nonfinite:
        return Judgement.failed(f"{len(nonfinite)} operation(s) with a cost that is not a finite number")
    total = sum(o["cost"] for o in costed)
    # Decided on the exact sum of the decimals the evidence stores, not on the float sum
    # shown: in floats |(0.5 + 0.51) - 1| > 0.01, so a plan exactly at the tolerance would fail.
    exact = sum(Fraction(str(o["cost"])) for o in costed)
    if abs(exact - 1) > Fraction(str(COST_SUM_TOLERANCE)):
        return Judgement.failed(f"cost shares sum to {total:.4f}, not 1 +/- {COST_SUM_TOLERANCE}")
    # The shares shown are recomputed from the per-op rows; the stored summary must agree.
    by_device: dict[str, float] = {}
    for o in costed:
        by_device[o["preferred"]] = by_device.get(o["preferred"], 0.0) + o["cost"]
    stored = evidence.get("cost_by_device")
    if not isinstance(stored, Mapping) or set(stored) != set(by_device) or any(
            not isinstance(stored[k], (int, float)) or not math.isclose(
                stored[k], v, rel_tol=1e-9, abs_tol=1e-12) for k, v in by_device.items()):
        return Judgement.failed(f"stored cost by device {stored!r} is not what the per-op rows give "
                                f"{by_device!r}")
    shares = ", ".join(f"{k} {100 * v / total:.1f}%" for k, v in sorted(by_device.items()))
    return Judgement.passed(f"{len(ops)} operations planned ({len(costed)} costed, sum {total:.4f}); "
                            f"cost share by preferred device: {shares}")
