""".github/workflows/macos.yml, the Mac run we hand to users, checked without a Mac.

No Mac runs here, so the workflow is checked as a document: it parses as YAML, runs on a
GitHub-hosted arm64 macOS runner with a full Xcode, pins every action to a commit, makes
the steps docs/macos.md asks for in that order (the README's two Quick start commands
read from README.md, so they cannot drift apart), never passes ``--allow-simulated``, and
re-verifies the Mac's runs on Linux in a second job.

*Pinned* means: ``owner/repo@<40 hex digits>``, the full commit SHA, which no one can move,
followed by a ``# vX.Y.Z`` comment naming the release it is; a tag (``@v4``, ``@v4.2.2``)
or a branch (``@main``) can be moved under the workflow, and is refused. When
``check-jsonschema`` is installed, the file is also validated against the GitHub workflow
schema it vendors.
"""

from __future__ import annotations

import re
import tomllib

import pytest
import yaml

from tests.helpers import ROOT

WORKFLOW = ROOT / ".github" / "workflows" / "macos.yml"

ARM64_MAC_LABELS = {"macos-14", "macos-15", "macos-26", "macos-latest", "macos-14-xlarge",
                    "macos-15-xlarge", "macos-26-xlarge", "macos-latest-xlarge"}
"""GitHub-hosted runner labels that are Apple silicon (the ``-large`` and ``-intel`` ones,
and macos-13, are x86-64: no Neural Engine and no arm64 wheels)."""

PIN = re.compile(r"^\s*(?:-\s+)?uses:\s*(?P<action>[A-Za-z0-9_.-]+/[A-Za-z0-9_./-]+)"
                 r"@(?P<ref>\S+)(?:\s+#\s*(?P<comment>.*))?$")
SHA = re.compile(r"^[0-9a-f]{40}$")
RELEASE = re.compile(r"^v\d+\.\d+\.\d+$")


@pytest.fixture(scope="module")
def text() -> str:
    return WORKFLOW.read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def workflow(text) -> dict:
    doc = yaml.safe_load(text)
    # YAML 1.1 (PyYAML) reads the bare key `on` as the boolean true; GitHub reads "on".
    return {("on" if k is True else k): v for k, v in doc.items()}


