"""Signal numbers mean what they meant on the host that recorded them.

SIGBUS is 10 on macOS and 7 on Linux, SIGUSR1 30 and 10, SIGSYS 12 and 31 (the OS headers;
docs/runtime-contract.md §6.2). A run record names the table its signal was decoded with
(``signal_table``), so a Mac's record verifies on this Linux host and a Linux record on a
Mac; a record without the key was made on Linux. Also here: what a clean unpatched
lifecycle side on macOS is shown with (the A/B judgement, the report, pin-check's row).

The numbers below are written out from the headers, not taken from verifylib's tables or
from this Python's ``signal`` module: a test that reads the table it checks proves nothing.
"""

from __future__ import annotations

import hashlib
import platform
import signal

import pytest

from verifylib.errors import ParametersInvalid
from verifylib.evidence.gates import Status
from verifylib.evidence.canary import result as canary_results
from verifylib.evidence.canary import rules as canary_rules
from verifylib.evidence.canary import schema as canary_schemas
from verifylib.evidence.fields import SchemaError
from verifylib.runtime import contracts, runner
from verifylib.runtime.runner import RunResult, run_record

# ----------------------------------------------------------------------------- the tables

# <sys/signal.h> of XNU (macOS): 1..31, NSIG 32.
DARWIN = {1: "SIGHUP", 2: "SIGINT", 3: "SIGQUIT", 4: "SIGILL", 5: "SIGTRAP", 6: "SIGABRT",
          7: "SIGEMT", 8: "SIGFPE", 9: "SIGKILL", 10: "SIGBUS", 11: "SIGSEGV", 12: "SIGSYS",
          13: "SIGPIPE", 14: "SIGALRM", 15: "SIGTERM", 16: "SIGURG", 17: "SIGSTOP",
          18: "SIGTSTP", 19: "SIGCONT", 20: "SIGCHLD", 21: "SIGTTIN", 22: "SIGTTOU",
          23: "SIGIO", 24: "SIGXCPU", 25: "SIGXFSZ", 26: "SIGVTALRM", 27: "SIGPROF",
          28: "SIGWINCH", 29: "SIGINFO", 30: "SIGUSR1", 31: "SIGUSR2"}
# Linux's asm-generic/x86 signal.h: 1..31 (the real-time range follows).
LINUX = {1: "SIGHUP", 2: "SIGINT", 3: "SIGQUIT", 4: "SIGILL", 5: "SIGTRAP", 6: "SIGABRT",
         7: "SIGBUS", 8: "SIGFPE", 9: "SIGKILL", 10: "SIGUSR1", 11: "SIGSEGV", 12: "SIGUSR2",
         13: "SIGPIPE", 14: "SIGALRM", 15: "SIGTERM", 16: "SIGSTKFLT", 17: "SIGCHLD",
         18: "SIGCONT", 19: "SIGSTOP", 20: "SIGTSTP", 21: "SIGTTIN", 22: "SIGTTOU",
         23: "SIGURG", 24: "SIGXCPU", 25: "SIGXFSZ", 26: "SIGVTALRM", 27: "SIGPROF",
         28: "SIGWINCH", 29: "SIGIO", 30: "SIGPWR", 31: "SIGSYS"}


@pytest.mark.parametrize("system,want", [("Darwin", DARWIN), ("Linux", LINUX)])
def test_each_table_is_its_headers(system, want):
    for n, name in want.items():
        assert contracts.decode_signal(-n, system) == name, (system, n)
        assert contracts.decode_signal(128 + n, system) == name, (system, 128 + n)


@pytest.mark.parametrize("name,darwin,linux", [("SIGBUS", 10, 7), ("SIGUSR1", 30, 10),
                                               ("SIGSYS", 12, 31)])
def test_the_numbers_that_differ(name, darwin, linux):
    assert contracts.decode_signal(-darwin, "Darwin") == name
    assert contracts.decode_signal(-linux, "Linux") == name
    assert contracts.decode_signal(-darwin, "Linux") != name


@pytest.mark.skipif(platform.system() != "Linux", reason="compares with a Linux Python")
def test_the_linux_table_names_every_number_as_this_linux_python_did():
    # Records made before records named their table were decoded with signal.Signals on
    # Linux; the legacy table must give the same name for every number they could hold.
    for n in range(1, 65):
        try:
            old = signal.Signals(n).name
        except ValueError:
            old = f"SIG{n}"
        assert contracts.decode_signal(-n, contracts.LEGACY_SIGNAL_TABLE) == old, n
        assert contracts.decode_signal(128 + n, contracts.LEGACY_SIGNAL_TABLE) == old, n
    assert contracts.decode_signal(128 + 65, "Linux") is None


