"""Every numeric threshold of the decision code, exactly at its limit and just past it.

A rule that is right in the middle of its range and wrong at the edge is wrong: the edge
is where a real run lands when the policy was written to fit it. Each threshold here is
approached with values that are exact in the arithmetic the judge uses (integer word
counts, float64 sums whose quotient is a power of ten, decimals the evidence stores), so
"at the limit" means the limit itself, not a neighbour of it.

Thresholds: wer-v1 (GGML <= source + 0.05; hybrid <= min(GGML, source) + 0.05; per clip
hybrid-vs-GGML <= 0.5), fp32-v1 and fp16-v1 (SNR and cosine minima), placement's cost sum
1 +/- 0.01, the lifecycle canary's N/N, and the classifiers' exit statuses (exactly 3,
exactly 0; 128 + N is a signal).
"""

from __future__ import annotations

import hashlib
import math

import pytest

from verifylib.runtime import contracts
from verifylib.models import compute_plan as placement
from verifylib.evidence import registry as rules
from verifylib.evidence.gates import Judgement, Status
from verifylib.numerics.parity import (FP16_POLICY, FP32_POLICY, cosine_from_sums, policy_record,
                                       snr_from_energies)
from verifylib.evidence.parity.rules import judge_parity
from verifylib.numerics.scoring import corpus_wer, load_policy
from verifylib.evidence.wer.rules import judge_ggml_vs_source, judge_hybrid
from verifylib.evidence.canary import rules as canary_rules
from verifylib.evidence.placement import rules as placement_rules
from verifylib.evidence.canary import schema as canary_schemas

# ----------------------------------------------------------------------------- builders

# whisper.cpp's own lines, spelled here rather than read from verifylib.runtime.contracts: a
# classifier test that builds its input from the constants it checks proves nothing.
MODEL = "/run/fp32/ggml-model.bin"
ENCODER = "/run/fp32/ggml-model-encoder.mlmodelc"
INIT_FAILED = "error: failed to initialize whisper context"
LIFECYCLE_STDERR = (
    "whisper_init_from_file_with_params_no_state: loading model from "
    "'models/for-tests-ggml-tiny.en.bin'\n"
    "whisper_model_load: n_text_layer  = 4\n"
    "aheads_masks_init: tried to set alignment head on text layer 26, but model only has 4 "
    "text layers\n"
    "whisper_init_state: aheads_masks_init() failed for alignment heads masks\n"
    f"{INIT_FAILED}\n").encode()
NEGATIVE_STDERR = (
    f"whisper_init_state: loading Core ML model from '{ENCODER}'\n"
    "whisper_init_state: first run on a device may take a while ...\n"
    f"whisper_init_state: failed to load Core ML model from '{ENCODER}'\n"
    f"{INIT_FAILED}\n").encode()
LOADED_LINE = "whisper_init_state: Core ML model loaded\n"
SYSTEM_INFO = ("system_info: n_threads = 4 / 8 | WHISPER : COREML = {flag} | OPENVINO = 0 | "
               "CPU : NEON = 1 |\n")


def positive_stderr(loaded: int = 1, flag: int = 1, path: str = ENCODER) -> bytes:
    """stderr of a Core ML run with ``loaded`` load-confirmation lines (one per state)."""
    state = (f"whisper_init_state: loading Core ML model from '{path}'\n"
             "whisper_init_state: first run on a device may take a while ...\n")
    return (state * max(loaded, 1) + LOADED_LINE * loaded
            + SYSTEM_INFO.format(flag=flag)).encode()


def ggml_stderr(flag: int = 0) -> bytes:
    """stderr of an ordinary GGML transcription run."""
    return ("whisper_model_load: n_text_layer  = 4\n" + SYSTEM_INFO.format(flag=flag)).encode()


TRANSCRIPT = b" And so my fellow Americans, ask not what your country can do for you.\n"


def run_record(argv, returncode, stderr: bytes, stdout: bytes = b"", signal=None,
               timed_out=False) -> dict:
    """A run record as ``verifylib.runtime.runner.run_record`` writes it, for bytes made here."""
    return {"argv": list(argv), "returncode": returncode, "signal": signal,
            "timed_out": timed_out, "wall_s": 0.25,
            "stdout_sha256": hashlib.sha256(stdout).hexdigest(),
            "stderr_sha256": hashlib.sha256(stderr).hexdigest(),
            "stdout_bytes": len(stdout), "stderr_bytes": len(stderr)}


