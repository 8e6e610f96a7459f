"""Reading whisper.cpp's legacy ggml model files, every file treated as hostile input.

Why this is hand-written: no package on the registry reads the format (ggml's own Python
bindings read GGUF, which whisper.cpp v1.8.5 does not load), and the converters inside
whisper.cpp's tree read f16 and f32 files only, trusting every length they find. This
module is the one reader of the format in verifylib: the writer
(:mod:`verifylib.models.ggml_writer`) is checked against it, and the importer
(:mod:`verifylib.models.ggml_import`) builds on it.

Layout (little-endian int32 unless noted; the byte layout is the writer's module docstring):
``uint32`` magic ``0x67676d6c``; eleven hparams ending in ``ftype``; the mel filters
(``n_mel``, ``n_fft``, float32 values); the vocabulary (a count, then per token a length
and its bytes); then tensor records to end of file: ``n_dims``, name length, ggml type,
the extents in ggml order (fastest first), the name, the data. There is no padding.

Trust. Nothing read from the file is used before it is checked: every length against the
bytes that remain, every count against a plausible range, every name as UTF-8, every type
against the ones whose block layout is known here, every tensor against the set, shapes
and types the pinned loader (``whisper_model_load``, v1.8.5) creates for the file's
hparams and ftype. A refusal is a :class:`GgmlFileInvalid` naming the file, the byte
offset and the tensor or field. The loader itself checks less (it ignores the quantization
version, accepts bytes left over at the end and never checks a tensor's stored type,
only its byte size), so a file this reader accepts loads, and some it refuses would load.

Quantized files (written by ``whisper-quantize``: ftype ``1000 * 2 + t``, GGML_QNT_VERSION
2) quantize every 2-D weight matrix and the token embedding; the conv kernels stay f16 and
the 1-D tensors, conv biases and positional embeddings stay f32, as
``examples/quantize/quantize.cpp`` skips them.

Dequantization is ggml's reference ``dequantize_row_*`` (``ggml/src/ggml-quants.c``),
which is what ``ggml_get_type_traits(type)->to_float`` runs: blocks of 32 values, the
scale ``d`` (and offset ``m``) widened from f16 to float32, then one float32 multiply
(and one float32 add, not fused) per value. numpy does the same operations in the same
order, so the values are bit-identical to ggml's on a build whose compiler does not fuse
``q*d + m`` into one FMA (x86-64 without ``-march`` flags: the pinned tree's ggml-base).

Memory: the file is memory-mapped and nothing is read until asked. :meth:`GgmlModelFile.tensor`
converts one tensor in chunks of :data:`CHUNK_BLOCKS` blocks and hands the mapped pages it
read back to the operating system as it goes, so reading a large-v3 file tensor by tensor
holds one float32 tensor plus a few MiB, not the file.
"""

from __future__ import annotations

import mmap
import os
import struct
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from types import MappingProxyType
from typing import Mapping

import numpy as np

from verifylib.canonical import sha256_file
from verifylib.errors import ParametersInvalid
from verifylib.models.ggml_writer import GGML_FILE_MAGIC, HPARAM_NAMES, expected_tensors

__all__ = ["GgmlFileInvalid", "GgmlType", "GgmlTensorInfo", "GgmlModelFile", "GGML_TYPES",
           "FILE_FTYPES", "open_ggml", "expected_layout", "dequantize", "CHUNK_BLOCKS"]

_GGUF_MAGIC = b"GGUF"
QNT_VERSION = 2
"""``GGML_QNT_VERSION`` of the pinned tree: the block layout quantized files must declare."""
_QNT_FACTOR = 1000   # GGML_QNT_VERSION_FACTOR: ftype = qntvr * 1000 + ftype

# Plausible ranges: far beyond any Whisper model, small enough that a hostile count cannot
# make the reader build giant tables before the bytes run out.
_MAX_LAYERS = 256
_MAX_STATE = 1 << 16
_MAX_CTX = 1 << 20
_MAX_VOCAB = 1 << 20
_MAX_MELS = 1024
_MAX_TOKEN_BYTES = 4096
_MAX_NAME = 64          # GGML_MAX_NAME: ggml tensor names are at most 63 bytes + NUL
_N_FFT_BINS = 201       # 1 + WHISPER_N_FFT / 2: whisper.cpp's front end computes 201 bins

