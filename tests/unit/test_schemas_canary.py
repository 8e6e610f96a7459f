"""The stage 03 sidecar schemas: exact round trips and refusals that name the field.

The documents are built the way :mod:`verifylib.stages.canary` builds them, from
:class:`~verifylib.runtime.runner.RunResult` objects through
:func:`~verifylib.runtime.runner.run_record`, the contract's classifiers and the sanitizer
report reader; ``to_json(from_json(doc))`` must give the same dict and the same canonical
bytes, and every malformed variant must be refused with the path of its field.
"""

from __future__ import annotations

import pytest

from verifylib import canonical
from verifylib.errors import EvidenceInvalid
from verifylib.evidence.gates import Status
from verifylib.evidence.canary import rules as canary_rules
from verifylib.evidence.canary import schema as schemas
from verifylib.evidence.run_record import Launch
from verifylib.runtime import contracts, sanitizer
from verifylib.runtime.runner import RunResult, run_record
from verifylib.evidence.fields import SchemaError

BIN = {"unpatched": "/cache/builds/" + "a" * 64 + "/bin/whisper-cli",
       "patched": "/cache/builds/" + "b" * 64 + "/bin/whisper-cli"}
MODEL, AUDIO = "/tree/models/for-tests-ggml-tiny.en.bin", "/tree/samples/jfk.wav"
FILE = {"path": MODEL, "sha256": "c" * 64}
SHA = {"unpatched": "1a" * 32, "patched": "2b" * 32}

LIFECYCLE_ERR = (f"{contracts.AHEADS_FAILURE_MARKER}\n{contracts.INIT_FAILURE_MARKER}\n").encode()
ASAN_ERR = (
    f"{contracts.AHEADS_FAILURE_MARKER}\n"
    "==1502==ERROR: AddressSanitizer: attempting free on address which was not malloc()-ed: "
    "0x602000000010 in thread T0\n"
    "    #0 0x7fb44bcb767e in __interceptor_free ../asan/asan_malloc_linux.cpp:53\n"
    "    #1 0x55df7dbddcd5 in whisper_batch_free /whisper.cpp/src/whisper.cpp:499\n"
    "    #2 0x55df7da3896a in main /whisper.cpp/examples/cli/cli.cpp:1101\n"
    "SUMMARY: AddressSanitizer: bad-free ../asan/asan_malloc_linux.cpp:53 "
    "in __interceptor_free\n").encode()


def _result(argv, returncode, stderr: bytes, stdout: bytes = b"", wall_s: float = 0.4321,
            launch=None) -> RunResult:
    return RunResult(argv=list(argv), returncode=returncode,
                     signal=contracts.decode_signal(returncode, "Linux"), timed_out=False,
                     stdout=stdout, stderr=stderr, wall_s=wall_s, launch=launch,
                     signal_table="Linux")


def _lifecycle_rows(side: str, rcs, with_report: bool = False) -> list[dict]:
    rows = []
    for i, rc in enumerate(rcs):
        err = (ASAN_ERR if with_report and side == "unpatched" else LIFECYCLE_ERR)
        r = _result(contracts.lifecycle_argv(BIN[side], MODEL, AUDIO), rc, err,
                    launch={"seq": i, "binary_sha256": SHA[side]} if i == 0 else None)
        rec = run_record(r)
        rec["index"] = i
        rec["outcome"] = contracts.classify_lifecycle(rec, r.stderr, r.stdout).outcome
        if with_report:
            rec["report"] = sanitizer.report_evidence(r.stderr)
        rows.append(rec)
    return rows


def lifecycle_doc(unpatched_available: bool = True) -> dict:
    """Build a ``lifecycle`` document as ``lifecycle_ab`` writes it (an integer timeout)."""
    meta: dict[str, dict] = {}
    for side, rcs in (("unpatched", (-11, -11, 3)), ("patched", (3, 3, 3))):
        if side == "unpatched" and not unpatched_available:
            meta[side] = {"available": False, "reason": "the unpatched build failed: boom"}
            continue
        rows = _lifecycle_rows(side, rcs)
        counts: dict[str, int] = {}
        for x in rows:
            counts[x["outcome"]] = counts.get(x["outcome"], 0) + 1
        meta[side] = {"available": True, "binary": BIN[side], "binary_sha256": SHA[side],
                      "runs": rows, "counts": dict(sorted(counts.items()))}
    return {"schema": schemas.LIFECYCLE_SCHEMA, "runs_per_side": 3, "timeout_s": 30,
            "trigger": contracts.lifecycle_trigger_args(), "model": dict(FILE),
            "audio": {"path": AUDIO, "sha256": "d" * 64}, "sides": meta}