def test_darwin_has_no_signal_past_31():
    assert contracts.decode_signal(128 + 31, "Darwin") == "SIGUSR2"
    assert contracts.decode_signal(128 + 32, "Darwin") is None
    assert contracts.decode_signal(128 + 34, "Linux") == "SIGRTMIN"


@pytest.mark.parametrize("system", ["FreeBSD", "Windows", "linux", "", None, 3])
def test_an_unknown_system_is_refused_not_read_as_linux(system):
    with pytest.raises(contracts.UnknownSignalTable, match="no signal table for system") as e:
        contracts.decode_signal(-10, system)
    assert isinstance(e.value, ParametersInvalid)  # exit 2, naming what is supported
    assert "Darwin, Linux" in str(e.value)


def test_host_signal_table_is_this_process_os(monkeypatch):
    monkeypatch.setattr(platform, "system", lambda: "Darwin")
    assert contracts.host_signal_table() == "Darwin"
    monkeypatch.setattr(platform, "system", lambda: "FreeBSD")
    with pytest.raises(contracts.UnknownSignalTable, match="'FreeBSD'"):
        contracts.host_signal_table()


def test_the_runner_refuses_an_os_without_a_table_before_launching(monkeypatch):
    # The unit tier fails any child process: the refusal must come before Popen.
    monkeypatch.setattr(platform, "system", lambda: "FreeBSD")
    with pytest.raises(contracts.UnknownSignalTable):
        runner.run(["true"], timeout=5)


# ----------------------------------------------------------------------------- records

def _record(rc, sig, table=..., stderr=b"", argv=None) -> dict:
    res = RunResult(argv=argv or ["/b/whisper-cli", "-m", "m.bin"], returncode=rc, signal=sig,
                    timed_out=False, stdout=b"", stderr=stderr, wall_s=0.5,
                    signal_table=None if table is ... else table)
    return run_record(res)


def test_run_record_names_its_table_and_a_result_without_one_names_none():
    assert _record(-10, "SIGBUS", "Darwin")["signal_table"] == "Darwin"
    assert "signal_table" not in _record(-10, "SIGUSR1")


@pytest.mark.parametrize("table,rc,sig", [("Linux", -7, "SIGBUS"), ("Darwin", -10, "SIGBUS"),
                                          ("Linux", 135, "SIGBUS"), ("Darwin", 138, "SIGBUS"),
                                          ("Darwin", -12, "SIGSYS"), ("Linux", -31, "SIGSYS"),
                                          ("Darwin", 140, "SIGSYS"), ("Linux", 140, "SIGUSR2")])
def test_a_recorded_signal_verifies_by_its_own_table_here(table, rc, sig):
    assert contracts.termination(_record(rc, sig, table)) == (sig, [])


def test_a_darwin_minus_10_labelled_sigusr1_is_refused():
    label, problems = contracts.termination(_record(-10, "SIGUSR1", "Darwin"))
    assert label == "SIGBUS"
    assert problems == ["recorded signal 'SIGUSR1' disagrees with return code -10 (SIGBUS in "
                        "the Darwin signal table)"]


def test_a_record_without_a_table_is_read_as_linux():
    assert contracts.termination(_record(-10, "SIGUSR1")) == ("SIGUSR1", [])
    label, problems = contracts.termination(_record(-10, "SIGBUS"))
    assert label == "SIGUSR1"
    assert problems == ["recorded signal 'SIGBUS' disagrees with return code -10 (SIGUSR1 in "
                        "the Linux signal table)"]


@pytest.mark.parametrize("table", ["Windows", "darwin", None, 10, ["Darwin"]])
def test_a_record_naming_an_unknown_table_is_refused(table):
    rec = dict(_record(-10, "SIGBUS"), signal_table=table)
    assert contracts.termination(rec) == (
        "no signal table", [f"unknown signal table {table!r} (known: Darwin, Linux)"])


def test_a_normal_exit_means_the_same_in_both_tables():
    for table in ("Darwin", "Linux"):
        assert contracts.termination(_record(3, None, table)) == ("exit 3", [])
        assert contracts.termination(_record(3, "SIGBUS", table))[1] == [
            "recorded signal 'SIGBUS' disagrees with return code 3 (a normal exit)"]


# ----------------------------------------------------------------------------- classifiers

