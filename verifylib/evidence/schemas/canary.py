"""Schemas of the stage 03 (canary) sidecar documents.

Four documents, one class each: :class:`LifecycleEvidence` (``verifylib-lifecycle-ab/1``,
``canary.lifecycle_ab``), :class:`SanitizerEvidence` (``verifylib-sanitizer/1``,
``canary.sanitizer``), :class:`NegativeEvidence` (``verifylib-coreml-negative/1``,
``canary.coreml_negative``) and :class:`PositiveEvidence` (``verifylib-coreml-positive/1``,
``canary.coreml_positive``), with nested frozen dataclasses for the run records and the
sides of the two A/B documents.

``from_json`` is strict and fails closed: a field that is missing or of the wrong JSON type
raises :class:`~verifylib.evidence.schemas.fields.SchemaError` (an
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
(:mod:`verifylib.evidence.rules.canary`). It imports nothing from verifylib but
:mod:`verifylib.errors` (through :mod:`.fields`), so views and readers may use it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Mapping

from verifylib.evidence.schemas.fields import (
    SchemaError,
    array_of,
    boolean,
    boolean_or_null,
    exactly,
    integer,
    integer_or_null,
    join,
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
from verifylib.evidence.schemas.fields import obj as as_object

__all__ = [
    "LIFECYCLE_SCHEMA", "SANITIZER_SCHEMA", "NEGATIVE_SCHEMA", "POSITIVE_SCHEMA", "SIDES",
    "SchemaMismatch", "SidesIncomplete",
    "FileRef", "Launch", "RunRecord", "LifecycleRun", "LifecycleSide", "LifecycleSides",
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


# ----------------------------------------------------------------------------- shared parts

@dataclass(frozen=True, kw_only=True)
class FileRef:
    """A file an A/B document names, with its digest (the test model, the sample).

    Attributes
    ----------
    path : str
        Where it was.
    sha256 : str
        Its SHA-256 when the runs were made.
    """

    path: str
    sha256: str

    @classmethod
    def from_json(cls, doc: Any, path: str = "") -> "FileRef":
        """Read a ``{"path", "sha256"}`` object.

        Parameters
        ----------
        doc : Any
            The decoded JSON value.
        path : str
            Its field path, for error messages.

        Returns
        -------
        FileRef

        Raises
        ------
        SchemaError
            If a field is missing or not a string.
        """
        obj = as_object(doc, path)
        return cls(path=req(obj, "path", path, string),
                   sha256=req(obj, "sha256", path, string))

    def to_json(self) -> dict[str, Any]:
        """Write the object back.

        Returns
        -------
        dict
            ``{"path", "sha256"}``.
        """
        return {"path": self.path, "sha256": self.sha256}


@dataclass(frozen=True, kw_only=True)
class Launch:
    """The launch-ledger citation of a run (:func:`verifylib.runtime.ledger.citation`).

    Attributes
    ----------
    seq : int
        The ledger entry's number.
    binary_sha256 : str
        The launched binary's digest, as the ledger recorded it.
    """

    seq: int
    binary_sha256: str

    @classmethod
    def from_json(cls, doc: Any, path: str = "launch") -> "Launch":
        """Read a ``{"seq", "binary_sha256"}`` citation.

        Parameters
        ----------
        doc : Any
            The decoded JSON value.
        path : str
            Its field path, for error messages.

        Returns
        -------
        Launch

        Raises
        ------
        SchemaError
            If a field is missing or wrongly typed.
        """
        obj = as_object(doc, path)
        return cls(seq=req(obj, "seq", path, integer),
                   binary_sha256=req(obj, "binary_sha256", path, string))

    def to_json(self) -> dict[str, Any]:
        """Write the citation back.

        Returns
        -------
        dict
            ``{"seq", "binary_sha256"}``.
        """
        return {"seq": self.seq, "binary_sha256": self.binary_sha256}


@dataclass(frozen=True, kw_only=True)
class RunRecord:
    """One whisper-cli run as :func:`verifylib.runtime.runner.run_record` records it.

    Attributes
    ----------
    argv : tuple of str
        The exact argument vector (binary first).
    returncode : int or None
        Raw return code; None on timeout.
    signal : str or None
        Signal name when the child died by a signal.
    timed_out : bool
        Whether the child was killed for exceeding its timeout.
    wall_s : float
        Wall time in seconds.
    stdout_sha256, stderr_sha256 : str
        Digests of the stored streams.
    stdout_bytes, stderr_bytes : int
        Lengths of the streams.
    launch : Launch or None
        The ledger citation; None (and absent from the JSON) when the run was not recorded
        in a launch ledger.
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
    launch: Launch | None = None

    @staticmethod
    def _record_fields(obj: Mapping[str, Any], path: str) -> dict[str, Any]:
        def f(key: str, read: Callable[[Any, str], Any]) -> Any:
            return req(obj, key, path, read)
        return {"argv": f("argv", strings), "returncode": f("returncode", integer_or_null),
                "signal": f("signal", string_or_null), "timed_out": f("timed_out", boolean),
                "wall_s": f("wall_s", number), "stdout_sha256": f("stdout_sha256", string),
                "stderr_sha256": f("stderr_sha256", string),
                "stdout_bytes": f("stdout_bytes", integer),
                "stderr_bytes": f("stderr_bytes", integer),
                "launch": opt(obj, "launch", path, Launch.from_json)}

    @classmethod
    def from_json(cls, doc: Any, path: str = "run") -> "RunRecord":
        """Read a run record.

        Parameters
        ----------
        doc : Any
            The decoded JSON value.
        path : str
            Its field path, for error messages (``run``, ``sides.patched.runs[0]``).

        Returns
        -------
        RunRecord

        Raises
        ------
        SchemaError
            If a field is missing or wrongly typed.
        """
        return cls(**cls._record_fields(as_object(doc, path), path))

    def to_json(self) -> dict[str, Any]:
        """Write the record back, as :func:`~verifylib.runtime.runner.run_record` did.

        Returns
        -------
        dict
            The record; ``launch`` only when there is one. This is also the record the
            classifiers of :mod:`verifylib.runtime.contracts` take.
        """
        return {"argv": list(self.argv), "returncode": self.returncode, "signal": self.signal,
                "timed_out": self.timed_out, "wall_s": self.wall_s,
                "stdout_sha256": self.stdout_sha256, "stderr_sha256": self.stderr_sha256,
                "stdout_bytes": self.stdout_bytes, "stderr_bytes": self.stderr_bytes,
                **({"launch": self.launch.to_json()} if self.launch is not None else {})}


