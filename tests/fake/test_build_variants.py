"""Build variants of stage 01 beyond build.ggml: the Core ML build's evidence and rule
(whisper-bench configured like the Core ML whisper-cli, read for ``COREML = 1``), on a
tiny CMake project, and the unpatched build's record."""

from __future__ import annotations

from pathlib import Path

import pytest

from verifylib.stages import artifacts
from verifylib.whispercpp.bench import build_bench, build_coreml_variant, probe_bench
from verifylib import canonical
from verifylib.evidence import gates
from verifylib.evidence import registry as rules
from verifylib.whispercpp.build import build_whisper_cli
from verifylib.evidence.records import EvidenceView
from verifylib.evidence.gates import Status
from verifylib.stages.context import StageContext
from verifylib.stages import build as stage_build
from verifylib.evidence.build import rules as build_rules

TREE = "a276adc5ab0958b854ce44c16a3e31615f473552"
PATCH = "acd730d8c3ebed4339a31619b8936469df92368941013633b5cf8794cae90581"

PROGRAM = r"""
#include <cstdio>
int main() {
    fprintf(stderr, "system_info: n_threads = 1 / 8 | WHISPER : COREML = @COREML@ | OPENVINO = 0 |\n");
    fprintf(stderr, "whisper_backend_init_gpu: no GPU found\n");
    fprintf(stderr, "whisper_init_state: failed to load Core ML model from 'x-encoder.mlmodelc'\n");
    return @EXIT@;
}
"""


def project(root: Path, coreml: int = 1) -> Path:
    root.mkdir(parents=True)
    (root / "cli.cpp").write_text(PROGRAM.replace("@COREML@", str(coreml)).replace("@EXIT@", "3"))
    (root / "bench.cpp").write_text(PROGRAM.replace("@COREML@", str(coreml)).replace("@EXIT@", "2"))
    (root / "CMakeLists.txt").write_text("\n".join([
        "cmake_minimum_required(VERSION 3.13)", "project(fake CXX)",
        "set(CMAKE_RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)",
        "add_executable(whisper-cli cli.cpp)", "add_executable(whisper-bench bench.cpp)", ""]))
    return root


def quiet(_msg):
    pass


def coreml_gate(tmp_path, coreml=1, ggml_key=None, after=()):
    src = project(tmp_path / "src", coreml)
    cache = tmp_path / "cache"
    cli, bench = build_coreml_variant(src, tree_id=TREE, patch_sha256=PATCH,
                                      options={}, cache_dir=cache, log=quiet)
    model = tmp_path / "m.bin"
    model.write_bytes(b"ggml")
    probe = probe_bench(bench.binary, model)
    from verifylib import params
    ctx = StageContext("01_build", params.load(params.DEFAULT_PARAMETERS), tmp_path / "run")
    refs, ids = stage_build.write_coreml_evidence(ctx, cli, bench, probe,
                                                  patch_after_problems=list(after),
                                                  ggml_key=ggml_key, ggml_backend="cpu")
    return ctx, refs, ids, cli, bench, src


def test_core_ml_build_reads_coreml_1_from_whisper_bench(tmp_path):
    ctx, refs, ids, cli, bench, src = coreml_gate(tmp_path)
    j = rules.RULES["build.coreml"](EvidenceView(ctx.run_dir, refs, ids))
    assert j.status is Status.PASS, j.detail
    assert "'COREML = 1' read from whisper-bench built with the same options (exit 2)" in j.detail
    assert cli.options["WHISPER_COREML"] == "1"
    assert cli.options["WHISPER_COREML_ALLOW_FALLBACK"] == "OFF"
    assert bench.options == cli.options and bench.cli_key == cli.key
    assert cli.binary.parent.name == cli.key and bench.binary.parent.name == f"bench-{bench.key}"
    assert ids == {"binary.coreml.sha256": cli.sha256, "binary.coreml.backend": "cpu",
                   "binary.ggml.backend": "cpu"}
    assert cli.options["GGML_METAL"] == "OFF" and bench.options["GGML_METAL"] == "OFF"
    # Without its identities the gate fails: it must bind the backend its evidence records.
    j = rules.RULES["build.coreml"](EvidenceView(ctx.run_dir, refs))
    assert j.status is Status.FAIL and "identity binary.coreml.backend is None" in j.detail
    assert sorted(p.name for p in src.iterdir()) == ["CMakeLists.txt", "bench.cpp", "cli.cpp"]
    again = build_bench(src, cli, cache_dir=tmp_path / "cache", log=quiet)
    assert again.cached and again.sha256 == bench.sha256


def test_core_ml_build_rule_failures(tmp_path):
    ctx, refs, _, cli, _, _ = coreml_gate(tmp_path, coreml=0, ggml_key=None,
                                          after=["status differs"])
    ev = EvidenceView(ctx.run_dir, refs)
    doc, err, out = ev.json("coreml_build"), ev.bytes("bench_stderr"), ev.bytes("bench_stdout")
    j = build_rules.judge_coreml_build(doc, err, out)
    assert j.status is Status.FAIL
    assert "whisper-bench's system_info does not show 'COREML = 1' (found COREML = 0)" in j.detail
    assert "patched tree not exact after the build" in j.detail
    for edit, needle in [
        (lambda d: d["options"].update(WHISPER_COREML_ALLOW_FALLBACK="ON"),
         "CMake option WHISPER_COREML_ALLOW_FALLBACK is 'ON', not OFF"),
        (lambda d: d.update(ggml_key=d["key"]), "does not sit in a folder of its own"),
        (lambda d: d["bench"].update(cli_key="0" * 64), "not configured like the Core ML"),
        (lambda d: d.update(needed_libs=["libwhisper.so.1"]), "not static"),
        (lambda d: d["bench"]["probe"].update(returncode=-11), "disagrees with return code -11"),
        (lambda d: d.update(built=False, error="no Xcode"), "no build: no Xcode"),
    ]:
        d = canonical.loads(canonical.dumps(doc))
        edit(d)
        j = build_rules.judge_coreml_build(d, err, out)
        assert j.status is Status.FAIL and needle in j.detail, (needle, j.detail)
    j = build_rules.judge_coreml_build(doc, err + b"x", out)
    assert "bench streams are not the probe's" in j.detail


def test_unpatched_build_failure_is_recorded_not_raised(tmp_path, v185_pin):
    from verifylib import params
    broken = tmp_path / "src"
    broken.mkdir()
    (broken / "CMakeLists.txt").write_text('cmake_minimum_required(VERSION 3.13)\n'
                                           'project(x CXX)\nmessage(FATAL_ERROR "nope")\n')
    ctx = StageContext("01_build", params.load(params.DEFAULT_PARAMETERS), tmp_path / "run")
    ev = stage_build.unpatched_build(ctx, broken, v185_pin, {}, tmp_path / "cache", log=quiet)
    assert ev["built"] is False and "nope" in ev["error"]
    assert canonical.read_json(ctx.evidence_dir / "unpatched_build.json") == ev
    assert artifacts.UNPATCHED_IDENTITY not in ctx.identities
