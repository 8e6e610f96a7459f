"""Configure and build with CMake in a fresh folder outside the source tree, step by step.

Every build of whisper.cpp's code (the shared ggml, whisper-cli, whisper-bench) goes
through :func:`run_cmake_steps`: a build folder emptied first, compiler flags that keep
the folders' paths out of the binary, each step's output logged beside it, a failing step
raised as :class:`BuildError` with the tail of its log. :func:`build_tree` lays a source
copy beside its build folder, so the compiler cache
(:mod:`verifylib.whispercpp.compiler_cache`) sees the same relative paths in every
variant, and :func:`compiler_cache_use` reads back what the compiles got from it. Every
subprocess goes through :func:`verifylib.runtime.runner.run`.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Callable, Mapping, Protocol

from verifylib.errors import BuildFailure
from verifylib.runtime import progress, tools
from verifylib.runtime.runner import RunResult, run
from verifylib.whispercpp import compiler_cache
from verifylib.whispercpp.compiler_cache import CacheUse, CompilerCache

_SOURCE_ALIAS = "/whisper.cpp"
"""What a build's source folder reads as inside its binaries (:func:`_with_path_maps`)."""


class BuildError(BuildFailure):
    """whisper-cli could not be configured, built, inspected or published."""


class PrebuiltGgml(Protocol):
    """A published ggml a build links instead of compiling its own.

    :class:`verifylib.whispercpp.shared_ggml.GgmlBuild` is one.
    """

    @property
    def prefix(self) -> Path:
        """Its install prefix (headers, static libraries, CMake package)."""
        ...

    def configure_options(self) -> dict[str, str]:
        """Return the ``-D`` entries that make a whisper.cpp configure link it."""
        ...


def _tail(res: RunResult, n: int = 40) -> str:
    lines = (res.stdout_text.rstrip().splitlines()[-10:] + ["--- stderr ---"]
             + res.stderr_text.rstrip().splitlines()[-n:])
    return "\n".join(lines)


def _with_path_maps(opts: Mapping[str, str], src: Path, bdir: Path,
                    extra: Mapping[Path, str] | None = None, *,
                    source_copy: bool = False) -> dict[str, str]:
    """Add compiler flags that strip the source and build folders from embedded paths.

    ``__FILE__`` (assertions, log lines) would otherwise put the work tree's absolute path
    into the binary, so the same key would give different bytes in different folders.
    ``extra`` maps further folders (the shared ggml prefix, whose headers the variant
    compiles). The flags are not part of the key: they only normalize locations. CMake
    splits the flag string on spaces, so a path containing whitespace is left unmapped.
    With ``source_copy`` (``src`` beside ``bdir``), the relative forms ccache hands the
    compiler get the same alias as the absolute one.
    """
    folders = [(src, _SOURCE_ALIAS), (bdir, "/build"), *(extra or {}).items()]
    maps = [f"-ffile-prefix-map={path}={alias}" for path, alias in folders
            if not any(c.isspace() for c in str(path))]
    if source_copy:
        maps += [f"-ffile-prefix-map={rel}={_SOURCE_ALIAS}"
                 for rel in compiler_cache.relative_source_prefixes(src.name)]
    out = dict(opts)
    if maps:
        for lang in ("CMAKE_C_FLAGS", "CMAKE_CXX_FLAGS"):
            out[lang] = " ".join(([out[lang]] if out.get(lang) else []) + maps)
    return out


def run_cmake_steps(src: Path, bdir: Path, opts: Mapping[str, str],
                    steps: list[tuple[str, list]], label: str, *, timeout: float,
                    log: Callable[[str], None], configure_extra: Mapping[str, str] | None = None,
                    path_maps: Mapping[Path, str] | None = None,
                    ccache: CompilerCache | None = None) -> list[str]:
    """Configure ``src`` in a fresh ``bdir`` (outside the tree), then run further cmake steps.

    Each step's output goes to ``bdir/verifylib-<step>.log``. While a step runs, a
    progress line (with cmake's ``[NN%]``) is printed every few seconds.

    Parameters
    ----------
    src : Path
        The source folder to configure.
    bdir : Path
        The build folder, emptied first.
    opts : mapping
        The ``-D`` cache entries that decide the build (keyed by the caller).
    steps : list of (str, list)
        ``(name, argv after the cmake program)``, run in order after configuring.
    label : str
        What is built, for progress lines and messages.
    timeout : float
        Seconds allowed per step.
    log : callable
        Receives progress lines.
    configure_extra : mapping, optional
        ``-D`` entries that only locate things (the shared ggml prefix): passed, not
        keyed; so are the compiler launchers of ``ccache``.
    path_maps : mapping, optional
        Further folders to alias in embedded paths (see :func:`_with_path_maps`).
    ccache : CompilerCache, optional
        The compiler cache the compiles go through
        (:mod:`verifylib.whispercpp.compiler_cache`, its statistics log in ``bdir``).

    Returns
    -------
    list of str
        The configure argv (recorded with the build).

    Raises
    ------
    BuildError
        If a step fails: the message names its log and ends with its last lines.
    verifylib.runtime.tools.ToolMissing
        If there is no cmake to run, or it could not be launched.
    """
    shutil.rmtree(bdir, ignore_errors=True)
    bdir.mkdir(parents=True)
    # Keeps the build-info `git rev-parse` from climbing out of a tree that has no .git.
    env = {"GIT_CEILING_DIRECTORIES": str(src.parent)}
    # A source copy beside its build folder (build_tree) is the only tree whose paths
    # ccache may make relative: the relative path maps cover exactly that layout.
    source_copy = src.parent == bdir.parent
    if ccache is not None:
        env.update(ccache.environment(bdir / compiler_cache.STATS_LOG,
                                      src if source_copy else None))
    extra = {**(configure_extra or {}), **compiler_cache.launch_options(ccache)}
    cmake = tools.cmake_executable()  # ToolMissing, never a FileNotFoundError, without one
    configure = ([cmake, "-S", str(src), "-B", str(bdir)]
                 + [f"-D{k}={v}" for k, v in _with_path_maps(
                     opts, src, bdir, path_maps, source_copy=source_copy).items()]
                 + [f"-D{k}={v}" for k, v in extra.items()])
    plan = [("configure", configure, f"configuring {label}")]
    plan += [(name, [cmake, *argv], f"{name} {label}") for name, argv in steps]
    for step, argv, what in plan:
        try:
            res = run(argv, timeout=timeout, env_extra=env,
                      ticker=progress.Ticker(what, log, announce=f"{what} in {bdir} …"))
        except FileNotFoundError:
            raise tools.launch_failed(tools.CMAKE, cmake) from None
        step_log = bdir / f"verifylib-{step}.log"
        step_log.write_bytes(res.stdout + b"\n--- stderr ---\n" + res.stderr)
        if not res.ok:
            raise BuildError(f"{label} {step} failed ({res.describe()}); log {step_log}\n"
                             f"{_tail(res)}")
    return configure