# ----------------------------------------------------------------------------- lifecycle A/B

@dataclass(frozen=True, kw_only=True)
class LifecycleRun(RunRecord):
    """One lifecycle-trigger run of an A/B side: the run record, its place and outcome.

    Attributes
    ----------
    index : int
        The run's number on its side.
    outcome : str
        The outcome the stage classified (the rule re-classifies it).
    """

    index: int
    outcome: str

    @classmethod
    def from_json(cls, doc: Any, path: str = "run") -> "LifecycleRun":
        """Read a run of a lifecycle side.

        Parameters
        ----------
        doc : Any
            The decoded JSON value.
        path : str
            Its field path, for error messages.

        Returns
        -------
        LifecycleRun

        Raises
        ------
        SchemaError
            If a field is missing or wrongly typed.
        """
        obj = as_object(doc, path)
        return cls(**cls._record_fields(obj, path),
                   index=req(obj, "index", path, integer),
                   outcome=req(obj, "outcome", path, string))

    def to_json(self) -> dict[str, Any]:
        """Write the run back.

        Returns
        -------
        dict
            The run record with ``index`` and ``outcome``.
        """
        return {**super().to_json(), "index": self.index, "outcome": self.outcome}


@dataclass(frozen=True, kw_only=True)
class LifecycleSide:
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

    available: bool
    reason: str | None = None
    binary: str | None = None
    binary_sha256: str | None = None
    runs: tuple[LifecycleRun, ...] = ()
    counts: Mapping[str, int] | None = None

    @classmethod
    def from_json(cls, doc: Any, path: str = "side") -> "LifecycleSide":
        """Read a side record.

        Parameters
        ----------
        doc : Any
            The decoded JSON value.
        path : str
            Its field path (``sides.patched``), for error messages.

        Returns
        -------
        LifecycleSide

        Raises
        ------
        SchemaError
            If ``available`` is missing or not a boolean, or a field of an available side
            is missing or wrongly typed.
        """
        obj = as_object(doc, path)
        available = req(obj, "available", path, boolean)
        if not available:
            return cls(available=False,
                       reason=opt(obj, "reason", path, string_or_null))
        return cls(available=True,
                   binary=req(obj, "binary", path, string),
                   binary_sha256=req(obj, "binary_sha256", path, string),
                   runs=req(obj, "runs", path, array_of(LifecycleRun.from_json)),
                   counts=req(obj, "counts", path, lambda v, p: map_of(v, p, integer)))

    def to_json(self) -> dict[str, Any]:
        """Write the side back.

        Returns
        -------
        dict
            ``{"available": false, "reason"}`` or ``{"available": true, "binary",
            "binary_sha256", "runs", "counts"}``.
        """
        if not self.available:
            return {"available": False,
                    **({"reason": self.reason} if self.reason is not None else {})}
        return {"available": True, "binary": self.binary, "binary_sha256": self.binary_sha256,
                "runs": [r.to_json() for r in self.runs],
                "counts": dict(self.counts or {})}


