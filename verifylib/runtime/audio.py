"""WAV fixtures read exactly as whisper-cli reads them.

Why this is hand-written: the decoders in reach (``soundfile``, ``librosa``, torchaudio)
either need native libraries or resample and convert silently. The suite must hand the
Hugging Face reference the same samples whisper-cli decodes from the same file. whisper-cli
(v1.8.5, ``examples/common-whisper.cpp``) asks miniaudio for float32 mono at 16 kHz, which
for 16-bit mono 16 kHz PCM is exactly ``int16 / 32768``; for anything else miniaudio would
resample or downmix by rules of its own. So the standard library's ``wave`` module reads
the container and every other layout (stereo, 8/24/32-bit, float, compressed, another
rate) is refused rather than converted: a difference between the two sides can never
come from decoding.
"""

from __future__ import annotations

import os
import wave
from pathlib import Path

import numpy as np

from verifylib.canonical import sha256_file
from verifylib.errors import ParametersInvalid

WHISPER_SAMPLE_RATE = 16000
"""The only sample rate Whisper models accept."""


class AudioError(ParametersInvalid):
    """A fixture is not a WAV file this suite accepts."""


def read_wav(path: str | os.PathLike) -> tuple[np.ndarray, int]:
    """Read a 16-bit PCM mono WAV file as float32 samples.

    Parameters
    ----------
    path : path-like
        The WAV file.

    Returns
    -------
    samples : numpy.ndarray
        1-D float32 array in [-1, 1): each sample is ``int16 / 32768``.
    sample_rate : int
        Frames per second as stored; the caller decides whether it is acceptable (see
        :func:`read_wav_16k`).

    Raises
    ------
    AudioError
        If the file is not a readable PCM WAV, not 16-bit or not mono.
    """
    path = Path(path)
    try:
        with wave.open(str(path), "rb") as wf:
            channels = wf.getnchannels()
            width = wf.getsampwidth()
            rate = wf.getframerate()
            frames = wf.readframes(wf.getnframes())
    except (wave.Error, EOFError) as exc:
        raise AudioError(f"{path}: not a PCM WAV file ({exc})") from exc
    if width != 2:
        raise AudioError(f"{path}: {8 * width}-bit samples; only 16-bit PCM is accepted")
    if channels != 1:
        raise AudioError(f"{path}: {channels} channels; only mono is accepted (whisper-cli's "
                         "downmix is miniaudio's, not reproduced here)")
    pcm = np.frombuffer(frames, dtype="<i2")
    return pcm.astype(np.float32) / np.float32(32768.0), rate


def read_wav_16k(path: str | os.PathLike) -> np.ndarray:
    """Read a 16 kHz, 16-bit PCM mono WAV file as float32 samples.

    Parameters
    ----------
    path : path-like
        The WAV file.

    Returns
    -------
    numpy.ndarray
        Samples as returned by :func:`read_wav`.

    Raises
    ------
    AudioError
        If the file is not 16-bit mono PCM or not sampled at 16 kHz (whisper-cli would
        resample other rates with miniaudio; resampling differently here would feed the two
        sides different audio).
    """
    samples, rate = read_wav(path)
    if rate != WHISPER_SAMPLE_RATE:
        raise AudioError(f"{path}: sampled at {rate} Hz; Whisper needs {WHISPER_SAMPLE_RATE} Hz")
    return samples


def audio_sha256(path: str | os.PathLike) -> str:
    """Return the SHA-256 of an audio file's bytes (the fixture's identity in evidence).

    Parameters
    ----------
    path : path-like
        The file.

    Returns
    -------
    str
        64 lower-case hex digits.
    """
    return sha256_file(path)
