"""A Mac's developer tools as verifylib reads them (capabilities.probe_xcode): no tools, the
Command Line Tools alone or selected over an installed Xcode, the license not accepted,
``$DEVELOPER_DIR``; each with the command that fixes it. The tools' answers are injected
(``xcode-select -p`` and ``xcrun --find coremlc`` as Apple's exit and print them)."""

from __future__ import annotations

from pathlib import Path

import pytest

from verifylib.evidence.gates import Capability
from verifylib.evidence.receipt import host_capabilities
from verifylib.runtime import capabilities as caps
from verifylib.runtime.capabilities import HostCapabilities, probe_xcode
from verifylib.runtime.runner import RunResult

CLT = "/Library/Developer/CommandLineTools"
NOT_FOUND = b'xcrun: error: unable to find utility "coremlc", not a developer tool or in PATH\n'
LICENSE = (b"You have not agreed to the Xcode license agreements, please run 'sudo xcodebuild "
           b"-license' from within a Terminal window to review and agree to the Xcode license "
           b"agreements.\n")


def _res(argv, rc: int, out: str = "", err: bytes = b"") -> RunResult:
    return RunResult(argv=list(argv), returncode=rc, signal=None, timed_out=False,
                     stdout=out.encode(), stderr=err, wall_s=0.01)


def _xcode_app(folder: Path, name: str = "Xcode.app") -> Path:
    app = folder / name
    (app / "Contents" / "Developer").mkdir(parents=True)
    return app


class Tools:
    """xcode-select and xcrun answering as a Mac in one state does; records what ran."""

    def __init__(self, selected: str | None, xcrun: tuple[int, str, bytes] | None):
        self.selected, self.xcrun, self.ran = selected, xcrun, []

    def __call__(self, argv):
        self.ran.append(argv[0])
        if argv[0] == "xcode-select":
            if self.selected is None:
                return _res(argv, 2, err=b"xcode-select: error: unable to get active developer "
                                         b"directory\n")
            return _res(argv, 0, self.selected + "\n")
        if self.xcrun is None:
            return None
        rc, out, err = self.xcrun
        return _res(argv, rc, out, err)


def _probe(tools: Tools, apps=(), env=None):
    return probe_xcode(tool=tools, environ=env or {}, applications=tuple(map(str, apps)))


def test_no_developer_tools_runs_no_xcrun_and_names_the_installer(tmp_path):
    t = Tools(None, (0, "/never", b""))
    x = _probe(t, [tmp_path])
    assert x.state == caps.NO_DEVELOPER_TOOLS and x.developer_dir is None
    assert t.ran == ["xcode-select"]  # xcrun would be the shim that opens the installer
    assert x.fix.startswith("xcode-select --install")


def test_full_xcode_selected_resolves_coremlc(tmp_path):
    app = _xcode_app(tmp_path)
    dev = f"{app}/Contents/Developer"
    x = _probe(Tools(dev, (0, f"{dev}/usr/bin/coremlc", b"")), [tmp_path])
    assert x.state == caps.XCODE_READY and x.problem is None and x.fix is None
    assert x.license == caps.LICENSE_ACCEPTED and x.coremlc == f"{dev}/usr/bin/coremlc"
    assert x.selected_by == caps.SELECTED_BY_XCODE_SELECT and x.installed == (str(app),)
    host = HostCapabilities("Darwin", "arm64", (15, 1), x.coremlc, xcode=x)
    assert host.has(Capability.MACOS_XCODE) and host.fix(Capability.MACOS_XCODE) is None


def test_command_line_tools_alone(tmp_path):
    x = _probe(Tools(CLT, (72, "", NOT_FOUND)), [tmp_path])
    assert x.state == caps.CLT_ONLY and x.license == caps.LICENSE_NOT_APPLICABLE
    assert "only the Command Line Tools" in x.problem and x.fix.startswith("install Xcode")


def test_xcode_installed_but_the_command_line_tools_selected(tmp_path):
    app = _xcode_app(tmp_path, "Xcode-16.2.app")
    x = _probe(Tools(CLT, (72, "", NOT_FOUND)), [tmp_path])
    assert x.state == caps.CLT_SELECTED
    assert x.fix == f"sudo xcode-select -s {app}/Contents/Developer"
    assert str(app) in x.problem and CLT in x.problem


