"""verifylib.whispercpp.source.fetch: obtaining a source and its git tree id, on a synthetic
tree made with plain git (fast). Real v1.8.5 is in tests/physical/test_source_fetch.py."""

from __future__ import annotations

import io
import os
import subprocess
import shutil
import tarfile
from pathlib import Path

import pytest

from verifylib import canonical
from verifylib.whispercpp import source
from verifylib.evidence.gates import Status
from verifylib.whispercpp.source.fetch import (SourceError, SourceSpec, git_tree_id,
                                               obtain_source, source_evidence)
from verifylib.evidence.build.rules import judge_source_identity

from tests.helpers.source_synth import make_tar, make_zip, plain_git, snapshot


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


def _git_add_tree_id(folder: Path, tmp: Path) -> str:
    """The tree id plain git gives when it stores the files: ``init``, ``add -A -f``."""
    env = {"GIT_DIR": str(tmp / "plain.git"), "GIT_WORK_TREE": str(folder), "HOME": str(tmp),
           "GIT_CONFIG_NOSYSTEM": "1", "PATH": os.environ["PATH"]}
    for argv in (["init", "-q"], ["add", "-A", "-f", "--", "."]):
        subprocess.run(["git", *argv], cwd=folder, env=env, check=True, capture_output=True)
    return subprocess.run(["git", "write-tree"], cwd=folder, env=env, check=True,
                          capture_output=True, text=True).stdout.strip()


def test_git_tree_id_hashes_what_git_add_would_store(tmp_path):
    # The id is computed without storing a blob (ls-files, update-index --info-only); it
    # must be the one `git add -A -f` gives, on every kind of entry a source folder holds.
    root = tmp_path / "src"
    (root / "a" / "b").mkdir(parents=True)
    (root / "a" / "b" / "f.c").write_text("int x;\n")
    (root / ".gitignore").write_text("*.o\n")
    (root / "a" / "ignored.o").write_bytes(b"\x00obj")
    (root / "run.sh").write_text("#!/bin/sh\n")
    (root / "run.sh").chmod(0o755)
    (root / "link").symlink_to("a/b/f.c")
    (root / "a" / "sp ace \u00e9.txt").write_text("\u00e9\n")
    (root / "empty").mkdir()
    (root / ".git").mkdir()
    (root / ".git" / "junk").write_text("not content")
    sub = root / "vendored"
    sub.mkdir()
    (sub / "s.txt").write_text("s\n")
    env = {"HOME": str(tmp_path), "GIT_CONFIG_NOSYSTEM": "1", "PATH": os.environ["PATH"]}
    for argv in (["init", "-q"], ["add", "s.txt"],
                 ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "m"]):
        subprocess.run(["git", *argv], cwd=sub, env=env, check=True, capture_output=True)
    (tmp_path / "g1").mkdir()
    assert git_tree_id(root) == _git_add_tree_id(root, tmp_path / "g1")
    nothing = tmp_path / "nothing"
    (nothing / "only-empty-folders").mkdir(parents=True)
    (tmp_path / "g2").mkdir()
    assert git_tree_id(nothing) == _git_add_tree_id(nothing, tmp_path / "g2") \
        == "4b825dc642cb6eb9a060e54bf8d69288fbee4904"


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
    assert judge_source_identity(source_evidence(synth.pin, None, st2)).status is Status.PASS
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
    j = judge_source_identity(ev)
    assert j.status is Status.FAIL and st.tree_id in j.detail and synth.pin.tree in j.detail


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
