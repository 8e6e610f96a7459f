"""Pass rules of stage 02 (export).

The ggml model file, the encoder's IO contract, the compiled encoder.
"""

from __future__ import annotations

from typing import Any, Callable

from verifylib.canonical import is_sha256
from verifylib.evidence.gates import Judgement, Status
from verifylib.evidence.rules.common import stream_problems
from verifylib.evidence.schemas.export import (
    CompileEvidence,
    ContractEvidence,
    GgmlModelEvidence,
    ModelIntake,
)
from verifylib.evidence.schemas.fields import SchemaError
from verifylib.runtime import contracts


def _malformed(name: str, exc: SchemaError) -> Judgement:
    return Judgement(Status.FAIL, f"malformed {name} evidence: {exc}")


def _rule_ggml_model(ev) -> Judgement:
    try:
        g = GgmlModelEvidence.from_json(ev.json("ggml"))
    except SchemaError as exc:
        return _malformed("ggml", exc)
    stderr = ev.text("load_stderr")
    probe = g.probe
    bound = stream_problems(ev, probe.to_json(), {"stderr_sha256": "load_stderr",
                                                  "stdout_sha256": "load_stdout"})
    try:
        model = ModelIntake.from_json(ev.json("model"))
    except SchemaError as exc:
        bound.append(f"the model intake record is malformed: {exc}")
    else:
        if not is_sha256(model.source_digest):
            bound.append("the model intake record has no source digest")
    if bound:
        return Judgement(Status.FAIL, "; ".join(bound))
    if not is_sha256(g.sha256) or not is_sha256(g.binary_sha256):
        return Judgement(Status.FAIL, "malformed digest in the export evidence")
    if probe.timed_out or probe.signal or probe.returncode != 0:
        how = "timed out" if probe.timed_out else (probe.signal or f"exit {probe.returncode}")
        return Judgement(Status.FAIL, f"whisper-cli did not load the model cleanly ({how})")
    if g.model_arg not in probe.argv:
        return Judgement(Status.FAIL, "the probe did not load the written model file")
    if contracts.MODEL_LOAD_FAILURE in stderr:
        return Judgement(Status.FAIL, "the loader logged a model load failure")
    loaded = contracts.parse_loaded_hparams(stderr)
    missing = [k for k in contracts.MODEL_LOAD_HPARAMS if k not in g.hparams]
    if missing:
        return Judgement(Status.FAIL, f"malformed ggml evidence: hparams.{missing[0]} is missing")
    wrote = {k: g.hparams[k] for k in contracts.MODEL_LOAD_HPARAMS}
    if loaded != wrote:
        diff = {k: (wrote[k], loaded[k] if k in loaded else None)
                for k in contracts.MODEL_LOAD_HPARAMS if k not in loaded or wrote[k] != loaded[k]}
        return Judgement(Status.FAIL, f"loader's hyper-parameters differ from the written ones "
                                      f"(written, loaded): {diff}")
    return Judgement(Status.PASS, f"ggml-model.bin sha256 {g.sha256} ({g.bytes} bytes, "
                                  f"{g.n_tensors} tensors) loaded by whisper-cli "
                                  f"{g.binary_sha256[:12]}…; the loader printed the written "
                                  f"hyper-parameters {wrote}")


