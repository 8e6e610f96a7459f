"""A wheel of this checkout, installed into a folder of its own, and a fresh interpreter
on it (tests/fake/test_packaging.py and tests/notebooks/test_packaging.py)."""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement

from tests.helpers import ROOT

# What `pip wheel .` needs from the repository; copied so that the build's own folders
# (build/, *.egg-info) land in a temporary tree, not in the shared checkout.
BUILD_INPUTS = ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md", "verifylib",
                "notebooks", "parameters", "patches")


def _build_backend_installed() -> bool:
    """Whether this venv satisfies the build requirements, so the build may skip isolation."""
    build = tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]
    for line in build["requires"]:
        req = Requirement(line)
        try:
            if not req.specifier.contains(importlib.metadata.version(req.name)):
                return False
        except importlib.metadata.PackageNotFoundError:
            return False
    # setuptools builds wheels itself from 70.1 on; before that it needs `wheel`
    try:
        import setuptools.command.bdist_wheel  # noqa: F401
    except ImportError:
        try:
            importlib.metadata.version("wheel")
        except importlib.metadata.PackageNotFoundError:
            return False
    return True


def build_wheel(tmp: Path) -> Path:
    """``pip wheel`` of a copy of the checkout's build inputs in ``tmp``; the wheel's path."""
    src = tmp / "src"
    src.mkdir()
    for name in BUILD_INPUTS:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, src / name,
                            ignore=shutil.ignore_patterns("__pycache__", "_data"))
        else:
            shutil.copy2(ROOT / name, src / name)
    cmd = [sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "-w", str(tmp / "dist"),
           "--disable-pip-version-check", "-q"]
    if _build_backend_installed():
        cmd.append("--no-build-isolation")
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout + res.stderr
    (whl,) = (tmp / "dist").glob("verifylib-*.whl")
    return whl


def install_wheel(wheel: Path) -> Path:
    """``pip install --target`` of ``wheel`` beside its folder; the target folder."""
    target = wheel.parent.parent / "site"
    res = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-compile",
                          "--disable-pip-version-check", "-q", "--target", str(target),
                          str(wheel)], capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout + res.stderr
    return target


def run_outside(site: Path, cwd: Path, *args: str,
                timeout: float = 300) -> subprocess.CompletedProcess:
    """Python with only ``site`` added to its path, in ``cwd``."""
    env = dict(os.environ, PYTHONPATH=str(site))
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)
