"""The files a parameter file names, checked before any work.

Each check reads only what it must (a header, a folder's shape, a tokenizer's size) and
refuses with one line naming the parameter file and the key: the model's vocabulary and
languages against what whisper.cpp can decode, every fixture's audio header, the ggml file,
the encoder's folder, and the leftovers of an earlier run where a source is expected.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    pass

from verifylib.errors import ParametersInvalid
from verifylib.runtime.contracts import GGML_BACKENDS

ENCODER_SUFFIXES = (".mlpackage", ".mlmodelc", ".mlmodelc.zip")
"""What an ``encoder.path`` may end in: an ML package, a compiled Core ML model, or a
compiled model as upstream ships it, zipped."""


def vocabulary_size(model: dict, base_dir: Path) -> int | None:
    """Return the model's vocabulary size where it is readable before any work, else None."""
    kind = model["kind"]
    path = base_dir / Path(model.get("path", "")).expanduser()
    if kind == "ggml":
        from verifylib.models.ggml_file import open_ggml
        with open_ggml(path) as f:
            return int(f.hparams["n_vocab"])
    if kind == "hf-dir" and (path / "config.json").is_file():
        try:
            size = json.loads((path / "config.json").read_text(encoding="utf-8"))["vocab_size"]
        except (ValueError, KeyError, TypeError, UnicodeDecodeError):
            return None  # the intake names what is wrong with the folder
        return size if isinstance(size, int) else None
    if kind == "ct2-dir":
        from verifylib.models.ct2 import ModelError
        from verifylib.models.ct2_import import read_vocabulary
        try:
            vocabulary = read_vocabulary(path)
        except (ModelError, ValueError, UnicodeDecodeError, OSError):
            return None  # the intake names what is wrong with the folder
        return None if vocabulary is None else len(vocabulary)
    return None  # a registry or hub model: checked when it is obtained


def check_vocabulary(origin: str, model: dict, base_dir: Path) -> None:
    """Refuse a vocabulary whisper.cpp cannot decode with, before any work.

    whisper.cpp has no list of special tokens: it derives their ids from ``n_vocab``
    (51864 English-only, 51865 multilingual, 51866 from large-v3), so a fine-tune whose
    tokenizer gained tokens would be decoded with the wrong special ids, and one whose
    tokenizer lists more tokens than its embedding has could not be written at all.
    """
    if model["kind"] not in ("hf-dir", "ct2-dir"):
        return  # a ggml file is checked when opened; a registry or hub model when obtained
    size = vocabulary_size(model, base_dir)
    if size is None:
        return
    from verifylib.models.ggml_import import whisper_cpp_tokens

    try:
        whisper_cpp_tokens(size)
    except ParametersInvalid as exc:
        raise ParametersInvalid(
            f"{origin}: key model.path: a vocabulary of {size} tokens ({exc}): whisper.cpp "
            "derives its special tokens from the vocabulary size and knows 51864, 51865 and "
            "51866, so a tokenizer with added tokens cannot be decoded by it") from None
    if model["kind"] == "hf-dir":
        listed = tokenizer_size(base_dir / Path(model.get("path", "")).expanduser())
        if listed is not None and listed > size:
            raise ParametersInvalid(
                f"{origin}: key model.path: tokenizer.json lists {listed} tokens, the model's "
                f"vocab_size is {size}: the added tokens have no embedding, and whisper.cpp "
                "could not decode them")


def tokenizer_size(folder: Path) -> int | None:
    """Return one more than the highest id a folder's ``tokenizer.json`` lists, else None."""
    path = folder / "tokenizer.json"
    if not path.is_file():
        return None
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        ids = [int(i) for i in (doc.get("model") or {}).get("vocab", {}).values()]
        ids += [int(t["id"]) for t in doc.get("added_tokens") or []]
    except (ValueError, TypeError, KeyError, AttributeError, UnicodeDecodeError):
        return None  # the intake names what is wrong with the folder
    return max(ids) + 1 if ids else None


