"""Stage 03_canary: the batch-lifecycle A/B, the Core ML negative control, the positive gate.

``canary.lifecycle_ab`` (any OS; physical on Linux): the unpatched and the patched static
GGML ``whisper-cli`` are each run N times (parameter ``canary.runs``) with FACTS.md's
trigger, ``-nfa -dtw large.v3`` on the tree's own test model, which makes
``whisper_init_state`` free its state before ``whisper_batch_init`` -- the same early
return as a Core ML load failure. PASS iff the patched build gives N/N exit 3 with the
``aheads_masks_init()`` failure line and the init-failure line and no signal; the
unpatched outcomes are recorded as evidence of the defect, not gated.

``canary.coreml_negative`` (macOS): only the ``ggml-*.bin`` copied into a scratch folder
and the Core ML build run once -- no warm-up, no retry. ``canary.coreml_positive``
(macOS): one warm-up and one measured run with the ``.mlmodelc`` at the derived path;
both wall times and whisper.cpp's ``encode time`` are recorded and the measured run alone
is classified by the four conditions of guide section 2.3.

The physical work is in :func:`lifecycle_ab`, :func:`coreml_negative` and
:func:`coreml_positive`, which take the binaries and files as arguments, so tests drive
the macOS code paths with a fake runtime; :func:`run` only picks the inputs from the run
directory and lets :meth:`StageContext.begin` decide, by the host's real capabilities,
whether a gate runs. Every marker, exit code and classifier comes from
:mod:`verifylib.contracts`; the registered rules re-run those classifiers on the stored
streams, so ``verifylib verify`` re-judges them.
"""

from __future__ import annotations

import html
import os
import shutil
import statistics
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Callable, Mapping

from .. import contracts
from ..canonical import is_sha256, sha256_file, tree_digest
from ..evidence import EvidenceRef
from ..gates import Judgement, Status, rule
from ..params import Params
from ..runner import RunResult, run_record, run_whisper_cli
from ..stage import StageContext, StageReport
from .build import coreml_binary, ggml_binary, runtime_tree, unpatched_binary

STAGE = "03_canary"
SIDES = ("unpatched", "patched")
LIFECYCLE_SCHEMA = "verifylib-lifecycle-ab/1"
NEGATIVE_SCHEMA = "verifylib-coreml-negative/1"
POSITIVE_SCHEMA = "verifylib-coreml-positive/1"
GGML_MODEL = ("fp32", "ggml-model.bin")


def _judgement(ok_detail: tuple[bool, str]) -> Judgement:
    ok, detail = ok_detail
    return Judgement(Status.PASS if ok else Status.FAIL, detail)


def _stream_name(sha: str) -> str:
    return f"stream-{sha}"


# ----------------------------------------------------------------------------- argv

def lifecycle_argv(binary: Path | str, model: Path | str, audio: Path | str,
                   preset: str = contracts.LIFECYCLE_DTW_PRESET) -> list[str]:
    """The lifecycle canary's command line: the tree's model and audio plus the trigger."""
    return [str(binary), "-m", str(model), "-f", str(audio), "-t", "1",
            *contracts.lifecycle_trigger_args(preset)]


def coreml_argv(binary: Path | str, model_arg: str, audio: Path | str, language: str) -> list[str]:
    """A Core ML gate's command line: the exact ``-m`` string and the pinned greedy decoding."""
    return [str(binary), "-m", model_arg, "-f", str(audio), "-t", "4",
            *contracts.greedy_decoding_args(language)]


# ----------------------------------------------------------------------------- lifecycle A/B

