"""The export + parity stages end to end on tiny.en (including an artifact whose weight was
edited), and runtime parity with a fake compiled model.

Stage 04 runs in this process under :func:`tests.helpers.same_numbers.reusing_numbers`: the
edited run's reference and its untouched fp16 package are the staged run's computations on
the same bytes, reused; its edited fp32 package executes for real."""

from __future__ import annotations

import copy
import math
import shutil
from pathlib import Path

import numpy as np
import pytest

from tests.helpers.encoders import edit_weight
from tests.helpers.same_numbers import reusing_numbers
from verifylib import canonical
from verifylib.evidence.gates import Status
from verifylib.evidence.parity.rules import judge_parity
from verifylib.numerics.parity import FP16_POLICY, FP32_POLICY, compare, policy_record
from verifylib.numerics.scoring import load_policy


def test_runtime_measurement_with_a_fake_compiled_model(tiny_en_bundle):
    """The macOS path's decision logic: CompiledMLModel is faked, never run here."""
    from verifylib.models.coreml_contract import EncoderContract
    from verifylib.stages.parity import ReferenceRun, measure_runtime
    c = EncoderContract(8, 5, 4, 1, 2)
    rng = np.random.default_rng(5)
    ref_out = {k: rng.normal(size=c.output_shape).astype(np.float32) for k in ("fixture", "random")}
    ins = {k: rng.normal(size=c.input_shape).astype(np.float32) for k in ("fixture", "random")}
    ref = ReferenceRun(c, ins, {}, ref_out, {}, {"fixture": 0.1, "random": 0.1}, 3)

    class Fake:
        def __init__(self, path, compute_units=None):
            self.compute_units = compute_units

        def predict(self, feeds):
            x = feeds["logmel_data"]
            kind = "fixture" if np.array_equal(x, ins["fixture"]) else "random"
            return {"output": (ref_out[kind] * (1 + 1e-3)).astype(np.float32)}

    meas, drift, arrays = measure_runtime("/x.mlmodelc", ref, loader=Fake)
    assert set(arrays) == {"fixture", "random"}
    assert np.array_equal(arrays["random"], (ref_out["random"] * (1 + 1e-3)).astype(np.float32))
    assert [(m["input"], m["execution"]) for m in meas] == [("fixture", "coreml-all"),
                                                           ("random", "coreml-all")]
    assert 55 < meas[0]["metrics"]["snr_db"] < 65   # a 1e-3 relative error is 60 dB
    assert "layers_unavailable" in drift and len(drift["frames"]["coreml-all"]) == 5
    ev = {"policy": policy_record(load_policy(FP32_POLICY)), "variant": "fp32", "kind": "runtime",
          "artifact": {"tree_digest": "c" * 64, "exported_tree_digest": "c" * 64},
          "measurements": canonical.loads(canonical.dumps(meas))}
    j = judge_parity(ev, FP32_POLICY, "runtime")
    assert j.status is Status.FAIL and "below 100 dB" in j.detail
    assert judge_parity({**ev, "policy": policy_record(load_policy(FP16_POLICY)),
                         "variant": "fp16"}, FP16_POLICY, "runtime").status is Status.PASS


# ----------------------------------------------------------------------------- stages

def _params(jfk: Path, fp16: bool = True):
    from verifylib.params import DEFAULT_PARAMETERS, Params, load
    base = load(DEFAULT_PARAMETERS)
    data = copy.deepcopy(base.data)
    # A local copy of jfk.wav: the runtime-tree fixture needs the build stage.
    data["fixtures"] = [{"id": "jfk", "path": str(jfk), "public": True,
                         "text": base.data["fixtures"][0]["text"]}]
    data["export"] = {"fp16": fp16}
    return Params(base.name, data, "test", base.base_dir)


def _records(run_dir: Path, stage: str) -> dict:
    data = canonical.read_json(run_dir / "gates" / f"{stage}.json")
    return {g["id"]: g for g in data["gates"]}


