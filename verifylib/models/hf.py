"""Hugging Face Whisper models: load a folder, transcribe greedily, load the encoder alone.

The reference side of every comparison: transformers runs the model; this module only
fixes how (float32, CPU, greedy, no timestamps) so every stage asks the same question.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from verifylib.errors import ParametersInvalid
from verifylib.models.ct2 import ModelError

MEL_FILTERS_FILE = "mel_filters.npy"
"""A folder's own mel filter bank, float32 ``(n_mels, n_freq)`` as a ggml file stores it
(:mod:`verifylib.models.ggml_import` writes it); when present it replaces the bank the
feature extractor computes."""


@dataclass(frozen=True)
class HFBundle:
    """A loaded Hugging Face Whisper model, ready for reference inference.

    Attributes
    ----------
    model : transformers.WhisperForConditionalGeneration
        float32, eval mode, eager attention, on CPU.
    feature_extractor : transformers.WhisperFeatureExtractor
        Log-mel front end with the model's ``n_mels``.
    tokenizer : transformers.PreTrainedTokenizerBase
        The model's tokenizer.
    hf_dir : Path
        The folder loaded.
    is_multilingual : bool
        Whether the model takes language and task tokens.
    """

    model: Any
    feature_extractor: Any
    tokenizer: Any
    hf_dir: Path
    is_multilingual: bool


def load_hf(hf_dir: str | os.PathLike) -> HFBundle:
    """Load a Hugging Face Whisper folder for reference inference.

    Parameters
    ----------
    hf_dir : path-like
        Folder with config, weights, tokenizer and ``preprocessor_config.json``.

    Returns
    -------
    HFBundle
        float32 model in eval mode with eager attention on CPU, its feature extractor and
        tokenizer.
    """
    import torch
    from transformers import AutoTokenizer, WhisperForConditionalGeneration

    hf_dir = Path(hf_dir)
    model = WhisperForConditionalGeneration.from_pretrained(
        hf_dir, dtype=torch.float32, attn_implementation="eager", local_files_only=True)
    model = model.to("cpu").eval()
    fe = load_feature_extractor(hf_dir)
    tok = AutoTokenizer.from_pretrained(hf_dir, local_files_only=True)
    if fe.feature_size != model.config.num_mel_bins:
        raise ModelError(f"{hf_dir}: preprocessor has {fe.feature_size} mels, the model "
                         f"{model.config.num_mel_bins}")
    multi = bool(getattr(model.generation_config, "is_multilingual", False))
    return HFBundle(model=model, feature_extractor=fe, tokenizer=tok, hf_dir=hf_dir,
                    is_multilingual=multi)


def load_feature_extractor(hf_dir: str | os.PathLike):
    """Load a folder's Whisper feature extractor, with the folder's own mel filters if any.

    A folder imported from a whisper.cpp file carries the filter bank that file holds
    (:data:`MEL_FILTERS_FILE`), which whisper.cpp applies; the reference must apply the
    same bank, not the one ``WhisperFeatureExtractor`` computes from its settings.

    Parameters
    ----------
    hf_dir : path-like
        Folder with ``preprocessor_config.json`` and optionally :data:`MEL_FILTERS_FILE`.

    Returns
    -------
    transformers.WhisperFeatureExtractor
        Its ``mel_filters`` (``(n_freq, n_mels)``, float64 as transformers keeps them) are
        the folder's bank when it has one.

    Raises
    ------
    ModelError
        If the folder's bank is not a finite float32 array of ``(feature_size, n_freq)``.
    """
    from transformers import WhisperFeatureExtractor

    hf_dir = Path(hf_dir)
    fe = WhisperFeatureExtractor.from_pretrained(hf_dir, local_files_only=True)
    path = hf_dir / MEL_FILTERS_FILE
    if path.is_file():
        try:
            bank = np.load(path, allow_pickle=False)
        except ValueError as exc:
            raise ModelError(f"{path}: not a numpy array file ({exc})") from None
        want = (fe.feature_size, 1 + fe.n_fft // 2)
        if bank.dtype != np.float32 or bank.shape != want or not np.isfinite(bank).all():
            raise ModelError(f"{path}: expected finite float32 {want}, got {bank.dtype} "
                             f"{bank.shape}")
        if np.asarray(fe.mel_filters).shape != want[::-1]:
            raise ModelError(f"{hf_dir}: the feature extractor's bank has shape "
                             f"{np.asarray(fe.mel_filters).shape}, expected {want[::-1]}")
        fe.mel_filters = bank.T.astype(np.float64)
    return fe


def transcribe_hf(bundle: HFBundle, audio: np.ndarray, language: str | None = None, *,
                  num_beams: int = 1, return_timestamps: bool = False) -> str:
    """Transcribe up to 30 s of 16 kHz audio; greedy without timestamps unless told otherwise.

    Parameters
    ----------
    bundle : HFBundle
        From :func:`load_hf`.
    audio : numpy.ndarray
        1-D float32 samples at 16 kHz (see :func:`verifylib.runtime.audio.read_wav_16k`).
    language : str, optional
        Language code for multilingual models (``"en"``); an English-only model accepts
        only ``None`` or ``"en"``.
    num_beams : int
        1 (greedy, the audit's pin) or more (beam search, measured by
        ``benchmarks/decoding_pin.py``).
    return_timestamps : bool
        Decode with timestamp tokens (dropped from the text).

    Returns
    -------
    str
        The decoded text without special tokens, stripped of surrounding whitespace.

    Raises
    ------
    verifylib.errors.ParametersInvalid
        If the audio is longer than 30 s (it would be truncated silently; long-form
        decoding differs between implementations) or the language does not fit the model.
    """
    import torch

    feats = _features(bundle, audio)
    kwargs: dict[str, Any] = {"num_beams": num_beams, "do_sample": False,
                              "return_timestamps": return_timestamps}
    if bundle.is_multilingual:
        if language:
            kwargs.update(language=language, task="transcribe")
    elif language not in (None, "en"):
        raise ParametersInvalid(f"{bundle.hf_dir} is English-only; language {language!r} is "
                                "not possible")
    with torch.inference_mode():
        ids = bundle.model.generate(feats, **kwargs)
    return bundle.tokenizer.batch_decode(ids, skip_special_tokens=True)[0].strip()


def _features(bundle: HFBundle, audio: np.ndarray):
    """Return the log-mel input features of at most 30 s of 16 kHz audio."""
    audio = np.asarray(audio, dtype=np.float32)
    if audio.ndim != 1:
        raise ParametersInvalid(f"audio must be 1-D, got shape {audio.shape}")
    fe = bundle.feature_extractor
    if audio.shape[0] > fe.n_samples:
        raise ParametersInvalid(f"audio has {audio.shape[0] / fe.sampling_rate:.2f} s; the "
                                "reference transcribes at most "
                                f"{fe.n_samples / fe.sampling_rate:.0f} s")
    return fe(audio, sampling_rate=fe.sampling_rate, return_tensors="pt").input_features


def detect_language_hf(bundle: HFBundle, audio: np.ndarray) -> tuple[str, float]:
    """Detect a clip's language as whisper.cpp's ``-dl`` does, on the reference model.

    One decoder step from the start-of-transcript token; the language tokens' logits
    alone go through a softmax, the most probable wins. transformers'
    ``detect_language`` makes the same step but returns no probability, which the
    evidence records beside whisper-cli's.

    Parameters
    ----------
    bundle : HFBundle
        A multilingual model (:attr:`HFBundle.is_multilingual`).
    audio : numpy.ndarray
        1-D float32 samples at 16 kHz, at most 30 s.

    Returns
    -------
    (str, float)
        The language code (``"de"``) and its probability among the languages.

    Raises
    ------
    verifylib.errors.ParametersInvalid
        If the model is English-only (it has no language tokens) or the audio too long.
    """
    import torch

    gc = bundle.model.generation_config
    lang_to_id = getattr(gc, "lang_to_id", None) or {}
    if not bundle.is_multilingual or not lang_to_id:
        raise ParametersInvalid(f"{bundle.hf_dir} is English-only: it has no language "
                                "tokens to detect with")
    feats = _features(bundle, audio)
    codes = sorted(lang_to_id, key=lang_to_id.get)
    ids = torch.tensor([lang_to_id[c] for c in codes])
    start = torch.tensor([[gc.decoder_start_token_id]])
    with torch.inference_mode():
        logits = bundle.model(input_features=feats, decoder_input_ids=start).logits[0, -1]
    probs = torch.softmax(logits[ids].double(), dim=0)
    best = int(torch.argmax(probs))
    # lang_to_id's keys are the tokens ("<|de|>"); the evidence names the code.
    return codes[best].strip("<|>"), float(probs[best])


def load_hf_encoder(hf_dir: str | os.PathLike):
    """Load only the encoder of a Hugging Face Whisper folder, and its feature extractor.

    Why not :func:`load_hf`: parity needs the encoder alone, and the full model would also
    materialise the decoder (for a large-v3-shaped model, 3.6 GB the encoder never uses).
    The encoder is built on the meta device and given the folder's ``model.encoder.*``
    tensors, read one by one from the safetensors file, so no weight exists twice.

    Parameters
    ----------
    hf_dir : path-like
        Folder with config, ``model.safetensors`` and ``preprocessor_config.json``.

    Returns
    -------
    (encoder, feature_extractor)
        ``WhisperEncoder`` in float32, eval mode, eager attention, on CPU; and the
        ``WhisperFeatureExtractor``.

    Raises
    ------
    ModelError
        If the folder misses encoder tensors, or its preprocessor disagrees with the
        model on the number of mel bins. (A folder without one ``model.safetensors`` is
        loaded whole with :func:`load_hf` and its encoder kept.)
    """
    import torch
    from safetensors import safe_open
    from transformers import WhisperConfig
    from transformers.models.whisper.modeling_whisper import WhisperEncoder

    hf_dir = Path(hf_dir)
    weights = hf_dir / "model.safetensors"
    if not weights.is_file():
        # A sharded folder: the full model, from which the encoder is kept.
        bundle = load_hf(hf_dir)
        return bundle.model.get_encoder(), bundle.feature_extractor
    config = WhisperConfig.from_pretrained(hf_dir, local_files_only=True)
    config._attn_implementation = "eager"
    prefix = "model.encoder."
    state = {}
    with safe_open(str(weights), framework="pt") as f:
        for key in f.keys():
            if key.startswith(prefix):
                state[key[len(prefix):]] = f.get_tensor(key).to(torch.float32)
    with torch.device("meta"):
        encoder = WhisperEncoder(config)
    try:
        encoder.load_state_dict(state, strict=True, assign=True)
    except RuntimeError as exc:
        raise ModelError(f"{hf_dir}: the encoder's tensors do not fit its config: {exc}") \
            from None
    encoder = encoder.eval()
    fe = load_feature_extractor(hf_dir)
    if fe.feature_size != config.num_mel_bins:
        raise ModelError(f"{hf_dir}: preprocessor has {fe.feature_size} mels, the model "
                         f"{config.num_mel_bins}")
    return encoder, fe
