"""The installed wheel audits (the notebooks run through papermill) and verifies outside the
checkout: the session's default audit is that run (tests/conftest.py ``default_audit``)."""

import json
from pathlib import Path

import pytest

from tests.helpers import ROOT
from tests.helpers.wheel import run_outside


@pytest.mark.physical
@pytest.mark.notebook
def test_installed_wheel_audits_and_verifies_outside_the_checkout(default_audit,
                                                                  installed_wheel):
    # The whole default audit from the wheel's copy: its notebooks, patches, parameters and
    # fixtures, with reports in ./reports of a folder that is not the checkout.
    res, run_dir = default_audit
    assert "INCOMPLETE" in res.stdout
    assert ROOT not in run_dir.parents
    run = json.loads((run_dir / "run.json").read_text())
    origin = Path(run["params_origin"]).resolve()
    assert (installed_wheel / "verifylib" / "_data").resolve() in origin.parents, origin
    assert str(ROOT) not in json.dumps(run["params"])  # nothing read from the checkout
    where = run_dir.parent.parent.parent
    res = run_outside(installed_wheel, where, "-m", "verifylib", "verify", str(run_dir))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "verifies" in res.stdout
