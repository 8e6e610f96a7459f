"""The ggml reader on synthetic files: every hostile case is refused naming the file and
what is wrong; hand-built quant blocks dequantize to hand-computed values; the writer's
output and a hand-built f32 file read back bit for bit; and a synthetic file imported
into a Hugging Face folder that the encoder loader takes. The pinned tree's quantizer,
ggml's own dequantization and the tiny.en round trips are in tests/physical/test_ggml_file.py."""

from __future__ import annotations

import json
import pickle
import struct

import numpy as np
import pytest

from tests.helpers import ggml_files as gg
from verifylib.errors import ParametersInvalid
from verifylib.models.ggml_file import (GGML_TYPES, GgmlFileInvalid, dequantize,
                                        expected_layout, open_ggml)


def _refused(path, *fragments, offset=None, tensor=None):
    with pytest.raises(GgmlFileInvalid) as info:
        with open_ggml(path):
            pass
    err = info.value
    msg = str(err)
    assert str(path) in msg
    for f in fragments:
        assert f in msg, msg
    if offset is not None:
        assert err.offset == offset and f"byte {offset}" in msg
    if tensor is not None:
        assert err.tensor == tensor and repr(tensor) in msg
    return err


@pytest.fixture
def hp():
    return gg.small_hparams()


@pytest.fixture
def recs(hp):
    return gg.records(hp, "f16")


def test_a_valid_file_reads(tmp_path, hp, recs):
    path = gg.write(tmp_path / "m.bin", hp, recs)
    with open_ggml(path) as gf:
        assert dict(gf.hparams) == hp and gf.ftype == 1 and gf.ftype_name == "f16"
        assert not gf.lossy and gf.qntvr == 0
        assert list(gf.tensors) == list(expected_layout(hp, 1))
        assert gf.mel_filters.shape == (4, 201) and not gf.mel_filters.flags.writeable
        np.testing.assert_array_equal(gf.mel_filters, gg.slaney_like_filters(4))
        assert gf.vocab[:3] == (b"\x00", b"\x01", b"\x02") and len(gf.vocab) == 64
        t = gf.tensors["encoder.conv1.bias"]
        assert t.dims == (1, 32) and t.shape == (32, 1) and t.type_name == "f32"
        assert gf.tensors["decoder.token_embedding.weight"].shape == (64, 32)
        assert len(gf.sha256) == 64


# ----------------------------------------------------------------------------- hostile

def test_bad_magic_and_gguf(tmp_path, hp):
    _refused(gg.write(tmp_path / "a.bin", hp, magic=0x12345678), "bad magic 0x12345678",
             offset=0)
    gguf = tmp_path / "b.bin"
    gguf.write_bytes(b"GGUF" + b"\0" * 60)
    _refused(gguf, "GGUF file", offset=0)


@pytest.mark.parametrize("cut", [0, 2, 4, 20, 48])
def test_truncated_header(tmp_path, hp, cut):
    whole = gg.header(hp)
    path = tmp_path / "t.bin"
    path.write_bytes(whole[:cut])
    _refused(path, "truncated")


def test_truncated_filters_vocab_and_tensor(tmp_path, hp, recs):
    whole = gg.write(tmp_path / "w.bin", hp, recs).read_bytes()
    head = len(gg.header(hp))
    mel_end = 4 + 44 + 8 + 4 * 4 * 201
    for cut, what in ((mel_end - 3, "the mel filters"), (mel_end + 2, "vocabulary size"),
                      (head - 1, "token 63"), (head + 5, "a tensor header"),
                      (len(whole) - 1, "the tensor data")):
        path = tmp_path / f"cut{cut}.bin"
        path.write_bytes(whole[:cut])
        _refused(path, "truncated", what)
    last = recs[-1].name
    path = tmp_path / "lastdata.bin"
    path.write_bytes(whole[:-1])
    _refused(path, tensor=last)


def test_bytes_after_the_last_record(tmp_path, hp, recs):
    path = gg.write(tmp_path / "tail.bin", hp, recs, tail=b"\0" * 5)
    _refused(path, "truncated: a tensor header needs 12 bytes, 5 remain",
             offset=path.stat().st_size - 5)


