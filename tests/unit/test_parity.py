"""Parity, the pure parts: the float64 statistic, the versioned policies and their rule, and
the export rules failing closed on edited evidence. The export and parity stages end to end
on tiny.en are in tests/physical/test_parity.py."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest

from verifylib import canonical
from verifylib.evidence.records import EvidenceRef, EvidenceView
from verifylib.evidence.gates import Status
from verifylib.numerics.parity import (FP16_POLICY, FP32_POLICY, as_float, compare,
                                       cosine_from_sums, error_histogram, frame_snr_db,
                                       policy_record, snr_from_energies)
from verifylib.evidence.parity.rules import judge_parity
from verifylib.numerics.scoring import load_policy


# ----------------------------------------------------------------------------- statistic

def test_identical_tensors_give_infinite_snr():
    x = np.random.default_rng(0).normal(size=(1, 7, 5)).astype(np.float32)
    m = compare(x, x.copy())
    assert m.snr_db == math.inf and m.cosine == pytest.approx(1.0, abs=1e-15)
    assert m.max_abs_error == 0 and m.mean_abs_error == 0 and m.finite
    assert canonical.loads(canonical.dumps(m.as_dict()))["snr_db"] == "inf"


def test_snr_has_no_epsilon_floor_and_the_reference_is_the_signal():
    ref = np.ones(1000)
    cand = ref + 1e-10
    m = compare(ref, cand)
    assert m.snr_db == pytest.approx(200.0, abs=1e-3)
    # coremltools' helper saturates near 100 dB on the same data (docs/facts.md) ...
    from coremltools.converters.mil.testing_utils import compute_snr_and_psnr
    ct_snr, _ = compute_snr_and_psnr(cand, ref)
    assert ct_snr < 101
    # ... and the reference, not the candidate, is the signal.
    assert compare(np.full(4, 2.0), np.full(4, 1.0)).snr_db == pytest.approx(
        10 * math.log10(4 / 1))
    assert compare(np.full(4, 1.0), np.full(4, 2.0)).snr_db == pytest.approx(0.0)


def test_degenerate_energies():
    assert snr_from_energies(0.0, 0.0) != snr_from_energies(0.0, 0.0)   # nan
    assert snr_from_energies(0.0, 1.0) == -math.inf
    assert snr_from_energies(1.0, 0.0) == math.inf
    assert math.isnan(snr_from_energies(float("nan"), 1.0))
    assert math.isnan(cosine_from_sums(1.0, 0.0, 1.0))
    m = compare(np.ones(3), np.array([1.0, np.nan, 1.0]))
    assert not m.finite and math.isnan(m.snr_db)
    with pytest.raises(ValueError):
        compare(np.ones(3), np.ones(4))
    assert as_float("inf") == math.inf and math.isnan(as_float("nan"))
    with pytest.raises(ValueError):
        as_float("12")


def test_frame_snr_and_histogram():
    rng = np.random.default_rng(3)
    ref = rng.normal(size=(1, 6, 4))
    cand = ref.copy()
    cand[0, 2] += 1e-3
    snr = frame_snr_db(ref, cand)
    assert len(snr) == 6 and snr[0] == math.inf and math.isfinite(snr[2])
    h = error_histogram(ref, cand, bins=11)
    assert len(h["edges"]) == 12 and sum(h["counts"]) == 4 and h["zeros"] == ref.size - 4
    assert h["max_abs_error"] == pytest.approx(1e-3) and h["nonfinite"] == 0
    assert h["edges"][0] == pytest.approx(1e-12) and h["edges"][-1] == pytest.approx(1e-3)
    same = error_histogram(ref, ref)
    assert sum(same["counts"]) == 0 and same["zeros"] == ref.size


def test_policies_are_versioned_resources():
    p32, p16 = load_policy(FP32_POLICY), load_policy(FP16_POLICY)
    assert p32.rules["pass"] == {"snr_db_min": 100.0, "cosine_min": 0.9999}
    assert p16.rules["pass"] == {"snr_db_min": 40.0, "cosine_min": 0.999}
    for p in (p32, p16):
        assert p.rules["statistic"] == {"signal": "reference", "arithmetic": "float64",
                                        "epsilon_floor": False}
        assert p.rules["gated"]["input"] == "fixture"
        assert set(p.rules["recorded_not_gating"]) == {"max_abs_error", "mean_abs_error"}


# ----------------------------------------------------------------------------- the rule

def _evidence(snr_noise=1e-14, policy=FP32_POLICY, digest="a" * 64):
    rng = np.random.default_rng(0)
    ref = rng.normal(size=(1, 10, 8))
    meas = []
    for inp, ex, noise in (("fixture", "float32", snr_noise), ("fixture", "float64", 1e-13),
                           ("random", "float32", 0.0)):
        cand = ref + noise * rng.normal(size=ref.shape)
        meas.append({"input": inp, "execution": ex, "metrics": compare(ref, cand).as_dict()})
    ev = {"policy": policy_record(load_policy(policy)),
          "variant": load_policy(policy).rules["variant"], "kind": "program",
          "artifact": {"path": "fp32/x.mlpackage", "tree_digest": digest,
                       "exported_tree_digest": digest},
          "measurements": meas}
    return canonical.loads(canonical.dumps(ev))   # through strict JSON, as stored


def test_rule_passes_within_policy_and_reports_every_measurement():
    j = judge_parity(_evidence(), FP32_POLICY, "program")
    assert j.status is Status.PASS, j.detail
    assert "fixture/float32" in j.detail and "fixture/float64" in j.detail
    assert "random/float32: SNR inf dB" in j.detail


@pytest.mark.parametrize("edit,needle", [
    (lambda e: None, None),
    (lambda e: e["measurements"][0]["metrics"].update(noise_energy=1.0), "disagrees"),
    (lambda e: e["measurements"][0]["metrics"].update(snr_db=150.0), "disagrees"),
    (lambda e: e["policy"]["rules"]["pass"].update(snr_db_min=10.0), "packaged resource"),
    (lambda e: e["policy"].update(sha256="0" * 64), "packaged resource"),
    (lambda e: e["artifact"].update(tree_digest="b" * 64), "not the exported one"),
    (lambda e: e["measurements"].pop(0), "exactly one fixture/float32"),
    (lambda e: e["measurements"][0]["metrics"].update(finite=False), "non-finite"),
    (lambda e: e.update(variant="fp16"), "variant"),
])
def test_rule_fails_closed(edit, needle):
    ev = _evidence()
    edit(ev)
    j = judge_parity(ev, FP32_POLICY, "program")
    if needle is None:
        assert j.status is Status.PASS
    else:
        assert j.status is Status.FAIL and needle in j.detail, j.detail


def test_rule_applies_the_thresholds():
    j = judge_parity(_evidence(snr_noise=1e-4), FP32_POLICY, "program")
    assert j.status is Status.FAIL and "below 100 dB" in j.detail
    # The same numbers pass the looser fp16 policy, and only under its own id.
    ev = _evidence(snr_noise=1e-4, policy=FP16_POLICY)
    assert judge_parity(ev, FP16_POLICY, "program").status is Status.PASS
    assert judge_parity(ev, FP32_POLICY, "program").status is Status.FAIL
    # A runtime record must carry the runtime execution.
    assert "coreml-all" in judge_parity(_evidence(), FP32_POLICY, "runtime").detail


def test_export_rule_fails_closed_on_edited_evidence(tmp_path):
    """export.contract re-judged on stored evidence: edits to the description, the model
    values or the build facts are caught without touching the artifact."""
    from verifylib.evidence.gates import Status
    from verifylib.evidence.registry import RULES
    from verifylib.models.coreml_contract import EncoderContract
    import verifylib.stages  # noqa: F401  (registers the rules)
    c = EncoderContract(80, 1500, 384, 1, 2)
    desc = {"model_type": "mlProgram", "compute_dtypes": ["FLOAT32"],
            "inputs": [{"name": "logmel_data", "type": "multiArrayType", "dtype": "FLOAT32",
                        "shape": [1, 80, 3000], "flexible_shape": None}],
            "outputs": [{"name": "output", "type": "multiArrayType", "dtype": "FLOAT32",
                         "shape": [1, 1500, 384], "flexible_shape": None}]}
    # A complete contract document, shaped as stage 02 writes it (parsed strictly).
    good = {"model": {"hf_dir": "/c/models/m", "source_digest": "a" * 64,
                      "from": "export.ggml_model evidence"},
            "config": c.values(), "contract": c.as_dict(),
            "variants": [{"precision": "fp32", "path": "fp32/ggml-model-encoder.mlpackage",
                          "description": desc, "problems": [], "placed": True,
                          "tree_digest": "d" * 64,
                          "conversion": {"options": {"compute_precision": "FLOAT32"},
                                         "seconds": 3.5}}],
            "build": {"coremltools": "9.0", "torch": "2.13.0", "transformers": "4.57.1",
                      "numpy": "2.3.4", "torch_above_tested": True,
                      "torch_max_tested_by_coremltools": "2.7.0",
                      "torch_version_warning": ["Torch version 2.13.0 has not been tested"],
                      "trace_seconds": 1.25},
            "model_copies": {}}

    log_sha = canonical.atomic_write_bytes(tmp_path / "convert-fp32.log.txt", b"converted\n")

    def judge(d, logs=(("fp32", log_sha),)):
        path = tmp_path / "contract.json"
        sha = canonical.write_json(path, d)
        refs = [EvidenceRef("contract", "contract.json", sha)]
        refs += [EvidenceRef(f"convert_log_{v}", f"convert-{v}.log.txt", h) for v, h in logs]
        return RULES["export.contract"](EvidenceView(tmp_path, refs))

    assert judge(good).status is Status.PASS
    j = judge(good, logs=())
    assert j.status is Status.FAIL and "conversion logs" in j.detail
    edits = [
        (lambda d: d["variants"][0]["description"]["outputs"][0].update(dtype="FLOAT16"),
         "disagree"),
        (lambda d: d["config"].update(n_mels=128), "not the one"),
        (lambda d: d["build"].update(torch_version_warning=[]), "warning was not recorded"),
        (lambda d: d["variants"][0].update(precision="fp16"), "no fp32 variant"),
        (lambda d: d["variants"].append(dict(d["variants"][0], precision="fp16")),
         "conversion logs"),
        (lambda d: (d["variants"][0]["description"]["inputs"][0].update(shape=[1, 80, 1500]),
                    d["variants"][0].update(placed=False, tree_digest=None,
                                            problems=["logmel_data: shape [1, 80, 1500], the "
                                                      "contract is [1, 80, 3000]"])),
         "refused before placement"),
        (lambda d: (d["variants"][0]["description"]["inputs"][0].update(shape=[1, 80, 1500]),
                    d["variants"][0].update(problems=["logmel_data: shape [1, 80, 1500], the "
                                                      "contract is [1, 80, 3000]"])),
         "placed although"),
    ]
    for edit, needle in edits:
        d = copy.deepcopy(good)
        edit(d)
        j = judge(d)
        assert j.status is Status.FAIL and needle in j.detail, (needle, j.detail)


def test_compile_rule_requires_the_derived_path(tmp_path):
    from verifylib.evidence.gates import Status
    from verifylib.evidence.registry import RULES
    import verifylib.stages  # noqa: F401
    # A complete compile entry, shaped as stage 02 writes it (parsed strictly).
    entry = {"precision": "fp32", "package": "fp32/ggml-model-encoder.mlpackage",
             "package_tree_digest": "d" * 64, "model_arg": "/r/fp32/ggml-model.bin",
             "derived_path": "/r/fp32/ggml-model-encoder.mlmodelc",
             "placed_path": "/r/fp32/ggml-model-encoder.mlmodelc", "tree_digest": "e" * 64,
             "coremlc": {"argv": [], "returncode": 0, "signal": None, "timed_out": False,
                         "wall_s": 2.0}}

    def judge(entries):
        sha = canonical.write_json(tmp_path / "compile.json",
                                   {"variants": entries, "coremlc": "/usr/bin/coremlc"})
        return RULES["export.compile"](EvidenceView(tmp_path, [EvidenceRef(
            "compile", "compile.json", sha)]))

    assert judge([entry]).status is Status.PASS
    assert judge([{**entry, "placed_path": "/r/fp32/encoder.mlmodelc"}]).status is Status.FAIL
    assert judge([{**entry, "coremlc": {**entry["coremlc"], "returncode": 1}}]).status \
        is Status.FAIL
    assert judge([{**entry, "precision": "fp16"}]).status is Status.FAIL
