"""Encoder cards of real packages: tiny.en's fp32 and fp16 exports, compressed variants
made from the fp32 one with coremltools.optimize.coreml, and a Float16-IO conversion of
tiny.en that must fail the contract with the guide's reason."""

from __future__ import annotations

import json

import numpy as np
import pytest

from verifylib.models.coreml_contract import FLOAT16_IO_REASON, describe_mlpackage
from verifylib.models.encoder_card import EncoderCard, contract_check, declared_policy
from verifylib.models.encoder_reader import describe_encoder


def test_tiny_en_fp32_card(tiny_en_export):
    card = describe_encoder(tiny_en_export.fp32)
    assert (card.format, card.precision, card.layout, card.weight_compression) == \
        ("mlpackage", "fp32", "plain", "none")
    assert card.converter_version == "9.0" and card.source.startswith("torch==2.13")
    assert card.source_dialect == "TorchScript"
    hist = dict(card.op_histogram)
    assert (hist["linear"], hist["layer_norm"], hist["matmul"]) == (24, 9, 8)
    desc = describe_mlpackage(tiny_en_export.fp32)
    assert {k: card.description()[k] for k in desc} == desc
    assert contract_check(card, tiny_en_export.contract) == []
    assert declared_policy(card) == "fp32-v1"
    assert EncoderCard.from_json(json.loads(json.dumps(card.to_json()))) == card


def test_tiny_en_fp16_card(tiny_en_export):
    card = describe_encoder(tiny_en_export.fp16)
    assert card.precision == "fp16", card.precision_reason
    assert dict(card.op_histogram)["cast"] == 2  # float32 IO, float16 inside
    assert card.layout == "plain" and card.weight_compression == "none"
    assert contract_check(card, tiny_en_export.contract) == []
    assert declared_policy(card) == "fp16-v1"


@pytest.fixture(scope="module")
def compressed(tiny_en_export, tmp_path_factory):
    """tiny.en's fp32 package palettized to 6 bits and linearly quantized to int8."""
    import coremltools as ct
    import coremltools.optimize.coreml as cto

    root = tmp_path_factory.mktemp("compressed")
    model = ct.models.MLModel(str(tiny_en_export.fp32), skip_model_load=True)
    pal = cto.palettize_weights(model, cto.OptimizationConfig(
        global_config=cto.OpPalettizerConfig(nbits=6, mode="uniform")))
    pal.save(str(root / "pal6.mlpackage"))
    q = cto.linear_quantize_weights(model, cto.OptimizationConfig(
        global_config=cto.OpLinearQuantizerConfig(mode="linear_symmetric", dtype="int8")))
    q.save(str(root / "int8.mlpackage"))
    return {"pal6": root / "pal6.mlpackage", "int8": root / "int8.mlpackage"}


def test_compressed_variants_of_tiny_en(compressed, tiny_en_export):
    pal = describe_encoder(compressed["pal6"])
    assert pal.weight_compression == "palettized"
    (entry,) = pal.compressed_weights
    assert entry.op_type == "constexpr_lut_to_dense" and entry.nbits == (6,)
    assert entry.count >= 24  # every linear weight; small ones stay plain constants
    assert pal.precision == "fp32" and pal.layout == "plain"
    q = describe_encoder(compressed["int8"])
    assert q.weight_compression == "linear-quantized"
    assert q.compressed_weights[0].nbits == (8,) and q.precision == "fp32"
    # Compression changes weights, not the interface.
    for card in (pal, q):
        assert contract_check(card, tiny_en_export.contract) == []


def test_float16_io_tiny_en_fails_the_contract_with_the_reason(tiny_en_bundle, tmp_path):
    import coremltools as ct

    from verifylib.models.coreml_contract import contract_of
    from verifylib.models.coreml_export import convert_traced, trace_encoder

    encoder = tiny_en_bundle.model.get_encoder()
    contract = contract_of(encoder)
    traced, _, _ = trace_encoder(encoder, contract)
    conv = convert_traced(traced, contract, "fp16", io_dtype=np.float16,
                          minimum_deployment_target=ct.target.iOS16)
    path = tmp_path / "ggml-model-encoder.mlpackage"
    conv.model.save(str(path))
    card = describe_encoder(path)
    assert card.inputs[0].dtype == card.outputs[0].dtype == "FLOAT16"
    assert card.precision == "fp16"
    assert contract_check(card, contract) == [
        f"logmel_data: dtype FLOAT16, a Float16 interface: {FLOAT16_IO_REASON}",
        f"output: dtype FLOAT16, a Float16 interface: {FLOAT16_IO_REASON}"]
