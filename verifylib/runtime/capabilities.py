"""What this host can physically run, and why not.

Core ML gates need macOS (and for some, full Xcode or macOS 14.4+). The checks here are
the only place that decides, so a Linux host reports NOT_RUN(platform) with the missing
capability named, and never pretends.

On macOS the developer tools are read as Apple's tools report them (:func:`probe_xcode`):
the active developer directory (``$DEVELOPER_DIR``, which overrides ``xcode-select``, else
``xcode-select -p``, which exits non-zero when there are no developer tools), the Xcode
bundles installed in ``/Applications``, and ``xcrun --find coremlc``, which exits 69 while
the Xcode license is not accepted and 72 when the selected tools have no ``coremlc`` (the
Command Line Tools never do). Full Xcode, the capability, is still decided by ``coremlc``
alone; the rest says precisely why it is missing and which command fixes it.
"""

from __future__ import annotations

import os
import platform
import shutil
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Callable, Mapping, Sequence

from verifylib.evidence.gates import Capability
from verifylib.runtime.runner import RunResult, run

LICENSE_ACCEPTED, LICENSE_NOT_ACCEPTED = "accepted", "not-accepted"
LICENSE_NOT_APPLICABLE, LICENSE_UNKNOWN = "not-applicable", "unknown"
"""The Xcode license as :class:`XcodeState` records it (not applicable: no Xcode selected)."""

SELECTED_BY_ENV, SELECTED_BY_XCODE_SELECT = "DEVELOPER_DIR", "xcode-select"
"""What chose the active developer directory."""

XCODE_READY, NO_DEVELOPER_TOOLS, CLT_ONLY, CLT_SELECTED, LICENSE_PENDING, NO_COREMLC = (
    "xcode", "none", "clt", "clt-selected", "license", "no-coremlc")
"""The states of a Mac's developer tools (:attr:`XcodeState.state`)."""

XCRUN_LICENSE_EXIT = 69
"""``xcrun``'s exit status while the Xcode license is not accepted (``EX_UNAVAILABLE``)."""

APPLICATIONS = ("/Applications", "~/Applications")
"""Where Xcode bundles (``Xcode*.app``) are looked for."""

_DEFAULT_XCODE = "/Applications/Xcode.app"


