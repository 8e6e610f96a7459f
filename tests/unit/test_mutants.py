"""Tests written to kill the mutants ``benchmarks/mutation.py`` found surviving.

Each test pins a decision (or the exact words of a refusal, which an auditor reads in the
report and the receipt) that a one-token change of the decision code would alter without
any earlier test noticing. Grouped by module: the run classifiers, the verdict, the
wer-v1 judges, the parity rule and its statistics, the placement rule.
"""

from __future__ import annotations

import math

import pytest

from tests.unit.test_boundaries import (ENCODER, LIFECYCLE_STDERR, MODEL, NEGATIVE_STDERR, TRANSCRIPT,
                                   clean_load, coreml_argv, counts, ggml_stderr, lifecycle_argv,
                                   parity_evidence, plan_evidence, positive_stderr, run_record,
                                   wer_clip, wer_evidence)
from verifylib.runtime import contracts
from verifylib.evidence import gates
from verifylib.models import compute_plan as placement
from verifylib.errors import ContractBroken, PolicyInvalid
from verifylib.runtime.contracts import check_cli_argv
from verifylib.evidence.gates import Judgement, Status, Verdict
from verifylib.numerics.parity import FP32_POLICY, as_float, cosine_from_sums, snr_from_energies
from verifylib.evidence.parity.rules import judge_parity, recheck_measurement
from verifylib.numerics.scoring import (WordCounts, corpus_wer, count_words, exact_corpus_wer,
                                        policy_fraction)
from verifylib.evidence.wer.rules import judge_ggml_vs_source, judge_hybrid
from verifylib.evidence.placement import rules as placement_rules

# ============================================================================ contracts

LOADED = "whisper_init_state: Core ML model loaded"
FAILED_LINE = "whisper_init_state: failed to load Core ML model"
LOADING = "whisper_init_state: loading Core ML model from '"
INIT_LINE = "error: failed to initialize whisper context"
STDERR_NOT_OWN = "stderr is not this run's stream (SHA-256 differs from the record)"
STDOUT_NOT_OWN = "stdout is not this run's stream (SHA-256 differs from the record)"
OTHER_ENCODER = "/old-run/ggml-base.en-encoder.mlmodelc"


def _clean(kind: str):
    """(classifier, argv, return code, stderr, stdout, outcome) of a clean run of ``kind``."""
    return {
        "negative": (contracts.classify_negative, coreml_argv(), 3, NEGATIVE_STDERR, b"",
                     "exit 3 + load-failure + init-failure"),
        "positive": (contracts.classify_positive, coreml_argv(), 0, positive_stderr(), TRANSCRIPT,
                     "exit 0 + four conditions"),
        "lifecycle": (contracts.classify_lifecycle, lifecycle_argv(), 3, LIFECYCLE_STDERR, b"",
                      "exit 3 + both markers"),
        "ggml": (contracts.classify_ggml_positive, coreml_argv(), 0, ggml_stderr(), TRANSCRIPT,
                 "exit 0 + transcript"),
    }[kind]


KINDS = ["negative", "positive", "lifecycle", "ggml"]


@pytest.mark.parametrize("kind", KINDS)
def test_a_clean_run_passes_with_its_label(kind):
    classify, argv, rc, err, out, label = _clean(kind)
    c = classify(run_record(argv, rc, err, out), err, out)
    assert (c.ok, c.outcome, c.problems, c.detail) == (True, label, (), label)
    assert repr(c) == f"Classification(ok=True, outcome={label!r}, problems=())"


@pytest.mark.parametrize("kind", KINDS)
def test_a_record_that_is_not_a_mapping_is_malformed(kind):
    classify = _clean(kind)[0]
    c = classify(["argv", "returncode"], b"", b"")
    assert (c.ok, c.outcome, c.problems) == (False, "malformed", ("run record is not a mapping",))
    assert c.detail == "run record is not a mapping"


@pytest.mark.parametrize("kind", KINDS)
def test_a_missing_stderr_stream_is_malformed(kind):
    classify, argv, rc, err, out, _ = _clean(kind)
    c = classify(run_record(argv, rc, err, out), None, out)
    assert (c.ok, c.outcome, c.problems) == (False, "malformed", ("stderr stream missing",))


@pytest.mark.parametrize("kind", KINDS)
def test_the_streams_must_be_the_runs_own(kind):
    classify, argv, rc, err, out, _ = _clean(kind)
    rec = run_record(argv, rc, err, out)
    c = classify(rec, err, out + b"another run's transcript\n")
    assert c.problems == (STDOUT_NOT_OWN,)
    c = classify(rec, err + b"\n", out)
    assert c.problems[0] == STDERR_NOT_OWN
    # Without a stdout to check, only stderr is bound (record_problems' contract too).
    assert contracts.record_problems(rec, err, None) == []


