"""Stage 01_build: pinned source, exact patch, static whisper-cli variants, system_info.

Gates judged here: ``build.source_identity``, ``build.patch_exact``, ``build.ggml`` and,
on macOS with full Xcode only, ``build.coreml`` (NOT_RUN(platform) elsewhere). A pin of the
parameter file's own manifest is built from a copy of that manifest the run carries
(:func:`run_pin`).

Besides the gated builds, the stage builds the *unpatched* static GGML ``whisper-cli``
from the pristine source (built outside it; the folder's tree id is re-checked after the
build). It is not a gate: it is the "A" side of ``canary.lifecycle_ab``, recorded in the
sidecar ``unpatched_build.json`` and the identity ``binary.ggml_unpatched.sha256``. Beside
it, two AddressSanitizer builds (unpatched and patched, :func:`sanitizer_builds`), the
sides of the informational ``canary.sanitizer``, are recorded in ``asan_builds.json``.

``build.coreml`` builds ``-DWHISPER_COREML=1 -DWHISPER_COREML_ALLOW_FALLBACK=OFF``,
static, in its own content-keyed folder, from the patched work tree (re-checked after the
build). Its ``COREML = 1`` is read from a ``whisper-bench`` built from the same tree with
exactly the same CMake options: ``whisper-bench`` prints ``system_info`` before it loads a
model, whereas ``whisper-cli`` prints it only after a successful Core ML load, which needs
an ``.mlmodelc`` that does not exist before stage 02. The Core ML ``whisper-cli`` binary's
own ``COREML = 1`` is then asserted again by ``canary.coreml_positive`` (condition 2).

Every build of the stage is pinned to one ggml backend, ``runtime.ggml_backend``
(:func:`ggml_backend`; CMake options no parameter can contradict, so in each build key):
the GGML legs and the Core ML build, whose ggml backend decodes the hybrid runs. The
probe of ``build.ggml`` and the bench of ``build.coreml`` each record what their launch
logged choosing, and the gates bind it as ``binary.ggml.backend`` and
``binary.coreml.backend``.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any, Callable, Mapping

from verifylib.canonical import read_json, sha256_bytes
from verifylib.errors import ParametersInvalid
from verifylib.evidence import identities
from verifylib.evidence.build.facts import build_facts_from_evidence
from verifylib.evidence.build.schema import (
    BenchRecord,
    CoremlBuildEvidence,
    FailedBuild,
    GgmlBuildEvidence,
    PatchEvidence,
    SourceEvidence,
)
from verifylib.evidence.gates import (
    BUILD_COREML,
    BUILD_GGML,
    BUILD_PATCH_EXACT,
    BUILD_SOURCE_IDENTITY,
    Status,
)
from verifylib.evidence.layout import (
    ASAN_SIDECAR,
    SEAM_SIDECAR,
    UNPATCHED_IDENTITY,
    UNPATCHED_SIDECAR,
    USER_MANIFEST_EVIDENCE,
    USER_PATCH_EVIDENCE,
    USER_PINS_FOLDER,
)
from verifylib.evidence.records import EvidenceRef
from verifylib.evidence.run_record import RunRecord
from verifylib.evidence.stage_report import StageReport
from verifylib.params import Params
from verifylib.resources import cache_dir
from verifylib.runtime import contracts
from verifylib.runtime.contracts.seam import SEAM_SIDES
from verifylib.runtime.runner import RunResult, run_record
from verifylib.stages.artifacts import ASAN_SIDES, source_spec
from verifylib.stages.context import StageContext
from verifylib.whispercpp import bench as _bench
from verifylib.whispercpp import build as _build
from verifylib.whispercpp import source as _source
from verifylib.whispercpp import system_info as _system_info
from verifylib.whispercpp.build_options import DEFAULT_GGML_BACKEND
from verifylib.whispercpp.cmake_steps import BuildError
from verifylib.whispercpp.pool import BuildPool

STAGE = "01_build"


def build_options(params: Params) -> dict[str, str]:
    """Return the CMake options of the GGML build, part of the build cache key.

    The ggml backend is not among them: it is passed to every build as ``backend``
    (:func:`ggml_backend`), whose pins no option may contradict.

    Parameters
    ----------
    params : Params
        The run's parameters (``runtime.ggml_native``).

    Returns
    -------
    dict
        ``{"GGML_NATIVE": "ON" or "OFF"}``.
    """
    return {"GGML_NATIVE": "ON" if params.runtime.ggml_native else "OFF"}


def ggml_backend(params: Params) -> str:
    """Return the ggml backend every build of the run is pinned to (``runtime.ggml_backend``).

    One value for every variant: the GGML legs (the ``build.ggml`` binary, the lifecycle
    A/B and its AddressSanitizer sides) and the Core ML build, whose ggml backend runs the
    hybrid decoder, so a hybrid-vs-GGML difference is the encoder's.

    Parameters
    ----------
    params : Params
        The run's parameters.

    Returns
    -------
    str
        ``cpu`` or ``metal``; ``cpu`` for parameters from before the key existed.
    """
    return params.runtime.ggml_backend or DEFAULT_GGML_BACKEND


def run(params: Params, run_dir: str | os.PathLike[str]) -> StageReport:
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
    with BuildPool() as pool:
        return _run(params, run_dir, pool)


def _run(params: Params, run_dir: str | os.PathLike[str], pool: BuildPool) -> StageReport:
    """:func:`run`'s body; the variants' builds start together in ``pool``."""
    ctx = StageContext(STAGE, params, run_dir)
    cache = cache_dir()
    pin, carried, carried_ids = run_pin(ctx, params)
    tree = _source_gate(ctx, params, pin, cache, carried, carried_ids)
    patched, build_result, build_error = _patch_gate(ctx, params, pin, cache, tree, pool,
                                                     carried, carried_ids)
    _ggml_gate(ctx, tree, build_result, build_error)
    if tree is not None and params.canary.enabled:
        unpatched_build(ctx, tree.path, pin, build_options(params), cache,
                        jobs=params.runtime.jobs, backend=ggml_backend(params), pool=pool)
        exact = ctx.records.get(BUILD_PATCH_EXACT)
        sanitizer_builds(ctx, tree.path,
                         patched.path if patched is not None and exact is not None
                         and exact.status is Status.PASS else None,
                         pin, build_options(params), cache, jobs=params.runtime.jobs,
                         backend=ggml_backend(params), pool=pool)
    if tree is not None and params.seam.enabled:
        exact = ctx.records.get(BUILD_PATCH_EXACT)
        seam_builds(ctx, tree.path,
                    patched.path if patched is not None and exact is not None
                    and exact.status is Status.PASS else None,
                    pin, build_options(params), cache, jobs=params.runtime.jobs,
                    backend=ggml_backend(params), pool=pool,
                    canaries=params.canary.enabled)
    return _coreml_gate(ctx, params, pin, cache, tree, patched, build_result)


def run_pin(ctx: StageContext, params: Params
            ) -> tuple["_source.Pin", list[EvidenceRef], dict[str, str]]:
    """Return the run's pin and, for a user-declared pin, the evidence and identity it carries.

    A packaged pin comes from the packaged manifest: no evidence, no identity. A pin of
    the parameter file's own manifest (``runtime.manifest``) is a user-declared pin: the
    manifest and every patch it names are copied byte for byte into
    ``evidence/01_build/user-pins/`` (at their paths relative to the manifest) and the pin
    is loaded from that copy, held to its digests again. So the pin built is the pin the
    run carries, and ``verify`` re-checks it against the copy whatever becomes of the
    user's file. Both source gates cite the copy and bind its SHA-256
    (:data:`verifylib.evidence.identities.RUNTIME_MANIFEST`).

    Parameters
    ----------
    ctx : StageContext
        Stage 01's context (the copy is written through it).
    params : Params
        The run's parameters (``runtime.pin``, ``runtime.manifest``).

    Returns
    -------
    (Pin, list of EvidenceRef, dict)
        The pin; the carried manifest and patches (empty for a packaged pin); the identity
        ``{"runtime.manifest.sha256": …}`` (empty for a packaged pin).

    Raises
    ------
    verifylib.errors.ParametersInvalid
        If the user's manifest no longer loads, or no longer holds the pin.
    """
    name = params.runtime.pin
    packaged = _source.load_pins()
    if name in packaged or params.runtime.manifest is None:
        return packaged[name], [], {}
    manifest = Path(params.runtime.manifest)
    user = _source.load_user_pins(manifest, packaged)
    data = manifest.read_bytes()
    refs = [ctx.write_bytes(USER_MANIFEST_EVIDENCE, data, f"{USER_PINS_FOLDER}/{manifest.name}")]
    for rel in sorted({_source.patch_rel_path(manifest, p) for p in user.values()}):
        refs.append(ctx.write_bytes(USER_PATCH_EVIDENCE + rel,
                                    (manifest.parent / rel).read_bytes(),
                                    f"{USER_PINS_FOLDER}/{rel}"))
    # Loaded from the copy: a file the user edits during the run changes nothing built.
    pins = _source.load_user_pins(ctx.evidence_dir / USER_PINS_FOLDER / manifest.name, packaged)
    if name not in pins:
        raise ParametersInvalid(f"{manifest}: pin {name!r} is no longer in the manifest")
    return pins[name], refs, {identities.RUNTIME_MANIFEST: sha256_bytes(data)}


def _source_gate(ctx: StageContext, params: Params, pin: "_source.Pin", cache: Path,
                 carried: list[EvidenceRef], carried_ids: dict[str, str]
                 ) -> "_source.SourceTree | None":
    """Judge build.source_identity; the pristine source when it is the pin's."""
    tree = None
    g = ctx.begin(BUILD_SOURCE_IDENTITY)
    if g:
        with g:
            st = _source.obtain_source(source_spec(params), cache, log=print)
            computed = _source.git_tree_id(st.path)
            # Written through its schema: the document is the judge's, field for field.
            evidence = SourceEvidence.from_json(_source.source_evidence(pin, computed, st))
            ref = ctx.write_json("source", evidence.to_json())
            rec = g.judge([ref, *carried], {"runtime.pin": pin.name, "runtime.commit": pin.commit,
                                            "runtime.tree": computed, **carried_ids})
            if rec.status is Status.PASS:
                tree = st
    return tree


