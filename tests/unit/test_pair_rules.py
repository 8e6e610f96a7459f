"""The pair gate's rule, the policy choice, and the contract of an encoder audited as given.

Documents are built as :mod:`verifylib.stages.pair` and :mod:`verifylib.stages.prebuilt`
write them; each test edits one field the way a forger or a broken stage would and checks
the rule's verdict and words.
"""

from __future__ import annotations

import copy

import pytest

from tests.unit.test_schemas_export import DESC, _view, contract_doc
from verifylib import canonical
from verifylib.errors import EvidenceInvalid
from verifylib.evidence.gates import Capability, Status, capability_of, gate
from verifylib.evidence.export.rules import RULES
from verifylib.evidence.export.schema import PairEvidence
from verifylib.numerics.parity import (
    FP16_POLICY,
    FP32_POLICY,
    PAIR_POLICY,
    QUANTIZED_FTYPES,
    choose_parity_policy,
    pair_floor,
    policy_record,
)
from verifylib.numerics.scoring import load_policy


def pair_doc(ftype="f16", precision="fp32", snrs=(62.5, 48.0), blocks=(90.0, 80.0, 70.0, 65.0)):
    pol = load_policy(PAIR_POLICY)
    smin, cmin = pair_floor(pol.rules, ftype, precision)
    inputs = []
    for name, snr in zip(("fixture", "random"), snrs):
        blk = [b if snr >= smin else b - 100 for b in blocks]
        first = next((i for i, b in enumerate(blk) if not b >= smin), None)
        inputs.append({"input": name, "logmel_sha256": "f" * 64, "snr_db": snr,
                       "cosine": 0.999999 if snr >= smin else 0.1, "max_abs_error": 0.01,
                       "block_snr_db": blk, "first_divergent_block": first})
    return canonical.loads(canonical.dumps({
        "policy": policy_record(pol), "model_file": "fp32/ggml-model.bin",
        "model_sha256": "b" * 64, "encoder": "fp32/ggml-model-encoder.mlpackage",
        "encoder_tree_digest": "d" * 64, "reference": "rebuilt", "execution": "program-float32",
        "floor": {"ftype": ftype, "precision": precision, "snr_db_min": smin,
                  "cosine_min": cmin},
        "inputs": inputs, "seconds": 4.2}))


def judge_pair(tmp_path, doc, policy=None):
    pol = policy if policy is not None else policy_record(load_policy(PAIR_POLICY))
    return RULES["export.pair"](_view(tmp_path, {"pair": doc, "pair_policy": pol}, {}))


def test_pair_round_trip_and_pass(tmp_path):
    doc = pair_doc()
    assert PairEvidence.from_json(doc).to_json() == doc
    j = judge_pair(tmp_path, doc)
    assert j.status is Status.PASS, j.detail
    assert "computes the encoder of fp32/ggml-model.bin" in j.detail


@pytest.mark.parametrize("ftype", ["f32", "f16", *QUANTIZED_FTYPES])
@pytest.mark.parametrize("precision", ["fp32", "fp16", "mixed"])
def test_every_ftype_and_precision_has_a_floor(ftype, precision):
    smin, cmin = pair_floor(load_policy(PAIR_POLICY).rules, ftype, precision)
    assert smin > 0 and 0 < cmin < 1


def test_a_quantized_file_gets_a_lower_floor_than_a_full_precision_one():
    rules = load_policy(PAIR_POLICY).rules
    full = pair_floor(rules, "f16", "fp16")[0]
    for q in QUANTIZED_FTYPES:
        assert pair_floor(rules, q, "fp16")[0] < full, q


def test_a_different_model_fails_and_names_the_first_divergent_block(tmp_path):
    j = judge_pair(tmp_path, pair_doc(snrs=(-2.0, -3.0)))
    assert j.status is Status.FAIL
    assert "does not compute the encoder of fp32/ggml-model.bin" in j.detail
    assert "first diverge at encoder block 0" in j.detail


