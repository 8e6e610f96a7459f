"""The Core ML seam for real: whisper.cpp v1.8.5 built with verifylib's ``whisper_coreml_*``
(the ``seam``, ``seam-unpatched`` and ``seam-unpatched-asan`` variants, in the session
cache), launched on the registry's tiny.en with :class:`SeamExecutor` running the exported
encoder's program.

What is checked here, each on real launches: the fail-closed negative control (the
patched build exits 3 with both Core ML failure markers, the unpatched one dies by a
signal, its AddressSanitizer build reports the bad free); the positive path (exit 0,
``COREML = 1``, one load, the seam's encode lines equal to the executor's record and to
whisper.cpp's own run count, the jfk transcript) for a stand-in and for a compiled-model
folder; every refusal of ``init``; an executor lost mid-encode (exit 70, promptly); and a
reply larger than whisper.cpp's encoder buffer, refused before a byte is copied when the
launch is told the buffer's size (exit 70; no AddressSanitizer report), while a launch told
the right size still transcribes. The contract's pure parts are
tests/unit/test_seam_contract.py.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.helpers import ROOT
from tests.helpers.compiled_models import compiled_folder
from tests.helpers.model_data import JFK_TEXT, normalize
from verifylib.models.ggml_file import open_ggml
from verifylib.models.ggml_writer import write_ggml_model
from verifylib.models.seam_encoder import write_standin
from verifylib.numerics.seam_executor import SeamExecutor
from verifylib.runtime import contracts, sanitizer
from verifylib.runtime.contracts import seam
from verifylib.runtime.runner import RunResult, run_record, run_whisper_cli
from verifylib.stages.seam import seam_launch
from verifylib.whispercpp import build

RUNS = 3
"""Launches per side of the negative control (as ``canary.lifecycle_ab`` makes)."""

RUN_TIMEOUT_S = 120
"""Ample for one tiny.en launch (about 1 s here); a hang fails as a timeout."""

LOST_WITHIN_S = 20
"""An executor lost mid-encode must end the launch in seconds, not at the seam's 900 s."""


def _quiet(_msg: str) -> None:
    return None


# ----------------------------------------------------------------------------- fixtures

def _seam_build(src: Path, pin, variant: str, patch: str | None, cache: Path) -> build.BuildResult:
    res = build.build_whisper_cli(src, tree_id=pin.tree, patch_sha256=patch, variant=variant,
                                  options={"GGML_NATIVE": "ON"}, cache_dir=cache, log=_quiet)
    assert res.variant == variant and res.patch_sha256 == patch and res.static
    return res


@pytest.fixture(scope="module")
def seam_patched(v185_patched, v185_pin, verifylib_cache) -> build.BuildResult:
    """The patched seam whisper-cli (the pin's patch, the seam laid into the build copy)."""
    res = _seam_build(v185_patched.path, v185_pin, "seam", v185_pin.patch_sha256,
                      verifylib_cache)
    # The seam went into the build's copy, never into the proved work tree.
    assert not (v185_patched.path / "verifylib-seam").exists()
    return res


@pytest.fixture(scope="module")
def seam_unpatched(v185_source, v185_pin, verifylib_cache) -> build.BuildResult:
    """The unpatched seam whisper-cli, from the pristine cached source."""
    res = _seam_build(v185_source.path, v185_pin, "seam-unpatched", None, verifylib_cache)
    assert not (v185_source.path / "verifylib-seam").exists()
    return res


@pytest.fixture(scope="module")
def seam_unpatched_asan(v185_source, v185_pin, verifylib_cache) -> build.BuildResult:
    """The unpatched seam whisper-cli under AddressSanitizer."""
    res = _seam_build(v185_source.path, v185_pin, "seam-unpatched-asan", None, verifylib_cache)
    assert sanitizer.links_asan_runtime(res.needed_libs)
    return res


@pytest.fixture(scope="module")
def tiny_en_ggml(tiny_en_info, tmp_path_factory) -> Path:
    """The registry's tiny.en as a ggml file (whisper.cpp's ``-m``), written once."""
    return write_ggml_model(tiny_en_info.hf_dir,
                            tmp_path_factory.mktemp("seam-ggml") / "ggml-model.bin").path