def _patch_gate(ctx: StageContext, params: Params, pin: "_source.Pin", cache: Path,
                tree: "_source.SourceTree | None", pool: BuildPool,
                carried: list[EvidenceRef], carried_ids: dict[str, str]
                ) -> tuple["_source.PatchedTree | None", "_build.BuildResult | None", str | None]:
    """Judge build.patch_exact, starting the variants' builds once the patch is exact.

    Returns the patched work tree, the GGML build and the GGML build's error, each None
    when it did not come about. A user-declared pin's carried manifest is cited and bound
    (:func:`run_pin`).
    """
    build_result: _build.BuildResult | None = None
    build_error: str | None = None
    patched: _source.PatchedTree | None = None
    g = ctx.begin(BUILD_PATCH_EXACT)
    if g:
        with g:
            if tree is None:
                raise RuntimeError("build.source_identity passed but left no source tree")
            checks: dict[str, Any] = {}
            try:
                patched = _source.prepare_patched_tree(tree.path, pin, cache / "work")
            except _source.PatchError as exc:
                patched = None
                checks["apply_error"] = str(exc)
            if patched is not None:
                before = _source.check_patch_exact(patched.path, pin)
                checks["before"] = before.to_evidence()
                if before.ok:
                    start_builds(pool, params, pin, cache, pristine=tree.path,
                                 patched=patched.path)
                    try:
                        build_result = pool.result(
                            "ggml", _build.build_whisper_cli,
                            patched.path, tree_id=pin.tree, patch_sha256=pin.patch_sha256,
                            variant="ggml", options=build_options(params), cache_dir=cache,
                            jobs=params.runtime.jobs, log=print,
                            backend=ggml_backend(params))
                    except BuildError as exc:
                        build_error = str(exc)
                    checks["after"] = _source.check_patch_exact(patched.path, pin).to_evidence()
            ev = PatchEvidence.from_json(_source.patch_evidence(pin, checks))
            ref = ctx.write_json("patch", ev.to_json())
            g.judge([ref, *carried], {"runtime.patch_sha256": pin.patch_sha256, **carried_ids})
    return patched, build_result, build_error


