"""The Hugging Face reference side of parity: log-mels and the encoder's tapped outputs.

Real and random log-mels, and the encoder's outputs with its residual stream tapped per
block.

Computed once per audit and shared by every candidate (the ML program executed op by op,
the compiled model under Core ML), so all candidates are measured against the same numbers.
torch is imported inside the functions that run the encoder, so importing this module costs
only numpy.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from verifylib.errors import ContractBroken

RANDOM_SEED = 20261130
"""Seed of the random log-mel reported beside the fixture's (uniform in [-1, 1])."""


@dataclass
class ReferenceRun:
    """The reference side, computed once per stage and shared by every candidate.

    Attributes
    ----------
    contract : EncoderContract
        Derived from the reference model.
    inputs : dict
        ``"fixture"`` and ``"random"`` log-mels, float32 of the contract's input shape.
    input_records : dict
        What the evidence says about each input (digests, seed, shapes).
    outputs : dict
        Input kind -> reference encoder output (float32 numpy).
    layers : dict
        Input kind -> list of (label, activation) along the residual stream (stage 04
        keeps the fixture's only: per-layer drift is measured on it alone).
    seconds : dict
        Input kind -> HF encoder wall time.
    speech_frames : int
        Encoder output frames covered by the fixture's audio (the rest is padding).
    description : dict
        What the evidence says about the reference implementation.
    encoder : transformers WhisperEncoder or None
        The reference model, kept for op-level attribution (:mod:`verifylib.numerics.drift`).
    """

    contract: Any
    inputs: dict
    input_records: dict
    outputs: dict
    layers: dict
    seconds: dict
    speech_frames: int
    description: dict = field(default_factory=dict)
    encoder: Any = None


def fixture_logmel(bundle, audio: np.ndarray, contract) -> np.ndarray:
    """Compute the model's Whisper log-mel of ``audio``, padded to the contract's mel width.

    Parameters
    ----------
    bundle : HFBundle or feature extractor
        A :class:`verifylib.models.intake.HFBundle` (its ``feature_extractor`` is used) or
        the Whisper feature extractor itself.
    audio : numpy.ndarray
        1-D float32 samples at the extractor's sampling rate.
    contract : EncoderContract
        Gives the mel width and the input shape the features must have.

    Returns
    -------
    numpy.ndarray
        float32 log-mel of shape ``contract.input_shape``.

    Raises
    ------
    ContractBroken
        If the audio is longer than the contract's window (it would be cut silently) or the
        features do not have the contract's input shape.
    """
    # A bundle (verifylib.models.intake.HFBundle) or the feature extractor itself.
    fe = getattr(bundle, "feature_extractor", bundle)
    n = contract.mel_width * fe.hop_length
    if audio.shape[0] > n:
        raise ContractBroken(f"fixture audio has {audio.shape[0]} samples; the encoder window "
                         f"holds {n}")
    mel = fe(audio, sampling_rate=fe.sampling_rate, padding="max_length", max_length=n,
             truncation=True, return_tensors="np").input_features.astype(np.float32)
    if tuple(mel.shape) != contract.input_shape:
        raise ContractBroken(f"feature extractor gave {mel.shape}, the contract is "
                         f"{contract.input_shape}")
    return mel


def random_logmel(contract, seed: int = RANDOM_SEED) -> np.ndarray:
    """Draw a seeded random log-mel of the contract's input shape (uniform in [-1, 1]).

    Parameters
    ----------
    contract : EncoderContract
        Gives the input shape.
    seed : int
        Seed of ``numpy.random.default_rng``.

    Returns
    -------
    numpy.ndarray
        float32 array of shape ``contract.input_shape``.
    """
    rng = np.random.default_rng(seed)
    return rng.uniform(-1.0, 1.0, size=contract.input_shape).astype(np.float32)


def reference_encode(encoder, mel: np.ndarray) -> tuple[np.ndarray, list, float]:
    """Run the HF encoder (inference mode) and collect the residual stream per block.

    Parameters
    ----------
    encoder : transformers WhisperEncoder
        The reference encoder; hooks on its ``layers`` tap the residual stream and are
        removed afterwards.
    mel : numpy.ndarray
        float32 log-mel input.

    Returns
    -------
    output : numpy.ndarray
        The encoder's ``last_hidden_state``.
    layers : list of (str, numpy.ndarray)
        ``[("embeddings", a), ("block 0", a), …, ("output", a)]``: the input of block 0,
        each block's output, and the final (layer-normed) output.
    seconds : float
        Wall time of the forward pass.
    """
    import torch
    seen: dict[str, np.ndarray] = {}
    hooks = []
    blocks = list(encoder.layers)

    def pre0(_mod, args, kwargs=None):
        x = args[0] if args else kwargs["hidden_states"]
        seen["embeddings"] = x.detach().numpy().copy()

    def post(i):
        def fn(_mod, _args, out):
            t = out[0] if isinstance(out, (tuple, list)) else out
            seen[f"block {i}"] = t.detach().numpy().copy()
        return fn

    hooks.append(blocks[0].register_forward_pre_hook(pre0, with_kwargs=True))
    for i, b in enumerate(blocks):
        hooks.append(b.register_forward_hook(post(i)))
    try:
        with torch.inference_mode():
            t0 = time.perf_counter()
            out = encoder(torch.from_numpy(mel)).last_hidden_state
            secs = time.perf_counter() - t0
    finally:
        for h in hooks:
            h.remove()
    out = out.detach().numpy().copy()
    layers = [("embeddings", seen["embeddings"])]
    layers += [(f"block {i}", seen[f"block {i}"]) for i in range(len(blocks))]
    layers.append(("output", out))
    return out, layers, secs
