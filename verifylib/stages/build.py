"""Stage 01_build: pinned source, exact patch, static GGML whisper-cli, system_info.

Gates judged here: ``build.source_identity``, ``build.patch_exact``, ``build.ggml``.
``build.coreml`` needs macOS with full Xcode and is not written yet.
"""

from __future__ import annotations

import html
import os
from pathlib import Path

from .. import contracts
from ..gates import Judgement, Status, rule
from ..params import Params
from ..stage import StageContext, StageReport
from .. import build as _build
from .. import source as _source

STAGE = "01_build"


def cache_dir() -> Path:
    """The shared cache of sources and builds (``$VERIFYLIB_CACHE`` or ``~/.cache/verifylib``)."""
    env = os.environ.get("VERIFYLIB_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "verifylib"


def _j(ok_detail: tuple[bool, str]) -> Judgement:
    ok, detail = ok_detail
    return Judgement(Status.PASS if ok else Status.FAIL, detail)


@rule("build.source_identity")
def _rule_source(ev) -> Judgement:
    return _j(_source.judge_source_identity(ev.json("source")))


@rule("build.patch_exact")
def _rule_patch(ev) -> Judgement:
    return _j(_source.judge_patch_exact(ev.json("patch")))


@rule("build.ggml")
def _rule_ggml(ev) -> Judgement:
    stream = ev.text("probe_stderr") + "\n" + ev.text("probe_stdout") if ev.has("probe_stderr") else ""
    return _j(_build.judge_ggml_build(ev.json("build"), stream))


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
    build_result = build_error = None
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
    return ctx.finish()


def show(report: StageReport):
    """Display the build facts of a :class:`StageReport` as an escaped HTML table."""
    from IPython.display import HTML
    rows = "".join(f"<tr><td>{html.escape(k)}</td><td><code>{html.escape(str(v))}</code></td></tr>"
                   for k, v in report.facts.items())
    return HTML(f"<h4>Build facts</h4><table>{rows}</table>" if rows else
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
    """The ``build.ggml`` whisper-cli of this run and its SHA-256, re-hashed before use.

    Raises
    ------
    RuntimeError
        If the gate did not pass or the binary's bytes changed since.
    """
    from ..canonical import sha256_file
    ev = ctx.evidence_of("build.ggml", "build")
    binary = Path(ev["binary"])
    if not binary.is_file() or sha256_file(binary) != ev["sha256"]:
        raise RuntimeError(f"{binary} is not the whisper-cli that passed build.ggml")
    return binary, ev["sha256"]