def _ggml_gate(ctx: StageContext, tree: "_source.SourceTree | None",
               build_result: "_build.BuildResult | None", build_error: str | None) -> None:
    """Judge build.ggml: the GGML build, probed on the tree's test model and sample."""
    g = ctx.begin(BUILD_GGML)
    if g:
        with g:
            refs = []
            if build_result is None:
                failed = FailedBuild(error=build_error or "build did not run")
                refs.append(ctx.write_json("build", failed.to_json()))
                g.judge(refs)
            else:
                if tree is None:
                    raise RuntimeError("the GGML build ran but build.source_identity left no "
                                       "source tree")
                fx = tree.path
                probe = _system_info.probe_system_info(
                    build_result.binary, fx / contracts.TEST_MODEL_IN_TREE,
                    fx / contracts.TEST_AUDIO_IN_TREE)
                refs.append(ctx.write_bytes("probe_stderr", probe.result.stderr,
                                            "probe.stderr.txt"))
                refs.append(ctx.write_bytes("probe_stdout", probe.result.stdout,
                                            "probe.stdout.txt"))
                built = GgmlBuildEvidence.from_json(
                    _system_info.build_evidence(build_result, probe))
                refs.append(ctx.write_json("build", built.to_json()))
                ids = {identities.BINARY_GGML: build_result.sha256}
                if built.ggml_backend is not None:
                    ids[identities.BINARY_GGML_BACKEND] = built.ggml_backend
                g.judge(refs, ids)


