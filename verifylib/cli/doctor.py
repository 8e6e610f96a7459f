"""``verifylib doctor``: can this host run an audit, and which gates, and if not, what fixes it.

A preflight that touches no run and builds nothing: the build tools and their versions
(:mod:`verifylib.runtime.tools`; cmake with where it came from), the developer tools of a
Mac and their license (:mod:`verifylib.runtime.capabilities`), the Python packages that
convert and run the encoder, the free disk under the cache, and for every gate of
:data:`verifylib.evidence.gates.GATES` whether this host runs it, with the reason and the
fixing command for each one it cannot. The same checks decide here and in an audit, so
doctor never promises a gate the audit would then record NOT_RUN(platform).

Given a parameter file, doctor judges that audit's gates instead of the default's, and says
what compute precision each encoder it would plan declares, what upstream's converter makes
at its pin (:mod:`verifylib.models.converter_precision`), and warns when every planned
encoder is float32: Core ML never plans such a program on the Neural Engine. Nothing in a
parameter file states that a Neural Engine claim is expected, and ``placement.plan`` is
part of every audit, so the warning is raised for any such audit; it never changes the
exit status.

Exit status: 0 when the default audit can run on this host (on Linux too: its Core ML
gates are then listed NOT_RUN(platform), and the verdict can be INCOMPLETE at best); 2 when
a build tool is missing, the same condition on which ``verifylib run`` refuses to start
(exit 2, "bad input" of the host), or when the parameter file is refused (one line naming
the file and the key).
"""

from __future__ import annotations

import json
import platform
import sys
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, Callable, Mapping

from verifylib import resources
from verifylib.batch.disk import free_bytes
from verifylib.errors import ParametersInvalid
from verifylib.evidence import gates
from verifylib.models.converter_precision import (
    ConverterPrecision,
    PlannedEncoder,
    converter_precision,
    neural_engine_warning,
    planned_encoders,
)
from verifylib.runtime.capabilities import HostCapabilities, XcodeState, detect
from verifylib.runtime.tools import Toolset, describe_missing, find_tools, with_versions

EXIT_READY, EXIT_TOOL_MISSING, EXIT_BAD_PARAMETERS = 0, 2, 2
"""Exit statuses of ``verifylib doctor``."""

RUNS, NOT_RUN_PLATFORM, BLOCKED = "runs", "NOT_RUN(platform)", "blocked"
"""What doctor says of a gate: it runs here, the host lacks its capability, or the audit
cannot start (a build tool is missing)."""

PACKAGES = ("coremltools", "torch")
"""Python packages whose versions doctor reports (read from their metadata, not imported)."""


@dataclass(frozen=True)
class GateCheck:
    """Whether this host runs one gate of the default audit.

    Attributes
    ----------
    id : str
        The gate id.
    required : bool
        Whether the verdict counts it.
    capability : str
        The :class:`~verifylib.evidence.gates.Capability` value it needs.
    status : str
        :data:`RUNS`, :data:`NOT_RUN_PLATFORM` or :data:`BLOCKED`.
    why : str or None
        Why it cannot run here (the same sentence an audit records), None when it runs.
    fix : str or None
        The command or step that lets it run, None when it runs.
    """

    id: str
    required: bool
    capability: str
    status: str
    why: str | None = None
    fix: str | None = None


