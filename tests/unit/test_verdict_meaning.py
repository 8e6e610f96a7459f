"""The sentence under the report's verdict banner: what the verdict means for this run and
what would move it (views.gates.verdict_meaning)."""

from verifylib.views.gates import receipt_summary, verdict_meaning


def _gate(gid, status, kind="", required=True):
    return {"id": gid, "stage": "s", "required": required, "status": status,
            "reason": {"kind": kind, "detail": ""}, "evidence": []}


def _receipt(verdict, gates):
    return {"verdict": verdict, "gates": gates, "name": "m", "run_id": "r", "identities": {},
            "host": {}, "packages": {}}


def test_incomplete_on_linux_names_the_mac_gates_and_doctor():
    r = _receipt("INCOMPLETE", [_gate("build.ggml", "PASS"),
                                _gate("canary.coreml", "NOT_RUN", "platform"),
                                _gate("placement.plan", "NOT_RUN", "platform"),
                                _gate("wer.hybrid", "NOT_RUN", "prerequisite"),
                                _gate("canary.sanitizer", "NOT_RUN", "platform", False)])
    text = verdict_meaning(r)
    assert text.startswith("1 of 4 required gates PASSed")
    assert "2 need a Mac with Xcode (canary.coreml, placement.plan)" in text
    assert "verifylib doctor" in text and "Also NOT_RUN: wer.hybrid" in text
    assert "canary.sanitizer" not in text  # informational gates do not move the verdict
    html = receipt_summary(r, "0" * 64)
    assert html.index("Verdict:") < html.index("vl-meaning") < html.index('<h2 id="gates">')


def test_rejected_names_the_failed_gates_and_admissible_says_all_passed():
    r = _receipt("REJECTED", [_gate("build.ggml", "FAIL"), _gate("parity.mil", "ERROR"),
                              _gate("canary.coreml", "NOT_RUN", "platform")])
    assert "build.ggml, parity.mil failed or errored" in verdict_meaning(r)
    assert "doctor" not in verdict_meaning(r)
    ok = _receipt("ADMISSIBLE", [_gate("a", "PASS"), _gate("b", "PASS")])
    assert verdict_meaning(ok).startswith("All 2 required gates PASSed")
