"""The whisper.cpp runtime contract: the single home of every marker string it relies on.

Log markers, flags and in-tree file names that the gates match against are defined here
and nowhere else, so the rules and the validator cannot drift apart.

Signals are decoded with a fixed table per OS (:data:`SIGNAL_TABLES`, written out from
Linux's and macOS's headers), never with the running Python's ``signal`` module, because
the host that verifies a run need not be the one that made it. The rule: the runner
decodes a child's return code with the table of the OS the child ran on (its own
process's, :func:`host_signal_table`) and records that table's name in the run record
(``signal_table``); the verifier decodes with the table the record names
(:func:`termination`). A record without the key predates it and was made on Linux
(:data:`LEGACY_SIGNAL_TABLE`); a record naming an unknown table is refused. The host
record is not consulted: under the simulated Mac it says Darwin while the children are
Linux processes, and the record's own table is what the child's numbers mean.
"""

import os
import re
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping

from verifylib.errors import ContractBroken, ParametersInvalid

SYSTEM_INFO_PREFIX = "system_info:"
"""Start of whisper-cli's capability line (printed once the model and audio are loaded)."""

COREML_FLAG = "COREML = "
"""Field of the system_info line saying whether Core ML support was compiled in."""

COREML_OFF = COREML_FLAG + "0"
"""Substring of the system_info line of a build without Core ML."""

COREML_ON = COREML_FLAG + "1"
"""Substring of the system_info line of a Core ML build."""

TEST_MODEL_IN_TREE = "models/for-tests-ggml-tiny.en.bin"
"""Small model shipped in the whisper.cpp tree; it loads, so system_info gets printed."""

TEST_AUDIO_IN_TREE = "samples/jfk.wav"
"""Public-domain 16 kHz mono sample shipped in the whisper.cpp tree."""

# --- ggml backends (src/whisper.cpp: whisper_backend_init_gpu, whisper_backend_init) -------
#
# ``whisper_init_state`` starts every state by choosing its ggml backends and logs the
# choice on stderr: the GPU device it takes ("using MTL0 backend"; Metal names its devices
# MTL<n>), or "no GPU found", printed whenever it takes none (``-ng``, or no GPU backend
# compiled in or loaded at run time); then one "using <name> backend" line per ACCEL
# device (BLAS); the CPU backend comes last, without a line. A launch that never reaches
# ``whisper_init_state`` (no model loaded) prints none of these lines. ``whisper-cli``
# also calls ``ggml_backend_load_all()``, which can add a backend at run time from a
# ``libggml-<name>-*`` library beside the binary or in its working folder, or from
# ``$GGML_BACKEND_PATH``: so what a launch used is read from its own log, never inferred
# from the CMake options alone.

BACKEND_PATH_VARIABLE = "GGML_BACKEND_PATH"
"""Environment variable naming a backend library ``ggml_backend_load_all()`` loads at run
time: never handed to a child, so a static ``cpu`` build stays on the CPU."""

BACKEND_CPU = "cpu"
"""The CPU backend alone: the value of ``runtime.ggml_backend`` and of a launch that logs
"no GPU found" and no ``using … backend`` line."""

BACKEND_METAL = "metal"
"""Apple's Metal GPU backend: the parameter value, and a launch whose GPU device is MTL<n>."""

GGML_BACKENDS = (BACKEND_CPU, BACKEND_METAL)
"""The values of ``runtime.ggml_backend``; the first is the default."""

BACKEND_NOT_REPORTED = "none"
"""What :func:`launch_backend` says of a launch that printed no backend line."""

BACKEND_GPU_INIT_PREFIX = "whisper_backend_init_gpu: "
"""``__func__`` prefix of the GPU choice lines."""

BACKEND_ACCEL_INIT_PREFIX = "whisper_backend_init: "
"""``__func__`` prefix of the ACCEL device lines."""

BACKEND_NO_GPU_MARKER = BACKEND_GPU_INIT_PREFIX + "no GPU found"
"""Printed by every state that takes no GPU device."""

METAL_DEVICE_PREFIX = "MTL"
"""Name prefix of Metal devices (``ggml-metal-device.m``: ``MTL<n>``) and of its registry."""

ACCELERATE_FEATURE = "ACCELERATE = 1"
"""Feature of the ``CPU`` section of ``system_info`` when Accelerate is compiled into the
CPU backend (``GGML_ACCELERATE`` on APPLE)."""

_BACKEND_USING_RE = (rf"^({re.escape(BACKEND_GPU_INIT_PREFIX)}|"
                     rf"{re.escape(BACKEND_ACCEL_INIT_PREFIX)})using (.+) backend$")