def _coreml_gate(ctx: StageContext, params: Params, pin: "_source.Pin", cache: Path,
                 tree: "_source.SourceTree | None", patched: "_source.PatchedTree | None",
                 build_result: "_build.BuildResult | None") -> StageReport:
    """Judge build.coreml, the stage's last gate, and close the stage (:func:`_finish`)."""
    g = ctx.begin(BUILD_COREML)
    if g:
        with g:
            if patched is None or tree is None:
                raise RuntimeError("build.patch_exact passed but left no patched work tree")
            try:
                cli, bench = _bench.build_coreml_variant(patched.path, tree_id=pin.tree,
                                                  patch_sha256=pin.patch_sha256,
                                                  options=build_options(params), cache_dir=cache,
                                                  jobs=params.runtime.jobs,
                                                  backend=ggml_backend(params))
            except BuildError as exc:
                # A Core ML build that does not build is this gate's FAIL, with its log tail.
                g.judge([ctx.write_json("coreml_build", FailedBuild(error=str(exc)).to_json())])
                return _finish(ctx)
            after = _source.check_patch_exact(patched.path, pin)
            probe = _bench.probe_bench(bench.binary, tree.path / contracts.TEST_MODEL_IN_TREE)
            refs, ids = write_coreml_evidence(
                ctx, cli, bench, probe, patch_after_problems=list(after.problems),
                ggml_key=build_result.key if build_result is not None else None,
                ggml_backend=build_result.ggml_backend if build_result is not None else None)
            g.judge(refs, ids)
    return _finish(ctx)


