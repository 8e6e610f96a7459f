"""Pass rules of stage 03 (canary).

The batch-lifecycle A/B, the AddressSanitizer runs, the Core ML negative control and
positive gate.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from verifylib.canonical import is_sha256
from verifylib.evidence.canary.schema import (
    LIFECYCLE_SCHEMA,
    NEGATIVE_SCHEMA,
    POSITIVE_SCHEMA,
    SANITIZER_SCHEMA,
    SIDES,
    LifecycleEvidence,
    LifecycleSide,
    NegativeEvidence,
    PositiveEvidence,
    SanitizerEvidence,
    SanitizerSide,
    SchemaMismatch,
    SidesIncomplete,
)
from verifylib.evidence.canary.seam_schema import (
    SEAM_NEGATIVE_SCHEMA,
    SEAM_POSITIVE_SCHEMA,
    SeamNegativeEvidence,
    SeamPositiveEvidence,
)
from verifylib.evidence.fields import SchemaError
from verifylib.evidence.gates import (
    CANARY_COREML_NEGATIVE,
    CANARY_COREML_POSITIVE,
    CANARY_LIFECYCLE_AB,
    CANARY_SANITIZER,
    CANARY_SEAM_NEGATIVE,
    CANARY_SEAM_POSITIVE,
    Judgement,
)
from verifylib.evidence.judging import CitedPins, cited_pins, seam_launch_problems
from verifylib.evidence.records import EvidenceView
from verifylib.evidence.run_record import RunRecord
from verifylib.runtime import contracts
from verifylib.runtime import sanitizer as _sanitizer
from verifylib.runtime.contracts import seam as _seam
from verifylib.whispercpp import build_options as _build_options
from verifylib.whispercpp import source as _source

__all__ = ["stream_name", "asan_stream_name", "judge_lifecycle", "judge_sanitizer",
           "judge_negative", "judge_positive", "judge_seam_negative", "judge_seam_positive",
           "seam_stream_name", "UNPATCHED_CLEAN_ON_MACOS", "runs_system",
           "unpatched_caveat", "RULES"]

UNPATCHED_CLEAN_ON_MACOS = (
    "a clean unpatched side on macOS is not evidence the defect is gone (macOS's allocator "
    "can hide the bad free); canary.sanitizer is the witness")
"""What a clean unpatched lifecycle side that ran on macOS is followed by, wherever it is
shown (the A/B judgement, the report, ``verifylib pin-check``)."""


def runs_system(records: Iterable[Mapping[str, Any]]) -> str | None:
    """Name the OS a side's runs ran on, from the signal table their records name.

    Parameters
    ----------
    records : iterable of dict
        Run records (:func:`verifylib.runtime.runner.run_record`).

    Returns
    -------
    str or None
        The one table every record names (a record without one is Linux's,
        :data:`verifylib.runtime.contracts.LEGACY_SIGNAL_TABLE`); None when there are no
        records, they disagree, or one names an unknown table.
    """
    found = {contracts.recorded_signal_table(r)[0] for r in records}
    return found.pop() if len(found) == 1 and None not in found else None


def unpatched_caveat(system: str | None, clean: bool) -> str | None:
    """Say what a clean unpatched lifecycle side does not show, when that must be said.

    On Linux the unpatched build's bad free crashes (docs/facts.md); on macOS the allocator
    may hand back zeroed memory, so the unpatched side can exit 3 every time although the
    defect is still there. Only ``canary.sanitizer`` sees the bad free regardless.

    Parameters
    ----------
    system : str or None
        The OS the unpatched runs ran on (:func:`runs_system`).
    clean : bool
        Whether every unpatched run was clean (exit 3 with both markers).

    Returns
    -------
    str or None
        :data:`UNPATCHED_CLEAN_ON_MACOS` for a clean side that ran on macOS, else None.
    """
    return UNPATCHED_CLEAN_ON_MACOS if clean and system == "Darwin" else None


def stream_name(sha: str) -> str:
    """Evidence name of a stored ``canary.lifecycle_ab`` stream."""
    return f"stream-{sha}"


def _refusal(exc: SchemaError, schema: str) -> Judgement:
    """Return the FAIL of a document that does not parse as ``schema``, naming the problem."""
    if isinstance(exc, SchemaMismatch):
        return Judgement.failed(f"not a {schema} document")
    if isinstance(exc, SidesIncomplete):
        return Judgement.failed(exc.problem)
    return Judgement.failed(f"malformed {schema} document: {exc}")


def _is_trigger(trigger: tuple[str, ...]) -> bool:
    """Tell whether a recorded trigger is the lifecycle trigger of its preset."""
    return len(trigger) == 3 and list(trigger) == contracts.lifecycle_trigger_args(trigger[2])


def _short(sha: str | None) -> str:
    return (sha or "")[:12]


def _summary(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{n}x {label}" for label, n in sorted(counts.items(), key=lambda kv: -kv[1]))


def _run_streams(side: str, i: int, rec: RunRecord, stream: Callable[[str], bytes | None],
                 problems: list[str]) -> tuple[bytes, bytes] | None:
    """Return the stored stderr and stdout of one recorded run, or None with the problem noted."""
    err = stream(rec.stderr_sha256) if is_sha256(rec.stderr_sha256) else None
    out = stream(rec.stdout_sha256) if is_sha256(rec.stdout_sha256) else None
    if err is None or out is None:
        problems.append(f"{side} run {i}: stream not stored")
        return None
    return err, out


_Classified = tuple[int, contracts.Classification]
"""A run's index on its side, and what its stored exit status and stream give."""


