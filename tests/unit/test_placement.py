"""placement.plan's analysis and rule against a structural fake of coremltools' plan objects.

The operations are coremltools' own structure dataclasses; the devices are classes named
like Core ML's (their real classes need the native proxies, which tests/simmac supplies)."""

from types import SimpleNamespace as NS

import pytest

from verifylib.models import compute_plan as placement
from verifylib.evidence.gates import Status
from verifylib.evidence.placement import rules as placement_rules


# Classes named like coremltools' device classes: the analysis names devices by class.
class MLCPUComputeDevice:  # noqa: D101
    pass


class MLGPUComputeDevice:  # noqa: D101
    pass


class MLNeuralEngineComputeDevice:  # noqa: D101
    total_core_count = 16


CPU, GPU, ANE = MLCPUComputeDevice(), MLGPUComputeDevice(), MLNeuralEngineComputeDevice()


def _op(name, out):
    from coremltools.models.compute_plan import (
        MLModelStructureProgramNamedValueType,
        MLModelStructureProgramOperation,
        MLModelStructureProgramValueType,
    )
    return MLModelStructureProgramOperation(
        inputs={}, operator_name=name, blocks=[], __proxy__=None,
        outputs=[MLModelStructureProgramNamedValueType(out, MLModelStructureProgramValueType())])


class FakePlan:
    """The attributes and methods of MLComputePlan that the analysis uses."""

    def __init__(self, rows, program=True):
        self.rows = {id(op): (usage, cost) for op, usage, cost in rows}
        ops = [op for op, _, _ in rows]
        block = NS(operations=ops, inputs=[], output_names=[])
        prog = NS(functions={"main": NS(block=block, inputs=[])}) if program else None
        self.model_structure = NS(program=prog, neuralnetwork=None, pipeline=None)

    def get_compute_device_usage_for_mlprogram_operation(self, op):
        from coremltools.models.compute_plan import MLComputePlanDeviceUsage
        usage = self.rows[id(op)][0]
        return None if usage is None else MLComputePlanDeviceUsage(
            preferred_compute_device=usage[0], supported_compute_devices=usage[1])

    def get_estimated_cost_for_mlprogram_operation(self, op):
        from coremltools.models.compute_plan import MLComputePlanCost
        cost = self.rows[id(op)][1]
        return None if cost is None else MLComputePlanCost(weight=cost)


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


# ----------------------------------------------------------------------------- row kinds

@pytest.mark.parametrize("operator,preferred,cost,kind", [
    ("ios17.conv", "GPU", 0.5, placement.PLACED),
    ("ios17.conv", "GPU", None, placement.PLACED),
    ("const", None, None, placement.NOT_PLACED),
    ("ios17.reshape", None, None, placement.NOT_PLACED),
    ("ios17.cast", None, 0.01, placement.NO_DEVICE),
    ("cast", None, 0.01, placement.NO_DEVICE),
    ("const", None, 0.01, placement.NO_DEVICE),
    ("ios17.linear", None, 0.2, placement.UNPLACED_COMPUTE),
    ("ios17.constexpr_cast", None, 0.2, placement.UNPLACED_COMPUTE),
])
def test_row_kinds(operator, preferred, cost, kind):
    assert placement.row_kind(operator, preferred, cost) == kind


def _fp16_like_plan(cast_cost=0.002):
    """What Core ML gives an fp16 program: constants with neither usage nor cost, the
    boundary casts costed without a device, shares that are estimates (sum 0.997)."""
    return FakePlan([
        (_op("const", "w"), None, None),
        (_op("ios17.cast", "x16"), None, cast_cost),
        (_op("ios17.conv", "c"), (ANE, [CPU, GPU, ANE]), 0.695),
        (_op("const", "b"), None, None),
        (_op("ios17.add", "a"), (GPU, [CPU, GPU]), 0.298),
        (_op("ios17.cast", "y32"), None, cast_cost),
    ])


