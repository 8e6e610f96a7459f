"""The kernels of the MIL operations :mod:`verifylib.numerics.mil_exec` executes.

Each compute kernel takes an operation's arguments (parameter name -> torch tensor, numpy
value, Python scalar or string; a tuple parameter as a list) and the compute mode, and
returns the operation's output tensor(s), computed with torch CPU kernels in the mode's
float dtype. Integer values are held as ``int64`` tensors and booleans as ``bool`` ones,
whatever width the program declares, since no kernel here does arithmetic whose result
depends on the width (a ``cast`` to a narrow integer type wraps as that type would).

The semantics are those of the MIL operation reference, i.e. the docstrings and type
inference of coremltools' op definitions (``coremltools.converters.mil.mil.ops.defs``,
iOS 15 to iOS 18 opsets); where two opsets define an operation differently the kernel
accepts both forms (``reshape``'s ``0``, the two ``constexpr_lut_to_dense`` signatures).
Where the reference leaves a case open, the comment at the kernel says which reading is
taken and why. ``tests/unit/test_mil_ops.py`` checks every kernel against coremltools'
own numpy ``value_inference`` of the op, or, for the ops that have none, against a numpy
reference written from the op's documentation.

The ``constexpr_*`` kernels (:data:`CONSTEXPR_KERNELS`) are numpy functions instead:
they decompress weights stored compressed (palettized, linearly quantized, sparse) into
the dense tensor the program declares, once per execution, in the declared dtype, so the
dense weight is the one Core ML would hold, and a float64 execution widens it exactly.
"""

from __future__ import annotations

import math
import operator
from typing import Any, Callable

import numpy as np

from verifylib.errors import ExportFailure


class MilExecError(ExportFailure):
    """The program cannot be loaded or executed as written."""


def torch_dtype(compute: str):
    """Return the torch float dtype of a compute mode.

    Parameters
    ----------
    compute : {"float32", "float64"}
        The compute mode.

    Returns
    -------
    torch.dtype
        ``torch.float32`` or ``torch.float64``.
    """
    import torch
    return {"float32": torch.float32, "float64": torch.float64}[compute]


def as_tensor(v, compute: str):
    """Return a value as a tensor: floats in the compute dtype, ints int64, bools bool.

    Parameters
    ----------
    v : torch.Tensor, numpy array or scalar
        The value (a tensor is returned as it is).
    compute : {"float32", "float64"}
        The compute mode.

    Returns
    -------
    torch.Tensor

    Raises
    ------
    MilExecError
        If the value is not numeric (a string, say).
    """
    import torch
    if isinstance(v, torch.Tensor):
        return v
    a = np.asarray(v)
    if a.dtype.kind == "f":
        return torch.as_tensor(a).to(torch_dtype(compute))
    if a.dtype.kind in "iu":
        return torch.as_tensor(a.astype(np.int64, copy=False))
    if a.dtype.kind == "b":
        return torch.as_tensor(a)
    raise MilExecError(f"a value of dtype {a.dtype} cannot be a tensor operand")


def _numpy(v) -> np.ndarray:
    if hasattr(v, "detach"):
        return v.detach().cpu().numpy()
    return np.asarray(v)


def as_ints(v) -> list[int]:
    """Return a parameter's values as a flat list of Python ints."""
    return [int(x) for x in _numpy(v).reshape(-1).tolist()]


def as_scalar(v):
    """Return a one-element parameter as a Python scalar (refused otherwise)."""
    a = _numpy(v)
    if a.size != 1:
        raise MilExecError(f"expected a scalar parameter, got shape {a.shape}")
    return a.reshape(-1)[0].item()


def _int(a, name: str, default: int) -> int:
    return int(as_scalar(a[name])) if name in a else default


def _float(a, name: str, default: float) -> float:
    return float(as_scalar(a[name])) if name in a else default


def _flag(a, name: str, default: bool = False) -> bool:
    return bool(as_scalar(a[name])) if name in a else default


def _str(a, name: str, default: str) -> str:
    return str(as_scalar(a[name])) if name in a else default


def _flags(a, name: str, rank: int) -> list[bool]:
    if name not in a:
        return [False] * rank
    return [bool(x) for x in _numpy(a[name]).reshape(-1).tolist()]


def _seq(v) -> list:
    """Return a tuple parameter as a list (one bound value arrives unwrapped)."""
    return list(v) if isinstance(v, (list, tuple)) else [v]


