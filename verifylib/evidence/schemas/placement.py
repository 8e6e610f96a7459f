"""Schema of the stage 06 sidecars ``plan_fp32`` / ``plan_fp16``: a compiled model's compute plan.

:class:`PlanEvidence` is the document :func:`verifylib.models.compute_plan.placement_evidence`
builds and :func:`verifylib.stages.placement.run` writes: the variant, the digest of the
``.mlmodelc``, the compute units, one :class:`PlanOp` per operation of the plan, the cost
share per preferred device, their sum and the claim worded from them.

``from_json`` is strict and fails closed: a field that is missing or of the wrong JSON type
raises :class:`SchemaError` (an :class:`verifylib.errors.EvidenceInvalid`) whose ``path``
names it, e.g. ``ops[3].preferred``. An operation's ``cost`` that is neither a number nor
``null`` raises :class:`CostNotANumber`, which names every such operation (the rule
reports how many there are). The summary keys (``variant``, ``cost_by_device`` …) and an
operation's ``function``, ``index``, ``outputs`` and ``supported`` are optional, because
plans written by hand for the rule's own tests omit them; the rule refuses a plan whose
summary is missing. ``to_json`` gives back exactly the dict the stage writes.

Shapes and types only; whether the shares sum to one and the summary agrees with the rows
is the rule's job (:mod:`verifylib.evidence.rules.placement`). This module imports nothing
from verifylib but :mod:`verifylib.errors` (through :mod:`.fields`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from verifylib.evidence.schemas.fields import (
    SchemaError,
    array_of,
    integer,
    number,
    number_map,
    obj,
    opt,
    put,
    req,
    string,
    string_or_null,
    strings,
)

__all__ = ["SchemaError", "CostNotANumber", "PlanOp", "PlanEvidence"]


class CostNotANumber(SchemaError):
    """Some operations carry a ``cost`` that is neither a number nor ``null``.

    Parameters
    ----------
    paths : sequence of str
        The ``cost`` field of every such operation, e.g. ``ops[1].cost``.

    Attributes
    ----------
    paths : tuple of str
        As given; ``path`` is the first of them.
    """

    def __init__(self, paths: tuple[str, ...]):
        self.paths = tuple(paths)
        super().__init__(self.paths[0], f"not a number ({len(self.paths)} operation(s))")


def _cost(value: Any, path: str) -> float | None:
    return None if value is None else number(value, path)


@dataclass(frozen=True)
class PlanOp:
    """One operation of the plan (a row of ``PlacementAnalysis.ops``).

    Attributes
    ----------
    operator : str
        The MIL operator, e.g. ``ios17.conv``.
    preferred : str or None
        The preferred compute device (``CPU``, ``GPU``, ``NeuralEngine``), None when the
        plan gives no usage for the operation.
    cost : float or None
        Estimated cost share, None when the plan gives none (e.g. constants).
    function : str or None
        The program function holding the operation.
    index : int or None
        Its position in the walk of the program.
    outputs : tuple of str or None
        Its output names.
    supported : tuple of str or None
        The devices that support it.
    """

    operator: str
    preferred: str | None
    cost: float | None
    function: str | None = None
    index: int | None = None
    outputs: tuple[str, ...] | None = None
    supported: tuple[str, ...] | None = None

    @classmethod
    def from_json(cls, doc: Any, path: str = "op") -> "PlanOp":
        """Read one operation.

        Parameters
        ----------
        doc : Any
            The stored row.
        path : str
            Where it sits, e.g. ``ops[3]``.

        Returns
        -------
        PlanOp

        Raises
        ------
        SchemaError
            If a field is missing or of the wrong type (the cost included).
        """
        o = obj(doc, path)
        return cls(operator=req(o, "operator", path, string),
                   preferred=req(o, "preferred", path, string_or_null),
                   cost=req(o, "cost", path, _cost),
                   function=opt(o, "function", path, string),
                   index=opt(o, "index", path, integer),
                   outputs=opt(o, "outputs", path, strings),
                   supported=opt(o, "supported", path, strings))

    def to_json(self) -> dict[str, Any]:
        """Return the row as :func:`verifylib.models.compute_plan.analyze_plan` writes it.

        Returns
        -------
        dict
        """
        out: dict[str, Any] = {}
        put(out, "function", self.function)
        put(out, "index", self.index)
        out["operator"] = self.operator
        if self.outputs is not None:
            out["outputs"] = list(self.outputs)
        out["preferred"] = self.preferred
        if self.supported is not None:
            out["supported"] = list(self.supported)
        out["cost"] = self.cost
        return out


@dataclass(frozen=True)
class PlanEvidence:
    """A ``plan_<variant>`` document of ``placement.plan``.

    Attributes
    ----------
    ops : tuple of PlanOp
    cost_by_device : dict or None
        Summed cost share per preferred device (``unplanned`` for costed operations
        without one); None when the document omits it.
    cost_sum : float or None
        Sum of all cost shares.
    variant : str or None
        ``fp32`` or ``fp16``.
    mlmodelc_digest : str or None
        Tree digest of the planned ``.mlmodelc``.
    compute_units : str or None
        ``ALL``, the units whisper.cpp requests.
    claim : str or None
        The Neural Engine claim worded from the plan.
    """

    ops: tuple[PlanOp, ...]
    cost_by_device: dict[str, float] | None = None
    cost_sum: float | None = None
    variant: str | None = None
    mlmodelc_digest: str | None = None
    compute_units: str | None = None
    claim: str | None = None

    @classmethod
    def from_json(cls, doc: Any) -> "PlanEvidence":
        """Read a plan document, strictly.

        Parameters
        ----------
        doc : Any
            The decoded JSON document.

        Returns
        -------
        PlanEvidence

        Raises
        ------
        CostNotANumber
            If an operation's cost is neither a number nor ``null`` (every such operation
            is named, after the rest of the document was read).
        SchemaError
            If any other field is missing or of the wrong type; ``path`` names it.
        """
        o = obj(doc, "")
        bad: list[str] = []

        def op(value: Any, path: str) -> PlanOp:
            row = obj(value, path)
            cost = row.get("cost")
            if cost is not None and (isinstance(cost, bool)
                                     or not isinstance(cost, (int, float))):
                bad.append(f"{path}.cost")
                row = {**row, "cost": None}
            return PlanOp.from_json(row, path)

        ops = req(o, "ops", "", array_of(op))
        out = cls(ops=ops, cost_by_device=opt(o, "cost_by_device", "", number_map),
                  cost_sum=opt(o, "cost_sum", "", number),
                  variant=opt(o, "variant", "", string),
                  mlmodelc_digest=opt(o, "mlmodelc_digest", "", string),
                  compute_units=opt(o, "compute_units", "", string),
                  claim=opt(o, "claim", "", string))
        if bad:
            raise CostNotANumber(tuple(bad))
        return out

    def costed(self) -> tuple[PlanOp, ...]:
        """Return the operations that carry a cost.

        Returns
        -------
        tuple of PlanOp
        """
        return tuple(o for o in self.ops if o.cost is not None)

    def to_json(self) -> dict[str, Any]:
        """Return the document as ``compute_plan.placement_evidence`` builds it.

        Returns
        -------
        dict
        """
        out: dict[str, Any] = {}
        put(out, "variant", self.variant)
        put(out, "mlmodelc_digest", self.mlmodelc_digest)
        put(out, "compute_units", self.compute_units)
        out["ops"] = [o.to_json() for o in self.ops]
        put(out, "cost_by_device", self.cost_by_device)
        put(out, "cost_sum", self.cost_sum)
        put(out, "claim", self.claim)
        return out
