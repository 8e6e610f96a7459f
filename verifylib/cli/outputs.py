"""Machine-readable outputs of ``verifylib run`` and ``verify`` for CI: JSON and JUnit XML.

Everything here is read from what a run published (its ``receipt.json``) or from a
verification's result, so a CI job sees exactly what the report shows. JUnit XML is
written with junitparser (a maintained library) rather than by hand: one test suite per
model, one test case per gate, a NOT_RUN gate skipped with its reason.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from verifylib import canonical

JSON_SCHEMA = "verifylib-cli/2"
"""The ``schema`` of the objects ``run --json`` and ``verify --json`` print.

``/2`` (verifylib 0.2.0): ``exit_code`` 3 for a model with no run published (``/1`` said 1,
as for REJECTED), and ``verify``'s ``cause`` (the likely cause of its problems, or null)
and ``versions`` (what the run was judged under);
nothing was removed or renamed, so a reader of ``/1`` objects reads both."""


def version() -> str:
    """Return the installed verifylib's version (``0.2.0``), or ``unknown`` from a tree."""
    from verifylib.resources import package_version
    return package_version()


@dataclass(frozen=True)
class RunSummary:
    """One model of a ``run``, as CI reads it.

    Attributes
    ----------
    name : str
        The model's name.
    verdict : str
        ADMISSIBLE, INCOMPLETE or REJECTED; ``ERROR`` when no run was published.
    why : str
        One line saying why the verdict is what it is.
    run_dir, report, receipt : str or None
        The published run's folder, ``report.html`` and ``receipt.json`` (None when
        nothing was published).
    gates : list of dict
        Per gate: ``id``, ``stage``, ``required``, ``status``, ``reason`` (its kind) and
        ``detail``, in the receipt's order.
    """

    name: str
    verdict: str
    why: str
    run_dir: str | None = None
    report: str | None = None
    receipt: str | None = None
    gates: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """Return the object printed for this model."""
        return {"name": self.name, "verdict": self.verdict, "why": self.why,
                "run_dir": self.run_dir, "report": self.report, "receipt": self.receipt,
                "gates": self.gates}


def verdict_reason(receipt: dict) -> str:
    """Say in one line why a receipt's verdict is what it is.

    Parameters
    ----------
    receipt : dict
        A published receipt (``verdict`` and ``gates``).

    Returns
    -------
    str
        E.g. ``9 of 16 required gates PASS, 7 NOT_RUN (macOS needed: …), none failed``.
    """
    from verifylib.views.gates import required_gates

    req = required_gates(receipt)
    parts = [f"{req.passed} of {req.total} required gates PASS"]
    bad, platform, other = req.failed, req.not_run_platform, req.not_run_other
    if platform:
        parts.append(f"{len(platform)} NOT_RUN on this host (need a Mac: "
                     f"{', '.join(platform)})")
    if other:
        parts.append(f"{len(other)} NOT_RUN ({', '.join(other)})")
    parts.append(f"failed: {', '.join(bad)}" if bad else "none failed")
    return ", ".join(parts)


def summarize(outcome) -> RunSummary:
    """Build the CI view of one outcome of :func:`verifylib.batch.executors.run_batch`.

    Parameters
    ----------
    outcome : RunOutcome or FailedRun
        A published run, or a model whose audit published nothing.

    Returns
    -------
    RunSummary
    """
    from verifylib.batch.failures import FailedRun

    if isinstance(outcome, FailedRun):
        return RunSummary(outcome.name, "ERROR", f"no run published: {outcome.reason}")
    receipt = canonical.read_json(Path(outcome.run_dir) / "receipt.json")
    gates = [{"id": g.get("id"), "stage": g.get("stage"), "required": g.get("required"),
              "status": g.get("status"), "reason": (g.get("reason") or {}).get("kind"),
              "detail": (g.get("reason") or {}).get("detail")}
             for g in receipt.get("gates", [])]
    return RunSummary(outcome.name, str(receipt.get("verdict")), verdict_reason(receipt),
                      str(outcome.run_dir), str(outcome.report),
                      str(Path(outcome.run_dir) / "receipt.json"), gates)


def run_object(summaries: Iterable[RunSummary], *, verdict: str, exit_code: int,
               index: str | None) -> dict[str, Any]:
    """Return the one object ``run --json`` prints.

    Parameters
    ----------
    summaries : iterable of RunSummary
        One per model, in the order they were given.
    verdict : str
        The worst verdict (``ERROR`` when a model published nothing).
    exit_code : int
        The command's exit code.
    index : str or None
        The reports index page, when written.
    """
    return {"schema": JSON_SCHEMA, "command": "run", "verifylib": version(),
            "verdict": verdict, "exit_code": exit_code, "index": index,
            "runs": [s.to_json() for s in summaries]}


def verify_object(run_dir: str | os.PathLike, result, *, exit_code: int) -> dict[str, Any]:
    """Return the one object ``verify --json`` prints.

    Parameters
    ----------
    run_dir : path-like
        The run verified.
    result : verifylib.evidence.receipt.VerifyResult
        Its ``ok``, ``verdict`` and ``problems``.
    exit_code : int
        The command's exit code.
    """
    return {"schema": JSON_SCHEMA, "command": "verify", "verifylib": version(),
            "run_dir": str(run_dir), "ok": bool(result.ok),
            "verdict": None if result.verdict is None else str(getattr(result.verdict, "value",
                                                                        result.verdict)),
            "problems": list(result.problems), "cause": getattr(result, "cause", None),
            "versions": getattr(result, "versions", None),
            "exit_code": exit_code}


def write_junit(path: str | os.PathLike, summaries: Iterable[RunSummary]) -> Path:
    """Write one JUnit XML file: a test suite per model, a test case per gate.

    A FAIL gate is a failure and an ERROR gate an error, each with its detail; a NOT_RUN
    gate is skipped with its reason; a model that published nothing is one errored case.
    The file is written beside its final name and renamed into place.

    Parameters
    ----------
    path : path-like
        The file to write (its folder must exist).
    summaries : iterable of RunSummary
        One per model.

    Returns
    -------
    Path
        The file written.
    """
    from junitparser import Error, Failure, JUnitXml, Skipped, TestCase, TestSuite

    xml = JUnitXml("verifylib")
    for s in summaries:
        suite = TestSuite(s.name)
        suite.add_property("verdict", s.verdict)
        suite.add_property("why", s.why)
        if s.receipt:
            suite.add_property("receipt", s.receipt)
        if not s.gates:
            case = TestCase("audit", classname=s.name)
            case.result = [Error(s.why, "ERROR")]
            suite.add_testcase(case)
        for g in s.gates:
            case = TestCase(str(g["id"]), classname=f"{s.name}.{g['stage']}")
            detail = str(g.get("detail") or "")
            kind = str(g.get("reason") or "")
            if g["status"] == "FAIL":
                case.result = [Failure(detail, kind or "FAIL")]
            elif g["status"] == "ERROR":
                case.result = [Error(detail, kind or "ERROR")]
            elif g["status"] == "NOT_RUN":
                case.result = [Skipped(f"NOT_RUN ({kind}): {detail}")]
            suite.add_testcase(case)
        suite.update_statistics()
        xml.add_testsuite(suite)
    xml.update_statistics()
    final = Path(path)
    staging = final.with_name(f".{final.name}.{os.getpid()}.tmp")
    try:
        xml.write(str(staging), pretty=True)
        os.replace(staging, final)
    finally:
        staging.unlink(missing_ok=True)
    return final
