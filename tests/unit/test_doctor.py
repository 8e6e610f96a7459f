"""``verifylib doctor`` on injected hosts and tools: which gates run, why not, the fix, the
exit status and the JSON object (the real command on this host: tests/fake/test_doctor.py)."""

from __future__ import annotations

import json

from verifylib.cli import main as cli
from verifylib.cli.doctor import (
    BLOCKED,
    EXIT_READY,
    EXIT_TOOL_MISSING,
    NOT_RUN_PLATFORM,
    RUNS,
    doctor_report,
)
from verifylib.evidence import gates
from verifylib.runtime import capabilities
from verifylib.runtime.capabilities import HostCapabilities, XcodeState
from verifylib.runtime.tools import Tool, Toolset

LINUX = HostCapabilities("Linux", "x86_64", None, None)
DEV = "/Applications/Xcode.app/Contents/Developer"
MAC = HostCapabilities("Darwin", "arm64", (15, 1), f"{DEV}/usr/bin/coremlc", xcode=XcodeState(
    DEV, "xcode-select", capabilities.LICENSE_ACCEPTED, f"{DEV}/usr/bin/coremlc",
    ("/Applications/Xcode.app",)))
LICENSE_MAC = HostCapabilities("Darwin", "arm64", (15, 1), None, xcode=XcodeState(
    DEV, "xcode-select", capabilities.LICENSE_NOT_ACCEPTED, None, ("/Applications/Xcode.app",)))


def _tools(*missing: str) -> Toolset:
    def one(name):
        if name in missing:
            return Tool(name, None, None, f"install {name}")
        return Tool(name, f"/usr/bin/{name}", "PATH", f"install {name}", f"{name} version 1")
    return Toolset(cmake=one("cmake"), git=one("git"), cc=one("cc"), cxx=one("c++"))


def _report(host, tools, tmp_path):
    return doctor_report(host=host, tools=tools, cache=tmp_path / "not-yet" / "cache",
                         package_version=lambda name: {"torch": "2.13.0"}.get(name))


def _by_id(report):
    return {g.id: g for g in report.gates}


def test_linux_runs_every_any_gate_and_lists_core_ml_as_not_run_platform(tmp_path):
    r = _report(LINUX, _tools(), tmp_path)
    assert r.exit_code == EXIT_READY and r.can_audit
    rows = _by_id(r)
    assert set(rows) == {g.id for g in gates.GATES}
    for g in gates.GATES:
        row = rows[g.id]
        if g.capability is gates.Capability.ANY:
            assert row.status == RUNS and row.why is None and row.fix is None
        else:
            assert row.status == NOT_RUN_PLATFORM, row
            assert row.why == LINUX.missing(g.capability)  # the audit's own sentence
            assert row.fix.startswith("run the audit on a Mac")
    assert "INCOMPLETE at best" in r.summary()
    assert r.free_bytes is not None and r.free_bytes > 0  # of the cache's nearest parent
    assert r.packages == {"coremltools": None, "torch": "2.13.0"}


def test_a_mac_with_full_xcode_runs_every_gate(tmp_path):
    r = _report(MAC, _tools(), tmp_path)
    assert {g.status for g in r.gates} == {RUNS}
    assert "ADMISSIBLE" in r.summary() and r.exit_code == EXIT_READY


def test_the_license_names_its_fix_and_only_xcode_gates_wait_for_it(tmp_path):
    r = _report(LICENSE_MAC, _tools(), tmp_path)
    rows = _by_id(r)
    for g in gates.GATES:
        expect = NOT_RUN_PLATFORM if g.capability is gates.Capability.MACOS_XCODE else RUNS
        assert rows[g.id].status == expect, g.id
    assert rows["export.compile"].fix == "sudo xcodebuild -license accept"
    text = r.text()
    assert "Xcode license" in text and "not-accepted" in text
    assert "sudo xcodebuild -license accept" in text


