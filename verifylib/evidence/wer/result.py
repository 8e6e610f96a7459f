"""Typed result of stage 05 (WER): per-clip transcripts and counts, the corpus WER of each side."""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Mapping

from verifylib.evidence.gates import WER_GGML_VS_SOURCE, WER_HYBRID, WER_SEAM
from verifylib.evidence.reading import judged_evidence
from verifylib.evidence.wer.schema import (
    Counts,
    HybridClip,
    HybridEvidence,
    WerClip,
    WerEvidence,
    audio_evidence,
)

if TYPE_CHECKING:
    from verifylib.evidence.records import GateRecord

PRIVATE = "(not public)"
"""What a non-public clip shows instead of its texts (runs persist only its counts)."""


WER_FIELDS = ("wer_source", "wer_ggml", "wer_hybrid", "wer_pairwise")
"""The per-clip WER fields of :class:`ClipResult`, for :meth:`WerResult.ranked`."""


@dataclass(frozen=True)
class ClipResult:
    """One clip's texts and word error rates (texts replaced for non-public clips).

    Attributes
    ----------
    id : str
    public : bool
    words : int
        Words in the (normalized) reference.
    counts : dict
        ``source`` / ``ggml`` / ``hybrid`` -> edit counts (``hybrid`` None without Core ML).
    reference, source, ggml : str
        Raw texts, or ``"(not public)"``.
    hybrid : str or None
    wer_source, wer_ggml, wer_pairwise : float
        Error rates in the clip's unit (words, or characters: then they are CERs).
    wer_hybrid : float or None
    language : str or None
        The language it was decoded and scored in (None under wer-v1: the model's).
    unit : str
        ``words`` or ``characters`` (``words`` under wer-v1).
    from_ggml : str or None
        The reference implementation's transcript on the ggml file's weights (raw; wer-v2
        runs, ``"(not public)"`` for a private clip).
    wer_from_ggml, wer_conversion, wer_implementation : float or None
        HF-from-ggml against the reference text; the source against HF-from-ggml (what the
        conversion changed); HF-from-ggml against whisper-cli (what the implementation
        changed). None for runs made before the decomposition.
    normalized : mapping or None
        The normalized texts the counts were taken on (``reference``, ``source``,
        ``from_ggml``, ``ggml``; public clips only), for the aligned differences.
    detected : mapping or None
        ``source`` / ``from_ggml`` / ``ggml`` -> (language, probability) each leg detects
        on the clip (multilingual models in runs that record it; facts, not judged).
    audio : str or None
        The run-relative path of the 16 kHz file both legs heard (public clips of runs
        that publish it).
    """

    id: str
    public: bool
    words: int
    counts: Mapping[str, Mapping[str, int] | None]
    reference: str
    source: str
    ggml: str
    hybrid: str | None
    wer_source: float
    wer_ggml: float
    wer_hybrid: float | None
    wer_pairwise: float
    language: str | None = None
    unit: str = "words"
    from_ggml: str | None = None
    wer_from_ggml: float | None = None
    wer_conversion: float | None = None
    wer_implementation: float | None = None
    normalized: Mapping[str, str | None] | None = None
    detected: Mapping[str, tuple[str, float]] | None = None
    audio: str | None = None

    @property
    def heard_otherwise(self) -> bool:
        """Whether some leg detects a language other than the one the clip is decoded in."""
        return bool(self.detected) and self.language is not None and any(
            lang != self.language for lang, _ in (self.detected or {}).values())

    @classmethod
    def from_evidence(cls, clip: WerClip | Mapping[str, Any],
                      hybrid: HybridClip | Mapping[str, Any] | None = None,
                      hybrid_stdout: bytes | None = None) -> "ClipResult":
        """Build from one clip of the ``wer`` document (and of the ``hybrid`` one).

        Parameters
        ----------
        clip : WerClip or mapping
            The clip's entry in ``wer.ggml_vs_source``'s ``wer`` document: edit counts
            (``source``, ``ggml``, ``pairwise``) and, for a public clip, the raw texts. A
            mapping is read with :meth:`WerClip.from_json`.
        hybrid : HybridClip or mapping, optional
            The clip's entry in ``wer.hybrid``'s ``hybrid`` document, when that gate ran.
        hybrid_stdout : bytes, optional
            The hybrid run's stored stdout (public clips only): its transcript.

        Raises
        ------
        verifylib.errors.EvidenceInvalid
            If a clip does not parse, or lacks the ``pairwise`` counts or a public clip's
            texts.
        """
        from verifylib.errors import EvidenceInvalid
        from verifylib.numerics.scoring import WordCounts

        if not isinstance(clip, WerClip):
            clip = WerClip.from_json(clip)
        if hybrid is not None and not isinstance(hybrid, HybridClip):
            hybrid = HybridClip.from_json(hybrid)
        if clip.pairwise is None:
            raise EvidenceInvalid(f"clip {clip.id}: no pairwise counts")
        src, ggml, pair = (WordCounts(**c.to_json()) for c in (clip.source, clip.ggml,
                                                                clip.pairwise))
        hyb = WordCounts(**hybrid.hybrid.to_json()) if hybrid is not None else None
        public = clip.public
        if public and None in (clip.reference, clip.raw_source, clip.raw_ggml):
            raise EvidenceInvalid(f"public clip {clip.id}: its texts are not stored")
        if hyb is None:
            hybrid_text = None
        elif public:
            hybrid_text = " ".join((hybrid_stdout or b"").decode("utf-8", "replace").split())
        else:
            hybrid_text = PRIVATE
        raw_reference = clip.raw_reference
        if raw_reference is None:
            # Runs before raw_reference was stored kept only the normalized reference.
            raw_reference = clip.reference
        return cls(
            id=clip.id, public=public, words=src.ref_words,
            counts={"source": src.as_dict(), "ggml": ggml.as_dict(),
                    "hybrid": None if hyb is None else hyb.as_dict()},
            reference=str(raw_reference) if public else PRIVATE,
            source=str(clip.raw_source) if public else PRIVATE,
            ggml=str(clip.raw_ggml) if public else PRIVATE,
            hybrid=hybrid_text, wer_source=src.wer, wer_ggml=ggml.wer,
            wer_hybrid=None if hyb is None else hyb.wer, wer_pairwise=pair.wer,
            language=clip.language, unit=clip.unit or "words",
            from_ggml=(None if clip.from_ggml is None else
                       str(clip.raw_from_ggml) if public else PRIVATE),
            wer_from_ggml=_rate(clip.from_ggml), wer_conversion=_rate(clip.conversion),
            wer_implementation=_rate(clip.implementation),
            normalized=({"reference": clip.reference, "source": clip.source_text,
                         "from_ggml": clip.from_ggml_text, "ggml": clip.ggml_text}
                        if public else None),
            detected=(None if clip.detected is None else
                      {leg: (h.language, h.p) for leg, h in (
                          ("source", clip.detected.source),
                          ("from_ggml", clip.detected.from_ggml),
                          ("ggml", clip.detected.ggml))}))


