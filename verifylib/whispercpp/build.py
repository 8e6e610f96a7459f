"""Build a static whisper-cli per variant, cache it by content key, and read its system_info.

Why this is hand-written: the build-hygiene rules of docs/runtime-contract.md §3 (a
separate build folder per variant, outside the source tree; the SHA-256 of the produced
binary recorded; a binary whose digest covers the patched library code) are not what a
generic CMake wrapper enforces. Here the key of a build is the SHA-256 of everything that
decides its bytes (source tree id, patch digest, variant, CMake options with the pinned
ggml backend, compiler and host CPU, and on macOS the selected Xcode and SDK), the binary
is linked statically (``BUILD_SHARED_LIBS=OFF``, see docs/facts.md) and published with
its ``build.json`` through a staging folder, so a failed or interrupted build publishes
nothing and a cached one is re-hashed before reuse.

ggml is built once and shared. Every variant compiles the same ggml tree with the same
options: only ``src/whisper.cpp`` (the patch), the Core ML switch and the sanitizer flags
differ, and those touch libwhisper and the CLI alone. So :func:`build_ggml` builds the
static ggml libraries once per ggml identity (its source, its CMake options, the
toolchain), through whisper.cpp's own CMake project (``--target ggml``) and ggml's own
install rules, into ``<cache>/ggml/<key>/prefix``; each variant then configures with
whisper.cpp's ``WHISPER_USE_SYSTEM_GGML`` route against that prefix and compiles only
libwhisper, its examples' ``common`` library and the CLI, each compile launched through
the compiler cache of :mod:`verifylib.whispercpp.compiler_cache`, so what another variant
already compiled (all but ``src/whisper.cpp``, between patched and unpatched) is not
compiled again. The libraries are static, so
every binary still carries all the ggml code it runs and its digest covers it; the ggml
build's key, options and library digests are in each variant's key and ``build.json``,
and a cached ggml is re-hashed file by file before use. A source whose CMake project
has no ``WHISPER_USE_SYSTEM_GGML`` (older pins) is built in one piece, as before, and
records ``ggml: null``. One process at a time
builds a key (its lock in ``<cache>/locks``, see :mod:`verifylib.locks`); another that
wanted the same key waits, then reuses that publication once it re-hashes. Every subprocess
goes through :func:`verifylib.runtime.runner.run`.
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

from verifylib.canonical import (
    dumps,
    is_sha256,
    publish_dir,
    read_json,
    sha256_bytes,
    sha256_file,
    tree_digest,
    write_json,
)
from verifylib.errors import BuildFailure, ParametersInvalid
from verifylib.locks import LOCKS_DIR, produce_once
from verifylib.runtime import contracts, progress, tools
from verifylib.runtime.runner import (
    RunResult,
    run,
    run_record,
    run_whisper_binary,
    run_whisper_cli,
)
from verifylib.whispercpp import compiler_cache
from verifylib.whispercpp.compiler_cache import CacheUse, CompilerCache

_SOURCE_ALIAS = "/whisper.cpp"
"""What a build's source folder reads as inside its binaries (_with_path_maps)."""

VARIANTS = ("ggml", "ggml-unpatched", "coreml", "ggml-asan", "ggml-unpatched-asan")

UNPATCHED_VARIANTS = ("ggml-unpatched", "ggml-unpatched-asan")
"""Variants built from the pristine tree: keyed with ``patch_sha256=None``."""

ASAN_VARIANTS = ("ggml-asan", "ggml-unpatched-asan")
"""AddressSanitizer builds of the GGML variants, evidence for ``canary.sanitizer`` only."""

# ASan wants frame pointers for usable stacks and at most -O1 so frames are not folded away;
# -g gives the file:line of each frame. The flags are forced, hence part of the build key.
_ASAN_COMPILE = "-fsanitize=address -fno-omit-frame-pointer"
_ASAN_OPTIONS = {"WHISPER_COREML": "OFF", "CMAKE_C_FLAGS": _ASAN_COMPILE,
                 "CMAKE_CXX_FLAGS": _ASAN_COMPILE, "CMAKE_EXE_LINKER_FLAGS": "-fsanitize=address",
                 "CMAKE_C_FLAGS_RELEASE": "-O1 -g -DNDEBUG",
                 "CMAKE_CXX_FLAGS_RELEASE": "-O1 -g -DNDEBUG"}

# Not overridable: each one is what makes the published binary what the gates say it is.
_FIXED_OPTIONS = {"CMAKE_BUILD_TYPE": "Release", "BUILD_SHARED_LIBS": "OFF",
                  "WHISPER_BUILD_TESTS": "OFF"}