def run_lifecycle(sides: Mapping[str, Path], model: Path, audio: Path, runs: int, timeout: float,
                  *, progress: bool = True,
                  preset: str = contracts.LIFECYCLE_DTW_PRESET) -> dict[str, list[RunResult]]:
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

    Returns
    -------
    dict
        Side to its :class:`RunResult` list, in run order.
    """
    import tqdm
    if isinstance(runs, bool) or not isinstance(runs, int) or runs < 1:
        raise ValueError(f"runs must be a positive integer, got {runs!r}")
    out: dict[str, list[RunResult]] = {side: [] for side in sides}
    bar = tqdm.tqdm(total=runs * len(sides), desc="lifecycle A/B", unit="run", file=sys.stdout,
                    mininterval=1.0, ascii=True, disable=not progress)
    try:
        for _ in range(runs):
            for side, binary in sides.items():
                out[side].append(run_whisper_cli(lifecycle_argv(binary, model, audio, preset),
                                                 timeout=timeout))
                bar.update(1)
    finally:
        bar.close()
    return out


def lifecycle_ab(ctx: StageContext, *, patched: tuple[Path, str],
                 unpatched: tuple[Path, str] | str, model: Path, audio: Path, runs: int,
                 timeout: float, progress: bool = True,
                 preset: str = contracts.LIFECYCLE_DTW_PRESET) -> tuple[list[EvidenceRef], dict]:
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

    Returns
    -------
    (list of EvidenceRef, dict)
        The evidence (the ``lifecycle`` document and every distinct stream) and the
        identities it binds to.
    """
    bins = {}
    meta: dict[str, dict] = {}
    for side, val in (("unpatched", unpatched), ("patched", patched)):
        if isinstance(val, str):
            meta[side] = {"available": False, "reason": val}
            continue
        path, sha = Path(val[0]), val[1]
        if sha256_file(path) != sha:
            raise RuntimeError(f"{side} whisper-cli {path} does not hash to {sha}")
        bins[side] = path
        meta[side] = {"available": True, "binary": str(path), "binary_sha256": sha}
    if "patched" not in bins:
        raise RuntimeError("the patched whisper-cli is required")
    results = run_lifecycle(bins, model, audio, runs, timeout, progress=progress, preset=preset)
    streams: dict[str, bytes] = {}
    for side, res_list in results.items():
        rows = []
        for i, r in enumerate(res_list):
            rec = run_record(r)
            rec["index"] = i
            rec["outcome"] = contracts.classify_lifecycle(rec, r.stderr, r.stdout).outcome
            rows.append(rec)
            streams[r.stderr_sha256] = r.stderr
            streams[r.stdout_sha256] = r.stdout
        meta[side]["runs"] = rows
        meta[side]["counts"] = dict(sorted(Counter(x["outcome"] for x in rows).items()))
    doc = {"schema": LIFECYCLE_SCHEMA, "runs_per_side": runs, "timeout_s": timeout,
           "trigger": contracts.lifecycle_trigger_args(preset),
           "model": {"path": str(model), "sha256": sha256_file(model)},
           "audio": {"path": str(audio), "sha256": sha256_file(audio)},
           "sides": meta}
    refs = [ctx.write_json("lifecycle", doc)]
    refs += [ctx.write_bytes(_stream_name(sha), data, f"{_stream_name(sha)}.txt")
             for sha, data in sorted(streams.items())]
    ids = {"binary.ggml.sha256": meta["patched"]["binary_sha256"]}
    if meta["unpatched"]["available"]:
        ids["binary.ggml_unpatched.sha256"] = meta["unpatched"]["binary_sha256"]
    ctx.facts["lifecycle"] = lifecycle_facts(doc)
    return refs, ids


def lifecycle_facts(doc: Mapping) -> dict:
    """Per side: availability, digest, outcome counts and wall times, for display."""
    out = {"runs_per_side": doc["runs_per_side"], "trigger": " ".join(doc["trigger"]), "sides": {}}
    for side in SIDES:
        s = doc["sides"][side]
        if not s.get("available"):
            out["sides"][side] = {"available": False, "reason": s.get("reason", "")}
            continue
        walls = [r["wall_s"] for r in s["runs"]]
        out["sides"][side] = {"available": True, "binary_sha256": s["binary_sha256"],
                              "counts": dict(s["counts"]),
                              "wall_s_median": round(statistics.median(walls), 3),
                              "wall_s_total": round(sum(walls), 3)}
    return out


