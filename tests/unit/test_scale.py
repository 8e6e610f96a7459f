"""``benchmarks/scale.py``: its shape table and its model builder (fast; no export runs). The
conversion's memory release is in tests/physical/test_scale.py."""

from __future__ import annotations

import importlib.util
import json
import sys

import pytest

from tests.helpers import ROOT


@pytest.fixture(scope="module")
def scale():
    spec = importlib.util.spec_from_file_location("bench_scale", ROOT / "benchmarks" / "scale.py")
    mod = importlib.util.module_from_spec(spec)
    # dataclasses look their module up in sys.modules while the class is created.
    sys.modules[spec.name] = mod
    try:
        spec.loader.exec_module(mod)
        yield mod
    finally:
        sys.modules.pop(spec.name, None)


# The size fields of the openai/whisper-* config.json files on the Hugging Face hub,
# written out by hand so that a typo in the benchmark's table shows up here.
PUBLISHED = {
    "tiny": dict(d_model=384, encoder_layers=4, decoder_layers=4, heads=6, ffn=1536,
                 num_mel_bins=80, vocab_size=51865),
    "base": dict(d_model=512, encoder_layers=6, decoder_layers=6, heads=8, ffn=2048,
                 num_mel_bins=80, vocab_size=51865),
    "small": dict(d_model=768, encoder_layers=12, decoder_layers=12, heads=12, ffn=3072,
                  num_mel_bins=80, vocab_size=51865),
    "medium": dict(d_model=1024, encoder_layers=24, decoder_layers=24, heads=16, ffn=4096,
                   num_mel_bins=80, vocab_size=51865),
    "large-v3": dict(d_model=1280, encoder_layers=32, decoder_layers=32, heads=20, ffn=5120,
                     num_mel_bins=128, vocab_size=51866),
    "large-v3-turbo": dict(d_model=1280, encoder_layers=32, decoder_layers=4, heads=20,
                           ffn=5120, num_mel_bins=128, vocab_size=51866),
}


def test_shape_table_matches_published_configs(scale):
    assert set(scale.SHAPES) == set(PUBLISHED)
    for name, want in PUBLISHED.items():
        cfg = scale.SHAPES[name].config_fields()
        assert cfg == {
            "d_model": want["d_model"], "encoder_layers": want["encoder_layers"],
            "decoder_layers": want["decoder_layers"],
            "encoder_attention_heads": want["heads"], "decoder_attention_heads": want["heads"],
            "encoder_ffn_dim": want["ffn"], "decoder_ffn_dim": want["ffn"],
            "num_mel_bins": want["num_mel_bins"], "vocab_size": want["vocab_size"],
            "max_source_positions": 1500, "max_target_positions": 448}, name


def test_turbo_shares_the_large_v3_encoder(scale):
    a, b = scale.SHAPES["large-v3"], scale.SHAPES["large-v3-turbo"]
    assert scale.encoder_parameters(a) == scale.encoder_parameters(b)
    assert (a.decoder_layers, b.decoder_layers) == (32, 4)


def test_tiny_builder_has_the_expected_parameter_counts(scale, tmp_path):
    # A template with Whisper's default token ids stands in for tiny.en's folder: the
    # builder takes only the non-size fields from it.
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "whisper"}))
    shape = scale.SHAPES["tiny"]
    model = scale.build_model(shape, tmp_path, seed=1)
    enc = sum(p.numel() for p in model.model.encoder.parameters())
    assert enc == scale.encoder_parameters(shape) == 8_208_384
    # openai/whisper-tiny's published parameter count (the output projection is tied).
    assert sum(p.numel() for p in model.parameters()) == 37_760_640
    again = scale.build_model(shape, tmp_path, seed=1)
    w0, w1 = model.model.encoder.layers[0].fc1.weight, again.model.encoder.layers[0].fc1.weight
    assert bool((w0 == w1).all()), "the same seed must give the same weights"
    # No two layer norms or biases are alike, so coremltools merges none of them and each
    # op of the program reads its own constant, as in a trained model.
    enc_params = dict(model.model.encoder.named_parameters())
    small = {n: p for n, p in enc_params.items()
             if n.endswith(".bias") or "layer_norm" in n}
    assert len(small) > 20
    seen = set()
    for name, p in small.items():
        key = (tuple(p.shape), p.detach().numpy().tobytes())
        assert key not in seen, f"{name} equals another parameter"
        seen.add(key)
    assert bool((again.model.encoder.layers[1].final_layer_norm.weight
                 == model.model.encoder.layers[1].final_layer_norm.weight).all())


def test_least_squares_fits(scale):
    a, b = scale.fit_linear([1.0, 2.0, 3.0], [12.0, 22.0, 32.0])
    assert (round(a, 9), round(b, 9)) == (10.0, 2.0)
    c, k = scale.fit_power([1e6, 1e7, 1e8], [2.0 * x ** 0.5 for x in (1e6, 1e7, 1e8)])
    assert round(c, 6) == 2.0 and round(k, 9) == 0.5
