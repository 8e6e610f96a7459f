"""The static ggml libraries every whisper-cli variant of one source links, built once.

Every variant compiles the same ggml tree with the same options: only ``src/whisper.cpp``
(the patch), the Core ML switch and the sanitizer flags differ, and those touch libwhisper
and the CLI alone. So :func:`build_ggml` builds the static ggml libraries once per ggml
identity (its source, its CMake options, the toolchain), through whisper.cpp's own CMake
project (``--target ggml``) and ggml's own install rules, into
``<cache>/ggml/<key>/prefix``; each variant then configures with whisper.cpp's
``WHISPER_USE_SYSTEM_GGML`` route against that prefix
(:func:`verifylib.whispercpp.build.build_whisper_cli`). The libraries are static, so
every binary still carries all the ggml code it runs and its digest covers it; the ggml
build's key, options and library digests are in each variant's key and ``build.json``,
and a cached ggml is re-hashed file by file before use. A source whose CMake project has
no ``WHISPER_USE_SYSTEM_GGML`` (older pins) is built in one piece instead
(:func:`uses_shared_ggml`).
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

from verifylib.canonical import (
    dumps,
    publish_dir,
    read_json,
    sha256_bytes,
    sha256_file,
    tree_digest,
    write_json,
)
from verifylib.locks import (
    LOCKS_DIR,
    STAGING_PREFIX,
    make_owned_dir,
    produce_once,
    remove_owned_dir,
)
from verifylib.whispercpp import compiler_cache
from verifylib.whispercpp.build_options import variant_options
from verifylib.whispercpp.cmake_steps import BuildError, run_cmake_steps
from verifylib.whispercpp.toolchain import compiler_identity

_GGML_KEY_SCHEMA = "verifylib-ggml-build-v1"
SYSTEM_GGML_OPTION = "WHISPER_USE_SYSTEM_GGML"
"""whisper.cpp's CMake switch that links a prebuilt ggml instead of its ``ggml/`` folder."""
# The ggml build configures whisper.cpp's own project only to reach ggml's rules: none of
# whisper's targets is built, so its optional folders need not be configured either.
_GGML_CONFIGURE_ONLY = {"WHISPER_BUILD_TESTS": "OFF", "WHISPER_BUILD_EXAMPLES": "OFF",
                        "WHISPER_BUILD_SERVER": "OFF"}


def uses_shared_ggml(src: Path) -> bool:
    """Tell whether a source tree's CMake project can link a prebuilt ggml.

    Parameters
    ----------
    src : Path
        A whisper.cpp source folder.

    Returns
    -------
    bool
        True when it has a ``ggml/`` CMake project and its top-level ``CMakeLists.txt``
        offers :data:`SYSTEM_GGML_OPTION` (whisper.cpp since v1.7).
    """
    top = Path(src) / "CMakeLists.txt"
    try:
        return ((Path(src) / "ggml" / "CMakeLists.txt").is_file()
                and SYSTEM_GGML_OPTION in top.read_text(errors="replace"))
    except OSError:
        return False


def ggml_options(variant: str, options: Mapping[str, str]) -> dict[str, str]:
    """Return the CMake options of the shared ggml build a variant links.

    Parameters
    ----------
    variant : str
        One of :data:`verifylib.whispercpp.build_options.VARIANTS`.
    options : mapping
        The variant's :func:`verifylib.whispercpp.build_options.effective_options`.

    Returns
    -------
    dict of str to str
        Every option but whisper.cpp's own (``WHISPER_*``) and the variant's forced ones
        (the sanitizer flags, the Core ML switch): so every variant of one parameter set
        links the same ggml, and the sanitizers instrument libwhisper and the CLI only.
    """
    forced = variant_options(variant)
    return dict(sorted((k, v) for k, v in options.items()
                       if not k.startswith("WHISPER_") and k not in forced))


def ggml_source_digest(src: Path) -> str:
    """Digest what decides a ggml build's code: the ``ggml/`` folder and the top CMake files.

    Parameters
    ----------
    src : Path
        A whisper.cpp source folder (pristine or patched: a patch confined to
        ``src/whisper.cpp`` leaves this digest unchanged, so both share one ggml).

    Returns
    -------
    str
        SHA-256 over :func:`verifylib.canonical.tree_digest` of ``ggml/`` and ``cmake/``
        and the digest of the top-level ``CMakeLists.txt``.
    """
    src = Path(src)
    parts = {"ggml": tree_digest(src / "ggml"),
             "cmake": tree_digest(src / "cmake") if (src / "cmake").is_dir() else None,
             "CMakeLists.txt": sha256_file(src / "CMakeLists.txt")}
    return sha256_bytes(dumps(parts))


