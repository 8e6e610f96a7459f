"""The CTranslate2 reader on the real registry model (faster-whisper tiny.en from the default
parameters' wheel, in the session cache)."""

from __future__ import annotations

from verifylib.models.ct2 import read_ct2


def test_real_faster_whisper_tiny_en(tiny_en_ct2_dir):
    m = read_ct2(tiny_en_ct2_dir / "model.bin")
    assert (m.version, m.spec_name, m.revision) == (6, "WhisperSpec", 3)
    assert len(m.variables) == 148
    assert m.aliases == {"decoder/projection/weight": "decoder/embeddings/weight"}
    assert m.variables["decoder/embeddings/weight"].shape == (51864, 384)
    assert m.dtypes["decoder/embeddings/weight"] == "float16"
    assert m.scalar("encoder/num_heads") == 6 and m.scalar("decoder/num_heads") == 6
    assert m.scalar("decoder/activation") == 3  # GELU
    counts = {}
    for d in m.dtypes.values():
        counts[d] = counts.get(d, 0) + 1
    assert counts == {"float16": 139, "int8": 5, "int16": 4}
    total = sum(v.nbytes for k, v in m.variables.items() if m.dtypes[k] != "bfloat16")
    assert total < (tiny_en_ct2_dir / "model.bin").stat().st_size  # data + headers, parsed exactly


