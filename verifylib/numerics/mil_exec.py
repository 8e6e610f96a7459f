"""Execute a saved Core ML ML program (``.mlpackage``) op by op, on any OS.

Why this is hand-written: Core ML itself runs only on Apple platforms — coremltools 9.0's
``MLModel.predict``, ``CompiledMLModel`` and ``compile_model`` all need the macOS native
framework (docs/facts.md) — and no maintained package executes an ML program elsewhere. Yet
the question "did the conversion change the numbers?" is about the *program*, not the runtime:
if the saved program, run exactly as written, matches the Hugging Face encoder, any drift
seen on a Mac comes from the runtime. So this module executes the program literally.

What is read, and how: the program comes from the saved artifact only, never from the
torch model. coremltools opens the package (``MLModel(path, skip_model_load=True)`` reads
``Data/com.apple.CoreML/model.mlmodel``, the protobuf, and locates the weights folder),
and its MIL protobuf helpers decode types and immediate values. The weights in
``weights/weight.bin`` are memory-mapped and read as views, following the blob storage
format coremltools writes (a 64-byte metadata record per blob: sentinel ``0xDEADBEEF``,
data type, size, data offset); that part is hand-written because coremltools' reader
copies every weight (twice more in its program loader), which for a large encoder
doubles the memory parity needs. A blob of a type the view does not cover is read with
coremltools' loader. Only ``const`` operations contribute values; every other operation is computed
here, in program order, with torch CPU kernels, following the MIL operation reference
(coremltools' op documentation). An operation this module does not know stops execution
with :class:`UnsupportedOpError` naming it — nothing is skipped or approximated.

Execution modes (``compute``):

- ``"float32"``: every floating-point value is computed in float32;
- ``"float64"``: every floating-point value is computed in float64.

In both modes a value the program types as ``fp16`` (the output of an op inside an
fp16-precision program, or of a ``cast`` to fp16) is rounded to float16 right after it is
computed, as the program declares; fp16 weight constants are widened exactly. So the
fp32 program in float64 shows the program's math without float32 rounding, and the fp16
program keeps its float16 storage in both modes.

Compressed weights (``constexpr_*`` operations: palettized, linearly quantized, sparse, in
their iOS 16 and iOS 18 forms) are constants too: each is decompressed, from the stored
indices, LUTs, scales and masks (sub-byte blobs unpacked from the mapped file), into the
dense tensor of the dtype the program declares, when an op first reads it; the dense
weight is kept for that execution until its last reader has run, then dropped.

Supported operations (:data:`SUPPORTED_OPS`; kernels in :mod:`verifylib.numerics.mil_ops`):

- constants: ``const``, ``constexpr_affine_dequantize``, ``constexpr_cast``,
  ``constexpr_lut_to_dense``, ``constexpr_sparse_to_dense``,
  ``constexpr_blockwise_shift_scale``, ``constexpr_lut_to_sparse``,
  ``constexpr_sparse_blockwise_shift_scale``;
- linear algebra: ``linear``, ``matmul``, ``einsum``, ``conv`` (1-D to 3-D, groups,
  strides, dilations, ``valid``/``custom``/``same``/``same_lower`` padding),
  ``scaled_dot_product_attention``;
- normalization and activations: ``layer_norm``, ``batch_norm``, ``instance_norm``,
  ``gelu`` (all three modes), ``softmax``, ``relu``, ``silu``, ``sigmoid``, ``tanh``,
  ``leaky_relu``, ``clip``;
- element-wise: ``add``, ``sub``, ``mul``, ``real_div``, ``pow``, ``maximum``, ``minimum``,
  ``exp``, ``log``, ``erf``, ``sqrt``, ``rsqrt``, ``inverse``, ``abs``, ``square``,
  ``identity``, ``cast``;
- reductions: ``reduce_mean``, ``reduce_sum``, ``reduce_max``, ``reduce_min``;
- shapes: ``reshape``, ``transpose``, ``expand_dims``, ``squeeze``, ``concat``, ``split``,
  ``stack``, ``tile``, ``pad``, ``slice_by_index``, ``slice_by_size``, ``gather``,
  ``gather_along_axis``.

That covers this suite's export (tiny.en uses ``const``, ``linear``, ``conv``,
``layer_norm``, ``gelu``, ``softmax``, ``matmul``, ``transpose``, ``reshape``, ``add``,
``mul``; its fp16 variant adds ``cast``), both paths of whisper.cpp's
``convert-whisper-to-coreml.py`` (the ``--optimize-ane`` one adds ``einsum``, ``split``,
``concat``, ``expand_dims``, ``squeeze``), and coremltools' weight compression
(``coremltools.optimize.coreml``).
"""