def _lifecycle_side(side: str, s: LifecycleSide, stream: Callable[[str], bytes | None],
                    problems: list[str]) -> list[_Classified]:
    """Re-classify an available side's runs from their stored streams, noting what is unsupported.

    A run whose streams are not stored is noted and left out; the side's recorded counts
    must be the classified runs'.
    """
    if not is_sha256(s.binary_sha256):
        problems.append(f"{side}: malformed binary digest {s.binary_sha256!r}")
    classified = []
    for i, rec in enumerate(s.runs):
        streams = _run_streams(side, i, rec, stream, problems)
        if streams is None:
            continue
        err, out = streams
        record = rec.to_json()
        c = contracts.classify_lifecycle(record, err, out)
        bad = contracts.record_problems(record, err, out)
        if rec.argv and rec.argv[0] != s.binary:
            bad.append(f"argv[0] {rec.argv[0]!r} is not the {side} binary")
        if bad:
            problems.append(f"{side} run {i}: evidence unusable: {'; '.join(bad)}")
        if rec.outcome != c.outcome:
            problems.append(f"{side} run {i}: recorded outcome {rec.outcome!r}, but the "
                            f"stored exit status and stream give {c.outcome!r}")
        classified.append((i, c))
    counts = dict(sorted(Counter(c.outcome for _, c in classified).items()))
    if s.counts != counts:
        problems.append(f"{side}: recorded counts {s.counts!r} differ from the runs' "
                        f"{counts!r}")
    return classified


def _unpatched_account(unpatched: LifecycleSide, runs: list[_Classified] | None) -> str:
    """Say what the unpatched side's runs gave (recorded, not gated), or why it did not run."""
    if runs is None:
        return f"unpatched build not available ({unpatched.reason or ''})"
    text = (f"unpatched {_short(unpatched.binary_sha256)}...: "
            f"{_summary(Counter(c.outcome for _, c in runs))} (recorded, not gated)")
    caveat = unpatched_caveat(runs_system(r.to_json() for r in unpatched.runs),
                              bool(runs) and all(c.ok for _, c in runs))
    if caveat:
        text += f"; {caveat}"
    return text


