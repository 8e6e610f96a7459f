"""``verifylib run``: execute the six stage notebooks with papermill, then publish.

Each parameter file gets its own run directory, staged under
``reports/<name>/.staging/<run-id>`` and renamed to ``reports/<name>/<run-id>`` once the
receipt and both reports are written. A stage notebook that raises is kept (papermill
saves it with the error) and its unjudged gates become ERROR; later stages see that and
record NOT_RUN(prerequisite) for the gates that depended on it.

A staged run is verified (:func:`verifylib.evidence.receipt.verify`, as an auditor would)
before the rename: one that does not verify is never published; :class:`RunNotVerified`
names why and the batch records the model as ERROR with that reason.

A host fault (a full, read-only or failing disk, :mod:`verifylib.runtime.host_faults`) in
any stage, or while publishing, stops the audit at once: no later stage runs, the staging
folder is removed and :class:`verifylib.errors.HostFault` reaches the caller.

Interrupts (SIGINT, and SIGTERM under :func:`interrupts_raise`) publish nothing: the
stage kernel is shut down by papermill, the staging folder is removed and
:class:`Interrupted` reaches the caller. A process killed outright (SIGKILL, power loss)
cannot clean up, so every staging folder has an owner record beside it
(``.staging/<run-id>.owner.json``: pid, process start time, host) and
:func:`remove_stale_staging` removes the folders whose owner is provably gone.
"""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Sequence

from verifylib import canonical, resources
from verifylib.batch.kernel import (
    LocalKernelManager,
    kill_leftover_kernels,
    start_kernel,
    stop_kernel,
)
from verifylib.batch.signals import (
    Interrupted,
    interrupt_pending,
    note_published,
    signals_deferred,
)
from verifylib.batch.staging import remove_staging, reserve_staging
from verifylib.errors import EvidenceInvalid
from verifylib.evidence import gates
from verifylib.evidence.layout import read_stage_file
from verifylib.evidence.receipt import build_receipt, verify
from verifylib.notebook import make_reopenable
from verifylib.params import Params
from verifylib.runtime.host_faults import fault_of_cell, host_fault
from verifylib.runtime.progress import LineRelay
from verifylib.stages.context import init_run_dir
from verifylib.views import report


class RunNotVerified(EvidenceInvalid):
    """The staged run does not verify, so it was not published."""


@dataclass
class RunOutcome:
    """What one parameter file's audit produced.

    Attributes
    ----------
    name : str
        Model name.
    run_dir : Path
        The published run directory.
    verdict : gates.Verdict
        The run's verdict.
    report : Path
        ``report.html``.
    stage_seconds : dict
        Per stage: ``wall`` (papermill, kernel and all) and ``verifylib`` (inside the
        stage's verifylib calls, from its sidecar).
    """

    name: str
    run_dir: Path
    verdict: gates.Verdict
    report: Path
    stage_seconds: dict = field(default_factory=dict)


def _notebook(stage: str) -> Path:
    return resources.notebook(stage)


def _error_text(exc: BaseException) -> str:
    # papermill's PapermillExecutionError carries the kernel-side traceback lines.
    tb = getattr(exc, "traceback", None)
    if tb:
        import re
        plain = "\n".join(re.sub(r"\x1b\[[0-9;]*m", "", line) for line in tb)
        return (f"{getattr(exc, 'ename', type(exc).__name__)}: "
                f"{getattr(exc, 'evalue', '')}\n{plain}")
    return f"{type(exc).__name__}: {exc}"


def executor_record(kind: str = "local", **extra) -> dict:
    """Build the ``executor`` record of ``run.json``: how and on which machine an audit ran.

    Parameters
    ----------
    kind : str
        ``local`` (``verifylib run`` on this host, one model after another or in
        ``--jobs`` worker processes) or ``ray`` (a task on a Ray cluster).
    **extra
        Further JSON-able facts: ``jobs`` for a parallel batch, ``ray_node_id``.

    Returns
    -------
    dict
        ``kind``, ``node`` (the host name of the machine that ran the stages) and
        ``extra``.
    """
    return {"kind": kind, "node": socket.gethostname(), **extra}


