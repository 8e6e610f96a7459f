"""Source identity and patch exactness, on a synthetic tree (fast) and on real v1.8.5."""

from __future__ import annotations

import dataclasses
import io
import os
import shutil
import stat
import tarfile
import zipfile
from pathlib import Path

import pytest

from verifylib import canonical, source
from verifylib.runner import run
from verifylib.source import (PatchError, SourceError, SourceSpec, check_patch_exact, git_tree_id,
                              judge_patch_exact, judge_source_identity, load_pins, obtain_source,
                              patch_evidence, prepare_patched_tree, source_evidence)

V185_TREE = "a276adc5ab0958b854ce44c16a3e31615f473552"
V185_SDIST_SHA256 = "5df897e5dd9d9f16804fc937bd85b9f5880a0b29a55f8843585e0e03d76195e5"
V185_PATCH_SHA256 = "acd730d8c3ebed4339a31619b8936469df92368941013633b5cf8794cae90581"

SRC_LINES = [f"int line_{i} = {i};\n" for i in range(1, 21)]


# ----------------------------------------------------------------------------- helpers

def plain_git(home: Path, *args, cwd: Path, stdin: bytes | None = None):
    """Ordinary git in ``cwd``, independent of verifylib.source's plumbing."""
    env = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, "HOME": str(home),
           "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    return run(["git", "-c", "safe.directory=*", "-c", "core.autocrlf=false",
                "-c", "init.defaultBranch=main", *args], cwd=cwd, env_extra=env, stdin=stdin,
               check=True)


def make_pristine(root: Path) -> Path:
    """A tiny upstream-like tree: .gitignore hiding build/ and *.o, a tracked *.o, an
    executable script, a symlink."""
    root.mkdir(parents=True)
    (root / ".gitignore").write_text("build/\n*.o\n")
    (root / "src").mkdir()
    (root / "src" / "whisper.cpp").write_text("".join(SRC_LINES))
    (root / "README.md").write_text("readme\n")
    (root / "tools").mkdir()
    (root / "tools" / "run.sh").write_text("#!/bin/sh\necho hi\n")
    os.chmod(root / "tools" / "run.sh", 0o755)
    (root / "models").mkdir()
    (root / "models" / "tracked.o").write_bytes(b"\x00\x01binary")  # tracked despite .gitignore
    os.symlink("README.md", root / "readme-link")
    return root


@dataclasses.dataclass
class Synth:
    pristine: Path
    pin: source.Pin
    manifest: Path
    home: Path


@pytest.fixture
def synth(tmp_path) -> Synth:
    """A synthetic pin: tree id and a one-line --full-index patch made with plain git."""
    home = tmp_path / "home"
    home.mkdir()
    pristine = make_pristine(tmp_path / "pristine")
    scratch = tmp_path / "scratch"
    shutil.copytree(pristine, scratch, symlinks=True)
    plain_git(home, "init", "-q", cwd=scratch)
    plain_git(home, "add", "-A", "-f", cwd=scratch)
    tree = plain_git(home, "write-tree", cwd=scratch).stdout_text.strip()
    lines = list(SRC_LINES)
    lines[9] = "int line_10 = {};\n"
    (scratch / "src" / "whisper.cpp").write_text("".join(lines))
    diff = plain_git(home, "diff", "--no-ext-diff", "--binary", "--full-index", cwd=scratch).stdout
    assert diff.startswith(b"diff --git a/src/whisper.cpp b/src/whisper.cpp\n")
    patches = tmp_path / "patches"
    patches.mkdir()
    (patches / "synth.patch").write_bytes(diff)
    manifest = patches / "manifest.yaml"
    manifest.write_text(
        "pins:\n  synth:\n"
        f"    commit: '{'e' * 40}'\n    tree: '{tree}'\n    patch: synth.patch\n"
        f"    patch_sha256: {canonical.sha256_bytes(diff)}\n    touches: [src/whisper.cpp]\n")
    pin = load_pins(manifest)["synth"]
    return Synth(pristine=pristine, pin=pin, manifest=manifest, home=home)