def launch_backend(text: str) -> str:
    """Name the ggml backends one launch says it chose (the lines above, any number of states).

    Parameters
    ----------
    text : str
        The launch's log (stderr, optionally followed by stdout).

    Returns
    -------
    str
        :data:`BACKEND_CPU` for "no GPU found" and no ``using … backend`` line;
        :data:`BACKEND_METAL` for a Metal GPU device and nothing else; otherwise every
        choice joined by ``+`` in log order (``metal+BLAS``, ``cpu+BLAS``, ``CUDA0``; a
        Metal device beside "no GPU found" in another state is ``metal+cpu``);
        :data:`BACKEND_NOT_REPORTED` when the launch printed no such line.
    """
    gpu: list[str] = []
    accel: list[str] = []
    no_gpu = False
    for raw in text.splitlines():
        line = raw.strip()
        if line == BACKEND_NO_GPU_MARKER:
            no_gpu = True
            continue
        m = re.match(_BACKEND_USING_RE, line)
        if m:
            name = m.group(2)
            if m.group(1) == BACKEND_GPU_INIT_PREFIX:
                gpu.append(BACKEND_METAL if name.startswith(METAL_DEVICE_PREFIX) else name)
            else:
                accel.append(name)
    if not (gpu or accel or no_gpu):
        return BACKEND_NOT_REPORTED
    chosen = gpu + ([BACKEND_CPU] if no_gpu or not gpu else [])
    return "+".join(dict.fromkeys(chosen + accel))


def system_info_registries(line: str) -> tuple[str, ...]:
    """List the sections of a ``system_info:`` line: ``WHISPER`` and one per ggml registry.

    ``whisper_print_system_info`` writes ``<registry> : <feature> = <value> | …`` for every
    registered backend that publishes features: ``CPU``, and ``MTL`` whenever the Metal
    backend is compiled in (used or not); BLAS publishes none.

    Parameters
    ----------
    line : str
        The ``system_info:`` line.

    Returns
    -------
    tuple of str
        The section names in line order, e.g. ``("WHISPER", "CPU")``.
    """
    return tuple(re.findall(r"([A-Za-z][A-Za-z0-9_]*) : ", line))

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


# --- model loading -------------------------------------------------------------------------

MODEL_LOAD_PREFIX = "whisper_model_load: "
"""Prefix of the loader's hyper-parameter lines (``whisper_model_load: n_vocab = 51864``)."""

MODEL_LOAD_HPARAMS = ("n_vocab", "n_audio_ctx", "n_audio_state", "n_audio_head",
                      "n_audio_layer", "n_text_ctx", "n_text_state", "n_text_head",
                      "n_text_layer", "n_mels", "ftype")
"""Hyper-parameters the loader prints, in file order."""

MODEL_LOAD_FAILURE = "whisper_init_with_params_no_state: failed to load model"
"""Logged when the loader refuses a model file (``whisper_model_load`` returned false).
The line comes from ``whisper_init_with_params_no_state``, not from the ``_from_file_``
wrapper, which only logs ``failed to open`` for a missing file."""

INIT_FAILURE_MARKER = "error: failed to initialize whisper context"
"""whisper-cli's final line when no context could be created (it then exits 3)."""


def parse_loaded_hparams(stderr: str) -> dict[str, int]:
    """Read the hyper-parameters whisper.cpp's loader printed.

    Parameters
    ----------
    stderr : str
        whisper-cli's standard error.

    Returns
    -------
    dict
        Name to value for each ``whisper_model_load: <name> = <int>`` line found.
    """
    import re
    out: dict[str, int] = {}
    for name in MODEL_LOAD_HPARAMS:
        m = re.search(rf"^{re.escape(MODEL_LOAD_PREFIX)}{name}\s*=\s*(-?\d+)\s*$", stderr, re.M)
        if m:
            out[name] = int(m.group(1))
    return out


# --- exit codes of whisper-cli (docs/runtime-contract.md §6.2; from examples/cli/cli.cpp) ---

EXIT_OK = 0
"""Success (end of ``main``)."""

EXIT_BAD_ARGUMENTS = 1
"""Argument parse failure, or a missing ``@response`` file."""

EXIT_NO_INPUT = 2
"""No input file specified."""

EXIT_INIT_FAILURE = 3
"""Unknown DTW preset, or ``whisper_init_from_file_with_params`` returned null (the exit
of a clean Core ML load failure and of the lifecycle trigger)."""

EXIT_GRAMMAR = 4
"""Grammar parse failure."""

EXIT_PROCESSING_FAILED = 10
"""``whisper_full_parallel`` failed to process the audio."""

EXIT_CODES = {EXIT_OK: "success", EXIT_BAD_ARGUMENTS: "argument parse failure",
              EXIT_NO_INPUT: "no input file", EXIT_INIT_FAILURE: "context initialization failed",
              EXIT_GRAMMAR: "grammar parse failure",
              EXIT_PROCESSING_FAILED: "failed to process audio"}
"""Every exit status whisper-cli's ``main`` returns, with its meaning."""


# --- signals (docs/runtime-contract.md §6.2) ----------------------------------------------
#
# A return code of -N (or 128+N from a shell) names signal N, and N means a different signal
# on each OS: 10 is SIGBUS on macOS and SIGUSR1 on Linux. The recording side and the verifying
# side may be different hosts (a Mac run verified on Linux, a Ray driver checking a node's
# run), so neither decodes with the running Python's ``signal`` module: each record names
# the fixed table below that its signal was decoded with.