@pytest.mark.parametrize("kind", KINDS)
def test_undecodable_stderr_bytes_are_read_not_refused(kind):
    # A binary log byte (a path in a foreign encoding) must not turn a clean run into a crash.
    classify, argv, rc, err, out, label = _clean(kind)
    err = b"\xff\xfe garbled prefix\n" + err
    c = classify(run_record(argv, rc, err, out), err, out)
    assert c.ok and c.outcome == label


def test_outcome_labels_of_unclean_runs():
    c = contracts.classify_negative(run_record(coreml_argv(), 3, b""), b"", b"")
    assert c.outcome == "exit 3, marker missing"
    assert c.problems == (f"missing on stderr: {FAILED_LINE!r}", f"missing on stderr: {INIT_LINE!r}")
    assert c.detail == "; ".join(c.problems)
    c = contracts.classify_lifecycle(run_record(lifecycle_argv(), 3, b""), b"", b"")
    assert c.outcome == "exit 3, marker missing"
    assert c.problems == ("missing on stderr: 'whisper_init_state: aheads_masks_init() failed for "
                          "alignment heads masks'", f"missing on stderr: {INIT_LINE!r}")
    err = positive_stderr(flag=0)
    c = contracts.classify_positive(run_record(coreml_argv(), 0, err), err, b"")
    assert c.outcome == "exit 0, condition failed"
    assert c.problems == ("system_info shows COREML = 0: a build without Core ML",)
    c = contracts.classify_positive(run_record(coreml_argv(), 1, err), err, b"")
    assert c.outcome == "exit 1"
    err = ggml_stderr(flag=1)
    c = contracts.classify_ggml_positive(run_record(coreml_argv(), 0, err, TRANSCRIPT), err,
                                         TRANSCRIPT)
    assert (c.outcome, c.problems) == ("exit 0, condition failed",
                                       ("no 'system_info:' line with 'COREML = 0' on stderr",))
    c = contracts.classify_ggml_positive(run_record(coreml_argv(), 1, ggml_stderr(), TRANSCRIPT),
                                         ggml_stderr(), TRANSCRIPT)
    assert (c.outcome, c.problems) == ("exit 1", ("exit 1, expected exactly 0",))


def test_a_crash_and_a_timeout_are_named_as_such():
    err = LIFECYCLE_STDERR.replace(INIT_LINE.encode(), b"")
    c = contracts.classify_lifecycle(run_record(lifecycle_argv(), -11, err, signal="SIGSEGV"),
                                     err, b"")
    assert c.outcome == "SIGSEGV"
    assert c.problems == ("killed by SIGSEGV (return code -11)", f"missing on stderr: {INIT_LINE!r}")
    rec = run_record(lifecycle_argv(), None, LIFECYCLE_STDERR, timed_out=True)
    c = contracts.classify_lifecycle(rec, LIFECYCLE_STDERR, b"")
    assert (c.outcome, c.problems) == ("timeout", ("timed out (killed, no exit status)",))


def test_termination_reads_the_return_code_not_the_recorded_signal():
    assert contracts.termination({"timed_out": False, "returncode": 3, "signal": None}) == ("exit 3", [])
    assert contracts.termination({"timed_out": True, "returncode": None}) == ("timeout", [])
    assert contracts.termination({"timed_out": True, "returncode": 3}) == (
        "timeout", ["a timed-out run cannot have return code 3"])
    assert contracts.termination({"timed_out": "no", "returncode": 3, "signal": None}) == (
        "exit 3", ["malformed timed_out flag 'no'"])
    assert contracts.termination({"timed_out": False, "returncode": None}) == (
        "no exit status", ["no return code recorded (None)"])
    # A bool is no return code, although True == 1 in Python.
    assert contracts.termination({"timed_out": False, "returncode": True}) == (
        "no exit status", ["no return code recorded (True)"])
    assert contracts.termination({"timed_out": False, "returncode": -11, "signal": None}) == (
        "SIGSEGV", ["recorded signal None disagrees with return code -11 (SIGSEGV in the Linux "
                    "signal table)"])
    assert contracts.termination({"timed_out": False, "returncode": 3, "signal": "SIGSEGV"}) == (
        "exit 3", ["recorded signal 'SIGSEGV' disagrees with return code 3 (a normal exit)"])