CHUNK_BLOCKS = 1 << 15
"""Quant blocks (or values, for f16/f32: 32 times as many) converted at a time."""


# ----------------------------------------------------------------------------- errors

class GgmlFileInvalid(ParametersInvalid):
    """A file is not a whisper.cpp ggml model this reader can trust.

    Parameters
    ----------
    path : path-like
        The file.
    problem : str
        What is wrong.
    offset : int, optional
        Byte offset of the field or record at fault.
    tensor : str, optional
        The tensor concerned.
    key : str, optional
        The header field concerned (an hparam name, ``"mel_filters"``, ``"vocab"``).

    Attributes
    ----------
    path : Path
    problem : str
    offset : int or None
    tensor : str or None
    key : str or None
    """

    def __init__(self, path: str | os.PathLike, problem: str, *, offset: int | None = None,
                 tensor: str | None = None, key: str | None = None):
        self.path, self.problem = Path(path), problem
        self.offset, self.tensor, self.key = offset, tensor, key
        where = []
        if offset is not None:
            where.append(f"byte {offset}")
        if tensor is not None:
            where.append(f"tensor {tensor!r}")
        elif key is not None:
            where.append(key)
        super().__init__(f"{self.path}: {', '.join(where) + ': ' if where else ''}{problem}")

    def __reduce__(self):
        # Batch workers send exceptions between processes; the default reduce would call
        # __init__ with the message alone.
        return (_rebuild_invalid, (str(self.path), self.problem, self.offset, self.tensor,
                                   self.key))


def _rebuild_invalid(path, problem, offset, tensor, key) -> GgmlFileInvalid:
    return GgmlFileInvalid(path, problem, offset=offset, tensor=tensor, key=key)


# ----------------------------------------------------------------------------- types

@dataclass(frozen=True)
class GgmlType:
    """A ggml tensor type this reader can dequantize.

    Attributes
    ----------
    id : int
        ``enum ggml_type`` value.
    name : str
        ggml's ``type_name`` (``"q5_0"``).
    block_size : int
        Values per block (1 for f16/f32, 32 for the quantized types).
    type_size : int
        Bytes per block.
    """

    id: int
    name: str
    block_size: int
    type_size: int

    @property
    def quantized(self) -> bool:
        """Return whether the type stores blocks of quantized values."""
        return self.block_size > 1


GGML_TYPES: Mapping[int, GgmlType] = MappingProxyType({t.id: t for t in (
    GgmlType(0, "f32", 1, 4), GgmlType(1, "f16", 1, 2),
    GgmlType(2, "q4_0", 32, 18),   # f16 d, 16 bytes of nibbles
    GgmlType(3, "q4_1", 32, 20),   # f16 d, f16 m, 16 bytes
    GgmlType(6, "q5_0", 32, 22),   # f16 d, 4 bytes of fifth bits, 16 bytes
    GgmlType(7, "q5_1", 32, 24),   # f16 d, f16 m, 4 bytes, 16 bytes
    GgmlType(8, "q8_0", 32, 34),   # f16 d, 32 int8
)})
"""The supported ggml types by id."""

# Every other ``enum ggml_type`` of the pinned ggml, only to name it in a refusal.
_OTHER_TYPES = {4: "q4_2 (removed)", 5: "q4_3 (removed)", 9: "q8_1", 10: "q2_K", 11: "q3_K",
                12: "q4_K", 13: "q5_K", 14: "q6_K", 15: "q8_K", 16: "iq2_xxs", 17: "iq2_xs",
                18: "iq3_xxs", 19: "iq1_s", 20: "iq4_nl", 21: "iq3_s", 22: "iq2_s",
                23: "iq4_xs", 24: "i8", 25: "i16", 26: "i32", 27: "i64", 28: "f64",
                29: "iq1_m", 30: "bf16", 34: "tq1_0", 35: "tq2_0", 39: "mxfp4", 40: "nvfp4",
                41: "q1_0"}

