"""The simulated ``coremlc compile``: an ``.mlpackage`` (an ML program) into an ``.mlmodelc``.

It writes the file set Apple's compiler writes for an ML program, and nothing more:

- ``model.mil``: the program as MIL text, in coremlc's syntax as real compiled models show
  it (docs/facts.md, "The compiled model's model.mil"): ``program(1.0)``, a ``buildInfo``
  dict, ``func main<ios17>(...)``, one statement per operation with its output types,
  operation type, arguments and attributes (``name`` as the protobuf holds it), floats in
  C's hexadecimal notation, weights as ``BLOBFILE`` references at their blob's offset in
  ``weights/weight.bin``; from iOS 18, scalars spelt bare (``string("x")``). It is
  generated from the package's specification, so the encoder card
  (:mod:`verifylib.models.encoder_card`) reads it as it reads a real one, and verifylib's
  reader of compiled programs (:mod:`verifylib.numerics.mil_compiled`) executes it;
- ``metadata.json``: a list of one object, as coremlc writes it (interface schema,
  operation histogram, precision, coremltools' user-defined metadata; no platform key);
- ``coremldata.bin``: an opaque compiled binary. Apple's format is private; this one names
  the compile in the simulated framework's memory (:mod:`framework_memory`), which is how
  the simulated Core ML finds the program again. It is not the model specification;
- ``weights/weight.bin`` (copied from the package) and ``analytics/coremldata.bin``.

The ``other-os`` compiler compiles for another platform: the folder looks the same, and
the framework's memory records the platform, so it does not load on the simulated Mac.

Imported by ``xcrun.py`` (a script) as a sibling module; it never imports verifylib, so
the card and the compiler it reads cannot share a mistake.
"""

from __future__ import annotations

import json
import os
import shutil
from collections import Counter
from pathlib import Path

try:  # imported as tests.simmac.coremlc
    from . import framework_memory
except ImportError:  # imported by xcrun.py, a script beside it
    import framework_memory  # type: ignore[no-redef]

COMPILER = "verifylib simulated coremlc (tests/simmac/coremlc.py)"
"""What ``model.mil``'s ``buildInfo`` names as the compiler: not Apple's."""

_OPSET = {"CoreML5": "ios15", "CoreML6": "ios16", "CoreML7": "ios17", "CoreML8": "ios18"}
"""coremltools' opset names -> the ones coremlc spells in ``model.mil``."""

_TEXT_DTYPE = {"FLOAT32": "fp32", "FLOAT16": "fp16", "FLOAT64": "fp64", "BFLOAT16": "bf16",
               "BOOL": "bool", "STRING": "string"}

_SCHEMA_DTYPE = {"FLOAT32": "Float32", "FLOAT16": "Float16", "FLOAT64": "Double",
                 "INT32": "Int32"}

_BARE_SCALARS = ("ios18",)
"""Opsets whose scalars coremlc spells bare (``string("x")``, ``uint64(64)``), as coremltools'
own tests of iOS 18 programs assert; earlier ones spell them ``tensor<string, []>("x")``."""


def opset_name(opset: str) -> str:
    """coremlc's name of a coremltools opset: ``CoreML7`` -> ``ios17``."""
    return _OPSET.get(opset, opset.lower())


def _dtype_name(code: int) -> str:
    from coremltools.proto import MIL_pb2
    name = MIL_pb2.DataType.Name(code)
    return _TEXT_DTYPE.get(name, name.lower())


class _Style:
    """How one program spells its scalar types (by its opset)."""

    def __init__(self, opset: str):
        self.bare = opset in _BARE_SCALARS

    def scalar(self, word: str) -> str:
        return word if self.bare else f"tensor<{word}, []>"

    def tensor_type(self, vt) -> str:
        if vt.WhichOneof("type") != "tensorType":
            raise ValueError(f"only tensor types are written, not {vt.WhichOneof('type')}")
        t = vt.tensorType
        dims = ", ".join(str(d.constant.size) if d.WhichOneof("dimension") == "constant"
                         else "?" for d in t.dimensions)
        if not t.dimensions and self.bare:
            return _dtype_name(t.dataType)
        return f"tensor<{_dtype_name(t.dataType)}, [{dims}]>"


