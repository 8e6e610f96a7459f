"""coremltools opens a package only as a private copy: what was given keeps bytes and mtimes.

coremltools rewrites ``Manifest.json`` in every package it opens (the control below shows
it, with a manifest formatted as coremltools would not), so each reader of a package —
the protobuf description, the encoder card, the program loader and what executes it — is
run on a package with a compact manifest and back-dated times, and every file and folder
of it must read the same afterwards, with no temporary folder left."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

import numpy as np
import pytest

from tests.helpers.mil_programs import save_program
from verifylib.models.coreml_contract import describe_mlpackage
from verifylib.models.encoder_reader import describe_encoder
from verifylib.models.private_package import open_package, private_copy, read_spec
from verifylib.numerics.mil_exec import MilExecError, execute, load_program

W = np.random.default_rng(11).normal(size=(64, 64)).astype(np.float32)
OLD_NS = 1_577_836_800_000_000_000  # 2020-01-01T00:00:00Z


def _state(root: Path) -> dict[str, tuple[str | None, int]]:
    """Every entry under ``root`` (``root`` itself too): its SHA-256 and st_mtime_ns."""
    out = {}
    for p in [root, *sorted(root.rglob("*"))]:
        st = os.lstat(p)
        digest = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else None
        out[p.relative_to(root).as_posix()] = (digest, st.st_mtime_ns)
    return out


def _given(folder: Path) -> Path:
    """A package with weights, its manifest compacted and every time set to 2020."""
    pkg = save_program(folder, lambda mb, x: mb.linear(x=x, weight=W), (1, 64), "given")
    manifest = pkg / "Manifest.json"
    manifest.write_text(json.dumps(json.loads(manifest.read_text()), separators=(",", ":")))
    for p in [*pkg.rglob("*"), pkg]:
        os.utime(p, ns=(OLD_NS, OLD_NS), follow_symlinks=False)
    return pkg


@pytest.fixture
def given(tmp_path, monkeypatch):
    """The package, and the temporary folder every private copy must be made (and gone) in."""
    pkg = _given(tmp_path / "in")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    return pkg, tmp


def test_coremltools_writes_the_package_it_opens(tmp_path):
    """The control: the reason no package of ours is handed to coremltools in place."""
    from coremltools.models.utils import load_spec

    pkg = _given(tmp_path)
    before = _state(pkg)
    load_spec(str(pkg))
    after = _state(pkg)
    assert after["Manifest.json"][0] != before["Manifest.json"][0]
    assert after["Manifest.json"][1] != OLD_NS and after["."][1] != OLD_NS


def test_every_reader_leaves_the_given_package_as_it_was(given):
    pkg, tmp = given
    before = _state(pkg)
    assert read_spec(pkg).WhichOneof("Type") == "mlProgram"
    assert describe_mlpackage(pkg)["model_type"] == "mlProgram"
    assert describe_encoder(pkg).format == "mlpackage"
    opened = open_package(pkg)
    assert Path(opened.weights_dir) == pkg / "Data" / "com.apple.CoreML" / "weights"
    program = load_program(pkg)
    assert program.path == pkg
    x = np.random.default_rng(2).normal(size=(1, 64)).astype(np.float32)
    # The weights are read from the given package's file after the copy is gone.
    (out,) = execute(program, {program.inputs[0].name: x}).outputs.values()
    np.testing.assert_allclose(out, x @ W.T, rtol=1e-4, atol=1e-4)
    assert _state(pkg) == before
    assert list(tmp.iterdir()) == []


def test_the_private_copy_links_all_but_the_manifest_and_is_removed(given):
    pkg, tmp = given
    with private_copy(pkg) as copy:
        assert copy.name == pkg.name and copy.parent.parent == tmp
        manifest = copy / "Manifest.json"
        assert manifest.is_file() and not manifest.is_symlink()
        files = [p for p in copy.rglob("*") if not p.is_dir() and p != manifest]
        assert files and all(p.is_symlink() for p in files)
        assert all(p.resolve() == (pkg / p.relative_to(copy)).resolve() for p in files)
        assert not any(p.is_symlink() for p in copy.rglob("*") if p.is_dir())
    assert list(tmp.iterdir()) == []


def test_a_failing_opening_leaves_nothing_either(given, tmp_path):
    pkg, tmp = given
    (pkg / "Manifest.json").write_text("{}")
    with pytest.raises(Exception):
        read_spec(pkg)
    with pytest.raises(MilExecError, match="not a saved .mlpackage folder"):
        load_program(tmp_path / "missing.mlpackage")
    assert list(tmp.iterdir()) == []
