"""The pair measurement on tiny.en: its fp32 and fp16 programs against its own encoder,
and against encoders that are not it (same shapes, other weights; two blocks swapped).
The thresholds asserted are loose bounds around the measured figures."""

from __future__ import annotations

import copy

import pytest

from verifylib.numerics.pair import measure_pair

THRESHOLD_DB = 30.0
"""A block SNR floor between the fp16 program's (about 50-60 dB) and another model's."""


@pytest.fixture(scope="module")
def tiny_ref(tiny_en_info):
    from verifylib.models.hf import load_hf_encoder
    encoder, fe = load_hf_encoder(tiny_en_info.hf_dir)
    return encoder, fe


@pytest.fixture(scope="module")
def mels(tiny_ref, tiny_en_export, jfk_wav):
    from verifylib.numerics.reference import fixture_logmel, random_logmel
    from verifylib.runtime.audio import read_wav_16k
    _, fe = tiny_ref
    c = tiny_en_export.contract
    return {"fixture": fixture_logmel(fe, read_wav_16k(jfk_wav), c), "random": random_logmel(c)}


def test_same_model_fp32_program(tiny_ref, tiny_en_export, mels):
    m = measure_pair(tiny_en_export.fp32, tiny_ref[0], mels, threshold_db=THRESHOLD_DB)
    assert m.blocks_tapped == m.reference_blocks == 4 and m.taps_unavailable is None
    for p in m.inputs:
        assert p.snr_db > 100 and p.cosine > 0.9999999, p
        assert min(p.block_snr_db) > 100 and p.first_divergent_block is None


def test_same_model_fp16_program(tiny_ref, tiny_en_export, mels):
    m = measure_pair(tiny_en_export.fp16, tiny_ref[0], mels, threshold_db=THRESHOLD_DB)
    assert m.blocks_tapped == 4
    for p in m.inputs:
        assert 45 < p.snr_db < 70 and p.cosine > 0.99999, p
        assert min(p.block_snr_db) > 40 and p.first_divergent_block is None


def test_random_weights_of_the_same_shape_diverge_at_block_0(tiny_ref, tiny_en_export, mels):
    import torch
    from transformers.models.whisper.modeling_whisper import WhisperEncoder

    torch.manual_seed(20261201)
    other = WhisperEncoder(copy.deepcopy(tiny_ref[0].config)).eval()
    m = measure_pair(tiny_en_export.fp32, other, mels, threshold_db=THRESHOLD_DB)
    for p in m.inputs:
        assert p.snr_db < 10 and p.first_divergent_block == 0, p


def test_swapped_blocks_diverge_at_the_first_swapped_one(tiny_ref, tiny_en_export, mels):
    swapped = copy.deepcopy(tiny_ref[0])
    layers = swapped.layers
    layers[1], layers[2] = layers[2], layers[1]
    m = measure_pair(tiny_en_export.fp32, swapped, mels, threshold_db=THRESHOLD_DB)
    for p in m.inputs:
        assert p.block_snr_db[0] > 100 and p.first_divergent_block == 1, p
