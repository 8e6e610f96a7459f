"""Owned folders (verifylib/locks.py): a staging folder carries its owner, and is swept
only once that owner is provably gone; git runs with a HOME that creates nothing. A killed
import's staging folder, a kernel's temporary folder and git in a child process are in
tests/fake/test_leftovers.py."""

import os
import time
from pathlib import Path

from verifylib import canonical, locks as owners
from verifylib.whispercpp.source import fetch


def _reused_pid_record() -> dict:
    """A record of this pid but another start: the owner died and its pid was reused."""
    record = owners.owner_record()
    kind, _, ticks = record["start"].rpartition(":")
    record["start"] = f"{kind}:{ticks}1"
    return record


def _folder(parent: Path, name: str, record: dict | None) -> Path:
    folder = parent / name
    (folder / "hf").mkdir(parents=True)
    (folder / "hf" / "model.safetensors").write_bytes(b"x" * 100)
    if record is not None:
        canonical.write_json(parent / f"{name}{owners.OWNER_SUFFIX}", record)
    return folder


def test_make_owned_dir_writes_its_record_and_remove_takes_both(tmp_path):
    parent = tmp_path / "models" / "ggml"
    folder = owners.make_owned_dir(parent, owners.STAGING_PREFIX)
    assert folder.parent == parent and folder.name.startswith(".staging-")
    record = canonical.read_json(parent / f"{folder.name}{owners.OWNER_SUFFIX}")
    assert record["pid"] == os.getpid() and not owners.owner_is_gone(record)
    owners.remove_owned_dir(folder)
    assert list(parent.iterdir()) == []


def test_a_published_folder_leaves_only_its_record_to_remove(tmp_path):
    folder = owners.make_owned_dir(tmp_path, ".staging-abc-", family=".staging-")
    (folder / "x").write_text("1")
    folder.rename(tmp_path / "entry")  # publish_dir renames it into place
    owners.remove_owned_dir(folder)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["entry"]


def test_sweep_removes_only_folders_whose_owner_is_provably_gone(tmp_path):
    gone = _folder(tmp_path, ".staging-gone", _reused_pid_record())
    live = _folder(tmp_path, ".staging-live", owners.owner_record())
    remote = _folder(tmp_path, ".staging-remote", dict(_reused_pid_record(),
                                                       host="another-host.invalid"))
    unowned = _folder(tmp_path, ".staging-unowned", None)
    bad = _folder(tmp_path, ".staging-bad", None)
    (tmp_path / f"{bad.name}{owners.OWNER_SUFFIX}").write_text('{"pid": "../1"}')
    orphan = tmp_path / f".staging-published{owners.OWNER_SUFFIX}"
    canonical.write_json(orphan, _reused_pid_record())
    other = _folder(tmp_path, "not-staging", _reused_pid_record())
    target = _folder(tmp_path / "elsewhere", ".staging-target", None)
    link = tmp_path / ".staging-link"
    link.symlink_to(target)

    assert owners.sweep_owned_dirs(tmp_path, owners.STAGING_PREFIX) == [gone]
    assert not gone.exists() and not (tmp_path / f"{gone.name}{owners.OWNER_SUFFIX}").exists()
    assert not orphan.exists()
    for kept in (live, remote, unowned, bad, other, link, target):
        assert kept.exists(), kept
    # Without a readable record, a folder goes once nothing in it changed for an hour.
    later = time.time() + owners.UNOWNED_STALE_SECONDS + 60
    assert sorted(owners.sweep_owned_dirs(tmp_path, ".staging-", now=later)) == \
        sorted([bad, unowned])
    for kept in (live, remote, other, link, target):
        assert kept.exists(), kept


def test_making_a_staging_folder_sweeps_its_family_first(tmp_path):
    parent = tmp_path / "builds"
    left = _folder(parent, ".staging-0123456789ab-old", _reused_pid_record())
    download = _folder(parent, ".download-old", _reused_pid_record())
    fresh = owners.make_owned_dir(parent, ".staging-fedcba987654-", family=".staging-")
    assert not left.exists() and fresh.is_dir()
    assert download.exists()  # another family


def test_the_cache_sweep_reaches_every_area_and_models_ggml(tmp_path):
    cache = tmp_path / "cache"
    ggml = _folder(cache / "models" / "ggml", ".staging-killed", _reused_pid_record())
    sources = _folder(cache / "sources", ".staging-killed", _reused_pid_record())
    inside = _folder(cache / "builds" / ("ab" * 32), ".staging-of-upstream",
                     _reused_pid_record())
    assert sorted(owners.sweep_cache_staging(cache)) == sorted([ggml, sources])
    assert inside.exists()  # inside a published entry: never swept
    assert owners.sweep_cache_staging(tmp_path / "absent") == []


def test_git_runs_with_a_home_where_nothing_can_exist(tmp_path, monkeypatch):
    import tempfile
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    env = fetch._git_env(tmp_path / "repo.git", None)
    assert env["HOME"] == fetch.GIT_HOME and env["HOME"].startswith(os.devnull + os.sep)
    assert env["XDG_CONFIG_HOME"].startswith(os.devnull + os.sep)
    assert not os.path.exists(env["HOME"])
    assert list(tmp_path.iterdir()) == []  # no throwaway folder made