_VARIANT_OPTIONS = {
    "ggml": {"WHISPER_COREML": "OFF"},
    "ggml-unpatched": {"WHISPER_COREML": "OFF"},
    # Fallback OFF: a Core ML build that may silently fall back to GGML proves nothing.
    "coreml": {"WHISPER_COREML": "1", "WHISPER_COREML_ALLOW_FALLBACK": "OFF"},
    "ggml-asan": _ASAN_OPTIONS,
    "ggml-unpatched-asan": _ASAN_OPTIONS,
}
_DEFAULT_OPTIONS = {"GGML_NATIVE": "ON"}
_OPTION_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# v3: the ggml backend pins below and, on macOS, the SDK facts of compiler_identity.
# v4: the key of the shared ggml build the binary links (None when built in one piece).
_KEY_SCHEMA = "verifylib-whisper-cli-build-v4"
_GGML_KEY_SCHEMA = "verifylib-ggml-build-v1"
SYSTEM_GGML_OPTION = "WHISPER_USE_SYSTEM_GGML"
"""whisper.cpp's CMake switch that links a prebuilt ggml instead of its ``ggml/`` folder."""
# The ggml build configures whisper.cpp's own project only to reach ggml's rules: none of
# whisper's targets is built, so its optional folders need not be configured either.
_GGML_CONFIGURE_ONLY = {"WHISPER_BUILD_TESTS": "OFF", "WHISPER_BUILD_EXAMPLES": "OFF",
                        "WHISPER_BUILD_SERVER": "OFF"}

GGML_BACKENDS = contracts.GGML_BACKENDS
"""The ggml backends a build can be pinned to (``runtime.ggml_backend``)."""

DEFAULT_GGML_BACKEND = contracts.BACKEND_CPU
"""The backend of every build unless the parameters choose another (see the README)."""

# ggml/CMakeLists.txt (v1.8.5) turns GGML_METAL, hence GGML_METAL_EMBED_LIBRARY, and
# GGML_BLAS (vendor Apple: Accelerate's BLAS as an ACCEL backend) on by default on APPLE,
# and GGML_ACCELERATE (Accelerate inside the CPU backend, read on APPLE only) on
# everywhere; every other GPU backend (CUDA, HIP, Vulkan, SYCL, OpenCL, WebGPU, …)
# defaults OFF on every OS. All four are pinned from one value and forced, so the backend
# is in the build key and no caller option contradicts it. On Linux "cpu" is what the
# defaults already gave (none of the four has an effect there), so the binaries behave as
# before. "metal" adds the Metal backend alone: BLAS and Accelerate stay off so the CPU
# fallback of a Metal build runs the same code as a "cpu" build.
_BACKEND_OPTIONS = {
    contracts.BACKEND_CPU: {"GGML_METAL": "OFF", "GGML_METAL_EMBED_LIBRARY": "OFF",
                            "GGML_BLAS": "OFF", "GGML_ACCELERATE": "OFF"},
    # Embedded: a static binary run from the cache has no ggml-metal.metal file beside it.
    contracts.BACKEND_METAL: {"GGML_METAL": "ON", "GGML_METAL_EMBED_LIBRARY": "ON",
                              "GGML_BLAS": "OFF", "GGML_ACCELERATE": "OFF"},
}


def backend_options(backend: str) -> dict[str, str]:
    """Return the CMake options that pin the ggml backends of a build to ``backend``.

    Parameters
    ----------
    backend : str
        One of :data:`GGML_BACKENDS`.

    Returns
    -------
    dict of str to str
        ``GGML_METAL``, ``GGML_METAL_EMBED_LIBRARY``, ``GGML_BLAS`` and ``GGML_ACCELERATE``.

    Raises
    ------
    verifylib.errors.ParametersInvalid
        For an unknown backend.
    """
    if backend not in _BACKEND_OPTIONS:
        raise ParametersInvalid(f"ggml backend must be one of {GGML_BACKENDS}, got {backend!r}")
    return dict(_BACKEND_OPTIONS[backend])


def backend_of_options(options: Mapping[str, Any]) -> str | None:
    """Name the backend a build's recorded CMake options pin, if they pin one.

    Parameters
    ----------
    options : mapping
        Effective CMake options, as recorded.

    Returns
    -------
    str or None
        The backend whose every pin the options hold; None when they hold no complete
        set (a build recorded before the pins existed, or options that contradict them).
    """
    for backend, pins in _BACKEND_OPTIONS.items():
        if all(options.get(k) == v for k, v in pins.items()):
            return backend
    return None


def backend_pin_names() -> tuple[str, ...]:
    """Return the names of the CMake options the backend pins set (the same for each backend).

    Returns
    -------
    tuple of str
    """
    return tuple(sorted({k for pins in _BACKEND_OPTIONS.values() for k in pins}))
_FORBIDDEN_PROBE_FLAGS = contracts.FORBIDDEN_FLAGS
_SHARED_RUNTIME_PREFIXES = ("libwhisper", "libggml")