FILE_FTYPES: Mapping[int, tuple[str, int]] = MappingProxyType({
    0: ("f32", 0), 1: ("f16", 1), 2: ("q4_0", 2), 3: ("q4_1", 3), 7: ("q8_0", 8),
    8: ("q5_0", 6), 9: ("q5_1", 7)})
"""File ``ftype`` (``enum ggml_ftype``, without the quantization version) -> (name, the
ggml type of the weight matrices)."""

_OTHER_FTYPES = {4: "q4_1_some_f16", 10: "q2_K", 11: "q3_K", 12: "q4_K", 13: "q5_K",
                 14: "q6_K", 15: "iq2_xxs", 16: "iq2_xs", 17: "iq3_xxs", 18: "iq1_s",
                 19: "iq4_nl", 20: "iq3_s", 21: "iq2_s", 22: "iq4_xs", 23: "iq1_m",
                 24: "bf16", 25: "mxfp4", 26: "nvfp4", 27: "q1_0"}

_SUPPORTED = ", ".join(t.name for t in GGML_TYPES.values())


def _type_label(type_id: int) -> str:
    if type_id in GGML_TYPES:
        return GGML_TYPES[type_id].name
    return _OTHER_TYPES.get(type_id, "unknown")


# ----------------------------------------------------------------------------- results

@dataclass(frozen=True)
class GgmlTensorInfo:
    """Where one tensor of a ggml file is, and what it holds.

    Attributes
    ----------
    name : str
        whisper.cpp's tensor name.
    shape : tuple of int
        numpy order (slowest first): the ggml extents reversed.
    dims : tuple of int
        ggml order (fastest first), as stored.
    ggml_type : int
        ``enum ggml_type`` id.
    type_name : str
        ``"f16"``, ``"q5_0"`` ...
    header_offset : int
        Byte offset of the tensor's record.
    offset : int
        Byte offset of its data.
    nbytes : int
        Bytes of data.
    """

    name: str
    shape: tuple[int, ...]
    dims: tuple[int, ...]
    ggml_type: int
    type_name: str
    header_offset: int
    offset: int
    nbytes: int

    @property
    def n_elements(self) -> int:
        """Return the number of values."""
        n = 1
        for d in self.dims:
            n *= d
        return n


