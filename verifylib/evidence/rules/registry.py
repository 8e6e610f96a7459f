"""The rules registry: gate id -> pure judge of stored evidence.

Every pass rule of :data:`verifylib.evidence.gates.GATES` is listed in :data:`RULES`, explicitly,
here and nowhere else. The same function judges a gate at run time (through
:class:`verifylib.stages.context.GateRun`) and again inside ``verifylib verify``, which imports
this module and never the stage modules. A rule reads only the evidence view it is given
and what this version of verifylib ships (the packaged policies, the pin manifest, the
runtime contract); it never trusts a value the evidence states about itself when the
validator can know it.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any, Callable, Mapping

from verifylib.canonical import is_sha256
from verifylib.canonical import sha256_bytes as canonical_sha
from verifylib.evidence.gates import Judgement, Status
from verifylib.evidence.results import ATTRIBUTION
from verifylib.models.compute_plan import judge_plan
from verifylib.numerics.drift import check_document
from verifylib.numerics.parity import POLICY_OF_VARIANT, judge_parity, stored_outputs_problems
from verifylib.numerics.scoring import judge_ggml_vs_source, judge_hybrid, load_policy
from verifylib.runtime import contracts
from verifylib.runtime import sanitizer as _sanitizer
from verifylib.whispercpp import build as _build
from verifylib.whispercpp import source as _source

WER_POLICY_ID = "wer-v1"


def _pin_problems(doc: Any) -> list[str]:
    """The pin fields of a build sidecar against the pin manifest this version ships."""
    if not isinstance(doc, Mapping):
        return ["evidence is not a mapping"]
    pins = _source.load_pins()
    pin = pins.get(doc.get("pin"))
    if pin is None:
        return [f"pin {doc.get('pin')!r} is not in the shipped manifest"]
    shipped = _source.pin_fields(pin)
    return [f"{k} {doc.get(k)!r} is not the manifest's {v!r} for pin {pin.name}"
            for k, v in shipped.items() if k in doc and doc.get(k) != v]


def _stream_problems(ev, record: Any, names: Mapping[str, str]) -> list[str]:
    """Each stored stream must be its run record's (SHA-256 of the stored bytes)."""
    if not isinstance(record, Mapping):
        return ["run record missing"]
    out = []
    for key, name in names.items():
        if canonical_sha(ev.bytes(name)) != record.get(key):
            out.append(f"stored {name} is not the run's stream ({key} differs)")
    return out


def _policy_file_problems(ev, name: str, policy_id: str) -> list[str]:
    """A cited policy record must be the packaged resource (id, digest, rules)."""
    packaged = load_policy(policy_id)
    stored = ev.json(name)
    want = {"id": packaged.id, "sha256": packaged.sha256, "rules": packaged.rules}
    if stored != want:
        return [f"the stored {policy_id} record is not the packaged resource"]
    return []

def _rule_source(ev) -> Judgement:
    doc = ev.json("source")
    problems = _pin_problems(doc)
    if problems:
        return Judgement(Status.FAIL, "; ".join(problems))
    return _source.judge_source_identity(doc)


def _rule_patch(ev) -> Judgement:
    doc = ev.json("patch")
    problems = _pin_problems(doc)
    if isinstance(doc, Mapping) and not problems:
        pin = _source.load_pins()[doc["pin"]]
        if doc.get("patch_file") != pin.patch_path.name:
            problems.append(f"patch file {doc.get('patch_file')!r} is not the manifest's "
                            f"{pin.patch_path.name!r}")
        for k in ("pin_commit", "pin_tree", "declared_patch_sha256", "touches"):
            if k not in doc:
                problems.append(f"{k} missing")
    if problems:
        return Judgement(Status.FAIL, "; ".join(problems))
    return _source.judge_patch_exact(doc)


def _rule_ggml(ev) -> Judgement:
    doc = ev.json("build")
    if not ev.has("probe_stderr"):
        return _build.judge_ggml_build(doc, "")
    bound = _stream_problems(ev, doc.get("probe") if isinstance(doc, Mapping) else None,
                             {"stderr_sha256": "probe_stderr", "stdout_sha256": "probe_stdout"})
    if bound:
        return Judgement(Status.FAIL, "; ".join(bound))
    stream = ev.text("probe_stderr") + "\n" + ev.text("probe_stdout")
    return _build.judge_ggml_build(doc, stream)