class BuildError(BuildFailure):
    """whisper-cli could not be configured, built, inspected or published."""


# ----------------------------------------------------------------------------- identity

_first_line = tools.first_output_line


def _cpu_model() -> str | None:
    if platform.system() == "Darwin":
        return _first_line(["sysctl", "-n", "machdep.cpu.brand_string"])
    try:
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            if line.lower().startswith(("model name", "cpu model", "hardware")):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def compiler_identity() -> dict[str, Any]:
    """Describe the toolchain and host a build would use.

    Returns
    -------
    dict
        ``{"c++", "cc", "cmake"}``: the first line of each ``--version`` (None if the
        tool is missing); ``"machine"``, ``"system"`` and ``"cpu"``, because
        ``GGML_NATIVE`` compiles for the build host's CPU; and ``"env"``, the compiler
        variables CMake would pick up (``CC``, ``CXX``, ``CFLAGS``, ``CXXFLAGS``,
        ``LDFLAGS``) when set. On macOS also ``"sdk"``: ``developer_dir``
        (``$DEVELOPER_DIR``, else ``xcode-select -p``), the SDK's ``version`` and ``path``
        (``xcrun --show-sdk-version``, ``--show-sdk-path``) and ``deployment_target``
        (``$MACOSX_DEPLOYMENT_TARGET``), each None when unknown; nothing more is run
        elsewhere.
    """
    cxx = os.environ.get("CXX") or "c++"
    cc = os.environ.get("CC") or "cc"
    env = {k: os.environ[k] for k in ("CC", "CXX", "CFLAGS", "CXXFLAGS", "LDFLAGS")
           if os.environ.get(k)}
    return {"c++": _first_line([cxx, "--version"]), "cc": _first_line([cc, "--version"]),
            # The cmake a build runs (tools.find_cmake): PATH first, then the PyPI package.
            "cmake": _first_line([tools.find_cmake().path or "cmake", "--version"]),
            "machine": platform.machine(), "system": platform.system(), "cpu": _cpu_model(),
            "env": env, **_apple_sdk_identity()}


def _apple_sdk_identity() -> dict[str, Any]:
    """Describe the Xcode and SDK a macOS build compiles against: ``{"sdk": {...}}``, else {}.

    They change a binary's bytes without changing the compiler's version line: the SDK's
    headers and libraries, the deployment target CMake passes as ``-mmacosx-version-min``.
    An AddressSanitizer build also reaches its runtime
    (``libclang_rt.asan_osx_dynamic.dylib``) inside the selected Xcode by absolute path, so
    a cached ASan binary breaks when another Xcode is selected or the old one is removed:
    ``developer_dir`` in the key is what makes that a new build instead of a stale one.
    """
    if platform.system() != "Darwin":
        return {}
    return {"sdk": {
        "developer_dir": os.environ.get("DEVELOPER_DIR") or _first_line(["xcode-select", "-p"]),
        "version": _first_line(["xcrun", "--show-sdk-version"]),
        "path": _first_line(["xcrun", "--show-sdk-path"]),
        "deployment_target": os.environ.get("MACOSX_DEPLOYMENT_TARGET")}}


def _norm_value(name: str, value: Any) -> str:
    if isinstance(value, bool):
        return "ON" if value else "OFF"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str) and value and not any(c in value for c in "\n\r\0"):
        return value
    raise ParametersInvalid(f"CMake option {name}: value {value!r} must be a bool, int "
                            f"or one-line string")


def effective_options(variant: str, options: Mapping[str, Any] | None, *,
                      backend: str = DEFAULT_GGML_BACKEND) -> dict[str, str]:
    """Merge a variant's CMake options with the caller's.

    Parameters
    ----------
    variant : str
        One of :data:`VARIANTS`.
    options : mapping, optional
        Extra ``-D`` cache entries, e.g. ``{"GGML_NATIVE": "OFF"}``; bools become
        ``ON``/``OFF``.
    backend : str
        One of :data:`GGML_BACKENDS`: its :func:`backend_options` are forced.

    Returns
    -------
    dict of str to str
        Sorted options actually passed to CMake (defaults, then the caller's, then the
        fixed, backend and variant-forced ones).

    Raises
    ------
    verifylib.errors.ParametersInvalid
        For an unknown variant or backend, a malformed option, or an attempt to change a
        fixed, backend or variant-forced option (e.g. ``BUILD_SHARED_LIBS=ON``,
        ``WHISPER_COREML`` on a GGML variant, ``GGML_METAL=ON`` on a ``cpu`` build).
    """
    if variant not in VARIANTS:
        raise ParametersInvalid(f"variant must be one of {VARIANTS}, got {variant!r}")
    forced = forced_options(variant, backend)
    merged = dict(_DEFAULT_OPTIONS)
    for name, value in (options or {}).items():
        if not isinstance(name, str) or not _OPTION_NAME_RE.match(name):
            raise ParametersInvalid(f"malformed CMake option name {name!r}")
        val = _norm_value(name, value)
        if name in forced and forced[name] != val:
            raise ParametersInvalid(f"CMake option {name} is fixed to {forced[name]} for variant "
                                    f"{variant!r} on ggml backend {backend!r}, got {val}")
        merged[name] = val
    merged.update(forced)
    return dict(sorted(merged.items()))