def _finish(ctx: StageContext) -> StageReport:
    """Close the stage and attach its facts table.

    The facts come from the files the gates cite and the two sidecars, read back exactly
    as :func:`verifylib.open_run` reads a published run.
    """
    report = ctx.finish()
    sidecars = {role: next((r for r in ctx.written if r.name == name), None)
                for role, name in (("unpatched", UNPATCHED_SIDECAR), ("asan", ASAN_SIDECAR))}
    report.facts = build_facts_from_evidence(ctx.run_dir, ctx.records, sidecars)
    return report


# ----------------------------------------------------------------------------- build order

UNPATCHED_VARIANT = "ggml-unpatched"


def start_builds(pool: BuildPool, params: Params, pin: "_source.Pin", cache: Path, *,
                 pristine: Path, patched: Path) -> list[str]:
    """Start every whisper-cli build the stage will ask for, in the order it asks.

    The patched GGML build first (``build.ggml`` waits for it), then, with the canaries
    on, the patched AddressSanitizer one beside it, and the two unpatched ones after
    them: those differ from the patched pair in ``src/whisper.cpp`` alone, so by then the
    compiler cache (:mod:`verifylib.whispercpp.compiler_cache`) holds every other object
    they compile. Of the two, the longer (AddressSanitizer) goes first, to whichever
    worker frees first, so the pair ends together. Each is collected later by its variant
    name with the same arguments the sequential call would pass, so a build that is not
    started here (or a stage that stops early) changes nothing but time.

    Parameters
    ----------
    pool : BuildPool
        Where the builds run.
    params : Params
        The stage's parameters.
    pin : Pin
        The runtime pin.
    cache : Path
        The shared cache.
    pristine, patched : Path
        The verified pristine source and the patched work tree (its patch checked).

    Returns
    -------
    list of str
        The variants started.
    """
    common = dict(tree_id=pin.tree, options=build_options(params), cache_dir=cache,
                  jobs=params.runtime.jobs, log=print, backend=ggml_backend(params))
    order: list[tuple[str, Path, str | None]] = [("ggml", patched, pin.patch_sha256)]
    if params.canary.enabled:
        order += [(ASAN_SIDES["patched"][0], patched, pin.patch_sha256),
                  (ASAN_SIDES["unpatched"][0], pristine, None),
                  (UNPATCHED_VARIANT, pristine, None)]
    if params.seam.enabled:
        # After the GGML pair: the seam builds share every object but src/whisper.cpp
        # (and the seam's own file) with them through the compiler cache.
        order += [(SEAM_SIDES["patched"][0], patched, pin.patch_sha256)]
        if params.canary.enabled:
            order += [(SEAM_SIDES["unpatched_asan"][0], pristine, None),
                      (SEAM_SIDES["unpatched"][0], pristine, None)]
    for variant, src, patch in order:
        pool.start(variant, _build.build_whisper_cli, src, patch_sha256=patch,
                   variant=variant, **common)
    return [variant for variant, _, _ in order]


def _collect(pool: BuildPool | None, variant: str) -> Callable[..., "_build.BuildResult"]:
    """Return the builder of ``variant``: the started build's outcome, else a build now."""
    if pool is None:
        return _build.build_whisper_cli
    return functools.partial(pool.result, variant, _build.build_whisper_cli)


# ----------------------------------------------------------------------------- unpatched build

