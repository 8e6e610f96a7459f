"""Transcript normalization and word error rate under a versioned policy.

Library first: the normalizer is OpenAI's English normalizer as shipped by transformers,
fed the spelling mapping file that ``whisper-normalizer`` packages (byte-identical to
OpenAI's, checked by digest); word alignment and counts come from ``jiwer``. What is
written here is only the policy arithmetic: corpus sums and the wer-v1 pass rule, kept
pure so ``verifylib verify`` can re-judge stored counts.
"""

from __future__ import annotations

import importlib.resources
import json
import math
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from typing import Any, Callable, Mapping, Sequence

from verifylib import canonical, resources
from verifylib.errors import PolicyInvalid
from verifylib.evidence.gates import Judgement

POLICY_DIR = resources.policies_dir()
ENGLISH_JSON_SHA256 = "6607f948be9824d2e1b2fa2223cd94c06c45afa4e05ea0e3d5e1f2bdffde2465"


class PolicyError(PolicyInvalid):
    """A policy resource is missing or not what its id says."""


@dataclass(frozen=True)
class Policy:
    """A versioned policy resource.

    Attributes
    ----------
    id : str
        E.g. ``"wer-v1"``; a new threshold is a new id.
    sha256 : str
        Digest of the resource file's bytes, recorded before measuring.
    rules : dict
        The parsed resource.
    """

    id: str
    sha256: str
    rules: dict


def load_policy(policy_id: str) -> Policy:
    """Load ``verifylib/policies/<policy_id>.json``.

    Raises
    ------
    PolicyError
        If the file is missing or names another id.
    """
    path = POLICY_DIR / f"{policy_id}.json"
    if not path.is_file():
        raise PolicyError(f"unknown policy {policy_id!r} (no {path})")
    raw = path.read_bytes()
    rules = canonical.loads(raw)
    if rules.get("id") != policy_id:
        raise PolicyError(f"{path}: declares id {rules.get('id')!r}, expected {policy_id!r}")
    return Policy(policy_id, canonical.sha256_bytes(raw), rules)


@dataclass(frozen=True)
class Normalizer:
    """The text normalizer and its identity.

    Attributes
    ----------
    fn : callable
        ``str -> str``.
    identity : dict
        Class, transformers version and the spelling mapping's digest.
    """

    fn: Callable[[str], str]
    identity: dict

    def __call__(self, text: str) -> str:
        return self.fn(text)


@lru_cache(maxsize=1)
def english_normalizer() -> Normalizer:
    """OpenAI's English normalizer with its standard spelling mapping, offline.

    Raises
    ------
    PolicyError
        If the packaged mapping is not the expected bytes.
    """
    from importlib import metadata

    from transformers.models.whisper.english_normalizer import EnglishTextNormalizer

    res = importlib.resources.files("whisper_normalizer") / "normalizers" / "english.json"
    raw = res.read_bytes()
    digest = canonical.sha256_bytes(raw)
    if digest != ENGLISH_JSON_SHA256:
        raise PolicyError(f"whisper_normalizer's english.json has digest {digest}, expected "
                          f"{ENGLISH_JSON_SHA256} (OpenAI's mapping)")
    fn = EnglishTextNormalizer(json.loads(raw))
    return Normalizer(fn, {
        "class": "transformers.models.whisper.english_normalizer.EnglishTextNormalizer",
        "transformers": metadata.version("transformers"),
        "mapping": "whisper_normalizer/normalizers/english.json",
        "mapping_sha256": digest,
        "whisper_normalizer": metadata.version("whisper-normalizer"),
    })


@dataclass(frozen=True)
class WordCounts:
    """Alignment counts of one hypothesis against one reference (normalized words)."""

    hits: int
    substitutions: int
    deletions: int
    insertions: int

    @property
    def ref_words(self) -> int:
        return self.hits + self.substitutions + self.deletions

    @property
    def errors(self) -> int:
        return self.substitutions + self.deletions + self.insertions

    @property
    def wer(self) -> float:
        """WER; an empty reference gives 0 for an empty hypothesis, else infinity."""
        if self.ref_words == 0:
            return 0.0 if self.insertions == 0 else float("inf")
        return self.errors / self.ref_words

    def as_dict(self) -> dict:
        return {"hits": self.hits, "substitutions": self.substitutions,
                "deletions": self.deletions, "insertions": self.insertions}