@dataclass(frozen=True)
class GgmlModelFile:
    """A validated, memory-mapped whisper.cpp ggml model file (:func:`open_ggml`).

    Attributes
    ----------
    path : Path
        The file.
    size : int
        Its size in bytes.
    hparams : mapping
        The eleven hparams by name, ``ftype`` as stored (quantization version included).
    ftype : int
        The file type (``enum ggml_ftype``: 0 f32, 1 f16, 2 q4_0, 3 q4_1, 7 q8_0, 8 q5_0,
        9 q5_1).
    ftype_name : str
        ``"f16"``, ``"q5_0"`` ...
    qntvr : int
        Quantization version (0 for f32/f16 files, 2 for quantized ones).
    mel_filters : numpy.ndarray
        float32 ``(n_mel, n_fft)``, read-only: row ``j`` is mel band ``j``.
    vocab : tuple of bytes
        Token bytes by id, as stored.
    tensors : mapping of str to GgmlTensorInfo
        Every tensor in file order.
    """

    path: Path
    size: int
    hparams: Mapping[str, int]
    ftype: int
    ftype_name: str
    qntvr: int
    mel_filters: np.ndarray = field(repr=False)
    vocab: tuple[bytes, ...] = field(repr=False)
    tensors: Mapping[str, GgmlTensorInfo] = field(repr=False)
    _map: mmap.mmap = field(repr=False, compare=False)

    @property
    def lossy(self) -> bool:
        """Return True for a quantized file (its weights are not the model's floats)."""
        return GGML_TYPES[FILE_FTYPES[self.ftype][1]].quantized

    @cached_property
    def sha256(self) -> str:
        """Return the SHA-256 of the file's bytes (computed on first use, then kept)."""
        return sha256_file(self.path)

    def info(self, name: str) -> GgmlTensorInfo:
        """Return a tensor's record.

        Parameters
        ----------
        name : str
            whisper.cpp tensor name.

        Returns
        -------
        GgmlTensorInfo

        Raises
        ------
        verifylib.errors.ParametersInvalid
            If the file has no such tensor.
        """
        try:
            return self.tensors[name]
        except KeyError:
            raise ParametersInvalid(f"{self.path}: no tensor named {name!r}") from None

    def raw(self, name: str) -> np.ndarray:
        """Return an f16 or f32 tensor's stored values, without copying.

        Parameters
        ----------
        name : str
            whisper.cpp tensor name.

        Returns
        -------
        numpy.ndarray
            A read-only view of the mapped file (``<f2`` or ``<f4``) in numpy order.

        Raises
        ------
        verifylib.errors.ParametersInvalid
            If there is no such tensor, or it is quantized (use :meth:`tensor`).
        """
        t = self.info(name)
        if t.ggml_type not in (0, 1):
            raise ParametersInvalid(f"{self.path}: tensor {name!r} is {t.type_name}; only f16 "
                                    "and f32 tensors have a raw float view")
        dtype = np.dtype("<f4") if t.ggml_type == 0 else np.dtype("<f2")
        return np.frombuffer(self._map, dtype=dtype, count=t.n_elements,
                             offset=t.offset).reshape(t.shape)

    def tensor(self, name: str, out: np.ndarray | None = None) -> np.ndarray:
        """Return a tensor's values as float32, dequantized as ggml does.

        Parameters
        ----------
        name : str
            whisper.cpp tensor name.
        out : numpy.ndarray, optional
            C-contiguous float32 array of the tensor's size to write into.

        Returns
        -------
        numpy.ndarray
            float32 in numpy order (``info(name).shape``), a new array unless ``out``.

        Raises
        ------
        verifylib.errors.ParametersInvalid
            If there is no such tensor, or ``out`` does not fit.
        """
        t = self.info(name)
        if out is None:
            out = np.empty(t.shape, dtype=np.float32)
        elif (out.dtype != np.float32 or out.size != t.n_elements
              or not out.flags.c_contiguous or not out.flags.writeable):
            raise ParametersInvalid(f"out must be a writable C-contiguous float32 array of "
                                    f"{t.n_elements} values for {name!r}")
        flat = out.reshape(-1)
        gt = GGML_TYPES[t.ggml_type]
        n_blocks = t.n_elements // gt.block_size
        step = CHUNK_BLOCKS * (32 if gt.block_size == 1 else 1)
        for start in range(0, n_blocks, step):
            stop = min(n_blocks, start + step)
            lo, hi = t.offset + start * gt.type_size, t.offset + stop * gt.type_size
            src = np.frombuffer(self._map, dtype=np.uint8, count=hi - lo, offset=lo)
            _dequantize_into(gt, src, flat[start * gt.block_size:stop * gt.block_size])
            del src
            self._release(lo, hi)
        return out.reshape(t.shape)

    def _release(self, lo: int, hi: int) -> None:
        # Mapped pages a read touched stay in the resident set until the mapping goes; a
        # large-v3 pass would otherwise end holding the whole file. They are clean (read
        # only), so dropping them costs a re-read from the page cache at most.
        if not hasattr(self._map, "madvise") or not hasattr(mmap, "MADV_DONTNEED"):
            return
        page = mmap.PAGESIZE
        start = lo - lo % page
        end = min(self.size, hi + (-hi) % page)
        if end > start:
            try:
                self._map.madvise(mmap.MADV_DONTNEED, start, end - start)
            except (OSError, ValueError):
                pass

    def close(self) -> None:
        """Unmap the file (arrays from :meth:`raw` keep their own reference alive).

        Returns
        -------
        None
        """
        try:
            self._map.close()
        except BufferError:
            pass   # a raw() view still uses the mapping; it goes when the view does

    def __enter__(self) -> GgmlModelFile:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# ----------------------------------------------------------------------------- layout