def test_license_not_accepted(tmp_path):
    app = _xcode_app(tmp_path)
    x = _probe(Tools(f"{app}/Contents/Developer", (69, "", LICENSE)), [tmp_path])
    assert x.state == caps.LICENSE_PENDING and x.license == caps.LICENSE_NOT_ACCEPTED
    assert x.coremlc is None and x.fix == "sudo xcodebuild -license accept"
    assert "exits 69" in x.problem


def test_developer_dir_overrides_xcode_select_and_is_recorded(tmp_path):
    app = _xcode_app(tmp_path)
    t = Tools(f"{app}/Contents/Developer", (72, "", NOT_FOUND))
    x = _probe(t, [tmp_path], env={"DEVELOPER_DIR": CLT})
    assert (x.developer_dir, x.selected_by) == (CLT, caps.SELECTED_BY_ENV)
    assert x.state == caps.CLT_SELECTED and "DEVELOPER_DIR" in x.problem
    assert x.fix == f"unset DEVELOPER_DIR, or set it to {app}/Contents/Developer"
    assert x.as_record()["selected_by"] == "DEVELOPER_DIR"


def test_a_coremlc_outside_an_app_bundle_is_not_full_xcode(tmp_path):
    app = _xcode_app(tmp_path)
    x = _probe(Tools(f"{app}/Contents/Developer", (0, f"{CLT}/usr/bin/coremlc", b"")),
               [tmp_path])
    assert x.coremlc is None and x.state == caps.NO_COREMLC
    assert "does not resolve inside the selected Xcode" in x.problem


def test_xcrun_missing_leaves_the_license_unknown(tmp_path):
    x = _probe(Tools(CLT, None), [tmp_path])
    assert x.license == caps.LICENSE_UNKNOWN and x.coremlc is None


@pytest.mark.parametrize("state, expect", [
    ("clt-selected", "sudo xcode-select -s"),
    ("license", "sudo xcodebuild -license accept"),
    ("none", "xcode-select --install"),
])
def test_the_missing_capability_says_why_and_the_fix(tmp_path, state, expect):
    app = _xcode_app(tmp_path)
    tools = {"clt-selected": Tools(CLT, (72, "", NOT_FOUND)),
             "license": Tools(f"{app}/Contents/Developer", (69, "", LICENSE)),
             "none": Tools(None, None)}[state]
    x = _probe(tools, [tmp_path])
    host = HostCapabilities("Darwin", "arm64", (15, 1), x.coremlc, xcode=x)
    why = host.missing(Capability.MACOS_XCODE)
    assert why.startswith("needs full Xcode") and expect in why
    assert expect in host.fix(Capability.MACOS_XCODE)
    assert host.has(Capability.MACOS)  # the runtime gates need macOS only


def test_a_host_without_a_developer_tools_record_keeps_the_old_message():
    host = HostCapabilities("Darwin", "arm64", (15, 1), None)
    assert host.missing(Capability.MACOS_XCODE) == (
        "needs full Xcode: `xcrun --find coremlc` does not resolve inside Xcode.app")
    assert "sudo xcode-select -s" in host.fix(Capability.MACOS_XCODE)


def test_fixes_off_macos_and_on_an_old_macos():
    linux = HostCapabilities("Linux", "x86_64", None, None)
    assert linux.fix(Capability.ANY) is None
    assert linux.fix(Capability.MACOS).startswith("run the audit on a Mac")
    old = HostCapabilities("Darwin", "arm64", (14, 0), "/Applications/Xcode.app/x/coremlc")
    assert old.fix(Capability.MACOS_14_4).startswith("update macOS to 14.4")


def test_records_with_and_without_the_xcode_field_verify_alike(tmp_path):
    """verify re-derives capabilities from system, macos_version and coremlc: a record made
    before ``xcode`` existed and one that holds it give the same answers."""
    app = _xcode_app(tmp_path)
    dev = f"{app}/Contents/Developer"
    for tools in (Tools(dev, (0, f"{dev}/usr/bin/coremlc", b"")),
                  Tools(dev, (69, "", LICENSE)), Tools(CLT, (72, "", NOT_FOUND))):
        x = _probe(tools, [tmp_path])
        rec = HostCapabilities("Darwin", "arm64", (15, 1), x.coremlc, xcode=x).as_record()
        assert rec["xcode"]["state"] == x.state
        old = {k: v for k, v in rec.items() if k != "xcode"}
        assert host_capabilities(rec) == host_capabilities(old) == rec["capabilities"]
    linux = HostCapabilities("Linux", "x86_64", None, None).as_record()
    assert "xcode" not in linux
