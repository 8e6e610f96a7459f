"""The validator's own pieces, one by one: identity formats, host capabilities re-derived
from the host's facts, the identity merge, and each NOT_RUN/ERROR justification."""

from __future__ import annotations

import pytest

from verifylib.evidence import gates, receipt
from verifylib.evidence.records import GateRecord, Reason
from verifylib.evidence.gates import Status

LINUX = {"system": "Linux", "machine": "x86_64", "macos_version": None, "coremlc": None}
XCODE = "/Applications/Xcode.app/Contents/Developer/usr/bin/coremlc"


@pytest.mark.parametrize("key, value, bad", [
    ("binary.ggml.sha256", "a" * 64, False),
    ("binary.ggml.sha256", "A" * 64, True),
    ("binary.ggml.sha256", "a" * 63, True),
    ("artifact.fp32.mlpackage.tree_digest", "b" * 64, False),
    ("artifact.fp32.mlpackage.tree_digest", "nope", True),
    ("runtime.tree", "c" * 40, False),
    ("runtime.tree", "c" * 41, True),
    ("runtime.commit", "C" * 40, True),
    ("runtime.commit", 7, True),
    ("runtime.pin", "v1.8.5", False),
])
def test_identity_formats(key, value, bad):
    assert (receipt._identity_value_problem(key, value) is not None) is bad


@pytest.mark.parametrize("host, expect", [
    (LINUX, {"any": True, "macos": False, "macos+xcode": False, "macos-14.4": False}),
    ({**LINUX, "system": "Darwin", "macos_version": "14.4", "coremlc": XCODE},
     {"any": True, "macos": True, "macos+xcode": True, "macos-14.4": True}),
    ({**LINUX, "system": "Darwin", "macos_version": "14.3", "coremlc": None},
     {"any": True, "macos": True, "macos+xcode": False, "macos-14.4": False}),
    ({**LINUX, "system": "Darwin", "macos_version": "15", "coremlc": XCODE},
     {"any": True, "macos": True, "macos+xcode": True, "macos-14.4": True}),
])
def test_host_capabilities_follow_from_the_facts(host, expect):
    assert receipt.host_capabilities(host) == expect


@pytest.mark.parametrize("host", [
    "Linux",
    {**LINUX, "macos_version": "14.4"},                      # a version off macOS
    {**LINUX, "system": "Darwin"},                           # macOS without a version
    {**LINUX, "system": "Darwin", "macos_version": "14.x"},
    {**LINUX, "system": "Darwin", "macos_version": 14},
    {**LINUX, "coremlc": 1},
])
def test_malformed_host_records_are_refused(host):
    with pytest.raises(ValueError):
        receipt.host_capabilities(host)


def _stage(gates_, ids):
    return {"gates": gates_, "identities": ids}


def _g(gid, status="PASS", ids=None):
    return {"id": gid, "status": status, "identities": ids or {}}


def test_merge_takes_the_first_stage_and_blames_the_carrier():
    files = {
        "01_build": _stage([_g("build.ggml", ids={"binary.ggml.sha256": "a" * 64})],
                           {"binary.ggml.sha256": "a" * 64}),
        "03_canary": _stage([_g("canary.lifecycle_ab", ids={"binary.ggml.sha256": "b" * 64}),
                             _g("canary.coreml_negative", "NOT_RUN")],
                            {"binary.ggml.sha256": "b" * 64}),
    }
    m = receipt.merge_identities(files)
    assert m.table == {"binary.ggml.sha256": "a" * 64}
    assert set(m.conflicts) == {"canary.lifecycle_ab"}
    (msg,) = m.conflicts["canary.lifecycle_ab"]
    assert "binary.ggml.sha256" in msg and "01_build" in msg


def test_merge_blames_every_judged_gate_when_no_gate_carries_the_key():
    files = {
        "01_build": _stage([], {"x.sha256": "a" * 64}),
        "02_export": _stage([_g("export.contract"), _g("export.ggml_model", "FAIL"),
                             _g("export.compile", "NOT_RUN")], {"x.sha256": "b" * 64}),
    }
    m = receipt.merge_identities(files)
    assert set(m.conflicts) == {"export.contract", "export.ggml_model"}


def test_merge_without_conflict():
    files = {"01_build": _stage([_g("build.ggml", ids={"k": 1})], {"k": 1}),
             "02_export": _stage([_g("export.contract", ids={"k": 1})], {"k": 1}),
             "03_canary": None}
    m = receipt.merge_identities(files)
    assert m.table == {"k": 1} and m.conflicts == {}


def _checker(tmp_path):
    return receipt._Checker(tmp_path, {}, allow_simulated=False)


def _nr(gid, kind, detail):
    return GateRecord(gid, Status.NOT_RUN, Reason(kind, detail))


