"""The shapes fine-tunes have, through the audit's chain: HF -> ggml -> whisper-cli -> Core ML
-> pair, on seeded random-weight models made here (tests/helpers/shapes.py).

- large-v3's shape: 128 mels, a vocabulary of 51866 (100 languages);
- a distil-style model: 4 encoder layers, 2 decoder layers;
- a tokenizer with added tokens: refused when the parameters are validated, exit 2, one
  line naming the field (whisper.cpp derives its special tokens from the vocabulary size).

Each accepted shape is written by our ggml writer, loaded by the patched whisper-cli (which
detects a language with it: encoder and one decoder step), converted to an fp32 ML program
and measured against the reference rebuilt from the ggml file, block by block.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.helpers import ROOT
from tests.helpers.shapes import SHAPES, add_tokens, random_fine_tune

pytestmark = pytest.mark.physical

CLIP = ROOT / "parameters" / "fixtures" / "numbers.wav"


@pytest.fixture(scope="module")
def english_vocab(tiny_en_info, tmp_path_factory) -> list[bytes]:
    """tiny.en's token list, as our writer stores it."""
    from verifylib.models.ggml_file import open_ggml
    from verifylib.models.ggml_writer import write_ggml_model

    path = write_ggml_model(tiny_en_info.hf_dir, tmp_path_factory.mktemp("tiny") / "t.bin").path
    with open_ggml(path) as gf:
        return list(gf.vocab)


def _params(tmp_path: Path, hf_dir: Path, language: str) -> Path:
    data = yaml.safe_load((ROOT / "parameters" / "tiny-en.yaml").read_text())
    data.update(name="shape", model={"kind": "hf-dir", "path": str(hf_dir),
                                     "language": language})
    for fx in data["fixtures"]:
        for key in ("path", "text_file"):  # relative to the shipped parameter file
            if key in fx:
                fx[key] = str(ROOT / "parameters" / fx[key])
    pfile = tmp_path / "shape.yaml"
    pfile.write_text(yaml.safe_dump(data))
    return pfile


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_a_fine_tune_shape_goes_through_the_chain(shape, english_vocab, tmp_path,
                                                  v185_ggml_build):
    from verifylib.models.coreml_contract import contract_of
    from verifylib.models.coreml_export import convert_traced, trace_encoder
    from verifylib.models.coreml_package import place_mlpackage
    from verifylib.models.ggml_import import LANGUAGE_CODES, import_ggml, whisper_cpp_tokens
    from verifylib.models.ggml_writer import write_ggml_model
    from verifylib.models.hf import detect_language_hf, load_hf
    from verifylib.numerics.pair import measure_pair
    from verifylib.numerics.reference import fixture_logmel, random_logmel
    from verifylib.params import load
    from verifylib.runtime import contracts
    from verifylib.runtime.audio import read_wav_16k
    from verifylib.stages.wer import cli_detect_language

    hp = SHAPES[shape]
    hf_dir = random_fine_tune(tmp_path / "model", english_vocab, **hp)
    # Accepted at validation, in a language the vocabulary holds.
    assert load(_params(tmp_path, hf_dir, "de")).model.kind == "hf-dir"

    written = write_ggml_model(hf_dir, tmp_path / "ggml-model.bin")
    assert {k: written.hparams[k] for k in hp} == hp

    heard, res = cli_detect_language(v185_ggml_build.result.binary, str(written.path), CLIP)
    assert res.ok, (res.describe(), res.stderr_text[-2000:])
    loaded = contracts.parse_loaded_hparams(res.stderr_text)
    assert {k: loaded[k] for k in hp} == hp
    assert contracts.system_info_coreml(res.stderr_text) == 0
    languages = LANGUAGE_CODES[:whisper_cpp_tokens(hp["n_vocab"]).n_languages]
    audio = read_wav_16k(CLIP)
    source = load_hf(hf_dir)
    from_ggml = load_hf(import_ggml(written.path, tmp_path / "from-ggml").hf_dir)
    by_leg = {"ggml": heard, "source": detect_language_hf(source, audio),
              "from_ggml": detect_language_hf(from_ggml, audio)}
    for leg, (code, p) in by_leg.items():
        assert code in languages and 0 < p <= 1, (leg, code, p)
    # Random weights put every language near 1/n: the legs may name different ones, but
    # each computes the same distribution (f16 arithmetic against float32).
    assert by_leg["source"] == by_leg["from_ggml"]
    assert abs(by_leg["ggml"][1] - by_leg["source"][1]) < 0.005, by_leg

    encoder = source.model.get_encoder()
    contract = contract_of(encoder)
    assert (contract.n_mels, contract.max_source_positions) == (hp["n_mels"], 1500)
    traced, _, _ = trace_encoder(encoder, contract)
    package = place_mlpackage(convert_traced(traced, contract, "fp32").model,
                              tmp_path / "fp32" / "encoder.mlpackage", contract, "fp32").final
    mels = {"fixture": fixture_logmel(source.feature_extractor, audio, contract),
            "random": random_logmel(contract)}
    m = measure_pair(package, from_ggml.model.get_encoder(), mels, threshold_db=30.0)
    assert m.blocks_tapped == m.reference_blocks == hp["n_audio_layer"]
    for point in m.inputs:
        # The ggml file is f16 and so is the source (imported from an f16 file): the program
        # and HF-from-ggml compute the same float32 function.
        assert point.snr_db > 100 and min(point.block_snr_db) > 100, point
        assert point.first_divergent_block is None


def test_a_tokenizer_with_added_tokens_exits_2_at_validation(english_vocab, tmp_path):
    hf_dir = random_fine_tune(tmp_path / "model", english_vocab, **SHAPES["large-v3"])
    grown = add_tokens(hf_dir, tmp_path / "grown", ["<|brand|>", "<|product|>"], resize=True)
    pfile = _params(tmp_path, grown, "en")
    res = subprocess.run([sys.executable, "-m", "verifylib", "run", str(pfile), "--reports",
                          str(tmp_path / "reports"), "--no-progress"], capture_output=True,
                         text=True, timeout=300)
    assert res.returncode == 2, res.stderr[-2000:]
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert str(pfile) in lines[0] and "key model.path: a vocabulary of 51868 tokens" in lines[0]
    assert "added tokens" in lines[0]
    assert not (tmp_path / "reports").exists()

    unresized = add_tokens(hf_dir, tmp_path / "unresized", ["<|brand|>"], resize=False)
    res = subprocess.run([sys.executable, "-m", "verifylib", "run",
                          str(_params(tmp_path, unresized, "en")), "--reports",
                          str(tmp_path / "reports"), "--no-progress"], capture_output=True,
                         text=True, timeout=300)
    assert res.returncode == 2, res.stderr[-2000:]
    assert "key model.path: tokenizer.json lists 51867 tokens, the model's vocab_size is " \
           "51866" in res.stderr