def _axis(axis: int, rank: int, what: str) -> int:
    if not -rank <= axis < rank:
        raise MilExecError(f"{what}: axis {axis} is out of range for rank {rank}")
    return axis % rank


# ----------------------------------------------------------------------------- linear algebra

def _op_linear(a, compute):
    import torch.nn.functional as F
    return F.linear(a["x"], a["weight"], a.get("bias"))


def _op_matmul(a, compute):
    import torch
    x, y = as_tensor(a["x"], compute), as_tensor(a["y"], compute)
    # The flags have no effect on a 1-D operand (reference); matmul's 1-D promotion rules
    # are numpy's, which torch.matmul follows.
    if _flag(a, "transpose_x") and x.dim() >= 2:
        x = x.transpose(-1, -2)
    if _flag(a, "transpose_y") and y.dim() >= 2:
        y = y.transpose(-1, -2)
    return torch.matmul(x, y)


def _parse_einsum(equation: str) -> tuple[list[str], str]:
    eq = equation.replace(" ", "")
    if "->" not in eq or "." in eq:
        raise MilExecError(f"einsum equation {equation!r}: an explicit output without "
                           "ellipsis is expected")
    lhs, out = eq.split("->")
    return lhs.split(","), out


def _op_einsum(a, compute):
    import torch
    values = [as_tensor(v, compute) for v in _seq(a["values"])]
    equation = _str(a, "equation", "")
    terms, _ = _parse_einsum(equation)
    if len(terms) != len(values) or any(len(t) != v.dim() for t, v in zip(terms, values)):
        raise MilExecError(f"einsum equation {equation!r} does not fit operands of ranks "
                           f"{[v.dim() for v in values]}")
    # The reference broadcasts a size-1 batch dimension of one operand against the other;
    # expanding every label to its largest size does that for any equation.
    size: dict[str, int] = {}
    for t, v in zip(terms, values):
        for label, n in zip(t, v.shape):
            size[label] = max(size.get(label, 1), int(n))
    values = [v.expand(*[size[label] for label in t]) for t, v in zip(terms, values)]
    return torch.einsum(equation.replace(" ", ""), *values)


def _same_padding(pad_type: str, spatial: list[int], kernel: list[int], strides: list[int],
                  dil: list[int]) -> list[int]:
    # Total padding makes d_out = ceil(d_in / stride) (reference). Its odd unit goes after
    # the data for "same" and before it for "same_lower": the reference's description
    # ("same_lower ... extra rows/cols on the top/left") and the BOTTOM_RIGHT_HEAVY /
    # TOP_LEFT_HEAVY modes coremltools maps the two to; its per-dimension formula only
    # restates the stride-1 case.
    pad: list[int] = []
    for i, k, s, d in zip(spatial, kernel, strides, dil):
        eff = (k - 1) * d + 1
        total = max(0, (math.ceil(i / s) - 1) * s + eff - i)
        small, big = total // 2, total - total // 2
        pad += [small, big] if pad_type == "same" else [big, small]
    return pad


def _op_conv(a, compute):
    import torch.nn.functional as F
    x, w = a["x"], a["weight"]
    nsp = x.dim() - 2
    if nsp not in (1, 2, 3):
        raise MilExecError(f"conv over {nsp} spatial dimensions is not supported (1-3)")
    strides = as_ints(a["strides"]) if "strides" in a else [1] * nsp
    dil = as_ints(a["dilations"]) if "dilations" in a else [1] * nsp
    groups = _int(a, "groups", 1)
    pad_type = _str(a, "pad_type", "valid")
    if pad_type == "valid":
        pad = [0] * (2 * nsp)
    elif pad_type == "custom":
        pad = as_ints(a["pad"]) if "pad" in a else [0] * (2 * nsp)
    elif pad_type in ("same", "same_lower"):
        pad = _same_padding(pad_type, list(x.shape[2:]), list(w.shape[2:]), strides, dil)
    else:
        raise MilExecError(f"conv pad_type {pad_type!r} is not supported "
                           "(valid, custom, same, same_lower)")
    if len(pad) != 2 * nsp:
        raise MilExecError(f"conv pad has {len(pad)} values for {nsp} spatial dimensions")
    if any(pad):
        # MIL lists (begin, end) per spatial dim from the first; F.pad wants the last first.
        tpad: list[int] = []
        for i in reversed(range(nsp)):
            tpad += [pad[2 * i], pad[2 * i + 1]]
        x = F.pad(x, tpad)
    fn = (F.conv1d, F.conv2d, F.conv3d)[nsp - 1]
    return fn(x, w, a.get("bias"), stride=strides, dilation=dil, groups=groups)


