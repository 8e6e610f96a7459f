"""Pass rules of stage 04 (parity).

Each variant's ML program and compiled model against the frozen SNR + cosine policy.
"""

from __future__ import annotations

import math
from dataclasses import asdict
from typing import Any, Callable, Mapping, Sequence

from verifylib.errors import ContractBroken, EvidenceInvalid, PolicyInvalid
from verifylib.evidence.fields import SchemaError
from verifylib.evidence.gates import (
    PARITY_PROGRAM,
    PARITY_PROGRAM_FP16,
    PARITY_RUNTIME,
    PARITY_RUNTIME_FP16,
    Judgement,
    Status,
)
from verifylib.evidence.judging import (
    policy_file_problems,
    program_source_problems,
    read_from_text,
)
from verifylib.evidence.parity.result import ATTRIBUTION
from verifylib.evidence.parity.schema import (
    AttributionEvidence,
    Measurement,
    ModuleSummary,
    ParityEvidence,
)
from verifylib.evidence.records import EvidenceView
from verifylib.numerics.attribution import CEILING_DB, ModuleDrift
from verifylib.numerics.drift import derive, module_summaries, rank
from verifylib.numerics.parity import (
    PAIR_POLICY,
    POLICY_OF_VARIANT,
    as_float,
    choose_parity_policy,
    compare,
    cosine_from_sums,
    pair_floor,
    snr_from_energies,
)
from verifylib.numerics.scoring import load_policy


def chosen_policy(variant: str, doc: ParityEvidence | None) -> tuple[str, list[str]]:
    """Return the policy a parity gate is judged under, and any problem with the choice.

    That is the variant's policy, or the one its recorded choice re-derives (an encoder
    audited as given, a ggml-file source).

    Parameters
    ----------
    variant : str
        ``fp32`` or ``fp16``.
    doc : ParityEvidence or None
        The gate's parity record, if it parses.

    Returns
    -------
    (policy_id, problems)
    """
    default = POLICY_OF_VARIANT[variant]
    if doc is None or doc.choice is None:
        return default, []
    if variant != "fp32":
        return default, [f"a {variant} variant records a policy choice; only the audited "
                         "encoder's gates choose one"]
    c = doc.choice
    try:
        again = choose_parity_policy(c.precision, c.source_ftype)
    except EvidenceInvalid as exc:
        return default, [f"the recorded policy choice is malformed: {exc}"]
    if again.policy_id != c.policy_id:
        return again.policy_id, [f"the recorded choice {c.policy_id} is not what its declared "
                                 f"precision {c.precision} and source ftype {c.source_ftype} "
                                 f"choose ({again.policy_id})"]
    return again.policy_id, []


def _parity_rule(variant: str, kind: str) -> Callable[[Any], Judgement]:
    def judge(ev: EvidenceView) -> Judgement:
        problems = []
        try:
            first: ParityEvidence | None = ParityEvidence.from_json(ev.json("parity"))
        except SchemaError:
            first = None
        policy_id, chosen = chosen_policy(variant, first)
        problems += chosen
        for name in ev.names():
            if name.startswith("policy_"):
                problems += policy_file_problems(ev, name, policy_id)
        try:
            doc: ParityEvidence | None = ParityEvidence.from_json(ev.json("parity"))
        except SchemaError as exc:
            doc = None
            problems.append(_refusal(exc))
        if ev.has("drift") and not isinstance(ev.json("drift"), Mapping):
            problems.append("the drift record is not a mapping")
        if doc is not None:
            problems += stored_outputs_problems(doc, ev)
            problems += _source_problems(doc, ev)
        if ev.has(ATTRIBUTION):
            problems += [f"attribution: {p}" for p in attribution_problems(ev.json(ATTRIBUTION))]
        if problems or doc is None:
            return Judgement(Status.FAIL, "; ".join(problems))
        return judge_parity(doc, policy_id, kind)
    judge.__doc__ = f"Judge {variant} {kind} parity under its variant's or its chosen policy."
    return judge


