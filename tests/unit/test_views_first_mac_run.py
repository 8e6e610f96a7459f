"""What the report says about the figures only a Mac measures: ``parity.runtime``'s SNR and
``placement.plan``'s rows. Measured, they open their stage's output; not measured, the
output says how the gate ended and shows no figure for it (a NOT_RUN is never a number)."""

from __future__ import annotations

import re

import numpy as np
import pytest

from verifylib import views
from verifylib.evidence.gates import Status
from verifylib.evidence.records import GateRecord, Reason
from verifylib.evidence.stage_report import StageReport
from verifylib.evidence.parity import result as parity_results
from verifylib.evidence.placement import result as placement_results
from verifylib.evidence.parity.schema import Measurement
from verifylib.evidence.placement.schema import PlanEvidence
from verifylib.models import compute_plan
from verifylib.numerics.parity import compare
from verifylib.numerics.scoring import load_policy
from verifylib.views import formats
from verifylib.views import parity as parity_view
from verifylib.views import placement as placement_view

HOSTILE = "<script>alert(1)</script>"
ESCAPED = "&lt;script&gt;alert(1)&lt;/script&gt;"


@pytest.fixture
def shown(monkeypatch):
    """Everything a view displays (HTML text, or "PLOT" for a matplotlib figure)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    out: list[str] = []
    monkeypatch.setattr("IPython.display.display", lambda obj: out.append(obj.data))

    def _show(*_a, **_k):
        out.append("PLOT")
        plt.close("all")
    monkeypatch.setattr(plt, "show", _show)
    return out


def _html(out: list[str]) -> str:
    return "".join(x for x in out if x != "PLOT")


# ----------------------------------------------------------------------------- parity

def _measurement(input_: str, execution: str, noise: float, seed: int) -> Measurement:
    """A measurement of a candidate that is the reference plus noise of the given scale."""
    rng = np.random.default_rng(seed)
    ref = rng.standard_normal((1, 20, 8))
    m = compare(ref, ref + noise * rng.standard_normal(ref.shape))
    return Measurement.from_json({"input": input_, "execution": execution,
                                  "metrics": m.as_dict(), "seconds": 0.25})


def _candidate(gate: str, kind: str, status: Status,
               measurements) -> parity_results.ParityCandidate:
    variant = "fp16" if gate.endswith("_fp16") else "fp32"
    policy = load_policy(f"{variant}-v1").rules
    return parity_results.ParityCandidate(
        gate, variant, kind, status, f"figures of {gate} {HOSTILE}", tuple(measurements),
        parity_results.Drift.from_evidence({}), dict(policy), {"fixture": 1.0, "random": 1.0})


def _parity_report(records, candidates) -> StageReport:
    result = parity_results.ParityResult({}, {}, {c.gate: c for c in candidates})
    return StageReport("04_parity", list(records), {}, 0.1, {}, result)


PROGRAM = ("parity.program", "program")
RUNTIME = ("parity.runtime", "runtime")


def _program():
    return _candidate(*PROGRAM, Status.PASS, [_measurement("fixture", "float32", 1e-6, 1),
                                              _measurement("fixture", "float64", 1e-7, 2),
                                              _measurement("random", "float32", 1e-6, 3)])


def test_a_not_run_runtime_gate_shows_its_reason_and_no_core_ml_figure(shown):
    program = _program()
    report = _parity_report(
        [GateRecord("parity.program", Status.PASS, Reason("rule", "ok")),
         GateRecord("parity.runtime", Status.NOT_RUN,
                    Reason("platform", f"needs macOS {HOSTILE}")),
         GateRecord("parity.runtime_fp16", Status.NOT_RUN,
                    Reason("disabled", "export.fp16 is false"))],
        [program])
    rows = parity_view.runtime_parity(report)
    assert [(r.gate, r.status) for r in rows] == [("parity.runtime", "NOT_RUN"),
                                                  ("parity.runtime_fp16", "NOT_RUN")]
    assert all(r.measurements == () and r.program_snr_db is None for r in rows)
    parity_view.show(report)
    html = _html(shown)
    # The runtime block opens the output, before the program's policies and table.
    head = html.split("<h3>Measurements")[0]
    assert head.index("Core ML runtime parity") < head.index("Policy fp32-v1")
    assert (f"<code>parity.runtime</code> did not run to its rule here: NOT_RUN (platform): "
            f"needs macOS {ESCAPED}") in head
    assert ("<code>parity.runtime_fp16</code> did not run to its rule here: NOT_RUN "
            "(disabled): export.fp16 is false") in head
    assert head.count("No Core ML runtime figure was measured") == 2
    # No Core ML execution appears anywhere, and the program's figures are the program's.
    assert "<td>coreml-all</td>" not in html and "(gated)" not in html
    assert views.number(program.measurements[0].metrics.snr_db) in html
    assert "<script" not in html.lower()


def test_a_measured_runtime_gate_shows_its_snr_beside_the_programs(shown):
    program = _program()
    runtime = _candidate(*RUNTIME, Status.FAIL, [_measurement("random", "coreml-all", 1e-3, 4),
                                                 _measurement("fixture", "coreml-all", 1e-4, 5)])
    report = _parity_report(
        [GateRecord("parity.program", Status.PASS, Reason("rule", "ok")),
         GateRecord("parity.runtime", Status.FAIL, Reason("rule", "below"))],
        [program, runtime])
    (row,) = parity_view.runtime_parity(report)
    fixture = next(m for m in runtime.measurements if m.input == "fixture")
    prog = next(m for m in program.measurements
                if (m.input, m.execution) == ("fixture", "float32"))
    # The gated input comes first whatever the stored order, and the comparison is with
    # the program's gated figure, not its float64 one.
    assert [m.input for m in row.measurements] == ["fixture", "random"]
    assert row.gated_input == "fixture" and row.program_snr_db == prog.metrics.snr_db
    assert row.change == formats.snr_change(prog.metrics.snr_db, fixture.metrics.snr_db)
    assert row.change.startswith("−")  # the runtime's noise is larger than the program's

    parity_view.show(report)
    html = _html(shown)
    head = html.split("<h3>Measurements")[0]
    rules = load_policy("fp32-v1").rules["pass"]
    assert f"SNR ≥ {rules['snr_db_min']:g} dB and cosine ≥ {rules['cosine_min']:g}" in head
    assert '<b class="vl-FAIL">FAIL</b>' in head
    gated_row = re.search(r"<tr><td>fixture \(gated\)</td><td>coreml-all</td><td><b>([^<]+)</b>",
                          head)
    assert gated_row and gated_row.group(1) == views.number(fixture.metrics.snr_db)
    assert f"{views.number(prog.metrics.snr_db)} dB; from the program to Core ML: {row.change}" \
        in head
    assert "No Core ML runtime figure" not in head


def test_an_errored_runtime_gate_with_nothing_judged_says_so(shown):
    report = StageReport("04_parity", [
        GateRecord("parity.runtime", Status.ERROR, Reason("exception", f"Traceback {HOSTILE}"))],
        {}, 0.1, {}, None)
    parity_view.show(report)
    html = _html(shown)
    assert f"did not run to its rule here: ERROR (exception): Traceback {ESCAPED}" in html
    assert "No parity measurement" in html and "<table" not in html
    assert "PLOT" not in shown


# ----------------------------------------------------------------------------- placement

def _plan() -> PlanEvidence:
    # Rows as Core ML gives them: a constant with neither usage nor cost, casts with a cost
    # and no device, compute ops on devices, and costs that do not sum to exactly one.
    ops = [{"function": "main", "index": 0, "operator": "const", "outputs": ["w"],
            "preferred": None, "supported": [], "cost": None},
           {"function": "main", "index": 1, "operator": "ios17.cast", "outputs": [HOSTILE],
            "preferred": None, "supported": [], "cost": 0.013},
           {"function": "main", "index": 2, "operator": "ios17.conv", "outputs": ["c"],
            "preferred": "GPU", "supported": ["CPU", "GPU"], "cost": 0.6},
           {"function": "main", "index": 3, "operator": "ios17.conv", "outputs": ["d"],
            "preferred": "NeuralEngine", "supported": ["CPU", "NeuralEngine"], "cost": 0.3},
           {"function": "main", "index": 4, "operator": "ios17.cast", "outputs": ["o"],
            "preferred": None, "supported": [], "cost": 0.081}]
    by_device: dict[str, float] = {}
    for o in ops:
        if o["cost"] is not None and o["preferred"] is not None:
            by_device[o["preferred"]] = by_device.get(o["preferred"], 0.0) + o["cost"]
    without = sum(o["cost"] for o in ops if o["cost"] is not None and o["preferred"] is None)
    return PlanEvidence.from_json({"variant": "fp16", "compute_units": "ALL", "ops": ops,
                                   "cost_by_device": by_device,
                                   "cost_without_device": without,
                                   "cost_sum": sum(by_device.values()) + without,
                                   "claim": HOSTILE})


def test_the_plan_summary_counts_rows_as_given():
    plan = _plan()
    s = placement_view.summarize("fp16", plan)
    kinds = dict(s.kinds)
    assert list(kinds) == list(placement_view.KINDS)
    assert (s.ops, s.costed) == (len(plan.ops), 4)
    assert kinds == {compute_plan.PLACED: 2, compute_plan.NOT_PLACED: 1,
                     compute_plan.NO_DEVICE: 2, compute_plan.UNPLACED_COMPUTE: 0}
    assert [(r.op.index, r.kind) for r in s.without_device] == [(1, compute_plan.NO_DEVICE),
                                                                (4, compute_plan.NO_DEVICE)]
    assert s.cost_sum == plan.cost_sum and s.cost_sum != 1.0
    # Device shares as recorded, largest first; the costed rows without a device last.
    assert s.cost_by_device == (("GPU", plan.cost_by_device["GPU"]),
                                ("NeuralEngine", plan.cost_by_device["NeuralEngine"]),
                                (placement_view.WITHOUT_DEVICE, plan.cost_without_device))
    conv = next(g for g in s.by_operator if g.operator == "ios17.conv")
    assert conv.devices == (("GPU", 1), ("NeuralEngine", 1)) and conv.costed == 2
    const = next(g for g in s.by_operator if g.operator == "const")
    assert const.devices == ((placement_view.WITHOUT_DEVICE, 1),) and const.costed == 0
    assert s.by_operator[0].operator == "ios17.conv"  # costliest operator first
    assert tuple(r.op for r in s.rows) == plan.ops


def test_a_costed_compute_row_without_a_device_is_named_as_such():
    doc = _plan().to_json()
    doc["ops"][2]["preferred"] = None
    doc["cost_without_device"] += doc["cost_by_device"].pop("GPU")
    s = placement_view.summarize("fp16", PlanEvidence.from_json(doc))
    assert dict(s.kinds)[compute_plan.UNPLACED_COMPUTE] == 1
    assert [(r.op.index, r.kind) for r in s.without_device if r.op.operator == "ios17.conv"] \
        == [(2, compute_plan.UNPLACED_COMPUTE)]


def test_a_judged_plan_opens_with_its_rows(shown):
    plan = _plan()
    report = StageReport("06_placement", [
        GateRecord("placement.plan", Status.PASS, Reason("rule", "shares sum to 0.994"))],
        {}, 0.1, {}, placement_results.PlacementResult({"fp16": plan}))
    placement_view.show(report)
    assert shown[-1] == "PLOT" and shown[0] != "PLOT"
    html = _html(shown)
    assert html.startswith(views.style_block())
    assert "<code>placement.plan</code>: PASS (rule): shares sum to 0.994" in html
    assert (f"<td>{len(plan.ops)}</td><td>2</td><td>1</td><td>2</td><td>0</td><td>4</td>"
            f"<td>{plan.cost_sum:.4f}</td>") in html
    assert (f"<tr><td>{placement_view.WITHOUT_DEVICE}</td>"
            f"<td>{plan.cost_without_device:.4f}</td>") in html
    # Every costed row without a device is listed, and every row is in the full table.
    no_device = html.split("Rows with a cost and no preferred device:")[1].split("</table>")[0]
    assert f"<td>1</td><td>ios17.cast</td><td>no device</td><td>{ESCAPED}</td>" in no_device
    assert "<td>4</td><td>ios17.cast</td><td>no device</td><td>o</td>" in no_device
    assert "const" not in no_device
    full = html.split("<details>")[1]
    assert full.count("<tr><td>") == len(plan.ops)
    assert ("<td>0</td><td>main</td><td>const</td><td>not placed</td><td>w</td><td>—</td>"
            "<td></td><td>—</td>") in full
    assert ESCAPED in html and "<script" not in html.lower()


def test_an_fp32_plan_says_why_it_has_no_neural_engine_share(shown):
    # A given fp16 encoder in the fp32 slot, then an fp32 program: only the second explains.
    fp16_given = PlanEvidence.from_json({**_plan().to_json(), "variant": "fp32",
                                         "precision": "fp16"})
    fp32 = PlanEvidence.from_json({**_plan().to_json(), "variant": "fp32",
                                   "precision": "fp32"})
    for plan, explains in ((fp16_given, False), (fp32, True)):
        shown.clear()
        placement_view.show(StageReport("06_placement", [
            GateRecord("placement.plan", Status.PASS, Reason("rule", "ok"))],
            {}, 0.1, {}, placement_results.PlacementResult({"fp32": plan})))
        html = _html(shown)
        assert ("<b>Why no Neural Engine share:</b> This program declares float32 "
                "arithmetic." in html) is explains
        assert ("<h3>fp32 (the program declares fp16): the plan" in html) is not explains


def test_a_plan_that_did_not_run_shows_no_share(shown):
    report = StageReport("06_placement", [
        GateRecord("placement.plan", Status.NOT_RUN,
                   Reason("platform", f"needs macOS 14.4 or later {HOSTILE}"))],
        {}, 0.1, {}, None)
    placement_view.show(report)
    html = _html(shown)
    assert ("<code>placement.plan</code> did not run to its rule here: NOT_RUN (platform): "
            f"needs macOS 14.4 or later {ESCAPED}") in html
    assert "no device share is shown" in html
    assert "%" not in html.replace(views.style_block(), "") and "PLOT" not in shown


def test_the_report_keeps_the_full_plan_table(tmp_path, monkeypatch, shown):
    """The audit report's sanitizer keeps the collapsible table of every row."""
    import nbformat

    from tests.helpers import synthetic
    from verifylib.views import report

    plan = _plan()
    placement_view.show(StageReport(
        "06_placement", [GateRecord("placement.plan", Status.PASS, Reason("rule", "ok"))],
        {}, 0.1, {}, placement_results.PlacementResult({"fp16": plan})))
    synthetic.install_rules(monkeypatch)
    run_dir = synthetic.make_run(tmp_path)
    cell = nbformat.v4.new_code_cell("view.show(report)")
    cell.outputs = [nbformat.v4.new_output("display_data", data={"text/html": x})
                    for x in shown if x != "PLOT"]
    (run_dir / "notebooks").mkdir()
    nbformat.write(nbformat.v4.new_notebook(cells=[cell]),
                   run_dir / "notebooks" / "06_placement.ipynb")
    short, _ = report.render(run_dir, ["06_placement"])
    page = short.read_text()
    assert "<details><summary>Every row of the fp16 plan" in page
    assert "&lt;details" not in page and ESCAPED in page
