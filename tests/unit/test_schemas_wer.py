"""The stage 05 ``wer`` and ``hybrid`` document schemas: round trip and refusals by path."""

from __future__ import annotations

import hashlib

import pytest

from verifylib import canonical
from verifylib.errors import EvidenceInvalid
from verifylib.evidence.gates import Judgement, Status
from verifylib.evidence.wer import rules as wer_rules
from verifylib.evidence.wer.schema import (Counts, HybridClip, HybridEvidence, RunRecord, WerClip, WerEvidence, WerPolicy)
from verifylib.evidence.fields import SchemaError
from verifylib.numerics.scoring import count_words, load_policy
from verifylib.runtime.runner import RunResult, run_record

REF = "and so my fellow americans ask not what your country can do for you"
GGML = "and so my fellow americans ask not what your country can do for you"
SOURCE = "and so my fellow americans ask not what your country can do"
HYBRID = "and so my fellow americans ask what your country can do for you"
STDERR = b"system_info: n_threads = 2 / 2 | WHISPER : COREML = 0 | OPENVINO = 0 |\n"


def _run(stdout: bytes = GGML.encode(), launch: dict | None = None) -> dict:
    res = RunResult(argv=["/b/whisper-cli", "-m", "m.bin", "-f", "jfk.wav"], returncode=0,
                    signal=None, timed_out=False, stdout=stdout, stderr=STDERR, wall_s=0.31234,
                    launch=launch)
    return run_record(res)


def _counts(ref: str, hyp: str) -> Counts:
    return Counts(**count_words(ref, hyp).as_dict())


def _wer_doc() -> dict:
    """A ``wer`` document built the way :func:`verifylib.stages.wer.ggml_vs_source` builds it."""
    policy = load_policy("wer-v1")
    public = WerClip(
        id="jfk", public=True, audio_sha256="a" * 64, reference_from="text",
        source=_counts(REF, SOURCE), ggml=_counts(REF, GGML), pairwise=_counts(SOURCE, GGML),
        source_empty=False, ggml_empty=False, ggml_run=RunRecord.from_json(_run(), "ggml_run"),
        reference=REF, source_text=SOURCE, ggml_text=GGML, raw_reference=REF.capitalize(),
        raw_source=SOURCE, raw_ggml=GGML)
    private = WerClip(
        id="p1", public=False, audio_sha256="b" * 64, reference_from="source",
        source=_counts(SOURCE, SOURCE), ggml=_counts(SOURCE, GGML),
        pairwise=_counts(SOURCE, GGML), source_empty=False, ggml_empty=False,
        ggml_run=RunRecord.from_json(_run(b"x"), "ggml_run"))
    return WerEvidence(
        policy=WerPolicy.from_json(policy.rules), clips=(public, private),
        policy_sha256=policy.sha256,
        normalizer={"implementation": "EnglishTextNormalizer", "mapping_sha256": "c" * 64},
        model_ggml_sha256="d" * 64, binary_sha256="e" * 64, mlmodelc_beside=False,
        decoding=("-l", "en", "-bs", "1")).to_json()


def _hybrid_doc() -> dict:
    """A ``hybrid`` document built the way :func:`verifylib.stages.wer.hybrid` builds it."""
    policy = load_policy("wer-v1")
    launch = {"seq": 7, "binary_sha256": "f" * 64}
    clip = HybridClip(
        id="jfk", public=True, run=RunRecord.from_json(_run(HYBRID.encode(), launch), "run"),
        source=_counts(REF, SOURCE), ggml=_counts(REF, GGML), hybrid=_counts(REF, HYBRID),
        hybrid_vs_ggml=_counts(GGML, HYBRID), hybrid_empty=False, reference=REF,
        ggml_text=GGML, hybrid_text=HYBRID)
    private = HybridClip(
        id="p1", public=False, run=RunRecord.from_json(_run(b"", launch), "run"),
        source=_counts(SOURCE, SOURCE), ggml=_counts(SOURCE, GGML),
        hybrid=_counts(SOURCE, GGML), hybrid_vs_ggml=_counts(GGML, GGML), hybrid_empty=False)
    return HybridEvidence(policy=WerPolicy.from_json(policy.rules), clips=(clip, private),
                          policy_sha256=policy.sha256, binary_sha256="f" * 64,
                          model_arg="/r/fp32/ggml-model.bin").to_json()


