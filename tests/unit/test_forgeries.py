"""Consistent forgeries are rejected, each with a reason naming the gate.

Every forgery here refreshes every digest (``tests/helpers/forge.py``), so only the validator's own
knowledge can catch it: the gate registry, the rules registry, the packaged policies, the
pin manifest, the runtime contract, the host capability checks and the launch ledger.
The synthetic runs use a stand-in rule (``tests/helpers/synthetic.py``) and run in milliseconds;
``tests/notebooks/test_forgeries_physical.py`` forges the real default audit.
"""

from __future__ import annotations

import pytest

from verifylib import canonical
from verifylib.evidence.gates import Status, Verdict
from verifylib.evidence import gates, receipt

from tests.helpers.forge import clone, edit_gate, edit_json, problems_naming, relabel, reseal
from tests.helpers.synthetic import install_rules, make_run, params_with


@pytest.fixture
def rules(monkeypatch):
    install_rules(monkeypatch)


@pytest.fixture
def honest(tmp_path, rules):
    run_dir = make_run(tmp_path / "honest")
    res = receipt.verify(run_dir)
    assert res.ok, res.problems
    assert res.verdict == "INCOMPLETE"
    return run_dir


def _forge(honest, tmp_path, name):
    return clone(honest, tmp_path / name)


def _rejected(run_dir, gate_id, needle=""):
    res = receipt.verify(run_dir)
    assert not res.ok
    named = problems_naming(res, gate_id)
    assert named, res.problems
    assert any(needle in p for p in named), named
    return res


@pytest.mark.parametrize("kind, detail", [
    ("prerequisite", "build.patch_exact is FAIL"),
    ("prerequisite", "build.source_identity is NOT_RUN"),
    ("disabled", "disabled by parameter canary.enabled = false"),
    ("not-implemented", "this version of verifylib declares this gate unimplemented"),
    ("platform", "needs macOS; this host: Linux x86_64"),
])
def test_pass_relabelled_not_run_is_rejected(honest, tmp_path, kind, detail):
    run_dir = _forge(honest, tmp_path, kind)
    relabel(run_dir, "build.ggml", "NOT_RUN", kind, detail)
    # Dependants would have been NOT_RUN(prerequisite) too: forge them consistently.
    for g in gates.GATES:
        if "build.ggml" in g.prerequisites and g.id != "build.ggml":
            relabel(run_dir, g.id, "NOT_RUN", "prerequisite", "build.ggml is NOT_RUN")
    rec = reseal(run_dir)
    assert rec["verdict"] == "INCOMPLETE"
    _rejected(run_dir, "build.ggml", f"NOT_RUN({kind})")


@pytest.mark.parametrize("kind, detail", [
    ("prerequisite", "build.source_identity is FAIL"),
    ("disabled", "disabled by parameter export.fp16 = false"),
    ("not-implemented", "unimplemented"),
])
def test_fail_relabelled_not_run_turns_no_rejection_into_incomplete(tmp_path, rules, kind,
                                                                      detail):
    run_dir = make_run(tmp_path / "failed", fail={"build.patch_exact"})
    assert receipt.verify(run_dir).verdict == "REJECTED"
    relabel(run_dir, "build.patch_exact", "NOT_RUN", kind, detail)
    assert reseal(run_dir)["verdict"] == "INCOMPLETE"
    _rejected(run_dir, "build.patch_exact", "NOT_RUN")


def test_error_relabelled_is_rejected(tmp_path, rules):
    run_dir = make_run(tmp_path / "err", error={"export.contract"})
    res = receipt.verify(run_dir)
    assert res.ok and res.verdict == "REJECTED", res.problems
    for status, kind, needle in (("NOT_RUN", "prerequisite", "NOT_RUN(prerequisite)"),
                                 ("PASS", "rule", "stored")):
        forged = clone(run_dir, tmp_path / f"err-{status}")
        if status == "PASS":
            edit_gate(forged, "export.contract", lambda r: r.update(
                status="PASS", reason={"kind": "rule", "detail": "fine"}))
        else:
            relabel(forged, "export.contract", status, kind, "build.ggml is FAIL")
        reseal(forged)
        _rejected(forged, "export.contract")


def test_error_without_its_traceback_is_rejected(tmp_path, rules):
    run_dir = make_run(tmp_path / "err", error={"export.contract"})
    edit_gate(run_dir, "export.contract", lambda r: r.update(evidence=[]))
    reseal(run_dir)
    _rejected(run_dir, "export.contract", "traceback")


def test_error_text_must_be_the_stored_traceback(tmp_path, rules):
    run_dir = make_run(tmp_path / "err", error={"export.contract"})
    edit_gate(run_dir, "export.contract", lambda r: r["reason"].update(detail="cosmic ray"))
    reseal(run_dir)
    _rejected(run_dir, "export.contract", "differs from its stored traceback")


def test_not_implemented_only_for_a_declared_gate(honest, tmp_path):
    rec = {g["id"]: g for g in canonical.read_json(honest / "receipt.json")["gates"]}
    assert rec["canary.sanitizer"]["status"] == "PASS"
    assert "not-implemented" not in {g["reason"]["kind"] for g in rec.values()}
    # This version implements every gate, the informational sanitizer gate included: a
    # NOT_RUN(not-implemented) on it is refused although it cannot move the verdict.
    run_dir = _forge(honest, tmp_path, "sanitizer")
    relabel(run_dir, "canary.sanitizer", "NOT_RUN", "not-implemented",
            "this version of verifylib declares this gate unimplemented")
    assert reseal(run_dir)["verdict"] == "INCOMPLETE"
    _rejected(run_dir, "canary.sanitizer",
              "NOT_RUN(not-implemented) but this version implements it")