def expected_layout(hparams: Mapping[str, int], ftype: int) -> dict[str, tuple[tuple, int]]:
    """List the tensors, extents and types a whisper.cpp file of ``ftype`` must hold.

    Parameters
    ----------
    hparams : mapping
        The eleven hparams (``ftype`` is not read from here).
    ftype : int
        File type without the quantization version (a key of :data:`FILE_FTYPES`).

    Returns
    -------
    dict
        Name -> (extents in ggml order, ggml type id), in the loader's creation order. For
        a quantized ftype, the 2-D f16 tensors of the f16 layout (weight matrices and the
        token embedding) take the quantized type; conv kernels stay f16 and the rest f32,
        as ``whisper-quantize`` leaves them.

    Raises
    ------
    KeyError
        If ``ftype`` is not a supported file type.
    """
    _, wtype = FILE_FTYPES[ftype]
    base = expected_tensors({**hparams, "ftype": 0 if ftype == 0 else 1})
    if wtype in (0, 1):
        return base
    return {name: (dims, wtype if (gtype == 1 and len(dims) == 2) else gtype)
            for name, (dims, gtype) in base.items()}


# ----------------------------------------------------------------------------- reading

class _Cursor:
    """Bounded reads from the mapping; every overrun is a truncation naming its field."""

    def __init__(self, path: Path, data: mmap.mmap, size: int):
        self.path, self.data, self.size, self.pos = path, data, size, 0

    def need(self, n: int, what: str, **where) -> int:
        start = self.pos
        if n < 0 or start + n > self.size:
            raise GgmlFileInvalid(self.path, f"truncated: {what} needs {n} bytes, "
                                  f"{self.size - start} remain", offset=start, **where)
        self.pos += n
        return start

    def ints(self, count: int, what: str, *, unsigned: bool = False, **where) -> tuple:
        start = self.need(4 * count, what, **where)
        return struct.unpack_from(f"<{count}{'I' if unsigned else 'i'}", self.data, start)


def _check_hparams(path: Path, hp: dict[str, int]) -> None:
    ranges = {"n_vocab": _MAX_VOCAB, "n_audio_ctx": _MAX_CTX, "n_audio_state": _MAX_STATE,
              "n_audio_head": _MAX_STATE, "n_audio_layer": _MAX_LAYERS, "n_text_ctx": _MAX_CTX,
              "n_text_state": _MAX_STATE, "n_text_head": _MAX_STATE,
              "n_text_layer": _MAX_LAYERS, "n_mels": _MAX_MELS}
    for i, (key, top) in enumerate(ranges.items()):
        if not 1 <= hp[key] <= top:
            raise GgmlFileInvalid(path, f"{hp[key]} is outside the plausible range 1..{top}",
                                  offset=4 + 4 * i, key=key)
    if hp["n_text_state"] != hp["n_audio_state"]:
        # whisper_model_load asserts it (and aborts the process) rather than refusing.
        raise GgmlFileInvalid(path, f"n_text_state {hp['n_text_state']} differs from "
                              f"n_audio_state {hp['n_audio_state']}; whisper.cpp requires "
                              "them equal", offset=28, key="n_text_state")
    for side in ("audio", "text"):
        key = f"n_{side}_head"
        heads, state = hp[key], hp[f"n_{side}_state"]
        if state % heads:
            raise GgmlFileInvalid(path, f"{heads} heads do not divide n_{side}_state {state}",
                                  offset=4 + 4 * HPARAM_NAMES.index(key), key=key)


def _check_ftype(path: Path, raw: int) -> tuple[int, int]:
    qntvr, ftype = divmod(raw, _QNT_FACTOR) if raw >= 0 else (0, raw)
    known = ", ".join(f"{k} ({n})" for k, (n, _) in FILE_FTYPES.items())
    if ftype not in FILE_FTYPES:
        label = _OTHER_FTYPES.get(ftype)
        kind = f"ftype {ftype} ({label}) is not supported" if label else \
            f"unknown ftype {raw}"
        raise GgmlFileInvalid(path, f"{kind}; supported: {known}", offset=44, key="ftype")
    quantized = GGML_TYPES[FILE_FTYPES[ftype][1]].quantized
    want = QNT_VERSION if quantized else 0
    if qntvr != want:
        raise GgmlFileInvalid(path, f"ftype {raw} declares quantization version {qntvr}; a "
                              f"{FILE_FTYPES[ftype][0]} file must declare {want} (the pinned "
                              "ggml's block layout)", offset=44, key="ftype")
    return ftype, qntvr


