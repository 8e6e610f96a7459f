"""Pass rules of stage 01 (build): source identity, exact patch, the GGML and the Core ML builds.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from verifylib.canonical import is_sha256
from verifylib.evidence.gates import Judgement, Status
from verifylib.evidence.rules.common import pin_problems, stream_problems
from verifylib.runtime import contracts
from verifylib.whispercpp import source as _source
from verifylib.whispercpp.build import (UNPATCHED_VARIANTS, links_runtime_dynamically,
                                        parse_system_info)
from verifylib.whispercpp.source.patch import expected_status, phase_problems
from verifylib.whispercpp.source.pins import is_oid


def _rule_source(ev) -> Judgement:
    doc = ev.json("source")
    problems = pin_problems(doc)
    if problems:
        return Judgement(Status.FAIL, "; ".join(problems))
    return judge_source_identity(doc)


def _rule_patch(ev) -> Judgement:
    doc = ev.json("patch")
    problems = pin_problems(doc)
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
    return judge_patch_exact(doc)


def _rule_ggml(ev) -> Judgement:
    doc = ev.json("build")
    if not ev.has("probe_stderr"):
        return judge_ggml_build(doc, "")
    bound = stream_problems(ev, doc.get("probe") if isinstance(doc, Mapping) else None,
                             {"stderr_sha256": "probe_stderr", "stdout_sha256": "probe_stdout"})
    if bound:
        return Judgement(Status.FAIL, "; ".join(bound))
    stream = ev.text("probe_stderr") + "\n" + ev.text("probe_stdout")
    return judge_ggml_build(doc, stream)


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


RULES: dict[str, Callable[[Any], Judgement]] = {
    "build.source_identity": _rule_source,
    "build.patch_exact": _rule_patch,
    "build.ggml": _rule_ggml,
    "build.coreml": _rule_coreml,
}
"""Gate id to judge, for the gates of stage 01."""


def judge_ggml_build(evidence: Mapping[str, Any], system_info_text: str, *,
                     expect_variant: str = "ggml") -> Judgement:
    """Re-judge ``build.ggml`` from stored evidence and the probe's captured output.

    Parameters
    ----------
    evidence : mapping
        :func:`build_evidence` output, or ``{"built": False, "error": ...}``.
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
        ``COREML = 0`` (not ``COREML = 1``); FAIL otherwise, with the reason.
    """
    if not isinstance(evidence, Mapping):
        return Judgement.failed("evidence is not a mapping")
    if evidence.get("built") is not True:
        return Judgement.failed(f"no build: {evidence.get('error', 'unknown reason')}")
    problems: list[str] = []
    if evidence.get("variant") != expect_variant:
        problems.append(f"variant is {evidence.get('variant')!r}, not {expect_variant!r}")
    sha = evidence.get("sha256")
    if not is_sha256(sha):
        problems.append(f"binary sha256 malformed: {sha!r}")
    elif evidence.get("recorded_sha256") != sha:
        problems.append(f"binary sha256 {sha} is not the recorded {evidence.get('recorded_sha256')!r}")
    if expect_variant not in UNPATCHED_VARIANTS and not is_sha256(evidence.get("patch_sha256")):
        problems.append(f"patch sha256 malformed: {evidence.get('patch_sha256')!r}")
    libs = evidence.get("needed_libs")
    if not isinstance(libs, list) or not all(isinstance(x, str) for x in libs):
        problems.append(f"needed_libs malformed: {libs!r}")
    elif links_runtime_dynamically(libs) or evidence.get("static") is not True:
        problems.append(f"not static: needs {libs}")
    probe = evidence.get("probe")
    if not isinstance(probe, Mapping):
        problems.append("no probe run recorded")
    else:
        argv = probe.get("argv")
        if not isinstance(argv, list) or not argv or argv[0] != evidence.get("binary"):
            problems.append(f"probe did not run the published binary: {argv!r}")
        elif any(a in contracts.FORBIDDEN_FLAGS for a in argv):
            problems.append(f"probe used a forbidden flag: {argv!r}")
        rc = probe.get("returncode")
        if probe.get("timed_out") is not False or probe.get("signal") is not None or \
                not isinstance(rc, int) or isinstance(rc, bool) or rc != 0:
            problems.append(f"probe did not exit 0 cleanly (returncode {rc!r}, signal "
                            f"{probe.get('signal')!r}, timed out {probe.get('timed_out')!r})")
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


def judge_source_identity(evidence: Mapping[str, Any]) -> Judgement:
    """Re-judge ``build.source_identity`` from stored evidence.

    Parameters
    ----------
    evidence : mapping
        Holds ``computed_tree`` (tree id of the obtained folder) and ``pin_tree``.

    Returns
    -------
    Judgement
        PASS iff both are 40 lower-case hex digits and equal, FAIL otherwise; with the
        reason.
    """
    if not isinstance(evidence, Mapping):
        return Judgement.failed("evidence is not a mapping")
    computed, pinned = evidence.get("computed_tree"), evidence.get("pin_tree")
    for label, val in (("computed tree id", computed), ("pin tree id", pinned)):
        if not is_oid(val):
            return Judgement.failed(f"{label} malformed: {val!r}")
    if computed != pinned:
        return Judgement.failed(f"source tree id {computed} is not the pin's {pinned}")
    return Judgement.passed(f"source tree id {computed} equals the pin's tree")


def judge_patch_exact(evidence: Mapping[str, Any],
                      required: Sequence[str] = ("before", "after")) -> Judgement:
    """Re-judge ``build.patch_exact`` from stored evidence.

    Parameters
    ----------
    evidence : mapping
        As made by :func:`patch_evidence`: the pin's declared ``pin_tree``,
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
        with the reason.
    """
    if not isinstance(evidence, Mapping):
        return Judgement.failed("evidence is not a mapping")
    checks = evidence.get("checks")
    if not isinstance(checks, Mapping):
        return Judgement.failed("evidence has no checks")
    problems: list[str] = []
    if "apply_error" in checks:
        problems.append(f"patch did not apply: {checks['apply_error']}")
    for when in required:
        phase = checks.get(when)
        if not isinstance(phase, Mapping):
            problems.append(f"{when}: check missing")
            continue
        problems += [f"{when}: {p}" for p in phase_problems(evidence, phase)]
    if problems:
        return Judgement.failed("; ".join(problems))
    last = checks[required[-1]] if required else {}
    return Judgement.passed(f"{' and '.join(required)} the build: git diff equals the declared patch "
                            f"(sha256 {evidence['declared_patch_sha256']}, {last.get('patch_file_bytes')} "
                            f"bytes) on pin tree {evidence['pin_tree']}; status exactly "
                            f"{expected_status(evidence['touches'])}, ignored files included")
