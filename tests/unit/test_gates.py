"""The registry's gate table (documented in docs/gates.md; tests/unit/test_docs.py keeps the two
in step); verdict and exit codes follow it."""

import re

import pytest

from verifylib.evidence import gates
from verifylib.evidence.gates import Status, Verdict
from tests.helpers import ROOT

# Optional cross-check, test data only: when the leads' design notes happen to sit beside
# the checkout, the registry must also match the table there. The project never depends
# on that file (the test is skipped without it); docs/gates.md is the reference.
DESIGN = ROOT.parent / "shared" / "DESIGN.md"


def _design_rows():
    text = DESIGN.read_text(encoding="utf-8")
    section = text.split("## The gates")[1].split("\n## ")[0]
    rows = {}
    for line in section.splitlines():
        if not line.startswith("| `"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        for gid in re.findall(r"`([a-z_]+\.[a-z0-9_]+)`", cells[0]):
            rows[gid] = (cells[1], cells[2])
    return rows


@pytest.mark.skipif(not DESIGN.exists(), reason="../shared/DESIGN.md not present")
def test_registry_matches_design_table():
    rows = _design_rows()
    assert set(gates.BY_ID) <= set(rows)
    for gid, g in gates.BY_ID.items():
        stage, required = rows[gid]
        assert g.stage.startswith(stage), gid
        assert g.required == (required == "yes"), gid


@pytest.mark.skipif(not DESIGN.exists(), reason="../shared/DESIGN.md not present")
def test_every_design_gate_is_in_the_registry():
    assert set(_design_rows()) == set(gates.BY_ID)


def test_prerequisites_are_known_and_earlier_or_same_stage():
    order = {s: i for i, s in enumerate(gates.STAGES)}
    for g in gates.GATES:
        for p in g.prerequisites:
            assert order[gates.gate(p).stage] <= order[g.stage], (g.id, p)


def _all(status):
    return {g.id: status for g in gates.GATES}


def test_verdicts():
    assert gates.verdict(_all(Status.PASS)) is Verdict.ADMISSIBLE
    st = _all(Status.PASS)
    st["parity.runtime_fp16"] = Status.NOT_RUN  # not required
    assert gates.verdict(st) is Verdict.ADMISSIBLE
    st["build.coreml"] = Status.NOT_RUN
    assert gates.verdict(st) is Verdict.INCOMPLETE
    st["parity.program_fp16"] = Status.FAIL  # informational: shown, never the verdict
    assert gates.verdict(st) is Verdict.INCOMPLETE
    st["parity.runtime_fp16"] = Status.ERROR
    assert gates.verdict(st) is Verdict.INCOMPLETE
    st["build.coreml"] = Status.FAIL
    assert gates.verdict(st) is Verdict.REJECTED
    all_pass = _all(Status.PASS)
    all_pass["canary.sanitizer"] = Status.FAIL
    assert gates.verdict(all_pass) is Verdict.ADMISSIBLE
    st = _all(Status.NOT_RUN)
    st["build.ggml"] = Status.ERROR
    assert gates.verdict(st) is Verdict.REJECTED
    with pytest.raises(ValueError, match="missing"):
        gates.verdict({"build.ggml": Status.PASS})


def test_exit_codes_and_worst():
    assert gates.exit_code(Verdict.ADMISSIBLE) == 0
    assert gates.exit_code(Verdict.INCOMPLETE) == 0
    assert gates.exit_code(Verdict.INCOMPLETE, require_admissible=True) == 1
    assert gates.exit_code(Verdict.REJECTED) == 1
    assert gates.worst([Verdict.ADMISSIBLE, Verdict.INCOMPLETE]) is Verdict.INCOMPLETE
    assert gates.worst(["INCOMPLETE", "REJECTED", "ADMISSIBLE"]) is Verdict.REJECTED


def test_rules_registry_is_explicit_and_complete():
    from verifylib.evidence import registry as rules
    implemented = {g.id for g in gates.GATES if g.implemented}
    assert set(rules.RULES) == implemented
    # This version implements every gate of the table (canary.sanitizer was the last).
    assert implemented == set(gates.BY_ID)
    with pytest.raises(KeyError):
        rules.judge("no.such_gate", None)


def test_a_gate_declared_unimplemented_ends_not_run_and_verifies(tmp_path, monkeypatch):
    # The mechanism stays for a future gate: declared unimplemented, it is never begun,
    # the stage records NOT_RUN(not-implemented), and the validator accepts exactly that.
    import dataclasses

    from verifylib import params
    from verifylib.evidence import receipt
    from verifylib.evidence import registry as rules
    from verifylib.stages.context import StageContext
    table = tuple(dataclasses.replace(g, implemented=False) if g.id == "canary.sanitizer"
                  else g for g in gates.GATES)
    monkeypatch.setattr(gates, "GATES", table)
    monkeypatch.setattr(gates, "BY_ID", {g.id: g for g in table})
    monkeypatch.delitem(rules.RULES, "canary.sanitizer")
    from tests.helpers import ROOT as root
    ctx = StageContext("03_canary", params.load(root / "parameters" / "tiny-en.yaml"),
                       tmp_path / "run")
    recs = {r.id: r for r in ctx.finish().records}
    s = recs["canary.sanitizer"]
    assert (s.status, s.reason.kind) == (Status.NOT_RUN, "not-implemented")
    assert recs["canary.lifecycle_ab"].status is Status.ERROR  # implemented, never judged
    chk = receipt._Checker(tmp_path / "run", {}, allow_simulated=False)
    assert chk.justify(gates.gate("canary.sanitizer"), s, {}, {}, {}) == []


def test_registry_lists_which_parameter_disables_a_gate():
    canary = gates.gate("canary.coreml_negative")
    assert gates.disabling_key(canary, {"canary": {"enabled": False}}) == "canary.enabled"
    assert gates.disabling_key(canary, {"canary": {"enabled": True}}) is None
    assert gates.disabling_key(canary, {"canary": {"enabled": 0}}) is None  # not the value
    fp16 = gates.gate("parity.program_fp16")
    assert gates.disabling_key(fp16, {"export": {"fp16": False}}) == "export.fp16"
    assert gates.disabling_key(fp16, {"export": {}}) is None
    assert gates.disabling_key(gates.gate("build.ggml"), {"canary": {"enabled": False}}) is None


def test_judgement_is_pass_or_fail_only():
    with pytest.raises(ValueError):
        gates.Judgement(Status.NOT_RUN, "a rule cannot say NOT_RUN")
