"""The smaller macOS traps, each refused or handled on every host (issue 20, "smaller traps").

- The stage kernels' IPC sockets live in a short private folder, so a long ``$TMPDIR``
  (macOS's is ``/var/folders/…/T/``) keeps every socket path within the OS's limit (103
  bytes on macOS); when no folder will do, the batch is refused before any work, exit 2.
- APFS is case-insensitive by default: fixture ids (evidence files are named by them) and
  model names (``reports/<name>/``) that differ only in case are refused, exit 2.
- Files macOS writes on its own (``.DS_Store``, ``._*``, ``__MACOSX``) in a folder whose
  identity is a git tree id or a digest are named in the refusal, with the command that
  removes them; a source tree that is not the pin's because of them says so.
- ``benchmarks/scale.py`` reads memory without ``/proc`` and takes macOS's ``ru_maxrss`` as
  bytes.

The kernel start with a long ``$TMPDIR`` and the removal command's effect on a real tree id
are in tests/simmac/test_scenarios.py (``long-tmpdir``) and tests/fake/test_macos_litter.py.
"""

from __future__ import annotations

import importlib.util
import os
import stat
import sys
import tempfile
from pathlib import Path

import pytest
import yaml

from verifylib import canonical, params
from verifylib.batch import inputs
from verifylib.batch import executors as batch_executors
from verifylib.batch import kernel
from verifylib.cli import main as cli
from verifylib.errors import ParametersInvalid
from verifylib.evidence.gates import Status
from verifylib.evidence.build.rules import judge_source_identity

from tests.helpers import ROOT

MAC_LIMIT = 103  # sizeof(sun_path) on macOS is 104, NUL included


def _long_dir(base: Path, length: int = 100) -> Path:
    """A folder whose absolute path is exactly ``length`` characters."""
    pad = length - len(str(base)) - 1
    assert pad > 0, base
    d = base / ("t" * pad)
    d.mkdir()
    assert len(str(d)) == length
    return d


@pytest.fixture
def long_tmpdir(tmp_path, monkeypatch):
    """``$TMPDIR`` set to a 100-character folder, as ``tempfile`` then sees it."""
    d = _long_dir(tmp_path)
    monkeypatch.setenv("TMPDIR", str(d))
    monkeypatch.setattr(tempfile, "tempdir", None)  # gettempdir() re-reads $TMPDIR
    assert tempfile.gettempdir() == str(d)
    return d


@pytest.fixture
def short_root(monkeypatch):
    """A short stand-in for ``/tmp`` (a fresh folder in it), so no test shares the real one."""
    root = Path(tempfile.mkdtemp(prefix="vl", dir="/tmp"))
    monkeypatch.setattr(kernel, "SHORT_ROOT", root)
    yield root
    import shutil
    shutil.rmtree(root, ignore_errors=True)


# ----------------------------------------------------------------------------- kernel sockets

def test_socket_path_limits_per_os():
    assert kernel.socket_path_limit("Darwin") == MAC_LIMIT
    assert kernel.socket_path_limit("Linux") == 107
    assert kernel.socket_path_limit("FreeBSD") == MAC_LIMIT  # the smaller, BSD, size


