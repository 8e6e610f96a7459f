"""Nothing left behind (issue 35): git's HOME is no folder at all, a stage kernel's
temporary files go with the kernel however it ends, a staging folder left in the cache by
a killed import is swept at the next start. The rules themselves (owner records, the
sweep) are in tests/unit/test_owned_folders.py; the lock files' removal in test_concurrency.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from jupyter_core.utils import run_sync

from verifylib import canonical, locks as owners, resources
from verifylib.batch import kernel
from verifylib.models import ggml_import


def _env(tmpdir: Path) -> dict:
    return {**os.environ, "TMPDIR": str(tmpdir)}


def test_git_leaves_nothing_in_tmpdir(tmp_path):
    """A tree id made in a child process, as a stage kernel makes it: its scratch repository
    goes in ``finally``, and no ``verifylib-git-home-*`` folder is made (kernels are killed,
    so an atexit removal never ran: one folder per audit stayed)."""
    tmpdir, src = tmp_path / "tmp", tmp_path / "src"
    tmpdir.mkdir()
    (src / "a").mkdir(parents=True)
    (src / "a" / "f.txt").write_text("hello\n")
    code = ("import sys\nfrom verifylib.whispercpp.source.fetch import git_tree_id\n"
            "print(git_tree_id(sys.argv[1]))")
    res = subprocess.run([sys.executable, "-c", code, str(src)], env=_env(tmpdir),
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert len(res.stdout.strip()) == 40 and res.stderr == ""
    assert list(tmpdir.iterdir()) == []


def _run_in_kernel(km, code: str) -> None:
    kc = km.client()
    kc.start_channels()
    try:
        run_sync(kc.wait_for_ready)(timeout=120)
        kc.execute(code)
    finally:
        kc.stop_channels()


def _scratch_repo_in(km, marker: Path) -> Path:
    """Have the kernel make a tree id's scratch repository (an open ``index.lock`` inside, as
    ``git add`` holds it) and block inside the ``with`` that would remove it."""
    _run_in_kernel(km, textwrap.dedent(f"""
        import pathlib, tempfile, time
        with tempfile.TemporaryDirectory(prefix="verifylib-treeid-") as tmp:
            (pathlib.Path(tmp) / "repo.git").mkdir()
            (pathlib.Path(tmp) / "repo.git" / "index.lock").write_text("")
            pathlib.Path({str(marker)!r}).write_text(tmp)
            time.sleep(600)
    """))
    for _ in range(1200):
        if marker.exists():
            return Path(marker.read_text())
        time.sleep(0.1)
    raise AssertionError("the kernel never made its scratch repository")


def test_a_killed_kernel_takes_its_temporary_files_along(tmp_path, monkeypatch):
    """Stopped at its notebook's end, or killed after an interrupt (SIGTERM in stage 01 left
    ``verifylib-treeid-*/repo.git/index.lock``), a kernel's ``$TMPDIR`` goes with it."""
    import tempfile
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmpdir))
    monkeypatch.setattr(tempfile, "tempdir", None)
    # A kernel folder whose ``verifylib run`` was killed: swept at the next kernel start.
    left = tmpdir / f"{kernel.KERNEL_TMP_PREFIX}killed"
    (left / "verifylib-treeid-x" / "repo.git").mkdir(parents=True)
    record = owners.owner_record()
    kind, _, ticks = record["start"].rpartition(":")
    canonical.write_json(tmpdir / f"{left.name}{owners.OWNER_SUFFIX}",
                         dict(record, start=f"{kind}:{ticks}1"))
    cwd = str(resources.notebooks_dir())

    stopped = kernel.start_kernel(cwd)
    assert not left.exists()
    made = _scratch_repo_in(stopped, tmp_path / "made-1")
    assert made.parent == kernel.kernel_tmp(stopped) and made.parent.parent == tmpdir
    kernel.stop_kernel(stopped)  # as at every notebook's end: killed at once
    assert not made.exists() and not kernel.kernel_tmp(stopped).exists()

    interrupted = kernel.start_kernel(cwd)
    made = _scratch_repo_in(interrupted, tmp_path / "made-2")
    kernel.kill_leftover_kernels()  # run_one's cleanup after an interrupt
    assert not made.exists()
    assert list(tmpdir.iterdir()) == []