def record_published(run_dir: Path) -> None:
    """Note a run directory published outside :func:`run_one` (by a batch driver).

    An interrupt report then names it instead of saying "nothing published".

    Parameters
    ----------
    run_dir : Path
        The published run directory.
    """
    note_published(Path(run_dir))


def run_one(params: Params, reports_root: Path, *, log: Callable[[str], None] = print,
            progress: bool = True, stages: Sequence[str] = gates.STAGES,
            kernel_manager: type[LocalKernelManager] | None = None,
            executor: Mapping | None = None,
            on_stage_done: Callable[[str], None] | None = None) -> RunOutcome:
    """Audit one model: run every stage notebook, write the receipt and the reports.

    Parameters
    ----------
    params : Params
        Validated parameters.
    reports_root : Path
        Usually ``reports/``; the run goes to ``<root>/<name>/<run-id>``.
    log : callable
        Receives progress lines.
    progress : bool
        Show papermill's per-cell progress bar.
    stages : sequence of str
        Stages to execute (all, in order, by default).
    kernel_manager : type, optional
        A :class:`LocalKernelManager` subclass for the stage kernels. Only the test
        suite's simulated Mac passes one (its kernels start with the simulated
        toolchain); the command line never does.
    executor : mapping, optional
        The ``executor`` record for ``run.json`` (see :func:`executor_record`); this
        process on this host by default.
    on_stage_done : callable, optional
        Called with each stage's name once its notebook has ended (whatever its gates
        say); a parallel batch uses it to start the models that share this one's build.

    Returns
    -------
    RunOutcome

    Raises
    ------
    KeyboardInterrupt
        :class:`Interrupted` under :func:`interrupts_raise`. Nothing is published then
        (unless the interrupt came after the publishing rename), the kernel is shut down
        and the staging folder is removed, as it is for any other exception.
    """
    if "01_build" in stages:
        # Checked again on the host that builds (a Ray node, a --jobs worker): a missing
        # tool refuses the audit before its run directory exists.
        from verifylib.runtime.tools import require_tools
        require_tools()
    # Reserved before the cleanup below guards it: a clash on the run id must never
    # remove the staging folder of the other run that holds that id.
    run_id, staging = reserve_staging(reports_root / params.name)
    final = reports_root / params.name / run_id
    # Whatever ends this run (an interrupt, a bug, a full disk), the staging folder goes;
    # once published it is already gone and only its owner record is left to remove.
    try:
        init_run_dir(staging, params, run_id,
                     executor=dict(executor) if executor is not None else executor_record())
        (staging / "notebooks").mkdir()
        errors, seconds = _run_stages(params, staging, stages, log=log, progress=progress,
                                      kernel_manager=kernel_manager,
                                      on_stage_done=on_stage_done)
        t0 = time.perf_counter()
        # Published notebooks read their run back, wherever it is copied (before the
        # receipt, which covers them).
        make_reopenable(staging, run_id)
        receipt = build_receipt(staging, errors)
        short, _ = report.render(staging, list(stages))
        seconds["receipt+report"] = {"wall": round(time.perf_counter() - t0, 3),
                                     "verifylib": None}
        canonical.write_json(staging / "timings.json", seconds)
        log(f"      receipt and report: {seconds['receipt+report']['wall']:.1f} s")
        t0 = time.perf_counter()
        _verify_staged(staging, params.name, run_id,
                       simulated=kernel_manager is not None or _simulated_here())
        log(f"      verified before publishing: {time.perf_counter() - t0:.1f} s")
        canonical.publish_dir(staging, final)
        # Sealed once in place (moving a folder to another parent needs it writable).
        canonical.seal_read_only(final)
    except Exception as exc:
        fault = host_fault(exc, staging)
        if fault is None or fault is exc:
            raise
        raise fault from exc
    finally:
        with signals_deferred():
            if final.is_dir():
                note_published(final)
            kill_leftover_kernels()
            remove_staging(staging)
    return RunOutcome(params.name, final, receipt.verdict,
                      final / short.name, seconds)


