"""The toolchain and host a whisper.cpp build would use, named for its content key.

A binary's bytes depend on more than its source and options: the compiler and cmake that
build it, the CPU ``GGML_NATIVE`` compiles for, the compiler variables CMake picks up and,
on macOS, the selected Xcode and SDK. :func:`compiler_identity` names them all, and every
build key (:func:`verifylib.whispercpp.build_options.build_key`,
:func:`verifylib.whispercpp.shared_ggml.ggml_key`) holds it.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path
from typing import Any

from verifylib.runtime import tools

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