def cmake_target(src: Path, bdir: Path, opts: Mapping[str, str], target: str, label: str,
                 *, jobs: int, timeout: float, log: Callable[[str], None],
                 ggml: PrebuiltGgml | None = None,
                 ccache: CompilerCache | None = None) -> tuple[Path, list[str]]:
    """Configure ``src`` in a fresh ``bdir`` and build one target; with ``ggml``, against it.

    Parameters
    ----------
    src, bdir, opts, label, timeout, log, ccache
        As for :func:`run_cmake_steps`.
    target : str
        The CMake target, e.g. ``whisper-cli``; its binary is expected in ``bdir/bin``.
    jobs : int
        Parallel compile jobs.
    ggml : PrebuiltGgml, optional
        The shared ggml to link (its prefix aliased ``/ggml`` in embedded paths); None
        builds ggml in one piece with the target.

    Returns
    -------
    (Path, list of str)
        The built binary and the configure argv (recorded with the build).

    Raises
    ------
    BuildError
        If a step fails or the binary is missing after a successful build.
    """
    extra = None if ggml is None else ggml.configure_options()
    maps = None if ggml is None else {ggml.prefix: "/ggml"}
    configure = run_cmake_steps(src, bdir, opts, [
        ("build", ["--build", str(bdir), "--target", target, "-j", str(jobs)])],
        label, timeout=timeout, log=log, configure_extra=extra, path_maps=maps,
        ccache=ccache)
    built = bdir / "bin" / target
    if not built.is_file():
        raise BuildError(f"build reported success but {built} does not exist")
    return built, configure


def build_tree(src: Path, root: Path) -> tuple[Path, Path]:
    """Lay out a fresh ``root`` for one build: ``root/src``, a copy of ``src``, and ``root/build``.

    Every build tree has the same shape, so ccache sees the same relative paths in the
    compiles of two variants and can hand one the other's objects
    (:mod:`verifylib.whispercpp.compiler_cache`); the path maps keep ``root`` out of the
    binary. The copy leaves ``.git`` out (the build-info lookup stops at ``root``), and
    the source folder itself is only read.

    Parameters
    ----------
    src : Path
        The source folder.
    root : Path
        The folder to lay out (emptied first).

    Returns
    -------
    (Path, Path)
        The source copy and the (not yet created) build folder.
    """
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    copy = root / "src"
    shutil.copytree(src, copy, symlinks=True, ignore=shutil.ignore_patterns(".git"))
    return copy, root / "build"


def compiler_cache_use(bdir: Path, ccache: CompilerCache | None) -> CacheUse | None:
    """Read what a build's compiles got from the compiler cache, for its record and log.

    Parameters
    ----------
    bdir : Path
        The build folder :func:`run_cmake_steps` ran in.
    ccache : CompilerCache or None
        The cache it ran with.

    Returns
    -------
    CacheUse or None
        The statistics of the build's compiles; None without a cache.
    """
    if ccache is None:
        return None
    return compiler_cache.read_stats_log(bdir / compiler_cache.STATS_LOG)


def compiler_cache_record(use: CacheUse | None) -> dict | None:
    """Return ``use`` as recorded in a ``build.json`` (None without a cache).

    Parameters
    ----------
    use : CacheUse or None
        :func:`compiler_cache_use` of the build.

    Returns
    -------
    dict or None
    """
    return None if use is None else use.to_json()


def compiler_cache_phrase(use: CacheUse | None) -> str:
    """Return ``use`` as the tail of a "built …" log line (empty without a cache).

    Parameters
    ----------
    use : CacheUse or None
        :func:`compiler_cache_use` of the build.

    Returns
    -------
    str
        ``", <description>"``, or ``""``.
    """
    return "" if use is None else ", " + use.describe()
