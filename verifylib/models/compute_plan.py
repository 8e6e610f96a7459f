"""Compute placement from Core ML's own plan (``MLComputePlan``, macOS 14.4+).

coremltools exposes the plan object by object; what no package does is turn it into
evidence: a per-operation table (preferred and supported devices, estimated cost share),
cost shares per device, and a claim worded strictly from the plan. The analysis reads
only the attributes of coremltools' structure classes (``model_structure.program``, an
operation's ``operator_name``, ``outputs`` and ``blocks``, a usage's devices, a cost's
``weight``), and names a device by its class.

Core ML does not place every row. What a row without a device means is decided here, once,
for the analysis and the ``placement.plan`` rule (:func:`row_kind`):

- a ``const`` comes with no usage and no cost: it is not placed, by construction;
- a ``cast`` (or a ``const``) may come with a cost and no device: the plan estimates work
  for it without choosing where it runs. Its cost is recorded and counted in the sum of
  the shares, but in no device's share (``cost_without_device``);
- any other operation with a cost and no device is a compute operation the plan does not
  place: the rule fails the plan;
- any other operation with neither is recorded and named; it moves no share.

coremltools' own ``MLComputePlan`` test skips exactly ``const`` and ``cast`` before it
asserts a device, and says a cost may be missing on Intel Macs; the shares are estimates,
so their sum is judged with a tolerance (:data:`COST_SUM_TOLERANCE`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from verifylib.errors import ExportFailure

DEVICE_NAMES = {"MLCPUComputeDevice": "CPU", "MLGPUComputeDevice": "GPU",
                "MLNeuralEngineComputeDevice": "NeuralEngine"}
COST_SUM_TOLERANCE = 0.01
"""How far the cost shares may sum from 1. Each share is Core ML's estimate of one
operation's part of the whole model's work, so the shares add up to 1 but for rounding;
a sum off by more than one percent means rows were lost or counted twice."""

NO_DEVICE_OPS = frozenset({"const", "cast"})
"""Operators (without their opset prefix) a plan may cost without naming a device."""

PLACED, NOT_PLACED, NO_DEVICE, UNPLACED_COMPUTE = (
    "placed", "not placed", "no device", "unplaced compute")
"""The kinds of plan row (:func:`row_kind`)."""


class PlacementError(ExportFailure):
    """The plan could not be read as an ML program plan."""


def device_name(device: Any) -> str:
    """Name a Core ML compute device object (``CPU``, ``GPU``, ``NeuralEngine``)."""
    cls = type(device).__name__
    return DEVICE_NAMES.get(cls, f"unknown:{cls}")


def base_operator(operator: str) -> str:
    """Strip the opset prefix from an operator name: ``ios17.cast`` -> ``cast``.

    Parameters
    ----------
    operator : str
        As the plan names it (Core ML prefixes the opset, e.g. ``ios18.conv``, but not
        ``const``).

    Returns
    -------
    str
    """
    return operator.rsplit(".", 1)[-1]


def row_kind(operator: str, preferred: str | None, cost: float | None) -> str:
    """Classify one row of a plan (see the module docstring).

    Parameters
    ----------
    operator : str
        The operator as the plan names it.
    preferred : str or None
        The preferred device, None when the plan gives no usage.
    cost : float or None
        The estimated cost share, None when the plan gives none.

    Returns
    -------
    str
        :data:`PLACED` (a preferred device, costed or not), :data:`NOT_PLACED` (neither a
        device nor a cost), :data:`NO_DEVICE` (a cost, no device, an operator of
        :data:`NO_DEVICE_OPS`) or :data:`UNPLACED_COMPUTE` (a cost, no device, any other
        operator: the plan fails).
    """
    if preferred is not None:
        return PLACED
    if cost is None:
        return NOT_PLACED
    return NO_DEVICE if base_operator(operator) in NO_DEVICE_OPS else UNPLACED_COMPUTE


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
        Per operation: ``function``, ``index``, ``operator``, ``outputs``, ``preferred``
        (None when the plan gives no usage), ``supported`` and ``cost`` (None when the plan
        gives none, e.g. constants).
    cost_by_device : dict
        Summed cost share per preferred device, of the costed rows that name one.
    cost_sum : float
        Sum of all cost shares, rows without a device included (about 1: estimates).
    cost_without_device : float
        Summed cost share of the costed rows that name no device.
    """

    ops: list
    cost_by_device: dict
    cost_sum: float
    cost_without_device: float = 0.0

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
    ops, by_device, total, without = [], {}, 0.0, 0.0
    for i, (fname, op) in enumerate(pairs):
        usage = plan.get_compute_device_usage_for_mlprogram_operation(op)
        cost = plan.get_estimated_cost_for_mlprogram_operation(op)
        # The real usage is a dataclass of two fields; a usage whose preferred device is
        # None (a device class the bindings do not know) names no device either.
        pref = usage.preferred_compute_device if usage is not None else None
        preferred = device_name(pref) if pref is not None else None
        weight = float(cost.weight) if cost is not None else None
        ops.append({"function": fname, "index": i, "operator": op.operator_name,
                    "outputs": [o.name for o in op.outputs], "preferred": preferred,
                    "supported": sorted(device_name(d) for d in usage.supported_compute_devices)
                    if usage is not None else [], "cost": weight})
        if weight is not None:
            total += weight
            if preferred is None:
                without += weight
            else:
                by_device[preferred] = by_device.get(preferred, 0.0) + weight
    return PlacementAnalysis(ops, by_device, total, without)


