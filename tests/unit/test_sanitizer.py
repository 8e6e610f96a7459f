"""``canary.sanitizer``: the ASan report reader, the ASan build variants, the stage's runs
and the pass rule on stored evidence (honest, forged and tampered), plus one physical run
of both v1.8.5 AddressSanitizer builds."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from tests.fake_whisper_cli import install
from tests.test_canary import fake_asan, fake_bins, forge_prerequisites, make_params
from verifylib.whispercpp import build, source
from verifylib import canonical
from verifylib.runtime import contracts, sanitizer
from verifylib.evidence import gates, receipt
from verifylib.evidence.rules import registry as rules
from verifylib.stages.artifacts import ASAN_SIDECAR, asan_build
from verifylib.errors import PrerequisiteBroken
from verifylib.evidence.records import EvidenceView
from verifylib.evidence.gates import Status
from verifylib.stages.context import StageContext
from verifylib.stages import build as build_stage
from verifylib.stages import canary

# What the v1.8.5 unpatched ASan whisper-cli printed under the lifecycle trigger on our
# Linux machine (GCC 12 libasan, llvm-symbolizer on PATH), addresses as measured.
MEASURED = b"""\
whisper_init_state: kv pad  size  =    2.36 MB
aheads_masks_init: tried to set alignment head on text layer 8, but model only has 4 text layerswhisper_init_state: aheads_masks_init() failed for alignment heads masks
AddressSanitizer:DEADLYSIGNAL
=================================================================
==1502==ERROR: AddressSanitizer: BUS on unknown address (pc 0x7fb44bc288b5 bp 0xbebebebebebebeae sp 0x7ffca15e0a10 T0)
==1502==The signal is caused by a READ memory access.
==1502==Hint: this fault was caused by a dereference of a high value address (see register values below).  Disassemble the provided pc to learn which register was used.
    #0 0x7fb44bc288b5 in bool __sanitizer::atomic_compare_exchange_strong<__sanitizer::atomic_uint8_t>(__sanitizer::atomic_uint8_t volatile*, __sanitizer::atomic_uint8_t::Type*, __sanitizer::atomic_uint8_t::Type, __sanitizer::memory_order) ../../../../src/libsanitizer/sanitizer_common/sanitizer_atomic_clang.h:80
    #1 0x7fb44bc288b5 in __asan::Allocator::AtomicallySetQuarantineFlagIfAllocated(__asan::AsanChunk*, void*, __sanitizer::BufferedStackTrace*) ../../../../src/libsanitizer/asan/asan_allocator.cpp:620
    #2 0x7fb44bc288b5 in __asan::Allocator::Deallocate(void*, unsigned long, unsigned long, __sanitizer::BufferedStackTrace*, __asan::AllocType) ../../../../src/libsanitizer/asan/asan_allocator.cpp:696
    #3 0x7fb44bc288b5 in __asan::asan_free(void*, __sanitizer::BufferedStackTrace*, __asan::AllocType) ../../../../src/libsanitizer/asan/asan_allocator.cpp:955
    #4 0x7fb44bcb767e in __interceptor_free ../../../../src/libsanitizer/asan/asan_malloc_linux.cpp:53
    #5 0x55df7dbddcd5 in whisper_batch_free /whisper.cpp/src/whisper.cpp:499
    #6 0x55df7dbddcd5 in whisper_free_state /whisper.cpp/src/whisper.cpp:3824
    #7 0x55df7dbe5c4d in whisper_init_state /whisper.cpp/src/whisper.cpp:3433
    #8 0x55df7dc12d74 in whisper_init_from_file_with_params /whisper.cpp/src/whisper.cpp:3741
    #9 0x55df7da3896a in main /whisper.cpp/examples/cli/cli.cpp:1101
    #10 0x7fb44ba45249 in __libc_start_call_main ../sysdeps/nptl/libc_start_call_main.h:58
    #11 0x7fb44ba45304 in __libc_start_main_impl ../csu/libc-start.c:360
    #12 0x55df7da1e180 in _start (/cache/builds/c45c52ee/whisper-cli+0x4a180)