@dataclass(frozen=True, kw_only=True)
class LifecycleSides:
    """Both sides of the lifecycle A/B.

    Attributes
    ----------
    unpatched, patched : LifecycleSide
    """

    unpatched: LifecycleSide
    patched: LifecycleSide

    def __getitem__(self, side: str) -> LifecycleSide:
        """Return the side named ``side`` (``"unpatched"`` or ``"patched"``)."""
        if side not in SIDES:
            raise KeyError(side)
        return getattr(self, side)

    @classmethod
    def from_json(cls, doc: Any, path: str = "sides") -> "LifecycleSides":
        """Read the ``sides`` object.

        Parameters
        ----------
        doc : Any
            The decoded JSON value.
        path : str
            Its field path, for error messages.

        Returns
        -------
        LifecycleSides

        Raises
        ------
        SidesIncomplete
            If it is not an object with exactly the keys ``unpatched`` and ``patched``.
        SchemaError
            If a side does not parse.
        """
        sides = _sides({"sides": doc})
        return cls(**{s: LifecycleSide.from_json(sides[s], join(path, s)) for s in SIDES})

    def to_json(self) -> dict[str, Any]:
        """Write the sides back.

        Returns
        -------
        dict
            ``{"unpatched": …, "patched": …}``.
        """
        return {s: self[s].to_json() for s in SIDES}