def test_record_problems_collects_integrity_and_termination_problems():
    assert contracts.record_problems("not a record", b"") == ["run record is not a mapping"]
    rec = run_record(coreml_argv(), -6, NEGATIVE_STDERR, b"")
    abrt = "recorded signal None disagrees with return code -6 (SIGABRT in the Linux signal table)"
    assert contracts.record_problems(rec, NEGATIVE_STDERR, b"") == [abrt]
    assert contracts.record_problems(rec, b"other", b"x") == [STDERR_NOT_OWN, STDOUT_NOT_OWN, abrt]
    rec["argv"] = coreml_argv() + ["-np"]
    assert contracts.record_problems(rec, NEGATIVE_STDERR, b"")[0] == (
        "argv breaks the runtime contract: whisper-cli flag -np is forbidden in gate runs")


@pytest.mark.parametrize("argv,shown", [([], "[]"), ("whisper-cli -m x.bin", "'whisper-cli -m x.bin'"),
                                        (["whisper-cli", 3], "['whisper-cli', 3]"), (None, "None")])
def test_a_malformed_argv_is_named(argv, shown):
    rec = run_record(coreml_argv(), 3, NEGATIVE_STDERR)
    rec["argv"] = argv
    problems = contracts.record_problems(rec, NEGATIVE_STDERR, b"")
    assert problems == [f"malformed argv {shown}"]
    # The negative control reads the Core ML path from -m; without an argv it says so.
    c = contracts.classify_negative(rec, NEGATIVE_STDERR, b"")
    assert c.problems == (f"malformed argv {shown}", "argv has no -m model argument")


def test_the_load_failure_line_must_name_this_runs_derived_path():
    err = NEGATIVE_STDERR.replace(ENCODER.encode(), OTHER_ENCODER.encode())
    c = contracts.classify_negative(run_record(coreml_argv(), 3, err), err, b"")
    assert c.problems == (f"the load-failure line names {OTHER_ENCODER!r}, not "
                          f"coreml_encoder_path(-m) {ENCODER!r}",)
    assert c.outcome == "exit 3, marker missing"


def test_a_negative_control_that_also_loaded_fails():
    err = NEGATIVE_STDERR + (LOADED + "\n").encode()
    c = contracts.classify_negative(run_record(coreml_argv(), 3, err), err, b"")
    assert c.problems == (f"present on stderr: {LOADED!r}",)


@pytest.mark.parametrize("line", [
    # A line cut before its closing quote names no path.
    f"{LOADING}{ENCODER}?",
    # Two log lines glued together (no newline between them), either order: the path is
    # everything after the first marker, which is not the derived one.
    f"{LOADING}{ENCODER}'{LOADING}{OTHER_ENCODER}'",
    f"{LOADING}{OTHER_ENCODER}'{LOADING}{ENCODER}'",
])
def test_a_loading_line_whose_path_is_not_exactly_the_derived_one_fails(line):
    err = (line + "\n" + LOADED + "\n" + "system_info: WHISPER : COREML = 1 |\n").encode()
    c = contracts.classify_positive(run_record(coreml_argv(), 0, err), err, b"")
    assert not c.ok
    assert len(c.problems) == 1 and c.problems[0].startswith("the loading line names ")
    assert c.problems[0].endswith(f", not coreml_encoder_path(-m) {ENCODER!r}")


def test_positive_run_conditions_each_named():
    no_info = positive_stderr().replace(b"system_info", b"sys_info")
    c = contracts.classify_positive(run_record(coreml_argv(), 0, no_info), no_info, b"")
    assert c.problems == ("no 'system_info:' line with 'COREML = 1' on stderr",)
    no_field = positive_stderr().replace(b"COREML = 1", b"CORE = 1")
    c = contracts.classify_positive(run_record(coreml_argv(), 0, no_field), no_field, b"")
    assert c.problems == ("no 'system_info:' line with 'COREML = 1' on stderr",)
    assert contracts.system_info_coreml(no_field.decode()) is None
    loaded_only = (LOADED + "\n" + "system_info: WHISPER : COREML = 1 |\n").encode()
    c = contracts.classify_positive(run_record(coreml_argv(), 0, loaded_only), loaded_only, b"")
    assert c.problems == (f"missing on stderr: {LOADING!r}",)
    fallback = positive_stderr() + f"{FAILED_LINE} from '{ENCODER}'\n".encode()
    c = contracts.classify_positive(run_record(coreml_argv(), 0, fallback), fallback, b"")
    assert c.problems == (f"present on stderr: {FAILED_LINE!r}",)
    stale = positive_stderr(path=OTHER_ENCODER)
    c = contracts.classify_positive(run_record(coreml_argv(), 0, stale), stale, b"")
    assert c.problems == (f"the loading line names {OTHER_ENCODER!r}, not coreml_encoder_path(-m) "
                          f"{ENCODER!r}",)
    two = positive_stderr(loaded=2)
    c = contracts.classify_positive(run_record(coreml_argv(), 0, two), two, b"")
    assert c.problems == (f"2 lines {LOADED!r} in one run, expected exactly 1 (one processor)",)
    none = positive_stderr(loaded=0)
    c = contracts.classify_positive(run_record(coreml_argv(), 0, none), none, b"")
    assert c.problems == (f"missing on stderr: {LOADED!r}",)
    no_m = ["/b/whisper-cli", "-f", "/a/jfk.wav"]
    err = positive_stderr()
    c = contracts.classify_positive(run_record(no_m, 0, err), err, b"")
    assert c.problems == ("argv has no -m model argument",)


