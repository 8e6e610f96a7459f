"""placement.plan's analysis and rule against a structural fake of coremltools' plan objects."""

from types import SimpleNamespace as NS

import pytest

from verifylib.models import compute_plan as placement
from verifylib.evidence.gates import Status
from verifylib.evidence.rules import placement as placement_rules


# Classes named like coremltools' device classes: the analysis names devices by class.
class MLCPUComputeDevice:  # noqa: D101
    pass


class MLGPUComputeDevice:  # noqa: D101
    pass


class MLNeuralEngineComputeDevice:  # noqa: D101
    total_core_count = 16


CPU, GPU, ANE = MLCPUComputeDevice(), MLGPUComputeDevice(), MLNeuralEngineComputeDevice()


def _op(name, out):
    return NS(operator_name=name, outputs=[NS(name=out)], blocks=[], inputs={})


class FakePlan:
    """The attributes and methods of MLComputePlan that the analysis uses."""

    def __init__(self, rows, program=True):
        self.rows = {id(op): (usage, cost) for op, usage, cost in rows}
        ops = [op for op, _, _ in rows]
        block = NS(operations=ops, inputs=[], output_names=[])
        prog = NS(functions={"main": NS(block=block, inputs=[])}) if program else None
        self.model_structure = NS(program=prog, neuralnetwork=None, pipeline=None)

    def get_compute_device_usage_for_mlprogram_operation(self, op):
        usage = self.rows[id(op)][0]
        return None if usage is None else NS(preferred_compute_device=usage[0],
                                             supported_compute_devices=usage[1])

    def get_estimated_cost_for_mlprogram_operation(self, op):
        cost = self.rows[id(op)][1]
        return None if cost is None else NS(weight=cost)


def fp32_like_plan():
    return FakePlan([
        (_op("const", "w"), None, None),
        (_op("ios17.conv", "c1"), (GPU, [CPU, GPU]), 0.30),
        (_op("ios17.matmul", "m1"), (GPU, [CPU, GPU]), 0.50),
        (_op("ios17.softmax", "s1"), (CPU, [CPU, GPU]), 0.20),
    ])


def test_analysis_and_claim_fp32():
    a = placement.analyze_plan(fp32_like_plan())
    assert len(a.ops) == 4
    assert a.ops[0]["cost"] is None and a.ops[0]["preferred"] is None
    assert a.cost_by_device == pytest.approx({"GPU": 0.8, "CPU": 0.2})
    assert [o["operator"] for o in a.top_ops(2)] == ["ios17.matmul", "ios17.conv"]
    ev = placement.placement_evidence(a, "fp32", "d" * 64)
    assert ev["claim"].startswith("MLComputePlan: 0.0% of estimated cost prefers the Neural Engine")
    assert "not expected" in ev["claim"]
    j = placement_rules.judge_plan(ev)
    assert j.status is Status.PASS and "GPU 80.0%" in j.detail


def test_neural_engine_share_is_worded_from_the_plan():
    plan = FakePlan([(_op("ios17.conv", "c"), (ANE, [CPU, GPU, ANE]), 0.75),
                     (_op("ios17.add", "a"), (CPU, [CPU]), 0.25)])
    ev = placement.placement_evidence(placement.analyze_plan(plan), "fp16", "d" * 64)
    assert ev["claim"].startswith("MLComputePlan: 75.0% of estimated cost prefers the Neural Engine")
    assert "not expected" not in ev["claim"]


def test_rule_fails_incomplete_plans():
    bad_sum = FakePlan([(_op("ios17.conv", "c"), (GPU, [GPU]), 0.5)])
    j = placement_rules.judge_plan(placement.placement_evidence(
        placement.analyze_plan(bad_sum), "fp32", "d" * 64))
    assert j.status is Status.FAIL and "sum to 0.5000" in j.detail
    no_device = FakePlan([(_op("ios17.conv", "c"), None, 1.0)])
    j = placement_rules.judge_plan(placement.placement_evidence(
        placement.analyze_plan(no_device), "fp32", "d" * 64))
    assert j.status is Status.FAIL and "without a preferred device" in j.detail
    j = placement_rules.judge_plan({"ops": [], "cost_by_device": {}})
    assert j.status is Status.FAIL


def test_non_program_model_is_refused():
    with pytest.raises(placement.PlacementError):
        placement.analyze_plan(FakePlan([], program=False))


def test_loading_a_plan_is_refused_off_macos(tmp_path):
    import platform
    if platform.system() == "Darwin":
        pytest.skip("macOS can load plans")
    with pytest.raises(Exception):
        placement.load_plan(tmp_path / "x.mlmodelc")


def test_rule_recomputes_the_shares_from_the_per_op_rows():
    ops = [{"operator": "conv", "preferred": "GPU", "cost": 0.75},
           {"operator": "add", "preferred": "CPU", "cost": 0.25}]
    good = {"ops": ops, "cost_by_device": {"GPU": 0.75, "CPU": 0.25}, "cost_sum": 1.0}
    j = placement_rules.judge_plan(good)
    assert j.status is Status.PASS and "GPU 75.0%" in j.detail and "CPU 25.0%" in j.detail
    # A summary claiming the Neural Engine, over rows that never name it, is refused.
    forged = dict(good, cost_by_device={"NeuralEngine": 0.75, "CPU": 0.25})
    j = placement_rules.judge_plan(forged)
    assert j.status is Status.FAIL and "per-op rows" in j.detail
    j = placement_rules.judge_plan(dict(good, cost_by_device={"GPU": 0.7, "CPU": 0.3}))
    assert j.status is Status.FAIL