RULES: dict[str, Callable[[EvidenceView], Judgement]] = {
    PARITY_PROGRAM: _parity_rule("fp32", "program"),
    PARITY_RUNTIME: _parity_rule("fp32", "runtime"),
    PARITY_PROGRAM_FP16: _parity_rule("fp16", "program"),
    PARITY_RUNTIME_FP16: _parity_rule("fp16", "runtime"),
}
"""Gate id to judge, for the gates of stage 04."""


def _from_text(doc: ParityEvidence) -> bool:
    """Tell whether the candidate is a compiled model's program read from its ``model.mil``."""
    return read_from_text((doc.candidate or {}).get("program_source"))


def _source_problems(doc: ParityEvidence, ev: EvidenceView) -> list[str]:
    """List why a recorded program source does not belong to this candidate."""
    source = (doc.candidate or {}).get("program_source")
    if source is None:
        return []
    if doc.kind != "program":
        return [f"a {doc.kind} candidate records a program source"]
    return program_source_problems(ev, source, doc.artifact.path)


def program_read_from_text(ev: EvidenceView) -> bool:
    """Tell whether a parity gate executed a compiled model's program read from its text.

    ``verify`` asks it to know the capability the gate needed
    (:func:`verifylib.evidence.gates.capability_of`): such a program runs on any OS.

    Parameters
    ----------
    ev : EvidenceView
        The gate's evidence.

    Returns
    -------
    bool
        False too when the record does not parse (the rule then fails it).
    """
    try:
        doc = ParityEvidence.from_json(ev.json("parity"))
    except (SchemaError, EvidenceInvalid, KeyError):
        return False
    return _from_text(doc)


def _refusal(exc: SchemaError) -> str:
    return f"the parity record does not parse: {exc}"


def _parsed(doc: ParityEvidence | Mapping[str, Any]) -> ParityEvidence:
    return doc if isinstance(doc, ParityEvidence) else ParityEvidence.from_json(doc)


def _same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b


def _fmt_db(v: float) -> str:
    return "inf" if v == math.inf else ("-inf" if v == -math.inf else f"{v:.2f}")


def recheck_measurement(m: Measurement | Mapping[str, Any]) -> tuple[float, float, list[str]]:
    """Recompute SNR and cosine of one stored measurement from its sums.

    Parameters
    ----------
    m : Measurement or mapping
        The measurement (a mapping is read with :meth:`Measurement.from_json`).

    Returns
    -------
    (snr_db, cosine, problems)
        ``problems`` names any stored figure that disagrees with its sums.

    Raises
    ------
    verifylib.evidence.fields.SchemaError
        If ``m`` is a mapping that does not parse.
    """
    if not isinstance(m, Measurement):
        m = Measurement.from_json(m)
    met = m.metrics
    snr = snr_from_energies(met.signal_energy, met.noise_energy)
    cos = cosine_from_sums(met.dot, met.signal_energy, met.candidate_energy)
    problems = []
    if not _same(snr, met.snr_db):
        problems.append(f"{m.label}: stored SNR {met.snr_db} disagrees with its sums "
                        f"({snr})")
    if not _same(cos, met.cosine):
        problems.append(f"{m.label}: stored cosine {met.cosine} disagrees with its sums "
                        f"({cos})")
    return snr, cos, problems


