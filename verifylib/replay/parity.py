"""The parity claims replayed: the run's *published* packages against a fresh reference.

Each program candidate the run measured (``parity.program``, ``parity.program_fp16``) is
executed again, from the run's own ``.mlpackage`` (or a given ``.mlmodelc``'s ``model.mil``
when the run read its program from there), by the same executor and function
stage 04 uses (:func:`verifylib.stages.parity.measure_program`), on the inputs this host
computes from the fixture and the seed (their digests must be the recorded ones), against
a reference encoder computed here. It is REPRODUCED when the replayed candidate outputs
are within :data:`~verifylib.replay.claims.SNR_REPRODUCED_DB` of the recorded arrays, the
fresh reference within the same of the recorded reference, and the gate's judgement under
its policy (:func:`verifylib.evidence.parity.rules.judge_parity`) comes out the same.
"""

from __future__ import annotations

import dataclasses
import math
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from verifylib.evidence.gates import PARITY_PROGRAM, PARITY_PROGRAM_FP16
from verifylib.replay.claims import SNR_REPRODUCED_DB, Claim, ClaimStatus, not_replayable

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from verifylib.evidence.runs import Run
    from verifylib.params import Params

PROGRAM_GATES = ((PARITY_PROGRAM, "fp32"), (PARITY_PROGRAM_FP16, "fp16"))


def _snr(recorded: NDArray[Any], replayed: NDArray[Any]) -> float:
    from verifylib.numerics.parity import compare

    return compare(recorded, replayed).snr_db


def _fmt(v: float) -> str:
    return "inf" if math.isinf(v) else f"{v:.1f}"


def replay_parity(run: Run, scratch: Path, params: Params, *,
                  log: Callable[[str], None] = print,
                  packages: Path | None = None) -> list[Claim]:
    """Replay the program parity claims of a published run.

    Parameters
    ----------
    run : verifylib.evidence.runs.Run
        The verified published run.
    scratch : Path
        The replay's scratch run (stage 02 re-run there: the contract and the model
        source the reference is loaded from).
    params : Params
        The replay's parameters.
    log : callable
        Progress lines.
    packages : Path, optional
        Where copies of the run's packages are (opening a package rewrites its manifest,
        so replay opens copies, :func:`verifylib.replay.engine.copy_packages`); the run
        itself by default.

    Returns
    -------
    list of Claim
        One per program gate, in :data:`PROGRAM_GATES` order.
    """
    from verifylib.errors import VerifylibError
    from verifylib.runtime import progress
    from verifylib.stages.context import StageContext
    from verifylib.stages.parity import reference_run

    claims, todo = _replayable(run)
    if not todo:
        return claims
    t0 = time.perf_counter()
    try:
        with progress.ticking("replay: the reference encoder"):
            ref = reference_run(StageContext("04_parity", params, scratch))
    except (VerifylibError, OSError) as exc:
        return claims + [not_replayable(g, f"the reference could not be computed here: {exc}")
                         for g, *_ in todo]
    ref = dataclasses.replace(ref, encoder=None)  # attribution is not a recorded claim
    ref_seconds = time.perf_counter() - t0
    for gate_id, variant, rec, doc in todo:
        claims.append(_replay_program(run, gate_id, variant, rec, doc, ref, packages or run.path,
                                      ref_seconds if gate_id == todo[0][0] else 0.0))
    order = [g for g, _ in PROGRAM_GATES]
    return sorted(claims, key=lambda c: order.index(c.id))


def _replayable(run: Run) -> tuple[list[Claim], list[tuple[str, str, Any, Any]]]:
    """Split the program gates into claims that cannot be replayed and the gates to replay.

    A gate is replayed when it was judged (PASS or FAIL) on a ``.mlpackage`` program or on
    a given ``.mlmodelc``'s program read from its ``model.mil``; each to replay comes as
    ``(gate id, variant, record, parity evidence)``.
    """
    from verifylib.evidence.gates import Status
    from verifylib.evidence.judging import read_from_text
    from verifylib.evidence.parity.schema import ParityEvidence

    claims: list[Claim] = []
    todo = []
    for gate_id, variant in PROGRAM_GATES:
        rec = run.gates.get(gate_id)
        if rec is None or rec.status not in (Status.PASS, Status.FAIL):
            status = rec.status.value if rec is not None else "absent"
            claims.append(not_replayable(gate_id, f"{gate_id} is {status} in the run: "
                                                  f"nothing measured to replay"))
            continue
        doc = ParityEvidence.from_json(run.evidence(gate_id).json("parity"))
        path = doc.artifact.path
        if path is not None and path.endswith(".mlmodelc") and \
                read_from_text((doc.candidate or {}).get("program_source")):
            todo.append((gate_id, variant, rec, doc))  # its model.mil, executed again
            continue
        if doc.kind != "program" or (path is not None and not path.endswith(".mlpackage")):
            claims.append(not_replayable(gate_id, "the candidate is a compiled model: only "
                                                  "a Core ML runtime executes it (macOS)"))
            continue
        if path is None:
            # The rule judges a program record that omits its path; there is no package
            # here to re-execute.
            claims.append(not_replayable(gate_id, "the parity record names no package to "
                                                  "re-execute"))
            continue
        todo.append((gate_id, variant, rec, doc))
    return claims, todo