@pytest.mark.parametrize("raw, fragment", [
    (5, "unknown ftype 5"), (-1, "unknown ftype -1"),
    (2012, "ftype 12 (q4_K) is not supported; supported: 0 (f32), 1 (f16)"),
    (24, "ftype 24 (bf16) is not supported"),
    (8, "declares quantization version 0"), (1008, "declares quantization version 1"),
    (2001, "a f16 file must declare 0"),
])
def test_unknown_or_unsupported_ftype(tmp_path, hp, raw, fragment):
    err = _refused(gg.write(tmp_path / "f.bin", {**hp, "ftype": raw}, []), fragment, offset=44)
    assert err.key == "ftype"


@pytest.mark.parametrize("key, value, fragment", [
    ("n_audio_layer", 100000, "outside the plausible range 1..256"),
    ("n_vocab", 0, "outside the plausible range"), ("n_mels", 0, "outside"),
    ("n_text_state", 64, "n_text_state 64 differs from n_audio_state 32"),
    ("n_audio_head", 3, "3 heads do not divide n_audio_state 32"),
])
def test_implausible_hparams(tmp_path, hp, key, value, fragment):
    err = _refused(gg.write(tmp_path / "h.bin", {**hp, key: value}, []), fragment)
    assert err.key == key


def test_mel_filters_whisper_cpp_cannot_use(tmp_path, hp):
    _refused(gg.write(tmp_path / "m1.bin", hp, [], mel_shape=(5, 201)),
             "mel filters are 5 x 201; whisper.cpp needs n_mels x 201", offset=48)
    mel = gg.slaney_like_filters(4)
    mel[1, 2] = np.nan
    _refused(gg.write(tmp_path / "m2.bin", hp, [], mel=mel), "NaN")


def test_vocabulary_sizes(tmp_path, hp):
    _refused(gg.write(tmp_path / "v1.bin", hp, [], vocab_count=65),
             "65 vocabulary entries for n_vocab 64")
    _refused(gg.write(tmp_path / "v2.bin", hp, [], vocab_count=-1), "-1 vocabulary entries")
    no_tokens = gg.header(hp, vocab=[])[:-4]   # everything before the count
    path = tmp_path / "v3.bin"
    path.write_bytes(no_tokens + struct.pack("<ii", 1, 5000))
    _refused(path, "token 0 claims 5000 bytes", offset=len(no_tokens) + 4)
    path.write_bytes(no_tokens + struct.pack("<ii", 1, -7))
    _refused(path, "token 0 claims -7 bytes")


@pytest.mark.parametrize("change, fragment", [
    (dict(n_dims=0, dims=()), "0 dimensions (1 to 4)"),
    (dict(n_dims=5, dims=(1, 1, 1, 1, 1)), "5 dimensions"),
    (dict(name_len=0, name_bytes=b""), "tensor name length 0"),
    (dict(name_len=200, name_bytes=b"x" * 200), "tensor name length 200"),
    (dict(name_len=-4, name_bytes=b""), "tensor name length -4"),
    (dict(name_bytes=b"encoder.\xff\xfe"), "is not UTF-8"),
])
def test_malformed_record_headers(tmp_path, hp, recs, change, fragment):
    first = recs[0].name
    path = gg.write(tmp_path / "r.bin", hp, gg.edit(recs, first, **change))
    _refused(path, fragment, offset=len(gg.header(hp)))


@pytest.mark.parametrize("gtype, fragment", [
    (9, "ggml type 9 (q8_1) is not supported; supported: f32, f16, q4_0, q4_1, q5_0, q5_1, "
        "q8_0"),
    (30, "ggml type 30 (bf16) is not supported"), (99, "ggml type 99 (unknown)"),
])
def test_unsupported_tensor_type(tmp_path, hp, recs, gtype, fragment):
    name = "encoder.blocks.0.attn.query.weight"
    path = gg.write(tmp_path / "t.bin", hp, gg.edit(recs, name, gtype=gtype))
    _refused(path, fragment, tensor=name)


