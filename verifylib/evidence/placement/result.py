"""Typed result of stage 06 (placement): each compiled variant's compute plan."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Mapping

from verifylib.evidence.gates import PLACEMENT_PLAN
from verifylib.evidence.placement.schema import PlanEvidence
from verifylib.evidence.reading import judged_evidence

if TYPE_CHECKING:
    from verifylib.evidence.records import GateRecord


@dataclass
class PlacementResult:
    """Stage 06's result: the compute-plan evidence of each variant that had a plan.

    Attributes
    ----------
    plans : dict
        Variant -> the ``placement.plan`` evidence document, typed
        (:class:`verifylib.evidence.placement.schema.PlanEvidence`: ``ops``,
        ``cost_by_device``, ``cost_sum``, ``claim`` …).
    """

    plans: dict[str, PlanEvidence] = field(default_factory=dict)

    def device_share(self, variant: str = "fp32") -> dict[str, float]:
        """Preferred device -> its share of the plan's estimated cost, for one variant.

        Raises
        ------
        KeyError
            If the variant has no plan.
        """
        plan = self.plans[variant]
        total = plan.cost_sum or 1.0
        return {dev: cost / total for dev, cost in sorted((plan.cost_by_device or {}).items())}


PLAN_VARIANTS = ("fp32", "fp16")
"""Variants ``placement.plan`` may have planned, in display order."""


def placement_result_from_evidence(run_dir: str | os.PathLike[str],
                                   records: Mapping[str, GateRecord]) -> PlacementResult | None:
    """Stage 06's result, read from the evidence ``placement.plan`` cites (digest-checked).

    Parameters
    ----------
    run_dir : path-like
        The run directory.
    records : mapping
        Gate id -> :class:`verifylib.evidence.records.GateRecord` (at least ``placement.plan``).

    Returns
    -------
    PlacementResult or None
        None unless the gate was judged (PASS or FAIL).

    Raises
    ------
    verifylib.errors.EvidenceInvalid
        If a cited file is missing or altered, or a plan does not parse
        (:class:`verifylib.evidence.fields.SchemaError`).
    """
    v = judged_evidence(run_dir, records, PLACEMENT_PLAN, "plan_fp32")
    if v is None:
        return None
    return PlacementResult({variant: PlanEvidence.from_json(v.json(f"plan_{variant}"))
                            for variant in PLAN_VARIANTS if v.has(f"plan_{variant}")})