def _rate(counts: Counts | None) -> float | None:
    from verifylib.numerics.scoring import WordCounts

    return None if counts is None else WordCounts(**counts.to_json()).wer


@dataclass(frozen=True)
class CorpusWer:
    """Corpus WER (summed edits over summed words) of each side, and pairwise."""

    source: float
    ggml: float
    pairwise: float


@dataclass(frozen=True)
class SeamClipResult:
    """One fixture through verifylib's Core ML seam with one encoder variant (``wer.seam``).

    Attributes
    ----------
    id : str
    variant : str
        ``fp32`` or ``fp16``.
    unit : str
        ``words`` or ``characters``.
    rate : float
        The seam transcript's rate against the reference.
    rate_ggml : float
        GGML's rate on the same clip.
    rate_vs_ggml : float
        The seam transcript's rate against GGML's.
    cause : str
        ``same`` or ``encoder`` (a difference from GGML comes from the encoder's numbers).
    seam : str
        The seam transcript (normalized; :data:`PRIVATE` for a non-public clip).
    ggml : str
        GGML's (normalized; :data:`PRIVATE` for a non-public clip).
    encode_calls : int
        Encode calls the seam's executor served for the launch.
    """

    id: str
    variant: str
    unit: str
    rate: float
    rate_ggml: float
    rate_vs_ggml: float
    cause: str
    seam: str
    ggml: str
    encode_calls: int