def _unimplemented(gid):
    """The registry row of ``gid`` as a version that declares it unimplemented would have it
    (every gate of this version is implemented)."""
    import dataclasses
    return dataclasses.replace(gates.gate(gid), implemented=False)


def test_platform_needs_the_capability_to_be_missing(tmp_path):
    chk = _checker(tmp_path)
    g = gates.gate("build.coreml")
    rec = _nr(g.id, "platform", "needs macOS")
    assert chk.justify(g, rec, {}, {"macos+xcode": False}, {}) == []
    assert chk.justify(g, rec, {}, {"macos+xcode": True}, {})
    assert chk.justify(g, rec, {}, {}, {}), "an unknown capability justifies nothing"


def test_judged_gates_need_the_capability_to_be_present(tmp_path):
    chk = _checker(tmp_path)
    g = gates.gate("build.coreml")
    rec = GateRecord(g.id, Status.FAIL, Reason("rule", "x"))
    out = chk.justify(g, rec, {}, {}, {})
    assert any("without capability macos+xcode" in p for p in out)


def test_prerequisite_must_name_a_prerequisite_that_did_not_pass(tmp_path):
    chk = _checker(tmp_path)
    g = gates.gate("build.ggml")
    chk.verified = {"build.patch_exact": Status.FAIL}
    assert chk.justify(g, _nr(g.id, "prerequisite", "build.patch_exact is FAIL"), {}, {}, {}) == []
    # Naming a gate that is not its prerequisite, or one that passed, justifies nothing.
    assert chk.justify(g, _nr(g.id, "prerequisite", "build.coreml is FAIL"), {}, {}, {})
    chk.verified = {"build.patch_exact": Status.PASS}
    assert chk.justify(g, _nr(g.id, "prerequisite", "build.patch_exact is FAIL"), {}, {}, {})
    # A longer id that merely contains the prerequisite's is not a mention of it.
    chk.verified = {}
    assert chk.justify(g, _nr(g.id, "prerequisite", "build.patch_exactly is FAIL"), {}, {}, {})


def test_disabled_and_not_implemented(tmp_path):
    chk = _checker(tmp_path)
    g = gates.gate("canary.lifecycle_ab")
    rec = _nr(g.id, "disabled", "disabled by parameter canary.enabled = false")
    assert chk.justify(g, rec, {"params": {"canary": {"enabled": False}}}, {}, {}) == []
    assert chk.justify(g, rec, {"params": {"canary": {"enabled": True}}}, {}, {})
    assert chk.justify(g, _nr(g.id, "disabled", "disabled by parameter export.fp16"),
                       {"params": {"canary": {"enabled": False}}}, {}, {})
    assert chk.justify(g, _nr(g.id, "not-implemented", "later"), {}, {}, {})
    s = _unimplemented("canary.sanitizer")
    assert chk.justify(s, _nr(s.id, "not-implemented", "later"), {}, {}, {}) == []
    assert chk.justify(gates.gate(s.id), _nr(s.id, "not-implemented", "later"), {}, {}, {}) == [
        "gate canary.sanitizer: NOT_RUN(not-implemented) but this version implements it"]


def test_not_run_citing_evidence_is_refused(tmp_path):
    from verifylib.evidence.records import EvidenceRef
    chk = _checker(tmp_path)
    g = _unimplemented("canary.sanitizer")
    rec = GateRecord(g.id, Status.NOT_RUN, Reason("not-implemented", "later"),
                     (EvidenceRef("doc", "x.json", "a" * 64),))
    assert chk.justify(g, rec, {}, {}, {}) == [f"gate {g.id}: NOT_RUN but cites evidence"]


def test_error_needs_text_and_one_traceback(tmp_path):
    chk = _checker(tmp_path)
    g = gates.gate("build.ggml")
    assert chk.justify(g, GateRecord(g.id, Status.ERROR, Reason("exception", " ")), {}, {}, {})
    out = chk.justify(g, GateRecord(g.id, Status.ERROR, Reason("exception", "boom")), {}, {}, {})
    assert out and "traceback" in out[0]


