"""One exception root: every exception class verifylib defines is a VerifylibError, and a
broken prerequisite is recorded differently from a harness bug (synthetic runs, no build)."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from pathlib import Path

import pytest

import verifylib
from verifylib import canonical, errors, params
from verifylib.evidence import receipt
from verifylib.evidence.rules import registry as rules
from verifylib.errors import PrerequisiteBroken, VerifylibError
from verifylib.evidence.gates import Judgement, Status
from verifylib.stages.context import StageContext

from .synthetic import install_rules, make_run

ROOT = Path(__file__).resolve().parents[1]

NOT_ERRORS = {"verifylib.batch.audit.Interrupted"}
"""A signal turned into KeyboardInterrupt so asyncio lets it through; not a failure."""


def _exception_classes() -> dict[str, type]:
    out = {}
    for info in pkgutil.walk_packages(verifylib.__path__, "verifylib."):
        if info.name.rsplit(".", 1)[-1] == "__main__":  # importing it runs the CLI
            continue
        mod = importlib.import_module(info.name)
        for _, cls in inspect.getmembers(mod, inspect.isclass):
            if issubclass(cls, BaseException) and cls.__module__ == mod.__name__:
                out[f"{cls.__module__}.{cls.__qualname__}"] = cls
    return out


def test_every_exception_class_derives_from_the_root():
    found = _exception_classes()
    assert "verifylib.whispercpp.build.BuildError" in found and "verifylib.stages.context.StageRefused" in found
    assert NOT_ERRORS <= set(found)
    assert issubclass(found["verifylib.batch.audit.Interrupted"], KeyboardInterrupt)
    outside = sorted(name for name, cls in found.items()
                     if not issubclass(cls, VerifylibError) and name not in NOT_ERRORS)
    assert outside == []


def test_each_family_keeps_its_builtin_base():
    for name in errors.__all__:
        cls = getattr(errors, name)
        assert issubclass(cls, VerifylibError)
        if cls is not VerifylibError:
            assert issubclass(cls, (ValueError, RuntimeError)), name


@pytest.mark.parametrize("dotted, family, builtin", [
    ("verifylib.params.ParameterError", errors.ParametersInvalid, ValueError),
    ("verifylib.whispercpp.pincheck.PinCheckError", errors.ParametersInvalid, ValueError),
    ("verifylib.evidence.attest.AttestKeyError", errors.ParametersInvalid, ValueError),
    ("verifylib.models.ggml_writer.GgmlError", errors.ModelFailure, ValueError),
    ("verifylib.stages.context.StageRefused", errors.StageRefusal, RuntimeError),
    ("verifylib.evidence.records.EvidenceError", errors.EvidenceInvalid, ValueError),
])
def test_module_classes_keep_name_family_and_builtin_base(dotted, family, builtin):
    module, name = dotted.rsplit(".", 1)
    cls = getattr(importlib.import_module(module), name)
    assert issubclass(cls, family) and issubclass(cls, builtin)


@pytest.fixture
def rules_(monkeypatch):
    install_rules(monkeypatch)


def _gate(run_dir: Path, gate_id: str) -> dict:
    rec = canonical.read_json(run_dir / "receipt.json")
    return next(g for g in rec["gates"] if g["id"] == gate_id)


def _stored_traceback(run_dir: Path, row: dict) -> dict:
    (tb,) = [e for e in row["evidence"] if e["name"] == "traceback"]
    return canonical.read_json(run_dir / tb["path"])


def test_prerequisite_broken_is_recorded_as_such_and_verifies(tmp_path, rules_):
    run_dir = make_run(tmp_path, broken={"build.source_identity"})
    row = _gate(run_dir, "build.source_identity")
    assert (row["status"], row["reason"]["kind"]) == ("ERROR", "prerequisite-broken")
    doc = _stored_traceback(run_dir, row)
    assert doc["schema"] == "verifylib-error/1" and doc["traceback"] == row["reason"]["detail"]
    assert "PrerequisiteBroken" in doc["traceback"]
    res = receipt.verify(run_dir)
    assert res.ok, res.problems
    assert res.verdict == "REJECTED"


def test_a_plain_bug_is_recorded_as_exception_and_verifies(tmp_path, rules_, monkeypatch):
    def buggy(ev):
        return 1 // 0
    monkeypatch.setitem(rules.RULES, "build.source_identity", buggy)
    run_dir = make_run(tmp_path)
    row = _gate(run_dir, "build.source_identity")
    assert (row["status"], row["reason"]["kind"]) == ("ERROR", "exception")
    assert "ZeroDivisionError" in _stored_traceback(run_dir, row)["traceback"]
    assert receipt.verify(run_dir).ok


def _build_stage(tmp_path):
    p = params.load(ROOT / "parameters" / "tiny-en.yaml")
    return StageContext("01_build", p, tmp_path / "run")


def test_evidence_of_an_unpassed_gate_is_a_broken_prerequisite(tmp_path, rules_):
    ctx = _build_stage(tmp_path)
    run = ctx.begin("build.source_identity")
    with run:
        ctx.evidence_of("build.patch_exact", "doc")
    rec = ctx.records["build.source_identity"]
    assert rec.status is Status.ERROR and rec.reason.kind == "prerequisite-broken"
    assert "has not passed" in rec.reason.detail


def test_pass_citing_unread_evidence_stays_a_harness_bug(tmp_path, monkeypatch):
    monkeypatch.setitem(rules.RULES, "build.source_identity",
                        lambda ev: Judgement(Status.PASS, "read nothing"))
    ctx = _build_stage(tmp_path)
    run = ctx.begin("build.source_identity")
    with run:
        run.judge([ctx.write_json("doc", {"ok": True})])
    rec = ctx.records["build.source_identity"]
    assert rec.status is Status.ERROR and rec.reason.kind == "exception"
    assert "never read" in rec.reason.detail


def test_record_error_refuses_an_unknown_kind(tmp_path):
    ctx = _build_stage(tmp_path)
    with pytest.raises(ValueError, match="not an ERROR reason kind"):
        ctx.record_error("build.source_identity", "boom", kind="rule")
    assert "build.source_identity" not in ctx.records


def test_gate_records_allow_exactly_the_error_kinds():
    from verifylib.evidence.records import EvidenceError, GateRecord

    def row(kind):
        return {"id": "build.ggml", "status": "ERROR", "reason": {"kind": kind, "detail": "x"},
                "evidence": [], "identities": {}}
    for kind in ("exception", "prerequisite-broken"):
        assert GateRecord.from_record(row(kind)).reason.kind == kind
    for kind in ("rule", "prerequisite", "broken"):
        with pytest.raises(EvidenceError, match="not allowed for ERROR"):
            GateRecord.from_record(row(kind))