ENCODER = "/run/fp32/ggml-model-encoder.mlmodelc"
POSITIVE_ERR = (f"whisper_init_state: loading Core ML model from '{ENCODER}'\n"
                "whisper_init_state: Core ML model loaded\n"
                "system_info: n_threads = 4 | WHISPER : COREML = 1 | OPENVINO = 0 |\n").encode()
LIFECYCLE_ERR = (b"whisper_init_state: aheads_masks_init() failed for alignment heads masks\n"
                 b"error: failed to initialize whisper context\n")
COREML_ARGV = ["/b/whisper-cli", "-m", "/run/fp32/ggml-model.bin", "-f", "/a/jfk.wav", "-p", "1"]
LIFECYCLE_ARGV = ["/b/patched/whisper-cli", "-m", "models/for-tests-ggml-tiny.en.bin", "-f",
                  "samples/jfk.wav", "-nfa", "-dtw", "large.v3"]


def test_classify_positive_with_a_mac_sigbus():
    rec = _record(-10, "SIGBUS", "Darwin", POSITIVE_ERR, COREML_ARGV)
    c = contracts.classify_positive(rec, POSITIVE_ERR, b"")
    assert c.outcome == "SIGBUS"
    assert c.problems == ("killed by SIGBUS (return code -10)",)
    assert contracts.record_problems(rec, POSITIVE_ERR, b"") == []


@pytest.mark.parametrize("rc,label", [(-10, "SIGBUS"), (138, "SIGBUS"), (-30, "SIGUSR1"),
                                      (-7, "SIGEMT")])
def test_lifecycle_outcome_labels_by_the_darwin_table(rc, label):
    rec = _record(rc, label, "Darwin", LIFECYCLE_ERR, LIFECYCLE_ARGV)
    c = contracts.classify_lifecycle(rec, LIFECYCLE_ERR, b"")
    assert c.outcome == label
    assert c.problems == (f"killed by {label} (return code {rc})",)


def test_a_clean_darwin_lifecycle_run_is_clean():
    rec = _record(3, None, "Darwin", LIFECYCLE_ERR, LIFECYCLE_ARGV)
    assert contracts.classify_lifecycle(rec, LIFECYCLE_ERR, b"").outcome == \
        contracts.CLEAN_LIFECYCLE


# ----------------------------------------------------------------------------- schemas

def test_the_run_record_schema_keeps_the_table():
    from verifylib.evidence.run_record import RunRecord

    rec = _record(-10, "SIGBUS", "Darwin")
    assert RunRecord.from_json(rec).to_json() == rec
    old = _record(-10, "SIGUSR1")
    assert RunRecord.from_json(old).to_json() == old
    with pytest.raises(SchemaError, match="signal_table"):
        RunRecord.from_json(dict(rec, signal_table=10))


# ----------------------------------------------------------------------------- the unpatched side on macOS

def _lifecycle_doc(system: str, unpatched_rcs, patched_rcs=(3, 3)):
    streams: dict[str, bytes] = {}
    sides = {}
    for side, sha, rcs in (("unpatched", "2" * 64, unpatched_rcs), ("patched", "1" * 64,
                                                                    patched_rcs)):
        binary = f"/b/{side}/whisper-cli"
        runs = []
        for i, rc in enumerate(rcs):
            sig = contracts.decode_signal(rc, system)
            err = LIFECYCLE_ERR if sig is None else b"whisper_init_state: aheads_masks_init() " \
                b"failed for alignment heads masks\n"
            rec = _record(rc, sig, system, err, [binary, *LIFECYCLE_ARGV[1:]])
            rec["index"] = i
            rec["outcome"] = contracts.classify_lifecycle(rec, err, b"").outcome
            streams[rec["stderr_sha256"]] = err
            streams[hashlib.sha256(b"").hexdigest()] = b""
            runs.append(rec)
        counts: dict[str, int] = {}
        for r in runs:
            counts[r["outcome"]] = counts.get(r["outcome"], 0) + 1
        sides[side] = {"available": True, "binary": binary, "binary_sha256": sha, "runs": runs,
                       "counts": dict(sorted(counts.items()))}
    doc = {"schema": canary_schemas.LIFECYCLE_SCHEMA, "runs_per_side": len(patched_rcs),
           "timeout_s": 60.0, "trigger": ["-nfa", "-dtw", "large.v3"], "sides": sides}
    return doc, streams.get


