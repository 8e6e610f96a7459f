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
job (:mod:`verifylib.evidence.build.rules`). Only :mod:`verifylib.errors` is imported.
"""

from __future__ import annotations

from typing import Any, Callable, TypeVar, Union

from verifylib.evidence.fields import EXPECTED as _n
from verifylib.evidence.fields import Schema, field, nullable, req
from verifylib.evidence.run_record import RunRecord

_T = TypeVar("_T")

__all__ = [
    "SystemInfoProbeRecord", "SourceEvidence", "PatchPhase",
    "PatchChecks", "PatchEvidence", "FailedBuild", "SharedGgmlRecord", "GgmlBuildEvidence",
    "BenchRecord",
    "CoremlBuildEvidence", "parse_build", "parse_coreml_build",
]


# ----------------------------------------------------------------------------- run records

class SystemInfoProbeRecord(Schema):
    """The ``system_info`` probe of a whisper-cli build (``SystemInfoProbe.to_evidence``).

    Attributes
    ----------
    run : RunRecord
        The probe's launch.
    system_info_line : str or None
        The ``system_info:`` line the probe read.
    coreml : int or None
        The ``COREML`` flag on that line.
    backend : str or None
        The ggml backends the launch logged choosing
        (:func:`verifylib.runtime.contracts.launch_backend`); None: not recorded (key
        absent, a run from before backends were pinned).
    """

    run: RunRecord = field(RunRecord, inline=True)
    system_info_line: str | None = field(_n.string_or_null)
    coreml: int | None = field(_n.integer_or_null)
    backend: str | None = field(_n.string, optional=True, default=None)


# ----------------------------------------------------------------------------- source

class SourceEvidence(Schema):
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

    pin: str = field(_n.string)
    pin_commit: str = field(_n.string)
    pin_tree: str = field(_n.string)
    computed_tree: str = field(_n.string)
    origin: dict[str, Any] | None = field(_n.mapping_or_null)
    path: str | None = field(_n.string_or_null)
    cached: bool | None = field(_n.boolean_or_null)


# ----------------------------------------------------------------------------- patch

class PatchPhase(Schema):
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

    pin: str = field(_n.string)
    pin_tree: str = field(_n.string)
    declared_patch_sha256: str = field(_n.string)
    touches: tuple[str, ...] = field(_n.strings)
    head_tree: str | None = field(_n.string_or_null)
    patch_file_sha256: str = field(_n.string)
    patch_file_bytes: int = field(_n.integer)
    diff_sha256: str = field(_n.string)
    diff_bytes: int = field(_n.integer)
    status_lines: tuple[str, ...] = field(_n.strings)
    problems: tuple[str, ...] = field(_n.strings)


class PatchChecks(Schema):
    """The ``checks`` of :class:`PatchEvidence`; each key is present only when made.

    Attributes
    ----------
    before, after : PatchPhase or None
        The checks before and after the build (None: not made, key absent).
    apply_error : str or None
        Why the patch did not apply (None: key absent).
    """

    _path = "checks"

    apply_error: str | None = field(_n.string, optional=True, default=None)
    before: PatchPhase | None = field(PatchPhase, optional=True, default=None)
    after: PatchPhase | None = field(PatchPhase, optional=True, default=None)

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


class PatchEvidence(Schema):
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

    pin: str = field(_n.string)
    pin_commit: str = field(_n.string)
    pin_tree: str = field(_n.string)
    declared_patch_sha256: str = field(_n.string)
    touches: tuple[str, ...] = field(_n.strings)
    patch_file: str = field(_n.string)
    checks: PatchChecks = field(PatchChecks)


# ----------------------------------------------------------------------------- builds

class FailedBuild(Schema):
    """A build that did not build: ``{"built": false, "error": ...}``.

    Attributes
    ----------
    built : bool
        Always False (a constant key).
    error : str
        Why (the build log's tail, or "build did not run").
    """

    built: bool = field(_n.literal(False), default=False, init=False)
    error: str = field(_n.string)


class SharedGgmlRecord(Schema):
    """The shared ggml build a binary links (``GgmlBuild.to_evidence``, whispercpp.shared_ggml).

    Attributes
    ----------
    key : str
        The ggml build's content key.
    options : dict
        Its CMake options.
    source_digest : str
        Digest of the ``ggml/`` folder and the top-level CMake files it was built from.
    libraries : dict
        Each static library (``lib/libggml*.a``) to its SHA-256.
    files_sha256 : str
        Digest of the whole install (every file and its digest).
    """

    _path = "ggml"

    key: str = field(_n.string)
    options: dict[str, Any] = field(_n.mapping)
    source_digest: str = field(_n.string)
    libraries: dict[str, Any] = field(_n.mapping)
    files_sha256: str = field(_n.string)


class GgmlBuildEvidence(Schema):
    """``build.ggml`` evidence of a built whisper-cli.

    As :func:`verifylib.whispercpp.system_info.build_evidence` writes it.

    Attributes
    ----------
    built : bool
        Always True (a constant key: the document of a build that built).
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
    ggml_backend : str or None
        The ggml backend the options pin (``cpu``, ``metal``); None: not recorded (key
        absent, a run from before backends were pinned).
    ggml : SharedGgmlRecord or None
        The shared ggml build the binary links; None (key absent): ggml built in one
        piece with it (a source without the shared route, or a run from before it).
    """

    built: bool = field(_n.literal(True), default=True, init=False)
    variant: str = field(_n.string)
    key: str = field(_n.string)
    binary: str = field(_n.string)
    sha256: str = field(_n.string)
    recorded_sha256: str | None = field(_n.string_or_null)
    static: bool = field(_n.boolean)
    needed_libs: tuple[str, ...] = field(_n.strings)
    options: dict[str, Any] = field(_n.mapping)
    compiler: dict[str, Any] = field(_n.mapping)
    cached: bool = field(_n.boolean)
    seconds: float = field(_n.number)
    tree_id: str = field(_n.string)
    patch_sha256: str | None = field(_n.string_or_null)
    probe: SystemInfoProbeRecord | None = field(nullable(SystemInfoProbeRecord.from_json))
    ggml_backend: str | None = field(_n.string, optional=True, default=None)
    ggml: SharedGgmlRecord | None = field(SharedGgmlRecord, optional=True, default=None)


class BenchRecord(Schema):
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
    backend : str or None
        The ggml backends the run logged choosing
        (:func:`verifylib.runtime.contracts.launch_backend`); None: not recorded.
    """

    _path = "bench"

    binary: str = field(_n.string)
    sha256: str = field(_n.string)
    key: str = field(_n.string)
    cli_key: str = field(_n.string)
    options: dict[str, Any] = field(_n.mapping)
    cached: bool = field(_n.boolean)
    probe: RunRecord = field(RunRecord)
    backend: str | None = field(_n.string, optional=True, default=None)


class CoremlBuildEvidence(Schema):
    """``build.coreml`` evidence of a built Core ML whisper-cli (``write_coreml_evidence``).

    Attributes
    ----------
    built : bool
        Always True (a constant key: the document of a build that built).
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
    ggml_backend : str or None
        The ggml backend the options pin, the hybrid runs' decoder backend; None: not
        recorded (key absent, a run from before backends were pinned).
    """

    built: bool = field(_n.literal(True), default=True, init=False)
    variant: str = field(_n.string)
    key: str = field(_n.string)
    binary: str = field(_n.string)
    sha256: str = field(_n.string)
    recorded_sha256: str | None = field(_n.string_or_null)
    static: bool = field(_n.boolean)
    needed_libs: tuple[str, ...] = field(_n.strings)
    options: dict[str, Any] = field(_n.mapping)
    tree_id: str = field(_n.string)
    patch_sha256: str | None = field(_n.string_or_null)
    cached: bool = field(_n.boolean)
    seconds: float = field(_n.number)
    patch_after_problems: tuple[str, ...] = field(_n.strings)
    ggml_key: str | None = field(_n.string_or_null)
    bench: BenchRecord = field(BenchRecord)
    ggml_backend: str | None = field(_n.string, optional=True, default=None)


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
