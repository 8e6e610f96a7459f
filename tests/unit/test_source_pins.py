"""verifylib.whispercpp.source.pins: the pin manifest and the source-identity judge."""

from __future__ import annotations

import pytest

from verifylib import canonical
from verifylib.evidence.gates import Status
from verifylib.evidence.build.rules import judge_source_identity
from verifylib.whispercpp.source.pins import load_pins

from tests.helpers.source_synth import V185_PATCH_SHA256, V185_TREE


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
    # A complete source document as source_evidence writes it (parsed strictly).
    j = judge_source_identity({"pin": "v1.8.5", "pin_commit": "c" * 40, "pin_tree": pinned,
                               "computed_tree": computed, "origin": None, "path": None,
                               "cached": None})
    assert j.status is (Status.PASS if ok else Status.FAIL)
