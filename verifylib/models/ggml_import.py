"""whisper.cpp ggml model files imported as Hugging Face Whisper folders.

Why this is hand-written: transformers has no ggml Whisper loader (its GGUF support covers
other architectures, and whisper.cpp v1.8.5 files are legacy ggml, not GGUF), and
whisper.cpp's ``models/ggml_to_pt.py`` writes an openai-whisper checkpoint from f16/f32
files only, without tokenizer or filters. A folder made here is what every consumer of a
Hugging Face folder already reads (:func:`verifylib.models.hf.load_hf`,
:func:`~verifylib.models.hf.load_hf_encoder`, :func:`~verifylib.models.hf.transcribe_hf`,
:func:`verifylib.models.ggml_writer.write_ggml_model`):

- ``config.json``: a ``WhisperConfig`` from the hparams (feed-forward 4 x d_model and tied
  output projection, as whisper.cpp assumes);
- ``model.safetensors``: every tensor dequantized to float32 exactly as ggml does
  (:mod:`verifylib.models.ggml_file`) under its Hugging Face name (the inverse of
  :func:`~verifylib.models.ggml_writer.ggml_name`; conv biases, stored ``[1, n]``, become
  ``[n]``). It is written tensor by tensor, the safetensors header computed first, because
  ``safetensors.save_file`` needs the whole state dict in memory (6.2 GB for large-v3);
- the tokenizer: the file holds token bytes only. Its ids are tiktoken-style ranks (a
  token's id is the rank of the merge that made it), so the merges are rebuilt from them
  (each token's merge is the last step of byte-pair encoding it with the lower ranks
  alone; on the registry's tiny.en this gives the original 50,000 merges exactly). The
  special and timestamp tokens are placed at the ids whisper.cpp gives them
  (``whisper_vocab`` in ``src/whisper.cpp``), under openai-whisper's names;
- ``generation_config.json``: those ids, and openai-whisper's suppression lists (the file
  carries none) computed on this vocabulary;
- ``preprocessor_config.json`` and the file's own filter bank (``mel_filters.npy``, which
  :func:`verifylib.models.hf.load_feature_extractor` applies), so the reference computes
  the log-mel features whisper.cpp computes.

A quantized file is imported too, as the float32 values ggml would compute with: the
result says ``lossy`` (its weights are not the original model's). Imports are cached by the
file's SHA-256 under ``<cache>/models/ggml/`` (:func:`import_ggml_cached`).
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from verifylib.canonical import publish_dir, sha256_file, write_json
from verifylib.errors import ParametersInvalid
from verifylib.locks import (
    LOCKS_DIR,
    STAGING_PREFIX,
    make_owned_dir,
    produce_once,
    remove_owned_dir,
)
from verifylib.models.ct2 import ModelError
from verifylib.models.ct2_import import MARKER, current_marker, files_digests, log_nothing
from verifylib.models.ggml_file import GgmlFileInvalid, GgmlModelFile, open_ggml
from verifylib.models.ggml_writer import ggml_name
from verifylib.models.hf import MEL_FILTERS_FILE

__all__ = ["GgmlImport", "WhisperCppTokens", "whisper_cpp_tokens", "import_ggml",
           "import_ggml_cached", "valid_ggml_import", "LANGUAGE_CODES", "IMPORTER"]

IMPORTER = "verifylib-ggml-whisper-1"
"""Version of the ggml -> Hugging Face import; a cached import by another version is redone."""

LANGUAGE_CODES = (
    "en", "zh", "de", "es", "ru", "ko", "fr", "ja", "pt", "tr", "pl", "ca", "nl", "ar", "sv",
    "it", "id", "hi", "fi", "vi", "he", "uk", "el", "ms", "cs", "ro", "da", "hu", "ta", "no",
    "th", "ur", "hr", "bg", "lt", "la", "mi", "ml", "cy", "sk", "te", "fa", "lv", "bn", "sr",
    "az", "sl", "kn", "et", "mk", "br", "eu", "is", "hy", "ne", "mn", "bs", "kk", "sq", "sw",
    "gl", "mr", "pa", "si", "km", "sn", "yo", "so", "af", "oc", "ka", "be", "tg", "sd", "gu",
    "am", "yi", "lo", "uz", "fo", "ht", "ps", "tk", "nn", "mt", "sa", "lb", "my", "bo", "tl",
    "mg", "as", "tt", "haw", "ln", "ha", "ba", "jw", "su", "yue")
"""whisper.cpp's language ids in order (``g_lang`` in the pinned ``src/whisper.cpp``): the
language token of id ``i`` is ``sot + 1 + i``."""

_ENGLISH_VOCAB = 51864

# openai-whisper's non-speech suppression rule (``Tokenizer.non_speech_tokens``), as data:
# a symbol is suppressed when it (or it after a space) is one token; each "miscellaneous"
# musical sign has its first token suppressed whatever its length.
_NON_SPEECH_SYMBOLS = tuple('"#()*+/:;<=>@[\\]^_`{|}~「」『』') + tuple(
    "<< >> <<< >>> -- --- -( -[ (' (\" (( )) ((( ))) [[ ]] {{ }} ♪♪ ♪♪♪".split())
_NON_SPEECH_SIGNS = tuple("♩♪♫♬♭♮♯")


@dataclass(frozen=True)
class WhisperCppTokens:
    """The special token ids whisper.cpp derives from ``n_vocab`` (``whisper_vocab``).

    Attributes
    ----------
    n_vocab : int
    multilingual : bool
        ``n_vocab >= 51865``.
    n_languages : int
        Language tokens after ``sot``.
    eot, sot, translate, transcribe, solm, prev, nosp, no_timestamps, beg : int
        End of text, start of transcript, the two tasks, start of LM, start of previous
        text, no speech, no timestamps, and the first timestamp (``<|0.00|>``).
    """

    n_vocab: int
    multilingual: bool
    n_languages: int
    eot: int
    sot: int
    translate: int
    transcribe: int
    solm: int
    prev: int
    nosp: int
    no_timestamps: int
    beg: int

    def names(self) -> dict[int, str]:
        """Return the name of every id from ``eot`` up, as openai-whisper spells it.

        Returns
        -------
        dict
            Id -> token text: ``<|endoftext|>``, ``<|startoftranscript|>``, ``<|en|>`` ...,
            ``<|translate|>``, ``<|transcribe|>``, ``<|startoflm|>``, ``<|startofprev|>``,
            ``<|nocaptions|>``, ``<|notimestamps|>``, then ``<|0.00|>`` in 0.02 s steps.
        """
        out = {self.eot: "<|endoftext|>", self.sot: "<|startoftranscript|>"}
        for i in range(self.n_languages):
            out[self.sot + 1 + i] = f"<|{LANGUAGE_CODES[i]}|>"
        out.update({self.translate: "<|translate|>", self.transcribe: "<|transcribe|>",
                    self.solm: "<|startoflm|>", self.prev: "<|startofprev|>",
                    self.nosp: "<|nocaptions|>", self.no_timestamps: "<|notimestamps|>"})
        for i in range(self.beg, self.n_vocab):
            out[i] = f"<|{(i - self.beg) * 0.02:.2f}|>"
        return out


def whisper_cpp_tokens(n_vocab: int) -> WhisperCppTokens:
    """Return the special token ids whisper.cpp v1.8.5 uses for a vocabulary size.

    Parameters
    ----------
    n_vocab : int
        The file's ``n_vocab`` hparam.

    Returns
    -------
    WhisperCppTokens

    Raises
    ------
    verifylib.errors.ParametersInvalid
        If ``n_vocab`` is below the English vocabulary (51864: the special ids would not
        exist) or names more languages than whisper.cpp knows.
    """
    if n_vocab < _ENGLISH_VOCAB:
        raise ParametersInvalid(f"n_vocab {n_vocab} is below whisper.cpp's English vocabulary "
                                f"({_ENGLISH_VOCAB}); its special token ids would not exist")
    multi = n_vocab >= _ENGLISH_VOCAB + 1
    n_lang = n_vocab - 51765 - (1 if multi else 0)
    if n_lang > len(LANGUAGE_CODES):
        raise ParametersInvalid(f"n_vocab {n_vocab} implies {n_lang} languages; whisper.cpp "
                                f"knows {len(LANGUAGE_CODES)}")
    shift = 1 if multi else 0
    dt = n_lang - 98 if multi else 0
    return WhisperCppTokens(
        n_vocab=n_vocab, multilingual=multi, n_languages=n_lang, eot=50256 + shift,
        sot=50257 + shift, translate=50357 + dt, transcribe=50358 + dt, solm=50359 + dt,
        prev=50360 + dt, nosp=50361 + dt, no_timestamps=50362 + dt, beg=50363 + dt)


@dataclass(frozen=True)
class GgmlImport:
    """One ggml -> Hugging Face import.

    Attributes
    ----------
    hf_dir : Path
        The Hugging Face folder.
    source : Path
        The ggml file imported.
    source_sha256 : str
        Its SHA-256.
    ftype : int
        Its file type (``enum ggml_ftype``).
    ftype_name : str
        ``"f16"``, ``"q5_0"`` ...
    lossy : bool
        True for a quantized source: the weights are ggml's dequantized values, not the
        original model's.
    hparams : dict
        The file's eleven hparams.
    multilingual : bool
        Whether the model takes language and task tokens (whisper.cpp's rule).
    n_parameters : int
        Hugging Face tensors written (the tied output projection not counted).
    cached : bool
        True when an earlier import was reused.
    """

    hf_dir: Path
    source: Path
    source_sha256: str
    ftype: int
    ftype_name: str
    lossy: bool
    hparams: dict
    multilingual: bool
    n_parameters: int
    cached: bool

    def origin(self) -> dict:
        """Return the provenance a :class:`~verifylib.models.intake.ModelInfo` records.

        Returns
        -------
        dict
            ``kind``, ``path``, ``sha256``, ``ftype``, ``lossy``, ``hparams``, ``importer``.
        """
        return {"kind": "ggml", "path": str(self.source), "sha256": self.source_sha256,
                "ftype": self.ftype_name, "lossy": self.lossy, "hparams": dict(self.hparams),
                "importer": IMPORTER}


# ----------------------------------------------------------------------------- tokenizer

def _bpe_merges(tokens: list[bytes]) -> list[tuple[bytes, bytes]]:
    """Rebuild the merges of a rank-ordered byte-level BPE vocabulary.

    A token of rank ``r`` was made by one merge of two tokens of lower rank; where several
    splits qualify, the merge is the last step of encoding the token's bytes with the ranks
    below ``r`` (the lowest-ranked adjacent pair merged first, as tiktoken does).
    """
    rank = {t: i for i, t in enumerate(tokens)}
    merges = []
    for r, tok in enumerate(tokens):
        if len(tok) < 2:
            continue
        cands = [(tok[:k], tok[k:]) for k in range(1, len(tok))
                 if rank.get(tok[:k], r) < r and rank.get(tok[k:], r) < r]
        if len(cands) <= 1:
            merges.extend(cands)
            continue
        parts = [tok[i:i + 1] for i in range(len(tok))]
        while len(parts) > 2:
            best = None
            for i in range(len(parts) - 1):
                q = rank.get(parts[i] + parts[i + 1])
                if q is not None and q < r and (best is None or q < best[0]):
                    best = (q, i)
            if best is None:
                break
            i = best[1]
            parts[i:i + 2] = [parts[i] + parts[i + 1]]
        if len(parts) == 2:
            merges.append((parts[0], parts[1]))
    return merges


def _build_tokenizer(gf: GgmlModelFile, ids: WhisperCppTokens):
    from tokenizers import AddedToken
    from transformers import WhisperTokenizer
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    enc = bytes_to_unicode()

    def text(b: bytes) -> str:
        return "".join(enc[x] for x in b)

    n_text = min(len(gf.vocab), ids.eot)
    regular = list(gf.vocab[:n_text])
    first: dict[bytes, int] = {}
    for i, tok in enumerate(regular):
        if tok in first:
            raise GgmlFileInvalid(gf.path, f"tokens {first[tok]} and {i} hold the same bytes "
                                  f"{tok!r}; a tokenizer cannot tell them apart", key="vocab")
        first[tok] = i
    missing = [b for b in range(256) if bytes([b]) not in first]
    if missing:
        raise GgmlFileInvalid(gf.path, f"the vocabulary lacks {len(missing)} single-byte tokens "
                              f"(first: {bytes([missing[0]])!r}); it is not byte-level BPE",
                              key="vocab")
    names = {i: f"[_extra_token_{i}]" for i in range(n_text, ids.eot)}  # whisper.cpp's
    names.update(ids.names())
    clash = sorted(set(names.values()) & {text(t) for t in regular})
    if clash:
        raise GgmlFileInvalid(gf.path, f"a regular token is spelt like the special token "
                              f"{clash[0]!r}", key="vocab")
    # Entries stored at special ids (a file may hold "<|endoftext|>" at eot) stay in the
    # vocabulary, as in openai-whisper's tokenizers, when they spell that special token:
    # then the folder's tokenizer gives a writer back exactly the file's vocabulary.
    n_regular = n_text
    while n_regular < len(gf.vocab) and text(gf.vocab[n_regular]) == names[n_regular]:
        n_regular += 1

    vocab = {text(t): i for i, t in enumerate(gf.vocab[:n_regular])}
    # Ids the file leaves unnamed below eot are plain vocabulary entries (no merge makes
    # them), so the vocabulary reaches eot: the tokenizer's constructor adds
    # <|endoftext|> at the first free id.
    vocab.update({names[i]: i for i in range(n_text, ids.eot)})
    merges = [(text(a), text(b)) for a, b in _bpe_merges(regular)]
    tok = WhisperTokenizer(vocab=vocab, merges=merges)
    # Added in id order, so each gets the id whisper.cpp gives it (one already in the
    # vocabulary keeps its id); timestamps are plain added tokens, as in openai-whisper's
    # Hugging Face tokenizers.
    specials = [AddedToken(names[i], special=True, normalized=False)
                for i in range(max(n_text, ids.eot), min(ids.beg, ids.n_vocab))]
    stamps = [AddedToken(names[i], special=False, normalized=True)
              for i in range(ids.beg, ids.n_vocab)]
    tok.add_tokens(specials, special_tokens=True)
    tok.add_tokens(stamps)
    got = tok.convert_ids_to_tokens(list(range(n_text, ids.n_vocab)))
    want = [names[i] for i in range(n_text, ids.n_vocab)]
    if got != want:
        bad = next(i for i, (a, b) in enumerate(zip(got, want)) if a != b)
        raise ModelError(f"internal tokenizer error: id {n_text + bad} is {got[bad]!r}, "
                         f"expected {want[bad]!r}")
    return tok


def _suppress_lists(tok, ids: WhisperCppTokens) -> tuple[list[int], list[int]]:
    def encode(s: str) -> list[int]:
        return tok.encode(s, add_special_tokens=False)

    found = {encode(" -")[0], encode(" '")[0]}
    for sym in _NON_SPEECH_SYMBOLS + _NON_SPEECH_SIGNS:
        for variant in (sym, " " + sym):
            toks = encode(variant)
            if len(toks) == 1 or sym in _NON_SPEECH_SIGNS:
                found.add(toks[0])
    found.update({ids.translate, ids.transcribe, ids.sot, ids.prev, ids.solm, ids.nosp})
    return sorted(found), [encode(" ")[0], ids.eot]


# ----------------------------------------------------------------------------- weights

class _Hashing:
    def __init__(self, fh):
        self.fh, self.h = fh, hashlib.sha256()

    def write(self, data) -> None:
        self.fh.write(data)
        self.h.update(data)


def _weight_plan(gf: GgmlModelFile, config) -> list[tuple[str, str, tuple[int, ...]]]:
    """(Hugging Face name, ggml name, Hugging Face shape) for every stored parameter."""
    import torch
    from transformers import WhisperForConditionalGeneration

    with torch.device("meta"):
        skeleton = WhisperForConditionalGeneration(config)
    plan = []
    used: dict[str, str] = {}
    for hf, param in skeleton.state_dict().items():
        g = ggml_name(hf)
        if g is None:       # proj_out.weight: tied to the token embedding, as in whisper.cpp
            continue
        if g not in gf.tensors or g in used:
            raise ModelError(f"internal mapping error: {hf} -> {g!r} "
                             f"({'used twice' if g in used else 'not in the file'})")
        used[g] = hf
        shape = tuple(param.shape)
        stored = gf.tensors[g]
        if stored.n_elements != int(np.prod(shape)) or (
                stored.shape != shape and g not in ("encoder.conv1.bias", "encoder.conv2.bias")):
            raise ModelError(f"internal mapping error: {g} has shape {stored.shape}, "
                             f"{hf} needs {shape}")
        plan.append((hf, g, shape))
    unused = [g for g in gf.tensors if g not in used]
    if unused:
        raise ModelError(f"internal mapping error: ggml tensors without a Hugging Face "
                         f"parameter: {unused}")
    return plan


def _write_safetensors(gf: GgmlModelFile, plan, out: Path) -> str:
    """Write the plan's tensors as float32 safetensors, one at a time; return the SHA-256."""
    header: dict = {"__metadata__": {"format": "pt"}}
    pos = 0
    for hf, _, shape in plan:
        n = 4 * int(np.prod(shape))
        header[hf] = {"dtype": "F32", "shape": list(shape), "data_offsets": [pos, pos + n]}
        pos += n
    raw = json.dumps(header, separators=(",", ":")).encode("utf-8")
    raw += b" " * (-len(raw) % 8)   # the format pads the header to 8 bytes
    with open(out, "wb") as fh:
        w = _Hashing(fh)
        w.write(struct.pack("<Q", len(raw)))
        w.write(raw)
        for hf, g, shape in plan:
            arr = gf.tensor(g)
            w.write(memoryview(arr.reshape(shape)).cast("B"))
            del arr
        fh.flush()
        os.fsync(fh.fileno())
    return w.h.hexdigest()


# ----------------------------------------------------------------------------- import

def import_ggml(path: str | os.PathLike, out_dir: str | os.PathLike, *,
                log: Callable[[str], None] = log_nothing) -> GgmlImport:
    """Convert a whisper.cpp ggml model file into a Hugging Face Whisper folder.

    Parameters
    ----------
    path : path-like
        The ggml file (f32, f16, q4_0, q4_1, q5_0, q5_1 or q8_0).
    out_dir : path-like
        Folder to create (must not exist yet); callers publish it atomically.
    log : callable
        Receives one-line progress messages.

    Returns
    -------
    GgmlImport
        What was written (``cached`` False).

    Raises
    ------
    GgmlFileInvalid
        If the file is not a valid whisper.cpp model
        (:func:`~verifylib.models.ggml_file.open_ggml`), or its vocabulary cannot make a
        byte-level BPE tokenizer (repeated or missing byte tokens, a regular token spelt
        like a special one).
    verifylib.errors.ParametersInvalid
        If ``n_vocab`` gives no whisper.cpp special tokens (:func:`whisper_cpp_tokens`).
    """
    from transformers import GenerationConfig, WhisperConfig, WhisperFeatureExtractor

    path, out_dir = Path(path), Path(out_dir)
    with open_ggml(path) as gf:
        hp = dict(gf.hparams)
        ids = whisper_cpp_tokens(hp["n_vocab"])
        log(f"ggml {gf.ftype_name}: d_model {hp['n_audio_state']}, {hp['n_audio_layer']}+"
            f"{hp['n_text_layer']} layers, {hp['n_mels']} mels, vocab {hp['n_vocab']}"
            f"{' (multilingual)' if ids.multilingual else ''}")
        tok = _build_tokenizer(gf, ids)
        suppress, begin_suppress = _suppress_lists(tok, ids)
        d = hp["n_audio_state"]
        config = WhisperConfig(
            vocab_size=hp["n_vocab"], d_model=d, num_mel_bins=hp["n_mels"],
            encoder_layers=hp["n_audio_layer"], decoder_layers=hp["n_text_layer"],
            encoder_attention_heads=hp["n_audio_head"],
            decoder_attention_heads=hp["n_text_head"],
            encoder_ffn_dim=4 * d, decoder_ffn_dim=4 * d,
            max_source_positions=hp["n_audio_ctx"], max_target_positions=hp["n_text_ctx"],
            activation_function="gelu", scale_embedding=False, tie_word_embeddings=True,
            bos_token_id=ids.sot, decoder_start_token_id=ids.sot, eos_token_id=ids.eot,
            pad_token_id=ids.eot, begin_suppress_tokens=begin_suppress)
        gen = {"decoder_start_token_id": ids.sot, "bos_token_id": ids.sot,
               "eos_token_id": ids.eot, "pad_token_id": ids.eot,
               "no_timestamps_token_id": ids.no_timestamps, "prev_sot_token_id": ids.prev,
               "is_multilingual": ids.multilingual, "suppress_tokens": suppress,
               "begin_suppress_tokens": begin_suppress, "max_length": hp["n_text_ctx"],
               "max_initial_timestamp_index": 50}
        if ids.multilingual:
            gen["lang_to_id"] = {f"<|{LANGUAGE_CODES[i]}|>": ids.sot + 1 + i
                                 for i in range(ids.n_languages)}
            gen["task_to_id"] = {"translate": ids.translate, "transcribe": ids.transcribe}
        plan = _weight_plan(gf, config)

        out_dir.mkdir(parents=True, exist_ok=False)
        config.architectures = ["WhisperForConditionalGeneration"]
        config.save_pretrained(out_dir)
        GenerationConfig(**gen).save_pretrained(out_dir)
        WhisperFeatureExtractor(feature_size=hp["n_mels"]).save_pretrained(out_dir)
        np.save(out_dir / MEL_FILTERS_FILE, np.ascontiguousarray(gf.mel_filters),
                allow_pickle=False)
        tok.save_pretrained(out_dir)
        _write_safetensors(gf, plan, out_dir / "model.safetensors")
        # The folder is usually a staging one the caller renames: its name is not news.
        log(f"imported {len(plan)} tensors (Hugging Face layout)")
        return GgmlImport(hf_dir=out_dir, source=path, source_sha256=gf.sha256,
                          ftype=gf.ftype, ftype_name=gf.ftype_name, lossy=gf.lossy,
                          hparams=hp, multilingual=ids.multilingual, n_parameters=len(plan),
                          cached=False)


def valid_ggml_import(folder: Path, source_sha256: str) -> dict | None:
    """Return the marker of a complete, current, unmodified ggml import, else None.

    Parameters
    ----------
    folder : Path
        A cached import (``models/ggml/<sha256>``).
    source_sha256 : str
        SHA-256 of the ggml file the import must come from.

    Returns
    -------
    dict or None
        The marker when it parses, names this importer and ``source_sha256``, and its
        ``files`` digests match the folder's files; otherwise None.
    """
    data = current_marker(folder, IMPORTER, "source_sha256", source_sha256)
    return data if data is not None and isinstance(data.get("result"), dict) else None


def _reused_import(marker: dict, final: Path, path: Path, digest: str) -> GgmlImport:
    """Return the cached import at ``final`` as its marker records it."""
    r = marker["result"]
    return GgmlImport(hf_dir=final, source=path, source_sha256=digest, ftype=r["ftype"],
                      ftype_name=r["ftype_name"], lossy=r["lossy"], hparams=r["hparams"],
                      multilingual=r["multilingual"], n_parameters=r["n_parameters"],
                      cached=True)


def _import_into_cache(path: Path, final: Path, digest: str,
                       log: Callable[[str], None]) -> GgmlImport:
    """Import ``path`` into a staging folder beside ``final``, mark it, rename it into place.

    Raises
    ------
    ModelError
        If the file's SHA-256 is no longer ``digest`` once imported.
    """
    final.parent.mkdir(parents=True, exist_ok=True)
    # Owned, so one left by a killed import is swept once its owner is provably gone.
    staging = make_owned_dir(final.parent, STAGING_PREFIX)
    try:
        result = import_ggml(path, staging / "hf", log=log)
        if result.source_sha256 != digest:
            raise ModelError(f"{path} changed while it was imported (SHA-256 "
                             f"{digest[:12]} before, {result.source_sha256[:12]} after)")
        write_json(staging / "hf" / MARKER, {
            "importer": IMPORTER, "source_sha256": digest,
            "origin": {**result.origin(), "path": str(path)},
            "result": {"ftype": result.ftype, "ftype_name": result.ftype_name,
                       "lossy": result.lossy, "hparams": result.hparams,
                       "multilingual": result.multilingual,
                       "n_parameters": result.n_parameters},
            "files": files_digests(staging / "hf")})
        publish_dir(staging / "hf", final)
    finally:
        remove_owned_dir(staging)
    log(f"ggml model {digest[:12]} imported ({final})")
    return GgmlImport(hf_dir=final, source=path, source_sha256=digest,
                      ftype=result.ftype, ftype_name=result.ftype_name,
                      lossy=result.lossy, hparams=result.hparams,
                      multilingual=result.multilingual,
                      n_parameters=result.n_parameters, cached=False)


def import_ggml_cached(path: str | os.PathLike, cache_dir: str | os.PathLike,
                       log: Callable[[str], None] = log_nothing) -> GgmlImport:
    """Import a ggml file into ``<cache>/models/ggml/<sha256>`` once, across processes.

    The import runs under the file digest's lock (``locks/model-ggml-<sha256>.lock``),
    into a staging folder renamed into place; a cached import is reused only when its
    marker names this importer and the file's digest and every file still hashes to it.

    Parameters
    ----------
    path : path-like
        The ggml file.
    cache_dir : path-like
        The shared cache.
    log : callable
        Receives one progress line at a time.

    Returns
    -------
    GgmlImport
        The cached folder (``cached`` True when reused).

    Raises
    ------
    GgmlFileInvalid
        See :func:`import_ggml`.
    ModelError
        If the file changed while it was imported.
    """
    path, cache_dir = Path(path), Path(cache_dir)
    try:
        digest = sha256_file(path)
    except OSError as exc:
        raise GgmlFileInvalid(path, f"cannot be read ({exc.strerror or exc})") from None
    final = cache_dir / "models" / "ggml" / digest
    reported: list[bool] = []

    def check() -> GgmlImport | None:
        marker = valid_ggml_import(final, digest)
        if marker is not None:
            log(f"ggml model {digest[:12]} from cache ({final})")
            return _reused_import(marker, final, path, digest)
        if final.exists() and not reported:
            reported.append(True)
            log(f"cached ggml import {final} is incomplete, stale or modified: importing again")
        return None

    def produce() -> GgmlImport:
        return _import_into_cache(path, final, digest, log)

    return produce_once(cache_dir / LOCKS_DIR, "model-ggml", digest, check=check,
                        produce=produce, what=f"ggml model import {digest[:12]}", log=log)
