"""Schemas of the stage 03 (canary) sidecar documents.

Four documents, one class each: :class:`LifecycleEvidence` (``verifylib-lifecycle-ab/1``,
``canary.lifecycle_ab``), :class:`SanitizerEvidence` (``verifylib-sanitizer/1``,
``canary.sanitizer``), :class:`NegativeEvidence` (``verifylib-coreml-negative/1``,
``canary.coreml_negative``) and :class:`PositiveEvidence` (``verifylib-coreml-positive/1``,
``canary.coreml_positive``), with nested frozen dataclasses for the run records and the
sides of the two A/B documents.

``from_json`` is strict and fails closed: a field that is missing or of the wrong JSON type
raises :class:`~verifylib.evidence.fields.SchemaError` (an
:class:`verifylib.errors.EvidenceInvalid`) whose ``path`` names it, e.g.
``sides.unpatched.runs[3].returncode``. Keys the format does not define are not read (the
rules never look at them), except in a recorded sanitizer report and its frames, which the
rule compares whole with the report the stored stderr gives: there an unknown key is refused
too. ``to_json`` gives back exactly the dict the stage writes, key for key and with the
same value types (an integer timeout stays an integer), so ``to_json(from_json(doc)) ==
doc`` for every document the stage writes and the canonical bytes on disk are the same
either way.

This module checks shapes and types only; whether the values support a gate (digests,
outcomes re-classified from the stored streams, the trigger, the pin) is the rules' job
(:mod:`verifylib.evidence.canary.rules`). It imports nothing from verifylib but
:mod:`verifylib.errors` (through :mod:`.fields`), so views and readers may use it.
"""

from __future__ import annotations

from typing import Any, ClassVar, Generic, Mapping, Self, TypeVar

from verifylib.evidence.fields import (
    Schema,
    SchemaError,
    array_of,
    boolean,
    boolean_or_null,
    field,
    integer,
    integer_or_null,
    map_of,
    nullable,
    number,
    number_or_null,
    opt,
    req,
    string,
    string_or_null,
    strings,
)
from verifylib.evidence.fields import obj as as_object
from verifylib.evidence.run_record import RunRecord

__all__ = [
    "LIFECYCLE_SCHEMA", "SANITIZER_SCHEMA", "NEGATIVE_SCHEMA", "POSITIVE_SCHEMA", "SIDES",
    "SchemaMismatch", "SidesIncomplete",
    "FileRef", "LifecycleRun", "LifecycleSide", "LifecycleSides",
    "LifecycleEvidence", "AsanFrame", "AsanReport", "AsanBuild", "SanitizerRun",
    "SanitizerSide", "SanitizerSides", "SanitizerEvidence", "NegativeEvidence",
    "CoremlDigests", "PositiveTimeouts", "PositiveRun", "PositiveEvidence",
]

LIFECYCLE_SCHEMA = "verifylib-lifecycle-ab/1"
"""Schema id of the ``lifecycle`` document of ``canary.lifecycle_ab``."""

SANITIZER_SCHEMA = "verifylib-sanitizer/1"
"""Schema id of the ``sanitizer`` document of ``canary.sanitizer``."""

NEGATIVE_SCHEMA = "verifylib-coreml-negative/1"
"""Schema id of the ``negative`` document of ``canary.coreml_negative``."""

POSITIVE_SCHEMA = "verifylib-coreml-positive/1"
"""Schema id of the ``positive`` document of ``canary.coreml_positive``."""

SIDES = ("unpatched", "patched")
"""The two sides of the A/B documents, in the order they are recorded."""


# ----------------------------------------------------------------------------- errors

class SchemaMismatch(SchemaError):
    """The document is not an object, or its ``schema`` is not the expected one."""


class SidesIncomplete(SchemaError):
    """An A/B document's ``sides`` is not an object holding exactly both sides."""


# ----------------------------------------------------------------------------- documents

