"""Build a static whisper-cli per variant, cache it by content key, and publish it.

Why this is hand-written: the build-hygiene rules of docs/runtime-contract.md §3 (a
separate build folder per variant, outside the source tree; the SHA-256 of the produced
binary recorded; a binary whose digest covers the patched library code) are not what a
generic CMake wrapper enforces. Here the key of a build is the SHA-256 of everything that
decides its bytes (source tree id, patch digest, variant, CMake options with the pinned
ggml backend, compiler and host CPU, and on macOS the selected Xcode and SDK; see
:mod:`verifylib.whispercpp.build_options` and :mod:`verifylib.whispercpp.toolchain`), the
binary is linked statically (``BUILD_SHARED_LIBS=OFF``, see docs/facts.md) and published
with its ``build.json`` through a staging folder, so a failed or interrupted build
publishes nothing and a cached one is re-hashed before reuse.

ggml is built once and shared (:mod:`verifylib.whispercpp.shared_ggml`): each variant
configures with whisper.cpp's ``WHISPER_USE_SYSTEM_GGML`` route against the shared prefix
and compiles only libwhisper, its examples' ``common`` library and the CLI, each compile
launched through the compiler cache of :mod:`verifylib.whispercpp.compiler_cache` (the
cmake steps are :mod:`verifylib.whispercpp.cmake_steps`), so what another variant already
compiled (all but ``src/whisper.cpp``, between patched and unpatched) is not compiled
again. The ggml build's key, options and library digests are in each variant's key and
``build.json``; a source whose CMake project has no ``WHISPER_USE_SYSTEM_GGML`` (older
pins) is built in one piece, as before, and records ``ggml: null``. One process at a time
builds a key (its lock in ``<cache>/locks``, see :mod:`verifylib.locks`); another that
wanted the same key waits, then reuses that publication once it re-hashes. Every
subprocess goes through :func:`verifylib.runtime.runner.run`.
"""

from __future__ import annotations

import platform
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

from verifylib.canonical import is_sha256, publish_dir, read_json, sha256_file, write_json
from verifylib.errors import ParametersInvalid
from verifylib.locks import (
    LOCKS_DIR,
    STAGING_PREFIX,
    make_owned_dir,
    produce_once,
    remove_owned_dir,
)
from verifylib.runtime.runner import RunResult, run
from verifylib.whispercpp import cmake_steps, compiler_cache, seam_sources
from verifylib.whispercpp.build_options import (
    DEFAULT_GGML_BACKEND,
    SEAM_VARIANTS,
    backend_of_options,
    build_key,
    effective_options,
)
from verifylib.whispercpp.cmake_steps import BuildError
from verifylib.whispercpp.compiler_cache import CacheUse, CompilerCache
from verifylib.whispercpp.shared_ggml import (
    GgmlBuild,
    build_ggml,
    ggml_key,
    ggml_options,
    ggml_source_digest,
    uses_shared_ggml,
)
from verifylib.whispercpp.toolchain import compiler_identity

_SHARED_RUNTIME_PREFIXES = ("libwhisper", "libggml")


# ----------------------------------------------------------------------------- linking

