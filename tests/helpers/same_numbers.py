"""Deterministic numerics computed once per test process and handed to every test that asks
for the same computation on the same bytes.

Several tests run a stage, or a replay, whose encoder conversion, reference encoder,
program executions or Hugging Face transcripts are exactly those another test already
computed: the same weights, parameters, package bytes and audio. :func:`reusing_numbers`
patches the functions that compute them (:func:`verifylib.models.coreml_export.trace_encoder`
and ``convert_traced``, :func:`verifylib.stages.parity.reference_run` and
``measure_program``, :func:`verifylib.models.hf.transcribe_hf`) with memoized ones, keyed
by content (the encoder's weights and the contract for a trace, the trace, precision and
options for a conversion, the parameters and the export stage's evidence for the reference,
the package's tree digest and the reference's arrays for a program, the bundle, audio bytes
and decoding pin for a transcript). A different input is a miss and runs for real. A
memoized conversion's model outlives the stage that saved it (``release_conversion`` only
lets go of it). Nothing that launches whisper-cli or a compiler is reused: the launch
ledger must own every launch.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
from pathlib import Path
from typing import Any, Iterator

import pytest

from verifylib import canonical

_MEMO: dict[tuple, Any] = {}


def _reference_key(ref: Any) -> str:
    """A digest of everything :func:`measure_program` reads from a reference run."""
    h = hashlib.sha256(canonical.dumps({"records": ref.input_records,
                                        "input": ref.contract.input_name,
                                        "output": ref.contract.output_name,
                                        "speech_frames": ref.speech_frames,
                                        "attribution": ref.encoder is not None}))
    for group in (ref.inputs, ref.outputs):
        for kind in sorted(group):
            h.update(kind.encode() + group[kind].tobytes())
    for kind in sorted(ref.layers):
        for label, value in ref.layers[kind]:
            h.update(f"{kind}/{label}".encode() + value.tobytes())
    return h.hexdigest()


def _reference_once(compute):
    def reference_run(ctx):
        key = ("reference", canonical.dumps(ctx.params.data),
               canonical.tree_digest(ctx.run_dir / "evidence" / "02_export"))
        if key not in _MEMO:
            _MEMO[key] = compute(ctx)
        return _MEMO[key]
    return reference_run


def _program_once(compute):
    def measure_program(package, ref, *, variant=None):
        if not isinstance(package, (str, Path)):
            return compute(package, ref, variant=variant)
        key = ("program", canonical.tree_digest(package), _reference_key(ref), variant)
        if key not in _MEMO:
            _MEMO[key] = compute(package, ref, variant=variant)
        return _MEMO[key]
    return measure_program


def _transcript_once(compute):
    def transcribe_hf(bundle, audio, language=None, **pin):
        key = ("hf", str(bundle.hf_dir), canonical.sha256_bytes(audio.tobytes()),
               str(audio.dtype), language, tuple(sorted(pin.items())))
        if key not in _MEMO:
            _MEMO[key] = compute(bundle, audio, language, **pin)
        return _MEMO[key]
    return transcribe_hf


def _weights_key(module: Any) -> str:
    """A digest of a torch module's parameters and buffers, by name."""
    h = hashlib.sha256()
    for name, value in sorted(module.state_dict().items()):
        h.update(name.encode() + str(value.dtype).encode()
                 + value.detach().cpu().numpy().tobytes())
    return h.hexdigest()


def _trace_once(compute):
    def trace_encoder(encoder, contract):
        key = ("trace", _weights_key(encoder), repr(contract))
        if key not in _MEMO:
            _MEMO[key] = compute(encoder, contract)
        return _MEMO[key]
    return trace_encoder


def _convert_once(compute):
    def convert_traced(traced, contract, precision, **options):
        # The trace is itself memoized, so its id names it for as long as the memo lives.
        key = ("convert", id(traced), repr(contract), precision, repr(sorted(options.items())))
        if key not in _MEMO:
            _MEMO[key] = compute(traced, contract, precision, **options)
        return dataclasses.replace(_MEMO[key])
    return convert_traced


def _release_unless_memoized(release):
    def release_conversion(conv):
        if any(conv.model is kept.model for key, kept in _MEMO.items() if key[0] == "convert"):
            conv.model = None  # the memo's model (and its package) stays for the next stage
            return
        release(conv)
    return release_conversion


@contextlib.contextmanager
def reusing_numbers() -> Iterator[None]:
    """Within the block, the computations above are memoized for this process."""
    from verifylib.models import coreml_export, hf
    from verifylib.stages import parity

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(coreml_export, "trace_encoder", _trace_once(coreml_export.trace_encoder))
        mp.setattr(coreml_export, "convert_traced", _convert_once(coreml_export.convert_traced))
        mp.setattr(coreml_export, "release_conversion",
                   _release_unless_memoized(coreml_export.release_conversion))
        mp.setattr(parity, "reference_run", _reference_once(parity.reference_run))
        mp.setattr(parity, "measure_program", _program_once(parity.measure_program))
        mp.setattr(hf, "transcribe_hf", _transcript_once(hf.transcribe_hf))
        yield
