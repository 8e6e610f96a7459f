"""One published run on the simulated Mac, made once per test session, for the readers.

Every gate runs (the Core ML ones under ``tests/simmac``), so each stage's typed result is
non-trivial: canaries with both Core ML controls, parity with program and runtime
candidates of both variants, hybrid WER with a public and a private clip, compute plans.
The six stages run in this process, so their
:class:`~verifylib.evidence.stage_report.StageReport` objects are kept for comparison with
what :func:`verifylib.open_run` reads back; then the receipt is built, which publishes the
run (no notebooks or report: nothing here needs them).

Tests must not modify the run (copy it with ``tests.helpers.forge.clone`` first).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path

import yaml

from tests.helpers.same_numbers import reusing_numbers
from tests.simmac import Scenario, SimulatedMac
from verifylib.evidence import gates, receipt
from verifylib import params


@dataclass(frozen=True)
class PublishedRun:
    """The run directory, per stage the report its ``run`` returned, and its prefixes.

    ``prefixes[i]`` is a copy of the run directory after its first ``i`` stages (0: just
    initialized; 1-5: through stage ``STAGES[i - 1]``), from which the scenario rows run
    their own stages instead of a whole simulated audit of their own.
    """

    run_dir: Path
    reports: dict
    params: params.Params
    prefixes: dict


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
    import shutil

    from verifylib.stages.context import init_run_dir

    base = Path(base)
    if base not in _MADE:
        run_dir = base / "explore-run"
        p = run_params()
        # The empty prefix is made off the simulated Mac, as the rows have always started
        # from it; the published run records the simulated host it runs on.
        prefixes = {0: base / "explore-prefixes" / "p0"}
        init_run_dir(prefixes[0], p)
        reports = {}
        # Under the numerics memo: the scenario rows that start from its prefixes convert,
        # measure and transcribe the same bytes again (tests/helpers/same_numbers.py).
        with reusing_numbers(), SimulatedMac(Scenario(), base / "explore-simmac-state"):
            init_run_dir(run_dir, p)
            for i, stage in enumerate(gates.STAGES, 1):
                mod = importlib.import_module(f"verifylib.stages.{stage.split('_', 1)[1]}")
                reports[stage] = mod.run(p, run_dir)
                if i < len(gates.STAGES):
                    prefixes[i] = base / "explore-prefixes" / f"p{i}"
                    shutil.copytree(run_dir, prefixes[i], symlinks=True)
        receipt.build_receipt(run_dir)
        _MADE[base] = PublishedRun(run_dir, reports, p, prefixes)
    return _MADE[base]