def coreml_argv(model: str = MODEL, binary: str = "/b/whisper-cli") -> list[str]:
    """A Core ML canary command line (contract-clean: one processor, no -np)."""
    return [binary, "-m", model, "-f", "/a/jfk.wav", "-l", "en", "-p", "1"]


def lifecycle_argv(binary: str = "/b/patched/whisper-cli") -> list[str]:
    """The lifecycle canary's command line with its trigger ``-nfa -dtw large.v3``."""
    return [binary, "-m", "models/for-tests-ggml-tiny.en.bin", "-f", "samples/jfk.wav",
            "-nfa", "-dtw", "large.v3"]


def counts(errors: int, words: int) -> dict:
    """Alignment counts with ``errors`` substitutions over ``words`` reference words."""
    return {"hits": words - errors, "substitutions": errors, "deletions": 0, "insertions": 0}


def wer_clip(cid: str, source: tuple[int, int], ggml: tuple[int, int],
             hybrid: tuple[int, int] | None = None,
             hybrid_vs_ggml: tuple[int, int] = (0, 20)) -> dict:
    """A non-public clip (counts only, no texts), as the WER stage stores it."""
    clip = {"id": cid, "public": False, "source": counts(*source), "ggml": counts(*ggml),
            "source_empty": False, "ggml_empty": False}
    if hybrid is not None:
        clip.update(hybrid=counts(*hybrid), hybrid_vs_ggml=counts(*hybrid_vs_ggml),
                    hybrid_empty=False)
    return clip


def wer_evidence(*clips: dict) -> dict:
    """wer-v1 evidence over ``clips``, with the packaged policy."""
    return {"policy": load_policy("wer-v1").rules, "clips": list(clips)}


def clean_load(_clip) -> Judgement:
    """A hybrid-run classifier for which every run met the four load conditions."""
    return Judgement.passed("exit 0 + four conditions")


def parity_evidence(policy_id: str, signal_energy: float, noise_energy: float, dot: float,
                    candidate_energy: float, kind: str = "program") -> dict:
    """A parity record whose gated measurement carries these float64 sums.

    The stored SNR and cosine are the ones the sums give, so the judge's recheck agrees
    and only the thresholds decide.
    """
    pol = load_policy(policy_id)
    snr = snr_from_energies(signal_energy, noise_energy)
    cos = cosine_from_sums(dot, signal_energy, candidate_energy)
    execution = pol.rules["gated"][f"{kind}_execution"]
    metrics = {"n": 1500 * 384, "signal_energy": signal_energy, "noise_energy": noise_energy,
               "dot": dot, "candidate_energy": candidate_energy,
               "snr_db": "inf" if snr == math.inf else snr, "cosine": cos,
               "max_abs_error": 1e-6, "mean_abs_error": 1e-7, "finite": True}
    return {"policy": policy_record(pol), "variant": pol.rules["variant"], "kind": kind,
            "artifact": {"path": "x.mlpackage", "tree_digest": "a" * 64,
                         "exported_tree_digest": "a" * 64},
            "measurements": [{"input": "fixture", "execution": execution, "metrics": metrics}]}


def plan_evidence(costs) -> dict:
    """placement.plan evidence with one costed operation per share."""
    ops = [{"function": "main", "index": i, "operator": f"ios17.op{i}", "outputs": [f"o{i}"],
            "preferred": "GPU", "supported": ["CPU", "GPU"], "cost": c}
           for i, c in enumerate(costs)]
    return {"variant": "fp32", "mlmodelc_digest": "d" * 64, "compute_units": "ALL",
            "ops": ops, "cost_by_device": {"GPU": sum(costs)}, "cost_sum": sum(costs)}


# ----------------------------------------------------------------------------- wer-v1

# (source errors, GGML errors, reference words) with GGML exactly source + 0.05. The first
# is the brief's example; the others are the cases binary floating point gets wrong
# (e.g. 7/20 + 0.05 == 0.39999999999999997 < 0.4 == 8/20).
AT_LIMIT = [(2, 3, 20), (7, 8, 20), (7, 9, 40), (14, 16, 40), (22, 25, 60), (59, 62, 60),
            (14, 18, 80), (12, 17, 100), (41, 46, 100)]


