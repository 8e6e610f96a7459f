"""An audit on the simulated Mac whose parameters name a given ``.mlmodelc`` and a whisper.cpp
model file: ``model: {kind: ggml, path: ggml-tiny.en.bin, language: en}`` and
``encoder: {path: ggml-tiny.en-encoder.mlmodelc}`` (:mod:`tests.helpers.prebuilt_inputs`).

The encoder is our own fp32 export of the default model, compiled by the simulated
``coremlc`` (:mod:`tests.helpers.compiled_models`), which writes coremlc's file set
(``model.mil`` as MIL text, ``metadata.json`` as a list of one object), so the encoder card
reads its precision from ``model.mil`` as from a real compiled model. Every
stage runs in this process, as :mod:`tests.helpers.published_runs` runs them.

- ``export.contract`` audits the folder as given; ``export.compile`` places it at the path
  whisper.cpp derives from ``-m`` without compiling (a compile is made an error here);
- ``export.pair`` and ``parity.program`` have no program to read: coremltools' real
  ``CompiledMLModel`` runs on the simulated Mac's native proxy, which executes the program
  the simulated framework remembers for that compile, with the folder's own
  ``weights/weight.bin``, with verifylib's MIL executor in float32, so what it returns is a
  real computation of that encoder, not a replayed reference. Against the
  encoder rebuilt from the .bin it agrees exactly (our writer's f16 file holds the same
  values as the f16 source); for another model's encoder (same shapes, seeded random
  weights, placed at the same ``encoder.path``) it does not, and ``export.pair`` fails
  saying that no block could be tapped;
- ``verify --allow-simulated`` accepts the run and chooses the policy again from the
  published bytes (a forged float16 declaration is refused).

Stage 01 runs once and is copied for the second encoder: a run directory belongs to one
parameter set, so the second audit names the same ``encoder.path`` with other contents.
"""

from __future__ import annotations

import importlib
import re
import shutil
from pathlib import Path

import pytest

from tests.helpers.prebuilt_inputs import audit_params, gate_records, given_files
from tests.simmac import Scenario, SimulatedMac
from verifylib import canonical
from verifylib.canonical import tree_digest
from verifylib.evidence import gates, receipt
from verifylib.evidence.export.schema import CompileEvidence
from verifylib.runtime import contracts

pytestmark = pytest.mark.physical  # real whisper.cpp builds and launches, as test_scenarios

SLOT = "fp32/ggml-model-encoder.mlmodelc"


def _stages(p, run_dir: Path, stages, sim: SimulatedMac) -> None:
    with sim:
        for s in stages:
            importlib.import_module(f"verifylib.stages.{s.split('_', 1)[1]}").run(p, run_dir)


@pytest.fixture(scope="module")
def given(tmp_path_factory, verifylib_cache):
    return given_files(tmp_path_factory.getbasetemp(), verifylib_cache)


@pytest.fixture(scope="module")
def mac(given, tmp_path_factory):
    """Both audits on the simulated Mac: ``ours`` (the whole audit, published) and
    ``other`` (stages 01 and 02 with another model's encoder at the same path)."""
    from verifylib.models import coreml_package

    base = tmp_path_factory.mktemp("prebuilt-mac")
    named = base / "downloads" / given.encoder.name  # what encoder.path names
    shutil.copytree(given.encoder, named)
    p = audit_params(given.ggml, named, "prebuilt-mlmodelc")
    prefix = base / "after-01"
    _stages(p, prefix, gates.STAGES[:1], SimulatedMac(Scenario(), base / "state-01"))

    def refuse(*_a, **_k):
        raise AssertionError("export.compile compiled a package for a given .mlmodelc")
    mp = pytest.MonkeyPatch()
    mp.setattr(coreml_package, "compile_mlpackage", refuse)
    try:
        ours = base / "ours"
        shutil.copytree(prefix, ours, symlinks=True)
        _stages(p, ours, gates.STAGES[1:], SimulatedMac(Scenario(), base / "state-ours"))
        shutil.rmtree(named)
        shutil.copytree(given.other, named)
        other = base / "other"
        shutil.copytree(prefix, other, symlinks=True)
        _stages(p, other, gates.STAGES[1:2], SimulatedMac(Scenario(), base / "state-other"))
    finally:
        mp.undo()
    receipt.build_receipt(ours)
    return {"ours": ours, "other": other}


# ----------------------------------------------------------------------------- stage 02

