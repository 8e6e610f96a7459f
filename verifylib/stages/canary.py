"""Stage 03_canary: the batch-lifecycle A/B, its sanitizer runs, the Core ML controls.

``canary.lifecycle_ab`` (any OS; physical on Linux): the unpatched and the patched static
GGML ``whisper-cli`` are each run N times (parameter ``canary.runs``) with the lifecycle
trigger (docs/runtime-contract.md §6.2), ``-nfa -dtw large.v3`` on the tree's own test
model, which makes ``whisper_init_state`` free its state before ``whisper_batch_init`` --
the same early return as a Core ML load failure. PASS iff the patched build gives N/N exit
3 with the ``aheads_masks_init()`` failure line and the init-failure line and no signal;
the unpatched outcomes are recorded as evidence of the defect, not gated.

``canary.sanitizer`` (any OS, informational): the same trigger on the AddressSanitizer
builds stage 01 left (unpatched and patched), a few runs each with fixed ``ASAN_OPTIONS``;
PASS iff the unpatched build prints a sanitizer report and the patched one exits 3 with
both markers and none. It supports the A/B and never replaces it.

``canary.coreml_negative`` (macOS): only the ``ggml-*.bin`` copied into a scratch folder
and the Core ML build run once -- no warm-up, no retry. ``canary.coreml_positive``
(macOS): one warm-up and one measured run with the ``.mlmodelc`` at the derived path;
both wall times and whisper.cpp's ``encode time`` are recorded and the measured run alone
is classified by the four conditions of docs/runtime-contract.md §2.3.

The physical work is in :func:`lifecycle_ab`, :func:`coreml_negative` and
:func:`coreml_positive`, which take the binaries and files as arguments, so tests drive
the macOS code paths with a fake runtime; :func:`run` only picks the inputs from the run
directory and lets :meth:`StageContext.begin` decide, by the host's real capabilities,
whether a gate runs. Every marker, exit code and classifier comes from
:mod:`verifylib.runtime.contracts`; the registered rules re-run those classifiers on the stored
streams, so ``verifylib verify`` re-judges them.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Mapping

from verifylib.canonical import sha256_file, tree_digest
from verifylib.errors import ParametersInvalid, PrerequisiteBroken
from verifylib.evidence import identities
from verifylib.evidence.canary.result import (
    CanaryResult,
    LifecycleSummary,
    NegativeControl,
    PositiveControl,
    SanitizerSummary,
    canary_result_from_evidence,
)
from verifylib.evidence.canary.rules import asan_stream_name, seam_stream_name, stream_name
from verifylib.evidence.canary.schema import (
    SIDES,
    AsanBuild,
    CoremlDigests,
    FileRef,
    LifecycleEvidence,
    LifecycleRun,
    LifecycleSide,
    LifecycleSides,
    NegativeEvidence,
    PositiveEvidence,
    PositiveRun,
    PositiveTimeouts,
    SanitizerEvidence,
    SanitizerRun,
    SanitizerSide,
    SanitizerSides,
)
from verifylib.evidence.canary.seam_schema import (
    SeamEncoderRef,
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
)
from verifylib.evidence.records import EvidenceRef
from verifylib.evidence.run_record import RunRecord, SeamExecutorRecord
from verifylib.evidence.stage_report import StageReport
from verifylib.params import Params
from verifylib.runtime import contracts
from verifylib.runtime import sanitizer as _sanitizer
from verifylib.runtime.contracts import coreml_argv, lifecycle_argv  # noqa: F401  (argv builders used below)
from verifylib.runtime.contracts.seam import SEAM_SIDES
from verifylib.runtime.runner import RunResult, run_record, run_whisper_cli
from verifylib.stages.artifacts import (
    asan_build,
    coreml_binary,
    ggml_binary,
    model_language,
    published_model,
    runtime_tree,
    unpatched_binary,
    user_pin_evidence,
)
from verifylib.stages.context import StageContext
from verifylib.stages.seam import executor_record, seam_build, seam_encoder, seam_launch

STAGE = "03_canary"


# ----------------------------------------------------------------------------- lifecycle A/B

def run_lifecycle(sides: Mapping[str, Path], model: Path, audio: Path, runs: int, timeout: float,
                  *, progress: bool = True,
                  preset: str = contracts.LIFECYCLE_DTW_PRESET,
                  env_extra: Mapping[str, str] | None = None,
                  desc: str = "lifecycle A/B") -> dict[str, list[RunResult]]:
    """Run each binary ``runs`` times with the lifecycle trigger, interleaved, no retry.

    Parameters
    ----------
    sides : mapping
        Side name (``"unpatched"``, ``"patched"``) to a whisper-cli binary.
    model, audio : Path
        The whisper.cpp tree's test model and sample.
    runs : int
        Runs per side.
    timeout : float
        Seconds per run.
    progress : bool
        Show a plain-text tqdm bar (no widget: the report carries no JavaScript).
    preset : str, default contracts.LIFECYCLE_DTW_PRESET
        The ``-dtw`` alignment-heads preset of the trigger (one whose heads the model lacks).
    env_extra : mapping, optional
        Variables every run gets on top of the runner's environment (``ASAN_OPTIONS``).
    desc : str
        The progress bar's label.

    Returns
    -------
    dict
        Side to its :class:`RunResult` list, in run order.

    Raises
    ------
    verifylib.errors.ParametersInvalid
        If ``runs`` is not a positive integer.
    """
    import tqdm
    if isinstance(runs, bool) or not isinstance(runs, int) or runs < 1:
        raise ParametersInvalid(f"runs per side (key canary.runs of the parameters) must be a "
                                f"positive integer, got {runs!r}")
    out: dict[str, list[RunResult]] = {side: [] for side in sides}
    bar = tqdm.tqdm(total=runs * len(sides), desc=desc, unit="run", file=sys.stdout,
                    mininterval=1.0, ascii=True, disable=not progress)
    try:
        for _ in range(runs):
            for side, binary in sides.items():
                out[side].append(run_whisper_cli(lifecycle_argv(binary, model, audio, preset),
                                                 timeout=timeout, env_extra=env_extra))
                bar.update(1)
    finally:
        bar.close()
    return out


def lifecycle_ab(ctx: StageContext, *, patched: tuple[Path, str],
                 unpatched: tuple[Path, str] | str, model: Path, audio: Path, runs: int,
                 timeout: float, progress: bool = True,
                 preset: str = contracts.LIFECYCLE_DTW_PRESET
                 ) -> tuple[list[EvidenceRef], dict[str, Any]]:
    """Run the lifecycle A/B and write its evidence.

    Parameters
    ----------
    ctx : StageContext
        Where the evidence goes.
    patched : (Path, str)
        The patched binary and its SHA-256 (re-hashed before use).
    unpatched : (Path, str) or str
        The unpatched binary and its digest, or the reason it is not available (the A side
        is evidence, not gated).
    model, audio : Path
        The tree's test model and sample.
    runs : int
        Runs per side.
    timeout : float
        Seconds per run.
    progress : bool
        Show a plain-text progress bar (see :func:`run_lifecycle`).
    preset : str, default contracts.LIFECYCLE_DTW_PRESET
        The ``-dtw`` alignment-heads preset of the trigger (one whose heads the model lacks).

    Returns
    -------
    (list of EvidenceRef, dict)
        The evidence (the ``lifecycle`` document and every distinct stream) and the
        identities it binds to.
    """
    bins = {}
    shas: dict[str, str] = {}
    sides: dict[str, LifecycleSide] = {}
    for side, val in (("unpatched", unpatched), ("patched", patched)):
        if isinstance(val, str):
            sides[side] = LifecycleSide(available=False, reason=val)
            continue
        path, sha = Path(val[0]), val[1]
        if sha256_file(path) != sha:
            raise PrerequisiteBroken(f"{side} whisper-cli {path} does not hash to {sha}")
        bins[side] = path
        shas[side] = sha
    if "patched" not in bins:
        raise PrerequisiteBroken("the patched whisper-cli is required")
    results = run_lifecycle(bins, model, audio, runs, timeout, progress=progress, preset=preset)
    streams: dict[str, bytes] = {}
    for side, res_list in results.items():
        sides[side] = recorded_side(side, bins[side], shas[side], res_list,
                                    contracts.classify_lifecycle, streams)
    doc = LifecycleEvidence(
        runs_per_side=runs, timeout_s=timeout,
        trigger=tuple(contracts.lifecycle_trigger_args(preset)),
        model=FileRef(path=str(model), sha256=sha256_file(model)),
        audio=FileRef(path=str(audio), sha256=sha256_file(audio)),
        sides=LifecycleSides(unpatched=sides["unpatched"], patched=sides["patched"]))
    refs = [ctx.write_json("lifecycle", doc.to_json())]
    refs += [ctx.write_bytes(stream_name(sha), data, f"{stream_name(sha)}.txt")
             for sha, data in sorted(streams.items())]
    ids = {identities.BINARY_GGML: shas["patched"]}
    if doc.sides.unpatched.available:
        ids[identities.BINARY_GGML_UNPATCHED] = shas["unpatched"]
    _result(ctx).lifecycle = LifecycleSummary.from_evidence(doc)
    return refs, ids


def recorded_side(side: str, binary: Path, sha: str, results: list[RunResult],
                  classify: Callable[..., contracts.Classification],
                  streams: dict[str, bytes]) -> LifecycleSide:
    """Record one available A/B side: each run classified, counted, its streams kept.

    Parameters
    ----------
    side : str
        The side's name (evidence paths name it).
    binary : Path
        The binary that ran.
    sha : str
        Its digest.
    results : list of RunResult
        Its runs, in order.
    classify : callable
        The classifier the rule re-runs (:func:`verifylib.runtime.contracts.classify_lifecycle`
        for the lifecycle A/B, ``classify_negative`` for the seam's negative control).
    streams : dict
        Receives every run's streams by digest.

    Returns
    -------
    LifecycleSide
    """
    rows = []
    for i, r in enumerate(results):
        rec = run_record(r)
        outcome = classify(rec, r.stderr, r.stdout).outcome
        rows.append(LifecycleRun.from_json({**rec, "index": i, "outcome": outcome},
                                           f"sides.{side}.runs[{i}]"))
        streams[r.stderr_sha256], streams[r.stdout_sha256] = r.stderr, r.stdout
    return LifecycleSide(available=True, binary=str(binary), binary_sha256=sha,
                         runs=tuple(rows),
                         counts=dict(sorted(Counter(x.outcome for x in rows).items())))


def _result(ctx: StageContext) -> CanaryResult:
    if ctx.result is None:
        ctx.result = CanaryResult()
    if not isinstance(ctx.result, CanaryResult):  # a context is one stage's: a harness bug
        raise TypeError(f"stage {ctx.stage} holds a {type(ctx.result).__name__}, not the "
                        f"CanaryResult stage 03 fills")
    return ctx.result


# ----------------------------------------------------------------------------- ASan canary

_BUILD_FIELDS = AsanBuild.FIELDS


def sanitizer_ab(ctx: StageContext, *, builds: Mapping[str, Mapping[str, Any] | str], pin: str,
                 model: Path, audio: Path, timeout: float, progress: bool = True,
                 preset: str = contracts.LIFECYCLE_DTW_PRESET
                 ) -> tuple[list[EvidenceRef], dict[str, Any]]:
    """Run the lifecycle trigger on both AddressSanitizer builds and write the evidence.

    Each available side runs :data:`verifylib.runtime.sanitizer.RUNS_PER_SIDE` times, interleaved,
    with :data:`verifylib.runtime.sanitizer.ASAN_OPTIONS`; every run's streams are stored and its
    sanitizer report parsed (:func:`verifylib.runtime.sanitizer.parse_report`). A side whose build
    is missing is recorded with the reason (the rule then fails: the gate needs both).

    Parameters
    ----------
    ctx : StageContext
        Where the evidence goes.
    builds : mapping
        ``"unpatched"`` / ``"patched"`` -> the build record stage 01 left
        (:func:`verifylib.stages.artifacts.asan_build`) or why there is none.
    pin : str
        The runtime pin (the rule checks each build against it).
    model, audio : Path
        The tree's test model and sample.
    timeout : float
        Seconds per run.
    progress : bool
        Show a plain-text progress bar (see :func:`run_lifecycle`).
    preset : str, default contracts.LIFECYCLE_DTW_PRESET
        The ``-dtw`` alignment-heads preset of the trigger (one whose heads the model lacks).

    Returns
    -------
    (list of EvidenceRef, dict)
        The ``sanitizer`` document and every distinct stream, and the identities of the
        binaries that ran.
    """
    bins: dict[str, Path] = {}
    shas: dict[str, str] = {}
    build_of: dict[str, AsanBuild] = {}
    sides: dict[str, SanitizerSide] = {}
    for side in SIDES:
        b = builds[side]
        if isinstance(b, str):
            sides[side] = SanitizerSide(available=False, reason=b)
            continue
        bins[side], build_of[side] = _asan_build(side, b)
        shas[side] = b["sha256"]
    results = (run_lifecycle(bins, model, audio, _sanitizer.RUNS_PER_SIDE, timeout,
                             progress=progress, preset=preset,
                             env_extra=_sanitizer.sanitizer_env(), desc="ASan")
               if bins else {})
    streams: dict[str, bytes] = {}
    for side, res_list in results.items():
        sides[side] = SanitizerSide(available=True, binary=str(bins[side]),
                                    binary_sha256=shas[side], build=build_of[side],
                                    runs=_sanitizer_runs(side, res_list, streams))
    doc = SanitizerEvidence(
        runs_per_side=_sanitizer.RUNS_PER_SIDE, timeout_s=timeout,
        trigger=tuple(contracts.lifecycle_trigger_args(preset)),
        asan_options=_sanitizer.ASAN_OPTIONS,
        external_symbolizer=_sanitizer.external_symbolizer(), pin=pin,
        model=FileRef(path=str(model), sha256=sha256_file(model)),
        audio=FileRef(path=str(audio), sha256=sha256_file(audio)),
        sides=SanitizerSides(unpatched=sides["unpatched"], patched=sides["patched"]))
    refs = [ctx.write_json("sanitizer", doc.to_json())]
    refs += [ctx.write_bytes(asan_stream_name(sha), data, f"{asan_stream_name(sha)}.txt")
             for sha, data in sorted(streams.items())]
    ids = {_sanitizer.SIDES[side][1]: shas[side] for side in bins}
    _result(ctx).sanitizer = SanitizerSummary.from_evidence(doc)
    return refs, ids


def _asan_build(side: str, b: Mapping[str, Any]) -> tuple[Path, AsanBuild]:
    """Check one side's AddressSanitizer build as stage 01 recorded it; binary and record."""
    path = Path(b["binary"])
    if sha256_file(path) != b["sha256"]:
        raise PrerequisiteBroken(f"{side} ASan whisper-cli {path} does not hash to "
                                 f"{b['sha256']}")
    try:
        build = AsanBuild.from_json({k: b.get(k) for k in _BUILD_FIELDS}, f"{side} build")
    except SchemaError as exc:
        raise PrerequisiteBroken(f"stage 01's {side} AddressSanitizer build record is "
                                 f"malformed: {exc}") from None
    return path, build


def _sanitizer_runs(side: str, res_list: list[RunResult], streams: dict[str, bytes]
                    ) -> tuple[SanitizerRun, ...]:
    """Record one side's runs, each sanitizer report parsed; their streams go to ``streams``."""
    rows = []
    for i, r in enumerate(res_list):
        rec = run_record(r)
        outcome = contracts.classify_lifecycle(rec, r.stderr, r.stdout).outcome
        rows.append(SanitizerRun.from_json(
            {**rec, "index": i, "outcome": outcome,
             "report": _sanitizer.report_evidence(r.stderr)}, f"sides.{side}.runs[{i}]"))
        streams[r.stderr_sha256] = r.stderr
        streams[r.stdout_sha256] = r.stdout
    return tuple(rows)


# ----------------------------------------------------------------------------- Core ML negative

def coreml_negative(ctx: StageContext, *, binary: Path, binary_sha256: str, model_file: Path,
                    audio: Path, timeout: float, language: str,
                    scratch_parent: Path | None = None
                    ) -> tuple[list[EvidenceRef], dict[str, Any]]:
    """Run the fail-closed negative control (docs/runtime-contract.md §2.4) and write it.

    One run, no warm-up, no retry. Only the ``ggml-*.bin`` is copied into a fresh scratch
    folder (its ``.mlmodelc`` is deliberately left behind), and the Core ML build runs once
    on it. The first result is the evidence.

    Parameters
    ----------
    ctx : StageContext
        Where the evidence goes.
    binary : Path
        The Core ML whisper-cli build.
    binary_sha256 : str
        Its recorded SHA-256 (re-hashed before use).
    model_file : Path
        The ``ggml-*.bin`` copied alone into the scratch folder.
    audio : Path
        The audio to transcribe.
    timeout : float
        Seconds for the one run.
    language : str
        The decoding language passed to whisper-cli.
    scratch_parent : Path, optional
        Where the scratch folder is made (default: the system temporary directory).

    Returns
    -------
    (list of EvidenceRef, dict)
        The ``negative`` document with both streams, and the identities.

    Raises
    ------
    verifylib.errors.ParametersInvalid
        If ``model_file`` is not a ``ggml-*.bin``.
    verifylib.errors.PrerequisiteBroken
        If ``binary`` no longer hashes to ``binary_sha256``.
    """
    model_file = Path(model_file)
    if not (model_file.name.startswith("ggml-") and model_file.name.endswith(".bin")):
        raise ParametersInvalid(f"model_file: the negative control copies a ggml-*.bin, got "
                                f"{model_file.name}")
    if sha256_file(binary) != binary_sha256:
        raise PrerequisiteBroken(f"{binary} does not hash to {binary_sha256}")
    model_sha = sha256_file(model_file)
    scratch = Path(tempfile.mkdtemp(prefix="verifylib-negative-", dir=scratch_parent))
    try:
        model_arg = str(scratch / model_file.name)
        shutil.copyfile(model_file, model_arg)
        listing = sorted(p.name for p in scratch.iterdir())
        res = run_whisper_cli(coreml_argv(binary, model_arg, audio, language), timeout=timeout)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    rec = run_record(res)
    c = contracts.classify_negative(rec, res.stderr, res.stdout)
    doc = NegativeEvidence(
        binary=str(binary), binary_sha256=binary_sha256, model_sha256=model_sha,
        model_arg=model_arg, scratch_listing=tuple(listing),
        derived_mlmodelc=contracts.coreml_encoder_path(model_arg), attempts=1,
        timeout_s=timeout, run=RunRecord.from_json(rec, "run"), outcome=c.outcome)
    refs = [ctx.write_json("negative", doc.to_json()),
            ctx.write_bytes("negative_stderr", res.stderr, "negative.stderr.txt"),
            ctx.write_bytes("negative_stdout", res.stdout, "negative.stdout.txt")]
    _result(ctx).negative = NegativeControl.from_evidence(doc, res.stderr, res.stdout)
    return refs, {identities.BINARY_COREML: binary_sha256, identities.MODEL_GGML: model_sha}


# ----------------------------------------------------------------------------- Core ML positive

def coreml_positive(ctx: StageContext, *, binary: Path, binary_sha256: str, model_arg: str,
                    audio: Path, first_timeout: float, timeout: float,
                    language: str) -> tuple[list[EvidenceRef], dict[str, Any]]:
    """Run the positive gate (docs/runtime-contract.md §2.3, §6.3) and write its evidence.

    One warm-up, one measured run. The ``.mlmodelc`` must sit at
    ``coreml_encoder_path(model_arg)``. The warm-up gets the generous first-run timeout
    (on-device compilation) and is recorded, not classified; the measured run is classified
    alone. Both wall times and whisper.cpp's ``encode time`` are recorded; the ``.mlmodelc``
    tree digest is taken before and after.

    Parameters
    ----------
    ctx : StageContext
        Where the evidence goes.
    binary : Path
        The Core ML whisper-cli build.
    binary_sha256 : str
        Its recorded SHA-256 (re-hashed before use).
    model_arg : str
        The model path passed to whisper-cli; the encoder is derived from it.
    audio : Path
        The audio to transcribe.
    first_timeout : float
        Seconds for the warm-up run (on-device compilation).
    timeout : float
        Seconds for the measured run.
    language : str
        The decoding language passed to whisper-cli.

    Returns
    -------
    (list of EvidenceRef, dict)
        The ``positive`` document with the measured run's streams (and the warm-up's),
        and the identities.

    Raises
    ------
    verifylib.errors.PrerequisiteBroken
        If ``binary`` no longer hashes to ``binary_sha256``.
    """
    if sha256_file(binary) != binary_sha256:
        raise PrerequisiteBroken(f"{binary} does not hash to {binary_sha256}")
    mlmodelc = Path(contracts.coreml_encoder_path(model_arg))
    before = tree_digest(mlmodelc) if mlmodelc.is_dir() else None
    argv = coreml_argv(binary, model_arg, audio, language)
    warm = run_whisper_cli(argv, timeout=first_timeout)
    measured = run_whisper_cli(argv, timeout=timeout)
    after = tree_digest(mlmodelc) if mlmodelc.is_dir() else None
    recs = {}
    for name, res in (("warmup", warm), ("measured", measured)):
        rec = run_record(res)
        enc = contracts.parse_encode_time(res.stderr_text)
        rec["encode_time_ms"], rec["encode_runs"] = enc if enc else (None, None)
        recs[name] = rec
    c = contracts.classify_positive(recs["measured"], measured.stderr, measured.stdout)
    doc = PositiveEvidence(
        binary=str(binary), binary_sha256=binary_sha256, model_arg=model_arg,
        mlmodelc=CoremlDigests(path=str(mlmodelc), tree_digest_before=before,
                               tree_digest_after=after),
        timeouts_s=PositiveTimeouts(warmup=first_timeout, measured=timeout),
        warmup=PositiveRun.from_json(recs["warmup"], "warmup"),
        measured=PositiveRun.from_json(recs["measured"], "measured"), outcome=c.outcome,
        transcript_chars=len(measured.stdout_text.strip()))
    refs = [ctx.write_json("positive", doc.to_json()),
            ctx.write_bytes("measured_stderr", measured.stderr, "positive-measured.stderr.txt"),
            ctx.write_bytes("measured_stdout", measured.stdout, "positive-measured.stdout.txt"),
            ctx.write_bytes("warmup_stderr", warm.stderr, "positive-warmup.stderr.txt"),
            ctx.write_bytes("warmup_stdout", warm.stdout, "positive-warmup.stdout.txt")]
    _result(ctx).positive = PositiveControl.from_evidence(doc, measured.stderr, measured.stdout)
    ids = {identities.BINARY_COREML: binary_sha256}
    if before:
        ids["artifact.fp32.mlmodelc.tree_digest"] = before
    return refs, ids


# ----------------------------------------------------------------------------- the seam canaries

def seam_negative(ctx: StageContext, *, builds: Mapping[str, Mapping[str, Any] | str],
                  model_file: Path, audio: Path, runs: int, timeout: float, language: str,
                  progress: bool = True) -> tuple[list[EvidenceRef], dict[str, Any]]:
    """Run the negative control on whisper.cpp's real Core ML path, through the seam.

    Only the ``ggml-*.bin`` sits in a scratch folder, so the seam's ``init`` finds no
    folder and returns NULL, as Core ML's load would: the patched seam build must exit 3
    with both markers every time; the unpatched one's outcomes (the lifecycle defect on
    its own path) and the unpatched AddressSanitizer build's reports are recorded.

    Parameters
    ----------
    ctx : StageContext
        Where the evidence goes.
    builds : mapping
        ``patched`` / ``unpatched`` / ``unpatched_asan`` -> the seam build record stage 01
        left (:func:`verifylib.stages.seam.seam_build`), or why there is none.
    model_file : Path
        The audited ``ggml-*.bin``.
    audio : Path
        The clip.
    runs : int
        Runs of each of the patched and unpatched builds.
    timeout : float
        Seconds per run.
    language : str
        The decoding language.
    progress : bool
        Show a plain-text progress bar.

    Returns
    -------
    (list of EvidenceRef, dict)
        The ``seam_negative`` document and every distinct stream, and the identities of
        the binaries that ran.
    """
    import tqdm
    if isinstance(runs, bool) or not isinstance(runs, int) or runs < 1:
        raise ParametersInvalid(f"runs per side (key canary.runs of the parameters) must be a "
                                f"positive integer, got {runs!r}")
    bins: dict[str, tuple[Path, str]] = {}
    for side, b in builds.items():
        if not isinstance(b, str):
            bins[side] = (Path(b["binary"]), b["sha256"])
    if "patched" not in bins:
        raise PrerequisiteBroken(f"the patched seam whisper-cli is required: "
                                 f"{builds.get('patched')}")
    counts = {"patched": runs, "unpatched": runs, "unpatched_asan": _sanitizer.RUNS_PER_SIDE}
    model_sha = sha256_file(model_file)
    scratch = Path(tempfile.mkdtemp(prefix="verifylib-seam-negative-"))
    results: dict[str, list[RunResult]] = {side: [] for side in bins}
    try:
        model_arg = str(scratch / model_file.name)
        shutil.copyfile(model_file, model_arg)
        listing = sorted(p.name for p in scratch.iterdir())
        total = sum(counts[side] for side in bins)
        bar = tqdm.tqdm(total=total, desc="seam negative", unit="run", file=sys.stdout,
                        mininterval=1.0, ascii=True, disable=not progress)
        try:
            for i in range(max(counts.values())):
                for side, (binary, _) in bins.items():
                    if i < counts[side]:
                        env = _sanitizer.sanitizer_env() if side == "unpatched_asan" else None
                        results[side].append(run_whisper_cli(
                            coreml_argv(binary, model_arg, audio, language), timeout=timeout,
                            env_extra=env))
                        bar.update(1)
        finally:
            bar.close()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    streams: dict[str, bytes] = {}
    sides: dict[str, LifecycleSide] = {}
    for side in ("unpatched", "patched"):
        if side not in bins:
            sides[side] = LifecycleSide(available=False, reason=str(builds.get(side)))
            continue
        sides[side] = recorded_side(side, bins[side][0], bins[side][1], results[side],
                                    contracts.classify_negative, streams)
    if "unpatched_asan" in bins:
        b = builds["unpatched_asan"]
        assert not isinstance(b, str)
        asan = SanitizerSide(available=True, binary=str(bins["unpatched_asan"][0]),
                             binary_sha256=bins["unpatched_asan"][1],
                             build=AsanBuild.from_json({k: b.get(k) for k in _BUILD_FIELDS},
                                                       "asan.build"),
                             runs=_sanitizer_runs("unpatched_asan", results["unpatched_asan"],
                                                  streams))
    else:
        asan = SanitizerSide(available=False, reason=str(builds.get("unpatched_asan")))
    doc = SeamNegativeEvidence(
        runs_per_side=runs, asan_runs=_sanitizer.RUNS_PER_SIDE, timeout_s=timeout,
        model=FileRef(path=str(model_file), sha256=model_sha),
        audio=FileRef(path=str(audio), sha256=sha256_file(audio)), model_arg=model_arg,
        scratch_listing=tuple(listing),
        derived_mlmodelc=contracts.coreml_encoder_path(model_arg),
        sides=LifecycleSides(unpatched=sides["unpatched"], patched=sides["patched"]), asan=asan)
    refs = [ctx.write_json("seam_negative", doc.to_json())]
    refs += [ctx.write_bytes(seam_stream_name(sha), data, f"{seam_stream_name(sha)}.txt")
             for sha, data in sorted(streams.items())]
    ids = {SEAM_SIDES[side][1]: sha for side, (_, sha) in bins.items()}
    ids[identities.MODEL_GGML] = model_sha
    return refs, ids


def seam_positive(ctx: StageContext, *, binary: Path, binary_sha256: str, audio: Path,
                  timeout: float, language: str) -> tuple[list[EvidenceRef], dict[str, Any]]:
    """Run whisper.cpp's Core ML path once with the audited encoder's program in Apple's place.

    The patched seam build runs with the ``.mlmodelc`` path derived from its ``-m`` holding
    the audited encoder (:func:`verifylib.stages.seam.seam_encoder`), served by an executor
    started in this process; the launch is classified by the four Core ML conditions and
    its encode calls recorded by the executor.

    Parameters
    ----------
    ctx : StageContext
        Where the evidence goes.
    binary, binary_sha256 : Path, str
        The patched seam whisper-cli and its recorded digest (re-hashed before use).
    audio : Path
        The clip.
    timeout : float
        Seconds for the launch.
    language : str
        The decoding language.

    Returns
    -------
    (list of EvidenceRef, dict)
        The ``seam_positive`` document with both streams, and the identities.
    """
    import time

    from verifylib.models.seam_encoder import SeamLoadRefused
    from verifylib.numerics.seam_executor import SeamExecutor

    if sha256_file(binary) != binary_sha256:
        raise PrerequisiteBroken(f"{binary} does not hash to {binary_sha256}")
    scratch = Path(tempfile.mkdtemp(prefix="verifylib-seam-"))
    try:
        enc = seam_encoder(ctx, "fp32", scratch)
        with SeamExecutor() as ex:
            t0 = time.monotonic()
            try:
                ex.preload(enc.folder)
            except SeamLoadRefused:
                pass  # the launch's init is refused in turn, and the evidence says why
            load_s = time.monotonic() - t0
            res, launch = seam_launch(ex, coreml_argv(binary, enc.model_arg, audio, language),
                                      timeout=timeout, output_floats=enc.output_floats)
            start_s = ex.started_s or 0.0
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    rec = run_record(res)
    timing = contracts.parse_encode_time(res.stderr_text)
    rec["encode_time_ms"], rec["encode_runs"] = timing if timing else (None, None)
    c = contracts.classify_positive(rec, res.stderr, res.stdout)
    doc = SeamPositiveEvidence(
        binary=str(binary), binary_sha256=binary_sha256,
        encoder=SeamEncoderRef.from_json(enc.to_json()), timeout_s=timeout,
        run=PositiveRun.from_json(rec, "run"),
        executor=None if launch is None else SeamExecutorRecord.from_json(
            executor_record(launch), "executor"),
        executor_start_s=round(start_s, 4), program_load_s=round(load_s, 3),
        outcome=c.outcome, transcript_chars=len(res.stdout_text.strip()))
    refs = [ctx.write_json("seam_positive", doc.to_json()),
            ctx.write_bytes("seam_positive_stderr", res.stderr, "seam-positive.stderr.txt"),
            ctx.write_bytes("seam_positive_stdout", res.stdout, "seam-positive.stdout.txt")]
    return refs, {identities.BINARY_SEAM: binary_sha256, enc.identity_key: enc.tree_digest}


# ----------------------------------------------------------------------------- the stage

def run(params: Params, run_dir: str | os.PathLike[str], *, progress: bool = True) -> StageReport:
    """Run stage 03_canary.

    Parameters
    ----------
    params : Params
        Validated parameters (``canary`` section: ``runs``, ``enabled``, ``timeout_s``,
        ``first_run_timeout_s``).
    run_dir : path-like
        The run directory.
    progress : bool
        Show the A/B progress bar.

    Returns
    -------
    StageReport
        With ``result`` (:class:`~verifylib.evidence.canary.result.CanaryResult`) holding
        the A/B outcomes and the Core ML runs, shown by :func:`verifylib.views.canary.show`.
    """
    ctx = StageContext(STAGE, params, run_dir)
    ctx.result = CanaryResult()
    cfg = params.canary
    disabled = None if cfg.enabled else "canary.enabled"
    language = model_language(params)
    g = ctx.begin(CANARY_LIFECYCLE_AB, disabled)
    if g:
        with g:
            tree = runtime_tree(ctx)
            try:
                a_side: tuple[Path, str] | str = unpatched_binary(ctx)
            except PrerequisiteBroken as exc:
                a_side = str(exc)
            refs, ids = lifecycle_ab(
                ctx, patched=ggml_binary(ctx), unpatched=a_side,
                model=tree / contracts.TEST_MODEL_IN_TREE,
                audio=tree / contracts.TEST_AUDIO_IN_TREE,
                runs=cfg.runs, timeout=cfg.timeout_s, progress=progress)
            g.judge(refs, ids)
    g = ctx.begin(CANARY_COREML_NEGATIVE, disabled)
    if g:
        with g:
            binary, sha = coreml_binary(ctx)
            model, _ = published_model(ctx)
            refs, ids = coreml_negative(
                ctx, binary=binary, binary_sha256=sha, model_file=model,
                audio=runtime_tree(ctx) / contracts.TEST_AUDIO_IN_TREE,
                timeout=cfg.timeout_s, language=language)
            g.judge(refs, ids)
    g = ctx.begin(CANARY_COREML_POSITIVE, disabled)
    if g:
        with g:
            binary, sha = coreml_binary(ctx)
            _, model_arg = published_model(ctx)
            refs, ids = coreml_positive(
                ctx, binary=binary, binary_sha256=sha, model_arg=model_arg,
                audio=runtime_tree(ctx) / contracts.TEST_AUDIO_IN_TREE,
                first_timeout=cfg.first_run_timeout_s, timeout=cfg.timeout_s,
                language=language)
            g.judge(refs, ids)
    g = ctx.begin(CANARY_SANITIZER, disabled)
    if g:
        with g:
            tree = runtime_tree(ctx)
            builds: dict[str, Mapping[str, Any] | str] = {}
            for side in SIDES:
                try:
                    builds[side] = asan_build(ctx, side)
                except PrerequisiteBroken as exc:
                    builds[side] = str(exc)
            refs, ids = sanitizer_ab(
                ctx, builds=builds, pin=params.runtime.pin,
                model=tree / contracts.TEST_MODEL_IN_TREE,
                audio=tree / contracts.TEST_AUDIO_IN_TREE, timeout=cfg.timeout_s,
                progress=progress)
            # A user-declared pin is judged against the manifest the run carries.
            carried, carried_ids = user_pin_evidence(ctx)
            g.judge([*refs, *carried], {**ids, **carried_ids})
    seam_off = disabled or (None if params.seam.enabled else "seam.enabled")
    g = ctx.begin(CANARY_SEAM_NEGATIVE, seam_off)
    if g:
        with g:
            seams: dict[str, Mapping[str, Any] | str] = {}
            for side in SEAM_SIDES:
                try:
                    seams[side] = seam_build(ctx, side)
                except PrerequisiteBroken as exc:
                    seams[side] = str(exc)
            model, _ = published_model(ctx)
            refs, ids = seam_negative(
                ctx, builds=seams, model_file=model,
                audio=runtime_tree(ctx) / contracts.TEST_AUDIO_IN_TREE, runs=cfg.runs,
                timeout=cfg.timeout_s, language=language, progress=progress)
            g.judge(refs, ids)
    g = ctx.begin(CANARY_SEAM_POSITIVE, seam_off)
    if g:
        with g:
            b = seam_build(ctx, "patched")
            refs, ids = seam_positive(
                ctx, binary=Path(b["binary"]), binary_sha256=b["sha256"],
                audio=runtime_tree(ctx) / contracts.TEST_AUDIO_IN_TREE,
                timeout=cfg.timeout_s, language=language)
            g.judge(refs, ids)
    report = ctx.finish()
    # What the stage returns is what open_run reads from a published run: the same builder
    # on the files the gates cite (the helpers above fill ctx.result for direct callers).
    report.result = canary_result_from_evidence(ctx.run_dir, ctx.records)
    return report
