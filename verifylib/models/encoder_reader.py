"""An encoder's files read into its card, before anything is measured.

:func:`describe_encoder` reads a ``.mlpackage`` (its protobuf spec, through coremltools'
bundled protobuf classes, never by loading a model) or a compiled ``.mlmodelc`` (its
``metadata.json`` and ``model.mil``, through :mod:`verifylib.models.mil_text`) into an
:class:`~verifylib.models.encoder_card.EncoderCard`, with every read bounded and every
path held inside the package.
"""

from __future__ import annotations

import json
import os
import posixpath
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from verifylib.models.encoder_card import (
    COMPRESSION_KINDS,
    KIND_ORDER,
    CompressedWeights,
    EncoderCard,
    EncoderInvalid,
    Feature,
    program_layout,
    program_precision,
    weight_compression,
)
from verifylib.models.mil_text import FLOAT_DTYPES, MilOp, MilTextError, parse_mil_text

PACKAGE_MODEL = "com.apple.CoreML/model.mlmodel"
"""Where coremltools puts the root model inside ``Data/`` (the manifest says where)."""

MLMODELC_REQUIRED = ("coremldata.bin", "metadata.json")
"""Files every compiled model holds; an ML program also holds ``model.mil``."""

MANIFEST_MAX = 1 << 20
METADATA_MAX = 16 << 20
MIL_TEXT_MAX = 256 << 20
SPEC_MAX = (2 << 30) - 1
"""Size caps (bytes): a file larger than this is not what it claims to be (a protobuf
message cannot exceed 2 GiB; an encoder's MIL text is a few megabytes)."""

_ARRAY_OF_MIL = {"FLOAT32": "FLOAT32", "FLOAT16": "FLOAT16", "FLOAT64": "DOUBLE",
                 "INT32": "INT32", "INT8": "INT8"}
"""MIL tensor dtype -> the multi-array dtype name of the model description."""


# ----------------------------------------------------------------------------- files

def _inside(root: Path, p: Path, what: str) -> Path:
    """``p`` resolved, refused when it (or a link on the way) leaves ``root``."""
    real_root = root.resolve()
    real = p.resolve()
    if real != real_root and real_root not in real.parents:
        raise EncoderInvalid(f"{root}: {what} leads outside the artifact ({real})")
    return real


def _read_capped(root: Path, rel: str, cap: int, what: str) -> bytes:
    p = root / rel
    if not p.is_file():
        raise EncoderInvalid(f"{root}: no {rel} ({what})")
    real = _inside(root, p, rel)
    size = real.stat().st_size
    if size > cap:
        raise EncoderInvalid(f"{root}: {rel} holds {size} bytes, more than a {what} can "
                             f"({cap})")
    try:
        return real.read_bytes()
    except OSError as exc:
        raise EncoderInvalid(f"{root}: {rel} cannot be read: {exc}") from None


def _read_json(root: Path, rel: str, cap: int, what: str):
    raw = _read_capped(root, rel, cap, what)
    try:
        return json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise EncoderInvalid(f"{root}: {rel} is not JSON: {exc}") from None


def _check_path(path: str | os.PathLike) -> tuple[Path, str]:
    p = Path(path)
    if not p.exists() and not p.is_symlink():
        raise EncoderInvalid(f"{p}: no such file or folder")
    suffix = p.suffix
    if suffix not in (".mlpackage", ".mlmodelc"):
        raise EncoderInvalid(f"{p}: an encoder is a .mlpackage or a .mlmodelc folder, not "
                             f"{suffix or 'a name without suffix'!r}")
    if not p.is_dir():
        raise EncoderInvalid(f"{p}: a {suffix} is a folder; this is a file")
    return p, suffix[1:]


def describe_encoder(path: str | os.PathLike) -> EncoderCard:
    """Read a Core ML encoder's card: what it declares, before anything is measured.

    Parameters
    ----------
    path : path-like
        A ``….mlpackage`` or ``….mlmodelc`` folder (treated as hostile input).

    Returns
    -------
    EncoderCard
        Format, converter, precision, weight compression, layout, operation histogram
        and interface.

    Raises
    ------
    EncoderInvalid
        For a missing path, a wrong suffix, a folder that is not an ML package or a
        compiled model, a file that leaves the artifact, an unreadable protobuf or JSON
        file.
    """
    p, fmt = _check_path(path)
    if fmt == "mlpackage":
        return _package_card(p)
    return _compiled_card(p)


