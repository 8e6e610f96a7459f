"""Core ML export of the Whisper encoder under whisper.cpp's tensor contract.

Library first: torch traces the eager Hugging Face encoder, coremltools converts the trace
to an ML program and saves the ``.mlpackage``, coremltools' protobuf loader reads the
saved file back for validation, ``xcrun coremlc compile`` (macOS + Xcode) makes the
``.mlmodelc`` and ``coremltools.models.CompiledMLModel`` runs it. What is written here is
the contract and the order of publishing:

- the contract is derived from the model, never hard-coded (docs/runtime-contract.md
  §4.2, §5.4): input ``logmel_data`` float32 ``(1, n_mels, max_source_positions *
  conv1.stride * conv2.stride)``, output ``output`` float32 ``(1, max_source_positions,
  d_model)``;
- a package is saved to a staging folder, read back from disk, checked against the
  contract, and only then renamed into place; a mismatch places nothing (whisper.cpp
  ``memcpy``s ``count * sizeof(float)`` without a shape or type check, so a wrong
  artifact would fail silently at run time);
- the conversion's build facts (coremltools and torch versions, the warning coremltools
  logs when torch is newer than it was tested with, the conversion log) are recorded.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import shutil
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np

from verifylib.canonical import publish_dir, tree_digest
from verifylib.errors import ContractBroken, ExportFailure, ParametersInvalid
from verifylib.numerics.memory import freed_blocks_unmapped, release_memory
from verifylib.runtime import contracts
from verifylib.runtime.runner import RunResult

PRECISIONS = ("fp32", "fp16")
"""Export variants: float32 compute (gated) and float16 compute (informational); both
with float32 IO, the only IO whisper.cpp can read."""

MLPACKAGE_SUFFIX = ".mlpackage"
MLMODELC_SUFFIX = ".mlmodelc"


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


class CompileError(ExportFailure):
    """``xcrun coremlc compile`` failed or produced no ``.mlmodelc``."""


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
    from coremltools.models.utils import load_spec
    from coremltools.proto import MIL_pb2

    spec = load_spec(str(path))
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


# ----------------------------------------------------------------------------- build facts

@contextlib.contextmanager
def _captured_log():
    """Capture coremltools' logger, Python warnings and stderr (progress bars) as text."""
    buf = io.StringIO()
    handler = logging.StreamHandler(buf)
    handler.setLevel(logging.INFO)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    logger = logging.getLogger("coremltools")
    logger.addHandler(handler)
    try:
        with warnings.catch_warnings(record=True) as caught, contextlib.redirect_stderr(buf):
            warnings.simplefilter("always")
            yield buf
        for w in caught:
            buf.write(f"WARNING {w.category.__name__}: {w.message} "
                      f"({Path(w.filename).name}:{w.lineno})\n")
    finally:
        logger.removeHandler(handler)