@dataclass(frozen=True)
class XcodeState:
    """A Mac's developer tools, as ``xcode-select`` and ``xcrun`` report them.

    Attributes
    ----------
    developer_dir : str or None
        The active developer directory (``$DEVELOPER_DIR`` or ``xcode-select -p``), None
        when there are no developer tools.
    selected_by : str or None
        :data:`SELECTED_BY_ENV` when ``$DEVELOPER_DIR`` set it, :data:`SELECTED_BY_XCODE_SELECT`
        otherwise, None without developer tools.
    license : str
        :data:`LICENSE_ACCEPTED`, :data:`LICENSE_NOT_ACCEPTED` (``xcrun`` exited 69),
        :data:`LICENSE_NOT_APPLICABLE` (no Xcode selected) or :data:`LICENSE_UNKNOWN`.
    coremlc : str or None
        ``xcrun --find coremlc`` when it resolves inside an ``.app`` bundle.
    installed : tuple of str
        The Xcode bundles found (``/Applications/Xcode.app``, ...), selected or not.
    """

    developer_dir: str | None
    selected_by: str | None
    license: str
    coremlc: str | None
    installed: tuple[str, ...] = ()

    @property
    def state(self) -> str:
        """Name the state of the developer tools.

        Returns
        -------
        str
            :data:`XCODE_READY`, :data:`NO_DEVELOPER_TOOLS`, :data:`CLT_ONLY`,
            :data:`CLT_SELECTED`, :data:`LICENSE_PENDING` or :data:`NO_COREMLC`.
        """
        if self.developer_dir is None:
            return NO_DEVELOPER_TOOLS
        if self.license == LICENSE_NOT_ACCEPTED:
            return LICENSE_PENDING
        if self.coremlc:
            return XCODE_READY
        if not _inside_app(self.developer_dir):
            return CLT_SELECTED if self.installed else CLT_ONLY
        return NO_COREMLC

    @property
    def fix(self) -> str | None:
        """The command that makes ``coremlc`` resolve, or None when it does."""
        app = self.installed[0] if self.installed else _DEFAULT_XCODE
        select = f"sudo xcode-select -s {app}/Contents/Developer"
        state = self.state
        if state == XCODE_READY:
            return None
        if state == NO_DEVELOPER_TOOLS:
            return f"xcode-select --install, then install Xcode and {select}"
        if state == LICENSE_PENDING:
            return "sudo xcodebuild -license accept"
        if state == CLT_ONLY:
            return f"install Xcode (App Store), then {select}"
        if self.selected_by == SELECTED_BY_ENV:
            return f"unset DEVELOPER_DIR, or set it to {app}/Contents/Developer"
        return select if state == CLT_SELECTED else f"reinstall or update Xcode, or {select}"

    @property
    def problem(self) -> str | None:
        """Why ``coremlc`` does not resolve, ending with the fix; None when it does."""
        state = self.state
        by_env = " (set by DEVELOPER_DIR, which overrides xcode-select)" \
            if self.selected_by == SELECTED_BY_ENV else ""
        where = f"{self.developer_dir}{by_env}"
        why = {
            XCODE_READY: None,
            NO_DEVELOPER_TOOLS: "no developer tools are installed (`xcode-select -p` finds no "
                                "developer directory)",
            LICENSE_PENDING: f"the Xcode license is not accepted (`xcrun` exits "
                             f"{XCRUN_LICENSE_EXIT}) for {where}",
            CLT_ONLY: f"only the Command Line Tools are installed ({where}), and they have no "
                      f"coremlc",
            CLT_SELECTED: f"Xcode is installed ({', '.join(self.installed)}) but the active "
                          f"developer directory is the Command Line Tools ({where})",
            NO_COREMLC: f"`xcrun --find coremlc` does not resolve inside the selected Xcode "
                        f"({where})",
        }[state]
        return None if why is None else f"{why}; fix: {self.fix}"

    def as_record(self) -> dict:
        """Return the state as a JSON-able dict: every attribute and ``state``."""
        return {"developer_dir": self.developer_dir, "selected_by": self.selected_by,
                "license": self.license, "coremlc": self.coremlc,
                "installed": list(self.installed), "state": self.state}


def _inside_app(path: str) -> bool:
    return ".app/" in path.rstrip("/") + "/"