def judge_coreml_build(ev: Any, bench_stderr: bytes, bench_stdout: bytes) -> Judgement:
    """The rule of ``build.coreml`` on stored evidence.

    PASS iff the build exists with a well-formed SHA-256 equal to its recorded one, is the
    ``coreml`` variant with ``WHISPER_COREML=1``, ``WHISPER_COREML_ALLOW_FALLBACK=OFF`` and
    ``BUILD_SHARED_LIBS=OFF``, links no ``libwhisper``/``libggml``, sits in its own folder
    (named by its key, not the GGML build's), the patched tree was still exact after the
    build, and the ``whisper-bench`` built with the same options and source printed a
    ``system_info`` line with ``COREML = 1`` without crashing or timing out.
    """
    import hashlib
    if not isinstance(ev, Mapping):
        return Judgement.failed("evidence is not a mapping")
    if ev.get("built") is not True:
        return Judgement.failed(f"no build: {ev.get('error', 'unknown reason')}")
    problems = []
    if ev.get("variant") != "coreml":
        problems.append(f"variant is {ev.get('variant')!r}, not 'coreml'")
    sha = ev.get("sha256")
    if not is_sha256(sha) or ev.get("recorded_sha256") != sha:
        problems.append(f"binary sha256 {sha!r} malformed or not the recorded one")
    if not is_sha256(ev.get("patch_sha256")):
        problems.append("patch sha256 malformed")
    opts = ev.get("options") if isinstance(ev.get("options"), Mapping) else {}
    for k, want in (("WHISPER_COREML", "1"), ("WHISPER_COREML_ALLOW_FALLBACK", "OFF"),
                    ("BUILD_SHARED_LIBS", "OFF")):
        if opts.get(k) != want:
            problems.append(f"CMake option {k} is {opts.get(k)!r}, not {want}")
    libs = ev.get("needed_libs")
    if ev.get("static") is not True or not isinstance(libs, list) or any(
            Path(str(x)).name.startswith(("libwhisper", "libggml")) for x in libs):
        problems.append(f"not static: needs {libs!r}")
    binary = ev.get("binary")
    if not isinstance(binary, str) or Path(binary).parent.name != ev.get("key") or \
            ev.get("key") == ev.get("ggml_key"):
        problems.append("the Core ML binary does not sit in a folder of its own")
    if ev.get("patch_after_problems"):
        problems.append(f"patched tree not exact after the build: {ev['patch_after_problems']}")
    bench = ev.get("bench") if isinstance(ev.get("bench"), Mapping) else {}
    if bench.get("options") != opts or bench.get("cli_key") != ev.get("key"):
        problems.append("whisper-bench was not configured like the Core ML whisper-cli")
    probe = bench.get("probe") if isinstance(bench.get("probe"), Mapping) else {}
    argv = probe.get("argv") if isinstance(probe.get("argv"), list) else []
    if not argv or argv[0] != bench.get("binary"):
        problems.append("the bench probe did not run the recorded whisper-bench")
    if hashlib.sha256(bench_stderr).hexdigest() != probe.get("stderr_sha256") or \
            hashlib.sha256(bench_stdout).hexdigest() != probe.get("stdout_sha256"):
        problems.append("bench streams are not the probe's (SHA-256 differs)")
    label, rec_problems = contracts.termination(dict(probe)) if probe else ("none", ["no probe"])
    problems += rec_problems
    if label == "timeout" or label.startswith("SIG"):
        problems.append(f"whisper-bench probe ended by {label}")
    text = bench_stderr.decode("utf-8", "replace")
    coreml = contracts.system_info_coreml(text)
    if coreml != 1:
        problems.append(f"whisper-bench's system_info does not show {contracts.COREML_ON!r} "
                        f"(found {contracts.COREML_FLAG}{coreml})")
    if problems:
        return Judgement.failed("; ".join(problems))
    return Judgement.passed(f"static Core ML whisper-cli sha256 {sha} (WHISPER_COREML=1, fallback OFF) "
                            f"in its own folder; {contracts.COREML_ON!r} read from whisper-bench built "
                            f"with the same options ({label})")


def _rule_coreml(ev) -> Judgement:
    def stream(name):
        return ev.bytes(name) if ev.has(name) else b""
    return judge_coreml_build(ev.json("coreml_build"), stream("bench_stderr"),
                              stream("bench_stdout"))


SIDES = ("unpatched", "patched")
LIFECYCLE_SCHEMA = "verifylib-lifecycle-ab/1"


NEGATIVE_SCHEMA = "verifylib-coreml-negative/1"


POSITIVE_SCHEMA = "verifylib-coreml-positive/1"


def _stream_name(sha: str) -> str:
    return f"stream-{sha}"


