"""``verifylib.open_run``: a typed, read-only, digest-checked view of a published run.

These tests read one run of the simulated Mac in which every gate ran
(:mod:`tests.helpers.published_runs`): each stage's typed result read back from the
published run must equal what the stage returned, every read is digest-checked, and
nothing here writes."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from tests.helpers.forge import clone, snapshot
from verifylib import canonical
from verifylib.errors import EvidenceInvalid, ParametersInvalid
from verifylib.evidence import gates, receipt
from verifylib.evidence.gates import Verdict
from verifylib.evidence.wer.result import PRIVATE
from verifylib.evidence.runs import RunInvalid, open_run
from verifylib.numerics.arrays import ArrayFile

# ----------------------------------------------------------------------------- helpers


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
    assert sorted(run.sidecars("01_build")) == ["asan_builds", "seam_builds", "unpatched_build"]
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
    # Stage 04's builder is verifylib.evidence.parity.result.parity_result_from_evidence.
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
    assert facts.ggml.sha256 == run.identities["binary.ggml.sha256"]
    assert facts.unpatched.sha256 == run.identities["binary.ggml_unpatched.sha256"]
    assert facts.coreml.sha256 == run.identities["binary.coreml.sha256"]
    assert "COREML = 1" in facts.coreml.bench_system_info
    # The typed facts give the table the notebook shows, under the same labels.
    table = dict(facts.rows())
    assert table["sha256"] == facts.ggml.sha256
    assert table["whisper-bench system_info"] == facts.coreml.bench_system_info
    export = run.facts("02_export")
    assert dict(export.rows())["load probe"].startswith("exit 0 in ")
    assert export.model.load_probe == "exit 0"
    assert "fp32 .mlmodelc" in dict(export.rows())
    assert [c.precision for c in export.compiled][:1] == ["fp32"]
    assert run.facts("03_canary") == {}
    # Run.result serves every stage: the facts of 01 and 02, the results of 03-06.
    assert run.result("01_build") == run.facts("01_build")
    assert run.result("02_export") == run.facts("02_export")
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


@pytest.mark.physical
def test_the_core_ml_build_runs_the_program_through_whisper_cpps_core_ml_path(published,
                                                                               tmp_path):
    """The simulated Mac's Core ML whisper-cli is whisper.cpp's own Core ML path on the seam:
    its lines are whisper.cpp's, its encoder output is the compiled program's, executed by
    the simulated Mac's process; what the simulated framework cannot load fails closed."""
    import shutil

    from tests.simmac import Scenario, SimulatedMac
    from verifylib.runtime import contracts
    from verifylib.runtime.contracts.seam import SEAM_PREFIX
    from verifylib.runtime.runner import run_whisper_cli

    run = published.run_dir
    clip = canonical.read_json(run / "evidence" / "05_wer" / "hybrid.json")["clips"][0]
    argv = list(clip["run"]["argv"])
    argv[argv.index("-m") + 1] = str(run / "fp32" / "ggml-model.bin")
    with SimulatedMac(Scenario(), tmp_path / "state") as mac:
        res = run_whisper_cli(argv, timeout=300)
        (launch,) = mac.core_ml_launches()
    assert res.returncode == 0, res.stderr_text
    assert contracts.COREML_LOAD_MARKER in res.stderr_text and "COREML = 1" in res.stderr_text
    assert SEAM_PREFIX not in res.stderr_text  # a Mac's Core ML build prints no seam line
    assert launch.loaded and launch.folder.endswith("ggml-model-encoder.mlmodelc")
    assert launch.calls and all(c.output_sha256 and c.refused is None for c in launch.calls)
    assert res.stdout_text.strip()

    # A folder the framework never compiled: the executor refuses, whisper.cpp fails closed.
    other = tmp_path / "other"
    other.mkdir()
    shutil.copyfile(run / "fp32" / "ggml-model.bin", other / "ggml-model.bin")
    enc = other / "ggml-model-encoder.mlmodelc"
    shutil.copytree(run / "fp32" / "ggml-model-encoder.mlmodelc", enc)
    (enc / "model.mil").write_text((enc / "model.mil").read_text() + "\n")
    argv[argv.index("-m") + 1] = str(other / "ggml-model.bin")
    with SimulatedMac(Scenario(), tmp_path / "state2") as mac:
        res = run_whisper_cli(argv, timeout=300)
        (launch,) = mac.core_ml_launches()
    assert res.returncode == 3
    assert contracts.COREML_LOAD_FAILURE_MARKER in res.stderr_text
    assert SEAM_PREFIX not in res.stderr_text
    assert not launch.loaded and "Core ML cannot load" in launch.refusal
