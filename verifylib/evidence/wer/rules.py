"""Pass rules of stage 05 (WER).

GGML against the source model, and the hybrid (Core ML encoder) runs.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping, Sequence

from verifylib.canonical import is_sha256
from verifylib.canonical import sha256_bytes as canonical_sha
from verifylib.evidence import identities
from verifylib.evidence.fields import SchemaError
from verifylib.evidence.gates import (
    WER_GGML_VS_SOURCE,
    WER_HYBRID,
    WER_SEAM,
    Judgement,
    Status,
)
from verifylib.evidence.judging import policy_file_problems, seam_launch_problems
from verifylib.evidence.records import EvidenceView
from verifylib.evidence.run_record import RunRecord
from verifylib.evidence.wer.schema import (
    Counts,
    GgmlVsSourceRules,
    HybridClip,
    HybridEvidence,
    WerClip,
    WerEvidence,
    audio_evidence,
)
from verifylib.evidence.wer.seam_schema import SEAM_CAUSES, SeamWerClip, SeamWerEvidence
from verifylib.numerics.scoring import (
    RATE_OF,
    WordCounts,
    corpus_wer,
    count_units,
    exact_corpus_wer,
    load_policy,
    policy_fraction,
    scoring_for,
)
from verifylib.runtime import contracts
from verifylib.runtime.contracts.seam import is_seam_stream

WER_POLICY_IDS = ("wer-v1", "wer-v2", "wer-v3")
"""The WER policies a run may be judged under: wer-v1 (English normalizer, words, every
fixture) for the runs made before wave 4, wer-v2 (scoring per language), wer-v3 (wer-v2
with the decoding pin as data, which every run must carry) since."""


def _wer_doc(doc: WerEvidence | Mapping[str, Any]) -> WerEvidence:
    return doc if isinstance(doc, WerEvidence) else WerEvidence.from_json(doc)


def _hybrid_doc(doc: HybridEvidence | Mapping[str, Any]) -> HybridEvidence:
    return doc if isinstance(doc, HybridEvidence) else HybridEvidence.from_json(doc)


def _refusal(exc: SchemaError, name: str) -> str:
    return f"the {name} record does not parse: {exc}"


def ggml_run_problems(doc: WerEvidence | Mapping[str, Any], stderr_of: Callable[[str], bytes],
                      detect_stderr_of: Callable[[str], bytes] | None = None) -> list[str]:
    """Problems with the GGML runs behind ``wer.ggml_vs_source`` (re-derived from streams).

    Every run must come from a build without Core ML (``COREML = 0`` on its own stderr),
    exit 0 without a signal, and have used a model path with no ``.mlmodelc`` beside it.
    A clip's language detection (``-dl``), where recorded, is held to the same and its
    recorded language to the one its own log names.

    Parameters
    ----------
    doc : WerEvidence or mapping
        The ``wer`` document (a mapping is read with :meth:`WerEvidence.from_json`; one
        that does not parse is the one problem returned).
    stderr_of : callable
        Clip id -> the stored stderr bytes of its GGML run.
    detect_stderr_of : callable, optional
        Clip id -> the stored stderr bytes of its ``-dl`` launch; needed only when a
        clip records one.

    Returns
    -------
    list of str
        Problems (empty when every run is a clean GGML run).
    """
    try:
        wer = _wer_doc(doc)
    except SchemaError as exc:
        return [_refusal(exc, "wer")]
    problems = []
    if wer.mlmodelc_beside is not False:
        problems.append("the GGML runs' model had a .mlmodelc beside it (or it was not checked)")
    for c in wer.clips:
        if c.ggml_run is None:
            problems.append(f"{c.id}: no GGML run is recorded")
        else:
            problems += _clean_ggml_run(f"{c.id}: GGML run", c.ggml_run, stderr_of(c.id))
        if (c.detected is None) != (c.detect_run is None):
            problems.append(f"{c.id}: a detected language without its -dl launch, or the "
                            "reverse")
        elif c.detect_run is not None and c.detected is not None:
            if detect_stderr_of is None:
                problems.append(f"{c.id}: the -dl launch's stderr was not given")
                continue
            stderr = detect_stderr_of(c.id)
            got = _clean_ggml_run(f"{c.id}: -dl launch", c.detect_run, stderr)
            heard = contracts.parse_detected_language(stderr.decode("utf-8", "replace"))
            if not got and (heard is None or heard[0] != c.detected.ggml.language):
                got.append(f"{c.id}: the -dl launch logged {heard}, the record says "
                           f"{c.detected.ggml.language!r}")
            problems += got
    return problems


def _clean_ggml_run(label: str, run: RunRecord, stderr: bytes) -> list[str]:
    """Problems with one GGML launch: its stream, its ending, COREML = 0."""
    if canonical_sha(stderr) != run.stderr_sha256:
        return [f"{label}: stored stderr is not the run's stream"]
    problems = []
    if run.returncode != 0 or run.signal:
        problems.append(f"{label} ended {run.signal or 'exit ' + str(run.returncode)}")
    coreml = contracts.system_info_coreml(stderr.decode("utf-8", "replace"))
    if coreml != 0:
        problems.append(f"{label}'s system_info does not show {contracts.COREML_OFF} "
                        f"(found {coreml})")
    return problems


def audio_problems(doc: WerEvidence, has: Callable[[str], bool],
                   read: Callable[[str], bytes]) -> list[str]:
    """List why the audio a run publishes is not the audio its clips were scored on.

    A public clip may cite its 16 kHz file (runs made before it was published do not);
    where it does, the bytes must be the intake's ``pcm16k_sha256``. A private clip's
    audio must never be published.

    Parameters
    ----------
    doc : WerEvidence
        The ``wer`` document.
    has, read : callable
        Whether the gate cites an evidence name, and its verified bytes.

    Returns
    -------
    list of str
        Problems (empty when every published clip is the one both legs heard).
    """
    out = []
    for c in doc.clips:
        name = audio_evidence(c.id)
        if not has(name):
            continue
        if not c.public:
            out.append(f"{c.id}: the audio of a private clip is published")
            continue
        want = (c.intake or {}).get("pcm16k_sha256")
        got = canonical_sha(read(name))
        if want != got:
            out.append(f"{c.id}: the published audio (sha256 {got}) is not the file both "
                       f"legs heard ({want})")
    return out


def _wer_policy_problems(doc: WerEvidence | HybridEvidence) -> list[str]:
    # The evidence's copy of the policy is only shown; the thresholds come from the package.
    pid = doc.policy.id
    if pid not in WER_POLICY_IDS:
        return [f"unexpected policy {pid!r} (this version judges {', '.join(WER_POLICY_IDS)})"]
    packaged = load_policy(pid)
    if doc.policy.to_json() != packaged.rules or doc.policy_sha256 != packaged.sha256:
        return [f"the stored {pid} policy is not the packaged resource (sha256 "
                f"{doc.policy_sha256} vs {packaged.sha256})"]
    return []


def _parse_failure(raw: Any, exc: SchemaError, name: str) -> Judgement:
    if not isinstance(raw, Mapping):
        return Judgement(Status.FAIL, "evidence is not a mapping")
    return Judgement(Status.FAIL, _refusal(exc, name))


def _rule_ggml_vs_source(ev: EvidenceView) -> Judgement:
    raw = ev.json("wer")
    try:
        doc = WerEvidence.from_json(raw)
    except SchemaError as exc:
        return _parse_failure(raw, exc, "wer")
    problems = _wer_policy_problems(doc)
    if ev.has("policy"):
        problems += policy_file_problems(ev, "policy", doc.policy.id)
    problems += ggml_run_problems(doc, lambda cid: ev.bytes(f"ggml_stderr_{cid}"),
                                  lambda cid: ev.bytes(f"ggml_detect_stderr_{cid}"))
    problems += audio_problems(doc, ev.has, ev.bytes)
    if problems:
        return Judgement(Status.FAIL, "; ".join(problems))
    j = judge_ggml_vs_source(doc)
    if not j.ok:
        return j
    return Judgement.passed(j.detail + "; every GGML run showed " + contracts.COREML_OFF
                            + " with no .mlmodelc beside its model")


def _classifier(ev: EvidenceView) -> Callable[[HybridClip | Mapping[str, Any]], Judgement]:
    def classify(clip: HybridClip | Mapping[str, Any]) -> Judgement:
        try:
            c = clip if isinstance(clip, HybridClip) else HybridClip.from_json(clip)
        except SchemaError as exc:
            return Judgement.failed(_refusal(exc, "hybrid clip"))
        if c.run is None:
            return Judgement.failed("no hybrid run is recorded")
        stdout = ev.bytes(f"hybrid_stdout_{c.id}") if c.public else None
        stderr = ev.bytes(f"hybrid_stderr_{c.id}")
        if is_seam_stream(stderr.decode("utf-8", "replace")):
            return Judgement.failed("the run printed verifylib seam lines: a seam launch is "
                                    "never a Core ML run")
        got = contracts.classify_positive(c.run.to_json(), stderr, stdout)
        return Judgement.of(got.ok, got.detail)
    return classify


def hybrid_binding_problems(doc: HybridEvidence | Any, coreml_sha256: Any) -> list[str]:
    """List why the hybrid runs are not launches of the Core ML binary of ``build.coreml``.

    ``coreml_sha256`` is the gate's bound identity ``binary.coreml.sha256`` (which the
    validator checks against the build's); each clip's run must cite a ledger launch of a
    binary with that digest.

    Parameters
    ----------
    doc : HybridEvidence or mapping
        The ``hybrid`` document (a mapping is read with :meth:`HybridEvidence.from_json`).
    coreml_sha256 : Any
        The bound identity.

    Returns
    -------
    list of str
        Problems (empty when every run is a recorded launch of that binary).
    """
    if not isinstance(doc, (HybridEvidence, Mapping)):
        return ["evidence is not a mapping"]
    try:
        hyb = _hybrid_doc(doc)
    except SchemaError as exc:
        return [_refusal(exc, "hybrid")]
    if not is_sha256(coreml_sha256) or hyb.binary_sha256 != coreml_sha256:
        return [f"hybrid runs bound to binary {hyb.binary_sha256!r}, not the Core ML "
                f"build's {coreml_sha256!r}"]
    out = []
    for c in hyb.clips:
        launch = c.run.launch if c.run is not None else None
        if launch is None or launch.binary_sha256 != coreml_sha256:
            out.append(f"{c.id}: the run is not a recorded launch of the Core ML binary")
    return out


def _rule_hybrid(ev: EvidenceView) -> Judgement:
    raw = ev.json("hybrid")
    try:
        doc = HybridEvidence.from_json(raw)
    except SchemaError as exc:
        return _parse_failure(raw, exc, "hybrid")
    problems = _wer_policy_problems(doc)
    problems += hybrid_binding_problems(doc, ev.identities.get(identities.BINARY_COREML))
    if problems:
        return Judgement(Status.FAIL, "; ".join(problems))
    return judge_hybrid(doc, _classifier(ev))


def _seam_clip_problems(c: SeamWerClip, stderr: bytes, stdout: bytes | None, folder: str,
                        digest: str, rules: Mapping[str, Any]) -> list[str]:
    """Why one seam clip's evidence does not hold: its launch, scoring and counts."""
    out = [f"{c.id}: {p}" for p in contracts.record_problems(c.run.to_json(), stderr, stdout)]
    if c.run.returncode != 0 or c.run.signal is not None or c.run.timed_out:
        out.append(f"{c.id}: the seam launch did not exit 0 ({c.run.returncode}, "
                   f"{c.run.signal})")
    text = stderr.decode("utf-8", "replace")
    if contracts.COREML_LOAD_MARKER not in text or contracts.COREML_LOAD_FAILURE_MARKER in text:
        out.append(f"{c.id}: the launch did not load its encoder through the Core ML path")
    out += [f"{c.id}: {p}" for p in seam_launch_problems(stderr, c.executor, folder=folder,
                                                         program_digest=digest)]
    want = scoring_for(rules, c.language)
    if (c.normalizer, c.unit) != (want.normalizer, want.unit):
        out.append(f"{c.id}: scored with the {c.normalizer} normalizer in {c.unit}, not as "
                   f"the policy scores {c.language!r}")
    pin = rules.get("decoding")
    if pin and list(c.run.argv[-len(contracts.decoding_args(c.language, **pin)):]) != \
            contracts.decoding_args(c.language, **pin):
        out.append(f"{c.id}: the launch did not decode under the policy's pin")
    differs = any(c.seam_vs_ggml.to_json()[k] for k in ("substitutions", "deletions",
                                                        "insertions"))
    if c.cause not in SEAM_CAUSES or (c.cause == "encoder") != differs:
        out.append(f"{c.id}: cause {c.cause!r} contradicts its counts against GGML")
    if c.public:
        if c.reference is None or c.ggml_text is None or c.seam_text is None:
            out.append(f"{c.id}: a public clip stores its texts")
        else:
            for key, ref, hyp in (("seam", c.reference, c.seam_text),
                                  ("ggml", c.reference, c.ggml_text),
                                  ("seam_vs_ggml", c.ggml_text, c.seam_text)):
                stored: Counts = getattr(c, key)
                if count_units(rules, c.unit, ref, hyp).as_dict() != stored.to_json():
                    out.append(f"{c.id}: stored {key} counts do not match its texts")
            if (c.seam_text.strip() == "") != c.seam_empty:
                out.append(f"{c.id}: stored seam_empty flag contradicts the text")
    return out