# ----------------------------------------------------------------------------- .mlpackage

def _proto_type(valuetype) -> tuple[str, tuple] | None:
    """(dtype name, shape) of a MIL protobuf ValueType; None for non-tensor types."""
    from coremltools.proto import MIL_pb2

    if valuetype.WhichOneof("type") != "tensorType":
        return None
    t = valuetype.tensorType
    shape = tuple(int(d.constant.size) if d.WhichOneof("dimension") == "constant" else "?"
                  for d in t.dimensions)
    try:
        name = MIL_pb2.DataType.Name(t.dataType)
    except ValueError:
        name = f"DATATYPE_{t.dataType}"
    return name, shape


def _proto_ops(block) -> list[MilOp]:
    types: dict[str, tuple[str, tuple] | None] = {}
    ops = []
    for op in block.operations:
        args: dict[str, tuple[str, tuple] | None] = {}
        for pname, arg in op.inputs.items():
            if len(arg.arguments) != 1:
                continue
            b = arg.arguments[0]
            if b.WhichOneof("binding") == "name":
                args[pname] = types.get(b.name)
            else:
                args[pname] = _proto_type(b.value.type)
        for aname, attr in op.attributes.items():
            if aname != "name":
                args.setdefault(aname, _proto_type(attr.type))
        outs = []
        for o in op.outputs:
            t = _proto_type(o.type)
            types[o.name] = t
            outs.append(t if t is not None else ("OTHER", ()))
        ops.append(MilOp(op.type, tuple(outs), args))
    return ops


def _build_info(program) -> dict[str, str]:
    """Read the ML program's ``buildInfo`` attribute (what coremltools wrote it with)."""
    attr = program.attributes.get("buildInfo") if "buildInfo" in program.attributes else None
    if attr is None or attr.WhichOneof("value") != "immediateValue":
        return {}
    out = {}
    for kv in attr.immediateValue.dictionary.values:
        try:
            k = kv.key.immediateValue.tensor.strings.values[0]
            v = kv.value.immediateValue.tensor.strings.values[0]
        except IndexError:
            continue
        out[str(k)] = str(v)
    return out


def _package_spec(p: Path) -> tuple[dict, str, Any]:
    """Return a package's manifest, its root model's path under ``Data/`` and its spec."""
    from coremltools.proto import Model_pb2
    from google.protobuf.message import DecodeError

    manifest = _read_json(p, "Manifest.json", MANIFEST_MAX, "package manifest")
    try:
        root_id = manifest["rootModelIdentifier"]
        entry = manifest["itemInfoEntries"][root_id]
        rel = entry["path"]
        if not isinstance(rel, str) or not rel:
            raise TypeError("path is not a string")
    except (KeyError, TypeError) as exc:
        raise EncoderInvalid(f"{p}: Manifest.json names no root model ({exc!r}): not an ML "
                             "package") from None
    data = p / "Data"
    _inside(p, data / rel, "the manifest's root model path")
    raw = _read_capped(p, f"Data/{rel}", SPEC_MAX, "model specification")
    spec = Model_pb2.Model()
    try:
        spec.ParseFromString(raw)
    except (DecodeError, RuntimeError, ValueError) as exc:
        raise EncoderInvalid(f"{p}: Data/{rel} is not a readable Core ML protobuf: "
                             f"{exc}") from None
    if spec.WhichOneof("Type") is None:
        raise EncoderInvalid(f"{p}: Data/{rel} holds no model (an empty or foreign protobuf)")
    return manifest, rel, spec