@dataclass(frozen=True, kw_only=True)
class LifecycleEvidence:
    """The ``lifecycle`` document of ``canary.lifecycle_ab`` (``verifylib-lifecycle-ab/1``).

    Attributes
    ----------
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
    runs_per_side: int
    timeout_s: float
    trigger: tuple[str, ...]
    model: FileRef | None = None
    audio: FileRef | None = None
    sides: LifecycleSides

    @classmethod
    def from_json(cls, doc: Any) -> "LifecycleEvidence":
        """Read a ``lifecycle`` document.

        Parameters
        ----------
        doc : Any
            The decoded JSON document.

        Returns
        -------
        LifecycleEvidence

        Raises
        ------
        SchemaMismatch
            If it is not an object with ``schema`` ``verifylib-lifecycle-ab/1``.
        SidesIncomplete
            If ``sides`` does not hold exactly both sides.
        SchemaError
            If any other field is missing or wrongly typed (the error's ``path`` names it).
        """
        obj = _schema(doc, LIFECYCLE_SCHEMA)
        sides = _sides(obj)
        return cls(
            runs_per_side=req(obj, "runs_per_side", "", integer),
            timeout_s=req(obj, "timeout_s", "", number),
            trigger=req(obj, "trigger", "", strings),
            model=opt(obj, "model", "", FileRef.from_json),
            audio=opt(obj, "audio", "", FileRef.from_json),
            sides=LifecycleSides.from_json(sides))

    def to_json(self) -> dict[str, Any]:
        """Write the document, exactly as the stage writes it.

        Returns
        -------
        dict
            The JSON-able document (``model``/``audio`` only when set).
        """
        return {"schema": self.SCHEMA, "runs_per_side": self.runs_per_side,
                "timeout_s": self.timeout_s, "trigger": list(self.trigger),
                **({"model": self.model.to_json()} if self.model is not None else {}),
                **({"audio": self.audio.to_json()} if self.audio is not None else {}),
                "sides": self.sides.to_json()}


# ----------------------------------------------------------------------------- sanitizer

@dataclass(frozen=True, kw_only=True)
class AsanFrame:
    """One stack frame of a recorded sanitizer report.

    Attributes
    ----------
    index : int
        The ``#N``.
    function, location : str or None
        As :class:`verifylib.runtime.sanitizer.Frame` records them.
    """

    index: int
    function: str | None
    location: str | None

    @classmethod
    def from_json(cls, doc: Any, path: str = "frame") -> "AsanFrame":
        """Read a frame.

        Parameters
        ----------
        doc : Any
            The decoded JSON value.
        path : str
            Its field path, for error messages.

        Returns
        -------
        AsanFrame

        Raises
        ------
        SchemaError
            If a field is missing, wrongly typed, or not one of the record's.
        """
        obj = exactly(as_object(doc, path), ("index", "function", "location"), path)
        return cls(index=req(obj, "index", path, integer),
                   function=req(obj, "function", path, string_or_null),
                   location=req(obj, "location", path, string_or_null))

    def to_json(self) -> dict[str, Any]:
        """Write the frame back.

        Returns
        -------
        dict
            ``{"index", "function", "location"}``.
        """
        return {"index": self.index, "function": self.function, "location": self.location}


@dataclass(frozen=True, kw_only=True)
class AsanReport:
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

    tool: str
    kind: str
    summary: str | None
    frames: tuple[AsanFrame, ...]
    described: str

    @classmethod
    def from_json(cls, doc: Any, path: str = "report") -> "AsanReport":
        """Read a report.

        Parameters
        ----------
        doc : Any
            The decoded JSON value.
        path : str
            Its field path, for error messages.

        Returns
        -------
        AsanReport

        Raises
        ------
        SchemaError
            If a field is missing, wrongly typed, or not one of the record's.
        """
        obj = exactly(as_object(doc, path), ("tool", "kind", "summary", "frames", "described"),
                       path)
        return cls(tool=req(obj, "tool", path, string),
                   kind=req(obj, "kind", path, string),
                   summary=req(obj, "summary", path, string_or_null),
                   frames=req(obj, "frames", path, array_of(AsanFrame.from_json)),
                   described=req(obj, "described", path, string))

    def to_json(self) -> dict[str, Any]:
        """Write the report back.

        Returns
        -------
        dict
            What :meth:`~verifylib.runtime.sanitizer.SanitizerReport.to_evidence` wrote.
        """
        return {"tool": self.tool, "kind": self.kind, "summary": self.summary,
                "frames": [f.to_json() for f in self.frames], "described": self.described}


@dataclass(frozen=True, kw_only=True)
class AsanBuild:
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

    variant: str | None
    key: str | None
    options: Mapping[str, str] | None
    needed_libs: tuple[str, ...] | None
    static: bool | None
    tree_id: str | None
    patch_sha256: str | None

    FIELDS: ClassVar[tuple[str, ...]] = ("variant", "key", "options", "needed_libs", "static",
                                         "tree_id", "patch_sha256")
    """The keys, in the order the stage writes them."""

    @classmethod
    def from_json(cls, doc: Any, path: str = "build") -> "AsanBuild":
        """Read a build record.

        Parameters
        ----------
        doc : Any
            The decoded JSON value.
        path : str
            Its field path, for error messages.

        Returns
        -------
        AsanBuild

        Raises
        ------
        SchemaError
            If a key is missing or its value (when not null) wrongly typed.
        """
        obj = as_object(doc, path)

        def f(key: str, read: Callable[[Any, str], Any]) -> Any:
            return req(obj, key, path, read)
        return cls(variant=f("variant", string_or_null), key=f("key", string_or_null),
                   options=f("options", nullable(lambda v, p: map_of(v, p, string))),
                   needed_libs=f("needed_libs", nullable(strings)),
                   static=f("static", boolean_or_null), tree_id=f("tree_id", string_or_null),
                   patch_sha256=f("patch_sha256", string_or_null))

    def to_json(self) -> dict[str, Any]:
        """Write the build record back.

        Returns
        -------
        dict
            Every key of :attr:`FIELDS`.
        """
        return {"variant": self.variant, "key": self.key,
                "options": None if self.options is None else dict(self.options),
                "needed_libs": None if self.needed_libs is None else list(self.needed_libs),
                "static": self.static, "tree_id": self.tree_id,
                "patch_sha256": self.patch_sha256}


@dataclass(frozen=True, kw_only=True)
class SanitizerRun(LifecycleRun):
    """One lifecycle-trigger run of an ASan build, with the report its stderr held.

    Attributes
    ----------
    report : AsanReport or None
        The recorded sanitizer report; None when the stderr held none.
    """

    report: AsanReport | None

    @classmethod
    def from_json(cls, doc: Any, path: str = "run") -> "SanitizerRun":
        """Read a run of a sanitizer side.

        Parameters
        ----------
        doc : Any
            The decoded JSON value.
        path : str
            Its field path, for error messages.

        Returns
        -------
        SanitizerRun

        Raises
        ------
        SchemaError
            If a field is missing or wrongly typed (``report`` must be present; null
            when there was none).
        """
        obj = as_object(doc, path)
        return cls(**cls._record_fields(obj, path),
                   index=req(obj, "index", path, integer),
                   outcome=req(obj, "outcome", path, string),
                   report=req(obj, "report", path, nullable(AsanReport.from_json)))

    def to_json(self) -> dict[str, Any]:
        """Write the run back.

        Returns
        -------
        dict
            The run record with ``index``, ``outcome`` and ``report``.
        """
        return {**super().to_json(),
                "report": None if self.report is None else self.report.to_json()}


@dataclass(frozen=True, kw_only=True)
class SanitizerSide:
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

    available: bool
    reason: str | None = None
    binary: str | None = None
    binary_sha256: str | None = None
    build: AsanBuild | None = None
    runs: tuple[SanitizerRun, ...] = ()

    @classmethod
    def from_json(cls, doc: Any, path: str = "side") -> "SanitizerSide":
        """Read a side record.

        Parameters
        ----------
        doc : Any
            The decoded JSON value.
        path : str
            Its field path (``sides.patched``), for error messages.

        Returns
        -------
        SanitizerSide

        Raises
        ------
        SchemaError
            If ``available`` is missing or not a boolean, or a field of an available side
            is missing or wrongly typed.
        """
        obj = as_object(doc, path)
        available = req(obj, "available", path, boolean)
        if not available:
            return cls(available=False,
                       reason=opt(obj, "reason", path, string_or_null))
        return cls(available=True,
                   binary=req(obj, "binary", path, string),
                   binary_sha256=req(obj, "binary_sha256", path, string),
                   build=req(obj, "build", path, AsanBuild.from_json),
                   runs=req(obj, "runs", path, array_of(SanitizerRun.from_json)))

    def to_json(self) -> dict[str, Any]:
        """Write the side back.

        Returns
        -------
        dict
            ``{"available": false, "reason"}`` or ``{"available": true, "binary",
            "binary_sha256", "build", "runs"}``.
        """
        if not self.available:
            return {"available": False,
                    **({"reason": self.reason} if self.reason is not None else {})}
        return {"available": True, "binary": self.binary, "binary_sha256": self.binary_sha256,
                "build": None if self.build is None else self.build.to_json(),
                "runs": [r.to_json() for r in self.runs]}


@dataclass(frozen=True, kw_only=True)
class SanitizerSides:
    """Both sides of ``canary.sanitizer``.

    Attributes
    ----------
    unpatched, patched : SanitizerSide
    """

    unpatched: SanitizerSide
    patched: SanitizerSide

    def __getitem__(self, side: str) -> SanitizerSide:
        """Return the side named ``side`` (``"unpatched"`` or ``"patched"``)."""
        if side not in SIDES:
            raise KeyError(side)
        return getattr(self, side)

    @classmethod
    def from_json(cls, doc: Any, path: str = "sides") -> "SanitizerSides":
        """Read the ``sides`` object.

        Parameters
        ----------
        doc : Any
            The decoded JSON value.
        path : str
            Its field path, for error messages.

        Returns
        -------
        SanitizerSides

        Raises
        ------
        SidesIncomplete
            If it is not an object with exactly the keys ``unpatched`` and ``patched``.
        SchemaError
            If a side does not parse.
        """
        sides = _sides({"sides": doc})
        return cls(**{s: SanitizerSide.from_json(sides[s], join(path, s)) for s in SIDES})

    def to_json(self) -> dict[str, Any]:
        """Write the sides back.

        Returns
        -------
        dict
            ``{"unpatched": …, "patched": …}``.
        """
        return {s: self[s].to_json() for s in SIDES}


@dataclass(frozen=True, kw_only=True)
class SanitizerEvidence:
    """The ``sanitizer`` document of ``canary.sanitizer`` (``verifylib-sanitizer/1``).

    Attributes
    ----------
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
    runs_per_side: int
    timeout_s: float
    trigger: tuple[str, ...]
    asan_options: str
    external_symbolizer: str | None
    pin: str
    model: FileRef
    audio: FileRef
    sides: SanitizerSides

    @classmethod
    def from_json(cls, doc: Any) -> "SanitizerEvidence":
        """Read a ``sanitizer`` document.

        Parameters
        ----------
        doc : Any
            The decoded JSON document.

        Returns
        -------
        SanitizerEvidence

        Raises
        ------
        SchemaMismatch
            If it is not an object with ``schema`` ``verifylib-sanitizer/1``.
        SidesIncomplete
            If ``sides`` does not hold exactly both sides.
        SchemaError
            If any other field is missing or wrongly typed (the error's ``path`` names it).
        """
        obj = _schema(doc, SANITIZER_SCHEMA)
        sides = _sides(obj)

        def f(key: str, read: Callable[[Any, str], Any]) -> Any:
            return req(obj, key, "", read)
        return cls(runs_per_side=f("runs_per_side", integer), timeout_s=f("timeout_s", number),
                   trigger=f("trigger", strings), asan_options=f("asan_options", string),
                   external_symbolizer=f("external_symbolizer", string_or_null),
                   pin=f("pin", string), model=f("model", FileRef.from_json),
                   audio=f("audio", FileRef.from_json),
                   sides=SanitizerSides.from_json(sides))

    def to_json(self) -> dict[str, Any]:
        """Write the document, exactly as the stage writes it.

        Returns
        -------
        dict
            The JSON-able document.
        """
        return {"schema": self.SCHEMA, "runs_per_side": self.runs_per_side,
                "timeout_s": self.timeout_s, "trigger": list(self.trigger),
                "asan_options": self.asan_options,
                "external_symbolizer": self.external_symbolizer, "pin": self.pin,
                "model": self.model.to_json(), "audio": self.audio.to_json(),
                "sides": self.sides.to_json()}


# ----------------------------------------------------------------------------- Core ML negative

@dataclass(frozen=True, kw_only=True)
class NegativeEvidence:
    """The ``negative`` document of ``canary.coreml_negative`` (``verifylib-coreml-negative/1``).

    Attributes
    ----------
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
    binary: str
    binary_sha256: str
    model_sha256: str
    model_arg: str
    scratch_listing: tuple[str, ...]
    derived_mlmodelc: str
    attempts: int
    timeout_s: float
    run: RunRecord
    outcome: str

    @classmethod
    def from_json(cls, doc: Any) -> "NegativeEvidence":
        """Read a ``negative`` document.

        Parameters
        ----------
        doc : Any
            The decoded JSON document.

        Returns
        -------
        NegativeEvidence

        Raises
        ------
        SchemaMismatch
            If it is not an object with ``schema`` ``verifylib-coreml-negative/1``.
        SchemaError
            If any other field is missing or wrongly typed (the error's ``path`` names it).
        """
        obj = _schema(doc, NEGATIVE_SCHEMA)

        def f(key: str, read: Callable[[Any, str], Any]) -> Any:
            return req(obj, key, "", read)
        return cls(binary=f("binary", string), binary_sha256=f("binary_sha256", string),
                   model_sha256=f("model_sha256", string), model_arg=f("model_arg", string),
                   scratch_listing=f("scratch_listing", strings),
                   derived_mlmodelc=f("derived_mlmodelc", string),
                   attempts=f("attempts", integer), timeout_s=f("timeout_s", number),
                   run=f("run", RunRecord.from_json), outcome=f("outcome", string))

    def to_json(self) -> dict[str, Any]:
        """Write the document, exactly as the stage writes it.

        Returns
        -------
        dict
            The JSON-able document.
        """
        return {"schema": self.SCHEMA, "binary": self.binary,
                "binary_sha256": self.binary_sha256, "model_sha256": self.model_sha256,
                "model_arg": self.model_arg, "scratch_listing": list(self.scratch_listing),
                "derived_mlmodelc": self.derived_mlmodelc, "attempts": self.attempts,
                "timeout_s": self.timeout_s, "run": self.run.to_json(),
                "outcome": self.outcome}


# ----------------------------------------------------------------------------- Core ML positive

@dataclass(frozen=True, kw_only=True)
class CoremlDigests:
    """Where the positive gate's ``.mlmodelc`` is and its tree digest around the runs.

    Attributes
    ----------
    path : str
        ``coreml_encoder_path(model_arg)``.
    tree_digest_before, tree_digest_after : str or None
        Its tree digest before the warm-up and after the measured run; None when there
        was no ``.mlmodelc`` folder.
    """

    path: str
    tree_digest_before: str | None
    tree_digest_after: str | None

    @classmethod
    def from_json(cls, doc: Any, path: str = "mlmodelc") -> "CoremlDigests":
        """Read the ``mlmodelc`` object.

        Parameters
        ----------
        doc : Any
            The decoded JSON value.
        path : str
            Its field path, for error messages.

        Returns
        -------
        CoremlDigests

        Raises
        ------
        SchemaError
            If a field is missing or wrongly typed.
        """
        obj = as_object(doc, path)

        def f(key: str, read: Callable[[Any, str], Any]) -> Any:
            return req(obj, key, path, read)
        return cls(path=f("path", string),
                   tree_digest_before=f("tree_digest_before", string_or_null),
                   tree_digest_after=f("tree_digest_after", string_or_null))

    def to_json(self) -> dict[str, Any]:
        """Write the object back.

        Returns
        -------
        dict
            ``{"path", "tree_digest_before", "tree_digest_after"}``.
        """
        return {"path": self.path, "tree_digest_before": self.tree_digest_before,
                "tree_digest_after": self.tree_digest_after}


@dataclass(frozen=True, kw_only=True)
class PositiveTimeouts:
    """The positive gate's timeouts.

    Attributes
    ----------
    warmup, measured : float
        Seconds for the warm-up (the generous first-run timeout) and the measured run.
    """

    warmup: float
    measured: float

    @classmethod
    def from_json(cls, doc: Any, path: str = "timeouts_s") -> "PositiveTimeouts":
        """Read the ``timeouts_s`` object.

        Parameters
        ----------
        doc : Any
            The decoded JSON value.
        path : str
            Its field path, for error messages.

        Returns
        -------
        PositiveTimeouts

        Raises
        ------
        SchemaError
            If a field is missing or not a number.
        """
        obj = as_object(doc, path)
        return cls(warmup=req(obj, "warmup", path, number),
                   measured=req(obj, "measured", path, number))

    def to_json(self) -> dict[str, Any]:
        """Write the object back.

        Returns
        -------
        dict
            ``{"warmup", "measured"}``.
        """
        return {"warmup": self.warmup, "measured": self.measured}


@dataclass(frozen=True, kw_only=True)
class PositiveRun(RunRecord):
    """A run of the positive gate, with whisper.cpp's own ``encode time``.

    Attributes
    ----------
    encode_time_ms : float or None
        The ``encode time`` whisper.cpp printed; None when it printed none.
    encode_runs : int or None
        Its run count; None with it.
    """

    encode_time_ms: float | None
    encode_runs: int | None

    @classmethod
    def from_json(cls, doc: Any, path: str = "run") -> "PositiveRun":
        """Read the warm-up's or the measured run's record.

        Parameters
        ----------
        doc : Any
            The decoded JSON value.
        path : str
            Its field path (``warmup``, ``measured``), for error messages.

        Returns
        -------
        PositiveRun

        Raises
        ------
        SchemaError
            If a field is missing or wrongly typed (both encode fields must be present,
            null when whisper.cpp printed no encode time).
        """
        obj = as_object(doc, path)
        return cls(**cls._record_fields(obj, path),
                   encode_time_ms=req(obj, "encode_time_ms", path, number_or_null),
                   encode_runs=req(obj, "encode_runs", path, integer_or_null))

    def to_json(self) -> dict[str, Any]:
        """Write the run back.

        Returns
        -------
        dict
            The run record with ``encode_time_ms`` and ``encode_runs``.
        """
        return {**super().to_json(), "encode_time_ms": self.encode_time_ms,
                "encode_runs": self.encode_runs}


@dataclass(frozen=True, kw_only=True)
class PositiveEvidence:
    """The ``positive`` document of ``canary.coreml_positive`` (``verifylib-coreml-positive/1``).

    Attributes
    ----------
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
    binary: str
    binary_sha256: str
    model_arg: str
    mlmodelc: CoremlDigests
    timeouts_s: PositiveTimeouts
    warmup: PositiveRun
    measured: PositiveRun
    outcome: str
    transcript_chars: int

    @classmethod
    def from_json(cls, doc: Any) -> "PositiveEvidence":
        """Read a ``positive`` document.

        Parameters
        ----------
        doc : Any
            The decoded JSON document.

        Returns
        -------
        PositiveEvidence

        Raises
        ------
        SchemaMismatch
            If it is not an object with ``schema`` ``verifylib-coreml-positive/1``.
        SchemaError
            If any other field is missing or wrongly typed (the error's ``path`` names it).
        """
        obj = _schema(doc, POSITIVE_SCHEMA)

        def f(key: str, read: Callable[[Any, str], Any]) -> Any:
            return req(obj, key, "", read)
        return cls(binary=f("binary", string), binary_sha256=f("binary_sha256", string),
                   model_arg=f("model_arg", string),
                   mlmodelc=f("mlmodelc", CoremlDigests.from_json),
                   timeouts_s=f("timeouts_s", PositiveTimeouts.from_json),
                   warmup=f("warmup", PositiveRun.from_json),
                   measured=f("measured", PositiveRun.from_json),
                   outcome=f("outcome", string), transcript_chars=f("transcript_chars", integer))

    def to_json(self) -> dict[str, Any]:
        """Write the document, exactly as the stage writes it.

        Returns
        -------
        dict
            The JSON-able document.
        """
        return {"schema": self.SCHEMA, "binary": self.binary,
                "binary_sha256": self.binary_sha256, "model_arg": self.model_arg,
                "mlmodelc": self.mlmodelc.to_json(), "timeouts_s": self.timeouts_s.to_json(),
                "warmup": self.warmup.to_json(), "measured": self.measured.to_json(),
                "outcome": self.outcome, "transcript_chars": self.transcript_chars}