def _gated_target(doc: ParityEvidence, rules: dict[str, Any], policy_id: str,
                  kind: str) -> tuple[str, str, float, float] | Judgement:
    """Return the gated measurement's input and execution and the policy's SNR and cosine minimums.

    Or the FAIL of a document the policy does not apply to (a pair policy without a
    recorded quantized source, a variant that is not the policy's, a floor it has not).
    """
    if policy_id == PAIR_POLICY:
        # A quantized source: the gated figure is the fixture through the program, against
        # the ftype's floor (the choice record names the ftype and the precision).
        if doc.choice is None or doc.choice.source_ftype is None:
            return Judgement.failed(f"{PAIR_POLICY} applies only to a recorded quantized "
                                    "source")
        want_input = rules["inputs"][0]
        want_exec = rules[f"{kind}_execution"]
        try:
            smin, cmin = pair_floor(rules, doc.choice.source_ftype, doc.choice.precision)
        except EvidenceInvalid as exc:
            return Judgement.failed(str(exc))
    else:
        # An audited encoder's slot is fp32 whatever it declares: its recorded choice
        # (re-derived above and by verify) names the policy instead of the variant.
        if doc.choice is None and doc.variant != rules["variant"]:
            return Judgement.failed(f"variant {doc.variant!r} is not {rules['variant']!r}")
        want_input = rules["gated"]["input"]
        want_exec = rules["gated"][f"{kind}_execution"]
        smin, cmin = float(rules["pass"]["snr_db_min"]), float(rules["pass"]["cosine_min"])
    if kind == "program" and (doc.artifact.path or "").endswith(".mlmodelc") \
            and not _from_text(doc):
        # A compiled model audited as given, on macOS: Core ML runs it.
        want_exec = rules.get("runtime_execution") or rules["gated"]["runtime_execution"]
    return want_input, want_exec, smin, cmin


def judge_parity(evidence: ParityEvidence | Mapping[str, Any], policy_id: str,
                 kind: str) -> Judgement:
    """Judge a stored parity record by the fp32-v1 / fp16-v1 rule.

    Parameters
    ----------
    evidence : ParityEvidence or mapping
        ``policy`` (id, sha256, rules), ``variant``, ``artifact`` (``tree_digest`` measured
        and ``exported_tree_digest`` bound by the export stage) and ``measurements``: a
        list of ``{input, execution, metrics}`` whose metrics hold the float64 sums. A
        mapping is read with :meth:`ParityEvidence.from_json`; one that does not parse is
        a FAIL naming the field.
    policy_id : str
        The policy the gate must be judged under (``fp32-v1`` or ``fp16-v1``).
    kind : str
        ``"program"`` (MIL-program executor) or ``"runtime"`` (Core ML).

    Returns
    -------
    Judgement
        PASS or FAIL under the policy, with the figures behind the decision.
    """
    try:
        packaged = load_policy(policy_id)
    except PolicyInvalid as exc:
        return Judgement.failed(str(exc))
    try:
        doc = _parsed(evidence)
    except SchemaError as exc:
        return Judgement.failed(_refusal(exc))
    pol = doc.policy
    if pol.id != policy_id:
        return Judgement.failed(f"evidence was measured under policy {pol.id!r}, "
                                f"not {policy_id}")
    if pol.sha256 != packaged.sha256 or pol.rules != packaged.rules:
        return Judgement.failed(f"the stored {policy_id} record differs from the "
                                f"packaged resource "
                                f"(sha256 {pol.sha256} vs {packaged.sha256})")
    target = _gated_target(doc, packaged.rules, policy_id, kind)
    if isinstance(target, Judgement):
        return target
    want_input, want_exec, smin, cmin = target
    problems: list[str] = []
    art = doc.artifact
    if not art.tree_digest or art.tree_digest != art.exported_tree_digest:
        problems.append(f"the measured artifact (tree digest {art.tree_digest}) is not "
                        f"the exported one ({art.exported_tree_digest})")
    gated = [m for m in doc.measured() if m.input == want_input and m.execution == want_exec]
    if len(gated) != 1:
        return Judgement.failed(f"expected exactly one {want_input}/{want_exec} "
                                f"measurement, found "
                                f"{len(gated)}")
    extra = []
    for m in doc.measured():
        snr, cos, probs = recheck_measurement(m)
        problems += probs
        if m is not gated[0]:
            extra.append(f"{m.label}: SNR {_fmt_db(snr)} dB, cosine {cos:.9f}")
    snr, cos, _ = recheck_measurement(gated[0])
    met = gated[0].metrics
    figures = (f"{policy_id}, {want_input}/{want_exec}: SNR {_fmt_db(snr)} dB (min {smin:g}), "
               f"cosine {cos:.9f} (min {cmin:g}), max |err| "
               f"{met.max_abs_error:.3g}, mean |err| {met.mean_abs_error:.3g}")
    if extra:
        figures += "; beside it: " + "; ".join(extra)
    if not met.finite:
        problems.append("the candidate output holds non-finite values")
    if not snr >= smin:
        problems.append(f"SNR {_fmt_db(snr)} dB below {smin:g} dB")
    if not cos >= cmin:
        problems.append(f"cosine {cos:.9f} below {cmin:g}")
    if problems:
        return Judgement.failed("; ".join(problems) + f" — {figures}")
    return Judgement.passed(figures)


