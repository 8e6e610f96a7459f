"""Stage 06_placement: where Core ML plans to run the published encoder.

``placement.plan`` loads ``MLComputePlan`` for the published fp32 ``.mlmodelc`` (and the
fp16 one when present) with ``ComputeUnit.ALL``, the compute units whisper.cpp requests.
It needs macOS 14.4+; elsewhere it is NOT_RUN(platform). Claims about the Neural Engine
are worded from the plan only, and for the planned program's declared compute precision:
an encoder audited as given occupies the ``fp32`` slot whatever it computes in.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable

from verifylib.canonical import tree_digest
from verifylib.errors import PrerequisiteBroken
from verifylib.evidence import identities
from verifylib.evidence.gates import EXPORT_CONTRACT, PLACEMENT_PLAN
from verifylib.evidence.placement.result import placement_result_from_evidence
from verifylib.evidence.placement.schema import PlanEvidence
from verifylib.evidence.records import EvidenceRef
from verifylib.evidence.stage_report import StageReport
from verifylib.models.compute_plan import analyze_plan, load_plan, placement_evidence
from verifylib.params import Params
from verifylib.stages.artifacts import published_mlmodelc
from verifylib.stages.context import StageContext

STAGE = "06_placement"


def _declared_precision(ctx: StageContext, variant: str) -> str:
    """Return the compute precision the planned program declares (the slot's, unless given)."""
    pre = ctx.evidence_of(EXPORT_CONTRACT, "contract").get("prebuilt")
    return str(pre["precision"]) if pre and variant == "fp32" else variant


def run(params: Params, run_dir: str | os.PathLike[str],
        plan_loader: Callable[[Path], Any] = load_plan) -> StageReport:
    """Run stage 06_placement.

    Parameters
    ----------
    params : Params
        Validated parameters.
    run_dir : path-like
        The run directory.
    plan_loader : callable
        Loads a plan from an ``.mlmodelc`` path (coremltools' ``MLComputePlan`` by default).

    Returns
    -------
    StageReport
        With ``result``
        (:class:`~verifylib.evidence.placement.result.PlacementResult`) holding each plan.
    """
    ctx = StageContext(STAGE, params, run_dir)
    g = ctx.begin(PLACEMENT_PLAN)
    if g:
        with g:
            refs: list[EvidenceRef] = []
            ids: dict[str, Any] = {}
            for variant in ("fp32", "fp16"):
                path = published_mlmodelc(ctx, variant)
                if path is None:
                    if variant == "fp32":
                        raise PrerequisiteBroken("export.compile passed but no fp32 .mlmodelc "
                                                 "is published in the run directory")
                    continue
                digest = tree_digest(path)
                # Read through its schema before it is written (the domain module that
                # builds it sits below the schemas): a malformed plan never becomes evidence.
                ev = PlanEvidence.from_json(placement_evidence(
                    analyze_plan(plan_loader(path)), variant, digest,
                    _declared_precision(ctx, variant)))
                refs.append(ctx.write_json(f"plan_{variant}", ev.to_json()))
                ids[identities.artifact_tree_digest(variant, "mlmodelc")] = digest
            g.judge(refs, ids)
    report = ctx.finish()
    # The plans as the gate cites them, which is what open_run reads from a published run.
    report.result = placement_result_from_evidence(ctx.run_dir, ctx.records)
    return report
