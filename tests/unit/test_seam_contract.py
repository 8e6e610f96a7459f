"""The Core ML seam's contract, in process: the stderr readers of its lines, the C header
generated from the contract module, the digest of its sources and the seam build variants'
options and keys. The seam built and launched for real is tests/physical/test_seam.py."""

from __future__ import annotations

import hashlib
import re

import pytest

from verifylib import canonical
from verifylib.errors import ParametersInvalid
from verifylib.runtime.contracts import seam
from verifylib.whispercpp import build_options, seam_sources
from verifylib.whispercpp.build_options import (
    SEAM_VARIANTS,
    UNPATCHED_VARIANTS,
    build_key,
    effective_options,
    forced_options,
)
from verifylib.whispercpp.shared_ggml import ggml_options

TREE = "a276adc5ab0958b854ce44c16a3e31615f473552"
PATCH = "acd730d8c3ebed4339a31619b8936469df92368941013633b5cf8794cae90581"
COMPILER = {"c++": "c++ 12", "cc": "cc 12", "cmake": "cmake version 3.25.1"}
IN_SHA = hashlib.sha256(b"mel").hexdigest()
OUT_SHA = hashlib.sha256(b"out").hexdigest()


def encode_line(k=1, n_ctx=3000, n_mel=80, count=576000, ins=IN_SHA, outs=OUT_SHA) -> str:
    """One encode line exactly as the seam's C++ prints it (``snprintf`` in encode)."""
    return (f"{seam.SEAM_ENCODE}#{k} n_ctx={n_ctx} n_mel={n_mel} count={count} "
            f"input_sha256={ins} output_sha256={outs}")


# ----------------------------------------------------------------------------- the readers

def test_encode_lines_are_read_in_order_among_whisper_cpp_lines():
    stderr = "\n".join([
        "whisper_init_state: loading Core ML model from 'x-encoder.mlmodelc'",
        seam.SEAM_BANNER,
        seam.SEAM_LOADED + "stand-in for package p, tree digest d",
        "whisper_init_state: Core ML model loaded",
        encode_line(1),
        "whisper_full_with_state: something",
        encode_line(2, n_ctx=1500, count=288000, ins=OUT_SHA, outs=IN_SHA) + "\r",
        "whisper_print_timings:   encode time =   607.24 ms /     2 runs",
        seam.SEAM_FREED + "2 encode call(s)",
    ]) + "\n"
    lines = seam.seam_encode_lines(stderr)
    assert lines == (
        seam.SeamEncodeLine(1, 3000, 80, 576000, IN_SHA, OUT_SHA),
        seam.SeamEncodeLine(2, 1500, 80, 288000, OUT_SHA, IN_SHA),
    )
    assert all(isinstance(v, int) for v in (lines[0].index, lines[0].n_ctx, lines[0].count))


@pytest.mark.parametrize("bad", [
    encode_line(ins=IN_SHA[:-1]),                      # a digest one digit short
    encode_line(outs=OUT_SHA.upper()),                 # upper-case hex is not the seam's
    encode_line() + " trailing",                       # text after the output digest
    encode_line().replace("count=", "cnt="),           # a renamed field
    encode_line().replace("#1", "#-1"),                # a negative call number
    encode_line().replace("n_mel=80 ", ""),            # a missing field
    "x" + encode_line(),                               # not at the line's start
    encode_line().replace(seam.SEAM_PREFIX, "verifylib-seam:"),  # the prefix's space lost
    seam.SEAM_ENCODE + "#1",                           # a truncated line
])
def test_malformed_encode_lines_are_skipped(bad):
    good = encode_line(2)
    assert seam.seam_encode_lines(bad) == ()
    assert seam.seam_encode_lines("\n".join([bad, good])) == (
        seam.SeamEncodeLine(2, 3000, 80, 576000, IN_SHA, OUT_SHA),)


