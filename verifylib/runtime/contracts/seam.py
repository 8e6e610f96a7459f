"""The Core ML seam's contract: its markers, exit code, environment and wire protocol.

The *seam* is the project's own implementation of the three C functions whisper.cpp calls
Apple's Core ML through (``whisper_coreml_init``, ``whisper_coreml_encode``,
``whisper_coreml_free``; ``src/coreml/whisper-encoder.h``), linked into a Linux build of
whisper.cpp compiled with ``WHISPER_USE_COREML`` (docs/runtime-contract.md §11). Its
``encode`` hands the mel to verifylib's ML-program executor over a Unix socket and copies
the program's output back, so every line of whisper.cpp's Core ML path runs, with the
exact program in Apple's place.

Every string and number both sides rely on is defined here and nowhere else: the C++ side
receives them as a generated header (:func:`c_header`), so the two cannot drift apart, and
the rules match a recorded stream against the same markers.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from verifylib.evidence import identities

SEAM_PROVES = ("The seam runs every line of whisper.cpp's Core ML path (the .mlmodelc path "
               "derived from -m, the load and failure branches, the fail-closed return, the mel "
               "handed over, the output copied into the decoder) with the exact encoder program "
               "executed by verifylib in Apple's place.")
"""What a seam gate shows, in one sentence (the report and docs/runtime-contract.md §11)."""

SEAM_DOES_NOT_PROVE = ("It does not run Apple's Core ML runtime: not its compiler, its compute "
                       "units or its device placement, so no seam result stands for a Core ML "
                       "gate.")
"""What no seam gate shows, in one sentence."""


SEAM_PREFIX = "verifylib-seam: "
"""Every line the seam prints to stderr starts with this (never a whisper.cpp line)."""

SEAM_BANNER = SEAM_PREFIX + "Core ML calls served by verifylib's ML-program executor, " \
    "not by Apple's framework"
"""Printed by ``whisper_coreml_init`` before anything else: a seam launch names itself."""

SEAM_LOADED = SEAM_PREFIX + "program loaded: "
"""``init`` succeeded; the executor's description of the program follows."""

SEAM_REFUSED = SEAM_PREFIX + "load refused: "
"""``init`` returns NULL; the reason follows (no folder, no executor, a bad program)."""

SEAM_ENCODE = SEAM_PREFIX + "encode "
"""One line per ``encode`` call: ``encode #<k> n_ctx=<n> n_mel=<m> count=<c>
input_sha256=<hex> output_sha256=<hex>``."""

SEAM_FREED = SEAM_PREFIX + "freed after "
"""``free`` ran: ``freed after <k> encode call(s)``."""

SEAM_EXECUTOR_LOST = SEAM_PREFIX + "executor lost: "
"""The executor closed, failed or timed out during an ``encode``: the process then exits
with :data:`SEAM_EXIT_EXECUTOR_LOST` (Apple's implementation would carry on with an
unwritten encoder output; the seam refuses to transcribe what no program computed)."""

SEAM_EXIT_EXECUTOR_LOST = 70
"""Exit status of a seam launch whose executor was lost mid-encode (``EX_SOFTWARE``)."""

SEAM_SOCKET_ENV = "VERIFYLIB_SEAM_SOCKET"
"""The executor's Unix socket path, handed to a seam launch through its environment."""

SEAM_LAUNCH_ENV = "VERIFYLIB_SEAM_LAUNCH"
"""A token naming the launch, sent with ``init`` so the executor files its calls under it."""

SEAM_OUTPUT_FLOATS_ENV = "VERIFYLIB_SEAM_OUTPUT_FLOATS"
"""The size of whisper.cpp's encoder output buffer (``n_audio_ctx * n_audio_state`` of the
launch's model), handed to a seam launch: a reply larger than that ends the launch as a
lost executor before a byte is copied. Apple's implementation copies ``output.count``
floats unchecked (docs/runtime-contract.md §4.2); the seam refuses the overrun."""

SEAM_IO_TIMEOUT_S = 900
"""Seconds the seam waits on its executor for one reply before it declares it lost."""

STANDIN_FILE = "verifylib-seam-standin.json"
"""The one file of a seam stand-in folder (docs/runtime-contract.md §11.2): a package's
program handed to the seam at the derived ``.mlmodelc`` path where no ``coremlc`` can
compile one. Never an ``.mlmodelc``: Core ML would refuse it, and so do the gates that
judge compiled models."""

STANDIN_KIND = "verifylib-seam-standin/1"
"""The ``kind`` a stand-in file declares."""

# Wire protocol: a request is a 4-byte opcode, a little-endian u64 payload length and the
# payload; a reply is a u32 status (0 ok), a u64 length and the payload.
OP_LOAD = b"LOAD"
"""Payload: u32 token length, token, u32 path length, path (UTF-8), u64 output floats (the
launch's :data:`SEAM_OUTPUT_FLOATS_ENV`, 0 when not given)."""