def test_duplicate_unexpected_missing_and_misshapen_tensors(tmp_path, hp, recs):
    name = "encoder.ln_post.bias"
    dup = recs + [r for r in recs if r.name == name]
    err = _refused(gg.write(tmp_path / "d.bin", hp, dup), "appears twice (first at byte",
                   tensor=name)
    assert err.offset > len(gg.header(hp))
    _refused(gg.write(tmp_path / "u.bin", hp, gg.edit(recs, name, name="encoder.extra.bias")),
             "does not create this tensor", tensor="encoder.extra.bias")
    err = _refused(gg.write(tmp_path / "m.bin", hp, recs[:-1]),
                   f"1 tensors whisper.cpp loads are missing: {recs[-1].name}")
    assert err.offset == (tmp_path / "m.bin").stat().st_size
    _refused(gg.write(tmp_path / "s.bin", hp, gg.edit(recs, name, dims=(16, 2))),
             "extents (16, 2) (ggml order), expected (32,)", tensor=name)
    _refused(gg.write(tmp_path / "n.bin", hp, gg.edit(recs, name, dims=(0,))),
             "extents (0,)", tensor=name)
    conv = "encoder.conv1.weight"
    as_f32 = gg.edit(recs, conv, gtype=0,
                     data=np.zeros(3 * 4 * 32, "<f4").tobytes())
    _refused(gg.write(tmp_path / "ty.bin", hp, as_f32), "stored as f32, expected f16",
             tensor=conv)


def test_huge_extents_are_a_truncation_not_an_allocation(tmp_path, hp, recs):
    name = "decoder.token_embedding.weight"
    hostile = {**hp, "n_vocab": 1 << 20}
    recs = gg.records(hp, "f16")
    recs = gg.edit(recs, name, dims=(32, 1 << 20))
    _refused(gg.write(tmp_path / "x.bin", hostile, recs), "truncated: the tensor data needs "
             f"{32 * (1 << 20) * 2} bytes", tensor=name)


def test_row_length_not_whole_blocks(tmp_path):
    hp = gg.small_hparams(n_audio_state=48, n_text_state=48, ftype=gg.RAW_FTYPE["q4_0"])
    layout = expected_layout(hp, 2)
    recs = []
    for name, (dims, gtype) in layout.items():
        n = int(np.prod(dims))
        data = gg.random_payload(gtype, n, np.random.default_rng(0)) if gtype < 2 else b""
        recs.append(gg.Record(name, dims, gtype, data))
    first_q = next(n for n, (_, t) in layout.items() if t == 2)
    _refused(gg.write(tmp_path / "q.bin", hp, recs),
             "row length 48 is not a multiple of the q4_0 block size 32", tensor=first_q)


def test_the_error_is_bad_input_and_travels(tmp_path, hp):
    err = _refused(gg.write(tmp_path / "a.bin", hp, magic=1), "bad magic")
    assert isinstance(err, ParametersInvalid) and isinstance(err, ValueError)
    back = pickle.loads(pickle.dumps(err))
    assert str(back) == str(err) and back.offset == 0 and back.key == "magic"


# ----------------------------------------------------------------------------- dequantize

_D = np.float16(0.5)          # exact scales make the hand values obvious
_M = np.float16(-1.25)
_QS = bytes(j | ((15 - j) << 4) for j in range(16))   # low nibble j, high nibble 15 - j
_QH = 0xA5A5_0F0F             # bit k is value k's fifth bit


def _f16(x) -> bytes:
    return np.float16(x).tobytes()


def _bit(k: int) -> int:
    return (_QH >> k) & 1


def test_q4_0_by_hand():
    got = dequantize(_f16(_D) + _QS, "q4_0", 32)
    want = [(j - 8) * 0.5 for j in range(16)] + [(15 - j - 8) * 0.5 for j in range(16)]
    assert got.tolist() == want