def judge_seam_wer(doc: Any, stderr_of: Callable[[str, str], bytes],
                   stdout_of: Callable[[str, str], bytes | None],
                   identities_: Mapping[str, Any] | None = None) -> Judgement:
    """Judge ``wer.seam`` (informational): every fixture measured through the seam.

    Each variant must hold every fixture once; each launch must be the patched seam
    binary's, exit 0 through the Core ML load path with every encode call executed on the
    variant's program (:func:`verifylib.evidence.judging.seam_launch_problems`), under the
    policy's pin and scoring for the clip's language; counts of public clips are recomputed
    from their texts, and each clip's cause must be what its counts against GGML say. PASS
    then reports the rates; it sets no threshold (an fp16 program that loses words is news).

    Parameters
    ----------
    doc : mapping
        The ``seam_wer`` document.
    stderr_of, stdout_of : callable
        ``(variant, clip id)`` -> the stored stream (stdout: public clips; else None).
    identities_ : mapping, optional
        The gate's identities: the seam binary and each encoder's digest must be bound.
    """
    try:
        ev = SeamWerEvidence.from_json(doc)
    except SchemaError as exc:
        return Judgement.failed(_refusal(exc, "seam_wer"))
    packaged = load_policy(ev.policy.id) if ev.policy.id in WER_POLICY_IDS else None
    if packaged is None or ev.policy.to_json() != packaged.rules or \
            ev.policy_sha256 != packaged.sha256:
        return Judgement.failed(f"the stored {ev.policy.id} policy is not a packaged one")
    rules = packaged.rules
    problems: list[str] = []
    if identities_ is not None and identities_.get(identities.BINARY_SEAM) != ev.binary_sha256:
        problems.append("the seam binary is not bound to the gate's identity")
    if not ev.variants or ev.variants[0].encoder.variant != "fp32":
        problems.append("no fp32 variant was measured")
    figures = []
    for v in ev.variants:
        enc = v.encoder
        if identities_ is not None and identities_.get(enc.identity_key) != enc.tree_digest:
            problems.append(f"{enc.variant}: the encoder is not bound to {enc.identity_key}")
        if [c.id for c in v.clips] != list(ev.fixtures):
            problems.append(f"{enc.variant}: clips {[c.id for c in v.clips]} are not the "
                            f"fixtures {list(ev.fixtures)}")
        for c in v.clips:
            if not c.run.argv or c.run.argv[0] != ev.binary or \
                    contracts.model_arg_of(list(c.run.argv)) != enc.model_arg:
                problems.append(f"{c.id}: the launch is not the seam binary on {enc.model_arg}")
            problems += _seam_clip_problems(
                c, stderr_of(enc.variant, c.id),
                stdout_of(enc.variant, c.id) if c.public else None, enc.folder,
                enc.tree_digest, rules)
        for unit, group in _by_unit(v.clips).items():  # type: ignore[arg-type]
            rate = RATE_OF.get(unit, "WER")
            seam = corpus_wer(_counts(group, "seam"))
            ggml = corpus_wer(_counts(group, "ggml"))
            figures.append(f"{enc.variant} {rate} {seam:.3f} (GGML {ggml:.3f})")
        n_diff = sum(c.cause == "encoder" for c in v.clips)
        figures.append(f"{enc.variant}: {n_diff}/{len(v.clips)} clip(s) differ from GGML")
    if problems:
        return Judgement.failed("; ".join(problems[:6]))
    return Judgement.passed("every fixture through whisper.cpp's Core ML path with the program "
                            "executed by verifylib's seam: " + "; ".join(figures))


