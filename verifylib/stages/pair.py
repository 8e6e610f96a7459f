"""Gate ``export.pair`` of stage 02: the audited encoder computes the encoder of the .bin.

Nothing in whisper.cpp checks that the Core ML encoder beside a ``ggml-*.bin`` belongs to
it: a mismatched pair loads, prints "Core ML model loaded" and transcribes garbage, or
crashes. This gate answers the question from the two files themselves:

- the reference is the Hugging Face encoder rebuilt from the published model file's own
  tensors (dequantized exactly as ggml does, :mod:`verifylib.models.ggml_import`), not the
  model the run started from, so a ``.bin`` from another model is caught even when the
  encoder matches the source;
- the candidate is the audited encoder: its ML program executed here in float32
  (:mod:`verifylib.numerics.mil_exec`); for a prebuilt ``.mlmodelc``, on macOS the compiled
  model through ``CompiledMLModel``, elsewhere its program read from its ``model.mil``
  (:mod:`verifylib.numerics.mil_compiled`), the evidence naming the file read and its digests;
- both see the same two inputs: the runtime tree's sample audio through the file's *own*
  mel filters, and a seeded random log-mel;
- ``pair-v1`` (recorded before measuring) gives the floor for the file's ftype and the
  encoder's declared precision. A failure names the first encoder block where the two
  residual streams part.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from verifylib.canonical import sha256_bytes, sha256_file, tree_digest
from verifylib.evidence import identities
from verifylib.evidence.export.schema import GgmlModelEvidence, PairEvidence, PairFloor, PairInput
from verifylib.evidence.gates import EXPORT_GGML_MODEL, EXPORT_PAIR
from verifylib.numerics.memory import trim_heap
from verifylib.numerics.parity import PAIR_POLICY, pair_floor, policy_record
from verifylib.numerics.reference import fixture_logmel, random_logmel
from verifylib.numerics.scoring import load_policy
from verifylib.resources import cache_dir
from verifylib.runtime import contracts
from verifylib.runtime.audio import read_wav_16k
from verifylib.stages.artifacts import (
    audited_encoder,
    given_program,
    published_model,
    runtime_tree,
)
from verifylib.stages.context import StageContext

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from verifylib.models.coreml_contract import EncoderContract

GATE = EXPORT_PAIR
REFERENCE = ("Hugging Face WhisperEncoder rebuilt from the model file's tensors (dequantized "
             "as ggml does), float32, eval, eager attention, CPU")


def run_pair(ctx: StageContext) -> None:
    """Judge ``export.pair`` for this run (NOT_RUN when a prerequisite did not pass).

    Parameters
    ----------
    ctx : StageContext
        Stage 02's context; ``export.ggml_model`` and ``export.contract`` were judged.
    """
    given = given_program(ctx)
    g = ctx.begin(GATE, program_from_text=given is not None and given.program is not None,
                  platform_note=given.why_not if given is not None else None)
    if not g:
        return
    with g:
        from verifylib.models.coreml_contract import contract_of
        from verifylib.models.ggml_import import import_ggml_cached
        from verifylib.models.hf import load_hf_encoder

        t0 = time.perf_counter()
        policy = load_policy(PAIR_POLICY)
        model_path, _ = published_model(ctx)
        ggml_ev = GgmlModelEvidence.from_json(ctx.evidence_of(EXPORT_GGML_MODEL, "ggml"))
        ftype = ggml_ev.ftype
        enc = audited_encoder(ctx)
        smin, cmin = pair_floor(policy.rules, ftype, enc.precision)
        # The floor is bound before anything is measured; the rule re-derives it.
        refs = [ctx.write_json("pair_policy", policy_record(policy), "pair-policy.json")]
        imported = import_ggml_cached(model_path, cache_dir(), log=print)
        encoder, fe = load_hf_encoder(imported.hf_dir)
        contract = contract_of(encoder)
        audio = read_wav_16k(runtime_tree(ctx) / contracts.TEST_AUDIO_IN_TREE)
        mels = {"fixture": fixture_logmel(fe, audio, contract),
                "random": random_logmel(contract)}
        source = None
        if enc.format == "mlmodelc" and (given is None or given.program is None):
            execution = policy.rules["runtime_execution"]
            inputs = _measure_compiled(enc.path, encoder, mels, contract)
        else:
            from verifylib.numerics.mil_exec import load_program
            from verifylib.numerics.pair import measure_pair

            execution = f"program-{policy.rules['program_execution']}"
            if given is not None and given.program is not None:
                program = given.program
                source = given.source.as_dict() if given.source else None
            else:
                program = load_program(enc.path)
            m = measure_pair(program, encoder, mels, compute=policy.rules["program_execution"],
                             threshold_db=smin)
            inputs = [PairInput(input=r.input, logmel_sha256=sha256_bytes(mels[r.input].tobytes()),
                                snr_db=r.snr_db, cosine=r.cosine,
                                max_abs_error=r.max_abs_error,
                                block_snr_db=tuple(r.block_snr_db),
                                first_divergent_block=r.first_divergent_block)
                      for r in m.inputs]
            del program
        del encoder
        trim_heap()
        doc = PairEvidence(
            policy=policy_record(policy), model_file=ggml_ev.path,
            model_sha256=sha256_file(model_path), encoder=enc.rel_path,
            encoder_tree_digest=tree_digest(enc.path), reference=REFERENCE,
            execution=execution,
            floor=PairFloor(ftype=ftype, precision=enc.precision, snr_db_min=smin,
                            cosine_min=cmin),
            inputs=tuple(inputs), seconds=round(time.perf_counter() - t0, 3),
            program_source=source)
        refs.append(ctx.write_json("pair", doc.to_json()))
        g.judge(refs, {identities.MODEL_GGML: doc.model_sha256,
                       identities.MODEL_GGML_FTYPE: ftype,
                       identities.ENCODER_PRECISION: enc.precision,
                       enc.identity_key: doc.encoder_tree_digest,
                       identities.POLICY_PAIR_SHA256: policy.sha256})


# ``encoder`` is the Hugging Face WhisperEncoder: transformers ships no type stubs.
def _measure_compiled(path: Path, encoder: Any, mels: Mapping[str, NDArray[Any]],
                      contract: EncoderContract) -> list[PairInput]:
    """Run a compiled encoder through Core ML (macOS) and the reference on each log-mel.

    A ``.mlmodelc`` exposes no intermediate values, so no block is tapped: a failure there
    cannot name the block where the two diverge, and the evidence says so (empty list).
    """
    import numpy as np
    import torch

    from verifylib.models.coreml_package import load_compiled, predict_compiled
    from verifylib.numerics.parity import compare

    model = load_compiled(path)
    out = []
    for name, mel in mels.items():
        with torch.inference_mode():
            ref = encoder(torch.from_numpy(mel)).last_hidden_state.numpy()
        cand = predict_compiled(model, mel, contract)
        c = compare(np.asarray(ref, dtype=np.float64), np.asarray(cand, dtype=np.float64))
        out.append(PairInput(input=name, logmel_sha256=sha256_bytes(mel.tobytes()),
                             snr_db=c.snr_db, cosine=c.cosine, max_abs_error=c.max_abs_error,
                             block_snr_db=(), first_divergent_block=None))
    return out
