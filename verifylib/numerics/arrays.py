"""Numeric arrays as digest-bound evidence: compressed ``.npz`` files that load lazily.

Why these files exist: a researcher exploring drift wants the tensors behind a figure
(the reference output, each candidate's output, per-layer summaries), not only the figure.
They are stored beside the JSON evidence of the gate that measured them, cited by that gate
like any evidence file (so ``verifylib verify`` re-hashes them and the gate's rule reads
them), and handed out only after their SHA-256 matched the recorded one.

The format is numpy's own ``.npz`` (a zip of ``.npy`` members, what
``numpy.savez_compressed`` writes), read with ``allow_pickle=False`` so a forged file cannot
run code; only numeric and boolean dtypes are accepted. The archive is written here
(:func:`encode`), not by ``numpy.savez_compressed``, because numpy has no option for the
compression level: deflate level 1 instead of zlib's default 6 (measured on stage 04's
arrays of an upstream fp16 audit: 0.27 instead of 0.96 CPU-s for 1.5 % more bytes; the
activations are float noise that deflate barely shrinks at any level). Each member keeps
the fixed date numpy gives it, so the same arrays still give the same bytes.
"""

from __future__ import annotations

import io
import os
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Iterator

import numpy as np

from verifylib import canonical
from verifylib.errors import EvidenceInvalid

_KINDS = "biuf"  # bool, signed, unsigned, floating: what a measurement stores
_DEFLATE_LEVEL = 1
_MEMBER_DATE = (1980, 1, 1, 0, 0, 0)  # the earliest date a zip entry can hold


def encode(arrays: Mapping[str, np.ndarray]) -> bytes:
    """Serialise named arrays as a compressed ``.npz`` (the bytes of the evidence file).

    Parameters
    ----------
    arrays : mapping
        Key -> numeric array. Keys are plain names (no ``/``).

    Returns
    -------
    bytes
        The ``.npz`` archive of the arrays (``<key>.npy`` members, deflated), as
        ``numpy.load`` reads it.

    Raises
    ------
    verifylib.errors.EvidenceInvalid
        On a non-numeric array or a key numpy cannot store as a member name.
    """
    clean = {}
    for key, value in arrays.items():
        a = np.asarray(value)
        if not isinstance(key, str) or not key or "/" in key:
            raise EvidenceInvalid(f"bad array name {key!r}")
        if a.dtype.kind not in _KINDS:
            raise EvidenceInvalid(f"array {key!r} has dtype {a.dtype}, not numeric")
        clean[key] = a
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:  # each member names its own compression
        for key, a in clean.items():
            member = io.BytesIO()
            np.lib.format.write_array(member, a, allow_pickle=False)
            zf.writestr(zipfile.ZipInfo(f"{key}.npy", date_time=_MEMBER_DATE),
                        member.getbuffer(), compress_type=zipfile.ZIP_DEFLATED,
                        compresslevel=_DEFLATE_LEVEL)
    return buf.getvalue()


def decode(data: bytes) -> dict[str, np.ndarray]:
    """Parse ``.npz`` bytes written by :func:`encode` (no pickles, numeric dtypes only).

    Parameters
    ----------
    data : bytes
        The file's bytes.

    Returns
    -------
    dict
        Member name -> array, every array loaded.

    Raises
    ------
    verifylib.errors.EvidenceInvalid
        If the bytes are not such a file, or an array is not of a numeric or boolean dtype.
    """
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as z:
            out = {k: z[k] for k in z.files}
    except (ValueError, OSError, EOFError, KeyError) as exc:
        raise EvidenceInvalid(f"not a numeric .npz file: {exc}") from None
    for k, a in out.items():
        if a.dtype.kind not in _KINDS:
            raise EvidenceInvalid(f"array {k!r} has dtype {a.dtype}, not numeric")
    return out


class ArrayFile(Mapping):
    """Read-only, lazily loaded arrays of one evidence file, bound to its digest.

    Nothing is read until a key is asked for; then the whole file is read once, its
    SHA-256 checked against the recorded one, and the arrays kept.

    Parameters
    ----------
    path : path-like
        The ``.npz`` file.
    sha256 : str
        The digest its gate record cites.

    Raises
    ------
    verifylib.errors.EvidenceInvalid
        On first access, if the file is missing or its digest differs.
    """

    def __init__(self, path: str | os.PathLike, sha256: str):
        self.path = Path(path)
        self.sha256 = sha256
        self._arrays: dict[str, np.ndarray] | None = None

    def _load(self) -> dict[str, np.ndarray]:
        if self._arrays is None:
            try:
                data = self.path.read_bytes()
            except OSError as exc:
                raise EvidenceInvalid(f"array evidence {self.path}: {exc}") from None
            if canonical.sha256_bytes(data) != self.sha256:
                raise EvidenceInvalid(f"array evidence {self.path} changed (digest differs "
                                      f"from the record)")
            arrays = decode(data)
            for a in arrays.values():
                a.setflags(write=False)
            self._arrays = arrays
        return self._arrays

    @property
    def loaded(self) -> bool:
        """Whether the file has been read."""
        return self._arrays is not None

    def __getitem__(self, key: str) -> np.ndarray:
        return self._load()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._load())

    def __len__(self) -> int:
        return len(self._load())

    def __repr__(self) -> str:
        state = f"{len(self)} arrays" if self.loaded else "not loaded"
        return f"ArrayFile({self.path.name}, sha256 {self.sha256[:12]}…, {state})"
