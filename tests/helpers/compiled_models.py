"""A compiled Core ML encoder (``.mlmodelc``) shaped like what Apple's ``coremlc`` writes,
made on Linux from one of our own ``.mlpackage`` exports, for tests that audit a given
``.mlmodelc``.

Two readers look at such a folder, and each needs its own part:

- the simulated Mac's ``CompiledMLModel`` (tests/simmac) executes ``coremldata.bin`` (there:
  the model specification) with ``weights/weight.bin``, which the simulated ``coremlc``
  (tests/simmac/xcrun.py) writes; so the folder is first compiled by that script;
- the encoder card (:func:`verifylib.models.encoder_card.describe_encoder`) reads what a
  real ``coremlc`` writes: ``model.mil`` as MIL *text* and ``metadata.json`` with the
  interface schema, the operation histogram and coremltools' metadata. The simulated
  compiler writes protobuf text and a small object instead, from which the card can tell
  no precision (tests/unit/test_encoder_card.py says so), so both files are replaced here
  by text in coremlc's syntax, generated from the same specification: every operation of
  the program becomes one statement with its output types, operation type and arguments.

One deliberate departure from coremlc: ``metadata.json`` is one object, not coremlc's list
of one object, because the simulated runtime (``tests/simmac/runtime.py`` ``loadable``)
calls ``.get`` on it and cannot load a list. The card records that as a note.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

from tests.helpers import ROOT

XCRUN = ROOT / "tests" / "simmac" / "xcrun.py"

COMPILER = "verifylib simulated coremlc (tests/helpers/compiled_models.py)"
"""What the generated ``buildInfo`` names as the compiler: not Apple's."""

_OPSET = {"CoreML5": "ios15", "CoreML6": "ios16", "CoreML7": "ios17", "CoreML8": "ios18"}
"""coremltools' opset names -> the ones coremlc spells in ``model.mil``."""

_TEXT_DTYPE = {"FLOAT32": "fp32", "FLOAT16": "fp16", "FLOAT64": "fp64", "BFLOAT16": "bf16",
               "BOOL": "bool", "STRING": "string"}

_SCHEMA_DTYPE = {"FLOAT32": "Float32", "FLOAT16": "Float16", "FLOAT64": "Double",
                 "INT32": "Int32"}


def _dtype_name(code: int) -> str:
    from coremltools.proto import MIL_pb2
    name = MIL_pb2.DataType.Name(code)
    return _TEXT_DTYPE.get(name, name.lower())


def _tensor_type(vt) -> str:
    if vt.WhichOneof("type") != "tensorType":
        raise ValueError(f"only tensor types are written, not {vt.WhichOneof('type')}")
    t = vt.tensorType
    dims = ", ".join(str(d.constant.size) if d.WhichOneof("dimension") == "constant" else "?"
                     for d in t.dimensions)
    return f"tensor<{_dtype_name(t.dataType)}, [{dims}]>"