from __future__ import annotations

import os
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

import numpy as np

from verifylib.errors import ParametersInvalid
from verifylib.numerics.memory import trimmed
from verifylib.numerics.mil_constexpr import CONSTEXPR_KERNELS, unpack_bits
from verifylib.numerics.mil_ops import KERNELS, MilExecError, as_tensor, torch_dtype

__all__ = ["COMPUTE_MODES", "SUPPORTED_OPS", "Execution", "MilExecError", "Op", "PackedInts",
           "Program", "Stepper", "UnsupportedOpError", "Value", "WeightFiles", "check_supported",
           "execute", "load_program"]

SUPPORTED_OPS = ("const", *CONSTEXPR_KERNELS, *KERNELS)
"""Every MIL operation type :func:`execute` implements."""

COMPUTE_MODES = ("float32", "float64")


class UnsupportedOpError(MilExecError):
    """The program holds an operation this executor does not implement.

    Attributes
    ----------
    op_type : str
        The MIL operation type, e.g. ``"silu"``.
    """

    def __init__(self, op_type: str, where: str):
        super().__init__(f"MIL operation {op_type!r} ({where}) is not supported by the "
                         f"executor; supported: {', '.join(SUPPORTED_OPS)}")
        self.op_type = op_type


@dataclass(frozen=True)
class Value:
    """A named value of the program, with its MIL dtype and shape.

    Attributes
    ----------
    name : str
        The value's name in the program.
    dtype : str
        MIL dtype (``fp32``, ``fp16``, ``int32`` ...).
    shape : tuple
        Dimensions: ints, or strings for symbolic dimensions.
    """

    name: str
    dtype: str
    shape: tuple


@dataclass(frozen=True)
class Op:
    """One operation other than ``const``: its type, inputs and outputs.

    Attributes
    ----------
    type : str
        MIL operation type.
    inputs : mapping
        Parameter name -> tuple of the value names bound to it (inline values are named
        ``<first output>::<parameter>::<k>`` and kept with the constants).
    outputs : tuple of Value
        The values it computes.
    """

    type: str
    inputs: Mapping[str, tuple[str, ...]]
    outputs: tuple[Value, ...]


@dataclass
class Program:
    """A MIL function read from a saved ``.mlpackage``.

    Attributes
    ----------
    path : Path
        The package.
    function : str
        Function name (``main``).
    inputs : tuple of Value
        Function inputs, in order.
    outputs : tuple of str
        Names of the function outputs.
    ops : tuple of Op
        Non-const operations in program order.
    consts : dict
        Value name -> constant (numpy array, numpy scalar, Python scalar or str; a blob of
        a sub-byte type is a :class:`PackedInts`, unpacked when read).
    const_dtypes : dict
        Value name -> MIL dtype of the constant.
    op_counts : dict
        Operation type -> count, ``const`` and ``constexpr_*`` included.
    specification_version : int
        The protobuf's specification version.
    constexprs : dict
        Output name -> the ``constexpr_*`` :class:`Op` computing it (compressed weights:
        constants, decompressed when executed, so not in ``ops``).
    """

    path: Path
    function: str
    inputs: tuple[Value, ...]
    outputs: tuple[str, ...]
    ops: tuple[Op, ...]
    consts: dict[str, Any]
    const_dtypes: dict[str, str]
    op_counts: dict[str, int]
    specification_version: int
    constexprs: dict[str, Op] = field(default_factory=dict)
    _tensor_cache: dict = field(default_factory=dict, repr=False)
    _weights: Any = field(default=None, repr=False)

    def producer(self) -> dict[str, Op]:
        """Map each value name to the op that computes it (constants excluded).

        Returns
        -------
        dict
            Output value name -> :class:`Op`.
        """
        return {v.name: op for op in self.ops for v in op.outputs}

    def value_types(self) -> dict[str, Value]:
        """Map each op output and function input to its :class:`Value`.

        Returns
        -------
        dict
            Value name -> :class:`Value`.
        """
        out = {v.name: v for v in self.inputs}
        out.update({v.name: v for op in self.ops for v in op.outputs})
        return out


