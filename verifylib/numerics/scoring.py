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
from typing import Callable, Mapping, Sequence

from verifylib import canonical, resources
from verifylib.errors import PolicyInvalid

POLICY_DIR = resources.policies_dir()
ENGLISH_JSON_SHA256 = "6607f948be9824d2e1b2fa2223cd94c06c45afa4e05ea0e3d5e1f2bdffde2465"


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
    PolicyInvalid
        If the file is missing or names another id.
    """
    path = POLICY_DIR / f"{policy_id}.json"
    if not path.is_file():
        raise PolicyInvalid(f"unknown policy {policy_id!r} (no {path})")
    raw = path.read_bytes()
    rules = canonical.loads(raw)
    if rules.get("id") != policy_id:
        raise PolicyInvalid(f"{path}: declares id {rules.get('id')!r}, expected {policy_id!r}")
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
        """Return ``text`` normalized by :attr:`fn`.

        Parameters
        ----------
        text : str
            The text to normalize.

        Returns
        -------
        str
            The normalized text.
        """
        return self.fn(text)


@lru_cache(maxsize=1)
def english_normalizer() -> Normalizer:
    """OpenAI's English normalizer with its standard spelling mapping, offline.

    Raises
    ------
    PolicyInvalid
        If the packaged mapping is not the expected bytes.
    """
    from importlib import metadata

    from transformers.models.whisper.english_normalizer import EnglishTextNormalizer

    res = importlib.resources.files("whisper_normalizer") / "normalizers" / "english.json"
    raw = res.read_bytes()
    digest = canonical.sha256_bytes(raw)
    if digest != ENGLISH_JSON_SHA256:
        raise PolicyInvalid(f"whisper_normalizer's english.json has digest {digest}, expected "
                            f"{ENGLISH_JSON_SHA256} (OpenAI's mapping)")
    fn = EnglishTextNormalizer(json.loads(raw))
    return Normalizer(fn, {
        "class": "transformers.models.whisper.english_normalizer.EnglishTextNormalizer",
        "transformers": metadata.version("transformers"),
        "mapping": "whisper_normalizer/normalizers/english.json",
        "mapping_sha256": digest,
        "whisper_normalizer": metadata.version("whisper-normalizer"),
    })


@lru_cache(maxsize=4)
def basic_normalizer(remove_diacritics: bool = False, split_letters: bool = False) -> Normalizer:
    """OpenAI's basic (language-independent) normalizer, as transformers ships it.

    The Whisper paper's multilingual evaluation normalizes every language but English with
    it: lower case, bracketed and parenthesized spans removed, symbols and punctuation
    replaced by spaces, whitespace collapsed.

    Parameters
    ----------
    remove_diacritics, split_letters : bool
        Its two settings (the policy fixes them).

    Returns
    -------
    Normalizer
    """
    from importlib import metadata

    from transformers.models.whisper.english_normalizer import BasicTextNormalizer

    fn = BasicTextNormalizer(remove_diacritics=remove_diacritics, split_letters=split_letters)
    return Normalizer(fn, {
        "class": "transformers.models.whisper.english_normalizer.BasicTextNormalizer",
        "transformers": metadata.version("transformers"),
        "remove_diacritics": remove_diacritics, "split_letters": split_letters,
    })


UNITS = ("words", "characters")
"""What an error rate counts: words (WER) or characters (CER)."""

RATE_OF = {"words": "WER", "characters": "CER"}
"""The error rate's name for each unit a clip is scored in."""


@dataclass(frozen=True)
class Scoring:
    """How one fixture is scored under a policy, decided from its language alone.

    Attributes
    ----------
    language : str
        The fixture's decoding language.
    normalizer : {"english", "basic"}
        Which normalizer its texts go through.
    unit : {"words", "characters"}
        What its error rate counts.
    """

    language: str
    normalizer: str
    unit: str

    def normalize(self, rules: Mapping, text: str) -> str:
        """Normalize ``text`` as the policy's ``scoring`` section says for this language.

        Parameters
        ----------
        rules : mapping
            The policy's rules (``scoring`` read for the basic normalizer's settings).
        text : str
            A reference text or a transcript.

        Returns
        -------
        str
        """
        return normalizer_of(rules, self.normalizer)(text)

    def count(self, rules: Mapping, reference: str, hypothesis: str) -> "WordCounts":
        """Align two normalized texts in this fixture's unit.

        Parameters
        ----------
        rules : mapping
            The policy's rules.
        reference, hypothesis : str
            Normalized texts.

        Returns
        -------
        WordCounts
            Counts of words, or of characters.
        """
        return count_units(rules, self.unit, reference, hypothesis)


def scoring_for(rules: Mapping, language: str) -> Scoring:
    """Decide how a fixture in ``language`` is scored under a policy's rules.

    wer-v1 has no ``scoring`` section: every fixture is English-normalized and counted in
    words, as that policy says. wer-v2 names the English languages and the languages written
    without spaces (scored in characters); every other one gets the basic normalizer.

    Parameters
    ----------
    rules : mapping
        The policy's parsed resource.
    language : str
        The fixture's language code.

    Returns
    -------
    Scoring
    """
    sc = rules.get("scoring")
    if sc is None:
        return Scoring(language, "english", "words")
    if language in sc["english_languages"]:
        return Scoring(language, "english", "words")
    if language in sc["character_languages"]:
        return Scoring(language, "basic", "characters")
    return Scoring(language, "basic", "words")


