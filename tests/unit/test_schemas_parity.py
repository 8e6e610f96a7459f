"""The stage 04 ``parity`` record schema: round trip on the stage's documents, refusals by path."""

from __future__ import annotations

import math

import numpy as np
import pytest

from verifylib import canonical
from verifylib.errors import EvidenceInvalid
from verifylib.evidence.gates import Status
from verifylib.evidence.parity.rules import judge_parity, recheck_measurement
from verifylib.evidence.parity.schema import (Artifact, Measurement, MeasurementMetrics,
                                               ParityEvidence, PolicyRecord)
from verifylib.evidence.fields import SchemaError
from verifylib.numerics.parity import FP32_POLICY, compare, policy_record
from verifylib.numerics.scoring import load_policy


def _stage_record(kind: str = "program") -> dict:
    """A parity record built the way :func:`verifylib.stages.parity.run` builds it."""
    rng = np.random.default_rng(1)
    ref = rng.normal(size=(1, 6, 4)).astype(np.float32)
    policy = load_policy(FP32_POLICY)
    modes = ("float32", "float64") if kind == "program" else ("coreml-all",)
    measurements = []
    for inp in ("fixture", "random"):
        for mode in modes:
            # identical outputs for the random input: SNR +inf, stored as "inf"
            cand = ref if inp == "random" else ref + 1e-9 * rng.normal(size=ref.shape)
            m = compare(ref, cand)
            measurements.append(Measurement(inp, mode, MeasurementMetrics(**m.as_dict()),
                                            0.0123).to_json())
    candidate = ({"executor": "verifylib.mil_exec (op by op, torch CPU kernels)",
                  "modes": ["float32", "float64"], "op_counts": {"conv": 2, "add": 3}}
                 if kind == "program" else
                 {"runtime": "coremltools.models.CompiledMLModel", "compute_units": "ALL",
                  "mlmodelc": "fp32/ggml-model-encoder.mlmodelc"})
    return ParityEvidence(
        policy=PolicyRecord(**policy_record(policy)), variant="fp32", kind=kind,
        artifact=Artifact(tree_digest="a" * 64, exported_tree_digest="a" * 64,
                          path="fp32/ggml-model-encoder.mlpackage"),
        measurements=tuple(Measurement.from_json(m) for m in measurements),
        candidate=candidate,
        reference={"implementation": "transformers WhisperEncoder", "dtype": "float32",
                   "seconds": {"fixture": 0.5, "random": 0.25}},
        inputs={"fixture": {"id": "jfk", "public": True, "shape": [1, 80, 3000]},
                "random": {"seed": 0, "shape": [1, 80, 3000]}}).to_json()


def _stored(doc: dict) -> dict:
    return canonical.loads(canonical.dumps(doc))


@pytest.mark.parametrize("kind", ["program", "runtime"])
def test_round_trip_keeps_the_stage_document_and_its_bytes(kind):
    doc = _stage_record(kind)
    assert ParityEvidence.from_json(doc).to_json() == doc
    stored = _stored(doc)
    assert "inf" in {m["metrics"]["snr_db"] for m in stored["measurements"]}
    again = ParityEvidence.from_json(stored)
    assert canonical.dumps(again.to_json()) == canonical.dumps(doc)
    assert again.measured()[-1].metrics.snr_db == math.inf
    assert again.measured()[0].label == "fixture/" + ("float32" if kind == "program"
                                                      else "coreml-all")


def test_the_stage_built_record_passes_its_rule():
    j = judge_parity(_stored(_stage_record()), FP32_POLICY, "program")
    assert j.status is Status.PASS, j.detail
    typed = ParityEvidence.from_json(_stored(_stage_record()))
    assert judge_parity(typed, FP32_POLICY, "program") == j


def test_optional_keys_stay_absent():
    doc = _stored(_stage_record())
    for key in ("candidate", "reference", "inputs", "measurements"):
        doc.pop(key)
    del doc["artifact"]["path"]
    assert ParityEvidence.from_json(doc).to_json() == doc
    assert ParityEvidence.from_json(doc).measured() == ()