def test_lifecycle_conditions_each_named():
    plain = ["/b/whisper-cli", "-m", "models/for-tests-ggml-tiny.en.bin", "-f", "samples/jfk.wav"]
    c = contracts.classify_lifecycle(run_record(plain, 3, LIFECYCLE_STDERR), LIFECYCLE_STDERR, b"")
    assert c.problems == ("argv lacks the lifecycle trigger (-nfa -dtw <preset>)",)
    warned = (b"whisper_init_with_params_no_state: dtw_token_timestamps is not supported with "
              b"flash_attn - disabling\n" + LIFECYCLE_STDERR)
    c = contracts.classify_lifecycle(run_record(lifecycle_argv(), 3, warned), warned, b"")
    assert c.problems == ("present on stderr: 'dtw_token_timestamps is not supported with "
                          "flash_attn - disabling'",)


def test_ggml_run_conditions_each_named():
    err = ggml_stderr()
    c = contracts.classify_ggml_positive(run_record(coreml_argv(), 0, err, b" \n"), err, b" \n")
    assert c.problems == ("empty transcript on stdout",)
    c = contracts.classify_ggml_positive(run_record(coreml_argv(), 0, err, b""), err, None)
    assert c.problems == ("empty transcript on stdout",)
    no_info = b"whisper_model_load: n_text_layer  = 4\n"
    c = contracts.classify_ggml_positive(run_record(coreml_argv(), 0, no_info, TRANSCRIPT),
                                         no_info, TRANSCRIPT)
    assert c.problems == ("no 'system_info:' line with 'COREML = 0' on stderr",)
    for line in (f"{LOADING}{ENCODER}'", LOADED):
        e = err + (line + "\n").encode()
        c = contracts.classify_ggml_positive(run_record(coreml_argv(), 0, e, TRANSCRIPT), e,
                                             TRANSCRIPT)
        assert c.problems == ("Core ML lines in a GGML run",), line


def test_processor_and_forbidden_flags_in_every_spelling():
    base = ["/b/whisper-cli", "-m", MODEL, "-f", "/a/jfk.wav"]
    check_cli_argv(base + ["-p", "1"])
    check_cli_argv(base + ["--processors=1"])
    with pytest.raises(ContractBroken) as e:
        check_cli_argv(base + ["-p"])
    assert str(e.value) == "whisper-cli -p '': gate runs use exactly one processor"
    # The value is all that follows the first '=': "1=1" is not "1".
    with pytest.raises(ContractBroken, match=r"whisper-cli -p '1=1'"):
        check_cli_argv(base + ["-p=1=1"])
    # "-p=2" gives 2 processors, whatever the next argument says.
    with pytest.raises(ContractBroken, match=r"whisper-cli -p '2'"):
        check_cli_argv(base + ["-p=2", "1"])
    with pytest.raises(ContractBroken) as e:
        check_cli_argv(base + ["--audio-ctx=750=x"])
    assert str(e.value) == "whisper-cli flag --audio-ctx is forbidden in gate runs"


@pytest.mark.parametrize("arg,derived", [
    ("ggml-model", "ggml-model-encoder.mlmodelc"),          # no dot: nothing is cut
    ("a.bin", "a-encoder.mlmodelc"),                        # the dot at index 1
    ("a-q5_0.bin", "a-encoder.mlmodelc"),                   # the dash at index 1
    ("ggml-tiny.bin", "ggml-tiny-encoder.mlmodelc"),        # five bytes, but no q
    ("ggml-xx_yyy.bin", "ggml-xx_yyy-encoder.mlmodelc"),    # '_' fourth, but not five bytes
    ("ggml-base.en-q5_0.bin", "ggml-base.en-encoder.mlmodelc"),
])
def test_coreml_encoder_path_edges(arg, derived):
    assert contracts.coreml_encoder_path(arg) == derived


