"""A downloaded ``….mlmodelc.zip`` (parameter ``encoder.path``): checked from its central
directory before any work, refused when unsafe in well under 5 s, unpacked as regular files
held to their declared sizes, recorded and re-checked (archives built in memory by
:mod:`tests.helpers.zips`; the command line's exit 2 is in tests/fake/test_encoder_zip.py)."""

from __future__ import annotations

import hashlib
import io
import stat
import struct
import time

import pytest
import yaml

from tests.helpers import ROOT
from tests.helpers.zips import (
    MODEL_MIL,
    TOP,
    Entry,
    encoder_entries,
    folder,
    hostile_archives,
    zip_bytes,
)
from verifylib import params
from verifylib.canonical import tree_digest
from verifylib.errors import ParametersInvalid
from verifylib.models.encoder_card import EncoderInvalid
from verifylib.models.encoder_zip import (
    MAX_ENTRIES,
    check_archive,
    describe_archive,
    is_encoder_archive,
    tree_problems,
    unpack,
)

HOSTILE = {"zip-slip": "a '..' component", "absolute path": "an absolute path",
           "symlink": "a symbolic link", "10,000 entries": "10008 entries, more than the 256",
           "4 GiB declared": "4294967296 bytes declared",
           "nested folder escape": "a '..' component"}


def _refusal(data: bytes) -> str:
    with pytest.raises(EncoderInvalid) as exc:
        check_archive(io.BytesIO(data))
    return str(exc.value)


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_archives_are_refused_from_the_central_directory_fast(name):
    data = hostile_archives()[name]
    t0 = time.perf_counter()
    message = _refusal(data)
    assert time.perf_counter() - t0 < 5
    assert HOSTILE[name] in message, message
    assert "\n" not in message


def test_a_well_formed_archive_lists_its_files():
    listing = check_archive(io.BytesIO(zip_bytes(encoder_entries())))
    assert listing.top == TOP
    assert [f.path for f in listing.files] == ["analytics/coremldata.bin", "coremldata.bin",
                                               "metadata.json", "model.mil",
                                               "weights/weight.bin"]
    assert listing.folders == ("analytics", "weights") and listing.skipped == 0
    assert listing.declared_bytes == sum(f.size for f in listing.files)


def _plus(*extra: Entry) -> bytes:
    return zip_bytes(encoder_entries() + list(extra))


CASES = [
    (_plus(Entry(f"{TOP}\\..\\x", b"e")), "a backslash"),
    (_plus(Entry("C:/x", b"e")), "a drive letter"),
    (_plus(Entry(f"{TOP}//x", b"e")), "an empty or '.' component"),
    (_plus(Entry(f"{TOP}/./x", b"e")), "an empty or '.' component"),
    (_plus(Entry(f"{TOP}/x\x07", b"e")), "a control character"),
    (_plus(Entry(f"{TOP}/model.mil", b"again")), "appears twice"),
    (_plus(Entry(f"{TOP}/Model.mil", b"x")), "differ only in case"),
    (_plus(Entry(f"{TOP}/secret", b"x", flags=0x1)), "an encrypted entry"),
    (_plus(Entry(f"{TOP}/fifo", mode=stat.S_IFIFO | 0o644)), "a FIFO"),
    (_plus(Entry(f"{TOP}/dev", mode=stat.S_IFCHR | 0o644)), "a character device"),
    (_plus(Entry(f"{TOP}/odd", mode=stat.S_IFDIR | 0o755)), "type and name disagree"),
    (_plus(Entry(f"{TOP}/d/", b"data", mode=stat.S_IFDIR | 0o755)), "a folder entry holding"),
    (_plus(Entry(f"{TOP}/bomb", b"\x00" * 4096, declared=64 << 20, deflate=True)),
     "a decompression bomb"),
    (_plus(Entry(f"{TOP}/stored", b"x" * 10, declared=20)), "stored entry whose declared"),
    (_plus(Entry("other/x", b"e")), "outside a single top-level"),
    (_plus(Entry("metadata.json", b"e")), "a file outside a top-level"),
    (_plus(Entry(f"{TOP}/.DS_Store", b"e")), "zip -d"),
    (_plus(Entry(f"{TOP}/weights/._weight.bin", b"e")), "a file macOS writes on its own"),
    (_plus(Entry(f"{TOP}/model.mil/x", b"e")), "lies under a name that is a file"),
    (zip_bytes([folder("enc"), Entry("enc/metadata.json", b"[]"),
                Entry("enc/coremldata.bin", b"x")]), "does not end in .mlmodelc"),
    (zip_bytes([e for e in encoder_entries() if not e.name.endswith("/metadata.json")]),
     "no metadata.json"),
    (b"not a zip at all", "not a zip archive"),
]