def normalizer_of(rules: Mapping, name: str) -> Normalizer:
    """Return the normalizer called ``name`` (``english`` or ``basic``) under a policy.

    Parameters
    ----------
    rules : mapping
        The policy's parsed resource.
    name : str
        ``english`` or ``basic``.

    Returns
    -------
    Normalizer

    Raises
    ------
    PolicyInvalid
        For another name, or ``basic`` under a policy without a ``scoring`` section.
    """
    if name == "english":
        return english_normalizer()
    sc = rules.get("scoring")
    if name == "basic" and sc is not None:
        b = sc["basic_normalizer"]
        return basic_normalizer(bool(b["remove_diacritics"]), bool(b["split_letters"]))
    raise PolicyInvalid(f"policy {rules.get('id')!r} has no normalizer {name!r}")


def normalizer_identities(rules: Mapping) -> dict:
    """Every normalizer a policy may use, with its identity, for the evidence.

    Parameters
    ----------
    rules : mapping
        The policy's parsed resource.

    Returns
    -------
    dict
        wer-v1: the English normalizer's identity (as runs have always stored it).
        wer-v2: ``{"english": …, "basic": …}``.
    """
    if rules.get("scoring") is None:
        return english_normalizer().identity
    return {"english": english_normalizer().identity,
            "basic": normalizer_of(rules, "basic").identity}


@dataclass(frozen=True)
class WordCounts:
    """Alignment counts of one hypothesis against one reference (normalized words)."""

    hits: int
    substitutions: int
    deletions: int
    insertions: int

    @property
    def ref_words(self) -> int:
        """Number of reference words: hits, substitutions and deletions."""
        return self.hits + self.substitutions + self.deletions

    @property
    def errors(self) -> int:
        """Number of edits: substitutions, deletions and insertions."""
        return self.substitutions + self.deletions + self.insertions

    @property
    def wer(self) -> float:
        """WER; an empty reference gives 0 for an empty hypothesis, else infinity."""
        if self.ref_words == 0:
            return 0.0 if self.insertions == 0 else float("inf")
        return self.errors / self.ref_words

    def as_dict(self) -> dict:
        """Return the four counts as a plain dict.

        Returns
        -------
        dict
            ``hits``, ``substitutions``, ``deletions`` and ``insertions``.
        """
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


def count_characters(reference: str, hypothesis: str, *,
                     without_whitespace: bool = True) -> WordCounts:
    """Align two normalized texts character by character with jiwer.

    Parameters
    ----------
    reference, hypothesis : str
        Normalized texts.
    without_whitespace : bool
        Drop every whitespace character first: in scripts written without spaces, the
        spaces left by punctuation removal are not part of the text.

    Returns
    -------
    WordCounts
        Counts of characters.
    """
    import jiwer

    if without_whitespace:
        reference, hypothesis = "".join(reference.split()), "".join(hypothesis.split())
    if not reference:
        return WordCounts(0, 0, 0, len(hypothesis))
    if not hypothesis:
        return WordCounts(0, 0, len(reference), 0)
    out = jiwer.process_characters(reference, hypothesis)
    return WordCounts(out.hits, out.substitutions, out.deletions, out.insertions)


def count_units(rules: Mapping, unit: str, reference: str, hypothesis: str) -> WordCounts:
    """Align two normalized texts in ``unit`` as a policy's rules say.

    Parameters
    ----------
    rules : mapping
        The policy's parsed resource (``scoring.characters_without_whitespace``).
    unit : {"words", "characters"}
        What to count.
    reference, hypothesis : str
        Normalized texts.

    Returns
    -------
    WordCounts

    Raises
    ------
    PolicyInvalid
        For an unknown unit.
    """
    if unit == "words":
        return count_words(reference, hypothesis)
    if unit == "characters":
        sc = rules.get("scoring") or {}
        return count_characters(reference, hypothesis,
                                without_whitespace=bool(sc.get("characters_without_whitespace",
                                                               True)))
    raise PolicyInvalid(f"unknown unit {unit!r} (one of {UNITS})")


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
    """Return a policy threshold as the decimal its resource spells (``0.05`` is 1/20).

    ``Fraction(0.05)`` would be the binary double just above 1/20; ``str`` gives the
    shortest decimal that reads back as the same double, i.e. what the JSON file says.

    Parameters
    ----------
    value : int or float
        The threshold as read from the policy resource.

    Returns
    -------
    Fraction
        The exact rational the decimal spells.

    Raises
    ------
    PolicyInvalid
        If ``value`` is not a finite number (a bool counts as none).
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise PolicyInvalid(f"policy threshold {value!r} is not a finite number")
    return Fraction(str(value))


