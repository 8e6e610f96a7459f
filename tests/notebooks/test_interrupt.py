"""An interrupted ``verifylib run`` publishes nothing, leaves no staging and no kernel, and
exits 130/143."""

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

from tests.helpers import ROOT
from verifylib.cli.main import EXIT_INTERRUPTED, EXIT_TERMINATED

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
