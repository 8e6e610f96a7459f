"""Pass rules of stage 01 (build): source identity, exact patch, the GGML and Core ML builds."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Sequence

from verifylib.canonical import is_sha256
from verifylib.evidence.gates import Judgement, Status
from verifylib.evidence.rules.common import pin_problems, stream_problems
from verifylib.evidence.schemas.build import (
    CoremlBuildEvidence,
    FailedBuild,
    GgmlBuildEvidence,
    PatchEvidence,
    SourceEvidence,
    parse_build,
    parse_coreml_build,
)
from verifylib.evidence.schemas.fields import SchemaError
from verifylib.runtime import contracts
from verifylib.whispercpp import source as _source
from verifylib.whispercpp.build import (
    UNPATCHED_VARIANTS,
    links_runtime_dynamically,
    parse_system_info,
)
from verifylib.whispercpp.source.patch import expected_status, phase_problems
from verifylib.whispercpp.source.pins import is_oid


def _rule_source(ev) -> Judgement:
    doc = ev.json("source")
    problems = pin_problems(doc)
    if problems:
        return Judgement(Status.FAIL, "; ".join(problems))
    return judge_source_identity(doc)


def _malformed(exc: SchemaError) -> Judgement:
    return Judgement.failed(f"malformed evidence: {exc}")


def _rule_patch(ev) -> Judgement:
    doc = ev.json("patch")
    problems = pin_problems(doc)
    if problems:
        return Judgement(Status.FAIL, "; ".join(problems))
    try:
        parsed = PatchEvidence.from_json(doc)
    except SchemaError as exc:
        return _malformed(exc)
    pin = _source.load_pins()[parsed.pin]
    if parsed.patch_file != pin.patch_path.name:
        return Judgement(Status.FAIL, f"patch file {parsed.patch_file!r} is not the manifest's "
                                      f"{pin.patch_path.name!r}")
    return judge_patch_exact(parsed)


def _rule_ggml(ev) -> Judgement:
    doc = ev.json("build")
    if not ev.has("probe_stderr"):
        return judge_ggml_build(doc, "")
    try:
        parsed = parse_build(doc)
    except SchemaError as exc:
        return _malformed(exc)
    probe = (parsed.probe.to_json() if isinstance(parsed, GgmlBuildEvidence)
             and parsed.probe is not None else None)
    bound = stream_problems(ev, probe,
                            {"stderr_sha256": "probe_stderr", "stdout_sha256": "probe_stdout"})
    if bound:
        return Judgement(Status.FAIL, "; ".join(bound))
    stream = ev.text("probe_stderr") + "\n" + ev.text("probe_stdout")
    return judge_ggml_build(parsed, stream)


def judge_coreml_build(ev: Any, bench_stderr: bytes, bench_stdout: bytes) -> Judgement:
    """Judge ``build.coreml`` on stored evidence.

    PASS iff the build exists with a well-formed SHA-256 equal to its recorded one, is the
    ``coreml`` variant with ``WHISPER_COREML=1``, ``WHISPER_COREML_ALLOW_FALLBACK=OFF`` and
    ``BUILD_SHARED_LIBS=OFF``, links no ``libwhisper``/``libggml``, sits in its own folder
    (named by its key, not the GGML build's), the patched tree was still exact after the
    build, and the ``whisper-bench`` built with the same options and source printed a
    ``system_info`` line with ``COREML = 1`` without crashing or timing out.

    ``ev`` is the ``coreml_build`` document (a mapping, parsed here with
    :func:`~verifylib.evidence.schemas.build.parse_coreml_build`) or its parsed form; a
    document that does not parse is a FAIL naming the field.
    """
    import hashlib
    try:
        doc = ev if isinstance(ev, (CoremlBuildEvidence, FailedBuild)) else parse_coreml_build(ev)
    except SchemaError as exc:
        return _malformed(exc)
    if isinstance(doc, FailedBuild):
        return Judgement.failed(f"no build: {doc.error}")
    problems = []
    if doc.variant != "coreml":
        problems.append(f"variant is {doc.variant!r}, not 'coreml'")
    sha = doc.sha256
    if not is_sha256(sha) or doc.recorded_sha256 != sha:
        problems.append(f"binary sha256 {sha!r} malformed or not the recorded one")
    if not is_sha256(doc.patch_sha256):
        problems.append("patch sha256 malformed")
    opts = doc.options
    for k, want in (("WHISPER_COREML", "1"), ("WHISPER_COREML_ALLOW_FALLBACK", "OFF"),
                    ("BUILD_SHARED_LIBS", "OFF")):
        have = opts.get(k)  # an option the build did not set is reported as None
        if have != want:
            problems.append(f"CMake option {k} is {have!r}, not {want}")
    libs = list(doc.needed_libs)
    if doc.static is not True or any(
            Path(x).name.startswith(("libwhisper", "libggml")) for x in libs):
        problems.append(f"not static: needs {libs!r}")
    if Path(doc.binary).parent.name != doc.key or doc.key == doc.ggml_key:
        problems.append("the Core ML binary does not sit in a folder of its own")
    if doc.patch_after_problems:
        problems.append(f"patched tree not exact after the build: "
                        f"{list(doc.patch_after_problems)}")
    bench = doc.bench
    if bench.options != opts or bench.cli_key != doc.key:
        problems.append("whisper-bench was not configured like the Core ML whisper-cli")
    probe = bench.probe
    if not probe.argv or probe.argv[0] != bench.binary:
        problems.append("the bench probe did not run the recorded whisper-bench")
    if hashlib.sha256(bench_stderr).hexdigest() != probe.stderr_sha256 or \
            hashlib.sha256(bench_stdout).hexdigest() != probe.stdout_sha256:
        problems.append("bench streams are not the probe's (SHA-256 differs)")
    label, rec_problems = contracts.termination(probe.to_json())
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
    return Judgement.passed(f"static Core ML whisper-cli sha256 {sha} "
                            f"(WHISPER_COREML=1, fallback OFF) "
                            f"in its own folder; {contracts.COREML_ON!r} read from "
                            f"whisper-bench built "
                            f"with the same options ({label})")


def _rule_coreml(ev) -> Judgement:
    def stream(name):
        return ev.bytes(name) if ev.has(name) else b""
    return judge_coreml_build(ev.json("coreml_build"), stream("bench_stderr"),
                              stream("bench_stdout"))


RULES: dict[str, Callable[[Any], Judgement]] = {
    "build.source_identity": _rule_source,
    "build.patch_exact": _rule_patch,
    "build.ggml": _rule_ggml,
    "build.coreml": _rule_coreml,
}
"""Gate id to judge, for the gates of stage 01."""


def judge_ggml_build(evidence: Any, system_info_text: str, *,
                     expect_variant: str = "ggml") -> Judgement:
    """Re-judge ``build.ggml`` from stored evidence and the probe's captured output.

    Parameters
    ----------
    evidence : mapping or GgmlBuildEvidence or FailedBuild
        :func:`build_evidence` output, or ``{"built": False, "error": ...}`` (parsed here
        with :func:`~verifylib.evidence.schemas.build.parse_build`), or its parsed form.
    system_info_text : str
        The probe's streams (stderr, then stdout).
    expect_variant : str
        The variant the gate is about.

    Returns
    -------
    Judgement
        PASS iff the build exists with a well-formed SHA-256 equal to its recorded one,
        is the expected variant with a well-formed patch digest, links no
        ``libwhisper``/``libggml``, the probe ran that binary without forbidden flags and
        exited 0 with no signal or timeout, and its ``system_info:`` line contains
        ``COREML = 0`` (not ``COREML = 1``); FAIL otherwise, with the reason (a document
        that does not parse is a FAIL naming the field).
    """
    try:
        doc = (evidence if isinstance(evidence, (GgmlBuildEvidence, FailedBuild))
               else parse_build(evidence))
    except SchemaError as exc:
        return _malformed(exc)
    if isinstance(doc, FailedBuild):
        return Judgement.failed(f"no build: {doc.error}")
    problems: list[str] = []
    if doc.variant != expect_variant:
        problems.append(f"variant is {doc.variant!r}, not {expect_variant!r}")
    sha = doc.sha256
    if not is_sha256(sha):
        problems.append(f"binary sha256 malformed: {sha!r}")
    elif doc.recorded_sha256 != sha:
        problems.append(f"binary sha256 {sha} is not the recorded {doc.recorded_sha256!r}")
    if expect_variant not in UNPATCHED_VARIANTS and not is_sha256(doc.patch_sha256):
        problems.append(f"patch sha256 malformed: {doc.patch_sha256!r}")
    libs = list(doc.needed_libs)
    if links_runtime_dynamically(libs) or doc.static is not True:
        problems.append(f"not static: needs {libs}")
    if doc.probe is None:
        problems.append("no probe run recorded")
    else:
        run = doc.probe.run
        argv = list(run.argv)
        if not argv or argv[0] != doc.binary:
            problems.append(f"probe did not run the published binary: {argv!r}")
        elif any(a in contracts.FORBIDDEN_FLAGS for a in argv):
            problems.append(f"probe used a forbidden flag: {argv!r}")
        rc = run.returncode
        if run.timed_out is not False or run.signal is not None or rc != 0:
            problems.append(f"probe did not exit 0 cleanly (returncode {rc!r}, signal "
                            f"{run.signal!r}, timed out {run.timed_out!r})")
    if not isinstance(system_info_text, str):
        problems.append("probe output missing")
        line = None
    else:
        line, _ = parse_system_info(system_info_text)
    if line is None:
        problems.append(f"no {contracts.SYSTEM_INFO_PREFIX!r} line in the probe output")
    elif contracts.COREML_ON in line or contracts.COREML_OFF not in line:
        problems.append(f"system_info line does not show {contracts.COREML_OFF!r}: {line}")
    if problems:
        return Judgement.failed("; ".join(problems))
    return Judgement.passed(f"static whisper-cli [{expect_variant}] sha256 {sha}; probe exit 0; "
                            f"system_info shows {contracts.COREML_OFF!r}")


def judge_source_identity(evidence: Any) -> Judgement:
    """Re-judge ``build.source_identity`` from stored evidence.

    Parameters
    ----------
    evidence : mapping or SourceEvidence
        The ``source`` document (parsed here with
        :meth:`~verifylib.evidence.schemas.build.SourceEvidence.from_json`) or its parsed
        form; it holds ``computed_tree`` (tree id of the obtained folder) and ``pin_tree``.

    Returns
    -------
    Judgement
        PASS iff both are 40 lower-case hex digits and equal, FAIL otherwise (also when
        the document does not parse); with the reason.
    """
    try:
        doc = evidence if isinstance(evidence, SourceEvidence) else \
            SourceEvidence.from_json(evidence)
    except SchemaError as exc:
        return _malformed(exc)
    computed, pinned = doc.computed_tree, doc.pin_tree
    for label, val in (("computed tree id", computed), ("pin tree id", pinned)):
        if not is_oid(val):
            return Judgement.failed(f"{label} malformed: {val!r}")
    if computed != pinned:
        return Judgement.failed(f"source tree id {computed} is not the pin's {pinned}")
    return Judgement.passed(f"source tree id {computed} equals the pin's tree")


def judge_patch_exact(evidence: Any,
                      required: Sequence[str] = ("before", "after")) -> Judgement:
    """Re-judge ``build.patch_exact`` from stored evidence.

    Parameters
    ----------
    evidence : mapping or PatchEvidence
        As made by :func:`patch_evidence` (parsed here with
        :meth:`~verifylib.evidence.schemas.build.PatchEvidence.from_json`), or its parsed
        form: the pin's declared ``pin_tree``,
        ``declared_patch_sha256`` and ``touches``, and ``checks`` mapping each phase
        (``"before"``, ``"after"``) to what it measured: ``head_tree``,
        ``patch_file_sha256``, ``patch_file_bytes``, ``diff_sha256``, ``diff_bytes``,
        ``status_lines``. An ``apply_error`` entry in ``checks`` is a FAIL.
    required : sequence of str
        Phases that must be present.

    Returns
    -------
    Judgement
        PASS iff in every required phase the patch file's digest equals the declared
        one, the diff's digest and length equal the patch file's, HEAD is the pin's tree,
        and the status is exactly `` M <touched path>`` per touched path; FAIL otherwise;
        with the reason (a document that does not parse is a FAIL naming the field).
    """
    try:
        doc = evidence if isinstance(evidence, PatchEvidence) else \
            PatchEvidence.from_json(evidence)
    except SchemaError as exc:
        return _malformed(exc)
    checks = doc.checks
    problems: list[str] = []
    if checks.apply_error is not None:
        problems.append(f"patch did not apply: {checks.apply_error}")
    declared = doc.to_json()
    for when in required:
        phase = checks.phase(when)
        if phase is None:
            problems.append(f"{when}: check missing")
            continue
        problems += [f"{when}: {p}" for p in phase_problems(declared, phase.to_json())]
    if problems:
        return Judgement.failed("; ".join(problems))
    last = checks.phase(required[-1]) if required else None
    size = last.patch_file_bytes if last is not None else None
    return Judgement.passed(f"{' and '.join(required)} the build: "
                            f"git diff equals the declared patch "
                            f"(sha256 {doc.declared_patch_sha256}, {size} "
                            f"bytes) on pin tree {doc.pin_tree}; status exactly "
                            f"{expected_status(doc.touches)}, ignored files included")
