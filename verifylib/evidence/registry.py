"""The rules registry: gate id -> pure judge of stored evidence.

Every pass rule of :data:`verifylib.evidence.gates.GATES` is listed in :data:`RULES`, explicitly,
here and nowhere else. The same function judges a gate at run time (through
:class:`verifylib.stages.context.GateRun`) and again inside ``verifylib verify``, which imports
this module and never the stage modules. A rule reads only the evidence view it is given
and what this version of verifylib ships (the packaged policies, the pin manifest, the
runtime contract); it never trusts a value the evidence states about itself when the
validator can know it.
"""

from __future__ import annotations

from typing import Callable

from verifylib.evidence.build import rules as build
from verifylib.evidence.canary import rules as canary
from verifylib.evidence.export import rules as export
from verifylib.evidence.gates import Judgement
from verifylib.evidence.parity import rules as parity
from verifylib.evidence.placement import rules as placement
from verifylib.evidence.records import EvidenceView
from verifylib.evidence.wer import rules as wer

RuleFn = Callable[[EvidenceView], Judgement]

RULES: dict[str, RuleFn] = {**build.RULES, **export.RULES, **canary.RULES, **parity.RULES,
                            **wer.RULES, **placement.RULES}
"""Gate id to its judge. A gate the registry declares unimplemented has no entry."""


TEXT_PROGRAM_READERS: dict[str, Callable[[EvidenceView], bool]] = {
    **export.TEXT_PROGRAM_READERS, **parity.TEXT_PROGRAM_READERS}
"""Gate id -> whether its evidence says it executed a given compiled model's program read
from its ``model.mil`` (then it needed no Core ML:
:func:`verifylib.evidence.gates.capability_of`)."""


def program_from_text(gate_id: str, evidence: EvidenceView) -> bool:
    """Tell whether a judged gate executed a compiled model's program read from its text.

    Parameters
    ----------
    gate_id : str
        The gate.
    evidence : EvidenceView
        Its evidence.

    Returns
    -------
    bool
        False for a gate that never executes a program.
    """
    reader = TEXT_PROGRAM_READERS.get(gate_id)
    return reader is not None and reader(evidence)


def judge(gate_id: str, evidence: EvidenceView) -> Judgement:
    """Judge ``gate_id`` on an evidence view with its registered rule.

    Raises
    ------
    KeyError
        If the gate has no rule (it is unimplemented in this version).
    """
    return RULES[gate_id](evidence)