def test_the_float_arithmetic_really_misses_these_limits():
    # Keeps AT_LIMIT honest: without exact arithmetic most of its cases would fail.
    missed = [(s, g, n) for s, g, n in AT_LIMIT if not g / n <= s / n + 0.05]
    assert len(missed) == len(AT_LIMIT) - 1


@pytest.mark.parametrize("src,ggml,words", AT_LIMIT)
def test_ggml_vs_source_passes_exactly_at_the_limit(src, ggml, words):
    j = judge_ggml_vs_source(wer_evidence(wer_clip("c", (src, words), (ggml, words))))
    assert j.status is Status.PASS, j.detail
    # The figures shown are the float ones, unchanged.
    assert f"GGML {ggml / words:.4f}, HF source {src / words:.4f}" in j.detail


@pytest.mark.parametrize("src,ggml,words", AT_LIMIT)
def test_ggml_vs_source_fails_one_error_past_the_limit(src, ggml, words):
    j = judge_ggml_vs_source(wer_evidence(wer_clip("c", (src, words), (ggml + 1, words))))
    assert j.status is Status.FAIL and "GGML corpus WER above the limit" in j.detail


def test_ggml_vs_source_limit_is_on_the_corpus_sums_not_per_clip():
    # Source 3/10 + 4/10 = 7/20, GGML 6/10 + 2/10 = 8/20: at the corpus limit although
    # one clip alone is far past it.
    ev = wer_evidence(wer_clip("a", (3, 10), (6, 10)), wer_clip("b", (4, 10), (2, 10)))
    assert judge_ggml_vs_source(ev).status is Status.PASS
    ev = wer_evidence(wer_clip("a", (3, 10), (6, 10)), wer_clip("b", (4, 10), (3, 10)))
    assert judge_ggml_vs_source(ev).status is Status.FAIL


def test_ggml_vs_source_just_past_by_the_smallest_step():
    # 7/20 + 1/20 = 160/400; 161/400 is past it by 1/400.
    j = judge_ggml_vs_source(wer_evidence(wer_clip("c", (140, 400), (160, 400))))
    assert j.status is Status.PASS
    j = judge_ggml_vs_source(wer_evidence(wer_clip("c", (140, 400), (161, 400))))
    assert j.status is Status.FAIL and "above the limit" in j.detail


@pytest.mark.parametrize("ggml,src", [((7, 20), (9, 20)), ((9, 20), (7, 20))])
def test_hybrid_passes_exactly_at_min_of_ggml_and_source_plus_delta(ggml, src):
    # The better of the two (7/20) sets the limit, whichever it is: 7/20 + 1/20 = 8/20.
    j = judge_hybrid(wer_evidence(wer_clip("c", src, ggml, hybrid=(8, 20))), clean_load)
    assert j.status is Status.PASS, j.detail
    assert "hybrid 0.4000" in j.detail and "(limit 0.4000)" in j.detail


@pytest.mark.parametrize("ggml,src", [((7, 20), (9, 20)), ((9, 20), (7, 20))])
def test_hybrid_fails_one_error_past_the_limit(ggml, src):
    j = judge_hybrid(wer_evidence(wer_clip("c", src, ggml, hybrid=(9, 20))), clean_load)
    assert j.status is Status.FAIL and "hybrid corpus WER above the limit" in j.detail


def test_hybrid_clip_divergence_exactly_one_half_passes():
    ev = wer_evidence(wer_clip("c", (0, 20), (0, 20), hybrid=(0, 20), hybrid_vs_ggml=(10, 20)))
    j = judge_hybrid(ev, clean_load)
    assert j.status is Status.PASS, j.detail
    assert "largest clip hybrid-vs-GGML WER 0.5000 (c)" in j.detail


@pytest.mark.parametrize("errors,words", [(11, 20), (1001, 2000)])
def test_hybrid_clip_divergence_just_past_one_half_fails(errors, words):
    ev = wer_evidence(wer_clip("a", (0, 20), (0, 20), hybrid=(0, 20), hybrid_vs_ggml=(10, 20)),
                      wer_clip("b", (0, 20), (0, 20), hybrid=(0, 20),
                               hybrid_vs_ggml=(errors, words)))
    j = judge_hybrid(ev, clean_load)
    assert j.status is Status.FAIL and "clip b diverges from GGML beyond 0.5" in j.detail