@dataclass(frozen=True)
class AuditCheck:
    """What doctor says of one parameter file's audit beyond the host.

    Attributes
    ----------
    name : str
        The audit's model name.
    origin : str
        The parameter file.
    pin : str
        Its whisper.cpp pin.
    converter : ConverterPrecision or None
        What upstream's converter makes at that pin, None for a pin the table lacks.
    encoders : tuple of PlannedEncoder
        The encoders ``placement.plan`` would plan, with their declared precision.
    warnings : tuple of str
        What the user should know before running it (:func:`neural_engine_warning`).
    """

    name: str
    origin: str
    pin: str
    converter: ConverterPrecision | None
    encoders: tuple[PlannedEncoder, ...]
    warnings: tuple[str, ...]

    def as_json(self) -> dict[str, Any]:
        """Return the check as one JSON-able object.

        Returns
        -------
        dict
            ``name``, ``parameters``, ``pin``, ``converter`` (``default``,
            ``with_quantize``, ``rule``, or None), ``encoders`` and ``warnings``.
        """
        c = self.converter
        return {"name": self.name, "parameters": self.origin, "pin": self.pin,
                "converter": None if c is None else {"default": c.default,
                                                     "with_quantize": c.with_quantize,
                                                     "rule": c.rule},
                "encoders": [{"slot": e.slot, "precision": e.precision, "given": e.given}
                             for e in self.encoders],
                "warnings": list(self.warnings)}

    def rows(self) -> list[tuple[str, str]]:
        """Return the check as ``(label, value)`` rows for the terminal table."""
        c = self.converter
        rows = [("parameters", self.origin), ("pin", self.pin),
                ("upstream converter", "not in the table" if c is None else
                 f"{c.default}: {c.rule}")]
        rows += [(f"encoder ({e.slot})", f"{e.precision}, "
                  + ("audited as given" if e.given else "exported by the suite"))
                 for e in self.encoders]
        return rows


def audit_check(name: str, origin: str, pin: str, given_precision: str | None,
                fp16_variant: bool) -> AuditCheck:
    """Decide what doctor says of an audit from what its parameter file names.

    Parameters
    ----------
    name, origin, pin : str
        The audit's name, parameter file and pin.
    given_precision : str or None
        The declared compute precision of the encoder audited as given (its card's),
        None when the suite exports the encoder.
    fp16_variant : bool
        Whether the suite's fp16 variant is exported too (``export.fp16``).

    Returns
    -------
    AuditCheck
    """
    encoders = planned_encoders(given_precision, fp16_variant)
    warning = neural_engine_warning(encoders, pin)
    return AuditCheck(name, origin, pin, converter_precision(pin), encoders,
                      (warning,) if warning else ())


def audit_check_of(params, card=None) -> AuditCheck:
    """Read a validated parameter set into its :class:`AuditCheck`.

    The encoder audited as given is carded
    (:func:`verifylib.models.encoder_reader.describe_encoder`: its files are read, nothing
    is executed) unless its card is handed over.

    Parameters
    ----------
    params : verifylib.params.Params
        The parameters.
    card : EncoderCard, optional
        The given encoder's card as :func:`verifylib.batch.inputs.preflight` read it (for
        a zipped encoder, from its unpacked files).

    Returns
    -------
    AuditCheck
    """
    given = None
    if card is not None:
        given = card.precision
    elif params.encoder is not None:
        from verifylib.models.encoder_reader import describe_encoder
        given = describe_encoder(Path(params.encoder.path)).precision
    return audit_check(params.name, params.origin, params.runtime.pin, given,
                       params.export.fp16)