_KILLED_IMPORT = """
import sys, time
from verifylib.models import ggml_import

def slow_import(path, out, log=None):
    out.mkdir(parents=True)
    (out / "model.safetensors").write_bytes(b"x" * 1_000_000)
    print("importing", flush=True)
    time.sleep(600)

ggml_import.import_ggml = slow_import
ggml_import.import_ggml_cached(sys.argv[1], sys.argv[2])
"""


def test_a_killed_imports_staging_folder_is_swept_at_the_next_start(tmp_path, monkeypatch):
    """SIGKILL during a ggml import left ``models/ggml/.staging-*`` (148 MB) that no later
    run removed: it carries its owner now, and goes once that owner is provably gone."""
    cache, model = tmp_path / "cache", tmp_path / "ggml-tiny.bin"
    model.write_bytes(b"not really a model")
    child = subprocess.Popen([sys.executable, "-c", _KILLED_IMPORT, str(model), str(cache)],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "importing"
        staging = cache / "models" / "ggml"
        (left,) = [p for p in staging.iterdir() if p.is_dir()]
        assert left.name.startswith(owners.STAGING_PREFIX)
        assert owners.sweep_cache_staging(cache) == []  # its owner still runs
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
    assert left.is_dir()  # what SIGKILL leaves
    # The next import sweeps its own area before staging (its own import fails here).
    def refused(path, out, log=None):
        raise ggml_import.GgmlFileInvalid(path, "not a ggml file")
    monkeypatch.setattr(ggml_import, "import_ggml", refused)
    try:
        ggml_import.import_ggml_cached(model, cache)
    except ggml_import.GgmlFileInvalid:
        pass
    assert sorted(p.name for p in staging.iterdir()) == []
    # The killed holder's lock file (and its holder record) stayed; the next holder reused
    # it and removed it.
    assert list((cache / "locks").iterdir()) == []
    # And `verifylib run` sweeps every area when it starts, producing or not.
    again = subprocess.Popen([sys.executable, "-c", _KILLED_IMPORT, str(model), str(cache)],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert again.stdout.readline().strip() == "importing"
    finally:
        again.send_signal(signal.SIGKILL)
        again.wait(timeout=30)
    (left,) = [p for p in staging.iterdir() if p.is_dir()]
    assert owners.sweep_cache_staging(cache) == [left]
    assert list(staging.iterdir()) == []


_KILLED_MANAGER = """
import sys, time
from verifylib import resources
from verifylib.batch import kernel
km = kernel.start_kernel(str(resources.notebooks_dir()))
print(km.connection_file, km.ip, flush=True)
time.sleep(600)
"""


def test_a_killed_runs_kernel_files_are_swept_at_the_next_start(tmp_path, monkeypatch):
    """SIGKILL of a ``verifylib run`` left its kernel's connection file (``$TMPDIR/tmp*.json``,
    with the kernel's key) and its IPC socket files: the connection file now lives in the
    kernel's own folder, and both are swept when the next kernel starts."""
    import tempfile
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmpdir))
    monkeypatch.setattr(tempfile, "tempdir", None)
    child = subprocess.Popen([sys.executable, "-c", _KILLED_MANAGER], env=_env(tmpdir),
                             stdout=subprocess.PIPE, text=True)
    try:
        connection, ip = child.stdout.readline().split()
        # The kernel has bound its sockets once its connection file is written and read.
        for _ in range(600):
            if list(Path(ip).parent.glob(Path(ip).name + "-*")):
                break
            time.sleep(0.1)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=60)
    assert Path(connection).parent.parent == tmpdir
    sockets = list(Path(ip).parent.glob(Path(ip).name + "-*"))
    assert Path(connection).exists() and sockets  # what SIGKILL leaves
    deadline = time.monotonic() + 60
    while owners.process_start(child.pid) is not None and time.monotonic() < deadline:
        time.sleep(0.1)

    km = kernel.start_kernel(str(resources.notebooks_dir()))
    try:
        assert not Path(connection).exists()
        assert not any(p.exists() for p in sockets)
        assert Path(km.connection_file).parent == kernel.kernel_tmp(km)
    finally:
        kernel.stop_kernel(km)
    assert list(tmpdir.iterdir()) == []
