"""Scripted whisper-cli scenarios against the runner and the contract's classifiers.

Every scenario is a physical run of ``tests/helpers/fake_whisper_cli.py`` (which spells
whisper-cli's lines as its own literals) through the real runner, classified by the real
classifiers. Each ends in FAIL or refusal with its exact reason -- except the success
runs and the nil prediction, which the positive gate alone passes (only a transcript
comparison, ``wer.hybrid``, catches it: docs/runtime-contract.md §4.2).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.helpers.fake_whisper_cli import install
from verifylib.runtime import contracts
from verifylib.errors import ContractBroken
from verifylib.runtime.contracts import classify_lifecycle, classify_negative, classify_positive
from verifylib.runtime.runner import run, run_record, run_whisper_cli
from verifylib.runtime.contracts import coreml_argv, lifecycle_argv

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
    (enc / "coremldata.bin").write_bytes(b"compiled")  # both: what the fake can load
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
    with pytest.raises(ContractBroken, match=r"^whisper-cli flag -np is forbidden in gate runs$"):
        go(files, "coreml", extra=["-np"])
    res, rec = go(files, "coreml", extra=["-np"], forced=True)
    assert res.returncode == 0 and res.stderr == b"" and res.stdout_text.strip()
    c = classify_positive(rec, res.stderr, res.stdout)
    assert c.problems == ("argv breaks the runtime contract: whisper-cli flag -np is forbidden "
                          "in gate runs", NO_COREML_1, LOADED)


def test_audio_ctx_is_refused_before_launch(files):
    with pytest.raises(ContractBroken, match="flag -ac is forbidden"):
        go(files, "coreml", extra=["-ac", "750"])


def test_n_processors_is_refused_and_n_load_markers_fail_if_forced(files):
    argv = coreml_argv(fake(files, "coreml"), files.model, files.audio, "en")
    i = argv.index("-p")
    argv[i + 1] = "2"
    with pytest.raises(ContractBroken, match=r"-p '2': gate runs use exactly one processor"):
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
        "recorded signal None disagrees with return code -11 (SIGSEGV in the Linux signal table)"


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


# ----------------------------------------------------------------------------- v1.8.5 exits
# Each expected stream below is spelt out from the v1.8.5 sources (file: function named in
# the fake), not read from verifylib: the fake's fidelity is what these tests pin.

INIT_FAILED = "error: failed to initialize whisper context\n"


def _exe(files, scenario: str) -> str:
    return str(files.root / "bin" / scenario / "whisper-cli")


def _usage(exe: str) -> str:
    # cli.cpp: whisper_print_usage, up to the option table the fake leaves out.
    return (f"\nusage: {exe} [options] file0 file1 ...\n"
            "supported audio formats: flac, mp3, ogg, wav\n\noptions:\n")


def _core_ml_lines(files, failed: bool) -> str:
    enc = files.model[:-len(".bin")] + "-encoder.mlmodelc"
    return (f"whisper_init_state: loading Core ML model from '{enc}'\n"
            "whisper_init_state: first run on a device may take a while ...\n"
            + (f"whisper_init_state: failed to load Core ML model from '{enc}'\n" if failed
               else "whisper_init_state: Core ML model loaded\n"))


def test_missing_model_prints_only_what_v185_prints_and_exits_3(files):
    # whisper.cpp: whisper_init_from_file_with_params_no_state logs the path and, when the
    # ifstream does not open, one "failed to open" line; no whisper_model_load line and no
    # "failed to load model" line (those belong to a file that opened). cli.cpp: main adds
    # its init line and returns 3.
    files.typo = files.model + ".typo"
    res, _ = go(files, "coreml", model_attr="typo")
    assert (res.returncode, res.signal) == (3, None)
    assert res.stderr_text == (
        f"whisper_init_from_file_with_params_no_state: loading model from '{files.typo}'\n"
        f"whisper_init_from_file_with_params_no_state: failed to open '{files.typo}'\n"
        + INIT_FAILED)
    assert res.stdout == b""
    # -np removes the two library lines, never the CLI's own fprintf line.
    res, _ = go(files, "coreml", model_attr="typo", extra=["-np"], forced=True)
    assert (res.returncode, res.stderr_text) == (3, INIT_FAILED)


@pytest.mark.skipif(os.geteuid() == 0, reason="root opens a mode-000 file")
def test_unreadable_model_is_the_missing_model_path(files):
    os.chmod(files.model, 0)
    try:
        res, _ = go(files, "coreml")
    finally:
        os.chmod(files.model, 0o644)
    assert res.returncode == 3
    assert f"failed to open '{files.model}'" in res.stderr_text


def test_missing_audio_is_exit_2_before_any_model_line(files):
    # cli.cpp: main drops each -f that is_file_exist() rejects with its own line; with none
    # left it prints "no input files", the usage, and returns 2 -- before the model.
    files.audio = str(files.root / "missing.wav")
    res, rec = go(files, "coreml")
    assert (res.returncode, res.signal) == (2, None)
    assert res.stderr_text == (f"error: input file not found '{files.audio}'\n"
                               "error: no input files specified\n" + _usage(_exe(files, "coreml")))
    assert classify_positive(rec, res.stderr, res.stdout).problems[0] == \
        "exit 2, expected exactly 0"


def test_one_missing_audio_among_several_is_dropped_and_the_run_goes_on(files):
    missing = str(files.root / "missing.wav")
    res, _ = go(files, "coreml", extra=["-f", missing], forced=True)
    assert res.returncode == 0
    assert res.stderr_text.startswith(f"error: input file not found '{missing}'\n"
                                      "whisper_init_from_file_with_params_no_state: loading")
    assert res.stderr_text.count("main: processing '") == 1
    assert res.stdout_text.count("And so my fellow Americans") == 1


def test_exit_1_is_only_a_response_file_that_does_not_open(files):
    # cli.cpp: main -- "return 1" after whisper_params_parse is unreachable in v1.8.5 (the
    # parser exits 0 itself); the one live exit 1 is a lone "@FILE" that does not open.
    exe = str(fake(files, "coreml"))
    missing = str(files.root / "args.txt")
    res = run([exe, "@" + missing], timeout=30)
    assert (res.returncode, res.stderr_text, res.stdout) == (
        1, f"error: response file '{missing}' not found\n", b"")
    # The same file, present: one argument per line, and an ordinary run.
    Path(missing).write_text("\n".join(["-m", files.model, "-f", files.audio, "-l", "en"]) + "\n")
    res = run([exe, "@" + missing], timeout=30)
    assert res.returncode == 0 and "whisper_init_state: Core ML model loaded\n" in res.stderr_text
    assert res.stdout_text.strip().startswith("And so my fellow Americans")


@pytest.mark.parametrize("extra,first_line", [
    (["--bogus"], "error: unknown argument: --bogus\n"),
    (["-h"], ""),
])
def test_bad_arguments_exit_0_with_usage_and_no_transcript(files, extra, first_line):
    # cli.cpp: whisper_params_parse -- an unknown option (and -h) prints usage and calls
    # exit(0): a typo in a gate's argv "succeeds" with nothing transcribed.
    res, rec = go(files, "coreml", extra=extra, forced=True)
    assert (res.returncode, res.stdout) == (0, b"")
    assert res.stderr_text == first_line + _usage(_exe(files, "coreml"))
    c = classify_positive(rec, res.stderr, res.stdout)
    assert not c.ok and NO_COREML_1 in c.problems and LOADED in c.problems


def test_an_option_without_its_value_exits_0(files):
    # cli.cpp: requires_value_error prints one line and calls exit(0), without usage.
    res, _ = go(files, "coreml", extra=["-l"], forced=True)
    assert (res.returncode, res.stderr_text, res.stdout) == (
        0, "error: argument -l requires value\n", b"")


def test_a_number_that_does_not_parse_aborts(files):
    # cli.cpp: whisper_params_parse calls std::stoi unguarded: no digits throws, nothing
    # catches it, the process aborts -- a signal, not an exit status.
    res, _ = go(files, "coreml", extra=["-t", "four"], forced=True)
    assert (res.returncode, res.signal) == (-6, "SIGABRT")
    assert res.stderr_text.endswith("std::invalid_argument: stoi: no conversion\n")


def test_unknown_dtw_preset_is_an_exit_3_with_no_library_line(files):
    # cli.cpp: main returns 3 for an unknown preset before opening the model: another exit
    # 3 that is no negative control.
    res, rec = go(files, "coreml", model_attr="scratch", extra=["-dtw", "huge"], forced=True)
    assert (res.returncode, res.stderr_text) == (3, "error: unknown DTW preset 'huge'\n")
    c = classify_negative(rec, res.stderr, res.stdout)
    assert NO_FAILURE_LINE in c.problems and NO_INIT_LINE in c.problems


@pytest.mark.parametrize("grammar,parse_line", [
    ("nonsense", "parse: error parsing grammar: expecting ::= at \n"),
    ("::= x", "parse: error parsing grammar: expecting name at ::= x\n"),
    ("# a comment, no rule", ""),
])
def test_exit_4_is_a_grammar_that_does_not_parse_after_core_ml_loaded(files, grammar, parse_line):
    # cli.cpp: main parses --grammar after the context (and Core ML) initialized;
    # grammar-parser.cpp: parse prints what it threw, and no rules is exit 4.
    res, _ = go(files, "coreml", extra=["--grammar", grammar], forced=True)
    assert (res.returncode, res.stdout) == (4, b"")
    assert res.stderr_text.endswith(_core_ml_lines(files, failed=False) + parse_line
                                    + f'error: failed to parse grammar "{grammar}"\n')
    assert "system_info:" not in res.stderr_text


def test_a_grammar_file_is_read_before_it_is_parsed(files):
    g = files.root / "bad.gbnf"
    g.write_text("root = \"x\"\n")
    res, _ = go(files, "coreml", extra=["--grammar", str(g)], forced=True)
    assert res.returncode == 4
    assert res.stderr_text.endswith('parse: error parsing grammar: expecting ::= at = "x"\n\n'
                                    f'error: failed to parse grammar "{g}"\n')


def test_exit_10_is_an_audio_context_above_the_model(files):
    # whisper.cpp: whisper_full_with_state refuses audio_ctx > n_audio_ctx (1500) with one
    # log line and -5; cli.cpp: main prints argv[0] with "failed to process audio", exit 10.
    res, rec = go(files, "coreml", extra=["-ac", "1501"], forced=True)
    exe = _exe(files, "coreml")
    assert (res.returncode, res.stdout) == (10, b"")
    assert res.stderr_text.endswith(
        "transcribe, timestamps = 0 ...\n\n"
        "whisper_full_with_state: audio_ctx is larger than the maximum allowed (1501 > 1500)\n"
        f"{exe}: failed to process audio\n")
    assert "whisper_print_timings" not in res.stderr_text
    assert classify_positive(rec, res.stderr, res.stdout).problems[1] == \
        "exit 10, expected exactly 0"


# ----------------------------------------------------------------------------- unloadable .mlmodelc

def _relayout(files, layout: str) -> Path:
    enc = Path(files.model[:-len(".bin")] + "-encoder.mlmodelc")
    shutil.rmtree(enc)
    if layout == "a-file":
        enc.write_bytes(b"not a folder")
        return enc
    enc.mkdir()
    full = {"model.mil": b"program", "coremldata.bin": b"compiled", "metadata.json": b"[]",
            "weights/weight.bin": b"\0" * 64, "analytics/coremldata.bin": b"a"}
    keep = {"empty": (), "mil-only": ("model.mil",), "coremldata-only": ("coremldata.bin",),
            "all-but-model.mil": tuple(k for k in full if k != "model.mil"),
            "compiled": tuple(full)}[layout]
    for name in keep:
        (enc / name).parent.mkdir(parents=True, exist_ok=True)
        (enc / name).write_bytes(full[name])
    return enc


@pytest.mark.parametrize("layout", ["empty", "mil-only", "coremldata-only",
                                    "all-but-model.mil", "a-file"])
def test_an_mlmodelc_core_ml_cannot_load_fails_closed(files, layout):
    # whisper.cpp: whisper_init_state with fallback OFF: a null ctx_coreml logs the failure,
    # frees the state, and cli.cpp: main exits 3. Being a folder is not being loadable.
    _relayout(files, layout)
    res, rec = go(files, "coreml")
    assert (res.returncode, res.signal, res.stdout) == (3, None, b"")
    assert res.stderr_text.endswith(_core_ml_lines(files, failed=True) + INIT_FAILED)
    c = classify_positive(rec, res.stderr, res.stdout)
    assert c.problems == ("exit 3, expected exactly 0", NO_COREML_1, LOADED, FAILURE_PRESENT)
    # In place, it is exactly the fail-closed refusal the negative control looks for.
    assert classify_negative(rec, res.stderr, res.stdout).ok


def test_the_compiled_layout_loads(files):
    _relayout(files, "compiled")
    _, c = positive(files, "coreml")
    assert c.ok, c.problems


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads mode-000 files")
def test_an_unreadable_mlmodelc_fails_closed(files):
    enc = _relayout(files, "compiled")
    os.chmod(enc / "coremldata.bin", 0)
    try:
        res, _ = go(files, "coreml")
    finally:
        os.chmod(enc / "coremldata.bin", 0o644)
    assert res.returncode == 3
    assert res.stderr_text.endswith(_core_ml_lines(files, failed=True) + INIT_FAILED)


# ----------------------------------------------------------------------------- nonsense transcripts

NONSENSE_START = "Purple lighthouse gravel"


def test_nonsense_transcript_passes_the_positive_gate(files):
    # Loaded, clean log, exit 0, a fluent transcript: only a transcript comparison can tell.
    res, c = positive(files, "coreml-nonsense")
    assert c.ok and res.stdout_text.strip().startswith(NONSENSE_START)


@pytest.mark.parametrize("clip,nonsense", [("jfk", True), ("other", False)])
def test_nonsense_can_be_aimed_at_one_clip(files, clip, nonsense):
    res, c = positive(files, f"coreml-nonsense:clip={clip}")
    assert c.ok
    assert res.stdout_text.strip().startswith(NONSENSE_START) is nonsense


def _two_clip_texts(tmp_path):
    from verifylib.numerics.scoring import english_normalizer
    from verifylib.stages import wer
    n = english_normalizer()
    jfk = ("And so my fellow Americans ask not what your country can do for you, ask what you "
           "can do for your country.")
    out = []
    for cid in ("jfk", "other"):
        audio = tmp_path / f"{cid}.wav"
        audio.write_bytes(b"RIFF")
        out.append(wer.ClipText(cid, True, audio, n(jfk), n(jfk), n(jfk), jfk, jfk, jfk))
    return out


@pytest.mark.parametrize("scenario,bad", [("coreml-nonsense:clip=other", "other"),
                                          ("coreml-nonsense:clip=jfk", "jfk")])
def test_wer_hybrid_catches_nonsense_on_one_clip(tmp_path, scenario, bad):
    from verifylib import canonical, params
    from verifylib.evidence import registry as rules
    from verifylib.evidence.records import EvidenceView
    from verifylib.evidence.gates import Status
    from verifylib.stages.context import StageContext
    from verifylib.stages import wer
    from tests.helpers import ROOT as root
    ctx = StageContext("05_wer", params.load(root / "parameters" / "tiny-en.yaml"),
                       tmp_path / "run")
    binary = install(tmp_path / "bin", scenario)
    model = tmp_path / "fp32" / "ggml-model.bin"
    model.parent.mkdir()
    model.write_bytes(b"ggml")
    enc = tmp_path / "fp32" / "ggml-model-encoder.mlmodelc"
    enc.mkdir()
    (enc / "coremldata.bin").write_bytes(b"compiled")
    (enc / "model.mil").write_text("program")
    refs, ids, _ = wer.hybrid(ctx, binary=binary, binary_sha256=canonical.sha256_file(binary),
                              model_arg=str(model), texts=_two_clip_texts(tmp_path),
                              language="en", timeout=60)
    j = rules.RULES["wer.hybrid"](EvidenceView(ctx.run_dir, refs, ids))
    assert j.status is Status.FAIL
    assert j.detail.startswith(f"clip {bad} diverges from GGML beyond 0.5"), j.detail


# ----------------------------------------------------------------------------- forced -ac

def test_forced_audio_ctx_with_core_ml_is_silent_garbage(files):
    # whisper.cpp: whisper_build_graph_conv makes the mel 2 * audio_ctx wide and
    # whisper_coreml_encode hands it to a 3000-frame encoder: the prediction fails with
    # error:nil, nothing is copied, nothing is logged. Exit 0 and every load condition hold;
    # the log is byte for byte the log of the same run without -ac.
    plain, _ = go(files, "coreml")
    res, rec = go(files, "coreml", extra=["-ac", "750"], forced=True)
    assert res.returncode == 0 and res.stderr == plain.stderr
    assert res.stdout_text.strip().startswith(NONSENSE_START)
    c = classify_positive(rec, res.stderr, res.stdout)
    assert c.problems == ("argv breaks the runtime contract: whisper-cli flag -ac is "
                          "forbidden in gate runs",)


@pytest.mark.parametrize("scenario,model_attr,ac", [
    ("coreml", "model", "1500"),          # 2 * 1500 = 3000: the encoder's own width
    ("coreml", "model", "0"),             # 0 is "all", the default
    ("ggml", "model", "750"),             # the GGML encoder takes any width
    ("coreml-fallback", "scratch", "750"),  # failed load, GGML encoder after all
])
def test_audio_ctx_that_the_encoder_accepts_transcribes(files, scenario, model_attr, ac):
    res, _ = go(files, scenario, model_attr=model_attr, extra=["-ac", ac], forced=True)
    assert res.returncode == 0
    assert res.stdout_text.strip().startswith("And so my fellow Americans")


# ----------------------------------------------------------------------------- flaky Core ML

def _launch_outcomes(files, scenario, n, **kw):
    outcomes = []
    for _ in range(n):
        res, c = positive(files, scenario, **kw)
        outcomes.append("ok" if c.ok else f"exit {res.returncode}")
    return outcomes


def test_flaky_core_ml_counts_launches_in_the_state_dir_from_the_environment(files, monkeypatch):
    state = files.root / "state"
    state.mkdir()
    monkeypatch.setenv("FAKE_WHISPER_STATE_DIR", str(state))
    assert _launch_outcomes(files, "coreml-flaky:runs=LLF", 4) == ["ok", "ok", "exit 3", "exit 3"]
    assert (state / "coreml-flaky.count").read_text() == "4"


def test_flaky_core_ml_the_other_way_round_with_a_state_argument(files):
    state = files.root / "state"
    state.mkdir()
    res, _ = go(files, f"coreml-flaky:runs=FL,state={state}")
    # The failure is the real fail-closed path, not a crash.
    assert res.returncode == 3
    assert res.stderr_text.endswith(_core_ml_lines(files, failed=True) + INIT_FAILED)
    assert _launch_outcomes(files, f"coreml-flaky:runs=FL,state={state}", 2) == ["ok", "ok"]


def test_flaky_core_ml_fails_the_positive_gate_on_its_measured_run(files):
    # Default pattern LF: the warm-up loads, the measured run does not. The gate classifies
    # the measured run alone and never retries it.
    from verifylib.evidence import registry as rules
    from verifylib.evidence.records import EvidenceView
    from verifylib.evidence.gates import Status
    from verifylib.stages.context import StageContext
    from verifylib.stages import canary
    from tests.helpers.canary import make_params
    from verifylib.canonical import sha256_file
    state = files.root / "state"
    state.mkdir()
    exe = fake(files, f"coreml-flaky:state={state}")
    ctx = StageContext("03_canary", make_params(), files.root / "canary-run")
    refs, _ = canary.coreml_positive(ctx, binary=exe, binary_sha256=sha256_file(exe),
                                     model_arg=files.model, audio=files.audio,
                                     first_timeout=30, timeout=30, language="en")
    doc = EvidenceView(ctx.run_dir, refs).json("positive")
    assert (doc["warmup"]["returncode"], doc["measured"]["returncode"]) == (0, 3)
    j = rules.RULES["canary.coreml_positive"](EvidenceView(ctx.run_dir, refs))
    assert j.status is Status.FAIL and j.detail.startswith("exit 3, expected exactly 0"), j.detail