def unpatched_build(ctx: StageContext, pristine: Path, pin: "_source.Pin",
                    options: Mapping[str, Any], cache: Path, *, jobs: int = 2,
                    log: Callable[[str], None] = print, backend: str = DEFAULT_GGML_BACKEND,
                    pool: BuildPool | None = None) -> dict[str, Any]:
    """Build the unpatched static GGML whisper-cli, the "A" side of the lifecycle A/B.

    The pristine source folder is a cache entry: the build runs outside it and its tree id
    is re-computed afterwards; a change is recorded as a failed build. The outcome goes to
    the sidecar ``unpatched_build.json`` (not a gate's evidence) and, when built, to the
    identity ``binary.ggml_unpatched.sha256``.

    Parameters
    ----------
    ctx : StageContext
        Stage 01's context.
    pristine : Path
        The verified pristine source.
    pin : Pin
        The runtime pin (its ``tree`` is the expected tree id).
    options : mapping
        The GGML build's CMake options.
    cache : Path
        The shared cache.
    jobs : int
        Parallel compile jobs.
    log : callable
        Receives build progress lines.
    backend : str
        The ggml backend, the patched build's (the A/B differs by the patch alone).
    pool : BuildPool, optional
        Where :func:`start_builds` may have started this build already.

    Returns
    -------
    dict
        The sidecar content.
    """
    try:
        res = _collect(pool, UNPATCHED_VARIANT)(pristine, tree_id=pin.tree, patch_sha256=None,
                                       variant=UNPATCHED_VARIANT, options=options,
                                       cache_dir=cache, jobs=jobs, log=log, backend=backend)
        after = _source.git_tree_id(pristine)
        if after != pin.tree:
            ev = {"built": False, "error": f"the pristine source {pristine} changed during the "
                                           f"build (tree {after}, expected {pin.tree})"}
        else:
            ev = {"built": True, "variant": res.variant, "binary": str(res.binary),
                  "sha256": res.sha256, "key": res.key, "static": res.static,
                  "needed_libs": list(res.needed_libs), "options": dict(res.options),
                  "tree_id": res.tree_id, "patch_sha256": None, "cached": res.cached,
                  "seconds": round(res.seconds, 3), "source_tree_after": after,
                  "ggml_backend": res.ggml_backend}
    except BuildError as exc:
        ev = {"built": False, "error": str(exc)}
    ctx.write_json(UNPATCHED_SIDECAR, ev)
    if ev["built"]:
        ctx.identity(UNPATCHED_IDENTITY, ev["sha256"])
    return ev


# ----------------------------------------------------------------------------- ASan builds

def _sidecar_record(res: "_build.BuildResult") -> dict[str, Any]:
    return {"built": True, "variant": res.variant, "binary": str(res.binary),
            "sha256": res.sha256, "key": res.key, "static": res.static,
            "needed_libs": list(res.needed_libs), "options": dict(res.options),
            "tree_id": res.tree_id, "patch_sha256": res.patch_sha256, "cached": res.cached,
            "seconds": round(res.seconds, 3), "ggml_backend": res.ggml_backend}


def sanitizer_builds(ctx: StageContext, pristine: Path, patched: Path | None,
                     pin: "_source.Pin", options: Mapping[str, Any], cache: Path, *,
                     jobs: int = 2,
                     log: Callable[[str], None] = print,
                     backend: str = DEFAULT_GGML_BACKEND,
                     pool: BuildPool | None = None) -> dict[str, dict[str, Any]]:
    """Build the AddressSanitizer whisper-cli of both sides of ``canary.sanitizer``.

    Variant ``ggml-unpatched-asan`` from the pristine source and ``ggml-asan`` from the
    patched work tree, each in its own content-keyed folder, with the GGML build's options
    plus the forced sanitizer flags. Not a gate: the outcome goes to the sidecar
    ``asan_builds.json`` and, per built side, to the identities of
    :data:`verifylib.stages.artifacts.ASAN_SIDES`. Both source folders are re-checked after
    the build (the pristine tree id; the patched tree's exact diff); a change is recorded
    as a failed build, as is a build that did not build.

    Parameters
    ----------
    ctx : StageContext
        Stage 01's context.
    pristine : Path
        The verified pristine source.
    patched : Path or None
        The patched work tree, or None when ``build.patch_exact`` did not pass.
    pin : Pin
        The runtime pin.
    options : mapping
        The GGML build's CMake options.
    cache : Path
        The shared cache.
    jobs : int
        Parallel compile jobs.
    log : callable
        Receives build progress lines.
    backend : str
        The ggml backend, the GGML builds'.
    pool : BuildPool, optional
        Where :func:`start_builds` may have started these builds already.

    Returns
    -------
    dict
        The sidecar content: side -> build record or ``{"built": False, "error"}``.
    """
    sides = (("unpatched", pristine, None), ("patched", patched, pin.patch_sha256))
    out = {side: _side_build(side, ASAN_SIDES[side][0], src, patch, pristine, pin, options,
                             cache, jobs=jobs, log=log, backend=backend, pool=pool)
           for side, src, patch in sides}
    ctx.write_json(ASAN_SIDECAR, out)
    for side, ev in out.items():
        if ev["built"]:
            ctx.identity(ASAN_SIDES[side][1], ev["sha256"])
    return out