def _agree(a: Any, b: float) -> bool:
    try:
        x = as_float(a)
    except EvidenceInvalid:
        return False
    if math.isnan(x) or math.isnan(b) or math.isinf(x) or math.isinf(b):
        return (math.isnan(x) and math.isnan(b)) or x == b
    # The sums are re-taken on another machine's BLAS: agree to 1e-9 relative.
    return abs(x - b) <= 1e-9 * max(abs(x), abs(b)) + 1e-300


def stored_outputs_problems(doc: ParityEvidence | Mapping[str, Any],
                            ev: EvidenceView) -> list[str]:
    """Check the stored output arrays against the measurements that cite them.

    When a parity gate cites its candidate's outputs and the reference's outputs
    (``outputs`` / ``reference_outputs`` ``.npz`` evidence), every stored measurement of
    the gated execution is re-taken from those arrays: its sums must agree. So the
    arrays a researcher opens are the ones the gate was judged on.

    Parameters
    ----------
    doc : ParityEvidence or mapping
        The parity record (``measurements``, ``kind``); a mapping is read with
        :meth:`ParityEvidence.from_json` (one that does not parse is a problem).
    ev : verifylib.evidence.records.EvidenceView
        The gate's evidence.

    Returns
    -------
    list of str
        Problems (empty when the arrays agree, or when the gate cites none).
    """
    has_out, has_ref = ev.has("outputs"), ev.has("reference_outputs")
    if not has_out and not has_ref:
        return []
    if has_out != has_ref:
        return ["the gate cites only one of its candidate's and the reference's outputs"]
    try:
        parsed = _parsed(doc)
    except SchemaError as exc:
        return [_refusal(exc)]
    out, ref = ev.arrays("outputs"), ev.arrays("reference_outputs")
    compiled_only = (parsed.artifact.path or "").endswith(".mlmodelc") and not _from_text(parsed)
    execution = "float32" if parsed.kind == "program" and not compiled_only else "coreml-all"
    problems = []
    seen = 0
    for m in parsed.measured():
        if m.execution != execution:
            continue
        kind = m.input
        if kind not in out or kind not in ref:
            problems.append(f"no stored {kind} output for the {kind}/{execution} measurement")
            continue
        seen += 1
        try:
            again = compare(ref[kind], out[kind])
        except ContractBroken as exc:
            problems.append(f"stored {kind} outputs: {exc}")
            continue
        for key in ("signal_energy", "noise_energy", "dot", "candidate_energy"):
            stored = getattr(m.metrics, key)
            if not _agree(stored, getattr(again, key)):
                problems.append(f"{kind}/{execution}: stored {key} {stored} is not what "
                                f"the stored outputs give ({getattr(again, key)!r})")
                break
    if not seen:
        problems.append(f"the stored outputs back no {execution} measurement")
    return problems


# ----------------------------------------------------------------------------- attribution

