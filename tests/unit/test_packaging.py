"""Packaging promises that need no build: environment.yml mirrors pyproject; CI runs the
README's test command; pins and Python classifiers; where a checkout reads its data. The
wheel is built and installed in tests/fake/test_packaging.py."""

import re
import tomllib

import yaml
from packaging.requirements import Requirement

from tests.helpers import ROOT


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
