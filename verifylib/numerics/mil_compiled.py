"""A compiled model's ML program (``X.mlmodelc``) loaded for the executor, on any OS.

A ``.mlmodelc`` is what people download beside a ``ggml-*.bin``. It holds the program as
MIL text (``model.mil``) and its weights (``weights/weight.bin``, the blob format
coremltools writes into a package: coremlc's text names each weight by the offset of its
metadata record there, docs/facts.md). Read strictly
(:func:`verifylib.models.mil_program_text.read_program_text`) and built into the same
:class:`verifylib.numerics.mil_exec.Program` that :func:`~verifylib.numerics.mil_exec.load_program`
reads from a package's protobuf, it runs op by op here as a package's program does: so
the gates that measure an encoder's program judge the program the Core ML runtime loads.

Nothing is guessed. A literal is taken only when its value is exact in its declared type
(a float of an fp16 tensor must be an fp16 number, an integer must fit), a weight only
when its blob's stored type and size are the ones the text declares, and a program only
when every statement is a constant, a compressed constant or an operation the executor
implements (:func:`verifylib.numerics.mil_exec.check_supported`). Anything else raises
:class:`CompiledProgramError` with the reason; the stages then leave the gate NOT_RUN,
never PASS.
"""

from __future__ import annotations

import math
import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from verifylib.canonical import sha256_file
from verifylib.errors import ParametersInvalid
from verifylib.models.mil_program_text import (
    BlobRef,
    Literal,
    MilType,
    Statement,
    TextFunction,
    read_program_text,
)
from verifylib.models.mil_text import MilTextError
from verifylib.numerics.mil_exec import (
    MilExecError,
    Op,
    Program,
    Value,
    WeightFiles,
    check_supported,
)

__all__ = ["MODEL_MIL", "WEIGHT_BIN", "CompiledProgramError", "CompiledSource",
           "load_compiled_program"]

MODEL_MIL = "model.mil"
WEIGHT_BIN = "weights/weight.bin"
_WEIGHTS_PREFIX = "@model_path/weights/"

_SPEC_OF_OPSET = {"ios15": 6, "ios16": 7, "ios17": 8, "ios18": 9}
"""coremlc's opset name -> the specification version a package of that opset declares."""

_NP = {"fp16": np.float16, "fp32": np.float32, "fp64": np.float64, "int8": np.int8,
       "int16": np.int16, "int32": np.int32, "int64": np.int64, "uint8": np.uint8,
       "uint16": np.uint16, "uint32": np.uint32, "uint64": np.uint64, "bool": np.bool_}
"""MIL element types a literal may hold, as numpy types (sub-byte types only in blobs)."""


class CompiledProgramError(ParametersInvalid):
    """A compiled model's program cannot be read, or holds what the executor cannot run."""


@dataclass(frozen=True)
class CompiledSource:
    """Where a program read from a compiled model came from: what the evidence records.

    Attributes
    ----------
    mlmodelc : str
        The compiled folder.
    model_mil_sha256 : str
        Digest of its ``model.mil``.
    weight_bin_sha256 : str or None
        Digest of ``weights/weight.bin`` (None when the program references no weights).
    program_version : str
        ``program(…)``'s version.
    opset : str
        The function's opset (``ios15`` ...).
    coremlc_version : str or None
        ``buildInfo``'s ``coremlc-version``.
    build_info : dict
        The whole ``buildInfo``.
    """

    mlmodelc: str
    model_mil_sha256: str
    weight_bin_sha256: str | None
    program_version: str
    opset: str
    coremlc_version: str | None
    build_info: dict[str, str]

    def as_dict(self) -> dict[str, Any]:
        """Return the record the evidence carries (``read_from`` names the file read).

        Returns
        -------
        dict
        """
        return {"read_from": MODEL_MIL, "model_mil_sha256": self.model_mil_sha256,
                "weight_bin_sha256": self.weight_bin_sha256,
                "program_version": self.program_version, "opset": self.opset,
                "coremlc_version": self.coremlc_version,
                "build_info": dict(sorted(self.build_info.items()))}


@dataclass(frozen=True)
class _Blob:
    """A text blob reference in the shape :meth:`WeightFiles.view` reads (protobuf names)."""

    fileName: str  # noqa: N815 - the protobuf's field name, which WeightFiles reads
    offset: int


def _exact(values: np.ndarray, raw: list, dtype: str, where: str) -> None:
    """Refuse a float literal its declared type does not hold exactly."""
    back = values.astype(np.float64).reshape(-1)
    for got, want in zip(back, raw):
        if not (got == want or (math.isnan(got) and math.isnan(want))):
            raise CompiledProgramError(f"{where}: {want!r} is not exact as {dtype}")


def _flat(value: Any) -> list:
    if isinstance(value, list):
        return [x for v in value for x in _flat(v)]
    return [value]