def sanitizer_doc() -> dict:
    """Build a ``sanitizer`` document as ``sanitizer_ab`` writes it."""
    meta: dict[str, dict] = {}
    for side in schemas.SIDES:
        variant, _ = sanitizer.SIDES[side]
        build = {"variant": variant, "key": side[0] * 64,
                 "options": {"CMAKE_BUILD_TYPE": "RelWithDebInfo", "GGML_NATIVE": "ON"},
                 "needed_libs": ["libasan.so.8", "libc.so.6"], "static": True,
                 "tree_id": "e" * 40, "patch_sha256": None if side == "unpatched" else "f" * 64}
        meta[side] = {"available": True, "binary": BIN[side], "binary_sha256": SHA[side],
                      "build": {k: build.get(k) for k in schemas.AsanBuild.FIELDS},
                      "runs": _lifecycle_rows(side, (1, 1, 1) if side == "unpatched"
                                              else (3, 3, 3), with_report=True)}
    return {"schema": schemas.SANITIZER_SCHEMA, "runs_per_side": sanitizer.RUNS_PER_SIDE,
            "timeout_s": 60.0, "trigger": contracts.lifecycle_trigger_args(),
            "asan_options": sanitizer.ASAN_OPTIONS, "external_symbolizer": None,
            "pin": "v1.8.5", "model": dict(FILE), "audio": {"path": AUDIO, "sha256": "d" * 64},
            "sides": meta}


def negative_doc() -> dict:
    """Build a ``negative`` document as ``coreml_negative`` writes it."""
    model_arg = "/tmp/verifylib-negative-x/ggml-model.bin"
    err = (f"{contracts.COREML_LOAD_FAILURE_PREFIX}{contracts.coreml_encoder_path(model_arg)}'\n"
           f"{contracts.INIT_FAILURE_MARKER}\n").encode()
    res = _result(contracts.coreml_argv("/b/whisper-cli", model_arg, AUDIO, "en"), 3, err,
                  launch={"seq": 0, "binary_sha256": "1" * 64})
    rec = run_record(res)
    c = contracts.classify_negative(rec, res.stderr, res.stdout)
    return {"schema": schemas.NEGATIVE_SCHEMA, "binary": "/b/whisper-cli",
            "binary_sha256": "1" * 64, "model_sha256": "2" * 64, "model_arg": model_arg,
            "scratch_listing": ["ggml-model.bin"],
            "derived_mlmodelc": contracts.coreml_encoder_path(model_arg), "attempts": 1,
            "timeout_s": 30, "run": rec, "outcome": c.outcome}


def positive_doc(before: str | None = "3" * 64) -> dict:
    """Build a ``positive`` document as ``coreml_positive`` writes it.

    The warm-up printed no encode time (both encode fields null).
    """
    model_arg = "/run/fp32/ggml-model.bin"
    argv = contracts.coreml_argv("/b/whisper-cli", model_arg, AUDIO, "en")
    warm = _result(argv, 0, b"no timings\n", b" And so my fellow Americans\n", wall_s=3.5)
    measured = _result(argv, 0, b"whisper_print_timings:     encode time =    42.75 ms /     1 "
                                b"runs (   42.75 ms per run)\n",
                       b" And so my fellow Americans\n")
    recs = {}
    for name, res in (("warmup", warm), ("measured", measured)):
        rec = run_record(res)
        enc = contracts.parse_encode_time(res.stderr_text)
        rec["encode_time_ms"], rec["encode_runs"] = enc if enc else (None, None)
        recs[name] = rec
    c = contracts.classify_positive(recs["measured"], measured.stderr, measured.stdout)
    return {"schema": schemas.POSITIVE_SCHEMA, "binary": "/b/whisper-cli",
            "binary_sha256": "1" * 64, "model_arg": model_arg,
            "mlmodelc": {"path": contracts.coreml_encoder_path(model_arg),
                         "tree_digest_before": before, "tree_digest_after": before},
            "timeouts_s": {"warmup": 900.0, "measured": 30},
            "warmup": recs["warmup"], "measured": recs["measured"], "outcome": c.outcome,
            "transcript_chars": len(measured.stdout_text.strip())}


