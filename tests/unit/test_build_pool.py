"""Stage 01's build pool (verifylib/whispercpp/pool.py) on in-process stand-ins for builds:
what runs at once, what a caller collects, what an abort stops. No child is started; the
pool's call to kill the runner's children is observed, not made."""

from __future__ import annotations

import threading

import pytest

from verifylib.whispercpp import pool as pool_mod
from verifylib.whispercpp.pool import BuildPool

pytestmark = pytest.mark.unit


def test_started_builds_overlap_and_are_collected_by_name():
    both = threading.Barrier(2, timeout=10)
    calls = []

    def build(name):
        calls.append(name)
        both.wait()  # returns only once the other build runs too
        return f"built {name}"

    with BuildPool(workers=2) as pool:
        pool.start("a", build, "a")
        pool.start("b", build, "b")
        pool.start("a", build, "again")  # a name starts once
        assert pool.result("b", build, "unused") == "built b"
        assert pool.result("a", build, "unused") == "built a"
    assert sorted(calls) == ["a", "b"]


def test_a_name_never_started_is_built_in_the_callers_thread():
    seen = []
    with BuildPool() as pool:
        out = pool.result("x", lambda v: seen.append(threading.current_thread()) or v, 7)
    assert out == 7 and seen == [threading.current_thread()]


def test_a_failed_build_raises_where_it_is_collected():
    def broken():
        raise ValueError("compiler said no")

    with BuildPool() as pool:
        pool.start("bad", broken)
        with pytest.raises(ValueError, match="compiler said no"):
            pool.result("bad", broken)


def test_leaving_by_an_exception_kills_children_and_drops_what_has_not_started(monkeypatch):
    release = threading.Event()
    killed = []

    def kill_running():
        killed.append(True)
        release.set()  # the running build's child "dies": the build gives up
        return 1

    monkeypatch.setattr(pool_mod.runner, "kill_running", kill_running)
    ran = []
    running = threading.Event()

    def build(name):
        ran.append(name)
        running.set()
        if not release.wait(10):
            raise AssertionError("never released")
        raise RuntimeError(f"{name}: child killed")

    with pytest.raises(KeyboardInterrupt):
        with BuildPool(workers=1) as pool:
            pool.start("first", build, "first")
            pool.start("second", build, "second")
            assert running.wait(10)
            raise KeyboardInterrupt
    assert killed and ran == ["first"]
