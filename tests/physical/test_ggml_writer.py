"""The ggml writer on the registry's tiny.en: round trip against the Hugging Face weights,
then whisper-cli itself transcribes the written model."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.helpers.ggml import assert_same_result, forbid_full_load, write_loaded
from tests.helpers.model_data import JFK_TEXT, normalize
from verifylib.canonical import sha256_file
from verifylib.models.ct2 import read_ct2
from verifylib.models.ggml_file import GgmlFileInvalid, open_ggml
from verifylib.models.ggml_writer import (GGML_FILE_MAGIC, expected_tensors, ggml_name,
                                          write_ggml_model)
from verifylib.runtime import contracts
from verifylib.runtime.runner import run


@pytest.fixture(scope="session")
def tiny_en_ggml(tiny_en_info, tmp_path_factory):
    out = tmp_path_factory.mktemp("ggml") / "fp32" / "ggml-model.bin"
    return write_ggml_model(tiny_en_info.hf_dir, out)


@pytest.fixture(scope="session")
def tiny_en_ggml_file(tiny_en_ggml):
    with open_ggml(tiny_en_ggml.path) as gf:
        yield gf


def test_result_describes_the_file(tiny_en_ggml):
    r = tiny_en_ggml
    assert r.path.is_file() and r.bytes == r.path.stat().st_size
    assert r.sha256 == sha256_file(r.path)
    assert r.path.read_bytes()[:4] == GGML_FILE_MAGIC.to_bytes(4, "little") == b"lmgg"
    assert r.n_tensors == 167 == 7 + 4 + 15 * 4 + 24 * 4  # loader: 15/encoder block, 24/decoder block
    assert r.n_vocab_entries == 50257
    # The CTranslate2 source is fp16, so f16 storage loses nothing.
    assert r.lossless and r.max_abs_rounding == 0.0
    assert [p.name for p in r.path.parent.iterdir()] == ["ggml-model.bin"]  # no staging left


def test_hparams_round_trip(tiny_en_ggml, tiny_en_ggml_file, tiny_en_bundle):
    cfg = tiny_en_bundle.model.config
    want = {"n_vocab": cfg.vocab_size, "n_audio_ctx": 1500, "n_audio_state": 384,
            "n_audio_head": 6, "n_audio_layer": 4, "n_text_ctx": 448, "n_text_state": 384,
            "n_text_head": 6, "n_text_layer": 4, "n_mels": 80, "ftype": 1}
    assert dict(tiny_en_ggml_file.hparams) == tiny_en_ggml.hparams == want


def test_mel_filters_are_the_slaney_bank(tiny_en_ggml_file):
    from transformers.audio_utils import mel_filter_bank

    bank = mel_filter_bank(201, 80, 0, 8000, 16000, norm="slaney", mel_scale="slaney")
    assert tiny_en_ggml_file.mel_filters.shape == (80, 201)
    np.testing.assert_array_equal(tiny_en_ggml_file.mel_filters, bank.T.astype(np.float32))


def test_vocab_is_the_byte_level_bpe(tiny_en_ggml_file, tiny_en_info):
    vocab = tiny_en_ggml_file.vocab
    assert len(vocab) == 50257
    assert vocab[0] == b"!" and vocab[220] == b" " and vocab[50256] == b"<|endoftext|>"
    tok = json.loads((tiny_en_info.hf_dir / "tokenizer.json").read_text())["model"]["vocab"]
    assert vocab[tok["ĠAmericans"]] == b" Americans"
    # Tokens holding part of a multi-byte UTF-8 character survive as raw bytes.
    assert sum(1 for t in vocab if _not_utf8(t)) > 0


def _not_utf8(b: bytes) -> bool:
    try:
        b.decode("utf-8")
        return False
    except UnicodeDecodeError:
        return True


def test_tensor_names_shapes_types_match_the_loader(tiny_en_ggml_file):
    exp = expected_tensors(tiny_en_ggml_file.hparams)
    got = tiny_en_ggml_file.tensors
    assert list(got) == list(exp)
    for name, (dims, gtype) in exp.items():
        assert got[name].dims == dims, name
        assert got[name].type_name == ("f16" if gtype == 1 else "f32"), name
    assert got["encoder.conv1.bias"].dims == (1, 384)
    assert got["encoder.conv1.weight"].type_name == "f16"
    assert got["decoder.positional_embedding"].type_name == "f32"
    assert got["decoder.token_embedding.weight"].dims == (384, 51864)


@pytest.mark.parametrize("hf", [
    "model.encoder.conv1.weight", "model.encoder.conv2.bias",
    "model.encoder.embed_positions.weight", "model.encoder.layers.1.self_attn.q_proj.weight",
    "model.encoder.layers.3.self_attn.k_proj.weight", "model.encoder.layers.0.fc2.bias",
    "model.encoder.layer_norm.bias", "model.decoder.embed_tokens.weight",
    "model.decoder.embed_positions.weight", "model.decoder.layers.2.encoder_attn.v_proj.weight",
    "model.decoder.layers.3.encoder_attn_layer_norm.weight", "model.decoder.layers.0.fc1.weight",
    "model.decoder.layer_norm.weight",
])
def test_tensor_values_equal_the_hf_weights(tiny_en_ggml_file, tiny_en_bundle, hf):
    want = tiny_en_bundle.model.state_dict()[hf].numpy()
    got = tiny_en_ggml_file.tensor(ggml_name(hf)).reshape(want.shape)
    np.testing.assert_array_equal(got, want)  # lossless: the source is fp16


def test_bytes_trace_back_to_the_registry_file(tiny_en_ggml_file, tiny_en_ct2_dir):
    ct2 = read_ct2(tiny_en_ct2_dir / "model.bin")
    kv = ct2.variables["decoder/layer_1/attention/linear_1/weight"]
    got = tiny_en_ggml_file.raw("decoder.blocks.1.cross_attn.value.weight")
    assert got.dtype == np.float16
    assert got.tobytes() == np.ascontiguousarray(kv[384:]).tobytes()


def test_overwrite_is_atomic_and_repeatable(tiny_en_info, tiny_en_ggml, tmp_path):
    out = tmp_path / "ggml-model.bin"
    out.write_bytes(b"old")
    r = write_ggml_model(tiny_en_info.hf_dir, out)
    assert r.sha256 == tiny_en_ggml.sha256  # deterministic bytes
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ggml-model.bin"]


def test_read_refuses_bad_magic_and_truncation(tiny_en_ggml, tmp_path):
    bad = tmp_path / "bad.bin"
    bad.write_bytes(b"GGUF" + b"\0" * 60)
    with pytest.raises(GgmlFileInvalid, match="bad magic"):
        open_ggml(bad)
    with open(tiny_en_ggml.path, "rb") as fh:
        head = fh.read(1_000_000)
    bad.write_bytes(head)
    with pytest.raises(GgmlFileInvalid, match="truncated"):
        open_ggml(bad)


# ----------------------------------------------------------------------------- streaming

def test_default_model_streams_to_the_same_bytes(tiny_en_info, tiny_en_ggml, tmp_path, monkeypatch):
    loaded = write_loaded(tiny_en_info.hf_dir, tmp_path / "loaded" / "ggml-model.bin", monkeypatch)
    assert_same_result(tiny_en_ggml, loaded)
    with monkeypatch.context() as m:
        forbid_full_load(m)
        streamed = write_ggml_model(tiny_en_info.hf_dir, tmp_path / "streamed" / "ggml-model.bin")
    assert_same_result(streamed, loaded)


# ----------------------------------------------------------------------------- whisper-cli

@pytest.fixture(scope="session")
def ggml_whisper_cli(v185_ggml_build) -> Path:
    """The session's shared static GGML whisper-cli (built once, or taken from the cache)."""
    return v185_ggml_build.result.binary


@pytest.mark.physical
def test_whisper_cli_transcribes_the_written_model(ggml_whisper_cli, tiny_en_ggml, jfk_wav):
    res = run([ggml_whisper_cli, "-m", tiny_en_ggml.path, "-f", jfk_wav, "-t", "2",
               *contracts.greedy_decoding_args("en")], timeout=300)
    assert res.ok, (res.describe(), res.stderr_text[-2000:])
    err = res.stderr_text
    assert "whisper_model_load: ftype         = 1" in err
    assert "1 beams + best of 1" in err
    assert normalize(res.stdout_text) == JFK_TEXT, res.stdout_text