def _package_card(p: Path) -> EncoderCard:
    from verifylib.models.coreml_contract import describe_mlpackage

    manifest, rel, spec = _package_spec(p)
    try:
        desc = describe_mlpackage(p)
    except Exception as exc:  # noqa: BLE001 - hostile input: any failure is a refusal
        raise EncoderInvalid(f"{p}: coremltools cannot read the package: "
                             f"{type(exc).__name__}: {exc}") from None
    notes: list[str] = []
    if rel != PACKAGE_MODEL:
        notes.append(f"the root model is Data/{rel}, not Data/{PACKAGE_MODEL}")
    user = {str(k): str(v) for k, v in spec.description.metadata.userDefined.items()}
    declared: dict[str, str] = {"Manifest.fileFormatVersion": str(manifest.get(
        "fileFormatVersion"))}
    ops: list[MilOp] | None = None
    opset = None
    reason_none = None
    if spec.WhichOneof("Type") == "mlProgram":
        program = spec.mlProgram
        for k, v in _build_info(program).items():
            declared[f"buildInfo.{k}"] = v
        others = sorted(n for n in program.functions if n != "main")
        if others:
            notes.append(f"functions besides main: {others}")
        fn = program.functions.get("main") if "main" in program.functions else None
        if fn is None:
            reason_none = "the ML program has no main function"
        elif fn.opset not in fn.block_specializations:
            reason_none = f"the main function has no block for its opset {fn.opset!r}"
        else:
            opset = fn.opset
            ops = _proto_ops(fn.block_specializations[fn.opset])
    else:
        reason_none = f"a {spec.WhichOneof('Type')} model: no ML program to read"
    converter, facts_from = _converter(user, {k[len("buildInfo."):]: v
                                              for k, v in declared.items()
                                              if k.startswith("buildInfo.")},
                                       "package metadata", "program buildInfo")
    return _card(name=p.name, fmt="mlpackage", model_type=desc.get("model_type"),
                 spec_version=desc.get("specification_version"), opset=opset,
                 converter=converter, facts_from=facts_from, user=user, declared=declared,
                 inputs=[_feature(d) for d in desc.get("inputs", [])],
                 outputs=[_feature(d) for d in desc.get("outputs", [])],
                 ops=ops, ops_from="program", reason_none=reason_none,
                 compute_dtypes=desc.get("compute_dtypes", []), meta_histogram=None,
                 meta_precision=None, read_from=("Manifest.json", f"Data/{rel}"), notes=notes)


def _feature(d: Mapping[str, Any]) -> Feature:
    return Feature(str(d.get("name")), str(d.get("type")),
                   None if d.get("dtype") is None else str(d["dtype"]),
                   tuple(int(x) for x in d.get("shape") or ()),
                   None if not d.get("flexible_shape") else str(d["flexible_shape"]))


def _converter(user: Mapping[str, str], build: Mapping[str, str], user_from: str,
               build_from: str) -> tuple[tuple, str]:
    """Return coremltools' version, source and dialect: user metadata, else buildInfo."""
    prefix = "com.github.apple.coremltools."
    got = (user.get(prefix + "version"), user.get(prefix + "source"),
           user.get(prefix + "source_dialect"))
    if any(got):
        return got, user_from
    torch = build.get("coremltools-component-torch")
    got = (build.get("coremltools-version"),
           f"torch=={torch}" if torch else None, build.get("coremltools-source-dialect"))
    if any(got):
        return got, build_from
    return (None, None, None), "absent"