def _simulated_here() -> bool:
    from verifylib.runtime.capabilities import detect
    return detect().simulated


def _verify_staged(staging: Path, name: str, run_id: str, *, simulated: bool) -> None:
    """Refuse to publish a staged run that an auditor's ``verify`` would reject."""
    # Only the test suite's simulated Mac hands run_one a kernel manager or replaces this
    # process's host; its runs say host.simulated and verify accepts them only when told to.
    res = verify(staging, allow_simulated=simulated)
    if not res.ok:
        shown = "; ".join(res.problems[:5])
        more = f" (+{len(res.problems) - 5} more)" if len(res.problems) > 5 else ""
        raise RunNotVerified(f"{name}: run {run_id} does not verify, so it was not "
                             f"published: {shown}{more}")


def _run_stages(params: Params, staging: Path, stages: Sequence[str], *,
                log: Callable[[str], None], progress: bool,
                kernel_manager: type[LocalKernelManager] | None,
                on_stage_done: Callable[[str], None] | None,
                ) -> tuple[dict[str, str], dict[str, dict]]:
    """Execute the stage notebooks into ``staging``, each in a fresh kernel of its own.

    Returns the error text of each stage whose notebook raised, and the seconds each took.
    """
    import papermill as pm

    errors: dict[str, str] = {}
    seconds: dict[str, dict] = {}
    cwd = str(resources.notebooks_dir())
    ahead = start_kernel(cwd, kernel_manager)
    for i, stage in enumerate(stages, 1):
        log(f"[{i}/{len(stages)}] {params.name}: stage {stage}")
        t0 = time.perf_counter()
        # Each stage gets a fresh kernel of its own, started while the previous stage
        # ran: its start-up (most of a second) overlaps that stage's work.
        km, ahead = ahead, (start_kernel(cwd, kernel_manager) if i < len(stages) else None)
        relay = LineRelay(_stage_line(log, progress))
        try:
            pm.execute_notebook(
                str(_notebook(stage)), str(staging / "notebooks" / f"{stage}.ipynb"),
                parameters=dict(params.as_papermill(), run_dir=str(staging)),
                progress_bar=progress, kernel_name="python3", cwd=cwd,
                report_mode=False, km=km, stdout_file=relay)
        except Exception as exc:  # noqa: BLE001 - any stage failure is recorded, not raised
            if interrupt_pending() is not None:
                # papermill's kernel cleanup may replace the interrupt with its own error
                raise Interrupted(interrupt_pending()) from exc
            fault = host_fault(exc, staging) or fault_of_cell(getattr(exc, "ename", None),
                                                     getattr(exc, "evalue", None))
            if fault is not None:
                # Every later write would fail too: no later stage runs.
                log(f"      stage {stage} stopped: the host failed: {fault.strerror}")
                raise fault from exc
            errors[stage] = _error_text(exc)
            log(f"      stage {stage} raised: {errors[stage].splitlines()[0]}")
        finally:
            relay.close()
            stop_kernel(km)
        wall = time.perf_counter() - t0
        data = read_stage_file(staging, stage) or {}
        seconds[stage] = {"wall": round(wall, 3),
                          "verifylib": data.get("verifylib_seconds")}
        statuses = ", ".join(f"{r['id']}={r['status']}" for r in data.get("gates", []))
        log(f"      {wall:.1f} s; {statuses or 'no gate recorded'}")
        if on_stage_done is not None:
            on_stage_done(stage)
    return errors, seconds


def _stage_line(log: Callable[[str], None], bar: bool) -> Callable[[str], None]:
    """Return where a stage kernel's printed line goes: ``log``, indented under the stage.

    With papermill's bar on the same terminal, the bar is cleared for the line and drawn
    again below it (tqdm's own way of printing beside a bar), so neither garbles the other.
    """
    def line(text: str) -> None:
        if not text.strip():
            return
        if bar:
            from tqdm import tqdm
            with tqdm.external_write_mode():
                log(f"      {text}")
        else:
            log(f"      {text}")
    return line