@pytest.fixture(scope="module")
def fp32_package(tiny_en_export) -> Path:
    """tiny.en's exported fp32 encoder package (the session's export)."""
    return tiny_en_export.fp32


@pytest.fixture(scope="module")
def executor():
    """One executor with the default program execution, for the positive launches."""
    with SeamExecutor() as ex:
        yield ex


def model_folder(folder: Path, ggml: Path) -> str:
    """Put the ggml model alone in ``folder``; return the ``-m`` string (its path)."""
    folder.mkdir(parents=True, exist_ok=True)
    dest = folder / "ggml-model.bin"
    try:
        os.link(ggml, dest)
    except OSError:
        shutil.copyfile(ggml, dest)
    return str(dest)


def encoder_path(model_arg: str) -> Path:
    """The ``.mlmodelc`` path whisper.cpp derives from ``-m``."""
    return Path(contracts.coreml_encoder_path(model_arg))


def launch(binary: Path, model_arg: str, audio: Path, env: dict | None = None,
           timeout: float = RUN_TIMEOUT_S) -> RunResult:
    """One whisper-cli launch as a Core ML gate makes it (pinned greedy decoding)."""
    argv = contracts.coreml_argv(binary, model_arg, audio, "en")
    return run_whisper_cli(argv, timeout=timeout, env_extra=env)


def seam_lines(res: RunResult, marker: str) -> list[str]:
    """The text after ``marker`` of each of the seam's lines that starts with it."""
    return [ln[len(marker):] for ln in res.stderr_text.splitlines() if ln.startswith(marker)]


def assert_refused_cleanly(res: RunResult) -> str:
    """Exit 3, both Core ML failure markers, the seam's refusal; return its reason."""
    cls = contracts.classify_negative(run_record(res), res.stderr, res.stdout)
    assert cls.ok and cls.outcome == contracts.CLEAN_NEGATIVE, \
        (cls, res.describe(), res.stderr_text[-3000:])
    assert res.returncode == contracts.EXIT_INIT_FAILURE and res.signal is None
    err = res.stderr_text
    assert contracts.COREML_LOAD_FAILURE_MARKER in err and contracts.INIT_FAILURE_MARKER in err
    assert err.splitlines().count(seam.SEAM_BANNER) == 1
    (why,) = seam_lines(res, seam.SEAM_REFUSED)
    assert not seam_lines(res, seam.SEAM_LOADED) and not seam.seam_encode_lines(err)
    return why


def assert_transcribed(res: RunResult, ex: SeamExecutor, token: str):
    """The positive gate's four conditions, the jfk text, and the seam's lines equal to the
    executor's record and to whisper.cpp's own count of encoder runs; returns the record."""
    err = res.stderr_text
    cls = contracts.classify_positive(run_record(res), res.stderr, res.stdout)
    assert cls.ok and cls.outcome == contracts.CLEAN_POSITIVE, (cls, res.describe(), err[-3000:])
    assert res.ok and contracts.system_info_coreml(err) == 1
    assert err.count(contracts.COREML_LOAD_MARKER) == 1
    assert contracts.COREML_LOAD_FAILURE_MARKER not in err
    assert normalize(res.stdout_text) == JFK_TEXT
    assert seam.is_seam_stream(err) and err.splitlines().count(seam.SEAM_BANNER) == 1
    assert not seam_lines(res, seam.SEAM_REFUSED) and not seam_lines(res, seam.SEAM_EXECUTOR_LOST)

    rec = ex.launch(token)
    assert rec is not None and rec.token == token and rec.loaded and rec.refusal is None
    # ``free`` waits for the executor's acknowledgement of FREE, which it sends after
    # filing it: the record is complete by the time the launch has returned.
    assert rec.freed
    (loaded,) = seam_lines(res, seam.SEAM_LOADED)
    assert rec.program["digest"] in loaded
    lines = seam.seam_encode_lines(err)
    # Every encode line the seam printed is well formed, and there is one per call.
    assert len(lines) == len(seam_lines(res, seam.SEAM_ENCODE)) == len(rec.calls) >= 1
    for line, call in zip(lines, rec.calls):
        assert call.refused is None and line.index == call.index
        assert (line.n_ctx, line.n_mel) == (call.n_ctx, call.n_mel) == (3000, 80)
        assert call.output_shape == (1, 1500, 384)
        assert line.count == int(np.prod(call.output_shape))
        assert line.input_sha256 == call.input_sha256
        assert line.output_sha256 == call.output_sha256
    assert [c.index for c in rec.calls] == list(range(1, len(rec.calls) + 1))
    timing = contracts.parse_encode_time(err)
    assert timing is not None and timing[1] == len(rec.calls)
    assert seam_lines(res, seam.SEAM_FREED) == [f"{len(rec.calls)} encode call(s)"]
    return rec


