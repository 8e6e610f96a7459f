"""Interrupts and stale staging without an audit: exit codes 130/143, SIGTERM turned into an
interrupt, staging removed by ``run_one``, and staging left by a killed process removed at
the next start, and only then. A real interrupted ``verifylib run`` is in
tests/notebooks/test_interrupt.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from verifylib import canonical
from verifylib.batch import audit as orchestrate
from verifylib.cli.main import EXIT_INTERRUPTED, EXIT_TERMINATED
from verifylib.batch.staging import OWNER_SUFFIX, owner_record, remove_stale_staging
from verifylib.batch.signals import Interrupted, interrupts_raise
from verifylib.params import load
from verifylib.batch import signals
from verifylib.batch import staging as batch_staging

from tests.helpers import ROOT


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
        signals._SCOPE.published.append(Path("reports/a/20261130T060000Z-beef"))
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
    later = time.time() + batch_staging.UNOWNED_STALE_SECONDS + 60
    assert sorted(remove_stale_staging(tmp_path, now=later)) == sorted([unowned, bad])
    assert live.is_dir() and remote.is_dir() and foreign.is_dir()
