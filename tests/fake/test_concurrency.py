"""Concurrent audits on one cache and one reports folder, the pieces on cold, private caches:
the cache lock lets exactly one of two processes produce an entry while the other waits,
says whom it waits for, and reuses the result; the real build, work-tree and source
producers go through it; run ids cannot clash; the index page lists every published run.
Two real simultaneous audits are in tests/notebooks/test_concurrency.py."""

from __future__ import annotations

import multiprocessing
import os
import shutil
import threading
import time
from pathlib import Path

import pytest

from verifylib.whispercpp import build, cmake_steps, source
from verifylib import canonical, locks
from verifylib.batch import audit as orchestrate
from verifylib.views import report
from verifylib.evidence.gates import Verdict
from verifylib.whispercpp.source.patch import check_patch_exact, prepare_patched_tree
from verifylib.evidence import layout
from verifylib.batch import staging as batch_staging

from tests.helpers.source_synth import make_tar

KEY = "ab" * 32


# ----------------------------------------------------------------------------- the lock

def _produce_in_process(cache: str, barrier, results) -> None:
    """One process's call of the locked producer: the stand-in producer sleeps while it
    holds the lock, so the other process arrives while the entry is still cold."""
    cache_dir = Path(cache)
    entry = cache_dir / "entries" / KEY
    lines: list[str] = []

    def check():
        data = entry / "data.bin"
        meta = entry / "meta.json"
        if not meta.is_file():
            return None
        recorded = canonical.read_json(meta)["sha256"]
        return ("cached", recorded) if canonical.sha256_file(data) == recorded else None

    def produce():
        with open(cache_dir / "producers.log", "a") as fh:
            fh.write(f"{os.getpid()}\n")
        time.sleep(1.5)
        staging = cache_dir / "entries" / f".staging-{os.getpid()}"
        staging.mkdir(parents=True)
        payload = f"produced by {os.getpid()}".encode()
        (staging / "data.bin").write_bytes(payload)
        canonical.write_json(staging / "meta.json", {"sha256": canonical.sha256_bytes(payload)})
        canonical.publish_dir(staging, entry)
        return ("produced", canonical.sha256_bytes(payload))

    barrier.wait()
    how, digest = locks.produce_once(cache_dir / "locks", "entry", KEY, check=check,
                                     produce=produce, what="a test entry", log=lines.append)
    results.put((os.getpid(), how, digest, lines))


def test_lock_serializes_two_processes_on_a_cold_entry(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=_produce_in_process, args=(str(tmp_path), barrier, results))
             for _ in range(2)]
    for p in procs:
        p.start()
    out = [results.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    producers = (tmp_path / "producers.log").read_text().split()
    assert len(producers) == 1, "the producer ran more than once"
    by_how = {how: (pid, digest, lines) for pid, how, digest, lines in out}
    assert set(by_how) == {"produced", "cached"}
    assert by_how["produced"][1] == by_how["cached"][1]  # both got the same digest
    assert str(by_how["produced"][0]) == producers[0]
    waiter_lines = by_how["cached"][2]
    # The waiter said whom it waited for: the producer's pid and what it produces.
    assert any(line.startswith("waiting for a test entry") and f"pid {producers[0]}" in line
               and "producing a test entry" in line for line in waiter_lines), waiter_lines
    assert not by_how["produced"][2], "the producer never waited"
    assert not locks.holder_of(locks.lock_path(tmp_path / "locks", "entry", KEY))


def _hammer(root: str, log: str, rounds: int) -> None:
    """Take one entry's lock ``rounds`` times, logging entry and exit while holding it."""
    for _ in range(rounds):
        with locks.held(root, "entry", KEY, what="hammer", log=lambda line: None):
            with open(log, "a") as fh:
                who = f"{os.getpid()}-{threading.get_ident()}"
                fh.write(f"in {who}\n")
                fh.flush()
                time.sleep(0.002)
                fh.write(f"out {who}\n")


def test_lock_files_are_removed_by_their_holder_and_still_exclude(tmp_path):
    """A holder removes its lock file before releasing it (one 0-byte file per entry used to
    stay: per CT2 digest, refused inputs' too); three processes and two threads each taking
    the lock over and over still never hold it together."""
    root, log = tmp_path / "locks", tmp_path / "hammer.log"
    assert locks.produce_once(root, "model", KEY, check=lambda: None, produce=lambda: "made",
                              what="x", log=lambda line: None) == "made"
    assert list(root.iterdir()) == []
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_hammer, args=(str(root), str(log), 40)) for _ in range(3)]
    threads = [threading.Thread(target=_hammer, args=(str(root), str(log), 40))
               for _ in range(2)]
    for worker in procs + threads:
        worker.start()
    for p in procs:
        p.join(timeout=300)
        assert p.exitcode == 0
    for t in threads:
        t.join(timeout=300)
    lines = log.read_text().splitlines()
    assert len(lines) == 2 * 40 * 5
    for enter, leave in zip(lines[::2], lines[1::2]):
        assert enter.startswith("in ") and leave == "out " + enter[3:], (enter, leave)
    assert list(root.iterdir()) == []