def _rule_seam_wer(ev: EvidenceView) -> Judgement:
    def stdout_of(variant: str, cid: str) -> bytes | None:
        name = f"seam_stdout_{variant}_{cid}"
        return ev.bytes(name) if ev.has(name) else None
    return judge_seam_wer(ev.json("seam_wer"),
                          lambda variant, cid: ev.bytes(f"seam_stderr_{variant}_{cid}"),
                          stdout_of, ev.identities)


RULES: dict[str, Callable[[EvidenceView], Judgement]] = {
    WER_GGML_VS_SOURCE: _rule_ggml_vs_source,
    WER_HYBRID: _rule_hybrid,
    WER_SEAM: _rule_seam_wer,
}
"""Gate id to judge, for the gates of stage 05."""


def _section_refusal(evidence: WerEvidence | HybridEvidence) -> str | None:
    """Why the evidence cannot be judged under its WER policy at all, or None."""
    if evidence.policy.id not in WER_POLICY_IDS:
        return f"unexpected policy {evidence.policy.id!r}"
    if (evidence.policy.scoring is None) != (evidence.policy.id == "wer-v1"):
        return (f"policy {evidence.policy.id!r} "
                + ("has" if evidence.policy.scoring is not None else "lacks")
                + " a per-language scoring section")
    if (evidence.policy.decoding is None) != (evidence.policy.id in ("wer-v1", "wer-v2")):
        return (f"policy {evidence.policy.id!r} "
                + ("has" if evidence.policy.decoding is not None else "lacks")
                + " a decoding pin")
    if not evidence.clips:
        return "no fixture was transcribed"
    return None