@dataclass(frozen=True)
class SignalTable:
    """The signal numbers of one operating system, as its C headers define them.

    Attributes
    ----------
    system : str
        The OS, spelled as ``platform.system()`` reports it (``"Linux"``, ``"Darwin"``).
    names : mapping of int to str
        Signal number to its name; a number in ``1..highest`` without a name here is
        named ``SIG<N>``.
    highest : int
        The largest signal number (``NSIG - 1``): ``128 + N`` is read as a signal only
        for ``N`` from 1 to this.
    """

    system: str
    names: Mapping[int, str]
    highest: int

    def name(self, number: int) -> str:
        """Name signal ``number`` (``SIG<N>`` when the table has no name for it)."""
        return self.names.get(number, f"SIG{number}")


LINUX_SIGNALS = SignalTable("Linux", MappingProxyType({
    1: "SIGHUP", 2: "SIGINT", 3: "SIGQUIT", 4: "SIGILL", 5: "SIGTRAP", 6: "SIGABRT",
    7: "SIGBUS", 8: "SIGFPE", 9: "SIGKILL", 10: "SIGUSR1", 11: "SIGSEGV", 12: "SIGUSR2",
    13: "SIGPIPE", 14: "SIGALRM", 15: "SIGTERM", 16: "SIGSTKFLT", 17: "SIGCHLD",
    18: "SIGCONT", 19: "SIGSTOP", 20: "SIGTSTP", 21: "SIGTTIN", 22: "SIGTTOU", 23: "SIGURG",
    24: "SIGXCPU", 25: "SIGXFSZ", 26: "SIGVTALRM", 27: "SIGPROF", 28: "SIGWINCH",
    29: "SIGIO", 30: "SIGPWR", 31: "SIGSYS", 34: "SIGRTMIN", 64: "SIGRTMAX"}), 64)
"""Linux on x86-64 and arm64 (the kernel's ``asm-generic``/x86 ``signal.h``; other
architectures such as MIPS number differently and are not supported). 6 is named SIGABRT
(SIGIOT is its alias), 29 SIGIO (SIGPOLL). The real-time range ends at 64; glibc reserves
32 and 33 for its threads, so its SIGRTMIN is 34: the names glibc's Python reports, so a
record written before records named their table decodes as it was recorded."""

DARWIN_SIGNALS = SignalTable("Darwin", MappingProxyType({
    1: "SIGHUP", 2: "SIGINT", 3: "SIGQUIT", 4: "SIGILL", 5: "SIGTRAP", 6: "SIGABRT",
    7: "SIGEMT", 8: "SIGFPE", 9: "SIGKILL", 10: "SIGBUS", 11: "SIGSEGV", 12: "SIGSYS",
    13: "SIGPIPE", 14: "SIGALRM", 15: "SIGTERM", 16: "SIGURG", 17: "SIGSTOP", 18: "SIGTSTP",
    19: "SIGCONT", 20: "SIGCHLD", 21: "SIGTTIN", 22: "SIGTTOU", 23: "SIGIO", 24: "SIGXCPU",
    25: "SIGXFSZ", 26: "SIGVTALRM", 27: "SIGPROF", 28: "SIGWINCH", 29: "SIGINFO",
    30: "SIGUSR1", 31: "SIGUSR2"}), 31)
"""macOS (XNU's ``<sys/signal.h>``, ``NSIG`` 32: no real-time signals). Written out from the
header, not read from a Python running on a Mac."""

SIGNAL_TABLES: Mapping[str, SignalTable] = MappingProxyType(
    {t.system: t for t in (LINUX_SIGNALS, DARWIN_SIGNALS)})
"""Every table, by the ``platform.system()`` name a run record stores as ``signal_table``."""

SIGNAL_TABLE_KEY = "signal_table"
"""Key of a run record naming the table its ``signal`` was decoded with: the OS the child
ran on (the recording process's own, since a child shares its kernel; under the simulated
Mac that is Linux while the run's host record says Darwin)."""

LEGACY_SIGNAL_TABLE = "Linux"
"""The table of a run record without :data:`SIGNAL_TABLE_KEY`. Records gained the key when
verifylib first ran on macOS; every record written before was decoded by verifylib on Linux
with Linux's numbers (the simulated Mac's children are Linux processes too), so the key's
absence means Linux. It is not a default for an unnamed or unknown table: a record that
names one outside :data:`SIGNAL_TABLES` is refused."""


class UnknownSignalTable(ParametersInvalid):
    """An OS verifylib has no signal table for (it supports Linux and macOS)."""


def signal_table(system: str) -> SignalTable:
    """Return the signal table of an OS.

    Parameters
    ----------
    system : str
        The OS as ``platform.system()`` names it.

    Returns
    -------
    SignalTable

    Raises
    ------
    UnknownSignalTable
        If verifylib has no table for ``system``.
    """
    table = SIGNAL_TABLES.get(system) if isinstance(system, str) else None
    if table is None:
        raise UnknownSignalTable(
            f"no signal table for system {system!r}: verifylib decodes the signals of Linux "
            f"and macOS children only (known: {', '.join(sorted(SIGNAL_TABLES))})")
    return table