def test_no_seam_lines_in_a_plain_whisper_cpp_stream():
    plain = ("whisper_init_state: Core ML model loaded\n"
             "system_info: n_threads = 2 / 2 | WHISPER : COREML = 1 |\n"
             "whisper_print_timings:   encode time =   607.24 ms /     1 runs\n")
    assert seam.seam_encode_lines(plain) == ()
    assert not seam.is_seam_stream(plain)
    assert not seam.is_seam_stream("")


@pytest.mark.parametrize("line", [seam.SEAM_BANNER, seam.SEAM_LOADED + "p",
                                  seam.SEAM_REFUSED + "no folder at ''", encode_line(),
                                  seam.SEAM_FREED + "0 encode call(s)",
                                  seam.SEAM_EXECUTOR_LOST + "connection closed"])
def test_any_seam_line_marks_the_stream(line):
    assert seam.is_seam_stream("whisper_model_load: ok\n" + line + "\nmain: done\n")


def test_a_seam_prefix_inside_a_line_does_not_mark_the_stream():
    # A line that merely quotes the prefix (a transcript, a path) is not the seam's.
    assert not seam.is_seam_stream("main: processing '/tmp/verifylib-seam: x.wav'\n"
                                   " " + seam.SEAM_BANNER + "\n")


def test_every_marker_starts_with_the_prefix():
    for marker in (seam.SEAM_BANNER, seam.SEAM_LOADED, seam.SEAM_REFUSED, seam.SEAM_ENCODE,
                   seam.SEAM_FREED, seam.SEAM_EXECUTOR_LOST):
        assert marker.startswith(seam.SEAM_PREFIX) and marker != seam.SEAM_PREFIX
    assert len({seam.SEAM_BANNER, seam.SEAM_LOADED, seam.SEAM_REFUSED, seam.SEAM_ENCODE,
                seam.SEAM_FREED, seam.SEAM_EXECUTOR_LOST}) == 6


# ----------------------------------------------------------------------------- the C header

def _defines(header: str) -> dict[str, str]:
    out = {}
    for line in header.splitlines():
        m = re.match(r"^#define (\w+) (.+)$", line)
        if m:
            assert m.group(1) not in out, f"{m.group(1)} defined twice"
            out[m.group(1)] = m.group(2)
    return out


def _c_string(literal: str) -> str:
    """The value of one C string literal (only the escapes c_header writes)."""
    assert literal.startswith('"') and literal.endswith('"'), literal
    body = literal[1:-1]
    assert not re.search(r'(?<!\\)"', body.replace("\\\\", "")), "unescaped quote"
    return re.sub(r"\\(.)", r"\1", body)


def test_c_header_defines_every_marker_as_the_module_spells_it():
    header = seam.c_header()
    assert header.splitlines()[:2] == [
        "// Generated by verifylib.runtime.contracts.seam.c_header: do not edit.", "#pragma once"]
    assert header.endswith("\n")
    d = _defines(header)
    strings = {"VLS_PREFIX": seam.SEAM_PREFIX, "VLS_BANNER": seam.SEAM_BANNER,
               "VLS_LOADED": seam.SEAM_LOADED, "VLS_REFUSED": seam.SEAM_REFUSED,
               "VLS_ENCODE": seam.SEAM_ENCODE, "VLS_FREED": seam.SEAM_FREED,
               "VLS_EXECUTOR_LOST": seam.SEAM_EXECUTOR_LOST,
               "VLS_SOCKET_ENV": seam.SEAM_SOCKET_ENV, "VLS_LAUNCH_ENV": seam.SEAM_LAUNCH_ENV,
               "VLS_OUTPUT_FLOATS_ENV": seam.SEAM_OUTPUT_FLOATS_ENV,
               "VLS_OP_LOAD": seam.OP_LOAD.decode(), "VLS_OP_ENCODE": seam.OP_ENCODE.decode(),
               "VLS_OP_FREE": seam.OP_FREE.decode()}
    numbers = {"VLS_EXIT_EXECUTOR_LOST": seam.SEAM_EXIT_EXECUTOR_LOST,
               "VLS_IO_TIMEOUT_S": seam.SEAM_IO_TIMEOUT_S, "VLS_STATUS_OK": seam.STATUS_OK,
               "VLS_MAX_MESSAGE_BYTES": seam.MAX_MESSAGE_BYTES}
    assert set(d) == set(strings) | set(numbers)
    for name, value in strings.items():
        assert _c_string(d[name]) == value, name
    for name, value in numbers.items():
        assert int(d[name]) == value, name