def judge_lifecycle(doc: Any, stream: Callable[[str], bytes | None]) -> Judgement:
    """Judge ``canary.lifecycle_ab`` on stored evidence.

    Every run of both sides is re-classified from its recorded exit status and its stored
    stream (looked up by digest); a recorded outcome or count the streams do not support,
    a stream that is missing or not the run's own, or a signal that disagrees with the
    return code makes the evidence unusable (FAIL). Then: PASS iff the patched side has
    exactly ``runs_per_side`` runs, every one exit 3 with both markers and no signal. The
    unpatched side's outcomes are reported, not gated; when they are all clean and ran on
    macOS, the detail adds that this is no evidence the defect is gone
    (:func:`unpatched_caveat`).

    Parameters
    ----------
    doc : mapping
        The ``lifecycle`` document, read by
        :meth:`verifylib.evidence.canary.schema.LifecycleEvidence.from_json` (a document
        that does not parse is a FAIL naming the field).
    stream : callable
        Digest to stored bytes, or None when no such stream is stored.
    """
    try:
        ev = LifecycleEvidence.from_json(doc)
    except SchemaError as exc:
        return _refusal(exc, LIFECYCLE_SCHEMA)
    n = ev.runs_per_side
    if n < 1:
        return Judgement.failed(f"malformed runs_per_side {n!r}")
    if not _is_trigger(ev.trigger):
        return Judgement.failed(f"malformed trigger {list(ev.trigger)!r}")
    sides = ev.sides
    problems: list[str] = []
    results: dict[str, list[_Classified]] = {}
    for side in SIDES:
        s = sides[side]
        if not s.available:
            if side == "patched":
                problems.append("patched: no runs recorded")
            continue
        results[side] = _lifecycle_side(side, s, stream, problems)
    unpatched, patched_side = sides.unpatched, sides.patched
    if unpatched.binary_sha256 is not None and \
            unpatched.binary_sha256 == patched_side.binary_sha256:
        problems.append("the unpatched and the patched binary are the same file")
    if problems:
        return Judgement.failed("evidence does not support the outcomes: "
                                + " | ".join(problems[:5]))
    patched = results["patched"]  # no problems: the patched side was available and read
    if len(patched) != n:
        return Judgement.failed(f"patched: {len(patched)} runs recorded, expected {n}")
    bad_runs = [(i, c) for i, c in patched if not c.ok]
    p_counts = _summary(Counter(c.outcome for _, c in patched))
    a_side = _unpatched_account(unpatched, results.get("unpatched"))
    p_sha = _short(patched_side.binary_sha256)
    if bad_runs:
        i, c = bad_runs[0]
        return Judgement.failed(f"patched {p_sha}...: {len(bad_runs)}/{n} runs not clean "
                                f"({p_counts}); first, run {i}: {c.detail}. {a_side}")
    return Judgement.passed(f"patched {p_sha}...: {n}/{n} runs exit 3 with "
                            f"both markers, no signal; {a_side}")


def _stored(ev: EvidenceView, name_of: Callable[[str], str]) -> Callable[[str], bytes | None]:
    """Look a stored stream up by digest under a gate's naming (None when not stored)."""
    def stream(sha: str) -> bytes | None:
        name = name_of(sha)
        return ev.bytes(name) if ev.has(name) else None
    return stream


def _rule_lifecycle(ev: EvidenceView) -> Judgement:
    return judge_lifecycle(ev.json("lifecycle"), _stored(ev, stream_name))


def asan_stream_name(sha: str) -> str:
    """Return the evidence name of a stored ``canary.sanitizer`` stream.

    It is apart from the A/B's, whose empty stdout would otherwise share a file name with it.

    Parameters
    ----------
    sha : str
        The stream's SHA-256.

    Returns
    -------
    str
        ``asan-stream-<sha>``.
    """
    return f"asan-stream-{sha}"


def _asan_build_problems(side: str, s: SanitizerSide, pin: Any) -> list[str]:
    """List why a side's recorded build is not the pin's ASan variant, static, instrumented."""
    variant, _ = _sanitizer.SIDES[side]
    b = s.build
    if b is None:
        return [f"{side}: build record missing"]
    out = []
    if b.variant != variant:
        out.append(f"{side}: built variant {b.variant!r}, not {variant!r}")
    opts = b.options or {}
    wrong = sorted(k for k, v in _build_options.forced_options(variant).items()
                   if opts.get(k) != v)
    if wrong:
        out.append(f"{side}: CMake options {wrong} are not the {variant} build's")
    libs = None if b.needed_libs is None else list(b.needed_libs)
    if libs is None or b.static is not True or any(
            Path(x).name.startswith(("libwhisper", "libggml")) for x in libs):
        out.append(f"{side}: not static: needs {libs!r}")
    elif not _sanitizer.links_asan_runtime(libs):
        out.append(f"{side}: links no AddressSanitizer runtime ({libs!r})")
    if s.binary is None or not is_sha256(b.key) or Path(s.binary).parent.name != b.key:
        out.append(f"{side}: the binary does not sit in the folder of its build key")
    if pin is not None:
        want_patch = None if side == "unpatched" else pin.patch_sha256
        if b.tree_id != pin.tree or b.patch_sha256 != want_patch:
            out.append(f"{side}: built from tree {b.tree_id!r} with patch "
                       f"{b.patch_sha256!r}, not pin {pin.name}'s tree with "
                       f"{'no patch' if want_patch is None else 'its patch'}")
    return out


