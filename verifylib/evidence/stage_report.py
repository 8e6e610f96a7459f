"""What a stage returns: its :class:`StageReport`, carrying one :data:`StageResult`.

Every stage's typed output is one of six dataclasses, each built by the ``*_from_evidence``
function beside it in ``evidence/<stage>/``: the facts of stages 01 and 02 (a table), the
results of stages 03-06. :data:`StageResult` names that union once, for the stages that hand
it over (``StageReport.facts`` / ``StageReport.result``) and for the run reader that rebuilds
it (:meth:`verifylib.evidence.runs.Run.result`).

The six classes are imported for type checking only: this module sits above the stages'
evidence folders, and loading a report loads none of them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeAlias

from verifylib.evidence.gates import Status
from verifylib.evidence.records import GateRecord

if TYPE_CHECKING:
    from verifylib.evidence.build.facts import BuildFacts
    from verifylib.evidence.canary.result import CanaryResult
    from verifylib.evidence.export.facts import ExportFacts
    from verifylib.evidence.parity.result import ParityResult
    from verifylib.evidence.placement.result import PlacementResult
    from verifylib.evidence.wer.result import WerResult

__all__ = ["StageFacts", "StageResult", "StageReport"]

StageFacts: TypeAlias = "BuildFacts | ExportFacts"
"""The typed facts of stages 01 and 02, whose ``rows()`` are the table a notebook shows."""

StageResult: TypeAlias = ("BuildFacts | ExportFacts | CanaryResult | ParityResult | WerResult"
                          " | PlacementResult")
"""A stage's typed output, one class per stage: the facts of 01/02 (:data:`StageFacts`), the
results of 03-06 (``evidence/<stage>/result.py``)."""


@dataclass
class StageReport:
    """What a stage concluded, for display in its notebook.

    Attributes
    ----------
    stage : str
        Stage name.
    records : list of GateRecord
        One per gate of the stage, in table order.
    identities : dict
        Identities recorded by the stage.
    seconds : float
        Time spent inside the stage's verifylib work.
    facts : BuildFacts, ExportFacts or dict
        Values worth showing (paths, timings, versions): for stages 01 and 02 the typed
        :class:`~verifylib.evidence.build.facts.BuildFacts` /
        :class:`~verifylib.evidence.export.facts.ExportFacts` (:data:`StageFacts`), whose
        ``rows()`` are the table; an empty dict for the other stages.
    result : StageResult or None
        The stage's typed result (a dataclass of an ``evidence/<stage>/result.py``), for the
        stages whose results are more than a table (03-06); None for 01 and 02, and for 05
        and 06 when their gate did not run.
    """

    stage: str
    records: list[GateRecord]
    identities: dict[str, Any]
    seconds: float
    facts: StageFacts | dict[str, Any] = field(default_factory=dict)
    result: StageResult | None = None

    def status(self, gate_id: str) -> Status:
        """Return the status of one gate of the stage.

        Parameters
        ----------
        gate_id : str
            A gate id among :attr:`records`.

        Returns
        -------
        Status
            The gate's recorded status.

        Raises
        ------
        StopIteration
            If the stage has no record of ``gate_id``.
        """
        return next(r.status for r in self.records if r.id == gate_id)