def check_languages(origin: str, p: dict, base_dir: Path) -> None:
    """Refuse a language Whisper does not know, or one the model has no token for.

    Each fixture is decoded and scored in its own ``language`` (default ``model.language``).
    Whisper's languages and which of them a vocabulary holds are whisper.cpp's rules
    (:func:`verifylib.models.ggml_import.whisper_cpp_tokens`): an English-only vocabulary
    holds none but English, and languages were appended over time (yue with large-v3).
    """
    wanted = [("model.language", p["model"].get("language") or "en")]
    wanted += [(f"fixtures[{i}].language", fx["language"])
               for i, fx in enumerate(p["fixtures"]) if "language" in fx]
    if all(lang == "en" for _, lang in wanted):
        return
    from verifylib.models.ggml_import import LANGUAGE_CODES, whisper_cpp_tokens

    for key, lang in wanted:
        if lang not in LANGUAGE_CODES:
            raise ParametersInvalid(f"{origin}: key {key}: {lang!r} is not a language Whisper "
                                    "decodes (e.g. de, fr, zh)")
    size = vocabulary_size(p["model"], base_dir)
    if size is None:
        return
    try:
        tokens = whisper_cpp_tokens(size)
    except ParametersInvalid:  # below even the English vocabulary: the intake refuses it
        tokens = None
    if tokens is None or not tokens.multilingual:
        key, lang = next((k, v) for k, v in wanted if v != "en")
        raise ParametersInvalid(f"{origin}: key {key}: {lang!r}, but the model is English-only "
                                f"(a vocabulary of {size} tokens; multilingual Whisper models "
                                "have 51865 or more): it decodes English alone")
    known = LANGUAGE_CODES[:tokens.n_languages]
    for key, lang in wanted:
        if lang not in known:
            raise ParametersInvalid(f"{origin}: key {key}: {lang!r} has no language token "
                                    f"in this model (a vocabulary of {size} tokens holds "
                                    f"the first {len(known)} of Whisper's languages)")


def check_audio(origin: str, i: int, path: Path) -> None:
    """Refuse, before any work, a fixture neither leg could transcribe as given."""
    from verifylib.runtime.audio_intake import probe

    try:
        probe(path)
    except ParametersInvalid as exc:  # AudioError: one line naming the file
        raise ParametersInvalid(f"{origin}: key fixtures[{i}].path: {exc}") from None


def check_backend(origin: str, backend: str) -> None:
    """Refuse a ``runtime.ggml_backend`` this host cannot build: Metal exists on macOS only.

    Off macOS ggml's CMake cannot find the Metal framework, so a ``metal`` build would
    fail in stage 01 after the source was fetched; refused here, before any work.
    """
    if backend == GGML_BACKENDS[0]:
        return
    from verifylib.evidence.gates import Capability
    from verifylib.runtime.capabilities import detect
    host = detect()
    if not host.has(Capability.MACOS):
        raise ParametersInvalid(f"{origin}: key runtime.ggml_backend: {backend!r} needs macOS "
                                f"(this host: {host.system} {host.machine}); use "
                                f"{GGML_BACKENDS[0]!r}, the default")


def check_ct2_model(origin: str, folder: Path) -> None:
    """Refuse a ``ct2-dir`` whose ``model.bin`` is not a readable CTranslate2 Whisper model.

    Its header, variable table and aliases are walked with each variable's extent checked
    against the file's length (:func:`verifylib.models.ct2.read_ct2_header`), the weights
    unread: a truncated file, an impossible variable count, dims whose bytes overflow or
    pass the end, a spec that is not Whisper's, are refused here, before any work.
    """
    from verifylib.models.ct2 import WHISPER_SPEC, ModelError, read_ct2_header
    path = folder / "model.bin"
    if path.is_symlink() or not path.is_file():
        raise ParametersInvalid(f"{origin}: key model.path: {path} is not a regular file "
                                "(a CTranslate2 model folder holds model.bin)")
    try:
        head = read_ct2_header(path)
    except ModelError as exc:
        raise ParametersInvalid(f"{origin}: key model.path: {exc}") from None
    if head.spec_name != WHISPER_SPEC:
        raise ParametersInvalid(f"{origin}: key model.path: {path}: CTranslate2 spec "
                                f"{head.spec_name[:80]!r} is not a Whisper model (expected "
                                f"{WHISPER_SPEC!r})")