@pytest.mark.parametrize("edit,path", [
    (lambda d: d["measurements"][2]["metrics"].update(snr_db="loud"),
     "measurements[2].metrics.snr_db"),
    (lambda d: d["measurements"][2]["metrics"].update(snr_db=True),
     "measurements[2].metrics.snr_db"),
    (lambda d: d["measurements"][1]["metrics"].pop("dot"), "measurements[1].metrics.dot"),
    (lambda d: d["measurements"][0].pop("execution"), "measurements[0].execution"),
    (lambda d: d["measurements"][3].update(metrics=[1, 2]), "measurements[3].metrics"),
    (lambda d: d["measurements"][0]["metrics"].update(n=1.5), "measurements[0].metrics.n"),
    (lambda d: d["measurements"][0]["metrics"].update(finite="yes"),
     "measurements[0].metrics.finite"),
    (lambda d: d["measurements"][0].update(seconds=None), "measurements[0].seconds"),
    (lambda d: d.update(measurements={"0": {}}), "measurements"),
    (lambda d: d.pop("policy"), "policy"),
    (lambda d: d["policy"].update(sha256=None), "policy.sha256"),
    (lambda d: d["policy"].update(rules=[]), "policy.rules"),
    (lambda d: d.update(variant=32), "variant"),
    (lambda d: d.pop("kind"), "kind"),
    (lambda d: d["artifact"].pop("exported_tree_digest"), "artifact.exported_tree_digest"),
    (lambda d: d.update(reference="hf"), "reference"),
])
def test_malformed_records_are_refused_by_field_path(edit, path):
    doc = _stored(_stage_record())
    edit(doc)
    with pytest.raises(SchemaError) as err:
        ParityEvidence.from_json(doc)
    assert err.value.path == path and str(err.value).startswith(path + ": ")
    assert isinstance(err.value, EvidenceInvalid)
    # The rule refuses it, naming the field.
    j = judge_parity(doc, FP32_POLICY, "program")
    assert j.status is Status.FAIL and path in j.detail, j.detail
    assert j.detail.startswith("the parity record does not parse: ")


def test_a_document_that_is_not_an_object_is_refused():
    for doc in (None, [], "parity"):
        with pytest.raises(SchemaError, match="expected an object"):
            ParityEvidence.from_json(doc)
        assert judge_parity(doc, FP32_POLICY, "program").status is Status.FAIL


def test_recheck_reads_typed_and_stored_measurements_alike():
    stored = _stored(_stage_record())["measurements"][0]
    typed = Measurement.from_json(stored)
    assert recheck_measurement(stored) == recheck_measurement(typed)
    with pytest.raises(SchemaError, match=r"measurement\.metrics\.cosine"):
        recheck_measurement(dict(stored, metrics=dict(stored["metrics"], cosine="high")))


def test_the_gate_rule_refuses_a_stored_record_that_does_not_parse(tmp_path):
    from verifylib.evidence.records import EvidenceRef, EvidenceView
    from verifylib.evidence.parity.rules import RULES

    def judge(doc):
        refs = [EvidenceRef("policy_program", "policy_program.json", canonical.write_json(
                    tmp_path / "policy_program.json", policy_record(load_policy(FP32_POLICY)))),
                EvidenceRef("parity", "program.json",
                            canonical.write_json(tmp_path / "program.json", doc))]
        return RULES["parity.program"](EvidenceView(tmp_path, refs))

    good = _stage_record()
    assert judge(good).status is Status.PASS, judge(good).detail
    bad = _stored(good)
    bad["measurements"][1]["metrics"]["noise_energy"] = {"value": 0}
    j = judge(bad)
    assert j.status is Status.FAIL
    assert j.detail == ("the parity record does not parse: measurements[1].metrics.noise_energy: "
                        'expected a number (or "inf", "-inf", "nan"), got object')