def build_facts() -> dict:
    """Collect the versions the conversion depends on and coremltools' torch-version warning.

    coremltools 9.0 declares the newest torch it was tested with and only *logs* a warning
    above it (docs/runtime-contract.md §5.3): the warning is recorded here, through
    coremltools' own check, as a build fact rather than lost as noise.

    Returns
    -------
    dict
        ``coremltools``, ``torch``, ``transformers`` and ``numpy`` versions (``"absent"``
        for a missing package), ``torch_max_tested_by_coremltools``,
        ``torch_above_tested`` and ``torch_version_warning`` (None, None and a note when
        coremltools' private check cannot be queried).
    """
    from importlib import metadata

    import coremltools as ct
    import torch
    facts: dict[str, Any] = {"coremltools": ct.__version__, "torch": torch.__version__}
    for pkg in ("transformers", "numpy"):
        try:
            facts[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            facts[pkg] = "absent"
    try:
        from coremltools import _deps
        max_tested = str(_deps._TORCH_MAX_VERSION)
        with _captured_log() as buf:
            _deps._warn_if_above_max_supported_version("Torch", torch.__version__, max_tested)
        facts["torch_max_tested_by_coremltools"] = max_tested
        facts["torch_above_tested"] = _deps._get_version(torch.__version__) > \
            _deps.Version(max_tested)
        facts["torch_version_warning"] = [line.split(": ", 1)[-1] for line in
                                          buf.getvalue().splitlines() if "Torch" in line]
    except (ImportError, AttributeError) as exc:  # another coremltools layout: say so
        facts["torch_max_tested_by_coremltools"] = None
        facts["torch_above_tested"] = None
        facts["torch_version_warning"] = [f"could not query coremltools: {exc}"]
    return facts


# ----------------------------------------------------------------------------- conversion

class _EncoderOutput:
    """Adapter so the traced graph returns the encoder's last hidden state only."""

    @staticmethod
    def wrap(encoder):
        import torch

        class EncoderOutput(torch.nn.Module):
            def __init__(self, enc):
                super().__init__()
                self.encoder = enc

            def forward(self, logmel):
                return self.encoder(logmel).last_hidden_state

        return EncoderOutput(encoder).eval()


def trace_encoder(encoder, contract: EncoderContract):
    """Trace the eager encoder on a zero log-mel of the contract's input shape.

    ``check_trace`` is off: it re-runs the model several times over, and the parity stage
    measures the converted program against the eager encoder anyway.

    Parameters
    ----------
    encoder : transformers WhisperEncoder
        The eager encoder; the trace returns its last hidden state only.
    contract : EncoderContract
        Gives the example input's shape.

    Returns
    -------
    (torch.jit.ScriptModule, str, float)
        The trace, its captured warnings and the seconds it took.
    """
    import torch
    module = _EncoderOutput.wrap(encoder)
    example = torch.zeros(contract.input_shape, dtype=torch.float32)
    t0 = time.perf_counter()
    with _captured_log() as buf, torch.no_grad(), freed_blocks_unmapped():
        traced = torch.jit.trace(module, example, check_trace=False)
    # The forward pass's activations are garbage now; conversion starts from the weights.
    del module, example
    release_memory()
    return traced, buf.getvalue(), time.perf_counter() - t0


@dataclass
class Conversion:
    """One ``ct.convert`` call: the in-memory model, its options, log and duration.

    ``model`` is None once :func:`release_conversion` dropped it.
    """

    model: Any
    precision: str
    options: dict
    log: str
    seconds: float


def convert_traced(traced, contract: EncoderContract, precision: str, *,
                   input_name: str | None = None, output_name: str | None = None,
                   io_dtype=np.float32, minimum_deployment_target=None) -> Conversion:
    """Convert a traced encoder to an ML program with coremltools.

    Parameters
    ----------
    traced : torch.jit.ScriptModule
        From :func:`trace_encoder`.
    contract : EncoderContract
        Gives the input shape and the feature names.
    precision : {"fp32", "fp16"}
        ``compute_precision`` FLOAT32 or FLOAT16; IO stays float32 either way.
    input_name, output_name, io_dtype, minimum_deployment_target
        Overrides for tests that need a package breaking the contract (a renamed output,
        float16 IO needs ``minimum_deployment_target=ct.target.iOS16``). The defaults
        follow the contract.

    Returns
    -------
    Conversion
        The model is not loaded (``skip_model_load``): nothing here predicts with it.

    Raises
    ------
    verifylib.errors.ParametersInvalid
        If ``precision`` is not one of :data:`PRECISIONS`.
    """
    import coremltools as ct
    if precision not in PRECISIONS:
        raise ParametersInvalid(f"precision must be one of {PRECISIONS}, got {precision!r}")
    in_name = input_name or contract.input_name
    out_name = output_name or contract.output_name
    cp = ct.precision.FLOAT32 if precision == "fp32" else ct.precision.FLOAT16
    options = {"convert_to": "mlprogram", "compute_precision": cp.name,
               "compute_units": "ALL", "source": "pytorch (torch.jit.trace)",
               "inputs": [{"name": in_name, "shape": list(contract.input_shape),
                           "dtype": np.dtype(io_dtype).name}],
               "outputs": [{"name": out_name, "dtype": np.dtype(io_dtype).name}],
               "minimum_deployment_target": None if minimum_deployment_target is None
               else str(minimum_deployment_target)}
    t0 = time.perf_counter()
    with _captured_log() as buf:
        model = ct.convert(
            traced, source="pytorch", convert_to="mlprogram", compute_precision=cp,
            compute_units=ct.ComputeUnit.ALL, skip_model_load=True,
            inputs=[ct.TensorType(name=in_name, shape=contract.input_shape, dtype=io_dtype)],
            outputs=[ct.TensorType(name=out_name, dtype=io_dtype)],
            minimum_deployment_target=minimum_deployment_target)
    seconds = time.perf_counter() - t0
    # The frontend's graph and the programs of the intermediate passes are cycles.
    release_memory()
    return Conversion(model, precision, options, buf.getvalue(), seconds)


def release_conversion(conv: Conversion) -> None:
    """Drop a conversion's in-memory model once its package has been saved elsewhere.

    The ``MLModel`` ``ct.convert`` returns keeps the whole MIL program, every weight as an
    array (for the fp16 variant a float16 copy of the encoder, for fp32 a reference that
    keeps the traced weights alive), plus a temporary ``.mlpackage`` that coremltools
    deletes only when the interpreter exits. Nothing reads either after
    :func:`stage_mlpackage` saved the package, so both go; ``options``, ``log`` and
    ``seconds`` stay for the evidence.

    Parameters
    ----------
    conv : Conversion
        The conversion; its ``model`` is set to None (a second call does nothing).
    """
    model, conv.model = conv.model, None
    if model is None:
        return
    path = getattr(model, "package_path", None)
    if path and getattr(model, "is_temp_package", False):
        shutil.rmtree(path, ignore_errors=True)
    del model
    release_memory()


# ----------------------------------------------------------------------------- placing

@dataclass
class StagedPackage:
    """A package saved to a staging folder beside its destination, read back and checked.

    Attributes
    ----------
    precision : str
        The variant.
    final : Path
        Where it goes when published.
    path : Path
        The staged package.
    description : dict
        :func:`describe_mlpackage` of the staged files.
    problems : list of str
        :func:`contract_problems`; empty when the contract holds.
    tree_digest : str or None
        Tree digest once published.
    """

    precision: str
    final: Path
    path: Path
    description: dict
    problems: list[str]
    tree_digest: str | None = None
    _root: Path | None = field(default=None, repr=False)

    @property
    def ok(self) -> bool:
        """True when the staged package meets the contract (no problems)."""
        return not self.problems


def stage_mlpackage(model, final: str | os.PathLike, contract: EncoderContract,
                    precision: str) -> StagedPackage:
    """Save ``model`` next to ``final`` under a staging name and check the saved files.

    Nothing is placed at ``final`` here; see :func:`publish_staged`.

    Parameters
    ----------
    model : coremltools.models.MLModel
        The converted model (``Conversion.model``).
    final : path-like
        Where the package goes when published; it must end in ``.mlpackage``.
    contract : EncoderContract
        The contract the saved files are checked against.
    precision : {"fp32", "fp16"}
        The variant.

    Returns
    -------
    StagedPackage
        The staged package, its description and its contract problems.

    Raises
    ------
    verifylib.errors.ContractBroken
        If ``final`` does not end in ``.mlpackage``.
    """
    final = Path(final)
    if final.suffix != MLPACKAGE_SUFFIX:
        raise ContractBroken(f"{final}: an ML program package must end in {MLPACKAGE_SUFFIX}")
    final.parent.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix=f".staging-{final.stem}-", dir=final.parent))
    try:
        pkg = root / final.name
        model.save(str(pkg))
        desc = describe_mlpackage(pkg)
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise
    return StagedPackage(precision, final, pkg, desc, contract_problems(desc, contract, precision),
                         _root=root)