def test_a_later_divergence_is_named(tmp_path):
    doc = pair_doc()
    floor = doc["floor"]["snr_db_min"]
    fx = doc["inputs"][0]
    fx["snr_db"], fx["block_snr_db"] = floor - 5, [90.0, 80.0, floor - 1, floor - 5]
    fx["first_divergent_block"] = 2
    j = judge_pair(tmp_path, doc)
    assert j.status is Status.FAIL and "first diverge at encoder block 2" in j.detail


@pytest.mark.parametrize("edit, words", [
    (lambda d: d["floor"].__setitem__("snr_db_min", 1.0), "is not pair-v1's"),
    (lambda d: d["floor"].__setitem__("ftype", "q8_1"), "no floor for ftype 'q8_1'"),
    (lambda d: d["policy"]["rules"]["floors"]["f16"]["fp32"].__setitem__("snr_db_min", 0.0),
     "not the packaged resource"),
    (lambda d: d.__setitem__("inputs", d["inputs"][:1]), "are not pair-v1's"),
    (lambda d: d.__setitem__("execution", "program-float64"), "is not one pair-v1 gates"),
    (lambda d: d["inputs"][0].__setitem__("first_divergent_block", 3),
     "is not the first block below"),
    (lambda d: d.__setitem__("model_sha256", "xyz"), "malformed digest"),
])
def test_pair_forgeries_fail(tmp_path, edit, words):
    doc = pair_doc()
    edit(doc)
    j = judge_pair(tmp_path, doc)
    assert j.status is Status.FAIL and words in j.detail, j.detail


def test_a_relaxed_policy_file_is_refused_even_when_the_document_agrees(tmp_path):
    doc = pair_doc()
    relaxed = copy.deepcopy(doc["policy"])
    relaxed["rules"]["floors"]["f16"]["fp32"]["snr_db_min"] = 0.0
    doc["policy"] = relaxed
    j = judge_pair(tmp_path, doc, policy=relaxed)
    assert j.status is Status.FAIL and "not the packaged resource" in j.detail


# ----------------------------------------------------------------------------- policy choice

@pytest.mark.parametrize("precision, ftype, want", [
    ("fp32", None, FP32_POLICY), ("fp16", None, FP16_POLICY), ("mixed", None, FP16_POLICY),
    ("fp32", "f16", FP32_POLICY), ("fp16", "f32", FP16_POLICY),
    ("fp16", "q5_0", PAIR_POLICY), ("fp32", "q4_0", PAIR_POLICY), ("fp16", "q8_0", PAIR_POLICY),
])
def test_the_policy_is_chosen_from_the_declarations(precision, ftype, want):
    c = choose_parity_policy(precision, ftype)
    assert c.policy_id == want and c.why
    if want == PAIR_POLICY:
        assert "only a full-precision source bounds the conversion error" in c.why


@pytest.mark.parametrize("precision, ftype", [("int8", None), ("fp16", "q8_1"), ("", "f16")])
def test_an_unknown_declaration_is_refused(precision, ftype):
    with pytest.raises(EvidenceInvalid):
        choose_parity_policy(precision, ftype)


def test_a_given_mlmodelc_moves_the_program_gates_to_macos():
    given = {"encoder": {"path": "/m/ggml-tiny.en-encoder.mlmodelc"}}
    package = {"encoder": {"path": "/m/ggml-tiny.en-encoder.mlpackage"}}
    for gid in ("export.pair", "parity.program"):
        assert capability_of(gate(gid), given) is Capability.MACOS
        assert capability_of(gate(gid), package) is Capability.ANY
        assert capability_of(gate(gid), {}) is Capability.ANY
    assert capability_of(gate("export.compile"), given) is Capability.MACOS
    assert capability_of(gate("export.compile"), {}) is Capability.MACOS_XCODE


# ----------------------------------------------------------------------------- prebuilt contract

