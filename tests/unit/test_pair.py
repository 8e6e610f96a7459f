"""The pair measurement: an encoder program against a reference encoder, block by block.

Block taps are found on tiny MIL programs built with coremltools' Builder (plain and ANE
layouts, and structures that must be refused); measure_pair runs on one small random
Whisper encoder exported once for the module. tiny.en is in tests/physical/test_pair.py."""

from __future__ import annotations

import copy
import json
import math

import numpy as np
import pytest

from tests.helpers.mil_programs import save_program
from verifylib.errors import ContractBroken, ParametersInvalid
from verifylib.numerics.mil_exec import load_program
from verifylib.numerics.pair import (block_taps, first_divergent_block, measure_pair,
                                     to_frames)

RNG = np.random.default_rng(3)
W = [RNG.normal(scale=0.3, size=(8, 8)).astype(np.float32) for _ in range(4)]


def _program(tmp_path, build, shape, name):
    return load_program(save_program(tmp_path, build, shape, name))


def _plain(mb, x, blocks=2):
    s = mb.add(x=x, y=np.full((1, 6, 8), 0.1, np.float32))  # a positional embedding
    for i in range(blocks):
        h = mb.linear(x=mb.layer_norm(x=s, axes=[-1]), weight=W[0])
        s = mb.add(x=s, y=h)
        h = mb.linear(x=mb.layer_norm(x=s, axes=[-1]), weight=W[1])
        h = mb.add(x=h, y=mb.mul(x=h, y=h))  # an add of a value and itself: no layer_norm
        s = mb.add(x=h, y=s, name=f"block_{i}_out")  # the stream as the second operand
    return mb.layer_norm(x=s, axes=[-1])


def _ane(mb, x):
    s = x  # (1, C, 1, T)
    for i in range(2):
        for k in range(2):
            h = mb.layer_norm(x=s, axes=[1])
            h = mb.conv(x=h, weight=W[2 * k].reshape(8, 8, 1, 1))
            s = mb.add(x=s, y=h, name=f"b{i}_{k}")
    return mb.layer_norm(x=s, axes=[1])


def test_block_taps_follow_the_residual_chain(tmp_path):
    taps = block_taps(_program(tmp_path, _plain, (1, 6, 8), "plain"))
    assert taps.unavailable is None
    assert taps.values == ("block_0_out", "block_1_out") and taps.adds == 4
    assert taps.stream_shape == (1, 6, 8)
    ane = block_taps(_program(tmp_path, _ane, (1, 8, 1, 6), "ane"))
    assert ane.unavailable is None and ane.values == ("b0_1", "b1_1")
    assert ane.stream_shape == (1, 8, 1, 6)


def test_block_taps_say_why_not(tmp_path):
    def no_norm(mb, x):
        return mb.add(x=x, y=mb.mul(x=x, y=x))

    def one_add(mb, x):
        return mb.add(x=x, y=mb.linear(x=mb.layer_norm(x=x, axes=[-1]), weight=W[0]))

    def forked(mb, x):  # two residual branches off the same stream: not one chain
        a = mb.add(x=x, y=mb.linear(x=mb.layer_norm(x=x, axes=[-1]), weight=W[0]))
        b = mb.add(x=x, y=mb.linear(x=mb.layer_norm(x=x, axes=[-1]), weight=W[1]))
        return mb.concat(values=(a, b), axis=-1)

    for build, needle in ((no_norm, "no residual add"), (one_add, "not two per block"),
                          (forked, "do not form one chain")):
        taps = block_taps(_program(tmp_path, build, (1, 6, 8), build.__name__))
        assert taps.values == () and needle in taps.unavailable, taps


def test_to_frames_reads_both_layouts_and_guesses_none():
    a = np.arange(6 * 8, dtype=np.float32).reshape(1, 6, 8)
    np.testing.assert_array_equal(to_frames(a, 6, 8), a[0])
    ane = a[0].T.reshape(1, 8, 1, 6)
    np.testing.assert_array_equal(to_frames(ane, 6, 8), a[0])
    np.testing.assert_array_equal(to_frames(a[0].T[None], 6, 8), a[0])
    for bad, t, c in ((a.reshape(1, 48), 6, 8), (np.zeros((1, 8, 8)).T[None], 8, 8),
                      (np.zeros((2, 6, 8)), 6, 8)):
        with pytest.raises(ContractBroken):
            to_frames(bad, t, c)