def _literal_value(lit: Literal, weights: WeightFiles, where: str) -> tuple[Any, str]:
    """Return a literal as the executor holds constants, and its MIL dtype.

    As :func:`verifylib.numerics.mil_exec.load_program` holds them: a numpy scalar of the
    declared type for a scalar, a numpy array of the declared shape for a tensor, a str for
    a string, a mapped view for a blob.
    """
    t = lit.type
    if t.kind == "other":
        raise CompiledProgramError(f"{where}: a {t.dtype} literal is not a tensor value")
    if not all(isinstance(d, int) for d in t.shape):
        raise CompiledProgramError(f"{where}: a constant of symbolic shape {list(t.shape)}")
    if isinstance(lit.value, BlobRef):
        return _blob_value(lit.value, t, weights, where), t.dtype
    if t.dtype == "string":
        if t.shape == () and isinstance(lit.value, str):
            return lit.value, "string"
        raise CompiledProgramError(f"{where}: only scalar strings are read")
    if t.dtype not in _NP:
        raise CompiledProgramError(f"{where}: an inline {t.dtype} literal is not read")
    raw = _flat(lit.value) if lit.value is not None else []
    count = int(np.prod(t.shape, dtype=np.int64))
    if len(raw) != count:
        raise CompiledProgramError(f"{where}: {len(raw)} values for shape {list(t.shape)}")
    want_bool = t.dtype == "bool"
    for v in raw:
        ok = isinstance(v, bool) if want_bool else (
            isinstance(v, (int, float)) and not isinstance(v, bool)
            and (t.dtype.startswith("fp") or isinstance(v, int)))
        if not ok:
            raise CompiledProgramError(f"{where}: {v!r} is not a {t.dtype} value")
    np_type = _NP[t.dtype]
    if t.dtype.startswith(("int", "uint")):
        info = np.iinfo(np_type)
        bad = [v for v in raw if not info.min <= v <= info.max]
        if bad:
            raise CompiledProgramError(f"{where}: {bad[0]} does not fit {t.dtype}")
    with np.errstate(over="ignore"):
        arr = np.array(raw, dtype=np_type).reshape(t.shape)
    if t.dtype.startswith("fp"):
        _exact(arr, raw, t.dtype, where)
    return (arr[()] if t.shape == () else arr), t.dtype


def _blob_value(ref: BlobRef, t: MilType, weights: WeightFiles, where: str) -> Any:
    """Return a weight: a view of the blob at ``ref.offset``, of the declared type and size."""
    rel = ref.path[len(_WEIGHTS_PREFIX):] if ref.path.startswith(_WEIGHTS_PREFIX) else None
    if not rel or "/" in rel or rel in (".", ".."):
        raise CompiledProgramError(f"{where}: weight file {ref.path!r} is not a file of the "
                                   f"model's weights/ folder")
    path = Path(weights.dir) / rel
    if path.is_symlink() or not path.is_file():
        raise CompiledProgramError(f"{where}: weight file {ref.path!r} is not a regular file "
                                   "of the compiled model")
    try:
        view = weights.view(_Blob(ref.path, ref.offset), t.dtype, t.shape)
    except MilExecError as exc:
        raise CompiledProgramError(f"{where}: {exc}") from None
    if view is None:
        raise CompiledProgramError(f"{where}: the blob at offset {ref.offset} of {rel} is not "
                                   f"stored as the declared {t.dtype}")
    return view


class _Builder:
    """Turns a function's statements into the executor's program parts."""

    def __init__(self, weights: WeightFiles):
        self.weights = weights
        self.consts: dict[str, Any] = {}
        self.dtypes: dict[str, str] = {}
        self.ops: list[Op] = []
        self.constexprs: dict[str, Op] = {}
        self.defined: set[str] = set()

    def keep(self, name: str, lit: Literal, where: str) -> None:
        self.consts[name], self.dtypes[name] = _literal_value(lit, self.weights, where)

    def bind(self, arg: Any, inline: str, where: str) -> tuple[str, ...]:
        items = arg if isinstance(arg, tuple) else (arg,)
        names = []
        for k, item in enumerate(items):
            if isinstance(item, tuple):
                raise CompiledProgramError(f"{where}: a nested tuple argument")
            if isinstance(item, Literal):
                self.keep(f"{inline}::{k}", item, where)
                names.append(f"{inline}::{k}")
            elif item not in self.defined:
                raise CompiledProgramError(f"{where}: {item!r} is used before it is defined")
            else:
                names.append(item)
        return tuple(names)

    def statement(self, s: Statement) -> None:
        where = f"model.mil line {s.line} ({s.op} {s.outputs[0][0]!r})"
        outs = tuple(Value(n, *_value_type(t, where)) for n, t in s.outputs)
        for v in outs:
            if v.name in self.defined:
                raise CompiledProgramError(f"{where}: {v.name!r} is defined twice")
        name_attr = s.attrs.get("name")
        if name_attr is not None and not isinstance(name_attr.value, str):
            raise CompiledProgramError(f"{where}: its name attribute is not a string")
        if s.op == "const":
            if s.args or set(s.attrs) - {"name"} != {"val"} or len(outs) != 1:
                raise CompiledProgramError(f"{where}: a const takes no argument and one val")
            self.keep(outs[0].name, s.attrs["val"], where)
            if s.attrs["val"].type.shape != outs[0].shape:
                raise CompiledProgramError(f"{where}: its value has shape "
                                           f"{list(s.attrs['val'].type.shape)}, its output "
                                           f"{list(outs[0].shape)}")
            if self.dtypes[outs[0].name] != outs[0].dtype:
                raise CompiledProgramError(f"{where}: its value is "
                                           f"{self.dtypes[outs[0].name]}, its output "
                                           f"{outs[0].dtype}")
        else:
            compressed = s.op.startswith("constexpr_")
            extra = sorted(set(s.attrs) - {"name"})
            if extra and not compressed:
                raise CompiledProgramError(f"{where}: attribute(s) {extra} of an operation "
                                           "are not read")
            ins: dict[str, tuple[str, ...]] = {}
            for key in extra:  # up to iOS 17 a constexpr op's parameters are attributes
                ins[key] = self.bind(s.attrs[key], f"{outs[0].name}::{key}", where)
            for key, arg in s.args.items():
                ins[key] = self.bind(arg, f"{outs[0].name}::{key}", where)
            op = Op(s.op, ins, outs)
            if compressed:
                self.constexprs.update({v.name: op for v in outs})
            else:
                self.ops.append(op)
        self.defined.update(v.name for v in outs)