def _op_sdpa(a, compute):
    import torch
    q, k, v = (as_tensor(a[n], compute) for n in ("query", "key", "value"))
    # Written out as the reference states it (no fused kernel): softmax(Q K^T / sqrt(E) +
    # mask) V, a bool mask meaning "takes part" (False -> -inf).
    scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    if a.get("attn_mask") is not None:
        mask = as_tensor(a["attn_mask"], compute)
        if mask.dtype == torch.bool:
            mask = torch.zeros(mask.shape, dtype=scores.dtype).masked_fill(~mask,
                                                                           float("-inf"))
        scores = scores + mask
    return torch.matmul(torch.softmax(scores, dim=-1), v)


# ----------------------------------------------------------------------------- normalization

def _op_layer_norm(a, compute):
    import torch
    import torch.nn.functional as F
    x = a["x"]
    rank = x.dim()
    axes = sorted(int(i) % rank for i in as_ints(a["axes"])) if "axes" in a \
        else list(range(rank))
    eps = _float(a, "epsilon", 1e-5)
    gamma, beta = a.get("gamma"), a.get("beta")
    if axes == list(range(rank - len(axes), rank)):
        shape = [x.shape[i] for i in axes]
        return F.layer_norm(x, shape, gamma, beta, eps)
    mean = x.mean(dim=axes, keepdim=True)
    var = ((x - mean) ** 2).mean(dim=axes, keepdim=True)
    y = (x - mean) / torch.sqrt(var + eps)
    view = [x.shape[i] if i in axes else 1 for i in range(rank)]
    if gamma is not None:
        y = y * gamma.reshape(view)
    if beta is not None:
        y = y + beta.reshape(view)
    return y


def _channel_view(v, rank: int):
    return v.reshape([1, -1] + [1] * (rank - 2))


def _op_batch_norm(a, compute):
    import torch
    x = a["x"]
    rank = x.dim()
    mean, var = _channel_view(a["mean"], rank), _channel_view(a["variance"], rank)
    y = (x - mean) / torch.sqrt(var + _float(a, "epsilon", 1e-5))
    if a.get("gamma") is not None:
        y = y * _channel_view(a["gamma"], rank)
    if a.get("beta") is not None:
        y = y + _channel_view(a["beta"], rank)
    return y


def _op_instance_norm(a, compute):
    import torch
    x = a["x"]
    rank = x.dim()
    dims = list(range(2, rank))
    mean = x.mean(dim=dims, keepdim=True)
    var = ((x - mean) ** 2).mean(dim=dims, keepdim=True)
    y = (x - mean) / torch.sqrt(var + _float(a, "epsilon", 1e-5))
    if a.get("gamma") is not None:
        y = y * _channel_view(a["gamma"], rank)
    if a.get("beta") is not None:
        y = y + _channel_view(a["beta"], rank)
    return y


# ----------------------------------------------------------------------------- activations

def _op_gelu(a, compute):
    import torch
    import torch.nn.functional as F
    mode = _str(a, "mode", "EXACT")
    x = a["x"]
    if mode == "EXACT":
        return F.gelu(x)
    if mode == "TANH_APPROXIMATION":
        return F.gelu(x, approximate="tanh")
    if mode == "SIGMOID_APPROXIMATION":
        return x * torch.sigmoid(1.702 * x)
    raise MilExecError(f"gelu mode {mode!r} is not supported")


def _op_softmax(a, compute):
    import torch
    x = a["x"]
    return torch.softmax(x, dim=_axis(_int(a, "axis", -1), x.dim(), "softmax"))


def _unary(fn: Callable) -> Callable:
    def kernel(a, compute):
        return fn(as_tensor(a["x"], compute), a)
    return kernel


def _with_eps(default: float, fn: Callable) -> Callable:
    return _unary(lambda x, a: fn(x + _float(a, "epsilon", default)))


def _clip(x, a):
    return x.clamp(min=_float(a, "alpha", -math.inf), max=_float(a, "beta", math.inf))


def _leaky_relu(x, a):
    import torch
    return torch.where(x >= 0, x, x * _float(a, "alpha", 0.01))


def _silu(x, a):
    import torch.nn.functional as F
    return F.silu(x)


