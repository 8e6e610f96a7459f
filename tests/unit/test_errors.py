"""One exception root: every exception class verifylib defines is a VerifylibError, no two
of them are synonyms, bad input leaves as a family of the root, and a broken prerequisite is
recorded differently from a harness bug (synthetic runs, no build)."""

from __future__ import annotations

import ast
import builtins
import importlib
import inspect
import pkgutil
import re
from pathlib import Path

import pytest

import verifylib
from verifylib import canonical, errors, params
from verifylib.evidence import receipt
from verifylib.evidence import registry as rules
from verifylib.errors import PrerequisiteBroken, VerifylibError
from verifylib.evidence.gates import Judgement, Status
from verifylib.stages.context import StageContext

from tests.helpers.synthetic import install_rules, make_run

from tests.helpers import ROOT

NOT_ERRORS = {"verifylib.batch.signals.Interrupted"}
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
    assert "verifylib.whispercpp.cmake_steps.BuildError" in found
    assert "verifylib.runtime.ledger.LedgerError" in found
    assert NOT_ERRORS <= set(found)
    assert issubclass(found["verifylib.batch.signals.Interrupted"], KeyboardInterrupt)
    outside = sorted(name for name, cls in found.items()
                     if not issubclass(cls, VerifylibError) and name not in NOT_ERRORS)
    assert outside == []


def test_each_family_keeps_its_builtin_base():
    for name in errors.__all__:
        cls = getattr(errors, name)
        assert issubclass(cls, VerifylibError)
        if cls is not VerifylibError:
            # A host fault is the OSError callers already catch for a disk.
            assert issubclass(cls, (ValueError, RuntimeError, OSError)), name


@pytest.mark.parametrize("dotted, family, builtin", [
    ("verifylib.runtime.audio.AudioError", errors.ParametersInvalid, ValueError),
    ("verifylib.whispercpp.pincheck.PinCheckError", errors.ParametersInvalid, ValueError),
    ("verifylib.evidence.attest.AttestKeyError", errors.ParametersInvalid, ValueError),
    ("verifylib.models.ggml_writer.GgmlError", errors.ModelFailure, ValueError),
    ("verifylib.models.coreml_contract.EncoderContractBroken", errors.ContractBroken, ValueError),
    ("verifylib.runtime.ledger.LedgerError", errors.EvidenceInvalid, ValueError),
    ("verifylib.evidence.runs.RunInvalid", errors.EvidenceInvalid, ValueError),
    ("verifylib.locks.LockTimeout", errors.RunFailure, RuntimeError),
])
def test_module_classes_keep_name_family_and_builtin_base(dotted, family, builtin):
    module, name = dotted.rsplit(".", 1)
    cls = getattr(importlib.import_module(module), name)
    assert issubclass(cls, family) and issubclass(cls, builtin)


# ----------------------------------------------------------------------------- on the source

PACKAGE = ROOT / "verifylib"

SYNONYM_SUFFIXES = ("Error", "Invalid", "Violation", "Refused", "Refusal", "Broken")
"""Name endings that say only "this went wrong": two exception names that differ by one of
them alone (``ParameterError``/``ParametersInvalid``, ``StageRefused``/``StageRefusal``) are
the same name to a reader. ``Failure`` is left out: the ``-Failure`` families in
:mod:`verifylib.errors` name what failed, their ``-Error`` leaves name where (a module)."""

_BUILTIN_EXCEPTIONS = {name for name, obj in vars(builtins).items()
                       if isinstance(obj, type) and issubclass(obj, BaseException)}


def _base_name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):  # ``_source.PatchError``
        return node.attr
    return None


def _exception_defs(sources: dict[str, str]) -> list[tuple[str, ast.ClassDef, list[str]]]:
    """Every class statement (nested ones too) that derives, by name, from an exception."""
    classes = []
    for rel, text in sources.items():
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ClassDef):
                classes.append((rel, node, [b for b in map(_base_name, node.bases) if b]))
    known = set(_BUILTIN_EXCEPTIONS)
    grew = True
    while grew:  # a class is an exception once one of its bases is
        grew = False
        for _, node, bases in classes:
            if node.name not in known and any(b in known for b in bases):
                known.add(node.name)
                grew = True
    return [c for c in classes if c[1].name in known and c[1].name not in _BUILTIN_EXCEPTIONS]


def _package_sources() -> dict[str, str]:
    return {p.relative_to(ROOT).as_posix(): p.read_text(encoding="utf-8")
            for p in sorted(PACKAGE.rglob("*.py"))}


def _stem(name: str) -> str:
    for suffix in SYNONYM_SUFFIXES:
        if name.endswith(suffix) and len(name) > len(suffix):
            stem = name[:-len(suffix)]
            # ``ParametersInvalid`` and ``ParameterError`` name the same thing
            return stem[:-1] if stem.endswith("s") else stem
    return name


def _only_a_docstring(node: ast.ClassDef) -> bool:
    return all(isinstance(s, ast.Pass) or (isinstance(s, ast.Expr)
                                          and isinstance(s.value, ast.Constant)
                                          and isinstance(s.value.value, str))
               for s in node.body)


