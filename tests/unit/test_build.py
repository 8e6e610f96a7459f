"""whisper-cli builds: keys, publishing, failure hygiene, system_info, and the real v1.8.5 build."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from verifylib import canonical
from verifylib.runtime import contracts
from verifylib.whispercpp import source
from verifylib.whispercpp.build import (BuildError, build_evidence, build_key, build_whisper_cli,
                                        compiler_identity, effective_options, judge_ggml_build,
                                        parse_system_info, probe_system_info)
from verifylib.evidence.gates import Status

TREE = "a276adc5ab0958b854ce44c16a3e31615f473552"
PATCH = "acd730d8c3ebed4339a31619b8936469df92368941013633b5cf8794cae90581"
SYSINFO = ("system_info: n_threads = 2 / 2 | WHISPER : COREML = 0 | OPENVINO = 0 | "
           "CPU : SSE3 = 1 | AVX2 = 1 | OPENMP = 1 |")


def quiet(_msg: str) -> None:
    pass


# ----------------------------------------------------------------------------- keys, options

def test_compiler_identity_names_the_tools():
    ident = compiler_identity()
    assert ident["c++"] and ident["cc"] and ident["cmake"].startswith("cmake version")
    assert ident["machine"] and ident["system"]
    canonical.dumps(ident)  # JSON-able


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
    }
    assert k not in others and len(others) == 6


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
                 "GGML_NATIVE": "OFF", "WHISPER_BUILD_TESTS": "OFF", "WHISPER_COREML": "OFF"}
    assert effective_options("ggml", None)["GGML_NATIVE"] == "ON"
    c = effective_options("coreml", {})
    assert c["WHISPER_COREML"] == "1" and c["WHISPER_COREML_ALLOW_FALLBACK"] == "OFF"
    for variant, bad in [("ggml", {"BUILD_SHARED_LIBS": "ON"}), ("ggml", {"WHISPER_COREML": "1"}),
                         ("coreml", {"WHISPER_COREML_ALLOW_FALLBACK": "ON"}),
                         ("ggml", {"BAD NAME": "1"}), ("ggml", {"X": "a\nb"})]:
        with pytest.raises(ValueError):
            effective_options(variant, bad)


# ----------------------------------------------------------------------------- a tiny CMake project

FAKE_CLI = r"""
#include <cstdio>
#include <csignal>
int main(int argc, char **argv) {
    (void)argc; (void)argv;
    @CRASH@
    fprintf(stderr, "whisper_init_from_file_with_params_no_state: loading model (%s)\n", __FILE__);
    fprintf(stderr, "system_info: n_threads = 2 / 2 | WHISPER : COREML = @COREML@ | OPENVINO = 0 |\n");
    printf(" [00:00:00.000 --> 00:00:01.000]  And so\n");
    return 0;
}
"""


def fake_project(root: Path, *, coreml: int = 0, broken: str | None = None) -> Path:
    """A CMake project whose whisper-cli target prints a system_info line."""
    root.mkdir(parents=True)
    body = FAKE_CLI.replace("@COREML@", str(coreml)).replace(
        "@CRASH@", "raise(SIGSEGV);" if broken == "segv" else "")
    if broken == "compile":
        body += "\nthis is not C++;\n"
    (root / "main.cpp").write_text(body)
    cm = ["cmake_minimum_required(VERSION 3.13)", "project(fake CXX)",
          "set(CMAKE_RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)",
          "add_executable(whisper-cli main.cpp)"]
    if broken == "configure":
        cm.insert(2, 'message(FATAL_ERROR "fake configure failure")')
    (root / "CMakeLists.txt").write_text("\n".join(cm) + "\n")
    return root


def test_build_publishes_then_reuses_and_rebuilds_when_tampered(tmp_path):
    src = fake_project(tmp_path / "src")
    cache = tmp_path / "cache"
    kw = dict(tree_id=TREE, patch_sha256=PATCH, variant="ggml", options={}, cache_dir=cache, log=quiet)
    first = build_whisper_cli(src, **kw)
    assert not first.cached
    assert first.binary == cache / "builds" / first.key / "whisper-cli"
    assert first.sha256 == canonical.sha256_file(first.binary)
    meta = canonical.read_json(first.build_json)
    assert meta["sha256"] == first.sha256 and meta["key"] == first.key
    assert meta["options"]["BUILD_SHARED_LIBS"] == "OFF"
    assert first.static and "libc.so.6" in first.needed_libs
    # The build folder is outside the source tree and nothing was written into the source.
    assert sorted(p.name for p in src.iterdir()) == ["CMakeLists.txt", "main.cpp"]
    assert not (cache / "cmake" / first.key).exists()  # removed once published
    second = build_whisper_cli(src, **kw)
    assert (second.cached, second.sha256, second.binary) == (True, first.sha256, first.binary)
    assert second.seconds < 5
    # A published binary that no longer matches its record is rebuilt, not reused.
    with open(first.binary, "ab") as fh:
        fh.write(b"\0")
    third = build_whisper_cli(src, **kw)
    assert not third.cached and third.sha256 == canonical.sha256_file(third.binary)
    assert not [p for p in (cache / "builds").iterdir() if p.name.startswith(".")]


def test_same_key_gives_same_bytes_from_another_folder(tmp_path):
    # The fake CLI embeds __FILE__, as whisper.cpp does; path maps keep the bytes equal.
    kw = dict(tree_id=TREE, patch_sha256=PATCH, variant="ggml", options={}, log=quiet)
    a = build_whisper_cli(fake_project(tmp_path / "one" / "src"), cache_dir=tmp_path / "ca", **kw)
    b = build_whisper_cli(fake_project(tmp_path / "two" / "deeper" / "src"), cache_dir=tmp_path / "cb", **kw)
    assert a.key == b.key and a.sha256 == b.sha256
    assert str(tmp_path).encode() not in a.binary.read_bytes()


@pytest.mark.parametrize("broken,needle", [("configure", "fake configure failure"),
                                           ("compile", "error")])
def test_build_failure_publishes_nothing(tmp_path, broken, needle):
    src = fake_project(tmp_path / "src", broken=broken)
    cache = tmp_path / "cache"
    with pytest.raises(BuildError) as err:
        build_whisper_cli(src, tree_id=TREE, patch_sha256=PATCH, variant="ggml", options={},
                          cache_dir=cache, log=quiet)
    assert needle in str(err.value) and "log " in str(err.value)
    kept = list((cache / "cmake").glob("*/verifylib-*.log"))
    assert kept and any(needle in p.read_text(errors="replace") for p in kept)
    builds = cache / "builds"
    assert not builds.exists() or list(builds.iterdir()) == []


def test_probe_and_judge_on_a_fake_cli(tmp_path):
    res = build_whisper_cli(fake_project(tmp_path / "src"), tree_id=TREE, patch_sha256=PATCH,
                            variant="ggml", options={}, cache_dir=tmp_path / "c", log=quiet)
    audio, model = tmp_path / "a.wav", tmp_path / "m.bin"
    audio.write_bytes(b"RIFF")
    model.write_bytes(b"ggml")
    probe = probe_system_info(res.binary, model, audio)
    assert probe.result.argv[0] == str(res.binary)
    assert not {"-np", "--no-prints", "-ac", "--audio-ctx"} & set(probe.result.argv)
    assert probe.coreml == 0 and probe.system_info_line.startswith(contracts.SYSTEM_INFO_PREFIX)
    ev = canonical.loads(canonical.dumps(build_evidence(res, probe)))
    text = probe.result.stderr_text + "\n" + probe.result.stdout_text
    assert judge_ggml_build(ev, text).status is Status.PASS


def test_probe_of_a_crashing_or_coreml_cli_fails_the_judge(tmp_path):
    audio, model = tmp_path / "a.wav", tmp_path / "m.bin"
    audio.write_bytes(b"RIFF")
    model.write_bytes(b"ggml")
    for name, kw, needle in [("segv", {"broken": "segv"}, "SIGSEGV"),
                             ("coreml", {"coreml": 1}, "does not show 'COREML = 0'")]:
        res = build_whisper_cli(fake_project(tmp_path / name, **kw), tree_id=TREE,
                                patch_sha256=PATCH, variant="ggml", options={},
                                cache_dir=tmp_path / f"c-{name}", log=quiet)
        probe = probe_system_info(res.binary, model, audio)
        ev = canonical.loads(canonical.dumps(build_evidence(res, probe)))
        j = judge_ggml_build(ev, probe.result.stderr_text + "\n" + probe.result.stdout_text)
        assert j.status is Status.FAIL and needle in j.detail, j.detail


# ----------------------------------------------------------------------------- the pure judge

def good_evidence() -> dict:
    return {"built": True, "variant": "ggml", "binary": "/c/builds/k/whisper-cli",
            "sha256": "1" * 64, "recorded_sha256": "1" * 64, "patch_sha256": PATCH,
            "static": True, "needed_libs": ["libgomp.so.1", "libstdc++.so.6", "libc.so.6"],
            "probe": {"argv": ["/c/builds/k/whisper-cli", "-m", "m", "-f", "a", "-bs", "1"],
                      "returncode": 0, "signal": None, "timed_out": False}}


def test_judge_ggml_build_pass_and_each_failure():
    j = judge_ggml_build(good_evidence(), "noise\n" + SYSINFO + "\nmore\n")
    assert j.status is Status.PASS, j.detail
    # Substring matching: extra fields or reordering on the line do not matter.
    assert judge_ggml_build(good_evidence(),
                            "system_info: X = 1 | COREML = 0 | Y = 2").status is Status.PASS
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
        j = judge_ggml_build(ev, text)
        assert j.status is Status.FAIL and needle in j.detail, (change, j.detail)
    for probe_change, needle in [({"returncode": 139, "signal": "SIGSEGV"}, "SIGSEGV"),
                                 ({"returncode": None, "timed_out": True}, "timed out True"),
                                 ({"returncode": 3}, "returncode 3"),
                                 ({"returncode": True}, "returncode True"),
                                 ({"argv": ["/elsewhere/whisper-cli"]}, "published binary"),
                                 ({"argv": ["/c/builds/k/whisper-cli", "-np"]}, "forbidden")]:
        ev = good_evidence()
        ev["probe"] = {**ev["probe"], **probe_change}
        j = judge_ggml_build(ev, SYSINFO)
        assert j.status is Status.FAIL and needle in j.detail, (probe_change, j.detail)


def test_parse_system_info():
    assert parse_system_info("a\n" + SYSINFO + "\n") == (SYSINFO, 0)
    assert parse_system_info("system_info: COREML = 1 |")[1] == 1
    assert parse_system_info("system_info: AVX = 1 |") == ("system_info: AVX = 1 |", None)
    assert parse_system_info("nothing") == (None, None)


# ----------------------------------------------------------------------------- the real build

@pytest.mark.physical
def test_real_v185_ggml_build_is_static_and_recorded(v185_ggml_build, verifylib_cache):
    res = v185_ggml_build.result
    assert res.variant == "ggml" and res.patch_sha256 == PATCH and res.tree_id == TREE
    assert res.binary == verifylib_cache.expanduser().resolve() / "builds" / res.key / "whisper-cli"
    assert res.static
    assert not [lib for lib in res.needed_libs if "whisper" in lib or "ggml" in lib]
    assert res.sha256 == canonical.sha256_file(res.binary)
    assert canonical.read_json(res.build_json)["sha256"] == res.sha256
    assert res.options["BUILD_SHARED_LIBS"] == "OFF" and res.options["WHISPER_COREML"] == "OFF"


@pytest.mark.physical
def test_real_v185_tree_is_exact_before_and_after_the_build(v185_ggml_build, v185_pin):
    ev = source.patch_evidence(v185_pin, {"before": v185_ggml_build.before,
                                          "after": v185_ggml_build.after})
    j = source.judge_patch_exact(canonical.loads(canonical.dumps(ev)))
    assert j.status is Status.PASS, j.detail
    assert not (v185_ggml_build.patched.path / "build").exists()


@pytest.mark.physical
def test_real_v185_probe_shows_coreml_off_from_the_published_path(v185_ggml_build, v185_source):
    res = v185_ggml_build.result
    probe = probe_system_info(res.binary, v185_source.path / contracts.TEST_MODEL_IN_TREE,
                              v185_source.path / contracts.TEST_AUDIO_IN_TREE)
    assert probe.result.ok, probe.result.describe() + probe.result.stderr_text[-2000:]
    assert probe.result.argv[0] == str(res.binary)
    assert probe.coreml == 0
    assert contracts.COREML_OFF in probe.system_info_line
    ev = canonical.loads(canonical.dumps(build_evidence(res, probe)))
    j = judge_ggml_build(ev, probe.result.stderr_text + "\n" + probe.result.stdout_text)
    assert j.status is Status.PASS, j.detail


@pytest.mark.physical
def test_real_v185_binary_runs_after_being_copied(v185_ggml_build, v185_source, tmp_path):
    # Static linking: the binary does not depend on its build folder.
    copy = tmp_path / "elsewhere" / "whisper-cli"
    copy.parent.mkdir()
    shutil.copy2(v185_ggml_build.result.binary, copy)
    probe = probe_system_info(copy, v185_source.path / contracts.TEST_MODEL_IN_TREE,
                              v185_source.path / contracts.TEST_AUDIO_IN_TREE)
    assert probe.result.ok and probe.coreml == 0


@pytest.mark.physical
def test_real_v185_second_build_is_cached(v185_ggml_build, v185_pin, verifylib_cache):
    first = v185_ggml_build.result
    again = build_whisper_cli(v185_ggml_build.patched.path, tree_id=v185_pin.tree,
                              patch_sha256=v185_pin.patch_sha256, variant="ggml",
                              options={"GGML_NATIVE": "ON"}, cache_dir=verifylib_cache, log=quiet)
    assert again.cached and again.sha256 == first.sha256 and again.binary == first.binary
    assert again.seconds < 5