@dataclass(frozen=True)
class DoctorReport:
    """What ``verifylib doctor`` found on this host.

    Attributes
    ----------
    system, machine : str
        ``platform.system()`` and ``platform.machine()`` of the host record.
    macos_version : str or None
        Dotted macOS release, None off macOS.
    python : str
        The running Python's version.
    packages : dict
        Each of :data:`PACKAGES` to its installed version, or None when not installed.
    tools : Toolset
        cmake, cc, c++ and git, with their version lines.
    xcode : XcodeState or None
        A Mac's developer tools (``xcrun --find coremlc`` included), None off macOS.
    cache : str
        The cache folder (:func:`verifylib.resources.cache_dir`).
    free_bytes : int or None
        Free space on the cache's file system (its nearest existing folder), None when
        it cannot be read.
    gates : tuple of GateCheck
        Every gate, in the table's order.
    simulated : bool
        True when the host is the test suite's simulated Mac.
    audit : AuditCheck or None
        The parameter file's audit, None for the default audit.
    disk : tuple of FolderCheck
        The reports folder and the cache against that audit's estimated size
        (:mod:`verifylib.batch.disk`, the check ``run`` makes before any work); empty
        when not checked.
    """

    system: str
    machine: str
    macos_version: str | None
    python: str
    packages: dict
    tools: Toolset
    xcode: XcodeState | None
    cache: str
    free_bytes: int | None
    gates: tuple[GateCheck, ...]
    simulated: bool = False
    audit: AuditCheck | None = None
    disk: tuple = ()

    @property
    def subject(self) -> str:
        """``the default audit``, or ``the audit of <name>`` for a parameter file's."""
        return "the default audit" if self.audit is None else f"the audit of {self.audit.name}"

    @property
    def can_audit(self) -> bool:
        """True when the default audit can start here (every build tool present)."""
        return not self.tools.missing

    @property
    def exit_code(self) -> int:
        """:data:`EXIT_READY` when :attr:`can_audit`, else :data:`EXIT_TOOL_MISSING`."""
        return EXIT_READY if self.can_audit else EXIT_TOOL_MISSING

    def summary(self) -> str:
        """Say in one sentence whether and how far the default audit can run here.

        Returns
        -------
        str
            The closing line of the human output.
        """
        if not self.can_audit:
            return f"the audit cannot start here: {describe_missing(self.tools.missing)}"
        off = [g for g in self.gates if g.status == NOT_RUN_PLATFORM and g.required]
        runs = sum(g.status == RUNS for g in self.gates)
        if not off:
            return (f"{self.subject} can run here: all {runs} gates run, so it can end "
                    f"ADMISSIBLE")
        return (f"{self.subject} can run here: {runs} gates run, {len(off)} required "
                f"gate(s) NOT_RUN(platform), so it ends INCOMPLETE at best")

    def as_json(self) -> dict[str, Any]:
        """Return the report as one JSON-able object.

        Returns
        -------
        dict
            Every attribute (tools and the Xcode state as records), ``can_audit``,
            ``exit_code`` and ``summary``.
        """
        return {
            "system": self.system, "machine": self.machine,
            "macos_version": self.macos_version, "python": self.python,
            "packages": dict(self.packages),
            "tools": {t.name: t.as_record() for t in self.tools.tools},
            "xcode": self.xcode.as_record() if self.xcode is not None else None,
            "cache": {"path": self.cache, "free_bytes": self.free_bytes},
            "gates": [{"id": g.id, "required": g.required, "capability": g.capability,
                       "status": g.status, "why": g.why, "fix": g.fix} for g in self.gates],
            "simulated": self.simulated, "can_audit": self.can_audit,
            "exit_code": self.exit_code, "summary": self.summary(),
            "audit": None if self.audit is None else self.audit.as_json(),
            "disk": [{"role": c.role, "path": str(c.path), "free_bytes": c.free_bytes,
                      "need_bytes": c.need_bytes, "problem": c.problem} for c in self.disk],
        }

    def text(self) -> str:
        """Render the report as short aligned tables for a terminal.

        Returns
        -------
        str
            Tools, host, gates, and the summary line.
        """
        mac = f"macOS {self.macos_version}" if self.macos_version else "not macOS"
        lines = [f"verifylib doctor: {self.system} {self.machine} ({mac}), Python "
                 f"{self.python}{' [simulated host]' if self.simulated else ''}", "", "tools"]
        rows = []
        for t in self.tools.tools:
            if t.found:
                where = t.path + (f" (from {t.source})" if t.source else "")
                rows.append((t.name, t.version or "(no version line)", where))
            else:
                rows.append((t.name, "MISSING", f"{t.note + '; ' if t.note else ''}"
                                                f"install: {t.fix}"))
        lines += _table(rows)
        lines += ["", "host"]
        rows = [("macOS", self.macos_version or "not macOS")]
        if self.xcode is not None:
            x = self.xcode
            rows += [("developer dir", f"{x.developer_dir or 'none'}"
                      + (f" (selected by {x.selected_by})" if x.selected_by else "")),
                     ("Xcode bundles", ", ".join(x.installed) or "none found"),
                     ("Xcode license", x.license),
                     ("xcrun coremlc", x.coremlc or "does not resolve")]
            if x.problem:
                rows.append(("Xcode state", f"{x.state}: {x.problem}"))
        rows += [(name, version or "not installed") for name, version in self.packages.items()]
        free = "unknown" if self.free_bytes is None else f"{self.free_bytes / 2**30:.1f} GiB free"
        rows.append(("cache", f"{self.cache} ({free})"))
        for c in self.disk:
            have = "unknown" if c.free_bytes is None else f"{c.free_bytes / 2**30:.1f} GiB free"
            rows.append((f"{c.role} space", f"{c.path}: {have}, the audit needs about "
                         f"{c.need_bytes / 2**30:.2f} GiB"
                         + (f": {c.problem}" if c.problem else "")))
        lines += _table(rows)
        if self.audit is not None:
            lines += ["", f"audit of {self.audit.name}"]
            lines += _table(self.audit.rows())
            lines += [f"  warning: {w}" for w in self.audit.warnings]
        lines += ["", f"gates (what this host runs of {self.subject})"]
        lines += _table([(g.id, "required" if g.required else "informational", g.capability,
                          g.status if g.why is None else f"{g.status}: {g.why}")
                         for g in self.gates])
        fixes: dict[str, list[str]] = {}
        for g in self.gates:
            if g.fix:
                fixes.setdefault(g.fix, []).append(g.id)
        if fixes:
            lines += ["", "to run the gates this host cannot"]
            for fix, ids in fixes.items():
                lines += [f"  {fix}", f"    for: {', '.join(ids)}"]
        lines += ["", self.summary()]
        return "\n".join(lines)


