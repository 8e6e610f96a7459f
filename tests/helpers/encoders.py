"""Small Whisper encoders and Core ML packages for the export, executor and parity tests:
randomly initialised encoders of any shape, their export, and an in-place weight edit."""

from __future__ import annotations

import struct
from pathlib import Path

from verifylib.models.coreml_contract import contract_of
from verifylib.models.coreml_export import convert_traced, trace_encoder


def small_encoder(n_mels=40, max_pos=50, d_model=32, layers=1, heads=2, conv2_stride=2, seed=0):
    """A randomly initialised Whisper encoder (eager attention) of the given shape."""
    import torch
    from transformers import WhisperConfig
    from transformers.models.whisper.modeling_whisper import WhisperEncoder

    torch.manual_seed(seed)
    cfg = WhisperConfig(num_mel_bins=n_mels, max_source_positions=max_pos, d_model=d_model,
                        encoder_layers=layers, encoder_attention_heads=heads,
                        encoder_ffn_dim=2 * d_model, decoder_layers=1,
                        decoder_attention_heads=heads, decoder_ffn_dim=2 * d_model,
                        vocab_size=64, max_target_positions=8, pad_token_id=0,
                        bos_token_id=1, eos_token_id=2, decoder_start_token_id=1)
    cfg._attn_implementation = "eager"
    enc = WhisperEncoder(cfg).eval()
    if conv2_stride != 2:
        enc.conv2.stride = (conv2_stride,)
    return enc


def export_small(encoder, folder: Path, precision="fp32", **overrides):
    """Trace + convert + place a small encoder; returns (contract, placed or exception)."""
    contract = contract_of(encoder)
    traced, _, _ = trace_encoder(encoder, contract)
    conv = convert_traced(traced, contract, precision, **overrides)
    return contract, conv


def edit_weight(package: Path, const_suffix: str, index: int, delta: float) -> str:
    """Add ``delta`` to element ``index`` of a float32 weight constant, in place, inside
    the saved package's ``weights/weight.bin`` (blob metadata: sentinel, dtype, size,
    data offset). Returns the constant's name."""
    import coremltools as ct
    spec = ct.utils.load_spec(str(package))
    fn = spec.mlProgram.functions["main"]
    block = fn.block_specializations[fn.opset]
    for op in block.operations:
        if op.type == "const" and op.outputs[0].name.endswith(const_suffix):
            val = op.attributes["val"]
            assert val.WhichOneof("value") == "blobFileValue"
            offset = val.blobFileValue.offset
            break
    else:
        raise AssertionError(f"no const ending in {const_suffix}")
    wfile = package / "Data" / "com.apple.CoreML" / "weights" / "weight.bin"
    data = bytearray(wfile.read_bytes())
    sentinel, _dtype, size, data_offset = struct.unpack_from("<IIQQ", data, offset)
    assert sentinel == 0xDEADBEEF and 4 * index < size
    pos = data_offset + 4 * index
    (old,) = struct.unpack_from("<f", data, pos)
    struct.pack_into("<f", data, pos, old + delta)
    wfile.write_bytes(bytes(data))
    return op.outputs[0].name
