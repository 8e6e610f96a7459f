"""Every marker, exit code and flag the gates rely on, checked against the v1.8.5 text of
src/whisper.cpp and examples/cli/cli.cpp (the cached source, read at test time), and the
``.mlmodelc`` path derivation against whisper.cpp's own function compiled with g++."""

# ----------------------------------------------------------------------------- against the pinned source
#
# Every marker, exit code and flag the gates rely on is checked against the v1.8.5 text of
# src/whisper.cpp and examples/cli/cli.cpp (cached source, read at test time).
import re
import struct
import subprocess

import pytest

from verifylib.runtime import contracts
from verifylib.runtime.contracts import coreml_encoder_path
from tests.helpers.contract_cases import GUIDE_TABLE


def _block(text: str, signature: str) -> str:
    """The brace-balanced body that follows the first match of ``signature`` (a regex)."""
    m = re.search(signature, text)
    assert m, f"signature {signature!r} not found in the pinned source"
    start = text.index("{", m.end() - 1)
    depth = 0
    for i in range(start, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return text[m.start():i + 1]
    raise AssertionError("unbalanced braces")


@pytest.fixture(scope="module")
def whisper_src(v185_source) -> str:
    return (v185_source.path / "src" / "whisper.cpp").read_text()


@pytest.fixture(scope="module")
def cli_src(v185_source) -> str:
    return (v185_source.path / "examples" / "cli" / "cli.cpp").read_text()


@pytest.fixture(scope="module")
def init_state(whisper_src) -> str:
    return _block(whisper_src, r"\nstruct whisper_state \* whisper_init_state\(")


@pytest.fixture(scope="module")
def cli_main(cli_src) -> str:
    return _block(cli_src, r"\nint main\(int argc, char \*\* argv\) \{")


def _fmt(marker: str) -> str:
    """How a ``whisper_init_state: ...`` marker is spelled in the source: ``"%s: ...``."""
    assert marker.startswith(contracts.INIT_STATE_PREFIX)
    return '"%s: ' + marker[len(contracts.INIT_STATE_PREFIX):]


def test_every_core_ml_line_is_logged_by_whisper_init_state(init_state):
    assert contracts.INIT_STATE_PREFIX == "whisper_init_state: "
    for marker in (contracts.COREML_LOADING_PREFIX, contracts.COREML_FIRST_RUN_LINE,
                   contracts.COREML_LOAD_FAILURE_PREFIX, contracts.COREML_LOAD_MARKER,
                   contracts.AHEADS_FAILURE_MARKER):
        assert _fmt(marker) in init_state, marker
    # The two path-bearing lines end in '<path>' exactly as the prefixes assume.
    assert _fmt(contracts.COREML_LOADING_PREFIX) + "%s'\\n\"" in init_state
    assert _fmt(contracts.COREML_LOAD_FAILURE_PREFIX) + "%s'\\n\"" in init_state
    assert _fmt(contracts.COREML_FIRST_RUN_LINE) + '\\n"' in init_state
    assert contracts.COREML_LOAD_FAILURE_PREFIX.startswith(contracts.COREML_LOAD_FAILURE_MARKER)
    assert contracts.COREML_LOADING_PREFIX.endswith("'")


def test_load_marker_is_the_else_branch_and_fallback_off_fails_closed(init_state):
    # "Core ML model loaded" iff ctx_coreml != nullptr (docs/runtime-contract.md §2.2) ...
    assert re.search(r"if \(!state->ctx_coreml\) \{.*?\} else \{\s*WHISPER_LOG_INFO\("
                     + re.escape(_fmt(contracts.COREML_LOAD_MARKER)), init_state, re.S)
    # ... and without WHISPER_COREML_ALLOW_FALLBACK a failed load frees the state and returns.
    assert re.search(re.escape(_fmt(contracts.COREML_LOAD_FAILURE_PREFIX)) + r".*?\n"
                     r"#ifndef WHISPER_COREML_ALLOW_FALLBACK\s*whisper_free_state\(state\);"
                     r"\s*return nullptr;", init_state, re.S)


def test_both_early_returns_come_before_the_batch_is_initialized(init_state):
    batch_init = init_state.index("state->batch = whisper_batch_init(")
    aheads = re.search(re.escape(_fmt(contracts.AHEADS_FAILURE_MARKER)) + r'\\n", __func__\);'
                       r"\s*whisper_free_state\(state\);\s*return nullptr;", init_state)
    coreml = init_state.index(_fmt(contracts.COREML_LOAD_FAILURE_PREFIX))
    assert aheads and aheads.start() < batch_init and coreml < batch_init


def test_batch_member_is_declared_uninitialized_and_the_patch_initializes_it(whisper_src, v185_pin):
    state = _block(whisper_src, r"\nstruct whisper_state \{")
    assert re.search(r"^\s+" + re.escape(contracts.BATCH_MEMBER_UNINITIALIZED) + r"\s*$", state, re.M)
    patch = v185_pin.patch_bytes().decode()
    assert f"-    {contracts.BATCH_MEMBER_UNINITIALIZED}\n" in patch
    assert f"+    {contracts.BATCH_MEMBER_PATCHED}\n" in patch


def test_coreml_flag_of_system_info(whisper_src, cli_src):
    assert re.search(r's \+= "' + re.escape(contracts.COREML_FLAG) + r'"\s*\+ std::to_string\('
                     r"whisper_has_coreml\(\)\)", whisper_src)
    has = _block(whisper_src, r"static int whisper_has_coreml\(void\) \{")
    assert re.search(r"#ifdef WHISPER_USE_COREML\s*return 1;\s*#else\s*return 0;", has)
    assert (contracts.COREML_OFF, contracts.COREML_ON) == ("COREML = 0", "COREML = 1")
    assert contracts.COREML_ENABLED_MARKER == contracts.COREML_ON
    assert f'fprintf(stderr, "{contracts.SYSTEM_INFO_PREFIX} n_threads = ' in cli_src


def test_other_library_lines(whisper_src):
    no_state = _block(whisper_src, r"\nstruct whisper_context \* whisper_init_with_params_no_state\(")
    func, text = contracts.MODEL_LOAD_FAILURE.split(": ", 1)
    assert func == "whisper_init_with_params_no_state"
    assert f'"%s: {text}\\n", __func__' in no_state
    assert f'"%s: {contracts.DTW_DISABLED_BY_FLASH_ATTN}\\n"' in whisper_src
    for name in contracts.MODEL_LOAD_HPARAMS:
        assert re.search(r'"%s: ' + name + r"\s+= %d\\n\"", whisper_src), name


def test_encode_time_parses_whisper_print_timings_own_format(whisper_src):
    timings = _block(whisper_src, r"\nvoid whisper_print_timings\(struct whisper_context \* ctx\) \{")
    fmt = re.search(r'"(%s:\s+' + re.escape(contracts.ENCODE_TIME_LABEL) + r'[^"]*)"', timings).group(1)
    line = fmt.replace("\\n", "\n") % ("whisper_print_timings", 42.75, 3, 14.25)
    assert contracts.parse_encode_time("noise\n" + line) == (42.75, 3)
    assert contracts.parse_encode_time("no timings") is None


def test_exit_codes_are_those_of_cli_main(cli_main):
    def returns_after(message_regex: str) -> int:
        m = re.search(message_regex + r'.*?\s*return (\d+);', cli_main, re.S)
        assert m, message_regex
        return int(m.group(1))
    assert returns_after(re.escape(f'fprintf(stderr, "{contracts.INIT_FAILURE_MARKER}\\n");')) \
        == contracts.EXIT_INIT_FAILURE == 3
    assert returns_after(r'"error: unknown DTW preset') == contracts.EXIT_INIT_FAILURE
    assert returns_after(r"whisper_params_parse\(argc, argv, params\) == false\) \{") \
        == contracts.EXIT_BAD_ARGUMENTS
    assert returns_after(r'"error: no input files specified') == contracts.EXIT_NO_INPUT
    assert returns_after(r'"error: failed to parse grammar') == contracts.EXIT_GRAMMAR
    assert returns_after(r'"%s: failed to process audio') == contracts.EXIT_PROCESSING_FAILED
    assert re.search(r"whisper_free\(ctx\);\s*return (\d+);\s*\}$", cli_main).group(1) \
        == str(contracts.EXIT_OK)
    # Every status main can return is in the contract, and nothing else.
    assert {int(x) for x in re.findall(r"\breturn (\d+);", cli_main)} == set(contracts.EXIT_CODES)


def test_flags_are_whisper_cli_flags(cli_src, cli_main):
    def sets(flags: tuple, field: str) -> None:
        pattern = r"arg == \"" + re.escape(flags[0]) + r"\"\s*\|\| arg == \"" + re.escape(flags[1]) \
            + r"\"\)\s*\{ params\." + field + r"\s*="
        assert re.search(pattern, cli_src), flags
    forbidden = contracts.FORBIDDEN_FLAGS
    sets(forbidden[0:2], "no_prints")
    sets(forbidden[2:4], "audio_ctx")
    sets(contracts.PROCESSOR_FLAGS, "n_processors")
    sets((contracts.NO_FLASH_ATTN_FLAG, "--no-flash-attn"), "flash_attn")
    sets((contracts.DTW_FLAG, "--dtw"), "dtw")
    # -np installs an empty log callback: every library line disappears
    # (docs/runtime-contract.md §6.1).
    assert re.search(r"if \(params\.no_prints\) \{\s*whisper_log_set\(cb_log_disable, NULL\);", cli_main)
    assert re.search(r"static void cb_log_disable\([^)]*\) \{ \}", cli_src)
    assert re.search(r"int32_t n_processors\s*=\s*1;", cli_src)


def test_the_lifecycle_preset_has_more_text_layers_than_the_tree_test_model(whisper_src, cli_src,
                                                                           v185_source):
    preset = contracts.LIFECYCLE_DTW_PRESET
    enum = re.search(r'params\.dtw == "' + re.escape(preset) + r'"\)\s*cparams\.dtw_aheads_preset = '
                     r"(WHISPER_AHEADS_\w+);", cli_src).group(1)
    table = re.search(r"\{ " + enum + r",\s*\{ \d+, (g_aheads_\w+)\s*\} \}", whisper_src).group(1)
    heads = re.search(r"static const whisper_ahead " + table + r"\[\]\s*=\s*\{(.*?)\};", whisper_src).group(1)
    deepest = max(int(a) for a, _ in re.findall(r"\{(\d+), (\d+)\}", heads)) + 1
    # The model's n_text_layer: the ninth int32 of the ggml header, after the magic.
    raw = (v185_source.path / contracts.TEST_MODEL_IN_TREE).read_bytes()[:48]
    n_text_layer = struct.unpack("<12i", raw)[9]
    assert 0 < n_text_layer < deepest
    assert contracts.lifecycle_trigger_args() == ["-nfa", "-dtw", preset]


# ----------------------------------------------------------------------------- coreml_encoder_path


EDGE_CASES = [
    "/m/ggml-model-Q8_0.bin",          # upper-case Q: kept
    "/m/ggml-model-q8_0x.bin",         # six-character suffix: kept
    "/m/ggml-model-q80.bin",           # four characters: kept
    "/m/ggml-model-qa_b.bin",          # syntactic: any -q?_? goes
    "/m/ggml-model-x8_0.bin",          # not q
    "/m/ggml-model-q8-0.bin",          # no underscore
    "/data/my.models-v2/ggml-tiny",    # dot and dash in a folder, no extension
    "/data/run-2024.01/ggml-model.bin",
    "/a-b/c.d/ggml",
    "/a-b/c.d-q1_2/ggml",              # the folder's tail looks quantized after the cut
    "ggml-model",                      # no extension, no folder
    "ggml-model-q8_0",                 # no extension, quantized tail
    "./ggml-model.bin",
    "ggml.model.v2.bin",
    "-q1_2",
    "x-q1_2.bin",
    "",
    ".",
    "/tmp/é-qé_x.bin",                 # five characters but six bytes: kept
    "/tmp/x-q\u00e9.bin",
    "/tmp/sp ace/ggml model-q4_1.bin",
]


@pytest.fixture(scope="module")
def upstream_derive(whisper_src, tmp_path_factory):
    """whisper.cpp's own whisper_get_coreml_path_encoder, cut out of the pinned source and
    compiled with g++ (it is only built into Core ML builds, so no Linux binary runs it)."""
    func = _block(whisper_src, r"static std::string whisper_get_coreml_path_encoder\(std::string path_bin\) \{")
    d = tmp_path_factory.mktemp("derive")
    (d / "derive.cpp").write_text(
        "#include <cstdio>\n#include <string>\n" + func + "\n"
        "int main(int argc, char ** argv) {\n"
        "    for (int i = 1; i < argc; ++i) {\n"
        "        const std::string r = whisper_get_coreml_path_encoder(argv[i]);\n"
        "        fwrite(r.data(), 1, r.size(), stdout);\n"
        "        fputc(0, stdout);\n"
        "    }\n"
        "    return 0;\n"
        "}\n")
    exe = d / "derive"
    subprocess.run(["g++", "-std=c++17", "-O1", "-o", str(exe), str(d / "derive.cpp")], check=True)

    def derive(args: list[str]) -> list[str]:
        out = subprocess.run([str(exe), *args], check=True, capture_output=True).stdout
        return [os.fsdecode(x) for x in out.split(b"\0")[:-1]]
    return derive


import os  # noqa: E402


def test_coreml_encoder_path_equals_whisper_cpp_own_function(upstream_derive):
    args = [a for a, _ in GUIDE_TABLE] + EDGE_CASES
    assert upstream_derive(args) == [coreml_encoder_path(a) for a in args]
    # The edge cases mean what their comments say.
    assert coreml_encoder_path("/m/ggml-model-Q8_0.bin") == "/m/ggml-model-Q8_0-encoder.mlmodelc"
    assert coreml_encoder_path("/m/ggml-model-q8_0x.bin") == "/m/ggml-model-q8_0x-encoder.mlmodelc"
    assert coreml_encoder_path("/data/my.models-v2/ggml-tiny") == "/data/my-encoder.mlmodelc"
    assert coreml_encoder_path("/tmp/é-qé_x.bin") == "/tmp/é-qé_x-encoder.mlmodelc"
