"""whisper-cli builds of a tiny CMake project standing in for whisper.cpp: publishing and
reuse, the same bytes from another folder, failure hygiene, and the ``system_info`` probe
judged (the compiler, CMake and readelf run for real; no whisper.cpp)."""

from __future__ import annotations

from pathlib import Path

import pytest

from verifylib import canonical
from verifylib.evidence.gates import Status
from verifylib.evidence.build.rules import judge_ggml_build
from verifylib.runtime import contracts
from verifylib.whispercpp.build import build_whisper_cli
from verifylib.whispercpp.cmake_steps import BuildError
from verifylib.whispercpp.system_info import build_evidence, probe_system_info
from verifylib.whispercpp.toolchain import compiler_identity

TREE = "a276adc5ab0958b854ce44c16a3e31615f473552"
PATCH = "acd730d8c3ebed4339a31619b8936469df92368941013633b5cf8794cae90581"


def quiet(_msg: str) -> None:
    pass


# ----------------------------------------------------------------------------- keys, options

def test_compiler_identity_names_the_tools():
    ident = compiler_identity()
    assert ident["c++"] and ident["cc"] and ident["cmake"].startswith("cmake version")
    assert ident["machine"] and ident["system"]
    assert "sdk" not in ident  # the Xcode and SDK facts are macOS's only
    canonical.dumps(ident)  # JSON-able


# ----------------------------------------------------------------------------- a tiny CMake project

FAKE_CLI = r"""
#include <cstdio>
#include <csignal>
int main(int argc, char **argv) {
    (void)argc; (void)argv;
    @CRASH@
    fprintf(stderr, "whisper_init_from_file_with_params_no_state: loading model (%s)\n", __FILE__);
    fprintf(stderr, "whisper_backend_init_gpu: @BACKEND@\n");
    fprintf(stderr, "system_info: n_threads = 2 / 2 | WHISPER : COREML = @COREML@ | OPENVINO = 0 |\n");
    printf(" [00:00:00.000 --> 00:00:01.000]  And so\n");
    return 0;
}
"""


def fake_project(root: Path, *, coreml: int = 0, broken: str | None = None,
                 backend: str = "no GPU found") -> Path:
    """A CMake project whose whisper-cli target prints a backend and a system_info line."""
    root.mkdir(parents=True)
    body = FAKE_CLI.replace("@COREML@", str(coreml)).replace("@BACKEND@", backend).replace(
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
    kept = list((cache / "cmake").rglob("verifylib-*.log"))
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
    # What the build records is what its options pin and its launch logged, read back.
    assert res.options["GGML_METAL"] == "OFF" and ev["ggml_backend"] == "cpu"
    assert probe.backend == "cpu" and ev["probe"]["backend"] == "cpu"
    text = probe.result.stderr_text + "\n" + probe.result.stdout_text
    assert judge_ggml_build(ev, text).status is Status.PASS


def test_probe_of_a_crashing_or_coreml_cli_fails_the_judge(tmp_path):
    audio, model = tmp_path / "a.wav", tmp_path / "m.bin"
    audio.write_bytes(b"RIFF")
    model.write_bytes(b"ggml")
    for name, kw, needle in [("segv", {"broken": "segv"}, "SIGSEGV"),
                             ("coreml", {"coreml": 1}, "does not show 'COREML = 0'"),
                             ("gpu", {"backend": "using MTL0 backend"},
                              "built for ggml backend 'cpu', but the probe chose 'metal'")]:
        res = build_whisper_cli(fake_project(tmp_path / name, **kw), tree_id=TREE,
                                patch_sha256=PATCH, variant="ggml", options={},
                                cache_dir=tmp_path / f"c-{name}", log=quiet)
        probe = probe_system_info(res.binary, model, audio)
        ev = canonical.loads(canonical.dumps(build_evidence(res, probe)))
        j = judge_ggml_build(ev, probe.result.stderr_text + "\n" + probe.result.stdout_text)
        assert j.status is Status.FAIL and needle in j.detail, j.detail
