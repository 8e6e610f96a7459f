"""Synthesize the spoken fixtures from their reference texts with espeak-ng.

The texts live in ``parameters/tiny-en.yaml`` (fixtures whose ``path`` points into
``parameters/fixtures/``); this script speaks each one with espeak-ng (``-v en-us -s 150``),
resamples 22050 -> 16000 Hz, writes 16-bit mono WAV files and ``SHA256SUMS``. The results
are committed, so tests and audits never need a synthesizer. Needs Debian's ``espeak-ng``.

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


def speak(text: str) -> tuple[np.ndarray, int]:
    """espeak-ng's rendering of ``text`` as float samples and their rate."""
    res = run(["espeak-ng", "-v", "en-us", "-s", "150", "--stdout", text], check=True,
              what="espeak-ng", timeout=60)
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


def main() -> None:
    params = yaml.safe_load((ROOT / "parameters" / "tiny-en.yaml").read_text())
    sums, total = [], 0.0
    for fx in params["fixtures"]:
        path = fx.get("path")
        if not path or not path.startswith("fixtures/"):
            continue
        text = fx.get("text") or (OUT.parent / fx["text_file"]).read_text(encoding="utf-8").strip()
        x, rate = speak(text)
        y = resample(x, rate)
        data = wav_bytes(y)
        atomic_write_bytes(OUT.parent / path, data)
        seconds = len(y) / RATE
        total += seconds
        sums.append(f"{sha256_bytes(data)}  {Path(path).name}")
        print(f"{fx['id']:<14} {seconds:6.2f} s  {path}")
    atomic_write_bytes(OUT / "SHA256SUMS", ("\n".join(sums) + "\n").encode())
    print(f"total {total:.1f} s in {len(sums)} clips")


if __name__ == "__main__":
    main()