def ggml_key(tree_id: str, source_digest: str, options: Mapping[str, str],
             compiler: Mapping[str, Any]) -> str:
    """Content key of a shared ggml build.

    Parameters
    ----------
    tree_id : str
        The pristine tree id the variants are keyed by.
    source_digest : str
        :func:`ggml_source_digest` of the folder built.
    options : mapping
        :func:`ggml_options`.
    compiler : mapping
        :func:`verifylib.whispercpp.toolchain.compiler_identity`.

    Returns
    -------
    str
        64 hex digits.
    """
    return sha256_bytes(dumps({"schema": _GGML_KEY_SCHEMA, "target": "ggml",
                               "tree_id": tree_id, "source_digest": source_digest,
                               "options": dict(options), "compiler": dict(compiler),
                               "configure_only": _GGML_CONFIGURE_ONLY}))


@dataclass(frozen=True)
class GgmlBuild:
    """A published shared ggml: static libraries, headers and CMake package.

    Attributes
    ----------
    prefix : Path
        ``<cache>/ggml/<key>/prefix``, the install prefix.
    key : str
        :func:`ggml_key`.
    options : dict
        Its CMake options (:func:`ggml_options`).
    source_digest : str
        :func:`ggml_source_digest` of the folder it was built from.
    files : dict
        Every installed file (relative to ``prefix``) to its SHA-256, as recorded.
    cached : bool
        Reused from the cache (after every file was re-hashed).
    seconds : float
        Time spent in this call.
    """

    prefix: Path
    key: str
    options: dict
    source_digest: str
    files: dict
    cached: bool
    seconds: float

    @property
    def libraries(self) -> dict[str, str]:
        """The static libraries among :attr:`files` (``lib/libggml*.a``), path to digest."""
        return {k: v for k, v in self.files.items() if k.endswith((".a", ".lib"))}

    def configure_options(self) -> dict[str, str]:
        """Return the ``-D`` entries that make a whisper.cpp configure link this ggml."""
        return {SYSTEM_GGML_OPTION: "ON", "ggml_DIR": str(self.prefix / "lib" / "cmake" / "ggml")}

    def to_evidence(self) -> dict[str, Any]:
        """Return the identity recorded with every binary that links it.

        Returns
        -------
        dict
            ``{"key", "options", "source_digest", "libraries", "files_sha256"}``:
            ``libraries`` maps each static library to its SHA-256, ``files_sha256`` is the
            digest of the whole install (headers and CMake package too).
        """
        return {"key": self.key, "options": dict(self.options),
                "source_digest": self.source_digest, "libraries": self.libraries,
                "files_sha256": sha256_bytes(dumps(self.files))}


def _installed_files(prefix: Path) -> dict[str, str]:
    return {p.relative_to(prefix).as_posix(): sha256_file(p)
            for p in sorted(prefix.rglob("*")) if p.is_file() or p.is_symlink()}


def _ggml_problem(folder: Path, key: str) -> tuple[str | None, dict]:
    """Why a published ggml cannot be reused (None when every file matches its record)."""
    try:
        meta = read_json(folder / "ggml.json")
    except (OSError, ValueError) as exc:
        return f"ggml.json unreadable: {exc}", {}
    if not isinstance(meta, dict) or meta.get("key") != key:
        return "ggml.json belongs to another key", {}
    recorded = meta.get("files")
    if not isinstance(recorded, dict) or not any(k.endswith(".a") for k in recorded):
        return "ggml.json lists no static library", {}
    prefix = folder / "prefix"
    actual = _installed_files(prefix) if prefix.is_dir() else {}
    if actual != recorded:
        changed = sorted(set(actual) ^ set(recorded)
                         | {k for k in actual if recorded.get(k) not in (None, actual[k])})
        return f"installed files differ from ggml.json: {', '.join(changed[:5])}", {}
    return None, meta