CAVEAT = ("a clean unpatched side on macOS is not evidence the defect is gone (macOS's "
          "allocator can hide the bad free); canary.sanitizer is the witness")


def test_a_clean_unpatched_side_on_macos_is_said_to_prove_nothing():
    doc, stream = _lifecycle_doc("Darwin", (3, 3))
    j = canary_rules.judge_lifecycle(doc, stream)
    assert j.status is Status.PASS  # the gate is the patched side's, as before
    assert j.detail.endswith("unpatched 222222222222...: 2x exit 3 + both markers (recorded, "
                             "not gated); " + CAVEAT)


@pytest.mark.parametrize("system,rcs", [("Linux", (3, 3)), ("Darwin", (-10, 3)),
                                        ("Darwin", (-6, -6))])
def test_no_caveat_off_macos_or_when_the_unpatched_side_crashed(system, rcs):
    doc, stream = _lifecycle_doc(system, rcs)
    j = canary_rules.judge_lifecycle(doc, stream)
    assert j.status is Status.PASS, j.detail
    assert "not evidence" not in j.detail and j.detail.endswith("(recorded, not gated)")


def test_a_mac_crash_on_the_patched_side_fails_by_its_mac_name():
    doc, stream = _lifecycle_doc("Darwin", (3, 3), patched_rcs=(3, -10))
    j = canary_rules.judge_lifecycle(doc, stream)
    assert j.status is Status.FAIL
    assert "1/2 runs not clean (1x exit 3 + both markers, 1x SIGBUS); first, run 1: killed " \
        "by SIGBUS (return code -10)" in j.detail
    assert "disagrees" not in j.detail


def test_runs_system_names_one_os_or_none():
    mac, lin = _record(3, None, "Darwin"), _record(3, None, "Linux")
    assert canary_rules.runs_system([mac, mac]) == "Darwin"
    assert canary_rules.runs_system([lin, _record(3, None)]) == "Linux"  # no key: Linux
    assert canary_rules.runs_system([mac, lin]) is None
    assert canary_rules.runs_system([]) is None
    assert canary_rules.runs_system([dict(mac, signal_table="Plan9")]) is None


def test_the_report_shows_the_caveat_beside_the_ab_table(monkeypatch):
    from verifylib import views
    from verifylib.views import canary as canary_view
    shown: list[str] = []
    monkeypatch.setattr(canary_view, "display_html",
                        lambda name, **ctx: shown.append(views.render(name, **ctx)))
    monkeypatch.setattr(canary_view, "_lifecycle_chart", lambda lc: None)
    from verifylib.evidence.stage_report import StageReport
    for system, want in (("Darwin", True), ("Linux", False)):
        doc, _ = _lifecycle_doc(system, (3, 3))
        lc = canary_results.LifecycleSummary.from_evidence(doc)
        assert lc.sides["unpatched"].ran_on == system
        assert (lc.unpatched_caveat() == CAVEAT) is want
        shown.clear()
        canary_view.show(StageReport("03_canary", [], {}, 0.1, {},
                                     canary_results.CanaryResult(lifecycle=lc)))
        html = shown[0]
        assert ("<strong>Unpatched side clean on macOS:</strong> a clean unpatched side on "
                "macOS is not evidence the defect is gone (macOS&#39;s allocator can hide the "
                "bad free); canary.sanitizer is the witness.</p>" in html) is want
    doc, _ = _lifecycle_doc("Darwin", (-10, 3))
    assert canary_results.LifecycleSummary.from_evidence(doc).unpatched_caveat() is None


def test_pin_check_keeps_a_clean_mac_row_unknown():
    from verifylib.whispercpp import pincheck
    check = "unpatched lifecycle A/B"
    mac = pincheck.lifecycle_row(check, "20/20 exit 3 + both markers", True, None, "Darwin")
    assert (mac.deletion, mac.observed) == (
        pincheck.UNKNOWN, "20/20 exit 3 + both markers; " + CAVEAT
        + " (the AddressSanitizer row below)")
    linux = pincheck.lifecycle_row(check, "20/20 exit 3 + both markers", True, None, "Linux")
    assert (linux.deletion, linux.observed) == (pincheck.MET, "20/20 exit 3 + both markers")
    crash = pincheck.lifecycle_row(check, "19/20 exit 3 + both markers, 1/20 SIGBUS", False,
                                   "run 4: killed by SIGBUS (return code -10)", "Darwin")
    assert crash.deletion == pincheck.NOT_MET
    assert crash.observed.endswith("(first: run 4: killed by SIGBUS (return code -10))")