def discard_staged(staged: StagedPackage) -> None:
    """Remove a staged package that will not be published.

    Parameters
    ----------
    staged : StagedPackage
        The package; its staging folder is removed (a published one has none left).
    """
    if staged._root is not None:
        shutil.rmtree(staged._root, ignore_errors=True)


def publish_staged(staged: StagedPackage) -> StagedPackage:
    """Rename a checked staged package into place and digest it.

    Parameters
    ----------
    staged : StagedPackage
        From :func:`stage_mlpackage`.

    Returns
    -------
    StagedPackage
        The same object, its ``path`` now ``final`` and its ``tree_digest`` set.

    Raises
    ------
    EncoderContractBroken
        If the package broke the contract (the staging folder is removed, nothing placed).
    """
    try:
        if not staged.ok:
            raise EncoderContractBroken(staged.problems, staged.description)
        publish_dir(staged.path, staged.final)
        staged.path = staged.final
        staged.tree_digest = tree_digest(staged.final)
        return staged
    finally:
        discard_staged(staged)


def place_mlpackage(model, final: str | os.PathLike, contract: EncoderContract,
                    precision: str) -> StagedPackage:
    """Save, read back, check and (only if the contract holds) publish one package.

    Parameters
    ----------
    model : coremltools.models.MLModel
        The converted model.
    final : path-like
        Where the package goes; it must end in ``.mlpackage``.
    contract : EncoderContract
        The contract the saved files are checked against.
    precision : {"fp32", "fp16"}
        The variant.

    Returns
    -------
    StagedPackage
        The published package (see :func:`publish_staged`).

    Raises
    ------
    EncoderContractBroken
        On any mismatch; nothing exists at ``final`` afterwards that was not there before.
    """
    return publish_staged(stage_mlpackage(model, final, contract, precision))


