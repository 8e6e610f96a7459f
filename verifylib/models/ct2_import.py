"""CTranslate2 Whisper models imported as Hugging Face folders: the weight mapping, strictly.

Why this is hand-written: the registry-only default model is Systran's faster-whisper
``tiny.en`` in CTranslate2 format, and no package converts CTranslate2 back to PyTorch
(CTranslate2's converters go the other way). The mapping onto
``transformers.WhisperForConditionalGeneration`` is done here, strictly: every Hugging Face
parameter is assigned exactly once from a CTranslate2 variable of exactly the expected
shape, every CTranslate2 variable is either used or a known metadata scalar, and any
deviation is a :class:`ModelError` naming both tensors and the file. Silent partial loads
(the usual ``strict=False`` failure) would otherwise leave random weights in the reference
that everything else is judged against.

Everything else is library code: transformers saves the imported model. An import is
cached by the digest of its source folder (:func:`import_cached`).

The CTranslate2 layout (faster-whisper converter) onto the Hugging Face names
(``model.`` prefix omitted; ``{enc,dec}`` = ``encoder``/``decoder``):

- ``encoder/conv{1,2}/{weight,bias}`` -> ``encoder.conv{1,2}.{weight,bias}``;
  ``{enc,dec}/position_encodings/encodings`` -> ``{enc,dec}.embed_positions.weight``.
- ``{enc,dec}/layer_N/self_attention/linear_0`` -> ``layers.N.self_attn.{q,k,v}_proj``
  (rows stacked q;k;v; the k rows of the bias must be zero, Whisper's key projection has
  no bias); ``.../linear_1`` -> ``self_attn.out_proj``; ``.../layer_norm`` ->
  ``self_attn_layer_norm``.
- ``decoder/layer_N/attention/linear_0`` -> ``encoder_attn.q_proj``; ``linear_1`` ->
  ``encoder_attn.{k,v}_proj`` (rows k;v, zero k bias); ``linear_2`` ->
  ``encoder_attn.out_proj``; ``layer_norm`` -> ``encoder_attn_layer_norm``.
- ``.../ffn/linear_0``, ``linear_1``, ``layer_norm`` -> ``fc1``, ``fc2``,
  ``final_layer_norm``; ``{enc,dec}/layer_norm`` -> ``{enc,dec}.layer_norm``.
- ``decoder/embeddings/weight`` -> ``decoder.embed_tokens.weight``; the alias
  ``decoder/projection/weight`` -> ``proj_out.weight``, tied to the embeddings.
- Scalars: ``{enc,dec}/num_heads`` give the head counts; ``decoder/activation`` must be
  GELU, ``pre_norm`` 1, ``alibi`` and ``start_from_zero_embedding`` 0;
  ``scale_embeddings`` sets ``scale_embedding``; the alignment scalars are informational.

Layer norms map ``gamma``/``beta`` to ``weight``/``bias``.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np

from verifylib.canonical import publish_dir, read_json, sha256_file, tree_digest, write_json
from verifylib.locks import (
    LOCKS_DIR,
    STAGING_PREFIX,
    make_owned_dir,
    produce_once,
    remove_owned_dir,
)
from verifylib.models.ct2 import WHISPER_SPEC, CT2Model, ModelError, read_ct2

MARKER = "verifylib-import.json"
"""Provenance file written into every imported Hugging Face folder."""


def log_nothing(_: str) -> None:
    """Discard a progress line (the default ``log`` of quiet callers).

    Parameters
    ----------
    _ : str
        The line.
    """
    return None


IMPORTER = "verifylib-ct2-whisper-1"
"""Version of the CTranslate2 -> Hugging Face mapping; a cached import made by another
version is redone, never reused."""


# CTranslate2 scalars with a fixed meaning for Whisper: name -> the only value HF Whisper
# can express (None: informational, any value accepted).
_FIXED_SCALARS: dict[str, int | None] = {
    "decoder/activation": 3,            # ActivationType::GELU (exact erf form)
    "decoder/pre_norm": 1,
    "decoder/alibi": 0,
    "decoder/start_from_zero_embedding": 0,
    "decoder/alignment_heads": None,    # CTranslate2's own alignment setting
    "decoder/alignment_layer": None,
}


_SCALE_EMBEDDINGS = "decoder/scale_embeddings"


_HEADS = {"encoder": "encoder/num_heads", "decoder": "decoder/num_heads"}


_FLOAT_DTYPES = ("float16", "float32", "bfloat16")


@dataclass(frozen=True)
class CT2Import:
    """Summary of one CTranslate2 -> Hugging Face import.

    Attributes
    ----------
    hf_dir : Path
        The folder written.
    config : dict
        The derived ``WhisperConfig`` fields (sizes and token ids).
    n_parameters : int
        Hugging Face parameters assigned (tied ones counted once).
    n_variables : int
        CTranslate2 variables in the file.
    ct2_header : dict
        ``binary_version``, ``spec_name``, ``spec_revision``, ``dtypes`` (counts per stored
        dtype) and ``aliases``.
    """

    hf_dir: Path
    config: dict
    n_parameters: int
    n_variables: int
    ct2_header: dict


@dataclass(frozen=True)
class _Assign:
    hf: str              # Hugging Face parameter name
    ct2: str             # CTranslate2 variable (or alias) name
    ct2_shape: tuple     # the exact shape the CTranslate2 variable must have
    rows: slice | None   # rows of a fused variable that belong to ``hf``


@dataclass(frozen=True)
class _ZeroCheck:
    ct2: str
    rows: slice
    why: str


def _layer_ids(ct2: CT2Model, side: str) -> list[int]:
    pat = re.compile(rf"^{side}/layer_(\d+)/")
    ids = sorted({int(m.group(1)) for n in ct2.variables if (m := pat.match(n))})
    if ids != list(range(len(ids))):
        raise ModelError(f"{ct2.path}: {side} layers are not numbered 0..N-1: {ids}")
    return ids


def _need(ct2: CT2Model, name: str, purpose: str) -> np.ndarray:
    try:
        return ct2.variables[ct2.resolve(name)]
    except KeyError:
        raise ModelError(f"{ct2.path}: CTranslate2 variable {name!r} is missing "
                         f"(needed for {purpose})") from None


def _derive_config(ct2: CT2Model, ids: Mapping[str, int]) -> dict:
    emb = _need(ct2, "decoder/embeddings/weight", "vocab_size and d_model")
    conv1 = _need(ct2, "encoder/conv1/weight", "num_mel_bins")
    enc_pos = _need(ct2, "encoder/position_encodings/encodings", "max_source_positions")
    dec_pos = _need(ct2, "decoder/position_encodings/encodings", "max_target_positions")
    enc_ffn = _need(ct2, "encoder/layer_0/ffn/linear_0/weight", "encoder_ffn_dim")
    dec_ffn = _need(ct2, "decoder/layer_0/ffn/linear_0/weight", "decoder_ffn_dim")
    for name, arr, rank in (("decoder/embeddings/weight", emb, 2),
                            ("encoder/conv1/weight", conv1, 3),
                            ("encoder/position_encodings/encodings", enc_pos, 2),
                            ("decoder/position_encodings/encodings", dec_pos, 2),
                            ("encoder/layer_0/ffn/linear_0/weight", enc_ffn, 2),
                            ("decoder/layer_0/ffn/linear_0/weight", dec_ffn, 2)):
        if arr.ndim != rank:
            raise ModelError(f"{ct2.path}: CTranslate2 variable {name!r} has shape {arr.shape}, "
                             f"expected rank {rank}")
    heads = {}
    for side, name in _HEADS.items():
        heads[side] = int(ct2.scalar(name))
    d_model = int(emb.shape[1])
    for side, h in heads.items():
        if h <= 0 or d_model % h:
            raise ModelError(f"{ct2.path}: {_HEADS[side]} = {h} does not divide d_model {d_model}")
    scale = int(ct2.scalar(_SCALE_EMBEDDINGS)) if _SCALE_EMBEDDINGS in ct2.variables else 0
    return {
        "vocab_size": int(emb.shape[0]),
        "d_model": d_model,
        "num_mel_bins": int(conv1.shape[1]),
        "encoder_layers": len(_layer_ids(ct2, "encoder")),
        "decoder_layers": len(_layer_ids(ct2, "decoder")),
        "encoder_attention_heads": heads["encoder"],
        "decoder_attention_heads": heads["decoder"],
        "encoder_ffn_dim": int(enc_ffn.shape[0]),
        "decoder_ffn_dim": int(dec_ffn.shape[0]),
        "max_source_positions": int(enc_pos.shape[0]),
        "max_target_positions": int(dec_pos.shape[0]),
        "activation_function": "gelu",
        "scale_embedding": bool(scale),
        "tie_word_embeddings": True,
        "bos_token_id": ids["sot"],
        "decoder_start_token_id": ids["sot"],
        "eos_token_id": ids["eot"],
        "pad_token_id": ids["eot"],
    }


def _plan(shapes: Mapping[str, tuple]) -> tuple[list[_Assign], list[_ZeroCheck]]:
    """Map every Hugging Face parameter (given by name -> shape) to its CTranslate2 source."""
    assigns: list[_Assign] = []
    zeros: list[_ZeroCheck] = []

    def direct(hf: str, ct2: str) -> None:
        assigns.append(_Assign(hf, ct2, tuple(shapes[hf]), None))

    def norm(hf: str, ct2: str) -> None:
        direct(f"{hf}.weight", f"{ct2}/gamma")
        direct(f"{hf}.bias", f"{ct2}/beta")

    def linear(hf: str, ct2: str) -> None:
        direct(f"{hf}.weight", f"{ct2}/weight")
        direct(f"{hf}.bias", f"{ct2}/bias")

    def fused(ct2: str, parts: list[str | None], proj: str) -> None:
        # ``parts`` lists the Hugging Face projections stacked along rows; None marks the
        # key projection's bias, which Whisper does not have and must be stored as zeros.
        d_out, d_in = shapes[f"{proj}.weight"]
        n = len(parts)
        for i, hf in enumerate(parts):
            rows = slice(i * d_out, (i + 1) * d_out)
            assigns.append(_Assign(f"{hf}.weight", f"{ct2}/weight", (n * d_out, d_in), rows))
            if f"{hf}.bias" in shapes:
                assigns.append(_Assign(f"{hf}.bias", f"{ct2}/bias", (n * d_out,), rows))
            else:
                zeros.append(_ZeroCheck(f"{ct2}/bias", rows, f"{hf} has no bias"))

    def attention(hf: str, ct2: str) -> None:
        fused(f"{ct2}/linear_0", [f"{hf}.q_proj", f"{hf}.k_proj", f"{hf}.v_proj"], f"{hf}.q_proj")
        linear(f"{hf}.out_proj", f"{ct2}/linear_1")

    def cross_attention(hf: str, ct2: str) -> None:
        linear(f"{hf}.q_proj", f"{ct2}/linear_0")
        fused(f"{ct2}/linear_1", [f"{hf}.k_proj", f"{hf}.v_proj"], f"{hf}.k_proj")
        linear(f"{hf}.out_proj", f"{ct2}/linear_2")

    n_enc = sum(1 for k in shapes if re.fullmatch(r"model\.encoder\.layers\.\d+\.fc1\.weight", k))
    n_dec = sum(1 for k in shapes if re.fullmatch(r"model\.decoder\.layers\.\d+\.fc1\.weight", k))

    linear("model.encoder.conv1", "encoder/conv1")
    linear("model.encoder.conv2", "encoder/conv2")
    direct("model.encoder.embed_positions.weight", "encoder/position_encodings/encodings")
    for i in range(n_enc):
        hf, c = f"model.encoder.layers.{i}", f"encoder/layer_{i}"
        attention(f"{hf}.self_attn", f"{c}/self_attention")
        norm(f"{hf}.self_attn_layer_norm", f"{c}/self_attention/layer_norm")
        linear(f"{hf}.fc1", f"{c}/ffn/linear_0")
        linear(f"{hf}.fc2", f"{c}/ffn/linear_1")
        norm(f"{hf}.final_layer_norm", f"{c}/ffn/layer_norm")
    norm("model.encoder.layer_norm", "encoder/layer_norm")

    direct("model.decoder.embed_tokens.weight", "decoder/embeddings/weight")
    direct("model.decoder.embed_positions.weight", "decoder/position_encodings/encodings")
    for i in range(n_dec):
        hf, c = f"model.decoder.layers.{i}", f"decoder/layer_{i}"
        attention(f"{hf}.self_attn", f"{c}/self_attention")
        norm(f"{hf}.self_attn_layer_norm", f"{c}/self_attention/layer_norm")
        cross_attention(f"{hf}.encoder_attn", f"{c}/attention")
        norm(f"{hf}.encoder_attn_layer_norm", f"{c}/attention/layer_norm")
        linear(f"{hf}.fc1", f"{c}/ffn/linear_0")
        linear(f"{hf}.fc2", f"{c}/ffn/linear_1")
        norm(f"{hf}.final_layer_norm", f"{c}/ffn/layer_norm")
    norm("model.decoder.layer_norm", "decoder/layer_norm")
    return assigns, zeros


def _state_dict(ct2: CT2Model, shapes: Mapping[str, tuple], tied: Mapping[str, str]):
    """Build the Hugging Face state dict from ``ct2`` under the strict rules."""
    import torch

    where = ct2.path
    assigns, zeros = _plan(shapes)
    planned: dict[str, _Assign] = {}
    for a in assigns:
        if a.hf in planned:
            raise ModelError(f"internal mapping error: {a.hf} assigned twice")
        planned[a.hf] = a
    wanted = set(shapes) - set(tied)
    missing = sorted(wanted - set(planned))
    if missing:
        raise ModelError(f"{where}: no CTranslate2 source for Hugging Face parameters {missing}")
    extra = sorted(set(planned) - wanted)
    if extra:
        raise ModelError(f"internal mapping error: planned parameters the model lacks: {extra}")

    used: set[str] = set()
    out: dict[str, Any] = {}
    for hf in sorted(wanted):
        a = planned[hf]
        try:
            real = ct2.resolve(a.ct2)
        except KeyError:
            raise ModelError(f"{where}: CTranslate2 variable {a.ct2!r} (for Hugging Face "
                             f"{hf!r}) is missing") from None
        arr = ct2.variables[real]
        dtype = ct2.dtypes[real]
        if dtype not in _FLOAT_DTYPES:
            raise ModelError(f"{where}: CTranslate2 variable {a.ct2!r} (for Hugging Face "
                             f"{hf!r}) is stored as {dtype}; quantized CTranslate2 models are "
                             "not supported")
        if tuple(arr.shape) != tuple(a.ct2_shape):
            raise ModelError(f"{where}: CTranslate2 variable {a.ct2!r} (for Hugging Face {hf!r}) "
                             f"has shape {tuple(arr.shape)}, expected {tuple(a.ct2_shape)}")
        part = arr if a.rows is None else arr[a.rows]
        assert tuple(part.shape) == tuple(shapes[hf]), (hf, part.shape, shapes[hf])
        out[hf] = torch.from_numpy(np.array(part, dtype=np.float32))
        used.add(real)

    for z in zeros:
        real = ct2.resolve(z.ct2)
        block = ct2.variables[real][z.rows]
        if np.any(block != 0):
            raise ModelError(f"{where}: CTranslate2 variable {z.ct2!r} rows {z.rows.start}:"
                             f"{z.rows.stop} are not zero ({z.why}); this mapping cannot "
                             "represent it")

    for hf_name, target in tied.items():
        if hf_name != "proj_out.weight" or target != "model.decoder.embed_tokens.weight":
            raise ModelError("internal mapping error: unexpected tied parameter "
                             f"{hf_name} -> {target}")
        proj = "decoder/projection/weight"
        try:
            real = ct2.resolve(proj)
        except KeyError:
            raise ModelError(f"{where}: CTranslate2 variable {proj!r} (for Hugging Face "
                             f"'proj_out.weight') is missing") from None
        emb = ct2.resolve("decoder/embeddings/weight")
        if real != emb and not np.array_equal(ct2.variables[real], ct2.variables[emb]):
            raise ModelError(f"{where}: CTranslate2 variable {proj!r} differs from "
                             f"'decoder/embeddings/weight'; Whisper ties 'proj_out.weight' to the "
                             "token embeddings, so an untied projection cannot be represented")
        used.add(real)

    for name, want in _FIXED_SCALARS.items():
        if name not in ct2.variables:
            continue
        used.add(name)
        if want is not None and int(ct2.scalar(name)) != want:
            raise ModelError(f"{where}: CTranslate2 variable {name!r} = {ct2.scalar(name)}, but "
                             f"Hugging Face Whisper needs {want}")
    used.update(n for n in (_SCALE_EMBEDDINGS, *_HEADS.values()) if n in ct2.variables)
    unused = sorted(set(ct2.variables) - used)
    if unused:
        raise ModelError(f"{where}: CTranslate2 variables with no place in Hugging Face Whisper "
                         f"(refusing to drop them): {unused}")
    return out


def read_vocabulary(folder: Path) -> list[str] | None:
    """Return the tokens a CTranslate2 model folder lists, in id order.

    Parameters
    ----------
    folder : Path
        The model folder; ``vocabulary.txt`` (one token per line) is read before
        ``vocabulary.json`` (a list of strings), as CTranslate2 does.

    Returns
    -------
    list of str or None
        The tokens, or None when the folder holds neither file.

    Raises
    ------
    ModelError
        ``vocabulary.json`` is not a list of strings.
    ValueError, UnicodeDecodeError
        A file is not UTF-8 text or JSON.
    """
    txt, js = folder / "vocabulary.txt", folder / "vocabulary.json"
    if txt.is_file():
        text = txt.read_text(encoding="utf-8")
        if text.endswith("\n"):
            text = text[:-1]
        return text.split("\n")
    if js.is_file():
        data = json.loads(js.read_text(encoding="utf-8"))
        if not isinstance(data, list) or not all(isinstance(t, str) for t in data):
            raise ModelError(f"{js}: expected a JSON list of token strings")
        return data
    return None


def _build_tokenizer(folder: Path, vocab_size: int):
    from transformers import WhisperTokenizerFast

    tok_file = folder / "tokenizer.json"
    if not tok_file.is_file():
        raise ModelError(f"{folder}: tokenizer.json is missing")
    tok = WhisperTokenizerFast(tokenizer_file=str(tok_file))
    vocabulary = read_vocabulary(folder)
    if vocabulary is not None:
        if len(vocabulary) != vocab_size:
            raise ModelError(f"{folder}: the vocabulary file lists {len(vocabulary)} tokens, the "
                             f"embeddings have {vocab_size} rows")
        # faster-whisper's tokenizer.json stops at <|notimestamps|>; the vocabulary file also
        # names the timestamp tokens, so the tokenizer covers every row of the embeddings.
        if len(tok) < vocab_size:
            tok.add_tokens(vocabulary[len(tok):])
        names = tok.convert_ids_to_tokens(list(range(vocab_size)))
        bad = [i for i, (a, b) in enumerate(zip(names, vocabulary)) if a != b]
        if bad:
            i = bad[0]
            raise ModelError(f"{folder}: tokenizer.json and the vocabulary file disagree on "
                             f"{len(bad)} ids (first: id {i}: {names[i]!r} vs {vocabulary[i]!r})")
    if len(tok) > vocab_size:
        raise ModelError(f"{folder}: the tokenizer has {len(tok)} tokens, more than the "
                         f"{vocab_size} rows of the embeddings")
    return tok


def _token_id(tok, token: str, folder: Path) -> int:
    i = tok.convert_tokens_to_ids(token)
    if not isinstance(i, int) or i < 0 or tok.convert_ids_to_tokens(i) != token:
        raise ModelError(f"{folder}: the tokenizer has no {token!r} token")
    return i


def _read_ct2_folder(ct2_dir: Path) -> tuple[CT2Model, dict, Path]:
    """Return the folder's Whisper ``model.bin``, its ``config.json`` and that file's path."""
    if not (ct2_dir / "model.bin").is_file():
        raise ModelError(f"{ct2_dir}: not a CTranslate2 model folder (no model.bin)")
    ct2 = read_ct2(ct2_dir / "model.bin")
    if ct2.spec_name != WHISPER_SPEC:
        raise ModelError(f"{ct2.path}: CTranslate2 spec {ct2.spec_name!r} is not a Whisper model "
                         f"(expected {WHISPER_SPEC!r})")
    cfg_path = ct2_dir / "config.json"
    try:
        ct2_config = json.loads(cfg_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ModelError(f"{ct2_dir}: config.json is missing (it holds the suppress "
                         "ids)") from None
    except json.JSONDecodeError as exc:
        raise ModelError(f"{cfg_path}: not JSON ({exc})") from None
    for key in ("suppress_ids", "suppress_ids_begin"):
        val = ct2_config.get(key)
        if not isinstance(val, list) or not all(isinstance(v, int) for v in val):
            raise ModelError(f"{cfg_path}: {key!r} must be a list of token ids")
    return ct2, ct2_config, cfg_path


def _mapped_model(ct2: CT2Model, fields: dict) -> tuple[Any, dict]:
    """Return the Hugging Face model with every parameter assigned, and its state dict."""
    import torch
    from transformers import WhisperConfig, WhisperForConditionalGeneration

    config = WhisperConfig(**fields)
    with torch.device("meta"):
        skeleton = WhisperForConditionalGeneration(config)
    shapes = {k: tuple(v.shape) for k, v in skeleton.state_dict().items()}
    tied = {"proj_out.weight": "model.decoder.embed_tokens.weight"}
    state = _state_dict(ct2, shapes, tied)
    skeleton.load_state_dict({**state,
                              "proj_out.weight": state["model.decoder.embed_tokens.weight"]},
                             strict=True, assign=True)
    skeleton.tie_weights()
    model = skeleton.eval()
    if model.proj_out.weight.data_ptr() != model.model.decoder.embed_tokens.weight.data_ptr():
        raise ModelError("internal mapping error: proj_out.weight is not tied to the embeddings")
    for name, p in model.state_dict().items():
        if p.device.type == "meta":
            raise ModelError(f"internal mapping error: {name} was left unassigned")
    return model, state


def _generation_config(tok, ct2_config: Mapping[str, Any], cfg_path: Path, ct2_dir: Path,
                       fields: Mapping[str, Any], ids: Mapping[str, int]):
    """Return the ``GenerationConfig``: special ids, suppress lists, languages and tasks."""
    from transformers import GenerationConfig

    multilingual = fields["vocab_size"] >= 51865
    gen = {
        "decoder_start_token_id": ids["sot"], "bos_token_id": ids["sot"],
        "eos_token_id": ids["eot"], "pad_token_id": ids["eot"],
        "no_timestamps_token_id": ids["no_timestamps"], "is_multilingual": multilingual,
        # Only here, not in config.json: transformers 5 warns about generation settings in
        # the model config and lets them conflict with the generation config.
        "suppress_tokens": list(ct2_config["suppress_ids"]),
        "begin_suppress_tokens": list(ct2_config["suppress_ids_begin"]),
        "max_length": fields["max_target_positions"], "max_initial_timestamp_index": 50,
    }
    prev = tok.convert_tokens_to_ids("<|startofprev|>")
    if isinstance(prev, int) and tok.convert_ids_to_tokens(prev) == "<|startofprev|>":
        gen["prev_sot_token_id"] = prev
    if isinstance(ct2_config.get("alignment_heads"), list):
        gen["alignment_heads"] = [list(h) for h in ct2_config["alignment_heads"]]
    if multilingual:
        lang_ids = ct2_config.get("lang_ids")
        if not isinstance(lang_ids, list):
            raise ModelError(f"{cfg_path}: a multilingual model needs 'lang_ids'")
        gen["lang_to_id"] = {tok.convert_ids_to_tokens(i): i for i in lang_ids}
        gen["task_to_id"] = {t: _token_id(tok, f"<|{t}|>", ct2_dir)
                             for t in ("transcribe", "translate")}
    return GenerationConfig(**gen)


def _save_folder(model, tok, fields: Mapping[str, Any], out_dir: Path) -> None:
    """Save the model, the feature extractor and the tokenizer into a new ``out_dir``."""
    from transformers import WhisperFeatureExtractor

    out_dir.mkdir(parents=True, exist_ok=False)
    model.save_pretrained(out_dir)
    # Saved one by one: transformers 5's processor would nest the feature extractor inside
    # processor_config.json, and older readers (and whisper.cpp's converters) look for
    # preprocessor_config.json.
    WhisperFeatureExtractor(feature_size=fields["num_mel_bins"]).save_pretrained(out_dir)
    tok.save_pretrained(out_dir)


def _ct2_header(ct2: CT2Model) -> dict:
    """Return the CTranslate2 header recorded with an import (dtype counts, aliases)."""
    dtypes: dict[str, int] = {}
    for d in ct2.dtypes.values():
        dtypes[d] = dtypes.get(d, 0) + 1
    return {"binary_version": ct2.version, "spec_name": ct2.spec_name,
            "spec_revision": ct2.revision, "dtypes": dtypes, "aliases": dict(ct2.aliases)}


def import_ct2(ct2_dir: str | os.PathLike, out_dir: str | os.PathLike, *,
               log: Callable[[str], None] = log_nothing) -> CT2Import:
    """Convert a CTranslate2 Whisper folder into a Hugging Face Whisper folder.

    Parameters
    ----------
    ct2_dir : path-like
        Folder with ``model.bin``, ``config.json`` (``suppress_ids``,
        ``suppress_ids_begin``, optional ``alignment_heads``, ``lang_ids``),
        ``tokenizer.json`` and optionally ``vocabulary.txt``/``vocabulary.json``.
    out_dir : path-like
        Folder to create (must not exist yet); callers publish it atomically.
    log : callable
        Receives one-line progress messages.

    Returns
    -------
    CT2Import
        What was written.

    Raises
    ------
    ModelError
        If the folder is not a CTranslate2 Whisper model, or any tensor is missing, has an
        unexpected shape or dtype, or has no place in the Hugging Face model.
    """
    ct2_dir, out_dir = Path(ct2_dir), Path(out_dir)
    ct2, ct2_config, cfg_path = _read_ct2_folder(ct2_dir)
    emb = _need(ct2, "decoder/embeddings/weight", "vocab_size")
    vocab_size = int(emb.shape[0]) if emb.ndim == 2 else -1
    tok = _build_tokenizer(ct2_dir, vocab_size)
    ids = {"eot": _token_id(tok, "<|endoftext|>", ct2_dir),
           "sot": _token_id(tok, "<|startoftranscript|>", ct2_dir),
           "no_timestamps": _token_id(tok, "<|notimestamps|>", ct2_dir)}
    fields = _derive_config(ct2, ids)
    log(f"CTranslate2 {ct2.spec_name} rev {ct2.revision}: d_model {fields['d_model']}, "
        f"{fields['encoder_layers']}+{fields['decoder_layers']} layers, "
        f"{fields['num_mel_bins']} mels, vocab {fields['vocab_size']}")
    model, state = _mapped_model(ct2, fields)
    model.generation_config = _generation_config(tok, ct2_config, cfg_path, ct2_dir, fields,
                                                 ids)
    _save_folder(model, tok, fields, out_dir)
    return CT2Import(hf_dir=out_dir, config=fields, n_parameters=len(state),
                     n_variables=len(ct2.variables), ct2_header=_ct2_header(ct2))


def files_digests(folder: Path) -> dict[str, str]:
    """Return every file of an import folder (the marker aside) -> its SHA-256.

    Parameters
    ----------
    folder : Path
        An import folder.

    Returns
    -------
    dict
        Run-relative POSIX path -> digest, sorted by path.
    """
    return {p.relative_to(folder).as_posix(): sha256_file(p)
            for p in sorted(folder.rglob("*")) if p.is_file() and p.name != MARKER}


def current_marker(folder: Path, importer: str, key: str, digest: str) -> dict | None:
    """Return an import folder's marker if it is complete, current and unmodified.

    Parameters
    ----------
    folder : Path
        A cached import.
    importer : str
        The importer the marker must name.
    key, digest : str
        The marker key holding the source's digest, and the digest it must hold.

    Returns
    -------
    dict or None
        The marker when it parses, names ``importer`` and ``digest``, and its ``files``
        digests match the folder's files; otherwise None.
    """
    marker = folder / MARKER
    if not marker.is_file():
        return None
    try:
        data = read_json(marker)
    except ValueError:
        return None
    if (not isinstance(data, dict) or data.get("importer") != importer
            or data.get(key) != digest):
        return None
    if data.get("files") != files_digests(folder):
        return None
    return data


def valid_import(folder: Path, source_digest: str) -> dict | None:
    """Return the marker of a complete, current, unmodified import in ``folder``, else None.

    Parameters
    ----------
    folder : Path
        A cached import (``models/<digest>``).
    source_digest : str
        Tree digest of the CTranslate2 folder the import must come from.

    Returns
    -------
    dict or None
        The marker's content when it parses, names this importer and ``source_digest``,
        and its ``files`` digests match the folder's files; otherwise None.
    """
    return current_marker(folder, IMPORTER, "source_digest", source_digest)


def import_cached(ct2_dir: Path, cache_dir: Path, origin: dict,
                   log: Callable[[str], None]) -> tuple[Path, str, dict, bool]:
    """Import a CTranslate2 folder into ``models/<digest>`` once, across processes.

    The import runs under the digest's lock (``cache_dir/locks/model-<digest>.lock``); a
    process that waited reuses the holder's import once its file digests check out.

    Parameters
    ----------
    ct2_dir : Path
        The CTranslate2 model folder.
    cache_dir : Path
        The shared cache (imports go to ``models/``, locks to ``locks/``).
    origin : dict
        Where the model came from, recorded in the marker (with the importer, the
        CTranslate2 header, the config and the parameter count added).
    log : callable
        Receives one progress line at a time.

    Returns
    -------
    hf_dir : Path
        The imported Hugging Face folder (``models/<digest>``).
    digest : str
        Tree digest of ``ct2_dir``.
    origin : dict
        The origin recorded in the marker.
    cached : bool
        True when an existing import was reused.
    """
    digest = tree_digest(ct2_dir)
    models = cache_dir / "models"
    final = models / digest
    reported: list[bool] = []

    def check() -> tuple[Path, str, dict, bool] | None:
        marker = valid_import(final, digest)
        if marker is not None:
            log(f"model {digest[:12]} from cache ({final})")
            return final, digest, marker["origin"], True
        if final.exists() and not reported:  # checked once before and once under the lock
            reported.append(True)
            log(f"cached model {final} is incomplete, stale or modified: importing again")
        return None

    def produce() -> tuple[Path, str, dict, bool]:
        models.mkdir(parents=True, exist_ok=True)
        staging = make_owned_dir(models, STAGING_PREFIX)
        try:
            result = import_ct2(ct2_dir, staging / "hf", log=log)
            full_origin = {**origin, "importer": IMPORTER, "ct2": result.ct2_header,
                           "config": result.config, "n_parameters": result.n_parameters}
            write_json(staging / "hf" / MARKER, {
                "importer": IMPORTER, "source_digest": digest, "origin": full_origin,
                "files": files_digests(staging / "hf")})
            # Under the lock, ``final`` exists here only if it failed its check.
            publish_dir(staging / "hf", final)
        finally:
            remove_owned_dir(staging)
        log(f"model {digest[:12]} imported ({final})")
        return final, digest, full_origin, False

    return produce_once(cache_dir / LOCKS_DIR, "model", digest, check=check, produce=produce,
                        what=f"model import {digest[:12]}", log=log)

