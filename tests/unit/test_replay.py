"""The replay's decisions on given values: claims, distributions, builds, the output folder,
the claim table's page and the replay document (no run, no subprocess, no cache)."""

from __future__ import annotations

from collections import Counter

import pytest

from verifylib.errors import ParametersInvalid
from verifylib.params import Params
from verifylib.replay import claims as cl
from verifylib.replay.compare import build_claim, distributions_agree
from verifylib.replay.engine import check_output_dir
from verifylib.replay.rederive import available_fixtures


def test_same_or_differs_shows_both_values():
    same = cl.same_or_differs("build.ggml", {"a": 1}, {"a": 1}, what="x")
    assert same.status is cl.ClaimStatus.REPRODUCED
    other = cl.same_or_differs("build.ggml", {"a": 1}, {"a": 2}, what="x")
    assert other.status is cl.ClaimStatus.DIFFERS
    assert other.recorded == {"a": 1} and other.replayed == {"a": 2}
    nothing = cl.same_or_differs("source.tree", {"tree": None}, {"tree": None}, what="x")
    assert nothing.status is cl.ClaimStatus.NOT_REPLAYABLE


@pytest.mark.parametrize("rec, rep, agree", [
    (Counter(SIGSEGV=20), Counter(SIGSEGV=20), True),
    (Counter(SIGSEGV=18, SIGABRT=2), Counter(SIGSEGV=20), True),  # a rare outcome may vary
    (Counter(SIGSEGV=20), Counter(SIGABRT=20), False),
    (Counter(SIGSEGV=10, clean=10), Counter(SIGSEGV=20), False),  # half the runs unseen
    (Counter(), Counter(SIGSEGV=1), False),
])
def test_unpatched_outcomes_are_compared_as_distributions(rec, rep, agree):
    ok, why = distributions_agree(rec, rep)
    assert ok is agree and why


def test_a_rebuilt_binary_is_judged_by_bytes_then_by_build_inputs():
    rec = {"key": "k1", "sha256": "s1", "compiler": {"cc": "gcc 12", "cpu": "EPYC"}}
    assert build_claim("build.ggml", rec, dict(rec)).status is cl.ClaimStatus.REPRODUCED
    same_inputs = build_claim("build.ggml", rec, {**rec, "sha256": "s2"})
    assert same_inputs.status is cl.ClaimStatus.DIFFERS and "same build inputs" in \
        same_inputs.detail
    other = build_claim("build.ggml", rec, {"key": "k2", "sha256": "s2",
                                            "compiler": {"cc": "gcc 13", "cpu": "EPYC"}})
    assert other.status is cl.ClaimStatus.NOT_REPLAYABLE and other.rebuilt
    assert "cc: 'gcc 12' vs 'gcc 13'" in other.detail and "rebuilt here" in other.detail


def test_the_result_exits_1_on_a_difference_and_round_trips():
    res = cl.ReplayResult(run_dir="/r", run_id="id", verified=True, verify_problems=[],
                          verdict="INCOMPLETE",
                          claims=[cl.Claim("build.ggml", cl.ClaimStatus.REPRODUCED, 1, 1, "ok"),
                                  cl.not_replayable("wer.hybrid", "macOS-only")])
    assert res.exit_code == 0 and res.passed
    back = cl.ReplayResult.from_json(res.to_json())
    assert back.claims == res.claims and back.to_json()["result"] == "PASSED"
    res.claims.append(cl.Claim("parity.program", cl.ClaimStatus.DIFFERS, 1, 2, "no"))
    assert res.exit_code == 1 and [c.id for c in res.differs] == ["parity.program"]
    assert res.counts() == {"REPRODUCED": 1, "DIFFERS": 1, "NOT_REPLAYABLE": 1}
    unverified = cl.ReplayResult(run_dir="/r", run_id=None, verified=False,
                                 verify_problems=["x"], verdict=None)
    assert unverified.exit_code == 1
    with pytest.raises(ValueError, match="schema"):
        cl.ReplayResult.from_json({"schema": "other"})
    with pytest.raises(KeyError, match="claims"):
        res.claim("nope")


def test_claim_ids_are_unique_and_name_known_gates():
    from verifylib.evidence import gates
    ids = [c.id for c in cl.CLAIMS]
    assert len(ids) == len(set(ids))
    known = {g.id for g in gates.GATES}
    assert {c.gate for c in cl.CLAIMS} <= known


