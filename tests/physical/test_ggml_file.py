"""The ggml reader and importer against the pinned whisper.cpp tree: files quantized by its
own ``whisper-quantize`` read back; every supported type dequantizes bit for bit as ggml's
own ``to_float`` does (a C program linked against the quantizer's static ggml); the tree's
``models/ggml_to_pt.py`` reads the same tensors; and tiny.en, imported back from its f16
and q5_0 files, transcribes jfk.wav."""

from __future__ import annotations

import json
import re
import shutil
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from tests.helpers.model_data import JFK_TEXT, normalize
from verifylib.models.ggml_file import GGML_TYPES, open_ggml
from verifylib.models.ggml_import import LANGUAGE_CODES, whisper_cpp_tokens
from verifylib.models.ggml_writer import ggml_name, write_ggml_model
from verifylib.models.hf import load_hf, load_hf_encoder, transcribe_hf
from verifylib.models.intake import obtain_model
from verifylib.runtime.audio import read_wav_16k
from verifylib.runtime.runner import run

QUANT = ("q4_0", "q4_1", "q5_0", "q5_1", "q8_0")
SAMPLE = ("encoder.blocks.0.attn.query.weight", "encoder.blocks.3.mlp.2.weight",
          "decoder.blocks.1.cross_attn.value.weight", "decoder.token_embedding.weight",
          "encoder.conv1.weight", "encoder.conv2.bias", "decoder.positional_embedding")


def _quiet(_: str) -> None:
    return None


@pytest.fixture(scope="module")
def f16_file(tiny_en_info, tmp_path_factory) -> Path:
    """tiny.en written by our writer (ftype 1)."""
    out = tmp_path_factory.mktemp("ggml-file") / "ggml-model.bin"
    return write_ggml_model(tiny_en_info.hf_dir, out).path


@pytest.fixture(scope="module")
def quantized(whisper_quantize, f16_file) -> dict[str, Path]:
    """``f16_file`` quantized by the pinned tree's whisper-quantize to each type."""
    out = {}
    for q in QUANT:
        dest = f16_file.with_name(f"ggml-model-{q}.bin")
        res = run([whisper_quantize, f16_file, dest, q], timeout=300, what=f"quantize {q}")
        assert res.ok, (res.describe(), res.stderr_text[-2000:])
        out[q] = dest
    return out


# ----------------------------------------------------------------------------- (a) quantize

def test_quantized_files_read(quantized, f16_file):
    with open_ggml(f16_file) as ref:
        for q, path in quantized.items():
            with open_ggml(path) as gf:
                assert gf.ftype_name == q and gf.lossy and gf.qntvr == 2
                assert gf.hparams["ftype"] == 2000 + {"q4_0": 2, "q4_1": 3, "q5_0": 8,
                                                      "q5_1": 9, "q8_0": 7}[q]
                assert list(gf.tensors) == list(ref.tensors)
                assert gf.vocab == ref.vocab
                assert gf.mel_filters.tobytes() == ref.mel_filters.tobytes()
                types = {t.type_name for t in gf.tensors.values()}
                assert types == {q, "f16", "f32"}, types
                assert gf.tensors["encoder.conv1.weight"].type_name == "f16"   # FACTS: stay F16
                assert gf.tensors["encoder.conv1.bias"].type_name == "f32"
                assert gf.tensors["decoder.token_embedding.weight"].type_name == q
                # The values are the f16 model's, up to the quantization step.
                a = gf.tensor("encoder.blocks.2.attn.out.weight").ravel()
                b = ref.tensor("encoder.blocks.2.attn.out.weight").ravel()
                assert np.corrcoef(a, b)[0, 1] > (0.999 if q == "q8_0" else 0.98), q
                # Non-quantized tensors pass through whisper-quantize untouched.
                assert gf.raw("encoder.conv2.weight").tobytes() == \
                    ref.raw("encoder.conv2.weight").tobytes()


# ----------------------------------------------------------------------------- (b) ggml itself