def host_signal_table() -> str:
    """Name the signal table of the children this process launches: its own OS's.

    Returns
    -------
    str
        ``platform.system()`` of this process (``"Linux"`` also under the simulated Mac,
        whose children are Linux processes).

    Raises
    ------
    UnknownSignalTable
        On an OS verifylib has no table for (before anything is launched).
    """
    import platform
    return signal_table(platform.system()).system


def decode_signal(returncode: int | None, system: str) -> str | None:
    """Name the signal behind a return code, by the signal numbers of the OS it came from.

    Parameters
    ----------
    returncode : int or None
        A raw ``Popen.returncode``: negative N means killed by signal N; 128+N is how
        shells and some launchers report the same death (``134`` = SIGABRT, ``139`` =
        SIGSEGV). whisper-cli itself never exits above 10.
    system : str
        The OS the child ran on (a key of :data:`SIGNAL_TABLES`): ``-10`` is SIGBUS from
        a ``"Darwin"`` child and SIGUSR1 from a ``"Linux"`` one.

    Returns
    -------
    str or None
        E.g. ``"SIGSEGV"``, or None for a normal exit (and for None).

    Raises
    ------
    UnknownSignalTable
        If ``system`` has no table (never a silent fall back to this host's numbers).
    """
    table = signal_table(system)
    if returncode is None or isinstance(returncode, bool):
        return None
    if returncode < 0:
        return table.name(-returncode)
    if 128 < returncode <= 128 + table.highest:
        return table.name(returncode - 128)
    return None


# --- Core ML lines of whisper_init_state (docs/runtime-contract.md §2.1), on stderr -------

INIT_STATE_PREFIX = "whisper_init_state: "
"""``__func__`` prefix of every line ``whisper_init_state`` logs."""

COREML_LOADING_PREFIX = INIT_STATE_PREFIX + "loading Core ML model from '"
"""Core ML code is compiled in and a path was derived (followed by ``<path>'``)."""

COREML_FIRST_RUN_LINE = INIT_STATE_PREFIX + "first run on a device may take a while ..."
"""Printed unconditionally before the load attempt; not a latency measurement."""

COREML_LOAD_FAILURE_PREFIX = INIT_STATE_PREFIX + "failed to load Core ML model from '"
"""The load-failure line up to its path (followed by ``<path>'``)."""

COREML_LOAD_FAILURE_MARKER = INIT_STATE_PREFIX + "failed to load Core ML model"
"""Condition 4 of the positive gate: must be absent. Required by the negative control."""

COREML_LOAD_MARKER = INIT_STATE_PREFIX + "Core ML model loaded"
"""The load-confirmation line: printed iff ``ctx_coreml`` is set, the same predicate that
replaces the GGML encoder (docs/runtime-contract.md §2.2)."""

COREML_ENABLED_MARKER = COREML_ON
"""Condition 2 of the positive gate, matched inside the ``system_info:`` line only."""

AHEADS_FAILURE_MARKER = INIT_STATE_PREFIX + "aheads_masks_init() failed for alignment heads masks"
"""Logged when a DTW preset names a text layer the model lacks; ``whisper_init_state`` then
frees the state before ``whisper_batch_init`` (the lifecycle trigger,
docs/runtime-contract.md §6.2)."""

DTW_DISABLED_BY_FLASH_ATTN = "dtw_token_timestamps is not supported with flash_attn - disabling"
"""Without ``-nfa`` DTW is switched off and the lifecycle trigger never fires."""

ENCODE_TIME_LABEL = "encode time = "
"""Field of ``whisper_print_timings``: ``encode time = <ms> ms / <n> runs``."""

_ENCODE_TIME_RE = (r"whisper_print_timings:\s+encode time =\s*([0-9]+(?:\.[0-9]+)?) ms /"
                   r"\s*(\d+) runs")


def parse_encode_time(stderr: str) -> tuple[float, int] | None:
    """Read whisper.cpp's own ``encode time`` from ``whisper_print_timings``.

    Parameters
    ----------
    stderr : str
        whisper-cli's standard error.

    Returns
    -------
    (float, int) or None
        Milliseconds and number of encoder runs, or None if the line is absent.
    """
    import re
    m = re.search(_ENCODE_TIME_RE, stderr)
    return (float(m.group(1)), int(m.group(2))) if m else None


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


# --- the patched member (docs/runtime-contract.md §6.2) -----------------------------------

BATCH_MEMBER_UNINITIALIZED = "whisper_batch batch;"
"""The ``whisper_state`` member the compatibility patch initializes."""

BATCH_MEMBER_PATCHED = "whisper_batch batch = {};"
"""The member after the one-line patch."""


# --- the .mlmodelc path (docs/runtime-contract.md §4.1) -----------------------------------

COREML_ENCODER_SUFFIX = "-encoder.mlmodelc"


