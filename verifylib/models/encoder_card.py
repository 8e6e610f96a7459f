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
  :func:`verifylib.models.coreml_contract.describe_mlpackage`'s, the reader ``export.contract``
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

import math
import re
from collections import Counter
from dataclasses import dataclass, fields
from typing import Any, Iterable, Mapping

from verifylib.errors import EvidenceInvalid, ParametersInvalid
from verifylib.models.mil_text import FLOAT_DTYPES, MilOp

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


_CAST_OPS = ("cast",)


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
            value types of :func:`~verifylib.models.coreml_contract.describe_mlpackage`.
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

    The IO rules are :func:`~verifylib.models.coreml_contract.contract_problems`' (names,
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
    from verifylib.models.coreml_contract import contract_problems

    desc = card.description()
    if card.precision == "unknown":
        # The compute rule needs a declared precision; judge the interface alone.
        desc["compute_dtypes"] = ["FLOAT32"]
        return ([f"compute precision unknown: {card.precision_reason}"]
                + contract_problems(desc, contract, "fp32"))
    variant = "fp32" if card.precision == "fp32" else "fp16"
    return contract_problems(desc, contract, variant)


# ----------------------------------------------------------------------------- derivations

def program_precision(ops: Iterable[MilOp]) -> tuple[str, str, tuple[tuple[str, int], ...]]:
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
            if dt in FLOAT_DTYPES:
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


def _lut_nbits(op: MilOp) -> int | None:
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


def weight_compression(ops: Iterable[MilOp]) -> tuple[str, tuple[CompressedWeights, ...], str]:
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


def program_layout(ops: Iterable[MilOp] | None, histogram: Mapping[str, int]) -> tuple[str, str]:
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
