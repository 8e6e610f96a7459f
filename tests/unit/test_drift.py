"""Op-level drift attribution, the pure parts: the op-to-module mapping, ΔSNR across unmapped
ops and its re-derivation from stored SNRs. tests/physical/test_drift.py runs
``verifylib drift`` on the real tiny.en encoder."""

from __future__ import annotations

import copy
import math
import re

import pytest

from verifylib import canonical
from verifylib.evidence.fields import SchemaError
from verifylib.evidence.parity.rules import attribution_problems
from verifylib.evidence.parity.schema import UNRECORDED_CEILING_DB, AttributionEvidence
from verifylib.numerics.attribution import CEILING_DB, Attribution, OpDrift
from verifylib.numerics.drift import derive
from verifylib.numerics.program_map import module_keys, weight_module


def test_weight_names_map_to_the_longest_module_path():
    keys = module_keys(["conv1", "layers.0", "layers.0.fc1", "layers.1.fc1", "layers.10.fc1",
                        "layers.0.self_attn", "layers.0.self_attn.q_proj", "layer_norm",
                        "layers.0.self_attn_layer_norm"])
    assert weight_module("encoder_layers_0_fc1_weight", keys) == "layers.0.fc1"
    assert weight_module("encoder_layers_10_fc1_bias_to_fp16", keys) == "layers.10.fc1"
    assert weight_module("encoder_layers_0_self_attn_q_proj_weight", keys) == \
        "layers.0.self_attn.q_proj"
    assert weight_module("encoder_layers_0_self_attn_layer_norm_weight", keys) == \
        "layers.0.self_attn_layer_norm"
    assert weight_module("encoder_layer_norm_weight", keys) == "layer_norm"
    assert weight_module("linear_1_bias_0", keys) is None   # a zero bias coremltools made
    assert weight_module("var_72", keys) is None


def _op(i, name, inputs, snr, psnr, module="m", typ="linear"):
    return OpDrift(i, name, typ, module, module or "s", tuple(inputs), snr,
                   1.0 if snr is not None else None, None, psnr, 1.0, None)


def test_delta_is_taken_across_unmapped_ops_and_capped():
    ops = [_op(0, "a", ["x"], math.inf, 140.0),
           _op(1, "b", ["a"], None, 120.0, module=None, typ="softmax"),
           _op(2, "c", ["b"], 60.0, 110.0),
           _op(3, "d", ["c", "a"], 58.0, 111.0)]
    d = derive(ops, ["x"])
    assert d[0].delta_snr_db == 0.0            # inf and the exact input both cap at the ceiling
    assert d[0].precision_delta_snr_db == 140.0 - CEILING_DB
    assert d[1].delta_snr_db is None           # unmapped: no conversion figure of its own
    assert d[1].precision_delta_snr_db == pytest.approx(-20.0)
    assert d[2].delta_snr_db == 60.0 - CEILING_DB   # back through b to a (exact)
    assert d[3].delta_snr_db == pytest.approx(-2.0)  # worst input: c at 60 dB
    assert d[3].precision_delta_snr_db == pytest.approx(1.0)


def _doc_of(ops) -> dict:
    from verifylib.numerics import drift
    d = derive(ops, ["x"])
    att = Attribution(ops=d, top=drift.rank(d, "delta_snr_db"),
                      precision_top=drift.rank(d, "precision_delta_snr_db"),
                      modules=drift.module_summaries(d))
    return canonical.loads(canonical.dumps(att.as_dict()))


def test_a_stored_attribution_must_follow_from_its_snrs():
    ops = [_op(0, "a", ["x"], math.inf, 140.0, module="layers.0.fc1"),
           _op(1, "c", ["a"], 30.0, 110.0, module="layers.1.fc1")]
    doc = _doc_of(ops)
    assert attribution_problems(doc) == []
    assert [r["name"] for r in doc["top"]] == ["c"]
    forged = copy.deepcopy(doc)
    forged["ops"][1]["delta_snr_db"] = -1.0
    assert any("does not follow" in p for p in attribution_problems(forged))
    forged = copy.deepcopy(doc)
    forged["top"] = [forged["ops"][0]]
    assert any("top is not" in p for p in attribution_problems(forged))
    forged = copy.deepcopy(doc)
    forged["modules"][0]["delta_snr_db"] = 5.0
    assert any("per-module" in p for p in attribution_problems(forged))
    forged = copy.deepcopy(doc)
    forged["ceiling_db"] = 300.0
    assert attribution_problems(forged)
    assert attribution_problems({"ops": "x"})


# ----------------------------------------------------------------------------- typed document

def _stored() -> dict:
    return _doc_of([_op(0, "a", ["x"], math.inf, 140.0, module="layers.0.fc1"),
                    _op(1, "b", ["a"], None, 120.0, module=None, typ="softmax"),
                    _op(2, "c", ["b"], 30.0, 110.0, module="layers.1.fc1")])


def test_the_typed_document_reads_what_as_dict_writes_and_writes_it_back():
    doc = _stored()
    att = AttributionEvidence.from_json(doc)
    # Non-finite SNRs come back as floats, which the canonical JSON writes as the strings.
    assert canonical.dumps(att.to_json()) == canonical.dumps(doc)
    assert [o.name for o in att.top] == ["c"] and att.top[0] is att.op("c")
    assert (att.executed, att.mapped, att.precision_compared) == (3, 2, 3)
    assert (att.stated_unmapped, att.stated_mapped, att.stated_executed) == \
        (doc["unmapped"], doc["mapped"], doc["executed"])
    assert att.ops[0].snr_db == math.inf and att.ops[1].snr_db is None
    assert att.modules[0].module == "layers.0"
    assert att.table(att.top) == [doc["ops"][2]]


def test_a_document_of_an_earlier_version_reads_with_the_defaults_it_had():
    keep = ("ops", "top", "precision_top", "modules")
    att = AttributionEvidence.from_json({k: v for k, v in _stored().items() if k in keep})
    assert (att.points, att.compute, att.variant, att.fixture) == ((), "float32", None, None)
    assert (att.seconds, att.input_precision) == (0.0, {})
    assert att.ceiling_db == UNRECORDED_CEILING_DB == CEILING_DB
    assert (att.stated_unmapped, att.stated_mapped, att.stated_executed) == (None,) * 3


@pytest.mark.parametrize("edit, path", [
    (lambda d: d.update(ops="x"), "ops: expected an array"),
    (lambda d: d["ops"][1].update(snr_db="loud"), "ops[1].snr_db: expected a number"),
    (lambda d: d["ops"][0].pop("inputs"), "ops[0].inputs: missing"),
    (lambda d: d["modules"][0].update(extra=1), "modules[0].extra: not a field of this record"),
    (lambda d: d["top"][0].update(name="z"), "top[0].name: names no op of ops: 'z'"),
    (lambda d: d.update(mapped="2"), "mapped: expected an integer"),
])
def test_a_malformed_document_is_refused_in_the_schema_phrasing(edit, path):
    doc = _stored()
    edit(doc)
    with pytest.raises(SchemaError, match=re.escape(path)):
        AttributionEvidence.from_json(doc)
    (problem,) = attribution_problems(doc)
    assert problem.startswith(f"the attribution does not parse: {path}")
    assert attribution_problems([]) == [
        "the attribution does not parse: document: expected an object, got array"]


def test_the_stored_document_counts_its_ops_as_the_measurement_does():
    att = AttributionEvidence.from_json(_stored())
    assert (att.executed, att.mapped, att.unmapped) == (3, 2, 1)