def _schema(doc: Any, want: str) -> Mapping[str, Any]:
    if not isinstance(doc, Mapping) or doc.get("schema") != want:
        got = doc.get("schema") if isinstance(doc, Mapping) else None
        raise SchemaMismatch("schema", f"not a {want} document (schema {got!r})")
    return doc


def _sides(doc: Mapping[str, Any]) -> Mapping[str, Any]:
    sides = doc.get("sides")
    if not isinstance(sides, Mapping) or set(sides) != set(SIDES):
        raise SidesIncomplete("sides", "evidence must record both sides (unpatched and patched)")
    return sides


class _Document(Schema, kw_only=True):
    """A canary sidecar document: its ``schema`` (and an A/B document's ``sides``) first.

    Attributes
    ----------
    SCHEMA : str
        The document's schema id.
    _ab : bool
        Whether it is an A/B document, whose ``sides`` must hold exactly both sides.
    """

    SCHEMA: ClassVar[str]
    _ab: ClassVar[bool] = False

    @classmethod
    def from_json(cls, doc: Any, path: str | None = None) -> Self:
        """Read the document, checking its ``schema`` (and ``sides``) before any field.

        Raises
        ------
        SchemaMismatch
            If it is not an object with the schema id :attr:`SCHEMA`.
        SidesIncomplete
            If an A/B document's ``sides`` does not hold exactly both sides.
        SchemaError
            If any other field is missing or wrongly typed (the error's ``path`` names it).
        """
        obj = _schema(doc, cls.SCHEMA)
        if cls._ab:
            _sides(obj)
        return super().from_json(doc)


# ----------------------------------------------------------------------------- shared parts

class FileRef(Schema, kw_only=True):
    """A file an A/B document names, with its digest (the test model, the sample).

    Attributes
    ----------
    path : str
        Where it was.
    sha256 : str
        Its SHA-256 when the runs were made.
    """

    path: str = field(string)
    sha256: str = field(string)


# ----------------------------------------------------------------------------- lifecycle A/B

class LifecycleRun(RunRecord, kw_only=True):
    """One lifecycle-trigger run of an A/B side: the run record, its place and outcome.

    Attributes
    ----------
    index : int
        The run's number on its side.
    outcome : str
        The outcome the stage classified (the rule re-classifies it).
    """

    index: int = field(integer)
    outcome: str = field(string)


class _Side(Schema, kw_only=True):
    """A side of an A/B document: available with its fields, or unavailable with only why.

    An available side is read field by field (its ``reason`` is not read), an unavailable
    one is ``{"available": false}`` with an optional ``reason``.
    """

    _path = "side"

    available: bool = field(boolean)
    reason: str | None = field(string_or_null, optional=True, default=None)

    @classmethod
    def from_json(cls, doc: Any, path: str | None = None) -> Self:
        """Read a side record (``available`` first; an unavailable side has only ``reason``).

        Raises
        ------
        SchemaError
            If ``available`` is missing or not a boolean, or a field of an available side
            is missing or wrongly typed.
        """
        path = cls._path if path is None else path
        obj = as_object(doc, path)
        if not req(obj, "available", path, boolean):
            return cls(available=False, reason=opt(obj, "reason", path, string_or_null))
        return super().from_json({k: v for k, v in obj.items() if k != "reason"}, path)

    def to_json(self) -> dict[str, Any]:
        """Write the side back: ``{"available": false, "reason"}`` or every field."""
        if not self.available:
            return {"available": False,
                    **({"reason": self.reason} if self.reason is not None else {})}
        return super().to_json()


_S = TypeVar("_S", bound=_Side)


class _Sides(Schema, Generic[_S], kw_only=True):
    """Both sides of an A/B document, ``unpatched`` and ``patched``."""

    _path = "sides"

    unpatched: _S
    patched: _S

    def __getitem__(self, side: str) -> _S:
        """Return the side named ``side`` (``"unpatched"`` or ``"patched"``)."""
        if side not in SIDES:
            raise KeyError(side)
        found: _S = getattr(self, side)
        return found

    @classmethod
    def from_json(cls, doc: Any, path: str | None = None) -> Self:
        """Read the ``sides`` object, after checking it holds exactly both sides.

        Raises
        ------
        SidesIncomplete
            If it is not an object with exactly the keys ``unpatched`` and ``patched``.
        SchemaError
            If a side does not parse.
        """
        _sides({"sides": doc})
        return super().from_json(doc, path)


