"""The CMake options of a whisper-cli build: its variants, its ggml backend, its content key.

What makes a published binary what the gates say it is (static linking, the Core ML switch
and its fallback, the sanitizer flags, the ggml backend) is forced here, so no caller's
option can contradict it, and enters :func:`build_key`: the SHA-256 of everything that
decides a build's bytes (docs/runtime-contract.md §3).
"""

from __future__ import annotations

import re
from typing import Any, Mapping

from verifylib.canonical import dumps, is_sha256, sha256_bytes
from verifylib.errors import ParametersInvalid
from verifylib.runtime import contracts
from verifylib.whispercpp import seam_sources

VARIANTS = ("ggml", "ggml-unpatched", "coreml", "ggml-asan", "ggml-unpatched-asan", "seam",
            "seam-unpatched", "seam-unpatched-asan")

UNPATCHED_VARIANTS = ("ggml-unpatched", "ggml-unpatched-asan", "seam-unpatched",
                      "seam-unpatched-asan")
"""Variants built from the pristine tree: keyed with ``patch_sha256=None``."""

SEAM_VARIANTS = ("seam", "seam-unpatched", "seam-unpatched-asan")
"""Builds of whisper.cpp's Core ML path against verifylib's seam (docs/runtime-contract.md
§9): ``src/whisper.cpp`` compiled with ``WHISPER_USE_COREML``, the three Core ML functions
from :mod:`verifylib.whispercpp.seam_sources`. Informational evidence only: never a
``build.coreml``."""

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
# The seam: attached by a CMake file inside the build's source copy (a path relative to the
# source folder, so the same everywhere), its sources named by digest in the key. Core ML
# itself stays OFF: its find_library of Apple's frameworks is fatal off macOS, and the
# seam is not Apple's runtime.
_SEAM_OPTIONS = {"WHISPER_COREML": "OFF", "WHISPER_COREML_ALLOW_FALLBACK": "OFF",
                 "CMAKE_PROJECT_INCLUDE": f"{seam_sources.SEAM_FOLDER}/{seam_sources.ATTACH_FILE}",
                 "VERIFYLIB_SEAM_SHA256": seam_sources.seam_digest()}
_VARIANT_OPTIONS.update({
    "seam": _SEAM_OPTIONS,
    "seam-unpatched": _SEAM_OPTIONS,
    "seam-unpatched-asan": {**_ASAN_OPTIONS, **_SEAM_OPTIONS},
})
_DEFAULT_OPTIONS = {"GGML_NATIVE": "ON"}
_OPTION_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# v3: the ggml backend pins below and, on macOS, the SDK facts of compiler_identity.
# v4: the key of the shared ggml build the binary links (None when built in one piece).
_KEY_SCHEMA = "verifylib-whisper-cli-build-v4"

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


def variant_options(variant: str) -> dict[str, str]:
    """Return the CMake options ``variant`` itself forces (the Core ML switch, sanitizer flags).

    Parameters
    ----------
    variant : str
        One of :data:`VARIANTS`.

    Returns
    -------
    dict of str to str
        What sets the variant apart; the fixed and backend options every build shares
        are not among them (see :func:`forced_options`).

    Raises
    ------
    KeyError
        For an unknown variant.
    """
    return dict(_VARIANT_OPTIONS[variant])


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
        :func:`verifylib.whispercpp.toolchain.compiler_identity` output.
    ggml_key : str, optional
        :func:`verifylib.whispercpp.shared_ggml.ggml_key` of the shared ggml build the
        binary links, None when ggml is
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
