"""The whisper-cli command lines the suite launches.

Forbidden flags, the decoding pin's arguments, language detection, the lifecycle trigger
and the Core ML run's argv.
"""

from __future__ import annotations

import os
import re
from types import MappingProxyType

from verifylib.errors import ContractBroken

# --- whisper-cli command line -----------------------------------------------------------

FORBIDDEN_FLAGS = ("-np", "--no-prints", "-ac", "--audio-ctx")
"""Flags a gate run must never pass: ``-np`` silences every log line a gate asserts;
``-ac`` changes the mel width away from the fixed Core ML input (docs/runtime-contract.md
§6.1)."""

PROCESSOR_FLAGS = ("-p", "--processors")
"""``-p N`` creates N whisper states (N Core ML loads); gates require exactly 1."""


def check_cli_argv(argv) -> None:
    """Refuse a whisper-cli argv that breaks the contract, before anything runs.

    Parameters
    ----------
    argv : sequence of str
        The full argument vector (binary first).

    Raises
    ------
    ContractBroken
        On a forbidden flag (also in ``--flag=value`` form) or a processor count other
        than 1.
    """
    args = [str(a) for a in argv]
    for i, a in enumerate(args[1:], 1):
        flag = a.split("=", 1)[0]
        if flag in FORBIDDEN_FLAGS:
            raise ContractBroken(f"whisper-cli flag {flag} is forbidden in gate runs")
        if flag in PROCESSOR_FLAGS:
            value = a.split("=", 1)[1] if "=" in a else (args[i + 1] if i + 1 < len(args) else "")
            if value.strip() != "1":
                raise ContractBroken(f"whisper-cli {flag} {value!r}: gate runs use exactly one "
                                     "processor")


def decoding_args(language: str, *, beam_size: int, best_of: int, timestamps: bool,
                  temperature: float, temperature_increment: float) -> list[str]:
    """Return whisper-cli arguments for a decoding pin (a WER policy's ``decoding``).

    Parameters
    ----------
    language : str
        The decoding language, passed as ``-l``.
    beam_size, best_of : int
        ``-bs`` and ``-bo``.
    timestamps : bool
        False adds ``-nt``.
    temperature, temperature_increment : float
        ``--temperature`` and ``--temperature-inc`` (0 and 0: no sampling, no fallback).

    Returns
    -------
    list of str
        The arguments, one processor included, to append after the model and audio
        arguments; a run carries its pin when its argv ends with them.
    """
    return ["-bs", str(beam_size), "-bo", str(best_of), "-l", language,
            *([] if timestamps else ["-nt"]), "--temperature", f"{temperature:g}",
            "--temperature-inc", f"{temperature_increment:g}", "-p", "1"]


GREEDY_PIN = MappingProxyType({"beam_size": 1, "best_of": 1, "timestamps": False,
                               "temperature": 0.0, "temperature_increment": 0.0})
"""The greedy pin every gate run decodes under: beam 1, best-of 1, no timestamps,
temperature 0 without fallback (``generate(num_beams=1, do_sample=False)`` on the
reference's side). wer-v3 writes it as data; the canaries use it too."""


def greedy_decoding_args(language: str) -> list[str]:
    """Return whisper-cli arguments for the greedy pin (:data:`GREEDY_PIN`).

    Parameters
    ----------
    language : str
        The decoding language, passed as ``-l``.

    Returns
    -------
    list of str
        The arguments, to append after the model and audio arguments.
    """
    return decoding_args(language, **GREEDY_PIN)


DETECT_LANGUAGE_FLAG = "-dl"
"""whisper-cli's ``--detect-language``: decode one step from the start-of-transcript token,
log the language, and stop without transcribing (the language is forced to ``auto``)."""

DETECTED_LANGUAGE_MARKER = "auto-detected language: "
"""Logged by ``whisper_full_with_state`` when it chose the language itself:
``whisper_full_with_state: auto-detected language: de (p = 0.451026)``; ``p`` is the
softmax over the language tokens of the model's first decoding step."""

_DETECTED_RE = re.compile(re.escape(DETECTED_LANGUAGE_MARKER)
                          + r"([a-z]{2,3}|haw) \(p = ([0-9.eE+-]+)\)\s*$")


