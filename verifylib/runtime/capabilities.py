"""What this host can physically run, and why not.

Core ML gates need macOS (and for some, full Xcode or macOS 14.4+). The checks here are
the only place that decides, so a Linux host reports NOT_RUN(platform) with the missing
capability named, and never pretends.
"""

from __future__ import annotations

import platform
import shutil
import sys
from dataclasses import dataclass
from functools import lru_cache

from verifylib.evidence.gates import Capability
from verifylib.runtime.runner import run


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
    """

    system: str
    machine: str
    macos_version: tuple[int, ...] | None
    coremlc: str | None
    simulated: bool = False

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
            return "needs full Xcode: `xcrun --find coremlc` does not resolve inside Xcode.app"
        if cap is Capability.MACOS_14_4 and self.macos_version < (14, 4):
            ver = ".".join(map(str, self.macos_version))
            return f"needs macOS 14.4+ (MLComputePlan); this host: macOS {ver}"
        return None

    def as_record(self) -> dict:
        """Build a JSON-able record of the host and each capability's availability.

        Returns
        -------
        dict
            ``system``, ``machine``, ``macos_version`` (dotted string or None),
            ``coremlc``, the running ``python`` version, ``capabilities`` (each
            :class:`Capability` value to whether the host has it) and
            ``simulated: True`` for a simulated host only.
        """
        return {
            "system": self.system, "machine": self.machine,
            "macos_version": None if self.macos_version is None
            else ".".join(map(str, self.macos_version)),
            "coremlc": self.coremlc,
            "python": sys.version.split()[0],
            "capabilities": {c.value: self.has(c) for c in Capability},
            **({"simulated": True} if self.simulated else {}),
        }


def _find_coremlc() -> str | None:
    if not shutil.which("xcrun"):
        return None
    res = run(["xcrun", "--find", "coremlc"], timeout=30)
    path = res.stdout_text.strip()
    # Command Line Tools alone have no coremlc; only full Xcode does
    # (docs/runtime-contract.md §4.3).
    return path if res.ok and "Xcode" in path and ".app/" in path else None


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
    coremlc = None
    if system == "Darwin":
        rel = platform.mac_ver()[0]
        mac = tuple(int(x) for x in rel.split(".") if x.isdigit()) or (0,)
        coremlc = _find_coremlc()
    return HostCapabilities(system=system, machine=platform.machine(),
                            macos_version=mac, coremlc=coremlc)