AddressSanitizer can not provide additional info.
SUMMARY: AddressSanitizer: BUS ../../../../src/libsanitizer/sanitizer_common/sanitizer_atomic_clang.h:80 in bool __sanitizer::atomic_compare_exchange_strong<__sanitizer::atomic_uint8_t>(__sanitizer::atomic_uint8_t volatile*, __sanitizer::atomic_uint8_t::Type*, __sanitizer::atomic_uint8_t::Type, __sanitizer::memory_order)
==1502==ABORTING
"""

CLEAN = (b"whisper_init_state: aheads_masks_init() failed for alignment heads masks\n"
         b"error: failed to initialize whisper context\n")


# ----------------------------------------------------------------------------- the reader

def test_the_measured_report_reads_as_a_bad_free_in_whisper_batch_free():
    rep = sanitizer.parse_report(MEASURED)
    assert (rep.tool, rep.kind) == ("AddressSanitizer", "BUS on unknown address")
    assert rep.summary.startswith("AddressSanitizer: BUS ../../../../src/libsanitizer/")
    assert [f.index for f in rep.frames] == list(range(13))
    assert all(f.in_runtime for f in rep.frames[:5])
    app = rep.first_app_frame()
    assert (app.index, app.function, app.location) == (5, "whisper_batch_free",
                                                        "/whisper.cpp/src/whisper.cpp:499")
    assert [f.function for f in rep.frames[5:10]] == [
        "whisper_batch_free", "whisper_free_state", "whisper_init_state",
        "whisper_init_from_file_with_params", "main"]
    assert rep.frames[12] == sanitizer.Frame(12, "_start", "/cache/builds/c45c52ee/whisper-cli+0x4a180")
    assert rep.describe() == ("AddressSanitizer BUS on unknown address in whisper_batch_free "
                              "(/whisper.cpp/src/whisper.cpp:499)")
    assert "uninitiali" not in rep.describe()
    ev = rep.to_evidence()
    assert ev["described"] == rep.describe() and len(ev["frames"]) == 13
    assert ev == canonical.loads(canonical.dumps(ev))  # stored and re-read unchanged
    assert sanitizer.parse_report(MEASURED.decode()) == rep


@pytest.mark.parametrize("stream", [CLEAN, b"", "no report here\n",
                                    b"ERROR: AddressSanitizer failed to allocate 0x10 bytes\n"])
def test_a_stream_without_a_report_has_none(stream):
    assert sanitizer.parse_report(stream) is None
    assert sanitizer.report_evidence(stream) is None


@pytest.mark.parametrize("line, tool, kind", [
    ("==7==ERROR: AddressSanitizer: attempting free on address which was not malloc()-ed: "
     "0x602000000010 in thread T0", "AddressSanitizer",
     "attempting free on address which was not malloc()-ed"),
    ("==7==ERROR: AddressSanitizer: SEGV on unknown address 0x000000000000 (pc 0x1 bp 0x2 "
     "sp 0x3 T0)", "AddressSanitizer", "SEGV on unknown address"),
    ("==7==ERROR: AddressSanitizer: heap-use-after-free on address 0x6030000000f0 at pc 0x1 "
     "bp 0x2 sp 0x3", "AddressSanitizer", "heap-use-after-free on address"),
    ("==7==ERROR: AddressSanitizer: attempting double-free on 0x602000000010 in thread T0:",
     "AddressSanitizer", "attempting double-free"),
    ("==7==ERROR: LeakSanitizer: detected memory leaks", "LeakSanitizer",
     "detected memory leaks"),
])
def test_kinds_lose_their_addresses(line, tool, kind):
    rep = sanitizer.parse_report(f"noise\n{line}\n    #0 0x1 in free x.c:1\n")
    assert (rep.tool, rep.kind) == (tool, kind)
    assert rep.frames == (sanitizer.Frame(0, "free", "x.c:1"),)


def test_a_summary_without_an_error_line_is_still_a_report():
    rep = sanitizer.parse_report("SUMMARY: AddressSanitizer: bad-free (/lib/libasan.so.8+0xd7b98) in free\n")
    assert (rep.tool, rep.kind, rep.frames) == ("AddressSanitizer", "bad-free", ())
    assert rep.describe() == "AddressSanitizer bad-free"


@pytest.mark.parametrize("line, frame", [
    ("    #6 0x7f00 (/lib/x86_64-linux-gnu/libc.so.6+0x271ca)",
     (6, None, "/lib/x86_64-linux-gnu/libc.so.6+0x271ca")),
    ("    #0 0x1 in operator delete(void*, unsigned long) "
     "../../../../src/libsanitizer/asan/asan_new_delete.cpp:164",
     (0, "operator delete(void*, unsigned long)",
      "../../../../src/libsanitizer/asan/asan_new_delete.cpp:164")),
    ("    #2 0x1 in bar(int) (/x/whisper-cli+0x10)", (2, "bar(int)", "/x/whisper-cli+0x10")),
    ("    #3 0x1 in foo", (3, "foo", None)),
    ("    #1 0x1 in baz /a/b.c:10:5", (1, "baz", "/a/b.c:10:5")),
])
def test_frame_forms(line, frame):
    f = sanitizer.parse_frame(line)
    assert (f.index, f.function, f.location) == frame


def test_non_frames_and_runtime_frames():
    assert sanitizer.parse_frame("#x 0x1 in foo") is None
    assert sanitizer.parse_frame("whisper_init_state: kv self size") is None
    assert sanitizer.Frame(0, "operator delete(void*)", "/lib/libasan.so.8+0x10").in_runtime
    assert sanitizer.Frame(0, "__interceptor_free", None).in_runtime
    assert not sanitizer.Frame(5, "whisper_batch_free", "/whisper.cpp/src/whisper.cpp:499").in_runtime
    assert sanitizer.Frame(5, "f", None).text() == "#5 f"


def test_only_the_first_stack_is_kept_and_capped():
    deep = "\n".join(f"    #{i} 0x{i:x} in f{i} a.c:{i}" for i in range(40))
    text = f"==1==ERROR: AddressSanitizer: SEGV on unknown address 0x0 (pc 0x1)\n{deep}\n\n" \
           "    #0 0x9 in other b.c:1\n"
    rep = sanitizer.parse_report(text)
    assert len(rep.frames) == sanitizer.TOP_FRAMES
    assert rep.frames[-1].function == f"f{sanitizer.TOP_FRAMES - 1}"


def test_the_asan_runtime_shows_in_the_linked_libraries():
    assert sanitizer.links_asan_runtime(["libasan.so.8", "libc.so.6"])
    assert sanitizer.links_asan_runtime(["@rpath/libclang_rt.asan_osx_dynamic.dylib"])
    assert not sanitizer.links_asan_runtime(["libstdc++.so.6", "libc.so.6"])
    assert sanitizer.sanitizer_env() == {"ASAN_OPTIONS": sanitizer.ASAN_OPTIONS}
    opts = dict(o.split("=") for o in sanitizer.ASAN_OPTIONS.split(":"))
    assert opts["detect_leaks"] == "0" and opts["abort_on_error"] == "0"
    assert opts["color"] == "never" and opts["symbolize"] == "1"


# ----------------------------------------------------------------------------- build variants

def test_asan_variants_force_their_flags_and_get_keys_of_their_own():
    assert {v for v, _ in sanitizer.SIDES.values()} == set(build.ASAN_VARIANTS)
    for variant in build.ASAN_VARIANTS:
        opts = build.effective_options(variant, {"GGML_NATIVE": "ON"})
        assert opts == {**opts, **build.forced_options(variant)}
        for lang in ("CMAKE_C_FLAGS", "CMAKE_CXX_FLAGS"):
            assert opts[lang] == "-fsanitize=address -fno-omit-frame-pointer"
        assert opts["CMAKE_EXE_LINKER_FLAGS"] == "-fsanitize=address"
        assert opts["BUILD_SHARED_LIBS"] == "OFF" and opts["WHISPER_COREML"] == "OFF"
        with pytest.raises(ValueError, match="fixed"):
            build.effective_options(variant, {"CMAKE_C_FLAGS": "-O3"})
    tree, patch = "a" * 40, "b" * 64
    comp = {"cc": "gcc"}
    keys = {build.build_key(tree, None, "ggml-unpatched", build.effective_options("ggml-unpatched", {}), comp),
            build.build_key(tree, None, "ggml-unpatched-asan",
                            build.effective_options("ggml-unpatched-asan", {}), comp),
            build.build_key(tree, patch, "ggml", build.effective_options("ggml", {}), comp),
            build.build_key(tree, patch, "ggml-asan", build.effective_options("ggml-asan", {}), comp)}
    assert len(keys) == 4
    with pytest.raises(ValueError, match="patch_sha256=None"):
        build.build_key(tree, patch, "ggml-unpatched-asan", {}, comp)
    with pytest.raises(ValueError, match="needs the applied patch"):
        build.build_key(tree, None, "ggml-asan", {}, comp)


# ----------------------------------------------------------------------------- the stage's runs

@pytest.fixture
def tree(tmp_path) -> Path:
    t = tmp_path / "whisper.cpp"
    (t / "models").mkdir(parents=True)
    (t / "samples").mkdir()
    (t / contracts.TEST_MODEL_IN_TREE).write_bytes(b"ggml test model")
    (t / contracts.TEST_AUDIO_IN_TREE).write_bytes(b"RIFF sample")
    return t


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
        name = rules.asan_stream_name(sha)
        return ev.bytes(name) if ev.has(name) else None
    assert rules.judge_sanitizer(doc, stream, ids).status is Status.PASS
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
        j = rules.judge_sanitizer(_forged(doc, edit), stream, ids)
        assert j.status is Status.FAIL and needle in j.detail, (needle, j.detail)
    # The streams must be the runs' own bytes: one stored stream swapped for another.
    swapped = {p0["stderr_sha256"]: stream(u0["stderr_sha256"])}
    j = rules.judge_sanitizer(doc, lambda sha: swapped.get(sha) or stream(sha), ids)
    assert j.status is Status.FAIL
    assert "patched run 0: evidence unusable: stderr is not this run's stream" in j.detail
    # Each side's binary must be the one the gate binds (and stage 01 recorded).
    j = rules.judge_sanitizer(doc, stream, {**ids, "binary.ggml_asan.sha256": "d" * 64})
    assert j.status is Status.FAIL and "is not bound to the gate's binary.ggml_asan.sha256" in j.detail
    j = rules.judge_sanitizer(_forged(doc, lambda d: d["sides"].pop("patched")), stream, ids)
    assert j.detail == "evidence must record both sides (unpatched and patched)"
    assert rules.judge_sanitizer({"schema": "x"}, stream, ids).detail == \
        f"not a {rules.SANITIZER_SCHEMA} document"


def test_same_binary_on_both_sides_is_refused(tmp_path, tree):
    doc, stream, ids = _stored(tmp_path, tree)
    d = _forged(doc, lambda d: d["sides"]["patched"].update(
        binary_sha256=d["sides"]["unpatched"]["binary_sha256"]))
    ids = {**ids, "binary.ggml_asan.sha256": d["sides"]["unpatched"]["binary_sha256"]}
    j = rules.judge_sanitizer(d, stream, ids)
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
    path = ev_dir / f"{rules.asan_stream_name(target)}.txt"
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

    def fake_build(src, *, tree_id, patch_sha256, variant, options, cache_dir, jobs, log):
        built.append((Path(src), variant, patch_sha256))
        return build.BuildResult(exe, canonical.sha256_file(exe), "f" * 64, False, 66.7, variant,
                                 build.effective_options(variant, options), {}, ("libasan.so.8",),
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


# ----------------------------------------------------------------------------- physical

@pytest.mark.physical
def test_physical_sanitizer_gate_v185(tmp_path, v185_source, v185_asan_builds, v185_pin):
    u, p = v185_asan_builds.unpatched, v185_asan_builds.patched
    for res in (u, p):
        assert res.static and sanitizer.links_asan_runtime(res.needed_libs)
        assert res.binary.parent.name == res.key
    assert (u.variant, u.patch_sha256) == ("ggml-unpatched-asan", None)
    assert (p.variant, p.patch_sha256) == ("ggml-asan", v185_pin.patch_sha256)
    assert u.sha256 != p.sha256

    def record(res):
        return {"built": True, "binary": str(res.binary), "sha256": res.sha256, "key": res.key,
                "variant": res.variant, "options": dict(res.options),
                "needed_libs": list(res.needed_libs), "static": res.static,
                "tree_id": res.tree_id, "patch_sha256": res.patch_sha256}
    ctx = StageContext("03_canary", make_params(), tmp_path / "run")
    refs, ids = canary.sanitizer_ab(
        ctx, builds={"unpatched": record(u), "patched": record(p)}, pin=v185_pin.name,
        model=v185_source.path / contracts.TEST_MODEL_IN_TREE,
        audio=v185_source.path / contracts.TEST_AUDIO_IN_TREE, timeout=120, progress=False)
    j = _judge(ctx, refs, ids)
    assert j.status is Status.PASS, j.detail
    s = ctx.result.sanitizer.sides
    # docs/facts.md: ASan reports the free in whisper_batch_free on every unpatched run.
    doc = EvidenceView(ctx.run_dir, refs, ids).json("sanitizer")
    for run in doc["sides"]["unpatched"]["runs"]:
        app = sanitizer.Frame(**next(f for f in run["report"]["frames"]
                                     if not sanitizer.Frame(**f).in_runtime))
        assert app.function.startswith("whisper_batch_free")
        assert app.location.endswith("src/whisper.cpp:499")
        assert run["returncode"] == 1 and run["signal"] is None
    assert s["unpatched"].kind
    assert s["patched"].outcomes == {"exit 3 + both markers, no sanitizer report":
                                     sanitizer.RUNS_PER_SIDE}
