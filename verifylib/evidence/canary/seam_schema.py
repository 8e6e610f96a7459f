"""Schemas of the seam canaries' documents (docs/runtime-contract.md §11).

:class:`SeamNegativeEvidence` (``verifylib-seam-negative/1``, ``canary.seam_negative``):
the seam builds run on the audited ggml file alone in a scratch folder, the patched and
unpatched sides as in the lifecycle A/B, the unpatched AddressSanitizer build as a
witness. :class:`SeamPositiveEvidence` (``verifylib-seam-positive/1``,
``canary.seam_positive``): one launch of the patched seam build with the encoder's program
at the derived path, and the executor's record of it.

Strict as the other canary documents (:mod:`verifylib.evidence.canary.schema`): shapes and
types only; the rules judge the values.
"""

from __future__ import annotations

from typing import Any, ClassVar, Mapping, Self

from verifylib.evidence.canary.schema import (
    FileRef,
    LifecycleSides,
    PositiveRun,
    SanitizerSide,
    SchemaMismatch,
)
from verifylib.evidence.fields import Schema, field, integer, number, string, strings
from verifylib.evidence.run_record import SeamExecutorRecord

__all__ = ["SEAM_NEGATIVE_SCHEMA", "SEAM_POSITIVE_SCHEMA", "SeamEncoderRef",
           "SeamNegativeEvidence", "SeamPositiveEvidence"]

SEAM_NEGATIVE_SCHEMA = "verifylib-seam-negative/1"
"""Schema id of the ``seam_negative`` document of ``canary.seam_negative``."""

SEAM_POSITIVE_SCHEMA = "verifylib-seam-positive/1"
"""Schema id of the ``seam_positive`` document of ``canary.seam_positive``."""


class _Document(Schema, kw_only=True):
    """A seam canary document: its ``schema`` is checked before any field."""

    SCHEMA: ClassVar[str]

    @classmethod
    def from_json(cls, doc: Any, path: str | None = None) -> Self:
        """Read the document, checking its ``schema`` first.

        Raises
        ------
        SchemaMismatch
            If it is not an object with the schema id :attr:`SCHEMA`.
        verifylib.evidence.fields.SchemaError
            If a field is missing or wrongly typed.
        """
        if not isinstance(doc, Mapping) or doc.get("schema") != cls.SCHEMA:
            got = doc.get("schema") if isinstance(doc, Mapping) else None
            raise SchemaMismatch("schema", f"not a {cls.SCHEMA} document (schema {got!r})")
        return super().from_json(doc)


class SeamNegativeEvidence(_Document, kw_only=True):
    """The ``seam_negative`` document.

    Attributes
    ----------
    schema : str
        The schema id, a constant read and written first.
    runs_per_side : int
        Runs of the patched and of the unpatched seam build.
    asan_runs : int
        Runs of the unpatched AddressSanitizer seam build.
    timeout_s : float
        Seconds per run.
    model : FileRef
        The audited ggml file (copied alone into the scratch folder).
    audio : FileRef
        The clip.
    model_arg : str
        The ``-m`` of every run.
    scratch_listing : tuple of str
        What the scratch folder held.
    derived_mlmodelc : str
        ``coreml_encoder_path(model_arg)``: the folder that must be missing.
    sides : LifecycleSides
        The patched and unpatched seam builds' runs, classified as the negative control.
    asan : SanitizerSide
        The unpatched AddressSanitizer seam build's runs (recorded, not gated).
    """

    SCHEMA: ClassVar[str] = SEAM_NEGATIVE_SCHEMA
    schema: str = field(string, default=SEAM_NEGATIVE_SCHEMA, init=False)
    runs_per_side: int = field(integer)
    asan_runs: int = field(integer)
    timeout_s: float = field(number)
    model: FileRef = field(FileRef)
    audio: FileRef = field(FileRef)
    model_arg: str = field(string)
    scratch_listing: tuple[str, ...] = field(strings)
    derived_mlmodelc: str = field(string)
    sides: LifecycleSides = field(LifecycleSides)
    asan: SanitizerSide = field(SanitizerSide)


class SeamEncoderRef(Schema, kw_only=True):
    """The encoder a seam launch loaded (:class:`verifylib.stages.seam.SeamEncoder`).

    Attributes
    ----------
    variant : str
        ``fp32`` or ``fp16``.
    model_arg : str
        The launches' ``-m``.
    folder : str
        ``coreml_encoder_path(model_arg)``.
    kind : str
        ``mlmodelc`` or ``standin``.
    artifact : str
        The run-relative path of the audited artifact holding the program.
    tree_digest : str
        Its tree digest.
    identity_key : str
        The identity that binds it.
    """

    _path = "encoder"

    variant: str = field(string)
    model_arg: str = field(string)
    folder: str = field(string)
    kind: str = field(string)
    artifact: str = field(string)
    tree_digest: str = field(string)
    identity_key: str = field(string)


class SeamPositiveEvidence(_Document, kw_only=True):
    """The ``seam_positive`` document.

    Attributes
    ----------
    schema : str
        The schema id, a constant read and written first.
    binary, binary_sha256 : str
        The patched seam whisper-cli and its digest.
    encoder : SeamEncoderRef
        What the launch loaded.
    timeout_s : float
        Seconds for the launch.
    run : PositiveRun
        The launch, with whisper.cpp's ``encode time``.
    executor : SeamExecutorRecord or None
        What the executor recorded (None: the launch never reached it).
    executor_start_s, program_load_s : float
        The executor's start and the program's load, measured in the stage.
    outcome : str
        The launch's outcome as the stage classified it (the four Core ML conditions).
    transcript_chars : int
        Length of the stripped transcript.
    """

    SCHEMA: ClassVar[str] = SEAM_POSITIVE_SCHEMA
    schema: str = field(string, default=SEAM_POSITIVE_SCHEMA, init=False)
    binary: str = field(string)
    binary_sha256: str = field(string)
    encoder: SeamEncoderRef = field(SeamEncoderRef)
    timeout_s: float = field(number)
    run: PositiveRun = field(PositiveRun)
    executor: SeamExecutorRecord | None = field(
        lambda v, p: None if v is None else SeamExecutorRecord.from_json(v, p))
    executor_start_s: float = field(number)
    program_load_s: float = field(number)
    outcome: str = field(string)
    transcript_chars: int = field(integer)

    def executor_json(self) -> dict[str, Any] | None:
        """Return the executor record as written (None when there was none).

        Returns
        -------
        dict or None
        """
        return None if self.executor is None else self.executor.to_json()