def attribution_problems(doc: AttributionEvidence | Mapping[str, Any] | Any) -> list[str]:
    """List the problems of a stored attribution document (empty when it is consistent).

    Every ΔSNR, the ``top`` and ``precision_top`` rankings and the per-module summary are
    re-derived from the ops' SNRs and input lists
    (:func:`verifylib.numerics.drift.derive`, :func:`~verifylib.numerics.drift.rank`,
    :func:`~verifylib.numerics.drift.module_summaries`), and the counts it states from its
    ops; a document that disagrees is refused.

    Parameters
    ----------
    doc : AttributionEvidence or Any
        The document, typed or as decoded JSON (read with
        :meth:`AttributionEvidence.from_json`).

    Returns
    -------
    list of str
        One problem for a document that does not parse (the schema's error), lists an op
        twice or used another ceiling than :data:`verifylib.numerics.attribution.CEILING_DB`;
        otherwise one per inconsistency found (empty when none).
    """
    try:
        att = doc if isinstance(doc, AttributionEvidence) else AttributionEvidence.from_json(doc)
    except SchemaError as exc:
        return [f"the attribution does not parse: {exc}"]
    names = [o.name for o in att.ops]
    if len(set(names)) != len(names):
        return ["the attribution lists an op twice"]
    produced = set(names)
    inputs = {n for o in att.ops for n in o.inputs if n not in produced}
    if att.ceiling_db != CEILING_DB:
        return [f"the attribution used a ceiling of {att.ceiling_db} dB, not {CEILING_DB}"]
    derived = derive(att.ops, inputs, att.input_precision)
    problems = []
    # The counts a reader is told (how much of the program conversion drift covers) must
    # be the ops' own: a document claiming more mapped ops than it compared is refused.
    counts = (("unmapped", att.stated_unmapped, att.executed - att.mapped),
              ("mapped", att.stated_mapped, att.mapped),
              ("executed", att.stated_executed, att.executed))
    for key, stated, want in counts:
        if stated is not None and stated != want:
            problems.append(f"the attribution says {key} {stated!r}; its ops give {want}")
    for a, b in zip(att.ops, derived):
        for key in ("delta_snr_db", "precision_delta_snr_db"):
            x, y = getattr(a, key), getattr(b, key)
            if (x is None) != (y is None) or (x is not None and not _close(x, y)):
                problems.append(f"op {a.name}: stored {key} {x} does not follow from the "
                                f"SNRs ({y})")
                break
    if [o.name for o in att.top] != [o.name for o in rank(att.ops, "delta_snr_db")]:
        problems.append("top is not the ops ranked by conversion ΔSNR")
    if [o.name for o in att.precision_top] != \
            [o.name for o in rank(att.ops, "precision_delta_snr_db")]:
        problems.append("precision_top is not the ops ranked by precision ΔSNR")
    again = module_summaries(att.ops)
    if [asdict(m) for m in att.modules] != [asdict(m) for m in again] and \
            not _close_modules(att.modules, again):
        problems.append("the per-module summary does not follow from the ops")
    return problems


def _close(a: float, b: float) -> bool:
    if math.isinf(a) or math.isinf(b):
        return a == b
    return abs(a - b) <= 1e-9 * max(1.0, abs(a), abs(b))


def _close_modules(a: Sequence[ModuleSummary], b: Sequence[ModuleDrift]) -> bool:
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        dx, dy = asdict(x), asdict(y)
        for k in dx:
            if isinstance(dx[k], float) and isinstance(dy[k], float):
                if not _close(dx[k], dy[k]):
                    return False
            elif dx[k] != dy[k]:
                return False
    return True

TEXT_PROGRAM_READERS: dict[str, Callable[[EvidenceView], bool]] = {
    PARITY_PROGRAM: program_read_from_text}
"""Gate id -> whether its evidence says the program was read from a ``model.mil``."""
