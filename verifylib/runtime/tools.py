"""The build tools an audit needs, found up front: cmake, git, a C and a C++ compiler.

Every audit builds whisper.cpp (cmake and both compilers) and identifies its source by git
tree id (git), so a host without one of them cannot run any gate. Finding them here, before
any work, turns that into one refusal (:class:`ToolMissing`, exit 2) that names every
missing tool and the command that installs it, instead of a ``FileNotFoundError`` deep
inside a gate.

Where cmake comes from, in this order:

1. ``cmake`` on ``PATH``: the user's own choice (Homebrew, a distribution package, an
   activated virtual environment) wins;
2. the binary of the PyPI ``cmake`` package, a dependency of verifylib, so a Mac without
   Homebrew still has one (``cmake.CMAKE_BIN_DIR``).

Neither macOS nor Xcode ships cmake. The version line of the cmake used enters the build
key (:func:`verifylib.whispercpp.toolchain.compiler_identity`); its path is recorded as
the first word of the configure command of each build.

Finding a tool launches nothing: ``PATH`` is searched and the ``cmake`` package imported.
Version lines come from :func:`with_versions`, which runs each tool's ``--version``.
"""

from __future__ import annotations

import dataclasses
import os
import platform
import shlex
import shutil
from dataclasses import dataclass
from typing import Callable

from verifylib.errors import ParametersInvalid
from verifylib.runtime.runner import run

CMAKE, GIT, CC, CXX = "cmake", "git", "cc", "c++"
"""The tool names, as :class:`Tool` ``name`` and in messages."""

FROM_PATH, FROM_PYPI, FROM_ENV = "PATH", "pypi", "env"
"""Where a tool was found: ``PATH``, the PyPI ``cmake`` package, or ``$CC``/``$CXX``."""

_COMPILER_ENV = {CC: "CC", CXX: "CXX"}
# On macOS these are shims in /usr/bin that exist with no developer tools installed (they
# offer to install the Command Line Tools and exit 1) and that exit 69 while the Xcode
# license is not accepted; they count only when the selected developer tools can run.
_MACOS_SHIMS = ("/usr/bin/cc", "/usr/bin/c++", "/usr/bin/git", "/usr/bin/clang",
                "/usr/bin/clang++", "/usr/bin/gcc", "/usr/bin/g++")


@dataclass(frozen=True)
class Tool:
    """One build tool as found on this host.

    Attributes
    ----------
    name : str
        ``cmake``, ``git``, ``cc`` or ``c++``.
    path : str or None
        The executable that will run, or None when the tool is missing.
    source : str or None
        Where it was found: :data:`FROM_PATH`, :data:`FROM_PYPI` (cmake only) or
        :data:`FROM_ENV` (a compiler named by ``$CC``/``$CXX``); None when missing.
    fix : str
        The command that installs it on this host's system.
    version : str or None
        The first line of its ``--version``, once probed (:func:`with_versions`); None
        before, or when the tool is missing or did not answer.
    note : str or None
        Why it counts as missing when it was found but cannot run (a macOS shim without
        developer tools, a ``$CC`` that names nothing).
    """

    name: str
    path: str | None
    source: str | None
    fix: str
    version: str | None = None
    note: str | None = None

    @property
    def found(self) -> bool:
        """True when the tool is there to run."""
        return self.path is not None

    def as_record(self) -> dict:
        """Return the tool as a JSON-able dict (every attribute, ``found`` included)."""
        return {**dataclasses.asdict(self), "found": self.found}


@dataclass(frozen=True)
class Toolset:
    """The four build tools of this host.

    Attributes
    ----------
    cmake, git, cc, cxx : Tool
        Each tool as found.
    """

    cmake: Tool
    git: Tool
    cc: Tool
    cxx: Tool

    @property
    def tools(self) -> tuple[Tool, ...]:
        """The four tools, in a fixed order (cmake, cc, c++, git)."""
        return (self.cmake, self.cc, self.cxx, self.git)

    @property
    def missing(self) -> tuple[Tool, ...]:
        """The tools that are not there, in :attr:`tools` order."""
        return tuple(t for t in self.tools if not t.found)


class ToolMissing(ParametersInvalid):
    """A build tool the audit needs is not installed: the message names each and its fix.

    Parameters
    ----------
    missing : sequence of Tool
        The missing tools (at least one).

    Attributes
    ----------
    missing : tuple of Tool
        The missing tools.
    """

    def __init__(self, missing):
        self.missing = tuple(missing)
        super().__init__(describe_missing(self.missing))


