"""``canary.sanitizer``, the pure parts: the AddressSanitizer report reader and the ASan
build variants' options and keys. The stage's runs on fake builds are in
tests/fake/test_sanitizer.py, the real v1.8.5 ASan builds in tests/physical/test_sanitizer.py."""

from __future__ import annotations

import pytest

from tests.helpers.asan import MEASURED
from verifylib.whispercpp import build_options
from verifylib import canonical
from verifylib.runtime import sanitizer

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
    assert {v for v, _ in sanitizer.SIDES.values()} == set(build_options.ASAN_VARIANTS)
    for variant in build_options.ASAN_VARIANTS:
        opts = build_options.effective_options(variant, {"GGML_NATIVE": "ON"})
        assert opts == {**opts, **build_options.forced_options(variant)}
        for lang in ("CMAKE_C_FLAGS", "CMAKE_CXX_FLAGS"):
            assert opts[lang] == "-fsanitize=address -fno-omit-frame-pointer"
        assert opts["CMAKE_EXE_LINKER_FLAGS"] == "-fsanitize=address"
        assert opts["BUILD_SHARED_LIBS"] == "OFF" and opts["WHISPER_COREML"] == "OFF"
        with pytest.raises(ValueError, match="fixed"):
            build_options.effective_options(variant, {"CMAKE_C_FLAGS": "-O3"})
    tree, patch = "a" * 40, "b" * 64
    comp = {"cc": "gcc"}
    def key(patch_sha256, variant):
        return build_options.build_key(tree, patch_sha256, variant,
                                       build_options.effective_options(variant, {}), comp)

    keys = {key(None, "ggml-unpatched"), key(None, "ggml-unpatched-asan"), key(patch, "ggml"),
            key(patch, "ggml-asan")}
    assert len(keys) == 4
    with pytest.raises(ValueError, match="patch_sha256=None"):
        build_options.build_key(tree, patch, "ggml-unpatched-asan", {}, comp)
    with pytest.raises(ValueError, match="needs the applied patch"):
        build_options.build_key(tree, None, "ggml-asan", {}, comp)
