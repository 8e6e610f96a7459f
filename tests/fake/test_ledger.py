"""The launch ledger: contiguous, fsynced, lock-protected appends, and the validator's
check that every whisper.cpp launch is cited by exactly one gate (no retry, physically).

Launches are real: ``tests/helpers/fake_whisper_cli.py`` run through the runner with a bound
ledger. Run directories are synthetic (a :class:`StageContext` writing evidence), so no
whisper.cpp build is needed.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.helpers.fake_whisper_cli import install
from verifylib import canonical, params
from verifylib.runtime import contracts, ledger
from verifylib.evidence import accounting
from verifylib.errors import ContractBroken
from verifylib.evidence.records import GateRecord, Reason
from verifylib.evidence.gates import Status
from verifylib.runtime.runner import run_record, run_whisper_binary, run_whisper_cli
from verifylib.stages.context import StageContext

NEG = "canary.coreml_negative"
POS = "canary.coreml_positive"
LIFE = "canary.lifecycle_ab"
SHA = "ab" * 32


def make_params() -> params.Params:
    data = yaml.safe_load(params.DEFAULT_PARAMETERS.read_text())
    data.pop("fixtures", None)
    return params.validate(data, "test parameters", params.PARAMETERS_DIR)


def fields(seq: int = 0, **over) -> dict:
    d = {"binary_sha256": SHA, "started_utc": ledger.utc_now(), "returncode": 3,
         "signal": None, "timed_out": False, "stdout_sha256": SHA, "stderr_sha256": SHA}
    d.update(over)
    return d


def lines(path: Path) -> list[dict]:
    return [canonical.loads(x) for x in path.read_bytes().splitlines()]


# ----------------------------------------------------------------------------- appending

def test_unbound_by_default_and_append_needs_a_ledger():
    assert ledger.active() is None
    assert ledger.mark() == 0 and ledger.since(0) == []
    with pytest.raises(ledger.LedgerError, match="no ledger is bound"):
        ledger.append(["whisper-cli"], **fields())


def test_appends_are_contiguous_canonical_lines_fsynced_before_returning(tmp_path, monkeypatch):
    ledger.bind(tmp_path)
    assert ledger.active() == tmp_path.resolve() / ledger.LEDGER_FILE
    synced = []
    real_fsync = os.fsync

    def spy(fd):
        real_fsync(fd)
        # What is on disk when the file is fsynced: every line written so far, complete.
        if os.path.exists(ledger.active()):
            synced.append(ledger.active().read_bytes().count(b"\n"))
    monkeypatch.setattr(os, "fsync", spy)
    got = [ledger.append(["/bin/whisper-cli", "-m", f"m{i}.bin"], **fields(returncode=i))
           for i in range(3)]
    assert [e["seq"] for e in got] == [0, 1, 2]
    assert 1 in synced and 2 in synced and 3 in synced
    raw = ledger.active().read_bytes()
    assert raw == b"".join(canonical.dumps(e) for e in got)  # one canonical object per line
    assert lines(ledger.active()) == got
    assert set(got[0]) == set(ledger.SCHEMA_KEYS)
    assert got[1]["argv_sha256"] == canonical.sha256_bytes(
        canonical.dumps(["/bin/whisper-cli", "-m", "m1.bin"]))
    assert ledger.read(tmp_path) == got


_WRITER = """
import sys
from verifylib.runtime import ledger
path, tag, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
sha = "cd" * 32
for i in range(n):
    ledger.append(["whisper-cli", tag, str(i)], binary_sha256=sha, started_utc=tag,
                  returncode=0, signal=None, timed_out=False, stdout_sha256=sha,
                  stderr_sha256=sha, path=path)
