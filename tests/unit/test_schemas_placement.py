"""The stage 06 compute-plan document schema: round trip on the stage's documents, refusals by path."""

from __future__ import annotations

import math

import pytest

from tests.unit.test_placement import ANE, CPU, GPU, FakePlan, _op, fp32_like_plan
from verifylib import canonical
from verifylib.errors import EvidenceInvalid
from verifylib.evidence.gates import Judgement, Status
from verifylib.evidence.placement.result import PlacementResult
from verifylib.evidence.placement.rules import judge_plan
from verifylib.evidence.placement.schema import CostNotANumber, PlanEvidence, PlanOp
from verifylib.evidence.fields import SchemaError
from verifylib.models import compute_plan as placement


def _stage_plan(plan=None, variant: str = "fp32") -> dict:
    """A plan document as :func:`verifylib.stages.placement.run` writes it."""
    ev = placement.placement_evidence(placement.analyze_plan(plan or fp32_like_plan()),
                                      variant, "d" * 64)
    return PlanEvidence.from_json(ev).to_json()


def _fp16_plan():
    return FakePlan([(_op("const", "w"), None, None),
                     (_op("ios17.conv", "c"), (ANE, [CPU, GPU, ANE]), 0.75),
                     (_op("ios17.add", "a"), (CPU, [CPU]), 0.25)])


@pytest.mark.parametrize("plan,variant", [(None, "fp32"), (_fp16_plan(), "fp16")])
def test_round_trip_keeps_the_domain_document_and_its_bytes(plan, variant):
    raw = placement.placement_evidence(placement.analyze_plan(plan or fp32_like_plan()),
                                       variant, "d" * 64)
    assert PlanEvidence.from_json(raw).to_json() == raw
    stored = canonical.loads(canonical.dumps(raw))
    assert canonical.dumps(PlanEvidence.from_json(stored).to_json()) == canonical.dumps(raw)


def test_the_typed_plan_reads_like_the_document():
    plan = PlanEvidence.from_json(_stage_plan())
    assert plan.variant == "fp32" and plan.compute_units == "ALL"
    assert plan.ops[0] == PlanOp(operator="const", preferred=None, cost=None, function="main",
                                 index=0, outputs=("w",), supported=())
    assert [o.operator for o in plan.costed()] == ["ios17.conv", "ios17.matmul", "ios17.softmax"]
    assert judge_plan(plan) == judge_plan(_stage_plan())
    assert judge_plan(plan).status is Status.PASS
    share = PlacementResult({"fp32": plan}).device_share("fp32")
    assert share == pytest.approx({"CPU": 0.2, "GPU": 0.8})


def test_hand_written_plans_keep_their_keys():
    ops = [{"operator": "conv", "preferred": "GPU", "cost": 0.75},
           {"operator": "add", "preferred": "CPU", "cost": 0.25}]
    doc = {"ops": ops, "cost_by_device": {"GPU": 0.75, "CPU": 0.25}, "cost_sum": 1.0}
    assert PlanEvidence.from_json(doc).to_json() == doc


@pytest.mark.parametrize("edit,path", [
    (lambda d: d["ops"][2].update(preferred=7), "ops[2].preferred"),
    (lambda d: d["ops"][1].pop("operator"), "ops[1].operator"),
    (lambda d: d["ops"][3].pop("cost"), "ops[3].cost"),
    (lambda d: d["ops"][1].update(supported="CPU"), "ops[1].supported"),
    (lambda d: d["ops"][1]["outputs"].append(None), "ops[1].outputs[1]"),
    (lambda d: d["ops"][0].update(index="0"), "ops[0].index"),
    (lambda d: d.update(ops={"0": {}}), "ops"),
    (lambda d: d.pop("ops"), "ops"),
    (lambda d: d["cost_by_device"].update(GPU="0.8"), "cost_by_device.GPU"),
    (lambda d: d.update(cost_by_device=[0.8, 0.2]), "cost_by_device"),
    (lambda d: d.update(cost_sum=None), "cost_sum"),
    (lambda d: d.update(claim=["ANE"]), "claim"),
])
def test_malformed_plans_are_refused_by_field_path(edit, path):
    doc = canonical.loads(canonical.dumps(_stage_plan()))
    edit(doc)
    with pytest.raises(SchemaError) as err:
        PlanEvidence.from_json(doc)
    assert err.value.path == path and isinstance(err.value, EvidenceInvalid)
    j = judge_plan(doc)
    assert j == Judgement(Status.FAIL, f"the plan does not parse: {err.value}")


def test_costs_that_are_not_numbers_are_all_named():
    doc = canonical.loads(canonical.dumps(_stage_plan()))
    doc["ops"][1]["cost"] = "0.3"
    doc["ops"][3]["cost"] = True
    with pytest.raises(CostNotANumber) as err:
        PlanEvidence.from_json(doc)
    assert err.value.paths == ("ops[1].cost", "ops[3].cost") and err.value.path == "ops[1].cost"
    assert judge_plan(doc) == Judgement(
        Status.FAIL, "2 operation(s) with a cost that is not a finite number")
    # A NaN share survives the canonical JSON as the string "nan": refused the same way.
    nan = _stage_plan()
    nan["ops"][2]["cost"] = math.nan
    assert judge_plan(nan) == judge_plan(canonical.loads(canonical.dumps(nan))) == Judgement(
        Status.FAIL, "1 operation(s) with a cost that is not a finite number")


def test_a_document_that_is_not_an_object_is_refused():
    for doc in (None, [], "plan"):
        with pytest.raises(SchemaError, match="expected an object"):
            PlanEvidence.from_json(doc)
        assert judge_plan(doc).status is Status.FAIL


def test_a_plan_without_its_summary_is_refused_by_the_rule():
    doc = _stage_plan()
    del doc["cost_by_device"]
    j = judge_plan(doc)
    assert j.status is Status.FAIL and "stored cost by device None" in j.detail