def test_c_header_opcodes_are_four_bytes_and_the_exit_code_is_not_whisper_cpps():
    from verifylib.runtime import contracts
    for op in (seam.OP_LOAD, seam.OP_ENCODE, seam.OP_FREE):
        assert len(op) == 4 and op.isascii()
    assert len({seam.OP_LOAD, seam.OP_ENCODE, seam.OP_FREE}) == 3
    # 70 must not be mistaken for an exit whisper-cli itself gives, nor for 128+N.
    assert seam.SEAM_EXIT_EXECUTOR_LOST not in contracts.EXIT_CODES
    assert 0 < seam.SEAM_EXIT_EXECUTOR_LOST < 128
    assert seam.STATUS_OK != seam.STATUS_REFUSED


def test_c_header_escapes_what_a_c_literal_must(monkeypatch):
    monkeypatch.setattr(seam, "SEAM_BANNER", 'say "hi" \\ bye')
    d = _defines(seam.c_header())
    assert d["VLS_BANNER"] == '"say \\"hi\\" \\\\ bye"'
    assert _c_string(d["VLS_BANNER"]) == 'say "hi" \\ bye'


def test_the_cpp_source_uses_the_header_not_its_own_strings():
    files = seam_sources.seam_files()
    cpp = files["whisper_coreml_seam.cpp"].decode()
    assert f'#include "{seam_sources.HEADER_FILE}"' in cpp
    assert seam.SEAM_PREFIX not in cpp  # every marker comes from the generated header
    used = set(re.findall(r"\bVLS_\w+", cpp))
    assert used <= set(_defines(seam.c_header())), used - set(_defines(seam.c_header()))
    for name in ("VLS_BANNER", "VLS_LOADED", "VLS_REFUSED", "VLS_ENCODE", "VLS_FREED",
                 "VLS_EXECUTOR_LOST", "VLS_EXIT_EXECUTOR_LOST", "VLS_SOCKET_ENV",
                 "VLS_LAUNCH_ENV", "VLS_OUTPUT_FLOATS_ENV", "VLS_OP_FREE", "VLS_STATUS_OK"):
        assert name in used, name
    # The buffer's size is read from the environment once, in init, by the header's name.
    assert cpp.count("getenv(VLS_OUTPUT_FLOATS_ENV)") == 1


def test_the_launch_environment_names_are_distinct_and_the_seams():
    names = (seam.SEAM_SOCKET_ENV, seam.SEAM_LAUNCH_ENV, seam.SEAM_OUTPUT_FLOATS_ENV)
    assert seam.SEAM_OUTPUT_FLOATS_ENV == "VERIFYLIB_SEAM_OUTPUT_FLOATS"
    assert len(set(names)) == 3
    assert all(n.startswith("VERIFYLIB_SEAM_") and n.isupper() for n in names)


# ----------------------------------------------------------------------------- the sources

def test_seam_files_are_the_source_the_cmake_file_and_the_generated_header():
    files = seam_sources.seam_files()
    assert set(files) == {"whisper_coreml_seam.cpp", seam_sources.ATTACH_FILE,
                          seam_sources.HEADER_FILE}
    assert files[seam_sources.HEADER_FILE] == seam.c_header().encode()
    assert b"whisper_coreml_seam.cpp" in files[seam_sources.ATTACH_FILE]


