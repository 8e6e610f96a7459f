"""Fixture intake: any recording, checked when the parameters are, decoded once to 16 kHz.

A fixture may be WAV, FLAC, OGG/Vorbis or MP3, at any sample rate, mono or multichannel.
Both legs of the audit must hear the same samples, and whisper-cli's own decoder
(miniaudio) and the Hugging Face reference would otherwise each convert it by rules of
their own. So a fixture is decoded and resampled once, here, to 16 kHz mono 16-bit PCM WAV
(the one layout both read identically: :func:`verifylib.runtime.audio.read_wav_16k`), and
that file is what whisper-cli and the reference read. Its digest is recorded beside the
original's.

Decoding is libsndfile's (``soundfile``), resampling libsoxr's (``soxr``, very high
quality); channels are averaged. A 16 kHz mono 16-bit WAV passes through with the same
samples. What is written here by hand is only the policy: which inputs are refused, and
the float-to-16-bit step (round to nearest, clip), which no package states as a rule.

:func:`probe` is what parameter validation runs: it reads the header first, so a
30-minute file is refused without being decoded, then decodes what is short enough to
refuse an empty or silent one. Every refusal is an :class:`AudioError` (exit 2) with one
line naming the file.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from verifylib.canonical import sha256_file
from verifylib.runtime.audio import WHISPER_SAMPLE_RATE, AudioError

MAX_SECONDS = 30.0
"""The longest fixture the audit supports: one Whisper window. Longer clips are refused up
front, since the reference (one ``generate`` call) and whisper-cli would window them
differently (docs/gates.md, "Audio intake")."""

SILENCE_PEAK = 10 ** (-60 / 20)
"""A fixture whose peak stays below -60 dBFS is refused as silent: neither leg has speech
to transcribe, and an empty transcript would be judged against a reference text."""

FORMATS = ("WAV", "WAVEX", "FLAC", "OGG", "MP3")
"""Containers accepted (libsndfile's names)."""

INTAKE_VERSION = "audio-intake-v1"
"""Names the decoding and resampling rules; part of the evidence."""

@dataclass(frozen=True)
class AudioProbe:
    """What a fixture holds, read before any work.

    Attributes
    ----------
    path : str
        The file as given.
    format : str
        libsndfile's container name (``WAV``, ``FLAC``, ``OGG``, ``MP3``).
    subtype : str
        Its sample encoding (``PCM_16``, ``VORBIS``, ``MPEG_LAYER_III`` …).
    sample_rate : int
        Frames per second as stored.
    channels : int
    frames : int
        Frames per channel.
    seconds : float
        ``frames / sample_rate``.
    peak_dbfs : float or None
        The loudest sample, in dB relative to full scale (None when not decoded).
    """

    path: str
    format: str
    subtype: str
    sample_rate: int
    channels: int
    frames: int
    seconds: float
    peak_dbfs: float | None = None

    def to_json(self) -> dict:
        """Return the probe as an evidence mapping (``path`` left out: it is the host's)."""
        doc = asdict(self)
        doc.pop("path")
        return doc


@dataclass(frozen=True)
class Intake:
    """A fixture decoded once: the original's identity and the 16 kHz file both legs read.

    Attributes
    ----------
    source_sha256 : str
        SHA-256 of the original file.
    pcm_path : pathlib.Path
        The 16 kHz mono 16-bit PCM WAV.
    pcm_sha256 : str
        Its SHA-256.
    probe : AudioProbe
        What the original holds.
    resampled : bool
        Whether the rate was converted (libsoxr, VHQ).
    downmixed : bool
        Whether channels were averaged.
    """

    source_sha256: str
    pcm_path: Path
    pcm_sha256: str
    probe: AudioProbe
    resampled: bool
    downmixed: bool

    def to_json(self) -> dict:
        """Return the intake as recorded in the evidence."""
        return {"rules": INTAKE_VERSION, "source_sha256": self.source_sha256,
                "pcm16k_sha256": self.pcm_sha256, "source": self.probe.to_json(),
                "resampled": self.resampled, "downmixed": self.downmixed}


@contextlib.contextmanager
def _native_stderr_quiet():
    """Silence what libsndfile's MP3 decoder (mpg123) prints straight to file descriptor 2.

    On a file that is not MP3 it writes ``Note: Illegal Audio-MPEG-Header …`` lines there,
    outside Python, which would break the one-line refusal. The descriptor is restored
    on exit; Python-level output is untouched.
    """
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _why(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    # libsndfile names an unrecognised format "File does not exist or is not a regular file
    # (possibly a pipe?)", which would send the user looking for a missing file.
    if "does not exist or is not a regular file" in text:
        return "format not recognised"
    return text.split(": ", 1)[-1][:160] if text.startswith("Error opening") else text[:160]


def _header(path: Path):
    import soundfile

    if not path.is_file():
        raise AudioError(f"{path}: not a regular file")
    try:
        with _native_stderr_quiet():
            return soundfile.info(str(path))
    except (RuntimeError, soundfile.LibsndfileError, OSError) as exc:
        raise AudioError(f"{path}: not an audio file this suite reads "
                         f"({', '.join(FORMATS)}): {_why(exc)}") from None


def probe(path: str | os.PathLike, *, max_seconds: float = MAX_SECONDS) -> AudioProbe:
    """Check a fixture before any work: readable, audio, not empty, not too long, not silent.

    Parameters
    ----------
    path : path-like
        The recording.
    max_seconds : float
        The longest clip accepted (:data:`MAX_SECONDS`).

    Returns
    -------
    AudioProbe
        With ``peak_dbfs`` measured.

    Raises
    ------
    AudioError
        One line naming the file and what is wrong with it.
    """
    return _checked(Path(path), max_seconds)[0]


def _checked(path: Path, max_seconds: float = MAX_SECONDS) -> tuple[AudioProbe, np.ndarray]:
    """:func:`probe`, also returning the decoded ``[frames, channels]`` float32 samples."""
    info = _header(path)
    fmt = str(info.format)
    if fmt not in FORMATS:
        raise AudioError(f"{path}: a {fmt} file; fixtures are {', '.join(FORMATS)}")
    if info.samplerate <= 0 or info.channels <= 0:
        raise AudioError(f"{path}: declares {info.samplerate} Hz and {info.channels} channels")
    if info.frames <= 0:
        raise AudioError(f"{path}: holds no audio (0 samples)")
    seconds = info.frames / info.samplerate
    if seconds > max_seconds:
        raise AudioError(f"{path}: {seconds:.1f} s long; the audit supports clips up to "
                         f"{max_seconds:g} s (one Whisper window): cut it into shorter clips")
    samples = _decode(path)
    if samples.size == 0:
        raise AudioError(f"{path}: holds no audio (0 samples decoded)")
    peak = float(np.max(np.abs(samples)))
    if not np.isfinite(peak):
        raise AudioError(f"{path}: decodes to non-finite samples")
    if peak < SILENCE_PEAK:
        raise AudioError(f"{path}: silent (peak {_dbfs(peak)} dBFS, below -60 dBFS)")
    return AudioProbe(str(path), fmt, str(info.subtype), int(info.samplerate),
                      int(info.channels), int(info.frames), round(seconds, 4),
                      round(20 * float(np.log10(peak)), 2)), samples


def _dbfs(peak: float) -> str:
    return "-inf" if peak <= 0 else f"{20 * np.log10(peak):.1f}"


def _decode(path: Path) -> np.ndarray:
    """Every channel as float32 ``[frames, channels]``."""
    import soundfile

    try:
        with _native_stderr_quiet():
            data, _ = soundfile.read(str(path), dtype="float32", always_2d=True)
    except (RuntimeError, soundfile.LibsndfileError, OSError) as exc:
        raise AudioError(f"{path}: cannot be decoded: {_why(exc)}") from None
    return data


def to_pcm16k(path: str | os.PathLike) -> tuple[np.ndarray, AudioProbe]:
    """Decode a fixture to 16 kHz mono int16 samples.

    Parameters
    ----------
    path : path-like
        The recording (checked with :func:`probe` first).

    Returns
    -------
    samples : numpy.ndarray
        1-D int16 at 16 kHz.
    probe : AudioProbe
        What the original holds.

    Raises
    ------
    AudioError
        As :func:`probe`.
    """
    import soxr

    info, data = _checked(Path(path))
    mono = data.mean(axis=1, dtype=np.float64) if data.shape[1] > 1 else \
        data[:, 0].astype(np.float64)
    if info.sample_rate != WHISPER_SAMPLE_RATE:
        mono = soxr.resample(mono, info.sample_rate, WHISPER_SAMPLE_RATE, quality="VHQ")
    # A 16-bit source read as float32 is exactly int16 / 32768, so this step gives back its
    # samples unchanged.
    pcm = np.clip(np.rint(np.asarray(mono) * 32768.0), -32768, 32767).astype("<i2")
    return pcm, info


def write_pcm16k(path: str | os.PathLike, dest: str | os.PathLike) -> Intake:
    """Decode a fixture once and write the 16 kHz mono 16-bit WAV both legs read.

    Parameters
    ----------
    path : path-like
        The recording.
    dest : path-like
        The WAV to write (staged beside it and renamed into place).

    Returns
    -------
    Intake
    """
    import soundfile

    pcm, info = to_pcm16k(path)
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    stage = dest.with_name(f".{dest.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        soundfile.write(str(stage), pcm, WHISPER_SAMPLE_RATE, subtype="PCM_16", format="WAV")
        os.replace(stage, dest)
    finally:
        stage.unlink(missing_ok=True)
    return Intake(sha256_file(path), dest, sha256_file(dest), info,
                  resampled=info.sample_rate != WHISPER_SAMPLE_RATE,
                  downmixed=info.channels > 1)


def intake(path: str | os.PathLike, folder: str | os.PathLike, name: str = "audio", *,
           log: Callable[[str], None] = print) -> Intake:
    """Return the fixture's 16 kHz file in ``folder``, under the original's digest.

    Re-derived at every call and renamed into place, so a second stage (or a replay) reads
    exactly the bytes these rules give, the same as the first one read. A file that was
    already there with other bytes (a damaged cache entry) is replaced like any other, and
    one line says so.

    Parameters
    ----------
    path : path-like
        The recording.
    folder : path-like
        Where converted fixtures are kept (``<cache>/audio``).
    name : str
        The file's stem: the fixture id, so whisper-cli's ``-f`` (in the ledger and the
        report) still names the clip (``<folder>/<sha256>/<name>-16k.wav``).
    log : callable
        Receives the line that says a damaged conversion was replaced (nothing else).

    Returns
    -------
    Intake
    """
    digest = sha256_file(path)
    if not name or "/" in name or name.startswith("."):
        raise AudioError(f"{name!r} is not a file stem")
    dest = Path(folder) / digest / f"{name}-16k.wav"
    # What an earlier process left there, to tell the user when it was not what these
    # rules give: a damaged cache is repaired, not silently.
    try:
        before = sha256_file(dest) if dest.is_file() else None
    except OSError:
        before = None  # unreadable: replaced below all the same
    # Decoded again every time (a 30 s clip takes milliseconds) and renamed into place: the
    # bytes are always what these rules give, whatever an earlier process left there.
    got = write_pcm16k(path, dest)
    if before is not None and before != got.pcm_sha256:
        log(f"cached audio conversion {dest} was damaged (sha256 {before}, not the "
            f"{got.pcm_sha256} these rules give): replaced")
    return Intake(digest, got.pcm_path, got.pcm_sha256, got.probe, got.resampled,
                  got.downmixed)