def test_q4_1_by_hand():
    got = dequantize(_f16(_D) + _f16(_M) + _QS, "q4_1", 32)
    want = [j * 0.5 - 1.25 for j in range(16)] + [(15 - j) * 0.5 - 1.25 for j in range(16)]
    assert got.tolist() == want


def test_q5_0_by_hand():
    got = dequantize(_f16(_D) + struct.pack("<I", _QH) + _QS, "q5_0", 32)
    nib = list(range(16)) + [15 - j for j in range(16)]
    want = [((nib[k] | (_bit(k) << 4)) - 16) * 0.5 for k in range(32)]
    assert got.tolist() == want
    assert got[0] == (0 | 16) * 0.5 - 8 and got[4] == -6.0   # bits 0 and 4 of 0x0F0F: 1, 0


def test_q5_1_by_hand():
    got = dequantize(_f16(_D) + _f16(_M) + struct.pack("<I", _QH) + _QS, "q5_1", 32)
    nib = list(range(16)) + [15 - j for j in range(16)]
    want = [(nib[k] | (_bit(k) << 4)) * 0.5 - 1.25 for k in range(32)]
    assert got.tolist() == want


def test_q8_0_by_hand():
    qs = np.array([-128, -1, 0, 1, 127] + list(range(-13, 14)), dtype=np.int8)
    got = dequantize(_f16(_D) + qs.tobytes(), "q8_0", 32)
    assert got.tolist() == [q * 0.5 for q in qs.tolist()]


def test_rounding_is_one_float32_multiply_then_one_add():
    d, m = np.float16(0.1), np.float16(0.3)     # not exact in binary: rounding shows
    d32, m32 = np.float32(d), np.float32(m)
    got = dequantize(_f16(d) + _f16(m) + _QS, "q4_1", 32)
    for k, q in enumerate(list(range(16)) + [15 - j for j in range(16)]):
        prod = np.float32(np.float32(q) * d32)
        assert got[k] == np.float32(prod + m32)
        assert got[k].tobytes() == (prod + m32).astype(np.float32).tobytes()
    got = dequantize(_f16(d) + bytes(range(256 - 16, 256)) + bytes(range(16)), "q8_0", 32)
    qs = np.frombuffer(bytes(range(240, 256)) + bytes(range(16)), dtype=np.int8)
    assert got.tobytes() == (qs.astype(np.float32) * d32).astype(np.float32).tobytes()


def test_blocks_in_sequence_and_the_f16_f32_paths():
    two = _f16(_D) + _QS + _f16(np.float16(-2.0)) + bytes(16)   # second block: all 0 -> -8
    got = dequantize(two, 2, 64)
    assert got[32:].tolist() == [16.0] * 32 and got[0] == -4.0
    vals = np.array([1.5, -0.0, 65504.0, 2.0 ** -24], dtype=np.float16)
    assert dequantize(vals.tobytes(), "f16", 4).tobytes() == vals.astype(np.float32).tobytes()
    v32 = np.array([np.pi, -1e-38], dtype=np.float32)
    assert dequantize(v32.tobytes(), "f32", 2).tobytes() == v32.tobytes()
    with pytest.raises(ParametersInvalid, match="not supported"):
        dequantize(b"", "q8_1", 32)
    with pytest.raises(ParametersInvalid, match="not whole q4_0 blocks"):
        dequantize(b"", "q4_0", 31)
    with pytest.raises(ParametersInvalid, match="need 18 bytes"):
        dequantize(b"\0" * 17, "q4_0", 32)


