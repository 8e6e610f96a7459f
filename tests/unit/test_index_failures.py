"""Audits that ended ERROR without a run: their failure records and the index page.

Fast: no audit runs. The physical cases (a ``--jobs`` worker and a Ray worker that die)
are in ``tests/notebooks/test_jobs.py`` and ``tests/notebooks/test_ray.py``.
"""

from __future__ import annotations

from pathlib import Path

from verifylib import canonical
from verifylib.batch import local as executors, audit as orchestrate
from verifylib.views import report
from verifylib.batch.failures import FailedRun
from verifylib.evidence.gates import Verdict
from verifylib.params import load
from verifylib.evidence import failures as failure_records, layout

from tests.helpers import ROOT

HOSTILE = "<script>alert(1)</script>"
ESCAPED = "&lt;script&gt;alert(1)&lt;/script&gt;"


def _run(root: Path, name: str, run_id: str, verdict: str) -> orchestrate.RunOutcome:
    run_dir = root / name / run_id
    run_dir.mkdir(parents=True)
    canonical.write_json(run_dir / "receipt.json",
                         {"verdict": verdict, "gates": [{"status": "PASS"}]})
    return orchestrate.RunOutcome(name, run_dir, Verdict(verdict), run_dir / "report.html")


def _fail(root: Path, name: str, reason: str, monkeypatch, record_id: str) -> Path:
    monkeypatch.setattr(layout, "new_run_id", lambda: record_id)
    return failure_records.publish_failure(root, name=name, parameters=f"/p/{name}.yaml", reason=reason,
                                  executor={"kind": "local", "node": "host-1", "jobs": 2})


def test_a_failure_record_is_published_whole_and_never_replaced(tmp_path, monkeypatch):
    root = tmp_path / "reports"
    path = _fail(root, "m", "worker killed by SIGKILL", monkeypatch, "20990101T000000Z-0000000a")
    assert path == root / "m" / failure_records.FAILED / "20990101T000000Z-0000000a.json"
    assert canonical.read_json(path) == {
        "format": failure_records.FAILURE_FORMAT, "id": "20990101T000000Z-0000000a", "name": "m",
        "parameters": "/p/m.yaml", "status": "ERROR", "reason": "worker killed by SIGKILL",
        "executor": {"kind": "local", "node": "host-1", "jobs": 2},
        "time": "2099-01-01T00:00:00Z"}
    # The same id drawn again: the first record stays, the second gets another id.
    draws = iter(["20990101T000000Z-0000000a", "20990101T000000Z-0000000b"])
    monkeypatch.setattr(layout, "new_run_id", lambda: next(draws))
    second = failure_records.publish_failure(root, name="m", parameters="/p/m.yaml", reason="again",
                                    executor={"kind": "local", "node": None})
    assert second.name == "20990101T000000Z-0000000b.json"
    assert canonical.read_json(path)["reason"] == "worker killed by SIGKILL"
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name, second.name]
    # The run folder of the model holds no run: the records are out of the runs' way.
    assert [p.name for p in (root / "m").iterdir()] == [failure_records.FAILED]


def test_a_long_reason_is_cut(tmp_path):
    path = failure_records.publish_failure(tmp_path, name="m", parameters="p", reason="x" * 10_000,
                                  executor={"kind": "local", "node": None})
    assert len(canonical.read_json(path)["reason"]) == failure_records.MAX_REASON_CHARS


