"""One published run on the simulated Mac, made once per test session, for the readers.

Every gate runs (the Core ML ones under ``tests/simmac``), so each stage's typed result is
non-trivial: canaries with both Core ML controls, parity with program and runtime
candidates of both variants, hybrid WER with a public and a private clip, compute plans.
The six stages run in this process, so their :class:`~verifylib.evidence.records.StageReport` objects
are kept for comparison with what :func:`verifylib.open_run` reads back; then the receipt
is built, which publishes the run (no notebooks or report: nothing here needs them).

Tests must not modify the run (copy it with ``tests.helpers.forge.clone`` first).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path

import yaml

from tests.simmac import Scenario, SimulatedMac
from verifylib.evidence import gates, receipt
from verifylib import params


@dataclass(frozen=True)
class PublishedRun:
    """The run directory and, per stage, the report its ``run`` returned."""

    run_dir: Path
    reports: dict


_MADE: dict[Path, PublishedRun] = {}


def run_params() -> params.Params:
    """The default parameters, cut to two fixtures (one public, one private) and two
    canary runs per side, without the fp16 variant (it adds time, not kinds of result)."""
    data = yaml.safe_load(params.DEFAULT_PARAMETERS.read_text())
    data["name"] = "explore"
    data["fixtures"] = [f for f in data["fixtures"] if f["id"] in ("jfk", "directions")]
    data["canary"] = {"runs": 2, "timeout_s": 60, "first_run_timeout_s": 120}
    data["export"] = {"fp16": False}
    return params.validate(data, "explore parameters", params.PARAMETERS_DIR)


def simulated_published_run(base: Path) -> PublishedRun:
    """Make the run under ``base`` once per process (the session's base temp folder)."""
    base = Path(base)
    if base not in _MADE:
        run_dir = base / "explore-run"
        p = run_params()
        reports = {}
        with SimulatedMac(Scenario(), base / "explore-simmac-state"):
            for stage in gates.STAGES:
                mod = importlib.import_module(f"verifylib.stages.{stage.split('_', 1)[1]}")
                reports[stage] = mod.run(p, run_dir)
        receipt.build_receipt(run_dir)
        _MADE[base] = PublishedRun(run_dir, reports)
    return _MADE[base]