@pytest.mark.parametrize("ftype_name", ["q4_0", "q4_1", "q5_0", "q5_1", "q8_0"])
def test_quantized_files_read_in_chunks_equal_the_whole(tmp_path, monkeypatch, ftype_name):
    import verifylib.models.ggml_file as gfm

    hp = gg.small_hparams(ftype=gg.RAW_FTYPE[ftype_name])
    path = gg.write(tmp_path / "q.bin", hp, gg.records(hp, ftype_name))
    with open_ggml(path) as gf:
        assert gf.lossy and gf.qntvr == 2 and gf.ftype_name == ftype_name
        info = gf.tensors["decoder.token_embedding.weight"]
        assert info.type_name == ftype_name
        assert gf.tensors["encoder.conv2.weight"].type_name == "f16"
        assert gf.tensors["encoder.conv2.bias"].type_name == "f32"
        assert gf.tensors["decoder.positional_embedding"].type_name == "f32"
        whole = gf.tensor(info.name)
        raw = path.read_bytes()[info.offset:info.offset + info.nbytes]
        np.testing.assert_array_equal(whole.reshape(-1), dequantize(raw, ftype_name,
                                                                    info.n_elements))
        monkeypatch.setattr(gfm, "CHUNK_BLOCKS", 3)   # many chunks, a ragged last one
        assert gf.tensor(info.name).tobytes() == whole.tobytes()
        with pytest.raises(ParametersInvalid, match="only f16 and f32 tensors have a raw"):
            gf.raw(info.name)
        with pytest.raises(ParametersInvalid, match="no tensor named"):
            gf.tensor("nope")


# ----------------------------------------------------------------------------- round trips

def _small_hf(dest, vocab_size=64):
    import torch
    from transformers import (WhisperConfig, WhisperFeatureExtractor,
                              WhisperForConditionalGeneration)
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    cfg = WhisperConfig(vocab_size=vocab_size, d_model=32, encoder_layers=1, decoder_layers=1,
                        encoder_attention_heads=2, decoder_attention_heads=2,
                        encoder_ffn_dim=128, decoder_ffn_dim=128, num_mel_bins=4,
                        max_source_positions=6, max_target_positions=5, pad_token_id=0,
                        bos_token_id=1, eos_token_id=0, decoder_start_token_id=1)
    torch.manual_seed(3)
    model = WhisperForConditionalGeneration(cfg)
    model.save_pretrained(dest)
    WhisperFeatureExtractor(feature_size=4).save_pretrained(dest)
    chars = bytes_to_unicode()
    (dest / "vocab.json").write_text(json.dumps({chars[b]: i for i, b in enumerate(range(64))}))
    return {k: v.detach().numpy() for k, v in model.state_dict().items()}


@pytest.fixture(scope="module")
def small_hf(tmp_path_factory):
    dest = tmp_path_factory.mktemp("small-hf")
    return dest, _small_hf(dest)


def test_writer_output_reads_back_bit_for_bit(small_hf, tmp_path):
    from verifylib.models.ggml_writer import ggml_name, write_ggml_model

    hf_dir, state = small_hf
    res = write_ggml_model(hf_dir, tmp_path / "ggml-model.bin")
    with open_ggml(res.path) as gf:
        assert gf.sha256 == res.sha256 and dict(gf.hparams) == res.hparams
        for hf_name, want in state.items():
            g = ggml_name(hf_name)
            if g is None:
                continue
            info = gf.tensors[g]
            stored = want.astype(np.float16 if info.type_name == "f16" else np.float32)
            raw = gf.raw(g)
            assert raw.reshape(want.shape).tobytes() == stored.tobytes(), g
            assert gf.tensor(g).reshape(want.shape).tobytes() == \
                stored.astype(np.float32).tobytes(), g


def test_f32_file_reads_back_bit_for_bit(small_hf, tmp_path):
    from verifylib.models.ggml_writer import ggml_name

    _, state = small_hf
    values = {}
    for hf_name, arr in state.items():
        g = ggml_name(hf_name)
        if g is not None:
            values[g] = arr.reshape(-1, 1) if g.endswith(("conv1.bias", "conv2.bias")) else arr
    hp = gg.small_hparams(ftype=0)
    path = gg.write(tmp_path / "f32.bin", hp, gg.records(hp, "f32", values=values))
    with open_ggml(path) as gf:
        assert {t.type_name for t in gf.tensors.values()} == {"f32"}
        for g, arr in values.items():
            assert gf.raw(g).tobytes() == np.asarray(arr, np.float32).tobytes(), g
            assert gf.tensor(g).tobytes() == np.asarray(arr, np.float32).tobytes(), g


# ----------------------------------------------------------------------------- import

