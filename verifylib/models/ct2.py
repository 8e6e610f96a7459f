"""Reader for CTranslate2 ``model.bin`` files (binary format version 6).

Why this is hand-written: the only package that reads the format is ``ctranslate2``
itself, which loads a model into its own inference runtime and exposes no tensor access.
The suite needs the raw weights, byte for byte, to rebuild the same network in PyTorch;
the format is small (a header, then named arrays, then aliases), so reading it directly
avoids a native dependency and lets every structural problem be reported with the file
and variable it concerns.

Layout, verified against Systran's faster-whisper ``tiny.en`` (148 variables, one alias,
the parse consumes the file exactly), all integers little-endian:

- ``uint32`` binary version (6), string spec name (``"WhisperSpec"``), ``uint32`` spec
  revision, ``uint32`` variable count;
- per variable: string name, ``uint8`` rank, rank x ``uint32`` dims, ``uint8`` dtype code,
  ``uint32`` byte count, raw C-order bytes;
- ``uint32`` alias count, then per alias: string alias, string target.

A string is a ``uint16`` byte length that counts a terminating NUL, then the bytes.
"""

from __future__ import annotations

import math
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from verifylib.errors import ModelFailure

WHISPER_SPEC = "WhisperSpec"
"""The spec name of a CTranslate2 Whisper model."""

SUPPORTED_BINARY_VERSIONS = (6,)
"""Binary versions whose layout this reader knows; older layouts are refused, not guessed."""

# CTranslate2's DataType enumeration, in declaration order. bfloat16 has no numpy dtype:
# its bits are widened to float32, which represents every bfloat16 value exactly.
DTYPE_CODES: dict[int, str] = {
    0: "float32", 1: "int8", 2: "int16", 3: "int32", 4: "float16", 5: "bfloat16",
}
_ITEMSIZE = {"float32": 4, "int8": 1, "int16": 2, "int32": 4, "float16": 2, "bfloat16": 2}
_NUMPY = {"float32": "<f4", "int8": "i1", "int16": "<i2", "int32": "<i4", "float16": "<f2",
          "bfloat16": "<u2"}


class ModelError(ModelFailure):
    """A model file or folder is malformed, of an unsupported kind, or does not map strictly."""


@dataclass(frozen=True)
class CT2Model:
    """The parsed content of one CTranslate2 ``model.bin``.

    Attributes
    ----------
    path : Path
        The file that was read.
    version : int
        Binary format version.
    spec_name : str
        Model specification name, e.g. ``"WhisperSpec"``.
    revision : int
        Specification revision.
    variables : dict of str to numpy.ndarray
        Every stored variable, in file order, as a read-only array with its stored shape
        (bfloat16 widened to float32; all other dtypes as stored).
    dtypes : dict of str to str
        The stored dtype name of each variable (``"float16"``, ``"int8"``, ...).
    aliases : dict of str to str
        Alias name to the variable name it stands for.
    """

    path: Path
    version: int
    spec_name: str
    revision: int
    variables: dict[str, np.ndarray]
    dtypes: dict[str, str]
    aliases: dict[str, str]

    def resolve(self, name: str) -> str:
        """Return the variable name ``name`` stands for (itself, or an alias's target).

        Parameters
        ----------
        name : str
            A variable or alias name.

        Returns
        -------
        str
            A key of :attr:`variables`.

        Raises
        ------
        KeyError
            If ``name`` is neither a variable nor an alias.
        """
        seen = set()
        while name in self.aliases and name not in self.variables:
            if name in seen:
                raise KeyError(f"alias cycle at {name!r}")
            seen.add(name)
            name = self.aliases[name]
        if name not in self.variables:
            raise KeyError(name)
        return name

    def scalar(self, name: str) -> Any:
        """Return a rank-0 variable as a Python number.

        Parameters
        ----------
        name : str
            Variable name.

        Returns
        -------
        int or float
            The value.

        Raises
        ------
        ModelError
            If the variable is missing or not a scalar.
        """
        if name not in self.variables:
            raise ModelError(f"{self.path}: variable {name!r} is missing")
        arr = self.variables[name]
        if arr.shape != () and arr.size != 1:
            raise ModelError(f"{self.path}: variable {name!r} has shape {arr.shape}, expected "
                             "a scalar")
        return arr.reshape(()).item()


MAX_VARIABLES = 100_000
"""More variables than any Whisper model holds (large-v3: under 1,000): a count above it is
refused before the table is walked; aliases are held to it as well."""

