"""The compiler cache's settings and its statistics log (no ccache is launched here)."""

from __future__ import annotations

from verifylib.whispercpp import compiler_cache as cc


def test_the_pinned_ccache_comes_before_path():
    assert cc.find_ccache(which=lambda _n: "/usr/bin/ccache", pinned=lambda: "/v/bin/ccache") \
        == "/v/bin/ccache"
    assert cc.find_ccache(which=lambda _n: "/usr/bin/ccache", pinned=lambda: None) \
        == "/usr/bin/ccache"
    assert cc.find_ccache(which=lambda _n: None, pinned=lambda: None) is None


def test_no_ccache_means_no_cache_and_ggml_told_not_to_find_its_own(tmp_path):
    assert cc.compiler_cache(tmp_path, find=lambda: None) is None
    assert not (tmp_path / "ccache").exists()
    assert cc.launch_options(None) == {"GGML_CCACHE": "OFF"}
    assert cc.launcher_of(None) is None


def test_the_cache_and_its_settings_live_inside_the_verifylib_cache(tmp_path):
    got = cc.compiler_cache(tmp_path, find=lambda: "/v/bin/ccache")
    assert got.directory == tmp_path.resolve() / "ccache" and got.directory.is_dir()
    assert cc.launch_options(got) == {"CMAKE_C_COMPILER_LAUNCHER": "/v/bin/ccache",
                                      "CMAKE_CXX_COMPILER_LAUNCHER": "/v/bin/ccache"}
    assert cc.launcher_of(got) == cc.LAUNCHER
    env = got.environment(tmp_path / "b" / "stats.log", tmp_path / "root" / "src")
    # Its own configuration file: a user's ccache.conf takes no part.
    assert env["CCACHE_CONFIGPATH"] == str(got.directory / "ccache.conf")
    assert env["CCACHE_DIR"] == str(got.directory)
    assert env["CCACHE_BASEDIR"] == str(tmp_path / "root" / "src")
    assert env["CCACHE_STATSLOG"] == str(tmp_path / "b" / "stats.log")
    assert env["CCACHE_MAXSIZE"] == cc.MAX_SIZE
    # Without a source copy every path stays absolute.
    assert "CCACHE_BASEDIR" not in got.environment(tmp_path / "stats.log")


def test_relative_source_prefixes_cover_each_depth():
    assert cc.relative_source_prefixes("src", depth=3) == ["../src", "../../src",
                                                          "../../../src"]


def test_the_stats_log_counts_compiles_and_hits(tmp_path):
    log = tmp_path / "stats.log"
    log.write_text("# ../src/examples/common.cpp\ndirect_cache_hit\nlocal_storage_hit\n"
                   "# ../src/src/whisper.cpp\ncache_miss\nlocal_storage_miss\n"
                   "# ../src/examples/cli/cli.cpp\npreprocessed_cache_hit\n"
                   "# conftest.c\ncould_not_use_precompiled_header\n\n")
    use = cc.read_stats_log(log)
    assert use == cc.CacheUse(compiles=3, hits=2)
    assert use.describe() == "2 of 3 compiles from ccache"
    assert use.to_json() == {"compiles": 3, "hits": 2}


def test_a_missing_or_empty_stats_log(tmp_path):
    assert cc.read_stats_log(tmp_path / "none.log") is None
    (tmp_path / "empty.log").write_text("")
    assert cc.read_stats_log(tmp_path / "empty.log") == cc.CacheUse(compiles=0, hits=0)