def test_contract_audits_the_given_mlmodelc(mac, given):
    run = mac["ours"]
    rec = gate_records(run)["export.contract"]
    assert rec["status"] == "PASS", rec["reason"]
    assert "audited as given" in rec["reason"]["detail"]
    assert "parity policy fp32-v1" in rec["reason"]["detail"]
    doc = canonical.read_json(run / "evidence/02_export/contract.json")
    pre = doc["prebuilt"]
    assert (pre["format"], pre["precision"], pre["parity_policy"]) == \
        ("mlmodelc", "fp32", "fp32-v1")
    assert pre["given"].endswith("/downloads/ggml-tiny.en-encoder.mlmodelc")
    card = pre["card"]
    assert card["read_from"] == ["metadata.json", "model.mil"]  # the program text was read
    assert (card["layout"], card["weight_compression"]) == ("plain", "none")
    assert card["name"] == "ggml-model-encoder.mlmodelc"  # as the placed copy reads
    assert pre["source_tree_digest"] == tree_digest(given.encoder)
    (v,) = doc["variants"]
    assert v["path"] == SLOT and v["placed"] and v["tree_digest"] == pre["source_tree_digest"]
    assert not (run / "fp32/ggml-model-encoder.mlpackage").exists()


def test_compile_places_the_given_folder_without_compiling(mac, given):
    run = mac["ours"]
    rec = gate_records(run)["export.compile"]
    assert rec["status"] == "PASS", rec["reason"]
    assert [e["name"] for e in rec["evidence"]] == ["compile"]  # no coremlc stream
    doc = canonical.read_json(run / "evidence/02_export/compile.json")
    (v,) = doc["variants"]
    assert "coremlc" not in v and CompileEvidence.from_json(doc).variants[0].coremlc is None
    assert v["package"] == SLOT
    ggml = canonical.read_json(run / "evidence/02_export/ggml.json")
    assert v["model_arg"] == ggml["model_arg"] == str(run / "fp32/ggml-model.bin")
    assert v["placed_path"] == contracts.coreml_encoder_path(v["model_arg"]) == str(run / SLOT)
    assert v["tree_digest"] == v["package_tree_digest"] == tree_digest(given.encoder) \
        == tree_digest(run / SLOT)


def test_pair_runs_the_compiled_model_and_passes(mac, given):
    run = mac["ours"]
    rec = gate_records(run)["export.pair"]
    assert rec["status"] == "PASS", rec["reason"]
    doc = canonical.read_json(run / "evidence/02_export/pair.json")
    assert doc["execution"] == "coreml-all"
    assert doc["encoder"] == SLOT and doc["encoder_tree_digest"] == tree_digest(given.encoder)
    assert (doc["floor"]["ftype"], doc["floor"]["precision"]) == ("f16", "fp32")
    assert [i["input"] for i in doc["inputs"]] == ["fixture", "random"]
    for i in doc["inputs"]:
        # Core ML exposes no intermediate value: nothing tapped, nothing named.
        assert i["block_snr_db"] == [] and i["first_divergent_block"] is None
        # canonical JSON spells an exact match "inf"
        assert float(i["snr_db"]) > 60 and float(i["cosine"]) > 0.99999, i


def test_another_models_encoder_fails_the_pair(mac):
    run = mac["other"]
    recs = gate_records(run)
    assert recs["export.contract"]["status"] == "PASS"  # same shapes, same interface
    assert recs["export.compile"]["status"] == "PASS"
    rec = recs["export.pair"]
    assert rec["status"] == "FAIL", rec["reason"]
    detail = rec["reason"]["detail"]
    assert "does not compute the encoder of fp32/ggml-model.bin" in detail
    assert detail.count("no block could be tapped") == 2, detail  # both inputs
    doc = canonical.read_json(run / "evidence/02_export/pair.json")
    assert doc["execution"] == "coreml-all"
    assert all(float(i["snr_db"]) < 10 and i["block_snr_db"] == [] for i in doc["inputs"]), doc


# ----------------------------------------------------------------------------- stage 04

def test_program_parity_is_measured_through_compiled_mlmodel(mac):
    from verifylib.evidence.parity.rules import judge_parity
    run = mac["ours"]
    rec = gate_records(run)["parity.program"]
    doc = canonical.read_json(run / "evidence/04_parity/program.json")
    assert doc["kind"] == "program" and doc["artifact"]["path"] == SLOT
    assert doc["artifact"]["tree_digest"] == doc["artifact"]["exported_tree_digest"]
    assert doc["candidate"]["runtime"] == "coremltools.models.CompiledMLModel"
    assert doc["candidate"]["compute_units"] == "ALL"
    assert [(m["input"], m["execution"]) for m in doc["measurements"]] == \
        [("fixture", "coreml-all"), ("random", "coreml-all")]
    assert doc["policy"]["id"] == doc["choice"]["policy_id"] == "fp32-v1"
    assert (doc["choice"]["precision"], doc["choice"]["source_ftype"]) == ("fp32", "f16")
    assert not any(e["name"] == "attribution" for e in rec["evidence"])  # no program read
    # The policy's own judgement of the measurement: fixture/coreml-all meets fp32-v1.
    j = judge_parity(doc, "fp32-v1", "program")
    assert j.status.value == "PASS", j.detail
    assert "fixture/coreml-all" in j.detail