class LifecycleSide(_Side, kw_only=True):
    """One build's side of the lifecycle A/B.

    An available side has its binary, runs and counts; an unavailable one only why.

    Attributes
    ----------
    available : bool
        Whether the build was there and ran.
    reason : str or None
        Why it is not available (unavailable sides; may be absent).
    binary : str or None
        The whisper-cli that ran (available sides).
    binary_sha256 : str or None
        Its digest (available sides).
    runs : tuple of LifecycleRun
        The runs, in order (empty for an unavailable side).
    counts : dict or None
        Outcome -> number of runs, as recorded (available sides).
    """

    binary: str | None = field(string, default=None)
    binary_sha256: str | None = field(string, default=None)
    runs: tuple[LifecycleRun, ...] = field(array_of(LifecycleRun.from_json), default=())
    counts: Mapping[str, int] | None = field(lambda v, p: map_of(v, p, integer), default=None)


class LifecycleSides(_Sides[LifecycleSide], kw_only=True):
    """Both sides of the lifecycle A/B.

    Attributes
    ----------
    unpatched, patched : LifecycleSide
    """

    unpatched: LifecycleSide = field(LifecycleSide)
    patched: LifecycleSide = field(LifecycleSide)


class LifecycleEvidence(_Document, kw_only=True):
    """The ``lifecycle`` document of ``canary.lifecycle_ab`` (``verifylib-lifecycle-ab/1``).

    Attributes
    ----------
    schema : str
        The schema id (:attr:`SCHEMA`), a constant read and written first.
    runs_per_side : int
        Runs each side was to make.
    timeout_s : float
        Seconds per run.
    trigger : tuple of str
        The trigger arguments (``-nfa -dtw <preset>``).
    model, audio : FileRef or None
        The tree's test model and sample; optional in the format (the rule does not read
        them), written by the stage.
    sides : LifecycleSides
    """

    SCHEMA: ClassVar[str] = LIFECYCLE_SCHEMA
    _ab = True
    schema: str = field(string, default=LIFECYCLE_SCHEMA, init=False)
    runs_per_side: int = field(integer)
    timeout_s: float = field(number)
    trigger: tuple[str, ...] = field(strings)
    model: FileRef | None = field(FileRef, optional=True, default=None)
    audio: FileRef | None = field(FileRef, optional=True, default=None)
    sides: LifecycleSides = field(LifecycleSides)


# ----------------------------------------------------------------------------- sanitizer

class AsanFrame(Schema, kw_only=True):
    """One stack frame of a recorded sanitizer report.

    Attributes
    ----------
    index : int
        The ``#N``.
    function, location : str or None
        As :class:`verifylib.runtime.sanitizer.Frame` records them.
    """

    _closed = "not a field of this record"
    _path = "frame"

    index: int = field(integer)
    function: str | None = field(string_or_null)
    location: str | None = field(string_or_null)


class AsanReport(Schema, kw_only=True):
    """A recorded sanitizer report.

    What :meth:`verifylib.runtime.sanitizer.SanitizerReport.to_evidence` wrote.

    Attributes
    ----------
    tool, kind : str
        The sanitizer and the error in its words.
    summary : str or None
        The ``SUMMARY:`` line, if printed.
    frames : tuple of AsanFrame
        The first stack.
    described : str
        The one-line description.
    """

    _closed = "not a field of this record"
    _path = "report"

    tool: str = field(string)
    kind: str = field(string)
    summary: str | None = field(string_or_null)
    frames: tuple[AsanFrame, ...] = field(array_of(AsanFrame.from_json))
    described: str = field(string)