# wer.hybrid, limit by limit. Each case puts the better of GGML and source at least one
# error below the worse, so the hybrid one error past min(...) + 0.05 is still within
# max(...) + 0.05: a rule that took max (or only one side) passes what must fail.
# (better errors, worse errors, reference words): words a multiple of 20, so the limit
# better/words + 1/20 is a whole number of errors.
HYBRID_AT_LIMIT = [(0, 1, 20), (2, 3, 20), (7, 8, 20), (7, 9, 20), (14, 16, 40), (22, 25, 60),
                   (14, 18, 80), (12, 17, 100), (41, 46, 100)]


def _hybrid_sides(better_side: str, better: int, worse: int, words: int):
    """(source, ggml) count pairs with ``better_side`` holding the better WER."""
    return (((better, words), (worse, words)) if better_side == "source"
            else ((worse, words), (better, words)))


@pytest.mark.parametrize("better_side", ["ggml", "source"])
@pytest.mark.parametrize("better,worse,words", HYBRID_AT_LIMIT)
def test_hybrid_limit_is_the_better_side_plus_delta_exactly(better_side, better, worse, words):
    src, ggml = _hybrid_sides(better_side, better, worse, words)
    at = better + words // 20
    j = judge_hybrid(wer_evidence(wer_clip("c", src, ggml, hybrid=(at, words))), clean_load)
    assert j.status is Status.PASS, j.detail
    assert f"(limit {(better + words // 20) / words:.4f})" in j.detail
    # One error more is past min + 0.05, though not past max + 0.05 (worse >= better + 1).
    assert at + 1 <= worse + words // 20
    j = judge_hybrid(wer_evidence(wer_clip("c", src, ggml, hybrid=(at + 1, words))), clean_load)
    assert j.status is Status.FAIL and "hybrid corpus WER above the limit" in j.detail


def test_hybrid_limit_with_equal_sides():
    # min == max: the limit is still exactly 7/20 + 1/20, no more, no less.
    ev = wer_evidence(wer_clip("c", (7, 20), (7, 20), hybrid=(8, 20)))
    assert judge_hybrid(ev, clean_load).status is Status.PASS
    ev = wer_evidence(wer_clip("c", (7, 20), (7, 20), hybrid=(9, 20)))
    assert judge_hybrid(ev, clean_load).status is Status.FAIL


def test_hybrid_limit_and_value_are_corpus_sums_not_means_of_clips():
    # Clip sizes 10 and 30 words (40 in all); GGML and source perfect: limit 1/20 = 2/40.
    def ev(a, b):
        return wer_evidence(wer_clip("a", (0, 10), (0, 10), hybrid=(a, 10), hybrid_vs_ggml=(a, 10)),
                            wer_clip("b", (0, 30), (0, 30), hybrid=(b, 30), hybrid_vs_ggml=(b, 30)))
    # 1 + 1 errors = 2/40, exactly at the limit; the mean of the clip WERs (1/10 + 1/30) / 2
    # = 1/15 is above it.
    j = judge_hybrid(ev(1, 1), clean_load)
    assert j.status is Status.PASS, j.detail
    # 0 + 3 errors = 3/40, past the limit; the mean (0 + 1/10) / 2 = 1/20 is at it.
    j = judge_hybrid(ev(0, 3), clean_load)
    assert j.status is Status.FAIL and "hybrid corpus WER above the limit" in j.detail


def test_hybrid_limit_takes_min_of_corpus_sums_not_the_best_side_per_clip():
    # GGML wins clip a, source wins clip b; both corpora are 4/40, so the limit is
    # 4/40 + 2/40 = 6/40. The clip-by-clip best (0/40) would set it at 2/40.
    def ev(hyb):
        return wer_evidence(wer_clip("a", (4, 20), (0, 20), hybrid=(hyb, 20)),
                            wer_clip("b", (0, 20), (4, 20), hybrid=(hyb, 20)))
    assert judge_hybrid(ev(3), clean_load).status is Status.PASS
    assert judge_hybrid(ev(4), clean_load).status is Status.FAIL


def _wc(hits=0, substitutions=0, deletions=0, insertions=0) -> dict:
    return {"hits": hits, "substitutions": substitutions, "deletions": deletions,
            "insertions": insertions}