def _decoding_problems(evidence: WerEvidence | HybridEvidence) -> list[str]:
    """List the runs that did not decode under the policy's pin, in their clip's language.

    A run carries the pin when its recorded argv (matched against the ledger by ``verify``)
    ends with :func:`verifylib.runtime.contracts.decoding_args` for the pin and language.
    Policies before wer-v3 held no pin: nothing to check.
    """
    pin = evidence.policy.decoding
    if pin is None:
        return []
    out = []
    for c in evidence.clips:
        run = c.ggml_run if isinstance(c, WerClip) else c.run
        if run is None or not c.language:
            continue  # refused elsewhere: no run, or no language under a per-language policy
        want = contracts.decoding_args(c.language, **pin.to_json())
        if list(run.argv[-len(want):]) != want:
            out.append(f"{c.id}: the run's arguments do not end with the policy's decoding "
                       f"pin {' '.join(want)}")
    return out


def _unit(clip: WerClip | HybridClip) -> str:
    return clip.unit or "words"


def _scoring_problems(evidence: WerEvidence | HybridEvidence) -> list[str]:
    """Each clip's normalizer and unit, re-derived from its language under the policy.

    Under wer-v2 a clip names its language, and the packaged policy alone decides its
    normalizer and unit: a German clip scored with the English normalizer, or a Chinese
    one counted in words, does not pass. Under wer-v1 no clip may name either.
    """
    rules = evidence.policy.to_json()
    out = []
    for c in evidence.clips:
        if evidence.policy.scoring is None:
            if c.unit is not None or c.normalizer is not None:
                out.append(f"{c.id}: names a unit or normalizer, which "
                           f"{evidence.policy.id} does not have")
            continue
        if not c.language:
            out.append(f"{c.id}: no language is recorded ({evidence.policy.id} scores each "
                       "fixture in its language)")
            continue
        want = scoring_for(rules, c.language)
        if (c.normalizer, c.unit) != (want.normalizer, want.unit):
            out.append(f"{c.id}: scored with the {c.normalizer} normalizer in {c.unit}; "
                       f"{evidence.policy.id} scores {c.language!r} with the "
                       f"{want.normalizer} normalizer in {want.unit}")
    return out