def _stored(doc: dict) -> dict:
    return canonical.loads(canonical.dumps(doc))


def test_the_stage_built_documents_hold_what_the_stage_wrote():
    # The keys the stage wrote before it built the schema, clip for clip.
    doc = _wer_doc()
    assert set(doc) == {"policy", "policy_sha256", "normalizer", "model_ggml_sha256",
                        "binary_sha256", "mlmodelc_beside", "decoding", "clips"}
    assert doc["policy"] == load_policy("wer-v1").rules
    assert set(doc["clips"][0]) == {"id", "public", "audio_sha256", "reference_from", "source",
                                    "ggml", "pairwise", "source_empty", "ggml_empty",
                                    "ggml_run", "reference", "source_text", "ggml_text",
                                    "raw_reference", "raw_source", "raw_ggml"}
    assert set(doc["clips"][1]) == set(doc["clips"][0]) - {
        "reference", "source_text", "ggml_text", "raw_reference", "raw_source", "raw_ggml"}
    assert doc["clips"][0]["ggml_run"] == _run()
    hyb = _hybrid_doc()
    assert set(hyb) == {"policy", "policy_sha256", "binary_sha256", "model_arg", "clips"}
    assert set(hyb["clips"][0]) == {"id", "public", "run", "source", "ggml", "hybrid",
                                    "hybrid_vs_ggml", "hybrid_empty", "reference",
                                    "ggml_text", "hybrid_text"}
    assert hyb["clips"][0]["run"]["launch"] == {"seq": 7, "binary_sha256": "f" * 64}


@pytest.mark.parametrize("build,schema", [(_wer_doc, WerEvidence),
                                          (_hybrid_doc, HybridEvidence)])
def test_round_trip_keeps_the_document_and_its_bytes(build, schema):
    doc = build()
    assert schema.from_json(doc).to_json() == doc
    stored = _stored(doc)
    assert canonical.dumps(schema.from_json(stored).to_json()) == canonical.dumps(doc)


def test_the_stage_built_documents_pass_their_rules():
    assert wer_rules.judge_ggml_vs_source(_stored(_wer_doc())).status is Status.PASS
    typed = WerEvidence.from_json(_stored(_wer_doc()))
    assert wer_rules.judge_ggml_vs_source(typed) == wer_rules.judge_ggml_vs_source(_wer_doc())
    assert wer_rules.ggml_run_problems(typed, lambda cid: STDERR) == []
    j = wer_rules.judge_hybrid(_stored(_hybrid_doc()), lambda c: Judgement.passed("loaded"))
    assert j.status is Status.PASS, j.detail
    assert wer_rules.hybrid_binding_problems(_stored(_hybrid_doc()), "f" * 64) == []
    assert wer_rules.hybrid_binding_problems(_hybrid_doc(), "0" * 64) == [
        f"hybrid runs bound to binary {'f' * 64!r}, not the Core ML build's {'0' * 64!r}"]


@pytest.mark.parametrize("edit,path", [
    (lambda d: d["clips"][1]["ggml"].update(substitutions="2"), "clips[1].ggml.substitutions"),
    (lambda d: d["clips"][0]["source"].pop("hits"), "clips[0].source.hits"),
    (lambda d: d["clips"][0].update(public=1), "clips[0].public"),
    (lambda d: d["clips"][1].pop("ggml_empty"), "clips[1].ggml_empty"),
    (lambda d: d["clips"][0].update(raw_ggml=None), "clips[0].raw_ggml"),
    (lambda d: d["clips"][0]["ggml_run"].pop("stderr_sha256"),
     "clips[0].ggml_run.stderr_sha256"),
    (lambda d: d["clips"][1]["ggml_run"].update(returncode="0"), "clips[1].ggml_run.returncode"),
    (lambda d: d["clips"][1]["ggml_run"].update(argv="whisper-cli -m m.bin"),
     "clips[1].ggml_run.argv"),
    (lambda d: d["clips"][1]["ggml_run"]["argv"].append(3), "clips[1].ggml_run.argv[5]"),
    (lambda d: d.update(clips={}), "clips"),
    (lambda d: d.pop("policy"), "policy"),
    (lambda d: d["policy"]["ggml_vs_source"].update(max_corpus_wer_delta="0.05"),
     "policy.ggml_vs_source.max_corpus_wer_delta"),
    (lambda d: d["policy"]["ggml_vs_source"].update(lenient=True),
     "policy.ggml_vs_source.lenient"),
    (lambda d: d["policy"]["hybrid"].pop("all_nonempty"), "policy.hybrid.all_nonempty"),
    (lambda d: d.update(mlmodelc_beside="no"), "mlmodelc_beside"),
    (lambda d: d.update(decoding=["-l", None]), "decoding[1]"),
])
def test_malformed_wer_documents_are_refused_by_field_path(edit, path):
    doc = _stored(_wer_doc())
    edit(doc)
    with pytest.raises(SchemaError) as err:
        WerEvidence.from_json(doc)
    assert err.value.path == path and isinstance(err.value, EvidenceInvalid)
    j = wer_rules.judge_ggml_vs_source(doc)
    assert j.status is Status.FAIL and path in j.detail
    assert j.detail.startswith("the wer record does not parse: ")
    (p,) = wer_rules.ggml_run_problems(doc, lambda cid: STDERR)
    assert path in p


