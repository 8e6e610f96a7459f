"""Packaging promises: environment.yml mirrors pyproject; CI runs the README's test command;
a wheel carries everything an audit reads and works outside the checkout."""

import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]


def test_environment_yml_matches_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = set(project["dependencies"]) | set(project["optional-dependencies"]["test"])
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    assert set(x for x in pip if not x.startswith("-e")) == wanted
    assert "-e ." in pip
    # conda spells a version range like requires-python, after the package name
    assert f"python{project['requires-python']}" in env["dependencies"]


def _quick_start_commands():
    text = (ROOT / "README.md").read_text()
    m = re.search(r"^#+\s*quick\s*start.*?$", text, re.I | re.M)
    block = re.search(r"```[^\n]*\n(.*?)```", text[m.end():], re.S).group(1)
    return [l.strip() for l in block.splitlines() if l.strip() and not l.startswith("#")]


def test_readme_quick_start_has_two_commands_and_ci_runs_the_test_one():
    cmds = _quick_start_commands()
    assert len(cmds) == 2
    assert "verifylib run" in cmds[0]
    assert "pytest" in cmds[1]
    ci = (ROOT / ".ci" / "run").read_text()
    assert cmds[1] in ci


def test_pins_are_pinned_where_it_matters():
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert "coremltools==9.0" in deps and "torch==2.13.0" in deps
    assert any(d.startswith("nbconvert>=7.17.1") for d in deps)


def test_python_range_has_a_classifier_per_minor_version():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    spec = Requirement(f"python{project['requires-python']}").specifier
    supported = [f"3.{m}" for m in range(11, 20) if spec.contains(f"3.{m}.0")]
    assert supported[0] == "3.11" and len(supported) >= 2
    listed = {c.rsplit(" :: ", 1)[1] for c in project["classifiers"]
              if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)}
    assert listed == set(supported)


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


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("wheel")
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


@pytest.fixture(scope="module")
def site(wheel) -> Path:
    target = wheel.parent.parent / "site"
    res = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-compile",
                          "--disable-pip-version-check", "-q", "--target", str(target),
                          str(wheel)], capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout + res.stderr
    return target


def _expected_data() -> list[str]:
    """Repository files an audit reads, relative to the repository root."""
    from verifylib.evidence.gates import STAGES
    files = [f"notebooks/{s}.ipynb" for s in STAGES]
    files += ["notebooks/07_compare.ipynb"]   # not an audit stage, shipped for researchers
    files += ["patches/manifest.yaml"]
    pins = yaml.safe_load((ROOT / "patches" / "manifest.yaml").read_text())["pins"]
    files += sorted({f"patches/{pin['patch']}" for pin in pins.values()})
    files += ["parameters/tiny-en.yaml", "parameters/tiny-en-97c56f1.yaml",
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
        package_data = [p for p in (ROOT / "verifylib").glob("templates/audit/*")]
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


def _run_outside(site: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(site))
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


def test_installed_wheel_runs_outside_the_checkout_and_reads_its_own_data(site, tmp_path):
    assert ROOT not in tmp_path.resolve().parents  # the checkout is not on sys.path
    res = _run_outside(site, tmp_path, "-m", "verifylib", "--help")
    assert res.returncode == 0, res.stderr
    assert "usage: verifylib" in res.stdout
    res = _run_outside(site, tmp_path, "-m", "verifylib", "run", "--help")
    assert res.returncode == 0, res.stderr
    assert "--reports" in res.stdout
    res = _run_outside(site, tmp_path, "-c", _PROBE)
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
    res = _run_outside(site, tmp_path, "-c", probe)
    assert res.returncode == 0, res.stderr
    assert "v1.8.5" in res.stdout


def test_checkout_reads_its_top_level_folders():
    from verifylib import resources
    assert not resources.is_packaged()  # nobody left a verifylib/_data in the checkout
    assert resources.data_root() == ROOT
    assert resources.manifest_path() == ROOT / "patches" / "manifest.yaml"
    assert resources.default_parameters() == ROOT / "parameters" / "tiny-en.yaml"
    assert resources.notebooks_dir() == ROOT / "notebooks"


def test_run_defaults_to_reports_of_the_current_directory(tmp_path, monkeypatch, capsys):
    from verifylib.cli import main as cli
    from verifylib import resources
    monkeypatch.chdir(tmp_path)
    assert resources.reports_dir() == tmp_path / "reports"
    assert cli.main(["run", "--help"]) == 0
    out = " ".join(capsys.readouterr().out.split())  # argparse wraps the help text
    assert "--reports DIR" in out and "./reports of the current directory" in out


def test_no_module_resolves_data_beside_the_package():
    # resources.py is the one place that knows where notebooks/, patches/ and parameters/ are
    beside = re.compile(r"REPO_ROOT|__file__\)(\.resolve\(\))?\.(parent\.parent|parents\[)")
    offenders = [str(p.relative_to(ROOT)) for p in (ROOT / "verifylib").rglob("*.py")
                 if p.name != "resources.py" and beside.search(p.read_text(encoding="utf-8"))]
    assert offenders == []


@pytest.mark.physical
@pytest.mark.notebook
def test_installed_wheel_audits_and_verifies_outside_the_checkout(site, tmp_path):
    # The whole default audit from the wheel's copy: its notebooks, patches, parameters and
    # fixtures, with reports in ./reports of a folder that is not the checkout. The build
    # cache is shared with the other physical tests, so this costs about a minute warm.
    res = _run_outside(site, tmp_path, "-m", "verifylib", "run", "--no-progress")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "INCOMPLETE" in res.stdout
    (run_dir,) = [p for p in (tmp_path / "reports" / "tiny-en").iterdir()
                  if not p.name.startswith(".")]
    run = json.loads((run_dir / "run.json").read_text())
    origin = Path(run["params_origin"]).resolve()
    assert (site / "verifylib" / "_data").resolve() in origin.parents, origin
    assert str(ROOT) not in json.dumps(run["params"])  # nothing read from the checkout
    res = _run_outside(site, tmp_path, "-m", "verifylib", "verify", str(run_dir))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "verifies" in res.stdout