def test_first_divergent_block_is_pure():
    assert first_divergent_block([120.0, 90.0, 20.0, 50.0], 30.0) == 2
    assert first_divergent_block([120.0, math.inf], 30.0) is None
    assert first_divergent_block([120.0, math.nan], 30.0) == 1
    assert first_divergent_block([5.0], None) is None
    assert first_divergent_block([], 30.0) is None


# ----------------------------------------------------------------------------- measure_pair

def _encoder(seed: int, layers: int = 3):
    """A small random Whisper encoder whose blocks matter.

    At transformers' initialisation (std 0.02) the blocks add almost nothing to the
    residual stream, which the shared sinusoidal positional embedding then dominates: two
    such encoders agree at 31 dB. Weights of unit scale make every block count.
    """
    import torch

    from tests.helpers.encoders import small_encoder
    enc = small_encoder(n_mels=8, max_pos=6, d_model=16, layers=layers, heads=2, seed=seed)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in enc.named_parameters():
            if "embed_positions" not in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.5)
    return enc


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """A 3-block random Whisper encoder and its fp32 program."""
    from tests.helpers.encoders import export_small
    from verifylib.numerics.reference import random_logmel

    enc = _encoder(11)
    contract, conv = export_small(enc, None)
    path = tmp_path_factory.mktemp("pair") / "small.mlpackage"
    conv.model.save(str(path))
    mels = {"fixture": random_logmel(contract, seed=1), "random": random_logmel(contract)}
    return enc, load_program(path), mels


def test_same_encoder_agrees_at_every_block(small):
    enc, program, mels = small
    m = measure_pair(program, enc, mels, threshold_db=30.0)
    assert m.blocks_tapped == m.reference_blocks == 3 and m.taps_unavailable is None
    assert [p.input for p in m.inputs] == ["fixture", "random"]
    for p in m.inputs:
        assert p.snr_db > 100 and p.cosine > 0.9999999 and p.max_abs_error < 1e-4
        assert len(p.block_snr_db) == 3 and min(p.block_snr_db) > 100
        assert p.first_divergent_block is None
        assert p.reference_seconds > 0 and p.program_seconds > 0
    doc = json.loads(json.dumps(m.to_json()))  # inf survives as a float in JSON text
    assert doc["blocks_tapped"] == 3 and doc["inputs"][0]["metrics"]["n"] == 6 * 16


def test_other_weights_diverge_at_block_0(small):
    _, program, mels = small
    other = _encoder(12)
    m = measure_pair(program, other, mels, threshold_db=30.0)
    for p in m.inputs:
        assert p.snr_db < 10 and p.first_divergent_block == 0
    assert measure_pair(program, other, mels).inputs[0].first_divergent_block is None


def test_swapped_blocks_diverge_at_the_first_swapped_one(small):
    enc, program, mels = small
    swapped = copy.deepcopy(enc)
    layers = swapped.layers
    layers[1], layers[2] = layers[2], layers[1]
    m = measure_pair(program, swapped, {"fixture": mels["fixture"]}, threshold_db=30.0)
    (p,) = m.inputs
    assert p.block_snr_db[0] > 100 and p.block_snr_db[1] < 30
    assert p.first_divergent_block == 1


def test_a_reference_of_another_depth_is_measured_at_the_output_only(small):
    _, program, mels = small
    shallow = _encoder(11, layers=2)
    m = measure_pair(program, shallow, {"random": mels["random"]}, threshold_db=30.0)
    assert m.blocks_tapped == 0 and m.tap_values == ()
    assert m.taps_unavailable == "the program closes 3 blocks, the reference has 2"
    assert m.inputs[0].block_snr_db == () and m.inputs[0].first_divergent_block is None
    assert math.isfinite(m.inputs[0].snr_db)
    with pytest.raises(ParametersInvalid, match="at least one"):
        measure_pair(program, shallow, {})
