"""A wheel carries everything an audit reads and works outside the checkout (``pip wheel``
and ``pip install --target`` of this checkout, then a fresh interpreter on it)."""

import json
import zipfile
from pathlib import Path

import pytest
import yaml

from tests.helpers import ROOT
from tests.helpers.wheel import run_outside


@pytest.fixture(scope="module")
def site(installed_wheel) -> Path:
    return installed_wheel


@pytest.fixture(scope="module")
def wheel(site) -> Path:
    (whl,) = (site.parent / "dist").glob("verifylib-*.whl")  # beside it (tests/helpers/wheel.py)
    return whl


def _expected_data() -> list[str]:
    """Repository files an audit reads, relative to the repository root."""
    from verifylib.evidence.gates import STAGES
    files = [f"notebooks/{s}.ipynb" for s in STAGES]
    # Not audit stages, shipped for researchers and auditors.
    files += ["notebooks/07_compare.ipynb", "notebooks/08_replay.ipynb"]
    files += ["patches/manifest.yaml"]
    pins = yaml.safe_load((ROOT / "patches" / "manifest.yaml").read_text())["pins"]
    files += sorted({f"patches/{pin['patch']}" for pin in pins.values()})
    files += ["parameters/tiny-en.yaml", "parameters/tiny-en-97c56f1.yaml",
              "parameters/tiny-en-v1.9.3.yaml",
              "parameters/fixtures/SHA256SUMS", "parameters/fixtures/directions.txt"]
    sums = (ROOT / "parameters" / "fixtures" / "SHA256SUMS").read_text().split("\n")
    files += [f"parameters/fixtures/{line.split()[1]}" for line in sums if line.strip()]
    return sorted(set(files))


def test_wheel_carries_notebooks_patches_parameters_fixtures_templates_policies(wheel):
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        for rel in _expected_data():
            inside = f"verifylib/_data/{rel}"
            assert inside in names, f"{inside} missing from {wheel.name}"
            assert zf.read(inside) == (ROOT / rel).read_bytes(), inside
        package_data = [p for p in (ROOT / "verifylib").glob("views/templates/audit/*")]
        package_data += list((ROOT / "verifylib").glob("policies/*.json"))
        assert len(package_data) >= 4
        for p in package_data:
            assert f"verifylib/{p.relative_to(ROOT / 'verifylib').as_posix()}" in names
    assert not [n for n in names if "__pycache__" in n or "/reports/" in n]


# Runs in the installed copy: what each path that an audit reads resolves to there.
_PROBE = """
import json, verifylib, verifylib.resources as r, verifylib.params as p, verifylib.batch.audit as o
print(json.dumps({
    "verifylib": verifylib.__file__, "packaged": r.is_packaged(), "data_root": str(r.data_root()),
    "notebook": str(o._notebook("01_build")), "papermill_cwd": str(r.notebooks_dir()),
    "manifest": str(p.PATCHES_MANIFEST), "defaults": str(p.DEFAULT_PARAMETERS),
    "parameters": str(p.PARAMETERS_DIR), "fixture": p.load(p.DEFAULT_PARAMETERS).fixtures[1].path,
}))
"""


def test_installed_wheel_runs_outside_the_checkout_and_reads_its_own_data(site, tmp_path):
    assert ROOT not in tmp_path.resolve().parents  # the checkout is not on sys.path
    res = run_outside(site, tmp_path, "-m", "verifylib", "--help")
    assert res.returncode == 0, res.stderr
    assert "usage: verifylib" in res.stdout
    res = run_outside(site, tmp_path, "-m", "verifylib", "run", "--help")
    assert res.returncode == 0, res.stderr
    assert "--reports" in res.stdout
    res = run_outside(site, tmp_path, "-c", _PROBE)
    assert res.returncode == 0, res.stderr
    got = json.loads(res.stdout)
    # The venv's editable install must not have been imported instead of the wheel's copy.
    assert Path(got.pop("verifylib")).resolve() == (site / "verifylib" / "__init__.py").resolve()
    assert got.pop("packaged") is True
    data = (site / "verifylib" / "_data").resolve()
    for key, value in got.items():
        path = Path(value).resolve()
        assert path == data or data in path.parents, f"{key}: {value} is outside {data}"
        assert Path(value).exists(), f"{key}: {value}"


def test_installed_wheel_finds_the_pin_manifest_without_being_told(site, tmp_path):
    # Stages call load_pins() with no argument; in a wheel it must read the copy in _data.
    probe = ("import verifylib.whispercpp.source as s, verifylib.resources as r\n"
             "pins = s.load_pins()\n"
             "print(sorted(pins))\n")
    res = run_outside(site, tmp_path, "-c", probe)
    assert res.returncode == 0, res.stderr
    assert "v1.8.5" in res.stdout