_C_SOURCE = textwrap.dedent("""\
    /* Dequantize COUNT values of ggml type TYPE at OFFSET of FILE with ggml's own
       to_float (the type traits), writing float32 to OUT. */
    #include <stdio.h>
    #include <stdlib.h>
    #include <string.h>
    #include "ggml.h"

    int main(int argc, char ** argv) {
        if (argc != 6) { fprintf(stderr, "usage: FILE OFFSET TYPE COUNT OUT\\n"); return 2; }
        long long offset = atoll(argv[2]);
        int type = atoi(argv[3]);
        long long count = atoll(argv[4]);
        size_t nbytes = ggml_row_size((enum ggml_type) type, count);
        FILE * in = fopen(argv[1], "rb");
        if (!in || fseeko(in, offset, SEEK_SET) != 0) { perror("input"); return 1; }
        void * src = malloc(nbytes);
        float * dst = malloc(sizeof(float) * count);
        if (fread(src, 1, nbytes, in) != nbytes) { fprintf(stderr, "short read\\n"); return 1; }
        if (type == GGML_TYPE_F32) {
            memcpy(dst, src, nbytes);
        } else {
            const struct ggml_type_traits * tr = ggml_get_type_traits((enum ggml_type) type);
            if (!tr->to_float) { fprintf(stderr, "no to_float\\n"); return 1; }
            tr->to_float(src, dst, count);
        }
        FILE * out = fopen(argv[5], "wb");
        if (!out || fwrite(dst, sizeof(float), count, out) != (size_t) count) { return 1; }
        fclose(out);
        printf("%s %zu\\n", ggml_type_name((enum ggml_type) type), nbytes);
        return 0;
    }
    """)


@pytest.fixture(scope="module")
def ggml_to_float(quantize_build, tmp_path_factory) -> Path:
    """A C program dequantizing with ggml's ``ggml_get_type_traits(type)->to_float``,
    linked against the quantizer build's static ggml."""
    cc = shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler on PATH")
    d = tmp_path_factory.mktemp("ggml-to-float")
    (d / "to_float.c").write_text(_C_SOURCE)
    lib = {p.name: p for p in quantize_build.libs}
    res = run([cc, "-O2", "-o", d / "to_float", d / "to_float.c", "-I", quantize_build.include,
               lib["libggml.a"], lib["libggml-cpu.a"], lib["libggml-base.a"],
               "-lstdc++", "-lm", "-lpthread", "-fopenmp"], timeout=300, what="cc to_float")
    assert res.ok, (res.describe(), res.stderr_text[-3000:])
    return d / "to_float"


def _ggml_values(prog: Path, path: Path, info, out: Path) -> np.ndarray:
    res = run([prog, path, str(info.offset), str(info.ggml_type), str(info.n_elements), out],
              timeout=120, what="to_float")
    assert res.ok, (res.describe(), res.stderr_text)
    assert res.stdout_text.split() == [GGML_TYPES[info.ggml_type].name, str(info.nbytes)]
    return np.fromfile(out, dtype="<f4")


def test_dequantized_exactly_as_ggml_does(ggml_to_float, quantized, f16_file, tmp_path):
    seen = set()
    for path in [f16_file, *quantized.values()]:
        with open_ggml(path) as gf:
            for name in SAMPLE:
                info = gf.tensors[name]
                ours = gf.tensor(name).ravel()
                theirs = _ggml_values(ggml_to_float, path, info, tmp_path / "out.f32")
                assert theirs.shape == ours.shape
                assert theirs.tobytes() == ours.tobytes(), (path.name, name)
                seen.add(info.type_name)
    assert seen == {"f32", "f16", *QUANT}


# ----------------------------------------------------------------------------- (c) ggml_to_pt