def check_ggml_file(origin: str, path: Path) -> None:
    """Refuse a ``model.path`` that is not a readable whisper.cpp model file.

    The whole structure is walked (header, filters, vocabulary, every tensor header and its
    extent), not the tensor data: a bad magic, a truncated tensor or an unsupported tensor
    type is refused here, before any work, with the reader's own words.
    """
    if not path.exists():
        raise ParametersInvalid(f"{origin}: key model.path: {path} does not exist")
    if not path.is_file():
        raise ParametersInvalid(f"{origin}: key model.path: {path} is not a file (a "
                                "whisper.cpp ggml-*.bin model file is expected)")
    if path.suffix != ".bin":
        raise ParametersInvalid(f"{origin}: key model.path: {path.name} does not end in .bin "
                                "(a whisper.cpp ggml-*.bin model file is expected)")
    from verifylib.models.ggml_file import open_ggml
    try:
        open_ggml(path)
    except ParametersInvalid as exc:
        raise ParametersInvalid(f"{origin}: key model.path: {exc}") from None


def check_encoder(origin: str, path: Path) -> None:
    """Refuse an ``encoder.path`` that is not an ML package, a compiled model or its zip.

    Only the folder's shape is checked here (the suffix and the files Core ML needs), or a
    ``….mlmodelc.zip``'s central directory (:func:`verifylib.models.encoder_zip.check_archive`:
    safe names, regular entries, one ``.mlmodelc`` folder, the size and count limits); what
    the encoder says about itself is read by stage 02, before anything is measured.
    """
    key = f"{origin}: key encoder.path"
    if not path.exists():
        raise ParametersInvalid(f"{key}: {path} does not exist")
    if not path.name.endswith(ENCODER_SUFFIXES):
        raise ParametersInvalid(f"{key}: {path.name} ends in none of "
                                f"{', '.join(ENCODER_SUFFIXES)} (a Core ML encoder such as "
                                "ggml-tiny.en-encoder.mlmodelc, or its .zip, is expected)")
    if path.name.endswith(".zip"):
        from verifylib.models.encoder_zip import check_archive
        if not path.is_file():
            raise ParametersInvalid(f"{key}: {path} is not a file (a downloaded "
                                    "….mlmodelc.zip is expected)")
        try:
            check_archive(path)
        except ParametersInvalid as exc:  # EncoderInvalid: names the archive and the entry
            raise ParametersInvalid(f"{key}: {exc}") from None
        return
    if not path.is_dir():
        raise ParametersInvalid(f"{key}: {path} is a file; a Core ML "
                                f"{path.suffix} is a folder")
    if path.suffix == ".mlpackage":
        needed = ("Manifest.json", "Data/com.apple.CoreML/model.mlmodel")
        what = "an ML package"
    else:
        needed = ("metadata.json", "coremldata.bin")
        what = "a compiled Core ML model"
    missing = [n for n in needed if not (path / n).is_file()]
    if missing:
        raise ParametersInvalid(f"{key}: {path} is not {what} (no {', '.join(missing)})")
    refuse_litter(key, path, "the encoder's tree digest, which every stage checks")


def refuse_litter(key: str, folder: Path, identity: str) -> None:
    """Refuse a folder holding files macOS writes on its own (``.DS_Store``, ``._*`` …).

    Nothing is skipped when a folder is identified (the tree id must stay what git
    computes, a digest what anyone recomputes), so such a file would change the identity
    with no word why; naming it here is the fix.
    """
    from verifylib.canonical import describe_litter, os_litter
    found = os_litter(folder)
    if found:
        raise ParametersInvalid(f"{key}: {describe_litter(folder, found)}; they would change "
                                f"{identity}")