def forced_options(variant: str, backend: str | None = None) -> dict[str, str]:
    """Return the CMake options no caller can change for ``variant`` (fixed, variant-forced).

    Parameters
    ----------
    variant : str
        One of :data:`VARIANTS`.
    backend : str, optional
        One of :data:`GGML_BACKENDS`: its pins are included. Without it, only what every
        build of the variant shares, also one recorded before the pins existed.

    Returns
    -------
    dict of str to str
        E.g. the sanitizer flags of an ``-asan`` variant; a rule re-checks a recorded
        build's options against these.

    Raises
    ------
    verifylib.errors.ParametersInvalid
        For an unknown variant or backend.
    """
    if variant not in VARIANTS:
        raise ParametersInvalid(f"variant must be one of {VARIANTS}, got {variant!r}")
    pins = {} if backend is None else backend_options(backend)
    return {**_FIXED_OPTIONS, **pins, **_VARIANT_OPTIONS[variant]}


def build_key(tree_id: str, patch_sha256: str | None, variant: str, options: Mapping[str, Any],
              compiler: Mapping[str, Any], ggml_key: str | None = None, *,
              launcher: str | None = None) -> str:
    """Content key of a build: SHA-256 of the canonical JSON of its inputs.

    Parameters
    ----------
    tree_id : str
        Git tree id of the pristine source (40 hex).
    patch_sha256 : str or None
        Digest of the applied patch; None exactly for the :data:`UNPATCHED_VARIANTS`.
    variant : str
        One of :data:`VARIANTS`.
    options : mapping
        CMake options (pass :func:`effective_options` output for a real build).
    compiler : mapping
        :func:`compiler_identity` output.
    ggml_key : str, optional
        :func:`ggml_key` of the shared ggml build the binary links, None when ggml is
        built in one piece with it.
    launcher : str, optional
        :data:`verifylib.whispercpp.compiler_cache.LAUNCHER` when the compiles go through
        the compiler cache: ccache hands the compiler normalized relative paths, which the
        debug information of the ``-g`` (AddressSanitizer) builds keeps, so it decides
        bytes. None (no launcher) leaves the key as it always was.

    Returns
    -------
    str
        64 hex digits.

    Raises
    ------
    verifylib.errors.ParametersInvalid
        For a malformed tree id or digest, an unknown variant, or a patch digest that
        does not fit the variant.
    """
    if not (isinstance(tree_id, str) and re.match(r"^[0-9a-f]{40}$", tree_id)):
        raise ParametersInvalid(f"tree id must be 40 lower-case hex digits, got {tree_id!r}")
    if variant not in VARIANTS:
        raise ParametersInvalid(f"variant must be one of {VARIANTS}, got {variant!r}")
    if variant in UNPATCHED_VARIANTS:
        if patch_sha256 is not None:
            raise ParametersInvalid(f"variant {variant!r} takes patch_sha256=None")
    elif not is_sha256(patch_sha256):
        raise ParametersInvalid(f"variant {variant!r} needs the applied patch's sha256, "
                                f"got {patch_sha256!r}")
    if ggml_key is not None and not is_sha256(ggml_key):
        raise ParametersInvalid(f"ggml key must be a sha256, got {ggml_key!r}")
    payload = {"schema": _KEY_SCHEMA, "target": "whisper-cli", "tree_id": tree_id,
               "patch_sha256": patch_sha256, "variant": variant, "options": dict(options),
               "compiler": dict(compiler), "ggml_key": ggml_key}
    if launcher is not None:
        payload["launcher"] = launcher
    return sha256_bytes(dumps(payload))


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
        :func:`build_key` of the build.
    cached : bool
        True if an existing, re-verified publication was reused.
    seconds : float
        Time spent in this call (about zero when cached).
    variant : str
        One of :data:`VARIANTS`.
    options : dict
        Effective CMake options.
    compiler : dict
        :func:`compiler_identity` at build time.
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
        :meth:`GgmlBuild.to_evidence` of the shared ggml it links, None when ggml was
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
        """The ggml backend the build's options pin (:func:`backend_of_options`), or None."""
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


