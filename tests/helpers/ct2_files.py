"""CTranslate2 ``model.bin`` files written independently of verifylib's reader, for the
reader's and the model intake's tests."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np

# dtype name -> (code, numpy dtype of the raw bytes), as CTranslate2 numbers them.
CODES = {"float32": (0, "<f4"), "int8": (1, "i1"), "int16": (2, "<i2"), "int32": (3, "<i4"),
         "float16": (4, "<f2"), "bfloat16": (5, "<u2")}


def _string(text: str) -> bytes:
    raw = text.encode("utf-8") + b"\0"
    return struct.pack("<H", len(raw)) + raw


def write_ct2_file(path: Path, variables: list[tuple[str, np.ndarray, str]], *,
                   aliases: dict[str, str] | None = None, spec: str = "WhisperSpec",
                   revision: int = 3, version: int = 6) -> Path:
    """Write a CTranslate2 model.bin independently of the reader under test.

    ``variables`` holds (name, array, dtype name); a bfloat16 array is given as float32
    and truncated to its upper 16 bits.
    """
    out = [struct.pack("<I", version), _string(spec), struct.pack("<I", revision),
           struct.pack("<I", len(variables))]
    for name, arr, dtype in variables:
        code, np_dtype = CODES[dtype]
        if dtype == "bfloat16":
            data = (np.asarray(arr, dtype="<f4").view("<u4") >> 16).astype("<u2").tobytes()
        else:
            data = np.ascontiguousarray(arr, dtype=np_dtype).tobytes()
        arr = np.asarray(arr)
        out.append(_string(name) + struct.pack("<B", arr.ndim)
                   + b"".join(struct.pack("<I", d) for d in arr.shape)
                   + struct.pack("<BI", code, len(data)) + data)
    aliases = aliases or {}
    out.append(struct.pack("<I", len(aliases)))
    for a, t in aliases.items():
        out.append(_string(a) + _string(t))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(out))
    return path