def test_index_lists_failures_beside_runs_by_time_and_escapes_them(tmp_path, monkeypatch):
    root = tmp_path / "reports"
    older = _run(root, "model-a", "20990101T000000Z-00000001", "INCOMPLETE")
    _fail(root, "model-a", f"worker killed by SIGKILL: {HOSTILE}", monkeypatch,
          "20990102T000000Z-00000002")
    later = _run(root, "model-a", "20990103T000000Z-00000003", "ADMISSIBLE")
    _fail(root, "model-b", "worker exit 1: RuntimeError: boom", monkeypatch,
          "20990104T000000Z-00000004")
    page = report.render_index([later], root).read_text()
    assert "<script" not in page.lower() and ESCAPED in page
    # model-a: its older run, the failure, its later run, in that order; model-b after.
    at = [page.index(s) for s in (f"<code>{older.run_dir.name}</code>",
                                  "20990102T000000Z-00000002.json\">failure record",
                                  f"<code>{later.run_dir.name}</code>",
                                  "20990104T000000Z-00000004.json\">failure record")]
    assert at == sorted(at)
    assert page.count('<td class="vl-ERROR"><b>ERROR</b></td>') == 2
    assert f"no run published: worker killed by SIGKILL: {ESCAPED}" in page
    assert "<td>2099-01-02T00:00:00Z</td>" in page
    assert "<small>local executor on host-1 · parameters /p/model-a.yaml" in page
    # A run's row: its date, its files one click away, its receipt's digest whole.
    assert "<td>2099-01-03 00:00 UTC<br>" in page
    assert ('<a href="model-a/20990103T000000Z-00000003/receipt.json">receipt</a>'
            in page)
    assert 'model-a/20990103T000000Z-00000003/report-full.html">with code</a>' in page
    # The later run does not hide the failure; the row names it.
    assert ("a later run of this model: <a href=\"model-a/20990103T000000Z-00000003/"
            "report.html\">") in page
    assert "no run published: worker exit 1: RuntimeError: boom" in page
    assert "no later run of this model" in page
    assert 'Worst verdict: <b class="vl-INCOMPLETE">INCOMPLETE</b>' in page
    assert "2 audit(s) ended without publishing a run (1 of them with no later run" in page
    assert "3 run(s)" not in page and "2 run(s), 2 failed audit(s) of 2 model(s)" in page


def test_index_of_failures_only_and_of_an_unreadable_record(tmp_path, monkeypatch):
    root = tmp_path / "reports"
    _fail(root, "model-a", "no node of the Ray cluster offers ['macos']", monkeypatch,
          "20990101T000000Z-00000001")
    broken = root / "model-b" / failure_records.FAILED / "20990101T000000Z-00000002.json"
    broken.parent.mkdir(parents=True)
    broken.write_text("{not json")
    # A record still being written (its staging name) is not read.
    (broken.parent / ".20990101T000000Z-00000003.json.x.staging").write_text("{")
    page = report.render_index([], root).read_text()
    assert "No run is published here." in page and "Worst verdict" not in page
    assert "no run published: no node of the Ray cluster offers [&#39;macos&#39;]" in page
    # Damage does not hide a failure: the record is listed as unreadable.
    assert "no run published: unreadable failure record:" in page
    assert "model-b/.failed/20990101T000000Z-00000002.json" in page
    assert "00000003" not in page


def test_failure_recorder_records_then_reports(tmp_path, monkeypatch):
    root = tmp_path / "reports"
    params = [load(ROOT / "parameters" / "tiny-en.yaml")]
    seen = []

    def on_outcome(out):
        # Called after the record is out and the index lists it.
        seen.append((out, (root / report.INDEX).read_text()))

    record = executors.failure_recorder(params, root, on_outcome, log=seen.append)
    fail = FailedRun("tiny-en", "worker killed by SIGKILL", "host-1",
                     executor={"kind": "local", "node": "host-1", "jobs": 2})
    record(fail)
    ((out, page),) = seen
    assert out is fail and fail.record is not None and fail.record.is_file()
    rec = canonical.read_json(fail.record)
    assert rec["parameters"] == str(ROOT / "parameters" / "tiny-en.yaml")
    assert rec["executor"] == {"kind": "local", "node": "host-1", "jobs": 2}
    assert "no run published: worker killed by SIGKILL" in page
    # A run outcome passes through untouched; no record for it.
    ok = _run(root, "tiny-en", "20990101T000000Z-00000001", "INCOMPLETE")
    record(ok)
    assert seen[-1][0] is ok and len(list(fail.record.parent.iterdir())) == 1


def test_a_record_that_cannot_be_written_does_not_stop_the_batch(tmp_path, monkeypatch):
    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(failure_records, "publish_failure", full_disk)
    lines, seen = [], []
    record = executors.failure_recorder([], tmp_path, seen.append, log=lines.append)
    record(FailedRun("tiny-en", "worker exit 1"))
    assert [o.name for o in seen] == ["tiny-en"] and seen[0].record is None
    assert lines == ["[tiny-en] failure record not written: No space left on device"]
