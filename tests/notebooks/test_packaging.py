"""The installed wheel audits (the notebooks run through papermill) and verifies outside the
checkout."""

import json
from pathlib import Path

import pytest

from tests.helpers import ROOT
from tests.helpers.wheel import build_wheel, install_wheel, run_outside


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    return build_wheel(tmp_path_factory.mktemp("wheel"))


@pytest.fixture(scope="module")
def site(wheel) -> Path:
    return install_wheel(wheel)


@pytest.mark.physical
@pytest.mark.notebook
def test_installed_wheel_audits_and_verifies_outside_the_checkout(site, tmp_path):
    # The whole default audit from the wheel's copy: its notebooks, patches, parameters and
    # fixtures, with reports in ./reports of a folder that is not the checkout. The build
    # cache is shared with the other physical tests, so this costs about a minute warm.
    res = run_outside(site, tmp_path, "-m", "verifylib", "run", "--no-progress")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "INCOMPLETE" in res.stdout
    (run_dir,) = [p for p in (tmp_path / "reports" / "tiny-en").iterdir()
                  if not p.name.startswith(".")]
    run = json.loads((run_dir / "run.json").read_text())
    origin = Path(run["params_origin"]).resolve()
    assert (site / "verifylib" / "_data").resolve() in origin.parents, origin
    assert str(ROOT) not in json.dumps(run["params"])  # nothing read from the checkout
    res = run_outside(site, tmp_path, "-m", "verifylib", "verify", str(run_dir))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "verifies" in res.stdout
