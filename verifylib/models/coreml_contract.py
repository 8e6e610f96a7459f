"""whisper.cpp's Core ML encoder contract: derived from the model, checked on a saved package.

- the contract is derived from the model, never hard-coded (docs/runtime-contract.md
  §4.2, §5.4): input ``logmel_data`` float32 ``(1, n_mels, max_source_positions *
  conv1.stride * conv2.stride)``, output ``output`` float32 ``(1, max_source_positions,
  d_model)``;
- a saved ``.mlpackage`` is read back from disk through coremltools' protobuf loader
  (:func:`describe_mlpackage`) and checked against it (:func:`contract_problems`, which
  the ``export.contract`` rule calls again on the stored description): whisper.cpp
  ``memcpy``s ``count * sizeof(float)`` without a shape or type check, so a wrong
  artifact would fail silently at run time.

Converting the encoder is :mod:`verifylib.models.coreml_export`'s job; saving, placing,
compiling and running a package is :mod:`verifylib.models.coreml_package`'s.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Mapping

from verifylib.errors import ContractBroken
from verifylib.runtime import contracts

PRECISIONS = ("fp32", "fp16")
"""Export variants: float32 compute (gated) and float16 compute (informational); both
with float32 IO, the only IO whisper.cpp can read."""


class EncoderContractBroken(ContractBroken):
    """A Core ML encoder (a saved package, or one prediction) does not meet the contract.

    A package that breaks the encoder contract was not placed.

    The one :class:`~verifylib.errors.ContractBroken` that carries its findings as data:
    every mismatch, and what the package declares.

    Parameters
    ----------
    problems : iterable of str
        Every mismatch found; the message joins them.
    description : dict, optional
        What the saved package declares (empty for a prediction).

    Attributes
    ----------
    problems : list of str
        Every mismatch found.
    description : dict
        What the saved package declares (see :func:`describe_mlpackage`).
    """

    def __init__(self, problems, description: dict | None = None):
        self.problems = list(problems)
        self.description = description or {}
        super().__init__("the Core ML package breaks the encoder contract: "
                         + "; ".join(self.problems))


# ----------------------------------------------------------------------------- contract

@dataclass(frozen=True)
class EncoderContract:
    """whisper.cpp's Core ML encoder contract, derived from one model.

    Attributes
    ----------
    n_mels : int
        ``config.num_mel_bins``.
    max_source_positions : int
        ``config.max_source_positions`` (the encoder's output length).
    d_model : int
        ``config.d_model``.
    conv1_stride, conv2_stride : int
        Strides of the encoder's two convolutions (read from the modules).
    """

    n_mels: int
    max_source_positions: int
    d_model: int
    conv1_stride: int
    conv2_stride: int

    def __post_init__(self):
        for k in ("n_mels", "max_source_positions", "d_model", "conv1_stride", "conv2_stride"):
            v = getattr(self, k)
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
                raise ContractBroken(f"contract value {k} must be a positive int, got {v!r}")

    @property
    def input_name(self) -> str:
        """The input feature the runtime feeds (``contracts.COREML_INPUT_NAME``)."""
        return contracts.COREML_INPUT_NAME

    @property
    def output_name(self) -> str:
        """The output feature the runtime reads (``contracts.COREML_OUTPUT_NAME``)."""
        return contracts.COREML_OUTPUT_NAME

    @property
    def mel_width(self) -> int:
        """``max_source_positions * conv1.stride * conv2.stride`` (3000 for Whisper)."""
        return self.max_source_positions * self.conv1_stride * self.conv2_stride

    @property
    def input_shape(self) -> tuple[int, int, int]:
        """``(1, n_mels, mel_width)``: the log-mel input's shape."""
        return (1, self.n_mels, self.mel_width)

    @property
    def output_shape(self) -> tuple[int, int, int]:
        """``(1, max_source_positions, d_model)``: the encoder output's shape."""
        return (1, self.max_source_positions, self.d_model)

    def values(self) -> dict:
        """Return the five model values the contract is derived from.

        Returns
        -------
        dict
            ``n_mels``, ``max_source_positions``, ``d_model``, ``conv1_stride`` and
            ``conv2_stride``.
        """
        return {"n_mels": self.n_mels, "max_source_positions": self.max_source_positions,
                "d_model": self.d_model, "conv1_stride": self.conv1_stride,
                "conv2_stride": self.conv2_stride}

    def as_dict(self) -> dict:
        """Return the contract as stored in evidence (derived fields included).

        Returns
        -------
        dict
            ``input`` and ``output`` (name, dtype, shape), ``mel_width`` and
            ``derived_from`` (:meth:`values`).
        """
        return {"input": {"name": self.input_name, "dtype": contracts.COREML_IO_DTYPE,
                          "shape": list(self.input_shape)},
                "output": {"name": self.output_name, "dtype": contracts.COREML_IO_DTYPE,
                           "shape": list(self.output_shape)},
                "mel_width": self.mel_width, "derived_from": self.values()}


def contract_of(encoder) -> EncoderContract:
    """Derive the contract from a Hugging Face ``WhisperEncoder`` (config + conv strides).

    Parameters
    ----------
    encoder : transformers WhisperEncoder
        The model; its ``config`` and the strides of ``conv1`` and ``conv2`` are read.

    Returns
    -------
    EncoderContract
        The contract.

    Raises
    ------
    verifylib.errors.ContractBroken
        If a derived value is not a positive int.
    """
    cfg = encoder.config
    return EncoderContract(n_mels=int(cfg.num_mel_bins),
                           max_source_positions=int(cfg.max_source_positions),
                           d_model=int(cfg.d_model),
                           conv1_stride=int(encoder.conv1.stride[0]),
                           conv2_stride=int(encoder.conv2.stride[0]))


# ----------------------------------------------------------------------------- reading back

def _array_dtype_name(code: int) -> str:
    from coremltools.proto import FeatureTypes_pb2
    return FeatureTypes_pb2.ArrayFeatureType.ArrayDataType.Name(code)


def _feature(desc) -> dict:
    kind = desc.type.WhichOneof("Type")
    out: dict[str, Any] = {"name": desc.name, "type": kind}
    if kind == "multiArrayType":
        ma = desc.type.multiArrayType
        out["dtype"] = _array_dtype_name(ma.dataType)
        out["shape"] = [int(d) for d in ma.shape]
        out["flexible_shape"] = ma.WhichOneof("ShapeFlexibility")
    return out


def describe_mlpackage(path: str | os.PathLike) -> dict:
    """Read what a saved ``.mlpackage`` declares from its protobuf, with coremltools.

    coremltools opens a private copy (:func:`~verifylib.models.private_package.read_spec`),
    so the package itself is not written.

    Parameters
    ----------
    path : path-like
        The saved package.

    Returns
    -------
    dict
        ``model_type``, ``specification_version``, ``inputs`` and ``outputs`` (name,
        feature type, array dtype, shape, shape flexibility), ``compute_dtypes`` (the
        floating-point tensor types of the main function's non-const operations, as MIL
        data type names), ``op_types``, the coremltools ``metadata`` and, for an ML
        program with a ``main`` function, its ``opset``.
    """
    from coremltools.proto import MIL_pb2

    from verifylib.models.private_package import read_spec

    spec = read_spec(path)
    out: dict[str, Any] = {
        "model_type": spec.WhichOneof("Type"),
        "specification_version": int(spec.specificationVersion),
        "inputs": [_feature(d) for d in spec.description.input],
        "outputs": [_feature(d) for d in spec.description.output],
        "metadata": dict(sorted(spec.description.metadata.userDefined.items())),
        "compute_dtypes": [], "op_types": [],
    }
    if out["model_type"] == "mlProgram":
        fn = spec.mlProgram.functions.get("main")
        if fn is not None:
            block = fn.block_specializations[fn.opset]
            dtypes, ops = set(), set()
            for op in block.operations:
                ops.add(op.type)
                if op.type == "const":
                    continue
                for o in op.outputs:
                    if o.type.WhichOneof("type") == "tensorType":
                        name = MIL_pb2.DataType.Name(o.type.tensorType.dataType)
                        if name.startswith("FLOAT") or name.startswith("BFLOAT"):
                            dtypes.add(name)
            out["compute_dtypes"] = sorted(dtypes)
            out["op_types"] = sorted(ops)
            out["opset"] = fn.opset
    return out


FLOAT16_IO_REASON = (f"whisper.cpp's Core ML bridge builds a Float32 MLMultiArray for "
                     f"{contracts.COREML_INPUT_NAME!r} and memcpys count * sizeof(float) bytes "
                     f"from {contracts.COREML_OUTPUT_NAME!r}'s dataPointer, so a Float16 "
                     f"output is read past its buffer (docs/runtime-contract.md §4.2)")
"""Why an encoder with a Float16 input or output breaks the contract (guide §4.2)."""


def contract_problems(description: Mapping[str, Any], contract: EncoderContract,
                      precision: str) -> list[str]:
    """Every way a package description breaks the contract (empty when it holds).

    Pure: the ``export.contract`` rule calls it again on the stored description. A Float16
    input or output is refused with :data:`FLOAT16_IO_REASON`.

    Parameters
    ----------
    description : mapping
        From :func:`describe_mlpackage`.
    contract : EncoderContract
        The contract derived from the model.
    precision : {"fp32", "fp16"}
        The variant: fp32 must compute in float32 only, fp16 must compute in float16.

    Returns
    -------
    list of str
        Every mismatch (only ``unknown precision`` for a precision not in
        :data:`PRECISIONS`); empty when the contract holds.
    """
    problems: list[str] = []
    if precision not in PRECISIONS:
        return [f"unknown precision {precision!r}"]
    if description.get("model_type") != "mlProgram":
        problems.append(f"model type is {description.get('model_type')!r}, not an ML program")
    for side, want_name, want_shape in (("inputs", contract.input_name, contract.input_shape),
                                        ("outputs", contract.output_name, contract.output_shape)):
        feats = list(description.get(side) or [])
        names = [f.get("name") for f in feats]
        if names != [want_name]:
            problems.append(f"{side} are {names}, the runtime needs exactly [{want_name!r}]")
        for f in feats:
            if f.get("name") != want_name:
                continue
            if f.get("type") != "multiArrayType":
                problems.append(f"{want_name}: feature type {f.get('type')!r}, not a multi-array")
                continue
            if f.get("dtype") == "FLOAT16":
                # The one wrong type with a known silent failure: name it, with its cause.
                problems.append(f"{want_name}: dtype FLOAT16, a Float16 interface: "
                                f"{FLOAT16_IO_REASON}")
            elif f.get("dtype") != contracts.COREML_IO_DTYPE:
                problems.append(f"{want_name}: dtype {f.get('dtype')}, the runtime copies "
                                f"{contracts.COREML_IO_DTYPE}")
            if list(f.get("shape") or []) != list(want_shape):
                problems.append(f"{want_name}: shape {f.get('shape')}, the contract is "
                                f"{list(want_shape)}")
            if f.get("flexible_shape"):
                problems.append(f"{want_name}: flexible shape ({f['flexible_shape']}); the "
                                "contract is one fixed shape")
    dtypes = set(description.get("compute_dtypes") or [])
    if precision == "fp32" and dtypes != {"FLOAT32"}:
        problems.append(f"fp32 variant computes in {sorted(dtypes)}, expected FLOAT32 only")
    if precision == "fp16" and "FLOAT16" not in dtypes:
        problems.append(f"fp16 variant computes in {sorted(dtypes)}, expected FLOAT16")
    return problems