def test_program_parity_passes(mac):
    rec = gate_records(mac["ours"])["parity.program"]
    assert rec["status"] == "PASS", rec["reason"]


# ----------------------------------------------------------------------------- the audit

def test_every_other_required_gate_passes(mac):
    rec = canonical.read_json(mac["ours"] / "receipt.json")
    bad = {g["id"]: (g["status"], g["reason"]["detail"][:120]) for g in rec["gates"]
           if gates.gate(g["id"]).required and g["status"] != "PASS"}
    assert set(bad) <= {"parity.program"}, bad


def test_the_plan_of_a_given_fp32_encoder_says_why_it_has_no_neural_engine_share(mac):
    """The plan records the program's declared precision (the card's), its view explains
    the missing Neural Engine share, and the report's first screen warns: nothing but this
    fp32 encoder is planned, and at v1.8.5 upstream's converter makes fp16 programs."""
    from verifylib.evidence.runs import open_run
    from verifylib.models.converter_precision import (neural_engine_warning,
                                                      planned_from_identities)
    from verifylib.views.placement import summarize

    run = open_run(mac["ours"])
    plan = run.placement.plans["fp32"]
    assert (plan.variant, plan.precision) == ("fp32", "fp32")
    assert "not expected" in plan.claim
    assert "never on the Neural Engine" in summarize("fp32", plan).no_neural_engine
    ids = canonical.read_json(mac["ours"] / "receipt.json")["identities"]
    warning = neural_engine_warning(planned_from_identities(ids), ids["runtime.pin"])
    assert warning.startswith("The audited encoder computes in float32")
    assert "at pin v1.8.5 makes float16 programs" in warning


def test_whole_audit_is_admissible(mac):
    assert canonical.read_json(mac["ours"] / "receipt.json")["verdict"] == "ADMISSIBLE"


def test_verify_accepts_the_run_only_with_allow_simulated(mac):
    run = mac["ours"]
    refused = receipt.verify(run)
    assert not refused.ok and any("simulated" in x for x in refused.problems)
    res = receipt.verify(run, allow_simulated=True)
    assert res.ok, res.problems
    assert res.verdict == canonical.read_json(run / "receipt.json")["verdict"]


def test_verify_rederives_the_policy_from_the_published_encoder(mac, tmp_path):
    """The declarations are read again from the published bytes: the placed .mlmodelc's card
    and the .bin's header choose fp32-v1. A clone whose placed encoder now declares float16
    compute, every digest refreshed by a forger, is refused for exactly that."""
    from tests.helpers.forge import clone, reseal
    from verifylib.evidence.declarations import declaration_problems
    from verifylib.evidence.records import GateRecord
    from verifylib.models.encoder_reader import describe_encoder
    from verifylib.models.ggml_file import open_ggml
    from verifylib.numerics.parity import choose_parity_policy

    run = mac["ours"]
    params = canonical.read_json(run / "run.json")["params"]
    records = {k: GateRecord.from_record(v) for k, v in gate_records(run).items()}
    assert declaration_problems(run, records, params) == []
    card = describe_encoder(run / SLOT)
    ftype = open_ggml(run / "fp32/ggml-model.bin").ftype_name
    assert (card.precision, ftype) == ("fp32", "f16")
    assert choose_parity_policy(card.precision, ftype).policy_id == "fp32-v1"

    forged = clone(run, tmp_path / "forged")
    mil = forged / SLOT / "model.mil"
    head, sep, body = mil.read_text().partition("{\n            ")  # the fp32 signature stays
    mil.unlink()  # a clone shares inodes with the original: replace, never write in place
    mil.write_text(head + sep + re.sub(r"tensor<fp32,", "tensor<fp16,", body))
    assert describe_encoder(forged / SLOT).precision == "fp16"
    reseal(forged)
    res = receipt.verify(forged, allow_simulated=True)
    assert not res.ok
    joined = "\n".join(res.problems)
    assert "the published encoder declares fp16" in joined, res.problems
    assert "choose fp16-v1" in joined, res.problems