@pytest.mark.parametrize("at,past", [
    # Insertions are errors but not reference words: 8 over 20 words, then 9.
    (_wc(hits=20, insertions=8), _wc(hits=20, insertions=9)),
    # Deletions are errors and reference words: 8 of 20, then 9 of 20.
    (_wc(hits=12, deletions=8), _wc(hits=11, deletions=9)),
    # All three kinds at once: 3 + 3 + 2 = 8 errors over 14 + 3 + 3 = 20 words.
    (_wc(hits=14, substitutions=3, deletions=3, insertions=2),
     _wc(hits=14, substitutions=3, deletions=3, insertions=3)),
])
def test_hybrid_limit_counts_words_as_wer_does(at, past):
    # Limit 7/20 + 1/20 = 8/20 (source 7/20, GGML 9/20).
    def ev(hybrid):
        clip = wer_clip("c", (7, 20), (9, 20), hybrid=(0, 20))
        clip["hybrid"] = hybrid
        return wer_evidence(clip)
    j = judge_hybrid(ev(at), clean_load)
    assert j.status is Status.PASS and "hybrid 0.4000" in j.detail, j.detail
    j = judge_hybrid(ev(past), clean_load)
    assert j.status is Status.FAIL and "hybrid corpus WER above the limit" in j.detail


@pytest.mark.parametrize("at,past", [
    ((1, 2), (2, 3)), ((3, 6), (4, 7)), ((10, 20), (11, 20)), ((500, 1000), (501, 1000)),
])
def test_clip_divergence_limit_is_one_half_exactly(at, past):
    def ev(hvg):
        return wer_evidence(wer_clip("c", (0, 20), (0, 20), hybrid=(0, 20), hybrid_vs_ggml=hvg))
    j = judge_hybrid(ev(at), clean_load)
    assert j.status is Status.PASS, j.detail
    j = judge_hybrid(ev(past), clean_load)
    assert j.status is Status.FAIL and "clip c diverges from GGML beyond 0.5" in j.detail


@pytest.mark.parametrize("at,past", [
    (_wc(hits=20, insertions=10), _wc(hits=20, insertions=11)),
    (_wc(hits=10, deletions=10), _wc(hits=9, deletions=11)),
])
def test_clip_divergence_counts_insertions_and_deletions_as_wer_does(at, past):
    def ev(hvg):
        clip = wer_clip("c", (0, 20), (0, 20), hybrid=(0, 20))
        clip["hybrid_vs_ggml"] = hvg
        return wer_evidence(clip)
    assert judge_hybrid(ev(at), clean_load).status is Status.PASS
    j = judge_hybrid(ev(past), clean_load)
    assert j.status is Status.FAIL and "clip c diverges from GGML beyond 0.5" in j.detail


@pytest.mark.parametrize("position", [0, 1, 2])
def test_clip_divergence_is_judged_on_every_clip_alone(position):
    # One clip at 11/20 among clean ones, wherever it stands: neither the first clip, the
    # least divergent one nor the corpus of all three (11/60) may stand in for it.
    hvg = [(0, 20)] * 3
    hvg[position] = (11, 20)
    ev = wer_evidence(*(wer_clip(f"c{i}", (0, 20), (0, 20), hybrid=(0, 20), hybrid_vs_ggml=h)
                        for i, h in enumerate(hvg)))
    j = judge_hybrid(ev, clean_load)
    assert j.status is Status.FAIL and f"clip c{position} diverges from GGML beyond 0.5" in j.detail


def test_clip_divergence_is_against_ggml_not_against_the_reference():
    # Hybrid 12/20 against the reference (within 12/20 + 1/20: GGML and source are as
    # wrong) but only 8/20 away from GGML: passes. The other way round fails.
    ev = wer_evidence(wer_clip("c", (12, 20), (12, 20), hybrid=(12, 20), hybrid_vs_ggml=(8, 20)))
    j = judge_hybrid(ev, clean_load)
    assert j.status is Status.PASS, j.detail
    ev = wer_evidence(wer_clip("c", (0, 20), (0, 20), hybrid=(1, 20), hybrid_vs_ggml=(11, 20)))
    assert judge_hybrid(ev, clean_load).status is Status.FAIL


