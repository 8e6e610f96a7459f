"""The headless runner: argv guards before launch, credential-free env, streams, timeouts,
signals, no retry, and the run record the classifiers judge."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from verifylib import canonical
from verifylib.errors import ContractBroken
from verifylib.runtime.runner import run, run_record, run_whisper_cli, sanitized_env

PY = sys.executable


def tattletale(tmp_path: Path) -> tuple[Path, Path]:
    """An executable that leaves a file behind if it is ever launched."""
    flag = tmp_path / "launched"
    exe = tmp_path / "whisper-cli"
    exe.write_text(f"#!{PY}\nopen({str(flag)!r}, 'a').write('x')\n")
    exe.chmod(0o755)
    return exe, flag


@pytest.mark.parametrize("extra,needle", [
    (["-np"], "flag -np is forbidden"),
    (["--no-prints"], "flag --no-prints is forbidden"),
    (["-ac", "750"], "flag -ac is forbidden"),
    (["--audio-ctx=750"], "flag --audio-ctx is forbidden"),
    (["-p", "2"], "-p '2': gate runs use exactly one processor"),
    (["--processors", "8"], "--processors '8'"),
    (["-p", "0"], "-p '0'"),
])
def test_contract_breaking_argv_is_refused_before_launch(tmp_path, extra, needle):
    exe, flag = tattletale(tmp_path)
    with pytest.raises(ContractBroken, match=needle):
        run_whisper_cli([exe, "-m", "m.bin", "-f", "a.wav", *extra], timeout=10)
    assert not flag.exists(), "the child was launched"
    run_whisper_cli([exe, "-m", "m.bin", "-f", "a.wav", "-p", "1"], timeout=10)
    assert flag.read_text() == "x"  # one launch, no retry


def test_a_timeout_is_required(tmp_path):
    exe, flag = tattletale(tmp_path)
    for bad in (None, 0, -1, True, "60"):
        with pytest.raises(ValueError, match="positive timeout"):
            run_whisper_cli([exe, "-m", "m.bin"], timeout=bad)
    assert not flag.exists()


def test_credentials_never_reach_the_child(monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_secret_value")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "aws-secret-value")
    monkeypatch.setenv("GITHUB_TOKEN", "gh-secret")
    monkeypatch.setenv("MY_API_KEY", "k")
    monkeypatch.setenv("HARMLESS_SETTING", "kept")
    res = run_whisper_cli([PY, "-c", "import os, json; print(json.dumps(dict(os.environ)))"],
                          timeout=30)
    env = json.loads(res.stdout_text)
    for name in ("HF_TOKEN", "AWS_SECRET_ACCESS_KEY", "GITHUB_TOKEN", "MY_API_KEY"):
        assert name not in env
    assert b"secret" not in res.stdout
    assert env["HARMLESS_SETTING"] == "kept" and env["LC_ALL"] == "C"
    assert "HF_TOKEN" not in sanitized_env()


def test_both_streams_are_kept_and_hashed():
    res = run([PY, "-c", "import sys; sys.stdout.write('transcript\\n'); "
                         "sys.stderr.write('whisper_init_state: log\\n'); sys.exit(3)"], timeout=30)
    assert (res.returncode, res.signal, res.timed_out) == (3, None, False)
    assert res.stdout == b"transcript\n" and res.stderr == b"whisper_init_state: log\n"
    rec = run_record(res)
    assert rec["stdout_sha256"] == canonical.sha256_bytes(b"transcript\n")
    assert rec["stderr_sha256"] == canonical.sha256_bytes(b"whisper_init_state: log\n")
    assert rec["returncode"] == 3 and rec["signal"] is None and rec["timed_out"] is False
    assert rec["argv"][0] == PY and rec["wall_s"] >= 0 and rec["stderr_bytes"] == 24
    canonical.dumps(rec)  # JSON-able


@pytest.mark.parametrize("code,rc,sig", [
    ("import os; os.abort()", -signal.SIGABRT, "SIGABRT"),
    ("import os, signal; os.kill(os.getpid(), signal.SIGSEGV)", -signal.SIGSEGV, "SIGSEGV"),
    ("import os; os._exit(134)", 134, "SIGABRT"),
    ("import os; os._exit(139)", 139, "SIGSEGV"),
    ("import os; os._exit(3)", 3, None),
])
def test_signals_are_decoded(code, rc, sig):
    res = run([PY, "-c", code], timeout=30)
    assert (res.returncode, res.signal) == (rc, sig)
    assert res.ok is False


def test_a_signal_is_recorded_with_the_table_of_the_os_the_child_ran_on():
    # SIGBUS is a different number on Linux and macOS: the record says whose it is.
    import platform

    from verifylib.runtime import contracts
    res = run([PY, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGBUS)"], timeout=30)
    assert (res.returncode, res.signal) == (-signal.SIGBUS, "SIGBUS")
    assert res.signal_table == platform.system()
    rec = run_record(res)
    assert rec["signal_table"] == platform.system()
    assert contracts.termination(rec) == ("SIGBUS", [])


def test_timeout_kills_the_whole_process_group(tmp_path):
    pidfile = tmp_path / "grandchild.pid"
    code = ("import subprocess, sys, time; "
            f"p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
            f"open({str(pidfile)!r}, 'w').write(str(p.pid)); sys.stderr.write('started\\n'); "
            "sys.stderr.flush(); time.sleep(60)")
    t0 = time.monotonic()
    res = run_whisper_cli([PY, "-c", code], timeout=2)
    assert time.monotonic() - t0 < 30
    assert res.timed_out and res.returncode is None and res.signal is None
    assert b"started" in res.stderr  # streams up to the kill are kept
    assert "timed out" in res.describe()
    pid = int(pidfile.read_text())
    for _ in range(50):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        pytest.fail("the grandchild survived the timeout")
    rec = run_record(res)
    assert rec["returncode"] is None and rec["timed_out"] is True


def test_kill_running_stops_a_child_another_thread_waits_for(tmp_path):
    # Stage 01 runs builds in worker threads; an interrupt reaches only the main thread,
    # which stops the workers' children this way.
    from verifylib.runtime import runner

    out = {}
    waiter = threading.Thread(target=lambda: out.setdefault(
        "res", runner.run([PY, "-c", "import time; time.sleep(60)"], timeout=120)))
    t0 = time.monotonic()
    waiter.start()
    for _ in range(100):
        if runner.kill_running():
            break
        time.sleep(0.05)
    waiter.join(30)
    assert not waiter.is_alive() and time.monotonic() - t0 < 30
    assert out["res"].signal == "SIGKILL" and not out["res"].timed_out
    assert runner.kill_running() == 0  # a finished child is no longer tracked
