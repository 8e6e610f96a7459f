"""Fixtures of the fake tier: a synthetic pinned source made with plain git (``synth``) and
the fake whisper.cpp tree the canary stage reads (``tree``)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.helpers.source_synth import SRC_LINES, Synth, make_pristine, plain_git
from verifylib import canonical
from verifylib.runtime import contracts
from verifylib.whispercpp.source import load_pins


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


@pytest.fixture
def tree(tmp_path) -> Path:
    """A whisper.cpp tree with the files stage 03 reads: the tree's test model and sample."""
    t = tmp_path / "whisper.cpp"
    (t / "models").mkdir(parents=True)
    (t / "samples").mkdir()
    (t / contracts.TEST_MODEL_IN_TREE).write_bytes(b"ggml test model")
    (t / contracts.TEST_AUDIO_IN_TREE).write_bytes(b"RIFF sample")
    return t