def test_the_output_folder_is_never_inside_the_run(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    with pytest.raises(ParametersInvalid, match="never writes into a run"):
        check_output_dir(run / "out", run)
    with pytest.raises(ParametersInvalid, match="never writes into a run"):
        check_output_dir(run, run)
    done = tmp_path / "done"
    (done / "work").mkdir(parents=True)
    with pytest.raises(ParametersInvalid, match="already holds a replay"):
        check_output_dir(done, run)
    check_output_dir(tmp_path / "fresh", run)


def _params(tmp_path, fixtures):
    data = {"fixtures": fixtures}
    return Params(name="m", data=data, origin="x", base_dir=tmp_path)


def test_fixtures_not_on_this_host_are_left_out_with_the_reason(tmp_path):
    from verifylib.runtime.audio import audio_sha256
    here = tmp_path / "a.wav"
    here.write_bytes(b"RIFF....")
    other = tmp_path / "b.wav"
    other.write_bytes(b"RIFF!!!!")
    params, missing = available_fixtures(_params(tmp_path, [
        {"id": "jfk", "public": True, "runtime_file": "samples/jfk.wav"},
        {"id": "here", "public": False, "path": str(here)},
        {"id": "gone", "public": False, "path": str(tmp_path / "gone.wav")},
        {"id": "changed", "public": False, "path": str(other)},
    ]), {"here": audio_sha256(here), "changed": "0" * 64})
    assert [f["id"] for f in params.data["fixtures"]] == ["jfk", "here"]
    why = {m.id: m.reason for m in missing}
    assert "not on this host" in why["gone"] and "not the recorded audio" in why["changed"]


def test_the_page_puts_the_claim_table_first():
    from verifylib.views import replay as view
    res = cl.ReplayResult(run_dir="/r", run_id="id", verified=True, verify_problems=[],
                          verdict="INCOMPLETE",
                          claims=[cl.Claim("parity.program", cl.ClaimStatus.DIFFERS,
                                           {"snr": 140}, {"snr": 30}, "<b>below</b>")])
    html = view.page(res)
    assert html.index("vl-claims") < html.index("The replay")
    assert "FAILED" in html and "&lt;b&gt;below&lt;/b&gt;" in html
    assert view.fragment(res).count("<style") == 1


def test_a_build_without_a_recorded_digest_is_never_reproduced():
    none = build_claim("build.asan", {"key": "k", "sha256": None}, {"key": "k", "sha256": None})
    assert none.status is cl.ClaimStatus.NOT_REPLAYABLE and "no digest" in none.detail


def test_each_claim_nothing_compared_is_not_replayable_with_its_reason():
    from types import SimpleNamespace

    from verifylib.evidence.gates import GATES, Status
    from verifylib.replay.compare import unreplayed_claims
    recorded = SimpleNamespace(status=Status.PASS)
    run = SimpleNamespace(gates={g.id: recorded for g in GATES if g.id != "export.pair"})
    made = {c.id for c in cl.CLAIMS} - {"export.pair", "parity.program", "wer.hybrid"}
    got = {c.id: c for c in unreplayed_claims(run, made)}
    assert set(got) == {"export.pair", "parity.program", "wer.hybrid"}
    assert all(c.status is cl.ClaimStatus.NOT_REPLAYABLE for c in got.values())
    assert got["export.pair"].detail == ("export.pair is absent in the run: "
                                         "nothing recorded to replay")
    assert got["wer.hybrid"].detail.startswith("macOS-only")
    assert got["parity.program"].detail.startswith("replay does not re-derive parity.program")


def test_a_program_record_without_its_package_path_is_not_replayable(monkeypatch):
    # The parity rule judges a program record that omits artifact.path; replay has no
    # package to re-execute for it (it used to raise AttributeError on None.endswith).
    from types import SimpleNamespace

    from verifylib.evidence.gates import PARITY_PROGRAM, Status
    from verifylib.evidence.parity.schema import ParityEvidence
    from verifylib.replay.parity import _replayable

    parsed = SimpleNamespace(kind="program", artifact=SimpleNamespace(path=None))
    monkeypatch.setattr(ParityEvidence, "from_json",
                        classmethod(lambda cls, doc, path=None: parsed))
    run = SimpleNamespace(gates={PARITY_PROGRAM: SimpleNamespace(status=Status.PASS)},
                          evidence=lambda gate_id: SimpleNamespace(json=lambda name: {}))
    claims, todo = _replayable(run)
    assert todo == []
    got = {c.id: c for c in claims}
    assert got[PARITY_PROGRAM].status is cl.ClaimStatus.NOT_REPLAYABLE
    assert got[PARITY_PROGRAM].detail == "the parity record names no package to re-execute"