def snapshot(folder: Path) -> dict:
    out = {}
    for p in sorted(folder.rglob("*")):
        st = p.lstat()
        out[p.relative_to(folder).as_posix()] = (st.st_mode, st.st_size, st.st_mtime_ns)
    return out


def make_tar(src: Path, dest: Path, top: str) -> Path:
    with tarfile.open(dest, "w:gz") as tf:
        tf.add(src, arcname=top)
    return dest


def make_zip(src: Path, dest: Path, top: str) -> Path:
    with zipfile.ZipFile(dest, "w") as zf:
        for p in sorted(src.rglob("*")):
            name = f"{top}/{p.relative_to(src).as_posix()}"
            st = p.lstat()
            if p.is_symlink():
                info = zipfile.ZipInfo(name)
                info.external_attr = (stat.S_IFLNK | 0o777) << 16
                zf.writestr(info, os.readlink(p))
            elif p.is_dir():
                continue
            else:
                info = zipfile.ZipInfo(name)
                info.external_attr = (stat.S_IFREG | stat.S_IMODE(st.st_mode)) << 16
                zf.writestr(info, p.read_bytes())
    return dest


def judge_single(check: source.PatchCheck, pin: source.Pin) -> tuple[bool, str]:
    return judge_patch_exact(patch_evidence(pin, {"before": check}), required=("before",))


# ----------------------------------------------------------------------------- pins

def test_repo_manifest_pins_and_patch_digests():
    pins = load_pins()
    pin = pins["v1.8.5"]
    assert pin.commit == "f24588a272ae8e23280d9c220536437164e6ed28"
    assert pin.tree == V185_TREE
    assert pin.patch_sha256 == V185_PATCH_SHA256
    assert pin.touches == ("src/whisper.cpp",)
    for p in pins.values():
        assert canonical.sha256_file(p.patch_path) == p.patch_sha256, p.name


GOOD_ENTRY = {"commit": "a" * 40, "tree": "b" * 40, "patch": "x.patch",
              "patch_sha256": "c" * 64, "touches": "[src/whisper.cpp]"}


@pytest.mark.parametrize("field,value,match", [
    ("commit", "abc123", "commit must be 40"),
    ("commit", "1" * 40, "commit must be 40"),           # unquoted: YAML reads an int
    ("tree", "B" * 40, "tree must be 40"),
    ("patch_sha256", "c" * 63, "patch_sha256 must be 64"),
    ("patch", "missing.patch", "does not exist"),
    ("patch", "../x.patch", "relative path"),
    ("touches", "[]", "non-empty list"),
    ("touches", "[../etc/passwd]", "relative path"),
    ("extra", "1", "unknown keys"),
])
def test_load_pins_rejects_malformed(tmp_path, field, value, match):
    (tmp_path / "x.patch").write_bytes(b"diff\n")
    entry = dict(GOOD_ENTRY)
    entry[field] = value
    text = "pins:\n  p1:\n" + "".join(f"    {k}: {v}\n" for k, v in entry.items())
    (tmp_path / "manifest.yaml").write_text(text)
    with pytest.raises(ValueError, match=match):
        load_pins(tmp_path / "manifest.yaml")


def test_load_pins_accepts_good_entry_and_patches_dir_override(tmp_path):
    (tmp_path / "pd").mkdir()
    (tmp_path / "pd" / "x.patch").write_bytes(b"diff\n")
    text = "pins:\n  p1:\n" + "".join(f"    {k}: {v}\n" for k, v in GOOD_ENTRY.items())
    (tmp_path / "manifest.yaml").write_text(text)
    pins = load_pins(tmp_path / "manifest.yaml", patches_dir=tmp_path / "pd")
    assert pins["p1"].patch_path == tmp_path / "pd" / "x.patch"
    with pytest.raises(ValueError, match="missing keys"):
        (tmp_path / "m2.yaml").write_text("pins:\n  p1:\n    commit: " + "a" * 40 + "\n")
        load_pins(tmp_path / "m2.yaml")
    with pytest.raises(ValueError, match="non-empty 'pins'"):
        (tmp_path / "m3.yaml").write_text("pins: {}\n")
        load_pins(tmp_path / "m3.yaml")