def link_or_copy(src: str | os.PathLike, dest: str | os.PathLike) -> str:
    """Publish ``dest`` as a hard link to ``src`` (a copy across file systems).

    The link (or copy) is made under a temporary name beside ``dest`` and renamed over it.

    Parameters
    ----------
    src : path-like
        The file to publish.
    dest : path-like
        Where it is published (its folder is created; an existing file is replaced).

    Returns
    -------
    str
        ``"hardlink"`` or ``"copy"``.
    """
    src, dest = Path(src), Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.staging-{os.getpid()}")
    tmp.unlink(missing_ok=True)
    try:
        os.link(src, tmp)
        how = "hardlink"
    except OSError:
        shutil.copyfile(src, tmp)
        how = "copy"
    try:
        os.replace(tmp, dest)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return how


# ----------------------------------------------------------------------------- macOS only

@dataclass(frozen=True)
class CompileResult:
    """One ``xcrun coremlc compile`` run and the ``.mlmodelc`` it published.

    Attributes
    ----------
    run : RunResult
        The compiler run (argv, exit, streams, wall time).
    path : Path
        The published ``.mlmodelc``.
    tree_digest : str
        Its tree digest.
    """

    run: RunResult
    path: Path
    tree_digest: str


def compile_mlpackage(package: str | os.PathLike, dest: str | os.PathLike, *,
                      runner: Callable | None = None, timeout: float = 1800) -> CompileResult:
    """Compile a package with ``xcrun coremlc compile`` and publish the ``.mlmodelc``.

    coremlc names its output after the input (``X.mlpackage`` -> ``X.mlmodelc``), so
    ``dest`` must be the package's name with the ``.mlmodelc`` suffix
    (docs/runtime-contract.md §4.3). The compiler writes into a staging folder beside
    ``dest``; only a complete output is renamed into place.

    Parameters
    ----------
    package : path-like
        The validated ``.mlpackage``.
    dest : path-like
        The ``.mlmodelc`` to publish.
    runner : callable, optional
        :func:`verifylib.runtime.runner.run` by default (tests pass a fake).
    timeout : float
        Seconds before the compiler is killed.

    Returns
    -------
    CompileResult
        The compiler run, the published path and its tree digest.

    Raises
    ------
    verifylib.errors.ContractBroken
        If ``dest`` is not named after the package (nothing is run).
    CompileError
        If coremlc fails, is killed, times out, or produces no ``.mlmodelc``.
    """
    from verifylib.runtime.runner import run
    runner = runner or run
    package, dest = Path(package), Path(dest)
    if dest.name != package.stem + MLMODELC_SUFFIX:
        raise ContractBroken(f"coremlc names its output {package.stem + MLMODELC_SUFFIX}, not "
                             f"{dest.name}: name the .mlpackage after the .mlmodelc")
    dest.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".staging-{dest.stem}-", dir=dest.parent))
    try:
        argv = ["xcrun", "coremlc", "compile", str(package), str(staging)]
        res = runner(argv, timeout=timeout)
        produced = staging / dest.name
        if not res.ok:
            tail = res.stderr.decode("utf-8", "replace").strip().splitlines()[-10:]
            raise CompileError(f"coremlc failed ({res.describe()}): {' '.join(argv)}\n"
                               + "\n".join(tail))
        if not produced.is_dir():
            found = sorted(p.name for p in staging.iterdir())
            raise CompileError(f"coremlc exited 0 but wrote no {dest.name} (found {found})")
        digest = tree_digest(produced)
        publish_dir(produced, dest)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return CompileResult(run=res, path=dest, tree_digest=digest)