def test_a_missing_tool_blocks_the_audit_and_exits_2(tmp_path):
    r = _report(LINUX, _tools("cmake"), tmp_path)
    assert r.exit_code == EXIT_TOOL_MISSING and not r.can_audit
    rows = _by_id(r)
    assert rows["build.ggml"].status == BLOCKED and rows["build.ggml"].fix == "install cmake"
    assert rows["build.coreml"].status == NOT_RUN_PLATFORM  # the platform reason comes first
    assert "the audit cannot start here" in r.summary() and "cmake" in r.summary()
    assert "MISSING" in r.text()


def test_json_is_one_object_with_every_part(tmp_path):
    r = _report(LINUX, _tools(), tmp_path)
    data = json.loads(json.dumps(r.as_json()))
    assert data["exit_code"] == 0 and data["can_audit"] is True
    assert data["tools"]["cmake"] == {"name": "cmake", "path": "/usr/bin/cmake",
                                      "source": "PATH", "fix": "install cmake",
                                      "version": "cmake version 1", "note": None, "found": True}
    assert data["xcode"] is None and data["macos_version"] is None
    assert [g["id"] for g in data["gates"]] == [g.id for g in gates.GATES]
    assert data["cache"]["path"].endswith("cache")


def test_text_is_aligned_tables(tmp_path):
    text = _report(MAC, _tools(), tmp_path).text()
    gate_lines = [ln for ln in text.splitlines() if ln.startswith("  build.")]
    # The status column starts at the same place on every gate line.
    assert len({ln.index(" runs") for ln in gate_lines}) == 1
    assert "xcrun coremlc" in text and f"{DEV}/usr/bin/coremlc" in text


def test_the_cli_prints_json_and_returns_the_exit_code(monkeypatch, capsys, tmp_path):
    import verifylib.cli.doctor as doctor
    report = _report(LINUX, _tools("git"), tmp_path)
    monkeypatch.setattr(doctor, "doctor_report", lambda **_: report)
    assert cli.main(["doctor", "--json"]) == EXIT_TOOL_MISSING
    assert json.loads(capsys.readouterr().out)["tools"]["git"]["found"] is False
    assert cli.main(["doctor"]) == EXIT_TOOL_MISSING
    assert "the audit cannot start here" in capsys.readouterr().out


def _given_mlmodelc(tmp_path, val: str):
    """A compiled folder whose one-statement program holds ``val`` as a constant."""
    folder = tmp_path / "ggml-tiny.en-encoder.mlmodelc"
    folder.mkdir()
    s = "tensor<string, []>"
    (folder / "model.mil").write_text("\n".join([
        "program(1.0)", f'[buildInfo = dict<{s}, {s}>({{{{"coremlc-version", "3500.32.1"}}}})]',
        "{", "    func main<ios16>(tensor<fp32, [1, 4]> x) {",
        f'            tensor<fp32, []> c = const()[name = {s}("op_c"), val = {val}];',
        f'            tensor<fp32, [1, 4]> y = mul(x = x, y = c)[name = {s}("op_y")];',
        "        } -> (y);", "}"]))
    return {"encoder": {"path": str(folder)}}


def test_a_given_mlmodelc_whose_program_reads_runs_its_program_gates_on_linux(tmp_path):
    params = _given_mlmodelc(tmp_path, "tensor<fp32, []>(0x1p-3)")
    rows = _by_id(doctor_report(host=LINUX, tools=_tools(), cache=tmp_path / "c",
                                package_version=lambda _n: None, params=params))
    for gid in gates.PROGRAM_GATES:
        assert rows[gid].status == RUNS and rows[gid].capability == "any", rows[gid]
    assert rows["export.compile"].status == NOT_RUN_PLATFORM  # placing needs Core ML


def test_a_given_mlmodelc_whose_program_does_not_read_says_why(tmp_path):
    params = _given_mlmodelc(tmp_path, "tensor<fp32, []>(0.1)")
    rows = _by_id(doctor_report(host=LINUX, tools=_tools(), cache=tmp_path / "c",
                                package_version=lambda _n: None, params=params))
    for gid in gates.PROGRAM_GATES:
        row = rows[gid]
        assert row.status == NOT_RUN_PLATFORM and row.capability == "macos", row
        assert "cannot run the program of its model.mil" in row.why
        assert "0.1 is not exact as fp32" in row.why
