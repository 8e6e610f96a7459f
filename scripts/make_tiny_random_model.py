"""Write the seeded random Whisper model the runs kept as test data audit (tests/data/runs).

Usage: ``python scripts/make_tiny_random_model.py HF_DIR DEST`` where ``HF_DIR`` is tiny.en's
Hugging Face folder (the default audit's import, ``<cache>/models/<digest>/``). ``DEST``
gets a model of tiny.en's tokenizer, mel bins and context with ``d_model`` 16, two heads,
one encoder and one decoder layer and ``ffn_dim`` 4 x ``d_model`` (whisper.cpp's loader
assumes it), its weights drawn with torch's seed 5: a complete audit of it is about 5 MB.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path


def main(hf_dir: str, dest: str) -> None:
    """Write the model.

    Parameters
    ----------
    hf_dir : str
        tiny.en's Hugging Face folder (config, tokenizer, preprocessor).
    dest : str
        The new folder (replaced).
    """
    import torch
    from transformers import WhisperConfig, WhisperForConditionalGeneration

    src, out = Path(hf_dir), Path(dest)
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    cfg = WhisperConfig.from_pretrained(src)
    cfg.d_model = 16
    cfg.encoder_attention_heads = cfg.decoder_attention_heads = 2
    cfg.encoder_layers = cfg.decoder_layers = cfg.num_hidden_layers = 1
    cfg.encoder_ffn_dim = cfg.decoder_ffn_dim = 4 * cfg.d_model
    torch.manual_seed(5)
    WhisperForConditionalGeneration(cfg).eval().save_pretrained(out, safe_serialization=True)
    for name in ("generation_config.json", "preprocessor_config.json", "tokenizer.json",
                 "tokenizer_config.json"):
        shutil.copy(src / name, out / name)


if __name__ == "__main__":
    main(*sys.argv[1:3])