_UNARY: dict[str, Callable] = {
    "relu": _unary(lambda x, a: x.relu()),
    "silu": _unary(_silu),
    "sigmoid": _unary(lambda x, a: x.sigmoid()),
    "tanh": _unary(lambda x, a: x.tanh()),
    "exp": _unary(lambda x, a: x.exp()),
    "erf": _unary(lambda x, a: x.erf()),
    "sqrt": _unary(lambda x, a: x.sqrt()),
    "abs": _unary(lambda x, a: x.abs()),
    "square": _unary(lambda x, a: x * x),
    "clip": _unary(_clip),
    "leaky_relu": _unary(_leaky_relu),
    "identity": _unary(lambda x, a: x),
    # The epsilon is part of the op (reference defaults).
    "rsqrt": _with_eps(1e-12, lambda x: x.rsqrt()),
    "inverse": _with_eps(1e-4, lambda x: x.reciprocal()),
    "log": _with_eps(1e-45, lambda x: x.log()),
}


def _binary(fn: Callable) -> Callable:
    def kernel(a, compute):
        return fn(as_tensor(a["x"], compute), as_tensor(a["y"], compute))
    return kernel


def _real_div(x, y):
    if not (x.is_floating_point() or y.is_floating_point()):
        raise MilExecError("real_div of two integer tensors is not supported")
    return x / y


_BINARY: dict[str, Callable] = {
    "add": _binary(operator.add), "sub": _binary(operator.sub), "mul": _binary(operator.mul),
    "real_div": _binary(_real_div), "pow": _binary(operator.pow),
    "maximum": _binary(lambda x, y: x.maximum(y)),
    "minimum": _binary(lambda x, y: x.minimum(y)),
}


def _reduce(fn_name: str) -> Callable:
    def kernel(a, compute):
        import torch
        x = as_tensor(a["x"], compute)
        rank = x.dim()
        axes = sorted({_axis(i, rank, fn_name) for i in as_ints(a["axes"])}) \
            if a.get("axes") is not None else list(range(rank))
        keep = _flag(a, "keep_dims")
        if fn_name == "reduce_mean":
            return x.mean(dim=axes, keepdim=keep)
        if fn_name == "reduce_sum":
            return x.sum(dim=axes, keepdim=keep)
        out = x
        for ax in sorted(axes, reverse=True):  # amax/amin take several dims, keep order
            out = (torch.amax if fn_name == "reduce_max" else torch.amin)(out, dim=ax,
                                                                          keepdim=keep)
        return out
    return kernel


# ----------------------------------------------------------------------------- shapes

def _op_transpose(a, compute):
    return a["x"].permute(*as_ints(a["perm"]))


def _op_reshape(a, compute):
    x = as_tensor(a["x"], compute)
    shape = as_ints(a["shape"])
    if 0 in shape:
        # iOS 17 reading: a 0 copies the input dimension at the same position counted
        # from the right, 1 where there is none. With len(shape) == rank(x), the only case
        # iOS 15/16 allow, it is the same dimension either way.
        k, rank = len(shape), x.dim()
        shape = [s if s != 0 else (x.shape[rank - k + i] if rank - k + i >= 0 else 1)
                 for i, s in enumerate(shape)]
    return x.reshape(shape)


def _op_expand_dims(a, compute):
    x = as_tensor(a["x"], compute)
    axes = as_ints(a["axes"])
    out_rank = x.dim() + len(axes)
    for ax in sorted(_axis(i, out_rank, "expand_dims") for i in axes):
        x = x.unsqueeze(ax)
    return x


def _op_squeeze(a, compute):
    x = as_tensor(a["x"], compute)
    if a.get("axes") is None:
        return x.squeeze()
    # Non-single dimensions named in axes are left alone (reference, after PyTorch).
    axes = tuple(sorted({_axis(i, x.dim(), "squeeze") for i in as_ints(a["axes"])}))
    return x.squeeze(axes) if axes else x


def _op_concat(a, compute):
    import torch
    values = [as_tensor(v, compute) for v in _seq(a["values"])]
    axis = _axis(_int(a, "axis", 0), values[0].dim(), "concat")
    if _flag(a, "interleave"):
        stacked = torch.stack(values, dim=axis + 1)
        shape = list(values[0].shape)
        shape[axis] *= len(values)
        return stacked.reshape(shape)
    return torch.cat(values, dim=axis)


