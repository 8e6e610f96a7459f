"""`verifylib run --executor ray`: audits as Ray tasks, runs returned, verified, published.
The cluster is a local one (``ray.init`` with this machine's cores and capabilities),
started once for the module; the batches run stage 01 only
(``verifylib.batch.executors.DEFAULT_STAGES`` narrowed, or ``stages=``): what is tested is
the executor, not the stages."""

from __future__ import annotations

import os
import signal
import socket
import threading
import time

import psutil
import pytest

from tests.helpers.batches import published_dirs, tiny_en_params
from verifylib import canonical
from verifylib.batch import executors as batch_executors
from verifylib.batch import ray as ray_executor
from verifylib.batch.audit import RunOutcome
from verifylib.batch.failures import FailedRun
from verifylib.batch.run_stream import StreamHeader
from verifylib.batch.signals import Interrupted, interrupts_raise
from verifylib.cli import main as cli
from verifylib.evidence.receipt import verify
from verifylib.params import load
from verifylib.views import report


# ----------------------------------------------------------------------------- local cluster

@pytest.fixture(scope="module")
def ray_cluster():
    """A local Ray cluster of this machine: its cores, its capabilities as resources."""
    import ray
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    ray.init(address="local", num_cpus=os.cpu_count(),
             resources=ray_executor.node_resources(), include_dashboard=False,
             log_to_driver=True)
    for s, h in saved.items():  # ray.init's SIGTERM handler would outlive the module
        signal.signal(s, h)
    yield ray
    ray.shutdown()


