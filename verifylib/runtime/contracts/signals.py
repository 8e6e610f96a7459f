"""Signals decoded with a fixed table per OS.

Never with the running Python's ``signal`` module: see :mod:`verifylib.runtime.contracts`.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Mapping

from verifylib.errors import ParametersInvalid

# --- signals (docs/runtime-contract.md §6.2) ----------------------------------------------
#
# A return code of -N (or 128+N from a shell) names signal N, and N means a different signal
# on each OS: 10 is SIGBUS on macOS and SIGUSR1 on Linux. The recording side and the verifying
# side may be different hosts (a Mac run verified on Linux, a Ray driver checking a node's
# run), so neither decodes with the running Python's ``signal`` module: each record names
# the fixed table below that its signal was decoded with.


@dataclass(frozen=True)
class SignalTable:
    """The signal numbers of one operating system, as its C headers define them.

    Attributes
    ----------
    system : str
        The OS, spelled as ``platform.system()`` reports it (``"Linux"``, ``"Darwin"``).
    names : mapping of int to str
        Signal number to its name; a number in ``1..highest`` without a name here is
        named ``SIG<N>``.
    highest : int
        The largest signal number (``NSIG - 1``): ``128 + N`` is read as a signal only
        for ``N`` from 1 to this.
    """

    system: str
    names: Mapping[int, str]
    highest: int

    def name(self, number: int) -> str:
        """Name signal ``number`` (``SIG<N>`` when the table has no name for it)."""
        return self.names.get(number, f"SIG{number}")


LINUX_SIGNALS = SignalTable("Linux", MappingProxyType({
    1: "SIGHUP", 2: "SIGINT", 3: "SIGQUIT", 4: "SIGILL", 5: "SIGTRAP", 6: "SIGABRT",
    7: "SIGBUS", 8: "SIGFPE", 9: "SIGKILL", 10: "SIGUSR1", 11: "SIGSEGV", 12: "SIGUSR2",
    13: "SIGPIPE", 14: "SIGALRM", 15: "SIGTERM", 16: "SIGSTKFLT", 17: "SIGCHLD",
    18: "SIGCONT", 19: "SIGSTOP", 20: "SIGTSTP", 21: "SIGTTIN", 22: "SIGTTOU", 23: "SIGURG",
    24: "SIGXCPU", 25: "SIGXFSZ", 26: "SIGVTALRM", 27: "SIGPROF", 28: "SIGWINCH",
    29: "SIGIO", 30: "SIGPWR", 31: "SIGSYS", 34: "SIGRTMIN", 64: "SIGRTMAX"}), 64)
"""Linux on x86-64 and arm64 (the kernel's ``asm-generic``/x86 ``signal.h``; other
architectures such as MIPS number differently and are not supported). 6 is named SIGABRT
(SIGIOT is its alias), 29 SIGIO (SIGPOLL). The real-time range ends at 64; glibc reserves
32 and 33 for its threads, so its SIGRTMIN is 34: the names glibc's Python reports, so a
record written before records named their table decodes as it was recorded."""

DARWIN_SIGNALS = SignalTable("Darwin", MappingProxyType({
    1: "SIGHUP", 2: "SIGINT", 3: "SIGQUIT", 4: "SIGILL", 5: "SIGTRAP", 6: "SIGABRT",
    7: "SIGEMT", 8: "SIGFPE", 9: "SIGKILL", 10: "SIGBUS", 11: "SIGSEGV", 12: "SIGSYS",
    13: "SIGPIPE", 14: "SIGALRM", 15: "SIGTERM", 16: "SIGURG", 17: "SIGSTOP", 18: "SIGTSTP",
    19: "SIGCONT", 20: "SIGCHLD", 21: "SIGTTIN", 22: "SIGTTOU", 23: "SIGIO", 24: "SIGXCPU",
    25: "SIGXFSZ", 26: "SIGVTALRM", 27: "SIGPROF", 28: "SIGWINCH", 29: "SIGINFO",
    30: "SIGUSR1", 31: "SIGUSR2"}), 31)
"""macOS (XNU's ``<sys/signal.h>``, ``NSIG`` 32: no real-time signals). Written out from the
header, not read from a Python running on a Mac."""

SIGNAL_TABLES: Mapping[str, SignalTable] = MappingProxyType(
    {t.system: t for t in (LINUX_SIGNALS, DARWIN_SIGNALS)})
"""Every table, by the ``platform.system()`` name a run record stores as ``signal_table``."""

SIGNAL_TABLE_KEY = "signal_table"
"""Key of a run record naming the table its ``signal`` was decoded with: the OS the child
ran on (the recording process's own, since a child shares its kernel; under the simulated
Mac that is Linux while the run's host record says Darwin)."""

LEGACY_SIGNAL_TABLE = "Linux"
"""The table of a run record without :data:`SIGNAL_TABLE_KEY`. Records gained the key when
verifylib first ran on macOS; every record written before was decoded by verifylib on Linux
with Linux's numbers (the simulated Mac's children are Linux processes too), so the key's
absence means Linux. It is not a default for an unnamed or unknown table: a record that
names one outside :data:`SIGNAL_TABLES` is refused."""


class UnknownSignalTable(ParametersInvalid):
    """An OS verifylib has no signal table for (it supports Linux and macOS)."""


def signal_table(system: str) -> SignalTable:
    """Return the signal table of an OS.

    Parameters
    ----------
    system : str
        The OS as ``platform.system()`` names it.

    Returns
    -------
    SignalTable

    Raises
    ------
    UnknownSignalTable
        If verifylib has no table for ``system``.
    """
    table = SIGNAL_TABLES.get(system) if isinstance(system, str) else None
    if table is None:
        raise UnknownSignalTable(
            f"no signal table for system {system!r}: verifylib decodes the signals of Linux "
            f"and macOS children only (known: {', '.join(sorted(SIGNAL_TABLES))})")
    return table


def host_signal_table() -> str:
    """Name the signal table of the children this process launches: its own OS's.

    Returns
    -------
    str
        ``platform.system()`` of this process (``"Linux"`` also under the simulated Mac,
        whose children are Linux processes).

    Raises
    ------
    UnknownSignalTable
        On an OS verifylib has no table for (before anything is launched).
    """
    import platform
    return signal_table(platform.system()).system


def decode_signal(returncode: int | None, system: str) -> str | None:
    """Name the signal behind a return code, by the signal numbers of the OS it came from.

    Parameters
    ----------
    returncode : int or None
        A raw ``Popen.returncode``: negative N means killed by signal N; 128+N is how
        shells and some launchers report the same death (``134`` = SIGABRT, ``139`` =
        SIGSEGV). whisper-cli itself never exits above 10.
    system : str
        The OS the child ran on (a key of :data:`SIGNAL_TABLES`): ``-10`` is SIGBUS from
        a ``"Darwin"`` child and SIGUSR1 from a ``"Linux"`` one.

    Returns
    -------
    str or None
        E.g. ``"SIGSEGV"``, or None for a normal exit (and for None).

    Raises
    ------
    UnknownSignalTable
        If ``system`` has no table (never a silent fall back to this host's numbers).
    """
    table = signal_table(system)
    if returncode is None or isinstance(returncode, bool):
        return None
    if returncode < 0:
        return table.name(-returncode)
    if 128 < returncode <= 128 + table.highest:
        return table.name(returncode - 128)
    return None