@pytest.fixture(scope="module")
def staged_run(tmp_path_factory, jfk_wav, tiny_en_info):
    """export + parity stages in a fresh run directory (no build stage: export.ggml_model is
    NOT_RUN(prerequisite), the Core ML gates do not depend on it)."""
    from verifylib.stages import export, parity
    run_dir = tmp_path_factory.mktemp("run") / "R"
    params = _params(jfk_wav)
    export.run(params, run_dir)
    with reusing_numbers():
        report = parity.run(params, run_dir)
    return params, run_dir, report


@pytest.fixture(scope="module")
def edited_run(staged_run, tmp_path_factory):
    """The staged run with one fp32 weight edited in its saved package before stage 04
    (``layers_1_fc2_weight`` element 7 tripled), and stage 04's report on it."""
    from verifylib.stages import parity
    params, run_dir, _ = staged_run
    bad = shutil.copytree(run_dir, tmp_path_factory.mktemp("edited") / "R")
    # The run as it stood before stage 04 (a stage never runs twice into one run).
    (bad / "gates" / "04_parity.json").unlink(missing_ok=True)
    shutil.rmtree(bad / "evidence" / "04_parity", ignore_errors=True)
    edit_weight(bad / "fp32" / "ggml-model-encoder.mlpackage", "layers_1_fc2_weight", 7, 3.0)
    with reusing_numbers():
        report = parity.run(params, bad)
    return bad, report


@pytest.mark.physical
def test_linux_statuses_of_the_export_and_parity_gates(staged_run):
    _, run_dir, report = staged_run
    ex = _records(run_dir, "02_export")
    assert ex["export.ggml_model"]["status"] == "NOT_RUN"
    assert ex["export.contract"]["status"] == "PASS", ex["export.contract"]["reason"]
    assert ex["export.compile"]["status"] == "NOT_RUN"
    assert ex["export.compile"]["reason"]["kind"] == "platform"
    pa = _records(run_dir, "04_parity")
    for gid in ("parity.program", "parity.program_fp16"):
        assert pa[gid]["status"] == "PASS", pa[gid]["reason"]
    for gid in ("parity.runtime", "parity.runtime_fp16"):
        assert pa[gid]["status"] == "NOT_RUN" and pa[gid]["reason"]["kind"] == "platform"
    ids = pa["parity.program"]["identities"]
    assert ids["policy.fp32.id"] == "fp32-v1"
    assert ids["artifact.fp32.mlpackage.tree_digest"] == \
        ex["export.contract"]["identities"]["artifact.fp32.mlpackage.tree_digest"]
    # Artifacts: both variants, each beside nothing half-written.
    assert sorted(p.name for p in (run_dir / "fp32").iterdir()) == ["ggml-model-encoder.mlpackage"]
    assert sorted(p.name for p in (run_dir / "fp16").iterdir()) == ["ggml-model-encoder.mlpackage"]
    # The evidence holds the build facts and the drift series.
    contract = canonical.read_json(run_dir / "evidence" / "02_export" / "contract.json")
    assert "has not been tested" in contract["build"]["torch_version_warning"][0]
    drift = canonical.read_json(run_dir / "evidence" / "04_parity" / "program-drift.json")
    assert [r["label"] for r in drift["layers"]["float64"]][-1] == "output"
    assert len(drift["frames"]["float32"]) == 1500
    assert 0 < drift["speech_frames"] < 1500
    assert report.result.candidates["parity.program"].status == "PASS"


@pytest.mark.physical
def test_the_policy_is_recorded_before_measuring(staged_run):
    _, run_dir, _ = staged_run
    rec = _records(run_dir, "04_parity")["parity.program"]
    assert [e["name"] for e in rec["evidence"]][0] == "policy_program"
    pol = canonical.read_json(run_dir / rec["evidence"][0]["path"])
    assert pol["id"] == "fp32-v1" and pol["sha256"] == load_policy("fp32-v1").sha256


