"""One published run on the simulated Mac, made once per test session, for the readers.

The default audit cut to the parameters below, run as ``verifylib run`` runs it: every
stage notebook through papermill in a kernel of its own, started on the simulated Mac
(``SimulatedMac.kernel_manager``), then the receipt and the report. Every gate runs, so
each stage's typed result is non-trivial: canaries with both Core ML controls, parity
with program and runtime candidates, hybrid WER with a public and a private clip,
compute plans. Each kernel pickles the report its notebook's audit call returned, so the
readers compare what :func:`verifylib.open_run` reads back with what each stage returned;
and the staging folder is copied after each stage, the prefixes the scenario rows start
their own stages from instead of a whole simulated audit of their own.

Tests must not modify the run (copy it with ``tests.helpers.forge.clone`` first).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from tests.simmac import Scenario, SimulatedMac
from verifylib.batch.audit import RunOutcome
from verifylib.batch.staging import STAGING
from verifylib.evidence import gates
from verifylib import params


@dataclass(frozen=True)
class PublishedRun:
    """The run directory, per stage the report its ``run`` returned, and its prefixes.

    ``prefixes[i]`` is a copy of the run directory after its first ``i`` stages (0: just
    initialized; 1-5: through stage ``STAGES[i - 1]``), from which the scenario rows run
    their own stages instead of a whole simulated audit of their own. ``outcome`` is what
    the audit's runner returned.
    """

    run_dir: Path
    reports: dict
    params: params.Params
    prefixes: dict
    outcome: RunOutcome


_MADE: dict[Path, PublishedRun] = {}


def run_params() -> params.Params:
    """The default parameters cut to what the readers and the scenario rows need.

    Three fixtures: ``jfk`` and ``weather`` public (the hostile-transcript and WER rows edit
    ``weather``), ``directions`` private. Two canary runs per side with short timeouts (a
    clean simulated run takes about a second; the hanging-runtime row waits them out). No
    fp16 variant (it adds time, not kinds of result).
    """
    data = yaml.safe_load(params.DEFAULT_PARAMETERS.read_text())
    data["name"] = "explore"
    data["fixtures"] = [f for f in data["fixtures"] if f["id"] in ("jfk", "weather", "directions")]
    data["canary"] = {"runs": 2, "timeout_s": 8, "first_run_timeout_s": 12}
    data["export"] = {"fp16": False}
    return params.validate(data, "explore parameters", params.PARAMETERS_DIR)


def simulated_published_run(base: Path) -> PublishedRun:
    """Make the run under ``base`` once per process (the session's base temp folder)."""
    import pickle
    import shutil

    from verifylib.batch.audit import run_one
    from verifylib.stages.context import init_run_dir

    base = Path(base)
    if base not in _MADE:
        p = run_params()
        # The empty prefix is made off the simulated Mac, as the rows have always started
        # from it; the published run records the simulated host it runs on.
        prefixes = {0: base / "explore-prefixes" / "p0"}
        init_run_dir(prefixes[0], p)
        kept = base / "explore-reports-returned"
        kept.mkdir()
        reports_root = base / "explore-reports"

        def copy_prefix(stage: str) -> None:
            i = gates.STAGES.index(stage) + 1
            if i < len(gates.STAGES):
                (staging,) = [d for d in (reports_root / p.name / STAGING).iterdir()
                              if d.is_dir()]
                prefixes[i] = base / "explore-prefixes" / f"p{i}"
                # As the stages left it, without the runner's executed notebooks.
                shutil.copytree(staging, prefixes[i], symlinks=True,
                                ignore=lambda d, _n: ["notebooks"] if Path(d) == staging else [])

        with SimulatedMac(Scenario(), base / "explore-simmac-state") as sim:
            outcome = run_one(p, reports_root, log=lambda _m: None, progress=False,
                              kernel_manager=sim.kernel_manager(keep_reports=kept),
                              on_stage_done=copy_prefix)
        reports = {stage: pickle.loads((kept / f"{stage}.pickle").read_bytes())
                   for stage in gates.STAGES}
        _MADE[base] = PublishedRun(outcome.run_dir, reports, p, prefixes, outcome)
    return _MADE[base]