def _synonyms(sources: dict[str, str]) -> list[str]:
    defs = _exception_defs(sources)
    found = []
    by_name: dict[str, list[str]] = {}
    by_stem: dict[str, set[str]] = {}
    for rel, node, bases in defs:
        by_name.setdefault(node.name, []).append(f"{rel}:{node.lineno}")
        by_stem.setdefault(_stem(node.name), set()).add(node.name)
        if (len(bases) == 1 and _only_a_docstring(node) and bases[0] != node.name
                and _stem(bases[0]) == _stem(node.name)):
            found.append(f"{rel}:{node.lineno}: {node.name} only renames its base {bases[0]}")
    found += [f"{name} is defined {len(where)} times: {', '.join(where)}"
              for name, where in sorted(by_name.items()) if len(where) > 1]
    found += [f"{' / '.join(sorted(names))} differ only by a suffix"
              for _, names in sorted(by_stem.items()) if len(names) > 1]
    return found


def _reaches(name: str, bases_of: dict[str, list[str]], goal: str, seen=()) -> bool:
    if name == goal:
        return True
    return any(b not in seen and _reaches(b, bases_of, goal, (*seen, name))
               for b in bases_of.get(name, ()))


def test_every_exception_class_in_the_source_derives_from_the_root():
    # The import walk above sees module-level classes; the source also shows nested ones.
    defs = _exception_defs(_package_sources())
    bases_of = {node.name: bases for _, node, bases in defs}
    assert {"VerifylibError", "ParametersInvalid", "Interrupted", "BuildError"} <= set(bases_of)
    outside = sorted(f"{rel}:{node.lineno}: {node.name}" for rel, node, _ in defs
                     if not _reaches(node.name, bases_of, "VerifylibError")
                     and node.name != "Interrupted")
    assert outside == [], "derive these from a family of verifylib.errors"
    assert _reaches("Interrupted", bases_of, "KeyboardInterrupt")


def test_no_two_exception_classes_are_synonyms():
    found = _synonyms(_package_sources())
    assert not found, ("keep one name per family (verifylib.errors), or give the subclass "
                       "a name saying what is more specific:\n" + "\n".join(found))


def test_the_synonym_scan_would_see_them():
    src = {"a.py": "class FooInvalid(ValueError):\n    'x'\n"
                   "class FooError(FooInvalid):\n    'y'\n",
           "b.py": "class StageRefusal(RuntimeError):\n    'x'\n"
                   "def f():\n    class StageRefused(RuntimeError):\n        pass\n"
                   "class Plain:\n    'not an exception'\n"
                   "class PlainError(Plain):\n    'not an exception either'\n",
           "c.py": "class BarBroken(ValueError):\n    'x'\n"
                   "class BarViolation(mod.BarBroken):\n"
                   "    def __init__(self, problems):\n        self.problems = problems\n"
                   "class LedgerError(FooInvalid):\n    'a more specific kind: fine'\n"
                   "class LedgerError(FooInvalid):\n    'twice'\n"}
    found = _synonyms(src)
    assert "a.py:3: FooError only renames its base FooInvalid" in found
    assert "FooError / FooInvalid differ only by a suffix" in found
    assert "StageRefusal / StageRefused differ only by a suffix" in found
    assert "BarBroken / BarViolation differ only by a suffix" in found  # behaviour or not
    assert any(f.startswith("LedgerError is defined 2 times") for f in found)
    assert not [f for f in found if "Plain" in f]
    assert _stem("ParametersInvalid") == _stem("ParameterError") == "Parameter"
    assert _stem("BuildError") != _stem("BuildFailure")


# ----------------------------------------------------------------------------- bad input

def test_bad_user_input_leaves_as_a_family_of_the_root(tmp_path):
    from verifylib.stages import canary
    from verifylib.evidence.failures import FAILURE_FORMAT, FailureRecord
    from verifylib.whispercpp.source import SourceSpec, load_pins

    with pytest.raises(errors.ParametersInvalid, match="source key commit: .*40 lower-case hex"):
        SourceSpec(kind="git", url="https://example.invalid/x.git", commit="f24588a")
    with pytest.raises(errors.ParametersInvalid, match="source key kind: "):
        SourceSpec(kind="svn")
    with pytest.raises(errors.ParametersInvalid, match=r"unknown source keys \['branch'\]"):
        SourceSpec.from_dict({"kind": "git", "branch": "main"})
    manifest = tmp_path / "manifest.yaml"
    manifest.write_text("pins: [", encoding="utf-8")
    with pytest.raises(errors.ParametersInvalid, match=f"^{re.escape(str(manifest))}: not valid YAML"):
        load_pins(manifest)
    manifest.write_text("pins:\n  v1: {commit: abc}\n", encoding="utf-8")
    with pytest.raises(errors.ParametersInvalid, match=f"^{re.escape(str(manifest))}: pin 'v1': "
                                                       "missing keys"):
        load_pins(manifest)
    with pytest.raises(errors.ParametersInvalid, match="key canary.runs"):
        canary.run_lifecycle({}, tmp_path / "m.bin", tmp_path / "a.wav", 0, 1.0, progress=False)
    with pytest.raises(errors.EvidenceInvalid, match="field 'id' is missing"):
        FailureRecord.from_json({"format": FAILURE_FORMAT})


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
    from verifylib.errors import EvidenceInvalid
    from verifylib.evidence.records import GateRecord

    def row(kind):
        return {"id": "build.ggml", "status": "ERROR", "reason": {"kind": kind, "detail": "x"},
                "evidence": [], "identities": {}}
    for kind in ("exception", "prerequisite-broken"):
        assert GateRecord.from_record(row(kind)).reason.kind == kind
    for kind in ("rule", "prerequisite", "broken"):
        with pytest.raises(EvidenceInvalid, match="not allowed for ERROR"):
            GateRecord.from_record(row(kind))