def _counts(clips: Iterable[WerClip | HybridClip], attr: str) -> list[dict[str, int]]:
    return [getattr(c, attr).to_json() for c in clips]


def _by_unit(clips: Iterable[WerClip | HybridClip]) -> dict[str, list[WerClip | HybridClip]]:
    groups: dict[str, list[WerClip | HybridClip]] = {}
    for c in clips:
        groups.setdefault(_unit(c), []).append(c)
    return dict(sorted(groups.items(), key=lambda kv: kv[0] != "words"))


def _stored_count_problems(clip: WerClip | HybridClip, counts: Mapping[str, tuple[str, str]],
                           empties: Mapping[str, str], rules: Mapping[str, Any]) -> list[str]:
    # A public clip stores its normalized texts: its counts and empty flags are recomputed
    # from them, in the clip's unit, so an edited count or flag cannot pass.
    out = []
    for key, (ref, hyp) in counts.items():
        ref_text, hyp_text = getattr(clip, ref), getattr(clip, hyp)
        if ref_text is None or hyp_text is None:
            out.append(f"{clip.id}: stored {key} counts have no texts to be checked against")
            continue
        stored: Counts = getattr(clip, key)
        if count_units(rules, _unit(clip), ref_text, hyp_text).as_dict() != stored.to_json():
            out.append(f"{clip.id}: stored {key} counts do not match its texts")
    for flag, text in empties.items():
        value = getattr(clip, text)
        if value is not None and (value.strip() == "") != bool(getattr(clip, flag)):
            out.append(f"{clip.id}: stored {flag} flag contradicts the text")
    return out


