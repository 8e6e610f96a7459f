"""``verifylib run``: execute the six stage notebooks with papermill, then publish.

Each parameter file gets its own run directory, staged under
``reports/<name>/.staging/<run-id>`` and renamed to ``reports/<name>/<run-id>`` once the
receipt and both reports are written. A stage notebook that raises is kept (papermill
saves it with the error) and its unjudged gates become ERROR; later stages see that and
record NOT_RUN(prerequisite) for the gates that depended on it.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from . import canonical, gates, report
from .params import REPO_ROOT, Params, load
from .receipt import build_receipt
from .stage import init_run_dir, new_run_id, read_stage_file

NOTEBOOKS_DIR = REPO_ROOT / "notebooks"

from jupyter_client.manager import AsyncKernelManager  # noqa: E402
from traitlets import CaselessStrEnum  # noqa: E402


class LocalKernelManager(AsyncKernelManager):
    """A kernel manager that talks to the stage kernels over local IPC sockets.

    The default TCP transport makes every kernel warn that it runs unencrypted on
    localhost; the kernels here never leave this host, and IPC needs no open port.
    """

    transport = CaselessStrEnum(["tcp", "ipc"], default_value="ipc", config=True)


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
    return NOTEBOOKS_DIR / f"{stage}.ipynb"


def _error_text(exc: BaseException) -> str:
    # papermill's PapermillExecutionError carries the kernel-side traceback lines.
    tb = getattr(exc, "traceback", None)
    if tb:
        import re
        plain = "\n".join(re.sub(r"\x1b\[[0-9;]*m", "", line) for line in tb)
        return f"{getattr(exc, 'ename', type(exc).__name__)}: {getattr(exc, 'evalue', '')}\n{plain}"
    return f"{type(exc).__name__}: {exc}"


def run_one(params: Params, reports_root: Path, *, log: Callable[[str], None] = print,
            progress: bool = True, stages: Sequence[str] = gates.STAGES) -> RunOutcome:
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

    Returns
    -------
    RunOutcome
    """
    import papermill as pm

    run_id = new_run_id()
    final = reports_root / params.name / run_id
    staging = reports_root / params.name / ".staging" / run_id
    staging.mkdir(parents=True)
    init_run_dir(staging, params, run_id)
    (staging / "notebooks").mkdir()
    errors: dict[str, str] = {}
    seconds: dict[str, dict] = {}
    for i, stage in enumerate(stages, 1):
        log(f"[{i}/{len(stages)}] {params.name}: stage {stage}")
        t0 = time.perf_counter()
        try:
            pm.execute_notebook(
                str(_notebook(stage)), str(staging / "notebooks" / f"{stage}.ipynb"),
                parameters=dict(params.as_papermill(), run_dir=str(staging)),
                progress_bar=progress, kernel_name="python3", cwd=str(NOTEBOOKS_DIR),
                report_mode=False,
                kernel_manager_class=f"{__name__}.LocalKernelManager")
        except Exception as exc:  # noqa: BLE001 - any stage failure is recorded, not raised
            if isinstance(exc, KeyboardInterrupt):
                raise
            errors[stage] = _error_text(exc)
            log(f"      stage {stage} raised: {errors[stage].splitlines()[0]}")
        wall = time.perf_counter() - t0
        data = read_stage_file(staging, stage) or {}
        seconds[stage] = {"wall": round(wall, 3),
                          "verifylib": data.get("verifylib_seconds")}
        statuses = ", ".join(f"{r['id']}={r['status']}" for r in data.get("gates", []))
        log(f"      {wall:.1f} s; {statuses or 'no gate recorded'}")
    t0 = time.perf_counter()
    receipt = build_receipt(staging, errors)
    short, _ = report.render(staging, list(stages))
    seconds["receipt+report"] = {"wall": round(time.perf_counter() - t0, 3), "verifylib": None}
    canonical.write_json(staging / "timings.json", seconds)
    log(f"      receipt and report: {seconds['receipt+report']['wall']:.1f} s")
    canonical.publish_dir(staging, final)
    try:
        (reports_root / params.name / ".staging").rmdir()
    except OSError:
        pass
    return RunOutcome(params.name, final, gates.Verdict(receipt["verdict"]),
                      final / short.name, seconds)


def load_all(paths: Sequence[str | Path]) -> list[Params]:
    """Validate every parameter file (or folder of ``*.yaml``) before any work starts.

    Raises
    ------
    verifylib.params.ParameterError
        For the first unusable file, naming it and the key.
    """
    from .params import ParameterError
    files: list[Path] = []
    for p in paths:
        p = Path(p)
        if p.is_dir():
            found = sorted(list(p.glob("*.yaml")) + list(p.glob("*.yml")))
            if not found:
                raise ParameterError(f"{p}: folder holds no *.yaml parameter files")
            files += found
        else:
            files.append(p)
    out = [load(f) for f in files]
    names = [p.name for p in out]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise ParameterError(f"several parameter files use the same name: {sorted(dup)}")
    return out