def _card(*, name, fmt, model_type, spec_version, opset, converter, facts_from, user,
          declared, inputs, outputs, ops, ops_from, reason_none, compute_dtypes,
          meta_histogram, meta_precision, read_from, notes) -> EncoderCard:
    """Assemble a card from what one of the two readers found."""
    if ops is not None:
        precision, p_reason, compute_ops = program_precision(ops)
        compression, compressed, c_reason = weight_compression(ops)
        histogram = dict(Counter(op.type for op in ops))
        hist_from = ops_from
        layout, l_reason = program_layout(ops, histogram)
        if not compute_dtypes:
            compute_dtypes = sorted({dt for op in ops if op.type != "const"
                                     and not op.type.startswith("constexpr_")
                                     for dt, _ in op.outputs if dt in FLOAT_DTYPES})
    else:
        compute_ops = ()
        compressed = ()
        if meta_precision is not None:
            precision, p_reason = meta_precision
        else:
            precision, p_reason = "unknown", reason_none or "no program was read"
        if meta_histogram is not None:
            histogram, hist_from = dict(meta_histogram), "metadata.json"
            constexpr = sorted(k for k in histogram if k.startswith("constexpr_"))
            if constexpr:
                kinds = sorted({COMPRESSION_KINDS.get(k, "unrecognized") for k in constexpr},
                               key=KIND_ORDER.index)
                compression = "+".join(kinds)
                compressed = tuple(CompressedWeights(k, COMPRESSION_KINDS.get(k, "unrecognized"),
                                                     int(histogram[k]), ()) for k in constexpr)
                c_reason = ("from metadata.json's operation histogram: "
                            + ", ".join(f"{histogram[k]} {k}" for k in constexpr)
                            + " (bit widths are not in the histogram)")
            else:
                compression = "none"
                c_reason = "metadata.json's operation histogram has no constexpr_* operation"
            layout, l_reason = program_layout(None, histogram)
            l_reason += " (from metadata.json's operation histogram)"
        else:
            histogram, hist_from = {}, "absent"
            compression = "unknown"
            c_reason = reason_none or "no program was read"
            layout, l_reason = "unknown", reason_none or "no program was read"
    return EncoderCard(
        name=name, format=fmt, model_type=model_type,
        specification_version=None if spec_version is None else int(spec_version),
        opset=opset, converter_version=converter[0], source=converter[1],
        source_dialect=converter[2], converter_facts_from=facts_from,
        user_metadata=tuple(sorted(user.items())), declared=tuple(sorted(declared.items())),
        inputs=tuple(inputs), outputs=tuple(outputs), precision=precision,
        precision_reason=p_reason, compute_ops=tuple(compute_ops),
        compute_dtypes=tuple(compute_dtypes), weight_compression=compression,
        compressed_weights=tuple(compressed), compression_reason=c_reason, layout=layout,
        layout_reason=l_reason, op_histogram=tuple(sorted(histogram.items())),
        op_histogram_from=hist_from, read_from=tuple(read_from), notes=tuple(notes))


# ----------------------------------------------------------------------------- .mlmodelc

def _snake(name: str) -> str:
    """``Ios16.layerNorm`` -> ``layer_norm``: coremlc's histogram keys as MIL op types."""
    base = re.sub(r"^[A-Za-z]+\d+\.", "", name)
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", base).lower()


def _schema_feature(d: Any, where: str) -> Feature:
    if not isinstance(d, Mapping) or not isinstance(d.get("name"), str):
        raise EncoderInvalid(f"{where}: a schema entry without a name: {d!r:.200}")
    kind = d.get("type")
    dtype = d.get("dataType")
    shape = d.get("shape")
    dims: tuple[int, ...] = ()
    if isinstance(shape, str):
        dims = tuple(int(x) for x in re.findall(r"\d+", shape))
    elif isinstance(shape, list) and all(isinstance(x, int) for x in shape):
        dims = tuple(shape)
    dtype_name = None
    if isinstance(dtype, str):
        dtype_name = {"float32": "FLOAT32", "float16": "FLOAT16", "double": "DOUBLE",
                      "float64": "DOUBLE", "int32": "INT32", "int8": "INT8"}.get(
                          dtype.lower(), dtype.upper())
    flexible = d.get("hasShapeFlexibility")
    return Feature(d["name"], "multiArrayType" if kind == "MultiArray" else str(kind),
                   dtype_name, dims,
                   "metadata.json hasShapeFlexibility" if str(flexible) == "1" else None)


def _metadata_precision(meta: Mapping[str, Any], hist: Mapping[str, int],
                        n_io: int) -> tuple[str, str] | None:
    """Precision from ``computePrecision`` and the cast count, when no program was read."""
    cp = meta.get("computePrecision")
    if not isinstance(cp, str):
        return None
    found = set(re.findall(r"Float(16|32|64)", cp))
    casts = int(hist.get("cast", 0))
    said = f"metadata.json computePrecision {cp!r}, {casts} cast"
    if found == {"32"}:
        return "fp32", f"{said}: float32 only"
    if found == {"16"}:
        return "fp16", f"{said}: float16 only"
    if found == {"16", "32"}:
        if casts <= n_io:
            return "fp16", f"{said}: at most one cast per interface feature, so float32 " \
                           "only at the boundary"
        return "mixed", f"{said}: casts inside the program"
    return "unknown", f"{said}: not float32 or float16"


