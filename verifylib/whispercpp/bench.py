"""whisper-bench built with a whisper-cli build's exact options, and the Core ML pair.

Stage 01 reads the Core ML build's ``system_info`` through ``whisper-bench``, which prints
it before loading a model: :func:`build_bench` builds that binary from the same source,
options and shared ggml as the whisper-cli it stands beside, keyed by that build's key and
published like it (:mod:`verifylib.whispercpp.build`); :func:`build_coreml_variant` builds
the pair and :func:`probe_bench` runs it once.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping

from verifylib.canonical import (
    dumps,
    is_sha256,
    publish_dir,
    read_json,
    sha256_bytes,
    sha256_file,
    write_json,
)
from verifylib.locks import (
    LOCKS_DIR,
    STAGING_PREFIX,
    make_owned_dir,
    produce_once,
    remove_owned_dir,
)
from verifylib.runtime.runner import RunResult, run_whisper_binary
from verifylib.whispercpp import build, cmake_steps, compiler_cache
from verifylib.whispercpp.build_options import DEFAULT_GGML_BACKEND
from verifylib.whispercpp.cmake_steps import BuildError
from verifylib.whispercpp.shared_ggml import build_ggml

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


def _bench_problem(folder: Path, key: str) -> tuple[str | None, dict]:
    """Why a published whisper-bench cannot be reused (None when it matches its record).

    Parameters
    ----------
    folder : Path
        The publication, ``cache/builds/bench-<key>``.
    key : str
        The key it must be published under.

    Returns
    -------
    (str or None, dict)
        The reason, or None and the publication's ``build.json``.
    """
    try:
        meta = read_json(folder / "build.json")
    except (OSError, ValueError) as exc:
        return f"build.json unreadable: {exc}", {}
    if not isinstance(meta, dict) or meta.get("key") != key:
        return "build.json belongs to another key", {}
    if not is_sha256(meta.get("sha256")):
        return "build.json holds no well-formed sha256", {}
    if not isinstance(meta.get("options"), dict):
        return "build.json holds no options", {}
    binary = folder / "whisper-bench"
    if not binary.is_file():
        return "binary missing", {}
    actual = sha256_file(binary)
    if actual != meta["sha256"]:
        return f"binary sha256 {actual} differs from the recorded {meta['sha256']}", {}
    return None, meta


def build_bench(src: Path, cli: build.BuildResult, *, cache_dir: Path, jobs: int = 2,
                log: Callable[[str], None] = print, timeout: float = 3600.0) -> BenchBuild:
    """Build (or reuse) ``whisper-bench`` from ``src`` with ``cli``'s exact CMake options.

    Configured in ``cache_dir/cmake/bench-<key>`` (outside the source tree), published
    through a staging folder to ``cache_dir/builds/bench-<key>/`` with a ``build.json``,
    reused only if its bytes still hash to the record (a damaged one is rebuilt and
    replaced, with one line saying so); built under the key's lock
    (``cache_dir/locks/bench-<key>.lock``) like
    :func:`verifylib.whispercpp.build.build_whisper_cli`.

    Raises
    ------
    BuildError
        If configure or build fails; nothing is published then.
    """
    src = Path(src).resolve()
    cache_dir = Path(cache_dir).expanduser().resolve()
    ccache = compiler_cache.compiler_cache(cache_dir)
    payload = {"schema": _BENCH_SCHEMA, "target": "whisper-bench", "cli_key": cli.key}
    if (launcher := compiler_cache.launcher_of(ccache)) is not None:
        payload["launcher"] = launcher
    key = sha256_bytes(dumps(payload))
    final = cache_dir / "builds" / f"bench-{key}"
    t0 = time.monotonic()
    reported: set[str] = set()  # each reason logged once: checked before and under the lock

    def reuse() -> BenchBuild | None:
        if not final.is_dir():
            return None
        problem, meta = _bench_problem(final, key)
        if problem is not None:
            # Said once, as whisper-cli's own check says it: the publication is rebuilt
            # (and replaced) rather than trusted.
            if problem not in reported:
                reported.add(problem)
                log(f"cached whisper-bench [{cli.variant}] at {final} not reusable "
                    f"({problem}); rebuilding")
            return None
        return BenchBuild(final / "whisper-bench", meta["sha256"], key, cli.key,
                          dict(meta["options"]), True, time.monotonic() - t0)

    def produce() -> BenchBuild:
        root = cache_dir / "cmake" / f"bench-{key}"
        opts = dict(cli.options)
        ggml = None
        if cli.ggml is not None:  # the same ggml as the whisper-cli whose options it shares
            ggml = build_ggml(src, tree_id=cli.tree_id, options=cli.ggml["options"],
                              cache_dir=cache_dir, jobs=jobs, log=log, timeout=timeout,
                              compiler=cli.compiler)
            if ggml.key != cli.ggml["key"]:
                raise BuildError(f"whisper-bench [{cli.variant}]: the shared ggml's key "
                                 f"{ggml.key} is not the whisper-cli's {cli.ggml['key']}")
        tree, bdir = cmake_steps.build_tree(src, root)
        # Looked up on its module, like whisper-cli's: a simulated Mac replaces it there.
        built, _ = cmake_steps.cmake_target(tree, bdir, opts, "whisper-bench",
                                            f"whisper-bench [{cli.variant}]", jobs=jobs,
                                            timeout=timeout, log=log, ggml=ggml, ccache=ccache)
        seconds = time.monotonic() - t0
        cache_use = cmake_steps.compiler_cache_use(bdir, ccache)
        staging = make_owned_dir(final.parent, f"{STAGING_PREFIX}bench-{key[:12]}-",
                                 family=STAGING_PREFIX)
        try:
            shutil.copy2(built, staging / "whisper-bench")
            digest = sha256_file(staging / "whisper-bench")
            write_json(staging / "build.json", {
                "key": key, "cli_key": cli.key, "options": opts, "sha256": digest,
                "seconds": round(seconds, 3),
                "compiler_cache": cmake_steps.compiler_cache_record(cache_use)})
            publish_dir(staging, final)
        finally:
            remove_owned_dir(staging)
        shutil.rmtree(root, ignore_errors=True)
        log(f"built whisper-bench [{cli.variant}] in {seconds:.0f} s (sha256 {digest}"
            f"{cmake_steps.compiler_cache_phrase(cache_use)})")
        return BenchBuild(final / "whisper-bench", digest, key, cli.key, opts, False, seconds)

    return produce_once(cache_dir / LOCKS_DIR, "bench", key, check=reuse, produce=produce,
                        what=f"whisper-bench [{cli.variant}] build {key[:12]}", log=log)


def build_coreml_variant(src: Path, *, tree_id: str, patch_sha256: str, options: Mapping,
                         cache_dir: Path, jobs: int = 2,
                         log: Callable[[str], None] = print,
                         backend: str = DEFAULT_GGML_BACKEND,
                         ) -> tuple[build.BuildResult, BenchBuild]:
    """Build the Core ML ``whisper-cli`` and a ``whisper-bench`` with its options.

    The ``whisper-cli`` is variant ``coreml``: ``WHISPER_COREML=1``, fallback OFF, static,
    own content-keyed folder. Its ggml backend is the decoder's of the hybrid runs: pass
    the GGML build's, so a WER difference between the two is the encoder's.

    Parameters
    ----------
    src : Path
        The patched source folder.
    tree_id : str
        Its pristine tree id (keys the cache).
    patch_sha256 : str
        Digest of the applied patch.
    options : mapping
        Extra CMake options
        (see :func:`verifylib.whispercpp.build_options.effective_options`).
    cache_dir : Path
        Cache root shared with :mod:`verifylib.whispercpp.source`.
    jobs : int
        Parallel compile jobs.
    log : callable
        Receives one-line progress messages.
    backend : str
        The ggml backend both binaries are pinned to
        (:func:`verifylib.whispercpp.build_options.backend_options`).

    Returns
    -------
    (BuildResult, BenchBuild)
        The published ``whisper-cli`` and the ``whisper-bench`` built with its options.
    """
    # Looked up on its module, so a stand-in for build_whisper_cli stands in here too.
    cli = build.build_whisper_cli(src, tree_id=tree_id, patch_sha256=patch_sha256,
                                  variant="coreml", options=options, cache_dir=cache_dir,
                                  jobs=jobs, log=log, backend=backend)
    return cli, build_bench(src, cli, cache_dir=cache_dir, jobs=jobs, log=log)


def probe_bench(bench: Path, model: Path, timeout: float = 300.0) -> RunResult:
    """Run ``whisper-bench`` once to read its ``system_info`` line (printed before loading).

    The model is copied alone into a scratch folder, so a Core ML build finds no
    ``.mlmodelc`` and stops after printing the line; the exit status does not matter. The
    launch goes through ``verifylib.runtime.runner.run_whisper_binary`` (whisper-bench is not
    whisper-cli: no argv contract), so it is recorded in the bound launch ledger and the
    ``build.coreml`` evidence cites it.
    """
    scratch = Path(tempfile.mkdtemp(prefix="verifylib-bench-"))
    try:
        m = scratch / Path(model).name
        shutil.copyfile(model, m)
        return run_whisper_binary([str(bench), "-m", str(m), "-t", "1", "-w", "0"],
                                  timeout=timeout)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