@pytest.mark.physical
def test_receipt_of_the_stages_verifies(staged_run, tmp_path):
    from verifylib.evidence.receipt import build_receipt, verify
    _, run_dir, _ = staged_run
    copy_dir = shutil.copytree(run_dir, tmp_path / "R")
    build_receipt(copy_dir)
    res = verify(copy_dir)
    assert res.ok, res.problems
    # Editing a stored SNR is caught by re-judging.
    ev = copy_dir / "evidence" / "04_parity" / "program.json"
    data = canonical.read_json(ev)
    data["measurements"][0]["metrics"]["noise_energy"] = 1.0
    canonical.write_json(ev, data)
    res = verify(copy_dir)
    assert not res.ok and any("program.json" in p for p in res.problems)


@pytest.mark.physical
def test_an_edited_weight_constant_fails_parity_program(edited_run):
    bad, _ = edited_run
    rec = _records(bad, "04_parity")
    assert rec["parity.program"]["status"] == "FAIL"
    detail = rec["parity.program"]["reason"]["detail"]
    assert "not the exported one" in detail and "below 100 dB" in detail, detail
    assert "artifact.fp32.mlpackage.tree_digest" not in rec["parity.program"]["identities"]
    assert rec["parity.program_fp16"]["status"] == "PASS"   # the fp16 package is untouched


@pytest.mark.physical
def test_fp16_disabled_is_not_run_disabled(tmp_path, jfk_wav, tiny_en_info):
    from verifylib.stages import export, parity
    params = _params(jfk_wav, fp16=False)
    export.run(params, tmp_path / "R")
    parity.run(params, tmp_path / "R")
    pa = _records(tmp_path / "R", "04_parity")
    assert pa["parity.program"]["status"] == "PASS"
    assert pa["parity.program_fp16"]["status"] == "NOT_RUN"
    assert pa["parity.program_fp16"]["reason"]["kind"] == "disabled"
    assert "export.fp16" in pa["parity.program_fp16"]["reason"]["detail"]
    assert not (tmp_path / "R" / "fp16").exists()


@pytest.mark.physical
def test_a_contract_mismatch_stops_the_stage_and_places_nothing(tmp_path, jfk_wav,
                                                                 tiny_en_info, monkeypatch):
    """Here the fp16 conversion renames its output: the fp32 package was fine, but the
    stage places neither, export.contract FAILs, and every Core ML gate after it is
    NOT_RUN(prerequisite)."""
    import verifylib.models.coreml_export as ce
    from verifylib.stages import export, parity
    real = ce.convert_traced

    def renaming(traced, contract, precision, **kw):
        if precision == "fp16":
            kw["output_name"] = "encoder_out"
        return real(traced, contract, precision, **kw)

    monkeypatch.setattr(ce, "convert_traced", renaming)
    params = _params(jfk_wav)
    run_dir = tmp_path / "R"
    export.run(params, run_dir)
    parity.run(params, run_dir)
    ex = _records(run_dir, "02_export")
    detail = ex["export.contract"]["reason"]["detail"]
    assert ex["export.contract"]["status"] == "FAIL"
    assert "refused before placement" in detail and "['encoder_out']" in detail
    assert "fp32: not placed" in detail
    for v in ("fp32", "fp16"):
        folder = run_dir / v
        assert not folder.exists() or list(folder.iterdir()) == [], list(folder.iterdir())
    assert ex["export.compile"]["status"] == "NOT_RUN"
    pa = _records(run_dir, "04_parity")
    assert pa["parity.program"]["status"] == "NOT_RUN"
    assert pa["parity.program"]["reason"]["kind"] == "prerequisite"
    assert "export.contract is FAIL" in pa["parity.program"]["reason"]["detail"]


# ----------------------------------------------------------------------------- attribution