def open_ggml(path: str | os.PathLike) -> GgmlModelFile:
    """Open, validate and memory-map a whisper.cpp ggml model file.

    The header, filters and vocabulary are read; every tensor record is checked and
    located, but no tensor data is read (see :meth:`GgmlModelFile.tensor`).

    Parameters
    ----------
    path : path-like
        The file.

    Returns
    -------
    GgmlModelFile
        The validated file; close it (or use it as a context manager) when done.

    Raises
    ------
    GgmlFileInvalid
        If the file is not exactly a whisper.cpp model of a supported type: bad magic
        (GGUF named as such), truncation anywhere, implausible hparams or sizes, a mel
        filter bank whisper.cpp cannot use, a vocabulary larger than ``n_vocab``, a tensor
        record with 0 or more than 4 dimensions, a bad name (empty, too long, not UTF-8,
        repeated), an unsupported ggml type, a row length that is not a multiple of the
        block size, a tensor the loader does not create or of another shape or type, a
        missing tensor, or bytes after the last record.
    """
    path = Path(path)
    try:
        size = path.stat().st_size
        fh = open(path, "rb")
    except OSError as exc:
        raise GgmlFileInvalid(path, f"cannot be read ({exc.strerror or exc})") from None
    with fh:
        if size < 4:
            raise GgmlFileInvalid(path, f"truncated: {size} bytes, not even a magic", offset=0)
        data = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    try:
        return _parse(path, data, size)
    except BaseException:
        try:
            data.close()
        except BufferError:
            pass   # a view still alive in the traceback; the mapping goes with it
        raise


def _parse(path: Path, data: mmap.mmap, size: int) -> GgmlModelFile:
    cur = _Cursor(path, data, size)
    (magic,) = cur.ints(1, "the magic", unsigned=True)
    if magic != GGML_FILE_MAGIC:
        gguf = (" (b'GGUF': a GGUF file; whisper.cpp v1.8.5 loads legacy ggml files only)"
                if bytes(data[:4]) == _GGUF_MAGIC else "")
        raise GgmlFileInvalid(path, f"bad magic {magic:#010x}{gguf}, expected "
                              f"{GGML_FILE_MAGIC:#010x}", offset=0, key="magic")
    hp = dict(zip(HPARAM_NAMES, cur.ints(11, "the hparams", key="hparams")))
    ftype, qntvr = _check_ftype(path, hp["ftype"])
    _check_hparams(path, hp)

    at = cur.pos
    n_mel, n_fft = cur.ints(2, "the mel filter header", key="mel_filters")
    if n_mel != hp["n_mels"] or n_fft != _N_FFT_BINS:
        raise GgmlFileInvalid(path, f"mel filters are {n_mel} x {n_fft}; whisper.cpp needs "
                              f"n_mels x {_N_FFT_BINS} ({hp['n_mels']} x {_N_FFT_BINS})",
                              offset=at, key="mel_filters")
    at = cur.need(4 * n_mel * n_fft, "the mel filters", key="mel_filters")
    mel = np.frombuffer(data, dtype="<f4", count=n_mel * n_fft, offset=at)
    mel = mel.astype(np.float32).reshape(n_mel, n_fft)
    if not np.isfinite(mel).all():
        raise GgmlFileInvalid(path, "mel filters hold NaN or infinite values", offset=at,
                              key="mel_filters")
    mel.flags.writeable = False

    at = cur.pos
    (n_tokens,) = cur.ints(1, "the vocabulary size", key="vocab")
    if not 0 <= n_tokens <= hp["n_vocab"]:
        raise GgmlFileInvalid(path, f"{n_tokens} vocabulary entries for n_vocab "
                              f"{hp['n_vocab']}", offset=at, key="vocab")
    vocab = []
    for i in range(n_tokens):
        at = cur.pos
        (n,) = cur.ints(1, f"the length of token {i}", key="vocab")
        if not 0 <= n <= _MAX_TOKEN_BYTES:
            raise GgmlFileInvalid(path, f"token {i} claims {n} bytes (at most "
                                  f"{_MAX_TOKEN_BYTES})", offset=at, key="vocab")
        start = cur.need(n, f"token {i}", key="vocab")
        vocab.append(bytes(data[start:start + n]))

    layout = expected_layout(hp, ftype)
    tensors: dict[str, GgmlTensorInfo] = {}
    while cur.pos < size:
        info = _read_record(cur, layout, tensors)
        tensors[info.name] = info
    missing = [n for n in layout if n not in tensors]
    if missing:
        more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
        raise GgmlFileInvalid(path, f"{len(missing)} tensors whisper.cpp loads are missing: "
                              f"{', '.join(missing[:5])}{more}", offset=size)
    return GgmlModelFile(path=path, size=size, hparams=MappingProxyType(hp), ftype=ftype,
                         ftype_name=FILE_FTYPES[ftype][0], qntvr=qntvr, mel_filters=mel,
                         vocab=tuple(vocab), tensors=MappingProxyType(tensors), _map=data)