@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    from verifylib.models.ggml_import import import_ggml

    root = tmp_path_factory.mktemp("ggml-import")
    hp = gg.small_hparams(n_vocab=51864, ftype=gg.RAW_FTYPE["q8_0"])
    path = gg.write(root / "model.bin", hp, gg.records(hp, "q8_0"),
                    vocab=gg.byte_vocab(50256))
    return path, import_ggml(path, root / "hf")


def test_import_gives_a_folder_the_encoder_loader_takes(imported):
    from verifylib.models.hf import load_hf_encoder

    path, res = imported
    assert res.ftype_name == "q8_0" and res.lossy and not res.multilingual and not res.cached
    encoder, fe = load_hf_encoder(res.hf_dir)
    state = encoder.state_dict()
    with open_ggml(path) as gf:
        assert res.source_sha256 == gf.sha256
        np.testing.assert_array_equal(fe.mel_filters, gf.mel_filters.T)   # the file's bank
        for key, want_name in (("conv1.weight", "encoder.conv1.weight"),
                               ("conv1.bias", "encoder.conv1.bias"),
                               ("embed_positions.weight", "encoder.positional_embedding"),
                               ("layers.0.self_attn.k_proj.weight",
                                "encoder.blocks.0.attn.key.weight"),
                               ("layers.0.fc2.weight", "encoder.blocks.0.mlp.2.weight"),
                               ("layer_norm.bias", "encoder.ln_post.bias")):
            got = state[key].numpy()
            want = gf.tensor(want_name)
            assert got.tobytes() == want.reshape(got.shape).tobytes(), key
        assert "layers.0.self_attn.k_proj.bias" not in state


def test_import_tokenizer_and_generation_config(imported):
    from transformers import AutoTokenizer, GenerationConfig

    path, res = imported
    tok = AutoTokenizer.from_pretrained(res.hf_dir)
    assert tok.convert_ids_to_tokens([50256, 50257, 50258, 50356, 50357, 50362, 50363, 51863]) \
        == ["<|endoftext|>", "<|startoftranscript|>", "<|en|>", "<|su|>", "<|translate|>",
            "<|notimestamps|>", "<|0.00|>", "<|30.00|>"]
    assert tok.decode([256, 257, 259], skip_special_tokens=True) == " t a the"
    assert tok.encode(" the", add_special_tokens=False) == [259]
    assert tok.decode([50257, 72, 105, 50256], skip_special_tokens=True) == "Hi"
    gen = GenerationConfig.from_pretrained(res.hf_dir)
    assert (gen.decoder_start_token_id, gen.eos_token_id, gen.no_timestamps_token_id) == \
        (50257, 50256, 50362)
    assert gen.is_multilingual is False and gen.begin_suppress_tokens == [32, 50256]
    assert {50257, 50357, 50358, 50359, 50360, 50361} <= set(gen.suppress_tokens)
    cfg = json.loads((res.hf_dir / "config.json").read_text())
    assert (cfg["vocab_size"], cfg["d_model"], cfg["encoder_ffn_dim"], cfg["num_mel_bins"],
            cfg["max_source_positions"], cfg["max_target_positions"]) == \
        (51864, 32, 128, 4, 6, 5)


def test_f16_import_writes_back_the_same_file(tmp_path):
    from verifylib.models.ggml_import import import_ggml
    from verifylib.models.ggml_writer import write_ggml_model

    hp = gg.small_hparams(n_vocab=51864)
    vocab = gg.byte_vocab(50256) + [b"<|endoftext|>"]   # as our writer stores it
    path = gg.write(tmp_path / "f16.bin", hp, gg.records(hp, "f16"), vocab=vocab)
    res = import_ggml(path, tmp_path / "hf")
    back = write_ggml_model(res.hf_dir, tmp_path / "back.bin")
    # The file's own filters, vocabulary and f16 values survive the round trip.
    assert back.path.read_bytes() == path.read_bytes() and back.lossless