class AsanBuild(Schema, kw_only=True):
    """The AddressSanitizer build record of a side, as stage 01 left it.

    Every key is written; a value stage 01 did not record is null.

    Attributes
    ----------
    variant, key, tree_id, patch_sha256 : str or None
        The build variant, its build key (the binary's folder), the source tree id and
        the patch applied (None for the unpatched side).
    options : dict or None
        CMake option -> value.
    needed_libs : tuple of str or None
        The binary's shared-library list.
    static : bool or None
        Whether whisper and ggml are linked statically.
    """

    _path = "build"

    variant: str | None = field(string_or_null)
    key: str | None = field(string_or_null)
    options: Mapping[str, str] | None = field(nullable(lambda v, p: map_of(v, p, string)))
    needed_libs: tuple[str, ...] | None = field(nullable(strings))
    static: bool | None = field(boolean_or_null)
    tree_id: str | None = field(string_or_null)
    patch_sha256: str | None = field(string_or_null)

    FIELDS: ClassVar[tuple[str, ...]] = ("variant", "key", "options", "needed_libs", "static",
                                         "tree_id", "patch_sha256")
    """The keys, in the order the stage writes them."""


class SanitizerRun(LifecycleRun, kw_only=True):
    """One lifecycle-trigger run of an ASan build, with the report its stderr held.

    Attributes
    ----------
    report : AsanReport or None
        The recorded sanitizer report; None when the stderr held none.
    """

    report: AsanReport | None = field(nullable(AsanReport.from_json))


class SanitizerSide(_Side, kw_only=True):
    """One AddressSanitizer build's side of ``canary.sanitizer``.

    Attributes
    ----------
    available : bool
        Whether the build was there and ran.
    reason : str or None
        Why it is not available (unavailable sides; may be absent).
    binary, binary_sha256 : str or None
        The ASan whisper-cli that ran and its digest (available sides).
    build : AsanBuild or None
        Its build record (available sides).
    runs : tuple of SanitizerRun
        The runs, in order (empty for an unavailable side).
    """

    binary: str | None = field(string, default=None)
    binary_sha256: str | None = field(string, default=None)
    build: AsanBuild | None = field(AsanBuild, default=None)
    runs: tuple[SanitizerRun, ...] = field(array_of(SanitizerRun.from_json), default=())


class SanitizerSides(_Sides[SanitizerSide], kw_only=True):
    """Both sides of ``canary.sanitizer``.

    Attributes
    ----------
    unpatched, patched : SanitizerSide
    """

    unpatched: SanitizerSide = field(SanitizerSide)
    patched: SanitizerSide = field(SanitizerSide)


class SanitizerEvidence(_Document, kw_only=True):
    """The ``sanitizer`` document of ``canary.sanitizer`` (``verifylib-sanitizer/1``).

    Attributes
    ----------
    schema : str
        The schema id (:attr:`SCHEMA`), a constant read and written first.
    runs_per_side : int
    timeout_s : float
        Seconds per run.
    trigger : tuple of str
        The trigger arguments.
    asan_options : str
        The ``ASAN_OPTIONS`` every run got.
    external_symbolizer : str or None
        The ``llvm-symbolizer`` on ``PATH``, if any.
    pin : str
        The runtime pin the builds must match.
    model, audio : FileRef
        The tree's test model and sample.
    sides : SanitizerSides
    """

    SCHEMA: ClassVar[str] = SANITIZER_SCHEMA
    _ab = True
    schema: str = field(string, default=SANITIZER_SCHEMA, init=False)
    runs_per_side: int = field(integer)
    timeout_s: float = field(number)
    trigger: tuple[str, ...] = field(strings)
    asan_options: str = field(string)
    external_symbolizer: str | None = field(string_or_null)
    pin: str = field(string)
    model: FileRef = field(FileRef)
    audio: FileRef = field(FileRef)
    sides: SanitizerSides = field(SanitizerSides)


# ----------------------------------------------------------------------------- Core ML negative