def claim(cost_by_device: Mapping[str, float], cost_sum: float, precision: str,
          cost_without_device: float = 0.0) -> str:
    """Word the Neural Engine claim from the plan only (never from speed).

    Parameters
    ----------
    cost_by_device : mapping
        Cost share per preferred device.
    cost_sum : float
        Total of the shares.
    precision : str
        The planned program's declared compute precision (``"fp32"``, ``"fp16"``,
        ``"mixed"``).
    cost_without_device : float, default 0
        The part of the total the plan costs without naming a device.

    Returns
    -------
    str
    """
    share = cost_by_device.get("NeuralEngine", 0.0) / cost_sum if cost_sum else 0.0
    text = (f"MLComputePlan: {100 * share:.1f}% of estimated cost prefers the Neural Engine "
            f"(plan for ComputeUnit.ALL, not a recording of a run).")
    if cost_without_device and cost_sum:
        text += (f" {100 * cost_without_device / cost_sum:.1f}% is estimated for operations "
                 f"the plan names no device for ({' or '.join(sorted(NO_DEVICE_OPS))}).")
    if precision == "fp32":
        text += (" For a float32 program the Neural Engine is not expected: it computes in "
                 "float16 only, so Core ML plans float32 programs for GPU/CPU.")
    return text


def placement_evidence(analysis: PlacementAnalysis, variant: str, mlmodelc_digest: str,
                       precision: str | None = None) -> dict:
    """Evidence for one variant's plan (the ``placement.plan`` rule re-judges it).

    Parameters
    ----------
    analysis : PlacementAnalysis
        The tabulated plan.
    variant : str
        ``fp32`` or ``fp16``.
    mlmodelc_digest : str
        Tree digest of the planned ``.mlmodelc``.
    precision : str, optional
        The planned program's declared compute precision (default: the variant's); an
        encoder audited as given occupies the ``fp32`` slot whatever it computes in, and
        the claim is worded for what it computes in.

    Returns
    -------
    dict
        The ``plan_<variant>`` document
        (:class:`verifylib.evidence.placement.schema.PlanEvidence`).
    """
    precision = precision if precision is not None else variant
    return {"variant": variant, "mlmodelc_digest": mlmodelc_digest,
            "compute_units": "ALL", "ops": analysis.ops,
            "cost_by_device": analysis.cost_by_device, "cost_sum": analysis.cost_sum,
            "cost_without_device": analysis.cost_without_device,
            "claim": claim(analysis.cost_by_device, analysis.cost_sum, precision,
                           analysis.cost_without_device),
            "precision": precision}


