"""Pass rules of stage 01 (build): source identity, exact patch, the GGML and Core ML builds."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Sequence

from verifylib.canonical import is_sha256
from verifylib.evidence import identities
from verifylib.evidence.build.schema import (
    CoremlBuildEvidence,
    FailedBuild,
    GgmlBuildEvidence,
    PatchEvidence,
    SourceEvidence,
    parse_build,
    parse_coreml_build,
)
from verifylib.evidence.fields import SchemaError
from verifylib.evidence.gates import (
    BUILD_COREML,
    BUILD_GGML,
    BUILD_PATCH_EXACT,
    BUILD_SOURCE_IDENTITY,
    Judgement,
    Status,
)
from verifylib.evidence.judging import cited_pins, pin_problems, stream_problems
from verifylib.evidence.records import EvidenceView
from verifylib.runtime import contracts
from verifylib.whispercpp.build import links_runtime_dynamically
from verifylib.whispercpp.build_options import (
    GGML_BACKENDS,
    UNPATCHED_VARIANTS,
    backend_of_options,
    backend_options,
    backend_pin_names,
)
from verifylib.whispercpp.source.patch import expected_status, phase_problems
from verifylib.whispercpp.source.pins import is_oid
from verifylib.whispercpp.system_info import parse_system_info


def _rule_source(ev: EvidenceView) -> Judgement:
    doc = ev.json("source")
    problems = pin_problems(doc, ev)
    if problems:
        return Judgement(Status.FAIL, "; ".join(problems))
    return judge_source_identity(doc)


def _malformed(exc: SchemaError) -> Judgement:
    return Judgement.failed(f"malformed evidence: {exc}")


def _rule_patch(ev: EvidenceView) -> Judgement:
    doc = ev.json("patch")
    problems = pin_problems(doc, ev)
    if problems:
        return Judgement(Status.FAIL, "; ".join(problems))
    try:
        parsed = PatchEvidence.from_json(doc)
    except SchemaError as exc:
        return _malformed(exc)
    pin = cited_pins(ev).pins[parsed.pin]
    if parsed.patch_file != pin.patch_path.name:
        return Judgement(Status.FAIL, f"patch file {parsed.patch_file!r} is not the manifest's "
                                      f"{pin.patch_path.name!r}")
    return judge_patch_exact(parsed)


def _rule_ggml(ev: EvidenceView) -> Judgement:
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
    j = judge_ggml_build(parsed, stream)
    if isinstance(parsed, GgmlBuildEvidence):
        bound = _identity_problems(ev.identities, parsed.ggml_backend,
                                   identities.BINARY_GGML_BACKEND)
        if bound:
            return Judgement.failed("; ".join(([j.detail] if j.status is Status.FAIL else [])
                                              + bound))
    return j


def _identity_problems(ids: Any, recorded: str | None, key: str) -> list[str]:
    """List why the gate does not bind the backend its evidence records (none if unrecorded)."""
    have = ids.get(key) if hasattr(ids, "get") else None
    if have != recorded:
        return [f"identity {key} is {have!r}, but the evidence records ggml backend "
                f"{recorded!r}"]
    return []


def backend_problems(options: Any, recorded: str | None, logged: str | None, text: str,
                     system_info: str | None, what: str) -> tuple[list[str], str]:
    """Check a build's ggml backend: pinned by its options, chosen by its probe launch.

    A backend is recorded (``recorded``) when the build's options pin one. Then the
    options must hold every pin of :func:`~verifylib.whispercpp.build_options.backend_options`;
    the probe's stored log, read again with
    :func:`~verifylib.runtime.contracts.launch_backend`, must give the value its record
    states (``logged``) and the recorded backend: for ``cpu``, the line
    ``whisper_backend_init_gpu: no GPU found`` and no ``using … backend`` line (a GPU or
    BLAS chosen at run time fails); for ``metal``, a ``using MTL<n> backend`` line and
    nothing else. The ``system_info`` line shows what is compiled in: an ``MTL`` section
    exactly for ``metal``, and never Accelerate (both pins turn it off).

    Evidence from before the pins existed records no backend: accepted as "not
    recorded" when its options hold none of the pinned keys and its probe no backend.

    Parameters
    ----------
    options : mapping
        The build's recorded CMake options.
    recorded : str or None
        The evidence's ``ggml_backend``.
    logged : str or None
        The backend the probe's record states.
    text : str
        The probe's stored streams.
    system_info : str or None
        The probe's ``system_info:`` line, read from ``text``.
    what : str
        The probe's name, for messages (``the probe``, ``whisper-bench``).

    Returns
    -------
    problems : list of str
        Empty when the backend holds (or is honestly not recorded).
    note : str
        The clause a PASS detail names it with.
    """
    opts = options if isinstance(options, dict) else {}
    if recorded is None:
        pinned = [k for k in backend_pin_names() if k in opts]
        if pinned or logged is not None:
            return [f"no ggml_backend recorded, yet the options set {pinned} and {what} "
                    f"records backend {logged!r}"], ""
        return [], "ggml backend not recorded (a build from before backends were pinned)"
    if recorded not in GGML_BACKENDS:
        return [f"ggml_backend {recorded!r} is not one of {GGML_BACKENDS}"], ""
    problems = []
    if backend_of_options(opts) != recorded:
        wrong = sorted(k for k, v in backend_options(recorded).items() if opts.get(k) != v)
        problems.append(f"CMake options {wrong} do not pin ggml backend {recorded!r}")
    seen = contracts.launch_backend(text)
    if logged != seen:
        problems.append(f"{what}'s record says it chose backend {logged!r}, its log says "
                        f"{seen!r}")
    if seen != recorded:
        why = (" (no backend line: the launch never initialized a state)"
               if seen == contracts.BACKEND_NOT_REPORTED else "")
        problems.append(f"built for ggml backend {recorded!r}, but {what} chose {seen!r}{why}")
    if system_info is not None:
        metal_in = contracts.METAL_DEVICE_PREFIX in contracts.system_info_registries(system_info)
        if metal_in != (recorded == contracts.BACKEND_METAL):
            problems.append(f"system_info {'lists' if metal_in else 'lacks'} the Metal backend "
                            f"({contracts.METAL_DEVICE_PREFIX}) on a {recorded!r} build")
        if contracts.ACCELERATE_FEATURE in system_info:
            problems.append(f"system_info shows {contracts.ACCELERATE_FEATURE!r}, which "
                            "GGML_ACCELERATE=OFF compiles out")
    chose = (f"{contracts.BACKEND_NO_GPU_MARKER!r} and no GPU or BLAS backend"
             if recorded == contracts.BACKEND_CPU else f"backend {seen!r}")
    return problems, f"ggml backend {recorded!r} pinned, {what} logged {chose}"


def judge_coreml_build(ev: Any, bench_stderr: bytes, bench_stdout: bytes) -> Judgement:
    """Judge ``build.coreml`` on stored evidence.

    PASS iff the build exists with a well-formed SHA-256 equal to its recorded one, is the
    ``coreml`` variant with ``WHISPER_COREML=1``, ``WHISPER_COREML_ALLOW_FALLBACK=OFF`` and
    ``BUILD_SHARED_LIBS=OFF``, links no ``libwhisper``/``libggml``, sits in its own folder
    (named by its key, not the GGML build's), the patched tree was still exact after the
    build, and the ``whisper-bench`` built with the same options and source printed a
    ``system_info`` line with ``COREML = 1`` without crashing or timing out, and the
    ggml backend holds (:func:`backend_problems`, on the bench's launch: the hybrid
    runs' decoder backend).

    ``ev`` is the ``coreml_build`` document (a mapping, parsed here with
    :func:`~verifylib.evidence.build.schema.parse_coreml_build`) or its parsed form; a
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
    both = text + "\n" + bench_stdout.decode("utf-8", "replace")
    line, _ = parse_system_info(text)
    backend, note = backend_problems(opts, doc.ggml_backend, bench.backend, both, line,
                                     "whisper-bench")
    problems += backend
    if problems:
        return Judgement.failed("; ".join(problems))
    return Judgement.passed(f"static Core ML whisper-cli sha256 {sha} "
                            f"(WHISPER_COREML=1, fallback OFF) "
                            f"in its own folder; {contracts.COREML_ON!r} read from "
                            f"whisper-bench built "
                            f"with the same options ({label}); {note}")


def _rule_coreml(ev: EvidenceView) -> Judgement:
    def stream(name: str) -> bytes:
        return ev.bytes(name) if ev.has(name) else b""
    doc = ev.json("coreml_build")
    j = judge_coreml_build(doc, stream("bench_stderr"), stream("bench_stdout"))
    try:
        parsed = parse_coreml_build(doc)
    except SchemaError:
        return j
    if not isinstance(parsed, CoremlBuildEvidence):
        return j
    bound = _identity_problems(ev.identities, parsed.ggml_backend,
                               identities.BINARY_COREML_BACKEND)
    # The hybrid runs compare against the GGML leg: the same decoder backend on both sides
    # makes a WER difference the encoder's. The gate binds the GGML build's backend when
    # there is one, and ``verify`` holds that binding to the identity table.
    ggml = ev.identities.get(identities.BINARY_GGML_BACKEND)
    if ggml is not None and ggml != parsed.ggml_backend:
        bound.append(f"the Core ML build's ggml backend {parsed.ggml_backend!r} (the hybrid "
                     f"decoder's) is not the GGML build's {ggml!r}")
    if bound:
        return Judgement.failed("; ".join(([j.detail] if j.status is Status.FAIL else [])
                                          + bound))
    return j


RULES: dict[str, Callable[[EvidenceView], Judgement]] = {
    BUILD_SOURCE_IDENTITY: _rule_source,
    BUILD_PATCH_EXACT: _rule_patch,
    BUILD_GGML: _rule_ggml,
    BUILD_COREML: _rule_coreml,
}
"""Gate id to judge, for the gates of stage 01."""


def judge_ggml_build(evidence: Any, system_info_text: str, *,
                     expect_variant: str = "ggml") -> Judgement:
    """Re-judge ``build.ggml`` from stored evidence and the probe's captured output.

    Parameters
    ----------
    evidence : mapping or GgmlBuildEvidence or FailedBuild
        :func:`build_evidence` output, or ``{"built": False, "error": ...}`` (parsed here
        with :func:`~verifylib.evidence.build.schema.parse_build`), or its parsed form.
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
        exited 0 with no signal or timeout, its ``system_info:`` line contains
        ``COREML = 0`` (not ``COREML = 1``), and its ggml backend holds
        (:func:`backend_problems`: pinned by the options, chosen by the probe launch, or
        not recorded by a build from before the pins); FAIL otherwise, with the reason (a
        document that does not parse is a FAIL naming the field).
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
    backend, note = backend_problems(
        doc.options, doc.ggml_backend, doc.probe.backend if doc.probe is not None else None,
        system_info_text if isinstance(system_info_text, str) else "", line, "the probe")
    problems += backend
    if problems:
        return Judgement.failed("; ".join(problems))
    return Judgement.passed(f"static whisper-cli [{expect_variant}] sha256 {sha}; probe exit 0; "
                            f"system_info shows {contracts.COREML_OFF!r}; {note}")


def judge_source_identity(evidence: Any) -> Judgement:
    """Re-judge ``build.source_identity`` from stored evidence.

    Parameters
    ----------
    evidence : mapping or SourceEvidence
        The ``source`` document (parsed here with
        :meth:`~verifylib.evidence.build.schema.SourceEvidence.from_json`) or its parsed
        form; it holds ``computed_tree`` (tree id of the obtained folder) and ``pin_tree``.

    Returns
    -------
    Judgement
        PASS iff both are 40 lower-case hex digits and equal, FAIL otherwise (also when
        the document does not parse); with the reason, which names the files macOS
        writes on its own that the origin records (``os_litter``), if any.
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
        litter = (doc.origin or {}).get("os_litter")
        why = ""
        if isinstance(litter, list) and litter:
            # Never skipped by the tree id (git's own), so named as the likely cause.
            shown = ", ".join(str(f) for f in litter[:5])
            more = f" and {len(litter) - 5} more" if len(litter) > 5 else ""
            why = (f"; the source holds files macOS writes on its own ({shown}{more}), "
                   "which the tree id counts: remove them from the folder or archive")
        return Judgement.failed(f"source tree id {computed} is not the pin's {pinned}{why}")
    return Judgement.passed(f"source tree id {computed} equals the pin's tree")


def judge_patch_exact(evidence: Any,
                      required: Sequence[str] = ("before", "after")) -> Judgement:
    """Re-judge ``build.patch_exact`` from stored evidence.

    Parameters
    ----------
    evidence : mapping or PatchEvidence
        As made by :func:`patch_evidence` (parsed here with
        :meth:`~verifylib.evidence.build.schema.PatchEvidence.from_json`), or its parsed
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