def _op_split(a, compute):
    x = as_tensor(a["x"], compute)
    axis = _axis(_int(a, "axis", 0), x.dim(), "split")
    n = x.shape[axis]
    if a.get("split_sizes") is not None:
        sizes = as_ints(a["split_sizes"])
    elif "num_splits" in a:
        k = _int(a, "num_splits", 1)
        if k <= 0 or n % k:
            raise MilExecError(f"split: {n} is not divisible into {k} even parts")
        sizes = [n // k] * k
    else:
        raise MilExecError("split needs split_sizes or num_splits")
    if sum(sizes) != n:
        raise MilExecError(f"split sizes {sizes} do not add up to dimension {n}")
    return tuple(x.split(sizes, dim=axis))


def _op_stack(a, compute):
    import torch
    values = [as_tensor(v, compute) for v in _seq(a["values"])]
    return torch.stack(values, dim=_axis(_int(a, "axis", 0), values[0].dim() + 1, "stack"))


def _op_tile(a, compute):
    x = as_tensor(a["x"], compute)
    reps = as_ints(a["reps"])
    if len(reps) != x.dim():
        raise MilExecError(f"tile: {len(reps)} reps for rank {x.dim()}")
    return x.repeat(*reps) if reps else x


def _index_along(x, dim: int, index: list[int]):
    import torch
    return x.index_select(dim, torch.tensor(index, dtype=torch.int64))


def _op_pad(a, compute):
    import torch.nn.functional as F
    x = as_tensor(a["x"], compute)
    pad = as_ints(a["pad"])
    mode = _str(a, "mode", "constant")
    if len(pad) % 2 or len(pad) // 2 > x.dim():
        raise MilExecError(f"pad: {len(pad)} values for rank {x.dim()}")
    first = x.dim() - len(pad) // 2  # pad lists (before, after) for the last N dims
    if mode == "constant":
        tpad: list[int] = []
        for i in reversed(range(len(pad) // 2)):
            tpad += [pad[2 * i], pad[2 * i + 1]]
        return F.pad(x, tpad, mode="constant", value=_float(a, "constant_val", 0.0))
    if mode not in ("reflect", "replicate"):
        raise MilExecError(f"pad mode {mode!r} is not supported")
    # Any rank and dimension, by index lists (F.pad's reflect/replicate take 2-5-D only).
    for i in range(len(pad) // 2):
        dim, before, after = first + i, pad[2 * i], pad[2 * i + 1]
        n = x.shape[dim]
        idx = list(range(-before, n + after))
        if mode == "reflect":
            if before > n - 1 or after > n - 1:
                raise MilExecError(f"pad: reflect by {before}/{after} on a dimension of {n}")
            idx = [-j if j < 0 else (2 * (n - 1) - j if j >= n else j) for j in idx]
        else:
            idx = [min(max(j, 0), n - 1) for j in idx]
        x = _index_along(x, dim, idx)
    return x


def _slice_indices(n: int, begin, end, stride: int) -> list[int]:
    return list(range(*slice(begin, end, stride).indices(n)))


def _op_slice_by_index(a, compute):
    x = as_tensor(a["x"], compute)
    rank = x.dim()
    begin, end = as_ints(a["begin"]), as_ints(a["end"])
    stride = as_ints(a["stride"]) if a.get("stride") is not None else [1] * rank
    bmask, emask = _flags(a, "begin_mask", rank), _flags(a, "end_mask", rank)
    smask = _flags(a, "squeeze_mask", rank)
    # numpy slicing, a masked bound left open (x[None:...]), which is what the reference's
    # "set begin to 0 / end to x.shape" means for a positive stride and the only reading
    # that keeps a negative stride meaningful.
    squeeze = []
    for d in range(rank):
        n = x.shape[d]
        if smask[d]:
            b = begin[d] + n if begin[d] < 0 else begin[d]
            idx = [b]
            squeeze.append(d)
        else:
            idx = _slice_indices(n, None if bmask[d] else begin[d],
                                 None if emask[d] else end[d], stride[d])
        if idx != list(range(n)):
            x = _index_along(x, d, idx)
    return x.squeeze(tuple(squeeze)) if squeeze else x


def _op_slice_by_size(a, compute):
    x = as_tensor(a["x"], compute)
    begin, size = as_ints(a["begin"]), as_ints(a["size"])
    for d, (b, s) in enumerate(zip(begin, size)):
        n = x.shape[d]
        b = b + n if b < 0 else b
        e = n if s == -1 else b + s
        if not 0 <= b <= e <= n:
            raise MilExecError(f"slice_by_size: [{b}, {e}) outside dimension {d} of size {n}")
        x = x.narrow(d, b, e - b)
    return x


def _op_gather(a, compute):
    import torch
    x = as_tensor(a["x"], compute)
    idx = as_tensor(a["indices"], compute).to(torch.int64)
    axis = _axis(_int(a, "axis", 0), x.dim(), "gather")
    batch = _int(a, "batch_dims", 0)
    n = x.shape[axis]
    # iOS 15/16 allow negative indices (iOS 17 calls them out of bounds): wrap them.
    idx = torch.where(idx < 0, idx + n, idx)
    if bool(((idx < 0) | (idx >= n)).any()):
        raise MilExecError(f"gather: an index is outside [0, {n}) on axis {axis}")
    if batch == 0:
        flat = x.index_select(axis, idx.reshape(-1))
        return flat.reshape(list(x.shape[:axis]) + list(idx.shape) + list(x.shape[axis + 1:]))
    if batch < 0 or batch > axis or tuple(x.shape[:batch]) != tuple(idx.shape[:batch]):
        raise MilExecError(f"gather: batch_dims {batch} does not fit x {tuple(x.shape)} and "
                           f"indices {tuple(idx.shape)}")
    lead = list(x.shape[:batch])
    xb = x.reshape([-1] + list(x.shape[batch:]))
    ib = idx.reshape([-1] + list(idx.shape[batch:]))
    ax = axis - batch
    parts = [xb[i].index_select(ax, ib[i].reshape(-1)).reshape(
        list(xb.shape[1:ax + 1]) + list(ib.shape[1:]) + list(xb.shape[ax + 2:]))
        for i in range(xb.shape[0])]
    out = torch.stack(parts) if parts else xb.new_empty([0])
    return out.reshape(lead + list(out.shape[1:]))


def _op_gather_along_axis(a, compute):
    import torch
    x = as_tensor(a["x"], compute)
    idx = as_tensor(a["indices"], compute).to(torch.int64)
    axis = _axis(_int(a, "axis", 0), x.dim(), "gather_along_axis")
    n = x.shape[axis]
    idx = torch.where(idx < 0, idx + n, idx)
    return torch.gather(x, axis, idx)


_INT_RANGES = {"int8": (-2 ** 7, 2 ** 8), "uint8": (0, 2 ** 8), "int16": (-2 ** 15, 2 ** 16),
               "uint16": (0, 2 ** 16), "int32": (-2 ** 31, 2 ** 32), "uint32": (0, 2 ** 32),
               "int64": (-2 ** 63, 2 ** 64)}
"""Integer cast target -> (lowest value, number of values)."""


def _op_cast(a, compute):
    import torch
    target = _str(a, "dtype", "")
    x = as_tensor(a["x"], compute)
    if target in ("fp16", "fp32", "fp64"):
        return x.to(torch_dtype(compute))  # fp16 rounding is applied by the output type
    if target in _INT_RANGES:
        # Toward zero, as numpy's astype (coremltools' folding) converts; then wrapped
        # into the target's range as that type would hold it.
        v = x.trunc().to(torch.int64) if x.is_floating_point() else x.to(torch.int64)
        lo, span = _INT_RANGES[target]
        if target != "int64":
            v = torch.remainder(v - lo, span) + lo
        return v
    if target == "bool":
        return x != 0
    raise MilExecError(f"cast to {target!r} is not supported")


KERNELS: dict[str, Callable[[dict, str], Any]] = {
    "linear": _op_linear, "matmul": _op_matmul, "einsum": _op_einsum, "conv": _op_conv,
    "scaled_dot_product_attention": _op_sdpa,
    "layer_norm": _op_layer_norm, "batch_norm": _op_batch_norm,
    "instance_norm": _op_instance_norm,
    "gelu": _op_gelu, "softmax": _op_softmax,
    **_UNARY, **_BINARY,
    "reduce_mean": _reduce("reduce_mean"), "reduce_sum": _reduce("reduce_sum"),
    "reduce_max": _reduce("reduce_max"), "reduce_min": _reduce("reduce_min"),
    "transpose": _op_transpose, "reshape": _op_reshape, "expand_dims": _op_expand_dims,
    "squeeze": _op_squeeze, "concat": _op_concat, "split": _op_split, "stack": _op_stack,
    "tile": _op_tile, "pad": _op_pad, "slice_by_index": _op_slice_by_index,
    "slice_by_size": _op_slice_by_size, "gather": _op_gather,
    "gather_along_axis": _op_gather_along_axis, "cast": _op_cast,
}
"""MIL operation type -> compute kernel ``(arguments, compute) -> tensor or tuple``."""