def count_words(reference: str, hypothesis: str) -> WordCounts:
    """Align two already-normalized texts with jiwer and return the counts.

    Parameters
    ----------
    reference, hypothesis : str
        Normalized texts (either may be empty).

    Returns
    -------
    WordCounts
    """
    import jiwer
    ref, hyp = reference.split(), hypothesis.split()
    if not ref:
        return WordCounts(0, 0, 0, len(hyp))
    if not hyp:
        return WordCounts(0, 0, len(ref), 0)
    out = jiwer.process_words(" ".join(ref), " ".join(hyp))
    return WordCounts(out.hits, out.substitutions, out.deletions, out.insertions)


def corpus_wer(counts: Sequence[WordCounts | Mapping[str, int]]) -> float:
    """Corpus WER: summed errors over summed reference words."""
    cs = [c if isinstance(c, WordCounts) else WordCounts(**c) for c in counts]
    ref = sum(c.ref_words for c in cs)
    err = sum(c.errors for c in cs)
    if ref == 0:
        return 0.0 if err == 0 else float("inf")
    return err / ref


def exact_corpus_wer(counts: Sequence[WordCounts | Mapping[str, int]]) -> Fraction | float:
    """Corpus WER as an exact rational of the integer counts, for the pass rules.

    Parameters
    ----------
    counts : sequence of WordCounts or mapping
        Per-clip alignment counts (one clip gives that clip's WER).

    Returns
    -------
    Fraction or float
        ``Fraction(errors, reference words)``; ``Fraction(0)`` when both sums are zero and
        ``math.inf`` when errors meet no reference word (as :func:`corpus_wer`).
    """
    cs = [c if isinstance(c, WordCounts) else WordCounts(**c) for c in counts]
    ref = sum(c.ref_words for c in cs)
    err = sum(c.errors for c in cs)
    if ref == 0:
        return Fraction(0) if err == 0 else math.inf
    return Fraction(err, ref)