def test_seam_digest_names_every_file_by_name_and_bytes(monkeypatch):
    real = seam_sources.seam_files()
    base = seam_sources.seam_digest()
    assert canonical.is_sha256(base) and base == seam_sources.seam_digest()

    def with_files(files):
        monkeypatch.setattr(seam_sources, "seam_files", lambda: dict(files))
        return seam_sources.seam_digest()

    assert with_files(real) == base
    digests = {base}
    for name, data in real.items():
        one_byte = dict(real)
        one_byte[name] = data[:-1] + bytes([data[-1] ^ 1])  # one bit of one file
        digests.add(with_files(one_byte))
        renamed = dict(real)
        renamed["x-" + name] = renamed.pop(name)
        digests.add(with_files(renamed))
    digests.add(with_files({**real, "extra.cpp": b""}))
    assert len(digests) == 2 * len(real) + 2


def test_seam_digest_follows_the_contract_header(monkeypatch):
    base = seam_sources.seam_digest()
    monkeypatch.setattr(seam, "SEAM_EXIT_EXECUTOR_LOST", 71)
    assert seam_sources.seam_digest() != base  # a contract change is a new seam build


def test_lay_out_writes_the_files_once(tmp_path):
    folder = seam_sources.lay_out(tmp_path)
    assert folder == tmp_path / seam_sources.SEAM_FOLDER
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == seam_sources.seam_files()
    with pytest.raises(FileExistsError):
        seam_sources.lay_out(tmp_path)


# ----------------------------------------------------------------------------- the variants

def test_seam_variants_are_variants_and_the_unpatched_ones_are_marked():
    assert set(SEAM_VARIANTS) <= set(build_options.VARIANTS)
    assert {v for v in SEAM_VARIANTS if v in UNPATCHED_VARIANTS} == {
        "seam-unpatched", "seam-unpatched-asan"}
    assert "seam" not in UNPATCHED_VARIANTS


@pytest.mark.parametrize("variant", SEAM_VARIANTS)
def test_seam_variants_force_the_attach_file_and_the_seam_digest(variant):
    forced = forced_options(variant, "cpu")
    assert forced["VERIFYLIB_SEAM_SHA256"] == seam_sources.seam_digest()
    assert forced["CMAKE_PROJECT_INCLUDE"] == \
        f"{seam_sources.SEAM_FOLDER}/{seam_sources.ATTACH_FILE}"
    # Apple's Core ML stays off: the seam compiles WHISPER_USE_COREML into `whisper` itself.
    assert forced["WHISPER_COREML"] == "OFF" and forced["WHISPER_COREML_ALLOW_FALLBACK"] == "OFF"
    opts = effective_options(variant, {"GGML_NATIVE": "ON"})
    assert opts["VERIFYLIB_SEAM_SHA256"] == seam_sources.seam_digest()
    with pytest.raises(ParametersInvalid, match="VERIFYLIB_SEAM_SHA256"):
        effective_options(variant, {"VERIFYLIB_SEAM_SHA256": "0" * 64})
    with pytest.raises(ParametersInvalid, match="WHISPER_COREML"):
        effective_options(variant, {"WHISPER_COREML": "ON"})


def test_the_seam_asan_variant_carries_the_sanitizer_flags():
    asan = forced_options("ggml-unpatched-asan", "cpu")
    forced = forced_options("seam-unpatched-asan", "cpu")
    for name in ("CMAKE_C_FLAGS", "CMAKE_CXX_FLAGS", "CMAKE_EXE_LINKER_FLAGS",
                 "CMAKE_C_FLAGS_RELEASE", "CMAKE_CXX_FLAGS_RELEASE"):
        assert forced[name] == asan[name]
    assert "CMAKE_CXX_FLAGS" not in forced_options("seam-unpatched", "cpu")