@dataclass
class WerResult:
    """Stage 05's result: every clip, and the corpus figures.

    ``corpus`` is over the clips scored in words (all of them under wer-v1), or over the
    character-scored ones when no clip is scored in words; ``corpus_by_unit`` holds one
    corpus per unit (a character count is never summed with a word count).
    """

    clips: list[ClipResult] = field(default_factory=list)
    corpus: CorpusWer | None = None
    corpus_by_unit: dict[str, CorpusWer] = field(default_factory=dict)
    seam: list[SeamClipResult] = field(default_factory=list)

    def ranked(self, key: str = "wer_ggml", *, worst_first: bool = True) -> list[ClipResult]:
        """Return the clips sorted by one of :data:`WER_FIELDS` (clips without that value last).

        Parameters
        ----------
        key : str, default "wer_ggml"
            The per-clip field to sort by, one of :data:`WER_FIELDS`.
        worst_first : bool, default True
            Sort from the highest value down (False: lowest first).

        Returns
        -------
        list of ClipResult
            The clips having a value for ``key`` in order, then those without it.

        Raises
        ------
        verifylib.errors.ParametersInvalid
            If ``key`` is not one of :data:`WER_FIELDS`.
        """
        if key not in WER_FIELDS:
            from verifylib.errors import ParametersInvalid
            raise ParametersInvalid(f"no per-clip WER field {key!r}; use one of {WER_FIELDS}")
        have = [c for c in self.clips if getattr(c, key) is not None]
        return (sorted(have, key=lambda c: getattr(c, key), reverse=worst_first)
                + [c for c in self.clips if getattr(c, key) is None])


def wer_result_from_evidence(run_dir: str | os.PathLike[str],
                             records: Mapping[str, GateRecord]) -> WerResult | None:
    """Stage 05's result, read from the evidence its gates cite (digest-checked).

    The stage returns exactly this (built from the files it just wrote), and
    :func:`verifylib.open_run` builds it the same way from a published run. A non-public
    clip shows :data:`PRIVATE` for every text, with its edit counts and WERs.

    Parameters
    ----------
    run_dir : path-like
        The run directory.
    records : mapping
        Gate id -> :class:`verifylib.evidence.records.GateRecord` (at least the WER gates).

    Returns
    -------
    WerResult or None
        None unless ``wer.ggml_vs_source`` was judged (PASS or FAIL).

    Raises
    ------
    verifylib.errors.EvidenceInvalid
        If a cited file is missing or altered, or a document does not parse
        (:class:`verifylib.evidence.fields.SchemaError`).
    """
    from verifylib.numerics.scoring import corpus_wer

    v = judged_evidence(run_dir, records, WER_GGML_VS_SOURCE, "wer")
    if v is None:
        return None
    clips = WerEvidence.from_json(v.json("wer")).clips
    hv = judged_evidence(run_dir, records, WER_HYBRID, "hybrid")
    hybrid = ({c.id: c for c in HybridEvidence.from_json(hv.json("hybrid")).clips}
              if hv is not None else {})

    def stdout(cid: str) -> bytes | None:
        name = f"hybrid_stdout_{cid}"
        return hv.bytes(name) if hv is not None and hv.has(name) else None

    by_unit: dict[str, CorpusWer] = {}
    for unit in ("words", "characters"):
        group = [c for c in clips if (c.unit or "words") == unit]
        if group:
            by_unit[unit] = CorpusWer(
                corpus_wer([c.source.to_json() for c in group]),
                corpus_wer([c.ggml.to_json() for c in group]),
                corpus_wer([c.pairwise.to_json() for c in group if c.pairwise is not None]))
    def audio(cid: str) -> str | None:
        name = audio_evidence(cid)
        return v.path_of(name) if v.has(name) else None

    return WerResult(
        [replace(ClipResult.from_evidence(c, hybrid.get(c.id), stdout(c.id)), audio=audio(c.id))
         for c in clips],
        next(iter(by_unit.values()), None), by_unit, _seam_results(run_dir, records))


def _seam_results(run_dir: str | os.PathLike[str],
                  records: Mapping[str, GateRecord]) -> list[SeamClipResult]:
    """Return the ``wer.seam`` clips, variant by variant (empty unless the gate was judged)."""
    from verifylib.evidence.wer.seam_schema import SeamWerEvidence
    from verifylib.numerics.scoring import WordCounts

    sv = judged_evidence(run_dir, records, WER_SEAM, "seam_wer")
    if sv is None:
        return []
    doc = SeamWerEvidence.from_json(sv.json("seam_wer"))

    def rate(c: Counts) -> float:
        return WordCounts(**c.to_json()).wer
    return [SeamClipResult(c.id, v.encoder.variant, c.unit, rate(c.seam), rate(c.ggml),
                           rate(c.seam_vs_ggml), c.cause,
                           c.seam_text if c.public and c.seam_text is not None else PRIVATE,
                           c.ggml_text if c.public and c.ggml_text is not None else PRIVATE,
                           len(c.executor.calls) if c.executor else 0)
            for v in doc.variants for c in v.clips]