_WHISPER_SHIM = textwrap.dedent("""\
    # Stand-in for openai-whisper, only what models/ggml_to_pt.py uses: it keeps the state
    # dict it is given so the script's torch.save writes exactly what the script read.
    from dataclasses import dataclass

    import torch


    @dataclass
    class ModelDimensions:
        n_mels: int
        n_audio_ctx: int
        n_audio_state: int
        n_audio_head: int
        n_audio_layer: int
        n_text_ctx: int
        n_text_state: int
        n_text_head: int
        n_text_layer: int
        n_vocab: int


    class Whisper(torch.nn.Module):
        def __init__(self, dims):
            super().__init__()
            self.dims = dims
            self._kept = {}

        def load_state_dict(self, state, strict=True):
            self._kept = dict(state)

        def state_dict(self, *args, **kwargs):
            return self._kept
    """)


def test_the_trees_ggml_to_pt_reads_the_same_tensors(v185_source, f16_file, tmp_path):
    import torch

    script = v185_source.path / "models" / "ggml_to_pt.py"
    text = script.read_text()
    assert "from whisper import Whisper, ModelDimensions" in text   # what the shim stands in for
    shim = tmp_path / "shim"
    (shim / "whisper").mkdir(parents=True)
    (shim / "whisper" / "__init__.py").write_text(_WHISPER_SHIM)
    out = tmp_path / "out"
    out.mkdir()
    res = run([sys.executable, script, f16_file, out], timeout=600,
              env_extra={"PYTHONPATH": str(shim)}, what="ggml_to_pt.py")
    assert res.ok, (res.describe(), res.stderr_text[-3000:])
    theirs = torch.load(out / "torch-model.pt", weights_only=True)
    with open_ggml(f16_file) as gf:
        assert list(theirs) == list(gf.tensors)
        for name, t in theirs.items():
            ours = gf.raw(name)
            if name in ("encoder.conv1.bias", "encoder.conv2.bias"):
                ours = ours[:, 0]          # the script keeps them 1-D
            assert t.numpy().dtype == ours.dtype, name
            assert t.numpy().tobytes() == np.ascontiguousarray(ours).tobytes(), name


# ----------------------------------------------------------------------------- (d) import

@pytest.fixture(scope="module")
def f16_info(f16_file, verifylib_cache):
    return obtain_model({"kind": "ggml", "path": f16_file.name, "language": "en"},
                        verifylib_cache, log=_quiet, base_dir=f16_file.parent)


@pytest.fixture(scope="module")
def q5_info(quantized, verifylib_cache):
    return obtain_model({"kind": "ggml", "path": str(quantized["q5_0"]), "language": "en"},
                        verifylib_cache, log=_quiet)


def test_intake_records_the_file(f16_info, q5_info, f16_file, quantized, verifylib_cache):
    from verifylib.canonical import sha256_file

    assert f16_info.kind == "ggml" and f16_info.language == "en"
    assert f16_info.source_digest == sha256_file(f16_file)
    o = f16_info.origin
    assert (o["path"], o["sha256"], o["ftype"], o["lossy"]) == \
        (str(f16_file), f16_info.source_digest, "f16", False)
    assert q5_info.origin["ftype"] == "q5_0" and q5_info.origin["lossy"] is True
    assert f16_info.hf_dir == verifylib_cache / "models" / "ggml" / f16_info.source_digest
    again = obtain_model({"kind": "ggml", "path": str(f16_file)}, verifylib_cache, log=_quiet)
    assert again.cached and again.hf_dir == f16_info.hf_dir and again.origin == o


def test_f16_import_is_the_original_model(f16_info, tiny_en_info, tiny_en_bundle, jfk_wav):
    bundle = load_hf(f16_info.hf_dir)
    want = tiny_en_bundle.model.state_dict()
    got = bundle.model.state_dict()
    assert set(got) == set(want)
    for k in want:
        assert got[k].numpy().tobytes() == want[k].numpy().tobytes(), k   # f16 source: exact
    audio = read_wav_16k(jfk_wav)
    text = transcribe_hf(bundle, audio)
    assert text == transcribe_hf(tiny_en_bundle, audio)
    assert normalize(text) == JFK_TEXT