def _cmake_steps(src: Path, bdir: Path, opts: Mapping[str, str], steps: list[tuple[str, list]],
                 label: str, *, timeout: float, log: Callable[[str], None],
                 configure_extra: Mapping[str, str] | None = None,
                 path_maps: Mapping[Path, str] | None = None,
                 ccache: CompilerCache | None = None) -> list[str]:
    """Configure ``src`` in a fresh ``bdir`` (outside the tree), then run further cmake steps.

    ``steps`` are ``(name, argv after the cmake program)``. Each step's output goes to
    ``bdir/verifylib-<step>.log``; a failing step raises :class:`BuildError` naming that
    log and ending with its last lines. While a step runs, a progress line (with cmake's
    ``[NN%]``) is printed every few seconds. ``configure_extra`` are ``-D`` entries that
    only locate things (the shared ggml prefix): passed, not keyed; so are the compiler
    launchers of ``ccache`` (:mod:`verifylib.whispercpp.compiler_cache`, its statistics
    log in ``bdir``). Returns the configure argv (recorded with the build).
    """
    shutil.rmtree(bdir, ignore_errors=True)
    bdir.mkdir(parents=True)
    # Keeps the build-info `git rev-parse` from climbing out of a tree that has no .git.
    env = {"GIT_CEILING_DIRECTORIES": str(src.parent)}
    # A source copy beside its build folder (_build_tree) is the only tree whose paths
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


def _cmake_target(src: Path, bdir: Path, opts: Mapping[str, str], target: str, label: str,
                  *, jobs: int, timeout: float, log: Callable[[str], None],
                  ggml: "GgmlBuild | None" = None,
                  ccache: CompilerCache | None = None) -> tuple[Path, list[str]]:
    """Configure ``src`` in a fresh ``bdir`` and build one target; with ``ggml``, against it.

    Returns the built binary and the configure argv (recorded with the build).
    """
    extra = None if ggml is None else ggml.configure_options()
    maps = None if ggml is None else {ggml.prefix: "/ggml"}
    configure = _cmake_steps(src, bdir, opts, [
        ("build", ["--build", str(bdir), "--target", target, "-j", str(jobs)])],
        label, timeout=timeout, log=log, configure_extra=extra, path_maps=maps,
        ccache=ccache)
    built = bdir / "bin" / target
    if not built.is_file():
        raise BuildError(f"build reported success but {built} does not exist")
    return built, configure


def _build_tree(src: Path, root: Path) -> tuple[Path, Path]:
    """Lay out a fresh ``root`` for one build: ``root/src``, a copy of ``src``, and ``root/build``.

    Every build tree has the same shape, so ccache sees the same relative paths in the
    compiles of two variants and can hand one the other's objects
    (:mod:`verifylib.whispercpp.compiler_cache`); the path maps keep ``root`` out of the
    binary. The copy leaves ``.git`` out (the build-info lookup stops at ``root``), and
    the source folder itself is only read.
    """
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    copy = root / "src"
    shutil.copytree(src, copy, symlinks=True, ignore=shutil.ignore_patterns(".git"))
    return copy, root / "build"


def _cache_use(bdir: Path, ccache: CompilerCache | None) -> CacheUse | None:
    # What the build's compiles got from ccache (None without one): for its record and log.
    if ccache is None:
        return None
    return compiler_cache.read_stats_log(bdir / compiler_cache.STATS_LOG)


def _cache_record(use: CacheUse | None) -> dict | None:
    return None if use is None else use.to_json()


def _cache_phrase(use: CacheUse | None) -> str:
    return "" if use is None else ", " + use.describe()


