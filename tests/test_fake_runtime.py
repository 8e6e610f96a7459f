"""Scripted whisper-cli scenarios against the runner and the contract's classifiers.

Every scenario is a physical run of ``tests/fake_whisper_cli.py`` (which spells
whisper-cli's lines as its own literals) through the real runner, classified by the real
classifiers. Each ends in FAIL or refusal with its exact reason -- except the success
runs and the nil prediction, which the positive gate alone passes (only a transcript
comparison, ``wer.hybrid``, catches it: docs/runtime-contract.md §4.2).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.fake_whisper_cli import install
from verifylib import contracts
from verifylib.contracts import (ContractError, classify_lifecycle, classify_negative,
                                 classify_positive)
from verifylib.runner import run, run_record, run_whisper_cli
from verifylib.contracts import coreml_argv, lifecycle_argv

LOADED = "missing on stderr: 'whisper_init_state: Core ML model loaded'"
NO_FAILURE_LINE = "missing on stderr: 'whisper_init_state: failed to load Core ML model'"
FAILURE_PRESENT = "present on stderr: 'whisper_init_state: failed to load Core ML model'"
NO_INIT_LINE = "missing on stderr: 'error: failed to initialize whisper context'"
NO_COREML_1 = "no 'system_info:' line with 'COREML = 1' on stderr"


@pytest.fixture
def files(tmp_path):
    pub = tmp_path / "run" / "fp32"
    pub.mkdir(parents=True)
    model = pub / "ggml-model.bin"
    model.write_bytes(b"ggml fake model")
    enc = pub / "ggml-model-encoder.mlmodelc"
    enc.mkdir()
    (enc / "model.mil").write_text("program")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    shutil.copyfile(model, scratch / "ggml-model.bin")
    audio = tmp_path / "jfk.wav"
    audio.write_bytes(b"RIFF fake")
    return SimpleNamespace(model=str(model), scratch=str(scratch / "ggml-model.bin"),
                           audio=str(audio), root=tmp_path)


def fake(files, scenario: str) -> Path:
    return install(files.root / "bin" / scenario, scenario)


def go(files, scenario, model_attr="model", timeout=30.0, extra=(), forced=False):
    argv = coreml_argv(fake(files, scenario), getattr(files, model_attr), files.audio, "en")
    argv += list(extra)
    res = run(argv, timeout=timeout) if forced else run_whisper_cli(argv, timeout=timeout)
    return res, run_record(res)


def positive(files, scenario, **kw):
    res, rec = go(files, scenario, **kw)
    return res, classify_positive(rec, res.stderr, res.stdout)


def negative(files, scenario, **kw):
    res, rec = go(files, scenario, model_attr="scratch", **kw)
    return res, classify_negative(rec, res.stderr, res.stdout)


# ----------------------------------------------------------------------------- passes

def test_success_with_markers_passes_the_four_conditions(files):
    res, c = positive(files, "coreml")
    assert c.ok and c.outcome == "exit 0 + four conditions" and c.problems == ()
    assert res.stdout_text.strip().startswith("And so my fellow Americans")
    assert contracts.parse_encode_time(res.stderr_text) == (42.75, 1)


def test_clean_fail_closed_negative_control_passes(files):
    res, c = negative(files, "coreml")
    assert c.ok and c.outcome == "exit 3 + load-failure + init-failure"
    assert res.returncode == 3 and res.signal is None


def test_nil_prediction_passes_the_positive_gate_alone(files):
    # Load marker, clean log, exit 0 -- and no transcript. The four conditions cannot see
    # it (docs/runtime-contract.md §4.2); only transcript comparison catches it, which is
    # wer.hybrid's job.
    res, c = positive(files, "coreml-nil")
    assert c.ok and res.returncode == 0
    assert res.stdout_text.strip() == ""


# ----------------------------------------------------------------------------- negative control

@pytest.mark.parametrize("scenario,problems", [
    ("coreml-abort", ("killed by SIGABRT (return code -6)", NO_INIT_LINE)),
    ("coreml-segv", ("killed by SIGSEGV (return code -11)", NO_INIT_LINE)),
    ("coreml-exit134", ("killed by SIGABRT (return code 134)", NO_INIT_LINE)),
    ("coreml-fallback", ("exit 0, expected exactly 3", NO_INIT_LINE)),
    ("ggml", ("exit 0, expected exactly 3", NO_FAILURE_LINE, NO_INIT_LINE)),
    ("coreml-no-failure-line", (NO_FAILURE_LINE,)),
    ("coreml-no-init-line", (NO_INIT_LINE,)),
])
def test_negative_control_fails_with_its_exact_reason(files, scenario, problems):
    _, c = negative(files, scenario)
    assert not c.ok
    assert c.problems == problems


def test_negative_control_hang_times_out(files):
    res, c = negative(files, "coreml-hang", timeout=2)
    assert res.timed_out
    assert c.problems == ("timed out (killed, no exit status)", NO_FAILURE_LINE, NO_INIT_LINE)
    assert c.outcome == "timeout"


def test_exit_3_from_a_model_path_typo_is_not_a_negative_control(files):
    # docs/facts.md: a missing model also exits 3 with the init-failure line -- and no
    # load-failure marker. Exit 3 alone is never a valid negative control.
    files.scratch = files.scratch + ".typo"
    res, c = negative(files, "coreml")
    assert res.returncode == 3
    assert c.problems == (NO_FAILURE_LINE,) and c.outcome == "exit 3, marker missing"


# ----------------------------------------------------------------------------- positive gate

@pytest.mark.parametrize("scenario,model_attr,problems", [
    ("ggml", "model", ("system_info shows COREML = 0: a build without Core ML", LOADED)),
    ("coreml-fallback", "scratch", (LOADED, FAILURE_PRESENT)),
    ("coreml-stdout-log", "model", (NO_COREML_1, LOADED)),
    ("coreml", "scratch", ("exit 3, expected exactly 0", NO_COREML_1, LOADED, FAILURE_PRESENT)),
])
def test_positive_gate_fails_with_its_exact_reason(files, scenario, model_attr, problems):
    _, c = positive(files, scenario, model_attr=model_attr)
    assert not c.ok and c.problems == problems


def test_positive_hang_times_out(files):
    _, c = positive(files, "coreml-hang", timeout=2)
    assert c.problems == ("timed out (killed, no exit status)", NO_COREML_1, LOADED)


def test_markers_naming_another_model_fail(files):
    _, c = positive(files, "coreml-stale-log")
    want = files.model[:-len(".bin")] + "-encoder.mlmodelc"
    assert c.problems == ("the loading line names "
                          "'/Users/someone/old-run/ggml-base.en-encoder.mlmodelc', not "
                          f"coreml_encoder_path(-m) {want!r}",)


def test_markers_from_another_run_fail(files):
    # A passing run's stderr attached to another run's record: the digest gives it away.
    good, _ = go(files, "coreml")
    bad, rec = go(files, "coreml", model_attr="scratch")
    c = classify_positive(rec, good.stderr, bad.stdout)
    assert c.problems[0] == "stderr is not this run's stream (SHA-256 differs from the record)"
    assert not c.ok


def test_no_prints_is_refused_before_launch_and_blind_if_forced(files):
    with pytest.raises(ContractError, match=r"^whisper-cli flag -np is forbidden in gate runs$"):
        go(files, "coreml", extra=["-np"])
    res, rec = go(files, "coreml", extra=["-np"], forced=True)
    assert res.returncode == 0 and res.stderr == b"" and res.stdout_text.strip()
    c = classify_positive(rec, res.stderr, res.stdout)
    assert c.problems == ("argv breaks the runtime contract: whisper-cli flag -np is forbidden "
                          "in gate runs", NO_COREML_1, LOADED)


def test_audio_ctx_is_refused_before_launch(files):
    with pytest.raises(ContractError, match="flag -ac is forbidden"):
        go(files, "coreml", extra=["-ac", "750"])


def test_n_processors_is_refused_and_n_load_markers_fail_if_forced(files):
    argv = coreml_argv(fake(files, "coreml"), files.model, files.audio, "en")
    i = argv.index("-p")
    argv[i + 1] = "2"
    with pytest.raises(ContractError, match=r"-p '2': gate runs use exactly one processor"):
        run_whisper_cli(argv, timeout=30)
    res = run(argv, timeout=30)
    assert res.stderr_text.count("whisper_init_state: Core ML model loaded") == 2
    c = classify_positive(run_record(res), res.stderr, res.stdout)
    assert c.problems == ("argv breaks the runtime contract: whisper-cli -p '2': gate runs use "
                          "exactly one processor",
                          "2 lines 'whisper_init_state: Core ML model loaded' in one run, "
                          "expected exactly 1 (one processor)")


# ----------------------------------------------------------------------------- relabeled records

def test_a_crash_relabeled_as_exit_3_fails(files):
    res, rec = go(files, "coreml-segv", model_attr="scratch")
    assert rec["signal"] == "SIGSEGV"
    forged = dict(rec, returncode=3, signal=None)
    assert classify_negative(forged, res.stderr, res.stdout).problems == (NO_INIT_LINE,)
    half = dict(rec, returncode=3)  # signal left in place
    assert classify_negative(half, res.stderr, res.stdout).problems[0] == \
        "recorded signal 'SIGSEGV' disagrees with return code 3 (a normal exit)"
    hidden = dict(rec, signal=None)
    assert classify_negative(hidden, res.stderr, res.stdout).problems[0] == \
        "recorded signal None disagrees with return code -11 (SIGSEGV)"


# ----------------------------------------------------------------------------- lifecycle trigger

@pytest.mark.parametrize("scenario,problems", [
    ("ggml", ()),
    ("ggml-unpatched", ("killed by SIGSEGV (return code -11)", NO_INIT_LINE)),
])
def test_lifecycle_trigger(files, scenario, problems):
    res = run_whisper_cli(lifecycle_argv(fake(files, scenario), files.model, files.audio),
                          timeout=30)
    c = classify_lifecycle(run_record(res), res.stderr, res.stdout)
    assert c.problems == problems
    assert c.ok == (not problems)


def test_lifecycle_without_no_flash_attn_proves_nothing(files):
    argv = [str(fake(files, "ggml")), "-m", files.model, "-f", files.audio, "-dtw", "large.v3"]
    res = run_whisper_cli(argv, timeout=30)
    assert res.returncode == 0
    c = classify_lifecycle(run_record(res), res.stderr, res.stdout)
    assert c.problems == (
        "argv lacks the lifecycle trigger (-nfa -dtw <preset>)",
        "exit 0, expected exactly 3",
        "present on stderr: 'dtw_token_timestamps is not supported with flash_attn - disabling'",
        "missing on stderr: 'whisper_init_state: aheads_masks_init() failed for alignment heads "
        "masks'",
        NO_INIT_LINE)
