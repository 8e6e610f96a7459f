"""A staged run that does not verify is never published (issue 35 part 4).

Fast: the audit runs no stage (every gate is then ERROR, the run REJECTED, yet a run that
verifies), so the receipt, the reports and the real ``verify`` run on a real staged run
directory in a few seconds (one kernel started and stopped, no stage notebook). The staged
run is changed after its receipt was written, as a bug or a disk fault could.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from verifylib import canonical
from verifylib.batch import audit, local
from verifylib.batch.failures import FailedRun
from verifylib.evidence import failures as failure_records
from verifylib.evidence.receipt import verify
from verifylib.params import load
from verifylib.views import report

from tests.helpers import ROOT


def _tamper_after_the_receipt(monkeypatch) -> None:
    render = report.render

    def render_then_tamper(run_dir, stages):
        run = canonical.read_json(Path(run_dir) / "run.json")
        run["name"] = "someone-else"
        canonical.write_json(Path(run_dir) / "run.json", run)
        return render(run_dir, stages)

    monkeypatch.setattr(report, "render", render_then_tamper)


def _published(reports: Path) -> list[Path]:
    folder = reports / "tiny-en"
    return [p for p in folder.iterdir() if not p.name.startswith(".")] if folder.is_dir() else []


def test_a_staged_run_that_verifies_is_published(tmp_path):
    out = audit.run_one(load(ROOT / "parameters" / "tiny-en.yaml"), tmp_path / "reports",
                        stages=(), log=lambda s: None, progress=False)
    assert _published(tmp_path / "reports") == [out.run_dir]
    assert verify(out.run_dir).ok


def test_a_staged_run_that_does_not_verify_is_not_published(tmp_path, monkeypatch):
    _tamper_after_the_receipt(monkeypatch)
    reports = tmp_path / "reports"
    with pytest.raises(audit.RunNotVerified) as err:
        audit.run_one(load(ROOT / "parameters" / "tiny-en.yaml"), reports, stages=(),
                      log=lambda s: None, progress=False)
    assert "does not verify, so it was not published" in str(err.value)
    assert "run.json" in str(err.value)
    assert _published(reports) == []
    # Nothing staged is left either: the folder and its owner record are gone.
    staging = reports / "tiny-en" / ".staging"
    assert not staging.exists() or list(staging.iterdir()) == []


def test_the_batch_records_the_model_as_error_with_the_reason(tmp_path, monkeypatch):
    _tamper_after_the_receipt(monkeypatch)
    reports = tmp_path / "reports"
    outcomes: list = []
    (out,) = local.run_local([load(ROOT / "parameters" / "tiny-en.yaml")], reports,
                             stages=(), log=lambda s: None, on_outcome=outcomes.append,
                             progress=False)
    assert isinstance(out, FailedRun)
    assert out.reason.startswith("RunNotVerified: tiny-en: run ")
    assert _published(reports) == []
    (record,) = (reports / "tiny-en" / failure_records.FAILED).iterdir()
    rec = canonical.read_json(record)
    assert rec["status"] == "ERROR" and rec["reason"] == out.reason
