"""The real v1.8.5 whisper-cli build (the session's, in the session cache): static, recorded,
exact tree before and after, ``COREML = 0`` from the published path, cached on the second
call."""

from __future__ import annotations

import shutil

import pytest

from verifylib import canonical
from verifylib.evidence.gates import Status
from verifylib.evidence.build import rules as build_rules
from verifylib.evidence.build.rules import judge_ggml_build
from verifylib.runtime import contracts
from verifylib.whispercpp import source
from verifylib.whispercpp.build import build_whisper_cli
from verifylib.whispercpp.system_info import build_evidence, probe_system_info

TREE = "a276adc5ab0958b854ce44c16a3e31615f473552"
PATCH = "acd730d8c3ebed4339a31619b8936469df92368941013633b5cf8794cae90581"


def quiet(_msg: str) -> None:
    pass


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
    j = build_rules.judge_patch_exact(canonical.loads(canonical.dumps(ev)))
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
    # A Linux build is pinned to the CPU, and the real binary says so itself.
    assert res.options["GGML_METAL"] == "OFF" and ev["ggml_backend"] == "cpu"
    assert contracts.BACKEND_NO_GPU_MARKER in probe.result.stderr_text
    assert probe.backend == ev["probe"]["backend"] == "cpu"


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
