"""Compute placement from Core ML's own plan (``MLComputePlan``, macOS 14.4+).

coremltools exposes the plan object by object; what no package does is turn it into
evidence: a per-operation table (preferred and supported devices, estimated cost share),
cost shares per device, and a claim worded strictly from the plan. The analysis reads
only the attributes of coremltools' structure classes, so a structural fake exercises
exactly the code that runs on a Mac.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from verifylib.errors import ExportFailure

DEVICE_NAMES = {"MLCPUComputeDevice": "CPU", "MLGPUComputeDevice": "GPU",
                "MLNeuralEngineComputeDevice": "NeuralEngine"}
COST_SUM_TOLERANCE = 0.01


class PlacementError(ExportFailure):
    """The plan could not be read as an ML program plan."""


def device_name(device: Any) -> str:
    """Name a Core ML compute device object (``CPU``, ``GPU``, ``NeuralEngine``)."""
    cls = type(device).__name__
    return DEVICE_NAMES.get(cls, f"unknown:{cls}")


def load_plan(mlmodelc: str | Path):
    """Load the compute plan of a compiled model with the runtime's compute units (ALL).

    Parameters
    ----------
    mlmodelc : path-like
        The published ``.mlmodelc`` folder, the bytes whisper.cpp loads.

    Returns
    -------
    coremltools.models.compute_plan.MLComputePlan
    """
    from coremltools import ComputeUnit
    from coremltools.models.compute_plan import MLComputePlan
    # whisper.cpp hardcodes MLComputeUnitsAll; the plan must be made for the same units.
    return MLComputePlan.load_from_path(path=str(mlmodelc), compute_units=ComputeUnit.ALL)


def _walk(block, function: str, out: list):
    for op in block.operations:
        out.append((function, op))
        for inner in getattr(op, "blocks", None) or []:
            _walk(inner, function, out)


@dataclass(frozen=True)
class PlacementAnalysis:
    """The plan of one compiled model, as evidence.

    Attributes
    ----------
    ops : list of dict
        Per operation: ``function``, ``index``, ``operator``, ``outputs``, ``preferred``,
        ``supported`` and ``cost`` (None when the plan gives none, e.g. constants).
    cost_by_device : dict
        Summed cost share per preferred device.
    cost_sum : float
        Sum of all cost shares (1 for a complete plan).
    """

    ops: list
    cost_by_device: dict
    cost_sum: float

    def top_ops(self, n: int = 10) -> list[dict]:
        """Return the ``n`` operations with the largest estimated cost share.

        Parameters
        ----------
        n : int, default 10
            How many operations to return at most.

        Returns
        -------
        list of dict
            The costed operations, largest cost first.
        """
        costed = [o for o in self.ops if o["cost"] is not None]
        return sorted(costed, key=lambda o: -o["cost"])[:n]


def analyze_plan(plan) -> PlacementAnalysis:
    """Tabulate a compute plan per operation.

    Parameters
    ----------
    plan : MLComputePlan
        Or any object with the same structure (``model_structure.program.functions``,
        ``get_compute_device_usage_for_mlprogram_operation``,
        ``get_estimated_cost_for_mlprogram_operation``).

    Returns
    -------
    PlacementAnalysis

    Raises
    ------
    PlacementError
        If the model is not an ML program.
    """
    program = getattr(plan.model_structure, "program", None)
    if program is None:
        raise PlacementError("the compiled model is not an ML program; no per-op plan")
    pairs: list = []
    for fname, fn in program.functions.items():
        _walk(fn.block, fname, pairs)
    ops, by_device, total = [], {}, 0.0
    for i, (fname, op) in enumerate(pairs):
        usage = plan.get_compute_device_usage_for_mlprogram_operation(op)
        cost = plan.get_estimated_cost_for_mlprogram_operation(op)
        preferred = device_name(usage.preferred_compute_device) if usage else None
        weight = float(cost.weight) if cost is not None else None
        ops.append({"function": fname, "index": i, "operator": op.operator_name,
                    "outputs": [o.name for o in op.outputs], "preferred": preferred,
                    "supported": sorted(device_name(d) for d in usage.supported_compute_devices)
                    if usage else [], "cost": weight})
        if weight is not None:
            total += weight
            key = preferred or "unplanned"
            by_device[key] = by_device.get(key, 0.0) + weight
    return PlacementAnalysis(ops, by_device, total)


def claim(cost_by_device: Mapping[str, float], cost_sum: float, precision: str) -> str:
    """Word the Neural Engine claim from the plan only (never from speed).

    Parameters
    ----------
    cost_by_device : mapping
        Cost share per preferred device.
    cost_sum : float
        Total of the shares.
    precision : str
        ``"fp32"`` or ``"fp16"`` (the compute precision of the variant).
    """
    share = cost_by_device.get("NeuralEngine", 0.0) / cost_sum if cost_sum else 0.0
    text = (f"MLComputePlan: {100 * share:.1f}% of estimated cost prefers the Neural Engine "
            f"(plan for ComputeUnit.ALL, not a recording of a run).")
    if precision == "fp32":
        text += (" For the float32 variant the Neural Engine is not expected: it computes in "
                 "float16 only, so Core ML plans float32 programs for GPU/CPU.")
    return text


def placement_evidence(analysis: PlacementAnalysis, variant: str, mlmodelc_digest: str) -> dict:
    """Evidence for one variant's plan (the ``placement.plan`` rule re-judges it)."""
    return {"variant": variant, "mlmodelc_digest": mlmodelc_digest,
            "compute_units": "ALL", "ops": analysis.ops,
            "cost_by_device": analysis.cost_by_device, "cost_sum": analysis.cost_sum,
            "claim": claim(analysis.cost_by_device, analysis.cost_sum, variant)}


