"""The build tools found up front (verifylib/runtime/tools.py): where cmake comes from, the
compilers and git, macOS's shims, and the one refusal naming every missing tool. Nothing is
launched: PATH is searched, the PyPI ``cmake`` package imported, version lines injected."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

from verifylib.errors import ParametersInvalid
from verifylib.runtime import capabilities, tools
from verifylib.runtime.capabilities import HostCapabilities, XcodeState
from verifylib.whispercpp import cmake_steps


def _exe(folder: Path, name: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(0o755)
    return path


@pytest.fixture
def bare_path(tmp_path, monkeypatch):
    """A PATH with nothing on it but what a test puts in the returned folder, and no CC/CXX."""
    folder = tmp_path / "bin"
    folder.mkdir()
    monkeypatch.setenv("PATH", str(folder))
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.delenv("CXX", raising=False)
    return folder


def _pypi_cmake_package(monkeypatch, bin_dir: Path | None) -> None:
    """Install a stand-in for the PyPI ``cmake`` module (None: the package is absent)."""
    if bin_dir is None:
        monkeypatch.setitem(sys.modules, "cmake", None)  # import cmake -> ImportError
        return
    monkeypatch.setitem(sys.modules, "cmake", types.SimpleNamespace(CMAKE_BIN_DIR=str(bin_dir)))


# ----------------------------------------------------------------------------- cmake

def test_cmake_on_path_wins_over_the_pypi_package(bare_path, tmp_path, monkeypatch):
    on_path = _exe(bare_path, "cmake")
    _exe(tmp_path / "pypi" / "bin", "cmake")
    _pypi_cmake_package(monkeypatch, tmp_path / "pypi" / "bin")
    t = tools.find_cmake()
    assert (t.path, t.source) == (str(on_path), tools.FROM_PATH)


def test_the_pypi_package_is_the_fallback(bare_path, tmp_path, monkeypatch):
    pypi = _exe(tmp_path / "pypi" / "bin", "cmake")
    _pypi_cmake_package(monkeypatch, tmp_path / "pypi" / "bin")
    t = tools.find_cmake()
    assert (t.path, t.source) == (str(pypi), tools.FROM_PYPI)
    assert tools.cmake_executable() == str(pypi)


def test_a_pypi_package_without_its_binary_does_not_count(bare_path, tmp_path, monkeypatch):
    (tmp_path / "pypi" / "bin").mkdir(parents=True)  # a partial install: no binary
    _pypi_cmake_package(monkeypatch, tmp_path / "pypi" / "bin")
    assert not tools.find_cmake().found


def test_no_cmake_anywhere_is_refused_naming_pip_install(bare_path, monkeypatch):
    for name in ("git", "cc", "c++"):
        _exe(bare_path, name)
    _pypi_cmake_package(monkeypatch, None)
    with pytest.raises(tools.ToolMissing) as info:
        tools.require_tools()
    exc = info.value
    assert isinstance(exc, ParametersInvalid)  # the CLI's exit 2, never an ERROR gate
    assert [t.name for t in exc.missing] == ["cmake"]
    assert "pip install cmake" in str(exc) and "git (" not in str(exc)
    with pytest.raises(tools.ToolMissing, match="pip install cmake"):
        tools.cmake_executable()
    # pin-check --no-build needs git alone
    assert tools.require_tools(build=False).git.found


def test_every_missing_tool_is_named_with_its_fix(bare_path, monkeypatch):
    _pypi_cmake_package(monkeypatch, None)
    found = tools.find_tools(system="Linux")
    assert [t.name for t in found.missing] == ["cmake", "cc", "c++", "git"]
    text = tools.describe_missing(found.missing)
    for piece in ("cmake (", "cc (", "c++ (", "git (", "sudo apt-get install build-essential",
                  "sudo apt-get install git", "pip install cmake"):
        assert piece in text, piece


@pytest.mark.parametrize("system, name, fix", [
    ("Linux", "cmake", "pip install cmake (or: sudo apt-get install cmake)"),
    ("Linux", "cc", "sudo apt-get install build-essential"),
    ("Linux", "c++", "sudo apt-get install build-essential"),
    ("Linux", "git", "sudo apt-get install git"),
    ("Darwin", "cmake", "pip install cmake (or: brew install cmake)"),
    ("Darwin", "cc", "xcode-select --install"),
    ("Darwin", "git", "xcode-select --install"),
])
def test_fix_commands_per_system(system, name, fix):
    assert tools.fix_command(name, system) == fix


# ----------------------------------------------------------------------------- compilers

def test_compilers_come_from_cc_and_cxx_when_set(bare_path, tmp_path, monkeypatch):
    clang = _exe(tmp_path / "llvm", "clang-18")
    monkeypatch.setenv("PATH", f"{bare_path}:{tmp_path / 'llvm'}")
    monkeypatch.setenv("CC", "clang-18 -fcolor-diagnostics")  # CMake allows flags after it
    _exe(bare_path, "c++")
    found = tools.find_tools(system="Linux")
    assert (found.cc.path, found.cc.source) == (str(clang), tools.FROM_ENV)
    assert (found.cxx.path, found.cxx.source) == (str(bare_path / "c++"), tools.FROM_PATH)


def test_a_cc_that_names_nothing_is_missing_with_its_own_fix(bare_path, monkeypatch):
    _exe(bare_path, "cc")  # cc is on PATH, but CMake would use $CC
    monkeypatch.setenv("CC", "gcc-99")
    cc = tools.find_tools(system="Linux").cc
    assert not cc.found and "gcc-99" in cc.note and "unset it" in cc.fix


def test_macos_shims_count_only_when_developer_tools_can_run(monkeypatch):
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.delenv("CXX", raising=False)
    shims = {n: f"/usr/bin/{n}" for n in ("cc", "c++", "git")}
    which = {**shims, "cmake": "/opt/homebrew/bin/cmake"}.get
    ready = tools.find_tools(which=which, system="Darwin", shim_problem=lambda: None)
    assert not ready.missing
    none = tools.find_tools(which=which, system="Darwin",
                            shim_problem=lambda: ("no developer tools", "xcode-select --install"))
    assert [t.name for t in none.missing] == ["cc", "c++", "git"]
    assert {t.fix for t in none.missing} == {"xcode-select --install"}
    assert "system shim" in none.cc.note
    # Off macOS the same paths are real programs.
    assert not tools.find_tools(which=which, system="Linux",
                                shim_problem=lambda: ("never asked", "-")).missing


@pytest.mark.parametrize("xcode, fix", [
    (XcodeState(None, None, capabilities.LICENSE_NOT_APPLICABLE, None), "xcode-select --install"),
    (XcodeState("/Applications/Xcode.app/Contents/Developer", "xcode-select",
                capabilities.LICENSE_NOT_ACCEPTED, None, ("/Applications/Xcode.app",)),
     "sudo xcodebuild -license accept"),
    (XcodeState("/Library/Developer/CommandLineTools", "xcode-select",
                capabilities.LICENSE_NOT_APPLICABLE, None), None),
])
def test_the_shims_follow_the_hosts_developer_tools(xcode, fix, monkeypatch):
    """The default check reads the detected host: no developer tools, or a license not
    accepted (every tool then exits 69), makes the shims missing; the CLT alone build."""
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.delenv("CXX", raising=False)
    capabilities.simulate(HostCapabilities("Darwin", "arm64", (15, 1), None, simulated=True,
                                           xcode=xcode))
    try:
        found = tools.find_tools(which=lambda n: f"/usr/bin/{n}", system="Darwin")
    finally:
        capabilities.simulate(None)
    if fix is None:
        assert not found.missing
    else:
        assert [t.name for t in found.missing] == ["cc", "c++", "git"]
        assert {t.fix for t in found.missing} == {fix}


# ----------------------------------------------------------------------------- versions

def test_versions_are_probed_only_when_asked(bare_path, monkeypatch):
    for name in ("cmake", "git", "cc", "c++"):
        _exe(bare_path, name)
    found = tools.find_tools(system="Linux")
    assert all(t.version is None for t in found.tools)  # finding launched nothing
    asked: list[str] = []

    def probe(path):
        asked.append(Path(path).name)
        return None if path.endswith("git") else f"{Path(path).name} version 1"

    probed = tools.with_versions(found, probe)
    assert sorted(asked) == ["c++", "cc", "cmake", "git"]
    assert probed.cmake.version == "cmake version 1" and probed.git.version is None
    assert probed.cmake.as_record()["found"] is True


# ----------------------------------------------------------------------------- the build's guard

def test_a_build_without_cmake_raises_tool_missing_not_file_not_found(bare_path, tmp_path,
                                                                       monkeypatch):
    _pypi_cmake_package(monkeypatch, None)
    with pytest.raises(tools.ToolMissing, match="pip install cmake"):
        cmake_steps.cmake_target(tmp_path / "src", tmp_path / "b", {}, "whisper-cli", "t",
                                 jobs=1, timeout=5, log=lambda m: None)


def test_a_cmake_that_vanished_before_launch_raises_tool_missing(bare_path, tmp_path,
                                                                  monkeypatch):
    _exe(bare_path, "cmake")

    def vanished(argv, **kwargs):
        raise FileNotFoundError(2, "No such file or directory", argv[0])

    monkeypatch.setattr(cmake_steps, "run", vanished)
    with pytest.raises(tools.ToolMissing, match="could not be launched"):
        cmake_steps.cmake_target(tmp_path / "src", tmp_path / "b", {}, "whisper-cli", "t",
                                 jobs=1, timeout=5, log=lambda m: None)
