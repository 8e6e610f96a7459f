"""The command line as CI reads it: ``--version``, help text, ``run --json``,
``run --junit-xml``, ``verify --json`` and the line saying why (a closed pipe:
tests/fake/test_cli_pipe.py).

Fast: ``run_one`` is replaced by one that publishes a receipt only (what the outputs read),
and ``verify`` by a fixed result; the JUnit file is read back with junitparser.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.helpers import ROOT
from verifylib import canonical
from verifylib.batch import audit as orchestrate
from verifylib.batch import local as executors
from verifylib.cli import main as cli
from verifylib.evidence.gates import Verdict

pytestmark = pytest.mark.unit

GATES = [
    {"id": "build.source_identity", "stage": "01_build", "required": True, "status": "PASS",
     "reason": {"kind": "rule", "detail": "tree equals the pin's"}},
    {"id": "canary.coreml_positive", "stage": "03_canary", "required": True,
     "status": "NOT_RUN", "reason": {"kind": "platform", "detail": "needs macOS"}},
    {"id": "wer.ggml_vs_source", "stage": "05_wer", "required": True, "status": "FAIL",
     "reason": {"kind": "rule", "detail": "corpus WER 0.30 > 0.05 <b>"}},
    {"id": "export.pair", "stage": "02_export", "required": False, "status": "PASS",
     "reason": {"kind": "rule", "detail": "same model"}},
]


def _params(folder: Path, name: str) -> Path:
    data = yaml.safe_load((ROOT / "parameters" / "tiny-en.yaml").read_text())
    data["name"] = name
    data["fixtures"] = data["fixtures"][:1]
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _fake_run_one(verdicts: dict[str, str]):
    def run_one(params, reports_root, **kwargs):  # noqa: ARG001 - run_one's signature
        if params.name not in verdicts:
            raise RuntimeError("kernel did not start")
        run_dir = Path(reports_root) / params.name / "20990101T000000Z-00000001"
        run_dir.mkdir(parents=True)
        verdict = verdicts[params.name]
        gates = GATES if verdict == "REJECTED" else [g for g in GATES if g["status"] != "FAIL"]
        canonical.write_json(run_dir / "receipt.json", {"verdict": verdict, "gates": gates})
        return orchestrate.RunOutcome(params.name, run_dir, Verdict(verdict),
                                      run_dir / "report.html")
    return run_one


def test_version_and_a_bare_command_line(capsys):
    assert cli.main(["--version"]) == 0
    assert capsys.readouterr().out.startswith("verifylib ")
    assert cli.main([]) == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: verifylib") and "exit codes:" in err
    assert "required: cmd" not in err


@pytest.mark.parametrize("command", sorted(cli.EXIT_CODES))
def test_every_help_has_a_description_and_its_exit_codes_without_markup(command, capsys):
    argv = ["--help"] if command == "verifylib" else [command, "--help"]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert cli.EXIT_CODES[command] in out
    body = out.split("\n\n", 1)[1]
    assert body.strip() and "``" not in out and ":func:" not in out and "`" not in out


def test_run_json_is_one_object_and_the_people_lines_go_to_stderr(tmp_path, monkeypatch,
                                                                   capsys):
    monkeypatch.setattr(executors, "run_one", _fake_run_one({"ok": "INCOMPLETE",
                                                             "bad": "REJECTED"}))
    code = cli.main(["run", str(_params(tmp_path, "ok")), str(_params(tmp_path, "bad")),
                     str(_params(tmp_path, "gone")), "--reports", str(tmp_path / "r"),
                     "--json"])
    out = capsys.readouterr()
    doc = json.loads(out.out)
    # A model with no run published: exit 3, whatever the others' verdicts (cli/2).
    assert code == doc["exit_code"] == cli.EXIT_NO_RUN
    assert doc["schema"] == "verifylib-cli/2" and doc["command"] == "run"
    assert doc["verdict"] == "ERROR"
    by = {r["name"]: r for r in doc["runs"]}
    assert [r["verdict"] for r in doc["runs"]] == ["INCOMPLETE", "REJECTED", "ERROR"]
    assert by["ok"]["why"] == ("1 of 2 required gates PASS, 1 NOT_RUN on this host (need a "
                               "Mac: canary.coreml_positive), none failed")
    assert by["bad"]["why"].endswith("failed: wer.ggml_vs_source")
    assert by["gone"]["why"] == "no run published: RuntimeError: kernel did not start"
    assert [g["status"] for g in by["bad"]["gates"]] == ["PASS", "NOT_RUN", "FAIL", "PASS"]
    assert by["ok"]["receipt"].endswith("receipt.json")
    # The people's lines, the one saying why included, are on stderr.
    assert f"ok: verdict INCOMPLETE: {by['ok']['why']}" in out.err.splitlines()


def test_run_junit_xml_has_a_case_per_gate(tmp_path, monkeypatch, capsys):
    from junitparser import Error, Failure, JUnitXml, Skipped

    monkeypatch.setattr(executors, "run_one", _fake_run_one({"bad": "REJECTED"}))
    junit = tmp_path / "gates.xml"
    code = cli.main(["run", str(_params(tmp_path, "bad")), str(_params(tmp_path, "gone")),
                     "--reports", str(tmp_path / "r"), "--junit-xml", str(junit)])
    assert code == cli.EXIT_NO_RUN
    assert f"  junit:   {junit}" in capsys.readouterr().out.splitlines()
    suites = {s.name: s for s in JUnitXml.fromfile(str(junit))}
    assert set(suites) == {"bad", "gone"}
    cases = {c.name: c for c in suites["bad"]}
    assert list(cases) == [g["id"] for g in GATES]
    assert cases["build.source_identity"].is_passed
    (skip,) = cases["canary.coreml_positive"].result
    assert isinstance(skip, Skipped) and skip.message == "NOT_RUN (platform): needs macOS"
    (fail,) = cases["wer.ggml_vs_source"].result
    assert isinstance(fail, Failure) and fail.message == "corpus WER 0.30 > 0.05 <b>"
    assert cases["wer.ggml_vs_source"].classname == "bad.05_wer"
    (gone,) = list(suites["gone"])
    assert isinstance(gone.result[0], Error)
    assert (suites["bad"].tests, suites["bad"].failures, suites["bad"].skipped) == (4, 1, 1)
    assert not list(tmp_path.glob(".gates.xml.*"))


def test_a_junit_file_in_a_missing_folder_is_refused_before_any_work(tmp_path, monkeypatch,
                                                                      capsys):
    calls = []
    monkeypatch.setattr(executors, "run_one", lambda *a, **k: calls.append(a))
    code = cli.main(["run", str(_params(tmp_path, "m")), "--reports", str(tmp_path / "r"),
                     "--junit-xml", str(tmp_path / "no" / "x.xml")])
    assert code == 2 and not calls
    assert "its folder does not exist" in capsys.readouterr().err


def test_verify_json_is_one_object(tmp_path, monkeypatch, capsys):
    from verifylib.evidence import receipt

    monkeypatch.setattr(receipt, "verify", lambda run_dir, allow_simulated=False:
                        receipt.VerifyResult(False, ["gates/x.json: digest differs"],
                                             "INCOMPLETE"))
    assert cli.main(["verify", str(tmp_path), "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc == {"schema": "verifylib-cli/2", "command": "verify",
                   "verifylib": doc["verifylib"], "run_dir": str(tmp_path), "ok": False,
                   "verdict": "INCOMPLETE", "problems": ["gates/x.json: digest differs"],
                   "cause": None, "versions": None, "exit_code": 1}
    assert cli.main(["verify", str(tmp_path / "missing"), "--json"]) == 2
    assert cli.main(["verify", str(tmp_path), "--json", "--replay"]) == 2