"""


def test_two_processes_appending_at_once_get_unique_contiguous_seqs(tmp_path):
    path = tmp_path / ledger.LEDGER_FILE
    n = 150
    procs = [subprocess.Popen([sys.executable, "-c", _WRITER, str(path), tag, str(n)])
             for tag in ("a", "b")]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    entries = ledger.read(tmp_path)  # raises on a malformed line or a seq gap
    assert [e["seq"] for e in entries] == list(range(2 * n))
    for tag in ("a", "b"):
        mine = [e for e in entries if e["started_utc"] == tag]
        assert [e["argv_sha256"] for e in mine] == [
            ledger.argv_sha256(["whisper-cli", tag, str(i)]) for i in range(n)]


def test_a_torn_last_line_stays_a_malformed_line_of_its_own(tmp_path):
    path = tmp_path / ledger.LEDGER_FILE
    first = ledger.append(["w"], path=path, **fields())
    with open(path, "ab") as fh:
        fh.write(b'{"seq":1,"argv')  # a writer killed mid-line
    e = ledger.append(["w"], path=path, **fields())
    assert (first["seq"], e["seq"]) == (0, 2)
    problems = accounting.check(tmp_path, {})
    assert problems[0].startswith("ledger: line 2 is malformed: not strict JSON")
    with pytest.raises(ledger.LedgerError, match="line 2 is malformed"):
        ledger.read(tmp_path)


def test_mark_and_since_give_the_launches_made_in_between(tmp_path):
    ledger.bind(tmp_path)
    assert ledger.mark() == 0
    a = ledger.append(["w", "a"], **fields())
    m = ledger.mark()
    assert m == 1
    b = ledger.append(["w", "b"], **fields())
    c = ledger.append(["w", "c"], **fields())
    assert ledger.since(m) == [b, c]
    assert ledger.since(0) == [a, b, c]
    assert ledger.since(ledger.mark()) == []
    assert ledger.citation(b) == {"seq": 1, "binary_sha256": SHA}
    rec = ledger.entry_record(b)
    assert rec["launch"] == ledger.citation(b) and rec["argv_sha256"] == b["argv_sha256"]


# ----------------------------------------------------------------------------- the runner

@pytest.fixture
def audio(tmp_path) -> Path:
    p = tmp_path / "jfk.wav"
    p.write_bytes(b"RIFF sample")
    return p


def ggml_argv(exe: Path, audio: Path, tmp_path: Path) -> list[str]:
    model = tmp_path / "ggml-tiny.bin"
    model.write_bytes(b"model")
    return [str(exe), "-m", str(model), "-f", str(audio), "-t", "1", "-p", "1"]


def test_run_whisper_cli_records_each_launch_and_cites_it(tmp_path, audio):
    exe = install(tmp_path / "bin", "ggml")
    argv = ggml_argv(exe, audio, tmp_path)
    unbound = run_whisper_cli(argv, timeout=30)
    assert unbound.launch is None and "launch" not in run_record(unbound)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    ledger.bind(run_dir)
    results = [run_whisper_cli(argv, timeout=30) for _ in range(2)]
    sha = canonical.sha256_file(exe)
    assert [r.launch for r in results] == [{"seq": 0, "binary_sha256": sha},
                                           {"seq": 1, "binary_sha256": sha}]
    entries = ledger.read(run_dir)
    for r, e in zip(results, entries):
        assert run_record(r)["launch"] == ledger.citation(e)
        assert e["argv_sha256"] == ledger.argv_sha256(r.argv)
        assert (e["returncode"], e["signal"], e["timed_out"]) == (r.returncode, r.signal, False)
        assert (e["stdout_sha256"], e["stderr_sha256"]) == (r.stdout_sha256, r.stderr_sha256)
    # A refused command line launches nothing and records nothing.
    with pytest.raises(ContractBroken):
        run_whisper_cli(argv[:-1] + ["2"], timeout=30)
    assert len(ledger.read(run_dir)) == 2
    # Other whisper.cpp binaries (whisper-bench) skip the whisper-cli contract, not the ledger.
    bench = run_whisper_binary([str(exe), "-m", argv[2], "-t", "1", "-w", "0", "-p", "2"],
                               timeout=30)
    assert bench.launch == {"seq": 2, "binary_sha256": sha}


def test_a_crash_and_a_timeout_are_recorded_too(tmp_path, audio, monkeypatch):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    ledger.bind(run_dir)
    crash = run_whisper_cli(ggml_argv(install(tmp_path / "u", "ggml-unpatched"), audio, tmp_path)
                            + contracts.lifecycle_trigger_args(), timeout=30)
    hang = run_whisper_cli(ggml_argv(install(tmp_path / "h", "coreml-hang"), audio, tmp_path),
                           timeout=1)
    e = ledger.read(run_dir)
    assert (e[0]["signal"], e[0]["returncode"]) == ("SIGSEGV", crash.returncode)
    assert (e[1]["timed_out"], e[1]["returncode"], hang.launch["seq"]) == (True, None, 1)


# ----------------------------------------------------------------------------- check

def record(gid: str, refs, status: Status = Status.PASS) -> GateRecord:
    return GateRecord(gid, status, Reason("rule", "synthetic"), tuple(refs))


@pytest.fixture
def run(tmp_path, audio):
    """A 03_canary context with its ledger bound, and a launcher of the fake Core ML build."""
    ctx = StageContext("03_canary", make_params(), tmp_path / "run")
    ledger.bind(ctx.run_dir)
    exe = install(tmp_path / "bin", "coreml")
    model = tmp_path / "scratch" / "ggml-model.bin"
    model.parent.mkdir()
    model.write_bytes(b"ggml model")

    def launch(*extra):
        return run_whisper_cli([str(exe), "-m", str(model), "-f", str(audio), "-t", "4",
                                *contracts.greedy_decoding_args("en"), *extra], timeout=30)
    return ctx, launch


def test_a_clean_run_passes(run):
    ctx, launch = run
    neg = launch()
    warm, measured = launch("-d", "1000"), launch("-d", "1000")
    records = {
        NEG: record(NEG, [ctx.write_json("negative", {"attempts": 1, "run": run_record(neg)}),
                          ctx.write_bytes("negative_stderr", neg.stderr, "negative.stderr.txt")]),
        POS: record(POS, [ctx.write_json("positive", {"warmup": run_record(warm),
                                                      "measured": run_record(measured)})]),
        LIFE: record(LIFE, [], Status.NOT_RUN)}
    assert accounting.check(ctx.run_dir, records) == []
    assert [e["seq"] for e in ledger.read(ctx.run_dir)] == [0, 1, 2]


def test_no_ledger_and_no_citation_is_fine_but_a_citation_needs_a_ledger(tmp_path, audio):
    ctx = StageContext("03_canary", make_params(), tmp_path / "run")
    ref = ctx.write_json("positive", {"note": "no launches"})
    assert accounting.check(ctx.run_dir, {POS: record(POS, [ref])}) == []
    fake = dict(ledger.entry_record({"seq": 0, **fields(), "argv_sha256": SHA}))
    ref = ctx.write_json("negative", {"run": fake})
    problems = accounting.check(ctx.run_dir, {NEG: record(NEG, [ref])})
    assert problems == [f"{NEG}: launch #0 cited at evidence/03_canary/negative.json#/run is "
                        f"missing from the ledger (the run has no ledger.jsonl)"]


def test_a_retried_negative_control_fails_naming_the_gate(run):
    ctx, launch = run
    first = launch()   # crashed, say, and was quietly retried:
    second = launch()
    ref = ctx.write_json("negative", {"attempts": 1, "run": run_record(second)})
    problems = accounting.check(ctx.run_dir, {NEG: record(NEG, [ref])})
    assert first.launch["seq"] == 0
    argv = ledger.read(ctx.run_dir)[0]["argv_sha256"][:12]
    assert problems == [f"{NEG}: uncited launch #0 (argv {argv}…, the same command line as "
                        f"{NEG}'s launch #1, a retried or hidden run)"]


def test_a_negative_control_citing_two_launches_fails(run):
    ctx, launch = run
    a, b = launch(), launch()
    ref = ctx.write_json("negative", {"runs": [run_record(a), run_record(b)]})
    problems = accounting.check(ctx.run_dir, {NEG: record(NEG, [ref], Status.FAIL)})
    assert problems == [f"{NEG}: cites 2 launches; this single-shot gate owns exactly one "
                        "launch (its first and only run)"]
    # A negative control that ran must own one launch; one that raised, at most one.
    empty = ctx.write_json("negative_empty", {"run": None})
    assert accounting.check(ctx.run_dir, {NEG: record(NEG, [empty]), POS: record(POS, [ref])}) == [
        f"{NEG}: cites 0 launches; this single-shot gate owns exactly one launch (its first and "
        "only run)"]


def test_a_hidden_launch_between_gates_is_uncited(run):
    ctx, launch = run
    neg = launch()
    launch("-d", "500")  # a launch no gate keeps
    pos = launch("-d", "1000")
    records = {NEG: record(NEG, [ctx.write_json("negative", {"run": run_record(neg)})]),
               POS: record(POS, [ctx.write_json("positive", {"measured": run_record(pos)})])}
    problems = accounting.check(ctx.run_dir, records)
    assert len(problems) == 1
    assert problems[0].startswith("uncited launch #1 (argv ")
    assert problems[0].endswith(f"after {NEG}'s launch #0 and before {POS}'s launch #2, a "
                                "retried or hidden run)")


def test_a_launch_missing_from_the_ledger_fails(run):
    ctx, launch = run
    kept, dropped = launch(), launch("-d", "1000")
    path = ctx.run_dir / ledger.LEDGER_FILE
    path.write_bytes(path.read_bytes().splitlines(keepends=True)[0])  # the second line erased
    records = {NEG: record(NEG, [ctx.write_json("negative", {"run": run_record(kept)})]),
               POS: record(POS, [ctx.write_json("positive", {"measured": run_record(dropped)})])}
    assert accounting.check(ctx.run_dir, records) == [
        f"{POS}: launch #1 cited at evidence/03_canary/positive.json#/measured is missing from "
        "the ledger"]


def test_a_citation_that_differs_from_its_entry_fails(run):
    ctx, launch = run
    res = launch()
    rec = run_record(res)
    bad_stream = dict(rec, stdout_sha256="0" * 64)
    bad_argv = dict(rec, argv=rec["argv"] + ["-d", "1000"])
    bad_binary = dict(rec, launch=dict(rec["launch"], binary_sha256="1" * 64))
    bad_exit = dict(rec, returncode=0)
    no_stream = {k: v for k, v in rec.items() if k != "stderr_sha256"}
    for i, (rec_, needle) in enumerate([
            (bad_stream, "stdout_sha256"), (bad_argv, "argv"), (bad_binary, "binary_sha256"),
            (bad_exit, "returncode"), (no_stream, "stderr_sha256 (missing)")]):
        ref = ctx.write_json(f"negative{i}", {"run": rec_})
        assert accounting.check(ctx.run_dir, {NEG: record(NEG, [ref])}) == [
            f"{NEG}: launch #0 cited at evidence/03_canary/negative{i}.json#/run differs from "
            f"its ledger entry in {needle}"]


def test_a_ledger_entry_whose_stream_digest_was_edited_fails(run):
    ctx, launch = run
    res = launch()
    path = ctx.run_dir / ledger.LEDGER_FILE
    entry = dict(lines(path)[0], stderr_sha256="2" * 64)
    path.write_bytes(canonical.dumps(entry))  # still a well-formed, canonical ledger
    ref = ctx.write_json("negative", {"run": run_record(res)})
    assert accounting.check(ctx.run_dir, {NEG: record(NEG, [ref])}) == [
        f"{NEG}: launch #0 cited at evidence/03_canary/negative.json#/run differs from its "
        "ledger entry in stderr_sha256"]


def test_one_launch_cited_by_two_gates_or_twice_fails(run):
    ctx, launch = run
    rec = run_record(launch())
    a = ctx.write_json("negative", {"run": rec})
    b = ctx.write_json("positive", {"measured": rec})
    problems = accounting.check(ctx.run_dir, {NEG: record(NEG, [a]), POS: record(POS, [b])})
    assert problems == [
        f"{NEG} and {POS}: launch #0 is cited by 2 gates (evidence/03_canary/negative.json#/run, "
        "evidence/03_canary/positive.json#/measured); each launch belongs to exactly one gate"]
    twice = ctx.write_json("positive_twice", {"warmup": rec, "measured": rec})
    assert accounting.check(ctx.run_dir, {POS: record(POS, [twice])}) == [
        f"{POS}: launch #0 is cited 2 times (evidence/03_canary/positive_twice.json#/measured, "
        "evidence/03_canary/positive_twice.json#/warmup)"]


def test_two_gates_citing_one_shared_file_count_its_launches_once(run):
    ctx, launch = run
    shared = ctx.write_json("negative", {"run": run_record(launch())})
    assert accounting.check(ctx.run_dir, {NEG: record(NEG, [shared]),
                                      POS: record(POS, [shared])}) == []


def test_malformed_ledgers_are_named(tmp_path):
    e0 = {"seq": 0, "argv_sha256": SHA, **fields()}
    cases = [
        ([e0, dict(e0, seq=2)], "ledger: non-contiguous seq: line 2 holds seq 2, expected 1"),
        ([e0, e0], "ledger: duplicate seq 0 (line 2)"),
        ([dict(e0, timed_out="no")], "ledger: line 1 is malformed: malformed field(s) timed_out"),
        ([dict(e0, extra=1)], "ledger: line 1 is malformed: not a ledger entry"),
    ]
    for i, (entries, needle) in enumerate(cases):
        d = tmp_path / str(i)
        d.mkdir()
        (d / ledger.LEDGER_FILE).write_bytes(b"".join(canonical.dumps(e) for e in entries))
        problems = accounting.check(d, {})
        assert problems and problems[0].startswith(needle), problems
    d = tmp_path / "pretty"
    d.mkdir()
    (d / ledger.LEDGER_FILE).write_text(canonical.dumps(e0).decode().replace(",", ", "))
    assert accounting.check(d, {})[0] == "ledger: line 1 is malformed: not canonical JSON"


def test_an_error_gate_cites_its_launches_by_digest(run):
    ctx, launch = run
    m = ledger.mark()
    launch()
    ref = ctx.write_json("traceback", {"traceback": "boom",
                                       "launches": [ledger.entry_record(e)
                                                    for e in ledger.since(m)]})
    assert accounting.check(ctx.run_dir, {NEG: record(NEG, [ref], Status.ERROR)}) == []


# ----------------------------------------------------------------------------- a whole stage

def _citing_gates(run_dir: Path, records) -> dict[int, list[str]]:
    """Ledger seq -> the gates whose JSON evidence cites it."""
    from verifylib.evidence.records import EvidenceView
    out: dict[int, list[str]] = {}
    for gid, rec in records.items():
        for ref in rec.evidence:
            if ref.path.endswith(".json"):
                doc = EvidenceView(run_dir, [ref]).json(ref.name)
                for _, d in ledger.walk_citations(doc):
                    out.setdefault(d["launch"]["seq"], []).append(gid)
    return out


def test_the_canary_stage_on_a_fake_mac_cites_every_launch_once(tmp_path, tree, monkeypatch):
    from tests.helpers.canary import FAKE_MAC, fake_bins, forge_prerequisites
    from tests.helpers.canary import make_params as canary_params
    from verifylib.evidence import receipt
    from verifylib.stages import canary
    monkeypatch.setattr("verifylib.stages.context.detect", lambda: FAKE_MAC)
    run_dir = tmp_path / "run"
    forge_prerequisites(run_dir, tree, fake_bins(tmp_path))
    canary.run(canary_params(runs=3), run_dir, progress=False)
    records, _ = receipt.collect_records(run_dir)
    assert accounting.check(run_dir, records) == []
    entries = ledger.read(run_dir)
    cites = _citing_gates(run_dir, records)
    # 3 runs x 2 sides, one negative control, a warm-up and a measured positive run, then
    # the sanitizer gate's fixed 3 runs x 2 ASan builds.
    assert [cites[e["seq"]] for e in entries] == \
        [[LIFE]] * 6 + [[NEG]] + [[POS]] * 2 + [["canary.sanitizer"]] * 6


def test_a_gate_that_raised_after_launching_still_cites_its_launch(tmp_path, tree, monkeypatch):
    from tests.helpers.canary import FAKE_MAC, fake_bins, forge_prerequisites
    from tests.helpers.canary import make_params as canary_params
    from verifylib.evidence import receipt
    from verifylib.stages import canary

    def broken(*a, **k):
        raise RuntimeError("classifier broke")
    monkeypatch.setattr("verifylib.stages.context.detect", lambda: FAKE_MAC)
    monkeypatch.setattr(canary.contracts, "classify_negative", broken)
    run_dir = tmp_path / "run"
    forge_prerequisites(run_dir, tree, fake_bins(tmp_path))
    report = canary.run(canary_params(runs=1), run_dir, progress=False)
    assert report.status(NEG) is Status.ERROR
    records, _ = receipt.collect_records(run_dir)
    assert accounting.check(run_dir, records) == []
    cites = _citing_gates(run_dir, records)
    assert [cites[e["seq"]] for e in ledger.read(run_dir)] == \
        [[LIFE], [LIFE], [NEG]] + [["canary.sanitizer"]] * 6