def _table(rows) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)] if rows else []
    return ["  " + "  ".join(c.ljust(w) for c, w in zip(r, widths)) + "  " + r[-1]
            for r in rows]


def _package_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def gate_checks(host: HostCapabilities, tools: Toolset,
                params: Mapping[str, Any] | None = None) -> tuple[GateCheck, ...]:
    """Decide, for every gate, whether this host runs it.

    Parameters
    ----------
    host : HostCapabilities
        The host (:func:`verifylib.runtime.capabilities.detect`).
    tools : Toolset
        The build tools as found.
    params : mapping, optional
        A parameter tree for :func:`verifylib.evidence.gates.capability_of` (default: the
        default audit's, which gives every gate its table capability).

    Returns
    -------
    tuple of GateCheck
        In the table's order: NOT_RUN(platform) with the host's own reason and fix when it
        lacks the capability, else blocked while a build tool is missing, else runs.
    """
    out = []
    blocked = describe_missing(tools.missing) if tools.missing else None
    fixes = "; ".join(dict.fromkeys(t.fix for t in tools.missing)) or None
    from_text, note = _given_program_readable(host, params or {})
    for g in gates.GATES:
        cap = gates.capability_of(g, params or {}, program_from_text=from_text)
        why = host.missing(cap)
        if why is not None and note and g.id in gates.PROGRAM_GATES:
            why = f"{why}; {note}"
        if why is not None:
            out.append(GateCheck(g.id, g.required, cap.value, NOT_RUN_PLATFORM, why,
                                 host.fix(cap)))
        elif blocked is not None:
            out.append(GateCheck(g.id, g.required, cap.value, BLOCKED, blocked, fixes))
        else:
            out.append(GateCheck(g.id, g.required, cap.value, RUNS))
    return tuple(out)


def _given_program_readable(host: HostCapabilities, params: Mapping[str, Any]
                            ) -> tuple[bool, str | None]:
    """Whether a given ``.mlmodelc``'s program reads from its ``model.mil`` here (off macOS).

    As the stages decide it (:func:`verifylib.stages.artifacts.given_program`), on the
    folder the parameters name: (True, None) when it reads, (False, why) when it does not,
    (False, None) when that does not apply.
    """
    path = gates.given_compiled_encoder(params)
    if path is None or host.has(gates.Capability.MACOS):
        return False, None
    import tempfile

    from verifylib.errors import VerifylibError
    from verifylib.models.encoder_zip import unpack
    from verifylib.numerics.mil_compiled import load_compiled_program
    try:
        if path.endswith(".zip"):
            # As the audit will: the program is read from the archive's unpacked folder.
            with tempfile.TemporaryDirectory(prefix="verifylib-doctor-") as scratch:
                load_compiled_program(unpack(path, scratch).folder)
        else:
            load_compiled_program(path)
    except (VerifylibError, OSError) as exc:
        return False, f"verifylib's executor cannot run the program of its model.mil: {exc}"
    return True, None


