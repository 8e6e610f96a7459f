"""The shared ggml build on a tiny CMake project shaped like whisper.cpp: a ``ggml/`` project
with install rules and a top level that offers ``WHISPER_USE_SYSTEM_GGML``. ggml is built
once and every variant links it statically; its identity is in each variant's key and
``build.json``; a tampered ggml is rebuilt, never reused (cmake, the compiler and readelf
run for real; no whisper.cpp)."""

from __future__ import annotations

from pathlib import Path

from verifylib import canonical
from verifylib.evidence.build.schema import GgmlBuildEvidence
from verifylib.whispercpp import build
from verifylib.whispercpp.build_options import build_key, effective_options
from verifylib.whispercpp.shared_ggml import build_ggml, ggml_options, uses_shared_ggml
from verifylib.whispercpp.system_info import SystemInfoProbe, build_evidence

TREE = "a276adc5ab0958b854ce44c16a3e31615f473552"
PATCH = "acd730d8c3ebed4339a31619b8936469df92368941013633b5cf8794cae90581"

TOP = """cmake_minimum_required(VERSION 3.18)
project(fake C CXX)
option(WHISPER_USE_SYSTEM_GGML "use an installed ggml" OFF)
set(CMAKE_RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)
if (WHISPER_USE_SYSTEM_GGML)
    find_package(ggml REQUIRED)
    add_library(ggml ALIAS ggml::ggml)
else()
    add_subdirectory(ggml)
endif()
add_executable(whisper-cli main.cpp)
target_link_libraries(whisper-cli PRIVATE ggml)
"""

GGML = """add_library(ggml STATIC ggml.c)
target_include_directories(ggml PUBLIC $<BUILD_INTERFACE:${CMAKE_CURRENT_SOURCE_DIR}>
                                       $<INSTALL_INTERFACE:include>)
install(TARGETS ggml EXPORT ggml-targets ARCHIVE DESTINATION lib)
install(FILES ggml.h DESTINATION include)
install(EXPORT ggml-targets NAMESPACE ggml:: DESTINATION lib/cmake/ggml FILE ggml-config.cmake)
"""

MAIN = """#include <cstdio>
#include "ggml.h"
int main() {
    fprintf(stderr, "whisper_backend_init_gpu: no GPU found\\n");
    fprintf(stderr, "system_info: n_threads = 2 / 2 | WHISPER : COREML = 0 | ggml %d |\\n",
            ggml_fake());
    return @EXIT@;
}
"""


def project(root: Path, *, exit_code: int = 0) -> Path:
    """A whisper.cpp-shaped project; ``exit_code`` stands in for the patch (src differs)."""
    (root / "ggml").mkdir(parents=True)
    (root / "CMakeLists.txt").write_text(TOP)
    (root / "ggml" / "CMakeLists.txt").write_text(GGML)
    (root / "ggml" / "ggml.h").write_text('#ifdef __cplusplus\nextern "C"\n#endif\n'
                                          "int ggml_fake(void);\n")
    (root / "ggml" / "ggml.c").write_text('#include "ggml.h"\nint ggml_fake(void) { return 42; }\n')
    (root / "main.cpp").write_text(MAIN.replace("@EXIT@", str(exit_code)))
    return root


def quiet(_msg: str) -> None:
    pass


def test_variants_share_one_ggml_recorded_in_key_and_build_json(tmp_path):
    patched = project(tmp_path / "patched", exit_code=0)
    pristine = project(tmp_path / "pristine", exit_code=1)
    cache = tmp_path / "cache"
    assert uses_shared_ggml(patched)
    lines: list[str] = []
    a = build.build_whisper_cli(patched, tree_id=TREE, patch_sha256=PATCH, variant="ggml",
                                options={}, cache_dir=cache, log=lines.append)
    b = build.build_whisper_cli(pristine, tree_id=TREE, patch_sha256=None,
                                variant="ggml-unpatched", options={}, cache_dir=cache,
                                log=lines.append)
    # One ggml for both (the patch does not touch it), built once, then re-hashed.
    assert a.ggml is not None and a.ggml == b.ggml
    assert len(list((cache / "ggml").iterdir())) == 1
    assert sum(line.startswith("built ggml") for line in lines) == 1
    assert any(line.startswith("ggml from cache") for line in lines)
    lib = cache / "ggml" / a.ggml["key"] / "prefix" / "lib" / "libggml.a"
    assert a.ggml["libraries"] == {"lib/libggml.a": canonical.sha256_file(lib)}
    # Static: the binary carries ggml's code, so its digest covers it.
    assert a.static and b.static and a.sha256 != b.sha256
    # The identity is in the key: another ggml key gives another build key.
    opts, comp = a.options, a.compiler
    launcher = canonical.read_json(a.build_json)["launcher"]
    assert a.key == build_key(TREE, PATCH, "ggml", opts, comp, a.ggml["key"],
                              launcher=launcher)
    assert a.key != build_key(TREE, PATCH, "ggml", opts, comp, None, launcher=launcher)
    # And in the gate's evidence, through its schema.
    ev = GgmlBuildEvidence.from_json(build_evidence(a, _probe(a)))
    assert ev.ggml is not None and ev.ggml.key == a.ggml["key"]
    assert ev.ggml.options == ggml_options("ggml", a.options)


