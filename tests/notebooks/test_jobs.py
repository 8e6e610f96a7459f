"""`verifylib run --jobs N`: several models at once on this host, one worker process each.

The batches run stage 01 only (``verifylib.batch.executors.DEFAULT_STAGES`` narrowed): what is tested is
the batch (workers, one shared build, prefixed progress, publication, index, ERROR
outcomes, interrupts), not the stages. A run of stage 01 alone is REJECTED (the other
stages' gates have no record), and still verifies.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from verifylib import canonical
from verifylib.cli import main as cli
from verifylib.batch import local as executors
from verifylib.batch import executors as batch_executors
from verifylib.views import report
from verifylib.cli.main import EXIT_INTERRUPTED, EXIT_TERMINATED
from verifylib.batch.failures import FailedRun
from verifylib.batch.audit import RunOutcome
from verifylib.params import load
from verifylib.evidence.receipt import verify

from tests.helpers.batches import published_dirs, tiny_en_params

pytestmark = [pytest.mark.physical, pytest.mark.notebook]


def _params(folder: Path, name: str) -> Path:
    """tiny-en.yaml with jfk only (this test is about the batch) and three canary runs."""
    return tiny_en_params(folder, name, **{"canary.runs": 3})


def test_jobs_two_models_at_once_share_one_build(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(batch_executors, "DEFAULT_STAGES", ("01_build",))
    a, b = _params(tmp_path, "model-a"), _params(tmp_path, "model-b")
    reports = tmp_path / "reports"
    code = cli.main(["run", str(a), str(b), "--jobs", "2", "--reports", str(reports)])
    out = capsys.readouterr()
    assert code == 1, out  # REJECTED: the stages left out have no record
    lines = out.out.splitlines()
    assert "worst verdict: REJECTED" in lines
    for name in ("model-a", "model-b"):
        assert f"[{name}] [1/1] {name}: stage 01_build" in lines, out.out
    # Every progress line of a worker carries its model's name.
    assert all(l.startswith(("[model-a] ", "[model-b] ", "model-", "  ", "worst verdict"))
               for l in lines), out.out
    # The two share their runtime: model-b started once model-a's stage 01 had ended, so
    # the build happened once and model-b found it in the cache.
    a_built = next(i for i, l in enumerate(lines)
                   if l.startswith("[model-a]  ") and "build.ggml=" in l)
    b_start = lines.index("[model-b] [1/1] model-b: stage 01_build")
    assert a_built < b_start
    shas = set()
    runs = {}
    for name in ("model-a", "model-b"):
        (run_dir,) = published_dirs(reports, name)
        runs[name] = run_dir
        assert not (reports / name / ".staging").exists()
        res = verify(run_dir)
        assert res.ok and res.verdict == "REJECTED", res.problems
        run = canonical.read_json(run_dir / "run.json")
        assert run["executor"] == {"kind": "local", "jobs": 2, "node": socket.gethostname()}
        build = canonical.read_json(run_dir / "evidence" / "01_build" / "build.json")
        shas.add(build["sha256"])
    assert canonical.read_json(runs["model-b"] / "evidence" / "01_build" / "build.json")[
        "cached"] is True
    assert len(shas) == 1
    index = (reports / "index.html").read_text()
    for name, run_dir in runs.items():
        assert f"{run_dir.relative_to(reports).as_posix()}/report.html" in index


# A worker that dies at once for model-a (by SIGKILL, as the OOM killer would), and is
# the real worker for every other model.
DYING_WORKER = """
import io, json, os, signal, sys
data = sys.stdin.buffer.read()
if json.loads(data)["params"]["name"] == "model-a":
    os.kill(os.getpid(), signal.SIGKILL)