# ----------------------------------------------------------------------------- shared ggml

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
        One of :data:`VARIANTS`.
    options : mapping
        The variant's :func:`effective_options`.

    Returns
    -------
    dict of str to str
        Every option but whisper.cpp's own (``WHISPER_*``) and the variant's forced ones
        (the sanitizer flags, the Core ML switch): so every variant of one parameter set
        links the same ggml, and the sanitizers instrument libwhisper and the CLI only.
    """
    forced = _VARIANT_OPTIONS[variant]
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
        :func:`compiler_identity`.

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
    file was added or removed. Built under the key's lock, like :func:`build_whisper_cli`.

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
        :func:`compiler_identity`, when the caller already has it.

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
    final = cache_dir / "ggml" / key
    t0 = time.monotonic()
    reported: set[str] = set()

    def reuse() -> GgmlBuild | None:
        if not final.is_dir():
            return None
        problem, meta = _ggml_problem(final, key)
        if problem is not None:
            if problem not in reported:
                reported.add(problem)
                log(f"cached ggml at {final} not reusable ({problem}); rebuilding")
            return None
        got = GgmlBuild(final / "prefix", key, dict(meta["options"]), meta["source_digest"],
                        dict(meta["files"]), True, time.monotonic() - t0)
        log(f"ggml from cache: {final} ({len(got.libraries)} static libraries re-hashed)")
        return got

    def produce() -> GgmlBuild:
        bdir = cache_dir / "cmake" / f"ggml-{key}"
        root = cache_dir / "ggml"
        root.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".staging-{key[:12]}-", dir=root))
        try:
            prefix = staging / "prefix"
            _cmake_steps(src, bdir, {**opts, **_GGML_CONFIGURE_ONLY}, [
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
            shutil.rmtree(staging, ignore_errors=True)
        shutil.rmtree(bdir, ignore_errors=True)
        got = GgmlBuild(final / "prefix", key, opts, digest, files, False, seconds)
        log(f"built ggml in {seconds:.0f} s: {final} ({', '.join(sorted(got.libraries))})")
        return got

    return produce_once(cache_dir / LOCKS_DIR, "ggml", key, check=reuse, produce=produce,
                        what=f"ggml build {key[:12]}", log=log)


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
        Source folder (a patched work tree, or pristine for the :data:`UNPATCHED_VARIANTS`).
    tree_id : str
        Its pristine tree id (keys the cache; the caller has verified it).
    patch_sha256 : str or None
        Digest of the applied patch, None for the :data:`UNPATCHED_VARIANTS`.
    variant : str
        One of :data:`VARIANTS` (the ``-asan`` ones are AddressSanitizer builds).
    options : mapping, optional
        Extra CMake options (see :func:`effective_options`); default ``GGML_NATIVE=ON``.
    cache_dir : Path
        Cache root shared with :mod:`verifylib.whispercpp.source`.
    jobs : int
        Parallel compile jobs.
    log : callable
        Receives one-line progress messages.
    timeout : float
        Seconds allowed for each of configure and build.
    backend : str
        The ggml backend the build is pinned to (:func:`backend_options`), part of its key.

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
        For invalid arguments (see :func:`build_key`, :func:`effective_options`).
    """
    if not isinstance(jobs, int) or isinstance(jobs, bool) or jobs < 1:
        raise ParametersInvalid(f"jobs must be a positive integer, got {jobs!r}")
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
    builds = cache_dir / "builds"
    final = builds / key

    t0 = time.monotonic()
    reported: set[str] = set()

    def reuse() -> BuildResult | None:
        if not final.is_dir():
            return None
        problem = _cached_problem(final, key)
        if problem is not None:
            if problem not in reported:  # checked once before and once under the lock
                reported.add(problem)
                log(f"cached whisper-cli [{variant}] at {final} not reusable ({problem}); "
                    "rebuilding")
            return None
        result = _result_from_publication(final, key, True, time.monotonic() - t0)
        log(f"whisper-cli [{variant}] from cache: {result.binary} (sha256 {result.sha256})")
        return result

    def produce() -> BuildResult:
        if not (src / "CMakeLists.txt").is_file():
            raise BuildError(f"{src} has no CMakeLists.txt")
        # Keyed like the publication and only touched under its lock: two processes
        # never configure into one folder (one of them used to fail with cmake exit 2).
        root = cache_dir / "cmake" / key
        # The ggml is produced (or re-hashed) only when this binary must be built: a
        # cached binary already carries its ggml, named by the key and its build.json.
        ggml = (build_ggml(src, tree_id=tree_id, options=g_opts, cache_dir=cache_dir,
                           jobs=jobs, log=log, timeout=timeout, compiler=compiler)
                if shared else None)
        if ggml is not None and ggml.key != g_key:
            raise BuildError(f"the shared ggml's key {ggml.key} is not the expected {g_key}")
        tree, bdir = _build_tree(src, root)
        built, configure = _cmake_target(tree, bdir, opts, "whisper-cli",
                                         f"whisper-cli [{variant}]", jobs=jobs,
                                         timeout=timeout, log=log, ggml=ggml, ccache=ccache)
        seconds = time.monotonic() - t0
        cache_use = _cache_use(bdir, ccache)

        builds.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".staging-{key[:12]}-", dir=builds))
        try:
            binary = staging / "whisper-cli"
            shutil.copy2(built, binary)
            digest = sha256_file(binary)
            libs = needed_libs(binary)
            write_json(staging / "build.json", {
                "key": key, "variant": variant, "tree_id": tree_id,
                "patch_sha256": patch_sha256, "options": opts, "compiler": compiler,
                "sha256": digest, "seconds": round(seconds, 3), "needed_libs": list(libs),
                "static": not links_runtime_dynamically(libs), "configure_argv": configure,
                "jobs": jobs, "ggml": None if ggml is None else ggml.to_evidence(),
                "launcher": launcher,
                "compiler_cache": _cache_record(cache_use)})
            # Under the lock, ``final`` exists here only if it failed its check above, so
            # this replaces nothing another process could be using as a good build.
            publish_dir(staging, final)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        # A build folder is never built in twice (it is emptied before each build), so
        # only a failed build's folder is kept, for its logs.
        shutil.rmtree(root, ignore_errors=True)
        result = _result_from_publication(final, key, False, seconds)
        log(f"built whisper-cli [{variant}] in {seconds:.0f} s: {result.binary} "
            f"(sha256 {result.sha256}, {'static' if result.static else 'NOT static'}"
            f"{_cache_phrase(cache_use)})")
        return result

    return produce_once(cache_dir / LOCKS_DIR, "build", key, check=reuse, produce=produce,
                        what=f"whisper-cli [{variant}] build {key[:12]}", log=log)


