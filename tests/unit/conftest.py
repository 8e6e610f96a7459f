"""The unit tier: in-process tests only.

Every unit test gets a fresh, empty ``$VERIFYLIB_CACHE`` and ``$HOME`` of its own (so it
can neither read nor fill the session cache, nor the user's), and launching a child
process fails it: a test that needs one belongs in another tier (README.md, "Tests").

matplotlib keeps its own font cache in its configuration folder, found from ``$HOME`` when
it is first imported, and builds the cache with ``fc-list`` when it is missing. So its
folder is fixed before any test changes ``$HOME`` (``$MPLCONFIGDIR``, if unset, becomes
the folder matplotlib uses for this user), and the font manager is loaded once per
session before the first test, outside the child-process guard: on a machine that never
ran matplotlib that is the tier's one ``fc-list``, made by matplotlib, not by a test.
"""

from __future__ import annotations

import os
import subprocess

import matplotlib
import pytest

os.environ.setdefault("MPLCONFIGDIR", matplotlib.get_configdir())


class ChildProcessInUnitTest(AssertionError):
    """A unit test tried to start a child process."""


def _refuse(what: str):
    def refuse(*args, **kwargs):
        raise ChildProcessInUnitTest(
            f"a unit test may not start a child process ({what}); move the test to "
            "tests/fake, tests/physical or another tier that launches processes")
    return refuse


@pytest.fixture(scope="session", autouse=True)
def _matplotlib_font_cache():
    """matplotlib's font manager, loaded (its cache built if missing) before any test."""
    import matplotlib.font_manager  # noqa: F401


@pytest.fixture(autouse=True)
def _isolated_unit_test(tmp_path_factory, monkeypatch):
    """A private cache and home; no subprocess, fork or spawn."""
    base = tmp_path_factory.mktemp("unit-env")
    (base / "cache").mkdir()
    (base / "home").mkdir()
    monkeypatch.setenv("VERIFYLIB_CACHE", str(base / "cache"))
    monkeypatch.setenv("HOME", str(base / "home"))
    monkeypatch.setattr(subprocess.Popen, "__init__", _refuse("subprocess.Popen"))
    for name in ("system", "fork", "forkpty", "posix_spawn", "posix_spawnp", "execv",
                 "execve", "spawnv", "spawnve"):
        if hasattr(os, name):
            monkeypatch.setattr(os, name, _refuse(f"os.{name}"))
    yield