def _replay_program(run: Run, gate_id: str, variant: str, rec: Any, doc: Any, ref: Any,
                    packages: Path, extra_seconds: float) -> Claim:
    """Re-execute one published program against the fresh reference and judge it again.

    ``extra_seconds`` (the reference's time, for the first gate replayed) is added to the
    claim's own.
    """
    from verifylib.evidence.parity.result import CANDIDATE_ARRAYS, REFERENCE_ARRAYS
    from verifylib.evidence.parity.rules import chosen_policy, judge_parity
    from verifylib.evidence.parity.schema import Measurement
    from verifylib.runtime import progress
    from verifylib.stages.parity import measure_program

    t1 = time.perf_counter()
    package: Any = packages / doc.artifact.path
    if doc.artifact.path.endswith(".mlmodelc"):
        # A given compiled model, read from its model.mil again (reading writes nothing).
        from verifylib.numerics.mil_compiled import load_compiled_program
        package, _ = load_compiled_program(run.path / doc.artifact.path)
    problems: list[str] = []
    if doc.inputs != ref.input_records:
        problems.append("the inputs computed here from the fixture and the seed are not "
                        "the recorded ones")
    with progress.ticking(f"replay: the published {variant} program op by op"):
        measurements, _drift, arrays, _ = measure_program(package, ref, variant=variant)
    recorded_out = run.arrays(gate_id, CANDIDATE_ARRAYS)
    recorded_ref = run.arrays(gate_id, REFERENCE_ARRAYS)
    snrs = {}
    for kind in ("fixture", "random"):
        snrs[f"outputs/{kind}"] = _snr(recorded_out[kind], arrays[kind])
        snrs[f"reference/{kind}"] = _snr(recorded_ref[kind], ref.outputs[kind])
    low = {k: v for k, v in snrs.items() if not v >= SNR_REPRODUCED_DB}
    if low:
        problems.append("replayed against recorded below "
                        f"{SNR_REPRODUCED_DB:.0f} dB: "
                        + ", ".join(f"{k} {_fmt(v)} dB" for k, v in sorted(low.items())))
    replayed_doc = dataclasses.replace(
        doc, measurements=tuple(Measurement.from_json(m, f"measurements[{i}]")
                                for i, m in enumerate(measurements)))
    policy_id, _ = chosen_policy(variant, doc)
    again = judge_parity(replayed_doc, policy_id, doc.kind)
    if again.status is not rec.status:
        problems.append(f"judged again on the replayed outputs: {again.status.value} "
                        f"({again.detail}), recorded {rec.status.value}")
    gated = _gated(measurements)
    recorded_gated = _gated([m.to_json() for m in doc.measurements])
    recorded: dict[str, Any] = {"status": rec.status.value, "gated_snr_db": recorded_gated}
    replayed: dict[str, Any] = {"status": again.status.value, "gated_snr_db": gated,
                                "snr_vs_recorded_db": {k: (None if math.isinf(v) else
                                                           round(v, 2))
                                                       for k, v in snrs.items()}}
    seconds = time.perf_counter() - t1 + extra_seconds
    if problems:
        return Claim(gate_id, ClaimStatus.DIFFERS, recorded, replayed,
                     "; ".join(problems), seconds)
    worst = min(snrs.values())
    return Claim(gate_id, ClaimStatus.REPRODUCED, recorded, replayed,
                 f"published package re-executed: outputs within "
                 f"{_fmt(worst)} dB of the recorded arrays (≥ "
                 f"{SNR_REPRODUCED_DB:.0f}), judged {again.status.value} "
                 f"again", seconds)


def _gated(measurements: Sequence[Mapping[str, Any]]) -> float | None:
    for m in measurements:
        if m.get("input") == "fixture" and m.get("execution") == "float32":
            v = m["metrics"]["snr_db"]
            return None if isinstance(v, float) and math.isinf(v) else round(float(v), 3)
    return None