@dataclass(frozen=True)
class HostCapabilities:
    """The capabilities of one host.

    Attributes
    ----------
    system : str
        ``platform.system()``.
    machine : str
        CPU architecture.
    macos_version : tuple of int or None
        macOS release, when on macOS.
    coremlc : str or None
        Path of ``xcrun --find coremlc`` when it resolves inside ``Xcode.app``.
    simulated : bool
        True only for the test suite's simulated Mac (:func:`simulate`); recorded with the
        run, and ``verifylib verify`` refuses such a run unless told otherwise.
    xcode : XcodeState or None
        The developer tools on macOS (None elsewhere, and in host records made before it
        was recorded). It explains a missing ``coremlc``; it never decides a capability.
    """

    system: str
    machine: str
    macos_version: tuple[int, ...] | None
    coremlc: str | None
    simulated: bool = False
    xcode: XcodeState | None = None

    def has(self, cap: Capability | str) -> bool:
        """Return True if this host offers ``cap``.

        Parameters
        ----------
        cap : Capability or str
            The capability (or its value) a gate needs.

        Returns
        -------
        bool
            True when :meth:`missing` finds nothing lacking.
        """
        return self.missing(cap) is None

    def missing(self, cap: Capability | str) -> str | None:
        """Describe what the host lacks for ``cap``, or None when it has it.

        Parameters
        ----------
        cap : Capability or str
            The capability (or its value) a gate needs.

        Returns
        -------
        str or None
            A sentence naming what is missing and what this host is, or None when
            ``cap`` is available (always for ``Capability.ANY``).

        Raises
        ------
        ValueError
            If ``cap`` is a string that names no :class:`Capability`.
        """
        cap = Capability(cap)
        if cap is Capability.ANY:
            return None
        here = f"this host: {self.system} {self.machine}"
        if self.macos_version is None:
            need = {Capability.MACOS: "needs macOS",
                    Capability.MACOS_XCODE: "needs macOS with full Xcode (xcrun coremlc)",
                    Capability.MACOS_14_4: "needs macOS 14.4+ (MLComputePlan)"}[cap]
            return f"{need}; {here}"
        if cap is Capability.MACOS_XCODE and not self.coremlc:
            problem = self.xcode.problem if self.xcode is not None else None
            return (f"needs full Xcode (xcrun coremlc): {problem}" if problem else
                    "needs full Xcode: `xcrun --find coremlc` does not resolve inside Xcode.app")
        if cap is Capability.MACOS_14_4 and self.macos_version < (14, 4):
            ver = ".".join(map(str, self.macos_version))
            return f"needs macOS 14.4+ (MLComputePlan); this host: macOS {ver}"
        return None

    def fix(self, cap: Capability | str) -> str | None:
        """Return the command (or step) that gives this host ``cap``, or None when it has it.

        Parameters
        ----------
        cap : Capability or str
            The capability (or its value) a gate needs.

        Returns
        -------
        str or None
            What to do: run on a Mac, fix the developer tools (:attr:`XcodeState.fix`), or
            update macOS.
        """
        cap = Capability(cap)
        if self.has(cap):
            return None
        if self.macos_version is None:
            return ("run the audit on a Mac: Apple silicon, macOS 14.4 or later, full Xcode "
                    "selected (docs/macos.md)")
        if cap is Capability.MACOS_XCODE:
            if self.xcode is not None and self.xcode.fix:
                return self.xcode.fix
            return f"install Xcode, then sudo xcode-select -s {_DEFAULT_XCODE}/Contents/Developer"
        return "update macOS to 14.4 or later (System Settings > General > Software Update)"

    def as_record(self) -> dict:
        """Build a JSON-able record of the host and each capability's availability.

        Returns
        -------
        dict
            ``system``, ``machine``, ``macos_version`` (dotted string or None),
            ``coremlc``, the running ``python`` version, ``capabilities`` (each
            :class:`Capability` value to whether the host has it), ``xcode``
            (:meth:`XcodeState.as_record`) on macOS, and ``simulated: True`` for a
            simulated host only. Records made before ``xcode`` existed stay valid: the
            capabilities are re-derived from ``system``, ``macos_version`` and ``coremlc``.
        """
        return {
            "system": self.system, "machine": self.machine,
            "macos_version": None if self.macos_version is None
            else ".".join(map(str, self.macos_version)),
            "coremlc": self.coremlc,
            "python": sys.version.split()[0],
            "capabilities": {c.value: self.has(c) for c in Capability},
            **({"xcode": self.xcode.as_record()} if self.xcode is not None else {}),
            **({"simulated": True} if self.simulated else {}),
        }


def _run_tool(argv: list[str]) -> RunResult | None:
    # None when the tool is not installed at all.
    if not shutil.which(argv[0]):
        return None
    try:
        return run(argv, timeout=30)
    except OSError:
        return None


def _xcode_bundles(applications: Sequence[str]) -> tuple[str, ...]:
    found: list[str] = []
    for folder in applications:
        base = Path(folder).expanduser()
        if base.is_dir():
            found += sorted(str(app) for app in base.glob("Xcode*.app")
                            if (app / "Contents" / "Developer").is_dir())
    return tuple(found)