def test_a_long_tmpdir_keeps_every_kernel_socket_within_the_mac_limit(long_tmpdir, short_root):
    folder = kernel.socket_folder(system="Darwin")
    assert folder == short_root / f"verifylib-kernels-{os.getuid()}"
    assert not str(folder).startswith(str(long_tmpdir))
    assert kernel.longest_socket_path(folder) <= MAC_LIMIT
    st = os.lstat(folder)
    assert stat.S_ISDIR(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o700
    # The paths jupyter_client itself picks for a kernel of this manager (its connection
    # file, written without starting anything): the IPC prefix plus -<port>.
    km = kernel.LocalKernelManager(kernel_name="python3")
    km.write_connection_file()
    try:
        info = km.get_connection_info()
        assert info["transport"] == "ipc"
        paths = [f"{info['ip']}-{info[k]}" for k in
                 ("shell_port", "iopub_port", "stdin_port", "control_port", "hb_port")]
        assert all(p.startswith(str(folder) + "/k-") for p in paths), paths
        assert max(len(os.fsencode(p)) for p in paths) <= kernel.longest_socket_path(folder)
    finally:
        km.cleanup_connection_file()


def test_the_old_place_in_a_long_tmpdir_would_have_broken_the_kernels(long_tmpdir):
    # What the kernels used before: the socket folder in $TMPDIR. With 100 characters of
    # $TMPDIR it is refused as too long for macOS rather than used.
    old = long_tmpdir / f"verifylib-kernels-{os.getuid()}"
    assert kernel.longest_socket_path(old) > MAC_LIMIT
    with pytest.raises(kernel.SocketFolderUnusable, match=f"above this OS's limit of {MAC_LIMIT}"):
        kernel.socket_folder([old], system="Darwin")


def test_no_usable_folder_is_refused_naming_each_problem_and_the_fix(long_tmpdir, short_root,
                                                                     tmp_path):
    (short_root / f"verifylib-kernels-{os.getuid()}").symlink_to(tmp_path)
    with pytest.raises(kernel.SocketFolderUnusable) as info:
        kernel.socket_folder(system="Darwin")
    msg = str(info.value)
    assert isinstance(info.value, ParametersInvalid)  # exit 2, not an ERROR gate
    assert "is a symbolic link" in msg
    assert str(long_tmpdir) in msg and "socket paths of" in msg
    assert "export TMPDIR=" in msg


def test_a_folder_of_another_user_is_not_used(short_root, monkeypatch):
    # In a shared /tmp anyone can create the name first; simulated by claiming another uid.
    real = os.getuid()
    folder = short_root / "taken"
    folder.mkdir(mode=0o700)
    monkeypatch.setattr(kernel.os, "getuid", lambda: real + 1)
    with pytest.raises(kernel.SocketFolderUnusable, match=f"belongs to uid {real}"):
        kernel.socket_folder([folder], system="Darwin")


def test_an_existing_folder_of_ours_is_made_private(short_root):
    folder = short_root / "ours"
    folder.mkdir(mode=0o755)
    os.chmod(folder, 0o755)
    assert kernel.socket_folder([folder], system="Darwin") == folder
    assert stat.S_IMODE(os.lstat(folder).st_mode) == 0o700


def _params_file(folder: Path, name: str, mutate=None) -> Path:
    data = yaml.safe_load((ROOT / "parameters" / "tiny-en.yaml").read_text())
    data["name"] = name
    data["fixtures"] = data["fixtures"][:1]  # jfk, a runtime file: no path to resolve
    if mutate:
        mutate(data)
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_the_cli_refuses_before_any_work_when_no_socket_folder_will_do(
        long_tmpdir, short_root, tmp_path, capsys):
    # Both candidates fail: /tmp's is a file, and 100 characters of $TMPDIR are too long
    # for Linux's limit as well as for macOS's.
    (short_root / f"verifylib-kernels-{os.getuid()}").write_text("a file, not a folder")
    reports = tmp_path / "reports"
    code = cli.main(["run", str(_params_file(tmp_path, "model-a")), "--reports", str(reports)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "no folder for the notebook kernels' sockets" in err and "is not a folder" in err
    assert not (reports / "model-a").exists()


# ----------------------------------------------------------------------------- case collisions

def test_fixture_ids_that_differ_only_in_case_are_refused(tmp_path):
    def two(d):
        jfk = d["fixtures"][0]
        d["fixtures"] = [dict(jfk, id="A"), dict(jfk, id="a")]
    f = _params_file(tmp_path, "m", two)
    with pytest.raises(ParametersInvalid) as info:
        params.load(f)
    msg = str(info.value)
    assert str(f) in msg and "key fixtures[1].id" in msg
    assert "'a' and 'A' differ only in case" in msg and "case-insensitive" in msg


def test_an_exact_duplicate_fixture_id_is_still_a_duplicate(tmp_path):
    def two(d):
        d["fixtures"] = [d["fixtures"][0], dict(d["fixtures"][0])]
    with pytest.raises(ParametersInvalid, match=r"fixtures\[1\]\.id: duplicate id 'jfk'"):
        params.load(_params_file(tmp_path, "m", two))


def test_model_names_that_differ_only_in_case_are_refused_at_collection(tmp_path):
    a, b = _params_file(tmp_path, "Tiny"), (tmp_path / "other")
    b.mkdir()
    b = _params_file(b, "tiny")
    with pytest.raises(ParametersInvalid) as info:
        inputs.load_all([a, b])
    msg = str(info.value)
    assert str(a) in msg and str(b) in msg
    assert "'Tiny', 'tiny'" in msg and "differ only in case" in msg
    # The batch entry point refuses them too (a caller that skips load_all).
    loaded = [params.load(a), params.load(b)]
    with pytest.raises(ParametersInvalid, match="differ only in case"):
        batch_executors.run_batch(loaded, tmp_path / "reports", log=lambda line: None)


def test_the_cli_exits_2_for_case_colliding_model_names(tmp_path, capsys):
    other = tmp_path / "other"
    other.mkdir()
    code = cli.main(["run", str(_params_file(tmp_path, "Tiny")), str(_params_file(other, "tiny")),
                     "--reports", str(tmp_path / "reports")])
    err = capsys.readouterr().err
    assert code == 2
    assert "'Tiny', 'tiny'" in err


def test_a_model_spelled_like_a_reports_folder_in_another_case_is_refused(tmp_path):
    reports = tmp_path / "reports"
    (reports / "Tiny").mkdir(parents=True)
    p = params.load(_params_file(tmp_path, "tiny"))
    with pytest.raises(ParametersInvalid) as info:
        params.check_distinct_names([p], reports)
    assert str(reports / "Tiny") in str(info.value) and "'tiny'" in str(info.value)
    params.check_distinct_names([params.load(_params_file(tmp_path, "Tiny"))], reports)


def test_appledouble_companions_in_a_parameter_folder_are_not_parameter_files(tmp_path):
    folder = tmp_path / "params"
    folder.mkdir()
    _params_file(folder, "model-a")
    (folder / "._model-a.yaml").write_bytes(b"\x00\x05\x16\x07\x00\x02\x00\x00Mac OS X")
    assert [p.name for p in inputs.load_all([folder])] == ["model-a"]


# ----------------------------------------------------------------------------- OS litter

def test_os_litter_lists_what_macos_writes_and_nothing_else(tmp_path):
    (tmp_path / "src" / "__MACOSX" / "deep").mkdir(parents=True)
    (tmp_path / "src" / "__MACOSX" / "deep" / "._x").write_text("")
    (tmp_path / ".DS_Store").write_bytes(b"\0\0\0\1Bud1")
    (tmp_path / "src" / "._whisper.cpp").write_bytes(b"\0\5\26\7")
    (tmp_path / "Icon\r").write_bytes(b"")
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / ".DS_Store").write_text("")  # not content of any identity here
    (tmp_path / "src" / "whisper.cpp").write_text("int x;")
    (tmp_path / ".gitignore").write_text(".DS_Store\n")
    (tmp_path / "DS_Store.txt").write_text("a real file")
    assert canonical.os_litter(tmp_path) == (".DS_Store", "Icon\r", "src/._whisper.cpp",
                                             "src/__MACOSX")
    assert canonical.os_litter(tmp_path / "src" / "whisper.cpp") == ()


def test_litter_is_named_with_the_commands_that_remove_it(tmp_path):
    found = tuple(f"d{i}/.DS_Store" for i in range(7)) + ("._a", "x/__MACOSX")
    msg = canonical.describe_litter(tmp_path, found)
    assert "d0/.DS_Store" in msg and "and 4 more" in msg
    assert f"find {tmp_path} -name .DS_Store -delete" in msg
    assert f"find {tmp_path} -name '._*' -delete" in msg
    assert f"rm -rf {tmp_path / 'x' / '__MACOSX'}" in msg


def _folder_source(tmp_path: Path) -> Path:
    src = tmp_path / "whisper.cpp"
    (src / "src").mkdir(parents=True)
    (src / "src" / "whisper.cpp").write_text("int x;")
    return src


def test_a_folder_source_with_a_ds_store_is_refused_naming_it(tmp_path):
    src = _folder_source(tmp_path)
    (src / "src" / ".DS_Store").write_bytes(b"\0\0\0\1Bud1")
    f = _params_file(tmp_path, "m", lambda d: d["runtime"].__setitem__(
        "source", {"kind": "folder", "path": str(src)}))
    with pytest.raises(ParametersInvalid) as info:
        params.load(f)
    msg = str(info.value)
    assert "key runtime.source.path" in msg and "src/.DS_Store" in msg
    assert f"find {src} -name .DS_Store -delete" in msg and "git tree id" in msg
    (src / "src" / ".DS_Store").unlink()
    params.load(f)


def test_litter_outside_a_folder_sources_subdir_is_not_counted(tmp_path):
    top = tmp_path / "checkout"
    _folder_source(top)
    (top / ".DS_Store").write_text("")  # beside the subdir, which alone is copied
    params.load(_params_file(tmp_path, "m", lambda d: d["runtime"].__setitem__(
        "source", {"kind": "folder", "path": str(top), "subdir": "whisper.cpp"})))


@pytest.mark.parametrize("kind", ["ct2-dir", "hf-dir"])
def test_a_model_folder_with_appledouble_files_is_refused_naming_them(tmp_path, kind):
    model = tmp_path / "model"
    model.mkdir()
    (model / "model.bin").write_bytes(b"x")
    (model / "._model.bin").write_bytes(b"\0\5\26\7")
    f = _params_file(tmp_path, "m", lambda d: d.__setitem__("model", {"kind": kind,
                                                                      "path": str(model)}))
    with pytest.raises(ParametersInvalid) as info:
        params.load(f)
    msg = str(info.value)
    assert "key model.path" in msg and "._model.bin" in msg and "model's digest" in msg


def test_a_given_encoder_with_litter_is_refused_naming_it(tmp_path):
    enc = tmp_path / "ggml-tiny.en-encoder.mlmodelc"
    enc.mkdir()
    for n in ("metadata.json", "coremldata.bin"):
        (enc / n).write_bytes(b"x")
    (enc / ".DS_Store").write_bytes(b"\0\0\0\1Bud1")
    def given(d):
        d["encoder"] = {"path": str(enc)}
        d.pop("export", None)  # a given encoder has no fp16 export beside it
    f = _params_file(tmp_path, "m", given)
    with pytest.raises(ParametersInvalid, match=r"key encoder\.path: found \.DS_Store"):
        params.load(f)


def _source_doc(origin: dict) -> dict:
    return {"pin": "v1.8.5", "pin_commit": "c" * 40, "pin_tree": "a" * 40,
            "computed_tree": "b" * 40, "origin": origin, "path": "/x", "cached": False}


def test_a_tree_that_is_not_the_pins_names_the_litter_its_origin_records():
    j = judge_source_identity(_source_doc({"kind": "archive",
                                           "os_litter": [".DS_Store", "src/._whisper.cpp"]}))
    assert j.status is Status.FAIL
    assert "is not the pin's" in j.detail
    assert ".DS_Store, src/._whisper.cpp" in j.detail and "macOS" in j.detail
    plain = judge_source_identity(_source_doc({"kind": "archive"}))
    assert plain.status is Status.FAIL and "macOS" not in plain.detail
    same = _source_doc({"kind": "archive", "os_litter": [".DS_Store"]})
    same["computed_tree"] = same["pin_tree"]
    assert judge_source_identity(same).status is Status.PASS


# ----------------------------------------------------------------------------- benchmarks

@pytest.fixture(scope="module")
def scale():
    spec = importlib.util.spec_from_file_location("bench_scale_traps",
                                                  ROOT / "benchmarks" / "scale.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    yield mod
    sys.modules.pop(spec.name, None)


def test_ru_maxrss_is_kibibytes_on_linux_and_bytes_on_macos(scale, monkeypatch):
    assert scale.maxrss_bytes(1000, "Linux") == 1024000
    assert scale.maxrss_bytes(1000, "Darwin") == 1000
    monkeypatch.setattr(scale.platform, "system", lambda: "Darwin")
    assert scale.maxrss_bytes(4096) == 4096
    monkeypatch.setattr(scale.platform, "system", lambda: "Linux")
    assert scale.maxrss_bytes(4096) == 4096 * 1024


def test_memory_is_read_without_proc(scale, monkeypatch, tmp_path):
    import psutil
    monkeypatch.setattr(scale, "PROC", tmp_path / "no-proc")
    rss = scale._rss_bytes()
    assert abs(rss - psutil.Process().memory_info().rss) < 256 << 20
    assert scale._rss_bytes("RssAnon") is None  # Linux's own field: unknown, not 0
    assert scale._rss_bytes("VmRSS", 2 ** 22 + 12345) == 0  # a process that is gone
    assert scale._available_bytes() > 0


def test_without_proc_or_psutil_the_peak_stands_in(scale, monkeypatch, tmp_path):
    import resource
    monkeypatch.setattr(scale, "PROC", tmp_path / "no-proc")
    monkeypatch.setitem(sys.modules, "psutil", None)  # import psutil now fails
    monkeypatch.setattr(scale.platform, "system", lambda: "Darwin")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    assert scale._rss_bytes() in range(peak, peak + (64 << 20))  # taken as bytes on macOS
    assert scale._rss_bytes("VmRSS", 1) is None
    assert scale._available_bytes() == os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def test_linux_proc_still_reads_kibibytes(scale):
    if not Path("/proc/self/status").is_file():
        pytest.skip("no /proc on this host")
    vm = next(int(line.split()[1]) for line in Path("/proc/self/status").read_text().splitlines()
              if line.startswith("VmRSS:"))
    assert abs(scale._rss_bytes() - vm * 1024) < 64 << 20


def test_a_trace_without_anonymous_memory_prints(scale, capsys):
    scale._print_trace("tiny", "02_export", [{"call": "x", "depth": 0, "start_s": 0.0,
                                              "seconds": 1.0, "rss_before": 1 << 30,
                                              "peak": 2 << 30, "rss_after": 1 << 30,
                                              "anon_after": None}])
    row = capsys.readouterr().err.splitlines()[-1]
    assert row.split()[-1] == "-" and "2.00" in row