def test_seam_build_keys_name_the_seam_digest(monkeypatch):
    opts = effective_options("seam", {"GGML_NATIVE": "ON"})
    key = build_key(TREE, PATCH, "seam", opts, COMPILER)
    assert canonical.is_sha256(key)
    # The options it is keyed with carry the digest: another seam is another build.
    other = dict(opts, VERIFYLIB_SEAM_SHA256="0" * 64)
    assert build_key(TREE, PATCH, "seam", other, COMPILER) != key
    # Not the ggml variant's key, nor the other seam variants'.
    keys = {key,
            build_key(TREE, PATCH, "ggml", effective_options("ggml", {"GGML_NATIVE": "ON"}),
                      COMPILER),
            build_key(TREE, None, "seam-unpatched",
                      effective_options("seam-unpatched", {"GGML_NATIVE": "ON"}), COMPILER),
            build_key(TREE, None, "seam-unpatched-asan",
                      effective_options("seam-unpatched-asan", {"GGML_NATIVE": "ON"}),
                      COMPILER)}
    assert len(keys) == 4


@pytest.mark.parametrize("variant", ["seam-unpatched", "seam-unpatched-asan"])
def test_unpatched_seam_variants_take_no_patch_digest(variant):
    opts = effective_options(variant, {})
    assert canonical.is_sha256(build_key(TREE, None, variant, opts, COMPILER))
    with pytest.raises(ParametersInvalid, match="patch_sha256=None"):
        build_key(TREE, PATCH, variant, opts, COMPILER)


def test_the_patched_seam_variant_needs_the_patch_digest():
    opts = effective_options("seam", {})
    with pytest.raises(ParametersInvalid, match="needs the applied patch"):
        build_key(TREE, None, "seam", opts, COMPILER)


@pytest.mark.parametrize("seam_variant,ggml_variant", [
    ("seam", "ggml"), ("seam-unpatched", "ggml-unpatched"),
    ("seam-unpatched-asan", "ggml-unpatched-asan"), ("seam-unpatched-asan", "ggml")])
@pytest.mark.parametrize("user", [{"GGML_NATIVE": "ON"}, {"GGML_NATIVE": "OFF"}, {}])
def test_a_seam_variant_links_the_ggml_variants_ggml(seam_variant, ggml_variant, user):
    seam_ggml = ggml_options(seam_variant, effective_options(seam_variant, user))
    assert seam_ggml == ggml_options(ggml_variant, effective_options(ggml_variant, user))
    # Neither the seam's attach file nor its digest reaches ggml's own configure.
    assert not {"CMAKE_PROJECT_INCLUDE", "VERIFYLIB_SEAM_SHA256"} & set(seam_ggml)


# ----------------------------------------------------------------------------- the stage's launch

class _FakeExecutor:
    """What :func:`verifylib.stages.seam.seam_launch` asks of an executor, no socket."""

    def __init__(self):
        self.env = {seam.SEAM_SOCKET_ENV: "/nowhere/sock", seam.SEAM_LAUNCH_ENV: "tok"}

    def launch_env(self):
        return "tok", dict(self.env)

    def launch(self, token):
        return f"record of {token}"


@pytest.mark.parametrize("floats,told", [(1500 * 384, "576000"), (0, None)])
def test_seam_launch_hands_the_encoder_output_size(monkeypatch, floats, told):
    from verifylib.stages import seam as stage

    seen = {}

    def run(argv, *, timeout, env_extra):
        seen.update(argv=argv, timeout=timeout, env=dict(env_extra))
        return "result"

    monkeypatch.setattr(stage, "run_whisper_cli", run)
    ex = _FakeExecutor()
    out = stage.seam_launch(ex, ("whisper-cli", "-m", "m"), timeout=7, output_floats=floats)
    assert out == ("result", "record of tok")
    assert seen["argv"] == ["whisper-cli", "-m", "m"] and seen["timeout"] == 7
    # The launch's own variables are kept; the size is added only when it is known.
    assert {k: v for k, v in seen["env"].items() if k != seam.SEAM_OUTPUT_FLOATS_ENV} == ex.env
    assert seen["env"].get(seam.SEAM_OUTPUT_FLOATS_ENV) == told