# ----------------------------------------------------------------------------- negative control

@pytest.mark.physical
def test_negative_control_patched_seam_fails_closed(seam_patched, tiny_en_ggml, jfk_wav,
                                                    tmp_path):
    model = model_folder(tmp_path / "alone", tiny_en_ggml)
    assert not encoder_path(model).exists()
    with SeamExecutor() as ex:
        for _ in range(RUNS):
            token, env = ex.launch_env()
            res = launch(seam_patched.binary, model, jfk_wav, env)
            why = assert_refused_cleanly(res)
            assert why == f"no folder at '{encoder_path(model)}'"
            # Core ML's load fails on the missing folder before any executor is asked.
            assert ex.launch(token) is None
            assert res.stdout_text.strip() == ""


@pytest.mark.physical
def test_negative_control_unpatched_seam_dies_by_a_signal(seam_unpatched, tiny_en_ggml, jfk_wav,
                                                          tmp_path):
    model = model_folder(tmp_path / "alone", tiny_en_ggml)
    signals = []
    for _ in range(RUNS):
        res = launch(seam_unpatched.binary, model, jfk_wav)
        assert not res.timed_out, res.describe()
        # The same Core ML failure is reached, then whisper.cpp's early return frees an
        # uninitialised batch (the defect the pin's patch mends).
        assert contracts.COREML_LOAD_FAILURE_MARKER in res.stderr_text
        assert seam_lines(res, seam.SEAM_REFUSED) == [f"no folder at '{encoder_path(model)}'"]
        assert contracts.INIT_FAILURE_MARKER not in res.stderr_text
        signals.append(res.signal)
    assert signals == ["SIGSEGV"] * RUNS


@pytest.mark.physical
def test_negative_control_unpatched_seam_under_asan_reports_the_bad_free(
        seam_unpatched_asan, tiny_en_ggml, jfk_wav, tmp_path):
    model = model_folder(tmp_path / "alone", tiny_en_ggml)
    for _ in range(RUNS):
        argv = contracts.coreml_argv(seam_unpatched_asan.binary, model, jfk_wav, "en")
        res = run_whisper_cli(argv, timeout=RUN_TIMEOUT_S, env_extra=sanitizer.sanitizer_env())
        assert contracts.COREML_LOAD_FAILURE_MARKER in res.stderr_text
        report = sanitizer.parse_report(res.stderr)
        assert report is not None, res.describe() + res.stderr_text[-3000:]
        assert report.tool == "AddressSanitizer"
        app = report.first_app_frame()
        assert app is not None and app.function.startswith("whisper_batch_free"), report
        # ASAN_OPTIONS: the first report ends the run with exit 1, no signal.
        assert res.returncode == 1 and res.signal is None


# ----------------------------------------------------------------------------- positive

@pytest.fixture(scope="module")
def standin_model(tiny_en_ggml, fp32_package, tmp_path_factory) -> str:
    """A model folder whose derived ``.mlmodelc`` path holds a stand-in for the fp32 package."""
    model = model_folder(tmp_path_factory.mktemp("seam-standin"), tiny_en_ggml)
    write_standin(fp32_package, encoder_path(model))
    return model


