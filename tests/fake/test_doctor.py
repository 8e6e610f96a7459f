"""``verifylib doctor`` as a real command on this Linux host, and the refusals of ``run`` and
``pin-check`` on a host whose build tools are missing (no cmake on PATH and the PyPI cmake
package hidden, or no git): exit 2 naming what installs them, before any work."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from verifylib.evidence import gates


def _verifylib(*args: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "verifylib", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def _first_line(*argv: str) -> str:
    out = subprocess.run(list(argv), capture_output=True, text=True, check=True)
    return next(ln.strip() for ln in (out.stdout + out.stderr).splitlines() if ln.strip())


def _host_without(tmp_path: Path, *gone: str) -> dict:
    """An environment whose PATH holds the build tools except ``gone``; without cmake the
    PyPI package is hidden too (a module of that name that fails to import comes first)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("git", "cc", "c++", "cmake"):
        if name not in gone and shutil.which(name):
            (bin_dir / name).symlink_to(shutil.which(name))
    env = {**os.environ, "PATH": str(bin_dir)}
    env.pop("CC", None)
    env.pop("CXX", None)
    if "cmake" in gone:
        shadow = tmp_path / "shadow"
        shadow.mkdir()
        (shadow / "cmake.py").write_text("raise ImportError('the PyPI cmake package is not "
                                         "installed on this host')\n")
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(shadow),
                                                          env.get("PYTHONPATH")]))
    return env


def test_doctor_on_linux_exits_0_and_lists_core_ml_gates_not_run(tmp_path):
    res = _verifylib("doctor", cwd=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    out = res.stdout
    assert _first_line("cmake", "--version") in out and shutil.which("cmake") in out
    assert _first_line("git", "--version") in out
    for g in gates.GATES:
        line = next(ln for ln in out.splitlines() if ln.strip().startswith(g.id + " "))
        want = "runs" if g.capability is gates.Capability.ANY else "NOT_RUN(platform): needs macOS"
        assert want in line, line
    assert "INCOMPLETE at best" in out.splitlines()[-1]


def test_doctor_json_is_one_object(tmp_path):
    res = _verifylib("doctor", "--json", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    assert data["system"] == "Linux" and data["exit_code"] == 0 and data["can_audit"] is True
    cmake = data["tools"]["cmake"]
    assert cmake["path"] == shutil.which("cmake") and cmake["source"] == "PATH"
    assert cmake["version"] == _first_line("cmake", "--version")
    status = {g["id"]: g["status"] for g in data["gates"]}
    assert status == {g.id: "runs" if g.capability is gates.Capability.ANY else
                      "NOT_RUN(platform)" for g in gates.GATES}
    assert data["packages"]["coremltools"] and data["cache"]["free_bytes"] > 0


@pytest.mark.skipif(not shutil.which("git"), reason="needs git")
def test_no_cmake_anywhere_doctor_and_run_exit_2_naming_pip_install(tmp_path):
    env = _host_without(tmp_path, "cmake")
    doc = _verifylib("doctor", "--json", cwd=tmp_path, env=env)
    assert doc.returncode == 2, doc.stderr
    data = json.loads(doc.stdout)
    assert data["tools"]["cmake"]["found"] is False
    assert data["tools"]["cmake"]["fix"].startswith("pip install cmake")
    assert {g["status"] for g in data["gates"]} == {"blocked", "NOT_RUN(platform)"}
    run = _verifylib("run", "--reports", str(tmp_path / "reports"), cwd=tmp_path, env=env)
    assert run.returncode == 2, run.stdout + run.stderr
    assert "missing build tool: cmake" in run.stderr and "pip install cmake" in run.stderr
    assert not (tmp_path / "reports").exists()


def test_pin_check_without_git_exits_2_before_any_work(tmp_path):
    env = _host_without(tmp_path, "git")
    res = _verifylib("pin-check", str(tmp_path / "candidate"), "--no-build", cwd=tmp_path,
                     env=env)
    assert res.returncode == 2, res.stdout + res.stderr
    assert "missing build tool: git" in res.stderr and "sudo apt-get install git" in res.stderr