def _quote(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def hex_float(v: float) -> str:
    """A float as C's ``%a`` prints it, the way coremlc writes constants: ``0x1.5798eep-27``,
    ``0x1p+1``, ``-0x0p+0``; ``inf``, ``-inf``, ``nan`` for the rest."""
    import math
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    h = float(v).hex()  # Python: 0x1.5798ee0000000p-27, 0x0.0p+0
    sign, body = ("-", h[1:]) if h.startswith("-") else ("", h)
    mant, exp = body[2:].split("p")
    head, _, frac = mant.partition(".")
    frac = frac.rstrip("0")
    return f"{sign}0x{head}{'.' + frac if frac else ''}p{exp}"


def _items(value) -> list:
    """The elements of an immediate tensor value, as coremlc spells them."""
    import numpy as np
    t = value.immediateValue.tensor
    field = t.WhichOneof("value")
    dtype = _dtype_name(value.type.tensorType.dataType)
    if field is None:
        return []
    if field == "strings":
        return [_quote(s) for s in t.strings.values]
    if field == "bools":
        return ["true" if b else "false" for b in t.bools.values]
    if field == "bytes":  # fp16, int8 and uint8 (and sub-byte) values are stored as raw bytes
        if dtype == "fp16":
            return [hex_float(float(x)) for x in np.frombuffer(t.bytes.values, np.float16)]
        if dtype in ("int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64"):
            return [str(int(x)) for x in np.frombuffer(t.bytes.values, "<" + dtype[0] +
                                                         str(int(dtype.lstrip("uint")) // 8))]
        # Sub-byte values, packed from the least significant bit: no real compiled model
        # seen shows how coremlc spells them; written unpacked, in decimal.
        bits = int(dtype.lstrip("uint"))
        count = 1
        for d in value.type.tensorType.dimensions:
            count *= d.constant.size
        raw = np.unpackbits(np.frombuffer(t.bytes.values, np.uint8), bitorder="little")
        vals = [int(sum(int(b) << k for k, b in enumerate(raw[i * bits:(i + 1) * bits])))
                for i in range(count)]
        if dtype.startswith("int"):
            vals = [v - (1 << bits) if v >= 1 << (bits - 1) else v for v in vals]
        return [str(v) for v in vals]
    if field in ("floats", "doubles"):
        return [hex_float(v) for v in getattr(t, field).values]
    return [str(int(v)) for v in getattr(t, field).values]


def _nested(items: list, dims: list) -> str:
    if len(dims) <= 1:
        return "[" + ", ".join(items) + "]"
    step = len(items) // dims[0] if dims[0] else 0
    return "[" + ", ".join(_nested(items[i * step:(i + 1) * step], dims[1:])
                           for i in range(dims[0])) + "]"


def _literal(value, style: _Style) -> str:
    """A Value as coremlc spells a literal: ``tensor<T, [dims]>(content)``."""
    kind = value.WhichOneof("value")
    typ = style.tensor_type(value.type)
    if kind == "blobFileValue":
        b = value.blobFileValue
        return (f"{typ}(BLOBFILE(path = {style.scalar('string')}({_quote(b.fileName)}), "
                f"offset = {style.scalar('uint64')}({b.offset})))")
    items = _items(value)
    dims = [d.constant.size for d in value.type.tensorType.dimensions]
    content = items[0] if not dims and len(items) == 1 else _nested(items, dims)
    return f"{typ}({content})"


def _argument(arg, style: _Style) -> str:
    parts = [b.name if b.WhichOneof("binding") == "name" else _literal(b.value, style)
             for b in arg.arguments]
    return parts[0] if len(parts) == 1 else "(" + ", ".join(parts) + ")"


def mil_text(spec) -> str:
    """The ML program of ``spec`` (a ``Model_pb2.Model``) as coremlc's ``model.mil`` text.

    Every statement as coremlc writes it (docs/facts.md): the output declarations, the
    operation with its arguments sorted by name, then its attributes sorted by name
    (``name`` as the protobuf holds it, which may differ from the output's name), floats in
    C's hexadecimal notation, weights as ``BLOBFILE`` references at their blob's offset.

    Parameters
    ----------
    spec : coremltools.proto.Model_pb2.Model
        An ML program's specification.

    Returns
    -------
    str
    """
    prog = spec.mlProgram
    fn = prog.functions["main"]
    block = fn.block_specializations[fn.opset]
    opset = opset_name(fn.opset)
    style = _Style(opset)
    build = {}
    if "buildInfo" in prog.attributes:
        for kv in prog.attributes["buildInfo"].immediateValue.dictionary.values:
            build[kv.key.immediateValue.tensor.strings.values[0]] = \
                kv.value.immediateValue.tensor.strings.values[0]
    build["coremlc-version"] = COMPILER
    info = ", ".join("{" + _quote(k) + ", " + _quote(v) + "}" for k, v in sorted(build.items()))
    string = style.scalar("string")
    lines = ["program(1.3)" if style.bare else "program(1.0)",
             f"[buildInfo = dict<{string}, {string}>({{{info}}})]", "{"]
    params = ", ".join(f"{style.tensor_type(i.type)} {i.name}" for i in fn.inputs)
    lines.append(f"    func main<{opset}>({params}) {{")
    for op in block.operations:
        outs = [f"{style.tensor_type(o.type)} {o.name}" for o in op.outputs]
        lhs = outs[0] if len(outs) == 1 else "(" + ", ".join(outs) + ")"
        args = ", ".join(f"{k} = {_argument(op.inputs[k], style)}" for k in sorted(op.inputs))
        attrs = dict(op.attributes)
        if "name" not in attrs:
            named = f"{string}({_quote(op.outputs[0].name)})"
        else:
            named = _literal(attrs["name"], style)
        parts = [f"name = {named}"] + [f"{k} = {_literal(attrs[k], style)}"
                                         for k in sorted(attrs) if k != "name"]
        parts.sort()
        lines.append(f"            {lhs} = {op.type}({args})[{', '.join(parts)}];")
    lines.append(f"        }} -> ({', '.join(block.outputs)});")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _camel(op_type: str) -> str:
    head, *rest = op_type.split("_")
    return head + "".join(w[:1].upper() + w[1:] for w in rest)


def _schema(feature) -> dict:
    from coremltools.proto import FeatureTypes_pb2
    arr = feature.type.multiArrayType
    dtype = FeatureTypes_pb2.ArrayFeatureType.ArrayDataType.Name(arr.dataType)
    dtype = {"FLOAT32": "Float32", "FLOAT16": "Float16", "DOUBLE": "Double",
             "INT32": "Int32"}.get(dtype, dtype)
    shape = list(arr.shape)
    return {"hasShapeFlexibility": "0", "isOptional": "0", "dataType": dtype,
            "formattedType": f"MultiArray ({dtype} {' × '.join(map(str, shape))})",
            "shortDescription": "", "shape": "[" + ", ".join(map(str, shape)) + "]",
            "name": feature.name, "type": "MultiArray"}


def metadata(spec) -> list:
    """``metadata.json`` as coremlc writes it: a list of one object.

    Parameters
    ----------
    spec : coremltools.proto.Model_pb2.Model

    Returns
    -------
    list of dict
    """
    from coremltools.proto import MIL_pb2
    fn = spec.mlProgram.functions["main"]
    block = fn.block_specializations[fn.opset]
    opset = opset_name(fn.opset)
    prefix = opset[:1].upper() + opset[1:]
    hist = Counter(f"{prefix}.{_camel(op.type)}" for op in block.operations
                   if op.type != "const")
    produced = set()
    for op in block.operations:
        if op.type == "const":
            continue
        for o in op.outputs:
            if o.type.WhichOneof("type") == "tensorType":
                produced.add(MIL_pb2.DataType.Name(o.type.tensorType.dataType))
    words = sorted(_SCHEMA_DTYPE.get(d, d.title()) for d in produced if d != "BOOL")
    precision = words[0] if len(words) == 1 else f"Mixed ({', '.join(words)})"
    desc = spec.description
    return [{"metadataOutputVersion": "3.0", "storagePrecision": precision,
             "outputSchema": [_schema(f) for f in desc.output], "modelParameters": [],
             "specificationVersion": spec.specificationVersion,
             "mlProgramOperationTypeHistogram": dict(sorted(hist.items())),
             "computePrecision": precision, "isUpdatable": "0",
             "availability": {"macOS": "12.0", "iOS": "15.0"},
             "modelType": {"name": "MLModelType_mlProgram"},
             "userDefinedMetadata": dict(sorted(desc.metadata.userDefined.items())),
             "inputSchema": [_schema(f) for f in desc.input],
             "generatedClassName": "ggml_model_encoder", "method": "predict"}]


ANALYTICS = b"\x19\x00verifylib simulated analytics\x00"
"""``analytics/coremldata.bin``: Apple's is a small private binary too."""


def compile_package(package: str, out: str, *, memory: Path, platform: str = "macOS",
                    name: str | None = None) -> str:
    """Compile ``package`` into ``out`` and remember the compile.

    Parameters
    ----------
    package : str
        A saved ``X.mlpackage``.
    out : str
        The output folder; ``X.mlmodelc`` is written into it.
    memory : Path
        The simulated framework's memory (:func:`framework_memory.framework_dir`).
    platform : str
        The platform compiled for (``macOS``; another one for the ``other-os`` compiler).
    name : str, optional
        The output folder's name, when the compiler misnames it.

    Returns
    -------
    str
        The compiled folder.
    """
    from coremltools.proto import Model_pb2

    with open(os.path.join(package, "Manifest.json")) as fh:
        manifest = json.load(fh)
    items = manifest["itemInfoEntries"]
    model_file = os.path.join(package, "Data", items[manifest["rootModelIdentifier"]]["path"])
    with open(model_file, "rb") as fh:
        raw = fh.read()
    spec = Model_pb2.Model()
    spec.ParseFromString(raw)
    if spec.WhichOneof("Type") != "mlProgram":
        raise ValueError(f"{package}: the simulated coremlc compiles ML programs only")
    if name is None:
        base = os.path.basename(package.rstrip("/"))
        name = (base[:-len(".mlpackage")] if base.endswith(".mlpackage") else base) + ".mlmodelc"
    dest = os.path.join(out, name)
    os.makedirs(os.path.join(dest, "analytics"), exist_ok=True)
    mil = mil_text(spec).encode("utf-8")
    with open(os.path.join(dest, "model.mil"), "wb") as fh:
        fh.write(mil)
    weights = os.path.join(os.path.dirname(model_file), "weights", "weight.bin")
    has_weights = os.path.isfile(weights)
    if has_weights:
        os.makedirs(os.path.join(dest, "weights"), exist_ok=True)
        shutil.copyfile(weights, os.path.join(dest, "weights", "weight.bin"))
    with open(os.path.join(dest, "metadata.json"), "w", encoding="utf-8") as fh:
        json.dump(metadata(spec), fh, indent=2, ensure_ascii=False)
    cid = framework_memory.remember(memory, mil, raw, platform, has_weights)
    with open(os.path.join(dest, "coremldata.bin"), "wb") as fh:
        fh.write(framework_memory.coremldata(cid))
    with open(os.path.join(dest, "analytics", "coremldata.bin"), "wb") as fh:
        fh.write(ANALYTICS)
    return dest


__all__ = ["COMPILER", "ANALYTICS", "opset_name", "hex_float", "mil_text", "metadata",
           "compile_package"]
