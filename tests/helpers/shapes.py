"""Seeded random-weight Whisper models of the shapes fine-tunes have, made here (no hub).

A model is first written as a whisper.cpp file (:func:`random_ggml`: tiny widths, the
shape's vocabulary size, mel count and layer counts, weights of a small standard
deviation so activations stay finite in f16) and then imported into a Hugging Face folder
with :func:`verifylib.models.ggml_import.import_ggml`, which gives it the tokenizer and
generation config whisper.cpp's token rule implies for that vocabulary size. That folder
is the "fine-tune" the audit's chain starts from (HF -> ggml -> Core ML -> pair).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tests.helpers import ggml_files

SHAPES = {
    # 128 mels, vocabulary 51866 (yue), as large-v3 and its fine-tunes.
    "large-v3": dict(n_vocab=51866, n_mels=128, n_audio_layer=2, n_text_layer=2),
    # A distil-whisper-style model: the teacher's encoder depth, 2 decoder layers.
    "distil": dict(n_vocab=51865, n_mels=80, n_audio_layer=4, n_text_layer=2),
}
"""The accepted shapes: name -> the hparams that make the shape (widths are tiny)."""


def random_ggml(dest: Path, english_vocab: list[bytes], *, n_vocab: int, n_mels: int,
                n_audio_layer: int, n_text_layer: int, seed: int) -> Path:
    """Write an f16 ggml file of a random-weight Whisper of the given shape.

    ``english_vocab`` is tiny.en's token list; its 50256 regular tokens are kept (a
    multilingual vocabulary's 50257th regular id stays unnamed: whisper.cpp and the
    importer call it ``[_extra_token_50256]``).
    """
    from transformers.audio_utils import mel_filter_bank

    hp = dict(n_vocab=n_vocab, n_audio_ctx=1500, n_audio_state=64, n_audio_head=2,
              n_audio_layer=n_audio_layer, n_text_ctx=448, n_text_state=64, n_text_head=2,
              n_text_layer=n_text_layer, n_mels=n_mels, ftype=1)
    rng = np.random.default_rng(seed)
    values = {}
    for name, (dims, _) in ggml_files.expected_layout(hp, 1).items():
        shape = tuple(reversed(dims))
        # Layer norms start at 1 as in training; everything else small and centred.
        layer_norm = "_ln" in name or ".ln" in name or name.endswith("ln_post.weight")
        values[name] = (np.ones(shape) if layer_norm and name.endswith(".weight")
                        else rng.standard_normal(shape) * 0.05)
    bank = mel_filter_bank(num_frequency_bins=201, num_mel_filters=n_mels, min_frequency=0.0,
                           max_frequency=8000.0, sampling_rate=16000, norm="slaney",
                           mel_scale="slaney").T.astype(np.float32)
    return ggml_files.write(dest, hp, ggml_files.records(hp, "f16", rng, values=values),
                            mel=bank, vocab=list(english_vocab[:50256]))


def random_fine_tune(dest: Path, english_vocab: list[bytes], *, seed: int = 20261204,
                     **shape) -> Path:
    """Return a Hugging Face folder of a seeded random-weight Whisper of ``shape``."""
    from verifylib.models.ggml_import import import_ggml

    dest.mkdir(parents=True, exist_ok=True)
    seed_file = random_ggml(dest / "seed.bin", english_vocab, seed=seed, **shape)
    return Path(import_ggml(seed_file, dest / "hf").hf_dir)


def add_tokens(hf_dir: Path, dest: Path, tokens: list[str], *, resize: bool) -> Path:
    """Copy ``hf_dir`` with ``tokens`` added to its tokenizer, as a fine-tune would.

    With ``resize`` the embedding grows to the new vocabulary (``vocab_size`` with it), as
    ``resize_token_embeddings`` does; without, the tokenizer lists ids the model has no
    embedding for.
    """
    import shutil

    import torch
    from transformers import AutoTokenizer, WhisperForConditionalGeneration

    shutil.copytree(hf_dir, dest)
    tok = AutoTokenizer.from_pretrained(dest, local_files_only=True)
    tok.add_tokens(tokens)
    tok.save_pretrained(dest)
    if resize:
        model = WhisperForConditionalGeneration.from_pretrained(dest, dtype=torch.float32,
                                                                local_files_only=True)
        model.resize_token_embeddings(len(tok))
        model.save_pretrained(dest)
    return dest