@pytest.mark.parametrize("edit,path", [
    (lambda d: d["clips"][0]["hybrid_vs_ggml"].update(insertions=-0.5),
     "clips[0].hybrid_vs_ggml.insertions"),
    (lambda d: d["clips"][1].pop("hybrid"), "clips[1].hybrid"),
    (lambda d: d["clips"][0]["run"].update(launch={"seq": 7}),
     "clips[0].run.launch.binary_sha256"),
    (lambda d: d["clips"][0]["run"].update(launch=None), "clips[0].run.launch"),
    (lambda d: d["clips"][0].update(hybrid_text=["a"]), "clips[0].hybrid_text"),
    (lambda d: d.update(binary_sha256=None), "binary_sha256"),
])
def test_malformed_hybrid_documents_are_refused_by_field_path(edit, path):
    doc = _stored(_hybrid_doc())
    edit(doc)
    with pytest.raises(SchemaError) as err:
        HybridEvidence.from_json(doc)
    assert err.value.path == path
    j = wer_rules.judge_hybrid(doc, lambda c: Judgement.passed("loaded"))
    assert j.status is Status.FAIL and j.detail.startswith("the hybrid record does not parse: ")
    assert path in j.detail
    (p,) = wer_rules.hybrid_binding_problems(doc, "f" * 64)
    assert path in p


def test_the_classifier_refuses_a_clip_without_its_run():
    clip = _stored(_hybrid_doc())["clips"][0]
    del clip["run"]
    typed = HybridClip.from_json(clip)
    assert typed.run is None and typed.to_json() == clip
    j = wer_rules._classifier(None)(clip)
    assert j.status is Status.FAIL and "no hybrid run" in j.detail
    assert wer_rules.hybrid_binding_problems(
        dict(_stored(_hybrid_doc()), clips=[clip]), "f" * 64) == [
        "jfk: the run is not a recorded launch of the Core ML binary"]


def test_minimal_scoring_documents_still_parse():
    # What the scoring rules' own tests hand them: policy and counts only.
    clip = {"id": "a", "public": False, "source": _counts(REF, REF).to_json(),
            "ggml": _counts(REF, GGML).to_json(), "source_empty": False, "ggml_empty": False}
    doc = {"policy": load_policy("wer-v1").rules, "clips": [clip]}
    assert WerEvidence.from_json(doc).to_json() == doc
    assert wer_rules.judge_ggml_vs_source(doc).status is Status.PASS
    # ... but the gate's checks refuse what they need and do not find.
    assert wer_rules.ggml_run_problems(doc, lambda cid: STDERR) == [
        "the GGML runs' model had a .mlmodelc beside it (or it was not checked)",
        "a: no GGML run is recorded"]


def test_a_public_clip_without_its_texts_is_refused_not_skipped():
    doc = _stored(_wer_doc())
    del doc["clips"][0]["ggml_text"]
    j = wer_rules.judge_ggml_vs_source(doc)
    assert j == Judgement(Status.FAIL, "jfk: stored ggml counts have no texts to be checked against")


def test_run_record_digest_helper_matches_the_runner():
    rec = RunRecord.from_json(_run())
    assert rec.stderr_sha256 == hashlib.sha256(STDERR).hexdigest()
    assert rec.to_json() == _run() and rec.launch is None


