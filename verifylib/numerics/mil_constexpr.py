"""The ``constexpr_*`` operations of an ML program: compressed weights decompressed.

Numpy kernels, one per ``constexpr_*`` type (affine dequantization, casts, look-up tables,
sparse masks, block-wise shift and scale, and their combinations), each giving its outputs
in their declared dtypes, and :func:`unpack_bits`, the blob writer's bit layout read back.
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np

from verifylib.numerics.mil_ops import MilExecError, as_ints, as_scalar

# ----------------------------------------------------------------------------- constexpr

def unpack_bits(packed, nbits: int, count: int, signed: bool = False) -> np.ndarray:
    """Unpack ``count`` integers of ``nbits`` bits each, packed from the least significant bit.

    This is the MIL blob layout of sub-byte types (and of iOS 16's packed LUT indices and
    sparsity masks): one little-endian bit stream, element 0 in the lowest bits of byte 0,
    an element split across two bytes continuing in the next byte's lowest bits.

    Parameters
    ----------
    packed : array-like of uint8
        The packed bytes (at least ``ceil(count * nbits / 8)``).
    nbits : int
        Bits per element, 1 to 8.
    count : int
        Number of elements.
    signed : bool
        Two's complement elements (``int4``).

    Returns
    -------
    numpy.ndarray
        ``count`` values, ``int8`` if ``signed`` else ``uint8``.

    Raises
    ------
    MilExecError
        If ``packed`` holds fewer bits than asked for, or ``nbits`` is not 1 to 8.
    """
    raw = np.asarray(packed, dtype=np.uint8).reshape(-1)
    if not 1 <= nbits <= 8:
        raise MilExecError(f"cannot unpack {nbits}-bit elements")
    if raw.size * 8 < count * nbits:
        raise MilExecError(f"{raw.size} bytes hold fewer than {count} {nbits}-bit elements")
    if nbits == 8:
        vals = raw[:count].copy()
    elif 8 % nbits == 0:
        shifts = np.arange(0, 8, nbits, dtype=np.uint8)
        vals = ((raw[:, None] >> shifts) & ((1 << nbits) - 1)).reshape(-1)[:count]
    else:
        bits = np.unpackbits(raw, bitorder="little")[: count * nbits].reshape(count, nbits)
        vals = np.zeros(count, dtype=np.uint8)
        for k in range(nbits):
            vals |= (bits[:, k] << k).astype(np.uint8)
    vals = vals.astype(np.uint8, copy=False)
    if not signed:
        return vals
    wide = vals.astype(np.int16)
    wide[wide >= 1 << (nbits - 1)] -= 1 << nbits
    return wide.astype(np.int8)


def _per_axis(v: np.ndarray, rank: int, axis: int) -> np.ndarray:
    """Shape a scalar or a vector along ``axis`` to broadcast against rank-``rank`` data."""
    v = np.asarray(v)
    if v.ndim == 0:
        return v
    shape = [1] * rank
    shape[axis] = v.size
    return v.reshape(shape)


def _blocks(v: np.ndarray, shape: tuple) -> np.ndarray:
    """Repeat each entry of ``v`` over its block: block size = shape[i] / v.shape[i]."""
    for i, (n, m) in enumerate(zip(shape, v.shape)):
        if m == 0 or n % m:
            raise MilExecError(f"{m} blocks do not divide dimension {i} of size {n}")
        if n != m:
            v = np.repeat(v, n // m, axis=i)
    return v


def _cx_affine_dequantize(a: dict) -> tuple:
    q = np.asarray(a["quantized_data"])
    scale = np.asarray(a["scale"])
    axis = int(as_scalar(a["axis"])) % q.ndim
    zp = _per_axis(np.asarray(a["zero_point"]), q.ndim, axis)
    # scale * (q - zero_point), in the scale's dtype (the output's, reference). q - zp is
    # exact in it for 8-bit data, so one rounding happens, at the product.
    dt = scale.dtype
    return ((q.astype(dt) - zp.astype(dt)) * _per_axis(scale, q.ndim, axis),)


def _cx_cast(a: dict) -> tuple:
    target = str(as_scalar(a["output_dtype"]))
    if target != "fp32":
        raise MilExecError(f"constexpr_cast to {target!r} is not supported (fp32)")
    return (np.asarray(a["source_val"]).astype(np.float32),)


def _lut_lookup(indices: np.ndarray, lut: np.ndarray, vector_axis) -> np.ndarray:
    """Look indices up in per-block LUTs ``[*blocks, 2**nbits, VECTOR_SIZE]`` (iOS 18)."""
    rank = indices.ndim
    if lut.ndim != rank + 2:
        raise MilExecError(f"lut of rank {lut.ndim} for indices of rank {rank}")
    grid = []
    for i, (n, g) in enumerate(zip(indices.shape, lut.shape[:rank])):
        if g == 0 or n % g:
            raise MilExecError(f"{g} LUT blocks do not divide dimension {i} of size {n}")
        shape = [1] * rank
        shape[i] = n
        grid.append((np.arange(n) // (n // g)).reshape(shape))
    vals = lut[tuple(grid) + (indices.astype(np.int64),)]  # indices.shape + (VECTOR_SIZE,)
    vs = lut.shape[-1]
    if vs == 1:
        return vals[..., 0]
    if vector_axis is None:
        raise MilExecError("vector palettization (VECTOR_SIZE > 1) needs vector_axis")
    ax = int(vector_axis) % rank
    # Each index fills VECTOR_SIZE consecutive elements along vector_axis.
    vals = np.moveaxis(vals, -1, ax + 1)
    shape = list(indices.shape)
    shape[ax] *= vs
    return vals.reshape(shape)


def _cx_lut_to_dense(a: dict) -> tuple:
    lut = np.asarray(a["lut"])
    if "shape" in a:
        # iOS 16: one LUT of 2**nbits entries, indices packed into a uint8 vector.
        shape = tuple(as_ints(a["shape"]))
        nbits = int(round(math.log2(lut.size)))
        if lut.ndim != 1 or 1 << nbits != lut.size:
            raise MilExecError(f"constexpr_lut_to_dense: a LUT of {lut.size} entries")
        count = int(np.prod(shape, dtype=np.int64))
        idx = unpack_bits(a["indices"], nbits, count)
        return (lut[idx.astype(np.int64)].reshape(shape),)
    vector_axis = as_scalar(a["vector_axis"]) if a.get("vector_axis") is not None else None
    return (_lut_lookup(np.asarray(a["indices"]), lut, vector_axis),)


def _scatter(nonzero: np.ndarray, mask: np.ndarray) -> np.ndarray:
    nonzero = np.asarray(nonzero).reshape(-1)
    keep = mask != 0
    if int(keep.sum()) != nonzero.size:
        raise MilExecError(f"sparse mask sets {int(keep.sum())} elements, nonzero_data has "
                           f"{nonzero.size}")
    out = np.zeros(mask.shape, dtype=nonzero.dtype)
    out[keep] = nonzero  # row-major order of the set bits
    return out


def _cx_sparse_to_dense(a: dict) -> tuple:
    if "shape" in a:
        # iOS 16: the mask is a bit vector packed into uint8.
        shape = tuple(as_ints(a["shape"]))
        count = int(np.prod(shape, dtype=np.int64))
        mask = unpack_bits(a["mask"], 1, count).reshape(shape)
    else:
        mask = np.asarray(a["mask"])
    return (_scatter(a["nonzero_data"], mask),)


def _shift_scale(data: np.ndarray, scale: np.ndarray, offset) -> np.ndarray:
    if data.ndim != scale.ndim:
        raise MilExecError(f"data of rank {data.ndim} with scale of rank {scale.ndim}")
    # scale * (data - offset) in the scale's dtype (the output's, reference), each step
    # rounded to it as that dtype's arithmetic would.
    dt = scale.dtype
    out = data.astype(dt)
    if offset is not None:
        out = out - _blocks(np.asarray(offset), data.shape).astype(dt)
    return _blocks(scale, data.shape) * out


def _cx_blockwise_shift_scale(a: dict) -> tuple:
    return (_shift_scale(np.asarray(a["data"]), np.asarray(a["scale"]), a.get("offset")),)


def _cx_lut_to_sparse(a: dict) -> tuple:
    mask = np.asarray(a["indices_mask"])
    lut = np.asarray(a["lut"])
    vector_axis = as_scalar(a["vector_axis"]) if a.get("vector_axis") is not None else None
    dense = _lut_lookup(_scatter(a["indices_nonzero_data"], mask), lut, vector_axis)
    if lut.shape[-1] > 1:
        mask = np.repeat(mask, lut.shape[-1], axis=int(vector_axis) % mask.ndim)
    return mask, dense[mask != 0]


def _cx_sparse_blockwise_shift_scale(a: dict) -> tuple:
    mask = np.asarray(a["data_mask"])
    dense = _shift_scale(_scatter(a["nonzero_data"], mask), np.asarray(a["scale"]),
                         a.get("offset"))
    return mask, dense[mask != 0]


CONSTEXPR_KERNELS: dict[str, Callable[[dict], tuple]] = {
    "constexpr_affine_dequantize": _cx_affine_dequantize,
    "constexpr_cast": _cx_cast,
    "constexpr_lut_to_dense": _cx_lut_to_dense,
    "constexpr_sparse_to_dense": _cx_sparse_to_dense,
    "constexpr_blockwise_shift_scale": _cx_blockwise_shift_scale,
    "constexpr_lut_to_sparse": _cx_lut_to_sparse,
    "constexpr_sparse_blockwise_shift_scale": _cx_sparse_blockwise_shift_scale,
}
"""``constexpr_*`` operation type -> numpy decompression ``(arguments) -> tuple of arrays``
(one array per output, in the output's declared dtype)."""