@pytest.mark.parametrize("data, needle", CASES, ids=[c[1] for c in CASES])
def test_each_unsafe_entry_is_named(data, needle):
    message = _refusal(data)
    assert needle in message, message


def test_an_end_record_declaring_too_many_entries_is_refused_before_parsing():
    data = bytearray(zip_bytes(encoder_entries()))
    # The end record's two entry counts say 60000 while the directory holds 8: the count
    # is refused before zipfile reads a single directory entry.
    end = data.rfind(b"PK\x05\x06")
    data[end + 8:end + 12] = (60000).to_bytes(2, "little") * 2
    assert f"60000 entries, more than the {MAX_ENTRIES}" in _refusal(bytes(data))


def test_a_zip64_end_record_is_followed_before_parsing():
    data = zip_bytes(encoder_entries())
    end = data.rfind(b"PK\x05\x06")
    cd_size, cd_offset = struct.unpack_from("<2L", data, end + 12)
    record = struct.pack("<4sQ2H2L4Q", b"PK\x06\x06", 44, 45, 45, 0, 0, 10**9, 10**9,
                         cd_size, cd_offset)
    locator = struct.pack("<4sLQL", b"PK\x06\x07", 0, end, 1)
    forged = data[:end] + record + locator + data[end:]
    assert "1000000000 entries, more than the 256" in _refusal(forged)


def test_an_end_record_that_undercounts_is_caught_after_parsing():
    data = bytearray(hostile_archives()["10,000 entries"])
    end = data.rfind(b"PK\x05\x06")
    data[end + 8:end + 12] = (8).to_bytes(2, "little") * 2
    t0 = time.perf_counter()
    assert "10008 entries, more than the 256" in _refusal(bytes(data))
    assert time.perf_counter() - t0 < 5


def test_archive_utility_resource_entries_are_checked_and_skipped(tmp_path):
    data = _plus(folder("__MACOSX"), folder(f"__MACOSX/{TOP}"),
                 Entry(f"__MACOSX/{TOP}/._model.mil", b"\x00\x05\x16\x07"))
    listing = check_archive(io.BytesIO(data))
    assert listing.skipped == 3 and listing.top == TOP
    zp = tmp_path / "enc.mlmodelc.zip"
    zp.write_bytes(data)
    got = unpack(zp, tmp_path / "out")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [TOP]
    assert not any(p.name.startswith("._") for p in got.folder.rglob("*"))
    # a hostile name is refused there too
    assert "a '..' component" in _refusal(_plus(Entry("__MACOSX/../x", b"e")))


def _on_disk(tmp_path, entries):
    """The folder the entries describe, written directly (what a user would have unzipped)."""
    root = tmp_path / "folder"
    for e in entries:
        target = root / e.name
        if e.name.endswith("/"):
            target.mkdir(parents=True, exist_ok=True)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(e.data)
    return root / TOP