def prebuilt_contract(precision="fp16", policy=FP16_POLICY, dtypes=("FLOAT16", "FLOAT32")):
    doc = contract_doc()
    v = doc["variants"][0]
    del v["conversion"]
    v["description"] = copy.deepcopy(dict(DESC, compute_dtypes=list(dtypes)))
    doc["build"]["trace_seconds"] = 0.0
    doc["prebuilt"] = {"given": "/dl/ggml-tiny.en-encoder.mlpackage", "format": "mlpackage",
                       "source_tree_digest": v["tree_digest"],
                       "card": {"precision": precision,
                                "converter": {"source": "torch", "coremltools_version": "8.1"}},
                       "precision": precision, "parity_policy": policy}
    return doc


def judge_prebuilt(tmp_path, doc):
    return RULES["export.contract"](_view(tmp_path, {"contract": doc}, {}))


def test_a_given_fp16_encoder_passes_its_contract_at_its_declared_precision(tmp_path):
    j = judge_prebuilt(tmp_path, prebuilt_contract())
    assert j.status is Status.PASS, j.detail
    assert "audited as given" in j.detail and "fp16-v1" in j.detail


@pytest.mark.parametrize("edit, words", [
    (lambda d: d["prebuilt"].__setitem__("precision", "fp32"), "is not the card's"),
    (lambda d: d["prebuilt"].__setitem__("parity_policy", FP32_POLICY), "cannot be chosen"),
    (lambda d: d["prebuilt"].__setitem__("source_tree_digest", "9" * 64),
     "is not the given one"),
    (lambda d: d["variants"].append(dict(d["variants"][0], precision="fp16")), "fp32 slot only"),
])
def test_prebuilt_contract_forgeries_fail(tmp_path, edit, words):
    doc = prebuilt_contract()
    edit(doc)
    j = judge_prebuilt(tmp_path, doc)
    assert j.status is Status.FAIL and words in j.detail, j.detail


ARCHIVE = {"sha256": "a" * 64, "bytes": 1234, "top": "ggml-tiny.en-encoder.mlmodelc",
           "files": [{"path": "coremldata.bin", "bytes": 16, "crc32": "0000beef"},
                     {"path": "metadata.json", "bytes": 4, "crc32": "12345678"}],
           "skipped": 0}


def zipped_contract():
    doc = prebuilt_contract()
    doc["prebuilt"].update(given="/dl/ggml-tiny.en-encoder.mlmodelc.zip", format="mlmodelc",
                           archive=copy.deepcopy(ARCHIVE))
    doc["variants"][0]["path"] = "fp32/ggml-model-encoder.mlmodelc"
    return doc


def test_a_given_zip_passes_with_its_archive_record(tmp_path):
    j = judge_prebuilt(tmp_path, zipped_contract())
    assert j.status is Status.PASS, j.detail
    assert "mlmodelc.zip audited as given (zip sha256 aaaaaaaaaaaa…, 2 files" in j.detail


def test_the_archive_record_is_optional_and_round_trips():
    from verifylib.evidence.export.schema import ContractEvidence
    old = prebuilt_contract()
    parsed = ContractEvidence.from_json(old)
    assert parsed.prebuilt.archive is None
    assert parsed.to_json() == old  # an absent key is not written back
    doc = zipped_contract()
    parsed = ContractEvidence.from_json(doc)
    assert parsed.prebuilt.archive.files[1].crc32 == "12345678"
    assert parsed.to_json() == doc


@pytest.mark.parametrize("edit, words", [
    (lambda d: d["prebuilt"].pop("archive"), "is a zip, but no archive record"),
    (lambda d: d["prebuilt"].__setitem__("given", "/dl/e.mlmodelc"), "which is no .mlmodelc.zip"),
    (lambda d: d["prebuilt"]["archive"].__setitem__("sha256", "nope"), "malformed archive"),
    (lambda d: d["prebuilt"]["archive"]["files"].reverse(), "not sorted and unique"),
    (lambda d: d["prebuilt"]["archive"]["files"][0].__setitem__("crc32", "xyz"),
     "malformed size or CRC-32"),
])
def test_archive_record_forgeries_fail(tmp_path, edit, words):
    doc = zipped_contract()
    edit(doc)
    j = judge_prebuilt(tmp_path, doc)
    assert j.status is Status.FAIL and words in j.detail, j.detail