def _summary(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{n}x {label}" for label, n in sorted(counts.items(), key=lambda kv: -kv[1]))


def _run_streams(side: str, i: int, rec: Any, stream: Callable[[str], bytes | None],
                 problems: list[str]) -> tuple[bytes, bytes] | None:
    """The stored stderr and stdout of one recorded run, or None with the problem noted."""
    if not isinstance(rec, Mapping):
        problems.append(f"{side} run {i}: malformed record")
        return None
    err = stream(rec.get("stderr_sha256")) if is_sha256(rec.get("stderr_sha256")) else None
    out = stream(rec.get("stdout_sha256")) if is_sha256(rec.get("stdout_sha256")) else None
    if err is None or out is None:
        problems.append(f"{side} run {i}: stream not stored")
        return None
    return err, out


def judge_lifecycle(doc, stream: Callable[[str], bytes | None]) -> Judgement:
    """The rule of ``canary.lifecycle_ab`` on stored evidence.

    Every run of both sides is re-classified from its recorded exit status and its stored
    stream (looked up by digest); a recorded outcome or count the streams do not support,
    a stream that is missing or not the run's own, or a signal that disagrees with the
    return code makes the evidence unusable (FAIL). Then: PASS iff the patched side has
    exactly ``runs_per_side`` runs, every one exit 3 with both markers and no signal. The
    unpatched side's outcomes are reported, not gated.

    Parameters
    ----------
    doc : mapping
        The ``lifecycle`` document.
    stream : callable
        Digest to stored bytes, or None when no such stream is stored.
    """
    if not isinstance(doc, Mapping) or doc.get("schema") != LIFECYCLE_SCHEMA:
        return Judgement.failed(f"not a {LIFECYCLE_SCHEMA} document")
    n = doc.get("runs_per_side")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        return Judgement.failed(f"malformed runs_per_side {n!r}")
    trig = doc.get("trigger")
    if not (isinstance(trig, list) and len(trig) == 3 and isinstance(trig[2], str)
            and trig == contracts.lifecycle_trigger_args(trig[2])):
        return Judgement.failed(f"malformed trigger {trig!r}")
    sides = doc.get("sides")
    if not isinstance(sides, Mapping) or set(sides) != set(SIDES):
        return Judgement.failed("evidence must record both sides (unpatched and patched)")
    problems: list[str] = []
    results: dict[str, list] = {}
    for side in SIDES:
        s = sides[side]
        if not isinstance(s, Mapping) or not isinstance(s.get("available"), bool):
            problems.append(f"{side}: malformed side record")
            continue
        if not s["available"]:
            if side == "patched":
                problems.append("patched: no runs recorded")
            continue
        if not is_sha256(s.get("binary_sha256")):
            problems.append(f"{side}: malformed binary digest {s.get('binary_sha256')!r}")
        runs = s.get("runs")
        if not isinstance(runs, list):
            problems.append(f"{side}: runs missing")
            continue
        classified = []
        for i, rec in enumerate(runs):
            streams = _run_streams(side, i, rec, stream, problems)
            if streams is None:
                continue
            err, out = streams
            c = contracts.classify_lifecycle(dict(rec), err, out)
            bad = contracts.record_problems(dict(rec), err, out)
            argv = rec.get("argv")
            if isinstance(argv, list) and argv and argv[0] != s.get("binary"):
                bad.append(f"argv[0] {argv[0]!r} is not the {side} binary")
            if bad:
                problems.append(f"{side} run {i}: evidence unusable: {'; '.join(bad)}")
            if rec.get("outcome") != c.outcome:
                problems.append(f"{side} run {i}: recorded outcome {rec.get('outcome')!r}, but the "
                                f"stored exit status and stream give {c.outcome!r}")
            classified.append((i, c))
        counts = dict(sorted(Counter(c.outcome for _, c in classified).items()))
        if s.get("counts") != counts:
            problems.append(f"{side}: recorded counts {s.get('counts')!r} differ from the runs' "
                            f"{counts!r}")
        results[side] = classified
    if (sides.get("unpatched") or {}).get("binary_sha256") is not None and \
            sides["unpatched"].get("binary_sha256") == (sides.get("patched") or {}).get("binary_sha256"):
        problems.append("the unpatched and the patched binary are the same file")
    if problems:
        return Judgement.failed("evidence does not support the outcomes: " + " | ".join(problems[:5]))
    patched = results.get("patched", [])
    if len(patched) != n:
        return Judgement.failed(f"patched: {len(patched)} runs recorded, expected {n}")
    bad_runs = [(i, c) for i, c in patched if not c.ok]
    p_counts = _summary(Counter(c.outcome for _, c in patched))
    if "unpatched" in results:
        u = results["unpatched"]
        a_side = (f"unpatched {sides['unpatched']['binary_sha256'][:12]}...: "
                  f"{_summary(Counter(c.outcome for _, c in u))} (recorded, not gated)")
    else:
        a_side = f"unpatched build not available ({sides['unpatched'].get('reason', '')})"
    if bad_runs:
        i, c = bad_runs[0]
        return Judgement.failed(f"patched {sides['patched']['binary_sha256'][:12]}...: {len(bad_runs)}/{n} "
                                f"runs not clean ({p_counts}); first, run {i}: {c.detail}. {a_side}")
    return Judgement.passed(f"patched {sides['patched']['binary_sha256'][:12]}...: {n}/{n} runs exit 3 with "
                            f"both markers, no signal; {a_side}")


def _rule_lifecycle(ev) -> Judgement:
    def stream(sha):
        name = _stream_name(sha)
        return ev.bytes(name) if ev.has(name) else None
    return judge_lifecycle(ev.json("lifecycle"), stream)


SANITIZER_SCHEMA = "verifylib-sanitizer/1"


def asan_stream_name(sha: str) -> str:
    """Evidence name of a stored ``canary.sanitizer`` stream (apart from the A/B's, whose
    empty stdout would otherwise share a file name with it)."""
    return f"asan-stream-{sha}"


def _asan_build_problems(side: str, s: Mapping, pin: Any) -> list[str]:
    """A side's recorded build must be its ASan variant of the pin, static, instrumented."""
    variant, _ = _sanitizer.SIDES[side]
    b = s.get("build")
    if not isinstance(b, Mapping):
        return [f"{side}: build record missing"]
    out = []
    if b.get("variant") != variant:
        out.append(f"{side}: built variant {b.get('variant')!r}, not {variant!r}")
    opts = b.get("options") if isinstance(b.get("options"), Mapping) else {}
    wrong = sorted(k for k, v in _build.forced_options(variant).items() if opts.get(k) != v)
    if wrong:
        out.append(f"{side}: CMake options {wrong} are not the {variant} build's")
    libs = b.get("needed_libs")
    if not isinstance(libs, list) or b.get("static") is not True or any(
            Path(str(x)).name.startswith(("libwhisper", "libggml")) for x in libs):
        out.append(f"{side}: not static: needs {libs!r}")
    elif not _sanitizer.links_asan_runtime(libs):
        out.append(f"{side}: links no AddressSanitizer runtime ({libs!r})")
    binary = s.get("binary")
    if not isinstance(binary, str) or not is_sha256(b.get("key")) or \
            Path(binary).parent.name != b.get("key"):
        out.append(f"{side}: the binary does not sit in the folder of its build key")
    if pin is not None:
        want_patch = None if side == "unpatched" else pin.patch_sha256
        if b.get("tree_id") != pin.tree or b.get("patch_sha256") != want_patch:
            out.append(f"{side}: built from tree {b.get('tree_id')!r} with patch "
                       f"{b.get('patch_sha256')!r}, not pin {pin.name}'s tree with "
                       f"{'no patch' if want_patch is None else 'its patch'}")
    return out


def judge_sanitizer(doc, stream: Callable[[str], bytes | None],
                    identities: Mapping[str, Any] | None = None) -> Judgement:
    """The rule of ``canary.sanitizer`` on stored evidence (informational gate).

    The evidence must hold, for each side, the pin's AddressSanitizer build (variant,
    forced sanitizer flags, static, the ASan runtime linked, bound to the gate's identity
    of that side) and exactly :data:`verifylib.runtime.sanitizer.RUNS_PER_SIDE` runs of it with
    the lifecycle trigger under :data:`verifylib.runtime.sanitizer.ASAN_OPTIONS`; every run's
    streams must be its own (digests), and its recorded outcome and sanitizer report must
    be what the stored stderr gives (:func:`verifylib.runtime.contracts.classify_lifecycle`,
    :func:`verifylib.runtime.sanitizer.parse_report`). Then: PASS iff every unpatched run printed
    a sanitizer report (any kind; the kinds are named) and every patched run exited 3 with
    both lifecycle markers, no signal, and no sanitizer report on either stream.

    Parameters
    ----------
    doc : mapping
        The ``sanitizer`` document.
    stream : callable
        Digest to stored bytes, or None when no such stream is stored.
    identities : mapping, optional
        The gate's identities; each side's binary digest must be bound there.
    """
    if not isinstance(doc, Mapping) or doc.get("schema") != SANITIZER_SCHEMA:
        return Judgement.failed(f"not a {SANITIZER_SCHEMA} document")
    n = _sanitizer.RUNS_PER_SIDE
    problems: list[str] = []
    if doc.get("runs_per_side") != n:
        problems.append(f"runs_per_side {doc.get('runs_per_side')!r}, this version runs {n}")
    trig = doc.get("trigger")
    if not (isinstance(trig, list) and len(trig) == 3 and isinstance(trig[2], str)
            and trig == contracts.lifecycle_trigger_args(trig[2])):
        problems.append(f"malformed trigger {trig!r}")
    if doc.get("asan_options") != _sanitizer.ASAN_OPTIONS:
        problems.append(f"ASAN_OPTIONS {doc.get('asan_options')!r} are not this version's "
                        f"{_sanitizer.ASAN_OPTIONS!r}")
    pin = _source.load_pins().get(doc.get("pin")) if isinstance(doc.get("pin"), str) else None
    if pin is None:
        problems.append(f"pin {doc.get('pin')!r} is not in the shipped manifest")
    sides = doc.get("sides")
    if not isinstance(sides, Mapping) or set(sides) != set(SIDES):
        return Judgement.failed("evidence must record both sides (unpatched and patched)")
    runs_of: dict[str, list] = {}
    for side in SIDES:
        s = sides[side]
        if not isinstance(s, Mapping) or not isinstance(s.get("available"), bool):
            problems.append(f"{side}: malformed side record")
            continue
        if not s["available"]:
            problems.append(f"{side}: AddressSanitizer build not available ({s.get('reason', '')})")
            continue
        sha = s.get("binary_sha256")
        if not is_sha256(sha):
            problems.append(f"{side}: malformed binary digest {sha!r}")
        elif identities is not None and identities.get(_sanitizer.SIDES[side][1]) != sha:
            problems.append(f"{side}: binary {sha[:12]}... is not bound to the gate's "
                            f"{_sanitizer.SIDES[side][1]}")
        problems += _asan_build_problems(side, s, pin)
        runs = s.get("runs")
        if not isinstance(runs, list):
            problems.append(f"{side}: runs missing")
            continue
        if len(runs) != n:
            problems.append(f"{side}: {len(runs)} runs recorded, expected {n}")
        seen = []
        for i, rec in enumerate(runs):
            streams = _run_streams(side, i, rec, stream, problems)
            if streams is None:
                continue
            err, out = streams
            bad = contracts.record_problems(dict(rec), err, out)
            argv = rec.get("argv")
            if not isinstance(argv, list) or not argv or argv[0] != s.get("binary"):
                bad.append(f"argv[0] is not the {side} binary")
            elif not contracts.has_lifecycle_trigger(argv):
                bad.append("argv lacks the lifecycle trigger")
            if bad:
                problems.append(f"{side} run {i}: evidence unusable: {'; '.join(bad)}")
            c = contracts.classify_lifecycle(dict(rec), err, out)
            report = _sanitizer.parse_report(err)
            if rec.get("outcome") != c.outcome:
                problems.append(f"{side} run {i}: recorded outcome {rec.get('outcome')!r}, but "
                                f"the stored exit status and stream give {c.outcome!r}")
            if rec.get("report") != (None if report is None else report.to_evidence()):
                problems.append(f"{side} run {i}: the recorded sanitizer report is not the "
                                f"one the stored stderr holds")
            seen.append((i, c, report, _sanitizer.parse_report(out)))
        runs_of[side] = seen
    if is_sha256((sides.get("unpatched") or {}).get("binary_sha256")) and \
            sides["unpatched"].get("binary_sha256") == (sides.get("patched") or {}).get("binary_sha256"):
        problems.append("the unpatched and the patched binary are the same file")
    if problems:
        return Judgement.failed("evidence does not support the outcomes: " + " | ".join(problems[:5]))
    u_sha = sides["unpatched"]["binary_sha256"][:12]
    p_sha = sides["patched"]["binary_sha256"][:12]
    failures = []
    u_quiet = [(i, c) for i, c, rep, _ in runs_of["unpatched"] if rep is None]
    kinds = _summary(Counter(rep.describe() for _, _, rep, _ in runs_of["unpatched"] if rep))
    ends = _summary(Counter(c.outcome for _, c, _, _ in runs_of["unpatched"]))
    if u_quiet:
        i, c = u_quiet[0]
        failures.append(f"unpatched ASan whisper-cli {u_sha}...: {len(u_quiet)}/{n} runs printed "
                        f"no sanitizer report (first, run {i}: {c.outcome})")
    p_loud = [(i, rep or rep_out) for i, _, rep, rep_out in runs_of["patched"] if rep or rep_out]
    p_unclean = [(i, c) for i, c, _, _ in runs_of["patched"] if not c.ok]
    if p_loud:
        i, rep = p_loud[0]
        failures.append(f"patched ASan whisper-cli {p_sha}...: {len(p_loud)}/{n} runs printed a "
                        f"sanitizer report (first, run {i}: {rep.describe()})")
    if p_unclean:
        i, c = p_unclean[0]
        failures.append(f"patched ASan whisper-cli {p_sha}...: {len(p_unclean)}/{n} runs not "
                        f"exit 3 with both markers (first, run {i}: {c.detail})")
    u_text = (f"unpatched: {kinds} (ends: {ends})" if kinds else f"unpatched: ends {ends}")
    if failures:
        return Judgement.failed("; ".join(failures) + f". Seen: {u_text}")
    return Judgement.passed(f"unpatched ASan whisper-cli {u_sha}...: {n}/{n} runs with a "
                            f"sanitizer report: {kinds} (ends: {ends}); patched ASan whisper-cli "
                            f"{p_sha}...: {n}/{n} runs exit 3 with both markers, no sanitizer "
                            f"report")


def _rule_sanitizer(ev) -> Judgement:
    def stream(sha):
        name = asan_stream_name(sha)
        return ev.bytes(name) if ev.has(name) else None
    return judge_sanitizer(ev.json("sanitizer"), stream, ev.identities)


def judge_negative(doc, stderr: bytes, stdout: bytes) -> Judgement:
    """The rule of ``canary.coreml_negative``: one run only, in a scratch folder holding
    only the ``ggml-*.bin``, classified by :func:`verifylib.runtime.contracts.classify_negative`."""
    if not isinstance(doc, Mapping) or doc.get("schema") != NEGATIVE_SCHEMA:
        return Judgement.failed(f"not a {NEGATIVE_SCHEMA} document")
    problems = []
    if doc.get("attempts") != 1 or "warmup" in doc:
        problems.append(f"the negative control must be the first and only run "
                        f"(attempts {doc.get('attempts')!r})")
    if not is_sha256(doc.get("binary_sha256")):
        problems.append("malformed binary digest")
    run = doc.get("run")
    if not isinstance(run, Mapping):
        return Judgement.failed("; ".join(problems + ["run record missing"]))
    argv = run.get("argv") if isinstance(run.get("argv"), list) else []
    model_arg = doc.get("model_arg")
    if not argv or argv[0] != doc.get("binary"):
        problems.append("the run did not launch the recorded binary")
    if contracts.model_arg_of(argv) != model_arg or not isinstance(model_arg, str):
        problems.append("the run's -m is not the scratch model")
    else:
        base = Path(model_arg).name
        derived = contracts.coreml_encoder_path(model_arg)
        listing = doc.get("scratch_listing")
        if listing != [base] or not (base.startswith("ggml-") and base.endswith(".bin")):
            problems.append(f"the scratch folder held {listing!r}, not only the ggml-*.bin")
        if doc.get("derived_mlmodelc") != derived:
            problems.append("recorded derived path is not coreml_encoder_path(-m)")
    c = contracts.classify_negative(dict(run), stderr, stdout)
    if doc.get("outcome") != c.outcome:
        problems.append(f"recorded outcome {doc.get('outcome')!r}, but the stored exit status "
                        f"and stream give {c.outcome!r}")
    problems += list(c.problems)
    if problems:
        return Judgement.failed("; ".join(problems))
    return Judgement.passed(f"first and only run of whisper-cli {doc['binary_sha256'][:12]}... with only "
                            f"{Path(model_arg).name} in a scratch folder: exit 3, load-failure and "
                            f"init-failure lines, no signal")


def _rule_negative(ev) -> Judgement:
    return judge_negative(ev.json("negative"), ev.bytes("negative_stderr"),
                          ev.bytes("negative_stdout"))


def judge_positive(doc, stderr: bytes, stdout: bytes,
                   warmup: tuple[bytes, bytes] | None = None) -> Judgement:
    """The rule of ``canary.coreml_positive``.

    The measured run is classified by :func:`verifylib.runtime.contracts.classify_positive`, with
    the ``.mlmodelc`` at the derived path and unchanged across both runs; the warm-up
    (its stderr and stdout in ``warmup``) must end cleanly by
    :func:`verifylib.runtime.contracts.warmup_problems` -- a crash, timeout, non-zero exit or
    fallback line in it is a FAIL, never something a second run makes good."""
    if not isinstance(doc, Mapping) or doc.get("schema") != POSITIVE_SCHEMA:
        return Judgement.failed(f"not a {POSITIVE_SCHEMA} document")
    problems = []
    if not is_sha256(doc.get("binary_sha256")):
        problems.append("malformed binary digest")
    run, warm = doc.get("measured"), doc.get("warmup")
    if not isinstance(run, Mapping) or not isinstance(warm, Mapping):
        return Judgement.failed("; ".join(problems + ["measured or warm-up record missing"]))
    argv = run.get("argv") if isinstance(run.get("argv"), list) else []
    model_arg = doc.get("model_arg")
    if not argv or argv[0] != doc.get("binary"):
        problems.append("the measured run did not launch the recorded binary")
    if warm.get("argv") != argv:
        problems.append("the warm-up ran another command line than the measured run")
    if not isinstance(model_arg, str) or contracts.model_arg_of(argv) != model_arg:
        problems.append("the measured run's -m is not the recorded model argument")
    else:
        ml = doc.get("mlmodelc") or {}
        if ml.get("path") != contracts.coreml_encoder_path(model_arg):
            problems.append("recorded .mlmodelc path is not coreml_encoder_path(-m)")
        b, a = ml.get("tree_digest_before"), ml.get("tree_digest_after")
        if not is_sha256(b):
            problems.append(f"no .mlmodelc at {ml.get('path')!r} before the runs")
        elif a != b:
            problems.append("the .mlmodelc changed between the warm-up and the measured run")
    c = contracts.classify_positive(dict(run), stderr, stdout)
    if doc.get("outcome") != c.outcome:
        problems.append(f"recorded outcome {doc.get('outcome')!r}, but the stored exit status "
                        f"and stream give {c.outcome!r}")
    problems += list(c.problems)
    if warmup is not None:
        problems += [f"warm-up: {p}" for p in contracts.warmup_problems(dict(warm), *warmup)]
    else:
        problems.append("warm-up streams not stored: the warm-up cannot be judged")
    if problems:
        return Judgement.failed("; ".join(problems))
    enc = run.get("encode_time_ms")
    return Judgement.passed(f"measured run of whisper-cli {doc['binary_sha256'][:12]}...: exit 0, "
                            f"{contracts.COREML_ON!r}, one {contracts.COREML_LOAD_MARKER!r} line for "
                            f"{Path(model_arg).name}, no load failure (wall {run.get('wall_s')} s, encode "
                            f"{enc} ms; warm-up wall {warm.get('wall_s')} s)")


def _rule_positive(ev) -> Judgement:
    return judge_positive(ev.json("positive"), ev.bytes("measured_stderr"),
                          ev.bytes("measured_stdout"),
                          (ev.bytes("warmup_stderr"), ev.bytes("warmup_stdout")))


def _rule_ggml_model(ev) -> Judgement:
    g = ev.json("ggml")
    model = ev.json("model")
    stderr = ev.text("load_stderr")
    probe = g["probe"]
    bound = _stream_problems(ev, probe, {"stderr_sha256": "load_stderr",
                                         "stdout_sha256": "load_stdout"})
    if not isinstance(model, Mapping) or not is_sha256(model.get("source_digest")):
        bound.append("the model intake record has no source digest")
    if bound:
        return Judgement(Status.FAIL, "; ".join(bound))
    if not is_sha256(g.get("sha256")) or not is_sha256(g.get("binary_sha256")):
        return Judgement(Status.FAIL, "malformed digest in the export evidence")
    if probe["timed_out"] or probe["signal"] or probe["returncode"] != 0:
        how = "timed out" if probe["timed_out"] else (probe["signal"] or f"exit {probe['returncode']}")
        return Judgement(Status.FAIL, f"whisper-cli did not load the model cleanly ({how})")
    if g["model_arg"] not in probe["argv"]:
        return Judgement(Status.FAIL, "the probe did not load the written model file")
    if contracts.MODEL_LOAD_FAILURE in stderr:
        return Judgement(Status.FAIL, "the loader logged a model load failure")
    loaded = contracts.parse_loaded_hparams(stderr)
    wrote = {k: g["hparams"][k] for k in contracts.MODEL_LOAD_HPARAMS}
    if loaded != wrote:
        diff = {k: (wrote.get(k), loaded.get(k)) for k in contracts.MODEL_LOAD_HPARAMS
                if wrote.get(k) != loaded.get(k)}
        return Judgement(Status.FAIL, f"loader's hyper-parameters differ from the written ones "
                                      f"(written, loaded): {diff}")
    return Judgement(Status.PASS, f"ggml-model.bin sha256 {g['sha256']} ({g['bytes']} bytes, "
                                  f"{g['n_tensors']} tensors) loaded by whisper-cli "
                                  f"{g['binary_sha256'][:12]}…; the loader printed the written "
                                  f"hyper-parameters {wrote}")


def _rule_contract(ev) -> Judgement:
    from verifylib.models.coreml_export import PRECISIONS, EncoderContract, contract_problems
    d = ev.json("contract")
    try:
        c = EncoderContract(**d["config"])
    except (TypeError, ValueError) as exc:
        return Judgement(Status.FAIL, f"malformed model values in the evidence: {exc}")
    if c.as_dict() != d["contract"]:
        return Judgement(Status.FAIL, "the stored contract is not the one the stored model "
                                      "values give")
    variants = {v["precision"]: v for v in d["variants"]}
    if len(variants) != len(d["variants"]) or not set(variants) <= set(PRECISIONS):
        return Judgement(Status.FAIL, f"malformed variant list {sorted(variants)}")
    if "fp32" not in variants:
        return Judgement(Status.FAIL, "no fp32 variant was exported")
    # Each converted variant cites its conversion log, and no log stands for a variant
    # the contract record does not list.
    logs = {n[len("convert_log_"):] for n in ev.names() if n.startswith("convert_log_")}
    if logs != set(variants):
        return Judgement(Status.FAIL, f"conversion logs {sorted(logs)} do not match the "
                                      f"exported variants {sorted(variants)}")
    for v in sorted(logs):
        if not ev.bytes(f"convert_log_{v}").strip():
            return Judgement(Status.FAIL, f"{v}: the conversion log is empty")
    build = d.get("build") or {}
    for key in ("coremltools", "torch", "torch_max_tested_by_coremltools",
                "torch_version_warning"):
        if key not in build:
            return Judgement(Status.FAIL, f"build fact {key!r} was not recorded")
    if build.get("torch_above_tested") and not build["torch_version_warning"]:
        return Judgement(Status.FAIL, "torch is above coremltools' tested version but the "
                                      "warning was not recorded")
    problems, shown = [], []
    for prec in PRECISIONS:
        v = variants.get(prec)
        if v is None:
            continue
        again = contract_problems(v["description"], c, prec)
        if again != v["problems"]:
            return Judgement(Status.FAIL, f"{prec}: stored contract problems disagree with the "
                                          f"stored description")
        if again:
            problems += [f"{prec}: {p}" for p in again]
            if v["placed"]:
                return Judgement(Status.FAIL, f"{prec}: placed although it breaks the contract")
            continue
        if not v["placed"] or not is_sha256(v.get("tree_digest")):
            problems.append(f"{prec}: not placed (another variant broke the contract)"
                            if not v["placed"] else f"{prec}: malformed tree digest")
            continue
        desc = v["description"]
        shown.append(f"{v['path']} (tree {v['tree_digest'][:12]}…): "
                     f"{desc['inputs'][0]['name']} {desc['inputs'][0]['dtype']} "
                     f"{desc['inputs'][0]['shape']} -> {desc['outputs'][0]['name']} "
                     f"{desc['outputs'][0]['dtype']} {desc['outputs'][0]['shape']}, computes "
                     f"{'/'.join(desc['compute_dtypes'])}")
    if problems:
        return Judgement(Status.FAIL, "refused before placement, nothing placed: "
                                      + "; ".join(problems))
    warn = (f"torch {build['torch']} above coremltools' tested "
            f"{build['torch_max_tested_by_coremltools']} (warning recorded)"
            if build.get("torch_above_tested") else f"torch {build['torch']}")
    return Judgement(Status.PASS, f"contract from the config {c.values()}: " + "; ".join(shown)
                     + f"; coremltools {build['coremltools']}, {warn}")


def _rule_compile(ev) -> Judgement:
    d = ev.json("compile")
    variants = {v["precision"]: v for v in d["variants"]}
    if "fp32" not in variants:
        return Judgement(Status.FAIL, "the fp32 package was not compiled")
    problems, shown = [], []
    for prec, v in sorted(variants.items()):
        r = v["coremlc"]
        if r["timed_out"] or r["signal"] or r["returncode"] != 0:
            problems.append(f"{prec}: coremlc did not succeed ({r})")
            continue
        if ev.has(f"coremlc_stderr_{prec}") and "stderr_sha256" in r:
            problems += [f"{prec}: {p}" for p in _stream_problems(
                ev, r, {"stderr_sha256": f"coremlc_stderr_{prec}"})]
        elif ev.has(f"coremlc_stderr_{prec}"):
            ev.bytes(f"coremlc_stderr_{prec}")
            problems.append(f"{prec}: coremlc's stored stderr is not bound to its run record")
        # The validator derives the path itself: the stored derived_path is only shown.
        derived = contracts.coreml_encoder_path(v["model_arg"])
        if derived != v["placed_path"]:
            problems.append(f"{prec}: coreml_encoder_path({v['model_arg']!r}) is "
                            f"{derived!r}, but the .mlmodelc was placed at "
                            f"{v['placed_path']!r}")
            continue
        if not is_sha256(v.get("tree_digest")):
            problems.append(f"{prec}: malformed tree digest")
            continue
        shown.append(f"{prec}: {v['placed_path']} (tree {v['tree_digest'][:12]}…) is what "
                     f"-m {v['model_arg']} derives")
    if problems:
        return Judgement(Status.FAIL, "; ".join(problems))
    return Judgement(Status.PASS, "; ".join(shown))


def _rule_plan(ev) -> Judgement:
    j = judge_plan(ev.json("plan_fp32"))
    if j.ok and ev.has("plan_fp16"):
        j16 = judge_plan(ev.json("plan_fp16"))
        if not j16.ok:
            return Judgement.failed(f"fp16 plan: {j16.detail}")
        return Judgement.passed(f"{j.detail}; fp16: {j16.detail}")
    return j


def ggml_run_problems(doc: dict, stderr_of) -> list[str]:
    """Problems with the GGML runs behind ``wer.ggml_vs_source`` (re-derived from streams).

    Every run must come from a build without Core ML (``COREML = 0`` on its own stderr),
    exit 0 without a signal, and have used a model path with no ``.mlmodelc`` beside it.
    """
    problems = []
    if doc.get("mlmodelc_beside") is not False:
        problems.append("the GGML runs' model had a .mlmodelc beside it (or it was not checked)")
    for c in doc["clips"]:
        run = c["ggml_run"]
        stderr = stderr_of(c["id"])
        if canonical_sha(stderr) != run["stderr_sha256"]:
            problems.append(f"{c['id']}: stored GGML stderr is not the run's stream")
            continue
        if run["returncode"] != 0 or run["signal"]:
            problems.append(f"{c['id']}: GGML run ended {run['signal'] or 'exit ' + str(run['returncode'])}")
        coreml = contracts.system_info_coreml(stderr.decode("utf-8", "replace"))
        if coreml != 0:
            problems.append(f"{c['id']}: GGML run's system_info does not show "
                            f"{contracts.COREML_OFF} (found {coreml})")
    return problems


def _wer_policy_problems(doc: Any) -> list[str]:
    # The evidence's copy of wer-v1 is only shown; the thresholds come from the package.
    packaged = load_policy(WER_POLICY_ID)
    if not isinstance(doc, Mapping):
        return ["evidence is not a mapping"]
    if doc.get("policy") != packaged.rules or doc.get("policy_sha256") != packaged.sha256:
        return [f"the stored {WER_POLICY_ID} policy is not the packaged resource (sha256 "
                f"{doc.get('policy_sha256')} vs {packaged.sha256})"]
    return []


def _rule_ggml_vs_source(ev) -> Judgement:
    doc = ev.json("wer")
    problems = _wer_policy_problems(doc)
    if ev.has("policy"):
        problems += _policy_file_problems(ev, "policy", WER_POLICY_ID)
    problems += ggml_run_problems(doc, lambda cid: ev.bytes(f"ggml_stderr_{cid}"))
    if problems:
        return Judgement(Status.FAIL, "; ".join(problems))
    j = judge_ggml_vs_source(doc)
    if not j.ok:
        return j
    return Judgement.passed(j.detail + "; every GGML run showed " + contracts.COREML_OFF
                            + " with no .mlmodelc beside its model")


def _classifier(ev):
    def classify(clip):
        stdout = ev.bytes(f"hybrid_stdout_{clip['id']}") if clip["public"] else None
        c = contracts.classify_positive(clip["run"], ev.bytes(f"hybrid_stderr_{clip['id']}"),
                                        stdout)
        return Judgement.of(c.ok, c.detail)
    return classify


def hybrid_binding_problems(doc: Any, coreml_sha256: Any) -> list[str]:
    """The hybrid runs must be launches of the Core ML binary that passed ``build.coreml``.

    ``coreml_sha256`` is the gate's bound identity ``binary.coreml.sha256`` (which the
    validator checks against the build's); each clip's run must cite a ledger launch of a
    binary with that digest.
    """
    if not isinstance(doc, Mapping):
        return ["evidence is not a mapping"]
    if not is_sha256(coreml_sha256) or doc.get("binary_sha256") != coreml_sha256:
        return [f"hybrid runs bound to binary {doc.get('binary_sha256')!r}, not the Core ML "
                f"build's {coreml_sha256!r}"]
    out = []
    for c in doc.get("clips") or []:
        launch = (c.get("run") or {}).get("launch") if isinstance(c, Mapping) else None
        if not isinstance(launch, Mapping) or launch.get("binary_sha256") != coreml_sha256:
            out.append(f"{c.get('id') if isinstance(c, Mapping) else c}: the run is not a "
                       f"recorded launch of the Core ML binary")
    return out


def _rule_hybrid(ev) -> Judgement:
    doc = ev.json("hybrid")
    problems = _wer_policy_problems(doc)
    problems += hybrid_binding_problems(doc, ev.identities.get("binary.coreml.sha256"))
    if problems:
        return Judgement(Status.FAIL, "; ".join(problems))
    return judge_hybrid(doc, _classifier(ev))


def _parity_rule(variant: str, kind: str) -> Callable[[Any], Judgement]:
    policy_id = POLICY_OF_VARIANT[variant]

    def judge(ev) -> Judgement:
        problems = []
        for name in ev.names():
            if name.startswith("policy_"):
                problems += _policy_file_problems(ev, name, policy_id)
        doc = ev.json("parity")
        if ev.has("drift") and not isinstance(ev.json("drift"), Mapping):
            problems.append("the drift record is not a mapping")
        problems += stored_outputs_problems(doc, ev)
        if ev.has(ATTRIBUTION):
            problems += [f"attribution: {p}" for p in check_document(ev.json(ATTRIBUTION))]
        if problems:
            return Judgement(Status.FAIL, "; ".join(problems))
        return judge_parity(doc, policy_id, kind)
    return judge


RuleFn = Callable[[Any], Judgement]

RULES: dict[str, RuleFn] = {
    "build.source_identity": _rule_source,
    "build.patch_exact": _rule_patch,
    "build.ggml": _rule_ggml,
    "build.coreml": _rule_coreml,
    "export.ggml_model": _rule_ggml_model,
    "export.contract": _rule_contract,
    "export.compile": _rule_compile,
    "canary.lifecycle_ab": _rule_lifecycle,
    "canary.coreml_negative": _rule_negative,
    "canary.coreml_positive": _rule_positive,
    "canary.sanitizer": _rule_sanitizer,
    "parity.program": _parity_rule("fp32", "program"),
    "parity.runtime": _parity_rule("fp32", "runtime"),
    "parity.program_fp16": _parity_rule("fp16", "program"),
    "parity.runtime_fp16": _parity_rule("fp16", "runtime"),
    "wer.ggml_vs_source": _rule_ggml_vs_source,
    "wer.hybrid": _rule_hybrid,
    "placement.plan": _rule_plan,
}
"""Gate id to its judge. A gate the registry declares unimplemented has no entry."""


def judge(gate_id: str, evidence) -> Judgement:
    """Judge ``gate_id`` on an evidence view with its registered rule.

    Raises
    ------
    KeyError
        If the gate has no rule (it is unimplemented in this version).
    """
    return RULES[gate_id](evidence)
