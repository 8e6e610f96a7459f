"""Core ML export for real: tiny.en traced once and converted once per variant per session
(``tiny_en_export``, tests/physical/conftest.py); the contract follows the config and bad
packages are refused before placement, on small randomly initialised Whisper encoders
converted by coremltools."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.helpers.encoders import export_small, small_encoder
from verifylib.canonical import is_sha256, tree_digest
from verifylib.models.coreml_contract import (
    EncoderContract,
    EncoderContractBroken,
    contract_of,
    contract_problems,
    describe_mlpackage,
)
from verifylib.models.coreml_package import place_mlpackage
from verifylib.runtime import contracts

PACKAGE = "ggml-model-encoder.mlpackage"


# ----------------------------------------------------------------------------- tiny.en

def test_tiny_en_contract_is_derived_from_its_config(tiny_en_bundle):
    c = contract_of(tiny_en_bundle.model.get_encoder())
    assert (c.n_mels, c.max_source_positions, c.d_model) == (80, 1500, 384)
    assert (c.conv1_stride, c.conv2_stride) == (1, 2)
    assert c.mel_width == 3000 and c.input_shape == (1, 80, 3000)
    assert c.output_shape == (1, 1500, 384)
    d = c.as_dict()
    assert d["input"] == {"name": "logmel_data", "dtype": "FLOAT32", "shape": [1, 80, 3000]}
    assert d["output"] == {"name": "output", "dtype": "FLOAT32", "shape": [1, 1500, 384]}
    assert EncoderContract(**d["derived_from"]) == c


def test_tiny_en_packages_meet_the_contract(tiny_en_export):
    t = tiny_en_export
    for prec, path in (("fp32", t.fp32), ("fp16", t.fp16)):
        assert path.name == PACKAGE and path.is_dir()
        desc = describe_mlpackage(path)
        assert contract_problems(desc, t.contract, prec) == []
        assert desc["model_type"] == "mlProgram"
        assert [f["name"] for f in desc["inputs"]] == [contracts.COREML_INPUT_NAME]
        assert [f["name"] for f in desc["outputs"]] == [contracts.COREML_OUTPUT_NAME]
        assert desc["inputs"][0]["dtype"] == desc["outputs"][0]["dtype"] == "FLOAT32"
        assert is_sha256(tree_digest(path))
        # Nothing but the package is left in the variant folder (no staging debris).
        assert [p.name for p in path.parent.iterdir()] == [PACKAGE]
    assert describe_mlpackage(t.fp32)["compute_dtypes"] == ["FLOAT32"]
    assert "FLOAT16" in describe_mlpackage(t.fp16)["compute_dtypes"]
    # docs/facts.md: the tiny.en program has 11 op types.
    ops = set(describe_mlpackage(t.fp32)["op_types"])
    assert ops == {"const", "linear", "transpose", "reshape", "add", "layer_norm", "matmul",
                   "gelu", "mul", "softmax", "conv"}


# ----------------------------------------------------------------------------- other configs

@pytest.mark.parametrize("shape", [
    dict(n_mels=40, max_pos=50, d_model=32),
    dict(n_mels=128, max_pos=24, d_model=48, layers=2),
    dict(n_mels=16, max_pos=30, d_model=32, conv2_stride=1),   # strides come from the modules
])
def test_contract_follows_the_config(shape, tmp_path):
    enc = small_encoder(**shape)
    contract, conv = export_small(enc, tmp_path)
    stride = shape.get("conv2_stride", 2)
    assert contract.input_shape == (1, shape["n_mels"], shape["max_pos"] * stride)
    assert contract.output_shape == (1, shape["max_pos"], shape["d_model"])
    placed = place_mlpackage(conv.model, tmp_path / "fp32" / PACKAGE, contract, "fp32")
    desc = placed.description
    assert desc["inputs"][0]["shape"] == list(contract.input_shape)
    assert desc["outputs"][0]["shape"] == list(contract.output_shape)
    assert placed.tree_digest == tree_digest(tmp_path / "fp32" / PACKAGE)


def _assert_refused(exc_info, final: Path, needle: str):
    assert any(needle in p for p in exc_info.value.problems), exc_info.value.problems
    assert not final.exists()
    assert list(final.parent.iterdir()) == [], "staging left behind"


def test_renamed_output_is_refused_before_placement(tmp_path):
    contract, conv = export_small(small_encoder(), tmp_path, output_name="encoder_out")
    final = tmp_path / "fp32" / PACKAGE
    with pytest.raises(EncoderContractBroken) as ei:
        place_mlpackage(conv.model, final, contract, "fp32")
    _assert_refused(ei, final, "runtime needs exactly ['output']")


def test_float16_io_is_refused_before_placement(tmp_path):
    import coremltools as ct
    contract, conv = export_small(small_encoder(), tmp_path, "fp16", io_dtype=np.float16,
                                  minimum_deployment_target=ct.target.iOS16)
    final = tmp_path / "fp16" / PACKAGE
    with pytest.raises(EncoderContractBroken) as ei:
        place_mlpackage(conv.model, final, contract, "fp16")
    _assert_refused(ei, final, "dtype FLOAT16")


def test_wrong_shape_is_refused_before_placement(tmp_path):
    # A package converted from one model, placed for another model's contract.
    _, conv = export_small(small_encoder(n_mels=40, max_pos=50), tmp_path)
    other = contract_of(small_encoder(n_mels=80, max_pos=50))
    final = tmp_path / "fp32" / PACKAGE
    with pytest.raises(EncoderContractBroken) as ei:
        place_mlpackage(conv.model, final, other, "fp32")
    _assert_refused(ei, final, "shape [1, 40, 100], the contract is [1, 80, 100]")


def test_fp16_compute_is_refused_as_the_fp32_variant(tmp_path):
    contract, conv = export_small(small_encoder(), tmp_path, "fp16")
    final = tmp_path / "fp32" / PACKAGE
    with pytest.raises(EncoderContractBroken) as ei:
        place_mlpackage(conv.model, final, contract, "fp32")
    _assert_refused(ei, final, "expected FLOAT32 only")
