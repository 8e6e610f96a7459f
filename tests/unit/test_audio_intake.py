"""Fixture intake: any recording decoded once to 16 kHz mono 16-bit, refusals up front.

Recordings are written here with soundfile (WAV, FLAC, OGG/Vorbis, MP3; any rate; stereo):
a 16 kHz mono 16-bit WAV must pass through with its samples unchanged, anything else must
become 16 kHz mono with the tone where it was, and every unusable file must be refused by
parameter validation with one line naming the key and the file.
"""

from __future__ import annotations

import numpy as np
import pytest
import yaml

from tests.helpers import ROOT
from verifylib.errors import ParametersInvalid
from verifylib.runtime.audio import AudioError, read_wav_16k
from verifylib.runtime.audio_intake import (MAX_SECONDS, intake, probe, to_pcm16k,
                                            write_pcm16k)

pytestmark = pytest.mark.unit


def _tone(rate, seconds=1.0, freq=440.0, channels=1, amp=0.5):
    t = np.arange(int(rate * seconds)) / rate
    x = amp * np.sin(2 * np.pi * freq * t)
    return np.stack([x] * channels, axis=1) if channels > 1 else x


def _write(path, data, rate, **kw):
    import soundfile

    soundfile.write(str(path), data, rate, **kw)
    return path


def _peak_hz(pcm):
    spec = np.abs(np.fft.rfft(pcm.astype(np.float64)))
    return np.argmax(spec) * 16000 / len(pcm)


def test_a_16k_mono_16bit_wav_keeps_its_samples(tmp_path):
    rng = np.random.default_rng(0)
    pcm = rng.integers(-20000, 20000, size=8000).astype("<i2")
    src = _write(tmp_path / "a.wav", pcm, 16000, subtype="PCM_16")
    got = write_pcm16k(src, tmp_path / "out" / "a16.wav")
    np.testing.assert_array_equal(read_wav_16k(got.pcm_path), pcm.astype(np.float32) / 32768)
    assert not got.resampled and not got.downmixed
    doc = got.to_json()
    assert doc["source"]["format"] == "WAV" and doc["source"]["sample_rate"] == 16000
    assert doc["source_sha256"] == got.source_sha256 and doc["pcm16k_sha256"] == got.pcm_sha256
    assert set(doc) == {"rules", "source_sha256", "pcm16k_sha256", "source", "resampled",
                        "downmixed"}


@pytest.mark.parametrize("fmt,kw,rate,channels", [
    ("flac", {"format": "FLAC"}, 44100, 2),
    ("mp3", {"format": "MP3"}, 44100, 1),
    ("ogg", {"format": "OGG", "subtype": "VORBIS"}, 48000, 2),
    ("wav", {"subtype": "PCM_U8"}, 22050, 1),
    ("wav", {"subtype": "FLOAT"}, 8000, 3),
])
def test_other_containers_rates_and_layouts_become_16k_mono(tmp_path, fmt, kw, rate,
                                                            channels):
    src = _write(tmp_path / f"x.{fmt}", _tone(rate, channels=channels), rate, **kw)
    pcm, info = to_pcm16k(src)
    assert info.sample_rate == rate and info.channels == channels
    assert pcm.dtype == np.dtype("<i2")
    assert abs(len(pcm) - 16000) <= 1200  # MP3 adds encoder padding
    assert abs(_peak_hz(pcm) - 440.0) < 3.0
    got = write_pcm16k(src, tmp_path / "x16.wav")
    assert got.resampled is (rate != 16000) and got.downmixed is (channels > 1)
    assert len(read_wav_16k(got.pcm_path)) == len(pcm)


def test_intake_is_content_addressed_and_writes_the_same_bytes_twice(tmp_path):
    src = _write(tmp_path / "s.flac", _tone(44100, channels=2), 44100, format="FLAC")
    a = intake(src, tmp_path / "cache", "clip")
    b = intake(src, tmp_path / "cache", "clip")
    assert a.pcm_path == b.pcm_path and a.pcm_sha256 == b.pcm_sha256
    # Named by the fixture, so whisper-cli's -f still says which clip it reads.
    assert a.pcm_path == tmp_path / "cache" / a.source_sha256 / "clip-16k.wav"
    assert [p.name for p in (tmp_path / "cache" / a.source_sha256).iterdir()] == \
        ["clip-16k.wav"]
    with pytest.raises(AudioError, match="not a file stem"):
        intake(src, tmp_path / "cache", "../x")


def _bytes(data):
    def make(p):
        p.write_bytes(data)
        return p
    return make


@pytest.mark.parametrize("make,needle", [
    (_bytes(b"not audio at all\n"), "not an audio file"),
    (_bytes(b"ID3\x03\x00\x00\x00\x00\x00\x00fake"), "not an audio file"),
    (_bytes(b""), "not an audio file"),
    (lambda p: _write(p, np.zeros(0, np.int16), 16000, format="WAV", subtype="PCM_16"),
     "holds no audio"),
    (lambda p: _write(p, np.zeros(16000, np.int16), 16000, format="WAV", subtype="PCM_16"),
     "silent"),
])
def test_unusable_recordings_are_refused_in_one_line(tmp_path, make, needle):
    path = make(tmp_path / "bad.audio")
    with pytest.raises(AudioError, match=needle) as err:
        probe(path)
    assert str(path) in str(err.value) and "\n" not in str(err.value)


def test_a_long_recording_is_refused_from_its_header(tmp_path):
    half_hour = _write(tmp_path / "long.wav", np.full(1000 * 1800, 100, np.int16), 1000,
                       format="WAV", subtype="PCM_16")
    with pytest.raises(AudioError, match=f"1800.0 s long; the audit supports clips up to "
                                         f"{MAX_SECONDS:g} s"):
        probe(half_hour)


def test_validation_names_the_fixture_key(tmp_path):
    from verifylib.params import load

    bad = tmp_path / "clip.mp3"
    bad.write_text("hello")
    data = yaml.safe_load((ROOT / "parameters" / "tiny-en.yaml").read_text())
    data["fixtures"] = [{"id": "clip", "public": True, "path": str(bad), "text": "hi"}]
    pfile = tmp_path / "p.yaml"
    pfile.write_text(yaml.safe_dump(data))
    with pytest.raises(ParametersInvalid) as err:
        load(pfile)
    msg = str(err.value)
    assert "key fixtures[0].path" in msg and str(bad) in msg and "\n" not in msg