DOCS = {
    "lifecycle": (lifecycle_doc, schemas.LifecycleEvidence),
    "sanitizer": (sanitizer_doc, schemas.SanitizerEvidence),
    "negative": (negative_doc, schemas.NegativeEvidence),
    "positive": (positive_doc, schemas.PositiveEvidence),
}


# ----------------------------------------------------------------------------- round trips

@pytest.mark.parametrize("name", sorted(DOCS))
def test_round_trip_is_exact(name):
    make, cls = DOCS[name]
    doc = canonical.loads(canonical.dumps(make()))  # as read back from disk
    parsed = cls.from_json(doc)
    assert parsed.to_json() == doc
    assert canonical.dumps(parsed.to_json()) == canonical.dumps(doc)
    # And the dict built in memory, before any JSON: the same bytes the stage writes.
    assert canonical.dumps(cls.from_json(make()).to_json()) == canonical.dumps(make())


def test_round_trip_keeps_value_types_and_optional_parts():
    doc = lifecycle_doc(unpatched_available=False)
    ev = schemas.LifecycleEvidence.from_json(doc)
    assert ev.to_json() == doc
    assert isinstance(ev.to_json()["timeout_s"], int)  # 30 stays 30, not 30.0
    assert ev.sides.unpatched.available is False and ev.sides.unpatched.runs == ()
    assert ev.sides.patched.runs[0].launch == Launch(seq=0, binary_sha256=SHA["patched"])
    assert "launch" not in ev.sides.patched.runs[1].to_json()
    # model and audio are optional in the format (the rule does not read them).
    del doc["model"], doc["audio"]
    assert schemas.LifecycleEvidence.from_json(doc).to_json() == doc
    san = schemas.SanitizerEvidence.from_json(sanitizer_doc())
    assert san.sides.patched.runs[0].report is None
    assert san.sides.unpatched.runs[0].report is not None
    assert san.sides.unpatched.runs[0].report.frames[1].function == "whisper_batch_free"
    pos = positive_doc(before=None)
    assert schemas.PositiveEvidence.from_json(pos).to_json() == pos
    assert schemas.PositiveEvidence.from_json(pos).warmup.encode_time_ms is None


def test_the_built_documents_pass_their_rules_where_they_can():
    # The lifecycle document is a real A/B: the rule passes it on its own streams.
    doc = lifecycle_doc()
    streams = {canonical.sha256_bytes(b): b for b in (LIFECYCLE_ERR, b"")}
    assert canary_rules.judge_lifecycle(doc, streams.get).status is Status.PASS


# ----------------------------------------------------------------------------- refusals

def _edit(doc: dict, path: list, value=None, delete: bool = False) -> dict:
    d = canonical.loads(canonical.dumps(doc))
    obj = d
    for key in path[:-1]:
        obj = obj[key]
    if delete:
        del obj[path[-1]]
    else:
        obj[path[-1]] = value
    return d


