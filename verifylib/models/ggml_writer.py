"""Write whisper.cpp's legacy ggml model file from a Hugging Face folder.

Why this is hand-written: the only writers are scripts inside whisper.cpp's source tree
(``models/convert-h5-to-ggml.py`` needs a clone of the openai-whisper repository for its
mel filters and a ``vocab.json``/``added_tokens.json`` pair that faster-whisper imports do
not have) and no package on the registry produces the format. The format itself is
simple; what matters is that it is exactly what the pinned loader
(``whisper_model_load`` in ``src/whisper.cpp``, v1.8.5) accepts, so this module mirrors
that loader's expectations and refuses anything it would reject.

Layout (all integers little-endian int32 unless noted):

1. ``uint32`` magic ``0x67676d6c``; eleven hparams: ``n_vocab, n_audio_ctx,
   n_audio_state, n_audio_head, n_audio_layer, n_text_ctx, n_text_state, n_text_head,
   n_text_layer, n_mels, ftype``.
2. Mel filters: ``n_mel``, ``n_fft`` (201 frequency bins), then ``n_mel * n_fft`` float32,
   row ``j`` holding mel band ``j`` (the loader indexes ``data[j * n_fft + k]``).
3. Vocabulary: a count, then per token a length and its raw bytes. Only the byte-level BPE
   vocabulary is written (ids ``0 .. count-1``); the loader names the remaining special
   and timestamp ids itself ("adding N extra tokens").
4. Tensors until end of file: ``n_dims``, name length, ggml type (0 = f32, 1 = f16),
   ``n_dims`` extents in ggml order (fastest first: numpy's shape reversed), the name, then
   the C-order data.

Precision: the loader accepts ``ftype`` 1 (f16 for the 2-D weight matrices, the token
embedding and the conv kernels; f32 for biases, norms, positional embeddings and the conv
biases, stored as ``[1, n_state]``) and ``ftype`` 0 (f32 everywhere), and rejects a tensor
whose stored type differs from what the ftype implies. Only ``ftype = 1`` is written: an
all-f32 file loads, but v1.8.5's CPU encoder then aborts (``ggml_conv_1d_ph`` asks
``im2col`` for an f16 result and ``ggml_compute_forward_im2col_f16`` asserts an f16 kernel;
measured: SIGABRT, exit 134, on jfk.wav). ``ftype = 1`` is also what whisper.cpp's own
converters produce and what users ship, and it is lossless for fp16 sources such as the
CTranslate2 ``tiny.en``; the result reports whether every stored value equals the Hugging
Face float32 weight, and the largest rounding when not.

Memory: the weights are streamed. A ``model.safetensors`` (or the shards a
``model.safetensors.index.json`` names) is read one tensor at a time, each widened to
float32, written and released before the next is read, so a large-v3 export holds about
one tensor (plus its f16 copy) instead of the whole model. Every other folder (``.bin``
weights, renamed or missing keys, non-float tensors, quantized or adapter folders) is
loaded whole through ``from_pretrained`` as before; both paths write the same bytes.

Reading a file back is :mod:`verifylib.models.ggml_file`'s job (the one reader).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import struct
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from verifylib.canonical import set_published_mode
from verifylib.errors import ModelFailure

GGML_FILE_MAGIC = 0x67676D6C
"""``"ggml"``: the first four bytes of a legacy whisper.cpp model file."""

HPARAM_NAMES = ("n_vocab", "n_audio_ctx", "n_audio_state", "n_audio_head", "n_audio_layer",
                "n_text_ctx", "n_text_state", "n_text_head", "n_text_layer", "n_mels", "ftype")
"""The hparams in file order."""

GGML_TYPE_F32 = 0
GGML_TYPE_F16 = 1
WRITTEN_FTYPE = 1
"""The ftype :func:`write_ggml_model` writes (f16 matrices and conv kernels; see above)."""
_NUMPY = {GGML_TYPE_F32: np.dtype("<f4"), GGML_TYPE_F16: np.dtype("<f2")}

# whisper.cpp hard-codes its audio front end (WHISPER_SAMPLE_RATE, WHISPER_N_FFT,
# WHISPER_HOP_LENGTH); a model whose feature extractor differs would see other features.
_WHISPER_SAMPLE_RATE, _WHISPER_N_FFT, _WHISPER_HOP = 16000, 400, 160

# Hugging Face sub-module -> OpenAI/whisper.cpp sub-module inside one block.
_BLOCK_MAP = {
    "self_attn.q_proj": "attn.query", "self_attn.k_proj": "attn.key",
    "self_attn.v_proj": "attn.value", "self_attn.out_proj": "attn.out",
    "self_attn_layer_norm": "attn_ln",
    "encoder_attn.q_proj": "cross_attn.query", "encoder_attn.k_proj": "cross_attn.key",
    "encoder_attn.v_proj": "cross_attn.value", "encoder_attn.out_proj": "cross_attn.out",
    "encoder_attn_layer_norm": "cross_attn_ln",
    "fc1": "mlp.0", "fc2": "mlp.2", "final_layer_norm": "mlp_ln",
}
_TOP_MAP = {
    "encoder.conv1.weight": "encoder.conv1.weight", "encoder.conv1.bias": "encoder.conv1.bias",
    "encoder.conv2.weight": "encoder.conv2.weight", "encoder.conv2.bias": "encoder.conv2.bias",
    "encoder.embed_positions.weight": "encoder.positional_embedding",
    "encoder.layer_norm.weight": "encoder.ln_post.weight",
    "encoder.layer_norm.bias": "encoder.ln_post.bias",
    "decoder.embed_tokens.weight": "decoder.token_embedding.weight",
    "decoder.embed_positions.weight": "decoder.positional_embedding",
    "decoder.layer_norm.weight": "decoder.ln.weight",
    "decoder.layer_norm.bias": "decoder.ln.bias",
}
_BLOCK_RE = re.compile(r"^(encoder|decoder)\.layers\.(\d+)\.(.+)\.(weight|bias)$")


# Still a ValueError, as it was before it joined ModelFailure (a RuntimeError), so an
# ``except ValueError`` written for it keeps working.
class GgmlError(ModelFailure, ValueError):
    """A model cannot be written in, or a file does not follow, the ggml layout."""


@dataclass(frozen=True)
class GgmlWriteResult:
    """What :func:`write_ggml_model` published.

    Attributes
    ----------
    path : Path
        The published file.
    sha256 : str
        SHA-256 of its bytes.
    hparams : dict
        The eleven hparams written, by name.
    n_tensors : int
        Tensors written (all the loader creates for these hparams).
    bytes : int
        File size.
    n_vocab_entries : int
        Vocabulary entries written (the byte-level BPE tokens).
    lossless : bool
        True if every stored weight equals the Hugging Face float32 value exactly (f16
        rounding changed nothing).
    max_abs_rounding : float
        Largest absolute change any weight suffered from f16 storage (0.0 if lossless).
    seconds : float
        Wall time of the write, model loading included.
    """

    path: Path
    sha256: str
    hparams: dict
    n_tensors: int
    bytes: int
    n_vocab_entries: int
    lossless: bool
    max_abs_rounding: float
    seconds: float


def expected_tensors(hparams: dict) -> dict[str, tuple[tuple[int, ...], int]]:
    """List the tensors whisper.cpp's loader creates for ``hparams``.

    Parameters
    ----------
    hparams : dict
        At least the eleven :data:`HPARAM_NAMES`; ``ftype`` must be 0 or 1.

    Returns
    -------
    dict
        Name -> (extents in ggml order, ggml type), in the loader's creation order. The
        loader refuses a file that lacks any of these, adds another, or stores one with a
        different shape or type.
    """
    ftype = hparams["ftype"]
    if ftype not in (0, 1):
        raise GgmlError(f"ftype {ftype} is not supported (0 = all f32, 1 = f16 weights)")
    w = GGML_TYPE_F16 if ftype == 1 else GGML_TYPE_F32   # matrices
    v = w                                                   # conv kernels
    f = GGML_TYPE_F32
    s_a, s_t = hparams["n_audio_state"], hparams["n_text_state"]
    out: dict[str, tuple[tuple[int, ...], int]] = {
        "encoder.positional_embedding": ((s_a, hparams["n_audio_ctx"]), f),
        "encoder.conv1.weight": ((3, hparams["n_mels"], s_a), v),
        "encoder.conv1.bias": ((1, s_a), f),
        "encoder.conv2.weight": ((3, s_a, s_a), v),
        "encoder.conv2.bias": ((1, s_a), f),
        "encoder.ln_post.weight": ((s_a,), f),
        "encoder.ln_post.bias": ((s_a,), f),
    }

    def block(prefix: str, s: int, cross: bool) -> None:
        parts = [("attn", "attn_ln")] + ([("cross_attn", "cross_attn_ln")] if cross else [])
        out[f"{prefix}.mlp_ln.weight"] = ((s,), f)
        out[f"{prefix}.mlp_ln.bias"] = ((s,), f)
        out[f"{prefix}.mlp.0.weight"] = ((s, 4 * s), w)
        out[f"{prefix}.mlp.0.bias"] = ((4 * s,), f)
        out[f"{prefix}.mlp.2.weight"] = ((4 * s, s), w)
        out[f"{prefix}.mlp.2.bias"] = ((s,), f)
        for attn, ln in parts:
            out[f"{prefix}.{ln}.weight"] = ((s,), f)
            out[f"{prefix}.{ln}.bias"] = ((s,), f)
            out[f"{prefix}.{attn}.query.weight"] = ((s, s), w)
            out[f"{prefix}.{attn}.query.bias"] = ((s,), f)
            out[f"{prefix}.{attn}.key.weight"] = ((s, s), w)
            out[f"{prefix}.{attn}.value.weight"] = ((s, s), w)
            out[f"{prefix}.{attn}.value.bias"] = ((s,), f)
            out[f"{prefix}.{attn}.out.weight"] = ((s, s), w)
            out[f"{prefix}.{attn}.out.bias"] = ((s,), f)

    for i in range(hparams["n_audio_layer"]):
        block(f"encoder.blocks.{i}", s_a, cross=False)
    out["decoder.positional_embedding"] = ((s_t, hparams["n_text_ctx"]), f)
    out["decoder.token_embedding.weight"] = ((s_t, hparams["n_vocab"]), w)
    out["decoder.ln.weight"] = ((s_t,), f)
    out["decoder.ln.bias"] = ((s_t,), f)
    for i in range(hparams["n_text_layer"]):
        block(f"decoder.blocks.{i}", s_t, cross=True)
    return out


def ggml_name(hf_name: str) -> str | None:
    """Map a Hugging Face Whisper parameter name to its whisper.cpp tensor name.

    Parameters
    ----------
    hf_name : str
        E.g. ``"model.encoder.layers.0.self_attn.q_proj.weight"``.

    Returns
    -------
    str or None
        E.g. ``"encoder.blocks.0.attn.query.weight"``; None for ``proj_out.weight``, which
        whisper.cpp does not store (it reuses the token embedding).

    Raises
    ------
    GgmlError
        If the name has no whisper.cpp counterpart.
    """
    if hf_name == "proj_out.weight":
        return None
    name = hf_name[len("model."):] if hf_name.startswith("model.") else hf_name
    if name in _TOP_MAP:
        return _TOP_MAP[name]
    m = _BLOCK_RE.match(name)
    if m and m.group(3) in _BLOCK_MAP:
        side, idx, sub, kind = m.groups()
        return f"{side}.blocks.{idx}.{_BLOCK_MAP[sub]}.{kind}"
    raise GgmlError(f"Hugging Face parameter {hf_name!r} has no whisper.cpp counterpart")


def _byte_vocab(hf_dir: Path) -> list[bytes]:
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    tok_json, vocab_json = hf_dir / "tokenizer.json", hf_dir / "vocab.json"
    if tok_json.is_file():
        data = json.loads(tok_json.read_text(encoding="utf-8"))
        model = data.get("model") or {}
        if model.get("type") != "BPE" or not isinstance(model.get("vocab"), dict):
            raise GgmlError(f"{tok_json}: expected a byte-level BPE tokenizer")
        vocab = model["vocab"]
        source = tok_json
    elif vocab_json.is_file():
        vocab = json.loads(vocab_json.read_text(encoding="utf-8"))
        source = vocab_json
    else:
        raise GgmlError(f"{hf_dir}: no tokenizer.json or vocab.json")
    by_id = sorted((int(i), t) for t, i in vocab.items())
    if [i for i, _ in by_id] != list(range(len(by_id))):
        raise GgmlError(f"{source}: token ids are not contiguous from 0")
    decoder = {c: b for b, c in bytes_to_unicode().items()}
    out = []
    for i, token in by_id:
        try:
            out.append(bytes(decoder[c] for c in token))
        except KeyError as exc:
            raise GgmlError(f"{source}: token {i} {token!r} is not GPT-2 byte-level text") from exc
    return out


class _HashingWriter:
    def __init__(self, fh: BinaryIO):
        self.fh, self.h, self.n = fh, hashlib.sha256(), 0

    def write(self, data: bytes | memoryview | np.ndarray) -> None:
        self.fh.write(data)
        self.h.update(data)
        self.n += len(data)


# Every float dtype from_pretrained widens exactly as ``Tensor.to(torch.float32)`` does;
# anything else (integers, fp8, quantized blocks) is left to from_pretrained.
_STREAMED_DTYPES = frozenset({"F64", "F32", "F16", "BF16"})


class _LoadedWeights:
    """A whole model's float32 state dict (the ``from_pretrained`` path)."""

    def __init__(self, state: dict):
        self.names, self._state = list(state), state

    def source(self, name: str) -> str:
        return name

    def get(self, name: str):
        return self._state[name]


