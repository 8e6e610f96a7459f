"""``verifylib.open_run`` on synthetic runs (milliseconds, no build): what is not a published
run, a malformed receipt, gates without results, evidence that is not the stage's. The
physical run of the simulated Mac is read in tests/simmac/test_runs.py."""

from __future__ import annotations

import re
import sys
import typing
from pathlib import Path

import pytest

from verifylib import canonical
from verifylib.errors import EvidenceInvalid, ParametersInvalid
from verifylib.evidence import gates
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
    with pytest.raises(RunInvalid, match="verifylib-receipt/2"):
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


# ----------------------------------------------------------------------------- the typed contract

def _return_type(fn, **names):
    # Annotations are strings (``from __future__ import annotations``) naming classes some
    # modules import for type checking only: read them in the function's module, plus names.
    return eval(fn.__annotations__["return"], {**vars(sys.modules[fn.__module__]), **names})


def test_each_stage_name_gives_the_class_its_builder_returns():
    from verifylib.evidence import runs
    from verifylib.evidence.build.facts import BuildFacts, build_facts_from_evidence
    from verifylib.evidence.canary.result import CanaryResult, canary_result_from_evidence
    from verifylib.evidence.export.facts import ExportFacts, export_facts_from_evidence
    from verifylib.evidence.parity.result import ParityResult, parity_result_from_evidence
    from verifylib.evidence.placement.result import (
        PlacementResult,
        placement_result_from_evidence,
    )
    from verifylib.evidence.stage_report import StageResult
    from verifylib.evidence.wer.result import WerResult, wer_result_from_evidence
    builders = {"01_build": build_facts_from_evidence, "02_export": export_facts_from_evidence,
                "03_canary": canary_result_from_evidence,
                "04_parity": parity_result_from_evidence, "05_wer": wer_result_from_evidence,
                "06_placement": placement_result_from_evidence}
    assert list(builders) == list(gates.STAGES)
    classes = {c.__name__: c for c in (BuildFacts, ExportFacts, CanaryResult, ParityResult,
                                       WerResult, PlacementResult)}
    *literal, general = typing.get_overloads(runs.Run.result)
    by_name = {}
    for overload in literal:
        hints = typing.get_type_hints(overload, vars(runs), classes)
        for name in typing.get_args(hints["stage"]):
            assert name not in by_name, f"{name} has two overloads"
            by_name[name] = hints["return"]
    assert general.__annotations__ == {"stage": "str", "return": "StageResult | None"}
    for stage, builder in builders.items():
        # Both spellings Run.result accepts, with the class the stage's builder returns.
        returned = _return_type(builder)
        assert by_name.pop(stage) == returned, stage
        assert by_name.pop(stage.split("_", 1)[1]) == returned, stage
    assert by_name == {}
    # StageResult is the union of the six classes, one per stage, in stage order.
    per_stage = [[c for c in typing.get_args(t) or (t,) if c is not type(None)]
                 for t in map(_return_type, builders.values())]
    assert [classes[n] for n in StageResult.split(" | ")] == [c for (c,) in per_stage]