_AsanRun = tuple[int, contracts.Classification, _sanitizer.SanitizerReport | None,
                 _sanitizer.SanitizerReport | None]
"""A run's index on its side, its classification, and the sanitizer reports of its stderr
and its stdout."""


def judge_sanitizer(doc: Any, stream: Callable[[str], bytes | None],
                    identities: Mapping[str, Any] | None = None,
                    pins: CitedPins | None = None) -> Judgement:
    """Judge ``canary.sanitizer`` on stored evidence (informational gate).

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
        The ``sanitizer`` document, read by
        :meth:`verifylib.evidence.canary.schema.SanitizerEvidence.from_json` (a document
        that does not parse is a FAIL naming the field).
    stream : callable
        Digest to stored bytes, or None when no such stream is stored.
    identities : mapping, optional
        The gate's identities; each side's binary digest must be bound there.
    pins : CitedPins, optional
        The pins the builds are checked against (:func:`verifylib.evidence.judging.cited_pins`:
        a user-declared pin's manifest carried by the gate); default: the packaged pins.
    """
    try:
        ev = SanitizerEvidence.from_json(doc)
    except SchemaError as exc:
        return _refusal(exc, SANITIZER_SCHEMA)
    n = _sanitizer.RUNS_PER_SIDE
    problems: list[str] = []
    if ev.runs_per_side != n:
        problems.append(f"runs_per_side {ev.runs_per_side!r}, this version runs {n}")
    if not _is_trigger(ev.trigger):
        problems.append(f"malformed trigger {list(ev.trigger)!r}")
    if ev.asan_options != _sanitizer.ASAN_OPTIONS:
        problems.append(f"ASAN_OPTIONS {ev.asan_options!r} are not this version's "
                        f"{_sanitizer.ASAN_OPTIONS!r}")
    cited = pins if pins is not None else CitedPins(_source.load_pins())
    problems += cited.problems
    pin = cited.pins.get(ev.pin)
    if pin is None:
        problems.append(f"pin {ev.pin!r} is not in the shipped manifest"
                        + (" nor in the run's user manifest" if cited.user else ""))
    sides = ev.sides
    runs_of: dict[str, list[_AsanRun]] = {}
    for side in SIDES:
        s = sides[side]
        if not s.available:
            problems.append(f"{side}: AddressSanitizer build not available ({s.reason or ''})")
            continue
        sha = s.binary_sha256
        if sha is None or not is_sha256(sha):
            problems.append(f"{side}: malformed binary digest {sha!r}")
        elif identities is not None and identities.get(_sanitizer.SIDES[side][1]) != sha:
            problems.append(f"{side}: binary {sha[:12]}... is not bound to the gate's "
                            f"{_sanitizer.SIDES[side][1]}")
        problems += _asan_build_problems(side, s, pin)
        if len(s.runs) != n:
            problems.append(f"{side}: {len(s.runs)} runs recorded, expected {n}")
        runs_of[side] = _asan_runs(side, s, stream, problems)
    if is_sha256(sides.unpatched.binary_sha256) and \
            sides.unpatched.binary_sha256 == sides.patched.binary_sha256:
        problems.append("the unpatched and the patched binary are the same file")
    if problems:
        return Judgement.failed("evidence does not support the outcomes: "
                                + " | ".join(problems[:5]))
    return _sanitizer_outcome(runs_of, _short(sides.unpatched.binary_sha256),
                              _short(sides.patched.binary_sha256), n)


