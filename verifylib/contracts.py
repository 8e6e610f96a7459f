"""The whisper.cpp runtime contract: the single home of every marker string it relies on.

Log markers, flags and in-tree file names that the gates match against are defined here
and nowhere else, so the rules and the validator cannot drift apart.
"""

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

# --- whisper-cli command line -----------------------------------------------------------

FORBIDDEN_FLAGS = ("-np", "--no-prints", "-ac", "--audio-ctx")
"""Flags a gate run must never pass: ``-np`` silences every log line a gate asserts (guide
section 9); ``-ac`` changes the mel width away from the fixed Core ML input."""

PROCESSOR_FLAGS = ("-p", "--processors")
"""``-p N`` creates N whisper states (N Core ML loads); gates require exactly 1."""


class ContractError(ValueError):
    """A command line breaks the runtime contract and is refused before launch."""


def check_cli_argv(argv) -> None:
    """Refuse a whisper-cli argv that breaks the contract, before anything runs.

    Parameters
    ----------
    argv : sequence of str
        The full argument vector (binary first).

    Raises
    ------
    ContractError
        On a forbidden flag (also in ``--flag=value`` form) or a processor count other
        than 1.
    """
    args = [str(a) for a in argv]
    for i, a in enumerate(args[1:], 1):
        flag = a.split("=", 1)[0]
        if flag in FORBIDDEN_FLAGS:
            raise ContractError(f"whisper-cli flag {flag} is forbidden in gate runs")
        if flag in PROCESSOR_FLAGS:
            value = a.split("=", 1)[1] if "=" in a else (args[i + 1] if i + 1 < len(args) else "")
            if value.strip() != "1":
                raise ContractError(f"whisper-cli {flag} {value!r}: gate runs use exactly one "
                                    "processor")


def greedy_decoding_args(language: str) -> list[str]:
    """whisper-cli arguments for the pinned greedy decoding shared with Hugging Face.

    Beam size 1, best-of 1, fixed language, no timestamps, temperature 0 without fallback,
    one processor: the same strategy as ``generate(num_beams=1, do_sample=False)``.
    """
    return ["-bs", "1", "-bo", "1", "-l", language, "-nt", "--temperature", "0",
            "--temperature-inc", "0", "-p", "1"]


# --- model loading -------------------------------------------------------------------------

MODEL_LOAD_PREFIX = "whisper_model_load: "
"""Prefix of the loader's hyper-parameter lines (``whisper_model_load: n_vocab = 51864``)."""

MODEL_LOAD_HPARAMS = ("n_vocab", "n_audio_ctx", "n_audio_state", "n_audio_head",
                      "n_audio_layer", "n_text_ctx", "n_text_state", "n_text_head",
                      "n_text_layer", "n_mels", "ftype")
"""Hyper-parameters the loader prints, in file order."""

MODEL_LOAD_FAILURE = "whisper_init_from_file_with_params_no_state: failed to load model"
"""Logged when the loader refuses a model file."""

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
