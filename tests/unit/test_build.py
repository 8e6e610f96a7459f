"""whisper-cli builds, the pure parts: build keys, effective options, the ``build.ggml``
judge and the ``system_info`` parser. The ggml backend pins and what a launch logs choosing
are in tests/unit/test_backends.py. Builds of a tiny CMake project are in
tests/fake/test_build.py, the real v1.8.5 build in tests/physical/test_build.py."""

from __future__ import annotations


import pytest

from verifylib import canonical
from verifylib.whispercpp.build_options import build_key, effective_options
from verifylib.whispercpp.system_info import parse_system_info
from verifylib.evidence.build.rules import judge_ggml_build
from verifylib.evidence.gates import Status

TREE = "a276adc5ab0958b854ce44c16a3e31615f473552"
PATCH = "acd730d8c3ebed4339a31619b8936469df92368941013633b5cf8794cae90581"
SYSINFO = ("system_info: n_threads = 2 / 2 | WHISPER : COREML = 0 | OPENVINO = 0 | "
           "CPU : SSE3 = 1 | AVX2 = 1 | OPENMP = 1 |")
# What a v1.8.5 state logs before system_info when no GPU backend exists (src/whisper.cpp:
# whisper_backend_init_gpu).
NO_GPU = ("whisper_backend_init_gpu: device 0: CPU (type: 0)\n"
          "whisper_backend_init_gpu: no GPU found\n")
PINS_CPU = {"GGML_ACCELERATE": "OFF", "GGML_BLAS": "OFF", "GGML_METAL": "OFF",
            "GGML_METAL_EMBED_LIBRARY": "OFF"}


def test_build_key_is_stable_and_sensitive():
    comp = {"c++": "c++ 12", "cc": "cc 12", "cmake": "cmake version 3.25.1"}
    opts = effective_options("ggml", {"GGML_NATIVE": "ON"})
    k = build_key(TREE, PATCH, "ggml", opts, comp)
    assert canonical.is_sha256(k)
    assert k == build_key(TREE, PATCH, "ggml", dict(reversed(list(opts.items()))), dict(comp))
    others = {
        build_key("b" * 40, PATCH, "ggml", opts, comp),
        build_key(TREE, "0" * 64, "ggml", opts, comp),
        build_key(TREE, None, "ggml-unpatched", effective_options("ggml-unpatched", {}), comp),
        build_key(TREE, PATCH, "coreml", effective_options("coreml", {}), comp),
        build_key(TREE, PATCH, "ggml", effective_options("ggml", {"GGML_NATIVE": "OFF"}), comp),
        build_key(TREE, PATCH, "ggml", opts, {**comp, "c++": "clang 17"}),
        build_key(TREE, PATCH, "ggml", effective_options("ggml", {}, backend="metal"), comp),
        build_key(TREE, PATCH, "ggml", opts, {**comp, "sdk": {"developer_dir": "/A/Xcode.app"}}),
        build_key(TREE, PATCH, "ggml", opts, comp, launcher="ccache/base_dir=source-copy"),
    }
    assert k not in others and len(others) == 9
    # No launcher keys a build as it always was.
    assert k == build_key(TREE, PATCH, "ggml", opts, comp, launcher=None)


@pytest.mark.parametrize("args,match", [
    (("x" * 40, PATCH, "ggml"), "tree id"),
    ((TREE, None, "ggml"), "needs the applied patch"),
    ((TREE, PATCH, "ggml-unpatched"), "patch_sha256=None"),
    ((TREE, PATCH, "metal"), "variant"),
])
def test_build_key_refuses_inconsistent_inputs(args, match):
    with pytest.raises(ValueError, match=match):
        build_key(*args, {}, {})


def test_effective_options_force_static_release_and_variant_flags():
    g = effective_options("ggml", {"GGML_NATIVE": False, "GGML_AVX": 1})
    assert g == {"BUILD_SHARED_LIBS": "OFF", "CMAKE_BUILD_TYPE": "Release", "GGML_AVX": "1",
                 "GGML_NATIVE": "OFF", "WHISPER_BUILD_TESTS": "OFF", "WHISPER_COREML": "OFF",
                 **PINS_CPU}
    assert effective_options("ggml", None)["GGML_NATIVE"] == "ON"
    c = effective_options("coreml", {})
    assert c["WHISPER_COREML"] == "1" and c["WHISPER_COREML_ALLOW_FALLBACK"] == "OFF"
    for variant, bad in [("ggml", {"BUILD_SHARED_LIBS": "ON"}), ("ggml", {"WHISPER_COREML": "1"}),
                         ("coreml", {"WHISPER_COREML_ALLOW_FALLBACK": "ON"}),
                         ("ggml", {"BAD NAME": "1"}), ("ggml", {"X": "a\nb"})]:
        with pytest.raises(ValueError):
            effective_options(variant, bad)


