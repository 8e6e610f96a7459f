"""``verifylib.open_run`` on synthetic runs (milliseconds, no build): what is not a published
run, a malformed receipt, gates without results, evidence that is not the stage's. The
physical run of the simulated Mac is read in tests/simmac/test_runs.py."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from verifylib import canonical
from verifylib.errors import EvidenceInvalid, ParametersInvalid
from verifylib.evidence.gates import Status
from verifylib.evidence.runs import RunInvalid, RunNotFound, open_run

from tests.helpers.forge import clone, edit_gate, reseal
from tests.helpers.synthetic import install_rules, make_run


def _replace(path: Path, data: bytes) -> None:
    # A clone shares inodes with its original (hard links): replace, never write in place.
    path.unlink()
    path.write_bytes(data)


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