def _quick_start() -> list[str]:
    """The README's Quick start commands, one per line of its bash block."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", section, re.S)
    assert block, "README.md's Quick start has no bash block"
    return [line.strip() for line in block.group(1).splitlines() if line.strip()]


def _runs(step: dict) -> str:
    return step.get("run") or ""


def _index(steps: list, what: str, match) -> int:
    found = [i for i, s in enumerate(steps) if match(s)]
    assert len(found) == 1, f"expected one step that {what}, found {len(found)}"
    return found[0]


# ----------------------------------------------------------------------------- the document

def test_the_workflow_is_valid_yaml_with_two_jobs(workflow):
    assert workflow["name"]
    assert set(workflow["jobs"]) == {"mac", "linux"}
    for job in workflow["jobs"].values():
        assert isinstance(job["steps"], list) and job["steps"]
        assert isinstance(job["timeout-minutes"], int) and job["timeout-minutes"] <= 360


def test_triggers_are_a_hand_start_and_pushes_to_main(workflow):
    on = workflow["on"]
    assert set(on) == {"workflow_dispatch", "push"}
    assert on["push"] == {"branches": ["main"]}
    # Read-only token: the workflow publishes nothing but its artifact.
    assert workflow["permissions"] == {"contents": "read"}


def test_runners_are_an_arm64_mac_with_full_xcode_and_linux(workflow):
    mac, linux = workflow["jobs"]["mac"], workflow["jobs"]["linux"]
    assert mac["runs-on"] in ARM64_MAC_LABELS
    assert re.fullmatch(r"ubuntu-\d\d\.\d\d", linux["runs-on"])
    # A full Xcode by its folder (the image has several): the Command Line Tools alone
    # have no coremlc.
    assert re.fullmatch(r"/Applications/Xcode_\d+(\.\d+)*\.app", workflow["env"]["XCODE_APP"])


def test_the_python_is_one_the_package_supports(workflow):
    from packaging.specifiers import SpecifierSet

    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    version = workflow["env"]["PYTHON_VERSION"]
    assert isinstance(version, str), "quote the version: YAML reads 3.10 as 3.1"
    assert f"{version}.0" in SpecifierSet(project["requires-python"])
    for job in workflow["jobs"].values():
        setup = [s for s in job["steps"] if s.get("uses", "").startswith("actions/setup-python@")]
        assert [s["with"]["python-version"] for s in setup] == ["${{ env.PYTHON_VERSION }}"]


# ----------------------------------------------------------------------------- pinned actions

def test_every_action_is_pinned_to_a_commit_with_its_release_named(text, workflow):
    lines = [m for m in map(PIN.match, text.splitlines()) if m]
    used = [s["uses"] for job in workflow["jobs"].values() for s in job["steps"] if "uses" in s]
    # Every parsed `uses:` is one of the lines read here (none hides in a flow mapping).
    assert sorted(f"{m['action']}@{m['ref']}" for m in lines) == sorted(used)
    refs: dict[str, set] = {}
    for m in lines:
        assert SHA.match(m["ref"]), f"{m['action']}@{m['ref']}: not a full commit SHA"
        assert m["comment"] and RELEASE.match(m["comment"].strip()), \
            f"{m['action']}: name the release beside the SHA (# vX.Y.Z)"
        refs.setdefault(m["action"], set()).add((m["ref"], m["comment"].strip()))
    # One action, one pin, wherever it is used.
    assert all(len(r) == 1 for r in refs.values()), refs
    assert {"actions/checkout", "actions/setup-python", "actions/upload-artifact",
            "actions/download-artifact"} <= set(refs)


@pytest.mark.parametrize("line, pinned", [
    ("      - uses: actions/checkout@main", False),
    ("      - uses: actions/checkout@v4", False),
    ("        uses: actions/checkout@v4.2.2", False),
    ("        uses: actions/checkout@11bd71901bbe5b1630ceea73d27597364c9af683", False),
    ("        uses: actions/checkout@11bd71901bbe5b1630ceea73d27597364c9af683  # v4", False),
    ("        uses: actions/checkout@11bd71901bbe5b1630ceea73d27597364c9af683  # v4.2.2", True),
])
def test_the_pin_check_refuses_tags_branches_and_unnamed_shas(line, pinned):
    m = PIN.match(line)
    assert m
    ok = bool(SHA.match(m["ref"]) and m["comment"] and RELEASE.match(m["comment"].strip()))
    assert ok is pinned


# ----------------------------------------------------------------------------- the Mac job

def test_the_mac_job_makes_the_documented_steps_in_order(workflow):
    steps = workflow["jobs"]["mac"]["steps"]
    first, second = _quick_start()
    order = [
        _index(steps, "selects the Xcode",
               lambda s: 'sudo xcode-select -s "$XCODE_APP"' in _runs(s)),
        _index(steps, "finds coremlc", lambda s: _runs(s).strip() == "xcrun --find coremlc"),
        _index(steps, "runs verifylib doctor",
               lambda s: ".venv/bin/verifylib doctor\n" in _runs(s)),
        _index(steps, "runs the README's first command", lambda s: _runs(s).strip() == first),
        _index(steps, "runs the README's second command", lambda s: _runs(s).strip() == second),
        _index(steps, "audits with --require admissible",
               lambda s: re.search(r"verifylib run\b.*--require admissible", _runs(s))),
        _index(steps, "verifies the runs", lambda s: "verifylib verify" in _runs(s)),
        _index(steps, "uploads the reports",
               lambda s: s.get("uses", "").startswith("actions/upload-artifact@")),
    ]
    assert order == sorted(order), order
    assert steps[0]["uses"].startswith("actions/checkout@")


def test_the_readme_commands_are_quick_starts_two_lines():
    first, second = _quick_start()
    assert first.endswith("verifylib run") and second.endswith("-m pytest -n 2")


def test_nothing_is_accepted_silently(workflow):
    # No step or job may fail without failing the run, nor skip the simulation check.
    assert workflow["defaults"]["run"]["shell"] == "bash"  # bash -eo pipefail on GitHub
    for job in workflow["jobs"].values():
        assert "continue-on-error" not in job
        for s in job["steps"]:
            assert "continue-on-error" not in s and "shell" not in s, s["name"]
            script = _runs(s)
            assert "--allow-simulated" not in script, s["name"]
            assert "|| true" not in script and "set +e" not in script, s["name"]


def test_the_verify_step_checks_the_admissible_run(workflow):
    steps = workflow["jobs"]["mac"]["steps"]
    audit = next(s for s in steps if "--require admissible" in _runs(s))
    folder = re.search(r"--reports (\S+)", _runs(audit)).group(1)
    verify = next(s for s in steps if "verifylib verify" in _runs(s))
    assert f"{folder}/*/*/receipt.json" in _runs(verify)
    # The audit and the verification still run after a failed test step, so their
    # evidence exists; the job fails either way.
    for s in (audit, verify):
        assert s["if"] == "${{ !cancelled() && steps.doctor.outcome == 'success' }}"


def test_the_reports_are_uploaded_whatever_happened(workflow):
    upload = next(s for s in workflow["jobs"]["mac"]["steps"]
                  if s.get("uses", "").startswith("actions/upload-artifact@"))
    assert upload["if"] == "${{ always() }}"
    paths = upload["with"]["path"].split()
    assert "reports/" in paths
    assert upload["with"]["if-no-files-found"] == "error"
    # Failure records live in reports/<name>/.failed/.
    assert upload["with"]["include-hidden-files"] is True


# ----------------------------------------------------------------------------- the Linux job

def test_the_linux_job_verifies_the_macs_runs(workflow):
    mac, linux = workflow["jobs"]["mac"], workflow["jobs"]["linux"]
    assert linux["needs"] in ("mac", ["mac"])
    assert linux["if"] == "${{ !cancelled() }}"
    upload = next(s for s in mac["steps"] if s.get("uses", "").startswith("actions/upload-"))
    steps = linux["steps"]
    install = _index(steps, "installs verifylib",
                     lambda s: _runs(s).strip() == "python3 -m venv .venv && "
                                                   ".venv/bin/pip install -e .")
    download = _index(steps, "downloads the artifact",
                      lambda s: s.get("uses", "").startswith("actions/download-artifact@"))
    verify = _index(steps, "verifies", lambda s: "verifylib verify" in _runs(s))
    assert install < download < verify
    assert steps[download]["with"]["name"] == upload["with"]["name"]
    where = steps[download]["with"]["path"]
    script = _runs(steps[verify])
    assert f"{where}/reports/" in script and '"Darwin"' in script


# ----------------------------------------------------------------------------- the schema

def test_the_workflow_meets_githubs_workflow_schema(workflow):
    """Against the schema check-jsonschema vendors (skipped when it is not installed)."""
    import json
    from importlib import resources

    pytest.importorskip("check_jsonschema", reason="check-jsonschema is not installed")
    import jsonschema

    schema = json.loads((resources.files("check_jsonschema") / "builtin_schemas" / "vendor"
                         / "github-workflows.json").read_text(encoding="utf-8"))
    jsonschema.validators.validator_for(schema)(schema).validate(workflow)
