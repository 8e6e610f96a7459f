"""The validator fails closed on every kind of tampering (synthetic runs, no build needed)."""

import json
from pathlib import Path

import pytest

from verifylib import canonical, params
from verifylib.evidence import gates, receipt
from verifylib.evidence.gates import Status, Verdict
from verifylib.stages.context import StageContext

from tests.helpers.synthetic import install_rules, make_run

from tests.helpers import ROOT


@pytest.fixture
def rules(monkeypatch):
    install_rules(monkeypatch)


def _rewrite(path: Path, fn):
    data = canonical.read_json(path)
    fn(data)
    canonical.write_json(path, data)


def _refresh_digests(run_dir):
    # The most careful forger: recompute every listed digest after editing.
    def fix(r):
        for f in r["files"]:
            f["sha256"] = canonical.sha256_file(run_dir / f["path"])
    _rewrite(run_dir / "receipt.json", fix)


def test_untouched_run_verifies(tmp_path, rules):
    run_dir = make_run(tmp_path)
    res = receipt.verify(run_dir)
    assert res.ok, res.problems
    assert res.verdict == "INCOMPLETE"
    rec = canonical.read_json(run_dir / "receipt.json")
    statuses = {g["id"]: g["status"] for g in rec["gates"]}
    assert statuses["build.source_identity"] == "PASS"
    assert statuses["build.coreml"] == "NOT_RUN"
    assert statuses["canary.sanitizer"] == "PASS"  # informational, judged like the others
    assert set(statuses) == set(gates.BY_ID)


def test_flipped_evidence_byte_is_rejected(tmp_path, rules):
    run_dir = make_run(tmp_path)
    ev = run_dir / "evidence" / "01_build" / "build.source_identity.json"
    data = bytearray(ev.read_bytes())
    data[3] ^= 0x01
    ev.write_bytes(bytes(data))
    res = receipt.verify(run_dir)
    assert not res.ok
    assert any("evidence/01_build/build.source_identity.json: changed" in p
               for p in res.problems)


def test_not_run_edited_to_pass_is_rejected_even_with_fresh_digests(tmp_path, rules):
    run_dir = make_run(tmp_path)

    def edit(d):
        for g in d["gates"]:
            if g["id"] == "build.coreml":
                g["status"] = "PASS"
                g["reason"] = {"kind": "rule", "detail": "trust me"}
    _rewrite(run_dir / "receipt.json", edit)
    assert any("build.coreml" in p for p in receipt.verify(run_dir).problems)
    _rewrite(run_dir / "gates" / "01_build.json", edit)
    _refresh_digests(run_dir)
    res = receipt.verify(run_dir)
    assert not res.ok
    assert any("build.coreml: PASS recorded on a host without capability" in p
               for p in res.problems), res.problems
    assert any("build.coreml: PASS without evidence" in p for p in res.problems)


def test_fail_edited_to_pass_is_rejected(tmp_path, rules):
    run_dir = make_run(tmp_path, fail={"build.source_identity"})
    rec = canonical.read_json(run_dir / "receipt.json")
    assert rec["verdict"] == "REJECTED"

    def edit(d):
        for g in d["gates"]:
            if g["id"] == "build.source_identity":
                g["status"] = "PASS"
        if "verdict" in d:
            d["verdict"] = "INCOMPLETE"
    _rewrite(run_dir / "gates" / "01_build.json", edit)
    _rewrite(run_dir / "receipt.json", edit)
    _refresh_digests(run_dir)
    res = receipt.verify(run_dir)
    assert not res.ok
    assert any("recorded PASS but the evidence gives FAIL" in p for p in res.problems)


def test_edited_verdict_is_rejected(tmp_path, rules):
    run_dir = make_run(tmp_path)
    _rewrite(run_dir / "receipt.json", lambda d: d.__setitem__("verdict", "ADMISSIBLE"))
    res = receipt.verify(run_dir)
    assert any(p.startswith("verdict:") for p in res.problems)


def test_malformed_digest_missing_and_planted_files(tmp_path, rules):
    run_dir = make_run(tmp_path)

    def bad_digest(d):
        d["files"][0]["sha256"] = "XYZ"
    _rewrite(run_dir / "receipt.json", bad_digest)
    assert any("malformed digest" in p for p in receipt.verify(run_dir).problems)

    run_dir = make_run(tmp_path / "2")
    (run_dir / "evidence" / "01_build" / "build.source_identity.json").unlink()
    assert any("build.source_identity.json: missing" in p
               for p in receipt.verify(run_dir).problems)

    run_dir = make_run(tmp_path / "3")
    (run_dir / "evidence" / "01_build" / "extra.json").write_text("{}")
    assert any("not listed" in p for p in receipt.verify(run_dir).problems)


def test_finder_litter_in_a_run_is_named_with_its_removal(tmp_path, rules):
    # A Mac user who opens the run in Finder leaves .DS_Store files: still refused (the
    # receipt lists every file), but named as what macOS writes, with the command.
    run_dir = make_run(tmp_path)
    (run_dir / "evidence" / ".DS_Store").write_bytes(b"\0\0\0\1Bud1")
    (run_dir / "evidence" / "01_build" / "extra.json").write_text("{}")
    problems = receipt.verify(run_dir).problems
    litter = [p for p in problems if p.startswith("evidence/.DS_Store:")]
    assert len(litter) == 1 and "macOS writes it on its own" in litter[0]
    assert "-name .DS_Store -delete" in litter[0]
    planted = [p for p in problems if p.startswith("evidence/01_build/extra.json:")]
    assert planted == ["evidence/01_build/extra.json: present but not listed in the receipt"]


def test_identity_disagreement_is_rejected(tmp_path, rules):
    run_dir = make_run(tmp_path)
    _rewrite(run_dir / "receipt.json",
             lambda d: d["identities"].__setitem__("runtime.tree", "c" * 40))
    res = receipt.verify(run_dir)
    assert any("identity runtime.tree differs" in p for p in res.problems)


def test_crashed_stage_becomes_error_and_dependants_not_run(tmp_path, rules):
    p = params.load(ROOT / "parameters" / "tiny-en.yaml")
    run_dir = tmp_path / "run"
    StageContext("01_build", p, run_dir)  # started, then the notebook died
    for stage in gates.STAGES[1:]:
        StageContext(stage, p, run_dir).finish()
    rec = receipt.build_receipt(run_dir, {"01_build": "RuntimeError: boom"})
    ggml = rec.gate("build.ggml").record
    assert ggml.status is Status.ERROR and "boom" in ggml.reason.detail
    assert rec.verdict is Verdict.REJECTED
    assert rec.to_json() == canonical.read_json(run_dir / "receipt.json")
    assert receipt.verify(run_dir).ok


def test_platform_gates_are_not_run_with_reason_on_linux(tmp_path, rules):
    import platform
    if platform.system() == "Darwin":
        pytest.skip("Linux-only expectation")
    p = params.load(ROOT / "parameters" / "tiny-en.yaml")
    ctx = StageContext("01_build", p, tmp_path / "run")
    assert ctx.begin("build.coreml") is None
    r = ctx.records["build.coreml"]
    assert r.status is Status.NOT_RUN and r.reason.kind == "platform"
    assert "needs macOS" in r.reason.detail