def _asan_runs(side: str, s: SanitizerSide, stream: Callable[[str], bytes | None],
               problems: list[str]) -> list[_AsanRun]:
    """Re-read an available side's runs from their stored streams, noting what is unsupported.

    A run whose streams are not stored is noted and left out; every other run's recorded
    outcome and sanitizer report must be what its stored streams give.
    """
    seen = []
    for i, rec in enumerate(s.runs):
        streams = _run_streams(side, i, rec, stream, problems)
        if streams is None:
            continue
        err, out = streams
        record = rec.to_json()
        bad = contracts.record_problems(record, err, out)
        argv = list(rec.argv)
        if not argv or argv[0] != s.binary:
            bad.append(f"argv[0] is not the {side} binary")
        elif not contracts.has_lifecycle_trigger(argv):
            bad.append("argv lacks the lifecycle trigger")
        if bad:
            problems.append(f"{side} run {i}: evidence unusable: {'; '.join(bad)}")
        c = contracts.classify_lifecycle(record, err, out)
        report = _sanitizer.parse_report(err)
        if rec.outcome != c.outcome:
            problems.append(f"{side} run {i}: recorded outcome {rec.outcome!r}, but "
                            f"the stored exit status and stream give {c.outcome!r}")
        recorded = None if rec.report is None else rec.report.to_json()
        if recorded != (None if report is None else report.to_evidence()):
            problems.append(f"{side} run {i}: the recorded sanitizer report is not the "
                            f"one the stored stderr holds")
        seen.append((i, c, report, _sanitizer.parse_report(out)))
    return seen


def _sanitizer_outcome(runs_of: Mapping[str, list[_AsanRun]], u_sha: str, p_sha: str,
                       n: int) -> Judgement:
    """Judge runs the evidence supports: every unpatched run reports, no patched run does."""
    failures = []
    u_quiet = [(i, c) for i, c, rep, _ in runs_of["unpatched"] if rep is None]
    kinds = _summary(Counter(rep.describe() for _, _, rep, _ in runs_of["unpatched"] if rep))
    ends = _summary(Counter(c.outcome for _, c, _, _ in runs_of["unpatched"]))
    if u_quiet:
        i, c = u_quiet[0]
        failures.append(f"unpatched ASan whisper-cli {u_sha}...: {len(u_quiet)}/{n} runs printed "
                        f"no sanitizer report (first, run {i}: {c.outcome})")
    p_loud = [(i, loud) for i, _, rep, rep_out in runs_of["patched"]
              if (loud := rep or rep_out)]
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


def _rule_sanitizer(ev: EvidenceView) -> Judgement:
    return judge_sanitizer(ev.json("sanitizer"), _stored(ev, asan_stream_name), ev.identities,
                           cited_pins(ev))


def judge_negative(doc: Any, stderr: bytes, stdout: bytes) -> Judgement:
    """Judge ``canary.coreml_negative``.

    One run only, in a scratch folder holding only the ``ggml-*.bin``, classified by
    :func:`verifylib.runtime.contracts.classify_negative`.
    """
    try:
        ev = NegativeEvidence.from_json(doc)
    except SchemaError as exc:
        return _refusal(exc, NEGATIVE_SCHEMA)
    problems = []
    # A warm-up has no place in this format; a document that records one is refused.
    if ev.attempts != 1 or "warmup" in doc:
        problems.append(f"the negative control must be the first and only run "
                        f"(attempts {ev.attempts!r})")
    if not is_sha256(ev.binary_sha256):
        problems.append("malformed binary digest")
    argv = list(ev.run.argv)
    model_arg = ev.model_arg
    if not argv or argv[0] != ev.binary:
        problems.append("the run did not launch the recorded binary")
    if contracts.model_arg_of(argv) != model_arg:
        problems.append("the run's -m is not the scratch model")
    else:
        base = Path(model_arg).name
        derived = contracts.coreml_encoder_path(model_arg)
        listing = list(ev.scratch_listing)
        if listing != [base] or not (base.startswith("ggml-") and base.endswith(".bin")):
            problems.append(f"the scratch folder held {listing!r}, not only the ggml-*.bin")
        if ev.derived_mlmodelc != derived:
            problems.append("recorded derived path is not coreml_encoder_path(-m)")
    if _seam.is_seam_stream(stderr.decode("utf-8", "replace")):
        problems.append("the run printed verifylib seam lines: a seam launch is never a "
                        "Core ML run")
    c = contracts.classify_negative(ev.run.to_json(), stderr, stdout)
    if ev.outcome != c.outcome:
        problems.append(f"recorded outcome {ev.outcome!r}, but the stored exit status "
                        f"and stream give {c.outcome!r}")
    problems += list(c.problems)
    if problems:
        return Judgement.failed("; ".join(problems))
    return Judgement.passed(f"first and only run of whisper-cli {ev.binary_sha256[:12]}... "
                            f"with only {Path(model_arg).name} in a scratch folder: exit 3, "
                            f"load-failure and init-failure lines, no signal")