def _clip_count_problems(c: WerClip, split: bool, policy_rules: Mapping[str, Any]) -> list[str]:
    """Check one clip's stored counts: present for every gated leg, and its texts' own."""
    if split and None in (c.from_ggml, c.conversion, c.implementation, c.from_ggml_empty):
        return [f"{c.id}: no HF-from-ggml counts (the policy gates that leg)"]
    if c.reference is None:
        return []
    counted = {"source": ("reference", "source_text"),
               "ggml": ("reference", "ggml_text")}
    flags = {"source_empty": "source_text", "ggml_empty": "ggml_text"}
    if split:
        counted.update(from_ggml=("reference", "from_ggml_text"),
                       conversion=("source_text", "from_ggml_text"),
                       implementation=("from_ggml_text", "ggml_text"))
        flags["from_ggml_empty"] = "from_ggml_text"
    return _stored_count_problems(c, counted, flags, policy_rules)


def _corpus_figures(clips: Sequence[WerClip], rules: GgmlVsSourceRules, gated: str,
                    split: bool) -> tuple[list[str], list[str]]:
    """Return each unit's corpus figures, and the rates whose gated leg is above its limit."""
    figures, above = [], []
    # Each unit is its own corpus (a character count is not a word count).
    for unit, group in _by_unit(clips).items():
        rate = RATE_OF.get(unit, unit)
        src = corpus_wer(_counts(group, "source"))
        limit = src + rules.max_corpus_wer_delta
        if split:
            fg = corpus_wer(_counts(group, gated))
            figures.append(
                f"corpus {rate} vs references: HF-from-ggml {fg:.4f}, HF source {src:.4f} "
                f"(limit {limit:.4f}), whisper-cli {corpus_wer(_counts(group, 'ggml')):.4f}; "
                f"conversion (source vs "
                f"HF-from-ggml) {corpus_wer(_counts(group, 'conversion')):.4f}, "
                f"implementation (HF-from-ggml vs whisper-cli, reported) "
                f"{corpus_wer(_counts(group, 'implementation')):.4f} over {len(group)} clip(s)")
        else:
            figures.append(f"corpus {rate} vs references: GGML "
                           f"{corpus_wer(_counts(group, 'ggml')):.4f}, HF source {src:.4f} "
                           f"(limit {limit:.4f}) over {len(group)} clip(s)")
        # Decided on exact rationals, not on the floats shown: in binary floating point
        # 7/20 + 0.05 < 8/20, so a corpus exactly at its limit would fail.
        exact_limit = (exact_corpus_wer(_counts(group, "source"))
                       + policy_fraction(rules.max_corpus_wer_delta))
        if not exact_corpus_wer(_counts(group, gated)) <= exact_limit:
            above.append(rate)
    return figures, above


