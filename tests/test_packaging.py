"""Packaging promises: environment.yml mirrors pyproject; CI runs the README's test command."""

import re
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def test_environment_yml_matches_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = set(project["dependencies"]) | set(project["optional-dependencies"]["test"])
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    assert set(x for x in pip if not x.startswith("-e")) == wanted
    assert "-e ." in pip
    assert "python=3.11" in env["dependencies"]


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
