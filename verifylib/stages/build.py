"""Stage 01_build: pinned source, exact patch, static whisper-cli variants, system_info.

Gates judged here: ``build.source_identity``, ``build.patch_exact``, ``build.ggml`` and,
on macOS with full Xcode only, ``build.coreml`` (NOT_RUN(platform) elsewhere).

Besides the gated builds, the stage builds the *unpatched* static GGML ``whisper-cli``
from the pristine source (built outside it; the folder's tree id is re-checked after the
build). It is not a gate: it is the "A" side of ``canary.lifecycle_ab``, recorded in the
sidecar ``unpatched_build.json`` and the identity ``binary.ggml_unpatched.sha256``.

``build.coreml`` builds ``-DWHISPER_COREML=1 -DWHISPER_COREML_ALLOW_FALLBACK=OFF``,
static, in its own content-keyed folder, from the patched work tree (re-checked after the
build). Its ``COREML = 1`` is read from a ``whisper-bench`` built from the same tree with
exactly the same CMake options: ``whisper-bench`` prints ``system_info`` before it loads a
model, whereas ``whisper-cli`` prints it only after a successful Core ML load, which needs
an ``.mlmodelc`` that does not exist before stage 02. The Core ML ``whisper-cli`` binary's
own ``COREML = 1`` is then asserted again by ``canary.coreml_positive`` (condition 2).
"""

from __future__ import annotations

import html
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping

from .. import contracts
from ..canonical import (dumps, publish_dir, read_json, sha256_bytes, sha256_file,
                         write_json)
from ..gates import Status
from ..params import Params
from ..rules import judge_coreml_build  # noqa: F401  (re-exported for callers)
from ..runner import RunResult, run as run_child, run_record, run_whisper_binary
from ..stage import EVIDENCE_DIR, StageContext, StageReport, read_stage_file
from .. import build as _build
from .. import source as _source

STAGE = "01_build"