def doctor_report(*, host: HostCapabilities | None = None, tools: Toolset | None = None,
                  cache: Path | None = None,
                  package_version: Callable[[str], str | None] = _package_version,
                  audit: AuditCheck | None = None,
                  params: Mapping[str, Any] | None = None,
                  disk: tuple = ()) -> DoctorReport:
    """Examine this host (or the given parts of one).

    Parameters
    ----------
    host : HostCapabilities, optional
        Default :func:`verifylib.runtime.capabilities.detect` (on macOS it runs
        ``xcode-select -p`` and ``xcrun --find coremlc``, once per process).
    tools : Toolset, optional
        Default :func:`verifylib.runtime.tools.find_tools` with each version line probed
        (each tool's ``--version`` is run).
    cache : Path, optional
        Default :func:`verifylib.resources.cache_dir`.
    package_version : callable
        ``name -> version or None`` (default: the installed distribution's metadata).
    audit : AuditCheck, optional
        A parameter file's audit (:func:`audit_check_of`); default the default audit.
    params : mapping, optional
        That parameter file's tree, whose gates' capabilities are judged
        (:func:`gate_checks`).
    disk : tuple of FolderCheck, optional
        The reports folder and the cache checked against the audit's estimated size.

    Returns
    -------
    DoctorReport
        What was found.
    """
    host = host if host is not None else detect()
    tools = tools if tools is not None else with_versions(find_tools())
    cache = Path(cache) if cache is not None else resources.cache_dir()
    return DoctorReport(
        system=host.system, machine=host.machine,
        macos_version=None if host.macos_version is None
        else ".".join(map(str, host.macos_version)),
        python=platform.python_version(),
        packages={name: package_version(name) for name in PACKAGES},
        tools=tools, xcode=host.xcode, cache=str(cache), free_bytes=free_bytes(cache),
        gates=gate_checks(host, tools, params), simulated=host.simulated, audit=audit,
        disk=tuple(disk))


def cli_main(args) -> int:
    """Run ``verifylib doctor`` (argparse namespace in, exit code out).

    Parameters
    ----------
    args : argparse.Namespace
        ``json``: print one JSON object instead of the tables; ``params``: a parameter
        file whose audit to check (None: the default audit).

    Returns
    -------
    int
        :attr:`DoctorReport.exit_code`: 0 when the audit can run here, 2 when a build tool
        is missing or the parameter file is refused.
    """
    audit, tree = None, None
    if getattr(args, "params", None):
        from verifylib.params import load
        try:
            params = load(args.params)
            # The files the parameters hand over are read as `run` reads them first.
            from verifylib.batch.inputs import preflight
            audit = audit_check_of(params, preflight(params))
        except ParametersInvalid as exc:
            print(f"verifylib doctor: bad parameters: {exc}", file=sys.stderr)
            return EXIT_BAD_PARAMETERS
        tree = params.data
    report = doctor_report(audit=audit, params=tree, disk=_disk(getattr(args, "params", None)))
    if getattr(args, "json", False):
        print(json.dumps(report.as_json(), indent=1, sort_keys=True))
    else:
        print(report.text())
    sys.stdout.flush()
    return report.exit_code


def _disk(params_file: str | None) -> tuple:
    """Check the reports folder (of the current directory) and the cache against the audit."""
    from verifylib.batch.disk import check_audit
    from verifylib.params import load
    try:
        params = load(params_file or resources.default_parameters())
    except ParametersInvalid:
        return ()
    return check_audit([params], resources.reports_dir())
