"""Schemas of the stage 01 (build) evidence documents the build judges read.

One frozen dataclass per document: :class:`SourceEvidence` (``source``,
``build.source_identity``), :class:`PatchEvidence` (``patch``, ``build.patch_exact``, with
:class:`PatchChecks` and one :class:`PatchPhase` per check), :class:`GgmlBuildEvidence`
(``build``, ``build.ggml``, with its :class:`SystemInfoProbeRecord`),
:class:`CoremlBuildEvidence` (``coreml_build``, ``build.coreml``, with its
:class:`BenchRecord`) and :class:`FailedBuild` (``{"built": false, "error"}``, written for
either build when it did not build). :class:`RunRecord` is the record
:func:`verifylib.runtime.runner.run_record` writes of one launch.

``from_json`` is strict and fails closed: a missing or wrongly typed field raises
:class:`SchemaError` (an :class:`verifylib.errors.EvidenceInvalid`) whose ``path`` names it,
e.g. ``checks.before.diff_bytes``. Keys a format does not define are not read. ``to_json``
gives back exactly the dict the stage writes, key for key, so ``to_json(from_json(doc)) ==
doc`` for every document the stage writes. Whether the values support a gate is the rules'
job (:mod:`verifylib.evidence.rules.build`). Only :mod:`verifylib.errors` is imported.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, TypeVar, Union

from verifylib.evidence.schemas.fields import NAMED as _n
from verifylib.evidence.schemas.fields import SchemaError, copy_json, nullable, opt, req

_T = TypeVar("_T")

__all__ = [
    "SchemaError", "RunRecord", "SystemInfoProbeRecord", "SourceEvidence", "PatchPhase",
    "PatchChecks", "PatchEvidence", "FailedBuild", "GgmlBuildEvidence", "BenchRecord",
    "CoremlBuildEvidence", "parse_build", "parse_coreml_build",
]



# ----------------------------------------------------------------------------- run records

@dataclass(frozen=True)
class RunRecord:
    """One launch as :func:`verifylib.runtime.runner.run_record` records it.

    Attributes
    ----------
    argv : tuple of str
        The command line.
    returncode : int or None
        Exit status (None on timeout).
    signal : str or None
        Name of the terminating signal.
    timed_out : bool
        Whether the run was killed at its timeout.
    wall_s : float
        Wall time, seconds (an integer stays an integer).
    stdout_sha256, stderr_sha256 : str
        Digests of the stored streams.
    stdout_bytes, stderr_bytes : int
        Their lengths.
    launch : dict or None
        The launch-ledger citation; None when the record has no ``launch`` key.
    """

    argv: tuple[str, ...]
    returncode: int | None
    signal: str | None
    timed_out: bool
    wall_s: float
    stdout_sha256: str
    stderr_sha256: str
    stdout_bytes: int
    stderr_bytes: int
    launch: dict[str, Any] | None = None

    @classmethod
    def from_json(cls, doc: Any, path: str = "") -> "RunRecord":
        """Parse a run record.

        Parameters
        ----------
        doc : object
            The decoded JSON.
        path : str
            Where it sits in its document, for error messages.

        Returns
        -------
        RunRecord

        Raises
        ------
        SchemaError
            If a field is missing or of the wrong type.
        """
        d = _n.obj(doc, path)
        return cls(argv=req(d, "argv", path, _n.strings),
                   returncode=req(d, "returncode", path, _n.integer_or_null),
                   signal=req(d, "signal", path, _n.string_or_null),
                   timed_out=req(d, "timed_out", path, _n.boolean),
                   wall_s=req(d, "wall_s", path, _n.number),
                   stdout_sha256=req(d, "stdout_sha256", path, _n.string),
                   stderr_sha256=req(d, "stderr_sha256", path, _n.string),
                   stdout_bytes=req(d, "stdout_bytes", path, _n.integer),
                   stderr_bytes=req(d, "stderr_bytes", path, _n.integer),
                   launch=opt(d, "launch", path, _n.mapping))

    def to_json(self) -> dict[str, Any]:
        """Return the record as written.

        Returns
        -------
        dict
            The :func:`~verifylib.runtime.runner.run_record` dict.
        """
        out: dict[str, Any] = {
            "argv": list(self.argv), "returncode": self.returncode, "signal": self.signal,
            "timed_out": self.timed_out, "wall_s": self.wall_s,
            "stdout_sha256": self.stdout_sha256, "stderr_sha256": self.stderr_sha256,
            "stdout_bytes": self.stdout_bytes, "stderr_bytes": self.stderr_bytes}
        if self.launch is not None:
            out["launch"] = copy_json(self.launch)
        return out


@dataclass(frozen=True)
class SystemInfoProbeRecord:
    """The ``system_info`` probe of a whisper-cli build (``SystemInfoProbe.to_evidence``).

    Attributes
    ----------
    run : RunRecord
        The probe's launch.
    system_info_line : str or None
        The ``system_info:`` line the probe read.
    coreml : int or None
        The ``COREML`` flag on that line.
    """

    run: RunRecord
    system_info_line: str | None
    coreml: int | None

    @classmethod
    def from_json(cls, doc: Any, path: str = "") -> "SystemInfoProbeRecord":
        """Parse a probe record (a run record plus two keys).

        Parameters
        ----------
        doc : object
            The decoded JSON.
        path : str
            Where it sits in its document.

        Returns
        -------
        SystemInfoProbeRecord

        Raises
        ------
        SchemaError
            If a field is missing or of the wrong type.
        """
        d = _n.obj(doc, path)
        return cls(run=RunRecord.from_json(d, path),
                   system_info_line=req(d, "system_info_line", path, _n.string_or_null),
                   coreml=req(d, "coreml", path, _n.integer_or_null))

    def to_json(self) -> dict[str, Any]:
        """Return the record as written.

        Returns
        -------
        dict
            The run record with ``system_info_line`` and ``coreml``.
        """
        return dict(self.run.to_json(), system_info_line=self.system_info_line,
                    coreml=self.coreml)


# ----------------------------------------------------------------------------- source

@dataclass(frozen=True)
class SourceEvidence:
    """``build.source_identity`` evidence (:func:`verifylib.whispercpp.source.source_evidence`).

    Attributes
    ----------
    pin, pin_commit, pin_tree : str
        The pin's name, commit and tree id.
    computed_tree : str
        The tree id computed on the obtained folder.
    origin : dict or None
        Where the source came from.
    path : str or None
        The source folder.
    cached : bool or None
        Whether it was reused from the cache.
    """

    pin: str
    pin_commit: str
    pin_tree: str
    computed_tree: str
    origin: dict[str, Any] | None
    path: str | None
    cached: bool | None

    @classmethod
    def from_json(cls, doc: Any) -> "SourceEvidence":
        """Parse the ``source`` document.

        Parameters
        ----------
        doc : object
            The decoded JSON.

        Returns
        -------
        SourceEvidence

        Raises
        ------
        SchemaError
            If a field is missing or of the wrong type.
        """
        d = _n.obj(doc, "")
        return cls(pin=req(d, "pin", "", _n.string),
                   pin_commit=req(d, "pin_commit", "", _n.string),
                   pin_tree=req(d, "pin_tree", "", _n.string),
                   computed_tree=req(d, "computed_tree", "", _n.string),
                   origin=req(d, "origin", "", _n.mapping_or_null),
                   path=req(d, "path", "", _n.string_or_null),
                   cached=req(d, "cached", "", _n.boolean_or_null))

    def to_json(self) -> dict[str, Any]:
        """Return the document as written.

        Returns
        -------
        dict
            ``{"pin", "pin_commit", "pin_tree", "computed_tree", "origin", "path", "cached"}``.
        """
        return {"pin": self.pin, "pin_commit": self.pin_commit, "pin_tree": self.pin_tree,
                "computed_tree": self.computed_tree, "origin": copy_json(self.origin),
                "path": self.path, "cached": self.cached}


# ----------------------------------------------------------------------------- patch

@dataclass(frozen=True)
class PatchPhase:
    """One patch check (``PatchCheck.to_evidence``), before or after the build.

    Attributes
    ----------
    pin, pin_tree, declared_patch_sha256 : str
        What the check was made against.
    touches : tuple of str
        The declared touched paths.
    head_tree : str or None
        The work tree's HEAD tree id.
    patch_file_sha256 : str
        Digest of the patch file.
    patch_file_bytes : int
        Its length.
    diff_sha256 : str
        Digest of ``git diff``.
    diff_bytes : int
        Its length.
    status_lines : tuple of str
        ``git status`` (ignored files included).
    problems : tuple of str
        What the live check found (informational: the judge recomputes them).
    """

    pin: str
    pin_tree: str
    declared_patch_sha256: str
    touches: tuple[str, ...]
    head_tree: str | None
    patch_file_sha256: str
    patch_file_bytes: int
    diff_sha256: str
    diff_bytes: int
    status_lines: tuple[str, ...]
    problems: tuple[str, ...]

    @classmethod
    def from_json(cls, doc: Any, path: str = "") -> "PatchPhase":
        """Parse one phase.

        Parameters
        ----------
        doc : object
            The decoded JSON.
        path : str
            Where it sits (``checks.before``, ``checks.after``).

        Returns
        -------
        PatchPhase

        Raises
        ------
        SchemaError
            If a field is missing or of the wrong type.
        """
        d = _n.obj(doc, path)
        return cls(pin=req(d, "pin", path, _n.string),
                   pin_tree=req(d, "pin_tree", path, _n.string),
                   declared_patch_sha256=req(d, "declared_patch_sha256", path, _n.string),
                   touches=req(d, "touches", path, _n.strings),
                   head_tree=req(d, "head_tree", path, _n.string_or_null),
                   patch_file_sha256=req(d, "patch_file_sha256", path, _n.string),
                   patch_file_bytes=req(d, "patch_file_bytes", path, _n.integer),
                   diff_sha256=req(d, "diff_sha256", path, _n.string),
                   diff_bytes=req(d, "diff_bytes", path, _n.integer),
                   status_lines=req(d, "status_lines", path, _n.strings),
                   problems=req(d, "problems", path, _n.strings))

    def to_json(self) -> dict[str, Any]:
        """Return the phase as written.

        Returns
        -------
        dict
            The ``PatchCheck.to_evidence`` dict.
        """
        return {"pin": self.pin, "pin_tree": self.pin_tree,
                "declared_patch_sha256": self.declared_patch_sha256,
                "touches": list(self.touches), "head_tree": self.head_tree,
                "patch_file_sha256": self.patch_file_sha256,
                "patch_file_bytes": self.patch_file_bytes, "diff_sha256": self.diff_sha256,
                "diff_bytes": self.diff_bytes, "status_lines": list(self.status_lines),
                "problems": list(self.problems)}


@dataclass(frozen=True)
class PatchChecks:
    """The ``checks`` of :class:`PatchEvidence`; each key is present only when made.

    Attributes
    ----------
    before, after : PatchPhase or None
        The checks before and after the build (None: not made, key absent).
    apply_error : str or None
        Why the patch did not apply (None: key absent).
    """

    before: PatchPhase | None = None
    after: PatchPhase | None = None
    apply_error: str | None = None

    @classmethod
    def from_json(cls, doc: Any, path: str = "checks") -> "PatchChecks":
        """Parse the checks.

        Parameters
        ----------
        doc : object
            The decoded JSON.
        path : str
            Where it sits.

        Returns
        -------
        PatchChecks

        Raises
        ------
        SchemaError
            If a present entry is of the wrong shape.
        """
        d = _n.obj(doc, path)
        return cls(
            before=opt(d, "before", path, PatchPhase.from_json),
            after=opt(d, "after", path, PatchPhase.from_json),
            apply_error=opt(d, "apply_error", path, _n.string))

    def phase(self, when: str) -> PatchPhase | None:
        """Return the phase named ``when`` (``"before"`` or ``"after"``), or None.

        Parameters
        ----------
        when : str
            The phase.

        Returns
        -------
        PatchPhase or None
        """
        return {"before": self.before, "after": self.after}.get(when)

    def to_json(self) -> dict[str, Any]:
        """Return the checks as written, in the order the stage records them.

        Returns
        -------
        dict
            ``apply_error`` / ``before`` / ``after``, each only when present.
        """
        out: dict[str, Any] = {}
        if self.apply_error is not None:
            out["apply_error"] = self.apply_error
        if self.before is not None:
            out["before"] = self.before.to_json()
        if self.after is not None:
            out["after"] = self.after.to_json()
        return out


@dataclass(frozen=True)
class PatchEvidence:
    """``build.patch_exact`` evidence (:func:`verifylib.whispercpp.source.patch_evidence`).

    Attributes
    ----------
    pin, pin_commit, pin_tree, declared_patch_sha256 : str
        The pin's fields.
    touches : tuple of str
        Its declared touched paths.
    patch_file : str
        The patch file's name.
    checks : PatchChecks
        What was measured.
    """

    pin: str
    pin_commit: str
    pin_tree: str
    declared_patch_sha256: str
    touches: tuple[str, ...]
    patch_file: str
    checks: PatchChecks

    @classmethod
    def from_json(cls, doc: Any) -> "PatchEvidence":
        """Parse the ``patch`` document.

        Parameters
        ----------
        doc : object
            The decoded JSON.

        Returns
        -------
        PatchEvidence

        Raises
        ------
        SchemaError
            If a field is missing or of the wrong type.
        """
        d = _n.obj(doc, "")
        return cls(pin=req(d, "pin", "", _n.string),
                   pin_commit=req(d, "pin_commit", "", _n.string),
                   pin_tree=req(d, "pin_tree", "", _n.string),
                   declared_patch_sha256=req(d, "declared_patch_sha256", "", _n.string),
                   touches=req(d, "touches", "", _n.strings),
                   patch_file=req(d, "patch_file", "", _n.string),
                   checks=req(d, "checks", "", PatchChecks.from_json))

    def to_json(self) -> dict[str, Any]:
        """Return the document as written.

        Returns
        -------
        dict
            The pin fields, ``patch_file`` and ``checks``.
        """
        return {"pin": self.pin, "pin_commit": self.pin_commit, "pin_tree": self.pin_tree,
                "declared_patch_sha256": self.declared_patch_sha256,
                "touches": list(self.touches), "patch_file": self.patch_file,
                "checks": self.checks.to_json()}


# ----------------------------------------------------------------------------- builds

@dataclass(frozen=True)
class FailedBuild:
    """A build that did not build: ``{"built": false, "error": ...}``.

    Attributes
    ----------
    error : str
        Why (the build log's tail, or "build did not run").
    """

    error: str

    @classmethod
    def from_json(cls, doc: Any) -> "FailedBuild":
        """Parse a failed-build document.

        Parameters
        ----------
        doc : object
            The decoded JSON.

        Returns
        -------
        FailedBuild

        Raises
        ------
        SchemaError
            If ``built`` is not false or ``error`` is not a string.
        """
        d = _n.obj(doc, "")
        req(d, "built", "", _n.literal(False))
        return cls(error=req(d, "error", "", _n.string))

    def to_json(self) -> dict[str, Any]:
        """Return the document as written.

        Returns
        -------
        dict
            ``{"built": False, "error": ...}``.
        """
        return {"built": False, "error": self.error}


@dataclass(frozen=True)
class GgmlBuildEvidence:
    """``build.ggml`` evidence of a built whisper-cli.

    As :func:`verifylib.whispercpp.build.build_evidence` writes it.

    Attributes
    ----------
    variant, key, binary, sha256 : str
        The build's variant, cache key, binary path and digest.
    recorded_sha256 : str or None
        The digest its ``build.json`` records.
    static : bool
        Whether it links no whisper/ggml library dynamically.
    needed_libs : tuple of str
        Its dynamic dependencies.
    options, compiler : dict
        Effective CMake options and compiler identity.
    cached : bool
        Reused from the cache.
    seconds : float
        Build time.
    tree_id : str
        The pristine tree id.
    patch_sha256 : str or None
        The applied patch (None for unpatched variants).
    probe : SystemInfoProbeRecord or None
        The ``system_info`` probe (null: none recorded, which the judge refuses).
    """

    variant: str
    key: str
    binary: str
    sha256: str
    recorded_sha256: str | None
    static: bool
    needed_libs: tuple[str, ...]
    options: dict[str, Any]
    compiler: dict[str, Any]
    cached: bool
    seconds: float
    tree_id: str
    patch_sha256: str | None
    probe: SystemInfoProbeRecord | None

    @classmethod
    def from_json(cls, doc: Any) -> "GgmlBuildEvidence":
        """Parse a built ``build`` document (``built`` must be true).

        Parameters
        ----------
        doc : object
            The decoded JSON.

        Returns
        -------
        GgmlBuildEvidence

        Raises
        ------
        SchemaError
            If a field is missing or of the wrong type.
        """
        d = _n.obj(doc, "")
        req(d, "built", "", _n.literal(True))
        return cls(variant=req(d, "variant", "", _n.string), key=req(d, "key", "", _n.string),
                   binary=req(d, "binary", "", _n.string), sha256=req(d, "sha256", "", _n.string),
                   recorded_sha256=req(d, "recorded_sha256", "", _n.string_or_null),
                   static=req(d, "static", "", _n.boolean),
                   needed_libs=req(d, "needed_libs", "", _n.strings),
                   options=req(d, "options", "", _n.mapping),
                   compiler=req(d, "compiler", "", _n.mapping),
                   cached=req(d, "cached", "", _n.boolean),
                   seconds=req(d, "seconds", "", _n.number),
                   tree_id=req(d, "tree_id", "", _n.string),
                   patch_sha256=req(d, "patch_sha256", "", _n.string_or_null),
                   probe=req(d, "probe", "", nullable(SystemInfoProbeRecord.from_json)))

    def to_json(self) -> dict[str, Any]:
        """Return the document as written.

        Returns
        -------
        dict
            The :func:`~verifylib.whispercpp.build.build_evidence` dict.
        """
        return {"built": True, "variant": self.variant, "key": self.key,
                "binary": self.binary, "sha256": self.sha256,
                "recorded_sha256": self.recorded_sha256, "static": self.static,
                "needed_libs": list(self.needed_libs), "options": copy_json(self.options),
                "compiler": copy_json(self.compiler), "cached": self.cached,
                "seconds": self.seconds, "tree_id": self.tree_id,
                "patch_sha256": self.patch_sha256,
                "probe": self.probe.to_json() if self.probe is not None else None}


@dataclass(frozen=True)
class BenchRecord:
    """The ``whisper-bench`` of a Core ML build and its ``system_info`` run.

    Attributes
    ----------
    binary, sha256, key, cli_key : str
        The bench binary, its digest, its key and the whisper-cli build key it follows.
    options : dict
        Its CMake options.
    cached : bool
        Reused from the cache.
    probe : RunRecord
        Its run.
    """

    binary: str
    sha256: str
    key: str
    cli_key: str
    options: dict[str, Any]
    cached: bool
    probe: RunRecord

    @classmethod
    def from_json(cls, doc: Any, path: str = "bench") -> "BenchRecord":
        """Parse the ``bench`` entry.

        Parameters
        ----------
        doc : object
            The decoded JSON.
        path : str
            Where it sits.

        Returns
        -------
        BenchRecord

        Raises
        ------
        SchemaError
            If a field is missing or of the wrong type.
        """
        d = _n.obj(doc, path)
        return cls(binary=req(d, "binary", path, _n.string),
                   sha256=req(d, "sha256", path, _n.string),
                   key=req(d, "key", path, _n.string), cli_key=req(d, "cli_key", path, _n.string),
                   options=req(d, "options", path, _n.mapping),
                   cached=req(d, "cached", path, _n.boolean),
                   probe=req(d, "probe", path, RunRecord.from_json))

    def to_json(self) -> dict[str, Any]:
        """Return the entry as written.

        Returns
        -------
        dict
        """
        return {"binary": self.binary, "sha256": self.sha256, "key": self.key,
                "cli_key": self.cli_key, "options": copy_json(self.options),
                "cached": self.cached, "probe": self.probe.to_json()}


@dataclass(frozen=True)
class CoremlBuildEvidence:
    """``build.coreml`` evidence of a built Core ML whisper-cli (``write_coreml_evidence``).

    Attributes
    ----------
    variant, key, binary, sha256 : str
        As in :class:`GgmlBuildEvidence`.
    recorded_sha256 : str or None
        The digest its ``build.json`` records.
    static : bool
        Whether it is static.
    needed_libs : tuple of str
        Its dynamic dependencies.
    options : dict
        Effective CMake options.
    tree_id : str
        The pristine tree id.
    patch_sha256 : str or None
        The applied patch.
    cached : bool
        Reused from the cache.
    seconds : float
        Build time.
    patch_after_problems : tuple of str
        What the patch check after the build found.
    ggml_key : str or None
        The GGML build's key (None when it was not built).
    bench : BenchRecord
        The ``whisper-bench`` built with the same options, and its run.
    """

    variant: str
    key: str
    binary: str
    sha256: str
    recorded_sha256: str | None
    static: bool
    needed_libs: tuple[str, ...]
    options: dict[str, Any]
    tree_id: str
    patch_sha256: str | None
    cached: bool
    seconds: float
    patch_after_problems: tuple[str, ...]
    ggml_key: str | None
    bench: BenchRecord

    @classmethod
    def from_json(cls, doc: Any) -> "CoremlBuildEvidence":
        """Parse a built ``coreml_build`` document (``built`` must be true).

        Parameters
        ----------
        doc : object
            The decoded JSON.

        Returns
        -------
        CoremlBuildEvidence

        Raises
        ------
        SchemaError
            If a field is missing or of the wrong type.
        """
        d = _n.obj(doc, "")
        req(d, "built", "", _n.literal(True))
        return cls(variant=req(d, "variant", "", _n.string), key=req(d, "key", "", _n.string),
                   binary=req(d, "binary", "", _n.string), sha256=req(d, "sha256", "", _n.string),
                   recorded_sha256=req(d, "recorded_sha256", "", _n.string_or_null),
                   static=req(d, "static", "", _n.boolean),
                   needed_libs=req(d, "needed_libs", "", _n.strings),
                   options=req(d, "options", "", _n.mapping),
                   tree_id=req(d, "tree_id", "", _n.string),
                   patch_sha256=req(d, "patch_sha256", "", _n.string_or_null),
                   cached=req(d, "cached", "", _n.boolean),
                   seconds=req(d, "seconds", "", _n.number),
                   patch_after_problems=req(d, "patch_after_problems", "", _n.strings),
                   ggml_key=req(d, "ggml_key", "", _n.string_or_null),
                   bench=req(d, "bench", "", BenchRecord.from_json))

    def to_json(self) -> dict[str, Any]:
        """Return the document as written.

        Returns
        -------
        dict
        """
        return {"built": True, "variant": self.variant, "key": self.key,
                "binary": self.binary, "sha256": self.sha256,
                "recorded_sha256": self.recorded_sha256, "static": self.static,
                "needed_libs": list(self.needed_libs), "options": copy_json(self.options),
                "tree_id": self.tree_id, "patch_sha256": self.patch_sha256,
                "cached": self.cached, "seconds": self.seconds,
                "patch_after_problems": list(self.patch_after_problems),
                "ggml_key": self.ggml_key, "bench": self.bench.to_json()}


def _outcome(doc: Any, built: Callable[[Any], _T]) -> Union[_T, FailedBuild]:
    d = _n.obj(doc, "")
    flag = req(d, "built", "", _n.boolean)
    return built(d) if flag else FailedBuild.from_json(d)


def parse_build(doc: Any) -> Union[GgmlBuildEvidence, FailedBuild]:
    """Parse the ``build`` document of ``build.ggml``, built or not.

    Parameters
    ----------
    doc : object
        The decoded JSON.

    Returns
    -------
    GgmlBuildEvidence or FailedBuild
        Chosen by ``built``.

    Raises
    ------
    SchemaError
        If the document does not have the shape its ``built`` flag says.
    """
    return _outcome(doc, GgmlBuildEvidence.from_json)


def parse_coreml_build(doc: Any) -> Union[CoremlBuildEvidence, FailedBuild]:
    """Parse the ``coreml_build`` document of ``build.coreml``, built or not.

    Parameters
    ----------
    doc : object
        The decoded JSON.

    Returns
    -------
    CoremlBuildEvidence or FailedBuild
        Chosen by ``built``.

    Raises
    ------
    SchemaError
        If the document does not have the shape its ``built`` flag says.
    """
    return _outcome(doc, CoremlBuildEvidence.from_json)