@pytest.mark.physical
@pytest.mark.parametrize("side", ["patched", "unpatched"])
def test_positive_standin_transcribes_through_the_seam(side, seam_patched, seam_unpatched,
                                                        standin_model, executor, jfk_wav,
                                                        fp32_package):
    binary = (seam_patched if side == "patched" else seam_unpatched).binary
    executor.preload(encoder_path(standin_model))
    records = []
    for _ in range(2):  # two launches, one program load, two records
        token, env = executor.launch_env()
        res = launch(binary, standin_model, jfk_wav, env)
        rec = assert_transcribed(res, executor, token)
        assert rec.folder == str(encoder_path(standin_model))
        assert rec.program["kind"] == "standin"
        assert rec.program["source"] == {"package": str(fp32_package.resolve())}
        records.append(rec)
    assert records[0].token != records[1].token
    # The same audio and program: the same mel in, the same encoder output out.
    assert [c.input_sha256 for c in records[0].calls] == \
        [c.input_sha256 for c in records[1].calls]
    assert [c.output_sha256 for c in records[0].calls] == \
        [c.output_sha256 for c in records[1].calls]


@pytest.mark.physical
def test_positive_under_asan_has_no_report(seam_unpatched_asan, standin_model, executor,
                                           jfk_wav):
    # The seam's own copies and hashing, instrumented: the success path is clean.
    token, env = executor.launch_env()
    res = launch(seam_unpatched_asan.binary, standin_model, jfk_wav,
                 {**env, **sanitizer.sanitizer_env()})
    assert sanitizer.parse_report(res.stderr) is None, res.stderr_text[-3000:]
    assert_transcribed(res, executor, token)


@pytest.mark.physical
def test_positive_compiled_model_folder_loads(seam_patched, tiny_en_ggml, fp32_package,
                                              standin_model, executor, jfk_wav, tmp_path):
    model = model_folder(tmp_path / "compiled", tiny_en_ggml)
    folder = compiled_folder(fp32_package, encoder_path(model))
    assert {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()} == \
        {"model.mil", "weights/weight.bin"}
    token, env = executor.launch_env()
    res = launch(seam_patched.binary, model, jfk_wav, env)
    rec = assert_transcribed(res, executor, token)
    assert rec.program["kind"] == "mlmodelc"
    assert set(rec.program["source"]) == {"model_mil_sha256", "weight_bin_sha256"}
    (loaded,) = seam_lines(res, seam.SEAM_LOADED)
    assert loaded.startswith("model.mil of a compiled model")

    # The package's stand-in runs the same program: the same output for the same mel.
    token2, env2 = executor.launch_env()
    ref = assert_transcribed(launch(seam_patched.binary, standin_model, jfk_wav, env2),
                             executor, token2)
    assert [c.input_sha256 for c in rec.calls] == [c.input_sha256 for c in ref.calls]
    assert [c.output_sha256 for c in rec.calls] == [c.output_sha256 for c in ref.calls]


# ----------------------------------------------------------------------------- refusals

def _empty(folder: Path, package: Path) -> None:
    folder.mkdir()


def _garbage_mil(folder: Path, package: Path) -> None:
    (folder / "weights").mkdir(parents=True)
    (folder / "model.mil").write_text("program(1.0)\n{ this is not MIL at all\n")
    (folder / "weights" / "weight.bin").write_bytes(b"\0" * 64)


def _no_weights(folder: Path, package: Path) -> None:
    compiled_folder(package, folder)
    (folder / "weights" / "weight.bin").unlink()


def _stale_standin(folder: Path, package: Path) -> None:
    copy = folder.parent / "moved.mlpackage"
    shutil.copytree(package, copy)
    write_standin(copy, folder)
    with open(copy / "Manifest.json", "ab") as f:  # the package changed after the stand-in
        f.write(b"\n")