def test_a_waiter_that_locked_a_removed_file_takes_the_new_one(tmp_path, monkeypatch):
    """The race removal opens: a waiter opened the file, its holder removed it and released
    it, the waiter then locks a file no longer linked at the path. It must retry."""
    root = tmp_path / "locks"
    real = locks.FileLock
    made: list = []

    def stale_first(path, **kw):
        lock = real(path, **kw)
        if not made:
            # Lock a file, then take it from under its path, as a holder's removal does.
            lock.acquire()
            Path(path).unlink()
            lock.release()
        made.append(lock)
        return lock

    monkeypatch.setattr(locks, "_is_linked", lambda fd, path, _real=locks._is_linked:
                        _real(fd, path) and len(made) > 1)
    monkeypatch.setattr(locks, "FileLock", stale_first)
    with locks.held(root, "entry", KEY, what="x", log=lambda line: None) as path:
        assert len(made) == 2  # the first lock was released as stale, the second kept
        assert path.exists()
    assert not path.exists()


def test_a_failed_producer_releases_the_lock_and_the_next_one_produces(tmp_path):
    calls = []

    def failing():
        calls.append("fail")
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        locks.produce_once(tmp_path, "entry", KEY, check=lambda: None, produce=failing,
                           what="x", log=lambda _: None)
    got = locks.produce_once(tmp_path, "entry", KEY, check=lambda: None,
                             produce=lambda: calls.append("ok") or "value", what="x",
                             log=lambda _: None)
    assert got == "value" and calls == ["fail", "ok"]


def test_a_timed_wait_gives_up_naming_the_holder(tmp_path):
    lines: list[str] = []
    with locks.held(tmp_path, "entry", KEY, what="the first holder's entry"):
        with pytest.raises(locks.LockTimeout, match="held by pid"):
            with locks.held(tmp_path, "entry", KEY, what="x", log=lines.append, timeout=0.3):
                pass
    assert lines and f"pid {os.getpid()}" in lines[0] and "the first holder's entry" in lines[0]
    # The holder is this very process (another thread, as stage 01's two builds sharing one
    # ggml build): said as such, not as a competitor.
    assert "this process itself: another of its threads is producing" in lines[0]


def test_a_relayed_kernel_does_not_echo_its_waiting_line(monkeypatch, capsys):
    import io
    import sys

    fake_terminal = io.StringIO()
    monkeypatch.setattr(sys, "__stderr__", fake_terminal)
    locks._stderr_echo("verifylib: waiting")
    assert fake_terminal.getvalue() == "verifylib: waiting\n"
    monkeypatch.setenv(locks.RELAYED_ENV, "1")
    locks._stderr_echo("verifylib: waiting again")
    assert fake_terminal.getvalue() == "verifylib: waiting\n"


def test_lock_names_are_file_name_safe(tmp_path):
    assert locks.lock_path(tmp_path, "build", KEY) == tmp_path / f"build-{KEY}.lock"
    for kind, key in (("../x", KEY), ("build", "a/b"), ("build", "")):
        with pytest.raises(ValueError):
            locks.lock_path(tmp_path, kind, key)


# ----------------------------------------------------------------------------- producers

