"""Files macOS writes on its own (``.DS_Store``, ``._*``, ``Icon\\r``, ``__MACOSX``) in a
whisper.cpp source, on the synthetic pin made with plain git: they change the git tree id
(nothing is skipped), a folder source holding them is refused naming them and the command
that removes them, that command restores the pin's tree, and an archive holding them gives
a ``build.source_identity`` FAIL that names them. The refusal wording for every kind of
folder is in tests/unit/test_macos_traps.py."""

from __future__ import annotations

import re
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest
import yaml

from verifylib import canonical, params
from verifylib.errors import ParametersInvalid
from verifylib.evidence.gates import Status
from verifylib.evidence.build.rules import judge_source_identity
from verifylib.whispercpp.source.fetch import (SourceSpec, git_tree_id, obtain_source,
                                               source_evidence)

from tests.helpers import ROOT
from tests.helpers.source_synth import make_tar, make_zip


def _litter(src: Path) -> None:
    """What a Mac leaves in a source folder it opened, copied or unpacked."""
    (src / ".DS_Store").write_bytes(b"\0\0\0\1Bud1")
    (src / "src" / ".DS_Store").write_bytes(b"\0\0\0\1Bud1")
    (src / "src" / "._whisper.cpp").write_bytes(b"\0\5\26\7\0\2\0\0Mac OS X")
    (src / "Icon\r").write_bytes(b"")
    (src / "tools" / "__MACOSX").mkdir()
    (src / "tools" / "__MACOSX" / "._run.sh").write_bytes(b"\0\5\26\7")


def test_the_named_command_removes_the_litter_and_restores_the_pins_tree(synth, tmp_path):
    src = tmp_path / "whisper.cpp"
    shutil.copytree(synth.pristine, src, symlinks=True)
    _litter(src)
    assert git_tree_id(src) != synth.pin.tree  # counted like any file
    data = yaml.safe_load((ROOT / "parameters" / "tiny-en.yaml").read_text())
    data["runtime"] = {"pin": "synth", "source": {"kind": "folder", "path": str(src)}}
    data["fixtures"] = data["fixtures"][:1]
    with pytest.raises(ParametersInvalid) as info:
        params.validate(data, "p.yaml", tmp_path, manifest=synth.manifest)
    msg = str(info.value)
    for name in (".DS_Store", "src/.DS_Store", "src/._whisper.cpp", "tools/__MACOSX"):
        assert name in msg, msg
    command = re.search(r"remove them with `([^`]+)`", msg).group(1)
    subprocess.run(["bash", "-c", command], check=True)
    assert canonical.os_litter(src) == ()
    assert git_tree_id(src) == synth.pin.tree
    params.validate(data, "p.yaml", tmp_path, manifest=synth.manifest)


def test_an_archive_made_on_a_mac_names_its_litter_in_the_identity_fail(synth, tmp_path):
    src = tmp_path / "proj-1.0"
    shutil.copytree(synth.pristine, src, symlinks=True)
    (src / ".DS_Store").write_bytes(b"\0\0\0\1Bud1")
    (src / "src" / "._whisper.cpp").write_bytes(b"\0\5\26\7")  # macOS tar's AppleDouble
    tgz = make_tar(src, tmp_path / "src.tar.gz", "proj-1.0")
    st = obtain_source(SourceSpec(kind="archive", path=tgz, subdir="proj-1.0"),
                       tmp_path / "cache", log=lambda m: None)
    assert st.origin["os_litter"] == [".DS_Store", "src/._whisper.cpp"]
    assert st.tree_id != synth.pin.tree
    j = judge_source_identity(source_evidence(synth.pin, st.tree_id, st))
    assert j.status is Status.FAIL
    assert "(.DS_Store, src/._whisper.cpp)" in j.detail and "macOS" in j.detail
    # The cached entry keeps the record: the same archive again says the same.
    again = obtain_source(SourceSpec(kind="archive", path=tgz, subdir="proj-1.0"),
                          tmp_path / "cache", log=lambda m: None)
    assert again.cached and again.origin["os_litter"] == st.origin["os_litter"]


def test_archive_utilitys_resource_folder_beside_the_subdir_is_not_the_source(synth, tmp_path):
    # Archive Utility puts the AppleDouble files in a __MACOSX/ beside the top folder:
    # outside the subdir, so not in the tree, and nothing is recorded.
    z = make_zip(synth.pristine, tmp_path / "src.zip", "proj-1.0")
    with zipfile.ZipFile(z, "a") as zf:
        zf.writestr("__MACOSX/proj-1.0/src/._whisper.cpp", b"\0\5\26\7")
    st = obtain_source(SourceSpec(kind="archive", path=z, subdir="proj-1.0"),
                       tmp_path / "cache", log=lambda m: None)
    assert st.tree_id == synth.pin.tree and "os_litter" not in st.origin