class _StreamedWeights:
    """The model's parameters read from safetensors files one at a time, as float32."""

    def __init__(self, names: list[str], files: dict[str, Path], ties: dict[str, str]):
        self.names, self._files, self._ties = names, files, ties

    def source(self, name: str) -> str:
        """Return the checkpoint key ``name`` is read from (its tie source if not stored)."""
        return name if name in self._files else self._ties[name]

    def get(self, name: str):
        import torch
        from safetensors import safe_open

        key = self.source(name)
        # A handle maps its whole file, and every page a tensor touched stays in the
        # resident set until the handle closes (measured: a large-v3 pass reached the
        # file's size). One handle per tensor bounds it by the tensors alive at once.
        with safe_open(self._files[key], framework="pt") as fh:
            tensor = fh.get_tensor(key)
        return tensor.to(torch.float32)


def _streamed_weights(hf_dir: Path, cfg) -> _StreamedWeights | None:
    """Return the folder's weights as :class:`_StreamedWeights`, or None.

    None when ``from_pretrained`` would load anything other than the checkpoint's tensors
    under the model's own names.
    """
    import torch
    from safetensors import SafetensorError, safe_open
    from transformers import WhisperForConditionalGeneration

    # These make from_pretrained read another file, quantize or attach an adapter.
    if (getattr(cfg, "transformers_weights", None) or getattr(cfg, "quantization_config", None)
            or (hf_dir / "adapter_config.json").exists()):
        return None
    single, index = hf_dir / "model.safetensors", hf_dir / "model.safetensors.index.json"
    weight_map = None
    if single.is_file():   # from_pretrained's order: the single file wins over an index
        shards = [single]
    elif index.is_file():
        try:
            weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
            shard_names = sorted(set(weight_map.values()))
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None
        if not all(isinstance(n, str) and Path(n).name == n and (hf_dir / n).is_file()
                   for n in shard_names):
            return None
        shards = [hf_dir / n for n in shard_names]
    else:
        return None
    files: dict[str, Path] = {}
    layout: dict[str, tuple[str, tuple[int, ...]]] = {}
    try:
        for shard in shards:
            with safe_open(shard, framework="pt") as fh:
                keys = fh.keys()
                for key in keys:
                    if key in files:
                        return None
                    part = fh.get_slice(key)
                    files[key], layout[key] = shard, (part.get_dtype(), tuple(part.get_shape()))
    except (OSError, SafetensorError):
        return None   # from_pretrained reports an unreadable checkpoint its own way
    if weight_map is not None and {k: f.name for k, f in files.items()} != weight_map:
        return None
    # The parameter names, shapes and ties from_pretrained would load into, without weights.
    with torch.device("meta"):
        model = WhisperForConditionalGeneration(cfg)
    state = model.state_dict()
    tied = getattr(model, "all_tied_weights_keys", None)
    if not isinstance(tied, dict):
        return None
    # A tied target absent from the checkpoint is its source (from_pretrained ties it);
    # one present in it is loaded as stored, and the writer compares the two.
    ties = {t: s for t, s in tied.items() if t not in files and s in files}
    if set(files) | set(ties) != set(state):
        return None   # missing, renamed or extra keys: from_pretrained's rules decide
    for key, (dtype, shape) in layout.items():
        if dtype not in _STREAMED_DTYPES or shape != tuple(state[key].shape):
            return None
    return _StreamedWeights(list(state), files, ties)


