"""Interrupted runs publish nothing, leave no staging and no kernel, and exit 130/143;
staging left by a killed process is removed at the next start, and only then."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from verifylib import canonical
from verifylib.batch import audit as orchestrate
from verifylib.cli.main import EXIT_INTERRUPTED, EXIT_TERMINATED
from verifylib.batch.audit import (OWNER_SUFFIX, Interrupted, interrupts_raise, owner_record,
                                   remove_stale_staging)
from verifylib.params import load

ROOT = Path(__file__).resolve().parents[1]
LINE = "interrupted; nothing published\n"


def _descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def _interrupt_run(tmp_path: Path, sig: int) -> tuple[subprocess.Popen, str, list[str], list]:
    """Start ``verifylib run``, signal it once stage 01 runs, and wait for it to exit.

    Returns the process, its stderr, its stdout lines and the processes it had started
    (the stage kernel and whatever the kernel ran) when the signal was sent.
    """
    reports = tmp_path / "reports"
    err_path = tmp_path / "stderr.txt"
    lines: list[str] = []
    env = dict(os.environ, PYTHONUNBUFFERED="1")  # the progress line must arrive now
    with open(err_path, "w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "verifylib", "run", "parameters/tiny-en.yaml",
             "--reports", str(reports), "--no-progress"],
            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=err, text=True)
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
    reader.start()
    started: list[psutil.Process] = []
    try:
        deadline = time.monotonic() + 180
        staging_area = reports / "tiny-en" / ".staging"
        while not (any(l.startswith("[1/6]") for l in lines) and staging_area.is_dir()
                   and any(p.is_dir() for p in staging_area.iterdir())):
            assert proc.poll() is None, f"exited early: {proc.returncode}, {lines}"
            assert time.monotonic() < deadline, f"stage 01 never started: {lines}"
            time.sleep(0.05)
        # Prefer to interrupt a running kernel (the common case); with a warm cache stage
        # 01 can be quick, so do not wait long for it.
        kernel_deadline = time.monotonic() + 10
        while time.monotonic() < kernel_deadline and not any(
                "ipykernel" in " ".join(p.cmdline()) for p in _descendants(proc.pid)):
            time.sleep(0.05)
        time.sleep(1.0)
        started = _descendants(proc.pid)
        names = [p.name() for p in started]
        assert proc.poll() is None, f"exited before the signal: {proc.returncode}, {lines}"
        t0 = time.monotonic()
        proc.send_signal(sig)
        proc.wait(timeout=60)
        print(f"exit {proc.returncode} {time.monotonic() - t0:.2f} s after the signal; "
              f"running at the signal: {names}")
        reader.join(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
        proc.stdout.close()
    return proc, err_path.read_text(), lines, started


def _assert_clean(tmp_path: Path, started: list) -> None:
    model = tmp_path / "reports" / "tiny-en"
    left = sorted(str(p.relative_to(tmp_path)) for p in model.rglob("*")) \
        if model.exists() else []
    assert left == [], f"left behind: {left}"
    # The kernel (and anything it ran) must not outlive the run.
    gone, alive = psutil.wait_procs(started, timeout=5)
    alive = [p for p in alive if p.status() != psutil.STATUS_ZOMBIE]
    for p in alive:
        p.kill()
    assert not alive, f"still running: {[(p.pid, p.cmdline()) for p in alive]}"


@pytest.mark.notebook
@pytest.mark.parametrize("sig, code", [(signal.SIGINT, EXIT_INTERRUPTED),
                                       (signal.SIGTERM, EXIT_TERMINATED)],
                         ids=["SIGINT", "SIGTERM"])
def test_interrupted_run_publishes_nothing(tmp_path, sig, code):
    proc, stderr, lines, started = _interrupt_run(tmp_path, sig)
    assert proc.returncode == code, (stderr, lines)
    assert stderr == LINE, stderr
    assert all(l.startswith(("[", "      ")) for l in lines), lines  # progress only
    _assert_clean(tmp_path, started)


def test_exit_codes_follow_the_shell_convention():
    assert (EXIT_INTERRUPTED, EXIT_TERMINATED) == (130, 143)


def test_sigterm_becomes_interrupted_and_handlers_are_restored():
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    with pytest.raises(Interrupted) as info:
        with interrupts_raise() as scope:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # the handler raises at the next bytecode
    assert info.value.signum == signal.SIGTERM and scope.signum == signal.SIGTERM
    assert isinstance(info.value, KeyboardInterrupt)
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before


def test_run_one_removes_its_staging_on_interrupt(tmp_path, monkeypatch):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(orchestrate, "init_run_dir", interrupted)
    params = load(ROOT / "parameters" / "tiny-en.yaml")
    with pytest.raises(KeyboardInterrupt):
        orchestrate.run_one(params, tmp_path, log=lambda line: None, progress=False)
    assert list(tmp_path.iterdir()) == []


def test_interrupt_after_a_publication_says_so(capsys):
    from verifylib.cli.main import _interruptible

    def cmd(args):
        orchestrate._SCOPE.published.append(Path("reports/a/20261130T060000Z-beef"))
        raise Interrupted(signal.SIGINT)

    assert _interruptible(cmd)(None) == EXIT_INTERRUPTED
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("interrupted; nothing else published")
    assert "reports/a/20261130T060000Z-beef" in err


def _dead_owner() -> dict:
    """An owner record taken while its process lived; the process is gone afterwards."""
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                             stdin=subprocess.PIPE)
    try:
        record = owner_record(child.pid)
    finally:
        child.stdin.close()
        child.wait(timeout=30)
    assert record["start"] is not None
    return record


def _staging(area: Path, run_id: str, record: dict | None) -> Path:
    folder = area / run_id
    (folder / "notebooks").mkdir(parents=True)
    (folder / "run.json").write_text("{}")
    if record is not None:
        canonical.write_json(area / f"{run_id}{OWNER_SUFFIX}", record)
    return folder


def test_stale_staging_removes_only_provably_dead_owners(tmp_path):
    area = tmp_path / "tiny-en" / ".staging"
    dead = _staging(area, "20261130T060000Z-dead", _dead_owner())
    live = _staging(area, "20261130T060000Z-beef", owner_record())
    reused = owner_record()  # our pid, but a start time that is not ours: pid reuse
    kind, _, ticks = reused["start"].rpartition(":")
    reused["start"] = f"{kind}:{ticks}1"
    reused_dir = _staging(area, "20261130T060000Z-0e0e", reused)
    elsewhere = dict(_dead_owner(), host="another-host.invalid")
    remote = _staging(area, "20261130T060000Z-0b0b", elsewhere)
    unowned = _staging(area, "20261130T060000Z-0a0a", None)
    bad = _staging(area, "20261130T060000Z-0c0c", None)
    (area / f"{bad.name}{OWNER_SUFFIX}").write_text('{"pid": "../1", "start": 1}')
    orphan_record = area / f"20261130T050000Z-0d0d{OWNER_SUFFIX}"
    canonical.write_json(orphan_record, _dead_owner())
    foreign = area / "not-a-run-id"
    foreign.mkdir()

    removed = remove_stale_staging(tmp_path)

    assert sorted(removed) == sorted([dead, reused_dir])
    assert not dead.exists() and not (area / f"{dead.name}{OWNER_SUFFIX}").exists()
    assert not reused_dir.exists()
    assert not orphan_record.exists()
    for kept in (live, remote, unowned, bad, foreign):
        assert kept.is_dir(), kept
    assert (area / f"{live.name}{OWNER_SUFFIX}").is_file()

    # Without a readable owner record a folder goes only after an hour without changes.
    later = time.time() + orchestrate.UNOWNED_STALE_SECONDS + 60
    assert sorted(remove_stale_staging(tmp_path, now=later)) == sorted([unowned, bad])
    assert live.is_dir() and remote.is_dir() and foreign.is_dir()