class _StoredHybrid:
    """The evidence view ``rules.RULES['wer.hybrid']`` reads (what ``verify`` re-judges):
    the stored document, each clip's stderr, the bound Core ML digest."""

    SHA = "c" * 64

    def __init__(self, clips):
        pol = load_policy("wer-v1")
        self.err = positive_stderr()
        for c in clips:
            c["run"] = dict(run_record(coreml_argv(), 0, self.err),
                            launch={"seq": 0, "binary_sha256": self.SHA})
        self.doc = {"policy": pol.rules, "policy_sha256": pol.sha256,
                    "binary_sha256": self.SHA, "clips": clips}
        self.identities = {"binary.coreml.sha256": self.SHA}

    def json(self, name):
        assert name == "hybrid"
        return self.doc

    def bytes(self, name):
        assert name.startswith("hybrid_stderr_"), name
        return self.err


@pytest.mark.parametrize("hybrid,hvg,status", [
    ((8, 20), (10, 20), Status.PASS),   # both limits met exactly
    ((9, 20), (10, 20), Status.FAIL),   # corpus one error past min(GGML, source) + 0.05
    ((8, 20), (11, 20), Status.FAIL),   # clip one error past 0.5
])
def test_the_registered_rule_applies_both_limits_of_the_packaged_policy(hybrid, hvg, status):
    # Source 7/20, GGML 9/20: limit 8/20. Through the gate's rule, as verify runs it.
    clip = wer_clip("c", (7, 20), (9, 20), hybrid=hybrid, hybrid_vs_ggml=hvg)
    j = rules.judge("wer.hybrid", _StoredHybrid([clip]))
    assert j.status is status, j.detail


# ----------------------------------------------------------------------------- parity

def _first_noise_below(signal: float, limit: float) -> float:
    """The smallest noise energy above 1.0 whose SNR (as the judge computes it) is below
    ``limit``: SNR moves by whole float64 steps, so this is the nearest failing value."""
    noise = 1.0
    for _ in range(1000):
        noise = math.nextafter(noise, 2.0)
        if snr_from_energies(signal, noise) < limit:
            return noise
    raise AssertionError("no failing noise energy within 1000 steps")


@pytest.mark.parametrize("policy_id,signal,limit", [(FP32_POLICY, 1e10, 100.0),
                                                     (FP16_POLICY, 1e4, 40.0)])
def test_snr_exactly_at_the_minimum_passes_and_the_next_value_down_fails(policy_id, signal,
                                                                         limit):
    # signal / noise = 10^(limit/10) exactly, and log10 of a power of ten is exact: the
    # float64 sums give the threshold itself. (cosine = 1: dot = candidate = signal.)
    assert snr_from_energies(signal, 1.0) == limit
    j = judge_parity(parity_evidence(policy_id, signal, 1.0, signal, signal),
                     policy_id, "program")
    assert j.status is Status.PASS, j.detail
    noise = _first_noise_below(signal, limit)
    # The nearest representable SNR below the threshold: nothing lies in between.
    assert snr_from_energies(signal, noise) == math.nextafter(limit, 0.0)
    j = judge_parity(parity_evidence(policy_id, signal, noise, signal, signal),
                     policy_id, "program")
    assert j.status is Status.FAIL and f"below {limit:g} dB" in j.detail


@pytest.mark.parametrize("policy_id,limit", [(FP32_POLICY, 0.9999), (FP16_POLICY, 0.999)])
def test_cosine_exactly_at_the_minimum_passes_and_the_next_value_down_fails(policy_id, limit):
    # With unit energies cosine = dot / sqrt(1 * 1) = dot exactly. For real tensors the
    # SNR minimum already implies cosine >= 1 - 10^(-SNR/10) / 2, far above either cosine
    # minimum, so the cosine limit is only reachable with sums judged one by one, as the
    # rule judges them (noise 0: SNR infinite, cosine alone decides).
    j = judge_parity(parity_evidence(policy_id, 1.0, 0.0, limit, 1.0, "runtime"),
                     policy_id, "runtime")
    assert j.status is Status.PASS, j.detail
    below = math.nextafter(limit, 0.0)
    j = judge_parity(parity_evidence(policy_id, 1.0, 0.0, below, 1.0, "runtime"),
                     policy_id, "runtime")
    assert j.status is Status.FAIL and f"below {limit:g}" in j.detail and "cosine" in j.detail