def test_coreml_encoder_path_takes_the_argument_string_only():
    with pytest.raises(TypeError) as e:
        contracts.coreml_encoder_path(None)
    assert str(e.value) == "model_arg must be the -m argument string"


def test_model_arg_keeps_everything_after_the_first_equals_sign():
    assert contracts.model_arg_of(["w", "--model=dir=x/ggml.bin"]) == "dir=x/ggml.bin"


@pytest.mark.parametrize("argv", [
    tuple(lifecycle_argv()),                                   # not the recorded list form
    lifecycle_argv()[:-1] + [""],                              # an empty preset
    lifecycle_argv()[:-1],                                     # -dtw is the last argument
    lifecycle_argv()[:-1] + ["-bs", "1"],                      # -dtw followed by a flag
])
def test_lifecycle_trigger_needs_a_preset_after_dtw(argv):
    assert contracts.has_lifecycle_trigger(argv) is False


# ============================================================================ gates

def test_verdict_and_worst_refuse_missing_input_by_name():
    with pytest.raises(ValueError) as e:
        gates.verdict({gates.GATES[0].id: Status.PASS})
    assert str(e.value) == ("statuses missing for gates: "
                            + ", ".join(g.id for g in gates.GATES[1:]))
    with pytest.raises(ValueError) as e:
        gates.worst([])
    assert str(e.value) == "no verdicts"


def test_worst_is_by_severity():
    assert gates.worst(["REJECTED", "ADMISSIBLE"]) is Verdict.REJECTED
    assert gates.worst([Verdict.INCOMPLETE, Verdict.ADMISSIBLE, Verdict.INCOMPLETE]) is Verdict.INCOMPLETE
    assert gates.worst(["ADMISSIBLE"]) is Verdict.ADMISSIBLE


# ============================================================================ scoring

def test_corpus_wer_edges():
    assert corpus_wer([]) == 0.0
    assert corpus_wer([counts(1, 1)]) == 1.0
    assert corpus_wer([WordCounts(0, 0, 0, 0)]) == 0.0
    only_insertions = WordCounts(0, 0, 0, 3)
    assert corpus_wer([only_insertions]) == math.inf
    assert exact_corpus_wer([]) == 0 and exact_corpus_wer([only_insertions]) == math.inf
    assert exact_corpus_wer([counts(1, 1)]) == 1
    assert exact_corpus_wer([counts(7, 20), counts(1, 20)]) * 5 == 1


def test_policy_fraction_is_the_decimal_written():
    assert policy_fraction(0.05) * 20 == 1
    assert policy_fraction(1) == 1
    for bad in (True, "0.05", float("nan"), float("inf"), None):
        with pytest.raises(PolicyInvalid, match="is not a finite number"):
            policy_fraction(bad)


def _public_clip(cid, reference, source_text, ggml_text, hybrid_text=None):
    clip = {"id": cid, "public": True, "reference": reference, "source_text": source_text,
            "ggml_text": ggml_text, "source": count_words(reference, source_text).as_dict(),
            "ggml": count_words(reference, ggml_text).as_dict(),
            "source_empty": not source_text.strip(), "ggml_empty": not ggml_text.strip()}
    if hybrid_text is not None:
        clip.update(hybrid_text=hybrid_text, hybrid=count_words(reference, hybrid_text).as_dict(),
                    hybrid_vs_ggml=count_words(ggml_text, hybrid_text).as_dict(),
                    hybrid_empty=not hybrid_text.strip())
    return clip


TEXT = "ask not what your country can do"


def test_ggml_vs_source_figures_and_refusals_word_for_word():
    j = judge_ggml_vs_source(wer_evidence(wer_clip("a", (2, 20), (3, 20))))
    assert j == Judgement(Status.PASS, "corpus WER vs references: GGML 0.1500, HF source 0.1000 "
                                       "(limit 0.1500) over 1 clip(s)")
    j = judge_ggml_vs_source(wer_evidence(wer_clip("a", (2, 20), (4, 20))))
    assert j == Judgement(Status.FAIL, "GGML corpus WER above the limit; corpus WER vs references: "
                                       "GGML 0.2000, HF source 0.1000 (limit 0.1500) over 1 clip(s)")
    ev = wer_evidence(wer_clip("a", (0, 20), (0, 20)))
    ev["policy"] = dict(ev["policy"], id="wer-v0")
    j = judge_ggml_vs_source(ev)
    assert j.status is Status.FAIL and "'wer-v0'" in j.detail
    assert judge_ggml_vs_source(wer_evidence()) == Judgement(Status.FAIL, "no fixture was transcribed")


