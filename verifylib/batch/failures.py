"""Models that published no run: their ERROR outcome and the failure record written for it.

Every executor writes that failure record.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence, Union

from verifylib.batch.audit import RunOutcome
from verifylib.evidence import failures as failure_records
from verifylib.params import Params
from verifylib.views import report


@dataclass
class FailedRun:
    """A model whose audit published no run directory: its ERROR outcome.

    Attributes
    ----------
    name : str
        Model name.
    reason : str
        Why (the worker's exit, the task's exception, the refused run's problems).
    node : str or None
        Where it ran, when known.
    executor : dict or None
        The executor record (``kind``, ``node``, and what else is known), for the
        failure record.
    record : Path or None
        The failure record published for it (see :func:`failure_recorder`).
    traceback : str or None
        A traceback for the record alone (a host fault is one line on the console).
    """

    name: str
    reason: str
    node: str | None = None
    executor: dict | None = None
    record: Path | None = None
    traceback: str | None = None


Outcome = Union[RunOutcome, FailedRun]


def failure_recorder(all_params: Sequence[Params], reports_root: Path,
                     on_outcome: Callable[[Outcome], None],
                     log: Callable[[str], None] = print) -> Callable[[Outcome], None]:
    """Wrap an outcome callback so that every :class:`FailedRun` is recorded first.

    The failure record goes into the reports folder
    (:func:`verifylib.evidence.failures.publish_failure`) and the index page is rebuilt at once,
    so the failure is on the page even if the batch is interrupted later. A record
    that cannot be written (a full disk) is said through ``log`` and does not stop the
    batch: the failure is still printed and counted in the exit code.

    Parameters
    ----------
    all_params : sequence of Params
        The batch's models (their parameter files go into the records).
    reports_root : Path
        The reports folder.
    on_outcome : callable
        Called with each outcome after its record, if any, is written.
    log : callable
        Receives a line when a record could not be written.

    Returns
    -------
    callable
        The wrapped callback; it sets ``FailedRun.record``.
    """
    def record(outcome: Outcome) -> None:
        if isinstance(outcome, FailedRun) and outcome.record is None:
            executor = dict(outcome.executor or {"kind": "unknown", "node": outcome.node})
            # Looked up only for a failure: a batch that publishes every run never needs
            # the parameter files' paths.
            origin = next((p.origin for p in all_params if p.name == outcome.name),
                          "unknown")
            try:
                outcome.record = failure_records.publish_failure(
                    reports_root, name=outcome.name, parameters=str(origin),
                    reason=outcome.reason, executor=executor, traceback=outcome.traceback)
                report.render_index([], reports_root)
            except OSError as exc:
                log(f"[{outcome.name}] failure record not written: {exc.strerror or exc}")
        on_outcome(outcome)

    return record


def failed_run(name: str, exc: BaseException, *, node: str | None,
               executor: dict | None) -> FailedRun:
    """Return the ERROR outcome of a model whose audit raised ``exc``.

    A host fault (:mod:`verifylib.runtime.host_faults`) reads as one line, its traceback kept
    for the failure record; anything else as its class and message, the traceback having
    gone to stderr.

    Parameters
    ----------
    name : str
        Model name.
    exc : BaseException
        What the audit raised.
    node, executor
        As :class:`FailedRun`'s.

    Returns
    -------
    FailedRun
    """
    import traceback

    from verifylib.runtime.host_faults import host_fault
    fault = host_fault(exc)
    if fault is not None:
        text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        return FailedRun(name, f"the host failed: {fault.strerror}", node, executor,
                         traceback=text)
    return FailedRun(name, f"{type(exc).__name__}: {exc}", node, executor)