def test_justification_messages_word_for_word(tmp_path):
    chk = _checker(tmp_path)
    g = gates.gate("build.coreml")
    fail = GateRecord(g.id, Status.FAIL, Reason("rule", "x"))
    assert chk.justify(g, fail, {}, {"macos+xcode": False}, {}) == [
        "gate build.coreml: FAIL recorded on a host without capability macos+xcode",
        "gate build.coreml: FAIL without evidence"]
    s = _unimplemented("canary.sanitizer")
    assert chk.justify(s, GateRecord(s.id, Status.PASS, Reason("rule", "x")), {},
                       {"any": True}, {}) == [
        "gate canary.sanitizer: PASS but this version has no rule to re-judge it"]
    assert chk.justify(g, _nr(g.id, "platform", "x"), {}, {"macos+xcode": True}, {}) == [
        "gate build.coreml: NOT_RUN(platform) but the host record has macos+xcode"]
    assert chk.justify(g, _nr(g.id, "platform", "x"), {}, {}, {}) == [
        "gate build.coreml: NOT_RUN(platform) but no usable host record says what the host "
        "lacks"]
    chk.verified = {"build.patch_exact": Status.PASS}
    assert chk.justify(g, _nr(g.id, "prerequisite", "build.patch_exact is FAIL"), {}, {},
                       {}) == [
        "gate build.coreml: NOT_RUN(prerequisite) names no prerequisite that did not pass "
        "('build.patch_exact is FAIL'; verified: {'build.patch_exact': 'PASS'})"]
    assert chk.justify(g, _nr(g.id, "disabled", "x"), {"params": {}}, {}, {}) == [
        "gate build.coreml: NOT_RUN(disabled) but the bound parameters do not disable it"]
    assert chk.justify(g, _nr(g.id, "not-implemented", "x"), {}, {}, {}) == [
        "gate build.coreml: NOT_RUN(not-implemented) but this version implements it"]
    assert chk.justify(g, GateRecord(g.id, Status.ERROR, Reason("exception", " ")), {}, {},
                       {}) == ["gate build.coreml: ERROR without its error text"]
    assert chk.justify(g, GateRecord(g.id, Status.ERROR, Reason("exception", "boom")), {}, {},
                       {}) == [
        "gate build.coreml: ERROR does not cite exactly one stored traceback"]


def test_error_traceback_document_is_checked(tmp_path):
    from verifylib import canonical
    from verifylib.evidence.records import EvidenceRef
    from verifylib.evidence.layout import error_document
    chk = _checker(tmp_path)
    g = gates.gate("build.ggml")

    def rec(doc, detail="boom"):
        sha = canonical.write_json(tmp_path / "tb.json", doc)
        return GateRecord(g.id, Status.ERROR, Reason("exception", detail),
                          (EvidenceRef("traceback", "tb.json", sha),))
    assert chk.justify(g, rec(error_document(g.id, "boom")), {}, {}, {}) == []
    bad = "gate build.ggml: ERROR cites tb.json, which is not its traceback"
    assert chk.justify(g, rec(error_document("build.coreml", "boom")), {}, {}, {}) == [bad]
    assert chk.justify(g, rec(dict(error_document(g.id, "boom"), schema="x")), {}, {},
                       {}) == [bad]
    assert chk.justify(g, rec(error_document(g.id, "  ")), {}, {}, {}) == [bad]
    assert chk.justify(g, rec(dict(error_document(g.id, "boom"), traceback=1)), {}, {},
                       {}) == [bad]
    assert chk.justify(g, rec(error_document(g.id, "other")), {}, {}, {}) == [
        "gate build.ggml: ERROR text differs from its stored traceback"]


def test_error_kind_follows_the_exception_its_traceback_ends_with(tmp_path):
    from verifylib import canonical
    from verifylib.evidence.records import EvidenceRef
    from verifylib.evidence.layout import error_document
    chk = _checker(tmp_path)
    g = gates.gate("build.ggml")
    broken = ("Traceback (most recent call last):\n  File \"x.py\", line 1, in f\n"
              "    g()\nverifylib.errors.PrerequisiteBroken: the binary changed\n"
              "second line of the message\n")
    bug = ("Traceback (most recent call last):\n  File \"x.py\", line 1, in f\n"
           "    g()\nZeroDivisionError: division by zero\n")
    cases = {broken: "prerequisite-broken", bug: "exception", "boom": "exception"}
    for i, (text, want) in enumerate(cases.items()):
        name = f"tb{i}.json"
        sha = canonical.write_json(tmp_path / name, error_document(g.id, text))
        ref = (EvidenceRef("traceback", name, sha),)
        other = "exception" if want == "prerequisite-broken" else "prerequisite-broken"
        assert chk.justify(g, GateRecord(g.id, Status.ERROR, Reason(want, text), ref),
                           {}, {}, {}) == []
        assert chk.justify(g, GateRecord(g.id, Status.ERROR, Reason(other, text), ref),
                           {}, {}, {}) == [
            f"gate build.ggml: ERROR({other}) but its traceback says {want}"]
        assert chk.justify(g, GateRecord(g.id, Status.ERROR, Reason(want, "other"), ref),
                           {}, {}, {}) == [
            "gate build.ggml: ERROR text differs from its stored traceback"]
    assert chk.justify(g, GateRecord(g.id, Status.ERROR, Reason("rule", "boom"), ref),
                       {}, {}, {}) == ["gate build.ggml: ERROR with reason kind 'rule'"]