def test_every_tampered_public_clip_is_named():
    # The second clip is honest: a rule that kept only the last clip's problems would pass.
    bad = _public_clip("a", TEXT, TEXT, TEXT)
    bad["ggml_text"] = "garbage words only"
    bad["ggml_empty"] = True
    good = _public_clip("b", TEXT, TEXT, TEXT)
    j = judge_ggml_vs_source(wer_evidence(bad, good))
    assert j == Judgement(Status.FAIL, "a: stored ggml counts do not match its texts; "
                                       "a: stored ggml_empty flag contradicts the text")


def test_hybrid_figures_and_refusals_word_for_word():
    ev = wer_evidence(wer_clip("a", (2, 20), (3, 20), hybrid=(2, 20), hybrid_vs_ggml=(2, 20)),
                      wer_clip("b", (0, 20), (1, 20), hybrid=(1, 20), hybrid_vs_ggml=(3, 20)))
    j = judge_hybrid(ev, clean_load)
    assert j == Judgement(Status.PASS, "corpus WER vs references: hybrid 0.0750, GGML 0.1000, source "
                                       "0.0500 (limit 0.1000); largest clip hybrid-vs-GGML WER 0.1500 "
                                       "(b) over 2 clip(s)")
    ev["clips"][0]["hybrid"] = counts(6, 20)
    j = judge_hybrid(ev, clean_load)
    assert j == Judgement(Status.FAIL, "hybrid corpus WER above the limit; corpus WER vs references: "
                                       "hybrid 0.1750, GGML 0.1000, source 0.0500 (limit 0.1000); "
                                       "largest clip hybrid-vs-GGML WER 0.1500 (b) over 2 clip(s)")
    ev["clips"][1]["hybrid_vs_ggml"] = counts(11, 20)
    j = judge_hybrid(ev, clean_load)
    assert j.status is Status.FAIL
    assert j.detail.startswith("clip b diverges from GGML beyond 0.5; corpus WER vs "
                               "references: hybrid 0.1750")
    assert "largest clip hybrid-vs-GGML WER 0.5500 (b)" in j.detail


def test_hybrid_refuses_empty_transcripts_and_failed_loads():
    ev = wer_evidence(wer_clip("a", (0, 20), (0, 20), hybrid=(0, 20)),
                      wer_clip("b", (0, 20), (0, 20), hybrid=(0, 20)))
    ev["clips"][1]["hybrid_empty"] = True
    j = judge_hybrid(ev, clean_load)
    assert j == Judgement(Status.FAIL, "hybrid transcript empty for ['b'] (a silent Core ML "
                                       "prediction failure)")
    ev["clips"][1]["hybrid_empty"] = False
    seen = []

    def fails_b(clip):
        seen.append(clip["id"])
        return Judgement.of(clip["id"] != "b", "exit 0, condition failed")
    j = judge_hybrid(ev, fails_b)
    assert seen == ["a", "b"]
    assert j == Judgement(Status.FAIL, "b: hybrid run fails the load conditions: exit 0, condition failed")
    ev["policy"] = dict(ev["policy"], id="wer-v2")
    j = judge_hybrid(ev, clean_load)
    assert j.status is Status.FAIL and "'wer-v2'" in j.detail


def test_hybrid_recomputes_public_clip_counts():
    clip = _public_clip("a", TEXT, TEXT, TEXT, hybrid_text=TEXT)
    j = judge_hybrid(wer_evidence(clip), clean_load)
    assert j.status is Status.PASS
    clip["hybrid_text"] = "ask not"
    clip["hybrid_empty"] = True
    j = judge_hybrid(wer_evidence(clip, _public_clip("b", TEXT, TEXT, TEXT, TEXT)),
                     clean_load)
    assert j == Judgement(Status.FAIL, "a: stored hybrid counts do not match its texts; a: stored "
                                       "hybrid_vs_ggml counts do not match its texts; a: stored "
                                       "hybrid_empty flag contradicts the text")


def test_hybrid_worst_clip_is_chosen_by_exact_wer():
    # 1/3 vs 333/1000: exact rationals pick clip a (1/3 > 0.333), and so must the report.
    ev = wer_evidence(wer_clip("a", (0, 3), (0, 3), hybrid=(0, 3), hybrid_vs_ggml=(1, 3)),
                      wer_clip("b", (0, 1000), (0, 1000), hybrid=(0, 1000),
                               hybrid_vs_ggml=(333, 1000)))
    j = judge_hybrid(ev, clean_load)
    assert j.status is Status.PASS and "largest clip hybrid-vs-GGML WER 0.3333 (a)" in j.detail


