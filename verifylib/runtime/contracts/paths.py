"""The ``.mlmodelc`` path whisper.cpp derives from the exact ``-m`` string.

And the ``-m`` of a recorded argv.
"""

from __future__ import annotations

import os

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