def _summary(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{n}x {label}" for label, n in sorted(counts.items(), key=lambda kv: -kv[1]))


def judge_lifecycle(doc, stream: Callable[[str], bytes | None]) -> tuple[bool, str]:
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
        return False, f"not a {LIFECYCLE_SCHEMA} document"
    n = doc.get("runs_per_side")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        return False, f"malformed runs_per_side {n!r}"
    trig = doc.get("trigger")
    if not (isinstance(trig, list) and len(trig) == 3 and isinstance(trig[2], str)
            and trig == contracts.lifecycle_trigger_args(trig[2])):
        return False, f"malformed trigger {trig!r}"
    sides = doc.get("sides")
    if not isinstance(sides, Mapping) or set(sides) != set(SIDES):
        return False, "evidence must record both sides (unpatched and patched)"
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
            if not isinstance(rec, Mapping):
                problems.append(f"{side} run {i}: malformed record")
                continue
            err = stream(rec.get("stderr_sha256")) if is_sha256(rec.get("stderr_sha256")) else None
            out = stream(rec.get("stdout_sha256")) if is_sha256(rec.get("stdout_sha256")) else None
            if err is None or out is None:
                problems.append(f"{side} run {i}: stream not stored")
                continue
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
        return False, "evidence does not support the outcomes: " + " | ".join(problems[:5])
    patched = results.get("patched", [])
    if len(patched) != n:
        return False, f"patched: {len(patched)} runs recorded, expected {n}"
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
        return False, (f"patched {sides['patched']['binary_sha256'][:12]}...: {len(bad_runs)}/{n} "
                       f"runs not clean ({p_counts}); first, run {i}: {c.detail}. {a_side}")
    return True, (f"patched {sides['patched']['binary_sha256'][:12]}...: {n}/{n} runs exit 3 with "
                  f"both markers, no signal; {a_side}")


@rule("canary.lifecycle_ab")
def _rule_lifecycle(ev) -> Judgement:
    def stream(sha):
        name = _stream_name(sha)
        return ev.bytes(name) if ev.has(name) else None
    return _judgement(judge_lifecycle(ev.json("lifecycle"), stream))


# ----------------------------------------------------------------------------- Core ML negative

def coreml_negative(ctx: StageContext, *, binary: Path, binary_sha256: str, model_file: Path,
                    audio: Path, timeout: float, language: str,
                    scratch_parent: Path | None = None) -> tuple[list[EvidenceRef], dict]:
    """The fail-closed negative control (guide section 2.4): one run, no warm-up, no retry.

    Only the ``ggml-*.bin`` is copied into a fresh scratch folder (its ``.mlmodelc`` is
    deliberately left behind), and the Core ML build runs once on it. The first result is
    the evidence.

    Returns
    -------
    (list of EvidenceRef, dict)
        The ``negative`` document with both streams, and the identities.
    """
    model_file = Path(model_file)
    if not (model_file.name.startswith("ggml-") and model_file.name.endswith(".bin")):
        raise ValueError(f"the negative control copies a ggml-*.bin, got {model_file.name}")
    if sha256_file(binary) != binary_sha256:
        raise RuntimeError(f"{binary} does not hash to {binary_sha256}")
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
    doc = {"schema": NEGATIVE_SCHEMA, "binary": str(binary), "binary_sha256": binary_sha256,
           "model_sha256": model_sha, "model_arg": model_arg, "scratch_listing": listing,
           "derived_mlmodelc": contracts.coreml_encoder_path(model_arg), "attempts": 1,
           "timeout_s": timeout, "run": rec, "outcome": c.outcome}
    refs = [ctx.write_json("negative", doc),
            ctx.write_bytes("negative_stderr", res.stderr, "negative.stderr.txt"),
            ctx.write_bytes("negative_stdout", res.stdout, "negative.stdout.txt")]
    ctx.facts["negative"] = {"outcome": c.outcome, "detail": c.detail, "wall_s": rec["wall_s"],
                             "returncode": rec["returncode"], "signal": rec["signal"],
                             "scratch_listing": listing}
    return refs, {"binary.coreml.sha256": binary_sha256, "model.ggml.sha256": model_sha}


def judge_negative(doc, stderr: bytes, stdout: bytes) -> tuple[bool, str]:
    """The rule of ``canary.coreml_negative``: one run only, in a scratch folder holding
    only the ``ggml-*.bin``, classified by :func:`verifylib.contracts.classify_negative`."""
    if not isinstance(doc, Mapping) or doc.get("schema") != NEGATIVE_SCHEMA:
        return False, f"not a {NEGATIVE_SCHEMA} document"
    problems = []
    if doc.get("attempts") != 1 or "warmup" in doc:
        problems.append(f"the negative control must be the first and only run "
                        f"(attempts {doc.get('attempts')!r})")
    if not is_sha256(doc.get("binary_sha256")):
        problems.append("malformed binary digest")
    run = doc.get("run")
    if not isinstance(run, Mapping):
        return False, "; ".join(problems + ["run record missing"])
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
        return False, "; ".join(problems)
    return True, (f"first and only run of whisper-cli {doc['binary_sha256'][:12]}... with only "
                  f"{Path(model_arg).name} in a scratch folder: exit 3, load-failure and "
                  f"init-failure lines, no signal")


@rule("canary.coreml_negative")
def _rule_negative(ev) -> Judgement:
    return _judgement(judge_negative(ev.json("negative"), ev.bytes("negative_stderr"),
                                     ev.bytes("negative_stdout")))


# ----------------------------------------------------------------------------- Core ML positive

def coreml_positive(ctx: StageContext, *, binary: Path, binary_sha256: str, model_arg: str,
                    audio: Path, first_timeout: float, timeout: float,
                    language: str) -> tuple[list[EvidenceRef], dict]:
    """The positive gate (guide sections 2.3, 6.3): one warm-up, one measured run.

    The ``.mlmodelc`` must sit at ``coreml_encoder_path(model_arg)``. The warm-up gets the
    generous first-run timeout (on-device compilation) and is recorded, not classified;
    the measured run is classified alone. Both wall times and whisper.cpp's ``encode
    time`` are recorded; the ``.mlmodelc`` tree digest is taken before and after.

    Returns
    -------
    (list of EvidenceRef, dict)
        The ``positive`` document with the measured run's streams (and the warm-up's),
        and the identities.
    """
    if sha256_file(binary) != binary_sha256:
        raise RuntimeError(f"{binary} does not hash to {binary_sha256}")
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
    doc = {"schema": POSITIVE_SCHEMA, "binary": str(binary), "binary_sha256": binary_sha256,
           "model_arg": model_arg,
           "mlmodelc": {"path": str(mlmodelc), "tree_digest_before": before,
                        "tree_digest_after": after},
           "timeouts_s": {"warmup": first_timeout, "measured": timeout},
           "warmup": recs["warmup"], "measured": recs["measured"], "outcome": c.outcome,
           "transcript_chars": len(measured.stdout_text.strip())}
    refs = [ctx.write_json("positive", doc),
            ctx.write_bytes("measured_stderr", measured.stderr, "positive-measured.stderr.txt"),
            ctx.write_bytes("measured_stdout", measured.stdout, "positive-measured.stdout.txt"),
            ctx.write_bytes("warmup_stderr", warm.stderr, "positive-warmup.stderr.txt"),
            ctx.write_bytes("warmup_stdout", warm.stdout, "positive-warmup.stdout.txt")]
    ctx.facts["positive"] = {
        "outcome": c.outcome, "detail": c.detail,
        "warm-up wall s": recs["warmup"]["wall_s"], "measured wall s": recs["measured"]["wall_s"],
        "warm-up encode time ms": recs["warmup"]["encode_time_ms"],
        "measured encode time ms": recs["measured"]["encode_time_ms"],
        "transcript": measured.stdout_text.strip()}
    ids = {"binary.coreml.sha256": binary_sha256}
    if before:
        ids["artifact.fp32.mlmodelc.tree_digest"] = before
    return refs, ids


def judge_positive(doc, stderr: bytes, stdout: bytes) -> tuple[bool, str]:
    """The rule of ``canary.coreml_positive``: the measured run alone, by
    :func:`verifylib.contracts.classify_positive`, with the ``.mlmodelc`` at the derived
    path and unchanged across both runs."""
    if not isinstance(doc, Mapping) or doc.get("schema") != POSITIVE_SCHEMA:
        return False, f"not a {POSITIVE_SCHEMA} document"
    problems = []
    if not is_sha256(doc.get("binary_sha256")):
        problems.append("malformed binary digest")
    run, warm = doc.get("measured"), doc.get("warmup")
    if not isinstance(run, Mapping) or not isinstance(warm, Mapping):
        return False, "; ".join(problems + ["measured or warm-up record missing"])
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
    if problems:
        return False, "; ".join(problems)
    enc = run.get("encode_time_ms")
    return True, (f"measured run of whisper-cli {doc['binary_sha256'][:12]}...: exit 0, "
                  f"{contracts.COREML_ON!r}, one {contracts.COREML_LOAD_MARKER!r} line for "
                  f"{Path(model_arg).name}, no load failure (wall {run.get('wall_s')} s, encode "
                  f"{enc} ms; warm-up wall {warm.get('wall_s')} s)")


@rule("canary.coreml_positive")
def _rule_positive(ev) -> Judgement:
    return _judgement(judge_positive(ev.json("positive"), ev.bytes("measured_stderr"),
                                     ev.bytes("measured_stdout")))


# ----------------------------------------------------------------------------- the stage

def published_model(ctx: StageContext) -> tuple[Path, str]:
    """The ``fp32/ggml-model.bin`` that ``export.ggml_model`` wrote, and the ``-m`` string.

    Raises
    ------
    RuntimeError
        If the file's bytes are not the ones the export gate recorded.
    """
    ev = ctx.evidence_of("export.ggml_model", "ggml")
    path = ctx.run_dir.joinpath(*GGML_MODEL)
    if not path.is_file() or sha256_file(path) != ev.get("sha256"):
        raise RuntimeError(f"{path} is not the ggml-model.bin that passed export.ggml_model")
    arg = ev.get("model_arg")
    return path, (arg if isinstance(arg, str) and Path(arg) == path else str(path))


def run(params: Params, run_dir: str | os.PathLike, *, progress: bool = True) -> StageReport:
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
        With ``facts`` holding the A/B outcomes and the Core ML runs shown by :func:`show`.
    """
    ctx = StageContext(STAGE, params, run_dir)
    cfg = params["canary"]
    disabled = None if cfg["enabled"] else "canary.enabled"
    language = params["model"].get("language") or "en"
    g = ctx.begin("canary.lifecycle_ab", disabled)
    if g:
        with g:
            tree = runtime_tree(ctx)
            try:
                a_side: tuple[Path, str] | str = unpatched_binary(ctx)
            except RuntimeError as exc:
                a_side = str(exc)
            refs, ids = lifecycle_ab(
                ctx, patched=ggml_binary(ctx), unpatched=a_side,
                model=tree / contracts.TEST_MODEL_IN_TREE, audio=tree / contracts.TEST_AUDIO_IN_TREE,
                runs=cfg["runs"], timeout=cfg["timeout_s"], progress=progress)
            g.judge(refs, ids)
    g = ctx.begin("canary.coreml_negative", disabled)
    if g:
        with g:
            binary, sha = coreml_binary(ctx)
            model, _ = published_model(ctx)
            refs, ids = coreml_negative(
                ctx, binary=binary, binary_sha256=sha, model_file=model,
                audio=runtime_tree(ctx) / contracts.TEST_AUDIO_IN_TREE,
                timeout=cfg["timeout_s"], language=language)
            g.judge(refs, ids)
    g = ctx.begin("canary.coreml_positive", disabled)
    if g:
        with g:
            binary, sha = coreml_binary(ctx)
            _, model_arg = published_model(ctx)
            refs, ids = coreml_positive(
                ctx, binary=binary, binary_sha256=sha, model_arg=model_arg,
                audio=runtime_tree(ctx) / contracts.TEST_AUDIO_IN_TREE,
                first_timeout=cfg["first_run_timeout_s"], timeout=cfg["timeout_s"],
                language=language)
            g.judge(refs, ids)
    return ctx.finish()


# ----------------------------------------------------------------------------- display

_COLORS = {contracts.CLEAN_LIFECYCLE: "#2e7d32", "SIGSEGV": "#c62828", "SIGABRT": "#ad1457",
           "timeout": "#6a1b9a"}


def show(report: StageReport):
    """Show the A/B outcome table and chart, and the Core ML runs (or why they did not run)."""
    from IPython.display import HTML, display
    e = html.escape
    lc = report.facts.get("lifecycle")
    if lc:
        rows = ""
        for side in SIDES:
            s = lc["sides"][side]
            if not s["available"]:
                rows += (f"<tr><td>{e(side)}</td><td colspan='4'>not available: "
                         f"{e(s['reason'])}</td></tr>")
                continue
            counts = "<br>".join(f"{n} &times; {e(label)}" for label, n in s["counts"].items())
            rows += (f"<tr><td>{e(side)}</td><td><code>{e(s['binary_sha256'][:16])}…</code></td>"
                     f"<td>{lc['runs_per_side']}</td><td>{counts}</td>"
                     f"<td>{s['wall_s_median']:.3f} s</td></tr>")
        display(HTML(
            f"<h4>Batch-lifecycle A/B: <code>{e(lc['trigger'])}</code> on the tree's test "
            f"model</h4><table class='vl'><tr><th>build</th><th>whisper-cli sha256</th>"
            f"<th>runs</th><th>outcomes</th><th>median wall</th></tr>{rows}</table>"
            "<p>Gated: the patched build must give every run exit 3 with both markers and no "
            "signal. The unpatched outcomes are the defect's evidence, not gated.</p>"))
        import matplotlib.pyplot as plt
        labels = sorted({lab for s in lc["sides"].values() if s["available"]
                         for lab in s["counts"]})
        avail = [side for side in SIDES if lc["sides"][side]["available"]]
        fig, ax = plt.subplots(figsize=(6, 1.2 + 0.6 * len(avail)))
        left = [0] * len(avail)
        for lab in labels:
            vals = [lc["sides"][side]["counts"].get(lab, 0) for side in avail]
            ax.barh(avail, vals, left=left, label=lab, color=_COLORS.get(lab, "#ef6c00"))
            left = [a + b for a, b in zip(left, vals)]
        ax.set_xlabel("runs")
        ax.set_xlim(0, lc["runs_per_side"])
        ax.set_title("Outcome of each run, per build")
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.45), ncol=3, fontsize="small")
        fig.tight_layout()
        plt.show()
    else:
        display(HTML("<p>No lifecycle A/B: <code>canary.lifecycle_ab</code> did not run (see "
                     "the table above).</p>"))
    for key, gid in (("negative", "canary.coreml_negative"), ("positive", "canary.coreml_positive")):
        facts = report.facts.get(key)
        if facts:
            rows = "".join(f"<tr><td>{e(k)}</td><td><code>{e(str(v))}</code></td></tr>"
                           for k, v in facts.items())
            display(HTML(f"<h4>{e(gid)}</h4><table class='vl'>{rows}</table>"))
        else:
            rec = next((r for r in report.records if r.id == gid), None)
            why = f"{rec.status.value} ({rec.reason.kind}): {rec.reason.detail}" if rec else "no record"
            display(HTML(f"<p><code>{e(gid)}</code> did not run here: {e(why)}</p>"))
    return None