def test_the_schema_built_record_is_the_literal_the_stage_wrote_before():
    # verifylib.stages.parity.run wrote this dict literal before it built the schema.
    doc = _stage_record()
    policy = load_policy(FP32_POLICY)
    literal = {"policy": policy_record(policy), "variant": "fp32", "kind": "program",
               "candidate": doc["candidate"], "reference": doc["reference"],
               "artifact": {"path": "fp32/ggml-model-encoder.mlpackage",
                            "tree_digest": "a" * 64, "exported_tree_digest": "a" * 64},
               "inputs": doc["inputs"],
               "measurements": [{"input": m["input"], "execution": m["execution"],
                                 "metrics": m["metrics"], "seconds": m["seconds"]}
                                for m in doc["measurements"]]}
    assert doc == literal and canonical.dumps(doc) == canonical.dumps(literal)
    rng = np.random.default_rng(2)
    ref = rng.normal(size=(1, 3, 2))
    m = compare(ref, ref + 1e-7)
    assert (Measurement("fixture", "float32", MeasurementMetrics(**m.as_dict()), 0.5).to_json()
            == {"input": "fixture", "execution": "float32", "metrics": m.as_dict(),
                "seconds": 0.5})


def _judge_rule(tmp_path, doc):
    from verifylib.evidence.parity.rules import RULES
    from verifylib.evidence.records import EvidenceRef, EvidenceView

    refs = [EvidenceRef("policy_program", "policy_program.json", canonical.write_json(
                tmp_path / "policy_program.json", policy_record(load_policy(FP32_POLICY)))),
            EvidenceRef("parity", "program.json",
                        canonical.write_json(tmp_path / "program.json", doc))]
    view = EvidenceView(tmp_path, refs)
    return RULES["parity.program"](view), view


def _read_from_text(tmp_path) -> dict:
    """The program record of a given .mlmodelc whose program was read from its model.mil."""
    from verifylib.canonical import sha256_file
    folder = tmp_path / "fp32/ggml-model-encoder.mlmodelc"
    folder.mkdir(parents=True)
    (folder / "model.mil").write_text("program(1.0)\n")
    doc = _stored(_stage_record())
    doc["artifact"]["path"] = "fp32/ggml-model-encoder.mlmodelc"
    doc["candidate"]["program_source"] = {
        "read_from": "model.mil", "model_mil_sha256": sha256_file(folder / "model.mil"),
        "weight_bin_sha256": None, "program_version": "1.0", "opset": "ios16",
        "coremlc_version": None, "build_info": {}}
    return doc


def test_a_compiled_program_read_from_text_is_judged_on_its_float32_execution(tmp_path):
    from verifylib.evidence.parity.rules import program_read_from_text

    doc = _read_from_text(tmp_path)
    j, view = _judge_rule(tmp_path, doc)
    assert j.status is Status.PASS and "fixture/float32" in j.detail, j.detail
    assert program_read_from_text(view)
    # Without the source, a .mlmodelc's program record is read as Core ML's: it has no
    # coreml-all measurement, so it fails.
    doc["candidate"].pop("program_source")
    j, view = _judge_rule(tmp_path, doc)
    assert j.status is Status.FAIL and "fixture/coreml-all" in j.detail, j.detail
    assert not program_read_from_text(view)


def test_a_compiled_program_source_must_be_the_runs_model_mil(tmp_path):
    doc = _read_from_text(tmp_path)
    doc["candidate"]["program_source"]["model_mil_sha256"] = "0" * 64
    j, _ = _judge_rule(tmp_path, doc)
    assert j.status is Status.FAIL and "model.mil digest" in j.detail, j.detail
    doc = _read_from_text(tmp_path / "other")
    doc["artifact"]["path"] = "fp32/ggml-model-encoder.mlpackage"
    j, _ = _judge_rule(tmp_path / "other", doc)
    assert j.status is Status.FAIL and "not a compiled model" in j.detail, j.detail