sys.stdin = io.TextIOWrapper(io.BytesIO(data))
from verifylib.batch.local import _worker_main
sys.exit(_worker_main(sys.argv[1:]))
"""


def test_a_worker_that_dies_is_an_error_and_the_other_model_finishes(tmp_path, monkeypatch):
    script = tmp_path / "dying_worker.py"
    script.write_text(DYING_WORKER)
    monkeypatch.setattr(executors, "worker_command", lambda: [sys.executable, str(script)])
    params = [load(_params(tmp_path, n)) for n in ("model-a", "model-b")]
    reports = tmp_path / "reports"
    lines: list[str] = []
    seen: list = []
    outcomes = batch_executors.run_batch(params, reports, jobs=2, stages=("01_build",),
                                   log=lines.append, on_outcome=seen.append)
    failed, done = outcomes
    # model-a leads the shared build and died before it: model-b was let go and built.
    assert isinstance(failed, FailedRun) and failed.name == "model-a"
    assert failed.reason.startswith("worker killed by SIGKILL"), failed.reason
    assert failed.node == socket.gethostname()
    assert isinstance(done, RunOutcome) and done.name == "model-b"
    assert verify(done.run_dir).ok
    assert [o.name for o in seen] == ["model-a", "model-b"]
    assert published_dirs(reports, "model-a") == []
    assert "[model-b] [1/1] model-b: stage 01_build" in lines
    # No receipt lists model-a: its failure record does, and the index shows it at once.
    assert failed.record is not None and failed.record.parent == reports / "model-a" / ".failed"
    rec = canonical.read_json(failed.record)
    assert rec["name"] == "model-a" and rec["status"] == "ERROR"
    assert rec["reason"] == failed.reason and rec["parameters"] == str(tmp_path / "model-a.yaml")
    assert rec["executor"] == {"kind": "local", "jobs": 2, "node": socket.gethostname()}
    index = (reports / "index.html").read_text()
    assert f"no run published: {failed.reason}" in index
    assert '<tr><td>model-a</td><td>' in index and '<td class="vl-ERROR"><b>ERROR</b></td>' in index
    # The rebuild at the end of `verifylib run` keeps it beside model-b's run.
    index = report.render_index([done], reports).read_text()
    assert f"no run published: {failed.reason}" in index
    assert f"{done.run_dir.relative_to(reports).as_posix()}/report.html" in index
    assert "1 run(s), 1 failed audit(s) of 2 model(s)" in index


def test_batch_options_are_checked_before_any_work(tmp_path, capsys):
    a = _params(tmp_path, "model-a")
    reports = tmp_path / "reports"
    for argv, words in (
            (["--jobs", "0"], "--jobs must be a positive integer"),
            (["--address", "auto"], "--address needs --executor ray"),
            (["--executor", "ray", "--jobs", "2"], "--jobs is for the local executor")):
        assert cli.main(["run", str(a), "--reports", str(reports), *argv]) == 2
        assert words in capsys.readouterr().err
    assert not reports.exists()
    with pytest.raises(batch_executors.BatchOptionInvalid):
        batch_executors.check_stages(("02_export", "01_build"))
    with pytest.raises(batch_executors.BatchOptionInvalid):
        batch_executors.check_stages(("01_build", "nope"))


def _descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


_ALL_BLOCKED = int("fffffffe7ffbfeff", 16)
"""glibc's ``sigfillset`` as the kernel reports it: all but SIGKILL, SIGSTOP and the two
signals glibc keeps for itself (the mask of a child between vfork and exec)."""


def _blocked_after_spawn(pid: int) -> int | None:
    """The signal mask a process runs with (None once it is gone).

    A child caught between its fork and its exec has every signal blocked (CPython's
    subprocess blocks them around vfork and the child restores the mask just before exec):
    seen once as a kernel being started at the moment of the check. Such a mask is read
    again until the exec is done; a mask that stays is the process's own.
    """
    status = Path(f"/proc/{pid}/status")
    blocked = None
    for _ in range(50):
        try:
            text = status.read_text()
        except OSError:
            return None
        blocked = int(next(l.split()[1] for l in text.splitlines()
                           if l.startswith("SigBlk:")), 16)
        if blocked != _ALL_BLOCKED:
            return blocked
        time.sleep(0.1)
    return blocked


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, EXIT_INTERRUPTED),
                                       (signal.SIGTERM, EXIT_TERMINATED)],
                         ids=["SIGINT", "SIGTERM"])
def test_interrupted_jobs_stop_every_worker_and_publish_nothing(tmp_path, sig, code):
    a, b = _params(tmp_path, "model-a"), _params(tmp_path, "model-b")
    reports = tmp_path / "reports"
    err_path = tmp_path / "stderr.txt"
    lines: list[str] = []
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    with open(err_path, "w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "verifylib", "run", str(a), str(b), "--jobs", "2",
             "--reports", str(reports)],
            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=err, text=True)
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
    reader.start()
    try:
        # Both workers running: model-b starts once model-a's stage 01 has ended.
        deadline = time.monotonic() + 300
        while not any(l.startswith("[model-b] [1/6]") for l in lines):
            assert proc.poll() is None, f"exited early: {proc.returncode}, {lines}"
            assert time.monotonic() < deadline, f"model-b never started: {lines}"
            time.sleep(0.1)
        time.sleep(1.5)
        started = _descendants(proc.pid)
        workers = [p for p in started if "verifylib.batch.local" in " ".join(p.cmdline())]
        assert len(workers) == 2
        # A worker must be able to receive the signal the driver forwards: not blocked
        # in it (a child inherits its parent's mask) nor in the kernels it starts.
        for p in started:
            blocked = _blocked_after_spawn(p.pid)
            if blocked is not None:
                assert not blocked & (1 << (signal.SIGINT - 1) | 1 << (signal.SIGTERM - 1)), \
                    (p.cmdline(), hex(blocked))
        t0 = time.monotonic()
        proc.send_signal(sig)
        proc.wait(timeout=120)
        stopped = time.monotonic() - t0
        reader.join(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
        proc.stdout.close()
    stderr = err_path.read_text()
    assert proc.returncode == code, (stderr, lines)
    assert stderr == "interrupted; nothing published\n", stderr
    # Every worker stopped on the signal, not when the grace period ran out.
    assert stopped < executors.STOP_GRACE_SECONDS / 2, stopped
    for name in ("model-a", "model-b"):
        left = sorted(str(p.relative_to(reports)) for p in (reports / name).rglob("*")) \
            if (reports / name).exists() else []
        assert left == [], f"left behind: {left}"
    assert not (reports / "index.html").exists()
    gone, alive = psutil.wait_procs(started, timeout=10)
    alive = [p for p in alive if p.status() != psutil.STATUS_ZOMBIE]
    for p in alive:
        p.kill()
    assert not alive, f"still running: {[(p.pid, p.cmdline()) for p in alive]}"