def describe_missing(missing) -> str:
    """Say which tools are missing and how to install each, in one message.

    Parameters
    ----------
    missing : sequence of Tool
        Missing tools.

    Returns
    -------
    str
        ``missing build tool(s): cmake (…; install: pip install cmake), …``.
    """
    parts = []
    for t in missing:
        why = t.note or ("not on PATH, and the PyPI cmake package is not installed"
                         if t.name == CMAKE else "not on PATH")
        parts.append(f"{t.name} ({why}; install: {t.fix})")
    return (f"missing build tool{'s' if len(parts) > 1 else ''}: " + "; ".join(parts)
            + " — every audit builds whisper.cpp and identifies its source with git")


def fix_command(name: str, system: str | None = None) -> str:
    """Return the command that installs tool ``name`` on ``system``.

    Parameters
    ----------
    name : str
        ``cmake``, ``git``, ``cc`` or ``c++``.
    system : str, optional
        ``platform.system()`` value (default: this host's).

    Returns
    -------
    str
        On macOS ``xcode-select --install`` for git and the compilers (the Command Line
        Tools), on Linux the Debian package; cmake is ``pip install cmake`` everywhere
        (into verifylib's environment: it is a dependency), with the system package beside.
    """
    system = system or platform.system()
    if name == CMAKE:
        extra = {"Darwin": " (or: brew install cmake)",
                 "Linux": " (or: sudo apt-get install cmake)"}.get(system, "")
        return f"pip install cmake{extra}"
    if system == "Darwin":
        return "xcode-select --install"
    if system == "Linux":
        return "sudo apt-get install " + ("git" if name == GIT else "build-essential")
    return f"install {name} and put it on PATH"


def _pypi_cmake() -> str | None:
    # The PyPI cmake package's binary, or None when the package is absent or broken.
    try:
        import cmake  # the PyPI package: a dependency, but a partial install must not crash
    except Exception:  # noqa: BLE001 - its import asserts on its own files
        return None
    bin_dir = getattr(cmake, "CMAKE_BIN_DIR", None)
    if not isinstance(bin_dir, str):
        return None
    exe = os.path.join(bin_dir, CMAKE)
    return exe if os.path.isfile(exe) and os.access(exe, os.X_OK) else None


def find_cmake(*, which: Callable[[str], str | None] | None = None,
               pypi: Callable[[], str | None] | None = None,
               system: str | None = None) -> Tool:
    """Find the cmake a build will run: ``PATH`` first, then the PyPI ``cmake`` package.

    Parameters
    ----------
    which : callable, optional
        Finds a program on ``PATH`` (default ``shutil.which``).
    pypi : callable, optional
        Returns the PyPI package's binary or None (default: import ``cmake`` and look in
        its ``CMAKE_BIN_DIR``).
    system : str, optional
        ``platform.system()`` value for the fix command.

    Returns
    -------
    Tool
        The cmake found, or a missing one with its fix.
    """
    fix = fix_command(CMAKE, system)
    found = (which or shutil.which)(CMAKE)
    if found:
        return Tool(CMAKE, found, FROM_PATH, fix)
    exe = (pypi or _pypi_cmake)()
    if exe:
        return Tool(CMAKE, exe, FROM_PYPI, fix)
    return Tool(CMAKE, None, None, fix)


def _find_program(name: str, *, which, system: str, shim_problem) -> Tool:
    fix = fix_command(name, system)
    var = _COMPILER_ENV.get(name)
    value = os.environ.get(var) if var else None
    if value:
        # CMake takes $CC/$CXX as the compiler, possibly followed by flags.
        words = shlex.split(value)
        found = which(words[0]) if words else None
        if not found:
            return Tool(name, None, None, f"set {var} to an installed compiler, or unset it",
                        note=f"${var}={value!r} names no program on PATH")
        return Tool(name, found, FROM_ENV, fix)
    found = which(name)
    if not found:
        return Tool(name, None, None, fix)
    if system == "Darwin" and (found in _MACOS_SHIMS or os.path.realpath(found) in _MACOS_SHIMS):
        problem = shim_problem()
        if problem is not None:
            why, shim_fix = problem
            return Tool(name, None, None, shim_fix, note=f"{found} is the system shim; {why}")
    return Tool(name, found, FROM_PATH, fix)


def _developer_tools_problem() -> tuple[str, str] | None:
    # Why macOS's /usr/bin shims cannot run (and the fix), or None when they can.
    # Imported here: capabilities probes xcode-select and xcrun only on macOS, once.
    from verifylib.runtime.capabilities import LICENSE_NOT_ACCEPTED, detect
    xcode = detect().xcode
    if xcode is None:
        return None
    if xcode.developer_dir is None:
        return ("no developer tools are installed (`xcode-select -p` finds no developer "
                "directory)", "xcode-select --install")
    if xcode.license == LICENSE_NOT_ACCEPTED:
        return ("the Xcode license is not accepted, so every developer tool exits 69",
                "sudo xcodebuild -license accept")
    return None