# ----------------------------------------------------------------------------- placement

@pytest.mark.parametrize("costs", [[0.5, 0.51], [0.5, 0.49], [0.25, 0.25, 0.25, 0.26],
                                   [0.3, 0.3, 0.39]])
def test_cost_sum_exactly_one_plus_or_minus_the_tolerance_passes(costs):
    j = placement_rules.judge_plan(plan_evidence(costs))
    assert j.status is Status.PASS, j.detail


@pytest.mark.parametrize("costs", [[0.5, math.nextafter(0.51, 1.0)],
                                   [0.5, math.nextafter(0.49, 0.0)],
                                   [0.5, 0.5101], [0.5, 0.4899]])
def test_cost_sum_just_past_the_tolerance_fails(costs):
    j = placement_rules.judge_plan(plan_evidence(costs))
    assert j.status is Status.FAIL and "not 1 +/- 0.01" in j.detail


def test_a_nan_cost_does_not_pass_the_sum_check():
    # NaN compares false with everything: "not within the tolerance" must not be "> 0.01".
    j = placement_rules.judge_plan(plan_evidence([0.5, float("nan"), 0.5]))
    assert j.status is Status.FAIL and "not a finite number" in j.detail


# ----------------------------------------------------------------------------- exit codes

@pytest.mark.parametrize("rc,ok", [(2, False), (3, True), (4, False)])
def test_negative_control_needs_exit_exactly_3(rc, ok):
    rec = run_record(coreml_argv(), rc, NEGATIVE_STDERR)
    c = contracts.classify_negative(rec, NEGATIVE_STDERR, b"")
    assert c.ok is ok, c.problems
    if not ok:
        assert c.problems == (f"exit {rc}, expected exactly 3",)


@pytest.mark.parametrize("rc,ok", [(2, False), (3, True), (4, False)])
def test_lifecycle_run_needs_exit_exactly_3(rc, ok):
    rec = run_record(lifecycle_argv(), rc, LIFECYCLE_STDERR)
    c = contracts.classify_lifecycle(rec, LIFECYCLE_STDERR, b"")
    assert c.ok is ok, c.problems
    if not ok:
        assert c.problems == (f"exit {rc}, expected exactly 3",)


@pytest.mark.parametrize("rc,signal,ok", [(-1, "SIGHUP", False), (0, None, True), (1, None, False)])
def test_positive_run_needs_exit_exactly_0(rc, signal, ok):
    err = positive_stderr()
    c = contracts.classify_positive(run_record(coreml_argv(), rc, err, TRANSCRIPT, signal),
                                    err, TRANSCRIPT)
    assert c.ok is ok, c.problems
    if rc == 1:
        assert c.problems == ("exit 1, expected exactly 0",)
    if rc == -1:
        assert c.problems == ("killed by SIGHUP (return code -1)",)


@pytest.mark.parametrize("rc,ok", [(0, True), (1, False)])
def test_ggml_run_needs_exit_exactly_0(rc, ok):
    err = ggml_stderr()
    c = contracts.classify_ggml_positive(run_record(coreml_argv(), rc, err, TRANSCRIPT), err,
                                         TRANSCRIPT)
    assert c.ok is ok, c.problems


@pytest.mark.parametrize("system,rc,name", [
    ("Linux", 127, None), ("Linux", 128, None), ("Linux", 129, "SIGHUP"),
    ("Linux", 134, "SIGABRT"), ("Linux", 192, "SIGRTMAX"), ("Linux", 193, None),
    ("Linux", -1, "SIGHUP"),
    # macOS has no real-time signals: NSIG is 32, so 128 + 31 is its last shell-style death.
    ("Darwin", 128, None), ("Darwin", 129, "SIGHUP"), ("Darwin", 159, "SIGUSR2"),
    ("Darwin", 160, None), ("Darwin", -1, "SIGHUP")])
def test_128_plus_n_is_a_signal_only_for_n_up_to_the_last_signal_of_the_os(system, rc, name):
    assert contracts.decode_signal(rc, system) == name


