"""The ggml writer on small random Whisper checkpoints: name mapping, streamed and loaded
writes giving the same bytes for every dtype and sharding, exactness, and refusals. The
round trip against tiny.en and whisper-cli's own load are in tests/physical/test_ggml_writer.py."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest


import verifylib.models.ggml_writer as gw
from tests.helpers.ggml import assert_same_result, forbid_full_load, write_loaded
from verifylib.models.ggml_writer import GgmlError, ggml_name, write_ggml_model


def test_name_mapping():
    assert ggml_name("model.encoder.layers.0.self_attn.q_proj.weight") == "encoder.blocks.0.attn.query.weight"
    assert ggml_name("model.decoder.layers.11.encoder_attn.k_proj.weight") == "decoder.blocks.11.cross_attn.key.weight"
    assert ggml_name("model.decoder.layers.2.final_layer_norm.bias") == "decoder.blocks.2.mlp_ln.bias"
    assert ggml_name("model.encoder.layer_norm.weight") == "encoder.ln_post.weight"
    assert ggml_name("proj_out.weight") is None
    with pytest.raises(GgmlError, match="no whisper.cpp counterpart"):
        ggml_name("model.encoder.layers.0.self_attn.rotary.weight")


def test_refuses_ffn_width_whisper_cpp_cannot_load(tmp_path):
    import torch
    from transformers import WhisperConfig, WhisperForConditionalGeneration

    cfg = WhisperConfig(vocab_size=64, d_model=8, encoder_layers=1, decoder_layers=1,
                        encoder_attention_heads=2, decoder_attention_heads=2,
                        encoder_ffn_dim=24, decoder_ffn_dim=32, num_mel_bins=4,
                        max_source_positions=8, max_target_positions=8, pad_token_id=0,
                        bos_token_id=1, eos_token_id=0, decoder_start_token_id=1)
    torch.manual_seed(0)
    WhisperForConditionalGeneration(cfg).save_pretrained(tmp_path / "hf")
    with pytest.raises(GgmlError, match="encoder_ffn_dim 24 is not 4 x d_model"):
        write_ggml_model(tmp_path / "hf", tmp_path / "out.bin")
    assert not (tmp_path / "out.bin").exists()


# ----------------------------------------------------------------------------- streaming

def _small_config(**kw):
    from transformers import WhisperConfig

    fields = dict(vocab_size=64, d_model=8, encoder_layers=2, decoder_layers=2,
                  encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=32,
                  decoder_ffn_dim=32, num_mel_bins=4, max_source_positions=8,
                  max_target_positions=8, pad_token_id=0, bos_token_id=1, eos_token_id=0,
                  decoder_start_token_id=1)
    fields.update(kw)
    return WhisperConfig(**fields)


def _small_folder(dest: Path, *, dtype: str = "float32", shard: bool = False,
                  config=None, edit=None) -> Path:
    """A random small Whisper folder; ``edit(state)`` rewrites its checkpoint's tensors."""
    import torch
    from safetensors.torch import save_file
    from transformers import WhisperFeatureExtractor, WhisperForConditionalGeneration
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    torch.manual_seed(1)
    model = WhisperForConditionalGeneration(config or _small_config()).to(getattr(torch, dtype))
    model.save_pretrained(dest, **({"max_shard_size": "2KB"} if shard else {}))
    if edit is not None:
        state = {k: v.clone().contiguous() for k, v in model.state_dict().items()
                 if k != "proj_out.weight"}
        edit(state)
        save_file(state, dest / "model.safetensors", metadata={"format": "pt"})
    WhisperFeatureExtractor(feature_size=4).save_pretrained(dest)
    chars = bytes_to_unicode()
    (dest / "vocab.json").write_text(json.dumps({chars[b]: i for i, b in enumerate(range(33, 97))}))
    return dest


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("shard", [False, True], ids=["single", "sharded"])
def test_checkpoint_dtypes_and_shards_stream_to_the_same_bytes(tmp_path, monkeypatch, dtype, shard):
    hf = _small_folder(tmp_path / "hf", dtype=dtype, shard=shard)
    assert (hf / "model.safetensors.index.json").is_file() == shard
    if shard:
        assert len(list(hf.glob("model-*.safetensors"))) > 2
    loaded = write_loaded(hf, tmp_path / "loaded.bin", monkeypatch)
    with monkeypatch.context() as m:
        forbid_full_load(m)
        streamed = write_ggml_model(hf, tmp_path / "streamed.bin")
    assert_same_result(streamed, loaded)
    # float16 weights fit f16 exactly; float32 ones round (bfloat16's tiny values can too).
    if dtype != "bfloat16":
        assert streamed.lossless == (dtype == "float16")


