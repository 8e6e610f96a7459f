"""verifylib.whispercpp.source.patch: patch exactness on a synthetic tree made with plain git
(fast). Real v1.8.5 is in tests/physical/test_source_patch.py."""

from __future__ import annotations

import dataclasses
import os

import pytest

from verifylib import canonical
from verifylib.whispercpp import source
from verifylib.evidence.gates import Judgement, Status
from verifylib.whispercpp.source.patch import (PatchError, check_patch_exact, patch_evidence,
                                               prepare_patched_tree, work_tree_key)
from verifylib.evidence.build.rules import judge_patch_exact

from tests.helpers.source_synth import plain_git, snapshot


def judge_single(check: source.PatchCheck, pin: source.Pin) -> Judgement:
    return judge_patch_exact(patch_evidence(pin, {"before": check}), required=("before",))


def test_prepare_and_check_exact(synth, tmp_path):
    before = snapshot(synth.pristine)
    pt = prepare_patched_tree(synth.pristine, synth.pin, tmp_path / "work")
    assert snapshot(synth.pristine) == before
    assert pt.base_tree == synth.pin.tree and pt.patch_sha256 == synth.pin.patch_sha256
    # Named by content (pristine tree + patch bytes), not one fixed path per pin.
    key = work_tree_key(synth.pin.tree, synth.pin.patch_sha256)
    assert pt.path == tmp_path / "work" / f"synth-{key}"
    check = check_patch_exact(pt.path, synth.pin)
    assert check.ok, check.problems
    assert check.diff_equals_patch
    assert check.status_lines == (" M src/whisper.cpp",) == check.expected_status_lines
    ev = patch_evidence(synth.pin, {"before": check.to_evidence(), "after": check.to_evidence()})
    j = judge_patch_exact(canonical.loads(canonical.dumps(ev)))
    assert j.status is Status.PASS, j.detail
    # Both phases are required by default.
    del ev["checks"]["after"]
    assert judge_patch_exact(ev) == Judgement(Status.FAIL, "after: check missing")


def test_patch_digest_drift_is_reported(synth, tmp_path):
    pt = prepare_patched_tree(synth.pristine, synth.pin, tmp_path / "work")
    drifted = dataclasses.replace(synth.pin, patch_sha256="0" * 64)
    check = check_patch_exact(pt.path, drifted)
    assert not check.ok
    assert any("drifted" in p for p in check.problems)
    j = judge_single(check, drifted)
    assert j.status is Status.FAIL and "drifted" in j.detail


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
    assert judge_single(check, synth.pin).status is Status.FAIL


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
    j = judge_single(check, synth.pin)
    assert j.status is Status.FAIL and "build/bin/whisper-cli" in j.detail


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
    assert sorted(p.name for p in work.iterdir()) == [first.path.name]


def test_prepare_reuses_an_exact_work_tree_without_replacing_it(synth, tmp_path):
    # Another run may be building from the folder: an exact one is reused in place.
    work = tmp_path / "work"
    first = prepare_patched_tree(synth.pristine, synth.pin, work)
    marker = (first.path / "src" / "whisper.cpp").stat().st_ino
    second = prepare_patched_tree(synth.pristine, synth.pin, work)
    assert second == first
    assert (second.path / "src" / "whisper.cpp").stat().st_ino == marker
    assert check_patch_exact(second.path, synth.pin).ok


# ----------------------------------------------------------------------------- judges

def test_judge_patch_exact_refuses_edited_evidence(synth, tmp_path):
    pt = prepare_patched_tree(synth.pristine, synth.pin, tmp_path / "work")
    check = check_patch_exact(pt.path, synth.pin)
    good = patch_evidence(synth.pin, {"before": check, "after": check})
    assert judge_patch_exact(good).status is Status.PASS
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
        assert judge_patch_exact(ev).status is Status.FAIL, ev
    assert judge_patch_exact([]).status is Status.FAIL