@pytest.mark.physical
@pytest.mark.parametrize("make,reason", [
    (_empty, "has no readable model.mil"),
    (_garbage_mil, "ggml-model-encoder.mlmodelc: model.mil line 2, column 3: "),
    (_no_weights, "has no readable weights/weight.bin"),
    (_stale_standin, "no longer hashes to the digest the stand-in names"),
], ids=["empty", "garbage-model-mil", "no-weights", "stale-standin"])
def test_init_refuses_a_folder_that_is_no_program(make, reason, seam_patched, tiny_en_ggml,
                                                  fp32_package, jfk_wav, tmp_path):
    model = model_folder(tmp_path / "m", tiny_en_ggml)
    folder = encoder_path(model)
    make(folder, fp32_package)
    assert folder.is_dir()
    with SeamExecutor() as ex:
        token, env = ex.launch_env()
        res = launch(seam_patched.binary, model, jfk_wav, env)
        why = assert_refused_cleanly(res)
        rec = ex.launch(token)
    # The executor filed the launch and the refusal the seam printed is its own.
    assert rec is not None and rec.folder == str(folder)
    assert not rec.loaded and rec.program is None and not rec.calls and not rec.freed
    assert rec.refusal and why == rec.refusal
    assert reason in why


@pytest.mark.physical
def test_init_refuses_without_an_executor(seam_patched, standin_model, jfk_wav, tmp_path):
    res = launch(seam_patched.binary, standin_model, jfk_wav)
    assert assert_refused_cleanly(res) == \
        f"no executor: {seam.SEAM_SOCKET_ENV} is not set"
    gone = tmp_path / "no-socket"
    res = launch(seam_patched.binary, standin_model, jfk_wav,
                 {seam.SEAM_SOCKET_ENV: str(gone), seam.SEAM_LAUNCH_ENV: "t"})
    assert assert_refused_cleanly(res).startswith(f"no executor at {gone}: ")


# ----------------------------------------------------------------------------- executor lost

def assert_lost(res: RunResult) -> str:
    """Exit 70 promptly, the seam's one ``executor lost`` line, no transcript; its reason."""
    assert not res.timed_out and res.wall_s < LOST_WITHIN_S, res.describe()
    assert res.returncode == seam.SEAM_EXIT_EXECUTOR_LOST and res.signal is None, \
        (res.describe(), res.stderr_text[-3000:])
    err = res.stderr_text
    assert contracts.COREML_LOAD_MARKER in err  # the load had succeeded
    (why,) = seam_lines(res, seam.SEAM_EXECUTOR_LOST)
    assert why.endswith("during encode #1") or "during encode #1 (" in why, why
    assert not seam.seam_encode_lines(err)  # no output was ever copied back
    assert contracts.parse_encode_time(err) is None and res.stdout_text.strip() == ""
    return why


@pytest.mark.physical
def test_executor_failing_mid_encode_ends_the_launch(seam_patched, standin_model, jfk_wav):
    def fail(program, mel):
        assert mel.shape == (1, 80, 3000) and mel.dtype == np.float32
        raise RuntimeError("injected executor failure")

    with SeamExecutor(execute=fail) as ex:
        token, env = ex.launch_env()
        res = launch(seam_patched.binary, standin_model, jfk_wav, env)
        rec = ex.launch(token)
    why = assert_lost(res)
    assert why.startswith("refused: execution failed: RuntimeError: injected executor failure")
    assert rec.loaded and len(rec.calls) == 1
    (call,) = rec.calls
    assert call.output_sha256 is None and call.output_shape == ()
    assert call.refused == "execution failed: RuntimeError: injected executor failure"


@pytest.mark.physical
def test_executor_answering_the_wrong_shape_ends_the_launch(seam_patched, standin_model,
                                                            jfk_wav):
    with SeamExecutor(execute=lambda program, mel: np.zeros((1, 1499, 384), np.float32)) as ex:
        token, env = ex.launch_env()
        res = launch(seam_patched.binary, standin_model, jfk_wav, env)
        rec = ex.launch(token)
    why = assert_lost(res)
    assert why.startswith("refused: output [1, 1499, 384] is not [1, n_ctx/2, n_state]")
    assert rec.calls[0].refused and rec.calls[0].output_sha256 is None