def build_ggml(src: Path, *, tree_id: str, options: Mapping[str, str], cache_dir: Path,
               jobs: int = 2, log: Callable[[str], None] = print, timeout: float = 3600.0,
               compiler: Mapping[str, Any] | None = None) -> GgmlBuild:
    """Build (or reuse) the static ggml libraries every variant of ``src`` links.

    whisper.cpp's CMake project is configured in ``cache_dir/cmake/ggml-<key>`` with the
    ggml options, only the ``ggml`` target is built (it pulls ``ggml-base`` and the
    backends), and ggml's own install rules (``cmake --install <build>/ggml``) put the
    libraries, headers and CMake package into a staging prefix, published with a
    ``ggml.json`` (key, options, every file's SHA-256) to ``cache_dir/ggml/<key>/``. A
    publication is reused only if every installed file still hashes to its record and no
    file was added or removed; a damaged one is rebuilt and replaced, and the one call
    that rebuilds it logs one line saying so. Built under the key's lock, like
    :func:`verifylib.whispercpp.build.build_whisper_cli`.

    Parameters
    ----------
    src : Path
        A whisper.cpp source folder (:func:`uses_shared_ggml` true).
    tree_id : str
        Its pristine tree id.
    options : mapping
        :func:`ggml_options`.
    cache_dir : Path
        Cache root.
    jobs : int
        Parallel compile jobs.
    log : callable
        Receives progress lines.
    timeout : float
        Seconds allowed per cmake step.
    compiler : mapping, optional
        :func:`verifylib.whispercpp.toolchain.compiler_identity`, when the caller already
        has it.

    Returns
    -------
    GgmlBuild

    Raises
    ------
    BuildError
        If a step fails or nothing was installed; nothing is published then.
    """
    src = Path(src).resolve()
    cache_dir = Path(cache_dir).expanduser().resolve()
    opts = dict(sorted(options.items()))
    compiler = dict(compiler) if compiler is not None else compiler_identity()
    digest = ggml_source_digest(src)
    key = ggml_key(tree_id, digest, opts, compiler)
    t0 = time.monotonic()
    final = cache_dir / "ggml" / key
    # Why the last check refused the publication. It is said when the rebuild starts (under
    # the lock), not when the check first sees it: several variants of one stage ask for
    # this ggml at once, and only the one that rebuilds it may say so, once.
    damaged: list[str] = []

    def produce() -> GgmlBuild:
        if damaged:
            log(f"cached ggml at {final} not reusable ({damaged[-1]}); rebuilding")
        return _produce_ggml(src, cache_dir, key, tree_id=tree_id, digest=digest, opts=opts,
                             compiler=compiler, jobs=jobs, log=log, timeout=timeout, t0=t0)

    return produce_once(
        cache_dir / LOCKS_DIR, "ggml", key,
        check=lambda: _reuse_ggml(final, key, log=log, damaged=damaged, t0=t0),
        produce=produce, what=f"ggml build {key[:12]}", log=log)


def _reuse_ggml(final: Path, key: str, *, log: Callable[[str], None], damaged: list[str],
                t0: float) -> GgmlBuild | None:
    """Return the ggml published at ``final`` if every file re-hashes to its record.

    ``damaged`` is set to the reason a publication was refused (emptied when there is
    none), for the rebuild to say.
    """
    damaged.clear()
    if not final.is_dir():
        return None
    problem, meta = _ggml_problem(final, key)
    if problem is not None:
        damaged.append(problem)
        return None
    got = GgmlBuild(final / "prefix", key, dict(meta["options"]), meta["source_digest"],
                    dict(meta["files"]), True, time.monotonic() - t0)
    log(f"ggml from cache: {final} ({len(got.libraries)} static libraries re-hashed)")
    return got


def _produce_ggml(src: Path, cache_dir: Path, key: str, *, tree_id: str, digest: str,
                  opts: dict[str, str], compiler: dict[str, Any], jobs: int,
                  log: Callable[[str], None], timeout: float, t0: float) -> GgmlBuild:
    """Build and install ggml into a staging prefix, then publish it to ``<cache>/ggml/<key>``."""
    bdir = cache_dir / "cmake" / f"ggml-{key}"
    root = cache_dir / "ggml"
    final = root / key
    staging = make_owned_dir(root, f"{STAGING_PREFIX}{key[:12]}-", family=STAGING_PREFIX)
    try:
        prefix = staging / "prefix"
        run_cmake_steps(src, bdir, {**opts, **_GGML_CONFIGURE_ONLY}, [
            ("build", ["--build", str(bdir), "--target", "ggml", "-j", str(jobs)]),
            ("install", ["--install", str(bdir / "ggml"), "--prefix", str(prefix)])],
            "ggml (shared by every variant)", timeout=timeout, log=log,
            ccache=compiler_cache.compiler_cache(cache_dir))
        files = _installed_files(prefix)
        if not any(k.endswith(".a") for k in files):
            raise BuildError(f"the ggml install into {prefix} holds no static library")
        seconds = time.monotonic() - t0
        write_json(staging / "ggml.json", {
            "key": key, "tree_id": tree_id, "source_digest": digest, "options": opts,
            "compiler": compiler, "files": files, "seconds": round(seconds, 3),
            "jobs": jobs})
        publish_dir(staging, final)
    finally:
        remove_owned_dir(staging)
    shutil.rmtree(bdir, ignore_errors=True)
    got = GgmlBuild(final / "prefix", key, opts, digest, files, False, seconds)
    log(f"built ggml in {seconds:.0f} s: {final} ({', '.join(sorted(got.libraries))})")
    return got