@pytest.mark.parametrize("name, path, value, delete, want_path, want", [
    ("lifecycle", ["sides", "unpatched", "runs", 2, "returncode"], "3", False,
     "sides.unpatched.runs[2].returncode", "expected an integer or null, got string '3'"),
    ("lifecycle", ["sides", "patched", "runs", 0, "stderr_sha256"], None, True,
     "sides.patched.runs[0].stderr_sha256", "missing"),
    ("lifecycle", ["sides", "patched", "runs", 1, "argv", 0], 7, False,
     "sides.patched.runs[1].argv[0]", "expected a string, got integer 7"),
    ("lifecycle", ["sides", "patched", "runs", 0, "launch", "seq"], "0", False,
     "sides.patched.runs[0].launch.seq", "expected an integer, got string '0'"),
    ("lifecycle", ["sides", "patched", "counts"], [], False,
     "sides.patched.counts", "expected an object, got array"),
    ("lifecycle", ["sides", "patched", "available"], "yes", False,
     "sides.patched.available", "expected a boolean, got string 'yes'"),
    ("lifecycle", ["runs_per_side"], True, False,
     "runs_per_side", "expected an integer, got boolean True"),
    ("lifecycle", ["trigger"], "-nfa -dtw large.v3", False,
     "trigger", "expected an array, got string '-nfa -dtw large.v3'"),
    ("sanitizer", ["sides", "unpatched", "runs", 0, "report", "frames", 1, "index"], "1",
     False, "sides.unpatched.runs[0].report.frames[1].index",
     "expected an integer, got string '1'"),
    ("sanitizer", ["sides", "patched", "runs", 2, "report"], None, True,
     "sides.patched.runs[2].report", "missing"),
    ("sanitizer", ["sides", "unpatched", "build", "static"], "yes", False,
     "sides.unpatched.build.static", "expected a boolean or null, got string 'yes'"),
    ("sanitizer", ["sides", "patched", "build"], None, True, "sides.patched.build", "missing"),
    ("sanitizer", ["pin"], None, False, "pin", "expected a string, got null"),
    ("sanitizer", ["sides", "unpatched", "runs", 1, "report", "note"], "planted", False,
     "sides.unpatched.runs[1].report.note", "not a field of this record"),
    ("sanitizer", ["sides", "unpatched", "runs", 0, "report", "frames", 0, "x"], 1, False,
     "sides.unpatched.runs[0].report.frames[0].x", "not a field of this record"),
    ("negative", ["run", "argv"], "/b/whisper-cli", False,
     "run.argv", "expected an array, got string '/b/whisper-cli'"),
    ("negative", ["run", "timed_out"], 0, False, "run.timed_out",
     "expected a boolean, got integer 0"),
    ("negative", ["scratch_listing", 0], None, False, "scratch_listing[0]",
     "expected a string, got null"),
    ("negative", ["attempts"], 1.0, False, "attempts", "expected an integer, got number 1.0"),
    ("positive", ["measured", "encode_time_ms"], "42.75", False, "measured.encode_time_ms",
     "expected a number or null, got string '42.75'"),
    ("positive", ["mlmodelc"], None, True, "mlmodelc", "missing"),
    ("positive", ["warmup", "wall_s"], None, False, "warmup.wall_s",
     "expected a number, got null"),
    ("positive", ["timeouts_s", "measured"], None, True, "timeouts_s.measured", "missing"),
])
def test_a_malformed_document_is_refused_naming_the_field(name, path, value, delete,
                                                          want_path, want):
    make, cls = DOCS[name]
    with pytest.raises(SchemaError) as info:
        cls.from_json(_edit(make(), path, value, delete))
    assert isinstance(info.value, EvidenceInvalid)
    assert (info.value.path, info.value.problem) == (want_path, want)
    assert str(info.value) == f"{want_path}: {want}"


@pytest.mark.parametrize("name", sorted(DOCS))
def test_another_schema_or_no_object_is_a_mismatch(name):
    make, cls = DOCS[name]
    for doc in (_edit(make(), ["schema"], "verifylib-other/1"), [make()], None):
        with pytest.raises(schemas.SchemaMismatch):
            cls.from_json(doc)


@pytest.mark.parametrize("name", ["lifecycle", "sanitizer"])
def test_an_ab_document_needs_both_sides(name):
    make, cls = DOCS[name]
    for sides in ({"patched": make()["sides"]["patched"]}, [], None,
                  {**make()["sides"], "third": {"available": False}}):
        with pytest.raises(schemas.SidesIncomplete, match="must record both sides"):
            cls.from_json(_edit(make(), ["sides"], sides))


@pytest.mark.parametrize("name, judge", [
    ("lifecycle", lambda d: canary_rules.judge_lifecycle(d, lambda sha: b"")),
    ("sanitizer", lambda d: canary_rules.judge_sanitizer(d, lambda sha: b"", {})),
    ("negative", lambda d: canary_rules.judge_negative(d, b"", b"")),
    ("positive", lambda d: canary_rules.judge_positive(d, b"", b"", (b"", b""))),
])
def test_the_rules_fail_a_document_that_does_not_parse_naming_the_field(name, judge):
    make, cls = DOCS[name]
    bad = _edit(make(), ["timeout_s"] if name != "positive" else ["timeouts_s", "warmup"],
                "30")
    j = judge(bad)
    field = "timeout_s" if name != "positive" else "timeouts_s.warmup"
    assert j.status is Status.FAIL
    assert j.detail == (f"malformed {cls.SCHEMA} document: {field}: expected a number, "
                        f"got string '30'")
    assert judge({"schema": "x"}).detail == f"not a {cls.SCHEMA} document"
