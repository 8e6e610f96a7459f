"""Pass rules of stage 05 (WER): GGML against the source model, and the hybrid (Core ML encoder) runs.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from verifylib.canonical import is_sha256
from verifylib.canonical import sha256_bytes as canonical_sha
from verifylib.evidence import identities
from verifylib.evidence.gates import Judgement, Status
from verifylib.evidence.rules.common import policy_file_problems
from verifylib.numerics.scoring import (WordCounts, corpus_wer, count_words, exact_corpus_wer,
                                        load_policy, policy_fraction)
from verifylib.runtime import contracts

WER_POLICY_ID = "wer-v1"


def ggml_run_problems(doc: dict, stderr_of) -> list[str]:
    """Problems with the GGML runs behind ``wer.ggml_vs_source`` (re-derived from streams).

    Every run must come from a build without Core ML (``COREML = 0`` on its own stderr),
    exit 0 without a signal, and have used a model path with no ``.mlmodelc`` beside it.
    """
    problems = []
    if doc.get("mlmodelc_beside") is not False:
        problems.append("the GGML runs' model had a .mlmodelc beside it (or it was not checked)")
    for c in doc["clips"]:
        run = c["ggml_run"]
        stderr = stderr_of(c["id"])
        if canonical_sha(stderr) != run["stderr_sha256"]:
            problems.append(f"{c['id']}: stored GGML stderr is not the run's stream")
            continue
        if run["returncode"] != 0 or run["signal"]:
            problems.append(f"{c['id']}: GGML run ended {run['signal'] or 'exit ' + str(run['returncode'])}")
        coreml = contracts.system_info_coreml(stderr.decode("utf-8", "replace"))
        if coreml != 0:
            problems.append(f"{c['id']}: GGML run's system_info does not show "
                            f"{contracts.COREML_OFF} (found {coreml})")
    return problems


def _wer_policy_problems(doc: Any) -> list[str]:
    # The evidence's copy of wer-v1 is only shown; the thresholds come from the package.
    packaged = load_policy(WER_POLICY_ID)
    if not isinstance(doc, Mapping):
        return ["evidence is not a mapping"]
    if doc.get("policy") != packaged.rules or doc.get("policy_sha256") != packaged.sha256:
        return [f"the stored {WER_POLICY_ID} policy is not the packaged resource (sha256 "
                f"{doc.get('policy_sha256')} vs {packaged.sha256})"]
    return []


def _rule_ggml_vs_source(ev) -> Judgement:
    doc = ev.json("wer")
    problems = _wer_policy_problems(doc)
    if ev.has("policy"):
        problems += policy_file_problems(ev, "policy", WER_POLICY_ID)
    problems += ggml_run_problems(doc, lambda cid: ev.bytes(f"ggml_stderr_{cid}"))
    if problems:
        return Judgement(Status.FAIL, "; ".join(problems))
    j = judge_ggml_vs_source(doc)
    if not j.ok:
        return j
    return Judgement.passed(j.detail + "; every GGML run showed " + contracts.COREML_OFF
                            + " with no .mlmodelc beside its model")


def _classifier(ev):
    def classify(clip):
        stdout = ev.bytes(f"hybrid_stdout_{clip['id']}") if clip["public"] else None
        c = contracts.classify_positive(clip["run"], ev.bytes(f"hybrid_stderr_{clip['id']}"),
                                        stdout)
        return Judgement.of(c.ok, c.detail)
    return classify


def hybrid_binding_problems(doc: Any, coreml_sha256: Any) -> list[str]:
    """The hybrid runs must be launches of the Core ML binary that passed ``build.coreml``.

    ``coreml_sha256`` is the gate's bound identity ``binary.coreml.sha256`` (which the
    validator checks against the build's); each clip's run must cite a ledger launch of a
    binary with that digest.
    """
    if not isinstance(doc, Mapping):
        return ["evidence is not a mapping"]
    if not is_sha256(coreml_sha256) or doc.get("binary_sha256") != coreml_sha256:
        return [f"hybrid runs bound to binary {doc.get('binary_sha256')!r}, not the Core ML "
                f"build's {coreml_sha256!r}"]
    out = []
    for c in doc.get("clips") or []:
        launch = (c.get("run") or {}).get("launch") if isinstance(c, Mapping) else None
        if not isinstance(launch, Mapping) or launch.get("binary_sha256") != coreml_sha256:
            out.append(f"{c.get('id') if isinstance(c, Mapping) else c}: the run is not a "
                       f"recorded launch of the Core ML binary")
    return out


def _rule_hybrid(ev) -> Judgement:
    doc = ev.json("hybrid")
    problems = _wer_policy_problems(doc)
    problems += hybrid_binding_problems(doc, ev.identities.get(identities.BINARY_COREML))
    if problems:
        return Judgement(Status.FAIL, "; ".join(problems))
    return judge_hybrid(doc, _classifier(ev))


RULES: dict[str, Callable[[Any], Judgement]] = {
    "wer.ggml_vs_source": _rule_ggml_vs_source,
    "wer.hybrid": _rule_hybrid,
}
"""Gate id to judge, for the gates of stage 05."""


def _wer_v1_section(evidence: Mapping[str, Any], section: str):
    """The wer-v1 rules of one gate and the clips, or why the evidence cannot be judged."""
    policy = evidence["policy"]
    if policy.get("id") != "wer-v1":
        return None, None, f"unexpected policy {policy.get('id')!r}"
    if not evidence["clips"]:
        return None, None, "no fixture was transcribed"
    return policy[section], evidence["clips"], None


def _stored_count_problems(clip: Mapping[str, Any], counts: Mapping[str, tuple[str, str]],
                           empties: Mapping[str, str]) -> list[str]:
    # A public clip stores its normalized texts: its counts and empty flags are recomputed
    # from them, so an edited count or flag cannot pass.
    out = []
    for key, (ref, hyp) in counts.items():
        if count_words(clip[ref], clip[hyp]).as_dict() != clip[key]:
            out.append(f"{clip['id']}: stored {key} counts do not match its texts")
    for flag, text in empties.items():
        if (clip[text].strip() == "") != bool(clip[flag]):
            out.append(f"{clip['id']}: stored {flag} flag contradicts the text")
    return out


def judge_ggml_vs_source(evidence: Mapping[str, Any]) -> Judgement:
    """The wer-v1 rule for ``wer.ggml_vs_source``, on stored evidence.

    Parameters
    ----------
    evidence : mapping
        ``policy`` (the wer-v1 resource), ``clips``: per clip ``source`` and ``ggml`` counts
        against the reference, ``source_empty`` and ``ggml_empty`` flags, and for public
        clips the normalized ``reference``, ``source_text`` and ``ggml_text`` (their counts
        are recomputed and must agree).

    Returns
    -------
    Judgement
        PASS or FAIL, with the figures behind the decision.
    """
    rules, clips, refusal = _wer_v1_section(evidence, "ggml_vs_source")
    if refusal:
        return Judgement.failed(refusal)
    problems = []
    for c in clips:
        if "reference" in c:
            problems += _stored_count_problems(c, {"source": ("reference", "source_text"),
                                                   "ggml": ("reference", "ggml_text")},
                                               {"source_empty": "source_text",
                                                "ggml_empty": "ggml_text"})
    if problems:
        return Judgement.failed("; ".join(problems))
    src = corpus_wer([c["source"] for c in clips])
    ggml = corpus_wer([c["ggml"] for c in clips])
    limit = src + rules["max_corpus_wer_delta"]
    empties = [c["id"] for c in clips if c["ggml_empty"] and not c["source_empty"]]
    figures = (f"corpus WER vs references: GGML {ggml:.4f}, HF source {src:.4f} "
               f"(limit {limit:.4f}) over {len(clips)} clip(s)")
    if rules.get("no_empty_where_source_nonempty") and empties:
        return Judgement.failed(f"GGML transcript empty where the source's is not: {empties}; {figures}")
    # Decided on exact rationals, not on the floats shown: in binary floating point
    # 7/20 + 0.05 < 8/20, so a corpus exactly at its limit would fail.
    exact_limit = (exact_corpus_wer([c["source"] for c in clips])
                   + policy_fraction(rules["max_corpus_wer_delta"]))
    if not exact_corpus_wer([c["ggml"] for c in clips]) <= exact_limit:
        return Judgement.failed(f"GGML corpus WER above the limit; {figures}")
    return Judgement.passed(figures)


def judge_hybrid(evidence: Mapping[str, Any],
                 classify: Callable[[Mapping[str, Any]], Judgement]) -> Judgement:
    """The wer-v1 rule for ``wer.hybrid`` (Core ML encoder inside whisper-cli).

    Parameters
    ----------
    evidence : mapping
        ``policy`` (wer-v1) and ``clips``: per clip the ``source``, ``ggml`` and ``hybrid``
        counts against the reference, ``hybrid_vs_ggml`` counts, ``hybrid_empty``, and for
        public clips the normalized texts (``reference``, ``ggml_text``, ``hybrid_text``),
        whose counts are recomputed.
    classify : callable
        Re-judges one clip's hybrid run from its stored streams (the four load conditions
        of docs/runtime-contract.md §2.3); returns a :class:`~verifylib.evidence.gates.Judgement`.

    Returns
    -------
    Judgement
        PASS iff every hybrid run met the four conditions, no hybrid transcript is empty,
        the hybrid corpus WER is at most min(GGML, source) + 0.05, and no clip's
        hybrid-vs-GGML WER exceeds 0.5 (the detector for a silent nil prediction).
    """
    rules, clips, refusal = _wer_v1_section(evidence, "hybrid")
    if refusal:
        return Judgement.failed(refusal)
    problems = []
    for c in clips:
        if "reference" in c:
            problems += _stored_count_problems(
                c, {"hybrid": ("reference", "hybrid_text"), "ggml": ("reference", "ggml_text"),
                    "hybrid_vs_ggml": ("ggml_text", "hybrid_text")},
                {"hybrid_empty": "hybrid_text"})
        if rules.get("four_load_conditions_every_run"):
            load = classify(c)
            if not load.ok:
                problems.append(f"{c['id']}: hybrid run fails the load conditions: {load.detail}")
    if problems:
        return Judgement.failed("; ".join(problems))
    empty = [c["id"] for c in clips if c["hybrid_empty"]]
    if rules.get("all_nonempty") and empty:
        return Judgement.failed(f"hybrid transcript empty for {empty} (a silent Core ML prediction failure)")
    hyb = corpus_wer([c["hybrid"] for c in clips])
    ggml = corpus_wer([c["ggml"] for c in clips])
    src = corpus_wer([c["source"] for c in clips])
    limit = min(ggml, src) + rules["max_corpus_wer_delta_vs_best"]
    # Exact rationals decide (see judge_ggml_vs_source); the floats are only shown.
    worst = max(clips, key=lambda c: exact_corpus_wer([c["hybrid_vs_ggml"]]))
    worst_wer = WordCounts(**worst["hybrid_vs_ggml"]).wer
    figures = (f"corpus WER vs references: hybrid {hyb:.4f}, GGML {ggml:.4f}, source {src:.4f} "
               f"(limit {limit:.4f}); largest clip hybrid-vs-GGML WER {worst_wer:.4f} "
               f"({worst['id']}) over {len(clips)} clip(s)")
    if exact_corpus_wer([worst["hybrid_vs_ggml"]]) > policy_fraction(rules["max_clip_wer_vs_ggml"]):
        return Judgement.failed(f"clip {worst['id']} diverges from GGML beyond {rules['max_clip_wer_vs_ggml']}; {figures}")
    exact_limit = (min(exact_corpus_wer([c["ggml"] for c in clips]),
                       exact_corpus_wer([c["source"] for c in clips]))
                   + policy_fraction(rules["max_corpus_wer_delta_vs_best"]))
    if not exact_corpus_wer([c["hybrid"] for c in clips]) <= exact_limit:
        return Judgement.failed(f"hybrid corpus WER above the limit; {figures}")
    return Judgement.passed(figures)