def test_constants_are_not_placed_and_casts_cost_without_a_device():
    a = placement.analyze_plan(_fp16_like_plan())
    rows = {o["outputs"][0]: o for o in a.ops}
    assert (rows["w"]["preferred"], rows["w"]["cost"], rows["w"]["supported"]) == (None, None, [])
    assert (rows["x16"]["preferred"], rows["x16"]["cost"]) == (None, 0.002)
    # The casts count in the sum, in no device's share.
    assert a.cost_by_device == pytest.approx({"NeuralEngine": 0.695, "GPU": 0.298})
    assert a.cost_without_device == pytest.approx(0.004)
    assert a.cost_sum == pytest.approx(0.997)
    ev = placement.placement_evidence(a, "fp16", "d" * 64)
    assert ev["cost_without_device"] == a.cost_without_device
    assert ev["claim"].startswith("MLComputePlan: 69.7% of estimated cost prefers the Neural "
                                  "Engine")
    assert "0.4% is estimated for operations the plan names no device for (cast or const)" \
        in ev["claim"]
    j = placement_rules.judge_plan(ev)
    assert j.status is Status.PASS, j.detail
    assert j.detail == ("6 operations planned (4 costed, sum 0.9970); cost share by preferred "
                        "device: GPU 29.9%, NeuralEngine 69.7%; no device: 0.4% "
                        "(ios17.cast x2)")


def test_a_costed_compute_operation_without_a_device_fails_and_is_named():
    plan = FakePlan([(_op("const", "w"), None, None),
                     (_op("ios17.linear", "l"), None, 0.6),
                     (_op("ios17.reshape", "r1"), None, 0.1),
                     (_op("ios17.reshape", "r2"), None, 0.1),
                     (_op("ios17.cast", "c"), None, 0.2)])
    j = placement_rules.judge_plan(placement.placement_evidence(
        placement.analyze_plan(plan), "fp16", "d" * 64))
    assert j.status is Status.FAIL
    assert j.detail == ("3 costed operation(s) without a preferred device: ios17.linear, "
                        "ios17.reshape x2")


def test_an_operation_with_neither_device_nor_cost_is_named_not_failed():
    plan = FakePlan([(_op("const", "w"), None, None),
                     (_op("ios17.conv", "c"), (GPU, [CPU, GPU]), 1.0),
                     (_op("ios17.squeeze", "s"), None, None)])
    j = placement_rules.judge_plan(placement.placement_evidence(
        placement.analyze_plan(plan), "fp32", "d" * 64))
    assert j.status is Status.PASS
    assert j.detail.endswith("; 1 operation(s) with neither a device nor a cost: ios17.squeeze")
    assert "const" not in j.detail


def test_a_usage_whose_preferred_device_is_unknown_names_no_device():
    # The bindings turn a device class they do not know into None.
    plan = FakePlan([(_op("ios17.cast", "c"), (None, [CPU]), 0.01),
                     (_op("ios17.conv", "v"), (GPU, [GPU]), 0.99)])
    a = placement.analyze_plan(plan)
    assert a.ops[0]["preferred"] is None and a.ops[0]["supported"] == ["CPU"]
    assert a.cost_without_device == pytest.approx(0.01)
    assert placement_rules.judge_plan(placement.placement_evidence(a, "fp32", "d" * 64)).ok


def test_the_stored_cost_without_a_device_is_recomputed_from_the_rows():
    ev = placement.placement_evidence(placement.analyze_plan(_fp16_like_plan()), "fp16",
                                      "d" * 64)
    # Moved into a device's share, or dropped, the casts' cost is refused.
    moved = dict(ev, cost_by_device={**ev["cost_by_device"],
                                     "NeuralEngine": 0.695 + ev["cost_without_device"]},
                 cost_without_device=0.0)
    j = placement_rules.judge_plan(moved)
    assert j.status is Status.FAIL and "per-op rows" in j.detail
    j = placement_rules.judge_plan(dict(ev, cost_without_device=0.0))
    assert j.status is Status.FAIL and "without a device 0.0" in j.detail
    dropped = {k: v for k, v in ev.items() if k != "cost_without_device"}
    j = placement_rules.judge_plan(dropped)
    assert j.status is Status.FAIL and "without a device None" in j.detail
    # A plan without such rows may omit it (documents written before it was recorded).
    plain = placement.placement_evidence(placement.analyze_plan(fp32_like_plan()), "fp32",
                                         "d" * 64)
    assert plain["cost_without_device"] == 0.0
    del plain["cost_without_device"]
    assert placement_rules.judge_plan(plain).ok


@pytest.mark.parametrize("cast_cost,ok", [(0.0035, True), (0.0085, True), (0.0086, False)])
def test_the_casts_count_in_the_sum_of_the_shares(cast_cost, ok):
    # 0.695 + 0.298 + 2 * cast: the tolerance applies to the sum with the casts in it.
    ev = placement.placement_evidence(placement.analyze_plan(_fp16_like_plan(cast_cost)),
                                      "fp16", "d" * 64)
    assert placement_rules.judge_plan(ev).ok is ok
