"""Upstream's converter precision per pin, and the Neural Engine warnings of ``doctor``, the
report's first screen and the placement view (verifylib.models.converter_precision).

The table's facts were read from upstream's git (docs/facts.md); here they are held to the
manifest, and each warning's decision is checked on the audits it is about."""

from __future__ import annotations

from types import SimpleNamespace as NS

import pytest

from verifylib.cli import doctor
from verifylib.cli import main as cli
from verifylib.evidence import identities
from verifylib.evidence.placement.schema import PlanEvidence
from verifylib.models import compute_plan
from verifylib.models.converter_precision import (
    CONVERTER_PRECISION,
    FP32_SINCE_COMMIT,
    PlannedEncoder,
    converter_precision,
    fp32_plan_explanation,
    neural_engine_warning,
    planned_encoders,
    planned_from_identities,
)
from verifylib.runtime.capabilities import HostCapabilities
from verifylib.runtime.tools import Tool, Toolset
from verifylib.views.gates import receipt_summary
from verifylib.views.placement import summarize
from verifylib.whispercpp.source import load_pins

from tests.helpers import ROOT

GIVEN_FP32 = (PlannedEncoder("fp32", "fp32", True),)
NO_ANE = "no Neural Engine share"


# ----------------------------------------------------------------------------- the table

def test_every_manifest_pin_has_a_converter_row_and_no_other():
    assert set(CONVERTER_PRECISION) == set(load_pins())
    assert all(row.pin == pin for pin, row in CONVERTER_PRECISION.items())


def test_the_converter_made_fp16_at_v185_and_fp32_unless_quantize_from_ba573929c():
    old = converter_precision("v1.8.5")
    assert (old.default, old.with_quantize) == ("fp16", None)
    assert "coremltools' default" in old.rule
    for pin in ("97c56f1", "v1.9.3"):
        row = converter_precision(pin)
        assert (row.default, row.with_quantize) == ("fp32", "fp16")
        assert FP32_SINCE_COMMIT[:9] in row.rule and "v1.8.7" in row.rule
    assert converter_precision("v0.0.1") is None and converter_precision(None) is None


# ----------------------------------------------------------------------------- decisions

def test_planned_encoders_of_an_export_and_of_a_given_encoder():
    assert planned_encoders(None, True) == (PlannedEncoder("fp32", "fp32", False),
                                            PlannedEncoder("fp16", "fp16", False))
    assert planned_encoders(None, False) == (PlannedEncoder("fp32", "fp32", False),)
    # A given encoder occupies the fp32 slot whatever it computes in, and is alone.
    assert planned_encoders("fp16", False) == (PlannedEncoder("fp32", "fp16", True),)


@pytest.mark.parametrize("planned", [
    planned_encoders(None, True),                 # the default audit: fp16 variant beside
    planned_encoders("fp16", False),              # v1.8.5's converter output, downloaded
    planned_encoders("mixed", False),             # some float16 arithmetic
    planned_encoders("unknown", False),           # export.contract already says so
    (),                                           # nothing planned
])
def test_no_warning_when_some_program_can_use_the_neural_engine_or_nothing_is_known(planned):
    assert neural_engine_warning(planned, "v1.9.3") is None


def test_a_given_fp32_encoder_at_a_current_pin_is_what_upstreams_script_makes():
    for pin in ("v1.9.3", "97c56f1"):
        w = neural_engine_warning(GIVEN_FP32, pin)
        assert w.startswith("The audited encoder computes in float32")
        assert "cannot support a Neural Engine claim" in w
        assert f"generate-coreml-model.sh makes at pin {pin}" in w
        assert "--quantize True" in w and FP32_SINCE_COMMIT[:9] in w


def test_a_given_fp32_encoder_at_v185_did_not_come_from_that_pins_script():
    w = neural_engine_warning(GIVEN_FP32, "v1.8.5")
    assert "at pin v1.8.5 makes float16 programs" in w
    assert "not made by that pin's" in w and "from v1.8.7 on" in w


