"""The stage 01 evidence schemas: exact round trips and refusals that name the field.

The documents are built the way :mod:`verifylib.stages.build` builds them: through
:func:`~verifylib.whispercpp.source.source_evidence`,
:func:`~verifylib.whispercpp.source.patch_evidence` (from
:class:`~verifylib.whispercpp.source.PatchCheck` objects),
:func:`~verifylib.whispercpp.system_info.build_evidence` (from a
:class:`~verifylib.whispercpp.build.BuildResult` and its probe) and
:func:`~verifylib.stages.build.write_coreml_evidence`. ``to_json(from_json(doc))`` must give
the same dict and the same canonical bytes; a malformed variant must be refused with the
path of its field, and the judges must FAIL on it naming that path.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from tests.helpers.edits import delete_at, set_at
from verifylib import canonical
from verifylib.errors import EvidenceInvalid
from verifylib.evidence.gates import Status
from verifylib.evidence.build import rules as build_rules
from verifylib.evidence.build import schema as schemas
from verifylib.runtime.runner import RunResult
from verifylib.whispercpp import source
from verifylib.whispercpp.bench import BenchBuild
from verifylib.whispercpp.build import BuildResult
from verifylib.whispercpp.build_options import effective_options
from verifylib.whispercpp.system_info import SystemInfoProbe, build_evidence
from verifylib.evidence.fields import SchemaError

TREE = "a276adc5ab0958b854ce44c16a3e31615f473552"
KEY, CML_KEY = "4" * 64, "5" * 64
SYSINFO = ("system_info: n_threads = 2 / 2 | WHISPER : COREML = 0 | OPENVINO = 0 | "
           "CPU : SSE3 = 1 | AVX2 = 1 | OPENMP = 1 |")
LAUNCH = {"seq": 3, "binary_sha256": "6" * 64}
NO_GPU = "whisper_backend_init_gpu: no GPU found\n"
BENCH_ERR = b"system_info: COREML = 1 |\n" + NO_GPU.encode()


@pytest.fixture(scope="module")
def pin() -> source.Pin:
    return next(iter(source.load_pins().values()))


def _result(argv, *, rc=0, err=b"", out=b"", launch=None, wall=0.41234) -> RunResult:
    return RunResult(argv=list(argv), returncode=rc, signal=None, timed_out=False,
                     stdout=out, stderr=err, wall_s=wall, launch=launch)


def _build(tmp_path: Path, variant: str, key: str, patch: str | None, **kw) -> BuildResult:
    binary = tmp_path / "builds" / key / "whisper-cli"
    record = tmp_path / "builds" / key / "build.json"
    record.parent.mkdir(parents=True, exist_ok=True)
    canonical.write_json(record, {"sha256": "1" * 64})
    opts = effective_options(variant, {"GGML_NATIVE": "OFF"})
    return BuildResult(binary=binary, sha256="1" * 64, key=key, cached=kw.get("cached", False),
                       seconds=61.23456, variant=variant, options=opts,
                       compiler={"c++": "c++ 12", "cc": "cc 12", "cmake": "cmake 3.25.1"},
                       needed_libs=("libstdc++.so.6", "libc.so.6"), static=True, tree_id=TREE,
                       patch_sha256=patch, build_json=record)


def source_doc(pin, tmp_path) -> dict:
    st = source.SourceTree(path=tmp_path / "src", tree_id=pin.tree,
                           origin={"kind": "git", "url": "https://example.org/w.git"},
                           cached=True)
    return canonical.loads(canonical.dumps(source.source_evidence(pin, pin.tree, st)))


def _phase(pin, **change) -> dict:
    check = source.PatchCheck(
        pin_name=pin.name, pin_tree=pin.tree, head_tree=pin.tree, touches=tuple(pin.touches),
        declared_patch_sha256=pin.patch_sha256, patch_file_sha256=pin.patch_sha256,
        patch_file_bytes=1234, diff_sha256=pin.patch_sha256, diff_bytes=1234,
        diff_equals_patch=True, status_lines=tuple(f" M {t}" for t in sorted(pin.touches)),
        expected_status_lines=tuple(f" M {t}" for t in sorted(pin.touches)), problems=())
    return dict(check.to_evidence(), **change)


def patch_doc(pin) -> dict:
    ev = source.patch_evidence(pin, {"before": _phase(pin), "after": _phase(pin)})
    return canonical.loads(canonical.dumps(ev))


def ggml_doc(tmp_path, launch=LAUNCH) -> dict:
    res = _build(tmp_path, "ggml", KEY, "7" * 64)
    run = _result([str(res.binary), "-m", "m.bin", "-f", "jfk.wav"],
                  err=(NO_GPU + SYSINFO).encode(), launch=launch)
    probe = SystemInfoProbe(result=run, system_info_line=SYSINFO, coreml=0, backend="cpu")
    return canonical.loads(canonical.dumps(build_evidence(res, probe)))


class _Capture:
    """Stands in for the StageContext ``write_coreml_evidence`` writes through."""

    def __init__(self):
        self.docs: dict = {}

    def write_json(self, name, doc):
        self.docs[name] = canonical.loads(canonical.dumps(doc))
        return name

    def write_bytes(self, name, data, filename):
        self.docs[name] = data
        return name


def coreml_doc(tmp_path) -> dict:
    from verifylib.stages import build as stage_build
    cli = _build(tmp_path, "coreml", CML_KEY, "7" * 64)
    bench = BenchBuild(binary=tmp_path / f"bench-{KEY}" / "whisper-bench", sha256="8" * 64,
                       key="9" * 64, cli_key=CML_KEY, options=dict(cli.options), cached=True,
                       seconds=1.5)
    probe = _result([str(bench.binary), "-m", "m.bin"], rc=2, err=BENCH_ERR)
    ctx = _Capture()
    stage_build.write_coreml_evidence(ctx, cli, bench, probe, patch_after_problems=[],
                                      ggml_key=KEY)
    return ctx.docs["coreml_build"]


def _round_trip(cls_or_parse, doc):
    parsed = cls_or_parse(doc)
    assert parsed.to_json() == doc
    assert canonical.dumps(parsed.to_json()) == canonical.dumps(doc)
    return parsed


# ----------------------------------------------------------------------------- round trips

def test_source_round_trip(pin, tmp_path):
    doc = source_doc(pin, tmp_path)
    parsed = _round_trip(schemas.SourceEvidence.from_json, doc)
    assert parsed.computed_tree == pin.tree and parsed.cached is True
    bare = canonical.loads(canonical.dumps(source.source_evidence(pin, pin.tree)))
    assert _round_trip(schemas.SourceEvidence.from_json, bare).origin is None


def test_patch_round_trip_with_and_without_phases(pin):
    doc = patch_doc(pin)
    parsed = _round_trip(schemas.PatchEvidence.from_json, doc)
    assert parsed.checks.before is not None and parsed.checks.apply_error is None
    failed = canonical.loads(canonical.dumps(source.patch_evidence(
        pin, {"apply_error": "patch does not apply"})))
    parsed = _round_trip(schemas.PatchEvidence.from_json, failed)
    assert parsed.checks.before is None and parsed.checks.apply_error == "patch does not apply"
    only_before = canonical.loads(canonical.dumps(source.patch_evidence(
        pin, {"before": _phase(pin, problems=["drift"])})))
    assert _round_trip(schemas.PatchEvidence.from_json, only_before).checks.after is None


@pytest.mark.parametrize("launch", [LAUNCH, None])
def test_ggml_build_round_trip(tmp_path, launch):
    doc = ggml_doc(tmp_path, launch)
    assert ("launch" in doc["probe"]) is (launch is not None)
    parsed = _round_trip(schemas.parse_build, doc)
    assert isinstance(parsed, schemas.GgmlBuildEvidence)
    assert parsed.probe is not None and parsed.probe.coreml == 0
    failed = {"built": False, "error": "build did not run"}
    assert isinstance(_round_trip(schemas.parse_build, failed), schemas.FailedBuild)


def test_coreml_build_round_trip(tmp_path):
    doc = coreml_doc(tmp_path)
    parsed = _round_trip(schemas.parse_coreml_build, doc)
    assert isinstance(parsed, schemas.CoremlBuildEvidence)
    assert parsed.bench.probe.returncode == 2 and parsed.ggml_key == KEY
    assert build_rules.judge_coreml_build(doc, BENCH_ERR, b"").status is Status.PASS
    failed = {"built": False, "error": "no Xcode"}
    assert isinstance(_round_trip(schemas.parse_coreml_build, failed), schemas.FailedBuild)


def test_unknown_keys_are_not_read(tmp_path):
    doc = ggml_doc(tmp_path)
    parsed = schemas.parse_build(dict(doc, extra="ignored"))
    assert parsed.to_json() == doc


# ----------------------------------------------------------------------------- refusals

SOURCE_EDITS = [
    (delete_at("computed_tree"), "computed_tree"),
    (set_at(None, "pin_tree"), "pin_tree"),
    (set_at("yes", "cached"), "cached"),
    (set_at([], "origin"), "origin"),
]

PATCH_EDITS = [
    (delete_at("patch_file"), "patch_file"),
    (set_at("x", "checks"), "checks"),
    (set_at(True, "checks", "before", "diff_bytes"), "checks.before.diff_bytes"),
    (set_at(["a", 3], "checks", "after", "status_lines"), "checks.after.status_lines[1]"),
    (delete_at("checks", "after", "head_tree"), "checks.after.head_tree"),
    (set_at(5, "checks", "apply_error"), "checks.apply_error"),
    (set_at("src/a.c", "touches"), "touches"),
]

GGML_EDITS = [
    (delete_at("built"), "built"),
    (set_at("true", "built"), "built"),
    (delete_at("key"), "key"),
    (set_at("1", "seconds"), "seconds"),
    (set_at("libc.so.6", "needed_libs"), "needed_libs"),
    (set_at(True, "probe", "returncode"), "probe.returncode"),
    (set_at(None, "probe", "timed_out"), "probe.timed_out"),
    (delete_at("probe", "stderr_sha256"), "probe.stderr_sha256"),
    (set_at("0", "probe", "coreml"), "probe.coreml"),
    (set_at([], "probe", "launch"), "probe.launch"),
    (set_at(None, "ggml_backend"), "ggml_backend"),
    (set_at(1, "probe", "backend"), "probe.backend"),
    (set_at(-6, "probe", "signal_table"), "probe.signal_table"),
]

COREML_EDITS = [
    (delete_at("bench"), "bench"),
    (delete_at("bench", "probe", "argv"), "bench.probe.argv"),
    (set_at(None, "bench", "cli_key"), "bench.cli_key"),
    (set_at("", "patch_after_problems"), "patch_after_problems"),
    (set_at(7, "ggml_key"), "ggml_key"),
    (set_at(["cpu"], "ggml_backend"), "ggml_backend"),
    (set_at(None, "bench", "backend"), "bench.backend"),
]


def _refused(parse, doc, edit, path):
    d = copy.deepcopy(doc)
    edit(d)
    with pytest.raises(SchemaError) as info:
        parse(d)
    assert info.value.path == path, (path, str(info.value))
    assert isinstance(info.value, EvidenceInvalid)
    assert str(info.value).startswith(path)


@pytest.mark.parametrize("edit,path", SOURCE_EDITS)
def test_source_refusals(pin, tmp_path, edit, path):
    doc = source_doc(pin, tmp_path)
    _refused(schemas.SourceEvidence.from_json, doc, edit, path)
    d = copy.deepcopy(doc)
    edit(d)
    j = build_rules.judge_source_identity(d)
    assert j.status is Status.FAIL and path in j.detail


@pytest.mark.parametrize("edit,path", PATCH_EDITS)
def test_patch_refusals(pin, edit, path):
    doc = patch_doc(pin)
    _refused(schemas.PatchEvidence.from_json, doc, edit, path)
    d = copy.deepcopy(doc)
    edit(d)
    j = build_rules.judge_patch_exact(d)
    assert j.status is Status.FAIL and path in j.detail


@pytest.mark.parametrize("edit,path", GGML_EDITS)
def test_ggml_build_refusals(tmp_path, edit, path):
    doc = ggml_doc(tmp_path)
    _refused(schemas.parse_build, doc, edit, path)
    d = copy.deepcopy(doc)
    edit(d)
    j = build_rules.judge_ggml_build(d, NO_GPU + SYSINFO)
    assert j.status is Status.FAIL and path in j.detail


@pytest.mark.parametrize("edit,path", COREML_EDITS)
def test_coreml_build_refusals(tmp_path, edit, path):
    doc = coreml_doc(tmp_path)
    _refused(schemas.parse_coreml_build, doc, edit, path)
    d = copy.deepcopy(doc)
    edit(d)
    j = build_rules.judge_coreml_build(d, BENCH_ERR, b"")
    assert j.status is Status.FAIL and path in j.detail


def test_failed_build_needs_its_error_and_documents_must_be_objects():
    _refused(schemas.parse_build, {"built": False}, lambda d: None, "error")
    for parse in (schemas.parse_build, schemas.parse_coreml_build,
                  schemas.SourceEvidence.from_json, schemas.PatchEvidence.from_json):
        with pytest.raises(SchemaError) as info:
            parse([])
        assert info.value.path == "document"
    assert build_rules.judge_patch_exact([]).status is Status.FAIL
    assert build_rules.judge_ggml_build({"built": False}, "").detail == \
        "malformed evidence: error: missing"


# ----------------------------------------------------------------------------- typed facts

def _judged(run_dir, gate_id, docs: dict, blobs: dict = None):
    from verifylib.evidence.records import EvidenceRef, GateRecord, Reason
    refs = [EvidenceRef(n, f"{n}.json", canonical.write_json(run_dir / f"{n}.json", d))
            for n, d in docs.items()]
    refs += [EvidenceRef(n, f"{n}.txt", canonical.atomic_write_bytes(run_dir / f"{n}.txt", b))
             for n, b in (blobs or {}).items()]
    return GateRecord(gate_id, Status.PASS, Reason("rule", "judged"), tuple(refs))


def test_build_facts_are_typed_and_give_the_table(pin, tmp_path):
    from verifylib.evidence.records import EvidenceRef
    from verifylib.evidence.build.facts import BuildFacts, build_facts_from_evidence
    from verifylib.evidence.reading import fact_rows
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    src, ggml, cml = source_doc(pin, tmp_path), ggml_doc(tmp_path), coreml_doc(tmp_path)
    records = {"build.source_identity": _judged(run_dir, "build.source_identity",
                                                {"source": src}),
               "build.ggml": _judged(run_dir, "build.ggml", {"build": ggml}),
               "build.coreml": _judged(run_dir, "build.coreml", {"coreml_build": cml},
                                       {"bench_stderr": b"x\n" + BENCH_ERR})}
    unpatched = dict(ggml, variant="ggml-unpatched", patch_sha256=None, sha256="e" * 64)
    asan = {"unpatched": {"built": False, "error": "no ASan runtime"},
            "patched": dict(ggml, variant="ggml-asan", sha256="f" * 64)}
    sidecars = {"unpatched": EvidenceRef("unpatched_build", "unpatched_build.json",
                                         canonical.write_json(run_dir / "unpatched_build.json",
                                                              unpatched)),
                "asan": EvidenceRef("asan_builds", "asan_builds.json",
                                    canonical.write_json(run_dir / "asan_builds.json", asan))}
    facts = build_facts_from_evidence(run_dir, records, sidecars)
    assert isinstance(facts, BuildFacts) and facts
    assert facts.ggml.sha256 == ggml["sha256"] and facts.coreml.sha256 == cml["sha256"]
    assert facts.unpatched.sha256 == "e" * 64 and not facts.asan["unpatched"].built
    ua, pa = "unpatched ASan (canary.sanitizer only)", "patched ASan (canary.sanitizer only)"
    assert fact_rows(facts) == [
        ("source", src["path"]),
        ("binary", ggml["binary"]), ("sha256", ggml["sha256"]), ("cached", ggml["cached"]),
        ("build_seconds", ggml["seconds"]), ("system_info", SYSINFO),
        ("ggml backend", "cpu (pinned; the probe chose cpu)"),
        ("compiler", ggml["compiler"]),
        ("unpatched binary (lifecycle A/B only)", ggml["binary"]),
        ("unpatched sha256", "e" * 64), ("unpatched cached", ggml["cached"]),
        ("unpatched build_seconds", ggml["seconds"]),
        ("unpatched ggml backend", "cpu (pinned)"),
        (f"{ua} build", "failed: no ASan runtime"),
        (f"{pa} sha256", "f" * 64), (f"{pa} build_seconds", ggml["seconds"]),
        (f"{pa} cached", ggml["cached"]), (f"{pa} ggml backend", "cpu (pinned)"),
        ("Core ML binary", cml["binary"]), ("Core ML sha256", cml["sha256"]),
        ("Core ML build_seconds", cml["seconds"]),
        ("whisper-bench system_info", "system_info: COREML = 1 |"),
        ("Core ML ggml backend (hybrid decoder)", "cpu (pinned; whisper-bench chose cpu)")]
    empty = build_facts_from_evidence(run_dir, {}, None)
    assert empty == BuildFacts() and not empty and fact_rows(empty) == []
    assert fact_rows({}) == []
