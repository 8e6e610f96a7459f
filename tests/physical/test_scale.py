"""``benchmarks/scale.py``'s stage 02 memory rule: a converted program is freed once saved
(a small encoder traced and converted by coremltools)."""

from __future__ import annotations

from pathlib import Path


def test_release_conversion_frees_the_program_and_its_temporary_package(tmp_path):
    """Stage 02 drops each converted program once saved; the saved package stays whole."""
    import weakref

    from transformers import WhisperConfig
    from transformers.models.whisper.modeling_whisper import WhisperEncoder

    from verifylib.models.coreml_contract import contract_of
    from verifylib.models.coreml_export import convert_traced, release_conversion, trace_encoder
    from verifylib.models.coreml_package import discard_staged, stage_mlpackage

    cfg = WhisperConfig(num_mel_bins=8, max_source_positions=16, d_model=32, encoder_layers=1,
                        encoder_attention_heads=2, encoder_ffn_dim=64, decoder_layers=1,
                        decoder_attention_heads=2, decoder_ffn_dim=64, vocab_size=64)
    cfg._attn_implementation = "eager"
    encoder = WhisperEncoder(cfg).eval()
    contract = contract_of(encoder)
    traced, _, _ = trace_encoder(encoder, contract)
    conv = convert_traced(traced, contract, "fp16")
    program = weakref.ref(conv.model._mil_program)
    temporary = Path(conv.model.package_path)
    assert temporary.is_dir()
    staged = stage_mlpackage(conv.model, tmp_path / "fp16" / "ggml-model-encoder.mlpackage",
                             contract, "fp16")
    try:
        release_conversion(conv)
        assert conv.model is None
        assert program() is None, "the MIL program (a reference cycle) must be collected"
        assert not temporary.exists()
        assert conv.options["compute_precision"] == "FLOAT16" and conv.seconds > 0
        assert staged.ok and (staged.path / "Manifest.json").is_file()
        release_conversion(conv)  # a second call is harmless
    finally:
        discard_staged(staged)
