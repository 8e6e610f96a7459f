"""Op-level drift attribution, the pure parts: the op-to-module mapping, ΔSNR across unmapped
ops and its re-derivation from stored SNRs. tests/physical/test_drift.py runs
``verifylib drift`` on the real tiny.en encoder."""

from __future__ import annotations

import copy
import math

import pytest

from verifylib import canonical
from verifylib.numerics.attribution import CEILING_DB, Attribution, OpDrift
from verifylib.numerics.drift import check_document, derive
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
    att = Attribution(ops=d, top=drift._rank(d, "delta_snr_db"),
                      precision_top=drift._rank(d, "precision_delta_snr_db"),
                      modules=drift._summaries(d))
    return canonical.loads(canonical.dumps(att.as_dict()))


def test_a_stored_attribution_must_follow_from_its_snrs():
    ops = [_op(0, "a", ["x"], math.inf, 140.0, module="layers.0.fc1"),
           _op(1, "c", ["a"], 30.0, 110.0, module="layers.1.fc1")]
    doc = _doc_of(ops)
    assert check_document(doc) == []
    assert [r["name"] for r in doc["top"]] == ["c"]
    forged = copy.deepcopy(doc)
    forged["ops"][1]["delta_snr_db"] = -1.0
    assert any("does not follow" in p for p in check_document(forged))
    forged = copy.deepcopy(doc)
    forged["top"] = [forged["ops"][0]]
    assert any("top is not" in p for p in check_document(forged))
    forged = copy.deepcopy(doc)
    forged["modules"][0]["delta_snr_db"] = 5.0
    assert any("per-module" in p for p in check_document(forged))
    forged = copy.deepcopy(doc)
    forged["ceiling_db"] = 300.0
    assert check_document(forged)
    assert check_document({"ops": "x"})