# ----------------------------------------------------------------------------- seam builds

def seam_builds(ctx: StageContext, pristine: Path, patched: Path | None,
                pin: "_source.Pin", options: Mapping[str, Any], cache: Path, *,
                jobs: int = 2, log: Callable[[str], None] = print,
                backend: str = DEFAULT_GGML_BACKEND, pool: BuildPool | None = None,
                canaries: bool = True) -> dict[str, dict[str, Any]]:
    """Build whisper.cpp's Core ML path against verifylib's seam (docs/runtime-contract.md §11).

    Variant ``seam`` from the patched work tree (the seam gates' launches) and, with the
    canaries on, ``seam-unpatched`` and ``seam-unpatched-asan`` from the pristine source
    (the negative control's recorded sides). Each in its own content-keyed folder, with the
    GGML build's options plus the seam's forced ones. Not a gate: the outcome goes to the
    sidecar ``seam_builds.json`` and, per built side, to the identities of
    :data:`verifylib.runtime.contracts.seam.SEAM_SIDES`; the source folders are re-checked
    after the builds as for the sanitizer builds.

    Parameters
    ----------
    ctx : StageContext
        Stage 01's context.
    pristine : Path
        The verified pristine source.
    patched : Path or None
        The patched work tree, or None when ``build.patch_exact`` did not pass.
    pin : Pin
        The runtime pin.
    options : mapping
        The GGML build's CMake options.
    cache : Path
        The shared cache.
    jobs : int
        Parallel compile jobs.
    log : callable
        Receives build progress lines.
    backend : str
        The ggml backend, the GGML builds'.
    pool : BuildPool, optional
        Where :func:`start_builds` may have started these builds already.
    canaries : bool
        Build the unpatched sides too (parameter ``canary.enabled``).

    Returns
    -------
    dict
        The sidecar content: side -> build record or ``{"built": False, "error"}``.
    """
    out: dict[str, dict[str, Any]] = {}
    sides: list[tuple[str, Path | None, str | None]] = [("patched", patched, pin.patch_sha256)]
    if canaries:
        sides += [("unpatched", pristine, None), ("unpatched_asan", pristine, None)]
    for side, src, patch in sides:
        out[side] = _side_build(side, SEAM_SIDES[side][0], src, patch, pristine, pin, options,
                                cache, jobs=jobs, log=log, backend=backend, pool=pool)
    ctx.write_json(SEAM_SIDECAR, out)
    for side, ev in out.items():
        if ev["built"]:
            ctx.identity(SEAM_SIDES[side][1], ev["sha256"])
    return out