@pytest.mark.physical
def test_both_program_candidates_carry_attribution_and_stored_arrays(staged_run):
    from verifylib.numerics.arrays import ArrayFile
    _, run_dir, report = staged_run
    res = report.result
    for gid, variant in (("parity.program", "fp32"), ("parity.program_fp16", "fp16")):
        c = res.candidates[gid]
        att = c.attribution
        assert att is not None and att.variant == variant and att.fixture == "jfk"
        assert len(att.ops) == sum(v for k, v in c.drift.op_counts.items() if k != "const")
        assert att.unmapped == sum(1 for o in att.ops if o.module is None) > 0
        assert {m.module for m in att.modules} >= {"conv1", "embeddings", "layers.0",
                                                   "layer_norm"}
        assert isinstance(c.outputs, ArrayFile) and not c.outputs.loaded
        assert c.outputs["fixture"].shape == (1, 1500, 384)
        assert c.outputs["layer_frame_snr_db"].shape == (len(c.drift.layers["float32"]), 1500)
    fp16 = res.candidates["parity.program_fp16"].attribution
    # float16 storage loses precision: the worst op loses tens of dB; fp32 loses far less.
    assert fp16.precision_top and fp16.precision_top[0].precision_delta_snr_db < -20
    fp32 = res.candidates["parity.program"].attribution
    assert not fp32.top   # the fp32 program reproduces every HF module exactly
    ref = res.reference_outputs
    assert ref["fixture"].shape == (1, 1500, 384)
    again = compare(ref["fixture"], res.candidates["parity.program"].outputs["fixture"])
    stored = res.candidates["parity.program"].measurements[0].metrics
    assert again.noise_energy == pytest.approx(float(stored.noise_energy), rel=1e-12)
    # The stage's result is what open_run's builder reads back from the evidence.
    from verifylib.evidence.layout import recorded_gates
    from verifylib.evidence.parity.result import parity_result_from_evidence
    back = parity_result_from_evidence(run_dir, recorded_gates(run_dir))
    assert back.candidates.keys() == res.candidates.keys()
    assert back.candidates["parity.program_fp16"].attribution == fp16


@pytest.mark.physical
def test_the_stage_attributes_an_edited_weight_to_its_layer(edited_run):
    """A weight edited in the saved package: the attribution names that op first."""
    _, report = edited_run
    att = report.result.candidates["parity.program"].attribution
    assert att.top[0].module == "layers.1.fc2", [(o.name, o.module) for o in att.top]
    assert all(o.snr_db == math.inf for o in att.ops[:att.top[0].index] if o.module)


@pytest.mark.physical
@pytest.mark.parametrize("forgery, needle", [
    ("outputs", "is not what the stored outputs give"),
    ("reference", "is not what the stored outputs give"),
    ("top", "top is not the ops ranked"),
    ("delta", "does not follow from the SNRs"),
])
def test_forged_arrays_or_attribution_do_not_verify(staged_run, tmp_path, forgery, needle):
    import numpy as np

    from tests.helpers import forge
    from verifylib.evidence.receipt import build_receipt, verify
    from verifylib.numerics import arrays
    _, run_dir, _ = staged_run
    copy_dir = forge.clone(run_dir, tmp_path / "R")
    build_receipt(copy_dir)
    assert verify(copy_dir).ok
    ev = copy_dir / "evidence" / "04_parity"
    if forgery in ("outputs", "reference"):
        name = "program-outputs.npz" if forgery == "outputs" else "reference-outputs.npz"
        data = dict(arrays.decode((ev / name).read_bytes()))
        data["fixture"] = (data["fixture"] * np.float32(1.001)).astype(np.float32)
        (ev / name).unlink()
        (ev / name).write_bytes(arrays.encode(data))
    elif forgery == "top":
        forge.edit_json(copy_dir, "evidence/04_parity/program_fp16-attribution.json",
                        lambda d: d["top"].reverse())
    else:
        def lower(d):
            for o in d["ops"]:
                if o["delta_snr_db"] is not None:
                    o["delta_snr_db"] = -1.0
                    return
        forge.edit_json(copy_dir, "evidence/04_parity/program_fp16-attribution.json", lower)
    forge.reseal(copy_dir)
    res = verify(copy_dir)
    assert not res.ok
    assert any(needle in p for p in res.problems), res.problems