def judge_ggml_vs_source(evidence: WerEvidence | Mapping[str, Any]) -> Judgement:
    """Judge ``wer.ggml_vs_source`` by the wer-v1 rule, on stored evidence.

    Parameters
    ----------
    evidence : WerEvidence or mapping
        A mapping is read with :meth:`WerEvidence.from_json` (one that does not parse is
        a FAIL naming the field). ``policy`` (the wer-v1 resource), ``clips``: per clip
        ``source`` and ``ggml`` counts against the reference, ``source_empty`` and
        ``ggml_empty`` flags, and for public clips the normalized ``reference``,
        ``source_text`` and ``ggml_text`` (their counts are recomputed and must agree).

    Returns
    -------
    Judgement
        PASS or FAIL, with the figures behind the decision.
    """
    try:
        doc = _wer_doc(evidence)
    except SchemaError as exc:
        return Judgement.failed(_refusal(exc, "wer"))
    refusal = _section_refusal(doc)
    if refusal:
        return Judgement.failed(refusal)
    rules, clips = doc.policy.ggml_vs_source, doc.clips
    policy_rules = doc.policy.to_json()
    split = rules.gated == "hf_from_ggml"
    if rules.gated not in (None, "hf_from_ggml"):
        return Judgement.failed(f"unknown gated leg {rules.gated!r}")
    problems = _scoring_problems(doc) + _decoding_problems(doc)
    for c in clips:
        problems += _clip_count_problems(c, split, policy_rules)
    if problems:
        return Judgement.failed("; ".join(problems))
    gated, label = ("from_ggml", "HF-from-ggml") if split else ("ggml", "GGML")
    empties = [c.id for c in clips if c.ggml_empty and not c.source_empty]
    if split:
        empties += [f"{c.id} (HF-from-ggml)" for c in clips
                    if c.from_ggml_empty and not c.source_empty]
    figures, above = _corpus_figures(clips, rules, gated, split)
    shown = "; ".join(figures)
    if rules.no_empty_where_source_nonempty and empties:
        return Judgement.failed(f"{'' if split else 'GGML '}transcript empty where the "
                                f"source's is not: {empties}; {shown}")
    if above:
        return Judgement.failed(f"{label} corpus {' and '.join(above)} above the limit"
                                f"{' (a conversion error)' if split else ''}; {shown}")
    return Judgement.passed(shown)