def cache_dir() -> Path:
    """The shared cache of sources and builds (``$VERIFYLIB_CACHE`` or ``~/.cache/verifylib``)."""
    env = os.environ.get("VERIFYLIB_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "verifylib"


def _source_spec(params: Params) -> "_source.SourceSpec":
    src = dict(params["runtime"]["source"])
    if src["kind"] == "git":
        src.setdefault("commit", _source.load_pins()[params["runtime"]["pin"]].commit)
    if "path" in src:
        src["path"] = str(params.resolve(src["path"]))
    return _source.SourceSpec(**src)


def build_options(params: Params) -> dict:
    """CMake options of the GGML build, part of the build cache key."""
    return {"GGML_NATIVE": "ON" if params["runtime"]["ggml_native"] else "OFF"}


def run(params: Params, run_dir: str | os.PathLike) -> StageReport:
    """Run stage 01_build.

    Parameters
    ----------
    params : Params
        Validated parameters (``runtime`` section).
    run_dir : path-like
        The run directory.

    Returns
    -------
    StageReport
        Records for the four build gates, with identities and build facts.
    """
    ctx = StageContext(STAGE, params, run_dir)
    cache = cache_dir()
    pins = _source.load_pins()
    pin = pins[params["runtime"]["pin"]]
    tree = None
    g = ctx.begin("build.source_identity")
    if g:
        with g:
            st = _source.obtain_source(_source_spec(params), cache, log=print)
            computed = _source.git_tree_id(st.path)
            evidence = _source.source_evidence(pin, computed, st)
            ref = ctx.write_json("source", evidence)
            rec = g.judge([ref], {"runtime.pin": pin.name, "runtime.commit": pin.commit,
                                  "runtime.tree": computed})
            ctx.facts["source"] = str(st.path)
            if rec.status is Status.PASS:
                tree = st
    build_result = build_error = patched = None
    g = ctx.begin("build.patch_exact")
    if g:
        with g:
            checks = {}
            try:
                patched = _source.prepare_patched_tree(tree.path, pin, cache / "work")
            except _source.PatchError as exc:
                patched = None
                checks["apply_error"] = str(exc)
            if patched is not None:
                before = _source.check_patch_exact(patched.path, pin)
                checks["before"] = before.to_evidence()
                if before.ok:
                    try:
                        build_result = _build.build_whisper_cli(
                            patched.path, tree_id=pin.tree, patch_sha256=pin.patch_sha256,
                            variant="ggml", options=build_options(params), cache_dir=cache,
                            jobs=params["runtime"]["jobs"], log=print)
                    except _build.BuildError as exc:
                        build_error = str(exc)
                    checks["after"] = _source.check_patch_exact(patched.path, pin).to_evidence()
            ev = _source.patch_evidence(pin, checks)
            ref = ctx.write_json("patch", ev)
            g.judge([ref], {"runtime.patch_sha256": pin.patch_sha256})
    g = ctx.begin("build.ggml")
    if g:
        with g:
            refs = []
            if build_result is None:
                ev = {"built": False, "error": build_error or "build did not run"}
                refs.append(ctx.write_json("build", ev))
                g.judge(refs)
            else:
                fx = tree.path
                probe = _build.probe_system_info(
                    build_result.binary, fx / contracts.TEST_MODEL_IN_TREE,
                    fx / contracts.TEST_AUDIO_IN_TREE)
                refs.append(ctx.write_bytes("probe_stderr", probe.result.stderr,
                                            "probe.stderr.txt"))
                refs.append(ctx.write_bytes("probe_stdout", probe.result.stdout,
                                            "probe.stdout.txt"))
                ev = _build.build_evidence(build_result, probe)
                refs.append(ctx.write_json("build", ev))
                g.judge(refs, {"binary.ggml.sha256": build_result.sha256})
                ctx.facts.update({
                    "binary": str(build_result.binary), "sha256": build_result.sha256,
                    "cached": build_result.cached, "build_seconds": build_result.seconds,
                    "system_info": probe.system_info_line or "(absent)",
                    "compiler": build_result.compiler})
    if tree is not None and params["canary"]["enabled"]:
        unpatched_build(ctx, tree.path, pin, build_options(params), cache,
                        jobs=params["runtime"]["jobs"])
    g = ctx.begin("build.coreml")
    if g:
        with g:
            if patched is None or tree is None:
                raise RuntimeError("build.patch_exact passed but left no patched work tree")
            try:
                cli, bench = build_coreml_variant(patched.path, tree_id=pin.tree,
                                                  patch_sha256=pin.patch_sha256,
                                                  options=build_options(params), cache_dir=cache,
                                                  jobs=params["runtime"]["jobs"])
            except _build.BuildError as exc:
                # A Core ML build that does not build is this gate's FAIL, with its log tail.
                g.judge([ctx.write_json("coreml_build", {"built": False, "error": str(exc)})])
                return ctx.finish()
            after = _source.check_patch_exact(patched.path, pin)
            probe = probe_bench(bench.binary, tree.path / contracts.TEST_MODEL_IN_TREE)
            refs, ids = write_coreml_evidence(
                ctx, cli, bench, probe, patch_after_problems=list(after.problems),
                ggml_key=build_result.key if build_result is not None else None)
            g.judge(refs, ids)
            ctx.facts.update({"Core ML binary": str(cli.binary), "Core ML sha256": cli.sha256,
                              "Core ML build_seconds": cli.seconds,
                              "whisper-bench system_info": _build.parse_system_info(
                                  probe.stderr_text)[0] or "(absent)"})
    return ctx.finish()


# ----------------------------------------------------------------------------- unpatched build

UNPATCHED_SIDECAR = "unpatched_build"
UNPATCHED_IDENTITY = "binary.ggml_unpatched.sha256"


def unpatched_build(ctx: StageContext, pristine: Path, pin: "_source.Pin", options: Mapping,
                    cache: Path, *, jobs: int = 2,
                    log: Callable[[str], None] = print) -> dict:
    """Build the unpatched static GGML whisper-cli, the "A" side of the lifecycle A/B.

    The pristine source folder is a cache entry: the build runs outside it and its tree id
    is re-computed afterwards; a change is recorded as a failed build. The outcome goes to
    the sidecar ``unpatched_build.json`` (not a gate's evidence) and, when built, to the
    identity ``binary.ggml_unpatched.sha256``.

    Returns
    -------
    dict
        The sidecar content.
    """
    try:
        res = _build.build_whisper_cli(pristine, tree_id=pin.tree, patch_sha256=None,
                                       variant="ggml-unpatched", options=options,
                                       cache_dir=cache, jobs=jobs, log=log)
        after = _source.git_tree_id(pristine)
        if after != pin.tree:
            ev = {"built": False, "error": f"the pristine source {pristine} changed during the "
                                           f"build (tree {after}, expected {pin.tree})"}
        else:
            ev = {"built": True, "variant": res.variant, "binary": str(res.binary),
                  "sha256": res.sha256, "key": res.key, "static": res.static,
                  "needed_libs": list(res.needed_libs), "options": dict(res.options),
                  "tree_id": res.tree_id, "patch_sha256": None, "cached": res.cached,
                  "seconds": round(res.seconds, 3), "source_tree_after": after}
    except _build.BuildError as exc:
        ev = {"built": False, "error": str(exc)}
    ctx.write_json(UNPATCHED_SIDECAR, ev)
    if ev["built"]:
        ctx.identity(UNPATCHED_IDENTITY, ev["sha256"])
        ctx.facts.update({"unpatched binary (lifecycle A/B only)": ev["binary"],
                          "unpatched sha256": ev["sha256"], "unpatched cached": ev["cached"],
                          "unpatched build_seconds": ev["seconds"]})
    else:
        ctx.facts["unpatched build"] = f"failed: {ev['error']}"
    return ev


def unpatched_binary(ctx: StageContext) -> tuple[Path, str]:
    """The unpatched whisper-cli stage 01 built in this run, re-hashed before use.

    Raises
    ------
    RuntimeError
        If stage 01 recorded none, its build failed, or the bytes or the identity differ.
    """
    path = ctx.run_dir / EVIDENCE_DIR / STAGE / f"{UNPATCHED_SIDECAR}.json"
    if not path.is_file():
        raise RuntimeError("stage 01_build recorded no unpatched build")
    ev = read_json(path)
    if not ev.get("built"):
        raise RuntimeError(f"the unpatched build failed: {ev.get('error')}")
    ids = (read_stage_file(ctx.run_dir, STAGE) or {}).get("identities", {})
    if ids.get(UNPATCHED_IDENTITY) != ev.get("sha256"):
        raise RuntimeError("the unpatched build record disagrees with stage 01's identities")
    binary = Path(ev["binary"])
    if not binary.is_file() or sha256_file(binary) != ev["sha256"]:
        raise RuntimeError(f"{binary} is not the unpatched whisper-cli stage 01 recorded")
    return binary, ev["sha256"]


# ----------------------------------------------------------------------------- Core ML build

_BENCH_SCHEMA = "verifylib-whisper-bench-v1"


@dataclass(frozen=True)
class BenchBuild:
    """A published ``whisper-bench`` configured exactly like a whisper-cli build.

    Attributes
    ----------
    binary : Path
        ``cache/builds/bench-<key>/whisper-bench``.
    sha256 : str
        Its digest.
    key : str
        SHA-256 of the schema and the whisper-cli build's key.
    cli_key : str
        The key of the whisper-cli build whose options it shares.
    options : dict
        The CMake options (the whisper-cli build's effective options).
    cached : bool
        Reused from the cache.
    seconds : float
        Time spent.
    """

    binary: Path
    sha256: str
    key: str
    cli_key: str
    options: dict
    cached: bool
    seconds: float


def build_bench(src: Path, cli: "_build.BuildResult", *, cache_dir: Path, jobs: int = 2,
                log: Callable[[str], None] = print, timeout: float = 3600.0) -> BenchBuild:
    """Build (or reuse) ``whisper-bench`` from ``src`` with ``cli``'s exact CMake options.

    Configured in ``cache_dir/cmake/bench-<key>`` (outside the source tree), published
    through a staging folder to ``cache_dir/builds/bench-<key>/`` with a ``build.json``,
    reused only if its bytes still hash to the record.

    Raises
    ------
    verifylib.build.BuildError
        If configure or build fails; nothing is published then.
    """
    src = Path(src).resolve()
    cache_dir = Path(cache_dir).expanduser().resolve()
    key = sha256_bytes(dumps({"schema": _BENCH_SCHEMA, "target": "whisper-bench",
                              "cli_key": cli.key}))
    final = cache_dir / "builds" / f"bench-{key}"
    t0 = time.monotonic()
    try:
        meta = read_json(final / "build.json")
        if meta.get("key") == key and sha256_file(final / "whisper-bench") == meta.get("sha256"):
            return BenchBuild(final / "whisper-bench", meta["sha256"], key, cli.key,
                              dict(meta["options"]), True, time.monotonic() - t0)
    except (OSError, ValueError, AttributeError):
        pass
    bdir = cache_dir / "cmake" / f"bench-{key}"
    shutil.rmtree(bdir, ignore_errors=True)
    bdir.mkdir(parents=True)
    env = {"GIT_CEILING_DIRECTORIES": str(src.parent)}
    opts = dict(cli.options)
    configure = (["cmake", "-S", str(src), "-B", str(bdir)]
                 + [f"-D{k}={v}" for k, v in _build._with_path_maps(opts, src, bdir).items()])
    log(f"configuring whisper-bench [{cli.variant}] in {bdir} …")
    for argv, what in ((configure, "configure"),
                       (["cmake", "--build", str(bdir), "--target", "whisper-bench", "-j",
                         str(jobs)], "build")):
        res = run_child(argv, timeout=timeout, env_extra=env)
        (bdir / f"verifylib-{what}.log").write_bytes(res.stdout + b"\n--- stderr ---\n" + res.stderr)
        if not res.ok:
            raise _build.BuildError(f"whisper-bench {what} failed ({res.describe()}); log "
                                    f"{bdir / f'verifylib-{what}.log'}\n{res.stderr_text[-3000:]}")
    built = bdir / "bin" / "whisper-bench"
    if not built.is_file():
        raise _build.BuildError(f"build reported success but {built} does not exist")
    seconds = time.monotonic() - t0
    staging = Path(tempfile.mkdtemp(prefix=f".staging-bench-{key[:12]}-", dir=final.parent))
    try:
        shutil.copy2(built, staging / "whisper-bench")
        digest = sha256_file(staging / "whisper-bench")
        write_json(staging / "build.json", {"key": key, "cli_key": cli.key, "options": opts,
                                            "sha256": digest, "seconds": round(seconds, 3)})
        publish_dir(staging, final)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    shutil.rmtree(bdir, ignore_errors=True)
    log(f"built whisper-bench [{cli.variant}] in {seconds:.0f} s (sha256 {digest})")
    return BenchBuild(final / "whisper-bench", digest, key, cli.key, opts, False, seconds)


def build_coreml_variant(src: Path, *, tree_id: str, patch_sha256: str, options: Mapping,
                         cache_dir: Path, jobs: int = 2,
                         log: Callable[[str], None] = print) -> tuple["_build.BuildResult", BenchBuild]:
    """Build the Core ML ``whisper-cli`` (variant ``coreml``: ``WHISPER_COREML=1``, fallback
    OFF, static, own content-keyed folder) and a ``whisper-bench`` with its options."""
    cli = _build.build_whisper_cli(src, tree_id=tree_id, patch_sha256=patch_sha256,
                                   variant="coreml", options=options, cache_dir=cache_dir,
                                   jobs=jobs, log=log)
    return cli, build_bench(src, cli, cache_dir=cache_dir, jobs=jobs, log=log)


def probe_bench(bench: Path, model: Path, timeout: float = 300.0) -> RunResult:
    """Run ``whisper-bench`` once to read its ``system_info`` line (printed before loading).

    The model is copied alone into a scratch folder, so a Core ML build finds no
    ``.mlmodelc`` and stops after printing the line; the exit status does not matter. The
    launch goes through :func:`verifylib.runner.run_whisper_binary` (whisper-bench is not
    whisper-cli: no argv contract), so it is recorded in the bound launch ledger and the
    ``build.coreml`` evidence (:func:`write_coreml_evidence`) cites it.
    """
    scratch = Path(tempfile.mkdtemp(prefix="verifylib-bench-"))
    try:
        m = scratch / Path(model).name
        shutil.copyfile(model, m)
        return run_whisper_binary([str(bench), "-m", str(m), "-t", "1", "-w", "0"],
                                  timeout=timeout)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def write_coreml_evidence(ctx: StageContext, cli: "_build.BuildResult", bench: BenchBuild,
                          probe: RunResult, *, patch_after_problems: list[str],
                          ggml_key: str | None) -> tuple[list, dict]:
    """Write ``build.coreml`` evidence (build facts, the bench run and its streams)."""
    try:
        recorded = read_json(cli.build_json).get("sha256")
    except (OSError, ValueError, AttributeError):
        recorded = None
    ev = {"built": True, "variant": cli.variant, "key": cli.key, "binary": str(cli.binary),
          "sha256": cli.sha256, "recorded_sha256": recorded, "static": cli.static,
          "needed_libs": list(cli.needed_libs), "options": dict(cli.options),
          "tree_id": cli.tree_id, "patch_sha256": cli.patch_sha256, "cached": cli.cached,
          "seconds": round(cli.seconds, 3), "patch_after_problems": list(patch_after_problems),
          "ggml_key": ggml_key,
          "bench": {"binary": str(bench.binary), "sha256": bench.sha256, "key": bench.key,
                    "cli_key": bench.cli_key, "options": dict(bench.options),
                    "cached": bench.cached, "probe": run_record(probe)}}
    refs = [ctx.write_json("coreml_build", ev),
            ctx.write_bytes("bench_stderr", probe.stderr, "bench.stderr.txt"),
            ctx.write_bytes("bench_stdout", probe.stdout, "bench.stdout.txt")]
    return refs, {"binary.coreml.sha256": cli.sha256}


def coreml_binary(ctx: StageContext) -> tuple[Path, str]:
    """The ``build.coreml`` whisper-cli of this run and its SHA-256, re-hashed before use."""
    return _passed_binary(ctx, "build.coreml", "coreml_build")


def show(report: StageReport):
    """Display the build facts of a :class:`StageReport` as an escaped HTML table."""
    from IPython.display import HTML
    rows = "".join(f"<tr><td>{html.escape(k)}</td><td><code>{html.escape(str(v))}</code></td></tr>"
                   for k, v in report.facts.items())
    return HTML(f"<h4>Build facts</h4><table class='vl'>{rows}</table>" if rows else
                "<p>No build facts: the build gates did not run (see the table above).</p>")


def runtime_tree(ctx: StageContext) -> Path:
    """The verified whisper.cpp source folder of this run (from ``build.source_identity``).

    Raises
    ------
    RuntimeError
        If the gate did not pass, or the folder no longer has the pinned tree id.
    """
    ev = ctx.evidence_of("build.source_identity", "source")
    path = Path(ev["path"])
    # The folder is a cache entry: re-check it is still the bytes that passed.
    if not path.is_dir() or _source.git_tree_id(path) != ev["computed_tree"]:
        raise RuntimeError(f"runtime source {path} changed since build.source_identity passed")
    return path


def ggml_binary(ctx: StageContext) -> tuple[Path, str]:
    """The ``build.ggml`` whisper-cli of this run and its SHA-256, re-hashed before use."""
    return _passed_binary(ctx, "build.ggml", "build")


def _passed_binary(ctx: StageContext, gate_id: str, evidence: str) -> tuple[Path, str]:
    """The binary a passed build gate recorded, refused if its bytes changed since.

    Raises
    ------
    RuntimeError
        If the gate did not pass or the binary is not the recorded bytes.
    """
    ev = ctx.evidence_of(gate_id, evidence)
    binary = Path(ev["binary"])
    if not binary.is_file() or sha256_file(binary) != ev["sha256"]:
        raise RuntimeError(f"{binary} is not the whisper-cli that passed {gate_id}")
    return binary, ev["sha256"]