def test_unpacking_gives_the_folder_and_the_archive_digest(tmp_path):
    entries = encoder_entries()
    data = zip_bytes(entries)
    zp = tmp_path / f"{TOP}.zip"
    zp.write_bytes(data)
    assert is_encoder_archive(zp) and not is_encoder_archive(tmp_path / "x.mlpackage.zip")
    got = unpack(zp, tmp_path / "staging")
    assert got.folder == tmp_path / "staging" / TOP
    assert got.sha256 == hashlib.sha256(data).hexdigest() and got.size == len(data)
    assert tree_digest(got.folder) == tree_digest(_on_disk(tmp_path, entries))
    assert all(p.is_dir() or (p.is_file() and not p.is_symlink())
               for p in got.folder.rglob("*"))
    assert tree_problems(got.folder, got.listing.files) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["folder", "staging", zp.name])


def test_a_member_is_held_to_its_declared_size(tmp_path):
    big = b"\x00" * 50_000
    for declared, needle in ((1000, "cannot be inflated"), (60_000, "inflates to 50000 bytes")):
        zp = tmp_path / f"{declared}.mlmodelc.zip"
        zp.write_bytes(_plus(Entry(f"{TOP}/liar.bin", big, declared=declared, deflate=True)))
        with pytest.raises(EncoderInvalid, match=needle):
            unpack(zp, tmp_path / f"out-{declared}")
        written = tmp_path / f"out-{declared}" / TOP / "liar.bin"
        assert not written.exists() or written.stat().st_size <= declared


def test_unpacking_refuses_a_folder_that_is_not_empty(tmp_path):
    zp = tmp_path / "e.mlmodelc.zip"
    zp.write_bytes(zip_bytes(encoder_entries()))
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "x").write_bytes(b"")
    with pytest.raises(EncoderInvalid, match="not an empty folder"):
        unpack(zp, tmp_path / "out")


def test_tree_problems_name_every_difference(tmp_path):
    zp = tmp_path / "e.mlmodelc.zip"
    zp.write_bytes(zip_bytes(encoder_entries()))
    got = unpack(zp, tmp_path / "out")
    (got.folder / "model.mil").write_bytes(b"programme")
    (got.folder / "extra").write_bytes(b"")
    (got.folder / "analytics" / "coremldata.bin").unlink()
    found = tree_problems(got.folder, got.listing.files)
    assert found[0] == f"{TOP}/extra: not in the archive"
    assert found[1] == f"{TOP}/analytics/coremldata.bin: listed by the archive, absent"
    assert found[2].startswith(f"{TOP}/model.mil: 9 bytes") and \
        f"declared {len(MODEL_MIL)} bytes" in found[2]
    assert len(found) == 3


def test_the_card_is_read_from_a_partial_unpack_in_a_private_folder(tmp_path):
    zp = tmp_path / f"{TOP}.zip"
    zp.write_bytes(zip_bytes(encoder_entries()))
    card = describe_archive(zp)
    assert card.name == TOP and card.format == "mlmodelc"
    assert "model.mil" in card.read_from
    assert [p.name for p in tmp_path.iterdir()] == [zp.name]


# ----------------------------------------------------------------------------- validation

def _params_file(tmp_path, encoder_path):
    data = yaml.safe_load((ROOT / "parameters" / "tiny-en.yaml").read_text())
    data["fixtures"] = data["fixtures"][:1]
    data.pop("export")
    data["encoder"] = {"path": str(encoder_path)}
    f = tmp_path / "zip.yaml"
    f.write_text(yaml.safe_dump(data))
    return f


def test_a_zip_validates_as_a_compiled_encoder(tmp_path):
    zp = tmp_path / f"{TOP}.zip"
    zp.write_bytes(zip_bytes(encoder_entries()))
    p = params.load(_params_file(tmp_path, zp))
    assert p.encoder == params.EncoderSection(str(zp.resolve()), "mlmodelc", True)
    assert p.export.fp16 is False
    from verifylib.batch.inputs import preflight
    preflight(p)  # the card is read from the zip, as stage 02 will read the folder
    entries = [e if not e.name.endswith("/metadata.json") else Entry(e.name, b"{not json")
               for e in encoder_entries()]
    zp.write_bytes(zip_bytes(entries))
    with pytest.raises(ParametersInvalid) as exc:
        preflight(params.load(_params_file(tmp_path, zp)))
    assert "key encoder.path" in str(exc.value) and "metadata.json is not JSON" in str(exc.value)


