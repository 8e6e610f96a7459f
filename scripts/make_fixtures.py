"""Synthesize the spoken fixtures from their reference texts with espeak-ng.

The texts live in the parameter files: ``parameters/tiny-en.yaml`` (English clips in
``parameters/fixtures/``) and ``parameters/base-multilingual.yaml`` (clips in
``parameters/fixtures/multilingual/``, each fixture naming its ``language``). Each text is
spoken with espeak-ng (the fixture's language picks the voice: :data:`VOICES`, 150 words a
minute). English and most clips are resampled 22050 -> 16000 Hz and written as 16-bit mono
WAV; a path ending in ``.flac`` is written as 44.1 kHz stereo FLAC and one ending in
``.mp3`` as 22.05 kHz mono MP3, so the audit's intake (soundfile, soxr) is exercised on
what recordings really come as. Each folder gets a ``SHA256SUMS``. The results are
committed, so tests and audits never need a synthesizer. Needs Debian's ``espeak-ng``.

Usage: ``.venv/bin/python scripts/make_fixtures.py``
"""

from __future__ import annotations

import io
import sys
import wave
from pathlib import Path

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from verifylib.canonical import atomic_write_bytes, sha256_bytes  # noqa: E402
from verifylib.runtime.runner import run  # noqa: E402

OUT = ROOT / "parameters" / "fixtures"
RATE = 16000


VOICES = {"en": "en-us", "de": "de", "fr": "fr-fr", "es": "es", "it": "it", "pt": "pt-br",
          "zh": "cmn"}
"""espeak-ng voice of each fixture language."""

SPOKEN = {"zh_friends": ("cmn-latn-pinyin", 110,
                         "wo3 men2 ming2 tian1 zao3 shang4 qu4 bei3 jing1 kan4 peng2 you3")}
"""Fixtures spoken from another text than their reference (voice, words a minute, text):
espeak-ng's Mandarin voice reads Chinese characters as tone numbers, its pinyin voice reads
the same sentence intelligibly (measured: the base model then gets 7 of 12 characters)."""


def speak(text: str, language: str = "en", voice: str | None = None,
          speed: int = 150) -> tuple[np.ndarray, int]:
    """espeak-ng's rendering of ``text`` as float samples and their rate."""
    res = run(["espeak-ng", "-v", voice or VOICES[language], "-s", str(speed), "--stdout", text],
              check=True, what="espeak-ng", timeout=60)
    with wave.open(io.BytesIO(res.stdout)) as w:
        assert w.getnchannels() == 1 and w.getsampwidth() == 2
        rate = w.getframerate()
        # espeak-ng streams with an unknown length header; read what is there.
        data = res.stdout[44:]
    x = np.frombuffer(data[: len(data) // 2 * 2], dtype="<i2").astype(np.float64) / 32768.0
    return x, rate


def resample(x: np.ndarray, rate: int, target: int = RATE) -> np.ndarray:
    """Band-limited resampling by FFT truncation (exact for this one-off, offline use)."""
    pad = rate // 10  # silence on both sides keeps the circular FFT from wrapping speech
    x = np.concatenate([np.zeros(pad), x, np.zeros(pad)])
    n_out = int(round(len(x) * target / rate))
    spec = np.fft.rfft(x)
    keep = n_out // 2 + 1
    y = np.fft.irfft(spec[:keep], n_out) * (n_out / len(x))
    return y


def wav_bytes(y: np.ndarray, rate: int = RATE) -> bytes:
    peak = np.max(np.abs(y)) or 1.0
    pcm = np.clip(np.round(y / peak * 0.9 * 32767), -32768, 32767).astype("<i2")
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(pcm.tobytes())
    return buf.getvalue()


def encoded_bytes(y: np.ndarray, rate: int, suffix: str) -> bytes:
    """``y`` (at ``rate``) in the container its file name asks for."""
    import soundfile
    import soxr

    if suffix == ".wav":
        return wav_bytes(resample(y, rate))
    peak = np.max(np.abs(y)) or 1.0
    y = y / peak * 0.9
    buf = io.BytesIO()
    if suffix == ".flac":  # 44.1 kHz stereo, as a recorder would save it
        up = soxr.resample(y, rate, 44100, quality="VHQ")
        soundfile.write(buf, np.stack([up, 0.8 * up], axis=1), 44100, format="FLAC",
                        subtype="PCM_16")
    elif suffix == ".mp3":
        soundfile.write(buf, y, rate, format="MP3")
    else:
        raise SystemExit(f"no encoder for {suffix}")
    return buf.getvalue()


def make(params_file: str, folder: Path) -> None:
    """Speak every fixture of ``params_file`` stored under ``folder``."""
    params = yaml.safe_load((ROOT / "parameters" / params_file).read_text())
    base = ROOT / "parameters"
    sums, total = [], 0.0
    for fx in params["fixtures"]:
        path = fx.get("path")
        if not path or (base / path).parent != folder:
            continue
        text = fx.get("text") or (base / fx["text_file"]).read_text(encoding="utf-8").strip()
        language = fx.get("language") or params["model"].get("language", "en")
        voice, speed, spoken = SPOKEN.get(fx["id"], (None, 150, text))
        x, rate = speak(spoken, language, voice, speed)
        data = encoded_bytes(x, rate, Path(path).suffix)
        atomic_write_bytes(base / path, data)
        seconds = len(x) / rate
        total += seconds
        sums.append(f"{sha256_bytes(data)}  {Path(path).name}")
        print(f"{fx['id']:<14} {language} {seconds:6.2f} s  {path}")
    atomic_write_bytes(folder / "SHA256SUMS", ("\n".join(sums) + "\n").encode())
    print(f"total {total:.1f} s in {len(sums)} clips")


def main() -> None:
    make("tiny-en.yaml", OUT)
    make("base-multilingual.yaml", OUT / "multilingual")


if __name__ == "__main__":
    main()
