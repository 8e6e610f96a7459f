"""The ggml writer's streaming checks, shared by tests/unit and tests/physical
test_ggml_writer.py: forbid the whole-model load, write through it, compare two writes."""

from __future__ import annotations

from pathlib import Path

import numpy as np

import verifylib.models.ggml_writer as gw
from verifylib.models.ggml_writer import write_ggml_model


def forbid_full_load(monkeypatch) -> None:
    """Make loading the whole model fail, so a write that succeeds was streamed."""
    from transformers import WhisperForConditionalGeneration

    def refuse(*args, **kwargs):
        raise AssertionError("the whole model was loaded")

    monkeypatch.setattr(WhisperForConditionalGeneration, "from_pretrained", refuse)


def write_loaded(hf_dir: Path, out: Path, monkeypatch) -> gw.GgmlWriteResult:
    """Write through ``from_pretrained`` (the writer's only path before streaming)."""
    with monkeypatch.context() as m:
        m.setattr(gw, "_streamed_weights", lambda *a: None)
        return write_ggml_model(hf_dir, out)


def assert_same_result(a: gw.GgmlWriteResult, b: gw.GgmlWriteResult) -> None:
    """Assert two writes gave the same file and the same reported facts."""
    assert a.path.read_bytes() == b.path.read_bytes()
    assert (a.sha256, a.bytes, a.n_tensors, a.n_vocab_entries, a.hparams) == \
        (b.sha256, b.bytes, b.n_tensors, b.n_vocab_entries, b.hparams)
    assert a.lossless == b.lossless
    assert a.max_abs_rounding == b.max_abs_rounding or (np.isnan(a.max_abs_rounding)
                                                        and np.isnan(b.max_abs_rounding))


def swapped_layers_folder(hf_dir: Path, dest: Path, i: int, j: int) -> Path:
    """Copy a Hugging Face Whisper folder with encoder layers ``i`` and ``j`` swapped.

    The result has every shape of the original and other weights where it matters: a model
    that is *not* the one the original's encoder computes, for the pair gate's mismatch.
    """
    import shutil

    from safetensors.numpy import load_file, save_file

    dest = Path(dest)
    shutil.copytree(hf_dir, dest, ignore=shutil.ignore_patterns("model.safetensors",
                                                                  "verifylib-import.json"))
    tensors = load_file(str(Path(hf_dir) / "model.safetensors"))
    a, b = f"model.encoder.layers.{i}.", f"model.encoder.layers.{j}."
    out = {}
    for name, value in tensors.items():
        if name.startswith(a):
            name = b + name[len(a):]
        elif name.startswith(b):
            name = a + name[len(b):]
        out[name] = value
    save_file(out, str(dest / "model.safetensors"), metadata={"format": "pt"})
    return dest
