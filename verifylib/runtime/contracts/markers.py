"""What whisper.cpp prints, and the readers of it.

Log markers, prefixes, exit codes and in-tree names its output is matched by, and the
readers of its stderr lines (system_info, backends, loaded hparams, detected language,
encode time).
"""

from __future__ import annotations

import re

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


# --- the patched member (docs/runtime-contract.md §6.2) -----------------------------------

BATCH_MEMBER_UNINITIALIZED = "whisper_batch batch;"
"""The ``whisper_state`` member the compatibility patch initializes."""

BATCH_MEMBER_PATCHED = "whisper_batch batch = {};"
"""The member after the one-line patch."""


# --- Core ML encoder features (docs/runtime-contract.md §4.2) -----------------------------

COREML_INPUT_NAME = "logmel_data"
"""Input feature whisper.cpp's generated Core ML wrapper feeds (``whisper-encoder-impl.m``)."""

COREML_OUTPUT_NAME = "output"
"""Output feature whisper.cpp's wrapper reads and ``memcpy``s into the encoder state."""

COREML_IO_DTYPE = "FLOAT32"
"""Array data type of both features: the runtime builds a float32 ``MLMultiArray`` and copies
``count * sizeof(float)`` bytes out, with no shape or type check."""