class NegativeEvidence(_Document, kw_only=True):
    """The ``negative`` document of ``canary.coreml_negative`` (``verifylib-coreml-negative/1``).

    Attributes
    ----------
    schema : str
        The schema id (:attr:`SCHEMA`), a constant read and written first.
    binary, binary_sha256 : str
        The Core ML whisper-cli and its digest.
    model_sha256 : str
        Digest of the ``ggml-*.bin`` copied into the scratch folder.
    model_arg : str
        The ``-m`` of the run (the copy in the scratch folder).
    scratch_listing : tuple of str
        What the scratch folder held when the run started.
    derived_mlmodelc : str
        ``coreml_encoder_path(model_arg)``, the encoder that must be missing.
    attempts : int
        Runs made (the control allows exactly one).
    timeout_s : float
        Seconds for the run.
    run : RunRecord
        The one run.
    outcome : str
        The outcome the stage classified (the rule re-classifies it).
    """

    SCHEMA: ClassVar[str] = NEGATIVE_SCHEMA
    schema: str = field(string, default=NEGATIVE_SCHEMA, init=False)
    binary: str = field(string)
    binary_sha256: str = field(string)
    model_sha256: str = field(string)
    model_arg: str = field(string)
    scratch_listing: tuple[str, ...] = field(strings)
    derived_mlmodelc: str = field(string)
    attempts: int = field(integer)
    timeout_s: float = field(number)
    run: RunRecord = field(RunRecord)
    outcome: str = field(string)


# ----------------------------------------------------------------------------- Core ML positive

class CoremlDigests(Schema, kw_only=True):
    """Where the positive gate's ``.mlmodelc`` is and its tree digest around the runs.

    Attributes
    ----------
    path : str
        ``coreml_encoder_path(model_arg)``.
    tree_digest_before, tree_digest_after : str or None
        Its tree digest before the warm-up and after the measured run; None when there
        was no ``.mlmodelc`` folder.
    """

    _path = "mlmodelc"

    path: str = field(string)
    tree_digest_before: str | None = field(string_or_null)
    tree_digest_after: str | None = field(string_or_null)


class PositiveTimeouts(Schema, kw_only=True):
    """The positive gate's timeouts.

    Attributes
    ----------
    warmup, measured : float
        Seconds for the warm-up (the generous first-run timeout) and the measured run.
    """

    _path = "timeouts_s"

    warmup: float = field(number)
    measured: float = field(number)


class PositiveRun(RunRecord, kw_only=True):
    """A run of the positive gate, with whisper.cpp's own ``encode time``.

    Attributes
    ----------
    encode_time_ms : float or None
        The ``encode time`` whisper.cpp printed; None when it printed none.
    encode_runs : int or None
        Its run count; None with it.
    """

    encode_time_ms: float | None = field(number_or_null)
    encode_runs: int | None = field(integer_or_null)


class PositiveEvidence(_Document, kw_only=True):
    """The ``positive`` document of ``canary.coreml_positive`` (``verifylib-coreml-positive/1``).

    Attributes
    ----------
    schema : str
        The schema id (:attr:`SCHEMA`), a constant read and written first.
    binary, binary_sha256 : str
        The Core ML whisper-cli and its digest.
    model_arg : str
        The ``-m`` of both runs.
    mlmodelc : CoremlDigests
        The compiled encoder at the derived path, before and after.
    timeouts_s : PositiveTimeouts
    warmup, measured : PositiveRun
        The two runs.
    outcome : str
        The measured run's outcome as the stage classified it.
    transcript_chars : int
        Length of the measured run's stripped transcript.
    """

    SCHEMA: ClassVar[str] = POSITIVE_SCHEMA
    schema: str = field(string, default=POSITIVE_SCHEMA, init=False)
    binary: str = field(string)
    binary_sha256: str = field(string)
    model_arg: str = field(string)
    mlmodelc: CoremlDigests = field(CoremlDigests)
    timeouts_s: PositiveTimeouts = field(PositiveTimeouts)
    warmup: PositiveRun = field(PositiveRun)
    measured: PositiveRun = field(PositiveRun)
    outcome: str = field(string)
    transcript_chars: int = field(integer)
