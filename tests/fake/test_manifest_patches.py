"""The packaged pins' patches, regenerated with plain git from a synthetic tree holding the
hunk's context (fast; upstream's own trees are not needed).

Every pin's patch is the one-line change at ``src/whisper.cpp:865`` inside ``struct
whisper_state``, written with ``git diff --no-ext-diff --binary --full-index``. The blob ids
of its ``index`` line are git's hashes of upstream's whole file, which a synthetic tree
cannot reproduce; everything else can. So each committed patch must equal the regenerated
bytes with only the two blob ids replaced, and v1.9.3's ids and digests are the facts
computed from upstream's git (docs/facts.md). The real v1.8.5 patch is reproduced from
upstream's source in tests/physical/test_source_patch.py.
"""

from __future__ import annotations

import re

import pytest
import yaml

from tests.helpers import ROOT
from tests.helpers.source_synth import plain_git
from verifylib import canonical
from verifylib.whispercpp.source import load_pins

# Facts computed from upstream's git for tag v1.9.3 (docs/facts.md, "whisper.cpp without GitHub").
V193_COMMIT = "371b5a7561823ab2bb32142d2751e35e7534727b"
V193_TREE = "3d7ce4f956997cfa325c7556533aba5604278463"
V193_BLOB_BEFORE = "89146e2e4da7847f717700b550eaf8baf71f9d4e"
V193_BLOB_AFTER = "00def25146fc0a918499f9bf7d312f165d434994"
V193_PATCH_SHA256 = "d0abe884e55ad721cb8bd6c9f64a81e603efdc868e9d104795ff5463e436f675"

# The hunk's surroundings in upstream's src/whisper.cpp at every pin: the struct that
# names the hunk, then lines 862-868 (three context lines each side of line 865).
STRUCT_LINE = 850
CONTEXT = ["", "    whisper_mel mel;", "", "    whisper_batch batch;", "",
           "    whisper_decoder decoders[WHISPER_MAX_DECODERS];", ""]
FIRST_CONTEXT_LINE = 862

_INDEX_RE = re.compile(rb"^index ([0-9a-f]{40})\.\.([0-9a-f]{40}) 100644$", re.M)


def _synthetic_source() -> list[str]:
    lines = [f"// filler line {i}" for i in range(1, STRUCT_LINE)]
    lines.append("struct whisper_state {")
    # Indented members: git's default hunk-header rule takes the nearest earlier line that
    # starts with a letter, which must stay the struct's.
    lines += [f"    int member_{i};" for i in range(STRUCT_LINE + 1, FIRST_CONTEXT_LINE)]
    lines += CONTEXT
    lines += ["    int after_the_hunk;", "};", "", "int main() { return 0; }"]
    assert lines[864] == "    whisper_batch batch;"  # line 865, 1-based
    return lines


@pytest.fixture(scope="module")
def regenerated(tmp_path_factory) -> bytes:
    """The one-line patch, made by plain git in a synthetic tree with the hunk's context."""
    tmp = tmp_path_factory.mktemp("hunk")
    home = tmp / "home"
    home.mkdir()
    tree = tmp / "tree"
    (tree / "src").mkdir(parents=True)
    lines = _synthetic_source()
    (tree / "src" / "whisper.cpp").write_text("\n".join(lines) + "\n")
    plain_git(home, "init", "-q", cwd=tree)
    plain_git(home, "add", "-A", "-f", cwd=tree)
    lines[864] = "    whisper_batch batch = {};"
    (tree / "src" / "whisper.cpp").write_text("\n".join(lines) + "\n")
    return plain_git(home, "diff", "--no-ext-diff", "--binary", "--full-index", cwd=tree).stdout


def _blob_ids(patch: bytes) -> tuple[str, str]:
    found = _INDEX_RE.findall(patch)
    assert len(found) == 1, patch
    before, after = found[0]
    return before.decode(), after.decode()


def _with_blob_ids(patch: bytes, before: str, after: str) -> bytes:
    return _INDEX_RE.sub(f"index {before}..{after} 100644".encode(), patch, count=1)


def test_the_synthetic_hunk_is_upstreams(regenerated):
    assert b"@@ -862,7 +862,7 @@ struct whisper_state {\n" in regenerated
    assert b"\n-    whisper_batch batch;\n+    whisper_batch batch = {};\n" in regenerated


@pytest.mark.parametrize("name", sorted(load_pins()))
def test_every_pin_patch_is_the_regenerated_hunk_but_for_its_blob_ids(regenerated, name):
    pin = load_pins()[name]
    committed = pin.patch_path.read_bytes()
    before, after = _blob_ids(committed)
    assert committed == _with_blob_ids(regenerated, before, after)
    assert canonical.sha256_bytes(committed) == pin.patch_sha256


def test_v193_entry_holds_the_facts_computed_from_upstream(regenerated):
    entry = yaml.safe_load((ROOT / "patches" / "manifest.yaml").read_text())["pins"]["v1.9.3"]
    assert entry == {"commit": V193_COMMIT, "tree": V193_TREE,
                     "patch": "whisper-batch-init-v1.9.3.patch",
                     "patch_sha256": V193_PATCH_SHA256, "touches": ["src/whisper.cpp"]}
    committed = (ROOT / "patches" / entry["patch"]).read_bytes()
    assert _blob_ids(committed) == (V193_BLOB_BEFORE, V193_BLOB_AFTER)
    assert committed == _with_blob_ids(regenerated, V193_BLOB_BEFORE, V193_BLOB_AFTER)
    # The regenerated patch's own ids are the synthetic file's: only they differ.
    assert _blob_ids(regenerated) != (V193_BLOB_BEFORE, V193_BLOB_AFTER)
    assert canonical.sha256_bytes(committed) == V193_PATCH_SHA256 == entry["patch_sha256"]
    pin = load_pins()["v1.9.3"]
    assert (pin.commit, pin.tree, pin.touches) == (V193_COMMIT, V193_TREE, ("src/whisper.cpp",))