def find_tools(*, which: Callable[[str], str | None] | None = None,
               pypi: Callable[[], str | None] | None = None, system: str | None = None,
               shim_problem: Callable[[], tuple[str, str] | None] | None = None) -> Toolset:
    """Find cmake, git and the C and C++ compilers, launching none of them.

    Parameters
    ----------
    which : callable, optional
        Finds a program on ``PATH`` (default ``shutil.which``).
    pypi : callable, optional
        Returns the PyPI cmake package's binary or None (default: :func:`find_cmake`'s).
    system : str, optional
        ``platform.system()`` value (default: this host's). The tools run for real even on
        the test suite's simulated Mac, so the real system decides.
    shim_problem : callable, optional
        On macOS, returns why the ``/usr/bin`` shims of git and the compilers cannot run
        (no developer tools, the Xcode license not accepted) and the fix, or None when
        they can; a shim that cannot run counts as missing (default: from the host's
        :class:`~verifylib.runtime.capabilities.XcodeState`).

    Returns
    -------
    Toolset
        Every tool, found or missing with its fix. A compiler comes from ``$CC``/``$CXX``
        when set (as CMake takes it), else ``cc``/``c++`` on ``PATH``.
    """
    system = system or platform.system()
    which = which or shutil.which
    shim_problem = shim_problem or _developer_tools_problem
    return Toolset(
        cmake=find_cmake(which=which, pypi=pypi, system=system),
        git=_find_program(GIT, which=which, system=system, shim_problem=shim_problem),
        cc=_find_program(CC, which=which, system=system, shim_problem=shim_problem),
        cxx=_find_program(CXX, which=which, system=system, shim_problem=shim_problem))


def require_tools(*, build: bool = True, tools: Toolset | None = None) -> Toolset:
    """Refuse, before any work, a host that lacks a tool the audit needs.

    Parameters
    ----------
    build : bool
        Whether whisper.cpp will be built (cmake and both compilers); git is always needed.
    tools : Toolset, optional
        What was found (default: :func:`find_tools`).

    Returns
    -------
    Toolset
        The tools, every needed one present.

    Raises
    ------
    ToolMissing
        Naming every missing tool and what installs it.
    """
    tools = tools if tools is not None else find_tools()
    needed = tools.missing if build else tuple(t for t in tools.missing if t.name == GIT)
    if needed:
        raise ToolMissing(needed)
    return tools


def cmake_executable() -> str:
    """Return the cmake to run for a build (:func:`find_cmake`).

    Returns
    -------
    str
        Its path.

    Raises
    ------
    ToolMissing
        If no cmake is found (the audit's preflight refuses this earlier; this is the
        build's own guard).
    """
    tool = find_cmake()
    if tool.path is None:
        raise ToolMissing([tool])
    return tool.path


def launch_failed(name: str, path: str) -> ToolMissing:
    """Build the refusal for a tool that was found but could not be launched.

    Parameters
    ----------
    name : str
        The tool's name.
    path : str
        The executable that vanished between finding and running it.

    Returns
    -------
    ToolMissing
        Naming the tool, the path and its fix.
    """
    return ToolMissing([Tool(name, None, None, fix_command(name),
                             note=f"{path} was found but could not be launched")])


def version_line(path: str) -> str | None:
    """Run ``PATH --version`` and return its first non-empty line.

    Parameters
    ----------
    path : str
        An executable.

    Returns
    -------
    str or None
        The line, or None when the program cannot be launched or fails.
    """
    return first_output_line([path, "--version"])


def first_output_line(argv: list[str]) -> str | None:
    """Run ``argv`` and return the first non-empty line of its output.

    Parameters
    ----------
    argv : list of str
        The command (stdout is read before stderr).

    Returns
    -------
    str or None
        The line, or None when the program cannot be launched or fails.
    """
    try:
        res = run(argv, timeout=60)
    except OSError:
        return None
    if not res.ok:
        return None
    for line in (res.stdout_text + "\n" + res.stderr_text).splitlines():
        if line.strip():
            return line.strip()
    return None


def with_versions(tools: Toolset, probe: Callable[[str], str | None] = version_line) -> Toolset:
    """Return ``tools`` with each found tool's version line filled in.

    Parameters
    ----------
    tools : Toolset
        Tools as found.
    probe : callable
        ``path -> version line or None`` (default :func:`version_line`, which launches the
        tool).

    Returns
    -------
    Toolset
        The same tools with ``version`` set where the tool answered.
    """
    def one(t: Tool) -> Tool:
        return dataclasses.replace(t, version=probe(t.path)) if t.path else t
    return Toolset(cmake=one(tools.cmake), git=one(tools.git), cc=one(tools.cc),
                   cxx=one(tools.cxx))
