"""wer-v1 arithmetic and rule, on hand-made evidence (no model needed)."""

import copy
import math

import pytest

from verifylib.errors import PolicyInvalid
from verifylib.numerics import scoring
from verifylib.evidence.gates import Status
from verifylib.numerics.scoring import WordCounts, count_words, corpus_wer
from verifylib.evidence.wer.rules import judge_ggml_vs_source


def test_normalizer_is_openais_with_the_pinned_mapping():
    n = scoring.english_normalizer()
    assert n.identity["mapping_sha256"] == scoring.ENGLISH_JSON_SHA256
    assert n("And so, my fellow Americans: ask NOT!") == "and so my fellow americans ask not"
    assert n("colour") == "color"  # the spelling mapping is in effect


def test_counts_match_jiwer_and_edge_cases():
    c = count_words("a b c d", "a x c d e")
    assert (c.hits, c.substitutions, c.deletions, c.insertions) == (3, 1, 0, 1)
    assert c.wer == pytest.approx(0.5)
    assert count_words("a b", "").as_dict() == {"hits": 0, "substitutions": 0,
                                                 "deletions": 2, "insertions": 0}
    assert count_words("", "").wer == 0.0
    assert math.isinf(count_words("", "x").wer)
    assert corpus_wer([WordCounts(3, 1, 0, 0), {"hits": 4, "substitutions": 0,
                                                "deletions": 0, "insertions": 0}]) == 1 / 8


def _evidence(ggml_text, source_text="ask not what your country can do",
              reference="ask not what your country can do"):
    policy = scoring.load_policy("wer-v1")
    clip = {"id": "c1", "public": True, "reference": reference, "source_text": source_text,
            "ggml_text": ggml_text,
            "source": count_words(reference, source_text).as_dict(),
            "ggml": count_words(reference, ggml_text).as_dict(),
            "source_empty": not source_text.strip(), "ggml_empty": not ggml_text.strip()}
    return {"policy": policy.rules, "clips": [clip]}


def test_rule_passes_identical_and_small_flip():
    j = judge_ggml_vs_source(_evidence("ask not what your country can do"))
    assert j.status is Status.PASS and "GGML 0.0000" in j.detail
    words = [f"w{i}" for i in range(40)]
    forty = " ".join(words)
    flipped = " ".join(["x3" if w == "w3" else w for w in words])
    j = judge_ggml_vs_source(_evidence(flipped, forty, forty))
    assert j.status is Status.PASS  # 1/40 = 0.025 <= 0 + 0.05


def test_rule_fails_garbage_and_empty_and_tampering():
    j = judge_ggml_vs_source(_evidence("the the the the"))
    assert j.status is Status.FAIL and "above the limit" in j.detail
    j = judge_ggml_vs_source(_evidence(""))
    assert j.status is Status.FAIL and "empty where the source's is not" in j.detail
    ev = _evidence("ask not what your country can do")
    forged = copy.deepcopy(ev)
    forged["clips"][0]["ggml_text"] = "garbage words only"
    j = judge_ggml_vs_source(forged)
    assert j.status is Status.FAIL and "do not match its texts" in j.detail
    j = judge_ggml_vs_source({"policy": ev["policy"], "clips": []})
    assert j.status is Status.FAIL


def test_non_public_clip_is_judged_from_counts_alone():
    ev = _evidence("ask not what your country can do")
    clip = ev["clips"][0]
    for k in ("reference", "source_text", "ggml_text"):
        del clip[k]
    j = judge_ggml_vs_source(ev)
    assert j.status is Status.PASS


def test_policy_resource_is_versioned():
    p = scoring.load_policy("wer-v1")
    assert p.id == "wer-v1" and len(p.sha256) == 64
    assert p.rules["ggml_vs_source"]["max_corpus_wer_delta"] == 0.05
    with pytest.raises(PolicyInvalid):
        scoring.load_policy("wer-v0")