_BLOB_SENTINEL = 0xDEADBEEF
_BLOB_DTYPES = {1: ("fp16", np.float16), 2: ("fp32", np.float32), 3: ("uint8", np.uint8),
                4: ("int8", np.int8), 6: ("int16", np.int16), 7: ("uint16", np.uint16),
                14: ("int32", np.int32), 15: ("uint32", np.uint32)}
"""MIL blob storage data type codes (``BlobDataType``) this reader maps without copying."""

_BLOB_SUB_BYTE = {8: ("int4", 4, True), 9: ("uint1", 1, False), 10: ("uint2", 2, False),
                  11: ("uint4", 4, False), 12: ("uint3", 3, False), 13: ("uint6", 6, False)}
"""Sub-byte blob codes -> (MIL dtype, bits, signed): bit-packed, read as :class:`PackedInts`.

Codes as coremltools' blob writer (``libmilstoragepython``) stores them; its packing is
least significant bit first (:func:`verifylib.numerics.mil_constexpr.unpack_bits`)."""


class PackedInts:
    """A sub-byte integer tensor stored bit-packed (a view into the mapped weight file).

    Only ``constexpr_*`` operations read such values (indices, masks, 4-bit data); the
    unpacked copy (one byte per element) is made when one reads it, for that weight only.

    Parameters
    ----------
    packed : numpy.ndarray
        The packed bytes (``uint8``).
    nbits : int
        Bits per element.
    signed : bool
        Two's complement elements (``int4``).
    shape : tuple of int
        The declared shape.
    """

    def __init__(self, packed: np.ndarray, nbits: int, signed: bool, shape: tuple):
        self.packed, self.nbits, self.signed, self.shape = packed, nbits, signed, shape
        self.ndim = len(shape)

    def __array__(self, dtype=None, copy=None):
        """Unpack (numpy's array protocol, so ``np.asarray`` works)."""
        count = int(np.prod(self.shape, dtype=np.int64))
        out = unpack_bits(self.packed, self.nbits, count, self.signed).reshape(self.shape)
        return out if dtype is None else out.astype(dtype)

    def __repr__(self) -> str:
        kind = "int" if self.signed else "uint"
        return f"PackedInts({kind}{self.nbits}, shape={self.shape})"


def _value_type(valuetype) -> tuple[str, tuple]:
    """MIL dtype name and shape of a protobuf ``ValueType``, via coremltools' own mapping."""
    from coremltools.converters.mil.frontend.milproto.helper import proto_to_types
    from coremltools.converters.mil.mil import types

    t = proto_to_types(valuetype)
    if types.is_tensor(t):
        dt, shape = t.get_primitive(), t.get_shape()
    else:
        dt, shape = t, ()
    try:
        name = types.builtin_to_string(dt)
    except Exception:  # noqa: BLE001 - lists, tuples and other non-tensor types
        name = str(dt)
    return name, tuple(int(d) if isinstance(d, (int, np.integer)) else str(d) for d in shape)