_CHUNK = 1 << 22
"""Elements converted, checked and written at a time (16 MiB of float32)."""


def _write_tensor(w: _HashingWriter, hf_dir: Path, name: str, dims: tuple, gtype: int,
                  tensor) -> float | None:
    """Write one tensor record; return its largest f16 rounding, or None if exact."""
    arr = tensor.detach().cpu().numpy().astype(np.float32, copy=False)
    if name in ("encoder.conv1.bias", "encoder.conv2.bias"):
        arr = arr.reshape(arr.shape[0], 1)
    if tuple(reversed(arr.shape)) != dims:
        raise GgmlError(f"{hf_dir}: {name} has shape {arr.shape}, whisper.cpp expects "
                        f"ggml extents {dims} (numpy {tuple(reversed(dims))})")
    raw = name.encode("utf-8")
    w.write(struct.pack("<iii", len(dims), len(raw), gtype))
    w.write(struct.pack(f"<{len(dims)}i", *dims))
    w.write(raw)
    # In chunks, so the stored copy, its float32 read-back and the difference are a few
    # MiB each rather than the size of a 265 MB token embedding.
    flat = arr.reshape(-1)   # C order, as the data is stored
    err = None
    with np.errstate(invalid="ignore"):   # inf - inf where an infinity survived f16
        for start in range(0, flat.size, _CHUNK):
            part = flat[start:start + _CHUNK]
            stored = part.astype(_NUMPY[gtype])
            if gtype != GGML_TYPE_F32:
                diff = stored.astype(np.float32)
                np.abs(np.subtract(diff, part, out=diff), out=diff)
                # Exactness counts NaN = NaN as equal. f16 keeps NaN and non-NaN apart, so a
                # NaN difference is such a pair (or two equal infinities) and fmax skips it;
                # any other mismatch differs by more than 0 (gradual underflow).
                rounding = float(np.fmax.reduce(diff, initial=0.0))
                if rounding > 0.0:
                    err = max(err or 0.0, rounding)
            w.write(stored.view(np.uint8))
    return err


