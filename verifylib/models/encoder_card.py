"""What a Core ML encoder says about itself, read before anything is measured.

A prebuilt whisper.cpp encoder (``ggml-<name>-encoder.mlpackage`` or ``.mlmodelc``) comes
from someone else's converter. Its compute precision decides which parity policy judges it,
and that policy must be fixed before a number is measured, so the card records what the
artifact *declares* and nothing else: no program is executed, loaded by Core ML or
compiled here. :func:`declared_policy` is a pure function of the card, so a verifier
re-derives the choice from the recorded card alone.

Where each fact comes from:

- ``.mlpackage``: ``Manifest.json`` names the root model file; its protobuf is parsed with
  coremltools' generated classes (``Model_pb2``); the IO description is
  :func:`verifylib.models.coreml_export.describe_mlpackage`'s, the reader ``export.contract``
  judges. Precision, weight compression and layout are read from the operations of the ML
  program's ``main`` function: their types are the program's own declarations.
- ``.mlmodelc`` (what Apple's ``coremlc`` writes: ``model.mil``, ``coremldata.bin``,
  ``metadata.json``, ``analytics/``, ``weights/weight.bin``): ``metadata.json`` gives the
  interface, the operation histogram and the coremltools metadata; ``model.mil`` is the
  compiled program as MIL text. Why that text is read by hand: no library reads it off a
  Mac, and only the statement headers are needed (each statement's output types and
  operation type, and the types of its arguments), not values. ``coremldata.bin`` is
  Apple's private container; it is only required to exist. When ``model.mil`` does not
  parse, the precision falls back to ``metadata.json`` and says so, or is ``"unknown"``
  with the reason.

The artifact is hostile input. Every way it can be malformed (a missing path, a wrong
suffix, a folder that is not a package or not a compiled model, a manifest that points
outside the package, a file that is a link out of it, an unreadable protobuf or JSON file,
a file too large to be what it claims) ends in :class:`EncoderInvalid`, a
:class:`~verifylib.errors.ParametersInvalid` (so the command line exits 2) that names the
file and what is wrong, never in a traceback.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections import Counter
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Iterable, Mapping

from verifylib.errors import EvidenceInvalid, ParametersInvalid

FORMATS = ("mlpackage", "mlmodelc")
PRECISIONS = ("fp32", "fp16", "mixed", "unknown")
LAYOUTS = ("plain", "ane", "unknown")

COMPRESSION_KINDS = {
    "constexpr_lut_to_dense": "palettized",
    "constexpr_lut_to_sparse": "palettized",
    "constexpr_affine_dequantize": "linear-quantized",
    "constexpr_blockwise_shift_scale": "linear-quantized",
    "constexpr_sparse_blockwise_shift_scale": "linear-quantized",
    "constexpr_sparse_to_dense": "sparse",
    "constexpr_cast": "cast-storage",
}
"""Weight-decompression operation -> the compression it undoes. A joint scheme (iOS 18)
shows as two kinds: ``constexpr_lut_to_sparse`` feeding ``constexpr_sparse_to_dense`` is
palettized + sparse. Any other ``constexpr_*`` operation is ``unrecognized``."""

KIND_ORDER = ("palettized", "linear-quantized", "sparse", "cast-storage", "unrecognized")

_NBITS_PARAM = {
    "constexpr_affine_dequantize": "quantized_data",
    "constexpr_blockwise_shift_scale": "data",
    "constexpr_sparse_blockwise_shift_scale": "nonzero_data",
    "constexpr_lut_to_sparse": "indices_nonzero_data",
}
"""Operation -> the argument whose integer type is the stored bit width."""

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

_CAST_OPS = ("cast",)
_FLOATS = ("FLOAT16", "FLOAT32", "FLOAT64", "BFLOAT16", "FLOAT8E4M3FN", "FLOAT8E5M2")
_ARRAY_OF_MIL = {"FLOAT32": "FLOAT32", "FLOAT16": "FLOAT16", "FLOAT64": "DOUBLE",
                 "INT32": "INT32", "INT8": "INT8"}
"""MIL tensor dtype -> the multi-array dtype name of the model description."""


class EncoderInvalid(ParametersInvalid):
    """The path is not a readable Core ML encoder package or compiled model."""


class PolicyUndetermined(EncoderInvalid):
    """The card does not declare a compute precision, so no parity policy can be chosen.

    Attributes
    ----------
    reason : str
        Why the precision is unknown (the card's ``precision_reason``).
    """

    def __init__(self, name: str, reason: str):
        super().__init__(f"{name}: no parity policy can be chosen before measuring: its "
                         f"compute precision is unknown ({reason})")
        self.reason = reason


# ----------------------------------------------------------------------------- the card

@dataclass(frozen=True)
class Feature:
    """One input or output feature as the encoder declares it.

    Attributes
    ----------
    name : str
        Feature name.
    type : str
        Feature type (``multiArrayType`` for a tensor).
    dtype : str or None
        Multi-array data type (``FLOAT32``, ``FLOAT16`` ...), None for other types.
    shape : tuple of int
        Declared shape.
    flexible_shape : str or None
        The kind of shape flexibility, None for one fixed shape.
    """

    name: str
    type: str
    dtype: str | None
    shape: tuple[int, ...]
    flexible_shape: str | None

    def as_dict(self) -> dict:
        """Return the feature as ``describe_mlpackage`` describes one.

        Returns
        -------
        dict
            ``name``, ``type``, ``dtype``, ``shape`` (a list), ``flexible_shape``.
        """
        return {"name": self.name, "type": self.type, "dtype": self.dtype,
                "shape": list(self.shape), "flexible_shape": self.flexible_shape}


@dataclass(frozen=True)
class CompressedWeights:
    """The weights one kind of decompression operation produces.

    Attributes
    ----------
    op_type : str
        The ``constexpr_*`` operation.
    kind : str
        What it undoes (:data:`COMPRESSION_KINDS`, or ``unrecognized``).
    count : int
        How many such operations the program holds.
    nbits : tuple of int
        Every stored bit width that could be read (empty when none could).
    """

    op_type: str
    kind: str
    count: int
    nbits: tuple[int, ...]


@dataclass(frozen=True)
class EncoderCard:
    """What one Core ML encoder declares about itself.

    Every field is a plain value (str, int, None, or tuples of them), so
    :meth:`to_json` / :meth:`from_json` round-trip exactly.

    Attributes
    ----------
    name : str
        The artifact's file name (``ggml-model-encoder.mlpackage``).
    format : {"mlpackage", "mlmodelc"}
        Package or compiled model.
    model_type : str or None
        ``mlProgram``, ``neuralNetwork`` ...
    specification_version : int or None
        The model specification version.
    opset : str or None
        The main function's opset as the artifact writes it (``CoreML6`` in a package's
        protobuf, ``ios16`` in compiled MIL text).
    converter_version : str or None
        coremltools version that wrote the model.
    source : str or None
        The source framework coremltools recorded (``torch==2.1.0``, ``milinternal``).
    source_dialect : str or None
        ``TorchScript``, ``TorchExport`` ...
    converter_facts_from : str
        Where the three converter fields were read (``"package metadata"``, ``"program
        buildInfo"``, ``"metadata.json"``, ``"model.mil buildInfo"``, ``"absent"``).
    user_metadata : tuple of (str, str)
        The model's user-defined metadata, sorted.
    declared : tuple of (str, str)
        Other facts the artifact states (program ``buildInfo``, ``metadata.json``'s
        ``generatedClassName``, ``computePrecision``, ``storagePrecision``,
        ``availability`` ...), sorted.
    inputs, outputs : tuple of Feature
        The interface.
    precision : {"fp32", "fp16", "mixed", "unknown"}
        Declared compute precision (see :func:`program_precision`).
    precision_reason : str
        What it was derived from.
    compute_ops : tuple of (str, int)
        Floating-point dtype -> number of arithmetic operations (not const, constexpr_*
        or cast) producing it.
    compute_dtypes : tuple of str
        Every floating-point type a non-const operation produces (casts included), as
        ``describe_mlpackage`` lists them.
    weight_compression : str
        ``none``, ``unknown``, or the kinds joined by ``+`` (``palettized+sparse``).
    compressed_weights : tuple of CompressedWeights
        One entry per decompression operation type.
    compression_reason : str
        What it was derived from.
    layout : {"plain", "ane", "unknown"}
        ``ane`` is upstream's ``--optimize-ane`` program (1x1 2-D convolutions for the
        linear layers, einsum attention, split heads); ``plain`` uses linear and matmul.
    layout_reason : str
        What it was derived from.
    op_histogram : tuple of (str, int)
        Operation type -> count (``const`` included where the program was read).
    op_histogram_from : str
        ``"program"``, ``"model.mil"``, ``"metadata.json"`` or ``"absent"``.
    read_from : tuple of str
        The files read, relative to the artifact.
    notes : tuple of str
        Anything worth knowing that is not a field (disagreements between files, parts
        that could not be read).
    """

    name: str
    format: str
    model_type: str | None
    specification_version: int | None
    opset: str | None
    converter_version: str | None
    source: str | None
    source_dialect: str | None
    converter_facts_from: str
    user_metadata: tuple[tuple[str, str], ...]
    declared: tuple[tuple[str, str], ...]
    inputs: tuple[Feature, ...]
    outputs: tuple[Feature, ...]
    precision: str
    precision_reason: str
    compute_ops: tuple[tuple[str, int], ...]
    compute_dtypes: tuple[str, ...]
    weight_compression: str
    compressed_weights: tuple[CompressedWeights, ...]
    compression_reason: str
    layout: str
    layout_reason: str
    op_histogram: tuple[tuple[str, int], ...]
    op_histogram_from: str
    read_from: tuple[str, ...]
    notes: tuple[str, ...]

    def description(self) -> dict:
        """Return the card as the description ``contract_problems`` judges.

        Returns
        -------
        dict
            ``model_type``, ``specification_version``, ``inputs``, ``outputs``,
            ``compute_dtypes``, ``op_types``, ``metadata`` and ``opset``, with the keys and
            value types of :func:`~verifylib.models.coreml_export.describe_mlpackage`.
        """
        return {"model_type": self.model_type,
                "specification_version": self.specification_version,
                "inputs": [f.as_dict() for f in self.inputs],
                "outputs": [f.as_dict() for f in self.outputs],
                "metadata": dict(self.user_metadata),
                "compute_dtypes": list(self.compute_dtypes),
                "op_types": sorted(k for k, _ in self.op_histogram),
                "opset": self.opset}

    def to_json(self) -> dict:
        """Return the card as a JSON-ready dict (tuples become lists).

        Returns
        -------
        dict
            One key per field; features and compressed weights as dicts.
        """
        out: dict[str, Any] = {}
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name in ("inputs", "outputs"):
                v = [x.as_dict() for x in v]
            elif f.name == "compressed_weights":
                v = [{"op_type": c.op_type, "kind": c.kind, "count": c.count,
                      "nbits": list(c.nbits)} for c in v]
            elif isinstance(v, tuple):
                v = [list(x) if isinstance(x, tuple) else x for x in v]
            out[f.name] = v
        return out

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> "EncoderCard":
        """Read a card back from :meth:`to_json`'s dict, strictly.

        Parameters
        ----------
        doc : mapping
            The stored card.

        Returns
        -------
        EncoderCard

        Raises
        ------
        verifylib.errors.EvidenceInvalid
            On a missing or extra key, a value of the wrong type, or a precision, layout
            or format outside the known sets.
        """
        if not isinstance(doc, Mapping):
            raise EvidenceInvalid(f"encoder card: expected an object, got {type(doc).__name__}")
        names = [f.name for f in fields(cls)]
        if sorted(doc) != sorted(names):
            raise EvidenceInvalid(f"encoder card: keys {sorted(doc)}, expected {sorted(names)}")
        kw = {k: doc[k] for k in names}
        try:
            for k in ("name", "format", "converter_facts_from", "precision",
                      "precision_reason", "weight_compression", "compression_reason",
                      "layout", "layout_reason", "op_histogram_from"):
                kw[k] = _str(kw[k], k)
            for k in ("model_type", "opset", "converter_version", "source", "source_dialect"):
                kw[k] = _opt_str(kw[k], k)
            v = kw["specification_version"]
            if v is not None and (isinstance(v, bool) or not isinstance(v, int)):
                raise EvidenceInvalid(f"specification_version: not an int: {v!r}")
            for k in ("user_metadata", "declared"):
                kw[k] = tuple((_str(a, k), _str(b, k)) for a, b in _pairs(kw[k], k))
            for k in ("compute_ops", "op_histogram"):
                kw[k] = tuple((_str(a, k), _int(b, k)) for a, b in _pairs(kw[k], k))
            for k in ("compute_dtypes", "read_from", "notes"):
                kw[k] = tuple(_str(x, k) for x in _list(kw[k], k))
            for k in ("inputs", "outputs"):
                kw[k] = tuple(_feature_from(x, k) for x in _list(kw[k], k))
            kw["compressed_weights"] = tuple(_compressed_from(x) for x in
                                             _list(kw["compressed_weights"],
                                                   "compressed_weights"))
        except (TypeError, ValueError, KeyError) as exc:
            if isinstance(exc, EvidenceInvalid):
                raise
            raise EvidenceInvalid(f"encoder card: {exc}") from None
        if kw["format"] not in FORMATS or kw["precision"] not in PRECISIONS \
                or kw["layout"] not in LAYOUTS:
            raise EvidenceInvalid(f"encoder card: format {kw['format']!r}, precision "
                                  f"{kw['precision']!r} or layout {kw['layout']!r} unknown")
        return cls(**kw)


def _str(v, key):
    if not isinstance(v, str):
        raise EvidenceInvalid(f"encoder card {key}: not a string: {v!r}")
    return v


def _opt_str(v, key):
    return None if v is None else _str(v, key)


def _int(v, key):
    if isinstance(v, bool) or not isinstance(v, int):
        raise EvidenceInvalid(f"encoder card {key}: not an int: {v!r}")
    return v


def _list(v, key):
    if not isinstance(v, (list, tuple)):
        raise EvidenceInvalid(f"encoder card {key}: not a list: {v!r}")
    return v


def _pairs(v, key):
    out = []
    for x in _list(v, key):
        if not isinstance(x, (list, tuple)) or len(x) != 2:
            raise EvidenceInvalid(f"encoder card {key}: not a pair: {x!r}")
        out.append((x[0], x[1]))
    return out


def _feature_from(x, key) -> Feature:
    if not isinstance(x, Mapping) or sorted(x) != ["dtype", "flexible_shape", "name", "shape",
                                                    "type"]:
        raise EvidenceInvalid(f"encoder card {key}: malformed feature {x!r}")
    return Feature(_str(x["name"], key), _str(x["type"], key), _opt_str(x["dtype"], key),
                   tuple(_int(d, key) for d in _list(x["shape"], key)),
                   _opt_str(x["flexible_shape"], key))


def _compressed_from(x) -> CompressedWeights:
    key = "compressed_weights"
    if not isinstance(x, Mapping) or sorted(x) != ["count", "kind", "nbits", "op_type"]:
        raise EvidenceInvalid(f"encoder card {key}: malformed entry {x!r}")
    return CompressedWeights(_str(x["op_type"], key), _str(x["kind"], key),
                             _int(x["count"], key),
                             tuple(_int(n, key) for n in _list(x["nbits"], key)))


# ----------------------------------------------------------------------------- policy

def declared_policy(card: EncoderCard) -> str:
    """Choose the parity policy from the card's declared precision, before measuring.

    A pure function of ``card.precision``: ``fp32`` -> ``fp32-v1``; ``fp16`` and ``mixed``
    (some float16 arithmetic) -> ``fp16-v1``. An ``unknown`` precision raises rather than
    returning a default: no policy declared for an encoder whose arithmetic was not read
    would be honest, and a verifier re-deriving the choice from the recorded card meets
    the same refusal.

    Parameters
    ----------
    card : EncoderCard
        The encoder's card (or one read back with :meth:`EncoderCard.from_json`).

    Returns
    -------
    str
        ``"fp32-v1"`` or ``"fp16-v1"``.

    Raises
    ------
    PolicyUndetermined
        When the precision is ``unknown`` (its reason is carried).
    verifylib.errors.EvidenceInvalid
        For a precision outside :data:`PRECISIONS` (a forged card).
    """
    from verifylib.numerics.parity import choose_parity_policy

    if card.precision == "unknown":
        raise PolicyUndetermined(card.name, card.precision_reason)
    # The one rule of the choice; a full-precision source is assumed here (the stage adds
    # the model file's ftype, which can only move the choice to pair-v1).
    return choose_parity_policy(card.precision, None).policy_id


def contract_check(card: EncoderCard, contract) -> list[str]:
    """Every way the carded encoder breaks whisper.cpp's tensor contract.

    The IO rules are :func:`~verifylib.models.coreml_export.contract_problems`' (names,
    Float32 interface with the Float16 reason, fixed shapes, an ML program); the compute
    rule is the one of the variant the declared precision names (``mixed`` is judged as
    fp16). An encoder whose precision is unknown gets that as a problem of its own, and
    only the IO rules.

    Parameters
    ----------
    card : EncoderCard
        The encoder's card.
    contract : EncoderContract
        The contract derived from the audited model.

    Returns
    -------
    list of str
        Every problem; empty when the contract holds.
    """
    from verifylib.models.coreml_export import contract_problems

    desc = card.description()
    if card.precision == "unknown":
        # The compute rule needs a declared precision; judge the interface alone.
        desc["compute_dtypes"] = ["FLOAT32"]
        return ([f"compute precision unknown: {card.precision_reason}"]
                + contract_problems(desc, contract, "fp32"))
    variant = "fp32" if card.precision == "fp32" else "fp16"
    return contract_problems(desc, contract, variant)


# ----------------------------------------------------------------------------- derivations

@dataclass(frozen=True)
class _Op:
    """One operation as either reader sees it: type, output types, argument types."""

    type: str
    outputs: tuple[tuple[str, tuple], ...]
    args: Mapping[str, tuple[str, tuple] | None]


def program_precision(ops: Iterable[_Op]) -> tuple[str, str, tuple[tuple[str, int], ...]]:
    """Derive the compute precision from the floating-point types operations produce.

    Arithmetic operations are every operation but ``const``, ``constexpr_*`` (weights) and
    ``cast``: an fp16 program casts its float32 inputs to float16 and its result back, so
    its casts produce float32 while all of its arithmetic is float16.

    Returns
    -------
    (precision, reason, compute_ops)
        ``fp32`` when all arithmetic produces FLOAT32, ``fp16`` when all produces FLOAT16,
        ``mixed`` for both, ``unknown`` for none or another float type.
    """
    counts: Counter = Counter()
    casts = 0
    for op in ops:
        if op.type == "const" or op.type.startswith("constexpr_"):
            continue
        if op.type in _CAST_OPS:
            casts += 1
            continue
        for dt, _shape in op.outputs:
            if dt in _FLOATS:
                counts[dt] += 1
    table = tuple(sorted(counts.items()))
    kinds = set(counts)
    said = ", ".join(f"{n} {dt}" for dt, n in table)
    if not kinds:
        return "unknown", ("no operation besides const, constexpr_* and cast produces a "
                           "floating-point value"), table
    if kinds == {"FLOAT32"}:
        return "fp32", f"every arithmetic operation produces FLOAT32 ({said}; {casts} cast)", \
            table
    if kinds == {"FLOAT16"}:
        return "fp16", (f"every arithmetic operation produces FLOAT16 ({said}); {casts} cast "
                        "operation(s) convert at the boundary"), table
    if kinds == {"FLOAT16", "FLOAT32"}:
        return "mixed", f"arithmetic operations produce both ({said}; {casts} cast)", table
    return "unknown", (f"arithmetic operations produce {said}: neither float32 nor float16 "
                       "alone or together"), table


def _nbits_of(dtype: str | None) -> int | None:
    m = re.fullmatch(r"U?INT(\d+)", dtype or "")
    return int(m.group(1)) if m else None


def _lut_nbits(op: _Op) -> int | None:
    """Return the bit width of a palettization.

    The index type when the indices are unpacked (iOS 18), else the number of palette
    entries (iOS 16 packs its indices into bytes).
    """
    indices, lut = op.args.get("indices"), op.args.get("lut")
    out_shape = op.outputs[0][1] if op.outputs else None
    if indices is not None:
        bits = _nbits_of(indices[0])
        if bits is not None and (bits < 8 or tuple(indices[1]) == tuple(out_shape or ())):
            return bits
    if lut is not None and lut[1]:
        shape = lut[1]
        entries = shape[-1] if len(shape) == 1 else (shape[-2] if len(shape) >= 2 else None)
        if isinstance(entries, int) and entries > 1 and entries & (entries - 1) == 0:
            return int(math.log2(entries))
    return None


def weight_compression(ops: Iterable[_Op]) -> tuple[str, tuple[CompressedWeights, ...], str]:
    """Derive the weight compression from the program's ``constexpr_*`` operations.

    Returns
    -------
    (summary, entries, reason)
        ``none`` or the kinds joined by ``+``; one :class:`CompressedWeights` per
        operation type; what was found.
    """
    counts: Counter = Counter()
    bits: dict[str, set] = {}
    for op in ops:
        if not op.type.startswith("constexpr_"):
            continue
        counts[op.type] += 1
        if op.type in ("constexpr_lut_to_dense",):
            n = _lut_nbits(op)
        elif op.type in _NBITS_PARAM:
            arg = op.args.get(_NBITS_PARAM[op.type])
            n = _nbits_of(arg[0]) if arg is not None else None
        else:
            n = None
        if n is not None:
            bits.setdefault(op.type, set()).add(n)
    entries = tuple(CompressedWeights(t, COMPRESSION_KINDS.get(t, "unrecognized"), c,
                                      tuple(sorted(bits.get(t, ()))))
                    for t, c in sorted(counts.items()))
    if not entries:
        return "none", (), "no constexpr_* operation: every weight is a plain constant"
    kinds = sorted({e.kind for e in entries}, key=KIND_ORDER.index)
    said = ", ".join(f"{e.count} {e.op_type}" + (f" ({'/'.join(map(str, e.nbits))} bits)"
                                                  if e.nbits else "") for e in entries)
    return "+".join(kinds), entries, said


def program_layout(ops: Iterable[_Op] | None, histogram: Mapping[str, int]) -> tuple[str, str]:
    """Tell upstream's ``--optimize-ane`` program from a plain one.

    The ANE program replaces every linear layer by a 1x1 2-D convolution over a
    ``[B, C, 1, T]`` residual stream and computes attention with ``einsum`` over split
    heads; a plain program uses ``linear`` and ``matmul``. With operations at hand the
    ranks of the convolutions' outputs are counted too; from a histogram alone, the
    operation types decide.

    Returns
    -------
    (layout, reason)
    """
    einsum = histogram.get("einsum", 0)
    linear = histogram.get("linear", 0)
    split = histogram.get("split", 0)
    conv = histogram.get("conv", 0)
    conv2d = None
    if ops is not None:
        conv2d = sum(1 for op in ops if op.type == "conv" and op.outputs
                     and len(op.outputs[0][1]) == 4)
    said = (f"{linear} linear, {histogram.get('matmul', 0)} matmul, {einsum} einsum, "
            f"{split} split, {conv} conv" + (f" ({conv2d} of them 2-D)"
                                             if conv2d is not None else ""))
    ane_signs = einsum > 0 or bool(conv2d)
    if ane_signs and linear == 0:
        return "ane", f"{said}: 1x1 2-D convolutions and einsum attention, no linear layer"
    if linear > 0 and not ane_signs:
        return "plain", f"{said}: linear layers and matmul attention"
    if linear > 0:
        return "unknown", f"{said}: both linear layers and ANE-style operations"
    return "unknown", f"{said}: neither linear layers nor einsum attention"


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


def _proto_ops(block) -> list[_Op]:
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
        ops.append(_Op(op.type, tuple(outs), args))
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


def _package_card(p: Path) -> EncoderCard:
    from coremltools.proto import Model_pb2
    from google.protobuf.message import DecodeError

    from verifylib.models.coreml_export import describe_mlpackage

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
    ops: list[_Op] | None = None
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
                                     for dt, _ in op.outputs if dt in _FLOATS})
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

class _MilTextError(EncoderInvalid):
    """model.mil does not parse as MIL text; :func:`describe_encoder` reports it instead."""


_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|->|[()\[\]{}<>;,=]')
_OPEN, _CLOSE = "([{<", ")]}>"
_IDENT = r"[A-Za-z_][A-Za-z0-9_]*"


def _split_top(text: str, sep: str, maxsplit: int = -1) -> list[str]:
    """Split at ``sep`` outside brackets and strings."""
    parts, depth, start = [], 0, 0
    for m in _TOKEN.finditer(text):
        t = m.group()
        if t[0] == '"' or t == "->":
            continue
        if t in _OPEN:
            depth += 1
        elif t in _CLOSE:
            depth -= 1
            if depth < 0:
                raise _MilTextError(f"unbalanced {t!r}")
        elif t == sep and depth == 0 and maxsplit != 0:
            parts.append(text[start:m.start()])
            start = m.end()
            maxsplit -= 1
    if depth != 0:
        raise _MilTextError("unbalanced brackets")
    parts.append(text[start:])
    return parts


def _matching(text: str, at: int) -> int:
    """Index of the bracket closing the one at ``at``."""
    depth = 0
    for m in _TOKEN.finditer(text, at):
        t = m.group()
        if t[0] == '"' or t == "->":
            continue
        if t in _OPEN:
            depth += 1
        elif t in _CLOSE:
            depth -= 1
            if depth == 0:
                return m.start()
    raise _MilTextError(f"no bracket closes the one at offset {at}")


def _text_dtype(word: str) -> str:
    """MIL text type word -> the protobuf DataType name (``fp16`` -> ``FLOAT16``)."""
    w = word.strip().lower()
    if w == "bf16":
        return "BFLOAT16"
    if w.startswith("fp") and w[2:].isdigit():
        return f"FLOAT{w[2:]}"
    if w in ("bool", "string"):
        return w.upper()
    if re.fullmatch(r"u?int\d+", w):
        return w.upper()
    return "OTHER"


def _text_type(t: str) -> tuple[str, tuple]:
    """Parse ``tensor<fp16, [1, 384, 1, 1500]>`` or a scalar type word."""
    t = t.strip()
    m = re.fullmatch(r"tensor\s*<\s*(\w+)\s*,\s*\[([^\]]*)\]\s*>", t)
    if m:
        dims = tuple(int(d) if d.strip().isdigit() else d.strip()
                     for d in m.group(2).split(",") if d.strip())
        return _text_dtype(m.group(1)), dims
    if re.fullmatch(r"\w+", t):
        return _text_dtype(t), ()
    return "OTHER", ()


def _text_value_type(v: str, types: Mapping[str, tuple]) -> tuple[str, tuple] | None:
    """Type of an argument: a literal's declared type, or the named value's."""
    v = v.strip()
    if v.startswith("tensor"):
        lt = v.find("<")
        if lt < 0:
            return None
        return _text_type(v[:_matching(v, lt) + 1])
    m = re.match(rf"({_IDENT})\s*\(", v)
    if m:
        return _text_type(m.group(1))
    if re.fullmatch(_IDENT, v):
        return types.get(v)
    return None


def _text_args(s: str, types: Mapping[str, tuple]) -> dict[str, tuple | None]:
    out: dict[str, tuple | None] = {}
    if not s.strip():
        return out
    for part in _split_top(s, ","):
        kv = _split_top(part, "=", maxsplit=1)
        if len(kv) != 2:
            continue
        key = kv[0].strip()
        if key != "name":
            out[key] = _text_value_type(kv[1], types)
    return out


def parse_mil_text(text: str, function: str = "main") -> tuple[str, list, list[_Op], list[str]]:
    """Read a compiled model's ``model.mil``: the function's signature and statements.

    Only what the card needs: the opset, the inputs' types, each statement's operation
    type, output types and argument types, and the function's outputs.

    Parameters
    ----------
    text : str
        The MIL text.
    function : str
        The function to read.

    Returns
    -------
    (opset, inputs, ops, outputs)
        ``inputs`` and ``outputs`` are lists of (name, (dtype, shape)); ``outputs`` are
        the values the function returns.

    Raises
    ------
    EncoderInvalid
        When the text does not parse (:func:`describe_encoder` catches it and reports
        the reason in the card).
    """
    m = re.search(rf"\bfunc\s+{re.escape(function)}\s*<\s*([\w.]+)\s*>\s*\(", text)
    if m is None:
        raise _MilTextError(f"no 'func {function}<opset>(' header")
    opset = m.group(1)
    params_open = m.end() - 1
    params_close = _matching(text, params_open)
    types: dict[str, tuple] = {}
    inputs = []
    for decl in _split_top(text[params_open + 1:params_close], ","):
        if not decl.strip():
            continue
        t, _, n = decl.strip().rpartition(" ")
        if not re.fullmatch(_IDENT, n):
            raise _MilTextError(f"input declaration {decl.strip()!r}")
        types[n] = _text_type(t)
        inputs.append((n, types[n]))
    body_open = text.find("{", params_close)
    if body_open < 0:
        raise _MilTextError("no function body")
    body_close = _matching(text, body_open)
    tail = re.match(r"\s*->\s*\(([^)]*)\)", text[body_close + 1:])
    if tail is None:
        raise _MilTextError("no '-> (outputs)' after the function body")
    returned = [o.strip() for o in tail.group(1).split(",") if o.strip()]
    ops: list[_Op] = []
    for stmt in _split_top(text[body_open + 1:body_close], ";"):
        if not stmt.strip():
            continue
        lhs_rhs = _split_top(stmt, "=", maxsplit=1)
        if len(lhs_rhs) != 2:
            raise _MilTextError(f"statement without '=': {stmt.strip()[:80]!r}")
        lhs, rhs = lhs_rhs
        om = re.match(rf"\s*({_IDENT})\s*\(", rhs)
        if om is None:
            raise _MilTextError(f"no operation in {rhs.strip()[:80]!r}")
        lhs = lhs.strip()
        if lhs.startswith("(") and lhs.endswith(")"):
            lhs = lhs[1:-1]
        outs = []
        for decl in _split_top(lhs, ","):
            t, _, n = decl.strip().rpartition(" ")
            if not re.fullmatch(_IDENT, n) or not t:
                raise _MilTextError(f"output declaration {decl.strip()[:80]!r}")
            types[n] = _text_type(t)
            outs.append(types[n])
        args_open = om.end() - 1
        args_close = _matching(rhs, args_open)
        args = _text_args(rhs[args_open + 1:args_close], types)
        rest = rhs[args_close + 1:].lstrip()
        if rest.startswith("["):  # attributes; iOS 16 constexpr ops carry their data here
            for k, v in _text_args(rest[1:_matching(rest, 0)], types).items():
                args.setdefault(k, v)
        ops.append(_Op(om.group(1), tuple(outs), args))
    return opset, inputs, ops, [(n, types.get(n, ("OTHER", ()))) for n in returned]


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


def _compiled_card(p: Path) -> EncoderCard:
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
    where = f"{p}/metadata.json"
    notes: list[str] = []
    if isinstance(raw_meta, dict):
        notes.append("metadata.json is an object, not coremlc's list of one object")
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
    functions = meta.get("functions")
    fmeta = functions[0] if isinstance(functions, list) and functions and \
        isinstance(functions[0], Mapping) else {}
    schema_in = meta.get("inputSchema", fmeta.get("inputSchema"))
    schema_out = meta.get("outputSchema", fmeta.get("outputSchema"))
    inputs = [_schema_feature(d, where) for d in schema_in] \
        if isinstance(schema_in, list) else None
    outputs = [_schema_feature(d, where) for d in schema_out] \
        if isinstance(schema_out, list) else None
    raw_hist = meta.get("mlProgramOperationTypeHistogram", fmeta.get(
        "mlProgramOperationTypeHistogram"))
    meta_hist: dict[str, int] | None = None
    if isinstance(raw_hist, Mapping):
        meta_hist = Counter()
        for k, v in raw_hist.items():
            if isinstance(v, int) and not isinstance(v, bool):
                meta_hist[_snake(str(k))] += v
        meta_hist = dict(meta_hist)
    if "computePrecision" not in meta and isinstance(fmeta.get("computePrecision"), str):
        meta = {**meta, "computePrecision": fmeta["computePrecision"]}
        declared["computePrecision"] = fmeta["computePrecision"]
    read_from = ["metadata.json"]
    ops = None
    opset = None
    build: dict[str, str] = {}
    reason_none = None
    if has_mil:
        raw = _read_capped(p, "model.mil", MIL_TEXT_MAX, "MIL program text")
        read_from.append("model.mil")
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise EncoderInvalid(f"{p}: model.mil is not UTF-8 text") from None
        bm = re.search(r"\[\s*buildInfo\s*=\s*dict<[^(]*\(\{(.*?)\}\)\s*\]", text[:65536],
                       re.S)
        if bm:
            build = dict(re.findall(r'\{\s*"((?:[^"\\]|\\.)*)"\s*,\s*"((?:[^"\\]|\\.)*)"\s*\}',
                                    bm.group(1)))
            declared.update({f"buildInfo.{k}": v for k, v in build.items()})
        try:
            opset, mil_inputs, ops, mil_outputs = parse_mil_text(text)
        except (_MilTextError, RecursionError) as exc:
            reason_none = f"model.mil does not parse as MIL text ({exc})"
            notes.append(reason_none)
            ops = None
        else:
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
    elif model_type == "neuralNetwork":
        reason_none = "a neural network model: no ML program to read"
    else:
        reason_none = "no model.mil and no model type in metadata.json"
    converter, facts_from = _converter(user, build, "metadata.json", "model.mil buildInfo")
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
                 spec_version=spec_version, opset=opset, converter=converter,
                 facts_from=facts_from, user=user, declared=declared,
                 inputs=inputs or [], outputs=outputs or [], ops=ops,
                 ops_from="model.mil", reason_none=reason_none, compute_dtypes=[],
                 meta_histogram=meta_hist if ops is None else None,
                 meta_precision=meta_precision, read_from=tuple(read_from), notes=notes)


def _mil_feature(name: str, t: tuple) -> Feature:
    return Feature(name, "multiArrayType", _ARRAY_OF_MIL.get(t[0], t[0]),
                   tuple(d for d in t[1] if isinstance(d, int)), None)