def coreml_encoder_path(model_arg: str) -> str:
    """Derive the ``.mlmodelc`` path whisper.cpp derives from the exact ``-m`` string.

    The same steps as ``whisper_get_coreml_path_encoder`` in ``src/whisper.cpp``, on the
    argument's bytes (a C++ ``std::string``): cut at the last ``.`` of the whole string
    (a dot in a folder name counts), then drop a trailing ``-`` segment that is exactly
    five bytes with ``q`` second and ``_`` fourth (``-q5_0``; lower-case ``q`` only), then
    append ``-encoder.mlmodelc``.

    Parameters
    ----------
    model_arg : str
        The ``-m`` argument exactly as passed (not resolved, not normalized).

    Returns
    -------
    str
        The derived path, spelled relative to the same folder as the argument.

    Raises
    ------
    TypeError
        If ``model_arg`` is not a string.
    """
    import os
    if not isinstance(model_arg, str):
        raise TypeError("model_arg must be the -m argument string")
    raw = os.fsencode(model_arg)
    dot = raw.rfind(b".")
    if dot != -1:
        raw = raw[:dot]
    dash = raw.rfind(b"-")
    if dash != -1:
        tail = raw[dash:]
        if len(tail) == 5 and tail[1:2] == b"q" and tail[3:4] == b"_":
            raw = raw[:dash]
    return os.fsdecode(raw + COREML_ENCODER_SUFFIX.encode())


def model_arg_of(argv) -> str | None:
    """Find the ``-m``/``--model`` argument of a whisper-cli argv.

    Parameters
    ----------
    argv : sequence
        The full argument vector (binary first); items are converted with ``str``.

    Returns
    -------
    str or None
        The value after the first ``-m`` or ``--model`` (or of ``--model=<value>``), or
        None when there is none or the flag is the last argument.
    """
    args = [str(a) for a in argv]
    for i, a in enumerate(args[1:], 1):
        if a in ("-m", "--model"):
            return args[i + 1] if i + 1 < len(args) else None
        if a.startswith("--model="):
            return a.split("=", 1)[1]
    return None


# --- classifiers (docs/runtime-contract.md §2.3, §2.4, §6.2) ------------------------------
#
# Each takes one run's record (argv, returncode, signal, timed_out and the SHA-256 of its
# streams, as written by ``verifylib.runtime.runner.run_record``) and that run's own stderr bytes.
# They are pure: ``verifylib verify`` calls them again on the stored files.

CLEAN_LIFECYCLE = "exit 3 + both markers"
"""Outcome label of a lifecycle run that failed cleanly."""

CLEAN_NEGATIVE = "exit 3 + load-failure + init-failure"
"""Outcome label of a clean negative control."""

CLEAN_POSITIVE = "exit 0 + four conditions"
"""Outcome label of a passing positive run."""


@dataclass(frozen=True)
class Classification:
    """What a classifier concluded about one run.

    Constructed as ``Classification(outcome, problems)``; ``ok`` is derived.

    Attributes
    ----------
    ok : bool
        True iff the run meets the rule.
    outcome : str
        Short label for tables: the clean label, ``"SIGSEGV"``, ``"timeout"``, ``"exit 0"``,
        or ``"exit 3, marker missing"``.
    problems : tuple of str
        Every reason the run fails the rule, in a fixed order (empty when ``ok``).
    """

    # Declared first, and derived, so the repr reads ok, outcome, problems and a caller can
    # never pass an ``ok`` that disagrees with the problems.
    ok: bool = field(init=False)
    outcome: str
    problems: tuple[str, ...]

    def __post_init__(self):
        # Callers pass lists; a tuple keeps the frozen value hashable and unchangeable.
        object.__setattr__(self, "problems", tuple(self.problems))
        object.__setattr__(self, "ok", not self.problems)

    @property
    def detail(self) -> str:
        """The outcome, or the problems joined by ``"; "``."""
        return self.outcome if self.ok else "; ".join(self.problems)


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def recorded_signal_table(record) -> tuple[str | None, str | None]:
    """Name the signal table a run record was decoded with.

    Parameters
    ----------
    record : dict
        A run record; its :data:`SIGNAL_TABLE_KEY` is read.

    Returns
    -------
    (str or None, str or None)
        The table's name and None; :data:`LEGACY_SIGNAL_TABLE` when the record has no
        such key (it predates the key); or None and the problem when it names no known
        table.
    """
    name = record.get(SIGNAL_TABLE_KEY, LEGACY_SIGNAL_TABLE)
    if isinstance(name, str) and name in SIGNAL_TABLES:
        return name, None
    return None, (f"unknown signal table {name!r} (known: "
                  f"{', '.join(sorted(SIGNAL_TABLES))})")


