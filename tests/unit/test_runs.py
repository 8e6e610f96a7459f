"""``verifylib.open_run``: a typed, read-only, digest-checked view of a published run.

The physical tests read one run of the simulated Mac in which every gate ran
(:mod:`tests.published_runs`): each stage's typed result read back from the published run
must equal what the stage returned, every read is digest-checked, and nothing here writes.
The others use synthetic runs (milliseconds, no build).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import verifylib
from verifylib import canonical
from verifylib.evidence import gates, receipt
from verifylib.numerics.arrays import ArrayFile
from verifylib.errors import EvidenceInvalid, ParametersInvalid
from verifylib.evidence.gates import Status, Verdict
from verifylib.evidence.results import PRIVATE
from verifylib.evidence.runs import RunInvalid, RunNotFound, open_run

from .forge import clone, edit_gate, reseal
from .published_runs import simulated_published_run
from .synthetic import install_rules, make_run

ROOT = Path(__file__).resolve().parents[1]


# ----------------------------------------------------------------------------- helpers

def snapshot(run_dir: Path) -> dict:
    """Every entry below ``run_dir``: files by content digest, size and mtime, folders by
    mtime (a file added or removed changes its folder's)."""
    out = {}
    for p in sorted(run_dir.rglob("*")):
        st = p.lstat()
        rel = p.relative_to(run_dir).as_posix()
        if p.is_file():
            out[rel] = ("file", hashlib.sha256(p.read_bytes()).hexdigest(), st.st_size,
                        st.st_mtime_ns)
        else:
            out[rel] = ("dir", st.st_mtime_ns)
    out["."] = ("dir", run_dir.stat().st_mtime_ns)
    return out


def plain(obj):
    """A result as plain data: dataclasses as dicts, array files as (file name, digest)."""
    if isinstance(obj, ArrayFile):
        return ("ArrayFile", obj.path.name, obj.sha256)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, dict) or hasattr(obj, "items") and not isinstance(obj, (str, bytes)):
        return {k: plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [plain(v) for v in obj]
    return obj


def _replace(path: Path, data: bytes) -> None:
    # A clone shares inodes with its original (hard links): replace, never write in place.
    path.unlink()
    path.write_bytes(data)


# ----------------------------------------------------------------------------- the physical run

@pytest.fixture(scope="module")
def published(tmp_path_factory):
    return simulated_published_run(tmp_path_factory.getbasetemp())


@pytest.mark.physical
def test_open_run_gives_the_receipt_typed(published):
    run = open_run(published.run_dir)
    rec = canonical.read_json(published.run_dir / "receipt.json")
    record = canonical.read_json(published.run_dir / "run.json")
    assert run.path == published.run_dir.resolve()
    assert run.run_id == rec["run_id"] and run.name == "explore"
    assert run.params.data == record["params"] and run.params.name == "explore"
    assert run.params_sha256 == record["params_sha256"] == rec["params_sha256"]
    assert dict(run.host) == record["host"] and run.simulated is True
    assert dict(run.packages) == record["packages"]
    assert run.created_utc == record["created_utc"]
    assert run.verdict is Verdict.ADMISSIBLE
    assert list(run.gates) == [g.id for g in gates.GATES]
    for row in rec["gates"]:
        got = run.gates[row["id"]]
        assert got.to_record() == {k: v for k, v in row.items() if k not in ("stage", "required")}
    assert dict(run.identities) == rec["identities"]
    assert run.files == {f["path"]: f["sha256"] for f in rec["files"]}
    assert run.receipt_sha256 == canonical.sha256_file(published.run_dir / "receipt.json")
    assert [r.id for r in run.stage_records("parity")] == [
        g.id for g in gates.stage_gates("04_parity")]
    assert sorted(run.sidecars("01_build")) == ["asan_builds", "unpatched_build"]
    assert "ADMISSIBLE" in repr(run)


@pytest.mark.physical
def test_recorded_and_verified_verdict(published):
    run = open_run(published.run_dir)
    refused = run.verify()
    assert not refused.ok and any("simulated" in p for p in refused.problems)
    res = run.verify(allow_simulated=True)
    assert res.ok, res.problems
    assert res.verdict == run.verdict.value == "ADMISSIBLE"
    with pytest.raises(RunInvalid, match="simulated") as exc:
        open_run(published.run_dir, verify=True)
    assert exc.value.problems
    assert open_run(published.run_dir, verify=True, allow_simulated=True).verdict is Verdict.ADMISSIBLE


@pytest.mark.physical
@pytest.mark.parametrize("stage", [s for s in gates.STAGES if s != "04_parity"])
def test_each_stage_reads_back_as_it_returned(published, stage):
    """Reconstructed from the published evidence == what the stage's ``run`` returned."""
    want = published.reports[stage]
    got = open_run(published.run_dir).report(stage)
    assert got.stage == stage
    assert got.records == want.records
    assert got.identities == want.identities
    assert got.facts == want.facts
    assert plain(got.result) == plain(want.result)


@pytest.mark.physical
def test_parity_reads_back_as_it_returned(published):
    # Stage 04's builder is verifylib.evidence.results.parity_result_from_evidence.
    want = published.reports["04_parity"]
    run = open_run(published.run_dir)
    got = run.report("04_parity")
    assert got.records == want.records
    assert plain(got.result) == plain(want.result)
    assert set(got.result.candidates) == {"parity.program", "parity.runtime"}
    fp32 = got.result.candidates["parity.program"]
    assert fp32.status == "PASS" and fp32.drift.layers
    # Arrays load lazily, bound to the digests the gate cites.
    assert isinstance(fp32.outputs, ArrayFile) and not fp32.outputs.loaded
    assert fp32.outputs["fixture"].shape == (1, 1500, 384)
    assert fp32.outputs.sha256 == run.evidence_ref("parity.program", "outputs").sha256
    ref = got.result.reference_outputs
    assert ref["fixture"].shape == fp32.outputs["fixture"].shape


@pytest.mark.physical
def test_every_kind_of_result_is_there(published):
    run = open_run(published.run_dir)
    facts = run.facts("01_build")
    assert facts["sha256"] == run.identities["binary.ggml.sha256"]
    assert facts["unpatched sha256"] == run.identities["binary.ggml_unpatched.sha256"]
    assert facts["Core ML sha256"] == run.identities["binary.coreml.sha256"]
    assert "COREML = 1" in facts["whisper-bench system_info"]
    assert run.facts("02_export")["load probe"].startswith("exit 0 in ")
    assert "fp32 .mlmodelc" in run.facts("02_export")
    assert run.facts("03_canary") == {} and run.result("01_build") is None
    c = run.canary
    assert c.lifecycle.outcome_counts()["patched"] == {"exit 3 + both markers": 2}
    assert c.sanitizer.sides["unpatched"].kind
    assert c.negative.outcome == "exit 3 + load-failure + init-failure"
    assert c.positive.transcript.startswith("And so")
    wer = run.wer
    clips = {x.id: x for x in wer.clips}
    assert clips["jfk"].reference.startswith("And so my fellow Americans")  # as given
    assert clips["jfk"].hybrid.startswith("And so my fellow Americans")
    private = clips["directions"]
    assert (private.reference, private.source, private.ggml, private.hybrid) == (PRIVATE,) * 4
    assert private.counts["hybrid"] is not None and private.wer_hybrid is not None
    assert [x.id for x in wer.ranked("wer_source")] == sorted(
        clips, key=lambda k: -clips[k].wer_source)
    with pytest.raises(ParametersInvalid):
        wer.ranked("wer_nonsense")
    share = run.placement.device_share("fp32")
    assert share and abs(sum(share.values()) - 1) < 0.011
    assert run.placement is run.result("placement")  # read once, kept in memory


@pytest.mark.physical
def test_open_run_never_writes(published):
    run_dir = published.run_dir
    before = snapshot(run_dir)
    run = open_run(run_dir)
    for stage in gates.STAGES:
        run.report(stage)
        run.facts(stage)
        run.sidecars(stage)
        run.stage_file(stage)
    for gid, rec in run.gates.items():
        if rec.evidence:
            view = run.evidence(gid)
            for name in view.names():
                view.bytes(name)
    for cand in run.parity.candidates.values():
        for arrays in (cand.outputs or {},):
            for key in arrays:
                arrays[key]
    for key in run.parity.reference_outputs or {}:
        run.parity.reference_outputs[key]
    assert run.verify(allow_simulated=True).ok
    assert receipt.verify(run_dir, allow_simulated=True).ok
    assert snapshot(run_dir) == before


@pytest.mark.physical
def test_every_read_is_digest_checked(published, tmp_path):
    run_dir = clone(published.run_dir, tmp_path / "run")
    wer = run_dir / "evidence" / "05_wer" / "wer.json"
    _replace(wer, wer.read_bytes().replace(b'"jfk"', b'"jfK"'))
    run = open_run(run_dir)  # opening reads only receipt.json and run.json
    with pytest.raises(EvidenceInvalid, match="wer.json"):
        run.wer
    stage_file = run_dir / "gates" / "03_canary.json"
    _replace(stage_file, stage_file.read_bytes() + b" ")
    with pytest.raises(RunInvalid, match="03_canary.json"):
        run.report("03_canary")
    arrays = run.arrays("parity.program", "outputs")
    data = arrays.path.read_bytes()
    _replace(arrays.path, data[:-1] + bytes([data[-1] ^ 1]))
    with pytest.raises(EvidenceInvalid, match="digest"):
        arrays["fixture"]
    run_json = run_dir / "run.json"
    _replace(run_json, run_json.read_bytes() + b"\n")
    with pytest.raises(RunInvalid, match="run.json"):
        open_run(run_dir)


# ----------------------------------------------------------------------------- synthetic runs

@pytest.fixture
def synthetic(tmp_path, monkeypatch):
    install_rules(monkeypatch)
    return make_run(tmp_path)


def test_refuses_what_is_not_a_published_run(tmp_path, synthetic):
    with pytest.raises(RunNotFound, match="no such run directory"):
        open_run(tmp_path / "missing")
    (tmp_path / "file").write_text("x")
    with pytest.raises(RunNotFound, match="not a run directory"):
        open_run(tmp_path / "file")
    unpublished = tmp_path / "unpublished"
    unpublished.mkdir()
    (unpublished / "run.json").write_bytes((synthetic / "run.json").read_bytes())
    with pytest.raises(RunNotFound, match="not published"):
        open_run(unpublished)
    with pytest.raises(RunNotFound, match=re.escape(f"published runs below it: {synthetic}")):
        open_run(tmp_path)
    assert issubclass(RunNotFound, ParametersInvalid) and issubclass(RunInvalid, EvidenceInvalid)
    # The receipt itself names its run.
    assert open_run(synthetic / "receipt.json").path == synthetic.resolve()


def test_refuses_a_malformed_receipt(tmp_path, synthetic):
    run_dir = clone(synthetic, tmp_path / "bad")
    _replace(run_dir / "receipt.json", b"{not json")
    with pytest.raises(RunInvalid, match="not strict JSON"):
        open_run(run_dir)
    _replace(run_dir / "receipt.json", canonical.dumps({"schema": "other/1"}))
    with pytest.raises(RunInvalid, match="verifylib-receipt/1"):
        open_run(run_dir)


def test_synthetic_run_gates_read_but_results_refuse(synthetic):
    run = open_run(synthetic)
    assert run.gate("build.ggml").status is Status.PASS
    assert run.identities["runtime.tree"] == "a" * 40
    assert run.evidence("build.ggml").json("doc") == {"ok": True}
    with pytest.raises(ParametersInvalid, match="unknown stage"):
        run.result("07_nothing")
    with pytest.raises(ParametersInvalid, match="no gate"):
        run.gate("build.nothing")
    # The stand-in gates cite no stage document, so there is no result to read.
    assert run.wer is None and run.placement is None and run.canary.lifecycle is None


def test_evidence_that_is_not_what_the_stage_writes_is_named(tmp_path, synthetic):
    # A forged record that calls the stand-in document "wer" (digests resealed).
    run_dir = clone(synthetic, tmp_path / "forged")
    (run_dir / "receipt.json").unlink()

    def rename(rec):
        rec["evidence"][0]["name"] = "wer"
    edit_gate(run_dir, "wer.ggml_vs_source", rename)
    reseal(run_dir)
    with pytest.raises(RunInvalid, match="stage 05_wer does not give its result"):
        open_run(run_dir).wer


def test_import_verifylib_stays_light():
    code = ("import sys, verifylib; assert 'verifylib.evidence.runs' not in sys.modules; "
            "assert verifylib.open_run is verifylib.evidence.runs.open_run; "
            "assert 'torch' not in sys.modules")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert res.returncode == 0, res.stderr
    assert verifylib.Run.__name__ == "Run"
