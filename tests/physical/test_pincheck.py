"""``verifylib pin-check`` on real v1.8.5: as is it still needs the patch; with the fix in
place it no longer takes it (docs/runtime-contract.md §6.4)."""

from __future__ import annotations

import shutil

import pytest

from tests.helpers import ROOT
from verifylib import canonical
from verifylib.whispercpp import source
from verifylib.whispercpp.pincheck import assess, format_table


def _patches_digest() -> str:
    return canonical.tree_digest(ROOT / "patches")


def _rows(a):
    return {c.check.split(" (")[0].split(",")[0]: c for c in a.conditions}


@pytest.mark.physical
def test_v185_as_is_still_needs_the_patch(v185_source, v185_unpatched_build, verifylib_cache):
    before = _patches_digest()
    a = assess(str(v185_source.path), runs=3, cache_dir=verifylib_cache, log=lambda m: None)
    rows = _rows(a)
    assert a.known_pin == "v1.8.5" and a.pin == "v1.8.5" and a.patch_applies
    assert a.batch_state == "uninitialized"
    assert rows["pin v1.8.5's patch"].observed.startswith("yes")
    assert rows["`whisper_batch batch;` still uninitialized"].deletion == "NOT MET"
    assert rows["`whisper_batch batch;` still uninitialized"].observed.endswith("src/whisper.cpp:865")
    ab = rows["unpatched lifecycle A/B"]
    assert ab.deletion == "NOT MET" and ab.observed.startswith("3/3 SIGSEGV")
    ggml = rows["GGML positive path"]
    assert ggml.deletion == "met" and "And so my fellow Americans" in ggml.observed
    # Informational, beside row 2: what ASan reports for the unpatched candidate.
    asan = rows["unpatched AddressSanitizer run"]
    assert asan.deletion == "n/a"
    assert asan.observed.startswith("3/3 AddressSanitizer ")
    assert "in whisper_batch_free (/whisper.cpp/src/whisper.cpp:499)" in asan.observed
    assert asan.observed.endswith("(the early-return path still frees garbage: against safe "
                                  "initialization)")
    assert rows["Core ML positive path"].deletion.startswith("NOT_RUN(platform: needs macOS")
    assert a.conclusion.startswith("PATCH STILL NEEDED: pin v1.8.5's patch applies to this "
                                   "source, which still declares `whisper_batch batch;`.")
    assert a.conclusion.endswith("pin-check never deletes a patch.")
    assert _patches_digest() == before
    assert source.git_tree_id(v185_source.path) == v185_source.tree_id  # read-only


def test_v185_with_the_fix_in_place_no_longer_takes_the_patch(v185_source, tmp_path, capsys):
    copy = tmp_path / "whisper.cpp"
    shutil.copytree(v185_source.path, copy)
    f = copy / "src" / "whisper.cpp"
    text = f.read_text()
    assert text.count("\n    whisper_batch batch;\n") == 1
    f.write_text(text.replace("\n    whisper_batch batch;\n", "\n    whisper_batch batch = {};\n"))
    before = _patches_digest()
    a = assess(str(copy), build=False, log=lambda m: None)
    rows = _rows(a)
    assert a.known_pin is None and a.pin == "v1.8.5" and not a.patch_applies
    assert rows["pin v1.8.5's patch"].observed == "no: error: src/whisper.cpp: patch does not apply"
    assert a.batch_state == "initialized"
    assert rows["`whisper_batch batch;` still uninitialized"].deletion == "met"
    assert rows["unpatched lifecycle A/B"].deletion == "NOT_RUN(disabled: --no-build)"
    assert rows["unpatched AddressSanitizer run"].deletion == "NOT_RUN(disabled: --no-build)"
    assert a.conclusion.startswith("THE PATCH NO LONGER APPLIES to this source (pin v1.8.5's "
                                   "patch). Upstream now initializes the member")
    assert _patches_digest() == before
    # The same through the command line.
    from verifylib.cli.main import main
    assert main(["pin-check", str(copy), "--no-build", "--pin", "v1.8.5"]) == 0
    out = capsys.readouterr().out
    assert "THE PATCH NO LONGER APPLIES" in out and "toward deleting the patch" in out
    assert "| NOT_RUN(disabled: --no-build)" in out
    assert format_table(a).splitlines()[2].startswith("tree id:   ")


@pytest.mark.physical
def test_write_manifest_makes_the_packaged_patch_again_on_v185(v185_source, v185_pin, tmp_path):
    """The entry pin-check writes for a candidate is made as the packaged patches were: on
    real v1.8.5 the generated patch is the packaged one byte for byte, and it proves exact.
    The v1.8.5 tree itself is refused as a user pin (it is a packaged pin's tree)."""
    from verifylib.whispercpp import pin_entry
    from verifylib.whispercpp.pincheck import ManifestRequest, PinCheckError
    patch = pin_entry.generate_patch(v185_source.path, v185_source.tree_id, 865,
                                     tmp_path / "generate")
    assert patch == v185_pin.patch_bytes()
    assert canonical.sha256_bytes(patch) == v185_pin.patch_sha256
    entry = pin_entry.PinEntry("again", v185_pin.commit, v185_source.tree_id, patch,
                               v185_pin.touches, ())
    pin_entry.prove_entry(v185_source.path, entry, tmp_path / "prove", log=lambda m: None)
    with pytest.raises(PinCheckError, match="the candidate is packaged pin v1.8.5's tree"):
        assess(str(v185_source.path), write=ManifestRequest(tmp_path / "user.yaml",
                                                            commit=v185_pin.commit),
               log=lambda m: None)
    assert not (tmp_path / "user.yaml").exists()