def _rule_negative(ev: EvidenceView) -> Judgement:
    return judge_negative(ev.json("negative"), ev.bytes("negative_stderr"),
                          ev.bytes("negative_stdout"))


def judge_positive(doc: Any, stderr: bytes, stdout: bytes,
                   warmup: tuple[bytes, bytes] | None = None) -> Judgement:
    """Judge ``canary.coreml_positive``.

    The measured run is classified by :func:`verifylib.runtime.contracts.classify_positive`,
    with the ``.mlmodelc`` at the derived path and unchanged across both runs; the warm-up
    (its stderr and stdout in ``warmup``) must end cleanly by
    :func:`verifylib.runtime.contracts.warmup_problems` -- a crash, timeout, non-zero exit or
    fallback line in it is a FAIL, never something a second run makes good.
    """
    try:
        ev = PositiveEvidence.from_json(doc)
    except SchemaError as exc:
        return _refusal(exc, POSITIVE_SCHEMA)
    problems = []
    if not is_sha256(ev.binary_sha256):
        problems.append("malformed binary digest")
    run, warm = ev.measured, ev.warmup
    argv = list(run.argv)
    model_arg = ev.model_arg
    if not argv or argv[0] != ev.binary:
        problems.append("the measured run did not launch the recorded binary")
    if warm.argv != run.argv:
        problems.append("the warm-up ran another command line than the measured run")
    if contracts.model_arg_of(argv) != model_arg:
        problems.append("the measured run's -m is not the recorded model argument")
    else:
        ml = ev.mlmodelc
        if ml.path != contracts.coreml_encoder_path(model_arg):
            problems.append("recorded .mlmodelc path is not coreml_encoder_path(-m)")
        b, a = ml.tree_digest_before, ml.tree_digest_after
        if not is_sha256(b):
            problems.append(f"no .mlmodelc at {ml.path!r} before the runs")
        elif a != b:
            problems.append("the .mlmodelc changed between the warm-up and the measured run")
    if any(_seam.is_seam_stream(x.decode("utf-8", "replace"))
           for x in (stderr, *(warmup or ()))):
        problems.append("a run printed verifylib seam lines: a seam launch is never a Core ML "
                        "run")
    c = contracts.classify_positive(run.to_json(), stderr, stdout)
    if ev.outcome != c.outcome:
        problems.append(f"recorded outcome {ev.outcome!r}, but the stored exit status "
                        f"and stream give {c.outcome!r}")
    problems += list(c.problems)
    if warmup is not None:
        problems += [f"warm-up: {p}" for p in contracts.warmup_problems(warm.to_json(), *warmup)]
    else:
        problems.append("warm-up streams not stored: the warm-up cannot be judged")
    if problems:
        return Judgement.failed("; ".join(problems))
    return Judgement.passed(f"measured run of whisper-cli {ev.binary_sha256[:12]}...: exit 0, "
                            f"{contracts.COREML_ON!r}, one {contracts.COREML_LOAD_MARKER!r} "
                            f"line for {Path(model_arg).name}, no load failure (wall "
                            f"{run.wall_s} s, encode {run.encode_time_ms} ms; warm-up wall "
                            f"{warm.wall_s} s)")


def _rule_positive(ev: EvidenceView) -> Judgement:
    return judge_positive(ev.json("positive"), ev.bytes("measured_stderr"),
                          ev.bytes("measured_stdout"),
                          (ev.bytes("warmup_stderr"), ev.bytes("warmup_stdout")))


def seam_stream_name(sha: str) -> str:
    """Return the evidence name of a stored ``canary.seam_negative`` stream.

    Parameters
    ----------
    sha : str
        The stream's SHA-256.

    Returns
    -------
    str
        ``seam-stream-<sha>``.
    """
    return f"seam-stream-{sha}"