def termination(record) -> tuple[str, list[str]]:
    """Re-derive how a recorded run ended from its return code.

    The return code is decoded with the signal table the record names (the OS the child
    ran on, :func:`recorded_signal_table`), not with this host's: a Mac's ``-10`` is
    SIGBUS wherever it is verified.

    Parameters
    ----------
    record : dict
        A run record (as written by ``verifylib.runtime.runner.run_record``); its
        ``timed_out``, ``returncode``, ``signal`` and ``signal_table`` fields are read.

    Returns
    -------
    (str, list of str)
        ``"timeout"``, a signal name (from a negative code or 128+N), ``"exit N"``, or
        ``"no exit status"`` / ``"no signal table"`` when the record cannot say; and
        problems with the record itself (a recorded signal that disagrees with the return
        code, a missing code, a malformed timeout flag, an unknown signal table).
    """
    problems: list[str] = []
    timed_out = record.get("timed_out")
    rc = record.get("returncode")
    if timed_out is not True and timed_out is not False:
        problems.append(f"malformed timed_out flag {timed_out!r}")
    if timed_out is True:
        if rc is not None:
            problems.append(f"a timed-out run cannot have return code {rc!r}")
        return "timeout", problems
    if not _is_int(rc):
        return "no exit status", problems + [f"no return code recorded ({rc!r})"]
    table, bad_table = recorded_signal_table(record)
    if table is None:
        return "no signal table", problems + [str(bad_table)]
    sig = decode_signal(rc, table)
    if record.get("signal") != sig:
        implied = f"{sig} in the {table} signal table" if sig else "a normal exit"
        problems.append(f"recorded signal {record.get('signal')!r} disagrees with return code "
                        f"{rc} ({implied})")
    return (sig or f"exit {rc}"), problems


def _ending_problem(label: str, rc, want: int) -> str | None:
    if label == f"exit {want}":
        return None
    if label == "timeout":
        return "timed out (killed, no exit status)"
    if label.startswith("SIG"):
        return f"killed by {label} (return code {rc})"
    return f"{label}, expected exactly {want}"


def _integrity(record, stderr: bytes, stdout: bytes | None) -> list[str]:
    import hashlib
    problems = []
    if not isinstance(record, dict):
        return ["run record is not a mapping"]
    if not isinstance(stderr, (bytes, bytearray)):
        return ["stderr stream missing"]
    if hashlib.sha256(stderr).hexdigest() != record.get("stderr_sha256"):
        problems.append("stderr is not this run's stream (SHA-256 differs from the record)")
    if stdout is not None and hashlib.sha256(stdout).hexdigest() != record.get("stdout_sha256"):
        problems.append("stdout is not this run's stream (SHA-256 differs from the record)")
    argv = record.get("argv")
    if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
        problems.append(f"malformed argv {argv!r}")
    else:
        try:
            check_cli_argv(argv)
        except ContractBroken as exc:
            problems.append(f"argv breaks the runtime contract: {exc}")
    return problems


def record_problems(record, stderr: bytes, stdout: bytes | None = None) -> list[str]:
    """List the problems with a run record as evidence, whatever the run's outcome.

    The streams must be the run's own (digests), the argv contract-clean, and the recorded
    signal the one the return code implies. A record with any of these problems cannot
    be classified honestly (a crash relabeled as exit 3 lands here or in the markers).

    Parameters
    ----------
    record : dict
        The run record.
    stderr : bytes
        The run's stored standard error.
    stdout : bytes or None
        The run's stored standard output; None skips its digest check.

    Returns
    -------
    list of str
        Every problem found; empty when the record is sound.
    """
    problems = _integrity(record, stderr, stdout)
    if isinstance(record, dict):
        problems += termination(record)[1]
    return problems


def _lines(text: str, prefix: str) -> list[str]:
    return [ln.strip() for ln in text.splitlines() if prefix in ln]


def _quoted_path(line: str, prefix: str) -> str | None:
    rest = line.split(prefix, 1)[1]
    return rest[:-1] if rest.endswith("'") else None


def _path_problem(text: str, prefix: str, argv, what: str) -> str | None:
    """Check that the Core ML path a line names is the one derived from this run's -m."""
    model = model_arg_of(argv) if isinstance(argv, list) else None
    if model is None:
        return "argv has no -m model argument"
    want = coreml_encoder_path(model)
    for line in _lines(text, prefix):
        got = _quoted_path(line, prefix)
        if got != want:
            return f"{what} names {got!r}, not coreml_encoder_path(-m) {want!r}"
    return None


def _missing(marker: str) -> str:
    return f"missing on stderr: {marker!r}"


def _present(marker: str) -> str:
    return f"present on stderr: {marker!r}"


def system_info_coreml(text: str) -> int | None:
    """Read the ``COREML = <n>`` value of the first ``system_info:`` line.

    Parameters
    ----------
    text : str
        whisper-cli's standard error, decoded.

    Returns
    -------
    int or None
        The value, or None when there is no ``system_info:`` line or its first one has
        no ``COREML = <n>`` field.
    """
    import re
    for line in text.splitlines():
        if SYSTEM_INFO_PREFIX in line:
            m = re.search(re.escape(COREML_FLAG) + r"(\d+)", line)
            return int(m.group(1)) if m else None
    return None