def needed_libs(binary: Path) -> tuple[str, ...]:
    """List the shared libraries a binary asks the loader for.

    Parameters
    ----------
    binary : Path
        An executable.

    Returns
    -------
    tuple of str
        ELF ``DT_NEEDED`` entries (``readelf -d``, else ``objdump -p``), or on macOS the
        ``otool -L`` install names, in file order.

    Raises
    ------
    BuildError
        If no inspection tool is available or it cannot read the file.
    """
    binary = Path(binary)
    if platform.system() == "Darwin":
        res = _inspect(["otool", "-L", str(binary)])
        lines = res.stdout_text.splitlines()[1:]
        return tuple(line.strip().split(" (", 1)[0] for line in lines if line.strip())
    try:
        res = _inspect(["readelf", "-d", str(binary)])
        return tuple(re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", res.stdout_text))
    except FileNotFoundError:
        res = _inspect(["objdump", "-p", str(binary)])
        return tuple(re.findall(r"^\s*NEEDED\s+(\S+)\s*$", res.stdout_text, flags=re.M))


def _inspect(argv: list[str]) -> RunResult:
    try:
        res = run(argv, timeout=60)
    except FileNotFoundError:
        if argv[0] == "readelf":
            raise
        raise BuildError(f"cannot list shared libraries: {argv[0]} not found") from None
    if not res.ok:
        raise BuildError(f"{' '.join(argv)} failed ({res.describe()}): "
                         f"{res.stderr_text.strip()[-500:]}")
    return res


def links_runtime_dynamically(libs: Any) -> bool:
    """Tell whether a binary links whisper.cpp's own runtime as shared libraries.

    Parameters
    ----------
    libs : iterable
        The binary's linked libraries (paths or names).

    Returns
    -------
    bool
        True if any library's file name starts with ``libwhisper`` or ``libggml``.
    """
    return any(Path(str(lib)).name.startswith(_SHARED_RUNTIME_PREFIXES) for lib in libs)


# ----------------------------------------------------------------------------- building

@dataclass(frozen=True)
class BuildResult:
    """A published whisper-cli.

    Attributes
    ----------
    binary : Path
        ``cache_dir/builds/<key>/whisper-cli`` (its final, published path).
    sha256 : str
        Digest of the binary.
    key : str
        :func:`verifylib.whispercpp.build_options.build_key` of the build.
    cached : bool
        True if an existing, re-verified publication was reused.
    seconds : float
        Time spent in this call (about zero when cached).
    variant : str
        One of :data:`verifylib.whispercpp.build_options.VARIANTS`.
    options : dict
        Effective CMake options.
    compiler : dict
        :func:`verifylib.whispercpp.toolchain.compiler_identity` at build time.
    needed_libs : tuple of str
        Shared libraries the binary needs.
    static : bool
        True iff no ``libwhisper*``/``libggml*`` is among them, so the digest covers the
        (patched) whisper and ggml code.
    tree_id : str
        Source tree id the build was keyed by.
    patch_sha256 : str or None
        Patch digest the build was keyed by.
    build_json : Path
        The published ``build.json``.
    ggml : dict or None
        :meth:`~verifylib.whispercpp.shared_ggml.GgmlBuild.to_evidence` of the shared ggml
        it links, None when ggml was
        built in one piece with it.
    """

    binary: Path
    sha256: str
    key: str
    cached: bool
    seconds: float
    variant: str
    options: dict
    compiler: dict
    needed_libs: tuple[str, ...]
    static: bool
    tree_id: str
    patch_sha256: str | None
    build_json: Path
    ggml: dict | None = None

    @property
    def ggml_backend(self) -> str | None:
        """The ggml backend the build's options pin, or None.

        Read by :func:`verifylib.whispercpp.build_options.backend_of_options`.
        """
        return backend_of_options(self.options)


def _result_from_publication(folder: Path, key: str, cached: bool, seconds: float) -> BuildResult:
    meta = read_json(folder / "build.json")
    binary = folder / "whisper-cli"
    libs = needed_libs(binary)
    return BuildResult(binary=binary, sha256=meta["sha256"], key=key, cached=cached,
                       seconds=seconds, variant=meta["variant"], options=dict(meta["options"]),
                       compiler=dict(meta["compiler"]), needed_libs=libs,
                       static=not links_runtime_dynamically(libs), tree_id=meta["tree_id"],
                       patch_sha256=meta["patch_sha256"], build_json=folder / "build.json",
                       ggml=meta.get("ggml"))


def _cached_problem(folder: Path, key: str) -> str | None:
    """Why a publication cannot be reused, or None when its binary matches its record."""
    try:
        meta = read_json(folder / "build.json")
    except (OSError, ValueError) as exc:
        return f"build.json unreadable: {exc}"
    if not isinstance(meta, dict) or meta.get("key") != key:
        return "build.json belongs to another key"
    if not is_sha256(meta.get("sha256")):
        return "build.json holds no well-formed sha256"
    binary = folder / "whisper-cli"
    if not binary.is_file():
        return "binary missing"
    actual = sha256_file(binary)
    if actual != meta["sha256"]:
        return f"binary sha256 {actual} differs from the recorded {meta['sha256']}"
    return None


def build_whisper_cli(src: Path, *, tree_id: str, patch_sha256: str | None, variant: str,
                      options: Mapping[str, Any] | None, cache_dir: Path, jobs: int = 2,
                      log: Callable[[str], None] = print, timeout: float = 3600.0,
                      backend: str = DEFAULT_GGML_BACKEND) -> BuildResult:
    """Build (or reuse) the static ``whisper-cli`` of one variant.

    CMake configures in ``cache_dir/cmake/<key>`` (outside the source tree, emptied
    first so no stale object is reused, removed after success, kept with its logs after a
    failure), builds only the ``whisper-cli`` target, and the
    binary is published with a ``build.json`` to ``cache_dir/builds/<key>/`` through a
    staging folder. An existing publication is reused only if its binary still hashes to
    its recorded digest. Configuring, building and publishing a key happen under that
    key's lock (``cache_dir/locks/build-<key>.lock``), so concurrent processes never share
    a build folder; one that waited for the lock re-checks the cache and reuses what the
    holder published instead of building over it.

    Parameters
    ----------
    src : Path
        Source folder (a patched work tree, or pristine for the
        :data:`verifylib.whispercpp.build_options.UNPATCHED_VARIANTS`).
    tree_id : str
        Its pristine tree id (keys the cache; the caller has verified it).
    patch_sha256 : str or None
        Digest of the applied patch, None for the
        :data:`verifylib.whispercpp.build_options.UNPATCHED_VARIANTS`.
    variant : str
        One of :data:`verifylib.whispercpp.build_options.VARIANTS` (the ``-asan`` ones
        are AddressSanitizer builds).
    options : mapping, optional
        Extra CMake options (see
        :func:`verifylib.whispercpp.build_options.effective_options`); default
        ``GGML_NATIVE=ON``.
    cache_dir : Path
        Cache root shared with :mod:`verifylib.whispercpp.source`.
    jobs : int
        Parallel compile jobs.
    log : callable
        Receives one-line progress messages.
    timeout : float
        Seconds allowed for each of configure and build.
    backend : str
        The ggml backend the build is pinned to
        (:func:`verifylib.whispercpp.build_options.backend_options`), part of its key.

    Returns
    -------
    BuildResult
        The published binary and its identity.

    Raises
    ------
    BuildError
        If configure or build fails (message holds the log tail; full logs stay in the
        build folder), or the binary is missing; nothing is published then.
    verifylib.errors.ParametersInvalid
        For invalid arguments (see :func:`verifylib.whispercpp.build_options.build_key`,
        :func:`verifylib.whispercpp.build_options.effective_options`).
    """
    if not isinstance(jobs, int) or isinstance(jobs, bool) or jobs < 1:
        raise ParametersInvalid(f"jobs must be a positive integer, got {jobs!r}")
    plan = _plan(src, tree_id=tree_id, patch_sha256=patch_sha256, variant=variant,
                 options=options, cache_dir=cache_dir, backend=backend)
    t0 = time.monotonic()
    reported: set[str] = set()  # each reason logged once: checked before and under the lock
    return produce_once(
        plan.cache_dir / LOCKS_DIR, "build", plan.key,
        check=lambda: _reuse(plan, log=log, reported=reported, t0=t0),
        produce=lambda: _produce(plan, jobs=jobs, log=log, timeout=timeout, t0=t0),
        what=f"whisper-cli [{variant}] build {plan.key[:12]}", log=log)


@dataclass(frozen=True)
class _Plan:
    """One whisper-cli build as keyed before its lock is taken (see build_whisper_cli)."""

    src: Path
    cache_dir: Path
    tree_id: str
    patch_sha256: str | None
    variant: str
    options: dict[str, str]
    compiler: dict[str, Any]
    ggml_options: dict[str, str]
    ggml_key: str | None  # None: the source builds ggml in one piece with the CLI
    ccache: CompilerCache | None
    launcher: str | None
    key: str

    @property
    def final(self) -> Path:
        """The folder the build is published to, ``<cache>/builds/<key>``."""
        return self.cache_dir / "builds" / self.key


def _plan(src: Path, *, tree_id: str, patch_sha256: str | None, variant: str,
          options: Mapping[str, Any] | None, cache_dir: Path, backend: str) -> _Plan:
    src = Path(src).resolve()
    cache_dir = Path(cache_dir).expanduser().resolve()
    opts = effective_options(variant, options, backend=backend)
    compiler = compiler_identity()
    shared = uses_shared_ggml(src)
    g_opts = ggml_options(variant, opts)
    g_key = ggml_key(tree_id, ggml_source_digest(src), g_opts, compiler) if shared else None
    ccache = compiler_cache.compiler_cache(cache_dir)
    launcher = compiler_cache.launcher_of(ccache)
    key = build_key(tree_id, patch_sha256, variant, opts, compiler, g_key, launcher=launcher)
    return _Plan(src, cache_dir, tree_id, patch_sha256, variant, opts, compiler, g_opts, g_key,
                 ccache, launcher, key)


def _reuse(plan: _Plan, *, log: Callable[[str], None], reported: set[str],
           t0: float) -> BuildResult | None:
    """Return the publication of ``plan``'s key if its binary re-hashes to its record."""
    if not plan.final.is_dir():
        return None
    problem = _cached_problem(plan.final, plan.key)
    if problem is not None:
        if problem not in reported:
            reported.add(problem)
            log(f"cached whisper-cli [{plan.variant}] at {plan.final} not reusable ({problem}); "
                "rebuilding")
        return None
    result = _result_from_publication(plan.final, plan.key, True, time.monotonic() - t0)
    log(f"whisper-cli [{plan.variant}] from cache: {result.binary} (sha256 {result.sha256})")
    return result


def _produce(plan: _Plan, *, jobs: int, log: Callable[[str], None], timeout: float,
             t0: float) -> BuildResult:
    """Build ``plan`` in its own folder and publish it (under its key's lock)."""
    if not (plan.src / "CMakeLists.txt").is_file():
        raise BuildError(f"{plan.src} has no CMakeLists.txt")
    # Keyed like the publication and only touched under its lock: two processes
    # never configure into one folder (one of them used to fail with cmake exit 2).
    root = plan.cache_dir / "cmake" / plan.key
    ggml = _linked_ggml(plan, jobs=jobs, log=log, timeout=timeout)
    tree, bdir = cmake_steps.build_tree(plan.src, root)
    if plan.variant in SEAM_VARIANTS:
        seam_sources.lay_out(tree)  # into the copy: the pinned work tree stays as proved
    # Looked up on its module: a test or a simulated Mac replaces it there.
    built, configure = cmake_steps.cmake_target(tree, bdir, plan.options, "whisper-cli",
                                                f"whisper-cli [{plan.variant}]", jobs=jobs,
                                                timeout=timeout, log=log, ggml=ggml,
                                                ccache=plan.ccache)
    seconds = time.monotonic() - t0
    cache_use = cmake_steps.compiler_cache_use(bdir, plan.ccache)
    _publish(plan, built, configure=configure, jobs=jobs, ggml=ggml, seconds=seconds,
             cache_use=cache_use)
    # A build folder is never built in twice (it is emptied before each build), so
    # only a failed build's folder is kept, for its logs.
    shutil.rmtree(root, ignore_errors=True)
    result = _result_from_publication(plan.final, plan.key, False, seconds)
    log(f"built whisper-cli [{plan.variant}] in {seconds:.0f} s: {result.binary} "
        f"(sha256 {result.sha256}, {'static' if result.static else 'NOT static'}"
        f"{cmake_steps.compiler_cache_phrase(cache_use)})")
    return result


def _linked_ggml(plan: _Plan, *, jobs: int, log: Callable[[str], None],
                 timeout: float) -> GgmlBuild | None:
    """Return the shared ggml ``plan`` links, checked against its key (None: one piece).

    The ggml is produced (or re-hashed) only when this binary must be built: a cached
    binary already carries its ggml, named by the key and its build.json.
    """
    if plan.ggml_key is None:
        return None
    ggml = build_ggml(plan.src, tree_id=plan.tree_id, options=plan.ggml_options,
                      cache_dir=plan.cache_dir, jobs=jobs, log=log, timeout=timeout,
                      compiler=plan.compiler)
    if ggml.key != plan.ggml_key:
        raise BuildError(f"the shared ggml's key {ggml.key} is not the expected {plan.ggml_key}")
    return ggml


def _publish(plan: _Plan, built: Path, *, configure: list[str], jobs: int,
             ggml: GgmlBuild | None, seconds: float, cache_use: CacheUse | None) -> None:
    """Publish ``built`` with its ``build.json`` to ``plan.final`` through a staging folder."""
    builds = plan.final.parent
    staging = make_owned_dir(builds, f"{STAGING_PREFIX}{plan.key[:12]}-", family=STAGING_PREFIX)
    try:
        binary = staging / "whisper-cli"
        shutil.copy2(built, binary)
        digest = sha256_file(binary)
        libs = needed_libs(binary)
        write_json(staging / "build.json", {
            "key": plan.key, "variant": plan.variant, "tree_id": plan.tree_id,
            "patch_sha256": plan.patch_sha256, "options": plan.options,
            "compiler": plan.compiler, "sha256": digest, "seconds": round(seconds, 3),
            "needed_libs": list(libs), "static": not links_runtime_dynamically(libs),
            "configure_argv": configure, "jobs": jobs,
            "ggml": None if ggml is None else ggml.to_evidence(), "launcher": plan.launcher,
            "compiler_cache": cmake_steps.compiler_cache_record(cache_use)})
        # Under the lock, ``final`` exists here only if it failed its reuse check, so
        # this replaces nothing another process could be using as a good build.
        publish_dir(staging, plan.final)
    finally:
        remove_owned_dir(staging)
