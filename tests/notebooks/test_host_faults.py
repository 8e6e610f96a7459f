"""Host faults end cleanly: a real filesystem too small, read-only, or filled mid-audit.

Each test mounts a tmpfs of its own (CI runs as root; where mounting is not allowed the
tests are skipped, saying so). ``verifylib run`` is the real command in a child process.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.helpers.batches import tiny_en_params


@contextlib.contextmanager
def _tmpfs(where: Path, size_mib: int, *, read_only: bool = False):
    where.mkdir(parents=True, exist_ok=True)
    opts = f"size={size_mib}m" + (",ro" if read_only else "")
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(where)],
                         capture_output=True, text=True)
    if res.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({res.stderr.strip() or res.returncode}); "
                    "CI runs as root and can")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


def _run(params: Path, reports: Path, **env_extra) -> subprocess.Popen:
    env = {**os.environ, **env_extra}
    return subprocess.Popen([sys.executable, "-m", "verifylib", "run", str(params),
                             "--reports", str(reports), "--no-progress"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def test_a_reports_filesystem_too_small_is_refused_before_work(tmp_path):
    params = tiny_en_params(tmp_path, "tiny-en")
    with _tmpfs(tmp_path / "small", 60) as mnt:
        t0 = time.monotonic()
        proc = _run(params, mnt / "reports")
        out, err = proc.communicate(timeout=120)
        took = time.monotonic() - t0
        assert proc.returncode == 2, out + err
        assert out == "" and len(err.strip().splitlines()) == 1, (out, err)
        assert "the reports folder" in err and "60 MiB free" in err and "needs about" in err
        assert not (mnt / "reports").exists()  # nothing written
    print(f"refused in {took:.1f} s")


def test_a_read_only_cache_is_refused_before_work(tmp_path):
    params = tiny_en_params(tmp_path, "tiny-en")
    with _tmpfs(tmp_path / "ro-cache", 64, read_only=True) as mnt:
        proc = _run(params, tmp_path / "reports", VERIFYLIB_CACHE=str(mnt / "cache"))
        out, err = proc.communicate(timeout=120)
    assert proc.returncode == 2, out + err
    assert len(err.strip().splitlines()) == 1 and "the cache folder" in err, err
    assert "Read-only file system" in err
    assert not (tmp_path / "reports").exists()


def _fill_when_stage_02_writes(reports: Path, filled: dict) -> None:
    """Fill the filesystem as soon as stage 02 has begun writing its evidence."""
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline:
        hits = list(reports.glob("*/.staging/*/evidence/02_export"))
        if hits:
            filler = reports / "filler"
            free = shutil.disk_usage(reports).free
            with open(filler, "wb") as fh:
                try:
                    os.posix_fallocate(fh.fileno(), 0, max(free - 64 * 1024, 0))
                except OSError:
                    pass
            filled["at"] = time.monotonic()
            return
        time.sleep(0.05)


@pytest.mark.physical
def test_a_disk_filled_during_stage_02_stops_the_audit_at_once(tmp_path, v185_ggml_build):
    params = tiny_en_params(tmp_path, "tiny-en")
    with _tmpfs(tmp_path / "fills", 400) as mnt:
        reports = mnt / "reports"
        filled: dict = {}
        watcher = threading.Thread(target=_fill_when_stage_02_writes, args=(reports, filled),
                                   daemon=True)
        watcher.start()
        proc = _run(params, reports)
        out, err = proc.communicate(timeout=1800)
        ended = time.monotonic()
        watcher.join(timeout=5)
        assert "at" in filled, "stage 02 never began"
        assert proc.returncode == 3, out + err
        after = ended - filled["at"]
        print(f"exit {proc.returncode} {after:.1f} s after the disk filled")
        assert after <= 10
        said = [ln for ln in (out + err).splitlines() if "No space left on device" in ln]
        assert 1 <= len(said) <= 2, out + err
        assert "Traceback" not in out + err
        assert "stage 03_canary" not in out  # no later stage ran
        (line,) = [ln for ln in out.splitlines() if ln.startswith("tiny-en: ERROR")]
        assert "no run published: the host failed: No space left on device (ENOSPC)" in line
        assert str(reports / "tiny-en" / ".staging") in line  # where it was writing
        # Nothing staged is left, and no run was published.
        left = [p for p in (reports / "tiny-en").rglob("*")] if (reports / "tiny-en").exists() \
            else []
        assert not [p for p in left if ".staging" in p.parts and p.name != ".staging"], left
        assert not [p for p in (reports / "tiny-en").iterdir()
                    if not p.name.startswith(".")] if (reports / "tiny-en").exists() else True