# ----------------------------------------------------------------------------- tree ids

def test_git_tree_id_equals_plain_git_and_writes_nothing(synth, tmp_path):
    before = snapshot(synth.pristine)
    tree = git_tree_id(synth.pristine)
    assert snapshot(synth.pristine) == before
    assert not (synth.pristine / ".git").exists()
    assert tree == synth.pin.tree
    # A .git inside the folder is not content.
    (synth.pristine / ".git").mkdir()
    (synth.pristine / ".git" / "junk").write_text("x")
    assert git_tree_id(synth.pristine) == tree
    # -f matters: a tracked file matching .gitignore is part of the id.
    (synth.pristine / "models" / "tracked.o").write_bytes(b"changed")
    assert git_tree_id(synth.pristine) != tree


@pytest.mark.physical
def test_real_sdist_tree_id_is_upstream_v185(v185_source, v185_pin):
    assert v185_source.origin["sdist_sha256"] == V185_SDIST_SHA256
    assert v185_source.origin["package"] == "pywhispercpp==1.5.1"
    assert not (v185_source.path / ".git").exists()
    assert git_tree_id(v185_source.path) == V185_TREE == v185_source.tree_id
    ok, why = judge_source_identity(source_evidence(v185_pin, None, v185_source))
    assert ok, why


@pytest.mark.physical
def test_real_v185_patch_reproduces_exact_bytes(v185_patched, v185_pin):
    check = check_patch_exact(v185_patched.path, v185_pin)
    assert check.ok, check.problems
    assert check.diff_equals_patch and check.diff_sha256 == V185_PATCH_SHA256
    assert check.status_lines == (" M src/whisper.cpp",)
    text = (v185_patched.path / "src" / "whisper.cpp").read_text().splitlines()
    assert text[864] == "    whisper_batch batch = {};"


# ----------------------------------------------------------------------------- obtaining

def test_archive_tar_and_zip_give_the_pins_tree(synth, tmp_path):
    cache = tmp_path / "cache"
    tgz = make_tar(synth.pristine, tmp_path / "src.tar.gz", "proj-1.0")
    st = obtain_source(SourceSpec(kind="archive", path=tgz, subdir="proj-1.0"), cache, log=lambda m: None)
    assert st.tree_id == synth.pin.tree and not st.cached
    assert st.path == cache / "sources" / synth.pin.tree
    assert os.access(st.path / "tools" / "run.sh", os.X_OK)
    assert st.origin["archive_sha256"] == canonical.sha256_file(tgz)
    zp = make_zip(synth.pristine, tmp_path / "src.zip", "proj-1.0")
    st2 = obtain_source(SourceSpec(kind="archive", path=zp, subdir="proj-1.0"), cache, log=lambda m: None)
    assert st2.tree_id == synth.pin.tree
    assert (st2.path / "readme-link").is_symlink()
    assert judge_source_identity(source_evidence(synth.pin, None, st2))[0]
    assert not [p for p in (cache / "sources").iterdir() if p.name.startswith(".staging")]


def test_archive_with_wrong_tree_is_a_fail_not_an_exception(synth, tmp_path):
    other = tmp_path / "other"
    shutil.copytree(synth.pristine, other, symlinks=True)
    (other / "src" / "extra.c").write_text("int extra;\n")
    tgz = make_tar(other, tmp_path / "other.tgz", "proj")
    st = obtain_source(SourceSpec(kind="archive", path=tgz, subdir="proj"), tmp_path / "c",
                       log=lambda m: None)
    assert st.tree_id != synth.pin.tree
    ev = canonical.loads(canonical.dumps(source_evidence(synth.pin, None, st)))
    ok, why = judge_source_identity(ev)
    assert not ok and st.tree_id in why and synth.pin.tree in why