def classify_negative(record, stderr: bytes, stdout: bytes | None = None) -> Classification:
    """Classify one run as the fail-closed negative control (docs/runtime-contract.md §2.4).

    Passes iff the run exited exactly 3 (no signal, no timeout, also not as 128+N), its
    stderr holds the Core ML load-failure line naming ``coreml_encoder_path(-m)`` and the
    init-failure line, no ``Core ML model loaded`` line, and the record is this run's
    (stream digests, contract-clean argv).

    Parameters
    ----------
    record : dict
        The run record.
    stderr : bytes
        The run's stored standard error.
    stdout : bytes or None
        The run's stored standard output; None skips its digest check.

    Returns
    -------
    Classification
        :data:`CLEAN_NEGATIVE` when it passes; otherwise ``"malformed"`` (no mapping or
        no stderr), the ending label, or ``"exit 3, marker missing"``, with the problems.
    """
    problems, label, text = _run_preamble(record, stderr, stdout, EXIT_INIT_FAILURE)
    if label is None:
        return Classification("malformed", problems)
    if COREML_LOAD_FAILURE_MARKER not in text:
        problems.append(_missing(COREML_LOAD_FAILURE_MARKER))
    else:
        p = _path_problem(text, COREML_LOAD_FAILURE_PREFIX, record.get("argv"),
                          "the load-failure line")
        if p:
            problems.append(p)
    if INIT_FAILURE_MARKER not in text:
        problems.append(_missing(INIT_FAILURE_MARKER))
    if COREML_LOAD_MARKER in text:
        problems.append(_present(COREML_LOAD_MARKER))
    if not problems:
        return Classification(CLEAN_NEGATIVE, ())
    return Classification(label if label != f"exit {EXIT_INIT_FAILURE}"
                          else "exit 3, marker missing",
                          problems)


def _run_preamble(record, stderr: bytes, stdout: bytes | None, want: int):
    """Run the checks every classifier starts with.

    The record's integrity and whether the run ended with exit status ``want``. Returns
    (problems, ending label or None if the record is malformed, stderr text).
    """
    problems = _integrity(record, stderr, stdout)
    if problems and problems[0] in ("run record is not a mapping", "stderr stream missing"):
        return problems, None, ""
    label, rec_problems = termination(record)
    problems += rec_problems
    end = _ending_problem(label, record.get("returncode"), want)
    if end:
        problems.append(end)
    return problems, label, bytes(stderr).decode("utf-8", "replace")


def warmup_problems(record, stderr: bytes, stdout: bytes | None = None) -> list[str]:
    """List what disqualifies the positive gate's warm-up run.

    docs/runtime-contract.md §6.3, §10: never accept or retry a SIGABRT.

    The warm-up is not classified by the four conditions (its first-run compilation may
    print differently), but it must be this run's record (stream digests, clean argv) and
    end with exit 0: a signal, a timeout, any other exit status, or a ``failed to load
    Core ML model`` line (a fallback to the GGML encoder) fails the gate.

    Parameters
    ----------
    record : dict
        The warm-up's run record.
    stderr : bytes
        The warm-up's stored standard error.
    stdout : bytes or None
        The warm-up's stored standard output; None skips its digest check.

    Returns
    -------
    list of str
        Empty when the warm-up is acceptable.
    """
    problems, label, text = _run_preamble(record, stderr, stdout, EXIT_OK)
    if label is None:
        return problems
    if COREML_LOAD_FAILURE_MARKER in text:
        problems.append(_present(COREML_LOAD_FAILURE_MARKER) + " (a fallback)")
    return problems


def classify_positive(record, stderr: bytes, stdout: bytes | None = None) -> Classification:
    """Classify ONE run by the four-condition positive gate (docs/runtime-contract.md §2.3).

    1. exit status 0 (no signal, no timeout); 2. ``COREML = 1`` in the ``system_info:``
    line; 3. exactly one ``whisper_init_state: Core ML model loaded`` line (more means
    ``-p N``); 4. no ``failed to load Core ML model`` line. Also: the ``loading Core ML
    model from`` line names ``coreml_encoder_path(-m)`` of this run (a log from another
    run or model fails), and the record is this run's (stream digests, contract-clean argv).

    The transcript is not looked at: a nil prediction (load marker, empty or garbage text)
    passes here and is caught only by transcript comparison (``wer.hybrid``,
    docs/runtime-contract.md §4.2).

    Parameters
    ----------
    record : dict
        The run record.
    stderr : bytes
        The run's stored standard error.
    stdout : bytes or None
        The run's stored standard output; None skips its digest check.

    Returns
    -------
    Classification
        :data:`CLEAN_POSITIVE` when it passes; otherwise ``"malformed"`` (no mapping or
        no stderr), the ending label, or ``"exit 0, condition failed"``, with the problems.
    """
    problems, label, text = _run_preamble(record, stderr, stdout, EXIT_OK)
    if label is None:
        return Classification("malformed", problems)
    coreml = system_info_coreml(text)
    if coreml is None:
        problems.append(f"no {SYSTEM_INFO_PREFIX!r} line with {COREML_ON!r} on stderr")
    elif coreml != 1:
        problems.append(f"system_info shows {COREML_FLAG}{coreml}: a build without Core ML")
    n_loaded = text.count(COREML_LOAD_MARKER)
    if n_loaded == 0:
        problems.append(_missing(COREML_LOAD_MARKER))
    elif n_loaded > 1:
        problems.append(f"{n_loaded} lines {COREML_LOAD_MARKER!r} in one run, expected exactly "
                        "1 (one processor)")
    if COREML_LOAD_FAILURE_MARKER in text:
        problems.append(_present(COREML_LOAD_FAILURE_MARKER))
    if n_loaded:
        if COREML_LOADING_PREFIX not in text:
            problems.append(_missing(COREML_LOADING_PREFIX))
        else:
            p = _path_problem(text, COREML_LOADING_PREFIX, record.get("argv"), "the loading line")
            if p:
                problems.append(p)
    if not problems:
        return Classification(CLEAN_POSITIVE, ())
    return Classification(label if label != f"exit {EXIT_OK}" else "exit 0, condition failed",
                          problems)


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


