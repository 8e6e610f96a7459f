"""Hostile files for parameter validation (issue 35): small and synthetic, each one of the
inputs that once started a full audit instead of being refused at validation.

- CTranslate2 ``model.bin`` files: truncated, a variable count of 2^32-1, dims of 2^31;
- fixtures: a text file, a fake mp3, a symbolic link, a 0-sample WAV, 30 minutes of noise
  (and what is accepted: 8-bit, stereo, 22,050 Hz);
- given encoders (``.mlpackage`` and ``.mlmodelc`` of a one-op program): a ``weight.bin``
  linked to ``/etc/shadow``, a weights path leading outside the folder to a file that
  exists, empty weights, a ``weight.bin`` sparse-extended to 2 GB, a garbage ``model.mil``.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
from pathlib import Path
from typing import Callable

import numpy as np

from tests.helpers.ct2_files import write_ct2_file

ENCODER_STEM = "ggml-tiny.en-encoder"
SPARSE_BYTES = 2 * 10 ** 9


# ----------------------------------------------------------------------------- CTranslate2

def ct2_folder(folder: Path) -> Path:
    """A readable CTranslate2 Whisper folder of two variables (structure only)."""
    write_ct2_file(folder / "model.bin",
                   [("encoder/w", np.ones((4, 4), np.float32), "float32"),
                    ("encoder/b", np.zeros(4, np.float16), "float16")])
    (folder / "config.json").write_text(json.dumps({"suppress_ids": [], "suppress_ids_begin": []}))
    return folder


def _patch_ct2(folder: Path, offset: int, fmt: str, value: int) -> None:
    path = folder / "model.bin"
    data = bytearray(path.read_bytes())
    struct.pack_into(fmt, data, offset, value)
    path.write_bytes(bytes(data))


# version (4) + "WhisperSpec\0" (2 + 12) + revision (4) -> the variable count
_COUNT_AT = 4 + 14 + 4
# count (4) + "encoder/w\0" (2 + 10) + rank (1) -> dim 0 of the first variable
_DIM0_AT = _COUNT_AT + 4 + 12 + 1


def hostile_ct2(base: Path) -> dict[str, Path]:
    """Name -> a CTranslate2 folder whose ``model.bin`` validation must refuse."""
    out = {}
    trunc = ct2_folder(base / "ct2-truncated")
    data = (trunc / "model.bin").read_bytes()
    (trunc / "model.bin").write_bytes(data[:len(data) - 20])
    out["ct2-truncated"] = trunc
    count = ct2_folder(base / "ct2-count")
    _patch_ct2(count, _COUNT_AT, "<I", 2 ** 32 - 1)
    out["ct2-count"] = count
    dims = ct2_folder(base / "ct2-dims")
    _patch_ct2(dims, _DIM0_AT, "<I", 2 ** 31)
    out["ct2-dims"] = dims
    return out


# ----------------------------------------------------------------------------- audio

def _noise(seconds: float, rate: int, channels: int = 1) -> np.ndarray:
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((int(seconds * rate), channels)) * 0.2).astype(np.float32)
    return x[:, 0] if channels == 1 else x


def hostile_audio(base: Path) -> dict[str, Path]:
    """Name -> a fixture validation must refuse."""
    import soundfile

    base.mkdir(parents=True, exist_ok=True)
    out = {"text": base / "text.wav", "fake-mp3": base / "fake.mp3",
           "link": base / "link.wav", "zero-samples": base / "zero.wav",
           "half-hour": base / "half-hour.wav"}
    out["text"].write_text("not audio at all\n" * 10)
    rng = np.random.default_rng(1)
    out["fake-mp3"].write_bytes(b"ID3\x03\x00\x00\x00\x00\x00\x00"
                                + rng.integers(0, 256, 20_000, dtype=np.uint8).tobytes())
    os.symlink("/etc/passwd", out["link"])
    soundfile.write(str(out["zero-samples"]), np.zeros(0, np.int16), 16000, subtype="PCM_16")
    # 30 minutes at 8 kHz, 8-bit: 14 MB, refused from its header.
    soundfile.write(str(out["half-hour"]), _noise(1800, 8000), 8000, subtype="PCM_U8")
    return out


def accepted_audio(base: Path) -> dict[str, Path]:
    """Name -> a fixture validation accepts (decoded once to 16 kHz mono 16-bit)."""
    import soundfile

    base.mkdir(parents=True, exist_ok=True)
    out = {"8-bit": base / "u8.wav", "stereo": base / "stereo.wav", "22050": base / "r22.wav"}
    soundfile.write(str(out["8-bit"]), _noise(2, 16000), 16000, subtype="PCM_U8")
    soundfile.write(str(out["stereo"]), _noise(2, 16000, 2), 16000, subtype="PCM_16")
    soundfile.write(str(out["22050"]), _noise(2, 22050), 22050, subtype="PCM_16")
    return out


# ----------------------------------------------------------------------------- encoders

def tiny_package(folder: Path) -> Path:
    """A one-op ML program (a 16x16 linear layer, its weight in ``weights/weight.bin``)."""
    from tests.helpers.mil_programs import save_program

    w = np.random.default_rng(2).standard_normal((16, 16)).astype(np.float32)
    folder.mkdir(parents=True, exist_ok=True)
    return save_program(folder, lambda mb, x: mb.linear(x=x, weight=w), (1, 16), ENCODER_STEM)


def tiny_compiled(package: Path, folder: Path) -> Path:
    """The package as coremlc would compile it (model.mil, weights, metadata)."""
    from tests.helpers.compiled_models import compiled_folder

    out = compiled_folder(package, folder / f"{ENCODER_STEM}.mlmodelc")
    (out / "metadata.json").write_text(json.dumps([{"modelType": {
        "name": "MLModelType_mlProgram"}}]))
    (out / "coremldata.bin").write_bytes(b"\x00" * 64)
    return out


def _package_weight(pkg: Path) -> Path:
    return pkg / "Data" / "com.apple.CoreML" / "weights" / "weight.bin"


def _set_package_blob_name(pkg: Path, name: str) -> None:
    from coremltools.proto import Model_pb2

    model = pkg / "Data" / "com.apple.CoreML" / "model.mlmodel"
    spec = Model_pb2.Model()
    spec.ParseFromString(model.read_bytes())
    for fn in spec.mlProgram.functions.values():
        for block in fn.block_specializations.values():
            for op in block.operations:
                for attr in op.attributes.values():
                    if attr.WhichOneof("value") == "blobFileValue":
                        attr.blobFileValue.fileName = name
    model.write_bytes(spec.SerializeToString())


def _sparse(path: Path) -> None:
    with open(path, "r+b") as fh:
        fh.truncate(SPARSE_BYTES)


def _outside(weights: Path, root: Path) -> None:
    # A file that exists, beside the encoder's folder: the path to it leaves the folder.
    shutil.copyfile(weights, root.parent / "outside.bin")


def hostile_encoders(base: Path) -> dict[str, Path]:
    """Name -> a given encoder folder validation must refuse (each its own copy)."""
    pkg = tiny_package(base / "clean")
    compiled = tiny_compiled(pkg, base / "clean")
    edits: dict[str, tuple[Path, Callable[[Path], None]]] = {
        "pkg-weight-link": (pkg, lambda p: (_package_weight(p).unlink(),
                                            os.symlink("/etc/shadow", _package_weight(p)))),
        "pkg-weight-outside": (pkg, lambda p: (
            _outside(_package_weight(p), p),
            _set_package_blob_name(p, "@model_path/../../../outside.bin"))),
        "pkg-weight-empty": (pkg, lambda p: _package_weight(p).write_bytes(b"")),
        "pkg-weight-sparse": (pkg, lambda p: _sparse(_package_weight(p))),
        "mlmodelc-weight-link": (compiled, lambda p: (
            (p / "weights/weight.bin").unlink(),
            os.symlink("/etc/shadow", p / "weights/weight.bin"))),
        "mlmodelc-weight-outside": (compiled, lambda p: (
            _outside(p / "weights/weight.bin", p),
            (p / "model.mil").write_text((p / "model.mil").read_text().replace(
                "@model_path/weights/weight.bin", "@model_path/../outside.bin")))),
        "mlmodelc-weight-empty": (compiled, lambda p: (p / "weights/weight.bin").write_bytes(b"")),
        "mlmodelc-weight-sparse": (compiled, lambda p: _sparse(p / "weights/weight.bin")),
        "mlmodelc-garbage-mil": (compiled, lambda p: (p / "model.mil").write_text(
            "program(1.0) { this is not MIL at all ((( }\n")),
    }
    out = {}
    for name, (clean, edit) in edits.items():
        dest = base / name / clean.name
        shutil.copytree(clean, dest, symlinks=True)
        edit(dest)
        out[name] = dest
    return out


def clean_encoders(base: Path) -> dict[str, Path]:
    """The unedited package and compiled folder (validation accepts both)."""
    pkg = tiny_package(base / "clean")
    return {"mlpackage": pkg, "mlmodelc": tiny_compiled(pkg, base / "clean")}