def _compiled_metadata(p: Path) -> tuple[dict, list[str]]:
    """Return a compiled model's ``metadata.json`` object, and a note if it is not a list."""
    missing = [f for f in MLMODELC_REQUIRED if not (p / f).is_file()]
    if missing:
        raise EncoderInvalid(f"{p}: no {' or '.join(missing)}: not a compiled Core ML model "
                             "(coremlc writes model.mil, coremldata.bin, metadata.json, "
                             "analytics/ and weights/)")
    _inside(p, p / "coremldata.bin", "coremldata.bin")
    raw_meta = _read_json(p, "metadata.json", METADATA_MAX, "compiled model's metadata")
    if isinstance(raw_meta, list) and len(raw_meta) == 1 and isinstance(raw_meta[0], dict):
        meta = raw_meta[0]
    elif isinstance(raw_meta, dict):
        meta = raw_meta
    else:
        raise EncoderInvalid(f"{p}: metadata.json is neither one object nor a list of one "
                             "(coremlc writes a list holding one object)")
    notes: list[str] = []
    if isinstance(raw_meta, dict):
        notes.append("metadata.json is an object, not coremlc's list of one object")
    return meta, notes


def _compiled_model_type(p: Path, meta: Mapping[str, Any],
                         notes: list[str]) -> tuple[str | None, bool]:
    """Return the model type (stated, or implied by a ``model.mil``) and whether one exists."""
    mtype = meta.get("modelType", {})
    mtype = mtype.get("name") if isinstance(mtype, Mapping) else mtype
    model_type = None
    if isinstance(mtype, str):
        model_type = {"MLModelType_mlProgram": "mlProgram",
                      "MLModelType_neuralNetwork": "neuralNetwork",
                      "MLModelType_pipeline": "pipeline"}.get(mtype, mtype)
    has_mil = (p / "model.mil").is_file()
    if model_type == "mlProgram" and not has_mil:
        raise EncoderInvalid(f"{p}: metadata.json declares an ML program but there is no "
                             "model.mil")
    if model_type is None and has_mil:
        model_type = "mlProgram"
        notes.append("metadata.json states no model type; model.mil makes it an ML program")
    return model_type, has_mil


def _compiled_declarations(meta: Mapping[str, Any]) -> tuple[dict[str, str], dict[str, str]]:
    """Return ``metadata.json``'s user metadata and the build facts it declares."""
    user_raw = meta.get("userDefinedMetadata") or {}
    user = ({str(k): str(v) for k, v in user_raw.items()}
            if isinstance(user_raw, Mapping) else {})
    declared: dict[str, str] = {}
    for key in ("generatedClassName", "computePrecision", "storagePrecision",
                "metadataOutputVersion", "method", "defaultFunctionName"):
        if isinstance(meta.get(key), (str, int, float)):
            declared[key] = str(meta[key])
    avail = meta.get("availability")
    if isinstance(avail, Mapping):
        declared.update({f"availability.{k}": str(v) for k, v in avail.items()})
    return user, declared


def _metadata_histogram(raw_hist: Any) -> dict[str, int] | None:
    """``mlProgramOperationTypeHistogram`` keyed by MIL op type; None when absent."""
    if not isinstance(raw_hist, Mapping):
        return None
    hist: Counter[str] = Counter()
    for k, v in raw_hist.items():
        if isinstance(v, int) and not isinstance(v, bool):
            hist[_snake(str(k))] += v
    return dict(hist)


@dataclass
class _MilRead:
    """What ``model.mil`` gave: the program (or why not), the interface, the build facts."""

    opset: str | None
    ops: list[MilOp] | None
    inputs: list[Feature] | None
    outputs: list[Feature] | None
    build: dict[str, str]
    reason_none: str | None