def classify_lifecycle(record, stderr: bytes, stdout: bytes | None = None) -> Classification:
    """Classify one batch-lifecycle canary run (docs/runtime-contract.md §6.2).

    Passes iff the argv carries the trigger (``-nfa -dtw <preset>``), the run exited
    exactly 3 with no signal or timeout, and stderr holds the ``aheads_masks_init()``
    failure line and the init-failure line (and not the "DTW disabled" warning).

    Parameters
    ----------
    record : dict
        The run record.
    stderr : bytes
        The run's stored standard error.
    stdout : bytes or None
        The run's stored standard output; None skips its digest check.

    Returns
    -------
    Classification
        :data:`CLEAN_LIFECYCLE` when it passes; otherwise ``"malformed"`` (no mapping or
        no stderr), the ending label, or ``"exit 3, marker missing"``, with the problems.
    """
    problems = _integrity(record, stderr, stdout)
    if problems and problems[0] in ("run record is not a mapping", "stderr stream missing"):
        return Classification("malformed", problems)
    if not has_lifecycle_trigger(record.get("argv")):
        problems.append("argv lacks the lifecycle trigger "
                        f"({' '.join(lifecycle_trigger_args('<preset>'))})")
    label, rec_problems = termination(record)
    problems += rec_problems
    end = _ending_problem(label, record.get("returncode"), EXIT_INIT_FAILURE)
    if end:
        problems.append(end)
    text = bytes(stderr).decode("utf-8", "replace")
    if DTW_DISABLED_BY_FLASH_ATTN in text:
        problems.append(_present(DTW_DISABLED_BY_FLASH_ATTN))
    if AHEADS_FAILURE_MARKER not in text:
        problems.append(_missing(AHEADS_FAILURE_MARKER))
    if INIT_FAILURE_MARKER not in text:
        problems.append(_missing(INIT_FAILURE_MARKER))
    if not problems:
        return Classification(CLEAN_LIFECYCLE, ())
    return Classification(label if label != f"exit {EXIT_INIT_FAILURE}"
                          else "exit 3, marker missing",
                          problems)


def classify_ggml_positive(record, stderr: bytes, stdout: bytes | None = None) -> Classification:
    """Classify an ordinary GGML transcription run (used by ``verifylib pin-check``).

    Passes iff the run exited 0, its ``system_info:`` line shows ``COREML = 0``, stderr
    has no Core ML line, and stdout holds a non-empty transcript.

    Parameters
    ----------
    record : dict
        The run record.
    stderr : bytes
        The run's stored standard error.
    stdout : bytes or None
        The run's stored standard output; None counts as an empty transcript.

    Returns
    -------
    Classification
        ``"exit 0 + transcript"`` when it passes; otherwise ``"malformed"`` (no mapping or
        no stderr), the ending label, or ``"exit 0, condition failed"``, with the problems.
    """
    problems, label, text = _run_preamble(record, stderr, stdout, EXIT_OK)
    if label is None:
        return Classification("malformed", problems)
    coreml = system_info_coreml(text)
    if coreml != 0:
        problems.append(f"no {SYSTEM_INFO_PREFIX!r} line with {COREML_OFF!r} on stderr")
    if COREML_LOADING_PREFIX in text or COREML_LOAD_MARKER in text:
        problems.append("Core ML lines in a GGML run")
    if stdout is None or not bytes(stdout).strip():
        problems.append("empty transcript on stdout")
    if not problems:
        return Classification("exit 0 + transcript", ())
    return Classification(label if label != f"exit {EXIT_OK}" else "exit 0, condition failed",
                          problems)


# --- Core ML encoder features (docs/runtime-contract.md §4.2) -----------------------------

COREML_INPUT_NAME = "logmel_data"
"""Input feature whisper.cpp's generated Core ML wrapper feeds (``whisper-encoder-impl.m``)."""

COREML_OUTPUT_NAME = "output"
"""Output feature whisper.cpp's wrapper reads and ``memcpy``s into the encoder state."""

COREML_IO_DTYPE = "FLOAT32"
"""Array data type of both features: the runtime builds a float32 ``MLMultiArray`` and copies
``count * sizeof(float)`` bytes out, with no shape or type check."""