def policy_fraction(value: int | float) -> Fraction:
    """A policy threshold as the decimal its resource spells (``0.05`` is exactly 1/20).

    ``Fraction(0.05)`` would be the binary double just above 1/20; ``str`` gives the
    shortest decimal that reads back as the same double, i.e. what the JSON file says.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise PolicyError(f"policy threshold {value!r} is not a finite number")
    return Fraction(str(value))


def _wer_v1_section(evidence: Mapping[str, Any], section: str):
    """The wer-v1 rules of one gate and the clips, or why the evidence cannot be judged."""
    policy = evidence["policy"]
    if policy.get("id") != "wer-v1":
        return None, None, f"unexpected policy {policy.get('id')!r}"
    if not evidence["clips"]:
        return None, None, "no fixture was transcribed"
    return policy[section], evidence["clips"], None


def _stored_count_problems(clip: Mapping[str, Any], counts: Mapping[str, tuple[str, str]],
                           empties: Mapping[str, str]) -> list[str]:
    # A public clip stores its normalized texts: its counts and empty flags are recomputed
    # from them, so an edited count or flag cannot pass.
    out = []
    for key, (ref, hyp) in counts.items():
        if count_words(clip[ref], clip[hyp]).as_dict() != clip[key]:
            out.append(f"{clip['id']}: stored {key} counts do not match its texts")
    for flag, text in empties.items():
        if (clip[text].strip() == "") != bool(clip[flag]):
            out.append(f"{clip['id']}: stored {flag} flag contradicts the text")
    return out


def judge_ggml_vs_source(evidence: Mapping[str, Any]) -> Judgement:
    """The wer-v1 rule for ``wer.ggml_vs_source``, on stored evidence.

    Parameters
    ----------
    evidence : mapping
        ``policy`` (the wer-v1 resource), ``clips``: per clip ``source`` and ``ggml`` counts
        against the reference, ``source_empty`` and ``ggml_empty`` flags, and for public
        clips the normalized ``reference``, ``source_text`` and ``ggml_text`` (their counts
        are recomputed and must agree).

    Returns
    -------
    Judgement
        PASS or FAIL, with the figures behind the decision.
    """
    rules, clips, refusal = _wer_v1_section(evidence, "ggml_vs_source")
    if refusal:
        return Judgement.failed(refusal)
    problems = []
    for c in clips:
        if "reference" in c:
            problems += _stored_count_problems(c, {"source": ("reference", "source_text"),
                                                   "ggml": ("reference", "ggml_text")},
                                               {"source_empty": "source_text",
                                                "ggml_empty": "ggml_text"})
    if problems:
        return Judgement.failed("; ".join(problems))
    src = corpus_wer([c["source"] for c in clips])
    ggml = corpus_wer([c["ggml"] for c in clips])
    limit = src + rules["max_corpus_wer_delta"]
    empties = [c["id"] for c in clips if c["ggml_empty"] and not c["source_empty"]]
    figures = (f"corpus WER vs references: GGML {ggml:.4f}, HF source {src:.4f} "
               f"(limit {limit:.4f}) over {len(clips)} clip(s)")
    if rules.get("no_empty_where_source_nonempty") and empties:
        return Judgement.failed(f"GGML transcript empty where the source's is not: {empties}; {figures}")
    # Decided on exact rationals, not on the floats shown: in binary floating point
    # 7/20 + 0.05 < 8/20, so a corpus exactly at its limit would fail.
    exact_limit = (exact_corpus_wer([c["source"] for c in clips])
                   + policy_fraction(rules["max_corpus_wer_delta"]))
    if not exact_corpus_wer([c["ggml"] for c in clips]) <= exact_limit:
        return Judgement.failed(f"GGML corpus WER above the limit; {figures}")
    return Judgement.passed(figures)


def judge_hybrid(evidence: Mapping[str, Any],
                 classify: Callable[[Mapping[str, Any]], Judgement]) -> Judgement:
    """The wer-v1 rule for ``wer.hybrid`` (Core ML encoder inside whisper-cli).

    Parameters
    ----------
    evidence : mapping
        ``policy`` (wer-v1) and ``clips``: per clip the ``source``, ``ggml`` and ``hybrid``
        counts against the reference, ``hybrid_vs_ggml`` counts, ``hybrid_empty``, and for
        public clips the normalized texts (``reference``, ``ggml_text``, ``hybrid_text``),
        whose counts are recomputed.
    classify : callable
        Re-judges one clip's hybrid run from its stored streams (the four load conditions
        of docs/runtime-contract.md §2.3); returns a :class:`~verifylib.evidence.gates.Judgement`.

    Returns
    -------
    Judgement
        PASS iff every hybrid run met the four conditions, no hybrid transcript is empty,
        the hybrid corpus WER is at most min(GGML, source) + 0.05, and no clip's
        hybrid-vs-GGML WER exceeds 0.5 (the detector for a silent nil prediction).
    """
    rules, clips, refusal = _wer_v1_section(evidence, "hybrid")
    if refusal:
        return Judgement.failed(refusal)
    problems = []
    for c in clips:
        if "reference" in c:
            problems += _stored_count_problems(
                c, {"hybrid": ("reference", "hybrid_text"), "ggml": ("reference", "ggml_text"),
                    "hybrid_vs_ggml": ("ggml_text", "hybrid_text")},
                {"hybrid_empty": "hybrid_text"})
        if rules.get("four_load_conditions_every_run"):
            load = classify(c)
            if not load.ok:
                problems.append(f"{c['id']}: hybrid run fails the load conditions: {load.detail}")
    if problems:
        return Judgement.failed("; ".join(problems))
    empty = [c["id"] for c in clips if c["hybrid_empty"]]
    if rules.get("all_nonempty") and empty:
        return Judgement.failed(f"hybrid transcript empty for {empty} (a silent Core ML prediction failure)")
    hyb = corpus_wer([c["hybrid"] for c in clips])
    ggml = corpus_wer([c["ggml"] for c in clips])
    src = corpus_wer([c["source"] for c in clips])
    limit = min(ggml, src) + rules["max_corpus_wer_delta_vs_best"]
    # Exact rationals decide (see judge_ggml_vs_source); the floats are only shown.
    worst = max(clips, key=lambda c: exact_corpus_wer([c["hybrid_vs_ggml"]]))
    worst_wer = WordCounts(**worst["hybrid_vs_ggml"]).wer
    figures = (f"corpus WER vs references: hybrid {hyb:.4f}, GGML {ggml:.4f}, source {src:.4f} "
               f"(limit {limit:.4f}); largest clip hybrid-vs-GGML WER {worst_wer:.4f} "
               f"({worst['id']}) over {len(clips)} clip(s)")
    if exact_corpus_wer([worst["hybrid_vs_ggml"]]) > policy_fraction(rules["max_clip_wer_vs_ggml"]):
        return Judgement.failed(f"clip {worst['id']} diverges from GGML beyond {rules['max_clip_wer_vs_ggml']}; {figures}")
    exact_limit = (min(exact_corpus_wer([c["ggml"] for c in clips]),
                       exact_corpus_wer([c["source"] for c in clips]))
                   + policy_fraction(rules["max_corpus_wer_delta_vs_best"]))
    if not exact_corpus_wer([c["hybrid"] for c in clips]) <= exact_limit:
        return Judgement.failed(f"hybrid corpus WER above the limit; {figures}")
    return Judgement.passed(figures)