def test_exit_128_is_an_exit_status_and_129_a_death():
    c = contracts.classify_negative(run_record(coreml_argv(), 128, NEGATIVE_STDERR),
                                    NEGATIVE_STDERR, b"")
    assert "exit 128, expected exactly 3" in c.problems
    rec = run_record(coreml_argv(), 129, NEGATIVE_STDERR, signal="SIGHUP")
    c = contracts.classify_negative(rec, NEGATIVE_STDERR, b"")
    assert c.outcome == "SIGHUP" and "killed by SIGHUP (return code 129)" in c.problems


@pytest.mark.parametrize("loaded,ok", [(0, False), (1, True), (2, False)])
def test_positive_run_needs_exactly_one_load_line(loaded, ok):
    err = positive_stderr(loaded=loaded)
    c = contracts.classify_positive(run_record(coreml_argv(), 0, err, TRANSCRIPT), err, TRANSCRIPT)
    assert c.ok is ok, c.problems
    if loaded == 2:
        assert any("2 lines" in p and "expected exactly 1" in p for p in c.problems)


# ----------------------------------------------------------------------------- lifecycle N/N

PATCHED_SHA, UNPATCHED_SHA = "1" * 64, "2" * 64


def lifecycle_doc(patched_rcs, n: int, unpatched_rcs=(-11,)):
    """A lifecycle A/B document and its stream store, with outcomes classified as the stage
    records them; ``*_rcs`` are the return codes of each side's runs."""
    streams: dict[str, bytes] = {}
    sides = {}
    for side, sha, rcs in (("patched", PATCHED_SHA, patched_rcs),
                           ("unpatched", UNPATCHED_SHA, unpatched_rcs)):
        binary = f"/b/{side}/whisper-cli"
        runs = []
        for i, rc in enumerate(rcs):
            err = LIFECYCLE_STDERR if rc >= 0 else LIFECYCLE_STDERR.replace(INIT_FAILED.encode(), b"")
            sig = contracts.decode_signal(rc, "Linux")  # run_record here names no table
            rec = run_record(lifecycle_argv(binary), rc, err, b"", signal=sig)
            rec["index"] = i
            rec["outcome"] = contracts.classify_lifecycle(rec, err, b"").outcome
            streams[rec["stderr_sha256"]] = err
            streams[rec["stdout_sha256"]] = b""
            runs.append(rec)
        outcomes: dict[str, int] = {}
        for r in runs:
            outcomes[r["outcome"]] = outcomes.get(r["outcome"], 0) + 1
        sides[side] = {"available": True, "binary": binary, "binary_sha256": sha,
                       "runs": runs, "counts": dict(sorted(outcomes.items()))}
    doc = {"schema": canary_schemas.LIFECYCLE_SCHEMA, "runs_per_side": n, "timeout_s": 60.0,
           "trigger": ["-nfa", "-dtw", "large.v3"], "sides": sides}
    return doc, streams.get


@pytest.mark.parametrize("n", [1, 3])
def test_lifecycle_n_of_n_clean_runs_pass(n):
    doc, stream = lifecycle_doc([3] * n, n)
    j = canary_rules.judge_lifecycle(doc, stream)
    assert j.status is Status.PASS, j.detail
    assert f"{n}/{n} runs exit 3 with both markers" in j.detail


@pytest.mark.parametrize("bad_rc", [2, 4, -6])
def test_lifecycle_one_unclean_run_of_n_fails(bad_rc):
    doc, stream = lifecycle_doc([3, 3, bad_rc], 3)
    j = canary_rules.judge_lifecycle(doc, stream)
    assert j.status is Status.FAIL and "1/3 runs not clean" in j.detail and "run 2" in j.detail


@pytest.mark.parametrize("recorded", [2, 4])
def test_lifecycle_needs_exactly_n_runs(recorded):
    doc, stream = lifecycle_doc([3] * recorded, 3)
    j = canary_rules.judge_lifecycle(doc, stream)
    assert j.status is Status.FAIL and f"patched: {recorded} runs recorded, expected 3" in j.detail


def test_lifecycle_zero_runs_per_side_is_malformed():
    doc, stream = lifecycle_doc([], 0)
    j = canary_rules.judge_lifecycle(doc, stream)
    assert j.status is Status.FAIL and "malformed runs_per_side 0" in j.detail


def test_wer_helpers_agree_with_the_displayed_float():
    # The decision moved to exact rationals; the float shown must still be the same number.
    assert corpus_wer([counts(7, 20)]) == 0.35