def test_doctor_cards_a_zipped_encoder_from_what_preflight_read(tmp_path):
    """``doctor PARAMS.yaml`` carded the given encoder again with the folder reader, which
    refuses a ``.zip``: a zip that ``run`` accepts was called bad parameters."""
    from verifylib.batch.inputs import preflight
    from verifylib.cli import doctor
    zp = tmp_path / f"{TOP}.zip"
    zp.write_bytes(zip_bytes(encoder_entries()))
    p = params.load(_params_file(tmp_path, zp))
    card = preflight(p)
    assert card is not None
    audit = doctor.audit_check_of(p, card)
    assert [(e.precision, e.given) for e in audit.encoders] == [(card.precision, True)]
    assert sorted(q.name for q in tmp_path.iterdir()) == sorted([zp.name, "zip.yaml"])


def test_a_zipped_model_mil_must_parse_and_name_weights_the_zip_holds(tmp_path):
    zp = tmp_path / f"{TOP}.zip"
    f = _params_file(tmp_path, zp)
    from verifylib.batch.inputs import preflight
    cases = {b"program": "model.mil does not parse as MIL text",
             MODEL_MIL.replace(b"weights/weight.bin", b"../../x.bin"): "leads outside",
             MODEL_MIL.replace(b"weights/weight.bin", b"weights/w2.bin"):
                 "names weight file weights/w2.bin, which the archive does not hold"}
    for mil, needle in cases.items():
        entries = [e if not e.name.endswith("/model.mil") else Entry(e.name, mil)
                   for e in encoder_entries()]
        zp.write_bytes(zip_bytes(entries))
        with pytest.raises(ParametersInvalid) as exc:
            preflight(params.load(f))
        msg = str(exc.value)
        assert msg.startswith(f"{f}: key encoder.path: {zp.resolve()}: ") and needle in msg, msg
        assert "verifylib-encoder-" not in msg  # the private folder is never named
    assert sorted(q.name for q in tmp_path.iterdir()) == sorted([zp.name, "zip.yaml"])


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_a_hostile_zip_is_refused_at_validation_naming_file_and_key(tmp_path, name):
    zp = tmp_path / f"{TOP}.zip"
    zp.write_bytes(hostile_archives()[name])
    f = _params_file(tmp_path, zp)
    t0 = time.perf_counter()
    with pytest.raises(ParametersInvalid) as exc:
        params.load(f)
    assert time.perf_counter() - t0 < 5
    message = str(exc.value)
    assert message.startswith(f"{f}: key encoder.path: {zp}: "), message
    assert HOSTILE[name] in message and "\n" not in message


@pytest.mark.parametrize("name, make, needle", [
    ("x.mlpackage.zip", lambda p: p.write_bytes(zip_bytes(encoder_entries())), "ends in none"),
    ("x.mlmodelc.zip", lambda p: p.mkdir(), "is not a file"),
])
def test_other_zip_paths_are_refused(tmp_path, name, make, needle):
    make(tmp_path / name)
    with pytest.raises(ParametersInvalid, match=needle):
        params.load(_params_file(tmp_path, tmp_path / name))


def test_a_zipped_encoder_needs_macos_for_the_program_gates_as_a_folder_does():
    from verifylib.evidence import gates
    from verifylib.evidence.gates import Capability
    for path in ("/d/ggml-tiny.en-encoder.mlmodelc", "/d/ggml-tiny.en-encoder.mlmodelc.zip"):
        bound = {"encoder": {"path": path}}
        for gid in ("export.pair", "parity.program", "export.compile"):
            assert gates.capability_of(gates.gate(gid), bound) is Capability.MACOS, (path, gid)