def _rule_contract(ev) -> Judgement:
    from verifylib.models.coreml_export import PRECISIONS, EncoderContract, contract_problems
    try:
        d = ContractEvidence.from_json(ev.json("contract"))
    except SchemaError as exc:
        return _malformed("contract", exc)
    try:
        c = EncoderContract(**d.config)
    except (TypeError, ValueError) as exc:
        return Judgement(Status.FAIL, f"malformed model values in the evidence: {exc}")
    if c.as_dict() != d.contract:
        return Judgement(Status.FAIL, "the stored contract is not the one the stored model "
                                      "values give")
    variants = {v.precision: v for v in d.variants}
    if len(variants) != len(d.variants) or not set(variants) <= set(PRECISIONS):
        return Judgement(Status.FAIL, f"malformed variant list {sorted(variants)}")
    if "fp32" not in variants:
        return Judgement(Status.FAIL, "no fp32 variant was exported")
    # Each converted variant cites its conversion log, and no log stands for a variant
    # the contract record does not list.
    logs = {n[len("convert_log_"):] for n in ev.names() if n.startswith("convert_log_")}
    if logs != set(variants):
        return Judgement(Status.FAIL, f"conversion logs {sorted(logs)} do not match the "
                                      f"exported variants {sorted(variants)}")
    for v in sorted(logs):
        if not ev.bytes(f"convert_log_{v}").strip():
            return Judgement(Status.FAIL, f"{v}: the conversion log is empty")
    # The build facts (coremltools, torch, the tested maximum, the warning) are required
    # fields of the schema: a document without one did not parse.
    build = d.build
    if build.torch_above_tested and not build.torch_version_warning:
        return Judgement(Status.FAIL, "torch is above coremltools' tested version but the "
                                      "warning was not recorded")
    problems, shown = [], []
    for prec in PRECISIONS:
        if prec not in variants:
            continue
        v = variants[prec]
        again = contract_problems(v.description, c, prec)
        if again != list(v.problems):
            return Judgement(Status.FAIL, f"{prec}: stored contract problems disagree with the "
                                          f"stored description")
        if again:
            problems += [f"{prec}: {p}" for p in again]
            if v.placed:
                return Judgement(Status.FAIL, f"{prec}: placed although it breaks the contract")
            continue
        if not v.placed or v.tree_digest is None or not is_sha256(v.tree_digest):
            problems.append(f"{prec}: not placed (another variant broke the contract)"
                            if not v.placed else f"{prec}: malformed tree digest")
            continue
        desc = v.description
        shown.append(f"{v.path} (tree {v.tree_digest[:12]}…): "
                     f"{desc['inputs'][0]['name']} {desc['inputs'][0]['dtype']} "
                     f"{desc['inputs'][0]['shape']} -> {desc['outputs'][0]['name']} "
                     f"{desc['outputs'][0]['dtype']} {desc['outputs'][0]['shape']}, computes "
                     f"{'/'.join(desc['compute_dtypes'])}")
    if problems:
        return Judgement(Status.FAIL, "refused before placement, nothing placed: "
                                      + "; ".join(problems))
    warn = (f"torch {build.torch} above coremltools' tested "
            f"{build.torch_max_tested_by_coremltools} (warning recorded)"
            if build.torch_above_tested else f"torch {build.torch}")
    return Judgement(Status.PASS, f"contract from the config {c.values()}: " + "; ".join(shown)
                     + f"; coremltools {build.coremltools}, {warn}")


def _rule_compile(ev) -> Judgement:
    try:
        d = CompileEvidence.from_json(ev.json("compile"))
    except SchemaError as exc:
        return _malformed("compile", exc)
    variants = {v.precision: v for v in d.variants}
    if "fp32" not in variants:
        return Judgement(Status.FAIL, "the fp32 package was not compiled")
    problems, shown = [], []
    for prec, v in sorted(variants.items()):
        r = v.coremlc
        if r.timed_out or r.signal or r.returncode != 0:
            problems.append(f"{prec}: coremlc did not succeed ({r.to_json()})")
            continue
        if ev.has(f"coremlc_stderr_{prec}") and r.stderr_sha256 is not None:
            problems += [f"{prec}: {p}" for p in stream_problems(
                ev, r.to_json(), {"stderr_sha256": f"coremlc_stderr_{prec}"})]
        elif ev.has(f"coremlc_stderr_{prec}"):
            ev.bytes(f"coremlc_stderr_{prec}")
            problems.append(f"{prec}: coremlc's stored stderr is not bound to its run record")
        # The validator derives the path itself: the stored derived_path is only shown.
        derived = contracts.coreml_encoder_path(v.model_arg)
        if derived != v.placed_path:
            problems.append(f"{prec}: coreml_encoder_path({v.model_arg!r}) is "
                            f"{derived!r}, but the .mlmodelc was placed at "
                            f"{v.placed_path!r}")
            continue
        if v.tree_digest is None or not is_sha256(v.tree_digest):
            problems.append(f"{prec}: malformed tree digest")
            continue
        shown.append(f"{prec}: {v.placed_path} (tree {v.tree_digest[:12]}…) is what "
                     f"-m {v.model_arg} derives")
    if problems:
        return Judgement(Status.FAIL, "; ".join(problems))
    return Judgement(Status.PASS, "; ".join(shown))


RULES: dict[str, Callable[[Any], Judgement]] = {
    "export.ggml_model": _rule_ggml_model,
    "export.contract": _rule_contract,
    "export.compile": _rule_compile,
}
"""Gate id to judge, for the gates of stage 02."""