def _seam_side(side: str, s: LifecycleSide, model_arg: str,
               stream: Callable[[str], bytes | None], problems: list[str]
               ) -> list[tuple[int, contracts.Classification, bool]]:
    """Re-classify a seam side's runs as the negative control; note whether each is the seam's."""
    out = []
    for i, rec in enumerate(s.runs):
        streams = _run_streams(side, i, rec, stream, problems)
        if streams is None:
            continue
        err, o = streams
        record = rec.to_json()
        bad = contracts.record_problems(record, err, o)
        if not rec.argv or rec.argv[0] != s.binary:
            bad.append(f"argv[0] is not the {side} seam binary")
        if contracts.model_arg_of(list(rec.argv)) != model_arg:
            bad.append("its -m is not the scratch model")
        if bad:
            problems.append(f"{side} run {i}: evidence unusable: {'; '.join(bad)}")
        c = contracts.classify_negative(record, err, o)
        if rec.outcome != c.outcome:
            problems.append(f"{side} run {i}: recorded outcome {rec.outcome!r}, but the "
                            f"stored exit status and stream give {c.outcome!r}")
        text = err.decode("utf-8", "replace")
        out.append((i, c, _seam.SEAM_BANNER in text and _seam.SEAM_REFUSED in text))
    return out


def judge_seam_negative(doc: Any, stream: Callable[[str], bytes | None],
                        identities: Mapping[str, Any] | None = None) -> Judgement:
    """Judge ``canary.seam_negative`` (informational) on stored evidence.

    Every run of the patched and unpatched seam builds is re-classified as the negative
    control (:func:`verifylib.runtime.contracts.classify_negative`) from its stored streams,
    and must be a seam launch (the seam's banner and its refused load on stderr); the
    scratch folder held only the ggml file. PASS iff the patched build made
    ``runs_per_side`` runs, each exit 3 with both markers and no signal; the unpatched and
    the AddressSanitizer outcomes are reported, not gated.

    Parameters
    ----------
    doc : mapping
        The ``seam_negative`` document.
    stream : callable
        Digest to stored bytes, or None when no such stream is stored.
    identities : mapping, optional
        The gate's identities; each side's binary digest must be bound there.
    """
    try:
        ev = SeamNegativeEvidence.from_json(doc)
    except SchemaError as exc:
        return _refusal(exc, SEAM_NEGATIVE_SCHEMA)
    problems: list[str] = []
    base = Path(ev.model_arg).name
    if list(ev.scratch_listing) != [base] or not (base.startswith("ggml-")
                                                  and base.endswith(".bin")):
        problems.append(f"the scratch folder held {list(ev.scratch_listing)!r}, not only the "
                        "ggml-*.bin")
    if ev.derived_mlmodelc != contracts.coreml_encoder_path(ev.model_arg):
        problems.append("recorded derived path is not coreml_encoder_path(-m)")
    seen: dict[str, list[tuple[int, contracts.Classification, bool]]] = {}
    for side in SIDES:
        s = ev.sides[side]
        if not s.available:
            if side == "patched":
                problems.append(f"patched seam build not available ({s.reason or ''})")
            continue
        key = _seam.SEAM_SIDES[side][1]
        if identities is not None and identities.get(key) != s.binary_sha256:
            problems.append(f"{side}: binary is not bound to the gate's {key}")
        seen[side] = _seam_side(side, s, ev.model_arg, stream, problems)
    asan = ev.asan
    asan_reports: list[str] = []
    if asan.available:
        key = _seam.SEAM_SIDES["unpatched_asan"][1]
        if identities is not None and identities.get(key) != asan.binary_sha256:
            problems.append(f"unpatched ASan: binary is not bound to the gate's {key}")
        for i, rec in enumerate(asan.runs):
            streams = _run_streams("unpatched ASan", i, rec, stream, problems)
            if streams is None:
                continue
            rep = _sanitizer.parse_report(streams[0])
            recorded = None if rec.report is None else rec.report.to_json()
            if recorded != (None if rep is None else rep.to_evidence()):
                problems.append(f"unpatched ASan run {i}: the recorded sanitizer report is not "
                                "the one the stored stderr holds")
            asan_reports.append(rep.describe() if rep else "no report")
    if problems:
        return Judgement.failed("evidence does not support the outcomes: "
                                + " | ".join(problems[:5]))
    patched = seen.get("patched", [])
    n = ev.runs_per_side
    if len(patched) != n:
        return Judgement.failed(f"patched seam: {len(patched)} runs recorded, expected {n}")
    unpatched = ("unpatched seam: not available" if "unpatched" not in seen else
                 f"unpatched seam: {_summary(Counter(c.outcome for _, c, _ in seen['unpatched']))}"
                 " (recorded, not gated)")
    witness = (f"; unpatched ASan seam: {_summary(Counter(asan_reports))}" if asan_reports
               else "")
    bad = [(i, c, mine) for i, c, mine in patched if not (c.ok and mine)]
    if bad:
        i, c, mine = bad[0]
        why = c.detail if not c.ok else "no seam banner and refused load on stderr"
        return Judgement.failed(f"patched seam {_short(ev.sides.patched.binary_sha256)}...: "
                                f"{len(bad)}/{n} runs not clean; first, run {i}: {why}. "
                                f"{unpatched}{witness}")
    return Judgement.passed(f"patched seam {_short(ev.sides.patched.binary_sha256)}...: {n}/{n} "
                            "runs refused the missing encoder and exit 3 with both markers, no "
                            f"signal; {unpatched}{witness}")


