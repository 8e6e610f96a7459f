"""Shared fixtures: one whisper.cpp build and one imported model, reused by every test."""

pytest_plugins = ["tests.fixtures_build"]


import pytest as _pytest


@_pytest.fixture(autouse=True)
def _unbind_launch_ledger():
    """A StageContext binds its run directory's launch ledger for the whole process; a
    test must not leave it bound, or a later test's launches land in its run."""
    from verifylib.runtime import ledger
    ledger.bind(None)
    yield
    ledger.bind(None)
