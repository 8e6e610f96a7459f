"""Stage 02_export: model intake, the whisper.cpp model file and the Core ML encoder.

- ``export.ggml_model`` — the model is taken in (a Hugging Face folder, a hub id, or a
  CTranslate2 Whisper imported once), written as ``fp32/ggml-model.bin`` by our writer,
  and loaded by ``build.ggml``'s own binary, whose loader must print exactly the
  hyper-parameters we wrote.
- ``export.contract`` — the encoder contract is derived from the model's config and conv
  strides; the eager encoder is traced once and converted to an ML program per variant
  (``fp32``: float32 compute, gated; ``fp16``: float16 compute, parameter
  ``export.fp16``), both with float32 IO; each package is saved to a staging folder,
  read back from disk and checked against the contract. Only when every variant holds
  are they renamed into ``fp32/ggml-model-encoder.mlpackage`` (and ``fp16/…``, beside a
  hard link or copy of ``ggml-model.bin``); a mismatch places nothing. coremltools and
  torch versions and coremltools' torch-above-tested warning are recorded as build facts.
- ``export.compile`` (macOS + full Xcode, else NOT_RUN(platform)) — ``xcrun coremlc
  compile`` of each placed package to ``<variant>/ggml-model-encoder.mlmodelc``; the path
  ``coreml_encoder_path`` derives from the ``-m`` string used later must be that folder.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from verifylib import canonical
from verifylib.canonical import sha256_file, tree_digest
from verifylib.errors import PrerequisiteBroken
from verifylib.evidence import identities
from verifylib.evidence.export.facts import export_facts_from_evidence
from verifylib.evidence.export.schema import (
    CompileEvidence,
    ContractEvidence,
    GgmlModelEvidence,
    ModelIntake,
)
from verifylib.evidence.fields import Schema
from verifylib.evidence.gates import EXPORT_COMPILE, EXPORT_CONTRACT, EXPORT_GGML_MODEL
from verifylib.evidence.run_record import RunRecord
from verifylib.evidence.stage_report import StageReport
from verifylib.models.ggml_writer import GgmlWriteResult, write_ggml_model
from verifylib.models.intake import obtain_model
from verifylib.numerics.memory import release_memory
from verifylib.params import Params
from verifylib.resources import cache_dir
from verifylib.runtime import contracts, progress
from verifylib.runtime.runner import run_record, run_whisper_cli
from verifylib.stages.artifacts import (
    ENCODER_PACKAGE,
    GGML_MODEL,
    export_variants,
    ggml_binary,
    model_language,
    model_source,
    runtime_tree,
)
from verifylib.stages.context import StageContext
from verifylib.stages.pair import run_pair
from verifylib.stages.prebuilt import run_prebuilt_contract

STAGE = "02_export"
LOAD_PROBE_MS = "2000"


def _through_schema(schema: type[Schema], doc: dict[str, Any]) -> dict[str, Any]:
    """Return ``doc`` as its schema reads it back from its canonical JSON.

    The canonical JSON of the result is byte for byte that of ``doc`` (``to_json`` gives
    back exactly what ``from_json`` read); a document the judge could not parse fails here,
    when it is written, not later when it is judged.
    """
    return schema.from_json(canonical.loads(canonical.dumps(doc))).to_json()


def _export_contract(ctx: StageContext) -> None:
    from verifylib.models.coreml_contract import contract_of
    from verifylib.models.coreml_export import (
        build_facts,
        convert_traced,
        release_conversion,
        trace_encoder,
    )
    from verifylib.models.coreml_package import discard_staged, publish_staged, stage_mlpackage
    from verifylib.models.hf import load_hf_encoder

    g = ctx.begin(EXPORT_CONTRACT)
    if not g:
        return
    with g:
        src = model_source(ctx)
        # Only the encoder is exported, and stage 04 measures it against the same loader's
        # encoder. The full model would also widen the decoder (most of a large model's
        # weights) to float32 from a float16 checkpoint, before the trace and the two
        # conversions add theirs.
        encoder, _ = load_hf_encoder(src["hf_dir"])
        contract = contract_of(encoder)
        facts = build_facts()
        variants = export_variants(ctx.params)
        # A re-run replaces this stage's artifacts entirely: stale encoders go first, so a
        # refused export leaves no older package (or compiled model) behind either.
        for v in ("fp32", "fp16"):
            for name in (ENCODER_PACKAGE, ENCODER_PACKAGE.replace(".mlpackage", ".mlmodelc")):
                shutil.rmtree(ctx.run_dir / v / name, ignore_errors=True)
        with progress.ticking("02_export tracing the encoder"):
            traced, trace_log, trace_s = trace_encoder(encoder, contract)
        del encoder  # the trace holds the weights it needs
        refs, staged, convs = [], [], {}
        try:
            for v in variants:
                with progress.ticking(f"02_export converting the {v} encoder to mlprogram"):
                    conv = convert_traced(traced, contract, v)
                convs[v] = conv
                refs.append(ctx.write_bytes(f"convert_log_{v}", (trace_log + conv.log).encode(),
                                            f"convert-{v}.log.txt"))
                staged.append(stage_mlpackage(conv.model, ctx.artifact_path(v, ENCODER_PACKAGE),
                                              contract, v))
                # Saved and read back: the in-memory program goes before the next variant
                # is converted, so two are never alive at once.
                release_conversion(conv)
            del traced
            release_memory()
            all_ok = all(s.ok for s in staged)
            if all_ok:
                for s in staged:
                    publish_staged(s)
        finally:
            for s in staged:
                discard_staged(s)
        copies = _model_beside_fp16(ctx) if all_ok and "fp16" in variants else {}
        records = [{"precision": s.precision, "path": f"{s.precision}/{ENCODER_PACKAGE}",
                    "description": s.description, "problems": s.problems,
                    "placed": s.tree_digest is not None, "tree_digest": s.tree_digest,
                    "conversion": {"options": convs[s.precision].options,
                                   "seconds": round(convs[s.precision].seconds, 3)}}
                   for s in staged]
        facts["trace_seconds"] = round(trace_s, 3)
        refs.append(ctx.write_json("contract", _through_schema(ContractEvidence, {
            "model": src, "config": contract.values(), "contract": contract.as_dict(),
            "variants": records, "build": facts, "model_copies": copies})))
        ids = {identities.MODEL_SOURCE_DIGEST: src["source_digest"]}
        for s in staged:
            if s.tree_digest:
                ids[f"artifact.{s.precision}.mlpackage.tree_digest"] = s.tree_digest
        g.judge(refs, ids)


def _model_beside_fp16(ctx: StageContext) -> dict[str, dict[str, Any]]:
    """Place the model file in the fp16 folder too; the record of the copy, by its path.

    whisper.cpp finds the Core ML encoder beside the model file it is given, so the fp16
    encoder needs a model file in its own folder. Nothing when no model file was written.
    """
    from verifylib.models.coreml_package import link_or_copy

    src_bin = ctx.run_dir.joinpath(*GGML_MODEL)
    if not src_bin.is_file():
        return {}
    dest = ctx.artifact_path("fp16", GGML_MODEL[1])
    how = link_or_copy(src_bin, dest)
    return {"fp16/" + GGML_MODEL[1]: {"from": "/".join(GGML_MODEL), "how": how,
                                      "sha256": sha256_file(dest)}}


def _export_compile(ctx: StageContext) -> None:
    from verifylib.models.coreml_package import compile_mlpackage

    g = ctx.begin(EXPORT_COMPILE)
    if not g:
        return
    with g:
        exported = ctx.evidence_of(EXPORT_CONTRACT, "contract")
        try:
            fp32_arg = ctx.document(EXPORT_GGML_MODEL, "ggml", GgmlModelEvidence).model_arg
        except PrerequisiteBroken:
            fp32_arg = str(ctx.run_dir.joinpath(*GGML_MODEL))
        refs, entries, ids = [], [], {}
        for v in exported["variants"]:
            if not v["placed"]:
                continue
            prec = v["precision"]
            pkg = ctx.run_dir / v["path"]
            dest = pkg.with_suffix(".mlmodelc")
            model_arg = fp32_arg if prec == "fp32" else str(ctx.run_dir / prec / GGML_MODEL[1])
            if pkg.suffix == ".mlmodelc":
                # Audited as given, already compiled and placed by export.contract.
                digest = tree_digest(pkg)
                entries.append({
                    "precision": prec, "package": v["path"],
                    "package_tree_digest": v["tree_digest"],
                    "model_arg": model_arg,
                    "derived_path": contracts.coreml_encoder_path(model_arg),
                    "placed_path": str(pkg), "tree_digest": digest})
                ids[f"artifact.{prec}.mlmodelc.tree_digest"] = digest
                continue
            res = compile_mlpackage(pkg, dest)
            refs.append(ctx.write_bytes(f"coremlc_stderr_{prec}", res.run.stderr,
                                        f"coremlc-{prec}.stderr.txt"))
            entries.append({
                "precision": prec, "package": v["path"],
                "package_tree_digest": v["tree_digest"], "model_arg": model_arg,
                "derived_path": contracts.coreml_encoder_path(model_arg),
                "placed_path": str(dest), "tree_digest": res.tree_digest,
                "coremlc": {"argv": res.run.argv, "returncode": res.run.returncode,
                            "signal": res.run.signal, "timed_out": res.run.timed_out,
                            "wall_s": round(res.run.wall_s, 3),
                            "stderr_sha256": res.run.stderr_sha256}})
            ids[f"artifact.{prec}.mlmodelc.tree_digest"] = res.tree_digest
        from verifylib.runtime.capabilities import detect
        refs.append(ctx.write_json("compile", _through_schema(
            CompileEvidence, {"variants": entries, "coremlc": detect().coremlc})))
        g.judge(refs, ids)


@dataclass(frozen=True)
class GivenModel:
    """A whisper.cpp model file the parameters named, placed unchanged in the run.

    Attributes
    ----------
    rel_path : str
        Where it was placed (``fp32/ggml-model.bin``, or ``fp32/ggml-model-q5_0.bin`` for
        a quantized file, the name whisper.cpp's Core ML path rule expects).
    given : str
        The file the parameters named.
    sha256 : str
        Its digest (the placed copy's, which must equal the given file's).
    bytes : int
        Its length.
    hparams : dict
        Its header's hyper-parameters.
    n_tensors : int
        Tensors in it.
    ftype : str
        Its tensor type.
    lossless : bool
        True: the file is the source itself (a quantized file is a lossy source, which the
        ftype records).
    """

    rel_path: str
    given: str
    sha256: str
    bytes: int
    hparams: dict[str, Any]
    n_tensors: int
    ftype: str
    lossless: bool = True


def _place_given_model(ctx: StageContext, given: Path) -> GivenModel:
    """Copy the named model file into the run under the name whisper.cpp will be given.

    A copy, not a link: the run must not change when the user's file does.
    """
    from verifylib.models.ggml_file import open_ggml
    from verifylib.stages.artifacts import published_model_name

    f = open_ggml(given)
    rel = published_model_name(f.ftype_name)
    dest = ctx.run_dir / rel
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.staging-{os.getpid()}")
    try:
        shutil.copyfile(given, tmp)
        digest = sha256_file(tmp)
        if digest != sha256_file(given):
            raise PrerequisiteBroken(f"{given} changed while it was copied into the run")
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)
    # As the loader prints them: the stored ftype carries the quantization version
    # (2008 for q5_0), which whisper.cpp splits off and prints as qntvr.
    hparams = {**f.hparams, "ftype": f.ftype, "qntvr": f.qntvr}
    return GivenModel(rel_path=rel, given=str(given), sha256=digest, bytes=dest.stat().st_size,
                      hparams=hparams, n_tensors=len(f.tensors), ftype=f.ftype_name)


def run(params: Params, run_dir: str | os.PathLike[str]) -> StageReport:
    """Run stage 02_export.

    Parameters
    ----------
    params : Params
        Validated parameters (``model`` section).
    run_dir : path-like
        The run directory; the model file goes to ``fp32/ggml-model.bin`` in it.

    Returns
    -------
    StageReport
    """
    ctx = StageContext(STAGE, params, run_dir)
    g = ctx.begin(EXPORT_GGML_MODEL)
    if g:
        with g:
            info = obtain_model(params.model.spec, cache_dir(), log=print,
                                base_dir=params.base_dir)
            model_ref = ctx.write_json("model", ModelIntake(
                kind=info.kind, source_digest=info.source_digest, origin=dict(info.origin),
                hf_dir=str(info.hf_dir), language=info.language, cached=info.cached).to_json())
            for stale in ctx.run_dir.joinpath(GGML_MODEL[0]).glob("ggml-model*.bin"):
                stale.unlink()
            given: str | None = None
            written: GivenModel | GgmlWriteResult
            if params.model.kind == "ggml":
                written = _place_given_model(ctx, params.resolve(params.model.spec["path"]))
                out, ftype, given = ctx.run_dir / written.rel_path, written.ftype, written.given
            else:
                out, ftype = ctx.artifact_path(*GGML_MODEL), "f16"  # our writer's one ftype
                written = write_ggml_model(info.hf_dir, out)
            binary, binary_sha = ggml_binary(ctx)
            audio = runtime_tree(ctx) / contracts.TEST_AUDIO_IN_TREE
            model_arg = str(out)
            argv = [str(binary), "-m", model_arg, "-f", str(audio), "-d", LOAD_PROBE_MS,
                    "-t", "2", *contracts.greedy_decoding_args(model_language(params))]
            # Through run_whisper_cli: the argv contract is checked before launch and the
            # launch is recorded in the run's ledger; run_record carries its citation.
            res = run_whisper_cli(argv, timeout=300)
            refs = [model_ref,
                    ctx.write_bytes("load_stderr", res.stderr, "load.stderr.txt"),
                    ctx.write_bytes("load_stdout", res.stdout, "load.stdout.txt")]
            refs.append(ctx.write_json("ggml", GgmlModelEvidence(
                path=out.relative_to(ctx.run_dir).as_posix(), model_arg=model_arg,
                sha256=written.sha256, bytes=written.bytes, hparams=dict(written.hparams),
                n_tensors=written.n_tensors, lossless=written.lossless,
                binary_sha256=binary_sha, probe=RunRecord.from_json(run_record(res)),
                ftype=ftype, given=given).to_json()))
            g.judge(refs, {identities.MODEL_SOURCE_DIGEST: info.source_digest,
                           identities.MODEL_GGML: written.sha256,
                           identities.MODEL_GGML_FTYPE: ftype,
                           identities.BINARY_GGML: binary_sha})
    if params.encoder is not None:
        run_prebuilt_contract(ctx, params.encoder, _through_schema)
    else:
        _export_contract(ctx)
    _export_compile(ctx)
    run_pair(ctx)
    report = ctx.finish()
    # The facts table comes from the files the gates cite, as open_run reads a published run.
    report.facts = export_facts_from_evidence(ctx.run_dir, ctx.records)
    return report
