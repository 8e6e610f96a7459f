"""Schema of the ``seam_wer`` document of ``wer.seam`` (docs/runtime-contract.md §11).

Every fixture transcribed by the patched seam build, once per encoder variant (``fp32``,
and ``fp16`` when exported), under the WER policy's decoding pin, language and unit: what
the encoder program costs in words through whisper.cpp's own decoder. Per clip: the seam
run and its executor record, edit counts against the reference and against the GGML
transcript of the same clip, and whether the two differ (the seam and the GGML launch share
the decoder, the mel and the decoding pin, so a difference is the encoder's numbers).

Strict as the other WER documents (:mod:`verifylib.evidence.wer.schema`); a public clip
carries its normalized texts, from which the rule recomputes the counts.
"""

from __future__ import annotations

from verifylib.evidence.canary.seam_schema import SeamEncoderRef
from verifylib.evidence.fields import (
    Schema,
    array_of,
    boolean,
    field,
    nullable,
    string,
    strings,
)
from verifylib.evidence.run_record import RunRecord, SeamExecutorRecord
from verifylib.evidence.wer.schema import Counts, WerPolicy

__all__ = ["SEAM_CAUSES", "SeamWerClip", "SeamWerVariant", "SeamWerEvidence"]

SEAM_CAUSES = ("same", "encoder")
"""A clip's ``cause``: ``same`` (the seam's transcript is GGML's, normalized) or ``encoder``
(it differs; the decoder, the mel and the decoding pin are shared, so the encoder's output
made the difference)."""


class SeamWerClip(Schema, kw_only=True):
    """One fixture through the seam with one encoder variant.

    Attributes
    ----------
    id : str
    public : bool
    language, normalizer, unit : str
        How the clip was decoded and scored (the policy's, for its language).
    run : RunRecord
        The seam launch.
    executor : SeamExecutorRecord or None
        What the executor recorded for it.
    seam : Counts
        Edits of the seam transcript against the reference.
    ggml : Counts
        Edits of the GGML transcript against the reference (``wer.ggml_vs_source``'s).
    seam_vs_ggml : Counts
        Edits of the seam transcript against GGML's.
    seam_empty : bool
        The seam transcript is empty.
    cause : str
        One of :data:`SEAM_CAUSES`.
    reference, ggml_text, seam_text : str or None
        Normalized texts (public clips only).
    raw_seam : str or None
        The seam transcript as printed (public clips only).
    """

    id: str = field(string)
    public: bool = field(boolean)
    language: str = field(string)
    normalizer: str = field(string)
    unit: str = field(string)
    run: RunRecord = field(RunRecord)
    executor: SeamExecutorRecord | None = field(nullable(SeamExecutorRecord.from_json))
    seam: Counts = field(Counts)
    ggml: Counts = field(Counts)
    seam_vs_ggml: Counts = field(Counts)
    seam_empty: bool = field(boolean)
    cause: str = field(string)
    reference: str | None = field(string, optional=True, default=None)
    ggml_text: str | None = field(string, optional=True, default=None)
    seam_text: str | None = field(string, optional=True, default=None)
    raw_seam: str | None = field(string, optional=True, default=None)


class SeamWerVariant(Schema, kw_only=True):
    """Every fixture through the seam with one encoder variant.

    Attributes
    ----------
    encoder : SeamEncoderRef
        What the launches loaded.
    clips : tuple of SeamWerClip
    """

    encoder: SeamEncoderRef = field(SeamEncoderRef)
    clips: tuple[SeamWerClip, ...] = field(array_of(SeamWerClip.from_json))


class SeamWerEvidence(Schema, kw_only=True):
    """The ``seam_wer`` document of ``wer.seam``.

    Attributes
    ----------
    policy : WerPolicy
        The WER policy the clips were decoded and scored under.
    policy_sha256 : str
    binary, binary_sha256 : str
        The patched seam whisper-cli.
    fixtures : tuple of str
        The fixture ids, in parameter order (every variant holds each once).
    variants : tuple of SeamWerVariant
    """

    policy: WerPolicy = field(WerPolicy)
    policy_sha256: str = field(string)
    binary: str = field(string)
    binary_sha256: str = field(string)
    fixtures: tuple[str, ...] = field(strings)
    variants: tuple[SeamWerVariant, ...] = field(array_of(SeamWerVariant.from_json))