def _value_type(t: MilType, where: str) -> tuple[str, tuple]:
    if t.kind == "other":
        raise CompiledProgramError(f"{where}: a value of type {t.dtype} (not a tensor)")
    return t.dtype, t.shape


def _function(text: str, function: str) -> tuple[TextFunction, str, dict[str, str]]:
    try:
        prog = read_program_text(text)
    except MilTextError as exc:
        raise CompiledProgramError(str(exc)) from None
    if function not in prog.functions:
        raise CompiledProgramError(f"model.mil has no function {function!r} "
                                   f"(has {sorted(prog.functions)})")
    fn = prog.functions[function]
    if fn.attrs:
        raise CompiledProgramError(f"function {function!r} carries attributes "
                                   f"{sorted(fn.attrs)} (flexible shapes are not read)")
    return fn, prog.version, prog.build_info


def load_compiled_program(mlmodelc: str | os.PathLike[str], function: str = "main"
                          ) -> tuple[Program, CompiledSource]:
    """Read the ML program of a compiled model from its ``model.mil`` and weight file.

    Parameters
    ----------
    mlmodelc : path-like
        The compiled folder (``model.mil``, ``weights/weight.bin``).
    function : str
        The function to read.

    Returns
    -------
    (Program, CompiledSource)
        The program, as :func:`verifylib.numerics.mil_exec.load_program` reads a package's
        (its weights mapped, not copied), and where it was read from.

    Raises
    ------
    CompiledProgramError
        When ``model.mil`` is missing or does not parse, a literal or weight is not exact in
        its declared type, a name is used before it is defined, or an operation is one the
        executor does not implement: the message says which and where.
    """
    folder = Path(mlmodelc)
    mil = folder / MODEL_MIL
    if mil.is_symlink() or not mil.is_file():
        raise CompiledProgramError(f"{folder.name} has no {MODEL_MIL} (a compiled ML program "
                                   "holds one)")
    try:
        text = mil.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CompiledProgramError(f"{MODEL_MIL} cannot be read as UTF-8 text: {exc}") from None
    fn, version, build = _function(text, function)
    weights = WeightFiles(str(folder / "weights"))
    b = _Builder(weights)
    b.defined.update(n for n, _ in fn.inputs)
    inputs = tuple(Value(n, *_value_type(t, f"input {n!r}")) for n, t in fn.inputs)
    for s in fn.statements:
        b.statement(s)
    missing = [o for o in fn.outputs if o not in b.defined]
    if missing:
        raise CompiledProgramError(f"function {function!r} returns undefined {missing}")
    counts = Counter(s.op for s in fn.statements)
    program = Program(path=folder, function=function, inputs=inputs, outputs=fn.outputs,
                      ops=tuple(b.ops), consts=b.consts, const_dtypes=b.dtypes,
                      op_counts=dict(sorted(counts.items())),
                      specification_version=_SPEC_OF_OPSET.get(fn.opset, 0),
                      constexprs=b.constexprs, _weights=weights)
    try:
        check_supported(program)
    except MilExecError as exc:
        raise CompiledProgramError(str(exc)) from None
    blob = folder / WEIGHT_BIN
    source = CompiledSource(
        mlmodelc=str(folder), model_mil_sha256=sha256_file(mil),
        weight_bin_sha256=sha256_file(blob) if blob.is_file() else None,
        program_version=version, opset=fn.opset,
        coremlc_version=build.get("coremlc-version"), build_info=build)
    return program, source

