"""`verifylib run` one model after another (no ``--jobs``) when a model's audit raises.

Fast: ``run_one`` is replaced, so no stage runs. The model that raises ends ERROR with
a failure record and is on the index, as with ``--jobs`` workers and Ray tasks
(``tests/notebooks/test_jobs.py``, ``tests/notebooks/test_ray.py``); the other models still run, and the command prints
the index path even when no model published a run.
"""

from __future__ import annotations

import signal
import socket
from pathlib import Path

import pytest
import yaml

from verifylib import canonical
from verifylib.cli import main as cli
from verifylib.batch import local as executors, audit as orchestrate, inputs
from verifylib.views import report
from verifylib.evidence.gates import Verdict
from verifylib.batch import executors as batch_executors
from verifylib.evidence import failures as failure_records

from tests.helpers import ROOT

HOSTILE = "<b>no kernel</b>"
ESCAPED = "&lt;b&gt;no kernel&lt;/b&gt;"


def _params(folder: Path, name: str) -> Path:
    data = yaml.safe_load((ROOT / "parameters" / "tiny-en.yaml").read_text())
    data["name"] = name
    data["fixtures"] = data["fixtures"][:1]  # jfk, a shipped fixture: no path to resolve
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _fake_run_one(fails: set[str], calls: list[str]):
    """A ``run_one`` that raises for the models in ``fails`` and publishes a bare run
    (a receipt only, which is all the index reads) for the others."""

    def run_one(params, reports_root, **kwargs):  # noqa: ARG001 - run_one's signature
        calls.append(params.name)
        if params.name in fails:
            raise RuntimeError(f"kernel did not start: {HOSTILE}")
        run_dir = Path(reports_root) / params.name / "20990101T000000Z-00000001"
        run_dir.mkdir(parents=True)
        canonical.write_json(run_dir / "receipt.json",
                             {"verdict": "INCOMPLETE", "gates": [{"status": "PASS"}]})
        return orchestrate.RunOutcome(params.name, run_dir, Verdict.INCOMPLETE,
                                      run_dir / "report.html")

    return run_one


@pytest.mark.parametrize("jobs", [[], ["--jobs", "1"]])
def test_a_model_that_raises_gets_a_failure_record_and_the_next_one_runs(
        tmp_path, monkeypatch, capsys, jobs):
    calls: list[str] = []
    monkeypatch.setattr(executors, "run_one", _fake_run_one({"model-a"}, calls))
    reports = tmp_path / "reports"
    code = cli.main(["run", str(_params(tmp_path, "model-a")), str(_params(tmp_path, "model-b")),
                     "--reports", str(reports), *jobs])
    out = capsys.readouterr()
    assert code == cli.EXIT_NO_RUN == 3, out
    assert calls == ["model-a", "model-b"]
    lines = out.out.splitlines()
    assert (f"model-a: ERROR on {socket.gethostname()}, no run published: "
            f"RuntimeError: kernel did not start: {HOSTILE}") in lines
    assert any(x.startswith("model-b: verdict INCOMPLETE: ") for x in lines)
    assert "worst verdict: ERROR" in lines
    assert f"  index:   {reports / report.INDEX}" in lines
    assert "ERROR: no run published for model-a" in lines
    assert "Traceback" in out.err and "RuntimeError" in out.err
    (record,) = (reports / "model-a" / failure_records.FAILED).iterdir()
    rec = canonical.read_json(record)
    assert rec["name"] == "model-a" and rec["status"] == "ERROR"
    assert rec["reason"] == f"RuntimeError: kernel did not start: {HOSTILE}"
    assert rec["parameters"] == str(tmp_path / "model-a.yaml")
    assert rec["executor"] == {"kind": "local", "node": socket.gethostname()}
    assert not (reports / "model-b" / failure_records.FAILED).exists()
    index = (reports / report.INDEX).read_text()
    assert "<b>no kernel" not in index
    assert '<td class="vl-ERROR"><b>ERROR</b></td>' in index
    assert f"no run published: RuntimeError: kernel did not start: {ESCAPED}" in index
    assert f"model-a/{failure_records.FAILED}/{record.name}" in index
    assert "model-b/20990101T000000Z-00000001/report.html" in index


def test_when_every_model_fails_the_index_is_still_printed(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(executors, "run_one", _fake_run_one({"model-a", "model-b"}, []))
    reports = tmp_path / "reports"
    code = cli.main(["run", str(_params(tmp_path, "model-a")), str(_params(tmp_path, "model-b")),
                     "--reports", str(reports)])
    out = capsys.readouterr().out
    assert code == cli.EXIT_NO_RUN == 3, out
    lines = out.splitlines()
    assert "worst verdict: ERROR" in lines
    assert f"  index:   {reports / report.INDEX}" in lines
    assert "ERROR: no run published for model-a, model-b" in lines
    index = (reports / report.INDEX).read_text()
    assert "No run is published here." in index
    assert index.count('<td class="vl-ERROR"><b>ERROR</b></td>') == 2
    for name in ("model-a", "model-b"):
        assert len(list((reports / name / failure_records.FAILED).iterdir())) == 1


def test_a_single_failed_model_prints_its_index(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(executors, "run_one", _fake_run_one({"model-a"}, []))
    reports = tmp_path / "reports"
    code = cli.main(["run", str(_params(tmp_path, "model-a")), "--reports", str(reports)])
    lines = capsys.readouterr().out.splitlines()
    assert code == cli.EXIT_NO_RUN
    assert "worst verdict: ERROR" not in lines  # one model: its own line says it
    assert f"  index:   {reports / report.INDEX}" in lines


def test_no_index_path_when_no_index_could_be_written(tmp_path, monkeypatch, capsys):
    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(executors, "run_one", _fake_run_one({"model-a"}, []))
    monkeypatch.setattr(failure_records, "publish_failure", full_disk)
    reports = tmp_path / "reports"
    code = cli.main(["run", str(_params(tmp_path, "model-a")), "--reports", str(reports)])
    lines = capsys.readouterr().out.splitlines()
    assert code == cli.EXIT_NO_RUN
    assert "[model-a] failure record not written: No space left on device" in lines
    assert not any(line.startswith("  index:") for line in lines)


def test_an_error_after_an_interrupt_stops_the_batch_unrecorded(tmp_path, monkeypatch):
    # An interrupt whose cleanup raised something else is still an interrupt: the batch
    # stops there, and no failure record blames the model.
    calls: list[str] = []
    monkeypatch.setattr(executors, "run_one", _fake_run_one({"model-a"}, calls))
    monkeypatch.setattr(executors, "interrupt_pending", lambda: signal.SIGTERM)
    params = inputs.load_all([_params(tmp_path, "model-a"), _params(tmp_path, "model-b")])
    reports = tmp_path / "reports"
    with pytest.raises(orchestrate.Interrupted) as info:
        batch_executors.run_batch(params, reports, log=lambda line: None)
    assert info.value.signum == signal.SIGTERM
    assert calls == ["model-a"]
    assert not (reports / "model-a" / failure_records.FAILED).exists()
