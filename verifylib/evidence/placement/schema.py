"""Schema of the stage 06 sidecars ``plan_fp32`` / ``plan_fp16``: a compiled model's compute plan.

:class:`PlanEvidence` is the document :func:`verifylib.models.compute_plan.placement_evidence`
builds and :func:`verifylib.stages.placement.run` writes: the variant, the digest of the
``.mlmodelc``, the compute units, one :class:`PlanOp` per operation of the plan, the cost
share per preferred device, their sum and the claim worded from them.

``from_json`` is strict and fails closed: a field that is missing or of the wrong JSON type
raises :class:`SchemaError` (an :class:`verifylib.errors.EvidenceInvalid`) whose ``path``
names it, e.g. ``ops[3].preferred``. An operation's ``cost`` that is neither a number nor
``null`` raises :class:`CostNotANumber`, which names every such operation (the rule
reports how many there are). The summary keys (``variant``, ``cost_by_device``,
``cost_without_device`` …) and an operation's ``function``, ``index``, ``outputs`` and
``supported`` are optional, because plans written by hand for the rule's own tests omit
them; the rule refuses a plan whose ``cost_by_device`` is missing. ``to_json`` gives back
exactly the dict the stage writes.

Shapes and types only; whether the shares sum to one and the summary agrees with the rows
is the rule's job (:mod:`verifylib.evidence.placement.rules`). This module imports nothing
from verifylib but :mod:`verifylib.errors` (through :mod:`.fields`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from verifylib.evidence.fields import (
    Schema,
    SchemaError,
    array_of,
    field,
    integer,
    number,
    number_map,
    obj,
    req,
    string,
    string_or_null,
    strings,
)

__all__ = ["CostNotANumber", "PlanOp", "PlanEvidence"]


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


class PlanOp(Schema, kw_only=True):
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

    _path = "op"

    function: str | None = field(string, optional=True, default=None)
    index: int | None = field(integer, optional=True, default=None)
    operator: str = field(string)
    outputs: tuple[str, ...] | None = field(strings, optional=True, default=None)
    preferred: str | None = field(string_or_null)
    supported: tuple[str, ...] | None = field(strings, optional=True, default=None)
    cost: float | None = field(_cost)


class PlanEvidence(Schema, kw_only=True):
    """A ``plan_<variant>`` document of ``placement.plan``.

    Attributes
    ----------
    ops : tuple of PlanOp
    cost_by_device : dict or None
        Summed cost share per preferred device, of the costed operations that name one;
        None when the document omits it.
    cost_sum : float or None
        Sum of all cost shares, operations without a device included.
    cost_without_device : float or None
        Summed cost share of the costed operations that name no device (``cast``, see
        :func:`verifylib.models.compute_plan.row_kind`); None when the document omits it
        (documents written before it was recorded, hand-written plans).
    variant : str or None
        ``fp32`` or ``fp16``.
    mlmodelc_digest : str or None
        Tree digest of the planned ``.mlmodelc``.
    compute_units : str or None
        ``ALL``, the units whisper.cpp requests.
    claim : str or None
        The Neural Engine claim worded from the plan.
    precision : str or None
        The planned program's declared compute precision (``fp32``, ``fp16``, ``mixed``):
        the variant's for the suite's export, the card's for an encoder audited as given
        (which occupies the ``fp32`` slot whatever it computes in); None in plans recorded
        before it was.
    """

    variant: str | None = field(string, optional=True, default=None)
    mlmodelc_digest: str | None = field(string, optional=True, default=None)
    compute_units: str | None = field(string, optional=True, default=None)
    ops: tuple[PlanOp, ...] = field(array_of(PlanOp.from_json))
    cost_by_device: dict[str, float] | None = field(number_map, optional=True, default=None)
    cost_sum: float | None = field(number, optional=True, default=None)
    cost_without_device: float | None = field(number, optional=True, default=None)
    claim: str | None = field(string, optional=True, default=None)
    precision: str | None = field(string, optional=True, default=None)

    @classmethod
    def from_json(cls, doc: Any, path: str | None = None) -> "PlanEvidence":
        """Read a plan document, strictly; ``ops`` first, every bad cost named at the end.

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
        out = dataclasses.replace(super().from_json({**o, "ops": []}), ops=ops)
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
