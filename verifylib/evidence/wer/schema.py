"""Schemas of the stage 05 sidecars ``wer`` (gate ``wer.ggml_vs_source``) and ``hybrid``.

:class:`WerEvidence` is the document :func:`verifylib.stages.wer.ggml_vs_source` writes:
the WER policy copy (:class:`WerPolicy`, wer-v1 or wer-v2), the normalizers, the digests of
the GGML model and binary, and one :class:`WerClip` per fixture (edit :class:`Counts` against the
reference, empty flags, the GGML run's :class:`RunRecord`, and for a public clip its
texts). :class:`HybridEvidence` is the ``hybrid`` document of :func:`verifylib.stages.wer.hybrid`,
one :class:`HybridClip` per fixture.

``from_json`` is strict and fails closed: a field that is missing or of the wrong JSON type
raises :class:`SchemaError` (an :class:`verifylib.errors.EvidenceInvalid`) whose ``path``
names it, e.g. ``clips[1].ggml.substitutions``. Keys that only a public clip carries (its
texts) are optional; so are the document-level digests and the run records, which records
written by hand for the scoring rules' tests omit — the gate's rule
(:mod:`verifylib.evidence.wer.rules`) refuses a document that lacks what it checks.
``to_json`` gives back exactly the dict the stage writes.

Shapes and types only: the counts are recomputed from the texts, the streams re-classified
and the policy compared with the packaged one by the rules. This module imports nothing
from verifylib but :mod:`verifylib.errors` (through :mod:`.fields`) and the run record and
launch citation it shares with :mod:`.canary` (:class:`RunRecord`, :class:`Launch`).
"""

from __future__ import annotations

from typing import Any

from verifylib.evidence.fields import (
    Schema,
    array_of,
    boolean,
    field,
    integer,
    mapping,
    number,
    string,
    strings,
)
from verifylib.evidence.run_record import RunRecord

__all__ = ["Counts", "Heard", "Detected", "DecodingPin", "GgmlVsSourceRules", "HybridRules",
           "BasicNormalizerSettings", "ScoringRules", "WerPolicy", "WerClip", "WerEvidence",
           "HybridClip", "HybridEvidence"]


class Counts(Schema):
    """Word alignment counts of one hypothesis against one reference.

    Attributes
    ----------
    hits, substitutions, deletions, insertions : int
        As :meth:`verifylib.numerics.scoring.WordCounts.as_dict` writes them.
    """

    _path = "counts"

    hits: int = field(integer)
    substitutions: int = field(integer)
    deletions: int = field(integer)
    insertions: int = field(integer)


class Heard(Schema):
    """The language one leg detects on a clip.

    Attributes
    ----------
    language : str
        Its code (``"de"``).
    p : float
        Its probability among the model's languages (one decoder step's softmax over the
        language tokens).
    """

    _path = "heard"

    language: str = field(string)
    p: float = field(number)


class Detected(Schema):
    """The language each leg of ``wer.ggml_vs_source`` detects on one clip.

    Attributes
    ----------
    source, from_ggml : Heard
        The Hugging Face reference on the source weights and on the ggml file's.
    ggml : Heard
        whisper-cli's ``-dl`` launch, read from its log.
    """

    _path = "detected"

    source: Heard = field(Heard)
    from_ggml: Heard = field(Heard)
    ggml: Heard = field(Heard)


class GgmlVsSourceRules(Schema):
    """The ``ggml_vs_source`` section of a WER policy (wer-v1, wer-v2).

    Attributes
    ----------
    max_corpus_wer_delta : float
    no_empty_where_source_nonempty : bool
    gated : str or None
        wer-v2: ``hf_from_ggml``, the leg held to the threshold is the reference
        implementation on the ggml file's weights (conversion), whisper-cli's difference
        from it being reported as the implementation's; None (wer-v1): whisper-cli's.
    """

    _path = "policy.ggml_vs_source"
    _closed = "not a key of the policy"

    max_corpus_wer_delta: float = field(number)
    no_empty_where_source_nonempty: bool = field(boolean)
    gated: str | None = field(string, optional=True, default=None)


class HybridRules(Schema):
    """The ``hybrid`` section of a WER policy (wer-v1, wer-v2).

    Attributes
    ----------
    max_corpus_wer_delta_vs_best : float
    all_nonempty : bool
    four_load_conditions_every_run : bool
    max_clip_wer_vs_ggml : float
    """

    _path = "policy.hybrid"
    _closed = "not a key of the policy"

    max_corpus_wer_delta_vs_best: float = field(number)
    all_nonempty: bool = field(boolean)
    four_load_conditions_every_run: bool = field(boolean)
    max_clip_wer_vs_ggml: float = field(number)


class BasicNormalizerSettings(Schema):
    """The basic normalizer's settings in wer-v2's ``scoring`` section.

    Attributes
    ----------
    remove_diacritics, split_letters : bool
    """

    _path = "policy.scoring.basic_normalizer"
    _closed = "not a key of the policy"

    remove_diacritics: bool = field(boolean)
    split_letters: bool = field(boolean)


