"""Core ML export of the Whisper encoder: the eager encoder traced and converted.

Library first: torch traces the eager Hugging Face encoder and coremltools converts the
trace to an ML program whose interface follows the contract
(:mod:`verifylib.models.coreml_contract`). The conversion's build facts (coremltools and
torch versions, the warning coremltools logs when torch is newer than it was tested
with, the conversion log) are recorded.

Saving, checking and publishing the converted package, then compiling it, is
:mod:`verifylib.models.coreml_package`'s job.
"""

from __future__ import annotations

import contextlib
import io
import logging
import shutil
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from verifylib.errors import ParametersInvalid
from verifylib.models.coreml_contract import PRECISIONS, EncoderContract
from verifylib.numerics.memory import freed_blocks_unmapped, release_memory

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
        If ``precision`` is not one of
        :data:`~verifylib.models.coreml_contract.PRECISIONS`.
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
    :func:`~verifylib.models.coreml_package.stage_mlpackage` saved the package, so both go;
    ``options``, ``log`` and ``seconds`` stay for the evidence.

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