def _load_weights(hf_dir: Path) -> tuple[Any, _StreamedWeights | _LoadedWeights]:
    """Return the folder's config and weights: streamed when possible, else loaded whole."""
    import torch
    from transformers import WhisperConfig, WhisperForConditionalGeneration

    cfg = WhisperConfig.from_pretrained(hf_dir, local_files_only=True)
    weights: _StreamedWeights | _LoadedWeights | None = _streamed_weights(hf_dir, cfg)
    if weights is None:
        model = WhisperForConditionalGeneration.from_pretrained(
            hf_dir, dtype=torch.float32, local_files_only=True)
        cfg = model.config
        weights = _LoadedWeights(model.state_dict())
        del model
    return cfg, weights


def _hparams(hf_dir: Path, cfg) -> dict:
    """Return the eleven hparams of ``cfg``, refused when whisper.cpp cannot express it."""
    hparams = {
        "n_vocab": cfg.vocab_size, "n_audio_ctx": cfg.max_source_positions,
        "n_audio_state": cfg.d_model, "n_audio_head": cfg.encoder_attention_heads,
        "n_audio_layer": cfg.encoder_layers, "n_text_ctx": cfg.max_target_positions,
        "n_text_state": cfg.d_model, "n_text_head": cfg.decoder_attention_heads,
        "n_text_layer": cfg.decoder_layers, "n_mels": cfg.num_mel_bins, "ftype": WRITTEN_FTYPE,
    }
    for side in ("encoder", "decoder"):
        ffn = getattr(cfg, f"{side}_ffn_dim")
        if ffn != 4 * cfg.d_model:
            raise GgmlError(f"{hf_dir}: {side}_ffn_dim {ffn} is not 4 x d_model "
                            f"({4 * cfg.d_model}); whisper.cpp's loader assumes 4 x")
    return hparams