def _quote(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _literal(value) -> str:
    """A Value as coremlc spells a literal: ``tensor<T, [dims]>(content)``."""
    kind = value.WhichOneof("value")
    typ = _tensor_type(value.type)
    if kind == "blobFileValue":
        b = value.blobFileValue
        return (f"{typ}(BLOBFILE(path = tensor<string, []>({_quote(b.fileName)}), "
                f"offset = tensor<uint64, []>({b.offset})))")
    t = value.immediateValue.tensor
    field = t.WhichOneof("value")
    if field is None:
        items: list[str] = []
    elif field == "strings":
        items = [_quote(s) for s in t.strings.values]
    elif field == "bools":
        items = ["true" if b else "false" for b in t.bools.values]
    elif field == "bytes":
        items = [str(b) for b in t.bytes.values]
    else:
        items = [repr(v) for v in getattr(t, field).values]
    rank = len(value.type.tensorType.dimensions)
    content = items[0] if rank == 0 and len(items) == 1 else "[" + ", ".join(items) + "]"
    return f"{typ}({content})"


def _argument(arg) -> str:
    parts = [b.name if b.WhichOneof("binding") == "name" else _literal(b.value)
             for b in arg.arguments]
    return parts[0] if len(parts) == 1 else "(" + ", ".join(parts) + ")"


def mil_text(spec) -> str:
    """The ML program of ``spec`` (a ``Model_pb2.Model``) as coremlc's ``model.mil`` text.

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
    build = {}
    if "buildInfo" in prog.attributes:
        for kv in prog.attributes["buildInfo"].immediateValue.dictionary.values:
            build[kv.key.immediateValue.tensor.strings.values[0]] = \
                kv.value.immediateValue.tensor.strings.values[0]
    build["coremlc-version"] = COMPILER
    info = ", ".join("{" + _quote(k) + ", " + _quote(v) + "}" for k, v in sorted(build.items()))
    lines = ["program(1.0)",
             f"[buildInfo = dict<tensor<string, []>, tensor<string, []>>({{{info}}})]", "{"]
    params = ", ".join(f"{_tensor_type(i.type)} {i.name}" for i in fn.inputs)
    lines.append(f"    func main<{_OPSET.get(fn.opset, fn.opset.lower())}>({params}) {{")
    for op in block.operations:
        outs = [f"{_tensor_type(o.type)} {o.name}" for o in op.outputs]
        lhs = outs[0] if len(outs) == 1 else "(" + ", ".join(outs) + ")"
        args = ", ".join(f"{k} = {_argument(op.inputs[k])}" for k in sorted(op.inputs))
        attrs = [f"name = tensor<string, []>({_quote(op.outputs[0].name)})"]
        attrs += [f"{k} = {_literal(op.attributes[k])}" for k in sorted(op.attributes)
                  if k != "name"]
        lines.append(f"            {lhs} = {op.type}({args})[{', '.join(attrs)}];")
    lines.append(f"    }} -> ({', '.join(block.outputs)});")
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


def coremlc_metadata(spec) -> dict:
    """``metadata.json`` as coremlc writes it (but one object, see the module docstring).

    Parameters
    ----------
    spec : coremltools.proto.Model_pb2.Model

    Returns
    -------
    dict
    """
    from coremltools.proto import MIL_pb2
    fn = spec.mlProgram.functions["main"]
    block = fn.block_specializations[fn.opset]
    opset = _OPSET.get(fn.opset, fn.opset.lower())
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
    return {"metadataOutputVersion": "3.0", "storagePrecision": precision,
            "outputSchema": [_schema(f) for f in desc.output], "modelParameters": [],
            "specificationVersion": spec.specificationVersion,
            "mlProgramOperationTypeHistogram": dict(sorted(hist.items())),
            "computePrecision": precision, "isUpdatable": "0",
            "availability": {"macOS": "12.0", "iOS": "15.0"},
            "modelType": {"name": "MLModelType_mlProgram"},
            "userDefinedMetadata": dict(sorted(desc.metadata.userDefined.items())),
            "inputSchema": [_schema(f) for f in desc.input],
            "generatedClassName": "ggml_model_encoder", "method": "predict"}


def compile_like_coremlc(package: str | os.PathLike, out_dir: str | os.PathLike) -> Path:
    """Compile ``package`` with the simulated ``coremlc``, then write coremlc's text parts.

    Parameters
    ----------
    package : path-like
        A saved ``X.mlpackage`` (an ML program).
    out_dir : path-like
        Where ``X.mlmodelc`` goes (created).

    Returns
    -------
    Path
        The compiled folder.
    """
    from coremltools.proto import Model_pb2

    package, out_dir = Path(package), Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="verifylib-coremlc-") as state:
        scenario = Path(state) / "scenario.json"
        scenario.write_text(json.dumps({"coremlc": "xcode", "state_dir": state}))
        res = subprocess.run([sys.executable, str(XCRUN), str(scenario), "coremlc", "compile",
                              str(package), str(out_dir)], capture_output=True, text=True)
    if res.returncode != 0:
        raise RuntimeError(f"simulated coremlc failed: {res.stderr}")
    dest = out_dir / re.sub(r"\.mlpackage$", ".mlmodelc", package.name)
    spec = Model_pb2.Model()
    spec.ParseFromString((dest / "coremldata.bin").read_bytes())
    (dest / "model.mil").write_text(mil_text(spec), encoding="utf-8")
    (dest / "metadata.json").write_text(json.dumps(coremlc_metadata(spec), indent=2,
                                                   ensure_ascii=False), encoding="utf-8")
    return dest


__all__ = ["compile_like_coremlc", "mil_text", "coremlc_metadata", "COMPILER"]