@pytest.mark.physical
@pytest.mark.notebook
def test_ray_batch_of_two_models(ray_cluster, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(batch_executors, "DEFAULT_STAGES", ("01_build",))
    a, b = tiny_en_params(tmp_path, "model-a"), tiny_en_params(tmp_path, "model-b")
    reports = tmp_path / "reports"
    code = cli.main(["run", str(a), str(b), "--executor", "ray", "--reports", str(reports)])
    out = capsys.readouterr()
    assert code == 1, out  # REJECTED: the stages left out have no record
    assert "worst verdict: REJECTED" in out.out.splitlines()
    assert ray_cluster.is_initialized()  # a connection the batch found is left alone
    node_id = ray_cluster.get_runtime_context().get_node_id()
    runs = {}
    for name in ("model-a", "model-b"):
        (run_dir,) = published_dirs(reports, name)
        runs[name] = run_dir
        assert not (reports / name / ".staging").exists()
        res = verify(run_dir)
        assert res.ok and res.verdict == "REJECTED", res.problems
        run = canonical.read_json(run_dir / "run.json")
        assert run["executor"] == {"kind": "ray", "node": socket.gethostname(),
                                   "ray_node_id": node_id}
        assert (run_dir / "report.html").is_file()
        # The node's copy went back to the driver and was deleted there.
        assert not (ray_executor.default_node_root() / name).exists()
    index = (reports / "index.html").read_text()
    for run_dir in runs.values():
        assert f"{run_dir.relative_to(reports).as_posix()}/report.html" in index


@pytest.mark.notebook
def test_require_admissible_needs_a_mac_node(ray_cluster, tmp_path, capsys):
    reports = tmp_path / "reports"
    code = cli.main(["run", str(tiny_en_params(tmp_path, "model-a")),
                     str(tiny_en_params(tmp_path, "model-b")), "--executor", "ray",
                     "--require", "admissible", "--reports", str(reports)])
    out = capsys.readouterr().out
    assert code == cli.EXIT_NO_RUN, out  # no run published: 3, never REJECTED's 1
    for name in ("model-a", "model-b"):
        assert (f"{name}: ERROR, no run published: no node of the Ray cluster offers "
                "['macos', 'macos_14_4', 'macos_xcode']") in out
    assert "ERROR: no run published for model-a, model-b" in out
    # Neither has a receipt; both are on the index through their failure records.
    index = (reports / "index.html").read_text()
    assert "No run is published here." in index
    assert index.count("no run published: no node of the Ray cluster offers "
                       "[&#39;macos&#39;, &#39;macos_14_4&#39;, &#39;macos_xcode&#39;]") == 2
    for name in ("model-a", "model-b"):
        (record,) = (reports / name / ".failed").iterdir()
        rec = canonical.read_json(record)
        assert rec["executor"] == {"kind": "ray", "node": None}
        assert rec["parameters"] == str(tmp_path / f"{name}.yaml")


@pytest.mark.physical
@pytest.mark.notebook
def test_a_dead_worker_is_an_error_and_the_other_model_finishes(ray_cluster, tmp_path):
    def flaky(spec):
        # model-a's worker dies as an OOM-killed one would; model-b is audited for real.
        if spec["params"]["name"] == "model-a":
            os._exit(1)
        yield from ray_executor.audit_task(spec)

    params = [load(tiny_en_params(tmp_path, n)) for n in ("model-a", "model-b")]
    reports = tmp_path / "reports"
    outcomes = ray_executor.run_batch_ray(
        params, reports, stages=("01_build",), node_root=tmp_path / "node",
        log=lambda line: None, task=ray_cluster.remote(flaky))
    failed, done = outcomes
    assert isinstance(failed, FailedRun) and failed.name == "model-a"
    assert "WorkerCrashedError" in failed.reason, failed.reason
    assert isinstance(done, RunOutcome) and verify(done.run_dir).ok
    assert published_dirs(reports, "model-a") == []
    assert list((tmp_path / "node").rglob("*")) == []
    # The dead worker's model is on the index, marked ERROR with the reason.
    rec = canonical.read_json(failed.record)
    assert rec["reason"] == failed.reason and rec["executor"]["kind"] == "ray"
    index = report.render_index([done], reports).read_text()
    assert '<tr><td>model-a</td><td>' in index and '<td class="vl-ERROR"><b>ERROR</b></td>' in index
    assert "no run published: the audit raised WorkerCrashedError" in index \
        or "no run published: WorkerCrashedError" in index, index
    assert f"{done.run_dir.relative_to(reports).as_posix()}/report.html" in index


@pytest.mark.physical
@pytest.mark.notebook
def test_a_run_streams_back_in_small_chunks_and_a_damaged_one_is_refused(ray_cluster,
                                                                         tmp_path):
    chunk = 32 * 1024

    def tampering(spec):
        # model-b's node flips one byte of its third chunk on the way: the driver must
        # see the stream disagree with its trailer and publish nothing.
        for i, item in enumerate(ray_executor.audit_task(spec)):
            if spec["params"]["name"] == "model-b" and i == 3:
                assert len(item) == chunk
                item = bytes([item[0] ^ 1]) + item[1:]
            yield item

    params = [load(tiny_en_params(tmp_path, n)) for n in ("model-a", "model-b")]
    reports = tmp_path / "reports"
    lines: list[str] = []
    done, refused = ray_executor.run_batch_ray(
        params, reports, stages=("01_build",), node_root=tmp_path / "node",
        log=lines.append, task=ray_cluster.remote(tampering), chunk_bytes=chunk)
    assert isinstance(done, RunOutcome) and verify(done.run_dir).ok
    size = sum(p.stat().st_size for p in done.run_dir.rglob("*") if p.is_file())
    (received,) = [l for l in lines if l.startswith("[model-a] received ")]
    chunks = int(received.split(" in ")[1].split(" chunk")[0])
    assert chunks >= size // chunk > 3, received
    assert isinstance(refused, FailedRun), refused
    assert refused.reason.startswith("model-b: the returned run arrived damaged"), refused.reason
    assert refused.node == socket.gethostname()
    assert published_dirs(reports, "model-b") == []
    assert not (reports / "model-b" / ".staging").exists()
    assert list((tmp_path / "node").rglob("*")) == []
    assert canonical.read_json(refused.record)["executor"]["ray_node_id"] == \
        ray_cluster.get_runtime_context().get_node_id()


@pytest.mark.parametrize("how", ["dies", "stops"])
def test_a_stream_cut_short_is_an_error_and_leaves_nothing(ray_cluster, tmp_path, how):
    """No audit: a stand-in task announces a run, sends one chunk, then its worker dies
    (or its stream just ends)."""
    reports = tmp_path / "reports"

    def cut(spec):
        yield StreamHeader(spec["params"]["name"], "20990101T000000Z-0000abcd",
                           "INCOMPLETE", {"kind": "ray", "node": "n1"}, 10 * 1024,
                           1024).to_json()
        yield b"\0" * 1024
        if how == "dies":
            # Once the driver has the header and its staging file (items not yet
            # delivered when a worker dies are lost with it).
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and \
                    not list(reports.glob("model-a/.staging/*/run.tar")):
                time.sleep(0.05)
            os._exit(1)

    params = [load(tiny_en_params(tmp_path, "model-a"))]
    (failed,) = ray_executor.run_batch_ray(params, reports, stages=("01_build",),
                                           log=lambda line: None, task=ray_cluster.remote(cut),
                                           chunk_bytes=1024)
    assert isinstance(failed, FailedRun) and failed.node == "n1"
    if how == "dies":
        assert "WorkerCrashedError" in failed.reason, failed.reason
    else:
        assert failed.reason == ("model-a: the task's stream ended before the whole run "
                                 "arrived (1 chunks, 1024 of 10240 bytes)")
    # The received chunk's staging file is gone (and the index's lock file, removed by its
    # holder); the failure record is all that is left.
    assert sorted(p.relative_to(reports).as_posix() for p in reports.rglob("*")
                  if p.is_file()) == ["index.html",
                                      failed.record.relative_to(reports).as_posix()]
    assert canonical.read_json(failed.record)["executor"] == {"kind": "ray", "node": "n1"}


def _audit_processes() -> list[psutil.Process]:
    """The Ray workers running a verifylib audit task, and everything they started."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        if "verifylib-audit-" in " ".join(proc.info["cmdline"] or []):
            found.append(proc)
            try:
                found += proc.children(recursive=True)
            except psutil.NoSuchProcess:
                pass
    return found


def _is_kernel(proc: psutil.Process) -> bool:
    try:
        return "ipykernel" in " ".join(proc.cmdline())
    except psutil.Error:
        return False


@pytest.mark.physical
@pytest.mark.notebook
def test_interrupt_cancels_every_task(ray_cluster, tmp_path):
    # The signal comes as soon as both tasks' stage kernels are seen, not after a fixed
    # pause: on a warm cache a stage 01 kernel lives only seconds. On a loaded machine the
    # second task's worker can start after the first task has already published (seen
    # once in CI): that attempt interrupts nothing, so it is tried again in fresh folders
    # (at most three times), and no signal is ever sent once the batch has returned (a
    # late SIGINT would reach whatever this worker runs next).
    for attempt in range(3):
        base = tmp_path / f"attempt{attempt}"
        base.mkdir()
        params = [load(tiny_en_params(base, n)) for n in ("model-a", "model-b")]
        reports, node_root = base / "reports", base / "node"
        kernels: list[psutil.Process] = []
        done, gate = threading.Event(), threading.Lock()

        def interrupt_once_both_run():
            while not done.is_set():
                if len([p for p in node_root.glob("*/.staging/*") if p.is_dir()]) >= 2:
                    running = [p for p in _audit_processes() if _is_kernel(p)]
                    if len(running) >= 2:
                        with gate:
                            if not done.is_set():
                                kernels.extend(running)
                                os.kill(os.getpid(), signal.SIGINT)
                        return
                time.sleep(0.05)

        t0 = time.monotonic()
        watcher = threading.Thread(target=interrupt_once_both_run, daemon=True)
        watcher.start()
        try:
            with interrupts_raise():
                try:
                    ray_executor.run_batch_ray(params, reports, stages=("01_build",),
                                               node_root=node_root, log=lambda line: None)
                finally:
                    with gate:
                        done.set()
        except Interrupted:
            break
        finally:
            done.set()
            watcher.join()
        assert not kernels, "the signal was sent but the batch was not interrupted"
    else:
        pytest.fail("in three attempts the two tasks' stage kernels never ran at once")
    print(f"interrupted after {time.monotonic() - t0:.1f} s")
    assert kernels, "no stage kernel was running when the signal came"
    # Every task stopped its kernel and removed its staging before the driver went on.
    gone, alive = psutil.wait_procs(kernels, timeout=10)
    assert not alive, [p.cmdline() for p in alive]
    assert list(node_root.rglob("*")) == []
    assert published_dirs(reports, "model-a") == published_dirs(reports, "model-b") == []