def test_a_float16_interface_breaks_the_contract(tmp_path):
    doc = prebuilt_contract()
    v = doc["variants"][0]
    v["description"]["outputs"][0]["dtype"] = "FLOAT16"
    from verifylib.models.coreml_contract import EncoderContract, contract_problems
    c = EncoderContract(**doc["config"])
    v["problems"] = contract_problems(v["description"], c, "fp16")
    v["placed"], v["tree_digest"] = False, None
    j = judge_prebuilt(tmp_path, doc)
    assert j.status is Status.FAIL and "breaks the runtime contract" in j.detail
    assert any("FLOAT16" in p for p in v["problems"])


# ----------------------------------------------------------------------------- a given .mlmodelc read from its text

def _compiled_in_run(tmp_path):
    """A given compiled model placed in the run (tmp_path is the run directory)."""
    from verifylib.canonical import sha256_file
    folder = tmp_path / "fp32/ggml-model-encoder.mlmodelc"
    (folder / "weights").mkdir(parents=True)
    (folder / "model.mil").write_text("program(1.0)\n")
    (folder / "weights/weight.bin").write_bytes(b"\0" * 64)
    return {"read_from": "model.mil", "model_mil_sha256": sha256_file(folder / "model.mil"),
            "weight_bin_sha256": sha256_file(folder / "weights/weight.bin"),
            "program_version": "1.0", "opset": "ios16", "coremlc_version": "3500.32.1",
            "build_info": {"coremlc-version": "3500.32.1"}}


def _text_pair_doc(source):
    doc = pair_doc()
    doc["encoder"] = "fp32/ggml-model-encoder.mlmodelc"
    doc["program_source"] = source
    return doc


def test_a_given_mlmodelc_read_from_its_text_passes_and_needs_no_mac(tmp_path):
    from verifylib.evidence.export.rules import program_read_from_text
    from verifylib.evidence.registry import program_from_text

    doc = _text_pair_doc(_compiled_in_run(tmp_path))
    assert PairEvidence.from_json(doc).to_json() == doc
    j = judge_pair(tmp_path, doc)
    assert j.status is Status.PASS, j.detail
    view = _view(tmp_path, {"pair": doc}, {})
    assert program_read_from_text(view) and program_from_text("export.pair", view)
    params = {"encoder": {"path": "/d/ggml-base-encoder.mlmodelc"}}
    assert capability_of(gate("export.pair"), params, program_from_text=True) is Capability.ANY
    assert not program_from_text("export.pair", _view(tmp_path, {"pair": pair_doc()}, {}))
    assert not program_from_text("parity.runtime", view)


@pytest.mark.parametrize("edit, words", [
    (lambda d, s: d.pop("program_source"), "without recording the model.mil"),
    (lambda d, s: s.update(model_mil_sha256="0" * 64), "model.mil digest"),
    (lambda d, s: s.update(weight_bin_sha256="1" * 64), "weights/weight.bin digest"),
    (lambda d, s: s.update(weight_bin_sha256=None), "weights/weight.bin digest"),
    (lambda d, s: s.update(model_mil_sha256="x"), "malformed digest"),
    (lambda d, s: s.update(read_from="coremldata.bin"), "does not name the model.mil"),
    (lambda d, s: d.update(encoder="fp32/ggml-model-encoder.mlpackage"),
     "is not a compiled model"),
    (lambda d, s: d.update(encoder="../elsewhere.mlmodelc"), "not a path inside the run"),
    (lambda d, s: d.update(execution="coreml-all"), "program source is recorded for execution"),
])
def test_a_program_source_that_is_not_the_runs_files_fails(tmp_path, edit, words):
    doc = _text_pair_doc(_compiled_in_run(tmp_path))
    edit(doc, doc.get("program_source") or {})
    j = judge_pair(tmp_path, doc)
    assert j.status is Status.FAIL and words in j.detail, j.detail