def _rule_seam_negative(ev: EvidenceView) -> Judgement:
    return judge_seam_negative(ev.json("seam_negative"), _stored(ev, seam_stream_name),
                               ev.identities)


def judge_seam_positive(doc: Any, stderr: bytes, stdout: bytes,
                        identities: Mapping[str, Any] | None = None) -> Judgement:
    """Judge ``canary.seam_positive`` (informational) on stored evidence.

    The launch must meet the four Core ML conditions
    (:func:`verifylib.runtime.contracts.classify_positive`) with the derived folder the
    evidence names, and its encode calls must be the executor's, on the audited program
    (:func:`verifylib.evidence.judging.seam_launch_problems`).

    Parameters
    ----------
    doc : mapping
        The ``seam_positive`` document.
    stderr, stdout : bytes
        The launch's stored streams.
    identities : mapping, optional
        The gate's identities: the seam binary and the encoder's tree digest must be bound.
    """
    try:
        ev = SeamPositiveEvidence.from_json(doc)
    except SchemaError as exc:
        return _refusal(exc, SEAM_POSITIVE_SCHEMA)
    problems: list[str] = []
    enc, run = ev.encoder, ev.run
    if identities is not None:
        if identities.get(_seam.SEAM_SIDES["patched"][1]) != ev.binary_sha256:
            problems.append("the seam binary is not bound to the gate's identity")
        if identities.get(enc.identity_key) != enc.tree_digest:
            problems.append(f"the encoder's digest is not bound to {enc.identity_key}")
    argv = list(run.argv)
    if not argv or argv[0] != ev.binary:
        problems.append("the launch did not run the recorded binary")
    if contracts.model_arg_of(argv) != enc.model_arg:
        problems.append("the launch's -m is not the recorded model argument")
    if enc.folder != contracts.coreml_encoder_path(enc.model_arg):
        problems.append("the recorded encoder folder is not coreml_encoder_path(-m)")
    c = contracts.classify_positive(run.to_json(), stderr, stdout)
    if ev.outcome != c.outcome:
        problems.append(f"recorded outcome {ev.outcome!r}, but the stored exit status and "
                        f"stream give {c.outcome!r}")
    problems += list(c.problems)
    problems += seam_launch_problems(stderr, ev.executor, folder=enc.folder,
                                     program_digest=enc.tree_digest)
    if problems:
        return Judgement.failed("; ".join(problems[:6]))
    calls = ev.executor.calls if ev.executor else ()
    return Judgement.passed(
        f"seam whisper-cli {ev.binary_sha256[:12]}...: exit 0, {contracts.COREML_ON!r}, one "
        f"{contracts.COREML_LOAD_MARKER!r} line, no load failure; {len(calls)} encode call(s) "
        f"executed by verifylib's executor on the {enc.variant} {enc.kind} "
        f"{enc.tree_digest[:12]}... (wall {run.wall_s} s, encode {run.encode_time_ms} ms)")


def _rule_seam_positive(ev: EvidenceView) -> Judgement:
    return judge_seam_positive(ev.json("seam_positive"), ev.bytes("seam_positive_stderr"),
                               ev.bytes("seam_positive_stdout"), ev.identities)


RULES: dict[str, Callable[[EvidenceView], Judgement]] = {
    CANARY_LIFECYCLE_AB: _rule_lifecycle,
    CANARY_COREML_NEGATIVE: _rule_negative,
    CANARY_COREML_POSITIVE: _rule_positive,
    CANARY_SANITIZER: _rule_sanitizer,
    CANARY_SEAM_NEGATIVE: _rule_seam_negative,
    CANARY_SEAM_POSITIVE: _rule_seam_positive,
}
"""Gate id to judge, for the gates of stage 03."""