def _mel_filters(hf_dir: Path, cfg) -> np.ndarray:
    """Return the folder's mel filter bank as ``(n_mels, 201)`` float32 rows."""
    from verifylib.models.hf import load_feature_extractor

    fe = load_feature_extractor(hf_dir)
    if (fe.sampling_rate, fe.n_fft, fe.hop_length) != (_WHISPER_SAMPLE_RATE, _WHISPER_N_FFT,
                                                       _WHISPER_HOP):
        raise GgmlError(f"{hf_dir}: feature extractor uses {fe.sampling_rate} Hz, n_fft "
                        f"{fe.n_fft}, hop {fe.hop_length}; whisper.cpp computes 16000 Hz, "
                        "400, 160")
    # The Hugging Face front end's own filter bank (slaney mel scale and norm, or the bank
    # a folder imported from a ggml file carries), so both sides compute the same log-mel
    # features.
    filters = np.ascontiguousarray(np.asarray(fe.mel_filters, dtype=np.float32).T)
    if filters.shape != (cfg.num_mel_bins, 1 + _WHISPER_N_FFT // 2):
        raise GgmlError(f"{hf_dir}: mel filters have shape {filters.shape}, expected "
                        f"({cfg.num_mel_bins}, {1 + _WHISPER_N_FFT // 2})")
    return filters


def _check_output_projection(hf_dir: Path, weights: _StreamedWeights | _LoadedWeights) -> None:
    """Refuse an output projection that is not the token embedding (whisper.cpp reuses it)."""
    import torch

    # With tied weights the loaded proj_out *is* the embedding, so this also compares the
    # embedding with itself (torch.equal is False if it holds a NaN), on both paths.
    emb_name, proj_name = "model.decoder.embed_tokens.weight", "proj_out.weight"
    emb, proj = weights.get(emb_name), None
    if proj_name in weights.names:
        # Not a second read (and copy) of the embedding when the projection is tied to it.
        same = weights.source(proj_name) == weights.source(emb_name)
        proj = emb if same else weights.get(proj_name)
    if proj is not None and not torch.equal(proj, emb):
        raise GgmlError(f"{hf_dir}: proj_out.weight differs from the token embedding; whisper.cpp "
                        "reuses the embedding as the output projection")


def _tensor_sources(hf_dir: Path, weights: _StreamedWeights | _LoadedWeights,
                    expected: dict) -> dict[str, str]:
    """Return whisper.cpp tensor name -> the Hugging Face parameter it is written from."""
    hf_of: dict[str, str] = {}
    for hf_name in weights.names:
        g = ggml_name(hf_name)
        if g is None:
            continue
        if g in hf_of:
            raise GgmlError(f"{hf_dir}: two parameters map to {g!r}")
        if g not in expected:
            raise GgmlError(f"{hf_dir}: {hf_name!r} maps to {g!r}, which whisper.cpp does not "
                            "load")
        hf_of[g] = hf_name
    missing = [g for g in expected if g not in hf_of]
    if missing:
        raise GgmlError(f"{hf_dir}: no Hugging Face parameter for whisper.cpp tensors {missing}")
    return hf_of


@dataclass(frozen=True)
class _Written:
    """What :func:`_write_file` put on disk: digest, size and the f16 rounding."""

    sha256: str
    bytes: int
    lossless: bool
    max_abs_rounding: float


def _write_file(out_path: Path, hf_dir: Path, hparams: dict, filters: np.ndarray,
                vocab: list[bytes], expected: dict, weights: _StreamedWeights | _LoadedWeights,
                hf_of: dict[str, str]) -> _Written:
    """Write the file to a staging name beside ``out_path`` and rename it into place."""
    out_path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{out_path.name}.", suffix=".staging", dir=out_path.parent)
    set_published_mode(fd)
    lossless, max_err = True, 0.0
    try:
        with os.fdopen(fd, "wb") as fh:
            w = _HashingWriter(fh)
            w.write(struct.pack("<I", GGML_FILE_MAGIC))
            w.write(struct.pack("<11i", *(hparams[k] for k in HPARAM_NAMES)))
            w.write(struct.pack("<ii", *filters.shape))
            w.write(filters.astype("<f4").tobytes())
            w.write(struct.pack("<i", len(vocab)))
            for token in vocab:
                w.write(struct.pack("<i", len(token)))
                w.write(token)
            for name, (dims, gtype) in expected.items():
                # The tensor is read here and dropped when the call returns, so a streamed
                # model never has two in memory.
                err = _write_tensor(w, hf_dir, name, dims, gtype, weights.get(hf_of[name]))
                if err is not None:
                    lossless = False
                    max_err = max(max_err, err)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, out_path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return _Written(sha256=w.h.hexdigest(), bytes=w.n, lossless=lossless,
                    max_abs_rounding=max_err)


def write_ggml_model(hf_dir: str | os.PathLike, out_path: str | os.PathLike) -> GgmlWriteResult:
    """Write a Hugging Face Whisper folder as a whisper.cpp ggml model file.

    The file is written to a staging name beside ``out_path`` and renamed into place, so
    ``out_path`` either keeps its old content or holds the complete new file.

    The weights are streamed when the folder holds ``model.safetensors`` or a
    ``model.safetensors.index.json`` with its shards, whose tensors are float (F64, F32,
    F16, BF16) and carry exactly the names and shapes ``WhisperForConditionalGeneration``
    loads (``proj_out.weight`` may be absent when tied): each tensor is read, widened to
    float32, checked, converted and written before the next is read, so memory stays near
    one tensor. Any other folder (``.bin`` weights, keys ``from_pretrained`` would rename,
    add, drop or initialize, quantized or adapter folders) is loaded whole with
    ``from_pretrained(dtype=torch.float32)``, as this writer always did. Both paths write
    the same bytes and refuse the same models.

    Parameters
    ----------
    hf_dir : path-like
        Hugging Face Whisper folder (config, weights, ``tokenizer.json`` or ``vocab.json``,
        ``preprocessor_config.json``; the filter bank written is the folder's
        ``mel_filters.npy`` when it has one, as a folder imported from a ggml file does).
    out_path : path-like
        Destination, e.g. ``.../fp32/ggml-model.bin``.

    Returns
    -------
    GgmlWriteResult
        Path, SHA-256, hparams, tensor count, size and whether the values are exact.

    Raises
    ------
    GgmlError
        If the model cannot be expressed in whisper.cpp's layout (feed-forward width other
        than 4 x d_model, a front end other than 16 kHz / n_fft 400 / hop 160, an untied
        output projection, unmapped parameters) or the tokenizer is not byte-level BPE.
    """
    t0 = time.monotonic()
    hf_dir, out_path = Path(hf_dir), Path(out_path)
    cfg, weights = _load_weights(hf_dir)
    hparams = _hparams(hf_dir, cfg)
    expected = expected_tensors(hparams)
    filters = _mel_filters(hf_dir, cfg)
    vocab = _byte_vocab(hf_dir)
    if len(vocab) > cfg.vocab_size:
        raise GgmlError(f"{hf_dir}: {len(vocab)} vocabulary entries for {cfg.vocab_size} "
                        "embedding rows")
    _check_output_projection(hf_dir, weights)
    hf_of = _tensor_sources(hf_dir, weights, expected)
    written = _write_file(out_path, hf_dir, hparams, filters, vocab, expected, weights, hf_of)
    return GgmlWriteResult(path=out_path, sha256=written.sha256, hparams=hparams,
                           n_tensors=len(expected), bytes=written.bytes,
                           n_vocab_entries=len(vocab), lossless=written.lossless,
                           max_abs_rounding=written.max_abs_rounding,
                           seconds=time.monotonic() - t0)