def detect_language_args() -> list[str]:
    """Return whisper-cli arguments that only detect a clip's language.

    Returns
    -------
    list of str
        :data:`DETECT_LANGUAGE_FLAG` and one processor; to append after the model and
        audio arguments. An English-only model has no language tokens, so the stage
        detects only with a multilingual one.
    """
    return [DETECT_LANGUAGE_FLAG, "-p", "1"]


def parse_detected_language(stderr: str) -> tuple[str, float] | None:
    """Read the language a launch detected from its stderr.

    Parameters
    ----------
    stderr : str
        The launch's stderr text.

    Returns
    -------
    (str, float) or None
        The language code and its probability, from the last :data:`DETECTED_LANGUAGE_MARKER`
        line; None when no line names one.
    """
    found = None
    for line in stderr.splitlines():
        m = _DETECTED_RE.search(line)
        if m:
            found = (m.group(1), float(m.group(2)))
    return found


# --- the lifecycle trigger (docs/runtime-contract.md §6.2) --------------------------------

NO_FLASH_ATTN_FLAG = "-nfa"
"""Turns flash attention off, so DTW (and its alignment-head check) stays enabled."""

DTW_FLAG = "-dtw"
"""Selects a DTW alignment-head preset."""

LIFECYCLE_DTW_PRESET = "large.v3"
"""A preset whose alignment heads sit on text layers up to 26: on any model with fewer
text layers (tiny, base, small, the tree's test model) ``aheads_masks_init`` fails."""


def lifecycle_trigger_args(preset: str = LIFECYCLE_DTW_PRESET) -> list[str]:
    """Return the arguments that make ``whisper_init_state`` fail before ``whisper_batch_init``.

    The same early-return path as a Core ML load failure, reachable without Core ML.

    Parameters
    ----------
    preset : str
        The DTW alignment-head preset to select (one naming text layers the model lacks).

    Returns
    -------
    list of str
        ``-nfa -dtw <preset>``.
    """
    return [NO_FLASH_ATTN_FLAG, DTW_FLAG, preset]


def lifecycle_argv(binary: "str | os.PathLike", model: "str | os.PathLike",
                   audio: "str | os.PathLike", preset: str = LIFECYCLE_DTW_PRESET) -> list[str]:
    """Build the lifecycle canary's command line: the tree's model and audio plus the trigger.

    Parameters
    ----------
    binary, model, audio : path-like
        The whisper-cli under test, the tree's test model and its sample audio.
    preset : str
        The DTW preset of the trigger.

    Returns
    -------
    list of str
        The argv, single-threaded so every run takes the same path.
    """
    return [str(binary), "-m", str(model), "-f", str(audio), "-t", "1",
            *lifecycle_trigger_args(preset)]


def coreml_argv(binary: "str | os.PathLike", model_arg: str, audio: "str | os.PathLike",
                language: str) -> list[str]:
    """Build a Core ML gate's command line: the exact ``-m`` string and pinned greedy decoding.

    Parameters
    ----------
    binary : path-like
        The Core ML whisper-cli.
    model_arg : str
        The ``-m`` string, kept verbatim: the ``.mlmodelc`` path is derived from it.
    audio : path-like
        The clip to transcribe.
    language : str
        The decoding language.

    Returns
    -------
    list of str
        The argv, with four threads and :func:`greedy_decoding_args` for ``language``.
    """
    return [str(binary), "-m", model_arg, "-f", str(audio), "-t", "4",
            *greedy_decoding_args(language)]


def has_lifecycle_trigger(argv) -> bool:
    """Tell whether ``argv`` turns flash attention off and selects a DTW preset.

    Parameters
    ----------
    argv : list
        The run's argument vector; anything but a list has no trigger.

    Returns
    -------
    bool
        True iff ``-nfa`` and ``-dtw`` are present and ``-dtw`` is followed by a
        non-empty value that does not start with ``-``.
    """
    args = [str(a) for a in argv] if isinstance(argv, list) else []
    if NO_FLASH_ATTN_FLAG not in args or DTW_FLAG not in args:
        return False
    i = args.index(DTW_FLAG)
    return i + 1 < len(args) and bool(args[i + 1]) and not args[i + 1].startswith("-")
