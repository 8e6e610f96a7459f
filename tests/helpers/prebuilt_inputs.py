"""The files a parameter file names for an audit of a given ``.mlmodelc`` with a ggml model
file, and those parameters (tests/simmac/test_prebuilt_mlmodelc*.py).

- ``ggml``: ``ggml-tiny.en.bin``, the default model written by our writer (f16);
- ``encoder``: our fp32 export of the default model, compiled by the simulated ``coremlc``
  (:mod:`tests.helpers.compiled_models`), named ``ggml-tiny.en-encoder.mlmodelc`` as
  downloaded encoders are;
- ``other``: the same export of an encoder with the same configuration and seeded random
  weights (another model of the same shapes), compiled the same way.

Made once per process under the session's base temp folder (about 20 s: the ggml file and
two traces and conversions of tiny.en's encoder).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path

import yaml

from verifylib import params

OTHER_SEED = 20261202


@dataclass(frozen=True)
class Given:
    """The files the parameters name."""

    ggml: Path
    encoder: Path
    other: Path


_MADE: dict[Path, Given] = {}


def _export_compiled(encoder, folder: Path) -> Path:
    from tests.helpers.compiled_models import compile_like_coremlc
    from verifylib.models.coreml_contract import contract_of
    from verifylib.models.coreml_export import convert_traced, trace_encoder
    from verifylib.models.coreml_package import place_mlpackage
    contract = contract_of(encoder)
    traced, _, _ = trace_encoder(encoder, contract)
    conv = convert_traced(traced, contract, "fp32")
    pkg = place_mlpackage(conv.model, folder / "ggml-tiny.en-encoder.mlpackage", contract,
                          "fp32").final
    return compile_like_coremlc(pkg, folder / "compiled")


def given_files(base: Path, cache_dir: Path) -> Given:
    """Make the three files under ``base`` once per process (the session's base temp)."""
    base = Path(base)
    if base not in _MADE:
        import torch
        from transformers.models.whisper.modeling_whisper import WhisperEncoder

        from tests.helpers.model_data import default_model_spec
        from verifylib.models.ggml_writer import write_ggml_model
        from verifylib.models.hf import load_hf_encoder
        from verifylib.models.intake import obtain_model

        root = base / "prebuilt-mlmodelc-inputs"
        info = obtain_model(default_model_spec(), cache_dir, log=lambda _m: None)
        ggml = root / "ggml-tiny.en.bin"
        root.mkdir(parents=True)
        write_ggml_model(info.hf_dir, ggml)
        encoder, _ = load_hf_encoder(info.hf_dir)
        ours = _export_compiled(encoder, root / "ours")
        torch.manual_seed(OTHER_SEED)
        other = _export_compiled(WhisperEncoder(copy.deepcopy(encoder.config)).eval(),
                                 root / "other")
        _MADE[base] = Given(ggml, ours, other)
    return _MADE[base]


def audit_params(ggml: Path, encoder: Path, name: str) -> params.Params:
    """The default parameters with ``model: {kind: ggml}`` and ``encoder: {path}``, cut to
    the jfk fixture (from the verified runtime tree) and two canary runs per side."""
    data = yaml.safe_load(params.DEFAULT_PARAMETERS.read_text())
    data["name"] = name
    data["fixtures"] = [f for f in data["fixtures"] if f["id"] == "jfk"]
    data["canary"] = {"runs": 2, "timeout_s": 60, "first_run_timeout_s": 120}
    data.pop("export")  # a prebuilt encoder: fp16 is switched off by the encoder key
    data["model"] = {"kind": "ggml", "path": str(ggml), "language": "en"}
    data["encoder"] = {"path": str(encoder)}
    return params.validate(data, f"{name} parameters", params.PARAMETERS_DIR)


def gate_records(run_dir: Path) -> dict:
    """Gate id -> its record, from every stage file of the run."""
    from verifylib import canonical
    out = {}
    for path in sorted((run_dir / "gates").glob("*.json")):
        for rec in canonical.read_json(path)["gates"]:
            out[rec["id"]] = rec
    return out


__all__ = ["Given", "given_files", "audit_params", "gate_records", "OTHER_SEED"]