# ----------------------------------------------------------------------------- the pure judge

def good_evidence() -> dict:
    # A complete build.ggml document, shaped as build_evidence writes it (the judge parses
    # it strictly with verifylib.evidence.build.schema).
    return {"built": True, "variant": "ggml", "key": "k", "binary": "/c/builds/k/whisper-cli",
            "sha256": "1" * 64, "recorded_sha256": "1" * 64, "static": True,
            "needed_libs": ["libgomp.so.1", "libstdc++.so.6", "libc.so.6"],
            "options": effective_options("ggml", {"GGML_NATIVE": "ON"}),
            "compiler": {"c++": "c++ 12", "cc": "cc 12", "cmake": "cmake version 3.25.1"},
            "cached": False, "seconds": 61.5, "tree_id": TREE, "patch_sha256": PATCH,
            "ggml_backend": "cpu",
            "probe": {"argv": ["/c/builds/k/whisper-cli", "-m", "m", "-f", "a", "-bs", "1"],
                      "returncode": 0, "signal": None, "timed_out": False, "wall_s": 0.4,
                      "stdout_sha256": "2" * 64, "stderr_sha256": "3" * 64,
                      "stdout_bytes": 10, "stderr_bytes": 200,
                      "system_info_line": SYSINFO, "coreml": 0, "backend": "cpu"}}


def test_judge_ggml_build_pass_and_each_failure():
    j = judge_ggml_build(good_evidence(), "noise\n" + NO_GPU + SYSINFO + "\nmore\n")
    assert j.status is Status.PASS, j.detail
    assert "ggml backend 'cpu' pinned, the probe logged" in j.detail
    # Substring matching: extra fields or reordering on the line do not matter.
    assert judge_ggml_build(good_evidence(),
                            NO_GPU + "system_info: X = 1 | COREML = 0 | Y = 2").status \
        is Status.PASS
    cases = [
        ({}, SYSINFO.replace("COREML = 0", "COREML = 1"), "COREML = 0"),
        ({}, "whisper_print_timings: ...", "no 'system_info:' line"),
        ({}, "COREML = 0 somewhere else", "no 'system_info:' line"),
        ({"needed_libs": ["libwhisper.so.1", "libc.so.6"]}, SYSINFO, "not static"),
        ({"static": False}, SYSINFO, "not static"),
        ({"sha256": "XYZ"}, SYSINFO, "malformed"),
        ({"recorded_sha256": "2" * 64}, SYSINFO, "recorded"),
        ({"variant": "ggml-unpatched"}, SYSINFO, "variant"),
        ({"patch_sha256": None}, SYSINFO, "patch sha256"),
        ({"built": False, "error": "cmake exploded"}, SYSINFO, "cmake exploded"),
        ({"probe": None}, SYSINFO, "no probe"),
    ]
    for change, text, needle in cases:
        ev = {**good_evidence(), **change}
        j = judge_ggml_build(ev, NO_GPU + text)
        assert j.status is Status.FAIL and needle in j.detail, (change, j.detail)
    for probe_change, needle in [({"returncode": 139, "signal": "SIGSEGV"}, "SIGSEGV"),
                                 ({"returncode": None, "timed_out": True}, "timed out True"),
                                 ({"returncode": 3}, "returncode 3"),
                                 ({"returncode": True}, "probe.returncode: expected an integer or null, got boolean True"),
                                 ({"argv": ["/elsewhere/whisper-cli"]}, "published binary"),
                                 ({"argv": ["/c/builds/k/whisper-cli", "-np"]}, "forbidden")]:
        ev = good_evidence()
        ev["probe"] = {**ev["probe"], **probe_change}
        j = judge_ggml_build(ev, NO_GPU + SYSINFO)
        assert j.status is Status.FAIL and needle in j.detail, (probe_change, j.detail)


def test_parse_system_info():
    assert parse_system_info("a\n" + SYSINFO + "\n") == (SYSINFO, 0)
    assert parse_system_info("system_info: COREML = 1 |")[1] == 1
    assert parse_system_info("system_info: AVX = 1 |") == ("system_info: AVX = 1 |", None)
    assert parse_system_info("nothing") == (None, None)