class ScoringRules(Schema):
    """The ``scoring`` section of wer-v2: which normalizer and unit each language gets.

    Attributes
    ----------
    english_languages : tuple of str
        Scored with the English normalizer, in words.
    character_languages : tuple of str
        Written without spaces: basic normalizer, in characters.
    basic_normalizer : BasicNormalizerSettings
    characters_without_whitespace : bool
        Whether whitespace is dropped before counting characters.
    """

    _path = "policy.scoring"
    _closed = "not a key of the policy"

    english_languages: tuple[str, ...] = field(strings)
    character_languages: tuple[str, ...] = field(strings)
    basic_normalizer: BasicNormalizerSettings = field(BasicNormalizerSettings)
    characters_without_whitespace: bool = field(boolean)


class DecodingPin(Schema):
    """The ``decoding`` section of wer-v3: the decoding both implementations run under.

    Attributes
    ----------
    beam_size, best_of : int
        whisper-cli's ``-bs`` and ``-bo``; the reference's ``num_beams`` is ``beam_size``.
    timestamps : bool
        Decode with timestamp tokens (whisper-cli without ``-nt``; the reference's
        ``return_timestamps``).
    temperature, temperature_increment : float
        whisper-cli's ``--temperature`` and ``--temperature-inc`` (0 and 0: no sampling,
        no fallback); the reference never samples.
    """

    _path = "policy.decoding"
    _closed = "not a key of the decoding pin"

    beam_size: int = field(integer)
    best_of: int = field(integer)
    timestamps: bool = field(boolean)
    temperature: float = field(number)
    temperature_increment: float = field(number)


class WerPolicy(Schema, kw_only=True):
    """The copy of the WER policy resource a WER document stores (``policy``).

    A key the resource does not have is refused, so ``to_json`` is the stored object.

    Attributes
    ----------
    id : str
    ggml_vs_source : GgmlVsSourceRules
    hybrid : HybridRules
    description : str or None
    scoring : ScoringRules or None
        wer-v2's per-language scoring; None under wer-v1 (English, words).
    decoding : DecodingPin or None
        wer-v3's decoding pin, which every run must carry; None before (the pin was then
        the code's).
    """

    _path = "policy"
    _closed = "not a key of the policy"

    id: str = field(string)
    description: str | None = field(string, optional=True, default=None)
    scoring: ScoringRules | None = field(ScoringRules, optional=True, default=None)
    decoding: DecodingPin | None = field(DecodingPin, optional=True, default=None)
    ggml_vs_source: GgmlVsSourceRules = field(GgmlVsSourceRules)
    hybrid: HybridRules = field(HybridRules)


def audio_evidence(clip_id: str) -> str:
    """Return the evidence name of a public clip's 16 kHz audio (``audio_<id>``).

    Parameters
    ----------
    clip_id : str
        The fixture id.

    Returns
    -------
    str
        The name ``wer.ggml_vs_source`` cites the file both legs heard by.
    """
    return f"audio_{clip_id}"


class WerClip(Schema, kw_only=True):
    """One fixture of the ``wer`` document.

    Attributes
    ----------
    id : str
    public : bool
    source, ggml : Counts
        HF source and GGML transcripts against the reference.
    source_empty, ggml_empty : bool
    pairwise : Counts or None
        GGML against the source (reported, not gated).
    audio_sha256, reference_from : str or None
        The fixture's digest; ``"text"`` or ``"source"``.
    ggml_run : RunRecord or None
        The GGML whisper-cli run.
    intake : dict or None
        How the fixture became the 16 kHz file both legs read
        (:meth:`verifylib.runtime.audio_intake.Intake.to_json`: the original's format,
        rate and channels, its digest and the converted file's); missing from runs made
        before the intake.
    language, normalizer, unit : str or None
        wer-v2: the fixture's decoding language, the normalizer its texts went through
        (``english`` or ``basic``) and the unit its counts are in (``words`` or
        ``characters``); None under wer-v1.
    from_ggml, conversion, implementation : Counts or None
        The reference implementation run on the weights of the ggml file (HF-from-ggml)
        against the reference text; the source against HF-from-ggml (what conversion and
        quantization changed); HF-from-ggml against whisper-cli (what the implementation
        changed). Missing from runs made before the decomposition.
    from_ggml_empty : bool or None
    from_ggml_text, raw_from_ggml : str or None
        HF-from-ggml's transcript, normalized and raw (public clips only).
    reference, source_text, ggml_text : str or None
        Normalized texts (public clips only).
    raw_reference, raw_source, raw_ggml : str or None
        The texts as given and as transcribed (public clips only; ``raw_reference`` is
        missing from runs written before it was stored).
    detected : Detected or None
        Facts, not judged: the language each leg detects on the clip. None for an
        English-only model (no language tokens) and in runs made before detection was
        recorded.
    detect_run : RunRecord or None
        whisper-cli's ``-dl`` launch (its stderr is the ``ggml_detect_stderr_<id>``
        evidence).
    """

    _path = "clip"

    id: str = field(string)
    public: bool = field(boolean)
    audio_sha256: str | None = field(string, optional=True, default=None)
    reference_from: str | None = field(string, optional=True, default=None)
    source: Counts = field(Counts)
    ggml: Counts = field(Counts)
    pairwise: Counts | None = field(Counts, optional=True, default=None)
    source_empty: bool = field(boolean)
    ggml_empty: bool = field(boolean)
    ggml_run: RunRecord | None = field(RunRecord, optional=True, default=None)
    reference: str | None = field(string, optional=True, default=None)
    source_text: str | None = field(string, optional=True, default=None)
    ggml_text: str | None = field(string, optional=True, default=None)
    raw_reference: str | None = field(string, optional=True, default=None)
    raw_source: str | None = field(string, optional=True, default=None)
    raw_ggml: str | None = field(string, optional=True, default=None)
    intake: dict[str, Any] | None = field(mapping, optional=True, default=None)
    language: str | None = field(string, optional=True, default=None)
    normalizer: str | None = field(string, optional=True, default=None)
    unit: str | None = field(string, optional=True, default=None)
    from_ggml: Counts | None = field(Counts, optional=True, default=None)
    conversion: Counts | None = field(Counts, optional=True, default=None)
    implementation: Counts | None = field(Counts, optional=True, default=None)
    from_ggml_empty: bool | None = field(boolean, optional=True, default=None)
    from_ggml_text: str | None = field(string, optional=True, default=None)
    raw_from_ggml: str | None = field(string, optional=True, default=None)
    detected: Detected | None = field(Detected, optional=True, default=None)
    detect_run: RunRecord | None = field(RunRecord, optional=True, default=None)