def test_an_export_without_its_fp16_variant_is_told_to_export_it():
    w = neural_engine_warning(planned_encoders(None, False), "v1.8.5")
    assert w.startswith("The only encoder this audit exports computes in float32")
    assert w.endswith("Set export.fp16: true to export and plan the float16 variant too.")


def test_a_pin_outside_the_table_gets_the_warning_without_a_converter_sentence():
    w = neural_engine_warning(GIVEN_FP32, "user-pin")
    assert "cannot support a Neural Engine claim" in w and "upstream" not in w


# ----------------------------------------------------------------------------- identities

def _exported(*variants: str) -> dict:
    return {identities.artifact_tree_digest(v, "mlpackage"): "d" * 64 for v in variants}


def test_planned_encoders_read_back_from_a_receipts_identities():
    assert planned_from_identities(_exported("fp32", "fp16")) == planned_encoders(None, True)
    assert planned_from_identities(_exported("fp32")) == planned_encoders(None, False)
    given = {identities.ENCODER_PRECISION: "fp32", identities.ENCODER_PARITY_POLICY: "fp32-v1",
             identities.artifact_tree_digest("fp32", "mlmodelc"): "d" * 64}
    assert planned_from_identities(given) == GIVEN_FP32
    # export.pair records the suite's own export's precision without a chosen policy.
    own = {**_exported("fp32", "fp16"), identities.ENCODER_PRECISION: "fp32"}
    assert planned_from_identities(own) == planned_encoders(None, True)
    assert planned_from_identities({}) == ()  # the export never got that far


def _receipt(ids: dict) -> dict:
    return {"name": "m", "verdict": "INCOMPLETE", "run_id": "20991231T235900Z-0000abcd",
            "gates": [], "identities": ids, "host": {}, "packages": {}}


def test_the_reports_first_screen_warns_only_when_every_planned_encoder_is_fp32():
    given = {"runtime.pin": "v1.9.3", identities.ENCODER_PRECISION: "fp32",
             identities.ENCODER_PARITY_POLICY: "fp32-v1"}
    html = receipt_summary(_receipt(given), "f" * 64)
    assert '<p class="vl-warn">The audited encoder computes in float32' in html
    assert "makes at pin v1.9.3" in html
    html = receipt_summary(_receipt({"runtime.pin": "v1.9.3", **_exported("fp32", "fp16")}),
                           "f" * 64)
    assert "vl-warn" not in html and "float32" not in html
    given16 = {**given, identities.ENCODER_PRECISION: "fp16"}
    assert "vl-warn" not in receipt_summary(_receipt(given16), "f" * 64)


# ----------------------------------------------------------------------------- placement

def _analysis():
    return compute_plan.PlacementAnalysis(
        [{"function": "main", "index": 0, "operator": "ios17.conv", "outputs": ["c"],
          "preferred": "GPU", "supported": ["CPU", "GPU"], "cost": 1.0}],
        {"GPU": 1.0}, 1.0, 0.0)


def test_a_given_fp16_encoder_in_the_fp32_slot_is_worded_as_fp16():
    ev = compute_plan.placement_evidence(_analysis(), "fp32", "d" * 64, "fp16")
    assert ev["variant"] == "fp32" and ev["precision"] == "fp16"
    assert "not expected" not in ev["claim"]
    plan = PlanEvidence.from_json(ev)
    assert plan.precision == "fp16" and PlanEvidence.from_json(plan.to_json()) == plan
    assert summarize("fp32", plan).no_neural_engine is None


def test_an_fp32_plan_says_why_it_has_no_neural_engine_share():
    ev = compute_plan.placement_evidence(_analysis(), "fp32", "d" * 64)
    assert ev["precision"] == "fp32" and "not expected" in ev["claim"]
    why = summarize("fp32", PlanEvidence.from_json(ev)).no_neural_engine
    assert why == fp32_plan_explanation("fp32")
    assert "float16 only" in why and "never on the Neural Engine" in why
    assert "--quantize True" in why
    # A plan recorded before the precision was has no explanation of its own (its claim,
    # worded from the variant, still says it).
    old = {k: v for k, v in ev.items() if k != "precision"}
    assert PlanEvidence.from_json(old).precision is None
    assert summarize("fp32", PlanEvidence.from_json(old)).no_neural_engine is None
    assert fp32_plan_explanation("fp16") is None and fp32_plan_explanation(None) is None