def _read_record(cur: _Cursor, layout: Mapping[str, tuple[tuple, int]],
                 seen: Mapping[str, GgmlTensorInfo]) -> GgmlTensorInfo:
    path, start = cur.path, cur.pos
    n_dims, name_len, gtype = cur.ints(3, "a tensor header")
    if not 1 <= n_dims <= 4:
        raise GgmlFileInvalid(path, f"tensor record has {n_dims} dimensions (1 to 4)",
                              offset=start)
    dims = cur.ints(n_dims, "tensor extents")
    if not 1 <= name_len <= _MAX_NAME - 1:
        raise GgmlFileInvalid(path, f"tensor name length {name_len} (1 to {_MAX_NAME - 1} "
                              "bytes)", offset=start)
    at = cur.need(name_len, "a tensor name")
    try:
        name = bytes(cur.data[at:at + name_len]).decode("utf-8")
    except UnicodeDecodeError:
        raise GgmlFileInvalid(path, f"tensor name {bytes(cur.data[at:at + name_len])!r} is "
                              "not UTF-8", offset=start) from None
    where = {"offset": start, "tensor": name}
    if name in seen:
        raise GgmlFileInvalid(path, f"appears twice (first at byte "
                              f"{seen[name].header_offset})", **where)
    if any(d < 1 for d in dims):
        raise GgmlFileInvalid(path, f"extents {tuple(dims)} (each must be at least 1)",
                              **where)
    if gtype not in GGML_TYPES:
        raise GgmlFileInvalid(path, f"ggml type {gtype} ({_type_label(gtype)}) is not "
                              f"supported; supported: {_SUPPORTED}", **where)
    gt = GGML_TYPES[gtype]
    if dims[0] % gt.block_size:
        raise GgmlFileInvalid(path, f"row length {dims[0]} is not a multiple of the "
                              f"{gt.name} block size {gt.block_size}", **where)
    if name not in layout:
        raise GgmlFileInvalid(path, "whisper.cpp's loader does not create this tensor "
                              "(an unexpected tensor)", **where)
    want_dims, want_type = layout[name]
    if tuple(dims) != tuple(want_dims):
        raise GgmlFileInvalid(path, f"extents {tuple(dims)} (ggml order), expected "
                              f"{tuple(want_dims)} for these hparams", **where)
    if gtype != want_type:
        raise GgmlFileInvalid(path, f"stored as {gt.name}, expected {_type_label(want_type)} "
                              "in a file of this ftype", **where)
    n = 1
    for d in dims:
        n *= d
    nbytes = n // gt.block_size * gt.type_size
    data_at = cur.need(nbytes, "the tensor data", tensor=name)
    return GgmlTensorInfo(name=name, shape=tuple(reversed(dims)), dims=tuple(dims),
                          ggml_type=gtype, type_name=gt.name, header_offset=start,
                          offset=data_at, nbytes=nbytes)


# ----------------------------------------------------------------------------- dequantize

def _block_dtype(gt: GgmlType) -> np.dtype:
    fields: list[tuple] = [("d", "<f2")]
    if gt.name in ("q4_1", "q5_1"):
        fields.append(("m", "<f2"))
    if gt.name in ("q5_0", "q5_1"):
        fields.append(("qh", "<u4"))     # uint8 qh[4], read as memcpy to uint32 does
    fields.append(("qs", "i1", 32) if gt.name == "q8_0" else ("qs", "u1", 16))
    dt = np.dtype(fields)
    assert dt.itemsize == gt.type_size, gt
    return dt