def _in_threads(n: int, fn):
    """Run ``fn()`` in ``n`` threads released together; return results or raise the first error."""
    barrier = threading.Barrier(n)
    out: list = [None] * n
    errors: list = []

    def body(i):
        try:
            barrier.wait()
            out[i] = fn()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the test thread
            errors.append(exc)

    threads = [threading.Thread(target=body, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    if errors:
        raise errors[0]
    return out


def test_build_is_produced_once_and_reused_by_the_waiter(tmp_path, monkeypatch):
    # The real build_whisper_cli with a stand-in CMake step that is slow on purpose: before
    # the lock, two callers configured into one folder and one of them failed.
    src = tmp_path / "src"
    src.mkdir()
    (src / "CMakeLists.txt").write_text("# stand-in\n")
    stand_in = shutil.which("true")
    assert stand_in
    cmake_calls: list[Path] = []

    def fake_cmake(src_, bdir, opts, target, label, *, jobs, timeout, log, ggml=None,
                   ccache=None):
        assert ggml is None  # a stand-in tree without the shared ggml route
        cmake_calls.append(bdir)
        shutil.rmtree(bdir, ignore_errors=True)
        (bdir / "bin").mkdir(parents=True)
        time.sleep(1.0)
        shutil.copy2(stand_in, bdir / "bin" / target)
        return bdir / "bin" / target, ["cmake", "(stand-in)"]

    monkeypatch.setattr(cmake_steps, "cmake_target", fake_cmake)
    logs: list[str] = []
    cache = tmp_path / "cache"
    results = _in_threads(2, lambda: build.build_whisper_cli(
        src, tree_id="1" * 40, patch_sha256="2" * 64, variant="ggml", options=None,
        cache_dir=cache, log=logs.append))
    assert len(cmake_calls) == 1
    assert sorted(r.cached for r in results) == [False, True]
    assert results[0].sha256 == results[1].sha256 == canonical.sha256_file(stand_in)
    assert results[0].binary == results[1].binary
    assert any(line.startswith("waiting for whisper-cli [ggml] build") for line in logs), logs
    assert not [p for p in (cache / "builds").iterdir() if p.name.startswith(".staging")]


def test_patched_work_tree_is_made_once_and_shared(synth, tmp_path):  # noqa: F811
    work = tmp_path / "cache" / "work"
    trees = _in_threads(3, lambda: prepare_patched_tree(synth.pristine, synth.pin, work,
                                                        log=lambda _: None))
    assert trees[0] == trees[1] == trees[2]
    assert check_patch_exact(trees[0].path, synth.pin).ok
    assert [p.name for p in work.iterdir()] == [trees[0].path.name]
    assert (tmp_path / "cache" / "locks").is_dir()


def test_source_is_fetched_once_and_shared(synth, tmp_path, monkeypatch):  # noqa: F811
    from verifylib.whispercpp.source import fetch
    real, fetches = fetch._fetch_archive, []

    def slow_fetch(*args, **kw):
        fetches.append(1)
        time.sleep(1.0)  # the other caller arrives while the entry is cold
        return real(*args, **kw)

    monkeypatch.setattr(fetch, "_fetch_archive", slow_fetch)
    tgz = make_tar(synth.pristine, tmp_path / "src.tgz", "p")
    spec = source.SourceSpec(kind="archive", path=tgz, subdir="p")
    cache = tmp_path / "cache"
    trees = _in_threads(2, lambda: source.obtain_source(spec, cache, log=lambda _: None))
    assert len(fetches) == 1
    assert trees[0].path == trees[1].path and trees[0].tree_id == trees[1].tree_id == synth.pin.tree
    assert sorted(t.cached for t in trees) == [False, True]
    assert sorted(p.name for p in (cache / "sources").iterdir()) == sorted(["index", synth.pin.tree])


# ----------------------------------------------------------------------------- reports folder

def test_run_ids_cannot_clash(tmp_path, monkeypatch):
    model_root = tmp_path / "reports" / "m"
    first_id, first = batch_staging.reserve_staging(model_root)
    owner = first.parent / f"{first_id}{batch_staging.OWNER_SUFFIX}"
    record = owner.read_bytes()
    # Every process draws the same id for a while: the second must not take it (nor
    # overwrite the first's owner record), and must not reuse a published run's id.
    published = model_root / "20990101T000000Z-0000000b"
    published.mkdir(parents=True)
    draws = iter([first_id, first_id, published.name, "20990101T000000Z-0000000c"])
    monkeypatch.setattr(batch_staging, "new_run_id", lambda: next(draws))
    second_id, second = batch_staging.reserve_staging(model_root)
    assert second_id == "20990101T000000Z-0000000c" and second.is_dir()
    assert owner.read_bytes() == record and first.is_dir()
    assert not (model_root / batch_staging.STAGING / published.name).exists()
    assert not [p for p in first.parent.iterdir() if p.name.endswith(".tmp")]


def test_run_ids_carry_32_random_bits():
    from verifylib.evidence.layout import new_run_id
    ids = {new_run_id() for _ in range(200)}
    assert len(ids) == 200
    assert all(layout.RUN_ID_RE.match(i) and len(i.split("-")[1]) == 8 for i in ids)


def _fake_run(root: Path, name: str, run_id: str, verdict: str) -> orchestrate.RunOutcome:
    run_dir = root / name / run_id
    run_dir.mkdir(parents=True)
    canonical.write_json(run_dir / "receipt.json",
                         {"verdict": verdict, "gates": [{"status": "PASS"}, {"status": "NOT_RUN"}]})
    return orchestrate.RunOutcome(name, run_dir, Verdict(verdict), run_dir / "report.html")


def test_index_lists_runs_other_processes_published(tmp_path):
    root = tmp_path / "reports"
    mine = _fake_run(root, "tiny-en", "20990101T000000Z-0000000a", "INCOMPLETE")
    other = _fake_run(root, "tiny-en", "20990101T000000Z-0000000b", "REJECTED")
    (root / "tiny-en" / ".staging" / "20990101T000000Z-0000000c").mkdir(parents=True)
    page = report.render_index([mine], root).read_text()
    for run in (mine, other):
        assert f"{run.run_dir.relative_to(root).as_posix()}/report.html" in page
    assert "0000000c" not in page  # a run still in staging is not listed
    assert "Worst verdict: <b class=\"vl-REJECTED\">REJECTED</b>" in page


def test_index_written_by_concurrent_runs_keeps_every_entry(tmp_path):
    root = tmp_path / "reports"
    names = [f"20990101T000000Z-000000{i:02x}" for i in range(6)]

    def finish(run_id):
        out = _fake_run(root, "tiny-en", run_id, "INCOMPLETE")
        return report.render_index([out], root)

    barrier_ids = iter(names)
    lock = threading.Lock()

    def one():
        with lock:
            run_id = next(barrier_ids)
        return finish(run_id)

    _in_threads(len(names), one)
    page = (root / "index.html").read_text()
    assert all(f"tiny-en/{n}/report.html" in page for n in names)
    assert not [p for p in root.iterdir() if p.name.startswith(".index.html")]