def test_q5_0_import_transcribes(q5_info, quantized, jfk_wav):
    bundle = load_hf(q5_info.hf_dir)
    text = transcribe_hf(bundle, read_wav_16k(jfk_wav))
    words = normalize(text).split()
    assert len(words) >= 10, text
    assert {"fellow", "americans", "country"} <= set(words), text


@pytest.mark.parametrize("which", ["f16", "q5_0"])
def test_imported_encoder_weights_are_the_files(which, f16_info, q5_info, f16_file, quantized):
    info, path = (f16_info, f16_file) if which == "f16" else (q5_info, quantized["q5_0"])
    encoder, fe = load_hf_encoder(info.hf_dir)
    with open_ggml(path) as gf:
        np.testing.assert_array_equal(fe.mel_filters, gf.mel_filters.T)
        for key, param in encoder.state_dict().items():
            want = gf.tensor(ggml_name(f"model.encoder.{key}"))
            got = param.numpy()
            assert got.tobytes() == want.reshape(got.shape).tobytes(), key


def test_folder_writes_back_the_same_file(f16_info, f16_file, tmp_path):
    back = write_ggml_model(f16_info.hf_dir, tmp_path / "back.bin")
    assert back.path.read_bytes() == f16_file.read_bytes()


def test_tokenizer_and_generation_config_match_the_original(f16_info, tiny_en_info):
    from transformers import AutoTokenizer, GenerationConfig

    ours_json = json.loads((f16_info.hf_dir / "tokenizer.json").read_text())
    orig_json = json.loads((tiny_en_info.hf_dir / "tokenizer.json").read_text())
    # The merges rebuilt from the ranks are the original 50,000, in order.
    assert [tuple(m) for m in ours_json["model"]["merges"]] == \
        [tuple(m) for m in orig_json["model"]["merges"]]
    assert ours_json["model"]["vocab"] == orig_json["model"]["vocab"]
    ours = AutoTokenizer.from_pretrained(f16_info.hf_dir)
    orig = AutoTokenizer.from_pretrained(tiny_en_info.hf_dir)
    ids = list(range(51864))
    a, b = ours.convert_ids_to_tokens(ids), orig.convert_ids_to_tokens(ids)
    # Only Hebrew differs: whisper.cpp (and transformers' language table) say "he",
    # faster-whisper's tokenizer keeps openai's old "iw".
    assert [(i, x, y) for i, (x, y) in enumerate(zip(a, b)) if x != y] == \
        [(50278, "<|he|>", "<|iw|>")]
    text = "And so, my fellow Americans: ask not — what your country can do for you? ♪ ¿Qué?"
    assert ours(text).input_ids == orig(text).input_ids
    g_ours = GenerationConfig.from_pretrained(f16_info.hf_dir).to_dict()
    g_orig = GenerationConfig.from_pretrained(tiny_en_info.hf_dir).to_dict()
    for key in ("suppress_tokens", "begin_suppress_tokens", "decoder_start_token_id",
                "eos_token_id", "pad_token_id", "no_timestamps_token_id", "prev_sot_token_id",
                "is_multilingual", "max_length", "max_initial_timestamp_index"):
        assert g_ours[key] == g_orig[key], key


def test_token_rules_are_the_pinned_trees(v185_source):
    src = (v185_source.path / "src" / "whisper.cpp").read_text()
    table = src[src.index("g_lang = {"):]
    table = table[:table.index("};")]
    langs = sorted((int(i), code) for code, i in re.findall(r'\{\s*"(\w+)",\s*\{\s*(\d+),', table))
    assert tuple(code for _, code in langs) == LANGUAGE_CODES
    vocab = src[src.index("struct whisper_vocab {"):]
    vocab = vocab[:vocab.index("};")]
    ids = {k: int(v) for k, v in re.findall(r"id\s+token_(\w+)\s*=\s*(\d+);", vocab)}
    en = whisper_cpp_tokens(51864)
    assert ids == {"eot": en.eot, "sot": en.sot, "translate": en.translate,
                   "transcribe": en.transcribe, "solm": en.solm, "prev": en.prev,
                   "nosp": en.nosp, "not": en.no_timestamps, "beg": en.beg}