class WeightFiles:
    """The package's weight files, memory-mapped; blob values are numpy views into them.

    Why not coremltools' ``BlobReader``: it copies every weight out of its own mapping,
    and its loader copies it twice more (``np.array(...).astype(...)``), so reading a
    2.5 GB program held about 5 GB at its peak (measured on a large-v3-shaped encoder).
    A view costs no anonymous memory: the pages are the file's, read when an op uses them
    and reclaimable by the kernel. The mapping is private (copy on write), so nothing
    here can change the package, and the arrays are writable, as torch expects.
    """

    def __init__(self, weights_dir: str):
        self.dir = weights_dir
        self._maps: dict[str, Any] = {}

    def _map(self, file_name: str):
        import mmap

        name = file_name.split("/")[-1]
        if name not in self._maps:
            path = os.path.join(self.dir, name)
            with open(path, "rb") as f:
                self._maps[name] = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
        return self._maps[name]

    def view(self, blob, dtype: str, shape: tuple):
        """View the blob at ``blob.offset`` as an array of ``shape``.

        A sub-byte blob is a :class:`PackedInts` over its bytes. None when the stored type
        is not what the program declares, or the shape is symbolic (the caller then reads
        it with coremltools).
        """
        import struct

        if not all(isinstance(d, int) for d in shape):
            return None
        mm = self._map(blob.fileName)
        try:
            sentinel, code, size, data = struct.unpack_from("<IIQQ", mm, blob.offset)
        except struct.error:
            raise MilExecError(f"weight blob at offset {blob.offset} of {blob.fileName} lies "
                               "past the end of the file") from None
        if sentinel != _BLOB_SENTINEL:
            raise MilExecError(f"no blob metadata at offset {blob.offset} of {blob.fileName} "
                               f"(sentinel {sentinel:#x})")
        count = int(np.prod(shape, dtype=np.int64))
        sub = _BLOB_SUB_BYTE.get(code)
        if sub is not None and sub[0] == dtype:
            if size != -(-count * sub[1] // 8) or data + size > len(mm):
                raise MilExecError(f"weight blob at offset {blob.offset} of {blob.fileName} "
                                   f"holds {size} bytes; the program declares {dtype} "
                                   f"{list(shape)}")
            packed = np.frombuffer(mm, dtype=np.uint8, count=size, offset=data)
            return PackedInts(packed, sub[1], sub[2], tuple(shape))
        known = _BLOB_DTYPES.get(code)
        if known is None or known[0] != dtype:
            return None
        if size != count * np.dtype(known[1]).itemsize or data + size > len(mm):
            raise MilExecError(f"weight blob at offset {blob.offset} of {blob.fileName} holds "
                               f"{size} bytes; the program declares {dtype} {list(shape)}")
        return np.frombuffer(mm, dtype=known[1], count=count, offset=data).reshape(shape)


def load_program(mlpackage: str | os.PathLike, function: str = "main") -> Program:
    """Read the ML program of a saved ``.mlpackage``.

    coremltools opens a private copy (:mod:`~verifylib.models.private_package`) with
    ``MLModel(path, skip_model_load=True)``, parsing the protobuf and finding the weights
    folder; types and immediate values are decoded with its MIL protobuf helpers. Weights
    stored in the blob file are memory-mapped views (:class:`WeightFiles`) of the given
    package's files, so loading holds no copy of them; the program's structure is read
    straight from the protobuf rather than built as a coremltools program, which would
    copy every weight.

    Parameters
    ----------
    mlpackage : path-like
        The saved package (``model.mlmodel`` protobuf + ``weights/weight.bin``).
    function : str
        The function to read.

    Returns
    -------
    Program
        The function's inputs, outputs, ops in order, constants and compressed constants
        (``constexpr_*`` operations, decompressed when executed).

    Raises
    ------
    MilExecError
        If the path is not a folder, the package is not an ML program, the function or
        its opset's block is missing, an operation has nested blocks (control flow is not
        supported), or a weight blob disagrees with the type the program declares.
    """
    from coremltools.converters.mil.frontend.milproto import load as milproto

    path = Path(mlpackage)
    opened, fn, block = _open_function(path, function)
    weights = WeightFiles(opened.weights_dir)
    context = milproto.TranscriptionContext(opened.weights_dir)
    consts: dict[str, Any] = {}
    const_dtypes: dict[str, str] = {}

    def keep(name: str, value_spec) -> None:
        dtype, shape = _value_type(value_spec.type)
        if value_spec.WhichOneof("value") == "blobFileValue":
            view = weights.view(value_spec.blobFileValue, dtype, shape)
            if view is not None:
                consts[name], const_dtypes[name] = view, dtype
                return
        # Immediate values (shapes, axes, modes, small tensors) and any blob of a type
        # the view does not cover: coremltools' own decoding.
        consts[name], const_dtypes[name] = milproto._load_value(context, value_spec), dtype

    inputs = tuple(Value(v.name, *_value_type(v.type)) for v in fn.inputs)
    ops: list[Op] = []
    constexprs: dict[str, Op] = {}
    counts: Counter = Counter()
    for op in block.operations:
        counts[op.type] += 1
        if op.blocks:
            raise MilExecError(f"{path}: operation {op.type} {op.outputs[0].name!r} has "
                               "nested blocks (control flow is not supported)")
        if op.type == "const":
            (out,) = op.outputs
            keep(out.name, op.attributes["val"])
            continue
        compressed = op.type.startswith("constexpr_")
        ins = _op_inputs(op, compressed, keep)
        outs = tuple(Value(v.name, *_value_type(v.type)) for v in op.outputs)
        if compressed:
            constexprs.update({v.name: Op(op.type, ins, outs) for v in outs})
        else:
            ops.append(Op(op.type, ins, outs))
    return Program(path=path, function=function, inputs=inputs, outputs=tuple(block.outputs),
                   ops=tuple(ops), consts=consts, const_dtypes=const_dtypes,
                   op_counts=dict(sorted(counts.items())),
                   specification_version=int(opened.spec.specificationVersion),
                   constexprs=constexprs, _weights=weights)


def _open_function(path: Path, function: str):
    """Open a saved package's ML program: the opened package, the function and its block."""
    from verifylib.models.private_package import open_package

    try:  # refuses a path that is no folder, a weights folder outside the package
        opened = open_package(path)
    except (NotADirectoryError, ValueError) as exc:
        raise MilExecError(str(exc)) from None
    spec = opened.spec
    if spec.WhichOneof("Type") != "mlProgram":
        raise MilExecError(f"{path}: holds a {spec.WhichOneof('Type')!r} model, not an ML program")
    functions = spec.mlProgram.functions
    if function not in functions:
        raise MilExecError(f"{path}: no function {function!r} (has {sorted(functions)})")
    fn = functions[function]
    if fn.opset not in fn.block_specializations:
        raise MilExecError(f"{path}: function {function!r} has no block for its opset "
                           f"{fn.opset!r}")
    return opened, fn, fn.block_specializations[fn.opset]


def _op_inputs(op, compressed: bool, keep) -> dict[str, tuple[str, ...]]:
    """Return an op's parameters as value names; ``keep`` stores each inline value."""
    ins: dict[str, tuple[str, ...]] = {}
    if compressed:
        # Up to iOS 17 a constexpr op's parameters are attributes (from iOS 18, inputs).
        for pname, attr in op.attributes.items():
            if pname != "name":
                inline = f"{op.outputs[0].name}::{pname}::0"
                keep(inline, attr)
                ins[pname] = (inline,)
    for pname, arg in op.inputs.items():
        names = []
        for k, binding in enumerate(arg.arguments):
            if binding.WhichOneof("binding") == "name":
                names.append(binding.name)
            else:  # an inline value: named here, kept with the constants
                inline = f"{op.outputs[0].name}::{pname}::{k}"
                keep(inline, binding.value)
                names.append(inline)
        ins[pname] = tuple(names)
    return ins


def check_supported(program: Program) -> None:
    """Raise :class:`UnsupportedOpError` for the first operation the executor lacks.

    Parameters
    ----------
    program : Program
        The loaded program.

    Raises
    ------
    UnsupportedOpError
        Naming the first op (then the first compressed constant) whose type is not in
        :data:`SUPPORTED_OPS`.
    """
    for i, op in enumerate(program.ops):
        if op.type not in SUPPORTED_OPS:
            where = f"op #{i}, output {op.outputs[0].name!r}" if op.outputs else f"op #{i}"
            raise UnsupportedOpError(op.type, where)
    for name, op in program.constexprs.items():
        if op.type not in CONSTEXPR_KERNELS:
            raise UnsupportedOpError(op.type, f"constant {name!r}")


# ----------------------------------------------------------------------------- execution

@dataclass
class Execution:
    """What one run of a program produced.

    Attributes
    ----------
    outputs : dict
        Function output name -> numpy array (float32 or float64 by the compute mode).
    taps : dict
        Requested intermediate value name -> numpy array.
    seconds : float
        Wall time of the op-by-op execution (widening big weights to the compute dtype
        included when the dtypes differ, see :func:`_const_value`).
    compute : str
        The compute mode.
    """

    outputs: dict[str, np.ndarray]
    taps: dict[str, np.ndarray]
    seconds: float
    compute: str


_FLOAT_MIL = ("fp16", "fp32", "fp64")
_NP_FLOAT = {"fp16": np.dtype(np.float16), "fp32": np.dtype(np.float32),
             "fp64": np.dtype(np.float64)}


_CACHE_COPY_BYTES = 1 << 20
"""Widened copies up to this size are kept on the program; bigger ones are made per use."""


def _const_value(program: Program, name: str, compute: str):
    """Return a constant as the executor uses it.

    Float tensors in the compute dtype, everything else as numpy / Python values.

    Why not widen every weight once up front: for a large encoder the float64 copies of
    the weights alone are twice the program's size (5 GB for a large-v3-shaped encoder).
    So a tensor that is a view of the stored constant (same dtype) is kept, as are small
    copies (scalars, shapes); a big widened copy is made when an op reads it and dropped
    with the op's arguments.
    """
    import torch
    key = (compute, name)
    if key in program._tensor_cache:
        return program._tensor_cache[key]
    val = program.consts[name]
    dtype = program.const_dtypes.get(name, "")
    if dtype in _FLOAT_MIL and isinstance(val, (np.ndarray, np.generic, float)):
        arr = np.asarray(val)
        base = torch.as_tensor(arr)
        out = base.to(torch_dtype(compute))
        if out.data_ptr() != base.data_ptr() and out.nbytes > _CACHE_COPY_BYTES:
            return out
    else:
        out = val
    program._tensor_cache[key] = out
    return out


class Stepper:
    """One execution of a program, advanced op by op (:meth:`steps`).

    :func:`execute` drives one; :mod:`verifylib.numerics.drift` drives two in lockstep (the
    candidate arithmetic and a float64 reference) and compares every op's output as it is
    produced, so no intermediate value has to be kept.

    Parameters
    ----------
    program : Program
        From :func:`load_program`.
    feeds : mapping
        Function input name -> array of the input's shape.
    compute : {"float32", "float64"}
        Arithmetic of every floating-point value (see the module docstring).
    round_fp16 : bool
        Round values the program types as ``fp16`` to float16 (the default: the program
        as written). ``False`` computes the same math without that rounding, the
        "exact" reference against which precision drift is measured.
    keep : iterable of str
        Value names never freed (the function outputs are kept anyway; :func:`execute`
        passes its taps here when it keeps them).

    Raises
    ------
    verifylib.errors.ParametersInvalid
        If ``compute`` is not one of :data:`COMPUTE_MODES`.
    UnsupportedOpError
        If the program holds an unknown operation (before anything runs).
    MilExecError
        On a missing or misshaped feed.
    """

    def __init__(self, program: Program, feeds: Mapping[str, np.ndarray], *,
                 compute: str = "float32", round_fp16: bool = True, keep: Iterable[str] = ()):
        import torch

        if compute not in COMPUTE_MODES:
            raise ParametersInvalid(f"compute must be one of {COMPUTE_MODES}, got {compute!r}")
        check_supported(program)
        self.program, self.compute, self.round_fp16 = program, compute, round_fp16
        self._tdtype = tdtype = torch_dtype(compute)
        self.env: dict[str, Any] = {}
        for v in program.inputs:
            if v.name not in feeds:
                raise MilExecError(f"missing feed for input {v.name!r}")
            arr = np.asarray(feeds[v.name])
            want = tuple(d for d in v.shape)
            if all(isinstance(d, int) for d in want) and tuple(arr.shape) != want:
                raise MilExecError(f"input {v.name!r} has shape {arr.shape}, the program "
                                   f"declares {want}")
            if v.dtype in _FLOAT_MIL:
                t = torch.as_tensor(arr).to(tdtype)
            elif v.dtype == "bool":
                t = torch.as_tensor(arr.astype(bool))
            else:  # the integer types: exact as int64 (mil_ops holds every integer so)
                t = torch.as_tensor(arr.astype(np.int64))
            if v.dtype == "fp16" and round_fp16:
                t = t.to(torch.float16).to(tdtype)
            self.env[v.name] = t
        # Free each intermediate after its last use (the attention scores are large).
        self._last_use: dict[str, int] = {}
        for i, op in enumerate(program.ops):
            for names in op.inputs.values():
                for n in names:
                    self._last_use[n] = i
        self._keep = set(program.outputs) | set(keep)
        self.seconds = 0.0

    def steps(self):
        """Run every op in program order.

        Yields
        ------
        (index, op, values)
            ``values`` is the tuple of the op's output tensors (torch, CPU), valid until
            the next step.
        """
        import torch

        program, env = self.program, self.env
        for i, op in enumerate(program.ops):
            t0 = time.perf_counter()
            with torch.inference_mode():
                args: dict[str, Any] = {}
                for pname, names in op.inputs.items():
                    vals = []
                    for n in names:
                        if n in env:
                            vals.append(env[n])
                        elif n in program.consts:
                            vals.append(_const_value(program, n, self.compute))
                        elif n in program.constexprs:
                            vals.append(self._decompressed(n))
                        else:
                            raise MilExecError(f"op #{i} {op.type}: input {n!r} is not "
                                               f"computed yet")
                    args[pname] = vals[0] if len(vals) == 1 else vals
                result = KERNELS[op.type](args, self.compute)
                results = result if isinstance(result, (list, tuple)) else (result,)
                if len(results) != len(op.outputs):
                    raise MilExecError(f"op #{i} {op.type}: produced {len(results)} values, "
                                       f"the program declares {len(op.outputs)}")
                produced = []
                for val, out in zip(results, op.outputs):
                    if out.dtype == "fp16" and self.round_fp16 and val.is_floating_point():
                        val = val.to(torch.float16).to(self._tdtype)
                    want = out.shape
                    if all(isinstance(d, int) for d in want) and tuple(val.shape) != want:
                        raise MilExecError(f"op #{i} {op.type} -> {out.name!r}: shape "
                                           f"{tuple(val.shape)}, the program declares {want}")
                    env[out.name] = val
                    produced.append(val)
            self.seconds += time.perf_counter() - t0
            yield i, op, tuple(produced)
            for names in op.inputs.values():
                for n in names:
                    if self._last_use.get(n) == i and n not in self._keep:
                        env.pop(n, None)

    def _decompressed(self, name: str):
        """Return a compressed constant, decompressed on its first read in this execution.

        Every output of its ``constexpr_*`` op that a later op reads goes into ``env`` as
        a tensor of the compute dtype (an fp16 weight widened exactly) and is freed after
        its last reader, like any value: so a weight several ops share is decompressed
        once per execution, and none is kept across executions.
        """
        op = self.program.constexprs[name]
        raw = self._decompress(op, {})
        for arr, out in zip(raw, op.outputs):
            if out.name == name or out.name in self._last_use or out.name in self._keep:
                self.env[out.name] = as_tensor(arr, self.compute)
        return self.env[name]

    def _decompress(self, op: Op, memo: dict) -> tuple:
        """Run one ``constexpr_*`` op on its stored inputs (recursively through others)."""
        program = self.program
        args: dict[str, Any] = {}
        for pname, names in op.inputs.items():
            vals = []
            for n in names:
                if n in program.consts:
                    vals.append(program.consts[n])
                elif n in program.constexprs:
                    src = program.constexprs[n]
                    if id(src) not in memo:
                        memo[id(src)] = self._decompress(src, memo)
                    vals.append(memo[id(src)][[v.name for v in src.outputs].index(n)])
                else:
                    raise MilExecError(f"{op.type} -> {op.outputs[0].name!r}: input {n!r} "
                                       "is not a constant")
            args[pname] = vals[0] if len(vals) == 1 else vals
        raw = CONSTEXPR_KERNELS[op.type](args)
        if len(raw) != len(op.outputs):
            raise MilExecError(f"{op.type}: produced {len(raw)} values, the program declares "
                               f"{len(op.outputs)}")
        for arr, out in zip(raw, op.outputs):
            want = _NP_FLOAT.get(out.dtype)
            if want is not None and arr.dtype != want:
                raise MilExecError(f"{op.type} -> {out.name!r}: decompressed to {arr.dtype}, "
                                   f"the program declares {out.dtype}")
            if all(isinstance(d, int) for d in out.shape) and tuple(arr.shape) != out.shape:
                raise MilExecError(f"{op.type} -> {out.name!r}: shape {tuple(arr.shape)}, "
                                   f"the program declares {out.shape}")
        return raw

    def outputs(self) -> dict[str, np.ndarray]:
        """Collect the function outputs, once :meth:`steps` is exhausted.

        Returns
        -------
        dict
            Output name -> numpy array (a constant output as stored).

        Raises
        ------
        MilExecError
            If an output was never computed (the steps were not run to the end).
        """
        outputs = {}
        for name in self.program.outputs:
            if name in self.env:
                outputs[name] = self.env[name].detach().cpu().numpy()
            elif name in self.program.consts:
                outputs[name] = np.asarray(self.program.consts[name])
            elif name in self.program.constexprs:
                outputs[name] = self._decompressed(name).detach().cpu().numpy()
            else:
                raise MilExecError(f"output {name!r} was never computed")
        return outputs


def execute(program: Program, feeds: Mapping[str, np.ndarray], *, compute: str = "float32",
            taps: Iterable[str] = (),
            on_tap: Callable[[str, np.ndarray], None] | None = None) -> Execution:
    """Run ``program`` on ``feeds`` op by op.

    Parameters
    ----------
    program : Program
        From :func:`load_program`.
    feeds : mapping
        Function input name -> array of the input's shape.
    compute : {"float32", "float64"}
        Arithmetic of every floating-point value (see the module docstring).
    taps : iterable of str
        Names of intermediate values to return as well.
    on_tap : callable, optional
        Receives ``(name, array)`` for each tap as soon as it is computed, instead of the
        tap being kept: the array is valid during the call only. So a caller that reduces
        taps to figures holds none of them (a large encoder's 33 residual-stream values
        in float64 are half a gigabyte). ``Execution.taps`` is then empty.

    Returns
    -------
    Execution
        The outputs, the kept taps, the wall time and the compute mode.

    Raises
    ------
    verifylib.errors.ParametersInvalid
        If ``compute`` is not one of :data:`COMPUTE_MODES`.
    UnsupportedOpError
        Before anything runs, if the program holds an unknown operation.
    MilExecError
        On a missing or misshaped feed, an unknown tap, or an op result whose shape
        differs from the shape the program declares.
    """
    taps = tuple(taps)
    if compute not in COMPUTE_MODES:
        raise ParametersInvalid(f"compute must be one of {COMPUTE_MODES}, got {compute!r}")
    types = program.value_types()
    unknown = [t for t in taps if t not in types]
    if unknown:
        raise MilExecError(f"unknown tap value(s): {unknown}")
    run = Stepper(program, feeds, compute=compute, keep=() if on_tap else taps)
    wanted = set(taps)
    tapped: dict[str, np.ndarray] = {}
    deliver = on_tap if on_tap is not None else \
        (lambda name, value: tapped.__setitem__(name, value.copy()))
    delivered: set[str] = set()
    for _i, op, values in trimmed(run.steps()):  # freed activations go back (large encoders)
        for out, val in zip(op.outputs, values):
            if out.name in wanted:
                deliver(out.name, val.detach().cpu().numpy())
                delivered.add(out.name)
    for name in taps:  # function inputs: no op produces them
        if name not in delivered and name in run.env:
            deliver(name, run.env[name].detach().cpu().numpy())
    return Execution(outputs=run.outputs(), taps=tapped, seconds=run.seconds, compute=compute)