OP_ENCODE = b"ENCD"
"""Payload: i64 n_ctx, i64 n_mel, then n_ctx * n_mel float32 (the mel, row-major)."""

OP_FREE = b"FREE"
"""Payload: none."""

STATUS_OK = 0
STATUS_REFUSED = 1

MAX_PATH_BYTES = 4096
MAX_MESSAGE_BYTES = 1 << 16

SEAM_SIDES = {"patched": ("seam", identities.BINARY_SEAM),
              "unpatched": ("seam-unpatched", identities.BINARY_SEAM_UNPATCHED),
              "unpatched_asan": ("seam-unpatched-asan", identities.BINARY_SEAM_UNPATCHED_ASAN)}
"""The seam builds: side -> (build variant, the identity that binds its binary's digest)."""

_ENCODE_RE = re.compile(
    r"^" + re.escape(SEAM_ENCODE) + r"#(\d+) n_ctx=(\d+) n_mel=(\d+) count=(\d+) "
    r"input_sha256=([0-9a-f]{64}) output_sha256=([0-9a-f]{64})$")


@dataclass(frozen=True)
class SeamEncodeLine:
    """One ``encode`` call as the seam printed it on the launch's stderr.

    Attributes
    ----------
    index : int
        1-based call number within the launch.
    n_ctx, n_mel : int
        The mel's shape as whisper.cpp handed it (``[1, n_mel, n_ctx]``).
    count : int
        Floats copied into whisper.cpp's encoder output.
    input_sha256, output_sha256 : str
        SHA-256 of the mel's and of the copied output's float32 bytes, computed by the seam.
    """

    index: int
    n_ctx: int
    n_mel: int
    count: int
    input_sha256: str
    output_sha256: str


def seam_encode_lines(stderr: str) -> tuple[SeamEncodeLine, ...]:
    """Read every ``encode`` line the seam printed, in order.

    Parameters
    ----------
    stderr : str
        A launch's standard error.

    Returns
    -------
    tuple of SeamEncodeLine
        One per well-formed line; a malformed line is skipped (the rules compare the count
        with the executor's record and with whisper.cpp's own ``encode time`` line).
    """
    out = []
    for line in stderr.splitlines():
        m = _ENCODE_RE.match(line.strip())
        if m:
            k, n_ctx, n_mel, count = (int(m.group(i)) for i in range(1, 5))
            out.append(SeamEncodeLine(k, n_ctx, n_mel, count, m.group(5), m.group(6)))
    return tuple(out)


def is_seam_stream(stderr: str) -> bool:
    """Tell whether a launch's stderr holds any line of the seam.

    Parameters
    ----------
    stderr : str
        A launch's standard error.

    Returns
    -------
    bool
        True if a line starts with :data:`SEAM_PREFIX`: the launch ran the seam, whatever
        its record claims (a Core ML claim resting on it is refused).
    """
    return any(line.startswith(SEAM_PREFIX) for line in stderr.splitlines())


def c_header() -> str:
    """Return the C header that hands this contract to the seam's C++ source.

    Returns
    -------
    str
        ``#define`` lines for every marker, variable name, status and limit above; written
        into each seam build and part of its key.
    """
    def s(v: str) -> str:
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    defs = {
        "VLS_PREFIX": s(SEAM_PREFIX), "VLS_BANNER": s(SEAM_BANNER),
        "VLS_LOADED": s(SEAM_LOADED), "VLS_REFUSED": s(SEAM_REFUSED),
        "VLS_ENCODE": s(SEAM_ENCODE), "VLS_FREED": s(SEAM_FREED),
        "VLS_EXECUTOR_LOST": s(SEAM_EXECUTOR_LOST),
        "VLS_EXIT_EXECUTOR_LOST": str(SEAM_EXIT_EXECUTOR_LOST),
        "VLS_SOCKET_ENV": s(SEAM_SOCKET_ENV), "VLS_LAUNCH_ENV": s(SEAM_LAUNCH_ENV),
        "VLS_OUTPUT_FLOATS_ENV": s(SEAM_OUTPUT_FLOATS_ENV),
        "VLS_IO_TIMEOUT_S": str(SEAM_IO_TIMEOUT_S),
        "VLS_OP_LOAD": s(OP_LOAD.decode()), "VLS_OP_ENCODE": s(OP_ENCODE.decode()),
        "VLS_OP_FREE": s(OP_FREE.decode()), "VLS_STATUS_OK": str(STATUS_OK),
        "VLS_MAX_MESSAGE_BYTES": str(MAX_MESSAGE_BYTES),
    }
    lines = ["// Generated by verifylib.runtime.contracts.seam.c_header: do not edit.",
             "#pragma once"]
    lines += [f"#define {k} {v}" for k, v in defs.items()]
    return "\n".join(lines) + "\n"