def judge_hybrid(evidence: HybridEvidence | Mapping[str, Any],
                 classify: Callable[[Mapping[str, Any]], Judgement]) -> Judgement:
    """Judge ``wer.hybrid`` by the wer-v1 rule (Core ML encoder inside whisper-cli).

    Parameters
    ----------
    evidence : HybridEvidence or mapping
        A mapping is read with :meth:`HybridEvidence.from_json` (one that does not parse
        is a FAIL naming the field). ``policy`` (wer-v1) and ``clips``: per clip the
        ``source``, ``ggml`` and ``hybrid`` counts against the reference,
        ``hybrid_vs_ggml`` counts, ``hybrid_empty``, and for public clips the normalized
        texts (``reference``, ``ggml_text``, ``hybrid_text``), whose counts are recomputed.
    classify : callable
        Re-judges one clip's hybrid run from its stored streams (the four load conditions
        of docs/runtime-contract.md §2.3); it is handed the clip as stored
        (:meth:`HybridClip.to_json`) and returns a :class:`~verifylib.evidence.gates.Judgement`.

    Returns
    -------
    Judgement
        PASS iff every hybrid run met the four conditions, no hybrid transcript is empty,
        the hybrid corpus WER is at most min(GGML, source) + 0.05, and no clip's
        hybrid-vs-GGML WER exceeds 0.5 (the detector for a silent nil prediction).
    """
    try:
        doc = _hybrid_doc(evidence)
    except SchemaError as exc:
        return Judgement.failed(_refusal(exc, "hybrid"))
    refusal = _section_refusal(doc)
    if refusal:
        return Judgement.failed(refusal)
    rules, clips = doc.policy.hybrid, doc.clips
    policy_rules = doc.policy.to_json()
    problems = _scoring_problems(doc) + _decoding_problems(doc)
    for c in clips:
        if c.reference is not None:
            problems += _stored_count_problems(
                c, {"hybrid": ("reference", "hybrid_text"), "ggml": ("reference", "ggml_text"),
                    "hybrid_vs_ggml": ("ggml_text", "hybrid_text")},
                {"hybrid_empty": "hybrid_text"}, policy_rules)
        if rules.four_load_conditions_every_run:
            load = classify(c.to_json())
            if not load.ok:
                problems.append(f"{c.id}: hybrid run fails the load conditions: {load.detail}")
    if problems:
        return Judgement.failed("; ".join(problems))
    empty = [c.id for c in clips if c.hybrid_empty]
    if rules.all_nonempty and empty:
        return Judgement.failed(f"hybrid transcript empty for {empty} "
                                f"(a silent Core ML prediction failure)")
    # Exact rationals decide (see judge_ggml_vs_source); the floats are only shown.
    worst = max(clips, key=lambda c: exact_corpus_wer([c.hybrid_vs_ggml.to_json()]))
    worst_wer = WordCounts(**worst.hybrid_vs_ggml.to_json()).wer
    figures, above = [], []
    for unit, group in _by_unit(clips).items():
        hyb = corpus_wer(_counts(group, "hybrid"))
        ggml = corpus_wer(_counts(group, "ggml"))
        src = corpus_wer(_counts(group, "source"))
        limit = min(ggml, src) + rules.max_corpus_wer_delta_vs_best
        figures.append(f"corpus {RATE_OF.get(unit, unit)} vs references: hybrid {hyb:.4f}, "
                       f"GGML {ggml:.4f}, source {src:.4f} (limit {limit:.4f})")
        exact_limit = (min(exact_corpus_wer(_counts(group, "ggml")),
                           exact_corpus_wer(_counts(group, "source")))
                       + policy_fraction(rules.max_corpus_wer_delta_vs_best))
        if not exact_corpus_wer(_counts(group, "hybrid")) <= exact_limit:
            above.append(RATE_OF.get(unit, unit))
    shown = (f"{'; '.join(figures)}; largest clip hybrid-vs-GGML {RATE_OF.get(_unit(worst))} "
             f"{worst_wer:.4f} ({worst.id}) over {len(clips)} clip(s)")
    if (exact_corpus_wer([worst.hybrid_vs_ggml.to_json()])
            > policy_fraction(rules.max_clip_wer_vs_ggml)):
        return Judgement.failed(f"clip {worst.id} diverges from GGML beyond "
                                f"{rules.max_clip_wer_vs_ggml}; {shown}")
    if above:
        return Judgement.failed(f"hybrid corpus {' and '.join(above)} above the limit; {shown}")
    return Judgement.passed(shown)