# ============================================================================ parity

def test_statistics_refuse_impossible_sums():
    assert math.isnan(snr_from_energies(-1.0, 1.0))
    assert math.isnan(snr_from_energies(1.0, -1.0))
    assert math.isnan(snr_from_energies(math.inf, 1.0))
    assert math.isnan(snr_from_energies(1.0, math.inf))
    # No signal and an unknown error: unknown, not "no signal at all" (-inf).
    assert math.isnan(snr_from_energies(0.0, math.nan))
    assert snr_from_energies(10.0, 1.0) == 10.0
    assert math.isnan(cosine_from_sums(math.inf, 1.0, 1.0))
    assert math.isnan(cosine_from_sums(1.0, 1.0, 0.0))
    assert math.isnan(cosine_from_sums(1.0, 1.0, -1.0))
    assert cosine_from_sums(0.5, 0.5, 0.5) == 1.0
    assert cosine_from_sums(0.25, 0.5, 0.125) == 1.0


def test_as_float_reads_only_numbers_and_the_three_strings():
    assert as_float("-inf") == -math.inf and as_float("inf") == math.inf and as_float(2) == 2.0
    for bad in ("12", True, None, [1.0]):
        with pytest.raises(ValueError, match="not a number"):
            as_float(bad)


def _measurement(execution, signal, noise, dot, cand, inp="fixture"):
    return {"input": inp, "execution": execution,
            "metrics": parity_evidence(FP32_POLICY, signal, noise, dot, cand)["measurements"][0]["metrics"]}


def test_parity_figures_word_for_word():
    ev = parity_evidence(FP32_POLICY, 1e10, 1.0, 1e10, 1e10)
    ev["measurements"] += [_measurement("float64", 1.0, 0.0, 1.0, 1.0),
                           _measurement("float32", 0.0, 1.0, 0.0, 1.0, inp="random")]
    j = judge_parity(ev, FP32_POLICY, "program")
    assert j == Judgement(Status.PASS, "fp32-v1, fixture/float32: SNR 100.00 dB (min 100), cosine "
                                       "1.000000000 (min 0.9999), max |err| 1e-06, mean |err| 1e-07; "
                                       "beside it: fixture/float64: SNR inf dB, cosine 1.000000000; "
                                       "random/float32: SNR -inf dB, cosine nan")


def test_parity_failures_word_for_word():
    ev = parity_evidence(FP32_POLICY, 1e8, 1.0, 0.5e8, 1e8)
    ev["measurements"][0]["metrics"]["finite"] = False
    j = judge_parity(ev, FP32_POLICY, "program")
    assert j == Judgement(Status.FAIL, "the candidate output holds non-finite values; SNR 80.00 dB "
                                       "below 100 dB; cosine 0.500000000 below 0.9999 — fp32-v1, "
                                       "fixture/float32: SNR 80.00 dB (min 100), cosine 0.500000000 "
                                       "(min 0.9999), max |err| 1e-06, mean |err| 1e-07")
    del ev["measurements"][0]["metrics"]["finite"]
    j = judge_parity(ev, FP32_POLICY, "program")
    assert "the candidate output holds non-finite values" in j.detail


def test_parity_refusals_word_for_word():
    ev = parity_evidence(FP32_POLICY, 1e10, 1.0, 1e10, 1e10)
    j = judge_parity(ev, "fp64-v9", "program")
    assert j.status is Status.FAIL and j.detail.startswith("unknown policy 'fp64-v9'")
    j = judge_parity(ev, "fp16-v1", "program")
    assert j == Judgement(Status.FAIL, "evidence was measured under policy 'fp32-v1', not fp16-v1")
    forged = dict(ev, policy=dict(ev["policy"], sha256="0" * 64))
    j = judge_parity(forged, FP32_POLICY, "program")
    assert j == Judgement(Status.FAIL, f"the stored fp32-v1 record differs from the packaged resource "
                                       f"(sha256 {'0' * 64} vs {ev['policy']['sha256']})")
    j = judge_parity(dict(ev, variant="fp16"), FP32_POLICY, "program")
    assert j == Judgement(Status.FAIL, "variant 'fp16' is not 'fp32'")
    j = judge_parity({k: v for k, v in ev.items() if k != "measurements"}, FP32_POLICY,
                     "program")
    assert j == Judgement(Status.FAIL, "expected exactly one fixture/float32 measurement, found 0")
    moved = dict(ev, artifact={"tree_digest": "b" * 64, "exported_tree_digest": "a" * 64})
    j = judge_parity(moved, FP32_POLICY, "program")
    assert j.status is Status.FAIL
    assert j.detail.startswith(f"the measured artifact (tree digest {'b' * 64}) is not "
                               f"the exported one ({'a' * 64}) — fp32-v1")