# ----------------------------------------------------------------------------- system_info

def parse_system_info(text: str) -> tuple[str | None, int | None]:
    """Find whisper-cli's ``system_info:`` line and its ``COREML`` value.

    Parameters
    ----------
    text : str
        Captured output (stderr, or stderr and stdout together).

    Returns
    -------
    tuple
        The first line containing :data:`contracts.SYSTEM_INFO_PREFIX` (stripped) or None,
        and the integer after :data:`contracts.COREML_FLAG` on that line, or None.
    """
    for raw in text.splitlines():
        if contracts.SYSTEM_INFO_PREFIX in raw:
            line = raw.strip()
            m = re.search(re.escape(contracts.COREML_FLAG) + r"(\d+)", line)
            return line, (int(m.group(1)) if m else None)
    return None, None


@dataclass(frozen=True)
class SystemInfoProbe:
    """One whisper-cli run made to read its ``system_info`` line.

    Attributes
    ----------
    result : RunResult
        The complete run (exit, signal, both streams).
    system_info_line : str or None
        The ``system_info:`` line (stderr first, then stdout), or None.
    coreml : int or None
        Its ``COREML = <n>`` value, or None if absent.
    backend : str or None
        The ggml backends the launch logged choosing
        (:func:`verifylib.runtime.contracts.launch_backend` of both streams); None when
        not read.
    """

    result: RunResult
    system_info_line: str | None
    coreml: int | None
    backend: str | None = None

    def to_evidence(self) -> dict[str, Any]:
        """Return the run's record plus what the probe read, as a JSON-able dict.

        The record is :func:`verifylib.runtime.runner.run_record`'s, with its launch citation
        when the launch was recorded.

        Returns
        -------
        dict
            The run record with the probe's fields added (``backend`` only when read).
        """
        out = dict(run_record(self.result), system_info_line=self.system_info_line,
                   coreml=self.coreml)
        if self.backend is not None:
            out["backend"] = self.backend
        return out


def probe_system_info(binary: Path, model: Path, audio: Path,
                      timeout: float = 120.0) -> SystemInfoProbe:
    """Run a published whisper-cli briefly to read its ``system_info`` line.

    whisper-cli prints the line only after the model has loaded and the audio has been
    read, so a loadable model and real audio are needed (the tree's own
    ``models/for-tests-ggml-tiny.en.bin`` and ``samples/jfk.wav`` do). Runs greedy, on the
    first second, two threads; never with ``-np`` (it would hide the line) or ``-ac``.
    The run goes through :func:`verifylib.runtime.runner.run_whisper_cli`, so it is recorded in
    the bound launch ledger and :meth:`SystemInfoProbe.to_evidence` cites it.

    Like every gate run it keeps whisper-cli's defaults (``use_gpu`` true, no ``-ng``), so
    the backend it logs choosing is the one the binary's other launches get: a build
    without a GPU backend logs "no GPU found" and runs on the CPU, which is why ``-ng`` is
    not needed for ``cpu`` (``src/whisper.cpp``: ``whisper_backend_init_gpu`` only takes a
    device of GPU type, and with Metal compiled out the CPU device is the only one).

    Parameters
    ----------
    binary : Path
        The published binary, run from its final path.
    model : Path
        A ggml model file.
    audio : Path
        A 16 kHz WAV file.
    timeout : float
        Seconds before the run is killed.

    Returns
    -------
    SystemInfoProbe
        The run and what it said.
    """
    binary = Path(binary).resolve()
    argv = [str(binary), "-m", str(Path(model).resolve()), "-f", str(Path(audio).resolve()),
            "-bs", "1", "-bo", "1", "-d", "1000", "-t", "2"]
    res = run_whisper_cli(argv, cwd=binary.parent, timeout=timeout)
    line, coreml = parse_system_info(res.stderr_text)
    if line is None:
        line, coreml = parse_system_info(res.stdout_text)
    backend = contracts.launch_backend(res.stderr_text + "\n" + res.stdout_text)
    return SystemInfoProbe(result=res, system_info_line=line, coreml=coreml, backend=backend)