# ----------------------------------------------------------------------------- doctor

def _tools() -> Toolset:
    def one(name):
        return Tool(name, f"/usr/bin/{name}", "PATH", f"install {name}", f"{name} version 1")
    return Toolset(cmake=one("cmake"), git=one("git"), cc=one("cc"), cxx=one("c++"))


def _doctor(tmp_path, audit):
    return doctor.doctor_report(host=HostCapabilities("Linux", "x86_64", None, None),
                                tools=_tools(), cache=tmp_path, audit=audit,
                                package_version=lambda name: None)


def test_doctor_warns_for_a_given_fp32_encoder_and_keeps_its_exit_status(tmp_path):
    audit = doctor.audit_check("app", "app.yaml", "v1.9.3", "fp32", False)
    assert audit.encoders == GIVEN_FP32 and len(audit.warnings) == 1
    r = _doctor(tmp_path, audit)
    assert r.exit_code == doctor.EXIT_READY
    text = r.text()
    line = next(ln for ln in text.splitlines() if ln.strip().startswith("encoder (fp32)"))
    assert "audit of app" in text and line.endswith(" fp32, audited as given")
    assert f"  warning: {audit.warnings[0]}" in text
    assert "upstream converter" in text and FP32_SINCE_COMMIT[:9] in text
    assert r.summary().startswith("the audit of app can run here")
    js = r.as_json()["audit"]
    assert js["warnings"] == list(audit.warnings) and js["pin"] == "v1.9.3"
    assert js["converter"]["default"] == "fp32"
    assert js["encoders"] == [{"slot": "fp32", "precision": "fp32", "given": True}]


def test_doctor_says_nothing_of_the_neural_engine_for_the_default_audit(tmp_path):
    assert _doctor(tmp_path, None).as_json()["audit"] is None
    assert "warning" not in _doctor(tmp_path, None).text()
    audit = doctor.audit_check("tiny-en", "tiny-en.yaml", "v1.8.5", None, True)
    assert audit.warnings == () and "warning" not in _doctor(tmp_path, audit).text()


def test_doctor_cards_a_given_encoder_from_its_files(monkeypatch, tmp_path):
    import verifylib.models.encoder_reader as reader
    seen = []
    monkeypatch.setattr(reader, "describe_encoder",
                        lambda path: seen.append(path) or NS(precision="fp32"))
    params = NS(name="app", origin="app.yaml", encoder=NS(path=str(tmp_path / "e.mlmodelc")),
                runtime=NS(pin="v1.9.3"), export=NS(fp16=False))
    audit = doctor.audit_check_of(params)
    assert seen == [tmp_path / "e.mlmodelc"] and audit.encoders == GIVEN_FP32
    assert audit.warnings and "makes at pin v1.9.3" in audit.warnings[0]


def test_doctor_with_a_parameter_file(monkeypatch, capsys, tmp_path):
    got = {}
    real = doctor.doctor_report

    def report(**kw):
        got.update(kw)
        return real(host=HostCapabilities("Linux", "x86_64", None, None), tools=_tools(),
                    cache=tmp_path, audit=kw["audit"], package_version=lambda name: None)
    monkeypatch.setattr(doctor, "doctor_report", report)
    assert cli.main(["doctor", str(ROOT / "parameters" / "tiny-en-v1.9.3.yaml")]) == 0
    assert got["audit"].pin == "v1.9.3" and got["audit"].warnings == ()
    assert got["params"]["runtime"]["pin"] == "v1.9.3"
    assert "audit of tiny-en-v1.9.3" in capsys.readouterr().out
    bad = tmp_path / "bad.yaml"
    bad.write_text((ROOT / "parameters" / "tiny-en-v1.9.3.yaml").read_text()
                   .replace("pin: v1.9.3", "pin: v0.0.1"))
    assert cli.main(["doctor", str(bad)]) == doctor.EXIT_BAD_PARAMETERS
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(bad) in err and "key runtime.pin" in err