def test_archive_cache_reuse_and_corruption_refetch(synth, tmp_path):
    cache = tmp_path / "cache"
    tgz = make_tar(synth.pristine, tmp_path / "src.tgz", "p")
    spec = SourceSpec(kind="archive", path=tgz, subdir="p")
    first = obtain_source(spec, cache, log=lambda m: None)
    second = obtain_source(spec, cache, log=lambda m: None)
    assert (second.cached, second.path, second.tree_id) == (True, first.path, first.tree_id)
    assert second.origin["archive_sha256"] == first.origin["archive_sha256"]
    # A tampered cache entry is re-hashed, found wrong and refetched, never returned as-is.
    (first.path / "README.md").write_text("tampered\n")
    third = obtain_source(spec, cache, log=lambda m: None)
    assert not third.cached and third.tree_id == synth.pin.tree
    assert (third.path / "README.md").read_text() == "readme\n"


def test_git_source_gives_the_commit_tree_without_dot_git(synth, tmp_path):
    repo = tmp_path / "upstream"
    shutil.copytree(synth.pristine, repo, symlinks=True)
    plain_git(synth.home, "init", "-q", cwd=repo)
    plain_git(synth.home, "add", "-A", "-f", cwd=repo)
    plain_git(synth.home, "commit", "-q", "-m", "one", cwd=repo)
    commit = plain_git(synth.home, "rev-parse", "HEAD", cwd=repo).stdout_text.strip()
    (repo / "README.md").write_text("later\n")
    plain_git(synth.home, "commit", "-q", "-a", "-m", "two", cwd=repo)
    spec = SourceSpec(kind="git", url=str(repo), commit=commit)
    st = obtain_source(spec, tmp_path / "cache", log=lambda m: None)
    assert st.tree_id == synth.pin.tree == st.origin["commit_tree"]
    assert not (st.path / ".git").exists()
    assert (st.path / "README.md").read_text() == "readme\n"
    assert obtain_source(spec, tmp_path / "cache", log=lambda m: None).cached