def build_evidence(build: BuildResult, probe: SystemInfoProbe) -> dict[str, Any]:
    """Assemble ``build.ggml`` (or ``build.coreml``) evidence.

    Parameters
    ----------
    build : BuildResult
        The published build.
    probe : SystemInfoProbe
        A probe of that binary.

    Returns
    -------
    dict
        ``{"built": True, "variant", "key", "binary", "sha256", "recorded_sha256",
        "static", "needed_libs", "options", "compiler", "cached", "seconds", "tree_id",
        "patch_sha256", "ggml", "ggml_backend", "probe": SystemInfoProbe.to_evidence()}``;
        ``ggml`` is the shared ggml's identity (:meth:`GgmlBuild.to_evidence`, None when
        built in one piece), ``ggml_backend`` the backend the options pin (left out when
        they pin none).
    """
    try:
        recorded = read_json(build.build_json).get("sha256")
    except (OSError, ValueError, AttributeError):
        recorded = None
    out = {"built": True, "variant": build.variant, "key": build.key, "binary": str(build.binary),
           "sha256": build.sha256, "recorded_sha256": recorded, "static": build.static,
           "needed_libs": list(build.needed_libs), "options": dict(build.options),
           "compiler": dict(build.compiler), "cached": build.cached,
           "seconds": round(build.seconds, 3), "tree_id": build.tree_id,
           "patch_sha256": build.patch_sha256}
    if build.ggml is not None:
        out["ggml"] = dict(build.ggml)
    if build.ggml_backend is not None:
        out["ggml_backend"] = build.ggml_backend
    out["probe"] = probe.to_evidence()
    return out


# ----------------------------------------------------------------------------- whisper-bench

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


def build_bench(src: Path, cli: BuildResult, *, cache_dir: Path, jobs: int = 2,
                log: Callable[[str], None] = print, timeout: float = 3600.0) -> BenchBuild:
    """Build (or reuse) ``whisper-bench`` from ``src`` with ``cli``'s exact CMake options.

    Configured in ``cache_dir/cmake/bench-<key>`` (outside the source tree), published
    through a staging folder to ``cache_dir/builds/bench-<key>/`` with a ``build.json``,
    reused only if its bytes still hash to the record; built under the key's lock
    (``cache_dir/locks/bench-<key>.lock``) like :func:`build_whisper_cli`.

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

    def reuse() -> BenchBuild | None:
        try:
            meta = read_json(final / "build.json")
            if meta.get("key") == key and \
                    sha256_file(final / "whisper-bench") == meta.get("sha256"):
                return BenchBuild(final / "whisper-bench", meta["sha256"], key, cli.key,
                                  dict(meta["options"]), True, time.monotonic() - t0)
        except (OSError, ValueError, AttributeError):
            pass
        return None

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
        tree, bdir = _build_tree(src, root)
        built, _ = _cmake_target(tree, bdir, opts, "whisper-bench",
                                 f"whisper-bench [{cli.variant}]", jobs=jobs, timeout=timeout,
                                 log=log, ggml=ggml, ccache=ccache)
        seconds = time.monotonic() - t0
        cache_use = _cache_use(bdir, ccache)
        final.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".staging-bench-{key[:12]}-", dir=final.parent))
        try:
            shutil.copy2(built, staging / "whisper-bench")
            digest = sha256_file(staging / "whisper-bench")
            write_json(staging / "build.json", {"key": key, "cli_key": cli.key, "options": opts,
                                                "sha256": digest, "seconds": round(seconds, 3),
                                                "compiler_cache": _cache_record(cache_use)})
            publish_dir(staging, final)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        shutil.rmtree(root, ignore_errors=True)
        log(f"built whisper-bench [{cli.variant}] in {seconds:.0f} s (sha256 {digest}"
            f"{_cache_phrase(cache_use)})")
        return BenchBuild(final / "whisper-bench", digest, key, cli.key, opts, False, seconds)

    return produce_once(cache_dir / LOCKS_DIR, "bench", key, check=reuse, produce=produce,
                        what=f"whisper-bench [{cli.variant}] build {key[:12]}", log=log)


def build_coreml_variant(src: Path, *, tree_id: str, patch_sha256: str, options: Mapping,
                         cache_dir: Path, jobs: int = 2,
                         log: Callable[[str], None] = print,
                         backend: str = DEFAULT_GGML_BACKEND) -> tuple[BuildResult, BenchBuild]:
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
        Extra CMake options (see :func:`effective_options`).
    cache_dir : Path
        Cache root shared with :mod:`verifylib.whispercpp.source`.
    jobs : int
        Parallel compile jobs.
    log : callable
        Receives one-line progress messages.
    backend : str
        The ggml backend both binaries are pinned to (:func:`backend_options`).

    Returns
    -------
    (BuildResult, BenchBuild)
        The published ``whisper-cli`` and the ``whisper-bench`` built with its options.
    """
    cli = build_whisper_cli(src, tree_id=tree_id, patch_sha256=patch_sha256,
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