class WerEvidence(Schema, kw_only=True):
    """The ``wer`` document of ``wer.ggml_vs_source``.

    Attributes
    ----------
    policy : WerPolicy
    clips : tuple of WerClip
    policy_sha256 : str or None
        Digest of the packaged policy resource.
    normalizer : dict or None
        The normalizer's identity (as stored).
    model_ggml_sha256, binary_sha256 : str or None
        The GGML model and the GGML whisper-cli.
    mlmodelc_beside : bool or None
        Whether a ``.mlmodelc`` sat beside the model the GGML runs read.
    decoding : tuple of str or None
        The greedy decoding arguments.
    from_ggml : dict or None
        The Hugging Face folder imported from the ggml file (its source digest, whether the
        file is lossy, whether it is the source model itself).
    """

    policy: WerPolicy = field(WerPolicy)
    policy_sha256: str | None = field(string, optional=True, default=None)
    normalizer: dict[str, Any] | None = field(mapping, optional=True, default=None)
    model_ggml_sha256: str | None = field(string, optional=True, default=None)
    binary_sha256: str | None = field(string, optional=True, default=None)
    mlmodelc_beside: bool | None = field(boolean, optional=True, default=None)
    decoding: tuple[str, ...] | None = field(strings, optional=True, default=None)
    from_ggml: dict[str, Any] | None = field(mapping, optional=True, default=None)
    clips: tuple[WerClip, ...] = field(array_of(WerClip.from_json))


class HybridClip(Schema, kw_only=True):
    """One fixture of the ``hybrid`` document.

    Attributes
    ----------
    id : str
    public : bool
    source, ggml, hybrid : Counts
        Against the reference.
    hybrid_vs_ggml : Counts
        The hybrid transcript against the GGML one.
    hybrid_empty : bool
    run : RunRecord or None
        The Core ML whisper-cli run.
    reference, ggml_text, hybrid_text : str or None
        Normalized texts (public clips only).
    language, normalizer, unit : str or None
        As in :class:`WerClip` (wer-v2 only).
    """

    _path = "clip"

    id: str = field(string)
    public: bool = field(boolean)
    run: RunRecord | None = field(RunRecord, optional=True, default=None)
    source: Counts = field(Counts)
    ggml: Counts = field(Counts)
    hybrid: Counts = field(Counts)
    hybrid_vs_ggml: Counts = field(Counts)
    hybrid_empty: bool = field(boolean)
    reference: str | None = field(string, optional=True, default=None)
    ggml_text: str | None = field(string, optional=True, default=None)
    hybrid_text: str | None = field(string, optional=True, default=None)
    language: str | None = field(string, optional=True, default=None)
    normalizer: str | None = field(string, optional=True, default=None)
    unit: str | None = field(string, optional=True, default=None)


class HybridEvidence(Schema, kw_only=True):
    """The ``hybrid`` document of ``wer.hybrid``.

    Attributes
    ----------
    policy : WerPolicy
    clips : tuple of HybridClip
    policy_sha256 : str or None
    binary_sha256 : str or None
        The Core ML whisper-cli the runs launched.
    model_arg : str or None
        The ``-m`` string of the runs.
    """

    policy: WerPolicy = field(WerPolicy)
    policy_sha256: str | None = field(string, optional=True, default=None)
    binary_sha256: str | None = field(string, optional=True, default=None)
    model_arg: str | None = field(string, optional=True, default=None)
    clips: tuple[HybridClip, ...] = field(array_of(HybridClip.from_json))
