"""``canary.sanitizer``: the stage's runs on fake ASan whisper-cli builds
(tests/helpers/fake_whisper_cli.py) and the pass rule on stored evidence (honest, forged and
tampered), in the run and in ``verifylib verify``."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from tests.helpers.asan import MEASURED
from tests.helpers.canary import fake_asan, fake_bins, forge_prerequisites, make_params
from tests.helpers.fake_whisper_cli import install
from verifylib import canonical
from verifylib.errors import PrerequisiteBroken
from verifylib.evidence import gates, receipt
from verifylib.evidence.gates import Status
from verifylib.evidence.layout import ASAN_SIDECAR
from verifylib.evidence.records import EvidenceView
from verifylib.evidence.canary import rules as canary_rules
from verifylib.evidence import registry as rules
from verifylib.runtime import contracts, sanitizer
from verifylib.stages import build as build_stage
from verifylib.stages import canary
from verifylib.stages.artifacts import asan_build
from verifylib.stages.context import StageContext
from verifylib.whispercpp import build, build_options, source
from verifylib.evidence.canary import schema as canary_schemas

# ----------------------------------------------------------------------------- the stage's runs

def _run(tmp_path, tree, unpatched, patched, monkeypatch=None):
    ctx = StageContext("03_canary", make_params(), tmp_path / "run")
    refs, ids = canary.sanitizer_ab(
        ctx, builds={"unpatched": unpatched, "patched": patched}, pin="v1.8.5",
        model=tree / contracts.TEST_MODEL_IN_TREE, audio=tree / contracts.TEST_AUDIO_IN_TREE,
        timeout=30, progress=False)
    return ctx, refs, ids


def _judge(ctx, refs, ids):
    return rules.RULES["canary.sanitizer"](EvidenceView(ctx.run_dir, refs, ids))


def test_honest_runs_pass_and_name_what_asan_saw(tmp_path, tree, monkeypatch):
    seen_env = []
    real = canary.run_whisper_cli

    def spy(argv, **kw):
        seen_env.append(kw.get("env_extra"))
        return real(argv, **kw)
    monkeypatch.setattr(canary, "run_whisper_cli", spy)
    ctx, refs, ids = _run(tmp_path, tree, fake_asan(tmp_path, "unpatched"),
                          fake_asan(tmp_path, "patched"))
    assert seen_env == [{"ASAN_OPTIONS": sanitizer.ASAN_OPTIONS}] * (2 * sanitizer.RUNS_PER_SIDE)
    j = _judge(ctx, refs, ids)
    assert j.status is Status.PASS, j.detail
    n = sanitizer.RUNS_PER_SIDE
    assert f"{n}/{n} runs with a sanitizer report: {n}x AddressSanitizer BUS on unknown address " \
           f"in whisper_batch_free (/whisper.cpp/src/whisper.cpp:499) (ends: {n}x exit 1)" in j.detail
    assert j.detail.endswith(f"{n}/{n} runs exit 3 with both markers, no sanitizer report")
    assert "uninitiali" not in j.detail
    assert set(ids) == {"binary.ggml_unpatched_asan.sha256", "binary.ggml_asan.sha256"}
    names = [r.name for r in refs]
    assert names[0] == "sanitizer" and all(x.startswith("asan-stream-") for x in names[1:])
    s = ctx.result.sanitizer
    assert s.sides["unpatched"].kind == "BUS on unknown address"
    assert s.sides["unpatched"].frames[2] == "#2 whisper_batch_free /whisper.cpp/src/whisper.cpp:499"
    assert s.sides["patched"].outcomes == {"exit 3 + both markers, no sanitizer report": n}


def _other_bytes(rec: dict) -> dict:
    """The same fake behaviour in a file of its own (two real builds never share bytes)."""
    with open(rec["binary"], "a") as fh:
        fh.write("# another build\n")
    return dict(rec, sha256=canonical.sha256_file(rec["binary"]))


def test_a_patched_side_with_a_report_fails(tmp_path, tree):
    noisy = _other_bytes(fake_asan(tmp_path, "patched", scenario="ggml-unpatched-asan"))
    ctx, refs, ids = _run(tmp_path, tree, fake_asan(tmp_path, "unpatched"), noisy)
    j = _judge(ctx, refs, ids)
    n = sanitizer.RUNS_PER_SIDE
    assert j.status is Status.FAIL
    assert f"{n}/{n} runs printed a sanitizer report (first, run 0: AddressSanitizer BUS on " \
           f"unknown address in whisper_batch_free" in j.detail
    assert f"{n}/{n} runs not exit 3 with both markers" in j.detail


def test_an_unpatched_side_without_a_report_fails(tmp_path, tree):
    quiet = fake_asan(tmp_path, "unpatched", scenario="ggml")
    ctx, refs, ids = _run(tmp_path, tree, quiet, fake_asan(tmp_path, "patched"))
    j = _judge(ctx, refs, ids)
    n = sanitizer.RUNS_PER_SIDE
    assert j.status is Status.FAIL
    assert f"{n}/{n} runs printed no sanitizer report (first, run 0: exit 3 + both markers)" \
        in j.detail


def test_a_missing_build_fails_naming_it(tmp_path, tree):
    ctx, refs, ids = _run(tmp_path, tree, "the unpatched AddressSanitizer build failed: boom",
                          fake_asan(tmp_path, "patched"))
    j = _judge(ctx, refs, ids)
    assert j.status is Status.FAIL
    assert "unpatched: AddressSanitizer build not available (the unpatched AddressSanitizer " \
           "build failed: boom)" in j.detail
    assert set(ids) == {"binary.ggml_asan.sha256"}
    assert not ctx.result.sanitizer.sides["unpatched"].available


def test_a_binary_that_changed_is_not_run(tmp_path, tree):
    rec = fake_asan(tmp_path, "unpatched")
    with pytest.raises(PrerequisiteBroken, match="does not hash to"):
        _run(tmp_path, tree, dict(rec, sha256="0" * 64), fake_asan(tmp_path, "patched"))


def _stored(tmp_path, tree):
    ctx, refs, ids = _run(tmp_path, tree, fake_asan(tmp_path, "unpatched"),
                          fake_asan(tmp_path, "patched"))
    ev = EvidenceView(ctx.run_dir, refs, ids)
    doc = ev.json("sanitizer")

    def stream(sha):
        name = canary_rules.asan_stream_name(sha)
        return ev.bytes(name) if ev.has(name) else None
    assert canary_rules.judge_sanitizer(doc, stream, ids).status is Status.PASS
    return doc, stream, ids


def _forged(doc, edit):
    d = canonical.loads(canonical.dumps(doc))
    edit(d)
    return d


def test_the_rule_refuses_forged_and_tampered_evidence(tmp_path, tree):
    doc, stream, ids = _stored(tmp_path, tree)
    u0 = doc["sides"]["unpatched"]["runs"][0]
    p0 = doc["sides"]["patched"]["runs"][0]

    def relabel_report(d):
        # The patched side borrows the unpatched run's stream; its record says "no report".
        d["sides"]["patched"]["runs"][0].update(stderr_sha256=u0["stderr_sha256"], report=None)

    def swap_binary(d):
        d["sides"]["unpatched"]["build"]["needed_libs"] = ["libstdc++.so.6", "libc.so.6"]

    cases = [
        (relabel_report, "patched run 0: the recorded sanitizer report is not the one the "
                         "stored stderr holds"),
        (lambda d: d["sides"]["unpatched"]["runs"][1]["report"].update(kind="heap-use-after-free"),
         "unpatched run 1: the recorded sanitizer report is not the one the stored stderr holds"),
        (lambda d: d["sides"]["unpatched"]["runs"][0].update(outcome="exit 3 + both markers"),
         "unpatched run 0: recorded outcome 'exit 3 + both markers'"),
        (lambda d: d["sides"]["patched"]["runs"][0].update(stderr_sha256="a" * 64),
         "patched run 0: stream not stored"),
        (lambda d: d["sides"]["patched"]["runs"].pop(), "patched: 2 runs recorded, expected 3"),
        (lambda d: d.update(runs_per_side=1), "runs_per_side 1, this version runs 3"),
        (lambda d: d.update(asan_options="detect_leaks=1"), "ASAN_OPTIONS 'detect_leaks=1' are not"),
        (lambda d: d.update(pin="v0.0"), "pin 'v0.0' is not in the shipped manifest"),
        (lambda d: d.update(trigger=["-dtw", "large.v3"]), "malformed trigger"),
        (swap_binary, "unpatched: links no AddressSanitizer runtime"),
        (lambda d: d["sides"]["patched"]["build"]["options"].update(CMAKE_CXX_FLAGS="-O3"),
         "patched: CMake options ['CMAKE_CXX_FLAGS'] are not the ggml-asan build's"),
        (lambda d: d["sides"]["patched"]["build"].update(patch_sha256=None),
         "patched: built from tree"),
        (lambda d: d["sides"]["patched"]["build"].update(variant="ggml"),
         "patched: built variant 'ggml', not 'ggml-asan'"),
        (lambda d: d["sides"]["unpatched"]["build"].update(static=False), "unpatched: not static"),
        (lambda d: d["sides"]["unpatched"]["build"].update(key="c" * 64),
         "unpatched: the binary does not sit in the folder of its build key"),
        (lambda d: d["sides"]["patched"].update(binary="/elsewhere/whisper-cli"),
         "patched run 0: evidence unusable: argv[0] is not the patched binary"),
        (lambda d: d["sides"]["patched"]["runs"][2].update(signal="SIGSEGV"),
         "recorded signal 'SIGSEGV' disagrees with return code 3"),
        (lambda d: d["sides"]["patched"].update(available=False, reason="gone"),
         "patched: AddressSanitizer build not available (gone)"),
    ]
    for edit, needle in cases:
        j = canary_rules.judge_sanitizer(_forged(doc, edit), stream, ids)
        assert j.status is Status.FAIL and needle in j.detail, (needle, j.detail)
    # The streams must be the runs' own bytes: one stored stream swapped for another.
    swapped = {p0["stderr_sha256"]: stream(u0["stderr_sha256"])}
    j = canary_rules.judge_sanitizer(doc, lambda sha: swapped.get(sha) or stream(sha), ids)
    assert j.status is Status.FAIL
    assert "patched run 0: evidence unusable: stderr is not this run's stream" in j.detail
    # Each side's binary must be the one the gate binds (and stage 01 recorded).
    j = canary_rules.judge_sanitizer(doc, stream, {**ids, "binary.ggml_asan.sha256": "d" * 64})
    assert j.status is Status.FAIL and "is not bound to the gate's binary.ggml_asan.sha256" in j.detail
    j = canary_rules.judge_sanitizer(_forged(doc, lambda d: d["sides"].pop("patched")), stream, ids)
    assert j.detail == "evidence must record both sides (unpatched and patched)"
    assert canary_rules.judge_sanitizer({"schema": "x"}, stream, ids).detail == \
        f"not a {canary_schemas.SANITIZER_SCHEMA} document"


def test_same_binary_on_both_sides_is_refused(tmp_path, tree):
    doc, stream, ids = _stored(tmp_path, tree)
    d = _forged(doc, lambda d: d["sides"]["patched"].update(
        binary_sha256=d["sides"]["unpatched"]["binary_sha256"]))
    ids = {**ids, "binary.ggml_asan.sha256": d["sides"]["unpatched"]["binary_sha256"]}
    j = canary_rules.judge_sanitizer(d, stream, ids)
    assert j.status is Status.FAIL and "the same file" in j.detail


# ----------------------------------------------------------------------------- in the run

def test_verify_rejects_a_sanitizer_report_hidden_from_the_patched_side(tmp_path, tree):
    run_dir = tmp_path / "run"
    forge_prerequisites(run_dir, tree, fake_bins(tmp_path))
    report = canary.run(make_params(runs=2), run_dir, progress=False)
    assert report.status("canary.sanitizer") is Status.PASS
    receipt.build_receipt(run_dir)
    assert not [p for p in receipt.verify(run_dir).problems if "canary" in p]
    # Tamper: a patched run's stored stderr now holds an ASan report, the gate record's and
    # the receipt's digests recomputed; the run record still carries the old stream digest.
    ev_dir = run_dir / "evidence" / "03_canary"
    doc = canonical.read_json(ev_dir / "sanitizer.json")
    target = doc["sides"]["patched"]["runs"][0]["stderr_sha256"]
    path = ev_dir / f"{canary_rules.asan_stream_name(target)}.txt"
    path.write_bytes(path.read_bytes() + MEASURED)
    gfile = run_dir / "gates" / "03_canary.json"
    stage = canonical.read_json(gfile)
    for g in stage["gates"]:
        for e in g["evidence"]:
            if e["path"].endswith(path.name):
                e["sha256"] = canonical.sha256_file(path)
    canonical.write_json(gfile, stage)
    receipt.build_receipt(run_dir)
    mine = [p for p in receipt.verify(run_dir).problems if p.startswith("gate canary.sanitizer:")]
    assert len(mine) == 1 and "recorded PASS but the evidence gives FAIL" in mine[0]
    assert "stderr is not this run's stream" in mine[0]


def test_stage_03_without_asan_builds_fails_the_informational_gate_only(tmp_path, tree):
    run_dir = tmp_path / "run"
    bins = {k: v for k, v in fake_bins(tmp_path).items() if not k.startswith("asan-")}
    forge_prerequisites(run_dir, tree, bins)
    report = canary.run(make_params(runs=2), run_dir, progress=False)
    rec = next(r for r in report.records if r.id == "canary.sanitizer")
    assert rec.status is Status.FAIL
    assert "stage 01_build recorded no AddressSanitizer builds" in rec.reason.detail
    assert report.status("canary.lifecycle_ab") is Status.PASS
    assert not gates.gate("canary.sanitizer").required


def test_asan_build_refuses_a_changed_or_failed_build(tmp_path, tree):
    run_dir = tmp_path / "run"
    bins = fake_bins(tmp_path)
    forge_prerequisites(run_dir, tree, bins)
    ctx = StageContext("03_canary", make_params(), run_dir)
    assert asan_build(ctx, "patched") == bins["asan-patched"]
    with open(bins["asan-unpatched"]["binary"], "a") as fh:
        fh.write("# changed\n")
    with pytest.raises(PrerequisiteBroken, match="is not the unpatched AddressSanitizer"):
        asan_build(ctx, "unpatched")
    sidecar = run_dir / "evidence" / "01_build" / f"{ASAN_SIDECAR}.json"
    canonical.write_json(sidecar, {"unpatched": {"built": False, "error": "no libasan"},
                                   "patched": dict(bins["asan-patched"], sha256="e" * 64)})
    with pytest.raises(PrerequisiteBroken, match="build failed: no libasan"):
        asan_build(ctx, "unpatched")
    with pytest.raises(PrerequisiteBroken, match="disagrees with stage 01's identities"):
        asan_build(ctx, "patched")


def test_stage_01_records_each_side_of_the_asan_builds(tmp_path, monkeypatch):
    pristine = tmp_path / "src"
    pristine.mkdir()
    (pristine / "CMakeLists.txt").write_text("project(x)\n")
    pin = dataclasses.replace(source.load_pins()["v1.8.5"], tree=source.git_tree_id(pristine))
    exe = install(tmp_path / "bin" / ("f" * 64), "ggml-unpatched-asan")
    built = []

    def fake_build(src, *, tree_id, patch_sha256, variant, options, cache_dir, jobs, log,
                   backend):
        built.append((Path(src), variant, patch_sha256))
        opts = build_options.effective_options(variant, options, backend=backend)
        return build.BuildResult(exe, canonical.sha256_file(exe), "f" * 64, False, 66.7, variant,
                                 opts, {}, ("libasan.so.8",),
                                 True, tree_id, patch_sha256, exe.parent / "build.json")
    monkeypatch.setattr(build_stage._build, "build_whisper_cli", fake_build)
    ctx = StageContext("01_build", make_params(), tmp_path / "run")
    out = build_stage.sanitizer_builds(ctx, pristine, None, pin, {"GGML_NATIVE": "ON"},
                                       tmp_path / "cache", jobs=1, log=lambda m: None)
    assert built == [(pristine, "ggml-unpatched-asan", None)]
    assert out["unpatched"]["built"] and out["unpatched"]["variant"] == "ggml-unpatched-asan"
    assert out["patched"] == {"built": False,
                              "error": "build.patch_exact did not pass: no patched work tree"}
    assert ctx.identities == {"binary.ggml_unpatched_asan.sha256": out["unpatched"]["sha256"]}
    assert canonical.read_json(ctx.evidence_dir / f"{ASAN_SIDECAR}.json") == out