def load_compiled(mlmodelc: str | os.PathLike, *, loader: Callable | None = None):
    """Load a published ``.mlmodelc`` the way whisper.cpp does: ``ComputeUnit.ALL``.

    Parameters
    ----------
    mlmodelc : path-like
        The compiled model directory (the published bytes, docs/runtime-contract.md §7.1).
    loader : callable, optional
        ``coremltools.models.CompiledMLModel`` by default (macOS only); tests pass a fake.

    Returns
    -------
    coremltools.models.CompiledMLModel
        What ``loader`` returns for the path with ``compute_units=ComputeUnit.ALL``.
    """
    import coremltools as ct
    loader = loader or ct.models.CompiledMLModel
    return loader(str(mlmodelc), compute_units=ct.ComputeUnit.ALL)


def predict_compiled(model, mel: np.ndarray, contract: EncoderContract) -> np.ndarray:
    """Run one prediction through a loaded compiled model, checked against the contract.

    Parameters
    ----------
    model : coremltools.models.CompiledMLModel
        The loaded model (:func:`load_compiled`).
    mel : numpy.ndarray
        The log-mel input (converted to contiguous float32).
    contract : EncoderContract
        Gives the feature names and shapes.

    Returns
    -------
    numpy.ndarray
        The output feature, float32 of the contract's output shape.

    Raises
    ------
    verifylib.errors.ContractBroken
        If ``mel`` does not have the contract's input shape.
    EncoderContractBroken
        If the output feature is missing, not float32, or not the contract's shape
        (whisper.cpp would copy it blindly).
    """
    x = np.ascontiguousarray(np.asarray(mel, dtype=np.float32))
    if tuple(x.shape) != contract.input_shape:
        raise ContractBroken(f"log-mel shape {x.shape}, the contract is {contract.input_shape}")
    out = model.predict({contract.input_name: x})
    if contract.output_name not in out:
        raise EncoderContractBroken([f"prediction has outputs {sorted(out)}, not "
                                     f"{contract.output_name!r}"])
    y = np.asarray(out[contract.output_name])
    problems = []
    if y.dtype != np.float32:
        problems.append(f"output dtype {y.dtype}, the runtime copies float32")
    if tuple(y.shape) != contract.output_shape:
        problems.append(f"output shape {tuple(y.shape)}, the contract is {contract.output_shape}")
    if problems:
        raise EncoderContractBroken(problems)
    return y