def test_disabled_needs_the_bound_parameter(tmp_path, rules):
    # Honest: a run whose parameters switch the canary off verifies.
    off = params_with(tmp_path, canary={"enabled": False})
    run_dir = make_run(tmp_path / "off", param_file=off)
    st = {g["id"]: g for g in canonical.read_json(run_dir / "receipt.json")["gates"]}
    assert st["canary.lifecycle_ab"]["reason"]["kind"] == "disabled"
    assert "canary.enabled" in st["canary.lifecycle_ab"]["reason"]["detail"]
    assert receipt.verify(run_dir).ok
    # Forged: the same reason on a run whose parameters leave it on.
    forged = make_run(tmp_path / "on", fail={"canary.lifecycle_ab"})
    relabel(forged, "canary.lifecycle_ab", "NOT_RUN", "disabled",
            st["canary.lifecycle_ab"]["reason"]["detail"])
    assert reseal(forged)["verdict"] == "INCOMPLETE"
    _rejected(forged, "canary.lifecycle_ab", "do not disable it")


def test_edited_host_capabilities_are_rejected(honest, tmp_path):
    forged = _forge(honest, tmp_path, "host")
    edit_json(forged, "run.json", lambda r: r["host"]["capabilities"].update({"macos": False,
                                                                              "any": False}))
    reseal(forged)
    res = receipt.verify(forged)
    assert not res.ok
    assert any("host record: stored capabilities" in p for p in res.problems)


def test_a_host_edited_into_a_mac_leaves_the_platform_gates_unjustified(honest, tmp_path):
    forged = _forge(honest, tmp_path, "mac")

    def to_mac(r):
        r["host"].update(system="Darwin", macos_version="15.1",
                         coremlc="/Applications/Xcode.app/Contents/Developer/usr/bin/coremlc")
        r["host"]["capabilities"] = {c.value: True for c in gates.Capability}
    edit_json(forged, "run.json", to_mac)
    reseal(forged)
    _rejected(forged, "build.coreml", "NOT_RUN(platform) but the host record has")


def test_receipt_with_a_gate_dropped_is_rejected(honest, tmp_path):
    forged = _forge(honest, tmp_path, "drop")
    edit_json(forged, "receipt.json", lambda r: r.update(
        gates=[g for g in r["gates"] if g["id"] != "build.coreml"]))
    _rejected(forged, "build.coreml", "missing from the receipt")


def test_identity_table_edited_consistently_is_rejected(honest, tmp_path):
    forged = _forge(honest, tmp_path, "ids")
    edit_json(forged, "receipt.json", lambda r: r["identities"].update({"runtime.tree": "c" * 40}))
    res = receipt.verify(forged)
    assert any("identity table" in p for p in res.problems)
    assert problems_naming(res, "build.source_identity")


def test_identity_conflict_between_stages_is_a_published_fail(tmp_path, rules):
    run_dir = make_run(tmp_path / "conflict", identities={
        "build.source_identity": {"runtime.tree": "a" * 40},
        "export.contract": {"runtime.tree": "b" * 40}})
    rec = canonical.read_json(run_dir / "receipt.json")
    st = {g["id"]: g for g in rec["gates"]}
    assert st["export.contract"]["status"] == "FAIL"
    assert "identity conflict: runtime.tree" in st["export.contract"]["reason"]["detail"]
    assert st["build.source_identity"]["status"] == "PASS"
    assert rec["identities"]["runtime.tree"] == "a" * 40
    assert rec["verdict"] == "REJECTED"
    res = receipt.verify(run_dir)
    assert res.ok, res.problems
    # Relabelling the conflicted gate PASS again is caught.
    def back_to_pass(r):
        for g in r["gates"]:
            if g["id"] == "export.contract":
                g["status"] = "PASS"
    edit_json(run_dir, "receipt.json", back_to_pass)
    _rejected(run_dir, "export.contract", "conflict")


def test_receipt_building_never_aborts_without_a_verdict(tmp_path, rules):
    run_dir = make_run(tmp_path / "broken", receipt_too=False)
    (run_dir / "gates" / "02_export.json").write_text("{not json")
    rec = receipt.build_receipt(run_dir)
    assert rec.verdict is Verdict.REJECTED
    assert rec.gate("export.contract").record.status is Status.ERROR
    assert rec.gate("export.contract").record.evidence[0].name == "traceback"
    assert rec.gate("build.ggml").record.status is Status.PASS


def test_a_stage_never_runs_twice_into_one_run_directory(tmp_path, rules):
    from verifylib import params
    from verifylib.errors import StageRefusal
    from verifylib.stages.context import StageContext

    from tests.helpers.synthetic import ROOT
    run_dir = make_run(tmp_path / "twice", receipt_too=False)
    p = params.load(ROOT / "parameters" / "tiny-en.yaml")
    before = canonical.read_json(run_dir / "gates" / "03_canary.json")
    with pytest.raises(StageRefusal, match="new run"):
        StageContext("03_canary", p, run_dir)
    assert canonical.read_json(run_dir / "gates" / "03_canary.json") == before
    receipt.build_receipt(run_dir)
    with pytest.raises(StageRefusal, match="published run"):
        StageContext("06_placement", p, tmp_path / "twice" / "run")