SERVER = """
import json, os, sys
from verifylib.numerics.seam_executor import SeamExecutor

def die(program, mel):  # the executor's process ends with the mel received, no reply sent
    sys.stderr.write("server: encode received, exiting\\n")
    sys.stderr.flush()
    os._exit(9)

with SeamExecutor(execute=die) as ex:
    ex.preload(sys.argv[1])
    token, env = ex.launch_env()
    print(json.dumps({"token": token, "env": env}), flush=True)
    sys.stdin.read()
"""


@pytest.mark.physical
def test_executor_process_dying_mid_encode_ends_the_launch(seam_patched, standin_model,
                                                           jfk_wav):
    server = subprocess.Popen([sys.executable, "-c", SERVER, str(encoder_path(standin_model))],
                              cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    env = None
    try:
        ready, _, _ = select.select([server.stdout], [], [], 120)
        assert ready, "the executor process did not start"
        first = server.stdout.readline()
        assert first, server.stderr.read()
        env = json.loads(first)["env"]
        res = launch(seam_patched.binary, standin_model, jfk_wav, env)
        assert server.wait(timeout=30) == 9
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
        if env is not None:  # os._exit left the executor's socket folder behind
            shutil.rmtree(Path(env[seam.SEAM_SOCKET_ENV]).parent, ignore_errors=True)
    assert "server: encode received, exiting" in server.stderr.read()
    assert assert_lost(res) == "connection closed during encode #1"


# ----------------------------------------------------------------------------- overflow

ENCODER_OUTPUT = 1500 * 384
"""tiny.en's ``n_audio_ctx * n_audio_state``: whisper.cpp's encoder output buffer, in floats."""

OVERSIZED = (1, 1500, 512)
"""A reply of the right ``n_ctx/2`` (so the executor sends it) but a wider state: 768000
floats into whisper.cpp's 576000."""


def _oversized(program, mel):
    return np.zeros(OVERSIZED, np.float32)


def overflow_reason(count: int, cap: int) -> str:
    """The seam's reason for an output of ``count`` floats: the executor, told the size with
    the load, refuses the output itself, and the seam ends the launch on the refusal."""
    return (f"refused: output of {count} floats is larger than whisper.cpp's encoder output "
            f"of {cap} during encode #1")


@pytest.fixture(scope="module")
def output_floats(tiny_en_ggml) -> int:
    """The size as the stage hands it: read from the model file's hyperparameters."""
    hp = open_ggml(tiny_en_ggml).hparams
    floats = int(hp["n_audio_ctx"]) * int(hp["n_audio_state"])
    assert floats == ENCODER_OUTPUT
    return floats


def assert_overflow_refused(res: RunResult, count: int, cap: int) -> None:
    """Exit 70 promptly with the seam's one overflow line, nothing copied back."""
    assert assert_lost(res) == overflow_reason(count, cap)
    line = seam.SEAM_EXECUTOR_LOST + overflow_reason(count, cap)
    assert res.stderr_text.splitlines().count(line) == 1, res.stderr_text[-3000:]
    assert seam_lines(res, seam.SEAM_FREED) == []  # the launch ended inside encode


def assert_sent_not_freed(rec, shape: tuple[int, ...], cap: int = 0) -> None:
    """The executor's record: it was told the size, ran the call and refused its output of
    ``shape`` (nothing sent back); the seam never freed."""
    assert rec is not None and rec.loaded and not rec.freed
    assert rec.output_floats == cap
    (call,) = rec.calls
    assert call.output_sha256 is None and call.output_shape == ()
    assert call.refused == (f"output of {int(np.prod(shape))} floats is larger than "
                            f"whisper.cpp's encoder output of {cap}")


@pytest.mark.physical
def test_a_reply_larger_than_the_encoder_buffer_is_refused(seam_patched, standin_model,
                                                          output_floats, jfk_wav):
    argv = contracts.coreml_argv(seam_patched.binary, standin_model, jfk_wav, "en")
    with SeamExecutor(execute=_oversized) as ex:
        res, rec = seam_launch(ex, argv, timeout=RUN_TIMEOUT_S, output_floats=output_floats)
    assert_overflow_refused(res, int(np.prod(OVERSIZED)), ENCODER_OUTPUT)
    assert_sent_not_freed(rec, OVERSIZED, ENCODER_OUTPUT)


@pytest.mark.physical
def test_a_reply_larger_than_the_encoder_buffer_under_asan_has_no_report(
        seam_unpatched_asan, standin_model, output_floats, jfk_wav):
    # The refusal comes before the copy: the instrumented build sees no overrun at all.
    with SeamExecutor(execute=_oversized) as ex:
        token, env = ex.launch_env()
        res = launch(seam_unpatched_asan.binary, standin_model, jfk_wav,
                     {**env, seam.SEAM_OUTPUT_FLOATS_ENV: str(output_floats),
                      **sanitizer.sanitizer_env()})
        rec = ex.launch(token)
    assert sanitizer.parse_report(res.stderr) is None, res.stderr_text[-3000:]
    assert "AddressSanitizer" not in res.stderr_text
    assert_overflow_refused(res, int(np.prod(OVERSIZED)), ENCODER_OUTPUT)
    assert_sent_not_freed(rec, OVERSIZED, ENCODER_OUTPUT)


@pytest.mark.physical
def test_untold_the_asan_seam_overruns_the_encoder_buffer(seam_unpatched_asan, standin_model,
                                                          jfk_wav):
    # The control: without the size the seam copies the reply's own count, as Apple's
    # implementation does, and AddressSanitizer catches the write past the buffer.
    with SeamExecutor(execute=_oversized) as ex:
        token, env = ex.launch_env()
        res = launch(seam_unpatched_asan.binary, standin_model, jfk_wav,
                     {**env, **sanitizer.sanitizer_env()})
    report = sanitizer.parse_report(res.stderr)
    assert report is not None and report.tool == "AddressSanitizer", \
        res.describe() + res.stderr_text[-3000:]
    assert "heap-buffer-overflow" in report.kind, report
    assert not seam_lines(res, seam.SEAM_EXECUTOR_LOST)
    assert res.returncode == 1 and res.signal is None


@pytest.mark.physical
@pytest.mark.parametrize("side", ["patched", "asan"])
def test_told_the_right_size_a_launch_transcribes(side, seam_patched, seam_unpatched_asan,
                                                  standin_model, executor, output_floats,
                                                  jfk_wav):
    # The reply is exactly the buffer (the bound is ``>``, not ``>=``).
    build_ = seam_patched if side == "patched" else seam_unpatched_asan
    executor.preload(encoder_path(standin_model))
    if side == "patched":
        argv = contracts.coreml_argv(build_.binary, standin_model, jfk_wav, "en")
        res, rec = seam_launch(executor, argv, timeout=RUN_TIMEOUT_S,
                               output_floats=output_floats)
        assert rec is not None
        token = rec.token
    else:
        token, env = executor.launch_env()
        res = launch(build_.binary, standin_model, jfk_wav,
                     {**env, seam.SEAM_OUTPUT_FLOATS_ENV: str(output_floats),
                      **sanitizer.sanitizer_env()})
        assert sanitizer.parse_report(res.stderr) is None, res.stderr_text[-3000:]
    rec = assert_transcribed(res, executor, token)
    assert all(c.output_shape == (1, 1500, 384) for c in rec.calls)


@pytest.mark.physical
def test_told_one_float_less_the_same_launch_is_refused(seam_patched, standin_model, executor,
                                                        output_floats, jfk_wav):
    # The size is read on the ordinary path too: one float short, the right reply is refused.
    argv = contracts.coreml_argv(seam_patched.binary, standin_model, jfk_wav, "en")
    res, rec = seam_launch(executor, argv, timeout=RUN_TIMEOUT_S,
                           output_floats=output_floats - 1)
    assert_overflow_refused(res, ENCODER_OUTPUT, ENCODER_OUTPUT - 1)
    assert_sent_not_freed(rec, (1, 1500, 384), ENCODER_OUTPUT - 1)