def probe_xcode(*, tool: Callable[[list[str]], RunResult | None] = _run_tool,
                environ: Mapping[str, str] | None = None,
                applications: Sequence[str] = APPLICATIONS) -> XcodeState:
    """Read a Mac's developer tools: the active developer directory, the license, coremlc.

    Parameters
    ----------
    tool : callable
        Runs a developer tool's argv and returns its result, or None when the tool is not
        installed (default: through :func:`verifylib.runtime.runner.run`). The test
        suite's simulated Mac hands its own ``xcode-select`` and ``xcrun`` here.
    environ : mapping, optional
        The environment whose ``DEVELOPER_DIR`` is read (default ``os.environ``).
    applications : sequence of str
        Folders searched for ``Xcode*.app`` bundles.

    Returns
    -------
    XcodeState
        What the tools said. ``xcrun`` is not run without a developer directory: on a Mac
        with no developer tools it is a shim that opens the installer.
    """
    env = os.environ if environ is None else environ
    override = env.get("DEVELOPER_DIR") or None
    sel = tool(["xcode-select", "-p"])
    printed = sel.stdout_text.strip() if sel is not None and sel.ok else ""
    developer_dir = override or printed or None
    selected_by = (SELECTED_BY_ENV if override else
                   SELECTED_BY_XCODE_SELECT if developer_dir else None)
    installed = _xcode_bundles(applications)
    if developer_dir is None:
        return XcodeState(None, None, LICENSE_NOT_APPLICABLE, None, installed)
    res = tool(["xcrun", "--find", "coremlc"])
    if res is None:
        return XcodeState(developer_dir, selected_by, LICENSE_UNKNOWN, None, installed)
    if res.returncode == XCRUN_LICENSE_EXIT:
        return XcodeState(developer_dir, selected_by, LICENSE_NOT_ACCEPTED, None, installed)
    path = res.stdout_text.strip()
    # Command Line Tools alone have no coremlc; only full Xcode does
    # (docs/runtime-contract.md §4.3).
    coremlc = path if res.ok and "Xcode" in path and _inside_app(path) else None
    license = LICENSE_ACCEPTED if _inside_app(developer_dir) else LICENSE_NOT_APPLICABLE
    return XcodeState(developer_dir, selected_by, license, coremlc, installed)


_SIMULATED: HostCapabilities | None = None


def simulate(host: HostCapabilities | None) -> None:
    """Make :func:`detect` report ``host`` in this process (None goes back to the real one).

    The one seam through which the test suite's simulated Mac enters: a Python call in
    the process that runs the stages, reachable from no command line, parameter file or
    environment variable. The host must say ``simulated=True``, so the run records it.

    Parameters
    ----------
    host : HostCapabilities or None
        The simulated host to report, or None to go back to detecting the real one.

    Raises
    ------
    ValueError
        If ``host`` is not marked simulated.
    """
    global _SIMULATED
    if host is not None and not host.simulated:
        raise ValueError("only a host marked simulated may replace the detected one")
    _SIMULATED = host


def detect() -> HostCapabilities:
    """Return this host's capabilities: detected once per process (or the simulated host).

    Returns
    -------
    HostCapabilities
        The host set by :func:`simulate` when there is one, else the real host, detected
        on the first call and cached for the process.
    """
    return _SIMULATED if _SIMULATED is not None else _detect()


@lru_cache(maxsize=1)
def _detect() -> HostCapabilities:
    system = platform.system()
    mac = None
    xcode = None
    if system == "Darwin":
        rel = platform.mac_ver()[0]
        mac = tuple(int(x) for x in rel.split(".") if x.isdigit()) or (0,)
        xcode = probe_xcode()
    return HostCapabilities(system=system, machine=platform.machine(), macos_version=mac,
                            coremlc=xcode.coremlc if xcode is not None else None, xcode=xcode)