_BIT_SHIFTS = np.arange(32, dtype=np.uint32)


def _dequantize_into(gt: GgmlType, src: np.ndarray, dst: np.ndarray) -> None:
    """Dequantize whole blocks of ``src`` (uint8) into ``dst`` (float32, same count)."""
    if gt.name == "f32":
        dst[:] = src.view("<f4")
        return
    if gt.name == "f16":
        dst[:] = src.view("<f2")
        return
    blocks = src.view(_block_dtype(gt))
    n = blocks.shape[0]
    y = dst.reshape(n, 32)
    # d (and m) widened from f16 exactly, as GGML_FP16_TO_FP32 does.
    d = blocks["d"].astype(np.float32)[:, None]
    if gt.name == "q8_0":
        np.multiply(blocks["qs"], d, out=y, dtype=np.float32)
        return
    qs = blocks["qs"]
    q = np.empty((n, 32), dtype=np.uint8)
    np.bitwise_and(qs, 0x0F, out=q[:, :16])     # low nibbles: values 0..15
    np.right_shift(qs, 4, out=q[:, 16:])        # high nibbles: values 16..31
    if gt.name in ("q5_0", "q5_1"):
        # Value j's fifth bit is bit j of qh (xh_0 for j < 16, xh_1 for j + 16).
        bits = (blocks["qh"][:, None] >> _BIT_SHIFTS) & 1
        q |= (bits.astype(np.uint8) << 4)
    if gt.name in ("q4_0", "q5_0"):
        offset = 8 if gt.name == "q4_0" else 16
        signed = q.view(np.int8)                 # 0..31 fit; then centre as ggml does
        np.subtract(signed, offset, out=signed)
        np.multiply(signed, d, out=y, dtype=np.float32)
        return
    m = blocks["m"].astype(np.float32)[:, None]
    np.multiply(q, d, out=y, dtype=np.float32)   # x*d, rounded, then + m, rounded
    np.add(y, m, out=y)


def dequantize(data: bytes | memoryview | np.ndarray, ggml_type: int | str,
               count: int) -> np.ndarray:
    """Dequantize ``count`` values of one ggml type, as ggml's ``to_float`` does.

    Parameters
    ----------
    data : bytes-like or numpy.ndarray
        At least the ``count / block_size`` blocks' bytes.
    ggml_type : int or str
        A supported type, by id (``6``) or name (``"q5_0"``).
    count : int
        Values to produce; a multiple of the type's block size.

    Returns
    -------
    numpy.ndarray
        1-D float32 of ``count`` values.

    Raises
    ------
    verifylib.errors.ParametersInvalid
        If the type is not supported, ``count`` is not whole blocks, or ``data`` is short.
    """
    by_name = {t.name: t for t in GGML_TYPES.values()}
    gt = GGML_TYPES.get(ggml_type) if isinstance(ggml_type, int) else by_name.get(ggml_type)
    if gt is None:
        raise ParametersInvalid(f"ggml type {ggml_type!r} is not supported; supported: "
                                f"{_SUPPORTED}")
    if count < 0 or count % gt.block_size:
        raise ParametersInvalid(f"{count} values are not whole {gt.name} blocks of "
                                f"{gt.block_size}")
    raw = np.frombuffer(data, dtype=np.uint8) if not isinstance(data, np.ndarray) else \
        data.reshape(-1).view(np.uint8)
    need = count // gt.block_size * gt.type_size
    if raw.size < need:
        raise ParametersInvalid(f"{count} {gt.name} values need {need} bytes, got {raw.size}")
    out = np.empty(count, dtype=np.float32)
    step = CHUNK_BLOCKS * gt.block_size * (32 if gt.block_size == 1 else 1)
    for start in range(0, count, step):
        stop = min(count, start + step)
        lo = start // gt.block_size * gt.type_size
        hi = stop // gt.block_size * gt.type_size
        _dequantize_into(gt, raw[lo:hi], out[start:stop])
    return out