@dataclass(frozen=True)
class CT2Variable:
    """One entry of the variable table, as its header declares it (no data read).

    Attributes
    ----------
    name : str
    dims : tuple of int
    dtype : str
        The stored dtype name.
    offset : int
        Where its data starts in the file.
    nbytes : int
        Its data's length.
    """

    name: str
    dims: tuple[int, ...]
    dtype: str
    offset: int
    nbytes: int


@dataclass(frozen=True)
class CT2Header:
    """A ``model.bin``'s header, variable table and aliases, read without its weights.

    Attributes
    ----------
    path : Path
    version : int
    spec_name : str
    revision : int
    variables : tuple of CT2Variable
        In file order, each extent inside the file.
    aliases : dict of str to str
    size : int
        The file's length in bytes, consumed exactly.
    """

    path: Path
    version: int
    spec_name: str
    revision: int
    variables: tuple[CT2Variable, ...]
    aliases: dict[str, str]
    size: int


class _Cursor:
    """Reads the format from a view of the file; ``skip`` passes over data unread."""

    def __init__(self, data: memoryview, path: Path):
        self.data = data
        self.pos = 0
        self.path = path

    def _end(self, n: int, what: str) -> int:
        end = self.pos + n
        if n < 0 or end > len(self.data):
            raise ModelError(f"{self.path}: truncated while reading {what}: needs {n} bytes at "
                             f"offset {self.pos}, the file has {len(self.data)} bytes")
        return end

    def take(self, n: int, what: str) -> memoryview:
        end = self._end(n, what)
        out = self.data[self.pos:end]
        self.pos = end
        return out

    def skip(self, n: int, what: str) -> int:
        """Pass over ``n`` bytes (their extent checked, their pages untouched); their offset."""
        start, self.pos = self.pos, self._end(n, what)
        return start

    def unpack(self, fmt: str, what: str) -> int:
        return struct.unpack(fmt, self.take(struct.calcsize(fmt), what))[0]

    def string(self, what: str) -> str:
        n = self.unpack("<H", f"the length of {what}")
        raw = bytes(self.take(n, what))
        if n == 0 or raw[-1] != 0:
            raise ModelError(f"{self.path}: {what} at offset {self.pos - n} is not NUL-terminated")
        try:
            return raw[:-1].decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ModelError(f"{self.path}: {what} at offset {self.pos - n} is not UTF-8") from exc


def _read_variable(cur: _Cursor, index: int, seen: set[str]) -> CT2Variable:
    """Read the header of variable ``#index`` and pass over its data (extent checked)."""
    path = cur.path
    name = cur.string(f"the name of variable #{index}")
    where = f"variable {name!r}"
    if name in seen:
        raise ModelError(f"{path}: {where} appears twice")
    rank = cur.unpack("<B", f"the rank of {where}")
    dims = tuple(cur.unpack("<I", f"dim {i} of {where}") for i in range(rank))
    code = cur.unpack("<B", f"the dtype of {where}")
    if code not in DTYPE_CODES:
        raise ModelError(f"{path}: {where} has unknown dtype code {code} "
                         f"(known: {DTYPE_CODES})")
    dtype = DTYPE_CODES[code]
    nbytes = cur.unpack("<I", f"the byte count of {where}")
    expected = math.prod(dims) * _ITEMSIZE[dtype]
    if nbytes != expected:
        raise ModelError(f"{path}: {where} declares {nbytes} bytes, but dims {list(dims)} of "
                         f"{dtype} need {expected}")
    offset = cur.skip(nbytes, f"the data of {where}")
    return CT2Variable(name, dims, dtype, offset, nbytes)


def _array(data: memoryview, var: CT2Variable) -> np.ndarray:
    """Return a variable's read-only array (bfloat16 widened to float32)."""
    raw = data[var.offset:var.offset + var.nbytes]
    arr = np.frombuffer(raw, dtype=_NUMPY[var.dtype]).reshape(var.dims)
    if var.dtype == "bfloat16":
        arr = (arr.astype(np.uint32) << 16).view(np.float32)
    arr.flags.writeable = False
    return arr