def test_the_schema_built_clips_are_the_literals_the_stage_wrote_before():
    # verifylib.stages.wer wrote these dict literals before it built the schemas.
    c_src, c_ggml = count_words(REF, SOURCE), count_words(REF, GGML)
    literal = {"id": "jfk", "public": True, "audio_sha256": "a" * 64, "reference_from": "text",
               "source": c_src.as_dict(), "ggml": c_ggml.as_dict(),
               "pairwise": count_words(SOURCE, GGML).as_dict(),
               "source_empty": False, "ggml_empty": False, "ggml_run": _run()}
    literal.update({"reference": REF, "source_text": SOURCE, "ggml_text": GGML,
                    "raw_reference": REF.capitalize(), "raw_source": SOURCE, "raw_ggml": GGML})
    assert _wer_doc()["clips"][0] == literal
    launch = {"seq": 7, "binary_sha256": "f" * 64}
    hybrid = {"id": "jfk", "public": True, "run": _run(HYBRID.encode(), launch),
              "source": count_words(REF, SOURCE).as_dict(),
              "ggml": count_words(REF, GGML).as_dict(),
              "hybrid": count_words(REF, HYBRID).as_dict(),
              "hybrid_vs_ggml": count_words(GGML, HYBRID).as_dict(), "hybrid_empty": False}
    hybrid.update({"reference": REF, "ggml_text": GGML, "hybrid_text": HYBRID})
    assert _hybrid_doc()["clips"][0] == hybrid
    policy = load_policy("wer-v1")
    assert {k: v for k, v in _hybrid_doc().items() if k != "clips"} == {
        "policy": policy.rules, "policy_sha256": policy.sha256, "binary_sha256": "f" * 64,
        "model_arg": "/r/fp32/ggml-model.bin"}


DETECT_STDERR = STDERR + b"whisper_full_with_state: auto-detected language: de (p = 0.451026)\n"


def _with_detection(language: str = "de", *, drop_run: bool = False) -> WerEvidence:
    from verifylib.evidence.wer.schema import Detected, Heard

    res = RunResult(argv=["/b/whisper-cli", "-m", "m.bin", "-f", "jfk.wav", "-dl", "-p", "1"],
                    returncode=0, signal=None, timed_out=False, stdout=b"",
                    stderr=DETECT_STDERR, wall_s=0.2)
    doc = WerEvidence.from_json(_wer_doc())
    heard = Detected(source=Heard(language="de", p=0.33), from_ggml=Heard(language="de", p=0.33),
                     ggml=Heard(language=language, p=0.451026))
    first = WerClip.from_json(dict(doc.clips[0].to_json(), detected=heard.to_json(),
                                   **({} if drop_run else {"detect_run": run_record(res)})))
    return WerEvidence.from_json(dict(doc.to_json(), clips=[first.to_json(),
                                                           doc.clips[1].to_json()]))


def test_a_recorded_detection_is_held_to_its_own_launch():
    doc = _with_detection()
    assert WerEvidence.from_json(_stored(doc.to_json())) == doc
    assert wer_rules.ggml_run_problems(doc, lambda cid: STDERR, lambda cid: DETECT_STDERR) == []
    (p,) = wer_rules.ggml_run_problems(_with_detection("fr"), lambda cid: STDERR,
                                       lambda cid: DETECT_STDERR)
    assert p == "jfk: the -dl launch logged ('de', 0.451026), the record says 'fr'"
    (p,) = wer_rules.ggml_run_problems(doc, lambda cid: STDERR, lambda cid: DETECT_STDERR + b"x")
    assert p == "jfk: -dl launch: stored stderr is not the run's stream"
    (p,) = wer_rules.ggml_run_problems(_with_detection(drop_run=True), lambda cid: STDERR)
    assert p == "jfk: a detected language without its -dl launch, or the reverse"
    (p,) = wer_rules.ggml_run_problems(doc, lambda cid: STDERR)
    assert p == "jfk: the -dl launch's stderr was not given"


def test_the_detection_line_is_read_from_the_log():
    from verifylib.runtime import contracts

    assert contracts.parse_detected_language(DETECT_STDERR.decode()) == ("de", 0.451026)
    assert contracts.parse_detected_language(STDERR.decode()) is None
    assert contracts.parse_detected_language(
        "whisper_full_with_state: auto-detected language: haw (p = 1e-05)") == ("haw", 1e-05)