def _read_model_mil(p: Path, inputs: list[Feature] | None, outputs: list[Feature] | None,
                    declared: dict[str, str], notes: list[str]) -> _MilRead:
    """Read ``model.mil``: its buildInfo into ``declared``, its program and signature.

    The interface is the signature's when ``metadata.json`` has no schema; otherwise a
    signature that differs from it is noted.
    """
    raw = _read_capped(p, "model.mil", MIL_TEXT_MAX, "MIL program text")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise EncoderInvalid(f"{p}: model.mil is not UTF-8 text") from None
    build: dict[str, str] = {}
    bm = re.search(r"\[\s*buildInfo\s*=\s*dict<[^(]*\(\{(.*?)\}\)\s*\]", text[:65536],
                   re.S)
    if bm:
        build = dict(re.findall(r'\{\s*"((?:[^"\\]|\\.)*)"\s*,\s*"((?:[^"\\]|\\.)*)"\s*\}',
                                bm.group(1)))
        declared.update({f"buildInfo.{k}": v for k, v in build.items()})
    try:
        opset, mil_inputs, ops, mil_outputs = parse_mil_text(text)
    except (MilTextError, RecursionError) as exc:
        reason_none = f"model.mil does not parse as MIL text ({exc})"
        notes.append(reason_none)
        return _MilRead(None, None, inputs, outputs, build, reason_none)
    if inputs is None or outputs is None:
        notes.append("metadata.json has no interface schema: the interface is "
                     "model.mil's signature")
        inputs = [_mil_feature(n, t) for n, t in mil_inputs]
        outputs = [_mil_feature(n, t) for n, t in mil_outputs]
    else:
        sig = [(n, _ARRAY_OF_MIL.get(t[0]), tuple(t[1])) for n, t in mil_inputs]
        declared_sig = [(f.name, f.dtype, f.shape) for f in inputs]
        if sig != declared_sig:
            notes.append(f"model.mil's inputs {sig} differ from metadata.json's "
                         f"{declared_sig}")
    return _MilRead(opset, ops, inputs, outputs, build, None)


def _compiled_card(p: Path) -> EncoderCard:
    meta, notes = _compiled_metadata(p)
    where = f"{p}/metadata.json"
    model_type, has_mil = _compiled_model_type(p, meta, notes)
    user, declared = _compiled_declarations(meta)
    functions = meta.get("functions")
    fmeta = functions[0] if isinstance(functions, list) and functions and \
        isinstance(functions[0], Mapping) else {}
    schema_in = meta.get("inputSchema", fmeta.get("inputSchema"))
    schema_out = meta.get("outputSchema", fmeta.get("outputSchema"))
    inputs = [_schema_feature(d, where) for d in schema_in] \
        if isinstance(schema_in, list) else None
    outputs = [_schema_feature(d, where) for d in schema_out] \
        if isinstance(schema_out, list) else None
    meta_hist = _metadata_histogram(meta.get("mlProgramOperationTypeHistogram", fmeta.get(
        "mlProgramOperationTypeHistogram")))
    if "computePrecision" not in meta and isinstance(fmeta.get("computePrecision"), str):
        meta = {**meta, "computePrecision": fmeta["computePrecision"]}
        declared["computePrecision"] = fmeta["computePrecision"]
    read_from = ["metadata.json"]
    mil = _MilRead(None, None, inputs, outputs, {}, None)
    if has_mil:
        mil = _read_model_mil(p, inputs, outputs, declared, notes)
        read_from.append("model.mil")
    elif model_type == "neuralNetwork":
        mil.reason_none = "a neural network model: no ML program to read"
    else:
        mil.reason_none = "no model.mil and no model type in metadata.json"
    ops, inputs, outputs = mil.ops, mil.inputs, mil.outputs
    converter, facts_from = _converter(user, mil.build, "metadata.json", "model.mil buildInfo")
    meta_precision = None
    if ops is None and meta_hist is not None and model_type == "mlProgram":
        meta_precision = _metadata_precision(meta, meta_hist,
                                             len(inputs or ()) + len(outputs or ()))
    if ops is not None and meta_hist is not None:
        from_text = Counter(op.type for op in ops if op.type != "const")
        from_meta = {k: v for k, v in meta_hist.items() if k != "const"}
        if dict(from_text) != from_meta:
            notes.append("metadata.json's operation histogram differs from model.mil's "
                         "operations (non-const)")
    spec_version = meta.get("specificationVersion")
    if isinstance(spec_version, bool) or not isinstance(spec_version, int):
        spec_version = None
    return _card(name=p.name, fmt="mlmodelc", model_type=model_type,
                 spec_version=spec_version, opset=mil.opset, converter=converter,
                 facts_from=facts_from, user=user, declared=declared,
                 inputs=inputs or [], outputs=outputs or [], ops=ops,
                 ops_from="model.mil", reason_none=mil.reason_none, compute_dtypes=[],
                 meta_histogram=meta_hist if ops is None else None,
                 meta_precision=meta_precision, read_from=tuple(read_from), notes=notes)


