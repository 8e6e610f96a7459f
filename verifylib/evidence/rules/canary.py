"""Pass rules of stage 03 (canary): the batch-lifecycle A/B, the AddressSanitizer runs, the Core ML negative control and positive gate.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any, Callable, Mapping

from verifylib.canonical import is_sha256
from verifylib.evidence.gates import Judgement
from verifylib.runtime import contracts
from verifylib.runtime import sanitizer as _sanitizer
from verifylib.whispercpp import build as _build
from verifylib.whispercpp import source as _source

SIDES = ("unpatched", "patched")


LIFECYCLE_SCHEMA = "verifylib-lifecycle-ab/1"


NEGATIVE_SCHEMA = "verifylib-coreml-negative/1"


POSITIVE_SCHEMA = "verifylib-coreml-positive/1"


def stream_name(sha: str) -> str:
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
        name = stream_name(sha)
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


RULES: dict[str, Callable[[Any], Judgement]] = {
    "canary.lifecycle_ab": _rule_lifecycle,
    "canary.coreml_negative": _rule_negative,
    "canary.coreml_positive": _rule_positive,
    "canary.sanitizer": _rule_sanitizer,
}
"""Gate id to judge, for the gates of stage 03."""