def test_recheck_names_the_measurement_and_the_figure():
    m = _measurement("float32", 1e10, 1.0, 1e10, 1e10)
    m["metrics"].update(snr_db=150.0, cosine=0.5)
    snr, cos, problems = recheck_measurement(m)
    assert (snr, cos) == (100.0, 1.0)
    assert problems == ["fixture/float32: stored SNR 150.0 disagrees with its sums (100.0)",
                        "fixture/float32: stored cosine 0.5 disagrees with its sums (1.0)"]
    # A NaN stored for a NaN statistic agrees; a NaN stored for a number does not.
    nan = _measurement("float32", 0.0, 0.0, 0.0, 1.0)
    assert math.isnan(nan["metrics"]["snr_db"]) and recheck_measurement(nan)[2] == []
    m = _measurement("float32", 1e10, 1.0, 1e10, 1e10)
    m["metrics"]["snr_db"] = "nan"
    assert recheck_measurement(m)[2] == [
        "fixture/float32: stored SNR nan disagrees with its sums (100.0)"]


# ============================================================================ placement

def test_plan_rule_words_for_word():
    ev = plan_evidence([0.5, 0.51])
    ev["ops"][1]["preferred"] = "CPU"
    ev["cost_by_device"] = {"GPU": 0.5, "CPU": 0.51}
    j = placement_rules.judge_plan(ev)
    assert j == Judgement(Status.PASS, "2 operations planned (2 costed, sum 1.0100); cost share by "
                                       "preferred device: CPU 50.5%, GPU 49.5%")
    assert placement_rules.judge_plan({"ops": []}) == Judgement(Status.FAIL, "the plan lists no operations")
    ev = plan_evidence([0.5])
    ev["ops"][0]["cost"] = None
    assert placement_rules.judge_plan(ev) == Judgement(Status.FAIL,
                                                 "the plan gives no cost for any operation")
    ev = plan_evidence([1.0])
    ev["ops"][0]["preferred"] = None
    assert placement_rules.judge_plan(ev) == Judgement(
        Status.FAIL, "1 costed operation(s) without a preferred device: ios17.op0")
    assert placement_rules.judge_plan(plan_evidence([0.5, 0.4])) == Judgement(
        Status.FAIL, "cost shares sum to 0.9000, not 1 +/- 0.01")
    ev = plan_evidence([0.5, 0.5])
    ev["ops"][1]["cost"] = "0.5"
    assert placement_rules.judge_plan(ev) == Judgement(
        Status.FAIL, "1 operation(s) with a cost that is not a finite number")


# ============================================================================ receipt
# receipt.py is being rewritten; these pin only what verify() promises to any caller.

def test_verify_refuses_what_is_not_a_receipt(tmp_path):
    from verifylib.evidence import receipt
    rpath = tmp_path / "receipt.json"
    res = receipt.verify(tmp_path)
    assert (res.ok, res.problems) == (False, [f"{rpath}: receipt missing"])
    rpath.write_text('{"schema": NaN}')
    res = receipt.verify(tmp_path)
    assert not res.ok and res.problems[0].startswith(f"{rpath}: not strict JSON: ")
    for text in ('["a list"]', '{"schema": "verifylib-receipt/0"}'):
        rpath.write_text(text)
        res = receipt.verify(tmp_path)
        assert (res.ok, res.problems) == (False, [f"{rpath}: not a {receipt.SCHEMA} receipt"])


def test_a_simulated_host_is_refused_unless_asked_for(tmp_path, monkeypatch):
    from tests.helpers.forge import edit_json, reseal
    from tests.helpers.synthetic import install_rules, make_run
    from verifylib.evidence import receipt
    install_rules(monkeypatch)
    run_dir = make_run(tmp_path / "run")

    def simulate(run):
        run["host"]["simulated"] = True
    edit_json(run_dir, "run.json", simulate)
    reseal(run_dir)
    said = ("host record: the run was made on a simulated host (verify --allow-simulated to "
            "inspect it anyway)")
    res = receipt.verify(run_dir)
    assert not res.ok and said in res.problems
    assert said not in receipt.verify(run_dir, allow_simulated=True).problems