@pytest.mark.filterwarnings("ignore:overflow encountered in cast:RuntimeWarning")
def test_non_finite_weights_stream_to_the_same_bytes_and_exactness(tmp_path, monkeypatch):
    def edit(state):
        w = state["model.encoder.layers.0.fc1.weight"]
        w[0, :4] = torch.tensor([float("nan"), float("inf"), -float("inf"), 1e6])  # 1e6: f16 inf
        state["model.decoder.layers.1.fc2.bias"][:2] = torch.tensor([float("nan"), 2.0 ** -30])

    import torch

    hf = _small_folder(tmp_path / "hf", edit=edit)
    loaded = write_loaded(hf, tmp_path / "loaded.bin", monkeypatch)
    with monkeypatch.context() as m:
        forbid_full_load(m)
        streamed = write_ggml_model(hf, tmp_path / "streamed.bin")
    assert_same_result(streamed, loaded)
    assert not streamed.lossless and streamed.max_abs_rounding == float("inf")


@pytest.mark.filterwarnings("ignore:overflow encountered in cast:RuntimeWarning")
@pytest.mark.parametrize("values", ["random", "special", "exact"])
def test_chunked_exactness_equals_the_whole_array_rule(tmp_path, monkeypatch, values):
    """``_write_tensor`` checks in chunks; it must agree with the whole-array formula."""
    import io

    import torch

    rng = np.random.default_rng(7)
    arr = rng.standard_normal((37, 29)).astype(np.float32)
    if values == "special":
        arr.flat[::5] = np.array([np.nan, np.inf, -np.inf, -0.0, 1e-40, 7e4, 0.5],
                                 dtype=np.float32).repeat(31)[:arr.flat[::5].size]
        arr[:, :3] = np.float16(1.5)   # some chunks exact, some not
    if values == "exact":
        arr = arr.astype(np.float16).astype(np.float32)
        arr.flat[::50] = [np.nan, np.inf, -np.inf, -0.0, np.nan, 2.0 ** -24, 65504.0, np.nan, 1.0, -2.0,
                          np.nan, 0.0, 3.0, np.nan, 4.0, 5.0, np.inf, 6.0, 7.0, 8.0, 9.0, 10.0]
    monkeypatch.setattr(gw, "_CHUNK", 64)
    buf = io.BytesIO()
    err = gw._write_tensor(gw._HashingWriter(buf), tmp_path, "t", arr.shape[::-1], gw.GGML_TYPE_F16,
                           torch.from_numpy(arr))
    with np.errstate(all="ignore"):
        stored = np.ascontiguousarray(arr, dtype="<f2")
        back = stored.astype(np.float32)
        exact = np.array_equal(back, arr, equal_nan=True)
        want = None if exact else float(np.nanmax(np.abs(back - arr)))
    assert buf.getvalue().endswith(stored.tobytes())
    assert err == want
    assert (want is None) == (values == "exact")


def test_untied_projection_is_refused_when_streamed(tmp_path, monkeypatch):
    hf = _small_folder(tmp_path / "hf", config=_small_config(tie_word_embeddings=False))
    with monkeypatch.context() as m:
        forbid_full_load(m)
        with pytest.raises(GgmlError, match="proj_out.weight differs"):
            write_ggml_model(hf, tmp_path / "out.bin")
    assert not (tmp_path / "out.bin").exists()


def test_stored_projection_differing_from_a_tied_embedding_is_refused(tmp_path, monkeypatch):
    def edit(state):
        state["proj_out.weight"] = state["model.decoder.embed_tokens.weight"] + 1.0

    hf = _small_folder(tmp_path / "hf", edit=edit)
    for force_load in (False, True):   # from_pretrained unties them too (and warns)
        with monkeypatch.context() as m:
            if force_load:
                m.setattr(gw, "_streamed_weights", lambda *a: None)
            else:
                forbid_full_load(m)
            with pytest.raises(GgmlError, match="proj_out.weight differs"):
                write_ggml_model(hf, tmp_path / "out.bin")


def test_other_folders_go_through_from_pretrained(tmp_path, monkeypatch):
    import torch
    from transformers import WhisperConfig

    ref = _small_folder(tmp_path / "ref")
    want = write_ggml_model(ref, tmp_path / "ref.bin")
    cfg = WhisperConfig.from_pretrained(ref)
    state = {k: v.clone() for k, v in _small_state(ref).items()}

    # A .bin-only folder.
    binf = _small_folder(tmp_path / "bin")
    (binf / "model.safetensors").unlink()
    torch.save(state, binf / "pytorch_model.bin")
    assert gw._streamed_weights(binf, cfg) is None
    assert_same_result(write_ggml_model(binf, tmp_path / "bin.bin"), want)

    # Keys from_pretrained would not load as stored: an extra one, a base-model prefix.
    def extra(s):
        s["model.encoder.extra"] = torch.zeros(2)

    def base_model(s):
        for k in list(s):
            s[k.removeprefix("model.")] = s.pop(k)

    for name, edit in (("extra", extra), ("base", base_model)):
        assert gw._streamed_weights(_small_folder(tmp_path / name, edit=edit), cfg) is None, name
    assert gw._streamed_weights(ref, cfg) is not None


def _small_state(hf: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(hf / "model.safetensors")
