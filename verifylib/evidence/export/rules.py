"""Pass rules of stage 02 (export).

The ggml model file, the encoder's IO contract, the compiled encoder.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Mapping

from verifylib.canonical import is_sha256
from verifylib.evidence.export.schema import (
    CompileEvidence,
    ContractEvidence,
    ExportVariant,
    GgmlModelEvidence,
    ModelIntake,
    PairEvidence,
    PrebuiltEncoder,
)
from verifylib.evidence.fields import SchemaError
from verifylib.evidence.gates import (
    EXPORT_COMPILE,
    EXPORT_CONTRACT,
    EXPORT_GGML_MODEL,
    EXPORT_PAIR,
    Judgement,
    Status,
)
from verifylib.evidence.judging import (
    policy_file_problems,
    program_source_problems,
    read_from_text,
    stream_problems,
)
from verifylib.evidence.records import EvidenceView
from verifylib.runtime import contracts

if TYPE_CHECKING:
    from verifylib.models.coreml_contract import EncoderContract


def _malformed(name: str, exc: SchemaError) -> Judgement:
    return Judgement(Status.FAIL, f"malformed {name} evidence: {exc}")


def _rule_ggml_model(ev: EvidenceView) -> Judgement:
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


def _rule_contract(ev: EvidenceView) -> Judgement:
    from verifylib.models.coreml_contract import PRECISIONS, EncoderContract, contract_problems
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
    pre = d.prebuilt
    if pre is not None:
        return _judge_prebuilt(d, c, variants)
    # Each converted variant cites its conversion log, and no log stands for a variant
    # the contract record does not list.
    logs = {n[len("convert_log_"):] for n in ev.names() if n.startswith("convert_log_")}
    if logs != set(variants):
        return Judgement(Status.FAIL, f"conversion logs {sorted(logs)} do not match the "
                                      f"exported variants {sorted(variants)}")
    for variant in sorted(logs):
        if not ev.bytes(f"convert_log_{variant}").strip():
            return Judgement(Status.FAIL, f"{variant}: the conversion log is empty")
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


def prebuilt_contract_problems(description: Mapping[str, Any], contract: EncoderContract,
                               precision: str, precision_reason: str = "") -> list[str]:
    """Every way an encoder audited as given breaks the contract (empty when it holds).

    Pure; the stage and the rule both call it. The IO rules are
    :func:`~verifylib.models.coreml_contract.contract_problems`' at the declared precision
    (``mixed`` is judged as fp16); an encoder whose precision could not be read has no
    policy that could be chosen before measuring, which is a problem of its own.

    Parameters
    ----------
    description : mapping
        What the encoder declares (``EncoderCard.description``).
    contract : EncoderContract
        The contract derived from the model.
    precision : str
        The card's declared precision.
    precision_reason : str
        Why the card says so (shown when the precision is unknown).

    Returns
    -------
    list of str
    """
    from verifylib.models.coreml_contract import contract_problems

    if precision == "unknown":
        why = precision_reason or "no reason recorded"
        return [f"its compute precision could not be read ({why}), so no parity policy can "
                "be chosen before measuring"]
    return contract_problems(description, contract, "fp16" if precision == "mixed"
                             else precision)


def _archive_problem(pre: PrebuiltEncoder) -> str | None:
    """Return what is wrong with the record of the zip a given encoder came from, or None.

    The zip itself stays with the user; what can be judged here is that a zip was
    recorded exactly when one was named, with a well-formed digest and file list.
    ``verify`` holds the published folder against that list
    (:mod:`verifylib.evidence.declarations`).
    """
    a = pre.archive
    zipped = pre.given.endswith(".zip")
    if a is None:
        return (f"{pre.given} is a zip, but no archive record says what it held"
                if zipped else None)
    if not pre.given.endswith(".mlmodelc.zip") or pre.format != "mlmodelc":
        return f"an archive record for {pre.given} ({pre.format}), which is no .mlmodelc.zip"
    if not is_sha256(a.sha256) or not a.top.endswith(".mlmodelc"):
        return f"a malformed archive record (sha256 {a.sha256!r}, top folder {a.top!r})"
    paths = [f.path for f in a.files]
    if paths != sorted(set(paths)) or not {"metadata.json", "coremldata.bin"} <= set(paths):
        return "the archive record's file list is not sorted and unique, or lacks " \
               "metadata.json or coremldata.bin"
    if any(f.bytes < 0 or len(f.crc32) != 8 or f.crc32.strip("0123456789abcdef")
           for f in a.files):
        return "the archive record lists a file with a malformed size or CRC-32"
    return None


def _judge_prebuilt(d: ContractEvidence, c: EncoderContract,
                    variants: Mapping[str, ExportVariant]) -> Judgement:
    # The contract of an encoder audited as given: one slot, judged at the card's precision.
    from verifylib.errors import EvidenceInvalid
    from verifylib.numerics.parity import PAIR_POLICY, choose_parity_policy

    pre = d.prebuilt
    assert pre is not None
    if set(variants) != {"fp32"}:
        return Judgement.failed(f"an encoder audited as given fills the fp32 slot only, not "
                                f"{sorted(variants)}")
    v = variants["fp32"]
    if pre.format not in ("mlpackage", "mlmodelc") or not v.path.endswith("." + pre.format):
        return Judgement.failed(f"the placed {v.path} is not the given {pre.format}")
    if pre.card.get("precision") != pre.precision:
        return Judgement.failed(f"the recorded precision {pre.precision!r} is not the card's "
                                f"{pre.card.get('precision')!r}")
    bad_archive = _archive_problem(pre)
    if bad_archive:
        return Judgement.failed(bad_archive)
    # The choice also depends on the model file's ftype (export.ggml_model's): a
    # full-precision source gives the precision's own policy, a quantized one pair-v1.
    own = None
    if pre.precision != "unknown":
        try:
            own = choose_parity_policy(pre.precision, None).policy_id
        except EvidenceInvalid as exc:
            return Judgement.failed(str(exc))
    if own is not None and pre.parity_policy not in (own, PAIR_POLICY):
        return Judgement.failed(f"parity policy {pre.parity_policy} cannot be chosen for a "
                                f"{pre.precision} encoder ({own}, or {PAIR_POLICY} against a "
                                "quantized source)")
    again = prebuilt_contract_problems(v.description, c, pre.precision,
                                       pre.card.get("precision_reason", ""))
    if again != list(v.problems):
        return Judgement.failed("stored contract problems disagree with the stored description")
    if again:
        if v.placed:
            return Judgement.failed("placed although it breaks the contract")
        return Judgement.failed(f"{pre.given} breaks the runtime contract, nothing placed: "
                                + "; ".join(again))
    if not v.placed or v.tree_digest is None or not is_sha256(v.tree_digest):
        return Judgement.failed("not placed, or a malformed tree digest")
    if v.tree_digest != pre.source_tree_digest:
        return Judgement.failed(f"the placed encoder (tree {v.tree_digest[:12]}…) is not the "
                                f"given one (tree {pre.source_tree_digest[:12]}…)")
    desc = v.description
    card = pre.card
    unzipped = ("" if pre.archive is None else
                f" (zip sha256 {pre.archive.sha256[:12]}…, {len(pre.archive.files)} files "
                "unpacked into the run)")
    return Judgement.passed(
        f"{pre.given} audited as given{unzipped}, placed as {v.path} "
        f"(tree {v.tree_digest[:12]}…): "
        f"{desc['inputs'][0]['name']} {desc['inputs'][0]['dtype']} "
        f"{desc['inputs'][0]['shape']} -> {desc['outputs'][0]['name']} "
        f"{desc['outputs'][0]['dtype']} {desc['outputs'][0]['shape']}; declares "
        f"{pre.precision} compute, weights {card.get('weight_compression', 'unknown')}, "
        f"layout {card.get('layout', 'unknown')}, parity policy {pre.parity_policy}; written "
        f"by coremltools {card.get('converter_version') or '(version not recorded)'} from "
        f"{card.get('source') or 'an unrecorded source'}")


def _rule_compile(ev: EvidenceView) -> Judgement:
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
        if r is None:
            # A .mlmodelc audited as given: placed by export.contract, compiled by nobody here.
            if not v.package.endswith(".mlmodelc") or v.package_tree_digest != v.tree_digest:
                problems.append(f"{prec}: no compile run, and {v.package} is not a given "
                                f".mlmodelc placed unchanged")
                continue
        elif r.timed_out or r.signal or r.returncode != 0:
            problems.append(f"{prec}: coremlc did not succeed ({r.to_json()})")
            continue
        if r is None:
            pass
        elif ev.has(f"coremlc_stderr_{prec}") and r.stderr_sha256 is not None:
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


def _fmt_db(x: float) -> str:
    return "+inf" if x == float("inf") else f"{x:.2f}"


def _rule_pair(ev: EvidenceView) -> Judgement:
    import math

    from verifylib.errors import EvidenceInvalid, PolicyInvalid
    from verifylib.numerics.pair import first_divergent_block
    from verifylib.numerics.parity import PAIR_POLICY, pair_floor
    from verifylib.numerics.scoring import load_policy
    try:
        d = PairEvidence.from_json(ev.json("pair"))
    except SchemaError as exc:
        return _malformed("pair", exc)
    try:
        packaged = load_policy(PAIR_POLICY)
    except PolicyInvalid as exc:
        return Judgement.failed(str(exc))
    stale = policy_file_problems(ev, "pair_policy", PAIR_POLICY)
    if stale or d.policy != {"id": packaged.id, "sha256": packaged.sha256,
                             "rules": packaged.rules}:
        return Judgement.failed(f"the stored {PAIR_POLICY} record is not the packaged resource")
    rules = packaged.rules
    fl = d.floor
    try:
        smin, cmin = pair_floor(rules, fl.ftype, fl.precision)
    except EvidenceInvalid as exc:
        return Judgement.failed(str(exc))
    if (smin, cmin) != (fl.snr_db_min, fl.cosine_min):
        return Judgement.failed(f"the stored floor (SNR {fl.snr_db_min}, cosine "
                                f"{fl.cosine_min}) is not {PAIR_POLICY}'s for {fl.ftype} / "
                                f"{fl.precision} ({smin}, {cmin})")
    if not (is_sha256(d.model_sha256) and is_sha256(d.encoder_tree_digest)):
        return Judgement.failed("malformed digest in the pair evidence")
    allowed = {f"program-{rules['program_execution']}", rules["runtime_execution"]}
    if d.execution not in allowed:
        return Judgement.failed(f"execution {d.execution!r} is not one {PAIR_POLICY} gates "
                                f"({sorted(allowed)})")
    source = _pair_source_problems(ev, d)
    if source:
        return Judgement.failed("; ".join(source))
    got = [i.input for i in d.inputs]
    if got != list(rules["inputs"]):
        return Judgement.failed(f"inputs {got} are not {PAIR_POLICY}'s {rules['inputs']}")
    problems, shown = [], []
    for i in d.inputs:
        first = first_divergent_block(i.block_snr_db, smin)
        if first != i.first_divergent_block:
            problems.append(f"{i.input}: the stored first divergent block "
                            f"{i.first_divergent_block} is not the first block below "
                            f"{smin:g} dB ({first})")
        text = f"{i.input}: SNR {_fmt_db(i.snr_db)} dB, cosine {i.cosine:.6f}"
        shown.append(text)
        bad = []
        if math.isnan(i.snr_db) or not i.snr_db >= smin:
            bad.append(f"SNR {_fmt_db(i.snr_db)} dB below {smin:g} dB")
        if math.isnan(i.cosine) or not i.cosine >= cmin:
            bad.append(f"cosine {i.cosine:.6f} below {cmin:g}")
        if bad:
            where = (f"; the encoders first diverge at encoder block {first}" if first is not None
                     else ("; no block could be tapped" if not i.block_snr_db
                           else "; every block is above the floor, the output is not"))
            problems.append(f"{i.input}: " + ", ".join(bad) + where)
    figures = (f"{PAIR_POLICY} floor for a {fl.ftype} file and a {fl.precision} encoder: "
               f"SNR >= {smin:g} dB, cosine >= {cmin:g}; " + "; ".join(shown))
    if problems:
        return Judgement.failed("the encoder does not compute the encoder of "
                                f"{d.model_file}: " + "; ".join(problems) + f" — {figures}")
    return Judgement.passed(f"{d.encoder} computes the encoder of {d.model_file} "
                            f"(sha256 {d.model_sha256[:12]}…): {figures}")


def _pair_source_problems(ev: EvidenceView, d: PairEvidence) -> list[str]:
    """List why a recorded program source (or its absence) does not fit the execution."""
    compiled = d.encoder.endswith(".mlmodelc")
    program = d.execution.startswith("program-")
    if d.program_source is None:
        if compiled and program:
            return ["a compiled model's program was executed without recording the model.mil "
                    "it was read from"]
        return []
    if not program:
        return [f"a program source is recorded for execution {d.execution!r}"]
    return program_source_problems(ev, d.program_source, d.encoder)


def program_read_from_text(ev: EvidenceView) -> bool:
    """Tell whether ``export.pair`` executed a compiled model's program read from its text.

    ``verify`` asks it to know the capability the gate needed
    (:func:`verifylib.evidence.gates.capability_of`): such a program runs on any OS.

    Parameters
    ----------
    ev : EvidenceView
        The gate's evidence.

    Returns
    -------
    bool
        False too when the document does not parse (the rule then fails it).
    """
    from verifylib.errors import EvidenceInvalid
    try:
        d = PairEvidence.from_json(ev.json("pair"))
    except (SchemaError, EvidenceInvalid, KeyError):
        return False
    return read_from_text(d.program_source)


RULES: dict[str, Callable[[EvidenceView], Judgement]] = {
    EXPORT_GGML_MODEL: _rule_ggml_model,
    EXPORT_CONTRACT: _rule_contract,
    EXPORT_COMPILE: _rule_compile,
    EXPORT_PAIR: _rule_pair,
}
"""Gate id to judge, for the gates of stage 02."""

TEXT_PROGRAM_READERS: dict[str, Callable[[EvidenceView], bool]] = {
    EXPORT_PAIR: program_read_from_text}
"""Gate id -> whether its evidence says the program was read from a ``model.mil``."""