@pytest.mark.parametrize("n_vocab, n_tokens", [(51865, 50257), (51866, 50256)])
def test_multilingual_import_places_every_special_token(tmp_path, n_vocab, n_tokens):
    from transformers import AutoTokenizer, GenerationConfig

    from verifylib.models.ggml_import import import_ggml, whisper_cpp_tokens

    hp = gg.small_hparams(n_vocab=n_vocab)
    path = gg.write(tmp_path / "m.bin", hp, gg.records(hp, "f16"),
                    vocab=gg.byte_vocab(n_tokens))
    res = import_ggml(path, tmp_path / "hf")
    ids = whisper_cpp_tokens(n_vocab)
    assert res.multilingual and ids.eot == 50257
    tok = AutoTokenizer.from_pretrained(res.hf_dir)
    if n_tokens == 50256:   # an id the file leaves unnamed below eot: whisper.cpp's name
        assert tok.convert_ids_to_tokens(50256) == "[_extra_token_50256]"
    assert tok.convert_ids_to_tokens([ids.eot, ids.sot, ids.sot + 1, ids.translate,
                                      ids.no_timestamps, ids.beg, n_vocab - 1]) == \
        ["<|endoftext|>", "<|startoftranscript|>", "<|en|>", "<|translate|>",
         "<|notimestamps|>", "<|0.00|>", "<|30.00|>"]
    gen = GenerationConfig.from_pretrained(res.hf_dir)
    assert gen.is_multilingual and gen.eos_token_id == 50257 and gen.decoder_start_token_id \
        == 50258
    assert gen.lang_to_id["<|en|>"] == 50259 and len(gen.lang_to_id) == ids.n_languages
    assert gen.task_to_id == {"translate": ids.translate, "transcribe": ids.transcribe}
    assert tok.decode([ids.sot, 72, 105, ids.eot], skip_special_tokens=True) == "Hi"


def test_whisper_cpp_token_rules():
    from verifylib.models.ggml_import import whisper_cpp_tokens

    en, multi, v3 = whisper_cpp_tokens(51864), whisper_cpp_tokens(51865), \
        whisper_cpp_tokens(51866)
    assert (en.multilingual, en.eot, en.sot, en.no_timestamps, en.beg) == \
        (False, 50256, 50257, 50362, 50363)
    assert (multi.eot, multi.sot, multi.translate, multi.no_timestamps, multi.beg) == \
        (50257, 50258, 50358, 50363, 50364)
    assert (v3.n_languages, v3.transcribe, v3.no_timestamps, v3.beg) == (100, 50360, 50364,
                                                                         50365)
    assert v3.names()[50358] == "<|yue|>" and v3.names()[51865] == "<|30.00|>"
    with pytest.raises(ParametersInvalid, match="below whisper.cpp's English vocabulary"):
        whisper_cpp_tokens(64)


def test_import_refuses_vocabularies_that_are_not_byte_level(tmp_path):
    from verifylib.models.ggml_import import import_ggml

    hp = gg.small_hparams(n_vocab=51864)
    vocab = gg.byte_vocab(300)
    vocab[299] = vocab[280]
    path = gg.write(tmp_path / "dup.bin", hp, gg.records(hp, "f16"), vocab=vocab)
    with pytest.raises(GgmlFileInvalid, match="tokens 280 and 299 hold the same bytes"):
        import_ggml(path, tmp_path / "hf1")
    path = gg.write(tmp_path / "nobytes.bin", hp, gg.records(hp, "f16"),
                    vocab=gg.byte_vocab(300)[1:])
    with pytest.raises(GgmlFileInvalid, match="lacks 1 single-byte tokens"):
        import_ggml(path, tmp_path / "hf2")
    assert not (tmp_path / "hf1").exists() and not (tmp_path / "hf2").exists()


def test_types_table_is_ggmls():
    assert {t.name: (t.id, t.block_size, t.type_size) for t in GGML_TYPES.values()} == {
        "f32": (0, 1, 4), "f16": (1, 1, 2), "q4_0": (2, 32, 18), "q4_1": (3, 32, 20),
        "q5_0": (6, 32, 22), "q5_1": (7, 32, 24), "q8_0": (8, 32, 34)}