def _mil_feature(name: str, t: tuple) -> Feature:
    return Feature(name, "multiArrayType", _ARRAY_OF_MIL.get(t[0], t[0]),
                   tuple(d for d in t[1] if isinstance(d, int)), None)


# ----------------------------------------------------------------------------- before work

def _proto_blob_refs(spec) -> list[tuple[str, int]]:
    """Return every weight reference (file name, offset) of a package's program."""
    refs: list[tuple[str, int]] = []

    def value(v) -> None:
        if v.WhichOneof("value") == "blobFileValue":
            refs.append((v.blobFileValue.fileName, int(v.blobFileValue.offset)))

    def block(b) -> None:
        for op in b.operations:
            for attr in op.attributes.values():
                value(attr)
            for arg in op.inputs.values():
                for binding in arg.arguments:
                    if binding.WhichOneof("binding") == "value":
                        value(binding.value)
            for inner in op.blocks:
                block(inner)

    if spec.WhichOneof("Type") == "mlProgram":
        for fn in spec.mlProgram.functions.values():
            for b in fn.block_specializations.values():
                block(b)
    return refs


def _check_package_paths(p: Path) -> None:
    """Refuse a manifest entry or a weight of the program outside the package."""
    from verifylib.models.encoder_tree import check_blobs

    manifest, rel, spec = _package_spec(p)
    entries = manifest.get("itemInfoEntries")
    for key, entry in (entries.items() if isinstance(entries, Mapping) else ()):
        path = entry.get("path") if isinstance(entry, Mapping) else None
        if not isinstance(path, str) or not path:
            raise EncoderInvalid(f"{p}: Manifest.json entry {str(key)[:80]!r} names no path")
        _inside(p, p / "Data" / path, f"Manifest.json entry {str(key)[:80]!r}")
    check_blobs(p, posixpath.dirname(f"Data/{rel}"), _proto_blob_refs(spec), f"Data/{rel}")


def model_mil_refs(p: Path) -> list[tuple[str, int]]:
    """Return the weight references (path, offset) of a compiled model's ``model.mil``.

    Parameters
    ----------
    p : Path
        The ``.mlmodelc`` folder (or the part of it unpacked from a zip).

    Returns
    -------
    list of (str, int)
        Empty when there is no ``model.mil``.

    Raises
    ------
    EncoderInvalid
        A ``model.mil`` over its size cap, not UTF-8, or that does not parse as MIL text
        (the message says where the parser stopped).
    """
    from verifylib.models.mil_program_text import blob_refs

    if not (p / "model.mil").is_file():
        return []
    raw = _read_capped(p, "model.mil", MIL_TEXT_MAX, "MIL program text")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise EncoderInvalid(f"{p}: model.mil is not UTF-8 text") from None
    try:
        parse_mil_text(text)
        return [(r.path, r.offset) for r in blob_refs(text)]
    except (MilTextError, RecursionError) as exc:
        raise EncoderInvalid(f"{p}: model.mil does not parse as MIL text: "
                             f"{str(exc)[:200]}") from None


def check_given_encoder(path: str | os.PathLike) -> EncoderCard:
    """Check a given encoder's folder whole, before any work, and read its card.

    The folder's entries (:func:`verifylib.models.encoder_tree.check_tree`: no link, only
    bounded, allocated regular files), then what the program names: a package's manifest
    entries and every weight reference of its protobuf, or a compiled model's ``model.mil``
    (it must parse) and its references, each a blob inside the folder; then its card
    (:func:`describe_encoder`).

    Parameters
    ----------
    path : path-like
        A ``….mlpackage`` or ``….mlmodelc`` folder (treated as hostile input).

    Returns
    -------
    EncoderCard

    Raises
    ------
    EncoderInvalid
        One line naming the folder and what is refused.
    """
    from verifylib.models.encoder_tree import check_tree

    p, fmt = _check_path(path)
    check_tree(p)
    # What the program names is checked before anything (coremltools included) opens it.
    if fmt == "mlpackage":
        _check_package_paths(p)
    else:
        from verifylib.models.encoder_tree import check_blobs
        check_blobs(p, "", model_mil_refs(p), "model.mil")
    return describe_encoder(p)
