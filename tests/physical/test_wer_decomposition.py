"""wer-v2 tells a conversion error from an implementation difference, on real transcripts.

The default tiny.en model is written to a ggml file twice: as it is, and with the decoder's
cross-attention of layer 0 zeroed (a broken conversion whose encoder is untouched, so
``export.pair`` and ``parity.program`` cannot see it). For each file the three legs of
stage 05 run for real on the shipped English fixtures: the Hugging Face source, the
reference on the file's own weights (HF-from-ggml, imported from the file) and the
patched whisper-cli. The wer-v2 rule passes the first and fails the second as a conversion
error, whatever whisper-cli does.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import ROOT

pytestmark = pytest.mark.physical

FIXTURES = ("numbers", "names", "weather", "invoice", "encoder")
BROKEN_FIXTURES = FIXTURES[:1]
"""The broken file's pass: its HF-from-ggml leg decodes every clip to the maximum length
(about 10 s a clip), and one clip already puts the corpus far above any limit."""


def _zeroed_cross_attention(hf_dir: Path, dest: Path, layer: int) -> Path:
    import shutil

    from safetensors.numpy import load_file, save_file

    shutil.copytree(hf_dir, dest, ignore=shutil.ignore_patterns("model.safetensors",
                                                                  "verifylib-import.json"))
    tensors = load_file(str(hf_dir / "model.safetensors"))
    prefix = f"model.decoder.layers.{layer}.encoder_attn."
    hit = [n for n in tensors if n.startswith(prefix)]
    assert hit, prefix
    for name in hit:
        tensors[name] = tensors[name] * 0
    save_file(tensors, str(dest / "model.safetensors"), metadata={"format": "pt"})
    return dest


def _evidence(tmp_path, cache, bundle, binary, ggml_file, source_texts, fixtures=FIXTURES):
    """Return the wer-v2 document of stage 05's three legs on ``ggml_file``.

    ``cache`` receives the file's import (keyed by its digest); ``source_texts`` maps a
    clip to the source model's transcript, which does not depend on the file: made once
    and shared by both files' passes.
    """
    import yaml

    from verifylib.models.ggml_import import import_ggml_cached
    from verifylib.models.hf import load_hf, transcribe_hf
    from verifylib.numerics.scoring import load_policy, scoring_for
    from verifylib.runtime.audio import read_wav_16k
    from verifylib.runtime.audio_intake import intake
    from verifylib.stages.wer import cli_transcribe

    rules = load_policy("wer-v2").rules
    sc = scoring_for(rules, "en")
    from_ggml = load_hf(import_ggml_cached(ggml_file, cache).hf_dir)
    params = yaml.safe_load((ROOT / "parameters" / "tiny-en.yaml").read_text())
    texts = {fx["id"]: fx["text"] for fx in params["fixtures"] if "text" in fx}
    clips = []
    for fid in fixtures:
        got = intake(ROOT / "parameters" / "fixtures" / f"{fid}.wav", tmp_path / "audio", fid)
        audio = read_wav_16k(got.pcm_path)
        raw_cli, res = cli_transcribe(binary, str(ggml_file), got.pcm_path, "en")
        assert res.ok, res.describe()
        if fid not in source_texts:
            source_texts[fid] = transcribe_hf(bundle, audio, "en")
        r, s, f, g = (sc.normalize(rules, t) for t in (
            texts[fid], source_texts[fid], transcribe_hf(from_ggml, audio, "en"), raw_cli))
        clips.append({"id": fid, "public": True, "language": "en", "normalizer": sc.normalizer,
                      "unit": sc.unit, "source": sc.count(rules, r, s).as_dict(),
                      "ggml": sc.count(rules, r, g).as_dict(),
                      "pairwise": sc.count(rules, s, g).as_dict(),
                      "from_ggml": sc.count(rules, r, f).as_dict(),
                      "conversion": sc.count(rules, s, f).as_dict(),
                      "implementation": sc.count(rules, f, g).as_dict(),
                      "from_ggml_empty": not f, "source_empty": not s, "ggml_empty": not g,
                      "reference": r, "source_text": s, "ggml_text": g, "from_ggml_text": f})
    return {"policy": rules, "clips": clips}


def test_a_broken_conversion_fails_and_a_faithful_one_passes(tmp_path, cache_root, tiny_en_info,
                                                              tiny_en_bundle, v185_ggml_build):
    from verifylib.evidence.gates import Status
    from verifylib.evidence.wer.rules import judge_ggml_vs_source
    from verifylib.models.ggml_writer import write_ggml_model

    binary = v185_ggml_build.result.binary
    good = tmp_path / "good" / "ggml-model.bin"
    good.parent.mkdir()
    write_ggml_model(tiny_en_info.hf_dir, good)
    source_texts: dict[str, str] = {}
    # The faithful file's import is the one stage 05 of the default audit makes (same
    # digest): the session cache shares it.
    j = judge_ggml_vs_source(_evidence(tmp_path, cache_root, tiny_en_bundle, binary, good,
                                       source_texts))
    assert j.status is Status.PASS, j.detail
    assert "conversion (source vs HF-from-ggml) 0.0000" in j.detail

    broken = tmp_path / "broken" / "ggml-model.bin"
    broken.parent.mkdir()
    write_ggml_model(_zeroed_cross_attention(Path(tiny_en_info.hf_dir), tmp_path / "zeroed", 0),
                     broken)
    j = judge_ggml_vs_source(_evidence(tmp_path, tmp_path / "cache", tiny_en_bundle, binary,
                                       broken, source_texts, BROKEN_FIXTURES))
    assert j.status is Status.FAIL, j.detail
    assert "HF-from-ggml corpus WER above the limit (a conversion error)" in j.detail \
        or "transcript empty where the source's is not" in j.detail, j.detail