def _read_aliases(cur: _Cursor, variables: set[str]) -> dict[str, str]:
    """Read the alias count and the aliases (alias -> target), refusing a name defined twice."""
    n_alias = cur.unpack("<I", "the alias count")
    if n_alias > MAX_VARIABLES:
        raise ModelError(f"{cur.path}: declares {n_alias} aliases at offset {cur.pos - 4}; "
                         f"more than {MAX_VARIABLES} is no Whisper model")
    aliases: dict[str, str] = {}
    for index in range(n_alias):
        alias = cur.string(f"alias #{index}")
        target = cur.string(f"the target of alias {alias!r}")
        if alias in aliases or alias in variables:
            raise ModelError(f"{cur.path}: alias {alias!r} is defined twice")
        aliases[alias] = target
    return aliases


def _model_bin(path: str | Path) -> Path:
    path = Path(path)
    if path.is_dir():
        path = path / "model.bin"
    if not path.is_file():
        raise ModelError(f"{path}: no such file (a CTranslate2 model folder holds model.bin)")
    return path


def _parse(data: memoryview, path: Path) -> CT2Header:
    """Walk the whole structure of a ``model.bin`` held in ``data``, passing over the weights."""
    cur = _Cursor(data, path)
    version = cur.unpack("<I", "the binary version")
    if version not in SUPPORTED_BINARY_VERSIONS:
        raise ModelError(f"{path}: not a CTranslate2 model of a supported binary version "
                         f"(found {version}, this reader knows {list(SUPPORTED_BINARY_VERSIONS)})")
    spec_name = cur.string("the spec name")
    revision = cur.unpack("<I", "the spec revision")
    count = cur.unpack("<I", "the variable count")
    # Each record takes at least ten bytes, so truncation ends the walk; this bounds it
    # for a file that is large as well.
    if count > MAX_VARIABLES:
        raise ModelError(f"{path}: declares {count} variables; more than {MAX_VARIABLES} is "
                         "no Whisper model")
    seen: set[str] = set()
    variables = []
    for index in range(count):
        var = _read_variable(cur, index, seen)
        seen.add(var.name)
        variables.append(var)
    aliases = _read_aliases(cur, seen)
    if cur.pos != len(data):
        raise ModelError(f"{path}: {len(data) - cur.pos} unexpected trailing bytes after the "
                         f"aliases (offset {cur.pos})")
    for alias in aliases:
        name, hops = alias, set()
        while name in aliases and name not in seen:
            if name in hops:
                raise ModelError(f"{path}: alias {alias!r} points to no variable (alias cycle "
                                 f"at {name!r})")
            hops.add(name)
            name = aliases[name]
        if name not in seen:
            raise ModelError(f"{path}: alias {alias!r} points to no variable ({name!r})")
    return CT2Header(path, version, spec_name, revision, tuple(variables), aliases, len(data))


def read_ct2_header(path: str | Path) -> CT2Header:
    """Read a ``model.bin``'s structure without reading its weights (parameter validation).

    The file is memory-mapped and walked by the same parser as :func:`read_ct2`; each
    variable's data is passed over with its extent checked against the file's length, so
    only the pages holding headers are read.

    Parameters
    ----------
    path : path-like
        The ``model.bin`` file (or a folder holding one).

    Returns
    -------
    CT2Header

    Raises
    ------
    ModelError
        As :func:`read_ct2`, for every structural problem, and for a variable count the
        file cannot hold.
    """
    import mmap

    path = _model_bin(path)
    try:
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            if size == 0:
                return _parse(memoryview(b""), path)
            with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
                view = memoryview(mm)
                try:
                    return _parse(view, path)
                finally:
                    view.release()
    except OSError as exc:
        raise ModelError(f"{path}: cannot be read: {exc}") from None


def read_ct2(path: str | Path) -> CT2Model:
    """Read a CTranslate2 ``model.bin``.

    Parameters
    ----------
    path : path-like
        The ``model.bin`` file (or a folder holding one).

    Returns
    -------
    CT2Model
        Header, variables (in file order) and aliases.

    Raises
    ------
    ModelError
        If the file is missing, has an unsupported binary version, is truncated, holds an
        unknown dtype code, a byte count that disagrees with its dims and dtype, a duplicate
        name, an alias to nothing, or trailing bytes. The message names the file and, where
        one is involved, the variable.
    """
    path = _model_bin(path)
    data = memoryview(path.read_bytes())
    head = _parse(data, path)
    return CT2Model(path=path, version=head.version, spec_name=head.spec_name,
                    revision=head.revision,
                    variables={v.name: _array(data, v) for v in head.variables},
                    dtypes={v.name: v.dtype for v in head.variables}, aliases=head.aliases)
