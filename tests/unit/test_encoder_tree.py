"""A given encoder's folder is checked whole before any work (issue 35): no link, only
bounded, allocated regular files, a ``model.mil`` that parses, every weight the program names
a blob inside the folder. Each hostile folder of :mod:`tests.helpers.hostile_inputs` is
refused in one line naming the folder and what is wrong; the clean ones are read."""

import os

import pytest

from tests.helpers.hostile_inputs import clean_encoders, hostile_encoders
from verifylib.models import encoder_tree
from verifylib.models.encoder_card import EncoderInvalid
from verifylib.models.encoder_reader import check_given_encoder
from verifylib.models.mil_program_text import BlobRef, blob_refs
from verifylib.models.mil_text import MilTextError

NEEDLES = {
    "pkg-weight-link": "weights/weight.bin is a symbolic link",
    "pkg-weight-outside": "which leads outside the encoder's folder",
    "pkg-weight-empty": "weights/weight.bin is empty (0 bytes)",
    "pkg-weight-sparse": "weights/weight.bin is sparse (2000000000 bytes long",
    "mlmodelc-weight-link": "weights/weight.bin is a symbolic link",
    "mlmodelc-weight-outside": "names weight file '@model_path/../outside.bin', which leads "
                               "outside",
    "mlmodelc-weight-empty": "weights/weight.bin is empty (0 bytes)",
    "mlmodelc-weight-sparse": "weights/weight.bin is sparse",
    "mlmodelc-garbage-mil": "model.mil does not parse as MIL text",
}


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    base = tmp_path_factory.mktemp("encoders")
    return clean_encoders(base / "ok"), hostile_encoders(base / "bad")


def test_clean_encoders_are_read(folders):
    clean, _ = folders
    for fmt, path in clean.items():
        card = check_given_encoder(path)
        assert card.format == fmt and card.precision == "fp32"
        assert encoder_tree.check_tree(path).files >= 2


def test_every_hostile_encoder_is_refused_naming_what(folders):
    _, hostile = folders
    assert set(hostile) == set(NEEDLES)
    for name, path in hostile.items():
        with pytest.raises(EncoderInvalid) as exc:
            check_given_encoder(path)
        msg = str(exc.value)
        assert msg.startswith(f"{path}: ") and NEEDLES[name] in msg, (name, msg)
        assert "\n" not in msg


def test_a_weights_path_outside_is_refused_before_the_file_is_opened(folders, monkeypatch):
    """The outside file exists (a copy of the real weights): refused for where it is."""
    _, hostile = folders
    path = hostile["mlmodelc-weight-outside"]
    assert (path.parent / "outside.bin").is_file()
    opened = []
    real_open = open
    monkeypatch.setattr("builtins.open", lambda f, *a, **k: opened.append(str(f))
                        or real_open(f, *a, **k))
    with pytest.raises(EncoderInvalid):
        check_given_encoder(path)
    assert not any(o.endswith("outside.bin") for o in opened)


def test_the_folder_itself_as_a_link_a_fifo_and_too_many_files(folders, tmp_path, monkeypatch):
    clean, _ = folders
    link = tmp_path / "ggml-tiny.en-encoder.mlmodelc"
    link.symlink_to(clean["mlmodelc"])
    with pytest.raises(EncoderInvalid, match="a symbolic link"):
        encoder_tree.check_tree(link)
    odd = tmp_path / "odd.mlmodelc"
    (odd / "weights").mkdir(parents=True)
    os.mkfifo(odd / "weights" / "pipe")
    with pytest.raises(EncoderInvalid, match=r"weights/pipe is not a regular file"):
        encoder_tree.check_tree(odd)
    many = tmp_path / "many.mlmodelc"
    many.mkdir()
    for i in range(4):
        (many / f"f{i}").write_bytes(b"x")
    monkeypatch.setattr(encoder_tree, "MAX_ENTRIES", 3)
    with pytest.raises(EncoderInvalid, match="more than 3 files"):
        encoder_tree.check_tree(many)


def test_the_folder_limits_are_the_zips():
    from verifylib.models import encoder_zip
    assert encoder_tree.MAX_ENTRIES == encoder_zip.MAX_ENTRIES
    assert encoder_tree.MAX_UNPACKED_BYTES == encoder_zip.MAX_UNPACKED_BYTES


def test_a_reference_must_name_a_blob_inside_its_file(folders, tmp_path):
    clean, _ = folders
    root = clean["mlmodelc"]
    size = (root / "weights" / "weight.bin").stat().st_size
    name = "@model_path/weights/weight.bin"
    with pytest.raises(EncoderInvalid, match="past its end"):
        encoder_tree.check_blobs(root, "", [(name, size)], "model.mil")
    with pytest.raises(EncoderInvalid, match="no blob of this file"):
        encoder_tree.check_blobs(root, "", [(name, 1)], "model.mil")
    with pytest.raises(EncoderInvalid, match="not one under @model_path/"):
        encoder_tree.check_blobs(root, "", [("/etc/passwd", 0)], "model.mil")
    with pytest.raises(EncoderInvalid, match="which does not exist"):
        encoder_tree.check_blobs(root, "", [("@model_path/weights/w2.bin", 0)], "model.mil")


def test_blob_refs_reads_each_blobfile_even_in_a_program_the_grammar_refuses():
    text = ('garbage ( tensor<fp32, [2]> w = const()[val = tensor<fp32, [2]>(BLOBFILE('
            'path = string("@model_path/weights/weight.bin"), offset = uint64(64)))] ]]')
    assert blob_refs(text) == [BlobRef("@model_path/weights/weight.bin", 64)]
    with pytest.raises(MilTextError):
        blob_refs("x = BLOBFILE(path = string(\"a\"))")
    with pytest.raises(MilTextError, match="unexpected character"):
        blob_refs("\x00")