def test_sanitizer_variant_links_the_plain_ggml(tmp_path):
    src = project(tmp_path / "src")
    cache = tmp_path / "cache"
    plain = build.build_whisper_cli(src, tree_id=TREE, patch_sha256=PATCH, variant="ggml",
                                    options={}, cache_dir=cache, log=quiet)
    opts = effective_options("ggml-asan", {})
    # The sanitizer flags are libwhisper's and the CLI's, not ggml's.
    assert ggml_options("ggml-asan", opts) == ggml_options("ggml", plain.options)
    assert "CMAKE_C_FLAGS" not in ggml_options("ggml-asan", opts)


def test_a_tampered_ggml_is_rebuilt_not_reused(tmp_path):
    src = project(tmp_path / "src")
    cache = tmp_path / "cache"
    first = build_ggml(src, tree_id=TREE, options={"A": "1"}, cache_dir=cache, log=quiet)
    again = build_ggml(src, tree_id=TREE, options={"A": "1"}, cache_dir=cache, log=quiet)
    assert (first.cached, again.cached, again.files) == (False, True, first.files)
    with open(first.prefix / "lib" / "libggml.a", "ab") as fh:
        fh.write(b"\0")
    lines: list[str] = []
    third = build_ggml(src, tree_id=TREE, options={"A": "1"}, cache_dir=cache,
                       log=lines.append)
    assert not third.cached and third.files == first.files
    assert any("not reusable" in line and "lib/libggml.a" in line for line in lines)
    # A file added to the install is refused too.
    (third.prefix / "lib" / "extra.a").write_bytes(b"x")
    assert not build_ggml(src, tree_id=TREE, options={"A": "1"}, cache_dir=cache,
                          log=quiet).cached


def test_a_tree_without_the_route_is_built_in_one_piece(tmp_path):
    src = project(tmp_path / "src")
    (src / "CMakeLists.txt").write_text(TOP.replace("WHISPER_USE_SYSTEM_GGML", "OTHER_SWITCH"))
    assert not uses_shared_ggml(src)
    res = build.build_whisper_cli(src, tree_id=TREE, patch_sha256=PATCH, variant="ggml",
                                  options={}, cache_dir=tmp_path / "cache", log=quiet)
    assert res.ggml is None and res.static
    assert not (tmp_path / "cache" / "ggml").exists()
    assert "ggml" not in build_evidence(res, _probe(res))


def _probe(res):
    from verifylib.runtime.runner import run
    r = run([str(res.binary)], timeout=30)
    return SystemInfoProbe(result=r, system_info_line=None, coreml=None)


COMMON_TOP = TOP.replace("add_executable(whisper-cli main.cpp)",
                         "add_library(common STATIC common.cpp)\n"
                         "add_executable(whisper-cli main.cpp)\n"
                         "target_link_libraries(whisper-cli PRIVATE common)")


def test_the_unpatched_build_compiles_only_what_differs(tmp_path, monkeypatch):
    # The pristine tree differs from the patched one in main.cpp alone; its common.cpp
    # (upstream's examples' common library) is handed over by ccache, and the binaries are
    # what a build without any cache makes.
    trees = {}
    for name, code in (("patched", 0), ("pristine", 1)):
        root = project(tmp_path / name, exit_code=code)
        (root / "CMakeLists.txt").write_text(COMMON_TOP)
        (root / "common.cpp").write_text(
            'const char *common_file() { return __FILE__; }\n')
        main = (root / "main.cpp").read_text().replace(
            "int main() {", 'const char *common_file();\nint main() {\n    puts(common_file());')
        (root / "main.cpp").write_text(main)
        trees[name] = root
    cache = tmp_path / "cache"
    lines: list[str] = []
    kw = dict(tree_id=TREE, options={}, cache_dir=cache, log=lines.append)
    a = build.build_whisper_cli(trees["patched"], patch_sha256=PATCH, variant="ggml", **kw)
    b = build.build_whisper_cli(trees["pristine"], patch_sha256=None,
                                variant="ggml-unpatched", **kw)
    rec_a, rec_b = (canonical.read_json(r.build_json) for r in (a, b))
    assert rec_a["compiler_cache"] == {"compiles": 2, "hits": 0}
    assert rec_b["compiler_cache"] == {"compiles": 2, "hits": 1}
    assert any("1 of 2 compiles from ccache" in line for line in lines), lines
    assert (cache / "ccache" / "ccache.conf").parent.is_dir()
    # No source folder was written into, and the build folders are gone once published.
    assert sorted(p.name for p in trees["pristine"].iterdir()) == [
        "CMakeLists.txt", "common.cpp", "ggml", "main.cpp"]
    assert not (cache / "cmake" / b.key).exists()
    # The same bytes as a build that finds no ccache at all.
    nocache = tmp_path / "nocache"
    from verifylib.whispercpp import compiler_cache
    monkeypatch.setattr(compiler_cache, "find_ccache", lambda **_kw: None)
    c = build.build_whisper_cli(trees["pristine"], patch_sha256=None, variant="ggml-unpatched",
                                tree_id=TREE, options={}, cache_dir=nocache, log=quiet)
    assert canonical.read_json(c.build_json)["compiler_cache"] is None
    # Another key (the launcher is keyed: it decides the -g builds' debug paths), the
    # same bytes for this build without debug information.
    assert c.key != b.key and c.sha256 == b.sha256
    assert rec_b["launcher"] == compiler_cache.LAUNCHER
    assert canonical.read_json(c.build_json)["launcher"] is None
    assert not (nocache / "ccache").exists()
    # __FILE__ reads the alias, whether ccache made the path relative or not.
    assert b"/whisper.cpp/common.cpp" in b.binary.read_bytes()
    assert b"../src" not in b.binary.read_bytes()