def test_folder_source_skips_dot_git(synth, tmp_path):
    (synth.pristine / ".git").mkdir()
    (synth.pristine / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    st = obtain_source(SourceSpec(kind="folder", path=synth.pristine), tmp_path / "c", log=lambda m: None)
    assert st.tree_id == synth.pin.tree and not (st.path / ".git").exists()


def test_unsafe_tar_is_refused_and_leaves_no_staging(tmp_path):
    bad = tmp_path / "bad.tar.gz"
    with tarfile.open(bad, "w:gz") as tf:
        data = b"evil"
        info = tarfile.TarInfo("../evil.txt")
        info.size = len(data)
        tf.addfile(info, io.BytesIO(data))
    cache = tmp_path / "cache"
    with pytest.raises(SourceError, match="safely"):
        obtain_source(SourceSpec(kind="archive", path=bad), cache, log=lambda m: None)
    assert not (tmp_path / "evil.txt").exists()
    assert [p.name for p in (cache / "sources").iterdir()] == []


def test_source_spec_validation():
    with pytest.raises(ValueError, match="name==version"):
        SourceSpec(kind="pypi-sdist", package="pywhispercpp>=1.5")
    with pytest.raises(ValueError, match="40 lower-case hex"):
        SourceSpec(kind="git", url="https://example.invalid/x.git", commit="f24588a")
    with pytest.raises(ValueError, match="takes"):
        SourceSpec(kind="archive", package="a==1")
    with pytest.raises(ValueError, match="relative path"):
        SourceSpec(kind="folder", path=Path("/tmp"), subdir="../x")
    spec = SourceSpec.from_dict({"kind": "pypi-sdist", "package": "pywhispercpp==1.5.1",
                                 "subdir": "whisper.cpp"})
    assert spec == source.PYWHISPERCPP_V185


# ----------------------------------------------------------------------------- patching

def test_prepare_and_check_exact(synth, tmp_path):
    before = snapshot(synth.pristine)
    pt = prepare_patched_tree(synth.pristine, synth.pin, tmp_path / "work")
    assert snapshot(synth.pristine) == before
    assert pt.base_tree == synth.pin.tree and pt.patch_sha256 == synth.pin.patch_sha256
    assert pt.path == tmp_path / "work" / "synth-patched"
    check = check_patch_exact(pt.path, synth.pin)
    assert check.ok, check.problems
    assert check.diff_equals_patch
    assert check.status_lines == (" M src/whisper.cpp",) == check.expected_status_lines
    ev = patch_evidence(synth.pin, {"before": check.to_evidence(), "after": check.to_evidence()})
    ok, why = judge_patch_exact(canonical.loads(canonical.dumps(ev)))
    assert ok, why
    # Both phases are required by default.
    del ev["checks"]["after"]
    assert judge_patch_exact(ev) == (False, "after: check missing")


def test_patch_digest_drift_is_reported(synth, tmp_path):
    pt = prepare_patched_tree(synth.pristine, synth.pin, tmp_path / "work")
    drifted = dataclasses.replace(synth.pin, patch_sha256="0" * 64)
    check = check_patch_exact(pt.path, drifted)
    assert not check.ok
    assert any("drifted" in p for p in check.problems)
    ok, why = judge_single(check, drifted)
    assert not ok and "drifted" in why


def test_edited_patch_file_is_reported(synth, tmp_path):
    pt = prepare_patched_tree(synth.pristine, synth.pin, tmp_path / "work")
    with open(synth.pin.patch_path, "ab") as fh:
        fh.write(b"\n")
    check = check_patch_exact(pt.path, synth.pin)
    assert not check.diff_equals_patch
    assert any("drifted" in p for p in check.problems)
    assert any("is not the patch file" in p for p in check.problems)


def test_unpatched_tree_is_not_ok(synth, tmp_path):
    pt = prepare_patched_tree(synth.pristine, synth.pin, tmp_path / "work")
    plain_git(synth.home, "checkout", "--", "src/whisper.cpp", cwd=pt.path)
    check = check_patch_exact(pt.path, synth.pin)
    assert check.diff_bytes == 0 and check.status_lines == ()
    assert any("unpatched" in p for p in check.problems)
    assert not judge_single(check, synth.pin)[0]


def test_extra_edit_in_another_file_is_not_ok(synth, tmp_path):
    pt = prepare_patched_tree(synth.pristine, synth.pin, tmp_path / "work")
    (pt.path / "README.md").write_text("edited\n")
    check = check_patch_exact(pt.path, synth.pin)
    assert not check.ok
    assert " M README.md" in check.status_lines
    assert not check.diff_equals_patch


def test_mode_change_is_not_ok(synth, tmp_path):
    pt = prepare_patched_tree(synth.pristine, synth.pin, tmp_path / "work")
    os.chmod(pt.path / "README.md", 0o755)
    check = check_patch_exact(pt.path, synth.pin)
    assert not check.ok and " M README.md" in check.status_lines


def test_staged_change_is_not_hidden(synth, tmp_path):
    pt = prepare_patched_tree(synth.pristine, synth.pin, tmp_path / "work")
    (pt.path / "README.md").write_text("staged\n")
    plain_git(synth.home, "add", "README.md", cwd=pt.path)
    check = check_patch_exact(pt.path, synth.pin)
    assert not check.ok and "M  README.md" in check.status_lines


def test_extra_untracked_file_is_not_ok(synth, tmp_path):
    pt = prepare_patched_tree(synth.pristine, synth.pin, tmp_path / "work")
    (pt.path / "src" / "notes.txt").write_text("hi\n")
    check = check_patch_exact(pt.path, synth.pin)
    assert check.status_lines == (" M src/whisper.cpp", "?? src/notes.txt")
    assert check.diff_equals_patch and not check.ok


def test_planted_ignored_binary_is_caught(synth, tmp_path):
    pt = prepare_patched_tree(synth.pristine, synth.pin, tmp_path / "work")
    planted = pt.path / "build" / "bin" / "whisper-cli"
    planted.parent.mkdir(parents=True)
    planted.write_bytes(b"\x7fELF stale")
    # A plain status is blind to it (upstream's .gitignore hides build/) ...
    plain = plain_git(synth.home, "status", "--porcelain", cwd=pt.path).stdout_text.splitlines()
    assert plain == [" M src/whisper.cpp"]
    # ... the exactness check is not.
    check = check_patch_exact(pt.path, synth.pin)
    assert "!! build/bin/whisper-cli" in check.status_lines
    assert not check.ok
    ok, why = judge_single(check, synth.pin)
    assert not ok and "build/bin/whisper-cli" in why


def test_failed_patch_leaves_no_staging(synth, tmp_path):
    bad = tmp_path / "bad.patch"
    bad.write_bytes(synth.pin.patch_path.read_bytes().replace(b"int line_9 = 9;", b"int line_9 = 99;"))
    pin = dataclasses.replace(synth.pin, patch_path=bad)
    work = tmp_path / "work"
    with pytest.raises(PatchError, match=r"pin synth: patch .* does not apply.*patch failed"):
        prepare_patched_tree(synth.pristine, pin, work)
    assert list(work.iterdir()) == []


def test_wrong_pristine_tree_is_refused_and_leaves_no_staging(synth, tmp_path):
    (synth.pristine / "README.md").write_text("not upstream\n")
    work = tmp_path / "work"
    with pytest.raises(PatchError, match="refusing to patch"):
        prepare_patched_tree(synth.pristine, synth.pin, work)
    assert list(work.iterdir()) == []


def test_prepare_replaces_an_existing_work_tree(synth, tmp_path):
    work = tmp_path / "work"
    first = prepare_patched_tree(synth.pristine, synth.pin, work)
    (first.path / "stale.txt").write_text("old\n")
    second = prepare_patched_tree(synth.pristine, synth.pin, work)
    assert second.path == first.path and second.head_commit == first.head_commit
    assert check_patch_exact(second.path, synth.pin).ok
    assert sorted(p.name for p in work.iterdir()) == ["synth-patched"]


# ----------------------------------------------------------------------------- judges

@pytest.mark.parametrize("computed,pinned,ok", [
    ("a" * 40, "a" * 40, True),
    ("a" * 40, "b" * 40, False),
    ("A" * 40, "A" * 40, False),
    ("a" * 39, "a" * 39, False),
    (None, "a" * 40, False),
    ("a" * 64, "a" * 64, False),
])
def test_judge_source_identity(computed, pinned, ok):
    assert judge_source_identity({"computed_tree": computed, "pin_tree": pinned})[0] is ok


def test_judge_patch_exact_refuses_edited_evidence(synth, tmp_path):
    pt = prepare_patched_tree(synth.pristine, synth.pin, tmp_path / "work")
    check = check_patch_exact(pt.path, synth.pin)
    good = patch_evidence(synth.pin, {"before": check, "after": check})
    assert judge_patch_exact(good)[0]
    edits = [
        lambda e: e["checks"]["after"].update(status_lines=[]),
        lambda e: e["checks"]["after"].update(diff_sha256="f" * 64),
        lambda e: e["checks"]["before"].update(diff_bytes=True),
        lambda e: e["checks"]["before"].update(head_tree="0" * 40),
        lambda e: e.update(declared_patch_sha256="0" * 64),
        lambda e: e.update(touches=[]),
        lambda e: e["checks"].update(apply_error="boom"),
        lambda e: e["checks"]["before"].update(pin="other"),
    ]
    for edit in edits:
        ev = canonical.loads(canonical.dumps(good))
        edit(ev)
        assert judge_patch_exact(ev)[0] is False, ev
    assert judge_patch_exact([])[0] is False