def _side_build(side: str, variant: str, src: Path | None, patch: str | None, pristine: Path,
                pin: "_source.Pin", options: Mapping[str, Any], cache: Path, *, jobs: int,
                log: Callable[[str], None], backend: str,
                pool: BuildPool | None) -> dict[str, Any]:
    """Build one side of a sidecar of builds; its record, or why it was not built.

    The source is re-checked after the build (the pristine tree id; the patched tree's exact
    diff): a change is recorded as a failed build, as is a build that did not build.
    """
    if src is None:
        return {"built": False, "error": "build.patch_exact did not pass: no patched work tree"}
    try:
        res = _collect(pool, variant)(src, tree_id=pin.tree, patch_sha256=patch,
                                       variant=variant, options=options, cache_dir=cache,
                                       jobs=jobs, log=log, backend=backend)
    except BuildError as exc:
        return {"built": False, "error": str(exc)}
    if patch is None:
        after = _source.git_tree_id(pristine)
        changed = [] if after == pin.tree else [f"tree {after}, expected {pin.tree}"]
    else:
        changed = list(_source.check_patch_exact(src, pin).problems)
    if changed:
        return {"built": False, "error": f"the {side} source {src} changed during the build: "
                                         f"{'; '.join(changed)}"}
    return _sidecar_record(res)


# ----------------------------------------------------------------------------- Core ML build

def write_coreml_evidence(ctx: StageContext, cli: "_build.BuildResult",
                          bench: "_bench.BenchBuild", probe: RunResult, *,
                          patch_after_problems: list[str],
                          ggml_key: str | None,
                          ggml_backend: str | None = None
                          ) -> tuple[list[EvidenceRef], dict[str, Any]]:
    """Write ``build.coreml`` evidence (build facts, the bench run and its streams).

    Parameters
    ----------
    ctx : StageContext
        Stage 01's context.
    cli : BuildResult
        The Core ML whisper-cli build.
    bench : BenchBuild
        The whisper-bench build of the same tree.
    probe : RunResult
        The bench probe run.
    patch_after_problems : list of str
        Problems of the patched tree's exact-diff check after the build.
    ggml_key : str or None
        The GGML build's cache key, when it built.
    ggml_backend : str or None
        The GGML build's ggml backend, when it built: bound by the gate, whose rule
        requires the Core ML build's (the hybrid decoder's) to be the same.

    Returns
    -------
    refs : list
        The references of the ``coreml_build`` record and the bench's two streams.
    identities : dict
        ``{binary.coreml.sha256: <digest>}``, with ``binary.coreml.backend`` when the
        build pins a backend and ``binary.ggml.backend`` when ``ggml_backend`` is given.
    """
    try:
        recorded = read_json(cli.build_json).get("sha256")
    except (OSError, ValueError, AttributeError):
        recorded = None
    backend = cli.ggml_backend
    ev = CoremlBuildEvidence(
        variant=cli.variant, key=cli.key, binary=str(cli.binary), sha256=cli.sha256,
        recorded_sha256=recorded, static=cli.static, needed_libs=tuple(cli.needed_libs),
        options=dict(cli.options), tree_id=cli.tree_id, patch_sha256=cli.patch_sha256,
        cached=cli.cached, seconds=round(cli.seconds, 3),
        patch_after_problems=tuple(patch_after_problems), ggml_key=ggml_key,
        bench=BenchRecord(binary=str(bench.binary), sha256=bench.sha256, key=bench.key,
                          cli_key=bench.cli_key, options=dict(bench.options),
                          cached=bench.cached, probe=RunRecord.from_json(run_record(probe)),
                          backend=None if backend is None else contracts.launch_backend(
                              probe.stderr_text + "\n" + probe.stdout_text)),
        ggml_backend=backend)
    refs = [ctx.write_json("coreml_build", ev.to_json()),
            ctx.write_bytes("bench_stderr", probe.stderr, "bench.stderr.txt"),
            ctx.write_bytes("bench_stdout", probe.stdout, "bench.stdout.txt")]
    ids = {identities.BINARY_COREML: cli.sha256}
    if backend is not None:
        ids[identities.BINARY_COREML_BACKEND] = backend
    if ggml_backend is not None:
        ids[identities.BINARY_GGML_BACKEND] = ggml_backend
    return refs, ids
