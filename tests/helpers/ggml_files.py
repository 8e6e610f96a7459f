"""Synthetic whisper.cpp ggml files, written byte by byte (no verifylib writer involved),
for the reader's and the importer's unit tests: a valid file of any supported ftype, and
the pieces to break one."""

from __future__ import annotations

import struct
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from verifylib.models.ggml_file import GGML_TYPES, expected_layout

MAGIC = 0x67676D6C
HPARAMS = ("n_vocab", "n_audio_ctx", "n_audio_state", "n_audio_head", "n_audio_layer",
           "n_text_ctx", "n_text_state", "n_text_head", "n_text_layer", "n_mels", "ftype")
RAW_FTYPE = {"f32": 0, "f16": 1, "q4_0": 2002, "q4_1": 2003, "q8_0": 2007, "q5_0": 2008,
             "q5_1": 2009}
"""The stored ftype of each supported file type (quantized ones carry version 2)."""


def small_hparams(**kw) -> dict:
    """Hparams of a tiny model whose rows are whole quant blocks (state 32)."""
    hp = dict(n_vocab=64, n_audio_ctx=6, n_audio_state=32, n_audio_head=2, n_audio_layer=1,
              n_text_ctx=5, n_text_state=32, n_text_head=2, n_text_layer=1, n_mels=4, ftype=1)
    hp.update(kw)
    return hp


@dataclass(frozen=True)
class Record:
    """One tensor record; every field may be set to something hostile."""

    name: str
    dims: tuple
    gtype: int
    data: bytes
    n_dims: int | None = None          # default: len(dims)
    name_bytes: bytes | None = None    # default: name in UTF-8
    name_len: int | None = None        # default: len(name_bytes)

    def to_bytes(self) -> bytes:
        raw = self.name.encode("utf-8") if self.name_bytes is None else self.name_bytes
        n_dims = len(self.dims) if self.n_dims is None else self.n_dims
        n_len = len(raw) if self.name_len is None else self.name_len
        return (struct.pack("<iii", n_dims, n_len, self.gtype)
                + struct.pack(f"<{len(self.dims)}i", *self.dims) + raw + self.data)


def random_payload(gtype: int, n: int, rng: np.random.Generator) -> bytes:
    """Random but finite stored bytes for ``n`` values of a ggml type."""
    gt = GGML_TYPES[gtype]
    if gtype == 0:
        return rng.standard_normal(n).astype("<f4").tobytes()
    if gtype == 1:
        return rng.standard_normal(n).astype("<f2").tobytes()
    blocks = n // gt.block_size
    raw = rng.integers(0, 256, size=(blocks, gt.type_size), dtype=np.uint8)
    scales = (rng.random((blocks, 2)) * 0.1 - 0.05).astype("<f2")   # finite d (and m)
    n_scales = 2 if gt.name in ("q4_1", "q5_1") else 1
    raw[:, :2 * n_scales] = scales[:, :n_scales].view(np.uint8).reshape(blocks, -1)
    return raw.tobytes()


def records(hp: dict, ftype_name: str, rng: np.random.Generator | None = None,
            values: dict | None = None) -> list[Record]:
    """Every tensor the loader expects, in its order, with random data (or ``values``:
    name -> float array in numpy order, stored as the layout's f16/f32 type)."""
    rng = rng or np.random.default_rng(0)
    ftype = RAW_FTYPE[ftype_name] % 1000
    out = []
    for name, (dims, gtype) in expected_layout(hp, ftype).items():
        n = int(np.prod(dims))
        if values is not None and name in values:
            arr = np.asarray(values[name], dtype=np.float32).reshape(tuple(reversed(dims)))
            data = arr.astype("<f4" if gtype == 0 else "<f2").tobytes()
        else:
            data = random_payload(gtype, n, rng)
        out.append(Record(name, tuple(dims), gtype, data))
    return out


def byte_vocab(n: int) -> list[bytes]:
    """``n`` distinct tokens: the 256 single bytes, then short multi-byte tokens (the
    first few of them real merges of two earlier tokens)."""
    toks = [bytes([b]) for b in range(min(n, 256))]
    merges = [b" t", b" a", b"he", b" the", b"in"]
    for m in merges:
        if len(toks) < n:
            toks.append(m)
    i = 0
    while len(toks) < n:
        toks.append(b"\xff\xfe" + i.to_bytes(3, "little"))   # unreachable by merges
        i += 1
    return toks


def slaney_like_filters(n_mel: int, n_fft: int = 201) -> np.ndarray:
    """A deterministic, non-negative float32 filter bank (not HF's own, on purpose)."""
    rng = np.random.default_rng(7)
    return (rng.random((n_mel, n_fft)) * 0.01).astype(np.float32)


def header(hp: dict, *, magic: int = MAGIC, mel: np.ndarray | None = None,
           mel_shape: tuple | None = None, vocab: list[bytes] | None = None,
           vocab_count: int | None = None) -> bytes:
    """Magic, hparams, filters and vocabulary."""
    mel = slaney_like_filters(hp["n_mels"]) if mel is None else mel
    shape = mel.shape if mel_shape is None else mel_shape
    vocab = byte_vocab(min(hp["n_vocab"], 300)) if vocab is None else vocab
    out = [struct.pack("<I", magic), struct.pack("<11i", *(hp[k] for k in HPARAMS)),
           struct.pack("<ii", *shape), mel.astype("<f4").tobytes(),
           struct.pack("<i", len(vocab) if vocab_count is None else vocab_count)]
    for tok in vocab:
        out.append(struct.pack("<i", len(tok)) + tok)
    return b"".join(out)


def write(path: Path, hp: dict, recs: list[Record] | None = None, *, tail: bytes = b"",
          **header_kw) -> Path:
    """Write a complete file (``recs`` default: a valid set for ``hp``'s ftype)."""
    if recs is None:
        name = next(k for k, v in RAW_FTYPE.items() if v == hp["ftype"])
        recs = records(hp, name)
    path.write_bytes(header(hp, **header_kw) + b"".join(r.to_bytes() for r in recs) + tail)
    return path


def edit(recs: list[Record], which: str, **changes) -> list[Record]:
    """A copy of ``recs`` with record ``which``'s fields changed."""
    return [replace(r, **changes) if r.name == which else r for r in recs]
